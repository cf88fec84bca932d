//! Converge against the fake kube-apiserver (crates/fake-apiserver): the procedure end to end,
//! refusals with zero writes, a fault at every write followed by a re-run, crashes, races,
//! a stuck orphan finalizer, and the CLI over a socket.

use std::collections::BTreeMap;
use std::time::Duration;

use flux_converger::cluster::KubeCluster;
use flux_converger::cluster::tenant::TenantCluster;
use flux_converger::converge::{
    self, ClaimAction, ConvergeError, Options, Outcome, ResumeAction, Step,
    converge as run_converge,
};
use flux_converger::decide::RefusalCode;
use flux_converger::journal::{ConfigMapJournal, Journal};
use http::Method;
use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::{Value, json};

use fake_apiserver::{FakeApiServer, Fault, FaultRule, GcMode, KubeVersion};

const NS: &str = "default";
const JOURNAL_NS: &str = "flux-system";

fn fixture(path: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// `web`: two templates (`data`, `logs`), 3 replicas, as git declares it.
fn statefulset(data: &str, logs: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": NS,
                     "labels": {"kustomize.toolkit.fluxcd.io/name": "apps",
                                "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}},
        "spec": {
            "serviceName": "web", "replicas": 3, "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "app", "image": "busybox",
                                                  "command": ["sleep", "3600"],
                                                  "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                                                   {"name": "logs", "mountPath": "/logs"}]}]}},
            "volumeClaimTemplates": [
                {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                  "storageClassName": "expandable", "resources": {"requests": {"storage": data}}}},
                {"metadata": {"name": "logs"}, "spec": {"accessModes": ["ReadWriteOnce"],
                  "storageClassName": "expandable", "resources": {"requests": {"storage": logs}}}},
            ],
        }
    })
}

fn desired() -> StatefulSet {
    serde_json::from_value(statefulset("2Gi", "1Gi")).unwrap()
}

fn claim(name: &str, size: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "web"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                 "volumeMode": "Filesystem",
                 "resources": {"requests": {"storage": size}}, "volumeName": format!("pv-{name}")},
    })
}

/// Every claim of `web` as the scenario has them: ordinals 0-2 from the controller (1Gi),
/// `data-web-1` already larger (5Gi), scaled-away ordinal 3 (1Gi), all Bound.
const CLAIMS: &[&str] = &[
    "data-web-0",
    "data-web-1",
    "data-web-2",
    "data-web-3",
    "logs-web-0",
    "logs-web-1",
    "logs-web-2",
    "logs-web-3",
];

async fn world() -> FakeApiServer {
    world_on(FakeApiServer::new()).await
}

async fn world_on(fake: FakeApiServer) -> FakeApiServer {
    flux_converger::tls::install_crypto_provider();
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    // Claims that exist before the controller runs: an already larger one, scaled-away ones.
    fake.seed(claim("data-web-1", "5Gi"));
    fake.seed(claim("data-web-3", "1Gi"));
    fake.seed(claim("logs-web-3", "1Gi"));
    fake.enable_statefulset_controller();
    // Created through the API, so the live object carries the server's defaults.
    {
        use flux_converger::cluster::Cluster as _;
        let live: StatefulSet = serde_json::from_value(statefulset("1Gi", "1Gi")).unwrap();
        KubeCluster::new(fake.client(), Duration::from_secs(5))
            .apply(&live)
            .await
            .unwrap();
    }
    for _ in 0..3000 {
        if CLAIMS.iter().all(|c| {
            fake.get("v1", "PersistentVolumeClaim", Some(NS), c)
                .is_some()
        }) && (0..3).all(|i| {
            fake.get("v1", "Pod", Some(NS), &format!("web-{i}"))
                .is_some()
        }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for c in CLAIMS {
        fake.set_pvc_phase(NS, c, "Bound");
    }
    fake.clear_requests();
    fake
}

fn cluster(fake: &FakeApiServer) -> (KubeCluster, ConfigMapJournal) {
    let client = fake.client();
    (
        KubeCluster::new(client.clone(), Duration::from_secs(5)),
        ConfigMapJournal::new(client, JOURNAL_NS, Duration::from_secs(5)),
    )
}

fn opts() -> Options {
    Options {
        dry_run: false,
        wait_timeout: Duration::from_secs(5),
        revision: None,
        fence: None,
        act_as: None,
        in_place: Default::default(),
        kustomization: None,
        resume_as_operator: false,
        renders: None,
        known_states: Default::default(),
    }
}

/// [`opts`] with a render that has default/web (as the command's file does).
fn rendered_opts() -> Options {
    Options {
        renders: Some(std::sync::Arc::new(
            [(NS.to_string(), "web".to_string())].into(),
        )),
        ..opts()
    }
}

/// The intent records in the journal namespace (Secrets since issue 27).
fn intent_records(fake: &FakeApiServer) -> usize {
    fake.list("v1", "Secret", Some(JOURNAL_NS)).len()
}

fn uid(v: &Value) -> String {
    v["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn storage(fake: &FakeApiServer, claim: &str) -> String {
    let c = fake
        .get("v1", "PersistentVolumeClaim", Some(NS), claim)
        .unwrap();
    c["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .unwrap()
        .to_string()
}

fn writes(fake: &FakeApiServer) -> Vec<String> {
    fake.requests()
        .iter()
        .filter(|r| r.is_write())
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// The uids of every claim and pod, to tell kept objects from replaced ones.
fn uids(fake: &FakeApiServer) -> BTreeMap<String, String> {
    let claims = fake.list("v1", "PersistentVolumeClaim", Some(NS));
    let pods = fake.list("v1", "Pod", Some(NS));
    claims
        .iter()
        .map(|c| ("claim", c))
        .chain(pods.iter().map(|p| ("pod", p)))
        .map(|(kind, o)| {
            (
                format!(
                    "{kind}/{}",
                    o["metadata"]["name"].as_str().unwrap_or_default()
                ),
                uid(o),
            )
        })
        .collect()
}

/// Whether every pod's controller is the live StatefulSet (the fake's controller adopts
/// orphans beside the API).
fn pods_adopted(fake: &FakeApiServer) -> bool {
    let sts_uid = fake
        .get("apps/v1", "StatefulSet", Some(NS), "web")
        .map(|s| uid(&s))
        .unwrap_or_default();
    fake.list("v1", "Pod", Some(NS)).iter().all(|p| {
        p["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|o| o.iter().any(|o| o["uid"] == sts_uid.as_str()))
    })
}

/// What a converge is about, independent of the uids a run happens to get: the StatefulSet's
/// spec and labels; each claim's size and whether it is the same object as `before`; each
/// pod's the same and whether the live StatefulSet owns it; the unfinished intents.
fn end_state(fake: &FakeApiServer, before: &BTreeMap<String, String>) -> Value {
    let sts = fake.get("apps/v1", "StatefulSet", Some(NS), "web");
    let sts_uid = sts.as_ref().map(uid).unwrap_or_default();
    let kept = |key: String, o: &Value| before.get(&key).is_some_and(|u| *u == uid(o));
    let claims: BTreeMap<String, Value> = fake
        .list("v1", "PersistentVolumeClaim", Some(NS))
        .into_iter()
        .map(|c| {
            let name = c["metadata"]["name"].as_str().unwrap().to_string();
            let v = json!({"kept": kept(format!("claim/{name}"), &c),
                           "storage": c["spec"]["resources"]["requests"]["storage"]});
            (name, v)
        })
        .collect();
    let pods: BTreeMap<String, Value> = fake
        .list("v1", "Pod", Some(NS))
        .into_iter()
        .map(|p| {
            let owners = p["metadata"]["ownerReferences"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let owned = owners.iter().any(|o| o["uid"] == sts_uid.as_str());
            let name = p["metadata"]["name"].as_str().unwrap().to_string();
            let v = json!({"kept": kept(format!("pod/{name}"), &p), "ownedByLive": owned,
                           "owners": owners.len()});
            (name, v)
        })
        .collect();
    let intents = intent_records(fake);
    json!({
        "statefulset": sts.map(|s| json!({"spec": s["spec"], "labels": s["metadata"]["labels"],
                                          "terminating": s["metadata"].get("deletionTimestamp").is_some()})),
        "claims": claims, "pods": pods, "intents": intents,
    })
}

#[tokio::test]
async fn happy_path_grows_claims_recreates_and_the_pods_are_adopted() {
    let fake = world().await;
    let (c, j) = cluster(&fake);
    let before = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    let before_uids = uids(&fake);
    assert_eq!(before_uids.len(), CLAIMS.len() + 3);

    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();

    assert_eq!(report.outcome, Outcome::Converged, "{report:?}");
    assert!(report.recreated);
    let after = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    assert_eq!(report.old_uid.as_deref(), Some(uid(&before).as_str()));
    assert_eq!(report.new_uid.as_deref(), Some(uid(&after).as_str()));
    assert_ne!(uid(&before), uid(&after));
    assert_eq!(
        after["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    for (claim, want) in [
        ("data-web-0", "2Gi"),
        ("data-web-1", "5Gi"),
        ("data-web-2", "2Gi"),
        ("data-web-3", "2Gi"),
        ("logs-web-0", "1Gi"),
        ("logs-web-3", "1Gi"),
    ] {
        assert_eq!(storage(&fake, claim), want, "{claim}");
    }
    let actions: BTreeMap<&str, ClaimAction> = report
        .claims
        .iter()
        .map(|c| (c.claim.as_str(), c.action))
        .collect();
    assert_eq!(actions["data-web-0"], ClaimAction::Resized);
    assert_eq!(actions["data-web-1"], ClaimAction::Skipped);
    assert_eq!(actions["data-web-3"], ClaimAction::Resized);
    assert_eq!(actions["logs-web-0"], ClaimAction::Skipped);

    // Pods adopted (same uids, owned by the new object), claims kept, nothing else deleted.
    settle(&fake).await;
    let state = end_state(&fake, &before_uids);
    for i in 0..3 {
        let p = &state["pods"][format!("web-{i}")];
        assert_eq!(p["kept"], true, "web-{i} was replaced: {state}");
        assert_eq!(p["ownedByLive"], true, "web-{i} not adopted: {state}");
    }
    for n in CLAIMS {
        assert_eq!(
            state["claims"][n]["kept"], true,
            "{n} was replaced: {state}"
        );
    }
    assert_eq!(
        uids(&fake).len(),
        before_uids.len(),
        "objects appeared or vanished"
    );
    let deletes: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.method == Method::DELETE)
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(
        deletes,
        vec![
            "/apis/apps/v1/namespaces/default/statefulsets/web".to_string(),
            "/api/v1/namespaces/flux-system/secrets/flux-converger-intent.default.web".to_string(),
        ]
    );
    // Field managers: the StatefulSet as Flux, the rest as the converger.
    for r in fake.requests().iter().filter(|r| r.method == Method::PATCH) {
        let want = if r.path.contains("/statefulsets/") {
            "kustomize-controller"
        } else {
            "flux-converger"
        };
        assert_eq!(
            r.field_manager.as_deref(),
            Some(want),
            "{} {}",
            r.method,
            r.path
        );
    }
    assert_eq!(state["intents"], 0);

    // Once converged, a converge writes nothing (not even the journal).
    fake.clear_requests();
    let again = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    assert_eq!(again.outcome, Outcome::Unchanged);
    assert!(writes(&fake).is_empty(), "{:?}", writes(&fake));
}

#[tokio::test]
async fn every_refusal_writes_nothing() {
    let mut shrink = statefulset("512Mi", "1Gi");
    let mut renamed = statefulset("2Gi", "1Gi");
    renamed["spec"]["volumeClaimTemplates"][1]["metadata"]["name"] = json!("cache");
    let mut fixed = statefulset("2Gi", "1Gi");
    fixed["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] = json!("fixed");
    let mut service = statefulset("2Gi", "1Gi");
    service["spec"]["serviceName"] = json!("other");
    let mut selector = statefulset("2Gi", "1Gi");
    selector["spec"]["selector"]["matchLabels"]["tier"] = json!("db");
    selector["spec"]["template"]["metadata"]["labels"]["tier"] = json!("db");
    // The fixture's case: OnDelete over a live rollingUpdate is invalid, not immutable.
    let mut on_delete = statefulset("2Gi", "1Gi");
    on_delete["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    shrink["metadata"]["annotations"] = json!({"case": "shrink"});

    let cases = [
        ("shrink", shrink, RefusalCode::Shrink),
        ("template renamed", renamed, RefusalCode::TemplateRemoved),
        ("class changed", fixed, RefusalCode::StorageClassChanged),
        ("serviceName", service, RefusalCode::ServiceNameChanged),
        ("selector", selector, RefusalCode::SelectorChanged),
        ("updateStrategy OnDelete", on_delete, RefusalCode::Rejected),
    ];
    let fake = world().await;
    let (c, j) = cluster(&fake);
    for (what, object, code) in cases {
        fake.clear_requests();
        let desired: StatefulSet = serde_json::from_value(object).unwrap();
        let report = run_converge(&c, &j, &desired, &opts()).await.unwrap();
        assert_eq!(report.outcome, Outcome::Refused, "{what}: {report:?}");
        let refusal = report.refusal().unwrap();
        assert_eq!(refusal.code, code, "{what}: {}", refusal.message);
        assert!(writes(&fake).is_empty(), "{what}: {:?}", writes(&fake));
        if code == RefusalCode::OtherImmutable {
            assert!(
                refusal
                    .message
                    .contains("updates to statefulset spec for fields other than"),
                "{what}: {}",
                refusal.message
            );
        }
        if code == RefusalCode::Rejected {
            assert!(
                refusal
                    .message
                    .contains("only allowed for updateStrategy 'RollingUpdate'"),
                "{}",
                refusal.message
            );
        }
    }
}

/// `sts` with one more volumeClaimTemplate, `name`, like `logs` (the pods do not mount it).
fn with_template(mut sts: Value, name: &str) -> Value {
    let mut t = sts["spec"]["volumeClaimTemplates"][1].clone();
    t["metadata"]["name"] = json!(name);
    if let Some(ts) = sts["spec"]["volumeClaimTemplates"].as_array_mut() {
        ts.push(t);
    }
    sts
}

/// Each immutable change a re-create carries, alone and mixed with a growth, converges on a
/// server that forbids it in place (the real 422): the StatefulSet is re-created carrying
/// it, the pods are the same and adopted, no claim is replaced or relabelled.
#[tokio::test]
async fn every_change_a_recreate_carries_converges_with_pods_and_claims_kept() {
    let policy = |mut v: Value| {
        v["spec"]["podManagementPolicy"] = json!("OrderedReady");
        v
    };
    let history = |mut v: Value| {
        v["spec"]["revisionHistoryLimit"] = json!(3);
        v
    };
    let labels = |mut v: Value| {
        v["spec"]["volumeClaimTemplates"][0]["metadata"]["labels"] =
            json!({"helm.sh/chart": "db-1.2.3"});
        v
    };
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "podManagementPolicy",
            policy(statefulset("1Gi", "1Gi")),
            vec!["pod-management-policy"],
        ),
        (
            "revisionHistoryLimit",
            history(statefulset("1Gi", "1Gi")),
            vec!["revision-history-limit"],
        ),
        (
            "template labels",
            labels(statefulset("1Gi", "1Gi")),
            vec!["claim-metadata"],
        ),
        (
            "template added",
            with_template(statefulset("1Gi", "1Gi"), "cache"),
            vec!["template-added"],
        ),
        (
            "all of them with a growth",
            with_template(labels(history(policy(statefulset("2Gi", "1Gi")))), "cache"),
            vec![
                "pod-management-policy",
                "revision-history-limit",
                "claim-metadata",
                "storage-grown",
                "template-added",
            ],
        ),
    ];
    for (what, object, classes) in cases {
        let fake = world().await;
        let (c, j) = cluster(&fake);
        let before = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
        let before_uids = uids(&fake);
        let desired: StatefulSet = serde_json::from_value(object.clone()).unwrap();

        let report = run_converge(&c, &j, &desired, &opts()).await.unwrap();

        assert_eq!(report.outcome, Outcome::Converged, "{what}: {report:?}");
        assert!(report.recreated, "{what}");
        let plan = report.plan.as_ref().unwrap();
        let got: Vec<&str> = plan.changes.iter().map(|c| c.class.as_str()).collect();
        assert_eq!(got, classes, "{what}");
        let after = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
        assert_ne!(uid(&before), uid(&after), "{what}: not re-created");
        for field in ["podManagementPolicy", "revisionHistoryLimit"] {
            if let Some(want) = object["spec"].get(field) {
                assert_eq!(&after["spec"][field], want, "{what}: {field}");
            }
        }
        let templates = after["spec"]["volumeClaimTemplates"].as_array().unwrap();
        let want_templates = object["spec"]["volumeClaimTemplates"].as_array().unwrap();
        assert_eq!(templates.len(), want_templates.len(), "{what}");
        for (t, w) in templates.iter().zip(want_templates) {
            assert_eq!(t["metadata"]["name"], w["metadata"]["name"], "{what}");
            assert_eq!(
                t["metadata"].get("labels"),
                w["metadata"].get("labels"),
                "{what}"
            );
        }
        settle(&fake).await;
        let state = end_state(&fake, &before_uids);
        for i in 0..3 {
            let p = &state["pods"][format!("web-{i}")];
            assert_eq!(p["kept"], true, "{what}: web-{i} replaced: {state}");
            assert_eq!(
                p["ownedByLive"], true,
                "{what}: web-{i} not adopted: {state}"
            );
        }
        for n in CLAIMS {
            assert_eq!(state["claims"][n]["kept"], true, "{what}: {n}: {state}");
            let labels = fake
                .get("v1", "PersistentVolumeClaim", Some(NS), n)
                .unwrap()["metadata"]["labels"]
                .clone();
            assert!(
                labels.get("helm.sh/chart").is_none(),
                "{what}: {n} relabelled"
            );
        }
        assert_eq!(state["intents"], 0, "{what}");
        let deletes: Vec<String> = fake
            .requests()
            .iter()
            .filter(|r| r.method == Method::DELETE && r.path.contains("/statefulsets/"))
            .map(|r| r.path.clone())
            .collect();
        assert_eq!(deletes.len(), 1, "{what}: {deletes:?}");
    }
}

/// `sts` with the container also mounting `name` at `/name`.
fn mounting(mut sts: Value, name: &str) -> Value {
    if let Some(m) = sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].as_array_mut()
    {
        m.push(json!({"name": name, "mountPath": format!("/{name}")}));
    }
    sts
}

/// Since 1.33 the server validates the pod template's mounts against its volumes and the claim
/// templates on update too (`tests/fixtures/v1.36/`): the proof, which puts the live templates
/// back, must still let an added and mounted template through. On every emulated server the
/// revision converges: re-created, the pods adopted (never written by the converger: the new
/// mount rolls them, as Flux's own apply would) and every claim kept; a mount that names no
/// template or volume
/// is refused (`rejected`, nothing written) where the server refuses Flux's own apply of it
/// (1.36), and left alone where the server takes it (before 1.33).
#[tokio::test]
async fn an_added_and_mounted_template_converges_on_every_server_version() {
    for version in KubeVersion::ALL {
        for (what, object) in [
            (
                "added and mounted",
                mounting(with_template(statefulset("1Gi", "1Gi"), "cache"), "cache"),
            ),
            (
                "added and mounted, with a growth",
                mounting(with_template(statefulset("2Gi", "1Gi"), "cache"), "cache"),
            ),
        ] {
            let what = format!("{version:?}: {what}");
            let fake = world_on(FakeApiServer::with_version(version)).await;
            let (c, j) = cluster(&fake);
            let before = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
            let before_uids = uids(&fake);
            let desired: StatefulSet = serde_json::from_value(object.clone()).unwrap();

            let report = run_converge(&c, &j, &desired, &opts()).await.unwrap();

            assert_eq!(report.outcome, Outcome::Converged, "{what}: {report:?}");
            assert!(report.recreated, "{what}");
            let after = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
            assert_ne!(uid(&before), uid(&after), "{what}: not re-created");
            let names: Vec<&str> = after["spec"]["volumeClaimTemplates"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|t| t["metadata"]["name"].as_str())
                .collect();
            assert_eq!(names, ["data", "logs", "cache"], "{what}");
            assert_eq!(
                after["spec"]["template"]["spec"].get("volumes"),
                None,
                "{what}: the proof's volume must not reach the re-created object"
            );
            // The new mount changes the pod template, so the StatefulSet controller rolls the
            // pods onto it, as after Flux's own apply of it; the converger writes no pod and
            // keeps every claim, and the controller makes the new template's claims.
            let pod_writes: Vec<String> = writes(&fake)
                .into_iter()
                .filter(|w| w.contains("/pods"))
                .collect();
            assert!(pod_writes.is_empty(), "{what}: {pod_writes:?}");
            settle(&fake).await;
            let state = end_state(&fake, &before_uids);
            for i in 0..3 {
                let p = &state["pods"][format!("web-{i}")];
                assert_eq!(
                    p["ownedByLive"], true,
                    "{what}: web-{i} not adopted: {state}"
                );
                assert!(
                    state["claims"].get(format!("cache-web-{i}")).is_some(),
                    "{what}: cache-web-{i} not made: {state}"
                );
            }
            for n in CLAIMS {
                assert_eq!(state["claims"][n]["kept"], true, "{what}: {n}: {state}");
            }
            assert_eq!(state["intents"], 0, "{what}");
        }

        // A mount of a volume nothing declares.
        let what = format!("{version:?}: a mount of nothing");
        let fake = world_on(FakeApiServer::with_version(version)).await;
        let (c, j) = cluster(&fake);
        let desired: StatefulSet =
            serde_json::from_value(mounting(statefulset("1Gi", "1Gi"), "ghost")).unwrap();
        let report = run_converge(&c, &j, &desired, &opts()).await.unwrap();
        assert!(writes(&fake).is_empty(), "{what}: {:?}", writes(&fake));
        if version >= KubeVersion::V1_36 {
            assert_eq!(report.outcome, Outcome::Refused, "{what}: {report:?}");
            let refusal = report.refusal().unwrap();
            assert_eq!(refusal.code, RefusalCode::Rejected, "{what}");
            assert!(
                refusal.message.contains(
                    "spec.template.spec.containers[0].volumeMounts[2].name: Not found: \"ghost\""
                ),
                "{what}: {}",
                refusal.message
            );
        } else {
            assert_eq!(report.outcome, Outcome::Unchanged, "{what}: {report:?}");
        }
    }
}

/// 1.33 made `revisionHistoryLimit` mutable: on 1.36 the server takes it in place (nothing
/// re-created, `accepted-by-server`); before, the re-create carries it.
#[tokio::test]
async fn revision_history_limit_is_taken_in_place_from_1_33() {
    for version in KubeVersion::ALL {
        let fake = world_on(FakeApiServer::with_version(version)).await;
        let (c, j) = cluster(&fake);
        let before = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
        let mut object = statefulset("1Gi", "1Gi");
        object["spec"]["revisionHistoryLimit"] = json!(3);
        let desired: StatefulSet = serde_json::from_value(object).unwrap();
        let report = run_converge(&c, &j, &desired, &opts()).await.unwrap();
        let after = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
        if version >= KubeVersion::V1_36 {
            assert_eq!(
                report.outcome,
                Outcome::AcceptedByServer,
                "{version:?}: {report:?}"
            );
            assert_eq!(uid(&before), uid(&after), "{version:?}");
            assert!(writes(&fake).is_empty(), "{version:?}: {:?}", writes(&fake));
        } else {
            assert_eq!(
                report.outcome,
                Outcome::Converged,
                "{version:?}: {report:?}"
            );
            assert_ne!(uid(&before), uid(&after), "{version:?}");
            assert_eq!(after["spec"]["revisionHistoryLimit"], 3, "{version:?}");
        }
    }
}

/// A server with KEP-4650's gate takes a template's growth and labels in place: nothing is
/// re-created or applied by the converger, the claims the server leaves small are grown.
#[tokio::test]
async fn a_server_that_takes_the_change_in_place_is_not_recreated() {
    let fake = world().await;
    fake.enable_claim_template_updates();
    let (c, j) = cluster(&fake);
    let before = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    let mut object = statefulset("2Gi", "1Gi");
    object["spec"]["volumeClaimTemplates"][0]["metadata"]["labels"] = json!({"tier": "db"});
    let desired: StatefulSet = serde_json::from_value(object).unwrap();

    let dry = Options {
        dry_run: true,
        ..opts()
    };
    let report = run_converge(&c, &j, &desired, &dry).await.unwrap();
    assert_eq!(report.outcome, Outcome::AcceptedByServer, "{report:?}");
    assert!(writes(&fake).is_empty(), "{:?}", writes(&fake));

    let report = run_converge(&c, &j, &desired, &opts()).await.unwrap();
    assert_eq!(report.outcome, Outcome::AcceptedByServer, "{report:?}");
    assert_eq!(report.outcome.as_str(), "accepted-by-server");
    assert!(!report.recreated);
    assert!(!report.plan.as_ref().unwrap().recreate);
    let after = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    assert_eq!(uid(&before), uid(&after));
    // Flux applies the object; the converger only grew the claims.
    assert_eq!(
        after["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "1Gi"
    );
    for (claim, want) in [
        ("data-web-0", "2Gi"),
        ("data-web-1", "5Gi"),
        ("data-web-2", "2Gi"),
        ("data-web-3", "2Gi"),
    ] {
        assert_eq!(storage(&fake, claim), want, "{claim}");
    }
    let writes = writes(&fake);
    assert!(
        writes
            .iter()
            .all(|w| w.starts_with("PATCH /api/v1/namespaces/default/persistentvolumeclaims/")),
        "{writes:?}"
    );
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.method == Method::POST && r.path.contains("/statefulsets")),
        "a pre-flight was sent"
    );
}

/// `decide` already knows these fields; the server must agree, through the very dry run the
/// converge sends (the proof object, the carried fields put back live): the fields a
/// re-create cannot carry are refused, the carried ones pass the proof and are forbidden in
/// place (the real server's 422), and mutable ones pass both.
#[tokio::test]
async fn the_server_proves_other_immutable_changes_through_the_dry_run() {
    use flux_converger::cluster::Cluster as _;
    use flux_converger::converge::prove::{
        InPlace, Verdict, classify, classify_in_place, proof_object,
    };
    let fake = world().await;
    let (c, _) = cluster(&fake);
    let live = c.get_statefulset(NS, "web").await.unwrap().unwrap();
    let mut service = statefulset("2Gi", "1Gi");
    service["spec"]["serviceName"] = json!("other");
    let mut policy = statefulset("2Gi", "1Gi");
    policy["spec"]["podManagementPolicy"] = json!("OrderedReady");
    let mut selector = statefulset("2Gi", "1Gi");
    selector["spec"]["selector"]["matchLabels"]["tier"] = json!("db");
    selector["spec"]["template"]["metadata"]["labels"]["tier"] = json!("db");
    let mut image = statefulset("1Gi", "1Gi");
    image["spec"]["template"]["spec"]["containers"][0]["image"] = json!("busybox:1.37");
    image["spec"]["replicas"] = json!(5);
    let mut history = statefulset("1Gi", "1Gi");
    history["spec"]["revisionHistoryLimit"] = json!(3);
    let mut labels = statefulset("1Gi", "1Gi");
    labels["spec"]["volumeClaimTemplates"][0]["metadata"]["labels"] =
        json!({"helm.sh/chart": "db-1.2.3"});
    let added = with_template(statefulset("1Gi", "1Gi"), "cache");
    for (what, object, want) in [
        ("serviceName", service, Some(RefusalCode::OtherImmutable)),
        ("selector", selector, Some(RefusalCode::OtherImmutable)),
        ("podManagementPolicy", policy, None),
        ("revisionHistoryLimit", history, None),
        ("template labels", labels, None),
        ("template added", added, None),
        ("image and replicas only", image, None),
    ] {
        fake.clear_requests();
        let desired: StatefulSet = serde_json::from_value(object).unwrap();
        let answer = c.dry_run_apply(&proof_object(&desired, &live)).await;
        let got = match answer {
            Ok(_) => None,
            Err(e) => match classify(NS, "web", e) {
                Verdict::Refused(r) => {
                    assert!(
                        r.message
                            .contains("updates to statefulset spec for fields other than"),
                        "{what}: {}",
                        r.message
                    );
                    Some(r.code)
                }
                Verdict::Failed(e) | Verdict::Denied { cause: e, .. } => panic!("{what}: {e}"),
            },
        };
        assert_eq!(got, want, "{what}");
        let log = fake.requests();
        assert_eq!(log.len(), 1);
        assert!(log[0].dry_run && log[0].is_apply(), "{what}: {log:?}");
        if want.is_none() {
            let in_place =
                classify_in_place(NS, "web", c.dry_run_apply(&desired).await.map(|_| ()));
            let want_in_place = if what == "image and replicas only" {
                InPlace::Accepted
            } else {
                InPlace::Forbidden
            };
            assert_eq!(in_place, want_in_place, "{what}");
        }
        assert!(writes(&fake).is_empty());
    }
}

#[tokio::test]
async fn the_dry_run_object_is_the_desired_one_with_the_live_templates_and_a_dry_run_writes_nothing()
 {
    let fake = world().await;
    let (c, j) = cluster(&fake);
    let report = run_converge(
        &c,
        &j,
        &desired(),
        &Options {
            dry_run: true,
            ..opts()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.outcome, Outcome::Proven);
    assert!(writes(&fake).is_empty(), "{:?}", writes(&fake));
    let dry: Vec<_> = fake.requests().into_iter().filter(|r| r.dry_run).collect();
    assert_eq!(
        dry.len(),
        3,
        "the proof, the desired object in place, then the pre-flight: {dry:#?}"
    );
    for proof in &dry[..2] {
        assert!(proof.is_apply());
        assert_eq!(proof.field_manager.as_deref(), Some("kustomize-controller"));
        assert_eq!(proof.query_param("force").as_deref(), Some("true"));
    }
    // The proof passes; the desired object as it is gets the real server's 422.
    assert_eq!((dry[0].code, dry[1].code), (Some(200), Some(422)));
    // The pre-flight is a dry run too: a dry-run create, as Flux's field manager, answered
    // 409 AlreadyExists (existence is checked after authorization, admission, validation).
    assert_eq!(dry[2].method, Method::POST);
    assert_eq!(dry[2].path, "/apis/apps/v1/namespaces/default/statefulsets");
    assert_eq!(dry[2].query_param("dryRun").as_deref(), Some("All"));
    assert_eq!(
        dry[2].field_manager.as_deref(),
        Some("kustomize-controller")
    );
    assert_eq!(dry[2].code, Some(409));
    assert_eq!(storage(&fake, "data-web-0"), "1Gi");
}

#[tokio::test]
async fn a_server_error_on_the_dry_run_is_a_failure_to_retry() {
    let fake = world().await;
    let (c, j) = cluster(&fake);
    fake.add_fault(FaultRule {
        method: Some(Method::PATCH),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: Fault::Status {
            code: 500,
            reason: "InternalError".into(),
            message: "etcdserver: request timed out".into(),
        },
    });
    let e = run_converge(&c, &j, &desired(), &opts()).await.unwrap_err();
    assert_eq!(e.step(), Some(Step::Prove));
    let msg = e.to_string();
    assert!(
        msg.contains("etcdserver: request timed out") && msg.contains("default/web"),
        "{msg}"
    );
    assert!(writes(&fake).is_empty());
}

#[tokio::test]
async fn a_call_without_an_answer_is_cancelled_at_its_deadline() {
    let fake = world().await;
    let client = fake.client();
    let c = KubeCluster::new(client.clone(), Duration::from_millis(200));
    let j = ConfigMapJournal::new(client, JOURNAL_NS, Duration::from_millis(200));
    fake.add_fault(FaultRule {
        method: Some(Method::GET),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: Fault::Delay(Duration::from_secs(30)),
    });
    // The delay outlasts the test's patience: only the deadline turns it into an error.
    let e = run_converge(&c, &j, &desired(), &opts()).await.unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("StatefulSet default/web") && msg.contains("200 ms"),
        "{msg}"
    );
}

/// The uninterrupted run every interrupted one must end like.
async fn reference() -> (Value, Vec<fake_apiserver::RequestRecord>) {
    let fake = world().await;
    let before = uids(&fake);
    let (c, j) = cluster(&fake);
    run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    settle(&fake).await;
    (end_state(&fake, &before), fake.requests())
}

/// Gives the fake's controllers a moment to adopt pods (they run beside the API).
async fn settle(fake: &FakeApiServer) {
    for _ in 0..3000 {
        if pods_adopted(fake) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_fault_at_every_request_is_finished_by_running_again() {
    let (want, log) = reference().await;
    // The k-th request of the reference run, as a fault rule: same method and path, and the
    // number of earlier requests the rule would count.
    let rules = |writes_only: bool| -> Vec<(Method, String, usize)> {
        log.iter()
            .enumerate()
            .filter(|(_, r)| r.is_write() || !writes_only)
            .map(|(i, r)| {
                let nth = log[..i]
                    .iter()
                    .filter(|p| p.method == r.method && p.path.contains(&r.path))
                    .count();
                (r.method.clone(), r.path.clone(), nth)
            })
            .collect()
    };
    let write_rules = rules(true);
    let every_rule = rules(false);
    assert!(write_rules.len() >= 6, "{write_rules:?}");
    // Failing or dropping a request fails it whatever it is: every request, reads included.
    // Dropping the answer after the write only differs from that for writes.
    let faults = [
        (
            Fault::Status {
                code: 500,
                reason: "InternalError".into(),
                message: "injected".into(),
            },
            &every_rule,
        ),
        (Fault::Drop, &every_rule),
        (Fault::DropAfterWrite, &write_rules),
    ];
    for (fault, rules) in faults {
        for (k, (method, path, nth)) in rules.iter().enumerate() {
            let fake = world().await;
            let before = uids(&fake);
            let (c, j) = cluster(&fake);
            fake.add_fault(FaultRule {
                method: Some(method.clone()),
                path_contains: path.clone(),
                nth: *nth,
                action: fault.clone(),
            });
            let first = run_converge(&c, &j, &desired(), &opts()).await;
            let case = format!("{fault:?} at request {k} ({method} {path} #{nth})");
            let e = first.expect_err(&case);
            assert!(e.to_string().contains("again"), "{case}: {e}");
            // Never a StatefulSet gone without the intent that brings it back.
            if fake
                .get("apps/v1", "StatefulSet", Some(NS), "web")
                .is_none()
            {
                assert_eq!(
                    j.list().await.unwrap().intents.len(),
                    1,
                    "{case}: deleted without an intent"
                );
            }
            fake.clear_faults();
            let second = run_converge(&c, &j, &desired(), &opts()).await;
            assert!(second.is_ok(), "{case}: re-run failed: {second:?}");
            settle(&fake).await;
            assert_eq!(end_state(&fake, &before), want, "{case}");
        }
    }
}

#[tokio::test]
async fn a_crash_between_delete_and_reapply_is_healed_from_the_journal_by_a_new_process() {
    let fake = world().await;
    let before = uids(&fake);
    {
        let (c, j) = cluster(&fake);
        fake.add_fault(FaultRule {
            method: Some(Method::PATCH),
            path_contains: "/statefulsets/web".into(),
            // 0: the proof; 1: the desired object in place; 2: the re-apply.
            nth: 2,
            action: Fault::Drop,
        });
        let e = run_converge(&c, &j, &desired(), &opts()).await.unwrap_err();
        assert_eq!(e.step(), Some(Step::Reapply), "{e}");
        assert!(
            fake.get("apps/v1", "StatefulSet", Some(NS), "web")
                .is_none()
        );
        fake.clear_faults();
        // The process dies: its memory (c, j, the desired object) goes with it.
    }
    let (c, j) = cluster(&fake);
    let resumed = converge::resume_all(
        |_: &flux_converger::journal::Intent| std::future::ready(Ok::<_, String>(&c)),
        &j,
        &rendered_opts(),
    )
    .await
    .unwrap();
    assert_eq!(resumed.results.len(), 1);
    let (ns, name, result) = resumed.results.into_iter().next().unwrap();
    assert_eq!((ns.as_str(), name.as_str()), (NS, "web"));
    assert_eq!(result.unwrap().action, ResumeAction::Reapplied);
    settle(&fake).await;
    let (want, _) = reference().await;
    assert_eq!(end_state(&fake, &before), want);
}

#[tokio::test]
async fn a_statefulset_recreated_by_someone_else_is_not_deleted_again() {
    let fake = world().await;
    let (c, j) = cluster(&fake);
    // Stop after the intent and the claims: the delete fails.
    fake.add_fault(FaultRule {
        method: Some(Method::DELETE),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: Fault::Drop,
    });
    run_converge(&c, &j, &desired(), &opts()).await.unwrap_err();
    fake.clear_faults();
    assert_eq!(j.list().await.unwrap().intents.len(), 1);
    // Someone else (Flux with force, a person) deletes and re-creates it at the grown size.
    let old = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    {
        let (c2, _) = cluster(&fake);
        use flux_converger::cluster::Cluster as _;
        let outcome = c2.orphan_delete(NS, "web", &uid(&old)).await.unwrap();
        assert_ne!(outcome, flux_converger::cluster::DeleteOutcome::Gone);
        c2.wait_gone(NS, "web", &uid(&old), None, Duration::from_secs(5))
            .await
            .unwrap();
        c2.apply(&desired()).await.unwrap();
    }
    let recreated = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    fake.clear_requests();
    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    assert_eq!(
        report.resumed.as_ref().map(|r| r.action),
        Some(ResumeAction::AlreadyRecreated)
    );
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.method == Method::DELETE && r.path.contains("statefulsets")),
        "deleted again"
    );
    let now = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    assert_eq!(uid(&now), uid(&recreated));
    assert!(j.list().await.unwrap().intents.is_empty());
}

#[tokio::test]
async fn a_stuck_orphan_finalizer_times_out_naming_the_statefulset_and_a_later_run_completes() {
    let fake = world().await;
    let before = uids(&fake);
    let (c, j) = cluster(&fake);
    fake.set_orphan_gc(GcMode::Stuck);
    let short = Options {
        wait_timeout: Duration::from_millis(500),
        ..opts()
    };
    let e = run_converge(&c, &j, &desired(), &short).await.unwrap_err();
    assert_eq!(e.step(), Some(Step::Wait));
    let msg = e.to_string();
    assert!(
        msg.contains("StatefulSet default/web") && msg.contains("again"),
        "{msg}"
    );
    let stuck = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    assert!(stuck["metadata"].get("deletionTimestamp").is_some());
    assert_eq!(j.list().await.unwrap().intents.len(), 1);

    fake.set_orphan_gc(GcMode::After(Duration::from_millis(50)));
    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    let resumed = report.resumed.unwrap();
    assert_eq!(resumed.action, ResumeAction::Continued);
    assert!(resumed.report.unwrap().recreated);
    settle(&fake).await;
    let (want, _) = reference().await;
    assert_eq!(end_state(&fake, &before), want);
}

#[tokio::test]
async fn the_request_budget_is_claims_to_grow_plus_eight_beyond_the_reads() {
    let (_, log) = reference().await;
    let grown = 3; // data-web-0, data-web-2, data-web-3
    let watches = log.iter().filter(|r| r.watch).count();
    assert_eq!(watches, 1, "the wait is one watch: {log:#?}");
    // Beyond the reads: the proof, the dry run in place, pre-flight, record, the grows,
    // delete, the watch, re-apply, clear.
    let beyond_reads = log
        .iter()
        .filter(|r| r.method != Method::GET || r.watch)
        .count();
    assert!(beyond_reads <= grown + 8, "{beyond_reads}: {log:#?}");
    let preflights = log
        .iter()
        .filter(|r| r.method == Method::POST && r.dry_run)
        .count();
    assert_eq!(
        preflights, 1,
        "one pre-flight per re-created StatefulSet: {log:#?}"
    );
    // Reads: the journal's intent, the StatefulSet, the claims, the StorageClasses.
    let reads = log.len() - beyond_reads;
    assert!(reads <= 4, "{reads}: {log:#?}");
}

/// The command carries the same classes: a policy and claim-label change converges (exit 0, the
/// report's plan lists the changes), a selector change is refused (exit 3, nothing written),
/// and on a server that takes a template change in place the outcome is `accepted-by-server`.
#[tokio::test]
async fn the_command_converges_carried_changes_and_refuses_the_rest() {
    let fake = world().await;
    let served = fake.serve().await;
    let kc = served.kubeconfig.clone();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, v: &Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, serde_json::to_string(v).unwrap()).unwrap();
        p.to_string_lossy().into_owned()
    };
    let mut selector = statefulset("1Gi", "1Gi");
    selector["spec"]["selector"]["matchLabels"]["tier"] = json!("db");
    selector["spec"]["template"]["metadata"]["labels"]["tier"] = json!("db");
    let selector = write("selector.yaml", &selector);
    let (code, out, err) = cli(&kc, &["converge", "-f", &selector, "-o", "json"]).await;
    assert_eq!(code, 3, "{out}\n{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        summary["statefulsets"][0]["refusal"]["code"], "selector-changed",
        "{out}"
    );
    assert!(writes(&fake).is_empty(), "{:?}", writes(&fake));

    let mut carried = statefulset("1Gi", "1Gi");
    carried["spec"]["podManagementPolicy"] = json!("OrderedReady");
    carried["spec"]["volumeClaimTemplates"][0]["metadata"]["labels"] =
        json!({"helm.sh/chart": "db-1.2.3"});
    let carried = write("carried.yaml", &carried);
    let (code, out, err) = cli(&kc, &["converge", "-f", &carried, "-o", "json"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    let report = &summary["statefulsets"][0];
    assert_eq!(report["outcome"], "converged", "{out}");
    assert_eq!(report["recreated"], true, "{out}");
    let classes: Vec<&str> = report["plan"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["class"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        classes,
        ["pod-management-policy", "claim-metadata"],
        "{out}"
    );
    let live = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    assert_eq!(live["spec"]["podManagementPolicy"], "OrderedReady");

    fake.enable_claim_template_updates();
    fake.clear_requests();
    let mut grown = statefulset("2Gi", "1Gi");
    grown["spec"]["podManagementPolicy"] = json!("OrderedReady");
    grown["spec"]["volumeClaimTemplates"][0]["metadata"]["labels"] =
        json!({"helm.sh/chart": "db-1.2.3"});
    let grown = write("grown.yaml", &grown);
    let (code, out, err) = cli(&kc, &["converge", "-f", &grown]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("takes the declared changes in place"), "{out}");
    assert_eq!(
        uid(&fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap()),
        uid(&live)
    );
    assert_eq!(storage(&fake, "data-web-0"), "2Gi");
}

/// Runs the binary against the fake on a socket.
async fn cli(kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_flux-converger"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("FLUX_CONVERGER_JOURNAL_NAMESPACE")
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_converges_over_a_socket_with_the_exit_code_contract() {
    let fake = world().await;
    let served = fake.serve().await;
    let kc = served.kubeconfig.clone();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, v: Value| {
        let p = dir.path().join(name);
        // A namespace-less object takes --namespace; plus a non-StatefulSet that is ignored.
        let mut v = v;
        v["metadata"].as_object_mut().unwrap().remove("namespace");
        let svc = "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  clusterIP: None\n";
        std::fs::write(&p, format!("{}\n{svc}", serde_json::to_string(&v).unwrap())).unwrap();
        p.to_string_lossy().into_owned()
    };
    let grown = write("grown.yaml", statefulset("2Gi", "1Gi"));
    let shrunk = write("shrunk.yaml", statefulset("512Mi", "1Gi"));

    // Dry run: proven, exit 0, nothing written.
    let (code, out, err) = cli(
        &kc,
        &["converge", "--desired", &grown, "-n", NS, "--dry-run"],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("dry run"), "{out}");
    assert!(writes(&fake).is_empty(), "{:?}", writes(&fake));

    // Refused: exit 3, nothing written.
    let (code, out, err) = cli(&kc, &["converge", "--desired", &shrunk, "-n", NS]).await;
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(out.contains("shrink"), "{out}");
    assert!(writes(&fake).is_empty(), "{:?}", writes(&fake));

    // Converge: exit 0, JSON report.
    let (code, out, err) = cli(
        &kc,
        &[
            "converge",
            "--desired",
            &grown,
            "-n",
            NS,
            "-o",
            "json",
            "--timeout",
            "5s",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    let report = &summary["statefulsets"][0];
    assert_eq!(report["outcome"], "converged", "{out}");
    assert_eq!(report["recreated"], true);
    assert_ne!(report["oldUid"], report["newUid"]);
    assert!(report["steps"].as_array().unwrap().len() >= 8, "{out}");
    assert_eq!(storage(&fake, "data-web-0"), "2Gi");

    // A failure: exit 1, naming the step and the object, saying a re-run finishes it.
    fake.add_fault(FaultRule {
        method: Some(Method::GET),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        // 500: kube's client retries 429/503/504 by itself.
        action: Fault::Status {
            code: 500,
            reason: "InternalError".into(),
            message: "apiserver is shutting down".into(),
        },
    });
    let (code, out, err) = cli(&kc, &["converge", "--desired", &grown, "-n", NS]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        err.contains("StatefulSet default/web")
            && err.contains("apiserver is shutting down")
            && err.contains("again"),
        "{err}"
    );
    fake.clear_faults();

    // Bad input: exit 2.
    let missing = dir.path().join("missing.yaml");
    let (code, _, err) = cli(&kc, &["converge", "--desired", missing.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{err}");
    let pinned = dir.path().join("pinned.yaml");
    std::fs::write(
        &pinned,
        serde_json::to_string(&statefulset("2Gi", "1Gi")).unwrap(),
    )
    .unwrap();
    let (code, _, err) = cli(
        &kc,
        &[
            "converge",
            "--desired",
            pinned.to_str().unwrap(),
            "-n",
            "other",
        ],
    )
    .await;
    assert_eq!(
        code, 2,
        "a namespace conflicting with -n is bad input: {err}"
    );
    assert!(err.contains("other"), "{err}");
}

/// The wait survives a watch that expires (410 after a compaction) and one that the server
/// ends: it lists once and watches again from the list's version.
#[tokio::test]
async fn the_wait_for_the_deletion_rewatches_after_an_expired_watch() {
    use flux_converger::cluster::{Cluster as _, DeleteOutcome, WaitOutcome};
    let fake = world().await;
    let (c, _) = cluster(&fake);
    let live = c.get_statefulset(NS, "web").await.unwrap().unwrap();
    let live_uid = live.metadata.uid.clone().unwrap();
    fake.set_orphan_gc(GcMode::Stuck);
    let DeleteOutcome::Deleting { resource_version } =
        c.orphan_delete(NS, "web", &live_uid).await.unwrap()
    else {
        panic!("not deleting")
    };
    // Everything up to now is forgotten: a watch from the delete's version gets 410.
    fake.compact();
    let release = {
        let fake = fake.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            fake.set_orphan_gc(GcMode::After(Duration::from_millis(10)));
        })
    };
    fake.clear_requests();
    let outcome = c
        .wait_gone(
            NS,
            "web",
            &live_uid,
            resource_version.as_deref(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    release.await.unwrap();
    assert_eq!(outcome, WaitOutcome::Gone);
    let watches = fake.requests().iter().filter(|r| r.watch).count();
    assert_eq!(watches, 2, "{:#?}", fake.requests());
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "web")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impersonating_client_acts_as_the_kustomizations_service_account() {
    use flux_converger::cluster::Cluster as _;
    let fake = world().await;
    // The fake authorizes impersonated requests against RBAC, as the real server does.
    let rules = serde_json::json!([{"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get"]}]);
    fake.grant(NS, "system:serviceaccount:apps:deployer", rules);
    let served = fake.serve().await;
    let kubeconfig = kube::config::Kubeconfig::read_from(&served.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client =
        flux_converger::cluster::impersonating_client(&config, "apps", "deployer").unwrap();
    let c = KubeCluster::new(client, Duration::from_secs(5));
    assert!(c.get_statefulset(NS, "web").await.unwrap().is_some());
    let log = fake.requests();
    assert_eq!(
        log.last().unwrap().impersonate_user.as_deref(),
        Some("system:serviceaccount:apps:deployer")
    );
}

#[tokio::test]
async fn a_v1_32_server_ends_in_the_same_state() {
    let (want, _) = reference().await;
    let fake = world_on(FakeApiServer::with_version(KubeVersion::V1_32)).await;
    let before = uids(&fake);
    let (c, j) = cluster(&fake);
    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    assert_eq!(report.outcome, Outcome::Converged);
    settle(&fake).await;
    assert_eq!(end_state(&fake, &before), want);
}

#[tokio::test]
async fn a_claim_the_server_will_not_grow_is_a_clear_error_and_the_statefulset_stays() {
    let fake = world().await;
    let (c, j) = cluster(&fake);
    let body: Value =
        serde_json::from_str(&fixture("v1.28/error-pvc-not-expandable.json")).unwrap();
    fake.add_fault(FaultRule {
        method: Some(Method::PATCH),
        path_contains: "/persistentvolumeclaims/data-web-2".into(),
        nth: 0,
        action: Fault::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: body["message"].as_str().unwrap().to_string(),
        },
    });
    let e = run_converge(&c, &j, &desired(), &opts()).await.unwrap_err();
    assert_eq!(e.step(), Some(Step::Grow));
    let msg = e.to_string();
    for want in [
        "PersistentVolumeClaim default/data-web-2",
        "403",
        "must support resize",
        "StatefulSet default/web",
        "run converge again",
    ] {
        assert!(msg.contains(want), "{want:?} not in {msg}");
    }
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "web")
            .is_some()
    );
    assert!(!fake.requests().iter().any(|r| r.method == Method::DELETE));
}

// ---- Issue #11: someone else acts while the converge runs --------------------------------

/// What another actor does, once, at a point of the converge (the operator, a volume
/// autoscaler, Flux's prune), through the fake's back door so it lands between two requests.
#[derive(Clone, Copy, PartialEq)]
enum Meddle {
    /// After the claim list: raise `data-web-0` to 10Gi (a new resourceVersion).
    RaiseClaimAfterRead,
    /// Right before our orphan delete: delete the StatefulSet (as Flux's prune would).
    DeleteBeforeOurDelete,
    /// Right before our orphan delete: delete it and create a new one declaring `size`.
    ReplaceBeforeOurDelete(&'static str),
}

/// A [`KubeCluster`] with another actor beside it.
struct Meddled {
    inner: KubeCluster,
    fake: FakeApiServer,
    meddle: Meddle,
}

impl Meddled {
    fn new(fake: &FakeApiServer, meddle: Meddle) -> Self {
        Meddled {
            inner: cluster(fake).0,
            fake: fake.clone(),
            meddle,
        }
    }

    fn replace_statefulset(&self, size: &str) {
        self.fake.remove("apps/v1", "StatefulSet", Some(NS), "web");
        let mut sts = statefulset(size, "1Gi");
        sts["metadata"]["uid"] = json!("uid-of-someone-else");
        self.fake.seed(sts);
    }
}

use flux_converger::cluster::{CallError, Cluster, DeleteOutcome, WaitOutcome};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

impl Cluster for Meddled {
    async fn get_statefulset(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<StatefulSet>, CallError> {
        self.inner.get_statefulset(ns, name).await
    }
    async fn list_claims(&self, ns: &str) -> Result<Vec<PersistentVolumeClaim>, CallError> {
        let claims = self.inner.list_claims(ns).await;
        if self.meddle == Meddle::RaiseClaimAfterRead {
            self.fake
                .modify("v1", "PersistentVolumeClaim", Some(NS), "data-web-0", |c| {
                    c["spec"]["resources"]["requests"]["storage"] = json!("10Gi");
                })
                .unwrap();
        }
        claims
    }
    async fn get_claim(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>, CallError> {
        self.inner.get_claim(ns, name).await
    }
    async fn list_storage_classes(&self) -> Result<Vec<StorageClass>, CallError> {
        self.inner.list_storage_classes().await
    }
    async fn dry_run_apply(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        self.inner.dry_run_apply(object).await
    }
    async fn dry_run_create(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        self.inner.dry_run_create(object).await
    }
    async fn patch_claim(
        &self,
        ns: &str,
        claim: &str,
        patch: &flux_converger::cluster::ClaimPatch,
        rv: &str,
    ) -> Result<(), CallError> {
        self.inner.patch_claim(ns, claim, patch, rv).await
    }
    async fn attribute_classes(
        &self,
        names: &std::collections::BTreeSet<String>,
    ) -> Result<flux_converger::decide::AttributeClasses, CallError> {
        self.inner.attribute_classes(names).await
    }
    async fn resize_claim_dry_run(
        &self,
        ns: &str,
        claim: &str,
        storage: &str,
        rv: &str,
    ) -> Result<(), CallError> {
        self.inner
            .resize_claim_dry_run(ns, claim, storage, rv)
            .await
    }
    async fn orphan_delete(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
    ) -> Result<DeleteOutcome, CallError> {
        match self.meddle {
            Meddle::DeleteBeforeOurDelete => {
                self.fake.remove("apps/v1", "StatefulSet", Some(NS), "web");
            }
            Meddle::ReplaceBeforeOurDelete(size) => self.replace_statefulset(size),
            Meddle::RaiseClaimAfterRead => {}
        }
        self.inner.orphan_delete(ns, name, uid).await
    }
    async fn wait_gone(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        from: Option<&str>,
        timeout: Duration,
    ) -> Result<WaitOutcome, CallError> {
        self.inner.wait_gone(ns, name, uid, from, timeout).await
    }
    async fn apply(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        self.inner.apply(object).await
    }
}

fn template_storage(sts: &Value, template: &str) -> String {
    sts["spec"]["volumeClaimTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["metadata"]["name"] == template)
        .map(|t| {
            t["spec"]["resources"]["requests"]["storage"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_claim_raised_meanwhile_is_never_lowered() {
    // Since 1.32 the server lets a request go down to the claim's capacity: an
    // unconditional patch to 2Gi would quietly undo the raise to 10Gi.
    let fake = world_on(FakeApiServer::with_version(KubeVersion::V1_32)).await;
    let c = Meddled::new(&fake, Meddle::RaiseClaimAfterRead);
    let (_, j) = cluster(&fake);
    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    assert_eq!(report.outcome, Outcome::Converged);
    assert_eq!(storage(&fake, "data-web-0"), "10Gi");
    assert_eq!(storage(&fake, "data-web-2"), "2Gi");
    let raised = report
        .claims
        .iter()
        .find(|c| c.claim == "data-web-0")
        .unwrap();
    assert_eq!(raised.action, ClaimAction::Skipped, "{raised:?}");
    assert!(
        raised
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("never lowered"),
        "{raised:?}"
    );
    // The grow carried the version it was decided on; the conflict was re-read once.
    let patches: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::PATCH && r.path.ends_with("/data-web-0"))
        .map(|r| r.code)
        .collect();
    assert_eq!(patches, vec![Some(409)]);
    let template = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    assert_eq!(template_storage(&template, "data"), "2Gi");
}

#[tokio::test]
async fn a_conflict_on_the_orphan_delete_that_is_not_a_uid_mismatch_is_a_failure_to_retry() {
    let fake = world().await;
    let before = uids(&fake);
    let (c, j) = cluster(&fake);
    // The real server's words for a resourceVersion precondition (conformance, v1.32.6).
    fake.add_fault(FaultRule {
        method: Some(Method::DELETE),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: Fault::Status {
            code: 409,
            reason: "Conflict".into(),
            message: "Operation cannot be fulfilled on StatefulSet.apps \"web\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record (7). The object might have been modified".into(),
        },
    });
    let e = run_converge(&c, &j, &desired(), &opts()).await.unwrap_err();
    assert_eq!(e.step(), Some(Step::Orphan), "{e}");
    assert!(e.to_string().contains("intent is kept"), "{e}");
    assert_eq!(j.list().await.unwrap().intents.len(), 1);
    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    assert_eq!(
        report.resumed.map(|r| r.action),
        Some(ResumeAction::Continued)
    );
    settle(&fake).await;
    let (want, _) = reference().await;
    assert_eq!(end_state(&fake, &before), want);
}

#[tokio::test]
async fn a_uid_mismatch_is_converged_only_if_the_new_object_declares_the_desired_sizes() {
    for (size, want) in [
        ("1Gi", Outcome::ReplacedElsewhere),
        ("2Gi", Outcome::RecreatedElsewhere),
    ] {
        let fake = world().await;
        let c = Meddled::new(&fake, Meddle::ReplaceBeforeOurDelete(size));
        let (_, j) = cluster(&fake);
        let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
        assert_eq!(report.outcome, want, "{size}");
        assert!(!report.recreated, "{size}");
        assert_eq!(report.new_uid.as_deref(), Some("uid-of-someone-else"));
        let now = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
        assert_eq!(uid(&now), "uid-of-someone-else", "{size}: applied over it");
        assert_eq!(template_storage(&now, "data"), size);
        assert!(j.list().await.unwrap().intents.is_empty());
        if want == Outcome::ReplacedElsewhere {
            assert!(
                report.to_text().contains("NOT converged"),
                "{}",
                report.to_text()
            );
        }
    }
}

#[tokio::test]
async fn a_statefulset_deleted_by_someone_else_before_our_delete_is_not_brought_back() {
    let fake = world().await;
    let c = Meddled::new(&fake, Meddle::DeleteBeforeOurDelete);
    let (_, j) = cluster(&fake);
    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    assert_eq!(report.outcome, Outcome::DeletedElsewhere);
    assert!(!report.recreated);
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "web")
            .is_none()
    );
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.is_apply() && !r.dry_run && r.path.contains("/statefulsets/")),
        "re-applied"
    );
    assert!(j.list().await.unwrap().intents.is_empty());
}

/// An intent as an earlier version wrote it: recorded before the claims grew, without
/// `deleting` and `revision`.
fn legacy_intent(fake: &FakeApiServer, uid: &str) {
    use flux_converger::journal::{Intent, intent_to_configmap};
    let intent = Intent {
        namespace: NS.into(),
        name: "web".into(),
        uid: uid.into(),
        desired: desired(),
        plan: json!({"recreate": true}),
        recorded_at: "2026-11-29T17:00:00Z".into(),
        revision: None,
        deleting: false,
        act_as: None,
        kustomization: None,
    };
    let mut cm = serde_json::to_value(intent_to_configmap(JOURNAL_NS, &intent).unwrap()).unwrap();
    let data = cm["data"].as_object_mut().unwrap();
    data.remove("deleting");
    data.remove("revision");
    cm["apiVersion"] = json!("v1");
    cm["kind"] = json!("ConfigMap");
    fake.seed(cm);
}

#[tokio::test]
async fn a_resume_never_brings_back_a_statefulset_someone_else_deleted() {
    let fake = world().await;
    let live = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    legacy_intent(&fake, &uid(&live));
    // Flux prunes it (the intent was recorded, nothing of ours deleted it).
    fake.remove("apps/v1", "StatefulSet", Some(NS), "web");
    let (c, j) = cluster(&fake);
    // On start, the earlier version's ConfigMap becomes a Secret first.
    j.migrate_legacy().await.unwrap();
    fake.clear_requests();
    let resumed = converge::resume_all(
        |_: &flux_converger::journal::Intent| std::future::ready(Ok::<_, String>(&c)),
        &j,
        &rendered_opts(),
    )
    .await
    .unwrap();
    let (_, _, result) = resumed.results.into_iter().next().unwrap();
    assert_eq!(result.unwrap().action, ResumeAction::DeletedElsewhere);
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "web")
            .is_none()
    );
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.is_apply() && r.path.contains("/statefulsets/")),
        "re-applied"
    );
    assert!(j.list().await.unwrap().intents.is_empty());
}

#[tokio::test]
async fn a_crash_after_our_delete_is_reapplied_and_the_intent_names_the_revision() {
    let fake = world().await;
    let (c, j) = cluster(&fake);
    fake.add_fault(FaultRule {
        method: Some(Method::PATCH),
        path_contains: "/statefulsets/web".into(),
        nth: 2, // 0: the proof; 1: the desired object in place; 2: the re-apply
        action: Fault::Drop,
    });
    let with_revision = Options {
        revision: Some("main@sha1:4f2a".into()),
        ..opts()
    };
    run_converge(&c, &j, &desired(), &with_revision)
        .await
        .unwrap_err();
    fake.clear_faults();
    let intents = j.list().await.unwrap().intents;
    assert_eq!(intents.len(), 1);
    assert!(intents[0].deleting);
    assert_eq!(intents[0].revision.as_deref(), Some("main@sha1:4f2a"));
    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    let resumed = report.resumed.unwrap();
    assert_eq!(resumed.action, ResumeAction::Reapplied);
    assert_eq!(resumed.revision.as_deref(), Some("main@sha1:4f2a"));
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "web")
            .is_some()
    );
}

/// A ConfigMap with the intent label whose content does not parse.
fn corrupt_intent(fake: &FakeApiServer, namespace: &str, name: &str) -> String {
    let cm_name = flux_converger::journal::intent_configmap_name(namespace, name);
    fake.seed(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": cm_name, "namespace": JOURNAL_NS,
                     "labels": {"flux-converger.io/record": "intent"}},
        "data": {"namespace": namespace, "name": name, "uid": "x", "desired": "{hand-edited",
                 "plan": "{}"},
    }));
    cm_name
}

#[tokio::test]
async fn one_unreadable_journal_record_wedges_nothing() {
    let fake = world().await;
    let other = corrupt_intent(&fake, "apps", "db");
    let own = corrupt_intent(&fake, NS, "web");
    let (c, j) = cluster(&fake);
    j.migrate_legacy().await.unwrap();
    let resumed = converge::resume_all(
        |_: &flux_converger::journal::Intent| std::future::ready(Ok::<_, String>(&c)),
        &j,
        &rendered_opts(),
    )
    .await
    .unwrap();
    assert!(resumed.results.is_empty());
    let names: Vec<&str> = resumed
        .unreadable
        .iter()
        .map(|u| u.object.as_str())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().any(|n| n.ends_with(&other)) && names.iter().any(|n| n.ends_with(&own)));
    // The StatefulSet whose own record is unreadable still converges; the record is replaced.
    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    assert_eq!(report.outcome, Outcome::Converged);
    assert!(report.recreated);
    assert!(
        report
            .unreadable_intent
            .as_ref()
            .is_some_and(|u| u.object.ends_with(&own))
    );
    assert!(fake.get("v1", "Secret", Some(JOURNAL_NS), &own).is_none());
    assert!(fake.get("v1", "Secret", Some(JOURNAL_NS), &other).is_some());
    assert!(fake.list("v1", "ConfigMap", Some(JOURNAL_NS)).is_empty());
}

#[tokio::test]
async fn nothing_was_written_is_only_said_when_true() {
    let fake = world().await;
    // An intent whose delete went out: the resume re-applies (a write) ...
    let (c, j) = cluster(&fake);
    fake.add_fault(FaultRule {
        method: Some(Method::PATCH),
        path_contains: "/statefulsets/web".into(),
        nth: 2, // 0: the proof; 1: the desired object in place; 2: the re-apply
        action: Fault::Drop,
    });
    run_converge(&c, &j, &desired(), &opts()).await.unwrap_err();
    fake.clear_faults();
    // ... then the converge's own read of the StatefulSet fails.
    fake.add_fault(FaultRule {
        method: Some(Method::GET),
        path_contains: "/statefulsets/web".into(),
        nth: 1, // 0: the resume's read; 1: the converge's
        action: Fault::Status {
            code: 500,
            reason: "InternalError".into(),
            message: "etcd is down".into(),
        },
    });
    let e = run_converge(&c, &j, &desired(), &opts()).await.unwrap_err();
    assert_eq!(e.step(), Some(Step::Read), "{e}");
    assert!(!e.to_string().contains("nothing was written"), "{e}");
    assert_eq!(e.written(), converge::Written::Partial);
}

#[tokio::test]
async fn a_dry_run_denied_is_a_failure_to_fix_access_not_a_refusal() {
    let forbidden = "statefulsets.apps \"web\" is forbidden: User \"system:serviceaccount:apps:deployer\" cannot patch resource \"statefulsets\" in API group \"apps\" in the namespace \"default\"";
    for (code, reason, message, names) in [
        (403, "Forbidden", forbidden, "\"patch\" on \"statefulsets\""),
        (401, "Unauthorized", "Unauthorized", "credentials"),
        (
            404,
            "NotFound",
            "namespaces \"default\" not found",
            "namespace default",
        ),
    ] {
        let fake = world().await;
        let (c, j) = cluster(&fake);
        fake.add_fault(FaultRule {
            method: Some(Method::PATCH),
            path_contains: "/statefulsets/web".into(),
            nth: 0,
            action: Fault::Status {
                code,
                reason: reason.into(),
                message: message.into(),
            },
        });
        let e = run_converge(&c, &j, &desired(), &opts()).await.unwrap_err();
        assert!(
            matches!(e, converge::ConvergeError::Access { .. }),
            "{code}: {e}"
        );
        assert_eq!(e.step(), Some(Step::Prove));
        let text = e.to_string();
        assert!(
            text.contains(names) && text.contains("nothing was written"),
            "{code}: {text}"
        );
        assert!(writes(&fake).is_empty(), "{code}: {:?}", writes(&fake));
    }
}

#[tokio::test]
async fn claims_are_listed_in_pages() {
    let fake = world().await;
    // More claims than a page, sorting before web's: web's claims are on the second page.
    let page = flux_converger::cluster::LIST_PAGE as usize;
    for i in 0..page + 20 {
        fake.seed(claim(&format!("aaa-filler-{i:04}"), "1Gi"));
    }
    fake.clear_requests();
    let (c, j) = cluster(&fake);
    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    assert_eq!(report.outcome, Outcome::Converged);
    assert_eq!(storage(&fake, "data-web-2"), "2Gi");
    let lists: Vec<(Option<String>, Option<String>)> = fake
        .requests()
        .iter()
        .filter(|r| r.method == Method::GET && r.path.ends_with("/persistentvolumeclaims"))
        .map(|r| (r.query_param("limit"), r.query_param("continue")))
        .collect();
    assert_eq!(lists.len(), 2, "{lists:?}");
    assert!(
        lists
            .iter()
            .all(|(l, _)| l.as_deref() == Some(page.to_string().as_str()))
    );
    assert!(lists[0].1.is_none() && lists[1].1.is_some(), "{lists:?}");
}

#[tokio::test]
async fn storage_classes_from_the_services_cache_cost_no_request() {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, reflector, watcher};
    let fake = world().await;
    let client = fake.client();
    let (store, writer) = reflector::store();
    let api: kube::Api<StorageClass> = kube::Api::all(client.clone());
    let reflect = tokio::spawn(
        reflector(writer, watcher(api, watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    store.wait_until_ready().await.unwrap();
    fake.clear_requests();
    let c = KubeCluster::new(client.clone(), Duration::from_secs(5)).with_storage_classes(store);
    let j = ConfigMapJournal::new(client, JOURNAL_NS, Duration::from_secs(5));
    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    assert_eq!(report.outcome, Outcome::Converged);
    reflect.abort();
    let log: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| !r.path.contains("/storageclasses") || !r.watch)
        .collect();
    assert!(
        !log.iter().any(|r| r.path.contains("/storageclasses")),
        "{log:#?}"
    );
    // N claims to grow: journal load, get, list claims, the proof, the dry run in place,
    // pre-flight, N grows, record, delete, watch, re-apply, clear.
    let grown = 3;
    assert_eq!(log.len(), grown + 11, "{log:#?}");
}

/// The server's "forbidden in place" is a property of the server: a later converge carrying
/// the same kind of change (one run of the command, every run of the service) does not ask it
/// again: one request fewer per re-create after the first.
#[tokio::test]
async fn a_change_the_server_forbade_in_place_is_not_asked_about_again() {
    let fake = world().await;
    let client = fake.client();
    let c = KubeCluster::new(client.clone(), Duration::from_secs(5));
    let j = ConfigMapJournal::new(client, JOURNAL_NS, Duration::from_secs(5));
    let options = opts();
    let dry_run_applies = |log: &[fake_apiserver::RequestRecord]| {
        log.iter()
            .filter(|r| {
                r.method == http::Method::PATCH
                    && r.path.contains("/statefulsets/")
                    && r.query.contains("dryRun=All")
            })
            .count()
    };
    fake.clear_requests();
    let first = run_converge(&c, &j, &desired(), &options).await.unwrap();
    assert_eq!(first.outcome, Outcome::Converged, "{first:?}");
    // The proof, then the question the server answers "forbidden".
    assert_eq!(dry_run_applies(&fake.requests()), 2);
    let first_count = fake.requests().len();

    fake.clear_requests();
    let bigger: StatefulSet = serde_json::from_value(statefulset("3Gi", "1Gi")).unwrap();
    let second = run_converge(&c, &j, &bigger, &options).await.unwrap();
    assert_eq!(second.outcome, Outcome::Converged, "{second:?}");
    let log = fake.requests();
    // The proof only; the pre-flight create still runs.
    assert_eq!(dry_run_applies(&log), 1, "{log:#?}");
    assert!(
        log.iter()
            .any(|r| r.method == http::Method::POST && r.query.contains("dryRun=All")),
        "{log:#?}"
    );
    let grown = |r: &flux_converger::converge::Report| {
        r.claims
            .iter()
            .filter(|c| c.action == flux_converger::converge::ClaimAction::Resized)
            .count()
    };
    assert_eq!(
        log.len() - grown(&second),
        first_count - grown(&first) - 1,
        "{log:#?}"
    );

    // A fresh memory (another run of the command) asks again.
    fake.clear_requests();
    let biggest: StatefulSet = serde_json::from_value(statefulset("4Gi", "1Gi")).unwrap();
    let third = run_converge(&c, &j, &biggest, &opts()).await.unwrap();
    assert_eq!(third.outcome, Outcome::Converged, "{third:?}");
    assert_eq!(dry_run_applies(&fake.requests()), 2);
}

/// A loopback TCP proxy in front of the fake that numbers the connections the client opens
/// and notes, per connection, whether a dry run went over it.
struct CountingProxy {
    url: String,
    /// For each connection, in order of opening: the number of dry runs seen before it opened.
    opened_after_dry_runs: std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
}

async fn counting_proxy(upstream: std::net::SocketAddr) -> CountingProxy {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let opened = Arc::new(Mutex::new(Vec::new()));
    let dry_runs = Arc::new(AtomicUsize::new(0));
    let (o, d) = (opened.clone(), dry_runs.clone());
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            o.lock().unwrap().push(d.load(Ordering::SeqCst));
            let d = d.clone();
            tokio::spawn(async move {
                let mut server = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let (mut cr, mut cw) = client.split();
                let (mut sr, mut sw) = server.split();
                let up = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if String::from_utf8_lossy(&buf[..n]).contains("dryRun=All") {
                            d.fetch_add(1, Ordering::SeqCst);
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = sw.shutdown().await;
                };
                let down = async {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    let _ = cw.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    CountingProxy {
        url,
        opened_after_dry_runs: opened,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reads_before_the_dry_run_share_one_connection() {
    // Two requests sent at once on one client open a second connection (over TLS, a second
    // handshake: ~45 ms on a real API server). The reads go one after the other instead.
    let fake = world().await;
    let served = fake.serve().await;
    let proxy = counting_proxy(served.addr).await;
    let mut config = kube::Config::new(proxy.url.parse().unwrap());
    config.default_namespace = NS.into();
    let client = kube::Client::try_from(config).unwrap();
    let c = KubeCluster::new(client.clone(), Duration::from_secs(5));
    let j = ConfigMapJournal::new(client, JOURNAL_NS, Duration::from_secs(5));
    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    assert_eq!(report.outcome, Outcome::Converged);
    let opened = proxy.opened_after_dry_runs.lock().unwrap().clone();
    let before_the_dry_run = opened.iter().filter(|d| **d == 0).count();
    assert_eq!(
        before_the_dry_run, 1,
        "connections opened, by dry runs seen: {opened:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_exits_1_naming_the_permission_and_names_an_unreadable_record_once() {
    let fake = world().await;
    // The command's journal is the StatefulSet's own namespace by default.
    let cm = flux_converger::journal::intent_configmap_name(NS, "web");
    fake.seed(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "flux-converger.io/intent",
        "metadata": {"name": cm, "namespace": NS,
                     "labels": {"flux-converger.io/record": "intent"}},
        // "{hand-edited"
        "data": {"desired": "e2hhbmQtZWRpdGVk"},
    }));
    fake.add_fault(FaultRule {
        method: Some(Method::PATCH),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: Fault::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: "statefulsets.apps \"web\" is forbidden: User \"jane\" cannot patch resource \"statefulsets\" in API group \"apps\" in the namespace \"default\"".into(),
        },
    });
    let served = fake.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("web.yaml");
    std::fs::write(
        &file,
        serde_json::to_string(&statefulset("2Gi", "1Gi")).unwrap(),
    )
    .unwrap();
    let (code, out, err) = cli(
        &served.kubeconfig,
        &["converge", "--desired", file.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("\"patch\" on \"statefulsets\""), "{err}");
    assert!(
        !out.contains("rejected") && !err.contains("rejected"),
        "{out}\n{err}"
    );
    assert_eq!(err.matches(&cm).count(), 1, "named once: {err}");
    assert!(writes(&fake).is_empty(), "{:?}", writes(&fake));
}

/// `cache`: one template `data` at `size`, no replicas (no pods, no claims), live beside `web`.
fn cache(size: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "cache", "namespace": NS},
        "spec": {
            "serviceName": "cache", "replicas": 0,
            "selector": {"matchLabels": {"app": "cache"}},
            "template": {"metadata": {"labels": {"app": "cache"}},
                         "spec": {"containers": [{"name": "app", "image": "redis"}]}},
            "volumeClaimTemplates": [
                {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                  "storageClassName": "expandable", "resources": {"requests": {"storage": size}}}},
            ],
        }
    })
}

async fn seed_cache(fake: &FakeApiServer) -> String {
    use flux_converger::cluster::Cluster as _;
    let live: StatefulSet = serde_json::from_value(cache("1Gi")).unwrap();
    let applied = KubeCluster::new(fake.client(), Duration::from_secs(5))
        .apply(&live)
        .await
        .unwrap();
    fake.clear_requests();
    applied.metadata.uid.unwrap()
}

/// The requests a converge must not have sent: any write that is not a dry run.
fn real_writes(fake: &FakeApiServer) -> Vec<String> {
    fake.requests()
        .iter()
        .filter(|r| r.is_write())
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect()
}

#[tokio::test]
async fn an_admission_webhook_denying_the_recreate_is_refused_before_any_write() {
    use flux_converger::cluster::Cluster as _;
    let fake = world().await;
    let (c, j) = cluster(&fake);
    let before = uid(&fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap());
    fake.deny_creates(
        "StatefulSet",
        "sts-policy.example.com",
        "StatefulSets are created by the platform team only",
        None,
    );

    let report = run_converge(&c, &j, &desired(), &opts()).await.unwrap();

    assert_eq!(report.outcome, Outcome::Refused, "{report:?}");
    let refusal = report.refusal.as_ref().unwrap();
    assert_eq!(refusal.code, RefusalCode::CreateRefused);
    assert_eq!(refusal.code.as_str(), "create-refused");
    assert!(
        refusal.message.contains(
            "admission webhook \"sts-policy.example.com\" denied the request: StatefulSets are created by the platform team only"
        ) && refusal.message.contains("nothing was written"),
        "{}",
        refusal.message
    );
    assert!(real_writes(&fake).is_empty(), "{:?}", real_writes(&fake));
    // The proof's dry-run UPDATE passed the webhook (it matches CREATE only), the desired
    // object in place is forbidden (422); the pre-flight caught it.
    let dry: Vec<_> = fake.requests().into_iter().filter(|r| r.dry_run).collect();
    assert_eq!(dry.len(), 3, "{dry:#?}");
    assert!(dry[0].is_apply() && dry[0].code == Some(200), "{dry:#?}");
    assert!(dry[1].is_apply() && dry[1].code == Some(422), "{dry:#?}");
    assert!(
        dry[2].method == Method::POST && dry[2].code == Some(400),
        "{dry:#?}"
    );
    let live = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    assert_eq!(
        uid(&live),
        before,
        "the StatefulSet is still there, untouched"
    );
    assert_eq!(storage(&fake, "data-web-0"), "1Gi");
    assert!(intent_records(&fake) == 0, "no intent");

    // The fake's webhook answers the create a server-side apply of a missing object makes,
    // as the real server does (the re-apply would have failed here).
    let other: StatefulSet = serde_json::from_value(cache("1Gi")).unwrap();
    let e = c.apply(&other).await.unwrap_err();
    assert_eq!(e.code(), Some(400), "{e}");
    assert!(
        e.server_text()
            .starts_with("admission webhook \"sts-policy.example.com\" denied the request: "),
        "{e}"
    );
    fake.allow_creates();
    run_converge(&c, &j, &desired(), &opts()).await.unwrap();
    assert_eq!(storage(&fake, "data-web-0"), "2Gi");
}

#[tokio::test]
async fn a_tenant_that_may_patch_but_not_create_fails_at_the_preflight_writing_nothing() {
    let fake = world().await;
    let user = "system:serviceaccount:apps:deployer";
    fake.grant(
        NS,
        user,
        json!([
            {"apiGroups": ["apps"], "resources": ["statefulsets"],
             "verbs": ["get", "list", "watch", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
             "verbs": ["get", "list", "patch"]},
        ]),
    );
    let tenant = flux_converger::cluster::tenant::impersonating(&fake.client(), user).unwrap();
    // StorageClasses are the service's read, as in the gate.
    let c = TenantCluster::new(tenant, fake.client(), Duration::from_secs(5));
    let j = ConfigMapJournal::new(fake.client(), JOURNAL_NS, Duration::from_secs(5));
    let before = uid(&fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap());
    fake.clear_requests();
    let options = Options {
        act_as: Some(user.into()),
        ..opts()
    };

    let e = run_converge(&c, &j, &desired(), &options)
        .await
        .unwrap_err();

    assert!(
        matches!(e, converge::ConvergeError::Access { code: 403, .. }),
        "{e:?}"
    );
    assert_eq!(e.step(), Some(Step::Preflight), "{e}");
    assert_eq!(e.step().map(Step::as_str), Some("preflight"));
    assert_eq!(e.written(), converge::Written::Nothing);
    let message = e.to_string();
    for part in [
        user,
        "\"create\" on \"statefulsets\"",
        "API group \"apps\"",
        "namespace default",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert!(real_writes(&fake).is_empty(), "{:?}", real_writes(&fake));
    assert_eq!(
        uid(&fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap()),
        before
    );
    assert_eq!(storage(&fake, "data-web-0"), "1Gi");
}

#[tokio::test]
async fn a_statefulset_without_a_recreate_sends_no_preflight() {
    let fake = world().await;
    let (c, j) = cluster(&fake);
    // Templates as live: only claims smaller than the template grow (none here), nothing to
    // re-create.
    let report = run_converge(
        &c,
        &j,
        &serde_json::from_value(statefulset("1Gi", "1Gi")).unwrap(),
        &opts(),
    )
    .await
    .unwrap();
    assert_eq!(report.outcome, Outcome::Unchanged);
    assert!(
        !fake.requests().iter().any(|r| r.method == Method::POST),
        "{:#?}",
        fake.requests()
    );
}

#[tokio::test]
async fn one_refused_statefulset_holds_the_others_of_the_set_and_nothing_is_written() {
    let fake = world().await;
    let cache_uid = seed_cache(&fake).await;
    let (c, j) = cluster(&fake);
    let web_before = uid(&fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap());
    // `web` grows (it would be written first), `cache` shrinks.
    let set: Vec<StatefulSet> = vec![desired(), serde_json::from_value(cache("512Mi")).unwrap()];

    let results = converge::converge_all(&c, &j, &set, &opts()).await;

    assert_eq!(results.len(), 2);
    let web = results[0].as_ref().unwrap();
    let refused = results[1].as_ref().unwrap();
    assert_eq!(refused.outcome, Outcome::Refused);
    assert_eq!(refused.refusal.as_ref().unwrap().code, RefusalCode::Shrink);
    assert_eq!(web.outcome, Outcome::Held, "{web:?}");
    assert_eq!(web.outcome.as_str(), "held");
    assert_eq!(
        web.held_by.as_deref(),
        Some("not written: StatefulSet default/cache of the same revision was refused")
    );
    assert!(
        web.claims.iter().all(|c| c.action != ClaimAction::Resized),
        "{web:?}"
    );
    assert!(real_writes(&fake).is_empty(), "{:?}", real_writes(&fake));
    assert_eq!(
        uid(&fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap()),
        web_before
    );
    assert_eq!(
        uid(&fake
            .get("apps/v1", "StatefulSet", Some(NS), "cache")
            .unwrap()),
        cache_uid
    );
    assert_eq!(storage(&fake, "data-web-0"), "1Gi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_converges_a_file_all_or_nothing() {
    let fake = world().await;
    seed_cache(&fake).await;
    let served = fake.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("set.yaml");
    let doc = |v: Value| serde_json::to_string(&v).unwrap();
    std::fs::write(
        &file,
        format!(
            "{}\n---\n{}\n",
            doc(statefulset("2Gi", "1Gi")),
            doc(cache("512Mi"))
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap();

    for dry_run in [true, false] {
        let mut args = vec!["converge", "-f", file, "-o", "json"];
        if dry_run {
            args.push("--dry-run=server");
        }
        let (code, out, err) = cli(&served.kubeconfig, &args).await;
        assert_eq!(code, 3, "dry run {dry_run}: {out}\n{err}");
        let summary: Value = serde_json::from_str(&out).unwrap();
        let outcomes: Vec<&str> = summary["statefulsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["outcome"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(outcomes, ["held", "refused"], "{out}");
        assert_eq!(
            summary["statefulsets"][0]["heldBy"],
            "not written: StatefulSet default/cache of the same revision was refused"
        );
        assert!(real_writes(&fake).is_empty(), "{:?}", real_writes(&fake));
    }
    assert_eq!(storage(&fake, "data-web-0"), "1Gi");

    // A refused pre-flight is exit 3 in a dry run too: the pre-flight is a dry run.
    let web_only = dir.path().join("web.yaml");
    std::fs::write(&web_only, doc(statefulset("2Gi", "1Gi"))).unwrap();
    fake.deny_creates("StatefulSet", "deny.example.com", "no", None);
    let (code, out, err) = cli(
        &served.kubeconfig,
        &[
            "converge",
            "-f",
            web_only.to_str().unwrap(),
            "--dry-run=server",
        ],
    )
    .await;
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(out.contains("create-refused"), "{out}");
    assert!(real_writes(&fake).is_empty(), "{:?}", real_writes(&fake));
}

#[tokio::test]
async fn intents_record_the_identity_and_the_service_resumes_each_as_it() {
    use flux_converger::journal::{Intent, intent_from_secret};
    use flux_converger::service::JournalResume;
    use flux_converger::service::Resume as _;
    let fake = world().await;
    let user = "system:serviceaccount:apps:deployer";
    fake.grant(
        NS,
        user,
        json!([
            {"apiGroups": ["apps"], "resources": ["statefulsets"],
             "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
             "verbs": ["get", "list", "patch"]},
        ]),
    );
    let j = ConfigMapJournal::new(fake.client(), JOURNAL_NS, Duration::from_secs(5));
    // A converge as the tenant that stops right after its orphan delete (the re-apply's answer
    // is lost): the intent is left, recorded as the tenant.
    let tenant = flux_converger::cluster::tenant::impersonating(&fake.client(), user).unwrap();
    let c = TenantCluster::new(tenant, fake.client(), Duration::from_secs(5));
    fake.add_fault(FaultRule {
        method: Some(Method::PATCH),
        path_contains: "/statefulsets/web".into(),
        nth: 2, // 0: the proof; 1: the desired object in place; 2: the re-apply
        action: Fault::Status {
            code: 500,
            reason: "InternalError".into(),
            message: "etcd is down".into(),
        },
    });
    // The Kustomization the revision came from acts as that service account.
    fake.seed(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": "apps"},
        "spec": {"interval": "10m", "path": "./apps", "prune": true,
                 "serviceAccountName": "deployer",
                 "sourceRef": {"kind": "GitRepository", "name": "apps"}},
    }));
    let options = Options {
        act_as: Some(user.into()),
        kustomization: Some("apps/apps".into()),
        ..opts()
    };
    let e = run_converge(&c, &j, &desired(), &options)
        .await
        .unwrap_err();
    assert_eq!(e.step(), Some(Step::Reapply), "{e}");
    fake.clear_faults();
    settle(&fake).await;
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "web")
            .is_none()
    );
    let name = flux_converger::journal::intent_record_name(NS, "web");
    let secret = fake.get("v1", "Secret", Some(JOURNAL_NS), &name).unwrap();
    assert_eq!(secret["type"], "flux-converger.io/intent");
    let intent: Intent = intent_from_secret(&serde_json::from_value(secret).unwrap()).unwrap();
    assert_eq!(intent.act_as.as_deref(), Some(user));
    assert_eq!(intent.kustomization.as_deref(), Some("apps/apps"));
    assert!(intent.deleting);

    // An intent of an earlier version (no actAs) for another StatefulSet: not resumed, kept.
    let mut legacy = intent.clone();
    legacy.name = "cache".into();
    legacy.desired.metadata.name = Some("cache".into());
    legacy.act_as = None;
    j.record(&legacy).await.unwrap();

    fake.clear_requests();
    let resume = JournalResume {
        client: fake.client(),
        namespace: JOURNAL_NS.into(),
        call_timeout: Duration::from_secs(5),
        wait_timeout: Duration::from_secs(5),
        fence: None,
        shard: Default::default(),
        default_service_account: None,
        argocd_namespace: None,
        intents: None,
        refused_gauge: None,
    };
    resume.resume_all().await;

    // On start no render is at hand: web, absent, is not re-created (someone may have pruned
    // it since); it was read as the tenant, and nothing was written.
    let sts_requests: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/statefulsets"))
        .collect();
    assert!(!sts_requests.is_empty());
    assert!(
        sts_requests
            .iter()
            .all(|r| !r.is_write() && r.impersonate_user.as_deref() == Some(user)),
        "{sts_requests:#?}"
    );
    assert!(
        !sts_requests.iter().any(|r| r.path.ends_with("/cache")),
        "the legacy intent's StatefulSet was not touched: {sts_requests:#?}"
    );
    assert!(j.load(NS, "cache").await.unwrap().is_some());
    assert!(j.load(NS, "web").await.unwrap().is_some());

    // The Kustomization's next converge (its render has web) finishes it, as the tenant.
    fake.clear_requests();
    let report = run_converge(&c, &j, &desired(), &options).await.unwrap();
    assert_eq!(
        report.resumed.as_ref().map(|r| r.action),
        Some(ResumeAction::Reapplied)
    );
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "web")
            .is_some()
    );
    let sts_requests: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/statefulsets"))
        .collect();
    assert!(
        sts_requests.iter().any(|r| r.is_apply() && r.is_write()),
        "{sts_requests:#?}"
    );
    assert!(
        sts_requests
            .iter()
            .all(|r| r.impersonate_user.as_deref() == Some(user)),
        "{sts_requests:#?}"
    );
    assert!(j.load(NS, "web").await.unwrap().is_none());

    // With resume_all itself: the unknown identity is reported by name, with why.
    let resumed = converge::resume_all(
        |i: &Intent| {
            std::future::ready(match i.act_as {
                Some(_) => Ok(&c),
                None => Err("no recorded identity".to_string()),
            })
        },
        &j,
        &opts(),
    )
    .await
    .unwrap();
    assert!(resumed.results.is_empty());
    assert_eq!(resumed.not_resumed.len(), 1);
    let kept = &resumed.not_resumed[0];
    assert_eq!((kept.namespace.as_str(), kept.name.as_str()), (NS, "cache"));
    assert_eq!(kept.reason, "no recorded identity");
}

/// The fake answers a dry-run create as a real v1.32.6 does (conformance steps
/// `08.preflight.dry-run-create-existing|invalid|forbidden`): existence is checked last, after
/// authorization and validation.
#[tokio::test]
async fn the_fake_answers_a_dry_run_create_as_the_real_server() {
    use kube::api::{Api, PostParams};
    let fake = world().await;
    let params = PostParams {
        dry_run: true,
        field_manager: Some("kustomize-controller".into()),
    };
    let status = |e: kube::Error| match e {
        kube::Error::Api(s) => s,
        other => panic!("{other}"),
    };
    let admin: Api<StatefulSet> = Api::namespaced(fake.client(), NS);

    let e = status(admin.create(&params, &desired()).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(e.message, "statefulsets.apps \"web\" already exists");
    let details = e.details.unwrap();
    assert_eq!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ),
        ("web", "apps", "statefulsets")
    );

    let mut invalid = statefulset("2Gi", "1Gi");
    invalid["spec"]["replicas"] = json!(-1);
    let invalid: StatefulSet = serde_json::from_value(invalid).unwrap();
    let e = status(admin.create(&params, &invalid).await.unwrap_err());
    assert_eq!(
        (e.code, e.reason.as_str()),
        (422, "Invalid"),
        "{}",
        e.message
    );
    assert_eq!(
        e.message,
        "StatefulSet.apps \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"
    );

    let user = "system:serviceaccount:apps:deployer";
    fake.grant(
        NS,
        user,
        json!([{"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "patch"]}]),
    );
    let tenant = flux_converger::cluster::tenant::impersonating(&fake.client(), user).unwrap();
    let e = status(
        Api::<StatefulSet>::namespaced(tenant, NS)
            .create(&params, &desired())
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        format!(
            "statefulsets.apps is forbidden: User \"{user}\" cannot create resource \"statefulsets\" in API group \"apps\" in the namespace \"default\""
        )
    );
    assert!(fake.requests().iter().all(|r| !r.is_write()));
}

// ------------------------------------------------------------ issue 27: the journal's trust

/// What a value substituted from a Secret (`postBuild.substituteFrom`) looks like in the
/// desired object: it must never land in a ConfigMap.
const SENTINEL: &str = "s3cr3t-from-a-Secret-7f1c";

/// The desired object with [`SENTINEL`] as a pod-template env value, as a substitution puts it.
fn desired_with_sentinel() -> StatefulSet {
    let mut v = statefulset("2Gi", "1Gi");
    v["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "PASSWORD", "value": SENTINEL}]);
    serde_json::from_value(v).unwrap()
}

/// Every ConfigMap of the journal namespace, as text.
fn configmaps_text(fake: &FakeApiServer) -> String {
    fake.list("v1", "ConfigMap", Some(JOURNAL_NS))
        .iter()
        .map(|cm| cm.to_string())
        .collect()
}

/// The intent the journal holds for default/web, read from its Secret.
fn web_intent(fake: &FakeApiServer) -> Option<flux_converger::journal::Intent> {
    let name = flux_converger::journal::intent_record_name(NS, "web");
    let secret = fake.get("v1", "Secret", Some(JOURNAL_NS), &name)?;
    assert_eq!(secret["type"], "flux-converger.io/intent");
    Some(
        flux_converger::journal::intent_from_secret(&serde_json::from_value(secret).unwrap())
            .unwrap(),
    )
}

/// The service's resume on start, over the fake, keeping what it refuses in `cache`.
fn service_resume(
    fake: &FakeApiServer,
    cache: Option<flux_converger::journal::watched::IntentCache>,
    gauge: Option<prometheus_client::metrics::gauge::Gauge>,
) -> flux_converger::service::JournalResume {
    flux_converger::service::JournalResume {
        client: fake.client(),
        namespace: JOURNAL_NS.into(),
        call_timeout: Duration::from_secs(5),
        wait_timeout: Duration::from_secs(5),
        fence: None,
        shard: Default::default(),
        default_service_account: None,
        argocd_namespace: None,
        intents: cache,
        refused_gauge: gauge,
    }
}

#[tokio::test]
async fn an_intent_holding_a_substituted_value_is_a_secret_never_a_configmap() {
    let fake = world().await;
    let (c, j) = cluster(&fake);
    // Interrupted right after the record: the orphan delete fails.
    fake.add_fault(FaultRule {
        method: Some(Method::DELETE),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: Fault::Status {
            code: 500,
            reason: "InternalError".into(),
            message: "etcd is down".into(),
        },
    });
    let e = run_converge(&c, &j, &desired_with_sentinel(), &opts())
        .await
        .unwrap_err();
    assert_eq!(e.step(), Some(Step::Orphan), "{e}");
    assert!(
        !configmaps_text(&fake).contains(SENTINEL),
        "a ConfigMap holds the substituted value: {}",
        configmaps_text(&fake)
    );
    let intent = web_intent(&fake).expect("the intent is kept, in a Secret");
    let env = serde_json::to_string(&intent.desired).unwrap();
    assert!(env.contains(SENTINEL), "{env}");
}

#[tokio::test]
async fn a_legacy_intent_configmap_is_moved_into_a_secret_at_start() {
    use flux_converger::service::Resume as _;
    let fake = world().await;
    let live = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    // An earlier version's record of a converge that stopped before its delete.
    let intent = flux_converger::journal::Intent {
        namespace: NS.into(),
        name: "web".into(),
        uid: uid(&live),
        desired: desired_with_sentinel(),
        plan: json!({"recreate": true}),
        recorded_at: "2026-11-29T17:00:00Z".into(),
        revision: None,
        deleting: false,
        act_as: Some("-".into()),
        kustomization: None,
    };
    let mut cm = serde_json::to_value(
        flux_converger::journal::intent_to_configmap(JOURNAL_NS, &intent).unwrap(),
    )
    .unwrap();
    cm["apiVersion"] = json!("v1");
    cm["kind"] = json!("ConfigMap");
    fake.seed(cm);
    assert!(configmaps_text(&fake).contains(SENTINEL));

    service_resume(&fake, None, None).resume_all().await;

    assert!(
        !configmaps_text(&fake).contains(SENTINEL),
        "the legacy ConfigMap is gone: {}",
        configmaps_text(&fake)
    );
    // Moved as it was; not resumed by the service (it does not name its Kustomization), so it
    // is still there for the operator, now as a Secret.
    assert_eq!(web_intent(&fake), Some(intent.clone()));

    // Idempotent: a crash between the Secret's create and the ConfigMap's delete leaves both;
    // the next start only deletes the ConfigMap, and the Secret wins.
    let mut stale = intent.clone();
    stale.recorded_at = "2020-01-01T00:00:00Z".into();
    let mut cm = serde_json::to_value(
        flux_converger::journal::intent_to_configmap(JOURNAL_NS, &stale).unwrap(),
    )
    .unwrap();
    cm["apiVersion"] = json!("v1");
    cm["kind"] = json!("ConfigMap");
    fake.seed(cm);
    service_resume(&fake, None, None).resume_all().await;
    assert!(fake.list("v1", "ConfigMap", Some(JOURNAL_NS)).is_empty());
    assert_eq!(web_intent(&fake), Some(intent));
}

/// A Secret in the journal namespace with the intent label, named `record`, holding `intent`.
fn seed_intent_secret(
    fake: &FakeApiServer,
    record: &str,
    intent: &flux_converger::journal::Intent,
) {
    let mut secret = serde_json::to_value(
        flux_converger::journal::intent_to_secret(JOURNAL_NS, intent).unwrap(),
    )
    .unwrap();
    secret["apiVersion"] = json!("v1");
    secret["kind"] = json!("Secret");
    secret["metadata"]["name"] = json!(record);
    fake.seed(secret);
}

#[tokio::test]
async fn forged_intents_are_left_in_place_not_resumed_and_reported() {
    use flux_converger::service::Resume as _;
    let fake = world().await;
    let tenant = "system:serviceaccount:apps:deployer";
    fake.seed(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": "apps"},
        "spec": {"interval": "10m", "path": "./apps", "prune": true,
                 "serviceAccountName": "deployer",
                 "sourceRef": {"kind": "GitRepository", "name": "apps"}},
    }));
    let live = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    // What a resume would carry on with: the live uid, a grown template (claims would grow,
    // the StatefulSet be deleted and re-applied).
    let base = flux_converger::journal::Intent {
        namespace: NS.into(),
        name: "web".into(),
        uid: uid(&live),
        desired: desired(),
        plan: json!({"recreate": true}),
        recorded_at: "2026-12-03T12:00:00Z".into(),
        revision: None,
        deleting: true,
        act_as: Some(tenant.into()),
        kustomization: Some("apps/apps".into()),
    };
    // 1. Its key is not the one its StatefulSet's intent is kept under.
    seed_intent_secret(&fake, "flux-converger-intent.default.db", &base);
    // 2. The service's own identity for a Kustomization that has a tenant's.
    let mut own = base.clone();
    own.name = "web-own".into();
    own.desired.metadata.name = Some("web-own".into());
    own.act_as = Some("-".into());
    seed_intent_secret(&fake, "flux-converger-intent.default.web-own", &own);
    // 3. Another service account than the Kustomization's now.
    let mut other = base.clone();
    other.name = "web-other".into();
    other.desired.metadata.name = Some("web-other".into());
    other.act_as = Some("system:serviceaccount:apps:admin".into());
    seed_intent_secret(&fake, "flux-converger-intent.default.web-other", &other);
    // 4. Its desired object is another StatefulSet than the one it records.
    let mut elsewhere = base.clone();
    elsewhere.desired.metadata.namespace = Some("kube-system".into());
    seed_intent_secret(&fake, "flux-converger-intent.default.web", &elsewhere);

    let (cache, watch) =
        flux_converger::journal::watched::IntentCache::watch(fake.client(), JOURNAL_NS);
    let task = tokio::spawn(watch);
    for _ in 0..500 {
        if cache.is_synced() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let gauge = prometheus_client::metrics::gauge::Gauge::default();
    fake.clear_requests();
    let resume = service_resume(&fake, Some(cache.clone()), Some(gauge.clone()));
    resume.resume_all().await;

    // Nothing written, nothing of the StatefulSets even asked as a tenant.
    let writes: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.is_write())
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.path.contains("/statefulsets")),
        "{:#?}",
        fake.requests()
    );
    assert_eq!(
        uid(&fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap()),
        uid(&live)
    );
    assert_eq!(storage(&fake, "data-web-0"), "1Gi");
    // Left in place.
    assert_eq!(fake.list("v1", "Secret", Some(JOURNAL_NS)).len(), 4);
    // Reported: the gauge, and by name with why (what `/status` shows as refusedIntents).
    assert_eq!(gauge.get(), 4);
    let refused = resume.refused();
    let reasons: Vec<(String, String)> = refused
        .iter()
        .map(|r| (format!("{} {}", r.object, r.name), r.reason.clone()))
        .collect();
    assert_eq!(refused.len(), 4, "{reasons:#?}");
    let reason_of = |record: &str| {
        refused
            .iter()
            .find(|r| r.object.ends_with(record))
            .map(|r| r.reason.clone())
            .unwrap_or_else(|| panic!("{record} not reported: {reasons:#?}"))
    };
    assert!(reason_of("flux-converger-intent.default.db").contains("is kept as"));
    assert!(
        reason_of("flux-converger-intent.default.web-own").contains("never resumes as the service")
    );
    assert!(
        reason_of("flux-converger-intent.default.web-other")
            .contains("Kustomization apps/apps acts as \"system:serviceaccount:apps:deployer\"")
    );
    assert!(reason_of("flux-converger-intent.default.web").contains("kube-system/web"));

    // A converge of web (its Kustomization's render, as the tenant) does not resume the forged
    // record either: it reports it and decides on its own.
    let tenant_client =
        flux_converger::cluster::tenant::impersonating(&fake.client(), tenant).unwrap();
    fake.grant(
        NS,
        tenant,
        json!([
            {"apiGroups": ["apps"], "resources": ["statefulsets"],
             "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
             "verbs": ["get", "list", "patch"]},
        ]),
    );
    let tc = TenantCluster::new(tenant_client, fake.client(), Duration::from_secs(5));
    let (_, j) = cluster(&fake);
    let dry = Options {
        dry_run: true,
        act_as: Some(tenant.into()),
        ..opts()
    };
    let report = run_converge(&tc, &j, &desired(), &dry).await.unwrap();
    let r = report.refused_intent.expect("reported");
    assert!(r.reason.contains("kube-system/web"), "{}", r.reason);
    assert!(report.resumed.is_none());
    task.abort();
}

/// A fence whose windows never open (a replica shutting down, or one that lost its Lease
/// between the claim patches and the delete).
#[derive(Debug)]
struct NoWindow;

impl flux_converger::converge::fence::Fence for NoWindow {
    fn check(&self) -> Result<(), flux_converger::converge::fence::Fenced> {
        Ok(())
    }
    fn open_window(
        &self,
    ) -> Result<flux_converger::converge::fence::Window, flux_converger::converge::fence::Fenced>
    {
        Err(flux_converger::converge::fence::Fenced::Stopping)
    }
}

#[tokio::test]
async fn a_refused_window_leaves_no_intent_saying_deleting() {
    let fake = world().await;
    let (c, j) = cluster(&fake);
    let fenced = Options {
        fence: Some(std::sync::Arc::new(NoWindow)),
        ..opts()
    };
    let e = run_converge(&c, &j, &desired(), &fenced).await.unwrap_err();
    assert!(matches!(e, ConvergeError::Fenced { .. }), "{e}");
    assert!(
        web_intent(&fake).is_none_or(|i| !i.deleting),
        "{:?}",
        web_intent(&fake)
    );

    // An intent that says `deleting` for a delete never sent (a crash right after the record):
    // the next converge, refused its window, leaves it saying it is not deleting.
    fake.add_fault(FaultRule {
        method: Some(Method::DELETE),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: Fault::Status {
            code: 500,
            reason: "InternalError".into(),
            message: "etcd is down".into(),
        },
    });
    let mut grown = statefulset("3Gi", "1Gi");
    grown["spec"]["podManagementPolicy"] = json!("OrderedReady");
    let grown: StatefulSet = serde_json::from_value(grown).unwrap();
    run_converge(&c, &j, &grown, &opts()).await.unwrap_err();
    fake.clear_faults();
    assert!(web_intent(&fake).expect("recorded").deleting);
    let e = run_converge(&c, &j, &grown, &fenced).await.unwrap_err();
    assert!(matches!(e, ConvergeError::Fenced { .. }), "{e}");
    assert!(!web_intent(&fake).expect("kept").deleting);
    // Someone prunes it now: no resume brings it back.
    fake.remove("apps/v1", "StatefulSet", Some(NS), "web");
    let resumed = converge::resume_all(
        |_: &flux_converger::journal::Intent| std::future::ready(Ok::<_, String>(&c)),
        &j,
        &rendered_opts(),
    )
    .await
    .unwrap();
    assert_eq!(
        resumed.results[0].2.as_ref().unwrap().action,
        ResumeAction::DeletedElsewhere
    );
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "web")
            .is_none()
    );
}

#[tokio::test]
async fn a_pruned_statefulset_its_kustomization_no_longer_renders_is_not_recreated() {
    use flux_converger::service::Resume as _;
    let fake = world().await;
    let (c, j) = cluster(&fake);
    fake.seed(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": JOURNAL_NS},
        "spec": {"interval": "10m", "path": "./apps", "prune": true,
                 "sourceRef": {"kind": "GitRepository", "name": "apps"}},
    }));
    let live = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    // An intent that says our delete was sent; then Flux prunes web (the new revision no
    // longer has it) before anyone resumes.
    let intent = flux_converger::journal::Intent {
        namespace: NS.into(),
        name: "web".into(),
        uid: uid(&live),
        desired: desired(),
        plan: json!({"recreate": true}),
        recorded_at: "2026-12-03T12:00:00Z".into(),
        revision: None,
        deleting: true,
        act_as: Some("-".into()),
        kustomization: Some(format!("{JOURNAL_NS}/apps")),
    };
    j.record(&intent).await.unwrap();
    fake.remove("apps/v1", "StatefulSet", Some(NS), "web");
    fake.clear_requests();

    // The service on start has no render: not re-created, kept and reported.
    let gauge = prometheus_client::metrics::gauge::Gauge::default();
    service_resume(&fake, None, Some(gauge.clone()))
        .resume_all()
        .await;
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "web")
            .is_none()
    );
    assert!(web_intent(&fake).is_some(), "kept");
    assert_eq!(gauge.get(), 1);
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.is_write() && r.path.contains("/statefulsets")),
        "{:#?}",
        fake.requests()
    );

    // The command with a file that no longer has web: not re-created either, reported.
    let other = Options {
        renders: Some(std::sync::Arc::new(
            [(NS.to_string(), "cache".to_string())].into(),
        )),
        resume_as_operator: true,
        ..opts()
    };
    let resumed = converge::resume_all(
        |_: &flux_converger::journal::Intent| std::future::ready(Ok::<_, String>(&c)),
        &j,
        &other,
    )
    .await
    .unwrap();
    assert!(resumed.results.is_empty());
    assert_eq!(resumed.not_resumed.len(), 1);
    assert!(
        resumed.not_resumed[0]
            .reason
            .contains("no render at hand still has it"),
        "{}",
        resumed.not_resumed[0].reason
    );
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "web")
            .is_none()
    );

    // A render that has it (its Kustomization still renders web) re-creates it.
    let resumed = converge::resume_all(
        |_: &flux_converger::journal::Intent| std::future::ready(Ok::<_, String>(&c)),
        &j,
        &rendered_opts(),
    )
    .await
    .unwrap();
    assert_eq!(
        resumed.results[0].2.as_ref().unwrap().action,
        ResumeAction::Reapplied
    );
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "web")
            .is_some()
    );
}
