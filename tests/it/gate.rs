//! One revision through the gate against the fake kube-apiserver (crates/fake-apiserver) and a local
//! artifact server (tests/data/render): both hand-off modes with Flux's part played by the
//! test, a refused revision not handed off, a source that moves on during the converge, the
//! tenant's identity on every StatefulSet and claim call, a 403 under it, results persisted
//! and read back, records cut to fit, Kubernetes Events and Flux events.

use test_support::flux_standin;
use test_support::web;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_apiserver::FakeApiServer;
use flux_converger::cluster::{Cluster as _, KubeCluster};
use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::objects::Kustomization;
use flux_converger::flux::render::KustomizeCommand;
use flux_converger::flux::render::resolve::Resolver;
use flux_converger::http::backend::Backend as _;
use flux_converger::journal::watched::IntentCache;
use flux_converger::model::Key;
use flux_converger::model::{
    FluxOutcome, GateMode, RevisionRecord, RevisionState, StatefulSetEntry, StatefulSetOutcome,
    StepError, Trigger,
};
use flux_converger::records::events::EventSink;
use flux_converger::records::metrics::Metrics;
use flux_converger::records::results::{Results, results_configmap_name};
use flux_converger::service::gate::state::GateState;
use flux_converger::service::gate::{Gate, GateConfig, GateOutcome};
use flux_standin::flux_archive::{ArtifactServer, flux_artifact, sha256};
use http::Method;
use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::{Value, json};

const NS: &str = "default";
const FLUX_NS: &str = "flux-system";
const KS_API: &str = "kustomize.toolkit.fluxcd.io/v1";
const T: Duration = Duration::from_secs(5);

/// `web`: templates `data` and `logs`, 2 replicas.
fn statefulset(data: &str) -> Value {
    web::statefulset(2, data, json!({}))
}

/// A cluster with `web` at 1Gi (claims Bound), the `apps` Kustomization and its GitRepository,
/// and a local artifact server.
/// RBAC a tenant's service account needs for a converge; `claim_verbs` for the claims.
fn tenant_rules(claim_verbs: &[&str]) -> Value {
    json!([
        {"apiGroups": ["apps"], "resources": ["statefulsets"],
         "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": claim_verbs},
    ])
}

const ALL_CLAIM_VERBS: &[&str] = &["get", "list", "watch", "patch", "update"];
const DEPLOYER: &str = "system:serviceaccount:flux-system:deployer";

struct World {
    fake: FakeApiServer,
    server: ArtifactServer,
}

impl World {
    async fn new(gate: &str, suspended: bool, service_account: Option<&str>) -> World {
        flux_converger::tls::install_crypto_provider();
        let fake = FakeApiServer::new();
        fake.seed_fixture("v1.28/storageclasses.yaml");
        fake.enable_statefulset_controller();
        // As kustomize-controller applied it: with its owner labels.
        let live = web::statefulset(2, "1Gi", web::applied_by_apps());
        let live: StatefulSet = serde_json::from_value(live).unwrap();
        KubeCluster::new(fake.client(), T)
            .apply(&live)
            .await
            .unwrap();
        for _ in 0..500 {
            if (0..2).all(|i| {
                fake.get(
                    "v1",
                    "PersistentVolumeClaim",
                    Some(NS),
                    &format!("data-web-{i}"),
                )
                .is_some()
            }) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for i in 0..2 {
            fake.set_pvc_phase(NS, &format!("data-web-{i}"), "Bound");
        }
        let mut ks = json!({
            "apiVersion": KS_API, "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": FLUX_NS,
                         "annotations": {"flux-converger.io/gate": gate}},
            "spec": {"interval": "10m", "path": "./apps", "prune": true, "suspend": suspended,
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}},
            "status": {"lastAppliedRevision": "main@sha1:1", "lastAttemptedRevision": "main@sha1:1",
                       "observedGeneration": 1,
                       "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T00:00:00Z", "reason": "ReconciliationSucceeded",
                                       "message": "Applied revision: main@sha1:1"}]}
        });
        if let Some(sa) = service_account {
            ks["spec"]["serviceAccountName"] = json!(sa);
        }
        fake.seed(ks);
        let world = World {
            fake,
            server: ArtifactServer::start().await,
        };
        world.publish("main@sha1:1", "1Gi");
        world.fake.clear_requests();
        world
    }

    /// source-controller publishing `revision`, whose render declares `data` at `size`.
    fn publish(&self, revision: &str, size: &str) {
        self.publish_objects(revision, &[("apps/web.yaml", statefulset(size))]);
    }

    /// source-controller publishing `revision` with these files (path, object).
    fn publish_objects(&self, revision: &str, files: &[(&str, Value)]) {
        let yamls: Vec<(&str, String)> = files
            .iter()
            .map(|(path, object)| (*path, serde_saphyr::to_string(object).unwrap()))
            .collect();
        let entries: Vec<(&str, &str)> = yamls.iter().map(|(p, y)| (*p, y.as_str())).collect();
        self.publish_files(revision, &entries);
    }

    /// source-controller publishing `revision` with `files`.
    fn publish_files(&self, revision: &str, files: &[(&str, &str)]) {
        let archive = flux_artifact(files);
        let path = format!(
            "gitrepository/{FLUX_NS}/repo/{}.tar.gz",
            revision.replace(':', "-")
        );
        let url = self.server.put(&path, archive.clone());
        self.fake.seed(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": "repo", "namespace": FLUX_NS},
            "spec": {"interval": "1m", "url": "https://example.com/repo.git"},
            "status": {"artifact": {"url": url, "digest": sha256(&archive), "revision": revision,
                                    "path": path, "size": archive.len(),
                                    "lastUpdateTime": "2026-11-30T00:00:00Z"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                                       "message": "stored artifact", "lastTransitionTime": "2026-11-30T00:00:00Z"}]}
        }));
    }

    fn resolver(&self, allow_cross_namespace: bool) -> Resolver {
        Resolver {
            client: self.fake.client(),
            fetcher: Fetcher::new(FetchOptions::default()).unwrap(),
            kustomize: KustomizeCommand::default(),
            strict: true,
            allow_cross_namespace,
        }
    }

    fn config(&self, events: EventSink) -> GateConfig {
        GateConfig {
            client: self.fake.client(),
            namespace: FLUX_NS.into(),
            resolver: self.resolver(true),
            results: Results::new(self.fake.client(), FLUX_NS.into(), T),
            metrics: Metrics::default(),
            handoff_timeout: Duration::from_secs(30),
            call_timeout: T,
            default_service_account: None,
            events,
            default_gate: GateMode::Suspend,
        }
    }

    fn ks(&self) -> Value {
        self.fake
            .get(KS_API, "Kustomization", Some(FLUX_NS), "apps")
            .unwrap()
    }

    fn sts(&self) -> Value {
        self.fake
            .get("apps/v1", "StatefulSet", Some(NS), "web")
            .unwrap()
    }

    fn claim_size(&self, claim: &str) -> String {
        self.fake
            .get("v1", "PersistentVolumeClaim", Some(NS), claim)
            .unwrap()["spec"]["resources"]["requests"]["storage"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The merge patches written to the Kustomization, as their JSON bodies are not logged:
    /// told apart by the state they left (checked by each test), counted here.
    fn ks_writes(&self) -> usize {
        self.fake
            .writes()
            .iter()
            .filter(|r| r.path.contains("/kustomizations/apps"))
            .count()
    }

    /// Plays kustomize-controller: once the Kustomization is unsuspended (a generation newer
    /// than when it started) or asked to reconcile, it applies the source's current revision,
    /// or fails it with Flux's dry-run message when `fail` says so.
    fn flux(&self, fail: bool) -> Flux {
        let fake = self.fake.clone();
        let start_generation = self.ks()["metadata"]["generation"].as_i64().unwrap_or(1);
        let handled = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = handled.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let Some(ks) = fake.get(KS_API, "Kustomization", Some(FLUX_NS), "apps") else {
                    continue;
                };
                let generation = ks["metadata"]["generation"].as_i64().unwrap_or(0);
                let token = ks["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
                    .as_str()
                    .map(str::to_string);
                let unsuspended = ks["spec"]["suspend"] != json!(true)
                    && generation > start_generation
                    && ks["status"]["observedGeneration"].as_i64() != Some(generation);
                let requested = token.is_some()
                    && ks["status"]["lastHandledReconcileAt"].as_str() != token.as_deref();
                if !unsuspended && !requested {
                    continue;
                }
                let repo = fake
                    .get(
                        "source.toolkit.fluxcd.io/v1",
                        "GitRepository",
                        Some(FLUX_NS),
                        "repo",
                    )
                    .unwrap();
                let revision = repo["status"]["artifact"]["revision"]
                    .as_str()
                    .unwrap()
                    .to_string();
                seen.lock().unwrap().push(revision.clone());
                fake.modify(KS_API, "Kustomization", Some(FLUX_NS), "apps", |ks| {
                    let status = &mut ks["status"];
                    status["observedGeneration"] = json!(generation);
                    status["lastAttemptedRevision"] = json!(revision);
                    if let Some(t) = &token {
                        status["lastHandledReconcileAt"] = json!(t);
                    }
                    if fail {
                        status["conditions"] = json!([{"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T00:00:00Z",
                            "reason": "ReconciliationFailed", "observedGeneration": generation,
                            "message": "StatefulSet/default/web dry-run failed (Invalid): StatefulSet.apps \"web\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than ..."}]);
                    } else {
                        status["lastAppliedRevision"] = json!(revision);
                        status["conditions"] = json!([{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T00:00:00Z",
                            "reason": "ReconciliationSucceeded", "observedGeneration": generation,
                            "message": format!("Applied revision: {revision}")}]);
                    }
                });
            }
        });
        Flux { task, handled }
    }
}

struct Flux {
    task: tokio::task::JoinHandle<()>,
    handled: Arc<Mutex<Vec<String>>>,
}

impl Drop for Flux {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn last(results: &Results) -> RevisionRecord {
    results.last(FLUX_NS, "apps").expect("a record")
}

/// Plays the service's watches and tick for the gate's observer: every 10 ms the Kustomization
/// as the fake holds it is given to the observer (as a watch event would), then it ticks.
struct Follow(tokio::task::JoinHandle<()>);

impl Drop for Follow {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn follow(fake: &FakeApiServer, gate: &Gate) -> Follow {
    let observer = gate.observer();
    let fake = fake.clone();
    Follow(tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if let Some(value) = fake.get(KS_API, "Kustomization", Some(FLUX_NS), "apps")
                && let Ok(ks) = serde_json::from_value::<Kustomization>(value)
            {
                observer.kustomization(&ks);
            }
            observer.tick().await;
        }
    }))
}

/// Waits (polling, at most 30 s) until `cond` holds.
async fn until(mut cond: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition never held");
}

/// The newest record once Flux's answer (or the gate's timeout) closed the gate.
async fn answered(results: &Results) -> RevisionRecord {
    for _ in 0..3000 {
        let record = last(results);
        if record
            .flux
            .as_ref()
            .is_some_and(|f| f.outcome != FluxOutcome::Pending)
        {
            return record;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the gate never closed: {:#?}", last(results));
}

/// How many times Events were published, counting the repeats kube's recorder folds into one
/// Event's `series`.
fn event_occurrences(fake: &FakeApiServer) -> u64 {
    fake.list("events.k8s.io/v1", "Event", Some(FLUX_NS))
        .iter()
        .map(|e| e["series"]["count"].as_u64().unwrap_or(1))
        .sum()
}

fn events(fake: &FakeApiServer) -> Vec<(String, String, String)> {
    fake.list("events.k8s.io/v1", "Event", Some(FLUX_NS))
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default().to_string(),
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["reportingController"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// The source moved on in the window between a hand-off's record and the gate's registration
/// with the observer, so its event found no open gate to close: the run of the new revision
/// closes it (it has suspended the Kustomization before its converge) and records why on the
/// older revision, which otherwise would show the gate open, Flux's answer pending, for ever.
#[tokio::test]
async fn a_run_of_a_new_revision_closes_a_gate_its_source_event_did_not_find_open() {
    let w = World::new("suspend", true, None).await;
    w.publish("main@sha1:2", "2Gi");
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let gate = Gate::standalone(config);
    let key = Key::kustomization(FLUX_NS, "apps");
    let outcome = gate.run(FLUX_NS, "apps", Trigger::Webhook).await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    assert!(
        matches!(gate.observer().state(&key), GateState::Open(o) if o.revision == "main@sha1:2")
    );

    // No `source_moved` for this publish: its event came before the gate was registered.
    w.publish("main@sha1:3", "3Gi");
    let outcome = gate.run(FLUX_NS, "apps", Trigger::Watch).await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let history = results.history(FLUX_NS, "apps");
    let older = history
        .iter()
        .find(|r| r.revision == "main@sha1:2")
        .unwrap();
    let handoff = older.handoff.as_ref().unwrap();
    assert_eq!(handoff.action, "resuspended", "{older:#?}");
    assert!(handoff.resuspended_at.is_some());
    let flux = older.flux.as_ref().unwrap();
    assert_eq!(flux.outcome, FluxOutcome::Pending);
    assert!(
        flux.message
            .as_deref()
            .unwrap_or_default()
            .contains("moved on to main@sha1:3"),
        "{flux:?}"
    );
    assert_eq!(history[0].revision, "main@sha1:3");
    assert!(
        matches!(gate.observer().state(&key), GateState::Open(o) if o.revision == "main@sha1:3")
    );
    // Unsuspend (2), suspend before the converge of 3, unsuspend (3): the close wrote nothing.
    assert_eq!(w.ks_writes(), 3);
    assert_eq!(w.ks()["spec"]["suspend"], false);
}

#[tokio::test]
async fn suspend_mode_suspends_converges_hands_off_and_suspends_again() {
    // Found unsuspended with a pending revision: suspended first.
    let w = World::new("suspend", false, None).await;
    w.publish("main@sha1:2", "2Gi");
    let flux = w.flux(false);
    let config = w.config(EventSink::new(w.fake.client(), None, Some("test".into())).unwrap());
    let results = config.results.clone();
    let gate = Gate::standalone(config);

    let outcome = gate.run(FLUX_NS, "apps", Trigger::Webhook).await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    // The run ends at the hand-off: converged, the gate open, Flux's answer pending.
    let handed = last(&results);
    assert_eq!(handed.state, RevisionState::Converged);
    assert_eq!(handed.handoff.as_ref().unwrap().action, "unsuspended");
    assert_eq!(handed.flux.as_ref().unwrap().outcome, FluxOutcome::Pending);
    assert_eq!(w.ks_writes(), 2);
    // The watch brings Flux's answer: the observer closes the gate and records it.
    let _follow = follow(&w.fake, &gate);
    answered(&results).await;
    assert_eq!(
        w.sts()["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    assert_eq!(w.claim_size("data-web-0"), "2Gi");
    assert_eq!(w.claim_size("data-web-1"), "2Gi");
    // Suspend, unsuspend for the hand-off, suspend again; Flux applied the converged revision.
    assert_eq!(w.ks_writes(), 3);
    assert_eq!(w.ks()["spec"]["suspend"], true);
    assert_eq!(*flux.handled.lock().unwrap(), ["main@sha1:2"]);

    let record = last(&results);
    assert_eq!(record.revision, "main@sha1:2");
    assert_eq!(record.state, RevisionState::Converged);
    assert_eq!(record.trigger, Trigger::Webhook);
    assert_eq!(record.gate, Some(GateMode::Suspend));
    assert!(record.generation.is_some());
    assert!(record.digest.as_deref().unwrap().starts_with("sha256:"));
    assert!(record.finished_at.is_some());
    let handoff = record.handoff.as_ref().unwrap();
    assert_eq!(handoff.action, "resuspended");
    assert!(handoff.resuspended_at.is_some());
    assert_eq!(handoff.attempts.len(), 1);
    assert_eq!(handoff.attempts[0].outcome, FluxOutcome::Applied);
    assert_eq!(handoff.retry_at, None);
    let flux_result = record.flux.as_ref().unwrap();
    assert_eq!(flux_result.outcome, FluxOutcome::Applied);
    assert_eq!(flux_result.applied_revision.as_deref(), Some("main@sha1:2"));
    assert_eq!(record.statefulsets.len(), 1);
    let sts = &record.statefulsets[0];
    assert_eq!(sts.outcome, StatefulSetOutcome::Converged);
    assert_eq!(
        (sts.templates[0].from.as_str(), sts.templates[0].to.as_str()),
        ("1Gi", "2Gi")
    );
    assert_eq!(sts.claims.len(), 2);
    assert!(sts.old_uid.is_some() && sts.new_uid.is_some() && sts.old_uid != sts.new_uid);
    assert!(record.warnings.is_empty(), "{:?}", record.warnings);
    assert_eq!(
        events(&w.fake),
        [("Normal".into(), "Converged".into(), "flux-converger".into())]
    );

    // A new process reads the same history back.
    let reloaded = Results::new(w.fake.client(), FLUX_NS.into(), T);
    assert!(!reloaded.is_loaded());
    reloaded.load().await.unwrap();
    assert!(reloaded.is_loaded());
    assert_eq!(
        reloaded.history(FLUX_NS, "apps"),
        results.history(FLUX_NS, "apps")
    );
    assert!(reloaded.unfinished().is_empty());
}

#[tokio::test]
async fn reconcile_mode_requests_a_reconcile_that_heals_flux_failing_first() {
    let w = World::new("reconcile", false, None).await;
    w.publish("main@sha1:2", "2Gi");
    // Flux raced ahead and failed the new revision before the converge.
    w.fake
        .modify(KS_API, "Kustomization", Some(FLUX_NS), "apps", |ks| {
            ks["status"]["lastAttemptedRevision"] = json!("main@sha1:2");
            ks["status"]["conditions"] = json!([{"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T00:00:00Z",
            "reason": "ReconciliationFailed", "message": "dry-run failed"}]);
        });
    let flux = w.flux(false);
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let gate = Gate::standalone(config);
    let outcome = gate.run(FLUX_NS, "apps", Trigger::Resync).await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let _follow = follow(&w.fake, &gate);
    let record = answered(&results).await;
    let handoff = record.handoff.as_ref().unwrap();
    assert_eq!(handoff.mode, GateMode::Reconcile);
    assert_eq!(handoff.action, "reconcile-requested");
    let token = handoff.requested_at.clone().unwrap();
    assert!(
        token.parse::<jiff::Timestamp>().is_ok(),
        "RFC 3339: {token}"
    );
    let ks = w.ks();
    assert_eq!(
        ks["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"],
        token.as_str()
    );
    // Never suspended in this mode; the earlier failure was not taken for Flux's answer.
    assert_eq!(ks["spec"]["suspend"], false);
    assert_eq!(w.ks_writes(), 1);
    assert_eq!(record.flux.as_ref().unwrap().outcome, FluxOutcome::Applied);
    assert_eq!(*flux.handled.lock().unwrap(), ["main@sha1:2"]);
}

#[tokio::test]
async fn flux_failing_after_the_hand_off_is_recorded() {
    let w = World::new("suspend", true, None).await;
    w.publish("main@sha1:2", "2Gi");
    let _flux = w.flux(true);
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let gate = Gate::standalone(config);
    let outcome = gate.run(FLUX_NS, "apps", Trigger::Webhook).await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let _follow = follow(&w.fake, &gate);
    let record = answered(&results).await;
    let flux = record.flux.unwrap();
    assert_eq!(flux.outcome, FluxOutcome::Failed);
    assert!(flux.message.unwrap().contains("dry-run failed"));
    until(|| w.ks()["spec"]["suspend"] == true).await;
    // Not frozen: the gate re-opens on Flux's retry schedule (interval 10m, no retryInterval).
    let handoff = record.handoff.unwrap();
    assert_eq!(handoff.attempts.len(), 1);
    assert_eq!(handoff.attempts[0].outcome, FluxOutcome::Failed);
    assert!(handoff.retry_at.is_some(), "{handoff:?}");
    assert!(matches!(
        gate.observer().state(&Key::kustomization(FLUX_NS, "apps")),
        GateState::Closed { reopen: Some(_) }
    ));
}

#[tokio::test]
async fn a_refused_revision_is_not_handed_off_and_writes_nothing() {
    let w = World::new("suspend", true, None).await;
    w.publish("main@sha1:2", "512Mi");
    let _flux = w.flux(false);
    let config = w.config(EventSink::new(w.fake.client(), None, None).unwrap());
    let results = config.results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Webhook)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Refused));
    let record = last(&results);
    assert_eq!(record.state, RevisionState::Refused);
    assert!(record.handoff.is_none() && record.flux.is_none());
    let refusal = record.statefulsets[0].refusal.as_ref().unwrap();
    assert_eq!(refusal.code, "shrink");
    assert_eq!(w.ks_writes(), 0, "not handed off");
    assert_eq!(w.ks()["spec"]["suspend"], true);
    let writes: Vec<String> = w
        .fake
        .writes()
        .iter()
        .filter(|r| !r.path.contains("/configmaps") && !r.path.contains("/events"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    // The only ConfigMap written is the results record: no intent was ever journaled.
    let records: Vec<Value> = w
        .fake
        .list("v1", "ConfigMap", Some(FLUX_NS))
        .iter()
        .map(|cm| cm["metadata"]["labels"]["flux-converger.io/record"].clone())
        .collect();
    assert_eq!(records, [json!("results")]);
    assert_eq!(
        events(&w.fake),
        [(
            "Warning".into(),
            "ConvergeRefused".into(),
            "flux-converger".into()
        )]
    );
}

#[tokio::test]
async fn a_source_that_moves_on_during_the_converge_supersedes_the_result() {
    let w = World::new("suspend", true, None).await;
    w.publish("main@sha1:2", "2Gi");
    let _flux = w.flux(false);
    // source-controller publishes revision 3 while the StatefulSet is being recreated.
    let (fake, server) = (w.fake.clone(), w.server.clone());
    let mover = tokio::spawn(async move {
        loop {
            if fake
                .requests()
                .iter()
                .any(|r| r.method == Method::DELETE && r.path.contains("/statefulsets/web"))
            {
                World { fake, server }.publish("main@sha1:3", "2Gi");
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let gate = Gate::standalone(config);
    let outcome = gate.run(FLUX_NS, "apps", Trigger::Webhook).await;
    mover.await.unwrap();
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let _follow = follow(&w.fake, &gate);
    answered(&results).await;
    let history = results.history(FLUX_NS, "apps");
    let states: Vec<(&str, RevisionState)> = history
        .iter()
        .map(|r| (r.revision.as_str(), r.state))
        .collect();
    assert_eq!(
        states,
        [
            ("main@sha1:3", RevisionState::Converged),
            ("main@sha1:2", RevisionState::Superseded)
        ]
    );
    assert!(
        history[1].handoff.is_none(),
        "a stale result is not handed off"
    );
    assert_eq!(
        history[0].statefulsets[0].outcome,
        StatefulSetOutcome::Unchanged
    );
    assert_eq!(
        history[0]
            .flux
            .as_ref()
            .unwrap()
            .applied_revision
            .as_deref(),
        Some("main@sha1:3")
    );
}

#[tokio::test]
async fn tenant_calls_impersonate_the_service_account_and_the_service_writes_as_itself() {
    let w = World::new("suspend", true, Some("deployer")).await;
    w.fake.grant(NS, DEPLOYER, tenant_rules(ALL_CLAIM_VERBS));
    w.publish("main@sha1:2", "2Gi");
    let _flux = w.flux(false);
    let config = w.config(EventSink::new(w.fake.client(), None, None).unwrap());
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Webhook)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let tenant = Some("system:serviceaccount:flux-system:deployer".to_string());
    let requests = w.fake.requests();
    let mut tenant_calls = 0;
    for r in &requests {
        let is_tenant =
            r.path.contains("/statefulsets") || r.path.contains("/persistentvolumeclaims");
        if is_tenant {
            tenant_calls += 1;
            assert_eq!(r.impersonate_user, tenant, "{} {}", r.method, r.path);
        } else {
            assert_eq!(r.impersonate_user, None, "{} {}", r.method, r.path);
        }
    }
    // read, claims, dry run, 2 grows, delete, watch, re-apply at least.
    assert!(tenant_calls >= 8, "{tenant_calls}");
    assert!(requests.iter().any(|r| r.path.contains("/storageclasses")));
    assert!(
        requests
            .iter()
            .any(|r| r.path.contains("/configmaps/") && r.is_write())
    );
}

#[tokio::test]
async fn default_service_account_applies_when_the_kustomization_names_none() {
    let w = World::new("suspend", true, None).await;
    w.fake.grant(
        NS,
        "system:serviceaccount:flux-system:tenant-default",
        tenant_rules(ALL_CLAIM_VERBS),
    );
    w.publish("main@sha1:2", "1Gi");
    let _flux = w.flux(false);
    let mut config = w.config(EventSink::disabled());
    config.default_service_account = Some("tenant-default".into());
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Webhook)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let users: Vec<Option<String>> = w
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.contains("/statefulsets"))
        .map(|r| r.impersonate_user.clone())
        .collect();
    assert!(!users.is_empty());
    assert!(
        users
            .iter()
            .all(|u| u.as_deref() == Some("system:serviceaccount:flux-system:tenant-default"))
    );
}

#[tokio::test]
async fn forbidden_under_the_tenant_is_a_failed_revision_naming_the_permission() {
    let w = World::new("suspend", true, Some("deployer")).await;
    w.publish("main@sha1:2", "2Gi");
    let _flux = w.flux(false);
    // The tenant may read its claims but not grow them: the real server's 403.
    w.fake
        .grant(NS, DEPLOYER, tenant_rules(&["get", "list", "watch"]));
    let config = w.config(EventSink::new(w.fake.client(), None, None).unwrap());
    let results = config.results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Webhook)
        .await;
    let GateOutcome::Failed { message } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        message.contains("system:serviceaccount:flux-system:deployer may not patch persistentvolumeclaims in namespace default"),
        "{message}"
    );
    let record = last(&results);
    assert_eq!(record.state, RevisionState::Failed);
    assert!(record.handoff.is_none());
    let error = record.statefulsets[0].error.as_ref().unwrap();
    assert_eq!(error.step, "grow");
    // What to run by hand: the commands that print the careful script for what is left (the
    // StatefulSet is still there), not the script with the rendered object in it.
    let hint = error.hint.as_deref().unwrap();
    assert_eq!(
        hint,
        "flux-converger render --kustomization flux-system/apps --statefulsets > apps.yaml && kubectl get statefulsets,persistentvolumeclaims,storageclasses -A -o yaml | flux-converger plan -f apps.yaml --cluster-state - -o commands"
    );
    assert_eq!(w.ks_writes(), 0, "not handed off");
    assert_eq!(
        events(&w.fake),
        [(
            "Warning".into(),
            "ConvergeFailed".into(),
            "flux-converger".into()
        )]
    );
    // The StatefulSet was never deleted: the failure came before the orphan delete.
    assert!(w.fake.writes().iter().all(|r| r.method != Method::DELETE));
}

#[tokio::test]
async fn blocked_cross_namespace_source_is_refused_with_fluxs_words() {
    let w = World::new("suspend", true, None).await;
    w.fake
        .modify(KS_API, "Kustomization", Some(FLUX_NS), "apps", |ks| {
            ks["spec"]["sourceRef"]["namespace"] = json!("other");
        });
    let mut config = w.config(EventSink::disabled());
    config.resolver = w.resolver(false);
    let results = config.results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Resync)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Refused));
    let error = last(&results).error.unwrap();
    assert_eq!(error.step, "resolve");
    assert!(
        error.message.contains(
            "can't access 'GitRepository/other/repo', cross-namespace references have been blocked"
        ),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn gate_off_and_missing_kustomizations_are_not_handled() {
    let w = World::new("off", false, None).await;
    let gate = Gate::standalone(w.config(EventSink::disabled()));
    assert_eq!(
        gate.run(FLUX_NS, "apps", Trigger::Resync).await,
        GateOutcome::NotHandled
    );
    assert_eq!(
        gate.run(FLUX_NS, "missing", Trigger::Resync).await,
        GateOutcome::NotHandled
    );
    assert!(w.fake.writes().is_empty());
}

#[tokio::test]
async fn a_hand_off_flux_does_not_answer_is_a_warning_and_the_kustomization_is_suspended_again() {
    let w = World::new("suspend", true, None).await;
    w.publish("main@sha1:2", "2Gi");
    let mut config = w.config(EventSink::disabled());
    config.handoff_timeout = Duration::from_millis(300);
    let results = config.results.clone();
    let gate = Gate::standalone(config);
    let outcome = gate.run(FLUX_NS, "apps", Trigger::Webhook).await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let _follow = follow(&w.fake, &gate);
    let record = answered(&results).await;
    assert_eq!(record.flux.as_ref().unwrap().outcome, FluxOutcome::Timeout);
    assert!(
        record.warnings.iter().any(|w| w.starts_with("hand-off:")),
        "{:?}",
        record.warnings
    );
    until(|| w.ks()["spec"]["suspend"] == true).await;
}

#[tokio::test]
async fn flux_events_are_posted_to_events_addr_in_fluxs_format() {
    let w = World::new("suspend", true, None).await;
    w.publish("main@sha1:2", "2Gi");
    let _flux = w.flux(false);
    /// `Gotk-Component` and body of each post.
    type Posted = Arc<Mutex<Vec<(Option<String>, Value)>>>;
    let posted: Posted = Arc::default();
    let sink = posted.clone();
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |headers: http::HeaderMap, body: axum::body::Bytes| {
            let sink = sink.clone();
            async move {
                let component = headers
                    .get("gotk-component")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                sink.lock()
                    .unwrap()
                    .push((component, serde_json::from_slice(&body).unwrap()));
                http::StatusCode::ACCEPTED
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let sink = EventSink::new(w.fake.client(), Some(&format!("http://{addr}/")), None).unwrap();
    let outcome = Gate::standalone(w.config(sink))
        .run(FLUX_NS, "apps", Trigger::Webhook)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let posted = posted.lock().unwrap().clone();
    assert_eq!(posted.len(), 1);
    let (component, event) = &posted[0];
    assert_eq!(component.as_deref(), Some("flux-converger"));
    assert_eq!(event["involvedObject"]["kind"], "Kustomization");
    assert_eq!(event["involvedObject"]["name"], "apps");
    assert_eq!(event["reason"], "Converged");
    assert_eq!(event["severity"], "info");
    assert_eq!(event["reportingController"], "flux-converger");
    assert_eq!(
        event["metadata"]["kustomize.toolkit.fluxcd.io/revision"],
        "main@sha1:2"
    );
    assert!(
        event["message"]
            .as_str()
            .unwrap()
            .contains("StatefulSet default/web: template data 1Gi -> 2Gi")
    );
}

fn record(revision: &str, message_len: usize) -> RevisionRecord {
    RevisionRecord {
        volumes: Default::default(),
        revision: revision.into(),
        digest: None,
        trigger: Trigger::Startup,
        started_at: format!("2026-11-30T00:00:{:02}Z", revision.len() % 60),
        finished_at: None,
        state: RevisionState::Failed,
        statefulsets: Vec::new(),
        handoff: None,
        flux: None,
        warnings: Vec::new(),
        error: Some(StepError {
            step: "resolve".into(),
            message: "x".repeat(message_len),
            hint: None,
        }),
        generation: Some(1),
        gate: Some(GateMode::Suspend),
        attempts: 1,
    }
}

#[tokio::test]
async fn results_that_would_not_fit_are_cut_and_persisted() {
    let fake = FakeApiServer::new();
    let budget = 20_000;
    let results = Results::with_budget(fake.client(), FLUX_NS.into(), T, budget);
    for i in 0..6 {
        results
            .put("apps", "web", record(&format!("main@sha1:{i}"), 50_000))
            .await
            .unwrap();
    }
    let cm = fake
        .get(
            "v1",
            "ConfigMap",
            Some(FLUX_NS),
            &results_configmap_name("apps", "web"),
        )
        .unwrap();
    let stored = cm["data"]["records"].as_str().unwrap();
    assert!(stored.len() <= budget, "{}", stored.len());
    assert_eq!(
        cm["metadata"]["labels"]["flux-converger.io/record"],
        "results"
    );
    let history = results.history("apps", "web");
    assert!(!history.is_empty());
    assert_eq!(history[0].revision, "main@sha1:5");
    assert!(
        history[0]
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("truncated")
    );
    let reloaded = Results::new(fake.client(), FLUX_NS.into(), T);
    reloaded.load().await.unwrap();
    assert_eq!(reloaded.history("apps", "web"), history);
}

#[tokio::test]
async fn concurrent_writers_merge_instead_of_losing_records() {
    let fake = FakeApiServer::new();
    let a = Results::new(fake.client(), FLUX_NS.into(), T);
    let b = Results::new(fake.client(), FLUX_NS.into(), T);
    a.put("apps", "web", record("main@sha1:a", 10))
        .await
        .unwrap();
    // `b` has never read the ConfigMap: its create conflicts, it reads and merges.
    b.put("apps", "web", record("main@sha1:bb", 10))
        .await
        .unwrap();
    // `a` now holds a stale resourceVersion: its replace conflicts, it reads and merges.
    a.put("apps", "web", record("main@sha1:ccc", 10))
        .await
        .unwrap();
    let reloaded = Results::new(fake.client(), FLUX_NS.into(), T);
    reloaded.load().await.unwrap();
    let revisions: Vec<String> = reloaded
        .history("apps", "web")
        .into_iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(revisions, ["main@sha1:ccc", "main@sha1:bb", "main@sha1:a"]);
    let conflicts = fake
        .requests()
        .iter()
        .filter(|r| r.code == Some(409))
        .count();
    assert_eq!(conflicts, 2);
}

/// The forget of a gone Kustomization's results waits for a save of them still in flight, and
/// deletes what it wrote: without it the delete's precondition named the version the save was
/// replacing (409, kept as "written since") and the save put the history back in memory, so
/// the results of a deleted Kustomization stayed until the next resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_results_waits_for_a_save_in_flight_and_deletes_what_it_wrote() {
    let fake = FakeApiServer::new();
    let results = Results::new(fake.client(), FLUX_NS.into(), T);
    results
        .put("apps", "web", record("main@sha1:a", 10))
        .await
        .unwrap();
    // The next save's replace is held by the server for a while.
    fake.add_fault(fake_apiserver::FaultRule {
        method: Some(Method::PUT),
        path_contains: "/configmaps/flux-converger-results".into(),
        nth: 0,
        action: fake_apiserver::Fault::Delay(Duration::from_millis(500)),
    });
    let saving = {
        let results = results.clone();
        tokio::spawn(async move { results.put("apps", "web", record("main@sha1:b", 10)).await })
    };
    // The forget starts once the save's request is at the server.
    until(|| fake.requests().iter().any(|r| r.method == Method::PUT)).await;
    assert!(results.remove("apps", "web").await.unwrap());
    saving.await.unwrap().unwrap();
    let left = fake.get(
        "v1",
        "ConfigMap",
        Some(FLUX_NS),
        &results_configmap_name("apps", "web"),
    );
    assert!(left.is_none(), "{left:?}");
    assert!(results.history("apps", "web").is_empty());
}

#[tokio::test]
async fn a_claim_not_yet_bound_is_a_warning_and_the_revision_is_rechecked() {
    let w = World::new("suspend", true, None).await;
    // Left over from a scale-down, never bound: it cannot grow yet.
    w.fake.seed(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-web-5", "namespace": NS, "labels": {"app": "web"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                 "volumeMode": "Filesystem", "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}
    }));
    w.publish("main@sha1:2", "2Gi");
    let _flux = w.flux(false);
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Resync)
        .await;
    assert_eq!(outcome, GateOutcome::Deferred);
    let record = last(&results);
    assert_eq!(
        record.state,
        RevisionState::Converged,
        "handed off all the same"
    );
    assert_eq!(record.statefulsets[0].outcome, StatefulSetOutcome::Deferred);
    assert_eq!(record.statefulsets[0].deferred[0].claim, "data-web-5");
    assert!(
        record
            .warnings
            .iter()
            .any(|w| w.contains("claim data-web-5 deferred")),
        "{:?}",
        record.warnings
    );
    assert_eq!(w.claim_size("data-web-5"), "1Gi");
}

#[tokio::test]
async fn a_record_left_running_is_unfinished_after_a_restart() {
    let fake = FakeApiServer::new();
    let before = Results::new(fake.client(), FLUX_NS.into(), T);
    let mut running = record("main@sha1:9", 10);
    running.state = RevisionState::Running;
    running.error = None;
    before.put("apps", "web", running).await.unwrap();
    before
        .put("apps", "db", record("main@sha1:8", 10))
        .await
        .unwrap();
    let after = Results::new(fake.client(), FLUX_NS.into(), T);
    after.load().await.unwrap();
    assert_eq!(
        after.unfinished(),
        [("apps".to_string(), "web".to_string())]
    );
    assert_eq!(
        after.last("apps", "db").unwrap().state,
        RevisionState::Failed
    );
}

#[tokio::test]
async fn a_revision_flux_applied_already_is_not_handed_off_again() {
    // Flux applied revision 1 before the converger looked (the World's starting state).
    let w = World::new("suspend", true, None).await;
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Startup)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let record = last(&results);
    assert_eq!(record.revision, "main@sha1:1");
    assert!(record.handoff.is_none());
    assert_eq!(record.flux.unwrap().outcome, FluxOutcome::Applied);
    assert_eq!(
        record.statefulsets[0].outcome,
        StatefulSetOutcome::Unchanged
    );
    assert_eq!(w.ks_writes(), 0);
}

#[tokio::test]
async fn a_run_interrupted_by_a_restart_is_closed_and_handled_again() {
    let w = World::new("suspend", true, None).await;
    w.publish("main@sha1:2", "2Gi");
    let _flux = w.flux(false);
    // The previous process stopped while handling revision 2.
    let before = Results::new(w.fake.client(), FLUX_NS.into(), T);
    let mut running = record("main@sha1:2", 0);
    running.state = RevisionState::Running;
    running.error = None;
    before.put(FLUX_NS, "apps", running).await.unwrap();

    let mut config = w.config(EventSink::disabled());
    config.results.load().await.unwrap();
    assert_eq!(
        config.results.unfinished(),
        [(FLUX_NS.to_string(), "apps".to_string())]
    );
    let results = config.results.clone();
    config.results = results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Startup)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let history = results.history(FLUX_NS, "apps");
    assert_eq!(history.len(), 2);
    assert_eq!(history[0].state, RevisionState::Converged);
    assert_eq!(history[1].state, RevisionState::Failed);
    assert_eq!(history[1].error.as_ref().unwrap().step, "interrupted");
    assert!(results.unfinished().is_empty());
}

#[tokio::test]
async fn a_dry_run_denied_to_the_tenant_names_the_permission_and_writes_nothing() {
    let w = World::new("suspend", true, Some("deployer")).await;
    w.fake.grant(
        NS,
        DEPLOYER,
        json!([
            {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ALL_CLAIM_VERBS},
        ]),
    );
    w.publish("main@sha1:2", "2Gi");
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Webhook)
        .await;
    let GateOutcome::Failed { message } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        message.contains(&format!(
            "{DEPLOYER} may not patch statefulsets.apps in namespace default"
        )),
        "{message}"
    );
    let record = last(&results);
    assert_eq!(record.state, RevisionState::Failed);
    assert_eq!(record.statefulsets[0].error.as_ref().unwrap().step, "prove");
    // Not a refusal: the object was never judged. And nothing was written for it.
    assert!(record.statefulsets[0].refusal.is_none());
    assert!(
        w.fake
            .writes()
            .iter()
            .all(|r| r.path.contains("/configmaps")),
        "{:?}",
        w.fake.writes()
    );
}

/// A Kustomization or source read that gets no answer fails the revision under the
/// configured per-call deadline (`call_timeout`), not the 30 s default of the CLI's reads:
/// the message names the deadline it was cut at.
#[tokio::test]
async fn flux_object_reads_that_get_no_answer_fail_under_the_call_timeout() {
    const CALL: Duration = Duration::from_secs(2);
    // Longer than the 30 s default: a read under the default would name 30000 ms.
    const STALL: Duration = Duration::from_secs(35);
    let w = World::new("suspend", true, None).await;
    w.publish("main@sha1:2", "2Gi");
    let mut config = w.config(EventSink::disabled());
    config.call_timeout = CALL;
    let results = config.results.clone();
    let gate = Gate::standalone(config);
    let cut = format!("no answer within {} ms", CALL.as_millis());

    // The run's first read of the Kustomization.
    w.fake.add_fault(fake_apiserver::FaultRule {
        method: Some(Method::GET),
        path_contains: "/kustomizations/apps".into(),
        nth: 0,
        action: fake_apiserver::Fault::Delay(STALL),
    });
    match gate.run(FLUX_NS, "apps", Trigger::Webhook).await {
        GateOutcome::Failed { message } => assert!(message.contains(&cut), "{message}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    w.fake.clear_faults();

    // The resolve's read of the source.
    w.fake.add_fault(fake_apiserver::FaultRule {
        method: Some(Method::GET),
        path_contains: "/gitrepositories/repo".into(),
        nth: 0,
        action: fake_apiserver::Fault::Delay(STALL),
    });
    match gate.run(FLUX_NS, "apps", Trigger::Webhook).await {
        GateOutcome::Failed { message } => assert!(message.contains(&cut), "{message}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    let error = last(&results).error.expect("the resolve's error");
    assert_eq!(error.step, "resolve");
    assert!(error.message.contains(&cut), "{}", error.message);
    // Nothing was converged: the claims keep their size.
    assert_eq!(w.claim_size("data-web-0"), "1Gi");
}

/// The converge's own requests in the fake's log: StatefulSets, claims, StorageClasses and
/// the intent journal (the gate's Flux reads, results, Events and hand-off left out).
fn converge_requests(fake: &FakeApiServer) -> Vec<String> {
    fake.requests()
        .iter()
        .filter(|r| {
            [
                "/statefulsets",
                "/persistentvolumeclaims",
                "/storageclasses",
                "/flux-converger-intent",
            ]
            .iter()
            .any(|p| r.path.contains(p))
                || ((r.path.ends_with("/configmaps") || r.path.ends_with("/secrets"))
                    && r.query.contains("flux-converger.io"))
        })
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect()
}

/// With the service's caches the converge inside the gate lists no StorageClasses, does not
/// read its intent, decides on the watched StatefulSet and sees its delete complete in that
/// watch: N+8 requests for N claims (claim list, the proof, the dry run in place, pre-flight,
/// N grows, intent, orphan delete, re-apply, intent cleared), four fewer than without them.
#[tokio::test]
async fn a_converge_inside_the_gate_reads_storage_classes_and_intents_from_its_caches() {
    const CLAIMS: usize = 2;
    let mut counted = Vec::new();
    for cached in [false, true] {
        let w = World::new("suspend", true, None).await;
        w.publish("main@sha1:2", "2Gi");
        let flux = w.flux(false);
        let mut gate = Gate::standalone(w.config(EventSink::disabled()));
        let mut watches = Vec::new();
        if cached {
            let (store, task) =
                flux_converger::service::watch::storage_class_cache(w.fake.client());
            watches.push(tokio::spawn(task));
            store.wait_until_ready().await.unwrap();
            assert!(!store.state().is_empty());
            gate = gate
                .clone()
                .with_step(gate.step().clone().with_storage_classes(store));
            let (intents, task) = IntentCache::watch(w.fake.client(), FLUX_NS);
            watches.push(tokio::spawn(task));
            // Observed, not timed: the watch has listed.
            for _ in 0..500 {
                if intents.is_synced() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(intents.is_synced());
            gate = gate
                .clone()
                .with_step(gate.step().clone().with_intents(intents));
            let (statefulsets, task) = flux_converger::cluster::WatchedStatefulSets::watch(
                w.fake.client(),
                flux_converger::flux::objects::OWNER_NAME_LABEL,
            );
            watches.push(tokio::spawn(task));
            for _ in 0..500 {
                if statefulsets.get(NS, "web").is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(statefulsets.get(NS, "web").is_some());
            gate = gate
                .clone()
                .with_step(gate.step().clone().with_statefulsets(statefulsets));
        }
        w.fake.clear_requests();
        let outcome = gate.run(FLUX_NS, "apps", Trigger::Webhook).await;
        assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
        assert_eq!(w.claim_size("data-web-1"), "2Gi");
        drop(flux);
        watches.iter().for_each(|w| w.abort());
        let requests = converge_requests(&w.fake);
        let storage_class_lists = requests
            .iter()
            .filter(|r| r.contains("/storageclasses"))
            .count();
        assert_eq!(storage_class_lists, usize::from(!cached), "{requests:#?}");
        let intent_reads = requests
            .iter()
            .filter(|r| r.starts_with("GET") && r.contains("/secrets/flux-converger-intent."))
            .count();
        assert_eq!(intent_reads, usize::from(!cached), "{requests:#?}");
        let statefulset_reads = requests
            .iter()
            .filter(|r| r.starts_with("GET") && r.contains("/statefulsets"))
            .count();
        // Uncached: the get and the watch for the delete.
        assert_eq!(statefulset_reads, 2 * usize::from(!cached), "{requests:#?}");
        counted.push(requests.len());
    }
    assert_eq!(counted, [CLAIMS + 12, CLAIMS + 8]);
}

/// `name`: one template `data` at `size`, no replicas (no pods, no claims), running `image`.
fn named(name: &str, size: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "serviceName": name, "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "app", "image": image}]}},
            "volumeClaimTemplates": [
                {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                  "storageClassName": "expandable", "resources": {"requests": {"storage": size}}}},
            ],
        }
    })
}

/// A revision with `a-db` growing (and a new image) and `b-cache` shrinking: `b-cache` is
/// refused, so nothing of the revision is written: `a-db` is not re-created with the new spec
/// (same uid, old image), it is `held`, and the revision is refused, never handed off.
#[tokio::test]
async fn one_refused_statefulset_holds_the_whole_revision() {
    let w = World::new("suspend", true, None).await;
    let mut uids = std::collections::BTreeMap::new();
    for name in ["a-db", "b-cache"] {
        let live: StatefulSet = serde_json::from_value(named(name, "1Gi", "postgres:16")).unwrap();
        let applied = KubeCluster::new(w.fake.client(), T)
            .apply(&live)
            .await
            .unwrap();
        uids.insert(name, applied.metadata.uid.unwrap());
    }
    w.publish_objects(
        "main@sha1:2",
        &[
            ("apps/web.yaml", statefulset("1Gi")),
            ("apps/a-db.yaml", named("a-db", "2Gi", "postgres:17")),
            (
                "apps/b-cache.yaml",
                named("b-cache", "512Mi", "postgres:16"),
            ),
        ],
    );
    w.fake.clear_requests();
    let _flux = w.flux(false);
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();

    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Webhook)
        .await;

    assert_eq!(outcome, GateOutcome::Done(RevisionState::Refused));
    let record = last(&results);
    assert_eq!(record.state, RevisionState::Refused);
    assert!(record.handoff.is_none() && record.flux.is_none());
    assert_eq!(w.ks_writes(), 0, "not handed off");
    let by_name: std::collections::BTreeMap<&str, &StatefulSetEntry> = record
        .statefulsets
        .iter()
        .map(|s| (s.name.as_str(), s))
        .collect();
    assert_eq!(by_name["b-cache"].outcome, StatefulSetOutcome::Refused);
    assert_eq!(by_name["b-cache"].refusal.as_ref().unwrap().code, "shrink");
    let a_db = by_name["a-db"];
    assert_eq!(a_db.outcome, StatefulSetOutcome::Held, "{a_db:?}");
    assert_eq!(
        a_db.error.as_ref().map(|e| e.message.as_str()),
        Some("not written: StatefulSet default/b-cache of the same revision was refused")
    );
    assert!(
        a_db.templates.is_empty() && a_db.claims.is_empty(),
        "{a_db:?}"
    );
    // The JSON names the outcome `held`.
    assert_eq!(serde_json::to_value(a_db).unwrap()["outcome"], "held");

    let live = w
        .fake
        .get("apps/v1", "StatefulSet", Some(NS), "a-db")
        .unwrap();
    assert_eq!(
        live["metadata"]["uid"],
        uids["a-db"].as_str(),
        "not re-created"
    );
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["image"],
        "postgres:16"
    );
    assert_eq!(
        live["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "1Gi"
    );
    let writes: Vec<String> = w
        .fake
        .writes()
        .iter()
        .filter(|r| !r.path.contains("/configmaps") && !r.path.contains("/events"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
}

/// A tenant that may patch and delete StatefulSets but not create them would leave one
/// deleted (the re-apply after the orphan delete is a create): the pre-flight stops the
/// revision first, failed at step `preflight`, naming the account and the verb.
#[tokio::test]
async fn a_tenant_without_create_fails_the_revision_at_the_preflight_before_any_write() {
    let w = World::new("suspend", true, Some("deployer")).await;
    w.publish("main@sha1:2", "2Gi");
    let _flux = w.flux(false);
    w.fake.grant(
        NS,
        DEPLOYER,
        json!([
            {"apiGroups": ["apps"], "resources": ["statefulsets"],
             "verbs": ["get", "list", "watch", "patch", "update", "delete"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ALL_CLAIM_VERBS},
        ]),
    );
    let uid = w.sts()["metadata"]["uid"].clone();
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Webhook)
        .await;
    let GateOutcome::Failed { message } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        message.contains(
            "system:serviceaccount:flux-system:deployer may not create statefulsets.apps in namespace default"
        ),
        "{message}"
    );
    let record = last(&results);
    assert_eq!(record.state, RevisionState::Failed);
    assert_eq!(
        record.statefulsets[0].error.as_ref().unwrap().step,
        "preflight"
    );
    assert_eq!(w.ks_writes(), 0, "not handed off");
    assert_eq!(w.sts()["metadata"]["uid"], uid, "never deleted");
    assert_eq!(w.claim_size("data-web-0"), "1Gi", "no claim grown");
}

#[tokio::test]
async fn a_deferred_recheck_updates_its_record_in_place_and_adds_none() {
    let w = World::new("suspend", true, None).await;
    // Left over from a scale-down, never bound: it cannot grow yet.
    w.fake.seed(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-web-5", "namespace": NS, "labels": {"app": "web"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                 "volumeMode": "Filesystem", "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}
    }));
    w.publish("main@sha1:2", "2Gi");
    let _flux = w.flux(false);
    let config = w.config(EventSink::new(w.fake.client(), None, Some("test".into())).unwrap());
    let results = config.results.clone();
    let gate = Gate::standalone(config);
    assert_eq!(
        gate.run(FLUX_NS, "apps", Trigger::Watch).await,
        GateOutcome::Deferred
    );
    // Flux's answer closes the gate first (a re-check waits while it is open).
    let _follow = follow(&w.fake, &gate);
    let first = answered(&results).await;
    assert_eq!(first.statefulsets[0].deferred[0].claim, "data-web-5");
    assert_eq!(event_occurrences(&w.fake), 1);

    // Five resyncs while the claim stays Pending: the same one record, no new Event.
    for _ in 0..5 {
        assert_eq!(
            gate.run(FLUX_NS, "apps", Trigger::Resync).await,
            GateOutcome::Deferred
        );
    }
    let history = results.history(FLUX_NS, "apps");
    assert_eq!(history.len(), 1, "{history:#?}");
    assert_eq!(history[0].started_at, first.started_at);
    assert_eq!(history[0].trigger, Trigger::Watch);
    assert_eq!(history[0].statefulsets, first.statefulsets);
    assert_eq!(history[0].handoff, first.handoff, "not handed off again");
    assert_eq!(event_occurrences(&w.fake), 1);

    // Bound at last: the next re-check grows it, in the same record.
    w.fake.set_pvc_phase(NS, "data-web-5", "Bound");
    assert_eq!(
        gate.run(FLUX_NS, "apps", Trigger::Resync).await,
        GateOutcome::Done(RevisionState::Converged)
    );
    assert_eq!(w.claim_size("data-web-5"), "2Gi");
    let history = results.history(FLUX_NS, "apps");
    assert_eq!(history.len(), 1, "{history:#?}");
    let record = &history[0];
    assert_eq!(record.started_at, first.started_at);
    assert_eq!(record.state, RevisionState::Converged);
    let sts = &record.statefulsets[0];
    assert_eq!(sts.outcome, StatefulSetOutcome::Converged);
    assert!(sts.deferred.is_empty(), "{sts:?}");
    let grown: Vec<_> = sts.claims.iter().map(|c| c.claim.as_str()).collect();
    assert_eq!(grown, ["data-web-0", "data-web-1", "data-web-5"]);
    assert_eq!(
        (&sts.old_uid, &sts.new_uid),
        (
            &first.statefulsets[0].old_uid,
            &first.statefulsets[0].new_uid
        ),
        "the re-creation the first run did stays recorded"
    );
    assert!(
        record.warnings.iter().all(|w| !w.contains("deferred")),
        "{:?}",
        record.warnings
    );
    // The record is persisted so: one record in the results ConfigMap.
    let cm = w
        .fake
        .get(
            "v1",
            "ConfigMap",
            Some(FLUX_NS),
            &results_configmap_name(FLUX_NS, "apps"),
        )
        .unwrap();
    let persisted: Vec<RevisionRecord> =
        serde_json::from_str(cm["data"]["records"].as_str().unwrap()).unwrap();
    assert_eq!(persisted, history);
    // The claim growing is news: one Event for it.
    assert_eq!(event_occurrences(&w.fake), 2);
}

#[tokio::test]
async fn a_render_that_may_pass_at_the_next_try_fails_the_revision_instead_of_refusing_it() {
    let w = World::new("suspend", true, None).await;
    // A remote base on a closed loopback port: kustomize cannot fetch it (no network needed).
    w.publish_files(
        "main@sha1:2",
        &[(
            "apps/kustomization.yaml",
            "resources:\n- https://127.0.0.1:1/org/repo//base?ref=main\n",
        )],
    );
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Watch)
        .await;
    assert!(matches!(outcome, GateOutcome::Failed { .. }), "{outcome:?}");
    let record = last(&results);
    assert_eq!(record.state, RevisionState::Failed);
    assert_eq!(record.revision, "main@sha1:2");
    assert_eq!(record.error.as_ref().unwrap().step, "resolve");

    // A missing file in the same tree is input no retry fixes: refused.
    w.publish_files(
        "main@sha1:3",
        &[("apps/kustomization.yaml", "resources:\n- nothere.yaml\n")],
    );
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Watch)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Refused));
    assert_eq!(last(&results).state, RevisionState::Refused);
}

#[tokio::test]
async fn flux_attempting_another_revision_after_the_hand_off_is_recorded_raced() {
    let w = World::new("suspend", true, None).await;
    w.publish("main@sha1:2", "2Gi");
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let gate = Gate::standalone(config);
    let outcome = gate.run(FLUX_NS, "apps", Trigger::Webhook).await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    // Flux, unsuspended, attempted a revision the gate never converged (and failed it).
    let generation = w.ks()["metadata"]["generation"].as_i64().unwrap();
    w.fake
        .modify(KS_API, "Kustomization", Some(FLUX_NS), "apps", |ks| {
            let status = &mut ks["status"];
            status["observedGeneration"] = json!(generation);
            status["lastAttemptedRevision"] = json!("main@sha1:3");
            status["conditions"] = json!([{"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T00:00:00Z",
                "reason": "ReconciliationFailed", "observedGeneration": generation,
                "message": "StatefulSet/default/web dry-run failed (Invalid)"}]);
        });
    let _follow = follow(&w.fake, &gate);
    let record = answered(&results).await;
    let flux = record.flux.as_ref().unwrap();
    assert_eq!(flux.outcome, FluxOutcome::Raced);
    assert_eq!(flux.attempted_revision.as_deref(), Some("main@sha1:3"));
    assert_eq!(record.state, RevisionState::Converged);
    // The gate closed, and a race is not retried (the new revision is converged first).
    until(|| w.ks()["spec"]["suspend"] == true).await;
    let handoff = record.handoff.as_ref().unwrap();
    assert_eq!(handoff.attempts[0].outcome, FluxOutcome::Raced);
    assert_eq!(handoff.retry_at, None);
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(json["flux"]["outcome"], "raced");
    assert_eq!(json["flux"]["attemptedRevision"], "main@sha1:3");
}

fn annotate(w: &World, key: &str, value: Option<&str>) {
    w.fake.modify(
        KS_API,
        "Kustomization",
        Some(FLUX_NS),
        "apps",
        |ks| match value {
            Some(v) => ks["metadata"]["annotations"][key] = json!(v),
            None => {
                if let Some(a) = ks["metadata"]["annotations"].as_object_mut() {
                    a.remove(key);
                }
            }
        },
    );
}

#[tokio::test]
async fn a_hold_stops_the_run_and_closes_an_open_gate() {
    const HOLD: &str = "flux-converger.io/hold";
    let w = World::new("suspend", true, None).await;
    w.publish("main@sha1:2", "2Gi");
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let gate = Gate::standalone(config);
    let _follow = follow(&w.fake, &gate);

    // Held: nothing at all (no record, no write).
    annotate(&w, HOLD, Some("database migration"));
    let outcome = gate.run(FLUX_NS, "apps", Trigger::Webhook).await;
    assert_eq!(outcome, GateOutcome::NotHandled);
    assert!(results.last(FLUX_NS, "apps").is_none());
    assert_eq!(w.ks_writes(), 0);
    assert_eq!(w.claim_size("data-web-0"), "1Gi");

    // Removed: the run converges and hands off; a hold set while the gate is open closes it.
    annotate(&w, HOLD, None);
    until(|| {
        gate.observer()
            .held(&Key::kustomization(FLUX_NS, "apps"))
            .is_none()
    })
    .await;
    let outcome = gate.run(FLUX_NS, "apps", Trigger::Webhook).await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    assert_eq!(w.ks()["spec"]["suspend"], false);
    annotate(&w, HOLD, Some("incident 42"));
    until(|| w.ks()["spec"]["suspend"] == true).await;
    until(|| {
        last(&results)
            .handoff
            .is_some_and(|h| h.action == "resuspended")
    })
    .await;
    let record = last(&results);
    assert_eq!(
        record.flux.unwrap().message.as_deref(),
        Some("held (incident 42): gate closed")
    );
    assert_eq!(
        gate.observer().state(&Key::kustomization(FLUX_NS, "apps")),
        GateState::Held {
            reason: "incident 42".into()
        }
    );
}

#[tokio::test]
async fn reconcile_mode_treats_a_suspended_kustomization_as_held() {
    let w = World::new("reconcile", true, None).await;
    w.publish("main@sha1:2", "2Gi");
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Webhook)
        .await;
    assert_eq!(outcome, GateOutcome::NotHandled);
    assert!(results.last(FLUX_NS, "apps").is_none());
    assert_eq!(w.ks_writes(), 0);
    assert_eq!(w.claim_size("data-web-0"), "1Gi");
}

#[tokio::test]
async fn spec_force_with_the_suspend_gate_is_a_warning_on_the_record() {
    let w = World::new("suspend", true, None).await;
    w.fake
        .modify(KS_API, "Kustomization", Some(FLUX_NS), "apps", |ks| {
            ks["spec"]["force"] = json!(true);
        });
    w.publish("main@sha1:2", "2Gi");
    let config = w.config(EventSink::disabled());
    let results = config.results.clone();
    let outcome = Gate::standalone(config)
        .run(FLUX_NS, "apps", Trigger::Webhook)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let record = last(&results);
    assert!(
        record
            .warnings
            .iter()
            .any(|w| w == flux_converger::service::gate::FORCE_WARNING),
        "{:?}",
        record.warnings
    );
}

// ------------------------------------------------ the whole service with Flux's stand-ins

mod e2e {
    use super::flux_standin::{
        Behaviour, GitSource, KustomizeController, KustomizeOptions, create_kustomization,
        kustomization, web_statefulset,
    };
    use super::*;
    use flux_converger::service::{Running, Tuning, start_tuned};

    /// Flux's part: a GitRepository publishing `web` at 1Gi, a suspend-gated Kustomization
    /// retried every second, kustomize-controller (with `behaviour`) having applied it.
    pub struct Flux {
        pub fake: FakeApiServer,
        pub source: GitSource,
        pub kc: KustomizeController,
    }

    pub async fn flux(behaviour: Behaviour) -> Flux {
        flux_converger::tls::install_crypto_provider();
        let fake = FakeApiServer::new();
        fake.seed_fixture("v1.28/storageclasses.yaml");
        fake.enable_statefulset_controller();
        let client = fake.client();
        let server = ArtifactServer::start().await;
        let source = GitSource::create(client.clone(), server, FLUX_NS, "repo")
            .await
            .unwrap();
        let one = web_statefulset("1Gi");
        let r1 = source
            .publish("web at 1Gi", &[("apps/web.yaml", one.as_str())])
            .await
            .unwrap();
        let mut ks = kustomization(FLUX_NS, "apps", "repo", "./apps", Some("suspend"), false);
        ks["spec"]["retryInterval"] = json!("1s");
        create_kustomization(&client, &ks).await.unwrap();
        let kc = KustomizeController::start_with(
            client.clone(),
            KustomizeOptions {
                resolver: Resolver {
                    client: client.clone(),
                    fetcher: Fetcher::new(FetchOptions {
                        retries: 1,
                        backoff: Duration::from_millis(10),
                        ..FetchOptions::default()
                    })
                    .unwrap(),
                    kustomize: KustomizeCommand::default(),
                    strict: true,
                    allow_cross_namespace: true,
                },
                namespace: Some(FLUX_NS.into()),
                retry_interval: Duration::from_millis(300),
            },
            behaviour,
        );
        until(|| applied(&fake) == Some(r1.revision.clone())).await;
        for claim in ["data-web-0", "data-web-1"] {
            until(|| {
                fake.get("v1", "PersistentVolumeClaim", Some(NS), claim)
                    .is_some()
            })
            .await;
            fake.set_pvc_phase(NS, claim, "Bound");
        }
        Flux { fake, source, kc }
    }

    pub fn applied(fake: &FakeApiServer) -> Option<String> {
        fake.get(KS_API, "Kustomization", Some(FLUX_NS), "apps")
            .and_then(|k| {
                k["status"]["lastAppliedRevision"]
                    .as_str()
                    .map(String::from)
            })
    }

    pub async fn serve(fake: &FakeApiServer) -> Running {
        let config = test_support::service::config(FLUX_NS)
            .handoff_timeout(Duration::from_secs(60))
            .build();
        start_tuned(config, fake.client(), Tuning::default())
            .await
            .expect("the service starts")
    }

    /// The record of `revision` once `pred` holds for it.
    pub async fn record_of(
        running: &Running,
        revision: &str,
        pred: impl Fn(&RevisionRecord) -> bool,
    ) -> RevisionRecord {
        for _ in 0..6000 {
            if let Some(detail) =
                running
                    .backend
                    .detail(flux_converger::model::Kind::KUSTOMIZATION, FLUX_NS, "apps")
                && let Some(r) = detail.revisions.iter().find(|r| r.revision == revision)
                && pred(r)
            {
                return r.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "the record of {revision} never got there: {:#?}",
            running
                .backend
                .detail(flux_converger::model::Kind::KUSTOMIZATION, FLUX_NS, "apps")
        );
    }

    pub fn gate_open(r: &RevisionRecord) -> bool {
        r.handoff
            .as_ref()
            .is_some_and(|h| h.action == "unsuspended")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_source_moving_while_the_gate_is_open_never_lets_flux_apply_it_unconverged() {
    use flux_standin::{Behaviour, web_statefulset};
    // kustomize-controller reads the artifact 2 s after it sees the unsuspend.
    let flux = e2e::flux(Behaviour {
        read_delay: Duration::from_secs(2),
        ..Behaviour::default()
    })
    .await;
    let fake = &flux.fake;
    let running = e2e::serve(fake).await;
    let r1 = flux.source.history()[0].revision.clone();
    e2e::record_of(&running, &r1, |r| r.state == RevisionState::Converged).await;

    let two = web_statefulset("2Gi");
    let r2 = flux
        .source
        .publish("web at 2Gi", &[("apps/web.yaml", two.as_str())])
        .await
        .unwrap()
        .revision;
    e2e::record_of(&running, &r2, e2e::gate_open).await;
    // While Flux has not read it yet, the source moves on to a revision not converged.
    let three = web_statefulset("3Gi");
    let r3 = flux
        .source
        .publish("web at 3Gi", &[("apps/web.yaml", three.as_str())])
        .await
        .unwrap()
        .revision;
    until(|| e2e::applied(fake) == Some(r3.clone())).await;

    let records = running
        .backend
        .detail(flux_converger::model::Kind::KUSTOMIZATION, FLUX_NS, "apps")
        .unwrap()
        .revisions;
    let attempts: Vec<_> = flux
        .kc
        .reconciled()
        .into_iter()
        .filter(|a| a.revision != r1)
        .collect();
    assert!(!attempts.is_empty());
    for attempt in &attempts {
        // Every revision Flux read had its record converged and handed off before.
        let record = records
            .iter()
            .find(|r| r.revision == attempt.revision)
            .unwrap_or_else(|| panic!("Flux attempted {} with no record", attempt.revision));
        assert_eq!(record.state, RevisionState::Converged, "{record:#?}");
        let handed: jiff::Timestamp = record.handoff.as_ref().unwrap().at.parse().unwrap();
        let read: jiff::Timestamp = attempt.at.parse().unwrap();
        assert!(
            handed <= read,
            "{attempt:?} before the hand-off of {record:#?}"
        );
        assert!(attempt.result.is_ok(), "{attempt:?}");
    }
    // The open gate for 2Gi closed when the source moved: Flux never read it.
    assert!(attempts.iter().all(|a| a.revision == r3), "{attempts:?}");
    // The close is recorded after its suspend is written, concurrently with the converge of
    // the new revision, so it may land after Flux applied that one.
    let second = e2e::record_of(&running, &r2, |r| {
        r.handoff
            .as_ref()
            .is_some_and(|h| h.action == "resuspended")
    })
    .await;
    let flux2 = second.flux.as_ref().unwrap();
    assert_eq!(flux2.outcome, FluxOutcome::Pending);
    assert!(
        flux2
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("moved on to"),
        "{flux2:?}"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_revision_flux_fails_is_opened_again_on_its_retry_schedule_until_applied() {
    use flux_standin::{Behaviour, DEPENDENCY_NOT_READY, web_statefulset};
    let flux = e2e::flux(Behaviour::default()).await;
    let fake = &flux.fake;
    let running = e2e::serve(fake).await;
    let r1 = flux.source.history()[0].revision.clone();
    e2e::record_of(&running, &r1, |r| r.state == RevisionState::Converged).await;

    // Flux fails the first attempt (a dependency not ready), then applies.
    flux.kc.fail_next(1);
    let two = web_statefulset("2Gi");
    let r2 = flux
        .source
        .publish("web at 2Gi", &[("apps/web.yaml", two.as_str())])
        .await
        .unwrap()
        .revision;
    let record = e2e::record_of(&running, &r2, |r| {
        r.flux
            .as_ref()
            .is_some_and(|f| f.outcome == FluxOutcome::Applied)
    })
    .await;
    let handoff = record.handoff.as_ref().unwrap();
    let answers: Vec<_> = handoff.attempts.iter().map(|a| a.outcome).collect();
    // The gate re-opened on Flux's retry schedule and Flux applied it then; or, on a slow
    // machine, Flux's own retry applied it before the close that followed the failure took
    // effect, and the due re-open found it applied (said on the record, not re-opened).
    let raced = record.flux.as_ref().and_then(|f| f.message.as_deref())
        == Some("Flux applied it on its own retry before the gate closed");
    let expected: &[FluxOutcome] = if raced {
        &[FluxOutcome::Failed]
    } else {
        &[FluxOutcome::Failed, FluxOutcome::Applied]
    };
    assert_eq!(answers, expected, "{handoff:#?}");
    assert_eq!(
        handoff.attempts[0].message.as_deref(),
        Some(DEPENDENCY_NOT_READY)
    );
    assert_eq!(e2e::applied(fake), Some(r2.clone()));
    // One converge (one record), two attempts by Flux.
    let tried: Vec<_> = flux
        .kc
        .reconciled()
        .into_iter()
        .filter(|a| a.revision == r2)
        .map(|a| a.result.is_ok())
        .collect();
    assert_eq!(tried, [false, true]);
    let records = running
        .backend
        .detail(flux_converger::model::Kind::KUSTOMIZATION, FLUX_NS, "apps")
        .unwrap()
        .revisions;
    assert_eq!(records.iter().filter(|r| r.revision == r2).count(), 1);
    until(|| {
        fake.get(KS_API, "Kustomization", Some(FLUX_NS), "apps")
            .is_some_and(|k| k["spec"]["suspend"] == json!(true))
    })
    .await;
    running.shutdown().await;
}
