//! No head-of-line blocking (issue 18, item 2), with the real gate against the fake API server:
//! 200 Kustomizations whose sources point at an artifact URL on a closed local port fail on
//! every attempt and keep coming back through the queue's retries, while one healthy
//! Kustomization publishes a new revision and gets its webhook. With the default 2 workers its
//! run starts ahead of the failing backlog: the test asserts on the order in which runs start
//! and on the queue's state at that moment, never on wall-clock time (the time from webhook to
//! run start is measured by hack/queue-fairness.sh).

use test_support::flux_standin;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use fake_apiserver::FakeApiServer;
use flux_converger::flux::event::{Event, InvolvedObject};
use flux_converger::http::backend::Backend;
use flux_converger::model::Key;
use flux_converger::model::{GateMode, RevisionState, Trigger};
use flux_converger::service::leadership::LeaseSettings;
use flux_converger::service::queue::{BackoffPolicy, Lane, Queue, Waiting};
use flux_converger::service::{
    Config, GateOutcome, Runner, Running, Tuning, build_parts, start_with,
};
use futures::future::BoxFuture;
use serde_json::json;

use flux_standin::{ArtifactServer, GitSource, create_kustomization, kustomization};

const NS: &str = "flux-system";
const FAILING: usize = 200;
const HEALTHY: &str = "healthy";

/// What the observer saw, in order: a run starting (its key, its trigger, the queue's state
/// then), or a mark the test set.
#[derive(Clone, Debug)]
enum Seen {
    Run {
        key: String,
        trigger: Trigger,
        waiting: Waiting,
        /// The healthy Kustomization was waiting in the new lane when this run started:
        /// queued as new work (by its watch or its webhook) and not yet handed out.
        healthy_queued: bool,
    },
    Mark(&'static str),
}

/// Wraps the gate and notes each run as it starts, with the queue's state at that moment.
struct Observer {
    inner: Arc<dyn Runner>,
    seen: Arc<Mutex<Vec<Seen>>>,
    queue: Arc<OnceLock<Queue<Key>>>,
}

impl Runner for Observer {
    fn run<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        trigger: Trigger,
    ) -> BoxFuture<'a, GateOutcome> {
        let queue = self.queue.get();
        let waiting = queue.map(|q| q.waiting()).unwrap_or_default();
        let healthy_queued =
            queue.is_some_and(|q| q.lane(&Key::kustomization(NS, HEALTHY)) == Some(Lane::New));
        self.seen.lock().unwrap().push(Seen::Run {
            key: format!("{namespace}/{name}"),
            trigger,
            waiting,
            healthy_queued,
        });
        self.inner.run(namespace, name, trigger)
    }
}

fn config() -> Config {
    test_support::service::config(NS)
        .default_gate(GateMode::Reconcile)
        // Nothing plays kustomize-controller: the healthy revision's hand-off times out
        // quickly instead of holding a worker.
        .handoff_timeout(Duration::from_millis(200))
        .build()
}

/// Backoffs (and the failing Kustomizations' `retryInterval`) far shorter than a pass over
/// the backlog: every failing Kustomization is due
/// again long before the others have had their turn, so the retry lane never empties (the
/// worst case for a newcomer; with the default backoff the same holds after each resync).
fn tuning() -> Tuning {
    Tuning {
        lease: LeaseSettings::new(format!("test-{}", rand::random::<u32>())),
        backoff: BackoffPolicy {
            base: Duration::from_millis(20),
            max: Duration::from_millis(40),
            jitter: 0.0,
        },
        shutdown_grace: Duration::from_secs(30),
        restart_retry: Duration::from_secs(10),
    }
}

/// A port nothing listens on: bound, then closed.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn seed_failing(fake: &FakeApiServer, port: u16) {
    for i in 0..FAILING {
        let name = format!("failing-{i:03}");
        fake.seed(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"namespace": NS, "name": name},
            "spec": {"url": "https://git.example.com/failing.git", "interval": "1m"},
            "status": {"artifact": {
                "url": format!("http://127.0.0.1:{port}/gitrepository/{NS}/{name}/1.tar.gz"),
                "revision": "main@sha1:1111111111111111111111111111111111111111",
                "digest": format!("sha256:{}", "0".repeat(64)), "path": "x",
                "lastUpdateTime": "2026-01-01T00:00:00Z"}}
        }));
        // Its own retry schedule, as kustomize-controller's, is what a failure waits: short,
        // so every failing Kustomization is due again long before the backlog is through.
        let mut ks = kustomization(NS, &name, &name, "./", None, false);
        ks["spec"]["retryInterval"] = json!("20ms");
        fake.seed(ks);
    }
}

fn config_map(revision: u32) -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: default
data:
  revision: \"{revision}\"
"
    )
}

/// Polls (no wall-clock bound: a hang is a failure of the test runner's own timeout).
async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn newest(running: &Running, name: &str) -> Option<flux_converger::model::RevisionRecord> {
    running
        .backend
        .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, name)
        .and_then(|d| d.revisions.into_iter().next())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_revision_starts_ahead_of_a_failing_backlog() {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/storageclasses.yaml");
    let client = fake.client();
    seed_failing(&fake, closed_port());
    let source = GitSource::create(client.clone(), ArtifactServer::start().await, NS, HEALTHY)
        .await
        .unwrap();
    let r1 = source
        .publish("one", &[("apps/settings.yaml", config_map(1).as_str())])
        .await
        .unwrap();
    create_kustomization(
        &client,
        &kustomization(NS, HEALTHY, HEALTHY, "./apps", None, false),
    )
    .await
    .unwrap();

    let (config, tuning) = (config(), tuning());
    let (mut parts, storage_classes) = build_parts(&config, &client, &tuning).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let queue = Arc::new(OnceLock::new());
    parts.runner = Arc::new(Observer {
        inner: parts.runner.clone(),
        seen: seen.clone(),
        queue: queue.clone(),
    });
    let storage_classes = tokio::spawn(storage_classes);
    let running = start_with(config, client.clone(), tuning, parts)
        .await
        .unwrap();
    let _ = queue.set(running.backend.lane.queue().clone());

    // The first revision converges, and every failing Kustomization has failed twice at least:
    // one record each, counting its attempts.
    until(|| {
        newest(&running, HEALTHY)
            .is_some_and(|r| r.revision == r1.revision && r.state == RevisionState::Converged)
    })
    .await;
    until(|| {
        (0..FAILING).all(|i| {
            running
                .backend
                .detail(
                    flux_converger::model::Kind::KUSTOMIZATION,
                    NS,
                    &format!("failing-{i:03}"),
                )
                .is_some_and(|d| {
                    d.revisions.len() == 1
                        && d.revisions[0].state == RevisionState::Failed
                        && d.revisions[0].attempts >= 2
                })
        })
    })
    .await;
    let first = newest(&running, "failing-000").unwrap();
    let error = first
        .error
        .as_ref()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    assert!(error.contains("127.0.0.1"), "{error}");

    // A new revision, and its webhook.
    seen.lock().unwrap().push(Seen::Mark("publish"));
    let r2 = source
        .publish("two", &[("apps/settings.yaml", config_map(2).as_str())])
        .await
        .unwrap();
    let hook = Event {
        involved_object: InvolvedObject {
            kind: "GitRepository".into(),
            namespace: NS.into(),
            name: HEALTHY.into(),
            ..Default::default()
        },
        severity: "info".into(),
        message: format!("stored artifact for revision '{}'", r2.revision),
        reason: "NewArtifact".into(),
        ..Default::default()
    };
    assert_eq!(running.backend.hook(&hook), vec![format!("{NS}/{HEALTHY}")]);
    seen.lock().unwrap().push(Seen::Mark("hook"));
    until(|| newest(&running, HEALTHY).is_some_and(|r| r.revision == r2.revision)).await;

    let seen = seen.lock().unwrap().clone();
    let publish = seen
        .iter()
        .position(|s| matches!(s, Seen::Mark("publish")))
        .unwrap();
    let (offset, started) = seen[publish..]
        .iter()
        .enumerate()
        .find_map(|(i, s)| match s {
            Seen::Run {
                key,
                trigger,
                waiting,
                ..
            } if key.ends_with(HEALTHY) => Some((i, (*trigger, *waiting))),
            _ => None,
        })
        .expect("the healthy Kustomization ran after the publish");
    let (trigger, waiting) = started;
    assert!(
        matches!(trigger, Trigger::Webhook | Trigger::Watch),
        "queued as new work: {trigger:?}"
    );
    // While it waited as new work, only runs handed out before it was queued (one per worker
    // at most) started: none of the failing backlog went first. (Runs after the announcement
    // but before its watch event or webhook queued it say nothing about the queue's order:
    // on a loaded machine the watch may take a while to deliver it.)
    let end = publish + offset;
    let failing_first = seen[publish..end]
        .iter()
        .filter(|s| {
            matches!(
                s,
                Seen::Run {
                    healthy_queued: true,
                    ..
                }
            )
        })
        .count();
    assert!(
        failing_first <= 2,
        "{failing_first} failing runs started while the healthy revision waited as new work: {:?}",
        &seen[publish..end]
    );
    // And it was queued at the latest by its webhook (marked once `hook` returned).
    let hook = seen
        .iter()
        .position(|s| matches!(s, Seen::Mark("hook")))
        .unwrap();
    let after_hook = seen[hook.min(end)..end]
        .iter()
        .filter(|s| matches!(s, Seen::Run { .. }))
        .count();
    assert!(
        after_hook <= 2,
        "{after_hook} failing runs started after the webhook queued the healthy revision: {:?}",
        &seen[publish..end]
    );
    // And the backlog had not drained: most failing Kustomizations were still waiting to retry.
    assert!(
        waiting.retry + waiting.backing_off >= FAILING / 2,
        "the backlog when the healthy revision started: {waiting:?}"
    );

    running.shutdown().await;
    storage_classes.abort();
}
