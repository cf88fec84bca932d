//! The service's HelmRelease runs (`service::helm`) against the fake API server: a HelmRelease
//! whose upgrade helm-controller gave up on (tests/fixtures/helm/helmrelease-stalled.yaml, the
//! status helm-controller writes) next to Helm's own release records (release-v1-deployed.yaml,
//! release-v2-failed.yaml) and the StatefulSet v1 installed at 1Gi. helm-controller's answer to
//! the hand-back is played by the test, as helm-controller writes it.

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use flux_converger::cluster::{Cluster as _, KubeCluster};
use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::render::KustomizeCommand;
use flux_converger::flux::render::resolve::Resolver;
use flux_converger::helm::release::{self, ReleaseRecord, Status};
use flux_converger::model::{
    FluxOutcome, GateMode, GateOutcome, Key, Kind, RevisionState, Trigger,
};
use flux_converger::records::events::EventSink;
use flux_converger::records::metrics::Metrics;
use flux_converger::records::results::{Results, Shard};
use flux_converger::service::gate::{Gate, GateConfig};
use flux_converger::service::helmrelease::{HelmConfig, HelmGate};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

const NS: &str = "demo";
const SERVICE_NS: &str = "flux-system";

fn fixture(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/helm")
        .join(name);
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The fixture's objects as they are seeded: server-set fields left to the fake.
fn seedable(mut object: Value) -> Value {
    if let Some(meta) = object["metadata"].as_object_mut() {
        for field in ["resourceVersion", "uid", "creationTimestamp"] {
            meta.remove(field);
        }
    }
    object
}

/// A release record of the fixtures, decoded.
fn record(name: &str) -> ReleaseRecord {
    let secret: Secret = serde_json::from_value(fixture(name)).unwrap();
    release::decode_secret(&secret, 1 << 20).unwrap()
}

/// Seeds record `version` (v2's manifest) with `status` and `description`, as Helm stores it.
fn seed_record(fake: &FakeApiServer, version: i64, status: Status, description: &str) {
    let mut r = record("release-v2-failed.yaml");
    r.version = version;
    if let Some(info) = r.info.as_mut() {
        info.status = status;
        info.description = description.to_string();
    }
    let secret = release::encode_secret(&r, NS, ("modifiedAt", 1_764_585_100 + version)).unwrap();
    fake.seed(serde_json::to_value(secret).unwrap());
}

/// The world after the failed upgrade: `web` v1 at 1Gi with two Bound claims, the stalled
/// HelmRelease, records v1 (deployed) and v2 (failed).
pub(crate) async fn world() -> FakeApiServer {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::new();
    for ns in [NS, SERVICE_NS] {
        fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    fake.seed_yaml(
        &std::fs::read_to_string(fake_apiserver::fixture_path("v1.28/storageclasses.yaml"))
            .unwrap(),
    );
    fake.enable_statefulset_controller();
    fake.set_pods_ready(true);
    let state = fixture("cluster-state.yaml");
    let live = state["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "StatefulSet")
        .cloned()
        .unwrap();
    let mut live = seedable(live);
    live["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("generation");
    let live: StatefulSet = serde_json::from_value(live).unwrap();
    KubeCluster::new(fake.client(), Duration::from_secs(5))
        .apply(&live)
        .await
        .unwrap();
    // The claims as the cluster held them (Bound at 1Gi), from the same capture.
    for item in state["items"].as_array().unwrap() {
        if item["kind"] == "PersistentVolumeClaim" {
            fake.seed(seedable(item.clone()));
        }
    }
    for i in 0..2 {
        assert!(
            claim(&fake, i).is_some(),
            "claim data-web-{i} in the capture"
        );
    }
    // Both pods (OrderedReady: one after the other, each once Ready).
    for _ in 0..500 {
        if pod_uids(&fake).len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fake.seed(seedable(fixture("helmrelease-stalled.yaml")));
    for name in ["release-v1-deployed.yaml", "release-v2-failed.yaml"] {
        fake.seed(seedable(fixture(name)));
    }
    fake.clear_requests();
    fake
}

fn claim(fake: &FakeApiServer, ordinal: usize) -> Option<Value> {
    fake.get(
        "v1",
        "PersistentVolumeClaim",
        Some(NS),
        &format!("data-web-{ordinal}"),
    )
}

fn helmrelease(fake: &FakeApiServer) -> Value {
    fake.get("helm.toolkit.fluxcd.io/v2", "HelmRelease", Some(NS), "web")
        .unwrap()
}

fn change_helmrelease(fake: &FakeApiServer, change: impl FnOnce(&mut Value)) {
    fake.modify(
        "helm.toolkit.fluxcd.io/v2",
        "HelmRelease",
        Some(NS),
        "web",
        change,
    )
    .unwrap();
}

/// The HelmRelease runs over `fake`, as the service builds them.
pub(crate) fn helm_gate(fake: &FakeApiServer) -> HelmGate {
    let gate = Gate::standalone(GateConfig {
        client: fake.client(),
        namespace: SERVICE_NS.into(),
        resolver: Resolver {
            client: fake.client(),
            fetcher: Fetcher::new(FetchOptions::default()).unwrap(),
            kustomize: KustomizeCommand::default(),
            strict: true,
            allow_cross_namespace: true,
        },
        results: Results::new(fake.client(), SERVICE_NS.into(), Duration::from_secs(5)),
        metrics: Metrics::default(),
        handoff_timeout: Duration::from_secs(60),
        call_timeout: Duration::from_secs(5),
        default_service_account: None,
        events: EventSink::new(fake.client(), None, Some("flux-converger-0".into())).unwrap(),
        default_gate: GateMode::Off,
    });
    HelmGate::new(
        HelmConfig {
            client: fake.client(),
            results: Results::of_kind(
                fake.client(),
                SERVICE_NS.into(),
                Duration::from_secs(5),
                Shard::Unsharded,
                Kind::HELM_RELEASE,
            ),
            events: EventSink::new(fake.client(), None, Some("flux-converger-0".into())).unwrap(),
            call_timeout: Duration::from_secs(5),
            handoff_timeout: Duration::from_secs(60),
            default_service_account: None,
            max_decoded_bytes: 1 << 20,
        },
        gate.step().clone(),
    )
}

async fn run(gate: &HelmGate) -> GateOutcome {
    gate.run(NS, "web", Trigger::Watch).await
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

fn secret_versions(fake: &FakeApiServer) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = fake
        .list("v1", "Secret", Some(NS))
        .iter()
        .map(|s| {
            (
                s["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                s["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// helm-controller's answer to the forced reconcile `token` asked for: `ready` the upgrade
/// went through (record v3 deployed), else it failed again on the same error (v3 failed,
/// stalled again).
fn answer(fake: &FakeApiServer, token: &str, ready: bool) {
    let immutable = helmrelease(fake)["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()["message"]
        .clone();
    if ready {
        seed_record(fake, 3, Status::Deployed, "Upgrade complete");
    } else {
        seed_record(fake, 3, Status::Failed, "Upgrade \"web\" failed: ...");
    }
    change_helmrelease(fake, |hr| {
        let status = &mut hr["status"];
        status["lastHandledReconcileAt"] = json!(token);
        status["lastHandledForceAt"] = json!(token);
        let mut snapshot = status["history"][0].clone();
        snapshot["version"] = json!(3);
        snapshot["status"] = json!(if ready { "deployed" } else { "failed" });
        status["history"]
            .as_array_mut()
            .unwrap()
            .insert(0, snapshot);
        status["conditions"] = if ready {
            json!([{"type": "Ready", "status": "True", "reason": "UpgradeSucceeded",
                    "message": "Helm upgrade succeeded for release demo/web.v3 with chart web@0.2.0",
                    "observedGeneration": 2, "lastTransitionTime": "2026-12-01T11:00:00Z"},
                   {"type": "Released", "status": "True", "reason": "UpgradeSucceeded",
                    "message": "Helm upgrade succeeded", "observedGeneration": 2,
                    "lastTransitionTime": "2026-12-01T11:00:00Z"}])
        } else {
            json!([{"type": "Stalled", "status": "True", "reason": "RetriesExceeded",
                    "message": "Failed to upgrade after 2 attempt(s)", "observedGeneration": 2,
                    "lastTransitionTime": "2026-12-01T11:00:00Z"},
                   {"type": "Ready", "status": "False", "reason": "UpgradeFailed",
                    "message": immutable, "observedGeneration": 2,
                    "lastTransitionTime": "2026-12-01T11:00:00Z"}])
        };
    });
}

fn last(gate: &HelmGate) -> flux_converger::model::RevisionRecord {
    gate.results().last(NS, "web").expect("a record")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wedged_upgrade_is_converged_from_the_release_record_and_handed_back() {
    let fake = world().await;
    let gate = helm_gate(&fake);
    let pods = pod_uids(&fake);
    assert_eq!(pods.len(), 2, "the StatefulSet's pods run");
    let secrets = secret_versions(&fake);
    let before: StatefulSet =
        serde_json::from_value(fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap())
            .unwrap();

    assert_eq!(
        run(&gate).await,
        GateOutcome::Done(RevisionState::Converged)
    );

    let record = last(&gate);
    assert_eq!(record.revision, "v2", "{record:#?}");
    assert_eq!(record.state, RevisionState::Converged);
    let live = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
    assert_eq!(
        live["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    assert_ne!(
        live["metadata"]["uid"],
        json!(before.metadata.uid),
        "re-created"
    );
    // Helm's ownership metadata and helm-controller's field manager: its next upgrade updates
    // the object instead of conflicting with the re-create.
    assert_eq!(
        live["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "Helm"
    );
    assert_eq!(
        live["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "web"
    );
    assert_eq!(
        live["metadata"]["annotations"]["meta.helm.sh/release-namespace"],
        NS
    );
    let managers: Vec<&str> = live["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"helm-controller"), "{managers:?}");
    assert!(!managers.contains(&"kustomize-controller"), "{managers:?}");
    for i in 0..2 {
        assert_eq!(
            claim(&fake, i).unwrap()["spec"]["resources"]["requests"]["storage"],
            "2Gi"
        );
    }
    assert_eq!(pod_uids(&fake), pods, "no pod restarted");
    // The hand-back: one token in both annotations, as `flux reconcile hr --force` writes.
    let token = record
        .handoff
        .as_ref()
        .unwrap()
        .requested_at
        .clone()
        .unwrap();
    let hr = helmrelease(&fake);
    assert_eq!(
        hr["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"],
        json!(token)
    );
    assert_eq!(
        hr["metadata"]["annotations"]["reconcile.fluxcd.io/forceAt"],
        json!(token)
    );
    // Helm's records are never written.
    assert_eq!(secret_versions(&fake), secrets);
    assert!(
        fake.writes()
            .iter()
            .all(|w| !w.path.contains("sh.helm.release")),
        "a release Secret was written"
    );

    // Until helm-controller answers, a run writes nothing more.
    fake.clear_requests();
    assert_eq!(
        run(&gate).await,
        GateOutcome::Done(RevisionState::Converged)
    );
    assert!(fake.writes().is_empty(), "{:?}", fake.writes());

    answer(&fake, &token, true);
    run(&gate).await;
    let record = last(&gate);
    let flux = record
        .flux
        .as_ref()
        .expect("helm-controller's answer recorded");
    assert_eq!(flux.outcome, FluxOutcome::Applied, "{record:#?}");
    assert_eq!(flux.applied_revision.as_deref(), Some("v3"));
    // helm-controller's answer has its own Event: the `Converged` one, published at the
    // hand-back, is not published again with the answer merged into it.
    assert_eq!(
        events_on_helmrelease(&fake),
        vec![
            (
                "Normal".to_string(),
                "Converged".to_string(),
                "revision v2 converged, handed off (reconcile): handed off\nStatefulSet demo/web: \
                 template data 1Gi -> 2Gi, 2 claim(s) grown, recreated without restarting pods"
                    .to_string()
            ),
            (
                "Normal".to_string(),
                "HandoffApplied".to_string(),
                "revision v2 handed off: helm-controller applied it at v3".to_string()
            ),
        ]
    );
    // Deployed: nothing more to do.
    fake.clear_requests();
    assert_eq!(run(&gate).await, GateOutcome::NotHandled);
    assert!(fake.writes().is_empty(), "{:?}", fake.writes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_identical_failure_is_recorded_and_not_retried() {
    let fake = world().await;
    let gate = helm_gate(&fake);
    run(&gate).await;
    let token = last(&gate).handoff.unwrap().requested_at.unwrap();
    answer(&fake, &token, false);
    run(&gate).await;
    let record = last(&gate);
    let flux = record.flux.as_ref().unwrap();
    assert_eq!(flux.outcome, FluxOutcome::Failed, "{record:#?}");
    assert_eq!(flux.attempted_revision.as_deref(), Some("v3"));
    let events = events_on_helmrelease(&fake);
    let reasons: Vec<(&str, &str)> = events
        .iter()
        .map(|(t, r, _)| (t.as_str(), r.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [("Normal", "Converged"), ("Warning", "HandoffFailed")],
        "{events:#?}"
    );
    assert!(
        events[1]
            .2
            .starts_with("revision v2 handed off: helm-controller failed it again at v3: "),
        "{events:#?}"
    );

    fake.clear_requests();
    assert_eq!(run(&gate).await, GateOutcome::NotHandled);
    assert!(fake.writes().is_empty(), "retried: {:?}", fake.writes());
    let why = gate
        .waiting(&Key::helm_release(NS, "web"))
        .unwrap_or_default();
    assert!(why.contains("not retried until"), "{why}");

    // A new generation (someone changed the HelmRelease) makes it worth converging again.
    change_helmrelease(&fake, |hr| {
        hr["metadata"]["generation"] = json!(3);
        hr["status"]["observedGeneration"] = json!(3);
    });
    assert_eq!(
        run(&gate).await,
        GateOutcome::Done(RevisionState::Converged)
    );
    assert_eq!(last(&gate).revision, "v3");
}

/// Every state but "helm-controller gave up on the immutable error" leaves everything alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_any_other_state_nothing_is_written() {
    type Change = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Change)> = vec![
        (
            "not opted in",
            Box::new(|hr| {
                hr["metadata"]["annotations"] = json!({});
            }),
        ),
        (
            "another gate value",
            Box::new(|hr| {
                hr["metadata"]["annotations"]["flux-converger.io/gate"] = json!("suspend");
            }),
        ),
        (
            "held",
            Box::new(|hr| {
                hr["metadata"]["annotations"]["flux-converger.io/hold"] = json!("migrating");
            }),
        ),
        (
            "suspended",
            Box::new(|hr| hr["spec"]["suspend"] = json!(true)),
        ),
        (
            "not stalled, retries left",
            Box::new(|hr| {
                hr["spec"]["upgrade"] = json!({"remediation": {"retries": 3}});
                let conditions = hr["status"]["conditions"].as_array_mut().unwrap();
                conditions.retain(|c| c["type"] != "Stalled");
            }),
        ),
        (
            "reconciling",
            Box::new(|hr| {
                hr["status"]["conditions"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({
                "type": "Reconciling", "status": "True", "reason": "Progressing",
                "message": "Running 'upgrade' action", "observedGeneration": 2,
                "lastTransitionTime": "2026-12-01T10:30:05Z"}));
            }),
        ),
        (
            "a request not handled yet",
            Box::new(|hr| {
                hr["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"] = json!("now");
            }),
        ),
        (
            "a different failure",
            Box::new(|hr| {
                for c in hr["status"]["conditions"].as_array_mut().unwrap() {
                    if c["type"] == "Ready" {
                        c["message"] = json!(
                            "Helm upgrade failed for release demo/web with chart web@0.2.0: context deadline exceeded"
                        );
                    }
                }
            }),
        ),
    ];
    for (case, change) in cases {
        let fake = world().await;
        change_helmrelease(&fake, |hr| change(hr));
        fake.clear_requests();
        let outcome = run(&helm_gate(&fake)).await;
        assert_eq!(outcome, GateOutcome::NotHandled, "{case}");
        assert!(fake.writes().is_empty(), "{case}: {:?}", fake.writes());
    }
    // A record another Helm action holds.
    let fake = world().await;
    seed_record(&fake, 3, Status::PendingUpgrade, "Preparing upgrade");
    change_helmrelease(&fake, |hr| {
        let mut snapshot = hr["status"]["history"][0].clone();
        snapshot["version"] = json!(3);
        snapshot["status"] = json!("pending-upgrade");
        hr["status"]["history"]
            .as_array_mut()
            .unwrap()
            .insert(0, snapshot);
    });
    fake.clear_requests();
    let gate = helm_gate(&fake);
    assert_eq!(run(&gate).await, GateOutcome::NotHandled);
    assert!(fake.writes().is_empty(), "{:?}", fake.writes());
    let why = gate
        .waiting(&Key::helm_release(NS, "web"))
        .unwrap_or_default();
    assert!(why.contains("pending-upgrade"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_or_oversized_release_record_is_refused() {
    for (case, data, expected) in [
        (
            "not a release",
            flux_converger::helm::base64::encode(b"{\"name\": 3}"),
            "malformed",
        ),
        (
            "a bomb",
            {
                use std::io::Write as _;
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                gz.write_all(&vec![b' '; 4 << 20]).unwrap();
                flux_converger::helm::base64::encode(&gz.finish().unwrap())
            },
            "oversized",
        ),
    ] {
        let fake = world().await;
        fake.modify("v1", "Secret", Some(NS), "sh.helm.release.v1.web.v2", |s| {
            s["data"]["release"] = json!(flux_converger::helm::base64::encode(data.as_bytes()));
        })
        .unwrap();
        let before = fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap();
        fake.clear_requests();
        let gate = helm_gate(&fake);
        assert_eq!(
            run(&gate).await,
            GateOutcome::Done(RevisionState::Refused),
            "{case}"
        );
        let record = last(&gate);
        let error = record.error.as_ref().expect("the refusal says why");
        assert!(
            error.message.contains("sh.helm.release.v1.web.v2"),
            "{case}: {}",
            error.message
        );
        assert!(
            error.message.contains(expected),
            "{case}: {}",
            error.message
        );
        assert_eq!(
            fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap(),
            before,
            "{case}"
        );
        assert!(
            fake.writes()
                .iter()
                .all(|w| w.path.contains("/configmaps") || w.path.contains("/events")),
            "{case}: only the record and its Event are written: {:?}",
            fake.writes()
        );
    }
}

/// The whole service (`service::start`): the HelmRelease watch queues the opted-in one, the run
/// converges and hands back, `/status` lists it under `helmReleases` and
/// `/status/helmreleases/{ns}/{name}` shows its history; helm-controller's answer, arriving as a
/// change of the HelmRelease, is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_the_service_converges_a_wedged_helmrelease_and_reports_it() {
    use flux_converger::service::leadership::LeaseSettings;
    use flux_converger::service::queue::BackoffPolicy;
    use flux_converger::service::{Tuning, start_tuned};
    let fake = world().await;
    let tuning = Tuning {
        lease: LeaseSettings::new("helm-e2e"),
        backoff: BackoffPolicy {
            base: Duration::from_secs(3600),
            max: Duration::from_secs(3600),
            jitter: 0.0,
        },
        shutdown_grace: Duration::from_secs(30),
        restart_retry: Duration::from_secs(10),
    };
    let config = test_support::service::config(SERVICE_NS)
        .handoff_timeout(Duration::from_secs(60))
        .build();
    let running = start_tuned(config, fake.client(), tuning)
        .await
        .expect("the service starts");
    let get = |path: String| async move {
        let response = reqwest::get(path).await.expect("the service answers");
        let code = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (
            code,
            serde_json::from_str::<Value>(&text).unwrap_or_default(),
        )
    };
    let base = format!("http://{}", running.addr);
    let mut row = Value::Null;
    for _ in 0..500 {
        let (_, status) = get(format!("{base}/status")).await;
        row = status["helmReleases"][0].clone();
        if row["last"]["state"] == "converged" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(row["kind"], "HelmRelease", "{row}");
    assert_eq!(row["namespace"], NS);
    assert_eq!(row["gate"], "reconcile");
    assert_eq!(row["last"]["revision"], "v2", "{row}");
    assert_eq!(row["last"]["state"], "converged", "{row}");
    let (_, status) = get(format!("{base}/status")).await;
    assert_eq!(status["kustomizations"], json!([]), "{status}");

    let (code, detail) = get(format!("{base}/status/helmreleases/{NS}/web")).await;
    assert_eq!(code, 200, "{detail}");
    assert_eq!(detail["kind"], "HelmRelease");
    let token = detail["revisions"][0]["handoff"]["requestedAt"]
        .as_str()
        .expect("the hand-back token")
        .to_string();
    let (code, _) = get(format!("{base}/status/helmreleases/{NS}/absent")).await;
    assert_eq!(code, 404);
    let page = reqwest::get(format!("{base}/helmreleases/{NS}/web"))
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("/status/helmreleases/demo/web") && html.contains("v2"),
        "{html}"
    );

    answer(&fake, &token, true);
    let mut flux = Value::Null;
    for _ in 0..500 {
        let (_, detail) = get(format!("{base}/status/helmreleases/{NS}/web")).await;
        flux = detail["revisions"][0]["flux"].clone();
        if !flux.is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(flux["outcome"], "applied", "{flux}");
    assert_eq!(flux["appliedRevision"], "v3", "{flux}");
    let metrics = reqwest::get(format!("http://{}/metrics", running.metrics_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        "flux_converger_revisions_total{state=\"converged\",kind=\"HelmRelease\"}",
        "flux_converger_claims_grown_total{kind=\"HelmRelease\"} 2",
        "flux_converger_statefulsets_recreated_total{kind=\"HelmRelease\"} 1",
    ] {
        assert!(metrics.contains(series), "{series} missing from\n{metrics}");
    }
    running.shutdown().await;
}

/// An intent a HelmRelease's converge left (the process stopped mid-converge) resumes only as
/// the identity that HelmRelease acts as now, read from the HelmRelease it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helmrelease_intent_resumes_only_as_its_helmreleases_identity() {
    use flux_converger::journal::{Intent, OWN_IDENTITY};
    use flux_converger::service::resume::{Owners, cluster_for_intent};
    let fake = world().await;
    let desired: StatefulSet =
        serde_json::from_value(fake.get("apps/v1", "StatefulSet", Some(NS), "web").unwrap())
            .unwrap();
    let intent = |act_as: &str, owner: &str| Intent {
        namespace: NS.into(),
        name: "web".into(),
        uid: "u".into(),
        desired: desired.clone(),
        plan: json!({}),
        recorded_at: "2026-12-01T10:31:00Z".into(),
        revision: Some("v2".into()),
        deleting: true,
        act_as: Some(act_as.into()),
        kustomization: Some(owner.into()),
    };
    let resume = |i: Intent| {
        let client = fake.client();
        async move {
            cluster_for_intent(&client, &i, &Owners::default(), Duration::from_secs(5))
                .await
                .map(|_| ())
        }
    };
    // No serviceAccountName: the HelmRelease acts as the service.
    assert_eq!(
        resume(intent(OWN_IDENTITY, "HelmRelease/demo/web")).await,
        Ok(())
    );
    let tenant = "system:serviceaccount:demo:deployer";
    let refused = resume(intent(tenant, "HelmRelease/demo/web"))
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("HelmRelease demo/web acts as \"-\""),
        "{refused}"
    );
    change_helmrelease(&fake, |hr| {
        hr["spec"]["serviceAccountName"] = json!("deployer")
    });
    assert_eq!(resume(intent(tenant, "HelmRelease/demo/web")).await, Ok(()));
    let refused = resume(intent(OWN_IDENTITY, "HelmRelease/demo/web"))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("never resumes as the service"),
        "{refused}"
    );
    // Not a Kustomization of that name: none exists.
    assert!(resume(intent(OWN_IDENTITY, "demo/web")).await.is_err());
}

/// A record whose StatefulSet the converge refuses (a shrink) is refused once: nothing is
/// written to the StatefulSet or its claims, and the same record is not converged again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_release_record_is_refused_once_and_nothing_is_written() {
    let fake = world().await;
    let mut r = record("release-v2-failed.yaml");
    r.manifest = r.manifest.replace("storage: 2Gi", "storage: 512Mi");
    fake.remove("v1", "Secret", Some(NS), "sh.helm.release.v1.web.v2");
    let secret = release::encode_secret(&r, NS, ("modifiedAt", 1_764_585_002)).unwrap();
    fake.seed(serde_json::to_value(secret).unwrap());
    fake.clear_requests();
    let gate = helm_gate(&fake);
    assert_eq!(run(&gate).await, GateOutcome::Done(RevisionState::Refused));
    let record = last(&gate);
    let refusal = record.statefulsets[0].refusal.as_ref().expect("a refusal");
    assert_eq!(refusal.code.as_str(), "shrink", "{record:#?}");
    assert!(
        fake.writes()
            .iter()
            .all(|w| w.path.contains("/configmaps") || w.path.contains("/events")),
        "{:?}",
        fake.writes()
    );
    assert!(helmrelease(&fake)["metadata"]["annotations"]["reconcile.fluxcd.io/forceAt"].is_null());
    fake.clear_requests();
    assert_eq!(run(&gate).await, GateOutcome::Done(RevisionState::Refused));
    assert!(
        fake.writes().is_empty(),
        "refused again: {:?}",
        fake.writes()
    );
}

/// The Kubernetes Events on the HelmRelease, oldest first: `(type, reason, note)`.
fn events_on_helmrelease(fake: &FakeApiServer) -> Vec<(String, String, String)> {
    let mut events: Vec<Value> = fake
        .list("events.k8s.io/v1", "Event", Some(NS))
        .into_iter()
        .filter(|e| e["regarding"]["kind"] == "HelmRelease")
        .collect();
    events.sort_by_key(|e| {
        e["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .parse::<u64>()
            .unwrap_or_default()
    });
    events
        .iter()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (text("type"), text("reason"), text("note"))
        })
        .collect()
}
