//! Argo CD Applications through the service (issue #39): the whole service (`service::start`,
//! as `serve` runs it, with `--argocd-*`) next to the application-controller stand-in and the
//! API server stand-in (`test_support::argocd_standin`), over the fake API server with its
//! StatefulSet controller. Each failure shape is driven from a synced Application to Argo CD's
//! stop, then converged by the service (claims grown, pods kept), handed back once with its
//! nonce, and synced by Argo CD. The runs that must write nothing are driven directly
//! (`AppGate::run`) over Applications seeded in each state.

use std::time::Duration;

use fake_apiserver::{FakeApiServer, KubeVersion, Method};
use flux_converger::argocd::api::{ApiOptions, ArgoCdApi};
use flux_converger::argocd::application::Application;
use flux_converger::model::{GateOutcome, Kind, RevisionState, Trigger};
use flux_converger::records::events::EventSink;
use flux_converger::records::metrics::Metrics;
use flux_converger::records::results::{Results, Shard};
use flux_converger::service::application::{AppConfig, AppGate, ArgoCdConfig};
use flux_converger::service::leadership::LeaseSettings;
use flux_converger::service::queue::BackoffPolicy;
use flux_converger::service::step::{ConvergeStep, StepConfig};
use flux_converger::service::{Tuning, start_tuned};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use test_support::argocd_standin::{
    ArgoCdController, ArgoCdOptions, ArgoCdServer, Repo, application_resource, statefulset,
};

pub(crate) const ARGO_NS: &str = "argocd";
pub(crate) const NS: &str = "apps";
pub(crate) const SERVICE_NS: &str = "flux-system";
pub(crate) const REV_A: &str = "1c9d7e5f3a1b0c2d4e6f8a9b7c5d3e1f0a2b4c6d";
pub(crate) const REV_B: &str = "8e1f0c5b2d7a4f6e9c3b1a0d5e7f9a2c4b6d8e0f";
pub(crate) const REV_C: &str = "f00dfeedf00dfeedf00dfeedf00dfeedf00dfeed";
const WAIT: Duration = Duration::from_secs(30);
const T: Duration = Duration::from_secs(5);

/// The cluster Argo CD deploys to: the namespaces, an expandable StorageClass, the StatefulSet
/// controller (claims, pods, adoption), the `default` AppProject Argo CD creates.
pub(crate) fn cluster() -> FakeApiServer {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    for ns in [ARGO_NS, NS, SERVICE_NS] {
        fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    fake.seed_yaml(
        &std::fs::read_to_string(fake_apiserver::fixture_path("v1.28/storageclasses.yaml"))
            .unwrap(),
    );
    fake.enable_statefulset_controller();
    fake.set_pods_ready(true);
    fake.seed(
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": {"name": "default", "namespace": ARGO_NS},
        "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                 "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}}),
    );
    fake
}

fn config_map() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "db-config"},
           "data": {"mode": "primary"}})
}

pub(crate) fn publish(repo: &Repo, revision: &str, size: &str) {
    let mut sts = statefulset(NS, "db", size);
    sts["spec"]["replicas"] = json!(2);
    repo.publish(ARGO_NS, "db", revision, NS, &[config_map(), sts]);
}

fn apps(fake: &FakeApiServer) -> Api<Application> {
    Api::namespaced(fake.client(), ARGO_NS)
}

/// Creates the opted-in Application `argocd/db` as `client` (Argo CD's user, not the service).
pub(crate) async fn create_application(
    client: kube::Client,
    annotations: Value,
    sync_policy: Value,
) {
    let api: Api<DynamicObject> = Api::namespaced_with(client, ARGO_NS, &application_resource());
    let mut annotations = annotations;
    annotations["flux-converger.io/gate"] = json!("reconcile");
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "db", "namespace": ARGO_NS, "annotations": annotations},
        "spec": {"project": "default",
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": NS},
                 "source": {"repoURL": "https://git.example.com/team/deploy.git", "path": "db", "targetRevision": "main"},
                 "syncPolicy": sync_policy}}))
    .unwrap();
    api.create(&PostParams::default(), &app).await.unwrap();
}

async fn wait_app(
    fake: &FakeApiServer,
    what: &str,
    pred: impl Fn(&Application) -> bool,
) -> Application {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let app = apps(fake).get("db").await.unwrap();
        if pred(&app) {
            return app;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waiting for {what}: {app:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) fn synced_at(app: &Application, revision: &str) -> bool {
    app.sync_status() == "Synced" && app.sync_revision().revision == revision
}

pub(crate) fn completed(app: &Application) -> bool {
    !app.operation_requested() && app.operation_state().is_some_and(|s| s.completed())
}

fn pod_uids(fake: &FakeApiServer) -> Vec<String> {
    let mut uids: Vec<String> = fake
        .list("v1", "Pod", Some(NS))
        .iter()
        .filter_map(|p| p["metadata"]["uid"].as_str().map(String::from))
        .collect();
    uids.sort();
    uids
}

fn claim_size(fake: &FakeApiServer, ordinal: usize) -> String {
    fake.get(
        "v1",
        "PersistentVolumeClaim",
        Some(NS),
        &format!("data-db-{ordinal}"),
    )
    .map(|c| {
        c["spec"]["resources"]["requests"]["storage"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    })
    .unwrap_or_default()
}

fn sts(fake: &FakeApiServer) -> Value {
    fake.get("apps/v1", "StatefulSet", Some(NS), "db")
        .expect("the StatefulSet")
}

/// The managers of the object's spec and metadata (the controller's status writes aside).
fn managers(sts: &Value) -> Vec<(String, String)> {
    sts["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["subresource"] != "status")
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or_default().to_string(),
                m["operation"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Binds the claims the StatefulSet controller made (the provisioner's part).
pub(crate) async fn bind_claims(fake: &FakeApiServer) {
    until("two claims", || {
        (0..2).all(|i| {
            fake.get(
                "v1",
                "PersistentVolumeClaim",
                Some(NS),
                &format!("data-db-{i}"),
            )
            .is_some()
        })
    })
    .await;
    for i in 0..2 {
        fake.set_pvc_phase(NS, &format!("data-db-{i}"), "Bound");
    }
    until("two pods", || pod_uids(fake).len() == 2).await;
}

/// Files holding the Argo CD token and the hook's, and the lane's flags naming them.
pub(crate) struct Flags {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) config: ArgoCdConfig,
}

pub(crate) fn flags(server: &ArgoCdServer, token: &str, hook_token: &str) -> Flags {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    Flags {
        config: ArgoCdConfig {
            namespaces: vec![ARGO_NS.into()],
            server: server.url.clone(),
            token_file,
            ca_file: Some(server.ca_file.clone()),
            hook_token: Some(hook_token.into()),
        },
        dir,
    }
}

pub(crate) fn tuning(name: &str) -> Tuning {
    Tuning {
        lease: LeaseSettings::new(name),
        backoff: BackoffPolicy {
            base: Duration::from_secs(3600),
            max: Duration::from_secs(3600),
            jitter: 0.0,
        },
        shutdown_grace: Duration::from_secs(30),
        restart_retry: Duration::from_secs(10),
    }
}

async fn get_json(url: String) -> (u16, Value) {
    let response = reqwest::get(url).await.expect("the service answers");
    let code = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn get_text(url: String) -> (u16, String) {
    let response = reqwest::get(url).await.expect("the service answers");
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

/// Which failure shape a case drives.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    ClientSideApply,
    ServerSideApply,
    ServerSideDiff,
}

/// One failure shape from start to end through the running service: Argo CD syncs the
/// StatefulSet at 1Gi, git grows it to 2Gi, Argo CD's sync stops (after its retries) or its
/// comparison does (server-side diff), the service converges and hands back, Argo CD syncs.
async fn a_failure_shape_through_the_service(shape: Shape) {
    let logs = crate::service::captured_logs();
    let token = format!("argocd-token-{:016x}", rand::random::<u64>());
    let hook_token = format!("hook-token-{:016x}", rand::random::<u64>());
    let fake = cluster();
    let repo = Repo::default();
    publish(&repo, REV_A, "1Gi");
    let server = ArgoCdServer::start_with(&token, repo.clone())
        .await
        .unwrap();
    let (annotations, sync_policy, options) = match shape {
        Shape::ClientSideApply => (
            json!({}),
            json!({"automated": {"prune": true, "selfHeal": true},
                   "retry": {"limit": 1, "backoff": {"duration": "5s"}}}),
            vec![],
        ),
        Shape::ServerSideApply => (
            json!({}),
            json!({"automated": {"selfHeal": true}, "syncOptions": ["ServerSideApply=true"],
                   "retry": {"limit": 1}}),
            vec!["ServerSideApply=true".to_string()],
        ),
        // Synced by hand: under server-side diff the StatefulSet missing for a moment during
        // the re-create would let an auto-sync race it (docs/argocd.md, the re-create).
        Shape::ServerSideDiff => (
            json!({"argocd.argoproj.io/compare-options": "ServerSideDiff=true"}),
            json!({"syncOptions": ["ServerSideApply=true"]}),
            vec!["ServerSideApply=true".to_string()],
        ),
    };
    create_application(fake.client(), annotations, sync_policy).await;
    let controller = ArgoCdController::start(fake.client(), repo.clone(), ArgoCdOptions::default());
    if shape == Shape::ServerSideDiff {
        let app = wait_app(&fake, "the first comparison", |a| {
            a.sync_status() == "OutOfSync"
        })
        .await;
        let patch =
            flux_converger::argocd::operation::hand_back(&app, &app.sync_revision(), "by-hand")
                .unwrap();
        apps(&fake)
            .patch("db", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    wait_app(&fake, "the first sync", |a| {
        completed(a) && synced_at(a, REV_A)
    })
    .await;
    bind_claims(&fake).await;
    let pods = pod_uids(&fake);
    let old_uid = sts(&fake)["metadata"]["uid"].clone();

    let flags = flags(&server, &token, &hook_token);
    let config = test_support::service::config(SERVICE_NS)
        .handoff_timeout(Duration::from_secs(60))
        .argocd(Some(flags.config.clone()))
        .build();
    let running = start_tuned(config, fake.client(), tuning(&format!("argocd-{shape:?}")))
        .await
        .expect("the service starts");
    let base = format!("http://{}", running.addr);

    // Synced at 1Gi: the service waits, saying why.
    let mut row = Value::Null;
    for _ in 0..500 {
        let (_, status) = get_json(format!("{base}/status")).await;
        row = status["applications"][0].clone();
        if row["waiting"].is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(row["kind"], "Application", "{row}");
    assert_eq!(row["gate"], "reconcile", "{row}");
    assert!(row["last"].is_null(), "{row}");

    // Git grows the claims: Argo CD stops; the service converges and hands back.
    publish(&repo, REV_B, "2Gi");
    let app = wait_app(&fake, "the hand-back's sync to end Synced", |a| {
        synced_at(a, REV_B)
            && completed(a)
            && a.operation_state()
                .is_some_and(|s| s.info("flux-converger").is_some_and(|n| n != "by-hand"))
    })
    .await;
    let state = app.operation_state().unwrap();
    assert_eq!(state.phase, "Succeeded", "{state:#?}");
    assert_eq!(
        state.operation.initiated_by.as_ref().unwrap().username,
        "flux-converger"
    );
    let synced_options = state.operation.sync.as_ref().unwrap().sync_options.clone();
    assert_eq!(synced_options, options);
    let nonce = state.info("flux-converger").unwrap().to_string();

    // The record: converged, handed back with that nonce, answered `applied`.
    let mut detail = Value::Null;
    for _ in 0..500 {
        let (code, d) = get_json(format!("{base}/status/applications/{ARGO_NS}/db")).await;
        assert_eq!(code, 200, "{d}");
        detail = d;
        if !detail["revisions"][0]["flux"].is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let record = &detail["revisions"][0];
    assert_eq!(detail["kind"], "Application");
    assert_eq!(record["state"], "converged", "{detail:#}");
    assert_eq!(record["revision"], REV_B, "{detail:#}");
    assert_eq!(record["handoff"]["requestedAt"], json!(nonce), "{detail:#}");
    assert_eq!(record["flux"]["outcome"], "applied", "{detail:#}");
    assert_eq!(record["flux"]["appliedRevision"], REV_B, "{detail:#}");
    assert!(
        record["digest"].as_str().unwrap().starts_with("sha256:"),
        "{detail:#}"
    );
    assert!(
        record["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w == "identity: converged as the service's own identity"),
        "{detail:#}"
    );
    let entry = &record["statefulsets"][0];
    assert_eq!(entry["outcome"], "converged", "{detail:#}");
    assert_eq!(entry["claims"].as_array().unwrap().len(), 2, "{detail:#}");

    // One sync started by the service, with its nonce; nothing else started one after it.
    let handbacks = controller
        .states()
        .iter()
        .filter(|s| s.phase == "Succeeded" && s.completed)
        .count();
    assert_eq!(
        handbacks,
        2,
        "the first sync and the hand-back's: {:#?}",
        controller.states()
    );

    // Converged: claims grown, the StatefulSet re-created as Argo CD's, the pods kept.
    assert_eq!(claim_size(&fake, 0), "2Gi");
    assert_eq!(claim_size(&fake, 1), "2Gi");
    let live = sts(&fake);
    assert_ne!(live["metadata"]["uid"], old_uid, "re-created");
    assert_eq!(
        live["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    assert_eq!(
        live["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"],
        "db:apps/StatefulSet:apps/db"
    );
    let operation = if options.is_empty() {
        "Update"
    } else {
        "Apply"
    };
    assert_eq!(
        managers(&live),
        vec![("argocd-controller".to_string(), operation.to_string())],
        "Argo CD's sync owns the re-created StatefulSet alone"
    );
    assert_eq!(pod_uids(&fake), pods, "a pod was replaced");

    // `/status`, the dashboard, the metrics, the Event on the Application.
    let (_, status) = get_json(format!("{base}/status")).await;
    let row = &status["applications"][0];
    assert_eq!(row["last"]["state"], "converged", "{status:#}");
    assert_eq!(status["kustomizations"], json!([]));
    let (code, page) = get_text(format!("{base}/applications/{ARGO_NS}/db")).await;
    assert_eq!(code, 200);
    assert!(page.contains(REV_B), "{page}");
    let (_, overview) = get_text(format!("{base}/")).await;
    assert!(overview.contains("/applications/argocd/db"), "{overview}");
    let (_, metrics) = get_text(format!("http://{}/metrics", running.metrics_addr)).await;
    for series in [
        "flux_converger_revisions_total{state=\"converged\",kind=\"Application\"}",
        "flux_converger_claims_grown_total{kind=\"Application\"} 2",
        "flux_converger_statefulsets_recreated_total{kind=\"Application\"} 1",
    ] {
        assert!(metrics.contains(series), "{series} missing from\n{metrics}");
    }
    let events: Vec<Value> = fake
        .list("events.k8s.io/v1", "Event", Some(ARGO_NS))
        .into_iter()
        .filter(|e| e["regarding"]["kind"] == "Application" && e["reason"] == "Converged")
        .collect();
    assert!(!events.is_empty(), "no Converged Event on the Application");
    // Argo CD's answer gets its own Event, and the revision is counted once, at the hand-back.
    let answered = || {
        fake.list("events.k8s.io/v1", "Event", Some(ARGO_NS))
            .into_iter()
            .any(|e| e["regarding"]["kind"] == "Application" && e["reason"] == "HandoffApplied")
    };
    for _ in 0..500 {
        if answered() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(answered(), "no HandoffApplied Event on the Application");
    assert!(
        metrics.contains(
            "flux_converger_revisions_total{state=\"converged\",kind=\"Application\"} 1\n"
        ),
        "{metrics}"
    );

    // The token appears in no log line, record, page or Event.
    let (_, page_json) = get_text(format!("{base}/status/applications/{ARGO_NS}/db")).await;
    let records: Vec<String> = fake
        .list("v1", "ConfigMap", Some(SERVICE_NS))
        .iter()
        .map(Value::to_string)
        .collect();
    let all_events: Vec<String> = fake
        .list("events.k8s.io/v1", "Event", None)
        .iter()
        .map(Value::to_string)
        .collect();
    running.shutdown().await;
    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
    for (what, text) in [
        ("the log", logged.as_str()),
        ("a page", page.as_str()),
        ("the detail", page_json.as_str()),
        ("the overview", overview.as_str()),
        ("the records", &records.join("\n")),
        ("the Events", &all_events.join("\n")),
    ] {
        assert!(!text.contains(&token), "the Argo CD token in {what}");
        assert!(!text.contains(&hook_token), "the hook token in {what}");
    }
    drop(flags.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_side_apply_is_converged_and_handed_back_through_the_service() {
    a_failure_shape_through_the_service(Shape::ClientSideApply).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_is_converged_and_handed_back_through_the_service() {
    a_failure_shape_through_the_service(Shape::ServerSideApply).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_diff_is_converged_and_handed_back_through_the_service() {
    a_failure_shape_through_the_service(Shape::ServerSideDiff).await;
}

// ------------------------------------------------------------------- one run at a time

/// The world after Argo CD stopped on the grown StatefulSet under client-side apply (the
/// fixture Application: revision [`REV_B`] failed after its retries), with `db` live at 1Gi,
/// its claims Bound and its pods running; the API server stand-in serves [`REV_B`]'s targets.
pub(crate) struct Stopped {
    pub(crate) fake: FakeApiServer,
    pub(crate) server: ArgoCdServer,
    _dir: tempfile::TempDir,
    token_file: std::path::PathBuf,
}

fn fixture_application() -> Value {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/argocd/application-failed-client-side-apply.yaml"),
    )
    .unwrap();
    let mut app: Value = serde_saphyr::from_str(&text).unwrap();
    for field in ["resourceVersion", "uid", "creationTimestamp", "generation"] {
        app["metadata"].as_object_mut().unwrap().remove(field);
    }
    app
}

pub(crate) async fn stopped(edit: impl FnOnce(&mut Value)) -> Stopped {
    let fake = cluster();
    let repo = Repo::default();
    publish(&repo, REV_A, "1Gi");
    let live = &repo.at(ARGO_NS, "db", REV_A).unwrap().objects[1];
    let live: k8s_openapi::api::apps::v1::StatefulSet =
        serde_json::from_value(live.clone()).unwrap();
    use flux_converger::cluster::Cluster as _;
    flux_converger::cluster::KubeCluster::new(fake.client(), T)
        .apply(&live)
        .await
        .unwrap();
    bind_claims(&fake).await;
    publish(&repo, REV_B, "2Gi");
    let token = "stand-in-token";
    let server = ArgoCdServer::start_with(token, repo).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).unwrap();
    let mut app = fixture_application();
    edit(&mut app);
    fake.seed(app);
    fake.clear_requests();
    Stopped {
        fake,
        server,
        _dir: dir,
        token_file,
    }
}

impl Stopped {
    /// The Application runs as the service builds them, over this world.
    pub(crate) fn gate(&self) -> AppGate {
        self.gate_with(&self.server.url, &self.token_file, 1 << 20)
    }

    fn gate_with(&self, server: &str, token_file: &std::path::Path, max_body: u64) -> AppGate {
        let client = self.fake.client();
        let step = ConvergeStep::new(StepConfig {
            client: client.clone(),
            namespace: SERVICE_NS.into(),
            shard: Shard::Unsharded,
            call_timeout: T,
            metrics: Metrics::default(),
            fence: None,
        });
        AppGate::new(
            AppConfig {
                client: client.clone(),
                results: Results::of_kind(
                    client.clone(),
                    SERVICE_NS.into(),
                    T,
                    Shard::Unsharded,
                    Kind::APPLICATION,
                ),
                events: EventSink::new(client, None, Some("flux-converger-0".into())).unwrap(),
                call_timeout: T,
                handoff_timeout: Duration::from_secs(60),
                default_service_account: None,
                argocd_namespace: ARGO_NS.into(),
                api: ArgoCdApi::new(&ApiOptions {
                    server: server.into(),
                    token_file: token_file.into(),
                    ca_file: Some(self.server.ca_file.clone()),
                    timeout: T,
                    max_body,
                })
                .unwrap(),
                max_body,
            },
            step,
        )
    }

    /// The writes to anything but the service's own records and Events.
    fn cluster_writes(&self) -> Vec<String> {
        self.fake
            .writes()
            .iter()
            .filter(|w| !w.path.contains("/configmaps") && !w.path.contains("/events"))
            .map(|w| format!("{:?} {}", w.method, w.path))
            .collect()
    }

    fn app(&self) -> Value {
        self.fake
            .get("argoproj.io/v1alpha1", "Application", Some(ARGO_NS), "db")
            .unwrap()
    }
}

pub(crate) async fn run(gate: &AppGate) -> GateOutcome {
    gate.run(ARGO_NS, "db", Trigger::Watch).await
}

fn waiting(gate: &AppGate) -> String {
    gate.waiting(&flux_converger::model::Key::new(
        Kind::APPLICATION,
        ARGO_NS,
        "db",
    ))
    .unwrap_or_default()
}

/// Every state the issue lists as "nothing written": the run ends without a write to the
/// cluster (not even a record), and `/status` says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_any_other_state_nothing_is_written() {
    type Edit = fn(&mut Value);
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "held",
            |a| a["metadata"]["annotations"]["flux-converger.io/hold"] = json!("migrating"),
            "held: migrating",
        ),
        (
            "another destination",
            |a| {
                a["spec"]["destination"] =
                    json!({"server": "https://other.example.com", "namespace": "apps"})
            },
            "is not the cluster the service runs in",
        ),
        (
            "an operation in flight",
            |a| {
                a["operation"] =
                    json!({"sync": {"revision": REV_B}, "initiatedBy": {"username": "admin"}})
            },
            "an operation is in flight",
        ),
        (
            "retries left",
            |a| {
                let s = &mut a["status"]["operationState"];
                s["phase"] = json!("Running");
                s["message"] = json!(
                    "one or more objects failed to apply, reason: StatefulSet.apps \"db\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas' are forbidden. Retrying attempt #1 at 3:04PM."
                );
                s["retryCount"] = json!(1);
                a["operation"] = s["operation"].clone();
            },
            "Argo CD retries the sync",
        ),
        (
            "a different failure",
            |a| {
                let s = &mut a["status"]["operationState"];
                s["message"] = json!(
                    "one or more objects failed to apply, reason: admission webhook denied the request"
                );
                s["syncResult"]["resources"][1]["message"] =
                    json!("admission webhook denied the request");
            },
            "not on the StatefulSet immutable-field error",
        ),
        (
            "synced by hand since",
            |a| a["status"]["sync"]["status"] = json!("Synced"),
            "the Application is Synced now",
        ),
    ];
    for (name, edit, words) in cases {
        let world = stopped(edit).await;
        let gate = world.gate();
        assert_eq!(run(&gate).await, GateOutcome::NotHandled, "{name}");
        assert!(waiting(&gate).contains(words), "{name}: {}", waiting(&gate));
        assert!(
            world.fake.writes().is_empty(),
            "{name}: {:?}",
            world.fake.writes()
        );
        assert!(
            world.server.requests().is_empty(),
            "{name}: Argo CD's API server asked"
        );
    }

    // Not opted in (or opted in with a value the gate refuses): not handled, not shown.
    for value in [None, Some("suspend"), Some("off")] {
        let world = stopped(|a| match value {
            None => {
                a["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove("flux-converger.io/gate");
            }
            Some(v) => a["metadata"]["annotations"]["flux-converger.io/gate"] = json!(v),
        })
        .await;
        let gate = world.gate();
        assert_eq!(run(&gate).await, GateOutcome::NotHandled, "{value:?}");
        assert_eq!(waiting(&gate), "", "{value:?}");
        assert!(world.fake.writes().is_empty(), "{value:?}");
    }
}

/// The revision compared moved on since the sync failed: a refresh is asked once (the only
/// write: the annotation Argo CD removes once done), then the run waits for Argo CD's own next
/// sync; nothing of the StatefulSet is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_revision_asks_a_refresh_once_and_writes_nothing_else() {
    let world = stopped(|a| a["status"]["sync"]["revision"] = json!(REV_C)).await;
    let gate = world.gate();
    assert_eq!(run(&gate).await, GateOutcome::NotHandled);
    assert!(
        waiting(&gate).contains("asked it to refresh"),
        "{}",
        waiting(&gate)
    );
    assert_eq!(
        world.app()["metadata"]["annotations"]["argocd.argoproj.io/refresh"],
        "normal"
    );
    let writes = world.cluster_writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(writes[0].starts_with("PATCH") && writes[0].contains("/applications/db"));
    // Argo CD refreshed (the annotation removed), and still compares the newer revision.
    world
        .fake
        .modify(
            "argoproj.io/v1alpha1",
            "Application",
            Some(ARGO_NS),
            "db",
            |a| {
                a["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove("argocd.argoproj.io/refresh");
            },
        )
        .unwrap();
    world.fake.clear_requests();
    assert_eq!(run(&gate).await, GateOutcome::NotHandled);
    assert!(
        waiting(&gate).contains("its next sync decides"),
        "{}",
        waiting(&gate)
    );
    assert!(world.fake.writes().is_empty(), "{:?}", world.fake.writes());
    assert!(world.server.requests().is_empty());
}

/// A shrink is refused (the record says so, Argo CD is not handed back), once: the next run
/// writes nothing, not even a record, until the revision or the spec changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shrink_is_refused_once_and_nothing_is_written() {
    let world = stopped(|_| {}).await;
    world
        .server
        .set_targets(ARGO_NS, "db", vec![tracked_sts("512Mi")]);
    let gate = world.gate();
    assert_eq!(run(&gate).await, GateOutcome::Done(RevisionState::Refused));
    let record = gate.results().last(ARGO_NS, "db").unwrap();
    let refusal = record.statefulsets[0].refusal.as_ref().expect("a refusal");
    assert_eq!(refusal.code.as_str(), "shrink", "{record:#?}");
    assert!(record.handoff.is_none());
    assert!(
        world.cluster_writes().is_empty(),
        "{:?}",
        world.cluster_writes()
    );
    assert!(world.app().get("operation").is_none_or(Value::is_null));
    world.fake.clear_requests();
    assert_eq!(run(&gate).await, GateOutcome::Done(RevisionState::Refused));
    assert!(
        world.fake.writes().is_empty(),
        "refused again: {:?}",
        world.fake.writes()
    );
    assert_eq!(gate.results().history(ARGO_NS, "db").len(), 1);
}

fn tracked_sts(size: &str) -> Value {
    let mut sts = statefulset(NS, "db", size);
    sts["spec"]["replicas"] = json!(2);
    test_support::argocd_standin::tracked(&sts, "db", NS)
}

/// What Argo CD's API server answers decides nothing written: a wrong token and a server not
/// listening fail the run (retried) with the reason; an answer over the cap, one that is not
/// JSON, and a StatefulSet outside the project's destinations are refused. The token is in
/// none of the records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_servers_answer_is_checked_before_anything_is_written() {
    // A wrong token: 401, failed with Argo CD's words.
    let world = stopped(|_| {}).await;
    let wrong = world._dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-token").unwrap();
    let gate = world.gate_with(&world.server.url, &wrong, 1 << 20);
    let outcome = run(&gate).await;
    let GateOutcome::Failed { message } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(message.contains("HTTP 401"), "{message}");
    assert!(message.contains("token signature is invalid"), "{message}");
    let record = gate.results().last(ARGO_NS, "db").unwrap();
    assert_eq!(record.state, RevisionState::Failed);
    assert_eq!(record.error.as_ref().unwrap().step, "managed-resources");
    assert!(
        world.cluster_writes().is_empty(),
        "{:?}",
        world.cluster_writes()
    );
    let kept = serde_json::to_string(&record).unwrap();
    assert!(!kept.contains("not-the-token") && !kept.contains("stand-in-token"));

    // Nothing listening.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let gate = world.gate_with(&format!("https://{closed}"), &world.token_file, 1 << 20);
    let outcome = run(&gate).await;
    assert!(
        matches!(&outcome, GateOutcome::Failed { message } if message.contains("GET https://")),
        "{outcome:?}"
    );
    assert!(world.cluster_writes().is_empty());

    // Over the cap.
    let gate = world.gate_with(&world.server.url, &world.token_file, 64);
    assert_eq!(run(&gate).await, GateOutcome::Done(RevisionState::Refused));
    let record = gate.results().last(ARGO_NS, "db").unwrap();
    assert!(
        record
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("cap (--max-unpacked-size)"),
        "{record:#?}"
    );
    assert!(world.cluster_writes().is_empty());

    // A targetState that is not JSON.
    let world = stopped(|_| {}).await;
    world.server.set_answer(
        ARGO_NS,
        "db",
        &json!({"items": [{"group": "apps", "kind": "StatefulSet", "namespace": NS, "name": "db",
                           "targetState": "{not json"}]})
        .to_string(),
    );
    let gate = world.gate();
    assert_eq!(run(&gate).await, GateOutcome::Done(RevisionState::Refused));
    assert!(world.cluster_writes().is_empty());

    // A project whose destinations leave the StatefulSet's namespace out.
    let world = stopped(|_| {}).await;
    world
        .fake
        .modify(
            "argoproj.io/v1alpha1",
            "AppProject",
            Some(ARGO_NS),
            "default",
            |p| p["spec"]["destinations"] = json!([{"server": "*", "namespace": "other"}]),
        )
        .unwrap();
    let gate = world.gate();
    assert_eq!(run(&gate).await, GateOutcome::Done(RevisionState::Refused));
    let record = gate.results().last(ARGO_NS, "db").unwrap();
    assert!(
        record
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("namespace apps is not permitted in project 'default'"),
        "{record:#?}"
    );
    assert!(
        world.cluster_writes().is_empty(),
        "{:?}",
        world.cluster_writes()
    );
}

/// The run converges the fixture's stop and hands back as Argo CD's own API writes a sync: an
/// update of the Application carrying the resourceVersion it read, `operation` with the
/// options and retry copied, `initiatedBy` and the nonce, `operationState` cleared. The
/// answer is read from the finished state carrying the nonce; a second identical failure is
/// not converged again until the revision or the spec changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hand_back_and_a_second_identical_failure() {
    let world = stopped(|_| {}).await;
    let gate = world.gate();
    assert_eq!(
        run(&gate).await,
        GateOutcome::Done(RevisionState::Converged)
    );
    let updates: Vec<_> = world
        .fake
        .writes()
        .into_iter()
        .filter(|w| w.path.contains("/applications/"))
        .collect();
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(updates[0].method, Method::PUT);
    assert_eq!(updates[0].field_manager.as_deref(), Some("flux-converger"));
    let app = world.app();
    let nonce = gate
        .results()
        .last(ARGO_NS, "db")
        .unwrap()
        .handoff
        .unwrap()
        .requested_at
        .unwrap();
    assert_eq!(
        app["operation"],
        json!({"sync": {"revision": REV_B, "syncOptions": ["CreateNamespace=true"], "syncStrategy": {"hook": {}}},
               "initiatedBy": {"username": "flux-converger"},
               "info": [{"name": "flux-converger", "value": nonce}],
               "retry": {"limit": 2, "backoff": {"duration": "5s", "factor": 2, "maxDuration": "3m"}}})
    );
    assert!(app["status"]["operationState"].is_null(), "{app:#}");
    // Waiting for Argo CD: nothing more written.
    world.fake.clear_requests();
    assert_eq!(
        run(&gate).await,
        GateOutcome::Done(RevisionState::Converged)
    );
    assert!(world.cluster_writes().is_empty());

    // Argo CD's sync fails again on the same error.
    let failed = fixture_application()["status"]["operationState"].clone();
    world
        .fake
        .modify(
            "argoproj.io/v1alpha1",
            "Application",
            Some(ARGO_NS),
            "db",
            |a| {
                a.as_object_mut().unwrap().remove("operation");
                let mut state = failed.clone();
                state["operation"] = json!({"sync": {"revision": REV_B},
                "initiatedBy": {"username": "flux-converger"},
                "info": [{"name": "flux-converger", "value": nonce}]});
                a["status"]["operationState"] = state;
            },
        )
        .unwrap();
    assert_eq!(
        run(&gate).await,
        GateOutcome::Done(RevisionState::Converged)
    );
    let record = gate.results().last(ARGO_NS, "db").unwrap();
    let flux = record.flux.as_ref().unwrap();
    assert_eq!(flux.outcome.as_str(), "failed");
    assert!(
        flux.message
            .as_deref()
            .unwrap()
            .starts_with("Failed: one or more objects")
    );
    world.fake.clear_requests();
    assert_eq!(run(&gate).await, GateOutcome::NotHandled);
    assert!(
        waiting(&gate).contains("the hand-back failed on the same error"),
        "{}",
        waiting(&gate)
    );
    assert!(world.fake.writes().is_empty(), "{:?}", world.fake.writes());
    // A changed spec (not a status write, which moves the generation too) is a new attempt.
    world
        .fake
        .modify(
            "argoproj.io/v1alpha1",
            "Application",
            Some(ARGO_NS),
            "db",
            |a| {
                a["status"]["reconciledAt"] = json!("2026-08-22T11:00:00Z");
            },
        )
        .unwrap();
    assert_eq!(run(&gate).await, GateOutcome::NotHandled);
    world
        .fake
        .modify(
            "argoproj.io/v1alpha1",
            "Application",
            Some(ARGO_NS),
            "db",
            |a| {
                a["spec"]["syncPolicy"]["syncOptions"] =
                    json!(["CreateNamespace=true", "Validate=false"]);
            },
        )
        .unwrap();
    assert_eq!(
        run(&gate).await,
        GateOutcome::Done(RevisionState::Converged)
    );
}

/// `POST /hook/argocd` (Argo CD's notifications) only wakes an Application up: the bearer token
/// first (401 without it), the body under `/hook`'s cap (413) and read as an Application's name
/// (400 otherwise); a handled one is queued and re-read, another is answered with nothing
/// queued. `--status-auth=kubernetes` shows an Application's results to whoever may `get` it
/// (`applications.argoproj.io`) and to no one else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_argocd_hook_wakes_an_application_and_status_auth_reads_it_per_application() {
    use flux_converger::http::{HttpConfig, StatusAuthMode};
    let world = stopped(|a| a["status"]["sync"]["status"] = json!("Synced")).await;
    let fake = &world.fake;
    fake.add_token("reader-token", "reader", &[]);
    fake.add_token("other-token", "other", &[]);
    fake.grant(
        ARGO_NS,
        "reader",
        json!([{"apiGroups": ["argoproj.io"], "resources": ["applications"], "verbs": ["get"]}]),
    );
    fake.grant(
        ARGO_NS,
        "other",
        json!([{"apiGroups": ["kustomize.toolkit.fluxcd.io"], "resources": ["kustomizations"], "verbs": ["get"]}]),
    );
    let hook_token = "h00k-t0ken";
    let flags = flags(&world.server, "stand-in-token", hook_token);
    let config = test_support::service::config(SERVICE_NS)
        .argocd(Some(flags.config.clone()))
        .http(HttpConfig {
            status_auth: StatusAuthMode::Kubernetes,
            ..HttpConfig::default()
        })
        .build();
    let running = start_tuned(config, fake.client(), tuning("argocd-hook"))
        .await
        .expect("the service starts");
    let base = format!("http://{}", running.addr);
    // A connection per request: a pooled one the server closes as idle could be reused at that
    // very moment (a request lost to the race, not to the service).
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let status = |token: &'static str, path: String| {
        let http = http.clone();
        async move {
            let r = http.get(path).bearer_auth(token).send().await.unwrap();
            let code = r.status().as_u16();
            (
                code,
                serde_json::from_str::<Value>(&r.text().await.unwrap()).unwrap_or(Value::Null),
            )
        }
    };
    let mut rows = Value::Null;
    for _ in 0..500 {
        let (_, body) = status("reader-token", format!("{base}/status")).await;
        rows = body["applications"].clone();
        if rows[0]["waiting"].is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(rows[0]["name"], "db", "{rows}");
    assert!(
        rows[0]["waiting"].as_str().unwrap().contains("Synced now"),
        "{rows}"
    );
    let (code, _) = status(
        "reader-token",
        format!("{base}/status/applications/{ARGO_NS}/db"),
    )
    .await;
    assert_eq!(code, 200);
    let (code, body) = status("other-token", format!("{base}/status")).await;
    assert_eq!(code, 200);
    assert_eq!(body["applications"], json!([]), "{body}");
    let (code, body) = status(
        "other-token",
        format!("{base}/status/applications/{ARGO_NS}/db"),
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("applications.argoproj.io \"db\" is forbidden"),
        "{body}"
    );

    let post = |token: Option<&'static str>, body: String| {
        let http = http.clone();
        let url = format!("{base}/hook/argocd");
        async move {
            let mut request = http.post(url).body(body);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let r = request.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // The body Argo CD's notifications post with the shipped template.
    let named = |name: &str| crate::manifests::notification_body(ARGO_NS, name, "0b6f3c2a");
    assert_eq!(post(None, named("db")).await.0, 401);
    assert_eq!(post(Some("wrong"), named("db")).await.0, 401);
    assert_eq!(post(Some(hook_token), "not json".into()).await.0, 400);
    let kind = json!({"kind": "Kustomization", "namespace": ARGO_NS, "name": "db"}).to_string();
    assert_eq!(post(Some(hook_token), kind).await.0, 400);
    // A body announced over the cap is answered 413 before any of it is read: sent headers
    // only, on a socket of its own (a client still writing 3 MiB may meet the close that
    // follows the answer as a broken pipe instead of reading the answer).
    let mut socket = tokio::net::TcpStream::connect(running.addr).await.unwrap();
    let head = format!(
        "POST /hook/argocd HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {hook_token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        3 * 1024 * 1024 + 1
    );
    tokio::io::AsyncWriteExt::write_all(&mut socket, head.as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::io::AsyncReadExt::read_to_end(&mut socket, &mut answer),
    )
    .await;
    assert!(read.is_ok(), "no answer to an oversized body's headers");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains("the body is over 3145728 bytes"),
        "{answer}"
    );
    let (code, body) = post(Some(hook_token), named("absent")).await;
    assert_eq!((code, body.as_str()), (202, r#"{"queued":[]}"#));
    fake.clear_requests();
    let (code, body) = post(Some(hook_token), named("db")).await;
    assert_eq!(
        (code, body.as_str()),
        (202, r#"{"queued":["Application/argocd/db"]}"#)
    );
    // Re-read by its run.
    until("the Application re-read", || {
        fake.requests().iter().any(|r| {
            r.method == Method::GET
                && r.path.ends_with("/namespaces/argocd/applications/db")
                && !r.watch
        })
    })
    .await;
    running.shutdown().await;

    // Without a hook token the route is not served.
    let config = test_support::service::config(SERVICE_NS)
        .argocd(Some(ArgoCdConfig {
            hook_token: None,
            ..flags.config.clone()
        }))
        .build();
    let running = start_tuned(config, fake.client(), tuning("argocd-no-hook"))
        .await
        .expect("the service starts");
    let r = http
        .post(format!("http://{}/hook/argocd", running.addr))
        .bearer_auth(hook_token)
        .body(named("db"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    running.shutdown().await;
}

/// An intent an Application's converge left (`Application/argocd/db`) resumes only as the
/// identity Argo CD would sync that Application with now (its AppProject's
/// `destinationServiceAccounts` with impersonation on in `argocd-cm`, else the service's own),
/// and re-creates its StatefulSet as Argo CD writes it (client-side: a create by
/// `argocd-controller`, recorded as `Update`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_intent_resumes_only_as_its_applications_identity() {
    use flux_converger::cluster::Cluster as _;
    use flux_converger::journal::{Intent, OWN_IDENTITY};
    use flux_converger::service::resume::{Owners, cluster_for_intent};
    let world = stopped(|_| {}).await;
    let fake = &world.fake;
    let desired: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(
        flux_converger::argocd::recreate::with_last_applied(&tracked_sts("2Gi")),
    )
    .unwrap();
    let intent = |act_as: &str| Intent {
        namespace: NS.into(),
        name: "db".into(),
        uid: "u".into(),
        desired: desired.clone(),
        plan: json!({}),
        recorded_at: "2026-08-22T10:31:00Z".into(),
        revision: Some(REV_B.into()),
        deleting: true,
        act_as: Some(act_as.into()),
        kustomization: Some("Application/argocd/db".into()),
    };
    let owners = Owners {
        default_service_account: None,
        argocd_namespace: Some(ARGO_NS),
    };
    let resume = |i: Intent, owners: Owners<'static>| {
        let client = fake.client();
        async move { cluster_for_intent(&client, &i, &owners, T).await }
    };
    let tenant = "system:serviceaccount:apps:deployer";
    assert!(resume(intent(OWN_IDENTITY), owners).await.is_ok());
    let refused = resume(intent(tenant), owners).await.err().unwrap();
    assert!(
        refused
            .to_string()
            .contains("Application argocd/db acts as \"-\""),
        "{refused}"
    );
    let refused = resume(intent(OWN_IDENTITY), Owners::default())
        .await
        .err()
        .unwrap();
    assert!(
        refused.to_string().contains("without --argocd-server"),
        "{refused}"
    );

    fake.seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "namespace": ARGO_NS},
        "data": {"application.sync.impersonation.enabled": "true"}}));
    fake.modify(
        "argoproj.io/v1alpha1",
        "AppProject",
        Some(ARGO_NS),
        "default",
        |p| {
            p["spec"]["destinationServiceAccounts"] =
                json!([{"server": "*", "namespace": "apps", "defaultServiceAccount": "deployer"}]);
        },
    )
    .unwrap();
    let refused = resume(intent(OWN_IDENTITY), owners).await.err().unwrap();
    assert!(
        refused.to_string().contains("never resumes as the service"),
        "{refused}"
    );
    let cluster = resume(intent(tenant), owners)
        .await
        .expect("resumed as the tenant");

    // Its re-create is Argo CD's: a create by argocd-controller, as the tenant.
    fake.grant(
        NS,
        tenant,
        json!([{"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["create"]}]),
    );
    fake.remove("apps/v1", "StatefulSet", Some(NS), "db");
    let created = cluster.apply(&desired).await.unwrap();
    let managers: Vec<(String, String)> = created
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        managers,
        vec![("argocd-controller".into(), "Update".into())]
    );
    let create = fake
        .writes()
        .into_iter()
        .rev()
        .find(|w| w.method == Method::POST && w.path.ends_with("/statefulsets"))
        .expect("a create");
    assert_eq!(create.impersonate_user.as_deref(), Some(tenant));
}

/// `--watch-label-selector` applies to Applications as to the other kinds: the watch asks the
/// API server for the selected ones only, so an opted-in Application outside the selector is
/// neither shown nor run, and `/hook/argocd` naming it queues nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_label_selector_applies_to_applications() {
    let world = stopped(|a| {
        a["metadata"]["labels"] = json!({"sharding.fluxcd.io/key": "shard1"});
        a["status"]["sync"]["status"] = json!("Synced");
    })
    .await;
    let fake = &world.fake;
    let mut other = fixture_application();
    other["metadata"]["name"] = json!("other");
    other["metadata"]["labels"] = json!({"sharding.fluxcd.io/key": "shard2"});
    fake.seed(other);
    let hook_token = "h00k-t0ken";
    let flags = flags(&world.server, "stand-in-token", hook_token);
    let config = test_support::service::config(SERVICE_NS)
        .argocd(Some(flags.config.clone()))
        .watch_label_selector(Some("sharding.fluxcd.io/key=shard1".into()))
        .build();
    let running = start_tuned(config, fake.client(), tuning("argocd-shard"))
        .await
        .expect("the service starts");
    let base = format!("http://{}", running.addr);
    let mut rows = Value::Null;
    for _ in 0..500 {
        let (_, status) = get_json(format!("{base}/status")).await;
        rows = status["applications"].clone();
        if rows[0]["waiting"].is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["db"], "{rows}");
    let (code, _) = get_json(format!("{base}/status/applications/{ARGO_NS}/other")).await;
    assert_eq!(code, 404);
    let answer = reqwest::Client::new()
        .post(format!("{base}/hook/argocd"))
        .bearer_auth(hook_token)
        .body(crate::manifests::notification_body(ARGO_NS, "other", "u"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 202);
    assert_eq!(answer.text().await.unwrap(), r#"{"queued":[]}"#);
    let listed_by_selector = fake.requests().iter().any(|r| {
        r.method == Method::GET
            && r.path.ends_with("/namespaces/argocd/applications")
            && r.query
                .contains("labelSelector=sharding.fluxcd.io%2Fkey%3Dshard1")
    });
    assert!(
        listed_by_selector,
        "the Applications are listed by the selector"
    );
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.path.ends_with("/applications/other") && !r.watch),
        "the Application outside the selector was read"
    );
    running.shutdown().await;
}
