//! The service's claim follower (issue #40) against the fake over real HTTP, the expansion
//! played by the resizer stand-in through the claim's status subresource and Events: each
//! state recorded once as it comes (`volumes` of the StatefulSet entry and the revision's
//! summary), the Events on the gated object (`VolumeResizeInfeasible`, `VolumeResizeStalled`,
//! `VolumesGrown` once), the metrics, the fallback to Events before 1.32, the timeout, and no
//! request at all while nothing resizes. Then the whole path through the gate: a revision
//! grown, its expansion infeasible, git reverting the size, the recovery, the claim grown.

use std::time::Duration;

use fake_apiserver::{FakeApiServer, KubeVersion};
use flux_converger::model::{
    GateMode, Key, Kind, RevisionRecord, RevisionState, StatefulSetEntry, StatefulSetOutcome,
    Trigger, Volume, VolumeState,
};
use flux_converger::records::events::{EventSink, EventTarget};
use flux_converger::records::metrics::{Metrics, registry};
use flux_converger::records::results::Results;
use flux_converger::service::volumes::{FollowerConfig, VolumeFollower};
use serde_json::{Value, json};
use test_support::resizer::Resizer;

const NS: &str = "default";
const FLUX_NS: &str = "flux-system";

fn claim(name: &str, request: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "db"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                 "volumeMode": "Filesystem",
                 "resources": {"requests": {"storage": request}}, "volumeName": format!("pv-{name}")},
    })
}

struct World {
    fake: FakeApiServer,
    results: Results,
    follower: VolumeFollower,
    metrics: Metrics,
    registry: prometheus_client::registry::Registry,
    resizer: Resizer,
}

/// `db` (selector `app=db`) with `claims` Bound at 1Gi then raised to 2Gi, as a converge left
/// them, and a follower over the fake (results in ConfigMaps, Events on `flux-system/apps`).
async fn world(version: KubeVersion, claims: &[&str], timeout: Duration) -> World {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::with_version(version);
    fake.seed_fixture("v1.28/storageclasses.yaml");
    fake.seed(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {"serviceName": "db", "replicas": 1, "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "postgres"}]}}},
    }));
    for c in claims {
        fake.seed(claim(c, "1Gi"));
        fake.set_pvc_phase(NS, c, "Bound");
        let patched = fake.modify("v1", "PersistentVolumeClaim", Some(NS), c, |pvc| {
            pvc["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        });
        assert!(patched.is_some());
    }
    let results = Results::new(fake.client(), FLUX_NS.into(), Duration::from_secs(5));
    let (registry, metrics) = registry();
    let follower = VolumeFollower::new(FollowerConfig {
        client: fake.client(),
        results: vec![(Kind::KUSTOMIZATION, results.clone())],
        events: EventSink::new(fake.client(), None, Some("flux-converger-0".into())).unwrap(),
        metrics: metrics.clone(),
        resize_timeout: timeout,
        call_timeout: Duration::from_secs(5),
        statefulsets: None,
        restart_retry: Duration::from_secs(10),
    });
    let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");
    World {
        fake,
        results,
        follower,
        metrics,
        registry,
        resizer,
    }
}

fn volume(claim: &str, state: VolumeState) -> Volume {
    Volume {
        claim: claim.into(),
        requested: Some("2Gi".into()),
        capacity: Some("1Gi".into()),
        state,
        message: None,
        since: jiff::Timestamp::now().to_string(),
        attributes: None,
        restart: None,
    }
}

/// A converged record of `flux-system/apps` whose `db` entry follows `volumes`.
fn record(volumes: Vec<Volume>) -> RevisionRecord {
    let mut r = RevisionRecord::new(
        "main@sha1:2",
        Trigger::Watch,
        jiff::Timestamp::now().to_string(),
        RevisionState::Converged,
        GateMode::Reconcile,
        Some(1),
    );
    r.statefulsets = vec![StatefulSetEntry {
        namespace: NS.into(),
        name: "db".into(),
        outcome: StatefulSetOutcome::Converged,
        old_uid: None,
        new_uid: None,
        templates: Vec::new(),
        changes: Vec::new(),
        claims: Vec::new(),
        deferred: Vec::new(),
        refusal: None,
        error: None,
        volumes,
    }];
    r
}

fn key() -> Key {
    Key::kustomization(FLUX_NS, "apps")
}

impl World {
    async fn follow(&self, volumes: Vec<Volume>) -> RevisionRecord {
        let r = record(volumes);
        self.results.put(FLUX_NS, "apps", r.clone()).await.unwrap();
        self.follower.follow(
            Kind::KUSTOMIZATION,
            &key(),
            &r,
            EventTarget::named(Kind::KUSTOMIZATION, &key()),
            true,
        );
        r
    }

    fn volumes(&self) -> Vec<Volume> {
        self.results.last(FLUX_NS, "apps").unwrap().statefulsets[0]
            .volumes
            .clone()
    }

    fn state(&self, claim: &str) -> VolumeState {
        self.volumes()
            .into_iter()
            .find(|v| v.claim == claim)
            .unwrap()
            .state
    }

    /// Waits until `claim` is recorded in `state`.
    async fn recorded(&self, claim: &str, state: VolumeState) {
        for _ in 0..500 {
            if self.state(claim) == state {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{claim} never {state}: {:?}", self.volumes());
    }

    /// The Events published on `flux-system/apps`, by reason, in order.
    fn events(&self) -> Vec<(String, String, String)> {
        let mut events: Vec<Value> = self.fake.list("events.k8s.io/v1", "Event", Some(FLUX_NS));
        events.sort_by_key(|e| {
            e["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        });
        events
            .iter()
            .map(|e| {
                (
                    e["reason"].as_str().unwrap_or_default().to_string(),
                    e["type"].as_str().unwrap_or_default().to_string(),
                    e["note"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// Waits until the results ConfigMap holds a claim `state`.
    async fn persisted(&self, state: &str) {
        for _ in 0..500 {
            let cm = self.fake.get(
                "v1",
                "ConfigMap",
                Some(FLUX_NS),
                "flux-converger-results.flux-system.apps",
            );
            if cm.is_some_and(|cm| {
                cm.to_string()
                    .contains(&format!("\\\"state\\\":\\\"{state}\\\""))
            }) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the results ConfigMap never held {state}");
    }

    /// Replacements of the results ConfigMap: one per record write.
    fn record_writes(&self) -> usize {
        self.fake
            .writes()
            .iter()
            .filter(|r| {
                r.path
                    .contains("/configmaps/flux-converger-results.flux-system.apps")
            })
            .count()
    }

    fn metrics(&self) -> String {
        let _ = &self.metrics;
        flux_converger::records::metrics::encode(&self.registry)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_state_is_recorded_once_as_the_resizer_drives_the_claim() {
    let w = world(
        KubeVersion::V1_32,
        &["data-db-0"],
        Duration::from_secs(1800),
    )
    .await;
    w.fake.clear_requests();
    w.follow(vec![volume("data-db-0", VolumeState::Requested)])
        .await;
    let summary = w.results.last(FLUX_NS, "apps").unwrap().volumes.unwrap();
    assert_eq!(summary.requested, 1);

    w.resizer.start(NS, "data-db-0").await.unwrap();
    w.recorded("data-db-0", VolumeState::Resizing).await;
    w.resizer.needs_node(NS, "data-db-0").await.unwrap();
    w.recorded("data-db-0", VolumeState::FilesystemPending)
        .await;
    let pending = w.volumes()[0].clone();
    assert!(
        pending
            .message
            .as_deref()
            .unwrap()
            .contains("Waiting for user to (re-)start a pod"),
        "{pending:?}"
    );
    w.resizer.finish(NS, "data-db-0").await.unwrap();
    w.recorded("data-db-0", VolumeState::Grown).await;
    let last = w.results.last(FLUX_NS, "apps").unwrap();
    let grown = &last.statefulsets[0].volumes[0];
    assert_eq!(
        (grown.requested.as_deref(), grown.capacity.as_deref()),
        (Some("2Gi"), Some("2Gi"))
    );
    assert!(last.volumes.unwrap().all_grown());

    // One record write per state change (resizing, filesystem-pending, grown), not per event.
    for _ in 0..3000 {
        if w.events().iter().any(|(r, _, _)| r == "VolumesGrown") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(w.record_writes(), 3, "{:?}", w.fake.writes());
    // What following cost: the selector read once (no StatefulSet watch here), a list and a
    // watch of the claims by it, a list and a watch of the claim Events of the namespace.
    let mut reads: Vec<String> = w
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == http::Method::GET)
        // The resizer stand-in's own reads of the claim aside.
        .filter(|r| !r.path.ends_with("/persistentvolumeclaims/data-db-0"))
        .map(|r| {
            let what = r.path.rsplit('/').next().unwrap_or_default();
            format!("{}{what}", if r.watch { "watch " } else { "" })
        })
        .collect();
    reads.sort();
    assert_eq!(
        reads,
        [
            "db",
            "events",
            "persistentvolumeclaims",
            "watch events",
            "watch persistentvolumeclaims"
        ],
        "{:?}",
        w.fake.requests()
    );
    let events = w.events();
    let grown: Vec<_> = events
        .iter()
        .filter(|(r, _, _)| r == "VolumesGrown")
        .collect();
    assert_eq!(grown.len(), 1, "{events:?}");
    assert_eq!(grown[0].1, "Normal");
    assert!(
        grown[0]
            .2
            .contains("every claim grown: default/db claim data-db-0 (2Gi)"),
        "{events:?}"
    );
    let text = w.metrics();
    assert!(
        text.contains("flux_converger_claims{state=\"grown\",kind=\"Kustomization\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("flux_converger_claims{state=\"resizing\",kind=\"Kustomization\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("flux_converger_volume_resize_seconds_count{kind=\"Kustomization\"} 1"),
        "{text}"
    );

    // Grown: the watches are closed. The resizer touching the claim again reaches nobody.
    w.fake.clear_requests();
    w.resizer.start(NS, "data-db-0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(w.state("data-db-0"), VolumeState::Grown);
    assert_eq!(w.record_writes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_is_followed_on_and_infeasible_is_as_loud_as_a_refusal() {
    let w = world(
        KubeVersion::V1_32,
        &["data-db-0"],
        Duration::from_secs(1800),
    )
    .await;
    w.follow(vec![volume("data-db-0", VolumeState::Requested)])
        .await;
    w.resizer.start(NS, "data-db-0").await.unwrap();
    w.resizer.error(NS, "data-db-0", "throttled").await.unwrap();
    w.recorded("data-db-0", VolumeState::Error).await;
    let error = w.volumes()[0].clone();
    assert!(
        error.message.as_deref().unwrap().contains("throttled"),
        "{error:?}"
    );
    assert!(
        error
            .message
            .as_deref()
            .unwrap()
            .contains("the driver retries"),
        "{error:?}"
    );
    // Still followed: the driver's next answer is seen.
    w.resizer
        .infeasible(
            NS,
            "data-db-0",
            "2Gi exceeds the volume type's maximum of 1Gi",
        )
        .await
        .unwrap();
    w.recorded("data-db-0", VolumeState::Infeasible).await;
    for _ in 0..3000 {
        let infeasible = w.volumes()[0].clone();
        if infeasible
            .message
            .as_deref()
            .is_some_and(|m| m.contains("newest VolumeResizeFailed Event"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let infeasible = w.volumes()[0].clone();
    let message = infeasible.message.as_deref().unwrap();
    assert!(message.contains("ControllerResizeInfeasible"), "{message}");
    assert!(
        message.contains("newest VolumeResizeFailed Event"),
        "{message}"
    );
    assert!(message.contains("maximum of 1Gi"), "{message}");
    let summary = w.results.last(FLUX_NS, "apps").unwrap().volumes.unwrap();
    assert_eq!(summary.infeasible, 1);
    for _ in 0..3000 {
        if w.events()
            .iter()
            .any(|(r, _, _)| r == "VolumeResizeInfeasible")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let warnings: Vec<_> = w
        .events()
        .into_iter()
        .filter(|(r, _, _)| r == "VolumeResizeInfeasible")
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "once, however often the driver's words change: {warnings:?}"
    );
    assert_eq!(warnings[0].1, "Warning");
    assert!(warnings[0].2.contains("StatefulSet default/db: claim data-db-0 (2Gi requested, 1Gi held): the driver will not grow it"), "{warnings:?}");
    assert!(!w.events().iter().any(|(r, _, _)| r == "VolumesGrown"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_1_32_a_failure_event_is_the_error_signal() {
    let w = world(
        KubeVersion::V1_28,
        &["data-db-0"],
        Duration::from_secs(1800),
    )
    .await;
    w.follow(vec![volume("data-db-0", VolumeState::Requested)])
        .await;
    w.resizer.start(NS, "data-db-0").await.unwrap();
    w.recorded("data-db-0", VolumeState::Resizing).await;
    // The 1.28 resizer's only word of the failure: a Warning Event on the claim.
    let pvc = w
        .fake
        .get("v1", "PersistentVolumeClaim", Some(NS), "data-db-0")
        .unwrap();
    assert!(pvc["status"].get("allocatedResourceStatuses").is_none());
    w.resizer
        .event(
            NS,
            &pvc,
            "Warning",
            "VolumeResizeFailed",
            "resize volume \"pv-data-db-0\" failed: quota exceeded",
        )
        .await
        .unwrap();
    w.recorded("data-db-0", VolumeState::Error).await;
    assert!(
        w.volumes()[0]
            .message
            .as_deref()
            .unwrap()
            .contains("quota exceeded")
    );
    // What the records say reaches a recovery's decision.
    let known = w.follower.known_states(Kind::KUSTOMIZATION, &key());
    assert_eq!(known.get("default/data-db-0"), Some(&VolumeState::Error));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_resize_timeout_a_claim_is_stalled_with_a_warning() {
    let w = world(KubeVersion::V1_32, &["data-db-0"], Duration::from_secs(1)).await;
    w.follow(vec![volume("data-db-0", VolumeState::Requested)])
        .await;
    w.recorded("data-db-0", VolumeState::Stalled).await;
    for _ in 0..3000 {
        if w.events()
            .iter()
            .any(|(r, _, _)| r == "VolumeResizeStalled")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stalled: Vec<_> = w
        .events()
        .into_iter()
        .filter(|(r, _, _)| r == "VolumeResizeStalled")
        .collect();
    assert_eq!(stalled.len(), 1, "{stalled:?}");
    assert_eq!(stalled[0].1, "Warning");
    assert_eq!(
        w.results
            .last(FLUX_NS, "apps")
            .unwrap()
            .volumes
            .unwrap()
            .stalled,
        1
    );
    // Still followed: it grows after all.
    w.resizer.finish(NS, "data-db-0").await.unwrap();
    w.recorded("data-db-0", VolumeState::Grown).await;
}

/// Nothing resizing, nothing sent: a record whose claims all grew is not followed, and one
/// without claims to follow neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_nothing_resizes_the_follower_sends_no_request() {
    let w = world(KubeVersion::V1_32, &["data-db-0"], Duration::from_secs(1)).await;
    w.fake.clear_requests();
    let mut grown = volume("data-db-0", VolumeState::Grown);
    grown.capacity = Some("2Gi".into());
    w.follow(vec![grown]).await;
    let none = record(Vec::new());
    w.follower.follow(
        Kind::KUSTOMIZATION,
        &Key::kustomization(FLUX_NS, "other"),
        &none,
        EventTarget::named(Kind::KUSTOMIZATION, &key()),
        true,
    );
    // Every claim grew already: `VolumesGrown`, once, and nothing else.
    for _ in 0..3000 {
        if w.events().iter().any(|(r, _, _)| r == "VolumesGrown") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent: Vec<_> = w
        .fake
        .requests()
        .into_iter()
        // The test's own write of the record aside.
        .filter(|r| !r.path.ends_with("/configmaps"))
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].path.ends_with("/events"), "{sent:?}");
    // Past the resize timeout too: no timer fires a request, no watch is open.
    w.fake.clear_requests();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(w.fake.requests().is_empty(), "{:?}", w.fake.requests());
    // A new leader resuming from the records follows nothing, and announces nothing again.
    w.follower.resume();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(w.fake.requests().is_empty(), "{:?}", w.fake.requests());
}

/// Only the leader follows: one that loses the Lease stops (its watches close, it writes
/// nothing more); the next leader resumes from the records what was not at an end state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_resumes_what_the_old_one_followed() {
    let w = world(
        KubeVersion::V1_32,
        &["data-db-0"],
        Duration::from_secs(1800),
    )
    .await;
    w.follow(vec![volume("data-db-0", VolumeState::Requested)])
        .await;
    w.resizer.start(NS, "data-db-0").await.unwrap();
    w.recorded("data-db-0", VolumeState::Resizing).await;
    // Written through to the ConfigMap, not only into memory.
    w.persisted("resizing").await;
    w.follower.stop();
    w.fake.clear_requests();
    w.resizer.needs_node(NS, "data-db-0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        w.state("data-db-0"),
        VolumeState::Resizing,
        "stopped: nothing written"
    );
    assert_eq!(w.record_writes(), 0);

    // The next leader: the records as the old one left them, read by a store of its own.
    let results = Results::new(w.fake.client(), FLUX_NS.into(), Duration::from_secs(5));
    results.load().await.unwrap();
    let next = VolumeFollower::new(FollowerConfig {
        client: w.fake.client(),
        results: vec![(Kind::KUSTOMIZATION, results.clone())],
        events: EventSink::disabled(),
        metrics: Metrics::default(),
        resize_timeout: Duration::from_secs(1800),
        call_timeout: Duration::from_secs(5),
        statefulsets: None,
        restart_retry: Duration::from_secs(10),
    });
    next.resume();
    for _ in 0..500 {
        let state = results.last(FLUX_NS, "apps").unwrap().statefulsets[0].volumes[0].state;
        if state == VolumeState::FilesystemPending {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        results.last(FLUX_NS, "apps").unwrap().statefulsets[0].volumes[0].state,
        VolumeState::FilesystemPending
    );
    next.stop();
}
