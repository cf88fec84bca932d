//! Offline expansions finished on request (issue #38, part 2) against the fake over real HTTP:
//! a StatefulSet with `flux-converger.io/restart-for-resize: "true"` whose claims the resizer
//! stand-in left `filesystem-pending` has its pods evicted through `pods/eviction` (a
//! `policy/v1` Eviction carrying the pod's uid), one at a time, highest ordinal first, the next
//! only once the one before is back, Ready, and its claim grown (the kubelet's node expansion,
//! played through the claim's status); a PodDisruptionBudget's 429 waited out and retried; a
//! pod not Ready pausing everything; a new leader after a stop between two evictions evicting
//! neither twice; and without the annotation, not one request about a pod.

use std::time::Duration;

use fake_apiserver::{FakeApiServer, KubeVersion};
use flux_converger::model::{
    GateMode, Key, Kind, RevisionRecord, RevisionState, StatefulSetEntry, StatefulSetOutcome,
    Trigger, Volume, VolumeState,
};
use flux_converger::records::events::{EventSink, EventTarget};
use flux_converger::records::metrics::Metrics;
use flux_converger::records::results::Results;
use flux_converger::service::volumes::{FollowerConfig, VolumeFollower};
use serde_json::{Value, json};
use test_support::resizer::Resizer;

const NS: &str = "default";
const FLUX_NS: &str = "flux-system";
const OPT_IN: &str = "flux-converger.io/restart-for-resize";

struct World {
    fake: FakeApiServer,
    results: Results,
    follower: VolumeFollower,
    resizer: Resizer,
}

fn follower(fake: &FakeApiServer, results: &Results) -> VolumeFollower {
    VolumeFollower::new(FollowerConfig {
        client: fake.client(),
        results: vec![(Kind::KUSTOMIZATION, results.clone())],
        events: EventSink::new(fake.client(), None, Some("flux-converger-0".into())).unwrap(),
        metrics: Metrics::default(),
        resize_timeout: Duration::from_secs(1800),
        call_timeout: Duration::from_secs(5),
        statefulsets: None,
        restart_retry: Duration::from_millis(200),
    })
}

fn claim_name(i: usize) -> String {
    format!("data-db-{i}")
}

/// `db` (three pods, Ready; `opted_in`: with the annotation), its claims Bound at 1Gi and
/// raised to 2Gi as a converge leaves them, each then `filesystem-pending` as an offline-only
/// driver leaves it; followed from a converged record of `flux-system/apps`.
async fn world(opted_in: bool) -> World {
    world_with(opted_in, |_| {}).await
}

/// [`world`], `before` done to the cluster before the follow starts.
async fn world_with(opted_in: bool, before: impl FnOnce(&FakeApiServer)) -> World {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::with_version(KubeVersion::V1_36);
    let path = format!(
        "{}/tests/fixtures/v1.28/storageclasses.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    fake.seed_yaml(&std::fs::read_to_string(path).unwrap());
    fake.enable_statefulset_controller();
    fake.set_pods_ready(true);
    let mut annotations = json!({});
    if opted_in {
        annotations[OPT_IN] = json!("true");
    }
    fake.seed(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS, "annotations": annotations},
        "spec": {"serviceName": "db", "replicas": 3, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "db", "image": "postgres:16"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                     "accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                     "resources": {"requests": {"storage": "1Gi"}}}}]},
    }));
    let names: Vec<String> = (0..3).map(claim_name).collect();
    fake.bind_when_made(names.iter().map(|n| (NS, n.as_str())))
        .await
        .unwrap();
    set_pods_ready_again(&fake).await;
    for n in &names {
        fake.modify("v1", "PersistentVolumeClaim", Some(NS), n, |c| {
            c["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        });
    }
    let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");
    for n in &names {
        resizer.start(NS, n).await.unwrap();
        resizer.needs_node(NS, n).await.unwrap();
    }
    let results = Results::new(fake.client(), FLUX_NS.into(), Duration::from_secs(5));
    let follower = follower(&fake, &results);
    let w = World {
        fake,
        results,
        follower,
        resizer,
    };
    before(&w.fake);
    w.fake.clear_requests();
    w.fake.clear_rbac_requests();
    let record = record(
        names
            .iter()
            .map(|n| Volume {
                claim: n.clone(),
                requested: Some("2Gi".into()),
                capacity: Some("1Gi".into()),
                state: VolumeState::Requested,
                message: None,
                since: jiff::Timestamp::now().to_string(),
                attributes: None,
                restart: None,
            })
            .collect(),
    );
    w.results
        .put(FLUX_NS, "apps", record.clone())
        .await
        .unwrap();
    w.follower.follow(
        Kind::KUSTOMIZATION,
        &key(),
        &record,
        EventTarget::named(Kind::KUSTOMIZATION, &key()),
        true,
    );
    w
}

/// Waits for the pods to be (made) Ready: the controller readies new pods on a cluster with
/// nodes.
async fn set_pods_ready_again(fake: &FakeApiServer) {
    fake.set_pods_ready(true);
    for _ in 0..500 {
        if (0..3).all(|i| pod(fake, i).is_some_and(|p| ready(&p))) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the pods never ran");
}

fn key() -> Key {
    Key::kustomization(FLUX_NS, "apps")
}

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

fn pod(fake: &FakeApiServer, i: usize) -> Option<Value> {
    fake.get("v1", "Pod", Some(NS), &format!("db-{i}"))
}

fn ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn uid(fake: &FakeApiServer, i: usize) -> String {
    pod(fake, i).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

impl World {
    fn volume(&self, claim: &str) -> Volume {
        self.results.last(FLUX_NS, "apps").unwrap().statefulsets[0]
            .volumes
            .iter()
            .find(|v| v.claim == claim)
            .unwrap()
            .clone()
    }

    async fn recorded(&self, claim: &str, state: VolumeState) -> Volume {
        for _ in 0..500 {
            let v = self.volume(claim);
            if v.state == state {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{claim} never {state}: {:?}", self.volume(claim));
    }

    /// The pods evicted so far, in order (each POST to `pods/<name>/eviction`).
    fn evictions(&self) -> Vec<String> {
        self.fake
            .requests()
            .iter()
            .filter(|r| r.method == http::Method::POST && r.path.ends_with("/eviction"))
            .filter(|r| r.code == Some(201))
            .map(|r| r.path.rsplit('/').nth(1).unwrap().to_string())
            .collect()
    }

    fn eviction_answers(&self) -> Vec<(String, Option<u16>)> {
        self.fake
            .requests()
            .iter()
            .filter(|r| r.method == http::Method::POST && r.path.ends_with("/eviction"))
            .map(|r| (r.path.rsplit('/').nth(1).unwrap().to_string(), r.code))
            .collect()
    }

    /// [`World::eviction_answers`] the fake has answered (the log holds a request from its
    /// arrival, its code once answered).
    fn answered_evictions(&self) -> Vec<(String, Option<u16>)> {
        self.eviction_answers()
            .into_iter()
            .filter(|(_, code)| code.is_some())
            .collect()
    }

    /// Waits (up to 20 s: a held-back eviction is retried with a doubling wait) until the
    /// pods evicted so far are `expected`.
    async fn evicted(&self, expected: &[&str]) {
        for _ in 0..2000 {
            if self.evictions() == expected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "evicted {:?}, expected {expected:?}: {:?}",
            self.evictions(),
            self.eviction_answers()
        );
    }

    /// The kubelet of pod `db-i`'s node: once its successor runs, the file system grows.
    async fn kubelet_grows(&self, i: usize) {
        self.resizer.node_finish(NS, &claim_name(i)).await.unwrap();
        self.recorded(&claim_name(i), VolumeState::Grown).await;
    }

    /// How many times an Event of `reason` was published (kube-runtime's recorder folds the
    /// repeats of one reason on one object into a series).
    fn published(&self, reason: &str) -> i64 {
        self.fake
            .list("events.k8s.io/v1", "Event", Some(FLUX_NS))
            .into_iter()
            .filter(|e| e["reason"] == reason)
            .map(|e| e["series"]["count"].as_i64().unwrap_or(1))
            .sum()
    }

    fn events(&self, reason: &str) -> Vec<String> {
        self.fake
            .list("events.k8s.io/v1", "Event", Some(FLUX_NS))
            .into_iter()
            .filter(|e| e["reason"] == reason)
            .map(|e| e["note"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_restarted_one_at_a_time_highest_ordinal_first() {
    let w = world(true).await;
    let before: Vec<String> = (0..3).map(|i| uid(&w.fake, i)).collect();
    w.evicted(&["db-2"]).await;
    let v = w.recorded("data-db-2", VolumeState::Restarted).await;
    let restart = v.restart.expect("the restart is recorded");
    assert_eq!(
        (restart.pod.as_str(), restart.uid.as_str()),
        ("db-2", before[2].as_str())
    );
    assert!(restart.evicted_at.is_some());
    // Its successor runs; nothing more happens until its claim grew.
    assert_ne!(uid(&w.fake, 2), before[2]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(w.evictions(), ["db-2"]);
    assert_eq!(w.volume("data-db-1").state, VolumeState::FilesystemPending);
    w.kubelet_grows(2).await;
    w.evicted(&["db-2", "db-1"]).await;
    w.recorded("data-db-1", VolumeState::Restarted).await;
    w.kubelet_grows(1).await;
    w.evicted(&["db-2", "db-1", "db-0"]).await;
    w.kubelet_grows(0).await;
    let last = w.results.last(FLUX_NS, "apps").unwrap();
    assert!(last.volumes.unwrap().all_grown());
    for (i, old) in before.iter().enumerate() {
        assert_ne!(&uid(&w.fake, i), old, "db-{i} restarted");
        assert_eq!(w.volume(&claim_name(i)).restart, None);
    }
    // Each eviction a policy/v1 Eviction the service's identity creates on pods/eviction: the
    // only write about a pod.
    let pod_writes: Vec<String> = w
        .fake
        .rbac_requests()
        .iter()
        .filter(|r| r.resource == "pods" && !matches!(r.verb.as_str(), "get" | "list" | "watch"))
        .map(|r| format!("{} {}", r.verb, r.resource_path()))
        .collect();
    assert_eq!(pod_writes, ["create pods/eviction"; 3]);
    for _ in 0..3000 {
        if w.published("VolumeRestarted") == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(w.published("VolumeRestarted"), 3);
    let restarted = w.events("VolumeRestarted");
    assert!(
        restarted.iter().any(|e| e.contains(
            "StatefulSet default/db: pod db-2 evicted so the node grows the file system when its successor mounts claim data-db-2"
        )),
        "{restarted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disruption_budget_s_429_is_waited_out_never_worked_around() {
    let w = world(true).await;
    let (code, body) = raw(
        &w.fake,
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "db"},
               "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "db"}}}}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let before = uid(&w.fake, 2);
    // Refused, and retried (every 200 ms, then more seldom), never anything else.
    for _ in 0..500 {
        if w.answered_evictions().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let answers = w.answered_evictions();
    assert!(answers.len() >= 2, "{answers:?}");
    assert!(
        answers.iter().all(|(p, c)| p == "db-2" && *c == Some(429)),
        "{answers:?}"
    );
    assert_eq!(uid(&w.fake, 2), before, "not deleted around the budget");
    let v = w.volume("data-db-2");
    assert_eq!(v.state, VolumeState::FilesystemPending);
    assert_eq!(v.restart.as_ref().map(|r| r.pod.as_str()), Some("db-2"));
    assert!(
        v.message.as_deref().unwrap_or_default().contains(
            "429: Cannot evict pod as it would violate the pod's disruption budget.; The disruption budget db needs 3 healthy pods and has 3 currently"
        ),
        "{v:?}"
    );
    let pod_writes = w
        .fake
        .rbac_requests()
        .iter()
        .filter(|r| r.resource == "pods" && r.verb == "delete")
        .count();
    assert_eq!(pod_writes, 0);
    for _ in 0..3000 {
        if !w.events("VolumeRestartBlocked").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(w.published("VolumeRestartBlocked"), 1, "once per hold");
    // The budget makes room: the next attempt passes.
    w.fake
        .modify("policy/v1", "PodDisruptionBudget", Some(NS), "db", |b| {
            b["spec"]["minAvailable"] = json!(2);
        });
    w.evicted(&["db-2"]).await;
    w.recorded("data-db-2", VolumeState::Restarted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_is_not_ready_pauses_every_restart() {
    // db-0 is not Ready (and no node readies it again) when the follow starts.
    let w = world_with(true, |fake| {
        fake.set_pods_ready(false);
        fake.modify("v1", "Pod", Some(NS), "db-0", |p| {
            p["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
        });
    })
    .await;
    w.recorded("data-db-2", VolumeState::FilesystemPending)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(w.evictions().is_empty(), "paused while db-0 is not Ready");
    assert!(w.eviction_answers().is_empty(), "not even asked");
    // Ready again: the restarts go on, db-2 first.
    set_pods_ready_again(&w.fake).await;
    w.evicted(&["db-2"]).await;
    // A rolling update pauses them too: a new pod template under `OnDelete` leaves the pods
    // at the old revision, the next restart waits while the revisions differ.
    w.fake
        .modify("apps/v1", "StatefulSet", Some(NS), "db", |s| {
            s["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
            s["spec"]["template"]["metadata"]["annotations"] = json!({"rolled": "1"});
        });
    let sts = w
        .fake
        .get("apps/v1", "StatefulSet", Some(NS), "db")
        .unwrap();
    assert_ne!(
        sts["status"]["currentRevision"], sts["status"]["updateRevision"],
        "{sts}"
    );
    w.kubelet_grows(2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        w.evictions(),
        ["db-2"],
        "paused while a rolling update is in progress"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_after_a_stop_between_two_evictions_evicts_neither_twice() {
    let w = world(true).await;
    w.evicted(&["db-2"]).await;
    w.recorded("data-db-2", VolumeState::Restarted).await;
    // The replica stops (it lost the Lease, or died) before the restarted pod's claim grew.
    w.follower.stop();
    // The next leader: the records as the old one left them, read by a store of its own.
    let results = Results::new(w.fake.client(), FLUX_NS.into(), Duration::from_secs(5));
    results.load().await.unwrap();
    let next = follower(&w.fake, &results);
    next.resume();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        w.evictions(),
        ["db-2"],
        "db-2 is not evicted again, db-1 waits"
    );
    w.resizer.node_finish(NS, "data-db-2").await.unwrap();
    w.evicted(&["db-2", "db-1"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(w.evictions(), ["db-2", "db-1"]);
    let answers = w.eviction_answers();
    assert_eq!(answers.len(), 2, "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_between_the_record_and_the_eviction_sends_it_once() {
    let w = world(true).await;
    // The eviction never reaches the server: the replica stops right after recording it.
    w.fake.add_fault(fake_apiserver::FaultRule {
        method: Some(http::Method::POST),
        path_contains: "/pods/db-2/eviction".into(),
        nth: 0,
        action: fake_apiserver::Fault::Drop,
    });
    for _ in 0..500 {
        if w.volume("data-db-2").restart.is_some() && !w.eviction_answers().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    w.follower.stop();
    w.fake.clear_faults();
    let recorded = w
        .volume("data-db-2")
        .restart
        .expect("recorded before the eviction");
    assert_eq!(recorded.evicted_at, None);
    let before = uid(&w.fake, 2);
    assert_eq!(recorded.uid, before, "the pod is still the one recorded");
    let results = Results::new(w.fake.client(), FLUX_NS.into(), Duration::from_secs(5));
    results.load().await.unwrap();
    let next = follower(&w.fake, &results);
    next.resume();
    w.evicted(&["db-2"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(w.evictions(), ["db-2"]);
    assert_ne!(uid(&w.fake, 2), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_annotation_no_pod_is_ever_touched() {
    let w = world(false).await;
    w.recorded("data-db-2", VolumeState::FilesystemPending)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let about_pods: Vec<String> = w
        .fake
        .rbac_requests()
        .iter()
        .filter(|r| r.resource == "pods")
        .map(|r| format!("{} {}", r.verb, r.resource_path()))
        .collect();
    assert!(about_pods.is_empty(), "{about_pods:?}");
    assert!(w.eviction_answers().is_empty());
    let v = w.volume("data-db-2");
    assert_eq!(v.restart, None);
    assert!(
        v.message
            .as_deref()
            .unwrap_or_default()
            .contains("restart the pod using it"),
        "{v:?}"
    );
}

async fn raw(fake: &FakeApiServer, path: &str, body: Value) -> (u16, Value) {
    let req = http::Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .unwrap();
    let resp = fake.client().send(req).await.expect("the fake answers");
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), usize::MAX)
        .await
        .unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}
