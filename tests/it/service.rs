//! The service's runtime against the fake API server: the watches feed the index, what is due
//! reaches the runner (the gate's place) through the queue, the webhook routes through the
//! index, leadership gates the runs. The runner here is a stand-in that records its calls and
//! writes the record the gate would, so these tests pin the runtime alone; `tests/it/service.rs`
//! runs the real gate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_apiserver::FakeApiServer;
use flux_converger::flux::event::{Event, InvolvedObject};
use flux_converger::flux::render::KustomizeCommand;
use flux_converger::http::backend::Backend;
use flux_converger::http::{AppState, HookAuth, metrics_router, router};
use flux_converger::model::{GateMode, RevisionRecord, RevisionState, Trigger};
use flux_converger::records::metrics;
use flux_converger::records::results::Results;
use flux_converger::service::leadership::LeaseSettings;
use flux_converger::service::queue::BackoffPolicy;
use flux_converger::service::{
    Config, GateOutcome, Parts, Resume, Runner, Running, Tuning, start_with,
};
use futures::future::BoxFuture;
use serde_json::json;

const NS: &str = "flux-system";

struct NoResume;
impl Resume for NoResume {
    fn resume_all(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// Plays the gate: reads the Kustomization's source revision from the fake, records the run
/// and answers what the test scripted for that Kustomization (converged by default).
struct StandInRunner {
    fake: FakeApiServer,
    store: Results,
    calls: Mutex<Vec<(String, Trigger, String)>>,
    script: Mutex<HashMap<String, Vec<GateOutcome>>>,
    /// While held, runs wait (to make triggers arrive during a run).
    hold: tokio::sync::RwLock<()>,
}

impl StandInRunner {
    fn calls(&self) -> Vec<(String, Trigger, String)> {
        self.calls.lock().unwrap().clone()
    }
    fn script(&self, key: &str, outcomes: Vec<GateOutcome>) {
        self.script
            .lock()
            .unwrap()
            .insert(key.to_string(), outcomes);
    }
}

impl Runner for StandInRunner {
    fn run<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        trigger: Trigger,
    ) -> BoxFuture<'a, GateOutcome> {
        Box::pin(async move {
            let _held = self.hold.read().await;
            let key = format!("{namespace}/{name}");
            let ks = self
                .fake
                .get(
                    "kustomize.toolkit.fluxcd.io/v1",
                    "Kustomization",
                    Some(namespace),
                    name,
                )
                .expect("the Kustomization exists");
            let source = ks["spec"]["sourceRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let revision = self
                .fake
                .get(
                    "source.toolkit.fluxcd.io/v1",
                    "GitRepository",
                    Some(namespace),
                    &source,
                )
                .and_then(|s| {
                    s["status"]["artifact"]["revision"]
                        .as_str()
                        .map(String::from)
                })
                .unwrap_or_default();
            self.calls
                .lock()
                .unwrap()
                .push((key.clone(), trigger, revision.clone()));
            let outcome = {
                let mut script = self.script.lock().unwrap();
                match script.get_mut(&key) {
                    Some(list) if !list.is_empty() => list.remove(0),
                    _ => GateOutcome::Done(RevisionState::Converged),
                }
            };
            let state = match &outcome {
                GateOutcome::Done(state) => *state,
                GateOutcome::Failed { .. } => RevisionState::Failed,
                GateOutcome::Deferred => RevisionState::Converged,
                GateOutcome::NotHandled => return outcome,
            };
            self.store
                .put(namespace, name, record(&revision, state, trigger))
                .await
                .expect("results in memory");
            outcome
        })
    }
}

fn record(revision: &str, state: RevisionState, trigger: Trigger) -> RevisionRecord {
    RevisionRecord {
        volumes: Default::default(),
        revision: revision.to_string(),
        digest: None,
        trigger,
        started_at: jiff::Timestamp::now().to_string(),
        finished_at: Some(jiff::Timestamp::now().to_string()),
        state,
        statefulsets: Vec::new(),
        handoff: None,
        flux: None,
        warnings: Vec::new(),
        error: None,
        generation: None,
        gate: None,
        attempts: 1,
    }
}

fn config(default_gate: GateMode) -> Config {
    // These tests call the backend's hook directly, each about something else than who may
    // post or how often: the rate limit and authentication have tests of their own (the
    // test config's defaults).
    test_support::service::config(NS)
        .default_gate(default_gate)
        .handoff_timeout(Duration::from_secs(10))
        .kustomize(KustomizeCommand::parse("kubectl kustomize").unwrap())
        .build()
}

fn tuning() -> Tuning {
    Tuning {
        lease: LeaseSettings {
            duration: Duration::from_secs(2),
            grace: Duration::from_secs(1),
            ..LeaseSettings::new(format!("test-{}", rand::random::<u32>()))
        },
        backoff: BackoffPolicy {
            base: Duration::from_secs(3600),
            max: Duration::from_secs(3600),
            jitter: 0.0,
        },
        shutdown_grace: Duration::from_secs(30),
        restart_retry: Duration::from_secs(10),
    }
}

fn seed_ks(
    fake: &FakeApiServer,
    name: &str,
    gate: Option<&str>,
    source: &str,
    labels: serde_json::Value,
) {
    let mut annotations = json!({});
    if let Some(gate) = gate {
        annotations["flux-converger.io/gate"] = json!(gate);
    }
    fake.seed(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"namespace": NS, "name": name, "annotations": annotations, "labels": labels},
        "spec": {"sourceRef": {"kind": "GitRepository", "name": source}, "path": "./", "prune": true,
                 "interval": "10m"}
    }));
}

fn seed_git(fake: &FakeApiServer, name: &str, revision: &str) {
    fake.seed(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"namespace": NS, "name": name},
        "spec": {"url": "https://example.com/repo.git", "interval": "1m"},
        "status": {"artifact": {"url": format!("http://source-controller/{name}.tar.gz"),
                                "revision": revision, "digest": "sha256:00", "path": "x",
                                "lastUpdateTime": "2026-01-01T00:00:00Z"}}
    }));
}

fn set_revision(fake: &FakeApiServer, name: &str, revision: &str) {
    fake.modify(
        "source.toolkit.fluxcd.io/v1",
        "GitRepository",
        Some(NS),
        name,
        |obj| {
            obj["status"]["artifact"]["revision"] = json!(revision);
        },
    )
    .expect("the source exists");
}

struct Harness {
    fake: FakeApiServer,
    store: Results,
    runner: Arc<StandInRunner>,
}

impl Harness {
    fn new() -> Self {
        let fake = FakeApiServer::new();
        let store = Results::memory();
        let runner = Arc::new(StandInRunner {
            fake: fake.clone(),
            store: store.clone(),
            calls: Mutex::new(Vec::new()),
            script: Mutex::new(HashMap::new()),
            hold: tokio::sync::RwLock::new(()),
        });
        Harness {
            fake,
            store,
            runner,
        }
    }

    /// Starts the runtime with the real HTTP apps (authenticated as `config` says) around the
    /// stand-in runner.
    async fn start(&self, config: Config) -> Running {
        let (registry, metrics) = metrics::registry();
        let auth = HookAuth {
            hmac_key: config.hmac_key.clone(),
            token: config.hook_token.clone(),
        };
        let app_metrics = metrics.clone();
        let parts = Parts {
            runner: self.runner.clone(),
            queue: flux_converger::service::queue::Queue::new(
                tuning().backoff,
                metrics.queue_depth.clone(),
            ),
            results: self.store.clone(),
            resume: Arc::new(NoResume),
            app: Box::new(move |backend| {
                router(AppState {
                    backend,
                    metrics: app_metrics,
                    auth,
                })
            }),
            metrics_app: metrics_router(Arc::new(registry)),
            metrics,
            fence: Default::default(),
            storage: None,
            kinds: Vec::new(),
            volumes: None,
        };
        start_with(config, self.fake.client(), tuning(), parts)
            .await
            .expect("the service starts")
    }
}

/// Polls (no wall-clock bound: a hang is a failure of the test runner's own timeout).
async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until every key queued so far has been handed out and completed.
async fn settled(running: &Running) {
    until(|| {
        running.backend.lane.queue().depth() == 0 && running.backend.lane.queue().running() == 0
    })
    .await;
}

async fn ready(running: &Running) {
    until(|| running.backend.ready().is_ok()).await;
}

fn event(kind: &str, name: &str, message: &str) -> Event {
    Event {
        involved_object: InvolvedObject {
            kind: kind.to_string(),
            namespace: NS.to_string(),
            name: name.to_string(),
            ..Default::default()
        },
        severity: "info".into(),
        message: message.to_string(),
        reason: "ReconciliationFailed".into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_runs_what_is_due_and_only_that() {
    let h = Harness::new();
    seed_git(&h.fake, "repo", "main@sha1:1");
    seed_ks(&h.fake, "suspended", Some("suspend"), "repo", json!({}));
    seed_ks(&h.fake, "defaulted", None, "repo", json!({}));
    seed_ks(&h.fake, "opted-out", Some("off"), "repo", json!({}));
    seed_ks(&h.fake, "finished", Some("reconcile"), "repo", json!({}));
    h.store
        .put(
            NS,
            "finished",
            record("main@sha1:1", RevisionState::Converged, Trigger::Webhook),
        )
        .await
        .unwrap();

    let running = h.start(config(GateMode::Reconcile)).await;
    ready(&running).await;
    until(|| h.runner.calls().len() >= 2).await;
    settled(&running).await;
    let mut calls = h.runner.calls();
    calls.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        calls,
        vec![
            (
                "flux-system/defaulted".into(),
                Trigger::Startup,
                "main@sha1:1".into()
            ),
            (
                "flux-system/suspended".into(),
                Trigger::Startup,
                "main@sha1:1".into()
            ),
        ]
    );
    // `/status` lists the handled ones, with the gate in force and the source's revision.
    let listed: Vec<(String, GateMode)> = running
        .backend
        .rows(flux_converger::model::Kind::KUSTOMIZATION, None)
        .into_iter()
        .map(|s| (s.name, s.gate))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("defaulted".into(), GateMode::Reconcile),
            ("finished".into(), GateMode::Reconcile),
            ("suspended".into(), GateMode::Suspend),
        ]
    );
    assert!(
        running
            .backend
            .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "opted-out")
            .is_none()
    );
    let detail = running
        .backend
        .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "finished")
        .expect("handled");
    assert_eq!(detail.source_revision.as_deref(), Some("main@sha1:1"));
    assert_eq!(detail.revisions.len(), 1);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_source_revision_reaches_every_handled_reader_without_a_webhook() {
    let h = Harness::new();
    seed_git(&h.fake, "repo", "main@sha1:1");
    seed_git(&h.fake, "other", "main@sha1:9");
    seed_ks(&h.fake, "a", Some("suspend"), "repo", json!({}));
    seed_ks(&h.fake, "b", Some("reconcile"), "repo", json!({}));
    seed_ks(&h.fake, "c", Some("reconcile"), "other", json!({}));
    seed_ks(&h.fake, "off", None, "repo", json!({}));
    let running = h.start(config(GateMode::Off)).await;
    ready(&running).await;
    until(|| h.runner.calls().len() >= 3).await;
    settled(&running).await;

    // The webhook for the new artifact is lost; the watch on the source still sees it.
    set_revision(&h.fake, "repo", "main@sha1:2");
    until(|| h.runner.calls().len() >= 5).await;
    settled(&running).await;
    let mut later: Vec<_> = h.runner.calls()[3..].to_vec();
    later.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        later,
        vec![
            ("flux-system/a".into(), Trigger::Watch, "main@sha1:2".into()),
            ("flux-system/b".into(), Trigger::Watch, "main@sha1:2".into()),
        ]
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_resync_rechecks_deferred_claims_and_nothing_else() {
    let h = Harness::new();
    seed_git(&h.fake, "repo", "main@sha1:1");
    seed_ks(&h.fake, "deferred", Some("suspend"), "repo", json!({}));
    seed_ks(&h.fake, "done", Some("suspend"), "repo", json!({}));
    h.runner
        .script("flux-system/deferred", vec![GateOutcome::Deferred]);
    // A converged record with a deferred claim is what the gate writes for claims not Bound.
    let mut cfg = config(GateMode::Off);
    cfg.resync = Duration::from_millis(200);
    let running = h.start(cfg).await;
    ready(&running).await;
    until(|| h.runner.calls().len() >= 2).await;
    settled(&running).await;
    // The stand-in's record of a deferred run carries no deferred claim, so mark it as the
    // gate would; the next resync re-checks it.
    h.store
        .put(NS, "deferred", {
            let mut r = record("main@sha1:1", RevisionState::Converged, Trigger::Startup);
            r.statefulsets.push(
                serde_json::from_value(json!({
                    "namespace": "apps", "name": "web", "outcome": "deferred",
                    "deferred": [{"claim": "data-web-4", "reason": "Pending"}]
                }))
                .unwrap(),
            );
            r
        })
        .await
        .unwrap();
    h.fake.clear_requests();
    until(|| {
        h.runner
            .calls()
            .iter()
            .filter(|c| c.0 == "flux-system/deferred")
            .count()
            >= 2
    })
    .await;
    let rechecks: Vec<_> = h.runner.calls().into_iter().skip(2).collect();
    assert!(
        rechecks
            .iter()
            .all(|c| c.0 == "flux-system/deferred" && c.1 == Trigger::Resync),
        "{rechecks:?}"
    );
    // A resync reads memory only: besides the watches, no request reached the API server.
    let other: Vec<_> = h.fake.requests().into_iter().filter(|r| !r.watch).collect();
    assert!(
        other.is_empty(),
        "resync made requests: {:?}",
        other.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_routes_and_two_events_during_a_run_coalesce() {
    let h = Harness::new();
    seed_git(&h.fake, "repo", "main@sha1:1");
    seed_ks(&h.fake, "a", Some("suspend"), "repo", json!({}));
    seed_ks(&h.fake, "b", Some("off"), "repo", json!({}));
    let running = h.start(config(GateMode::Off)).await;
    ready(&running).await;
    until(|| h.runner.calls().len() == 1).await;
    settled(&running).await;

    // Hold the runner, move the revision, and let two events arrive while it runs.
    let held = h.runner.hold.write().await;
    set_revision(&h.fake, "repo", "main@sha1:2");
    until(|| running.backend.lane.queue().running() == 1).await;
    let queued = running
        .backend
        .hook(&event("GitRepository", "repo", "stored artifact"));
    assert_eq!(queued, vec!["flux-system/a".to_string()]);
    let queued = running
        .backend
        .hook(&event("Kustomization", "a", "Reconciliation finished"));
    assert_eq!(queued, vec!["flux-system/a".to_string()]);
    assert_eq!(
        running.backend.lane.queue().depth(),
        1,
        "both events wait as one follow-up"
    );
    assert!(
        running
            .backend
            .hook(&event("Kustomization", "b", ""))
            .is_empty()
    );
    assert!(
        running
            .backend
            .hook(&event("GitRepository", "nobody-reads", ""))
            .is_empty()
    );
    drop(held);
    settled(&running).await;
    // The follow-up found revision 2 already finished and did not run again.
    let calls = h.runner.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[1].2, "main@sha1:2");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_revision_is_not_retried_until_the_revision_or_spec_changes() {
    let h = Harness::new();
    seed_git(&h.fake, "repo", "main@sha1:1");
    seed_ks(&h.fake, "a", Some("suspend"), "repo", json!({}));
    h.runner.script(
        "flux-system/a",
        vec![GateOutcome::Done(RevisionState::Refused)],
    );
    let mut cfg = config(GateMode::Off);
    cfg.resync = Duration::from_millis(100);
    let running = h.start(cfg).await;
    ready(&running).await;
    until(|| h.runner.calls().len() == 1).await;
    settled(&running).await;
    // Flux reports the wedge for the refused revision: routed, but not run again.
    let wedge = "StatefulSet/apps/web dry-run failed (Invalid): StatefulSet.apps \"web\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals' are forbidden";
    assert_eq!(
        running.backend.hook(&event("Kustomization", "a", wedge)),
        vec!["flux-system/a".to_string()]
    );
    settled(&running).await;
    // Several resyncs pass (the resync stamps its metric; wait on the queue instead of time).
    for _ in 0..3 {
        running
            .backend
            .hook(&event("GitRepository", "repo", "same revision"));
        settled(&running).await;
    }
    assert_eq!(h.runner.calls().len(), 1);

    // Suspending (the gate's own toggle) is not a change; a new spec field is.
    h.fake
        .modify(
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some(NS),
            "a",
            |ks| {
                ks["spec"]["suspend"] = json!(true);
            },
        )
        .unwrap();
    running.backend.hook(&event("Kustomization", "a", wedge));
    settled(&running).await;
    assert_eq!(h.runner.calls().len(), 1);
    h.fake
        .modify(
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some(NS),
            "a",
            |ks| {
                ks["spec"]["namePrefix"] = json!("v2-");
            },
        )
        .unwrap();
    until(|| h.runner.calls().len() == 2).await;
    settled(&running).await;
    set_revision(&h.fake, "repo", "main@sha1:2");
    until(|| h.runner.calls().len() == 3).await;
    assert_eq!(h.runner.calls()[2].2, "main@sha1:2");
    running.shutdown().await;
}

/// A failure waits out its backoff in the retry lane: a resync does not cut it short, but a
/// webhook (any admitted hook, not only Flux's wedge event) runs it now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_is_retried_after_backoff_and_a_webhook_runs_it_now() {
    let h = Harness::new();
    seed_git(&h.fake, "repo", "main@sha1:1");
    seed_ks(&h.fake, "a", Some("reconcile"), "repo", json!({}));
    h.runner.script(
        "flux-system/a",
        vec![GateOutcome::Failed {
            message: "the API server timed out".into(),
        }],
    );
    let running = h.start(config(GateMode::Off)).await;
    ready(&running).await;
    until(|| h.runner.calls().len() == 1).await;
    until(|| running.backend.lane.queue().failures(&key("a")) == 1).await;
    // The retry waits an hour (this test's backoff); what the resync queues does not cut it.
    running.backend.lane.queue().push(key("a"), Trigger::Resync);
    assert_eq!(running.backend.lane.queue().waiting().backing_off, 1);
    assert_eq!(h.runner.calls().len(), 1);
    // An ordinary webhook (the source stored an artifact) does.
    running
        .backend
        .hook(&event("GitRepository", "repo", "stored artifact"));
    until(|| h.runner.calls().len() == 2).await;
    settled(&running).await;
    assert_eq!(h.runner.calls()[1].1, Trigger::Webhook);
    assert_eq!(running.backend.lane.queue().failures(&key("a")), 0);
    running.shutdown().await;
}

/// A burst of signed wedge events naming one failing Kustomization: each would cancel the
/// failure's backoff and start a run, so a forged or replayed event could start a retry storm.
/// With `--hook-min-interval` 1h exactly one of the 50 starts a run, every one is answered the
/// same 202, and the watch is not limited: a new source revision still runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_signed_hooks_starts_one_run_per_interval() {
    let h = Harness::new();
    seed_git(&h.fake, "repo", "main@sha1:1");
    seed_ks(&h.fake, "a", Some("reconcile"), "repo", json!({}));
    let failed = || GateOutcome::Failed {
        message: "the API server timed out".into(),
    };
    h.runner
        .script("flux-system/a", (0..60).map(|_| failed()).collect());
    let mut cfg = config(GateMode::Off);
    cfg.hmac_key = Some(HMAC_KEY.to_vec());
    cfg.allow_unauthenticated_hooks = false;
    cfg.hook_min_interval = Duration::from_secs(3600);
    let running = h.start(cfg).await;
    ready(&running).await;
    // The startup run fails; its retry waits an hour (this test's backoff).
    until(|| running.backend.lane.queue().failures(&key("a")) == 1).await;
    assert_eq!(h.runner.calls().len(), 1);

    let wedge = event(
        "Kustomization",
        "a",
        "dry-run failed, reason: Invalid, error: StatefulSet.apps \"web\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas'",
    );
    let url = format!("http://{}/hook", running.addr);
    for i in 0..50 {
        let delivery = post_event(&url, HMAC_KEY, &wedge).await.unwrap();
        assert_eq!(delivery.status, 202, "hook {i}: {}", delivery.body);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&delivery.body).unwrap(),
            json!({"queued": ["flux-system/a"]}),
            "hook {i}: the same answer inside the interval or not"
        );
        // Quiet again before the next: an admitted wedge event clears the backoff at once
        // (failures 0), and only its failed run sets it again.
        until(|| {
            running.backend.lane.queue().running() == 0
                && running.backend.lane.queue().failures(&key("a")) == 1
        })
        .await;
    }
    let calls = h.runner.calls();
    assert_eq!(
        calls.len(),
        2,
        "startup, then one hook-triggered run: {calls:?}"
    );
    assert_eq!(calls[1].1, Trigger::Webhook);

    set_revision(&h.fake, "repo", "main@sha1:2");
    until(|| h.runner.calls().len() == 3).await;
    assert_eq!(h.runner.calls()[2].2, "main@sha1:2");
    running.shutdown().await;
}

fn key(name: &str) -> flux_converger::model::Key {
    flux_converger::model::Key::kustomization(NS, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharding_by_label_selector_hides_other_shards_from_watch_and_webhook() {
    let h = Harness::new();
    seed_git(&h.fake, "repo", "main@sha1:1");
    seed_ks(
        &h.fake,
        "mine",
        Some("suspend"),
        "repo",
        json!({"sharding.fluxcd.io/key": "shard1"}),
    );
    seed_ks(
        &h.fake,
        "theirs",
        Some("suspend"),
        "repo",
        json!({"sharding.fluxcd.io/key": "shard2"}),
    );
    let mut cfg = config(GateMode::Off);
    cfg.watch_label_selector = Some("sharding.fluxcd.io/key in (shard1)".into());
    let running = h.start(cfg).await;
    ready(&running).await;
    until(|| !h.runner.calls().is_empty()).await;
    settled(&running).await;
    assert_eq!(h.runner.calls().len(), 1);
    assert_eq!(h.runner.calls()[0].0, "flux-system/mine");
    assert!(
        running
            .backend
            .hook(&event("Kustomization", "theirs", ""))
            .is_empty()
    );
    assert_eq!(
        running.backend.hook(&event("GitRepository", "repo", "")),
        vec!["flux-system/mine".to_string()]
    );
    // The selector went to the server.
    assert!(
        h.fake
            .requests()
            .iter()
            .any(|r| r.path.contains("kustomizations")
                && r.query.contains("labelSelector=sharding.fluxcd.io"))
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_although_a_source_crd_is_missing() {
    let h = Harness::new();
    // ExternalArtifact's CRD missing (Flux before 2.7) must not keep the service unready:
    // every list of that kind answers 404, as a server without the CRD does.
    for nth in 0..20 {
        h.fake.add_fault(fake_apiserver::FaultRule {
            method: Some(fake_apiserver::Method::GET),
            path_contains: "/externalartifacts".into(),
            nth,
            action: fake_apiserver::Fault::Status {
                code: 404,
                reason: "NotFound".into(),
                message: "the server could not find the requested resource".into(),
            },
        });
    }
    let running = h.start(config(GateMode::Off)).await;
    ready(&running).await;
    assert_eq!(running.backend.ready(), Ok(()));
    let tries = h
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.contains("/externalartifacts"))
        .count();
    assert!(
        tries < 20,
        "ready only after the CRD answered: {tries} tries"
    );
    running.shutdown().await;
}

/// A cluster without Flux (Argo CD alone): every list of Flux's kinds answers 404, as a server
/// without their CRDs does. The service becomes ready all the same (the other kinds' service
/// must not wait for a CRD that may never come), and keeps watching for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_although_flux_is_not_installed() {
    let h = Harness::new();
    for resource in [
        "/kustomizations",
        "/gitrepositories",
        "/ocirepositories",
        "/buckets",
        "/externalartifacts",
    ] {
        for nth in 0..200 {
            h.fake.add_fault(fake_apiserver::FaultRule {
                method: Some(fake_apiserver::Method::GET),
                path_contains: resource.into(),
                nth,
                action: fake_apiserver::Fault::Status {
                    code: 404,
                    reason: "NotFound".into(),
                    message: "the server could not find the requested resource".into(),
                },
            });
        }
    }
    let running = h.start(config(GateMode::Off)).await;
    ready(&running).await;
    assert_eq!(running.backend.ready(), Ok(()));
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_leader_and_the_other_takes_over() {
    let h = Harness::new();
    seed_git(&h.fake, "repo", "main@sha1:1");
    seed_ks(&h.fake, "a", Some("suspend"), "repo", json!({}));
    let mut cfg = config(GateMode::Off);
    cfg.leader_elect = true;
    let first = h.start(cfg.clone()).await;
    until(|| first.is_leading()).await;
    until(|| h.runner.calls().len() == 1).await;
    settled(&first).await;

    // The second replica (its own runner) serves status but converges nothing.
    let second_runner = Arc::new(StandInRunner {
        fake: h.fake.clone(),
        store: h.store.clone(),
        calls: Mutex::new(Vec::new()),
        script: Mutex::new(HashMap::new()),
        hold: tokio::sync::RwLock::new(()),
    });
    let (_, metrics) = metrics::registry();
    let second = start_with(
        cfg.clone(),
        h.fake.client(),
        tuning(),
        Parts {
            runner: second_runner.clone(),
            queue: flux_converger::service::queue::Queue::new(
                tuning().backoff,
                metrics.queue_depth.clone(),
            ),
            results: h.store.clone(),
            resume: Arc::new(NoResume),
            app: Box::new(|_backend| axum::Router::new()),
            metrics_app: axum::Router::new(),
            metrics,
            fence: Default::default(),
            storage: None,
            kinds: Vec::new(),
            volumes: None,
        },
    )
    .await
    .expect("the second replica starts");
    ready(&second).await;
    assert!(!second.is_leading());
    assert_eq!(
        second
            .backend
            .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "a")
            .map(|d| d.revisions.len()),
        Some(1)
    );
    // A webhook reaching the follower is queued there but not run.
    assert_eq!(
        second.backend.hook(&event("Kustomization", "a", "")),
        vec!["flux-system/a".to_string()]
    );
    set_revision(&h.fake, "repo", "main@sha1:2");
    until(|| h.runner.calls().len() == 2).await;
    assert!(second_runner.calls().is_empty());
    let lease = h
        .fake
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some(NS),
            "flux-converger",
        )
        .expect("the Lease exists");
    assert!(lease["spec"]["holderIdentity"].is_string());

    // The leader stops (and releases the Lease); the follower takes over and converges
    // what became due meanwhile.
    first.shutdown().await;
    set_revision(&h.fake, "repo", "main@sha1:3");
    until(|| second.is_leading()).await;
    until(|| !second_runner.calls().is_empty()).await;
    assert_eq!(second_runner.calls()[0].2, "main@sha1:3");
    second.shutdown().await;
}

// ------------------------------------------------------------------ end to end, real gate

use test_support::flux_standin;
use test_support::rbac_check;

use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::render::resolve::Resolver;
use flux_converger::service::start_tuned;
use flux_standin::{
    ArtifactServer, GitSource, KustomizeController, KustomizeOptions, create_kustomization,
    kustomization, post_event,
};

const HMAC_KEY: &[u8] = b"webhook-key\n";

/// Flux's part: a GitRepository publishing `web` at 1Gi, a Kustomization with the gate
/// annotation, kustomize-controller applying it, the claims Bound.
struct Flux {
    fake: FakeApiServer,
    source: GitSource,
    kc: KustomizeController,
}

async fn flux(gate: &str, service_account: Option<&str>) -> Flux {
    flux_in(FakeApiServer::new(), gate, service_account, false).await
}

/// [`flux`] with the shipped RBAC installed first: the service (every plain request) runs under
/// its ClusterRole/Role alone, Flux's stand-ins as their own identity.
async fn flux_under_shipped_rbac(gate: &str) -> Flux {
    let fake = FakeApiServer::new();
    rbac_check::install(&fake);
    flux_in(fake, gate, None, true).await
}

async fn flux_in(
    fake: FakeApiServer,
    gate: &str,
    service_account: Option<&str>,
    shipped_rbac: bool,
) -> Flux {
    flux_converger::tls::install_crypto_provider();
    fake.seed_fixture("v1.28/storageclasses.yaml");
    fake.enable_statefulset_controller();
    let client = if shipped_rbac {
        rbac_check::flux_client(&fake)
    } else {
        fake.client()
    };
    let server = ArtifactServer::start().await;
    let source = GitSource::create(client.clone(), server, NS, "repo")
        .await
        .unwrap();
    let one = flux_standin::web_statefulset("1Gi");
    let r1 = source
        .publish("web at 1Gi", &[("apps/web.yaml", one.as_str())])
        .await
        .unwrap();
    let mut ks = kustomization(NS, "apps", "repo", "./apps", Some(gate), false);
    if let Some(sa) = service_account {
        ks["spec"]["serviceAccountName"] = json!(sa);
    }
    create_kustomization(&client, &ks).await.unwrap();
    let kc = KustomizeController::start(
        client.clone(),
        KustomizeOptions {
            resolver: resolver(client.clone()),
            namespace: Some(NS.into()),
            retry_interval: Duration::from_millis(300),
        },
    );
    until(|| applied(&fake) == Some(r1.revision.clone())).await;
    for claim in ["data-web-0", "data-web-1"] {
        until(|| {
            fake.get("v1", "PersistentVolumeClaim", Some("default"), claim)
                .is_some()
        })
        .await;
        fake.set_pvc_phase("default", claim, "Bound");
    }
    Flux { fake, source, kc }
}

fn resolver(client: kube::Client) -> Resolver {
    Resolver {
        client,
        fetcher: Fetcher::new(FetchOptions::default()).unwrap(),
        kustomize: KustomizeCommand::default(),
        strict: true,
        allow_cross_namespace: true,
    }
}

/// Waits until the suspend gate has suspended the Kustomization again after a hand-off.
async fn resuspended(fake: &FakeApiServer) {
    until(|| {
        fake.get(
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some(NS),
            "apps",
        )
        .is_some_and(|k| k["spec"]["suspend"] == json!(true))
    })
    .await;
}

fn applied(fake: &FakeApiServer) -> Option<String> {
    fake.get(
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some(NS),
        "apps",
    )
    .and_then(|k| {
        k["status"]["lastAppliedRevision"]
            .as_str()
            .map(String::from)
    })
}

fn e2e_config() -> Config {
    let mut config = config(GateMode::Off);
    config.hmac_key = Some(HMAC_KEY.to_vec());
    config.handoff_timeout = Duration::from_secs(60);
    config.kustomize = KustomizeCommand::default();
    config
}

async fn serve(fake: &FakeApiServer) -> Running {
    start_tuned(e2e_config(), fake.client(), tuning())
        .await
        .expect("the service starts")
}

/// The newest record of `revision`, once it is final.
async fn finished(running: &Running, revision: &str) -> RevisionRecord {
    loop {
        if let Some(detail) = running.backend.detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "apps")
            && let Some(r) = detail.revisions.iter().find(|r| r.revision == revision)
            && r.state != RevisionState::Running
            // Converged: once the observer recorded Flux's answer (the gate closed).
            && (r.state != RevisionState::Converged
                || r.flux.as_ref().is_some_and(|f| {
                    f.outcome != flux_converger::model::FluxOutcome::Pending
                }))
        {
            return r.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn uid(fake: &FakeApiServer, api_version: &str, kind: &str, ns: &str, name: &str) -> String {
    fake.get(api_version, kind, Some(ns), name)
        .and_then(|o| o["metadata"]["uid"].as_str().map(String::from))
        .unwrap_or_default()
}

fn claim_request(fake: &FakeApiServer, claim: &str) -> String {
    fake.get("v1", "PersistentVolumeClaim", Some("default"), claim)
        .and_then(|c| {
            c["spec"]["resources"]["requests"]["storage"]
                .as_str()
                .map(String::from)
        })
        .unwrap_or_default()
}

/// Publishes `web` at 2Gi and announces it with a signed webhook; returns the revision.
async fn grow_to_2gi(flux: &Flux, running: &Running) -> String {
    let two = flux_standin::web_statefulset("2Gi");
    let r2 = flux
        .source
        .publish("web at 2Gi", &[("apps/web.yaml", two.as_str())])
        .await
        .unwrap();
    let event = flux.source.new_artifact_event(&r2).await.unwrap();
    let delivery = post_event(&format!("http://{}/hook", running.addr), HMAC_KEY, &event)
        .await
        .unwrap();
    assert_eq!(delivery.status, 202, "{}", delivery.body);
    let body: serde_json::Value = serde_json::from_str(&delivery.body).unwrap();
    assert_eq!(body["queued"], json!(["flux-system/apps"]));
    r2.revision
}

/// Every task the service starts is owned: after `shutdown` the runtime has no more tasks
/// alive than before `start` (the fake and Flux's stand-ins were started before). Counted
/// with tokio's own metric; the client's pooled connections close once it is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_shutdown_leaves_no_task_of_the_service_alive() {
    let flux = flux("suspend", None).await;
    let fake = &flux.fake;
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let running = serve(fake).await;
    let r1 = flux.source.history()[0].revision.clone();
    assert_eq!(
        finished(&running, &r1).await.state,
        RevisionState::Converged
    );
    resuspended(fake).await;
    let during = metrics.num_alive_tasks();
    assert!(
        during > before,
        "the service runs tasks: {during} <= {before}"
    );
    running.shutdown().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while metrics.num_alive_tasks() > before && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        metrics.num_alive_tasks() <= before,
        "tasks alive after shutdown: {} (before start: {before})",
        metrics.num_alive_tasks()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_suspend_gate_converges_then_hands_off_and_resuspends() {
    let flux = flux_under_shipped_rbac("suspend").await;
    let fake = &flux.fake;
    let running = serve(fake).await;
    let r1 = flux.source.history()[0].revision.clone();
    let first = finished(&running, &r1).await;
    assert_eq!(first.state, RevisionState::Converged, "{first:?}");
    assert_eq!(first.trigger, Trigger::Startup);
    resuspended(fake).await;
    let pods = (
        uid(fake, "v1", "Pod", "default", "web-0"),
        uid(fake, "v1", "Pod", "default", "web-1"),
    );
    let sts_before = uid(fake, "apps/v1", "StatefulSet", "default", "web");

    let r2 = grow_to_2gi(&flux, &running).await;
    let second = finished(&running, &r2).await;
    assert_eq!(second.state, RevisionState::Converged, "{second:#?}");
    // The source watch and the webhook race; either may queue it (one run either way).
    assert!(matches!(second.trigger, Trigger::Webhook | Trigger::Watch));
    let handoff = second.handoff.as_ref().expect("handed off");
    assert_eq!(handoff.mode, GateMode::Suspend);
    assert_eq!(
        applied(fake).as_deref(),
        Some(r2.as_str()),
        "Flux applied the converged revision"
    );
    until(|| {
        fake.get(
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some(NS),
            "apps",
        )
        .is_some_and(|k| k["spec"]["suspend"] == json!(true))
    })
    .await;
    // Claims grown in place, the StatefulSet re-created, the pods untouched.
    assert_eq!(claim_request(fake, "data-web-0"), "2Gi");
    assert_eq!(claim_request(fake, "data-web-1"), "2Gi");
    assert_ne!(
        uid(fake, "apps/v1", "StatefulSet", "default", "web"),
        sts_before
    );
    assert_eq!(
        (
            uid(fake, "v1", "Pod", "default", "web-0"),
            uid(fake, "v1", "Pod", "default", "web-1")
        ),
        pods
    );
    // Flux never failed on the grown revision: the gate held it until converged.
    assert!(
        flux.kc.reconciled().iter().all(|r| r.result.is_ok()),
        "{:?}",
        flux.kc.reconciled()
    );
    status_contract(&running, &r2).await;
    running.shutdown().await;
    // All of it ran as the converger's service account under the shipped roles.
    rbac_check::assert_allowed(&fake.rbac_requests());
}

fn keys(value: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .expect("an object")
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

/// The `/status` JSON contract, pinned over HTTP on the running service.
async fn status_contract(running: &Running, revision: &str) {
    let base = format!("http://{}", running.addr);
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let request = http.get(format!("{base}{path}"));
        async move {
            let response = request.send().await.expect("the service answers");
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            (
                status,
                serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default(),
            )
        }
    };
    assert_eq!(
        http.get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );

    let (code, list) = get("/status").await;
    assert_eq!(code, 200);
    assert_eq!(keys(&list), ["helmReleases", "kustomizations"]);
    let item = &list["kustomizations"][0];
    assert_eq!(
        keys(item),
        [
            "gate",
            "kind",
            "last",
            "name",
            "namespace",
            "sourceRevision"
        ]
    );
    assert_eq!(item["gate"], "suspend");
    assert_eq!(item["kind"], "Kustomization");
    assert_eq!(item["sourceRevision"], json!(revision));
    let last = &item["last"];
    assert_eq!(
        keys(last),
        [
            "digest",
            "error",
            "finishedAt",
            "flux",
            "gate",
            "generation",
            "handoff",
            "revision",
            "startedAt",
            "state",
            "trigger",
            "volumes",
            "warnings"
        ]
    );
    assert_eq!(last["state"], "converged");
    // The claims it grew, followed (issue #40): the summary of their expansions' states.
    assert_eq!(
        keys(&last["volumes"]),
        [
            "error",
            "filesystemPending",
            "grown",
            "infeasible",
            "requested",
            "resizing",
            "stalled"
        ]
    );
    assert_eq!(
        keys(&last["handoff"]),
        [
            "action",
            "at",
            "attempts",
            "mode",
            "requestedAt",
            "resuspendedAt"
        ]
    );
    assert_eq!(last["handoff"]["mode"], "suspend");
    assert_eq!(
        keys(&last["flux"]),
        ["appliedRevision", "message", "outcome"]
    );
    assert_eq!(last["flux"]["outcome"], "applied");

    let (code, detail) = get("/status/flux-system/apps").await;
    assert_eq!(code, 200);
    assert_eq!(
        keys(&detail),
        [
            "gate",
            "kind",
            "name",
            "namespace",
            "revisions",
            "sourceRevision"
        ]
    );
    let newest = &detail["revisions"][0];
    assert_eq!(newest["revision"], json!(revision));
    let sts = &newest["statefulsets"][0];
    assert_eq!(
        keys(sts),
        [
            "claims",
            "deferred",
            "error",
            "name",
            "namespace",
            "newUid",
            "oldUid",
            "outcome",
            "refusal",
            "templates",
            "volumes"
        ]
    );
    assert_eq!(sts["outcome"], "converged");
    assert_eq!(
        keys(&sts["volumes"][0]),
        [
            "capacity",
            "claim",
            "message",
            "requested",
            "since",
            "state"
        ]
    );
    assert_eq!(
        sts["templates"],
        json!([{"template": "data", "from": "1Gi", "to": "2Gi"}])
    );
    assert_eq!(keys(&sts["claims"][0]), ["claim", "from", "to"]);
    let (code, _) = get("/status/flux-system/not-handled").await;
    assert_eq!(code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_reconcile_gate_as_the_tenant_and_a_refusal_is_not_handed_off() {
    let flux = flux("reconcile", Some("apps-deployer")).await;
    let fake = &flux.fake;
    // What docs/operating.md tells a tenant to grant its service account: the fake authorises
    // impersonated requests, so without it the read is the real 403.
    fake.grant(
        "default",
        "system:serviceaccount:flux-system:apps-deployer",
        json!([
            {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "watch", "patch", "create", "delete"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["list", "patch"]},
        ]),
    );
    let running = serve(fake).await;
    let r1 = flux.source.history()[0].revision.clone();
    assert_eq!(
        finished(&running, &r1).await.state,
        RevisionState::Converged
    );

    fake.clear_requests();
    let r2 = grow_to_2gi(&flux, &running).await;
    let second = finished(&running, &r2).await;
    assert_eq!(second.state, RevisionState::Converged, "{second:#?}");
    assert_eq!(
        second.handoff.as_ref().map(|h| h.mode),
        Some(GateMode::Reconcile)
    );
    until(|| applied(fake).as_deref() == Some(r2.as_str())).await;
    assert_eq!(claim_request(fake, "data-web-0"), "2Gi");
    // The claim and StatefulSet writes went as the Kustomization's service account.
    let tenant = "system:serviceaccount:flux-system:apps-deployer";
    let writes = fake.writes();
    let claim_writes: Vec<_> = writes
        .iter()
        .filter(|w| w.path.contains("/persistentvolumeclaims/"))
        .collect();
    assert!(!claim_writes.is_empty());
    assert!(
        claim_writes
            .iter()
            .all(|w| w.impersonate_user.as_deref() == Some(tenant)),
        "{claim_writes:?}"
    );
    assert!(
        writes.iter().any(|w| w.path.contains("/statefulsets/web")
            && w.impersonate_user.as_deref() == Some(tenant))
    );

    // A shrink is refused: nothing written, no hand-off, not retried on the wedge event.
    fake.clear_requests();
    let small = flux_standin::web_statefulset("1Gi");
    let r3 = flux
        .source
        .publish("web back to 1Gi", &[("apps/web.yaml", small.as_str())])
        .await
        .unwrap();
    let third = finished(&running, &r3.revision).await;
    assert_eq!(third.state, RevisionState::Refused, "{third:#?}");
    assert!(third.handoff.is_none());
    let converger_writes: Vec<_> = fake
        .writes()
        .into_iter()
        .filter(|w| {
            w.path.contains("/statefulsets/") || w.path.contains("/persistentvolumeclaims/")
        })
        .filter(|w| {
            w.field_manager.as_deref() != Some("kustomize-controller")
                || w.impersonate_user.is_some()
        })
        .collect();
    assert!(converger_writes.is_empty(), "{converger_writes:?}");
    let runs = running
        .backend
        .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "apps")
        .unwrap()
        .revisions
        .len();
    let wedge = event(
        "Kustomization",
        "apps",
        "StatefulSet/default/web dry-run failed (Invalid): StatefulSet.apps \"web\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas' are forbidden",
    );
    assert_eq!(
        running.backend.hook(&wedge),
        vec!["flux-system/apps".to_string()]
    );
    settled(&running).await;
    assert_eq!(
        running
            .backend
            .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "apps")
            .unwrap()
            .revisions
            .len(),
        runs
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_restart_mid_converge_is_finished_from_the_journal() {
    let flux = flux("suspend", None).await;
    let fake = &flux.fake;
    let running = serve(fake).await;
    let r1 = flux.source.history()[0].revision.clone();
    assert_eq!(
        finished(&running, &r1).await.state,
        RevisionState::Converged
    );
    resuspended(fake).await;

    // The orphan delete is applied but its answer is lost: the run stops with the
    // StatefulSet deleted and its intent in the journal, as if the process had died there.
    fake.add_fault(fake_apiserver::FaultRule {
        method: Some(fake_apiserver::Method::DELETE),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: fake_apiserver::Fault::DropAfterWrite,
    });
    let two = flux_standin::web_statefulset("2Gi");
    let r2 = flux
        .source
        .publish("web at 2Gi", &[("apps/web.yaml", two.as_str())])
        .await
        .unwrap();
    let failed = finished(&running, &r2.revision).await;
    assert_eq!(failed.state, RevisionState::Failed, "{failed:#?}");
    running.shutdown().await;
    fake.gc_settled().await;
    let left = fake.get("apps/v1", "StatefulSet", Some("default"), "web");
    assert!(
        left.is_none(),
        "deleted, not re-applied: {:#}\n{:#?}",
        left.unwrap_or_default()["metadata"],
        failed
    );
    let intents = fake.list("v1", "Secret", Some(NS));
    assert!(
        intents
            .iter()
            .any(|c| c["metadata"]["labels"]["flux-converger.io/record"] == "intent"),
        "an intent is left"
    );

    let restarted = serve(fake).await;
    until(|| {
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .is_some()
    })
    .await;
    let done = loop {
        let r = finished(&restarted, &r2.revision).await;
        if r.state != RevisionState::Failed {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(done.state, RevisionState::Converged, "{done:#?}");
    assert_eq!(claim_request(fake, "data-web-0"), "2Gi");
    assert_eq!(applied(fake).as_deref(), Some(r2.revision.as_str()));
    restarted.shutdown().await;
}

/// `/metrics` answers on `--metrics-addr` alone and the webhook on `--listen` alone, over real
/// HTTP from the service `serve` starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_on_their_own_port_and_the_hook_on_listen() {
    let fake = FakeApiServer::new();
    let running = serve(&fake).await;
    assert_ne!(running.addr.port(), running.metrics_addr.port());
    let http = reqwest::Client::new();
    let get = |addr: std::net::SocketAddr, path: &'static str| {
        let http = http.clone();
        async move {
            let response = http
                .get(format!("http://{addr}{path}"))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap())
        }
    };
    let hook = event("GitRepository", "repo", "stored artifact");
    let delivery = post_event(&format!("http://{}/hook", running.addr), HMAC_KEY, &hook)
        .await
        .unwrap();
    assert_eq!(delivery.status, 202, "{}", delivery.body);
    let delivery = post_event(
        &format!("http://{}/hook", running.metrics_addr),
        HMAC_KEY,
        &hook,
    )
    .await
    .unwrap();
    assert_eq!(delivery.status, 404, "{}", delivery.body);

    let (status, text) = get(running.metrics_addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        text.contains("flux_converger_hook_requests_total{code=\"202\"} 1"),
        "{text}"
    );
    assert_eq!(get(running.addr, "/metrics").await.0, 404);
    assert_eq!(get(running.metrics_addr, "/healthz").await.0, 200);
    assert_eq!(get(running.addr, "/healthz").await.0, 200);
    assert_eq!(get(running.metrics_addr, "/status").await.0, 404);
    assert_eq!(get(running.addr, "/status").await.0, 200);
    running.shutdown().await;
}

/// A library caller gets the same guard as the CLI: no key, no token, no explicit opt-in, no
/// service.
#[tokio::test]
async fn the_service_refuses_an_open_hook_unless_asked_for_one() {
    let fake = FakeApiServer::new();
    let mut cfg = e2e_config();
    cfg.hmac_key = None;
    cfg.hook_token = None;
    cfg.allow_unauthenticated_hooks = false;
    let Err(error) = start_tuned(cfg, fake.client(), tuning()).await else {
        panic!("an open /hook was served without allow_unauthenticated_hooks");
    };
    assert!(error.to_string().contains("/hook"), "{error}");
}

// ------------------------------------------------------------------ stopping and fencing

/// The StatefulSet `default/web` as stored, if any.
fn web(fake: &FakeApiServer) -> Option<serde_json::Value> {
    fake.get("apps/v1", "StatefulSet", Some("default"), "web")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_shutdown_waits_past_its_grace_until_an_orphan_deleted_statefulset_is_reapplied() {
    let flux = flux("suspend", None).await;
    let fake = &flux.fake;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = e2e_config();
    cfg.kustomize = stalling_kustomize(dir.path());
    let running = start_tuned(
        cfg,
        fake.client(),
        Tuning {
            shutdown_grace: Duration::from_secs(1),
            ..tuning()
        },
    )
    .await
    .expect("the service starts");
    let r1 = flux.source.history()[0].revision.clone();
    assert_eq!(
        finished(&running, &r1).await.state,
        RevisionState::Converged
    );
    resuspended(fake).await;
    let before = uid(fake, "apps/v1", "StatefulSet", "default", "web");

    // The orphan finalizer stays until the test releases it: the converge of 2Gi waits
    // between its orphan delete and its re-apply.
    fake.set_orphan_gc(fake_apiserver::GcMode::Stuck);
    let two = flux_standin::web_statefulset("2Gi");
    flux.source
        .publish("web at 2Gi", &[("apps/web.yaml", two.as_str())])
        .await
        .unwrap();
    until(|| web(fake).is_some_and(|s| s["metadata"]["deletionTimestamp"].is_string())).await;
    let windows = running.windows();
    until(|| windows.open_count() == 1).await;

    // Meanwhile a second Kustomization's run is held in its render: outside any window.
    std::fs::write(dir.path().join("hold"), "").unwrap();
    let other = kustomization(NS, "other", "repo", "./apps", Some("suspend"), true);
    create_kustomization(&fake.client(), &other).await.unwrap();
    until(|| dir.path().join("stalled").exists()).await;
    let queue = running.backend.lane.queue().clone();
    assert_eq!(queue.running(), 2);

    // SIGTERM's path. Once the grace has passed, the run outside a window is stopped, and
    // shutdown keeps waiting for the one inside.
    let stopping = tokio::spawn(running.shutdown());
    until(|| windows.is_sealed()).await;
    until(|| queue.running() == 1).await;
    assert!(!stopping.is_finished(), "stopped with the window open");
    assert_eq!(windows.open_count(), 1);
    assert!(web(fake).is_some_and(|s| s["metadata"]["deletionTimestamp"].is_string()));

    fake.set_orphan_gc(fake_apiserver::GcMode::After(Duration::from_millis(10)));
    stopping.await.expect("shutdown finishes");
    let after = web(fake).expect("re-applied before the service stopped");
    assert_ne!(after["metadata"]["uid"], json!(before), "a new object");
    assert!(after["metadata"]["deletionTimestamp"].is_null());
    assert_eq!(
        after["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    assert_eq!(windows.open_count(), 0);
}

/// A kustomize that, while `hold` exists in `dir`, says so (`stalled`) and waits: a test holds
/// a run there, before its converge reads or writes anything.
fn stalling_kustomize(dir: &std::path::Path) -> KustomizeCommand {
    let script = dir.join("kustomize.sh");
    let d = dir.display();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             if [ -e '{d}/hold' ]; then\n\
             \x20 touch '{d}/stalled'\n\
             \x20 while [ -e '{d}/hold' ]; do sleep 0.05; done\n\
             fi\n\
             exec {} \"$@\"\n",
            flux_converger::flux::render::DEFAULT_KUSTOMIZE
        ),
    )
    .unwrap();
    // The script and its hold files live outside the artifact root: no sandbox.
    KustomizeCommand::parse(&format!("sh {}", script.display()))
        .unwrap()
        .with_sandbox(flux_converger::flux::render::sandbox::SandboxMode::Off)
}

/// A Lease long enough that a loaded machine renews it in time: renewed 3 s before its 6 s
/// expire, writes stop 1 s before.
fn tuning_as(identity: &str) -> Tuning {
    Tuning {
        lease: LeaseSettings {
            duration: Duration::from_secs(6),
            grace: Duration::from_secs(3),
            margin: Duration::from_secs(1),
            ..LeaseSettings::new(identity)
        },
        ..tuning()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_replica_whose_lease_is_taken_over_mid_run_writes_nothing_more() {
    let flux = flux("suspend", None).await;
    let fake = &flux.fake;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = e2e_config();
    cfg.leader_elect = true;
    cfg.kustomize = stalling_kustomize(dir.path());
    let a = start_tuned(cfg.clone(), fake.client(), tuning_as("replica-a"))
        .await
        .expect("replica A starts");
    let r1 = flux.source.history()[0].revision.clone();
    assert_eq!(finished(&a, &r1).await.state, RevisionState::Converged);
    assert!(a.is_leading());
    resuspended(fake).await;

    // Replica B follows. Its runner writes nothing to the cluster, so every claim or
    // StatefulSet write below is A's.
    let b_runner = Arc::new(StandInRunner {
        fake: fake.clone(),
        store: Results::memory(),
        calls: Mutex::new(Vec::new()),
        script: Mutex::new(HashMap::new()),
        hold: tokio::sync::RwLock::new(()),
    });
    let (_, metrics) = metrics::registry();
    let b = start_with(
        cfg.clone(),
        fake.client(),
        tuning_as("replica-b"),
        Parts {
            runner: b_runner.clone(),
            queue: flux_converger::service::queue::Queue::new(
                tuning().backoff,
                metrics.queue_depth.clone(),
            ),
            results: b_runner.store.clone(),
            resume: Arc::new(NoResume),
            app: Box::new(|_backend| axum::Router::new()),
            metrics_app: axum::Router::new(),
            metrics,
            fence: Default::default(),
            storage: None,
            kinds: Vec::new(),
            volumes: None,
        },
    )
    .await
    .expect("replica B starts");
    ready(&b).await;
    assert!(!b.is_leading());

    // A starts on 2Gi and is held in its render.
    std::fs::write(dir.path().join("hold"), "").unwrap();
    let two = flux_standin::web_statefulset("2Gi");
    let r2 = flux
        .source
        .publish("web at 2Gi", &[("apps/web.yaml", two.as_str())])
        .await
        .unwrap();
    until(|| dir.path().join("stalled").exists()).await;

    // The Lease passes to B while A's run is under way.
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    fake.modify(
        "coordination.k8s.io/v1",
        "Lease",
        Some(NS),
        "flux-converger",
        |lease| {
            let transitions = lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0);
            lease["spec"]["holderIdentity"] = json!("replica-b");
            lease["spec"]["acquireTime"] = json!(now);
            lease["spec"]["renewTime"] = json!(now);
            lease["spec"]["leaseTransitions"] = json!(transitions + 1);
        },
    )
    .expect("the Lease exists");
    let takeover = fake.requests().last().map_or(0, |r| r.id);
    until(|| !a.is_leading()).await;
    until(|| b.is_leading()).await;

    // A goes on with its run: its fence stops it before its first write.
    std::fs::remove_file(dir.path().join("hold")).unwrap();
    let failed = finished(&a, &r2.revision).await;
    assert_eq!(failed.state, RevisionState::Failed, "{failed:#?}");
    let error = failed.statefulsets[0]
        .error
        .as_ref()
        .expect("the StatefulSet's error");
    assert_eq!(error.step, "grow", "{error:?}");
    assert!(
        error.message.contains("may no longer write") && error.message.contains("replica-b"),
        "{error:?}"
    );
    // No write at all once the Lease is B's: A's converge, its intent, its record, its
    // Events and its re-suspend all go through the one fenced writer. (B's runner writes
    // nothing; the Lease is both replicas' and not fenced.)
    let written: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.id > takeover && r.is_write())
        .filter(|r| !r.path.starts_with("/apis/coordination.k8s.io/"))
        .collect();
    assert!(
        written.is_empty(),
        "A wrote after the takeover: {written:#?}"
    );
    assert_eq!(claim_request(fake, "data-web-0"), "1Gi");
    assert!(web(fake).is_some_and(|s| s["metadata"]["deletionTimestamp"].is_null()));
    b.shutdown().await;
    a.shutdown().await;
}

/// The binary, stopped with a real SIGTERM: it exits only once the StatefulSet it
/// orphan-deleted is re-applied, although its grace passed long before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_sigterm_exits_only_after_the_reapply() {
    use tokio::io::AsyncBufReadExt as _;
    let flux = flux("suspend", None).await;
    let fake = &flux.fake;
    let served = fake.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "hook-token\n").unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_flux-converger"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "-n",
            NS,
            "--resync",
            "1h",
        ])
        .args(["--shutdown-grace", "1s", "--log-format", "json"])
        // The artifact server's default port (9090) may be taken on the machine running the
        // tests; this test is about the shutdown, not the port.
        .args(["--storage-addr", "127.0.0.1:0"])
        .arg("--hook-token-file")
        .arg(&token)
        .env("KUBECONFIG", &served.kubeconfig)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let logs = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let reader = tokio::spawn({
        let logs = logs.clone();
        async move {
            while let Ok(Some(line)) = lines.next_line().await {
                logs.lock().unwrap().push(line);
            }
        }
    });
    let logged = |what: &str| logs.lock().unwrap().iter().any(|l| l.contains(what));
    // The first revision is converged and handed off (the gate suspends it again). A child
    // that exits before (it could not start) fails the test with its last lines, not a hang.
    tokio::select! {
        () = resuspended(fake) => {}
        status = child.wait() => panic!(
            "the service exited before its first hand-off: {status:?}: {:#?}",
            logs.lock().unwrap().iter().rev().take(10).collect::<Vec<_>>()
        ),
    }
    let before = uid(fake, "apps/v1", "StatefulSet", "default", "web");

    fake.set_orphan_gc(fake_apiserver::GcMode::Stuck);
    let two = flux_standin::web_statefulset("2Gi");
    flux.source
        .publish("web at 2Gi", &[("apps/web.yaml", two.as_str())])
        .await
        .unwrap();
    until(|| web(fake).is_some_and(|s| s["metadata"]["deletionTimestamp"].is_string())).await;

    let pid = child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    // The grace passes; the process must still be there, waiting for the window.
    while !logged("waiting past the grace") {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("exited inside the window: {status}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "exited inside the window"
    );

    fake.set_orphan_gc(fake_apiserver::GcMode::After(Duration::from_millis(10)));
    let status = child.wait().await.unwrap();
    reader.await.unwrap();
    assert!(
        status.success(),
        "{status}: {:#?}",
        logs.lock()
            .unwrap()
            .iter()
            .rev()
            .take(10)
            .collect::<Vec<_>>()
    );
    let after = web(fake).expect("re-applied before the process exited");
    assert_ne!(after["metadata"]["uid"], json!(before));
    assert!(after["metadata"]["deletionTimestamp"].is_null());
    assert!(logged("every re-apply returned"));
}

/// Every log line of this test binary from the first call on (a global subscriber: the
/// service's tasks run on the runtime's worker threads, which a thread-local one would miss).
pub(crate) fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            // The writer `main` logs through: every line masked (flux_converger::redact).
            .with_writer(flux_converger::redact::RedactingWriter::new(move || {
                LogSink(sink.clone())
            }))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        logs
    })
    .clone()
}

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_no_value_from_a_substitute_from_secret_leaves_the_cluster_in_a_failed_record() {
    let logs = captured_logs();
    let secret = format!("s3cr3t-{:016x}", rand::random::<u64>());
    let flux = flux("reconcile", None).await;
    let fake = &flux.fake;
    fake.seed(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "app-vars", "namespace": NS},
        "data": {"API_TOKEN": base64_encode(secret.as_bytes())},
    }));
    fake.modify(
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some(NS),
        "apps",
        |ks| {
            ks["spec"]["postBuild"] =
                json!({"substituteFrom": [{"kind": "Secret", "name": "app-vars"}]});
        },
    )
    .unwrap();
    let running = serve(fake).await;
    let r1 = flux.source.history()[0].revision.clone();
    finished(&running, &r1).await;

    // Revision 2 grows the volume and passes the Secret's value to the container.
    let two = flux_standin::web_statefulset("2Gi").replace(
        "        image: busybox\n",
        "        image: busybox\n        env: [{name: API_TOKEN, value: \"${API_TOKEN}\"}]\n",
    );
    assert!(two.contains("${API_TOKEN}"));
    // The orphan delete fails: the revision fails after its claims grew, with a hint.
    fake.add_fault(fake_apiserver::FaultRule {
        method: Some(http::Method::DELETE),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: fake_apiserver::Fault::Status {
            code: 500,
            reason: "InternalError".into(),
            message: "etcdserver: request timed out".into(),
        },
    });
    let r2 = flux
        .source
        .publish(
            "web at 2Gi with a token",
            &[("apps/web.yaml", two.as_str())],
        )
        .await
        .unwrap()
        .revision;
    let record = finished(&running, &r2).await;
    assert_eq!(record.state, RevisionState::Failed, "{record:#?}");
    let error = record.statefulsets[0]
        .error
        .as_ref()
        .expect("a failed step");
    assert_eq!(error.step, "orphan", "{error:?}");
    let hint = error.hint.as_deref().expect("a hint");
    assert!(
        hint.starts_with("flux-converger render --kustomization flux-system/apps --statefulsets"),
        "{hint}"
    );

    // The value did reach the render the service converged (so it could have leaked).
    let resolved = resolver(fake.client())
        .resolve(NS, "apps")
        .await
        .expect("the revision renders");
    assert!(
        resolved.rendered.statefulsets[0]
            .object
            .to_string()
            .contains(&secret),
        "the render substitutes the Secret's value"
    );

    // Nowhere outside the Secret: /status, the history, the dashboard, the results ConfigMaps,
    // the Events, the logs.
    let http = reqwest::Client::new();
    for path in [
        "/status",
        "/status/flux-system/apps",
        "/",
        "/kustomizations/flux-system/apps",
    ] {
        let response = http
            .get(format!("http://{}{path}", running.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        let body = response.text().await.unwrap();
        assert!(!body.contains(&secret), "{path} carries the secret value");
    }
    let results: Vec<_> = fake
        .list("v1", "ConfigMap", Some(NS))
        .into_iter()
        .filter(|cm| cm["metadata"]["labels"]["flux-converger.io/record"] == "results")
        .collect();
    assert_eq!(results.len(), 1);
    assert!(
        !results[0].to_string().contains(&secret),
        "results ConfigMap"
    );
    // The failure's Event follows the record.
    until(|| published_events(fake) >= 1).await;
    let events = fake.list("events.k8s.io/v1", "Event", None);
    for event in events {
        assert!(!event.to_string().contains(&secret), "Event {event}");
    }
    running.shutdown().await;
    let logs = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(logs.contains(&r2), "the logs were captured");
    assert!(!logs.contains(&secret), "the logs carry the secret value");
}

/// A Kustomization reading `API_TOKEN` from the Secret `app-vars` (holding `secret`), served.
async fn served_with_a_secret(secret: &str) -> (Flux, Running, String) {
    let flux = flux("reconcile", None).await;
    let fake = &flux.fake;
    fake.seed(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "app-vars", "namespace": NS},
        "data": {"API_TOKEN": base64_encode(secret.as_bytes())},
    }));
    fake.modify(
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some(NS),
        "apps",
        |ks| {
            ks["spec"]["postBuild"] =
                json!({"substituteFrom": [{"kind": "Secret", "name": "app-vars"}]});
        },
    )
    .unwrap();
    let running = serve(fake).await;
    let r1 = flux.source.history()[0].revision.clone();
    finished(&running, &r1).await;
    (flux, running, r1)
}

/// Every text the service shows or stores, each with its name: `/status`, the detail, the
/// dashboard and its detail page, every ConfigMap, every Event (core and events.k8s.io), every
/// ExternalArtifact and every Kustomization status the service wrote.
async fn every_text(fake: &FakeApiServer, running: &Running) -> Vec<(String, String)> {
    let mut texts = Vec::new();
    let http = reqwest::Client::new();
    for path in [
        "/status",
        "/status/flux-system/apps",
        "/",
        "/kustomizations/flux-system/apps",
    ] {
        let response = http
            .get(format!("http://{}{path}", running.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        texts.push((path.to_string(), response.text().await.unwrap()));
    }
    for (api_version, kind) in [
        ("v1", "ConfigMap"),
        ("v1", "Event"),
        ("events.k8s.io/v1", "Event"),
    ] {
        for object in fake.list(api_version, kind, None) {
            let shown = format!(
                "{kind} {}/{}",
                object["metadata"]["namespace"].as_str().unwrap_or_default(),
                object["metadata"]["name"].as_str().unwrap_or_default()
            );
            texts.push((shown, object.to_string()));
        }
    }
    texts
}

/// The sentinel is nowhere; `*****` is where it was (`expect_mask`: in the record's texts).
fn assert_nowhere(secret: &str, texts: &[(String, String)], logs: &str) {
    for (what, text) in texts {
        assert!(
            !text.contains(secret),
            "{what} carries the secret value: {text}"
        );
    }
    assert!(!logs.contains(secret), "the logs carry the secret value");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_secret_value_in_a_label_the_server_rejects_is_masked_in_every_text() {
    let logs = captured_logs();
    // Invalid as a label value (`!`): the API server's 422 quotes it.
    let secret = format!("s3cr3t-label-{:016x}.x!", rand::random::<u64>());
    let (flux, running, _) = served_with_a_secret(&secret).await;
    let fake = &flux.fake;
    let two = flux_standin::web_statefulset("2Gi").replace(
        "  namespace: default\n",
        "  namespace: default\n  labels: {tier: \"${API_TOKEN}\"}\n",
    );
    assert!(two.contains("${API_TOKEN}"));
    let r2 = flux
        .source
        .publish("web at 2Gi, labelled", &[("apps/web.yaml", two.as_str())])
        .await
        .unwrap()
        .revision;
    let record = finished(&running, &r2).await;
    assert_ne!(record.state, RevisionState::Converged, "{record:#?}");
    // The server did quote it: the record shows the mask where the value was.
    let shown = serde_json::to_string(&record).unwrap();
    assert!(
        shown.contains("Invalid value: \\\"*****\"") || shown.contains("Invalid value: \\\"*****"),
        "the 422 is recorded, masked: {shown}"
    );
    until(|| published_events(fake) >= 2).await;
    let texts = every_text(fake, &running).await;
    running.shutdown().await;
    let logs = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(logs.contains(&r2), "the logs were captured");
    assert_nowhere(&secret, &texts, &logs);
    assert!(
        texts
            .iter()
            .any(|(what, t)| what.starts_with("Event") && t.contains("*****")),
        "an Event shows the mask"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_secret_value_in_a_grown_statefulsets_env_is_in_no_text() {
    let logs = captured_logs();
    let secret = format!("s3cr3t-env-{:016x}", rand::random::<u64>());
    let (flux, running, _) = served_with_a_secret(&secret).await;
    let fake = &flux.fake;
    // The value goes to the container's env and to a label of the claim template, whose change
    // the record lists (live and declared).
    let two = flux_standin::web_statefulset("2Gi")
        .replace(
            "        image: busybox\n",
            "        image: busybox\n        env: [{name: API_TOKEN, value: \"${API_TOKEN}\"}]\n",
        )
        .replace(
            "  - metadata: {name: data}\n",
            "  - metadata: {name: data, labels: {token: \"${API_TOKEN}\"}}\n",
        );
    assert!(two.contains("labels: {token:"));
    let r2 = flux
        .source
        .publish(
            "web at 2Gi with a token",
            &[("apps/web.yaml", two.as_str())],
        )
        .await
        .unwrap()
        .revision;
    let record = finished(&running, &r2).await;
    assert_eq!(record.state, RevisionState::Converged, "{record:#?}");
    assert_eq!(record.statefulsets[0].claims.len(), 2, "{record:#?}");
    let changes = serde_json::to_string(&record.statefulsets[0].changes).unwrap();
    assert!(
        changes.contains("claim-metadata") && changes.contains("*****"),
        "the claim template's label change is listed, masked: {changes}"
    );
    let live = web(fake).expect("web re-created");
    assert!(live.to_string().contains(&secret), "the value was applied");
    until(|| published_events(fake) >= 2).await;
    let texts = every_text(fake, &running).await;
    running.shutdown().await;
    let logs = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(logs.contains(&r2), "the logs were captured");
    assert_nowhere(&secret, &texts, &logs);
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The resync's own stamp, read from `/metrics`.
async fn last_resync(running: &Running) -> Option<String> {
    let body = reqwest::get(format!("http://{}/metrics", running.metrics_addr))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    body.lines()
        .find(|l| l.starts_with("flux_converger_last_resync_timestamp_seconds "))
        .map(String::from)
}

/// Waits until `n` more resyncs have completed.
async fn resyncs(running: &Running, n: usize) {
    let mut seen = last_resync(running).await;
    for _ in 0..n {
        loop {
            let now = last_resync(running).await;
            if now.is_some() && now != seen {
                seen = now;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Events the service published on the Kustomization, counting the repeats kube's recorder
/// folds into one Event's `series`.
fn published_events(fake: &FakeApiServer) -> u64 {
    fake.list("events.k8s.io/v1", "Event", Some(NS))
        .iter()
        .filter(|e| e["reportingController"] == "flux-converger")
        .map(|e| e["series"]["count"].as_u64().unwrap_or(1))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_blocked_cross_namespace_source_is_recorded_once_with_its_revision() {
    let flux = flux("reconcile", None).await;
    let fake = &flux.fake;
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}));
    let other = GitSource::create(
        fake.client(),
        ArtifactServer::start().await,
        "other",
        "repo",
    )
    .await
    .unwrap();
    let published = other
        .publish(
            "web at 1Gi",
            &[(
                "apps/web.yaml",
                flux_standin::web_statefulset("1Gi").as_str(),
            )],
        )
        .await
        .unwrap();
    fake.modify(
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some(NS),
        "apps",
        |ks| {
            ks["spec"]["sourceRef"]["namespace"] = json!("other");
        },
    )
    .unwrap();
    let mut config = e2e_config();
    config.no_cross_namespace_refs = true;
    config.resync = Duration::from_millis(100);
    let running = start_tuned(config, fake.client(), tuning())
        .await
        .expect("the service starts");
    // The first finished record, whatever revision it names.
    let record = loop {
        if let Some(r) = running
            .backend
            .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "apps")
            .and_then(|d| d.revisions.into_iter().next())
            .filter(|r| r.state != RevisionState::Running)
        {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(record.state, RevisionState::Refused, "{record:#?}");
    assert_eq!(record.revision, published.revision, "the real revision");
    let error = record.error.as_ref().expect("why");
    assert!(
        error
            .message
            .contains("cross-namespace references have been blocked"),
        "{error:?}"
    );
    // The Event follows the record.
    until(|| published_events(fake) >= 1).await;

    // Three resyncs (and a webhook for the source): not due again, nothing new.
    resyncs(&running, 3).await;
    settled(&running).await;
    let history = running
        .backend
        .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "apps")
        .expect("handled")
        .revisions;
    assert_eq!(history.len(), 1, "{history:#?}");
    assert_eq!(published_events(fake), 1);
    running.shutdown().await;
}

fn results_configmaps(fake: &FakeApiServer) -> Vec<String> {
    fake.list("v1", "ConfigMap", Some(NS))
        .into_iter()
        .filter(|cm| cm["metadata"]["labels"]["flux-converger.io/record"] == "results")
        .filter_map(|cm| cm["metadata"]["name"].as_str().map(String::from))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_the_results_of_a_deleted_kustomization_are_removed_when_the_watch_sees_it_go() {
    let flux = flux("reconcile", None).await;
    let fake = &flux.fake;
    // No resync during the test: the watch's delete event alone must do it.
    let running = serve(fake).await;
    let r1 = flux.source.history()[0].revision.clone();
    finished(&running, &r1).await;
    assert_eq!(
        results_configmaps(fake),
        ["flux-converger-results.flux-system.apps"]
    );
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(fake.client(), NS, &flux_standin::kustomization_resource());
    api.delete("apps", &Default::default()).await.unwrap();
    until(|| results_configmaps(fake).is_empty()).await;
    assert!(
        running
            .backend
            .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "apps")
            .is_none()
    );
    let status = reqwest::get(format!("http://{}/status", running.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!status.contains("\"apps\""), "{status}");
    let one = reqwest::get(format!("http://{}/status/{NS}/apps", running.addr))
        .await
        .unwrap();
    assert_eq!(one.status().as_u16(), 404);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_results_of_a_kustomization_deleted_while_the_service_was_down_go_at_the_resync() {
    let flux = flux("reconcile", None).await;
    let fake = &flux.fake;
    // Left by an earlier process for a Kustomization deleted since.
    let earlier = flux_converger::records::results::Results::new(
        fake.client(),
        NS.into(),
        Duration::from_secs(5),
    );
    earlier
        .put(
            NS,
            "ghost",
            record("main@sha1:0", RevisionState::Converged, Trigger::Webhook),
        )
        .await
        .unwrap();
    let mut config = e2e_config();
    config.resync = Duration::from_millis(100);
    let running = start_tuned(config, fake.client(), tuning())
        .await
        .expect("the service starts");
    let r1 = flux.source.history()[0].revision.clone();
    finished(&running, &r1).await;
    // The ghost's goes; the live Kustomization's stays.
    until(|| results_configmaps(fake) == ["flux-converger-results.flux-system.apps"]).await;
    resyncs(&running, 2).await;
    assert_eq!(
        results_configmaps(fake),
        ["flux-converger-results.flux-system.apps"]
    );
    assert_eq!(
        running
            .backend
            .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "apps")
            .expect("handled")
            .revisions
            .len(),
        1
    );
    running.shutdown().await;
}
