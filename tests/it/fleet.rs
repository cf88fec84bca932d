//! A fleet of Kustomizations (issue 36): what the service holds while it lists them, what a
//! failing source costs the API server per attempt, and what a shard lists and watches at
//! start. Behaviour only: the figures at 1,000 and 10,000 objects are measured by
//! `hack/fleet-memory.sh`, `hack/failing-load.sh` and `hack/shard-start.sh`, never timed here.

use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, Fault, FaultRule, Method, RequestRecord};
use flux_converger::http::backend::Backend as _;
use flux_converger::model::GateMode;
use flux_converger::service::leadership::LeaseSettings;
use flux_converger::service::queue::BackoffPolicy;
use flux_converger::service::{Running, Tuning, start_tuned};
use serde_json::json;

const NS: &str = "flux-system";

fn tuning(backoff: BackoffPolicy) -> Tuning {
    Tuning {
        lease: LeaseSettings::new(format!("test-{}", rand::random::<u32>())),
        backoff,
        shutdown_grace: Duration::from_secs(5),
        restart_retry: Duration::from_secs(10),
    }
}

fn git(fake: &FakeApiServer, namespace: &str, name: &str, url: &str) {
    fake.seed(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"url": "https://git.example.com/repo.git", "interval": "1m"},
        "status": {"artifact": {"url": url, "revision": "main@sha1:1111111111111111111111111111111111111111",
                                "digest": format!("sha256:{}", "0".repeat(64)), "path": "x", "size": 1,
                                "lastUpdateTime": "2026-01-01T00:00:00Z"}}
    }));
}

fn kustomization(
    fake: &FakeApiServer,
    namespace: &str,
    name: &str,
    source: (&str, &str),
    labels: serde_json::Value,
    retry_interval: Option<&str>,
) {
    let mut spec = json!({"sourceRef": {"kind": "GitRepository", "name": source.1, "namespace": source.0},
                          "path": "./", "prune": true, "interval": "10m"});
    if let Some(retry) = retry_interval {
        spec["retryInterval"] = json!(retry);
    }
    fake.seed(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"namespace": namespace, "name": name, "labels": labels,
                     "annotations": {"flux-converger.io/gate": "reconcile"},
                     // What a real cluster's objects carry and the service never reads.
                     "managedFields": [{"manager": "kustomize-controller", "operation": "Apply",
                                        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                                        "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:spec": {"f:interval": {}, "f:path": {}}}}]},
        "spec": spec,
    }));
}

fn ns(fake: &FakeApiServer, name: &str) {
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}));
}

async fn until(mut done: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not reached within 30 s");
}

fn count(log: &[RequestRecord], method: &str, path_ends: &str) -> usize {
    log.iter()
        .filter(|r| r.method == method && r.path.ends_with(path_ends) && !r.watch)
        .count()
}

/// A port nothing listens on: every artifact download there fails at once.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Issue 36, item 3. A source whose artifact cannot be downloaded: each attempt reads the
/// Kustomization once and its source once (before: the Kustomization three times and the
/// source twice), the failure is written and evented once (not per attempt: the attempts are
/// counted on the record the leader serves), and the retry waits the Kustomization's own
/// `retryInterval` (1 s here, ±10 %), not a backoff of the queue's own (10 ms here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_source_costs_one_read_of_each_object_per_attempt_and_one_write() {
    let fake = FakeApiServer::new();
    let url = format!("http://127.0.0.1:{}/repo.tar.gz", closed_port());
    git(&fake, NS, "repo", &url);
    kustomization(&fake, NS, "apps", (NS, "repo"), json!({}), Some("1s"));
    let config = test_support::service::config(NS)
        .default_gate(GateMode::Off)
        .build();
    let started = Instant::now();
    let running = start_tuned(
        config,
        fake.client(),
        tuning(BackoffPolicy {
            base: Duration::from_millis(10),
            max: Duration::from_millis(10),
            jitter: 0.1,
        }),
    )
    .await
    .expect("the service starts");
    let attempts = |running: &Running| {
        running
            .backend
            .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "apps")
            .and_then(|d| d.revisions.first().cloned())
            .filter(|r| r.state == flux_converger::model::RevisionState::Failed)
            .map_or(0, |r| r.attempts)
    };
    until(|| attempts(&running) >= 3).await;
    let log = fake.requests();
    let seen = attempts(&running);
    // Three attempts, each after the last one's retryInterval (less its 10 % jitter).
    assert!(
        started.elapsed() >= Duration::from_millis(2 * 900),
        "{seen} attempts within {:?}",
        started.elapsed()
    );
    let record = running
        .backend
        .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "apps")
        .unwrap()
        .revisions[0]
        .clone();
    assert!(
        record
            .error
            .as_ref()
            .is_some_and(|e| e.message.contains("repo.tar.gz")),
        "{record:#?}"
    );
    // Reads: one of each per attempt (a next attempt may have started meanwhile).
    let ks_reads = count(
        &log,
        "GET",
        &format!("/namespaces/{NS}/kustomizations/apps"),
    );
    let source_reads = count(
        &log,
        "GET",
        &format!("/namespaces/{NS}/gitrepositories/repo"),
    );
    for (what, reads) in [("Kustomization", ks_reads), ("source", source_reads)] {
        assert!(
            reads == seen as usize || reads == seen as usize + 1,
            "{what} read {reads} times in {seen} attempts"
        );
    }
    // Writes: the failure once, its Event once; nothing per further attempt.
    let writes: Vec<String> = log
        .iter()
        .filter(|r| r.method != "GET")
        .filter(|r| r.path.contains("/configmaps") || r.path.contains("/events"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        writes,
        [
            format!("POST /api/v1/namespaces/{NS}/configmaps"),
            format!("POST /apis/events.k8s.io/v1/namespaces/{NS}/events"),
        ]
    );
    // The stored record is the first failure: the attempts after it are written with the
    // next record that is news.
    let stored = fake
        .get(
            "v1",
            "ConfigMap",
            Some(NS),
            "flux-converger-results.flux-system.apps",
        )
        .expect("the failure is stored");
    let records: serde_json::Value =
        serde_json::from_str(stored["data"]["records"].as_str().unwrap()).unwrap();
    assert_eq!(records[0]["state"], "failed");
    assert!(records[0].get("attempts").is_none(), "{records}");
    running.shutdown().await;
}

/// Issue 36, item 2. Listed Kustomizations are indexed as they arrive, a page at a time, not
/// held until the whole list has ended: with the second page of the list held back by the
/// server, the first page's Kustomizations are already in the index (and in `/status`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_kustomizations_are_indexed_as_each_page_arrives() {
    let fake = FakeApiServer::new();
    git(&fake, NS, "repo", "http://127.0.0.1:1/never.tar.gz");
    // kube-runtime's watcher lists in pages of 500.
    for i in 0..600 {
        kustomization(
            &fake,
            NS,
            &format!("app-{i:03}"),
            (NS, "repo"),
            json!({}),
            None,
        );
    }
    fake.add_fault(FaultRule {
        method: Some(Method::GET),
        path_contains: "/kustomizations".into(),
        nth: 1,
        action: Fault::Delay(Duration::from_secs(3)),
    });
    let config = test_support::service::config(NS)
        .default_gate(GateMode::Off)
        .build();
    let running = start_tuned(config, fake.client(), tuning(BackoffPolicy::default()))
        .await
        .expect("the service starts");
    until(|| {
        running
            .backend
            .rows(flux_converger::model::Kind::KUSTOMIZATION, None)
            .len()
            >= 500
    })
    .await;
    let first_page = running
        .backend
        .rows(flux_converger::model::Kind::KUSTOMIZATION, None)
        .len();
    let answered = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/kustomizations") && !r.watch && r.code.is_some())
        .count();
    assert_eq!(
        first_page, 500,
        "the first page, while the second is held back"
    );
    assert_eq!(answered, 1, "one page of the list answered so far");
    assert!(
        running.backend.ready().is_err(),
        "not ready before the list ends"
    );
    until(|| {
        running
            .backend
            .rows(flux_converger::model::Kind::KUSTOMIZATION, None)
            .len()
            == 600
    })
    .await;
    running.shutdown().await;
}

/// Issue 36, item 4. A shard (`--watch-label-selector`) lists and watches sources only in the
/// namespaces its handled Kustomizations read them from, and only the kinds they read: not
/// the GitRepositories of other shards' namespaces, nor any OCIRepository, Bucket or
/// ExternalArtifact. A Kustomization of the shard that reads from a new namespace starts a
/// watch there (and its source's revision is known from it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_watches_sources_only_where_its_kustomizations_read_them() {
    let fake = FakeApiServer::new();
    for namespace in ["team-a", "team-b", "shared", "team-c"] {
        ns(&fake, namespace);
    }
    let shard = |s: &str| json!({"sharding.fluxcd.io/key": s});
    git(&fake, "team-a", "repo", "http://127.0.0.1:1/a.tar.gz");
    git(&fake, "team-b", "repo", "http://127.0.0.1:1/b.tar.gz");
    git(&fake, "shared", "platform", "http://127.0.0.1:1/p.tar.gz");
    git(&fake, "team-c", "repo", "http://127.0.0.1:1/c.tar.gz");
    kustomization(
        &fake,
        "team-a",
        "apps",
        ("team-a", "repo"),
        shard("one"),
        None,
    );
    kustomization(
        &fake,
        "team-a",
        "platform",
        ("shared", "platform"),
        shard("one"),
        None,
    );
    kustomization(
        &fake,
        "team-b",
        "apps",
        ("team-b", "repo"),
        shard("two"),
        None,
    );
    let config = test_support::service::config(NS)
        .default_gate(GateMode::Off)
        .watch_label_selector(Some("sharding.fluxcd.io/key=one".into()))
        .build();
    // Sources need no run here: an hour of backoff keeps the failures quiet.
    let running = start_tuned(config, fake.client(), tuning(BackoffPolicy::default()))
        .await
        .expect("the service starts");
    until(|| running.backend.ready().is_ok()).await;
    let source_requests = |fake: &FakeApiServer| -> Vec<String> {
        fake.requests()
            .iter()
            .filter(|r| r.path.starts_with("/apis/source.toolkit.fluxcd.io/"))
            .filter(|r| r.method == "GET" && !r.path.contains("/gitrepositories/"))
            .map(|r| r.path.clone())
            .collect()
    };
    let mut paths = source_requests(&fake);
    paths.sort();
    paths.dedup();
    assert_eq!(
        paths,
        [
            "/apis/source.toolkit.fluxcd.io/v1/namespaces/shared/gitrepositories",
            "/apis/source.toolkit.fluxcd.io/v1/namespaces/team-a/gitrepositories",
        ],
        "lists and watches of sources"
    );
    let revision = |name: &str| {
        running
            .backend
            .rows(flux_converger::model::Kind::KUSTOMIZATION, None)
            .into_iter()
            .find(|k| k.namespace == "team-a" && k.name == name)
            .and_then(|k| k.source_revision)
    };
    assert!(revision("platform").is_some());
    // A new Kustomization of the shard reading from another namespace: a watch starts there.
    test_support::flux_standin::create_kustomization(
        &fake.client(),
        &json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"namespace": "team-a", "name": "extra", "labels": shard("one"),
                         "annotations": {"flux-converger.io/gate": "reconcile"}},
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "repo", "namespace": "team-c"},
                     "path": "./", "prune": true, "interval": "10m"}
        }),
    )
    .await
    .expect("created");
    until(|| revision("extra").is_some()).await;
    let watched: Vec<String> = source_requests(&fake);
    assert!(
        watched
            .iter()
            .any(|p| p == "/apis/source.toolkit.fluxcd.io/v1/namespaces/team-c/gitrepositories"),
        "{watched:#?}"
    );
    assert!(
        !watched.iter().any(|p| p.contains("/team-b/")),
        "{watched:#?}"
    );
    running.shutdown().await;
}
