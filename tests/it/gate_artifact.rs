//! The `artifact` gate against the fake kube-apiserver (crates/fake-apiserver, with Flux's
//! ExternalArtifact CRD and its status subresource), a local upstream artifact server playing
//! source-controller, a test artifact host playing the service's storage (it downloads the
//! upstream tarball, checks its digest and serves the same bytes), and the kustomize-controller
//! stand-in following the ExternalArtifact: Flux only ever sees, fetches and applies revisions
//! the gate converged and published.

use test_support::flux_standin;
use test_support::web;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_apiserver::FakeApiServer;
use flux_converger::cluster::{Cluster as _, KubeCluster};
use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::render::KustomizeCommand;
use flux_converger::flux::render::resolve::Resolver;
use flux_converger::model::{FluxOutcome, GateMode, RevisionRecord, RevisionState};
use flux_converger::records::events::EventSink;
use flux_converger::records::metrics::Metrics;
use flux_converger::records::results::Results;
use flux_converger::service::gate::{Gate, GateConfig, GateOutcome};
use flux_converger::storage::host::{ArtifactHost, ArtifactKey, HostError, Published};
use flux_standin::flux_archive::{flux_artifact, sha256};
use flux_standin::{ArtifactServer, KustomizeController, KustomizeOptions};
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::{Value, json};

const NS: &str = "default";
const FLUX_NS: &str = "flux-system";
const KS_API: &str = "kustomize.toolkit.fluxcd.io/v1";
const SOURCE_API: &str = "source.toolkit.fluxcd.io/v1";
const T: Duration = Duration::from_secs(5);
const WAIT: Duration = Duration::from_secs(60);

/// The service's storage as the gate sees it: downloads the upstream tarball, verifies its
/// digest, serves the same bytes at source-controller's layout for ExternalArtifacts.
#[derive(Clone)]
struct TestHost {
    server: ArtifactServer,
    published: Arc<AtomicUsize>,
    keys: Arc<Mutex<Vec<(ArtifactKey, String)>>>,
}

impl TestHost {
    async fn start() -> Self {
        TestHost {
            server: ArtifactServer::start().await,
            published: Arc::new(AtomicUsize::new(0)),
            keys: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn publishes(&self) -> usize {
        self.published.load(Ordering::SeqCst)
    }
}

impl ArtifactHost for TestHost {
    fn publish<'a>(
        &'a self,
        key: &'a ArtifactKey,
        upstream_url: &'a str,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Published, HostError>> {
        Box::pin(async move {
            let bytes = reqwest::get(upstream_url)
                .await
                .and_then(|r| r.error_for_status())
                .map_err(|e| HostError(e.to_string()))?
                .bytes()
                .await
                .map_err(|e| HostError(e.to_string()))?
                .to_vec();
            let got = sha256(&bytes);
            if got != digest {
                return Err(HostError(format!("digest {got} is not {digest}")));
            }
            let hex = digest.trim_start_matches("sha256:");
            let path = format!(
                "externalartifact/{}/{}/{hex}.tar.gz",
                key.namespace, key.name
            );
            let size = bytes.len() as i64;
            let url = self.server.put(&path, bytes);
            self.published.fetch_add(1, Ordering::SeqCst);
            self.keys
                .lock()
                .unwrap()
                .push((key.clone(), digest.to_string()));
            Ok(Published {
                url,
                path,
                digest: digest.to_string(),
                size,
            })
        })
    }
}

fn statefulset(data: &str) -> Value {
    web::statefulset(2, data, json!({}))
}

struct World {
    fake: FakeApiServer,
    upstream: ArtifactServer,
    host: TestHost,
    results: Results,
}

/// One upstream artifact: what source-controller published.
#[derive(Clone, Debug)]
struct Upstream {
    revision: String,
    digest: String,
    size: usize,
}

impl World {
    /// `web` at 1Gi (claims Bound), the upstream GitRepository `repo` without an artifact,
    /// the ExternalArtifact `apps` naming it, no Kustomization yet.
    async fn new() -> World {
        flux_converger::tls::install_crypto_provider();
        let fake = FakeApiServer::new();
        fake.seed_fixture("v1.28/storageclasses.yaml");
        fake.enable_statefulset_controller();
        let live: StatefulSet = serde_json::from_value(statefulset("1Gi")).unwrap();
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
        fake.seed(json!({
            "apiVersion": SOURCE_API, "kind": "GitRepository",
            "metadata": {"name": "repo", "namespace": FLUX_NS},
            "spec": {"interval": "1m", "url": "https://example.com/repo.git"},
        }));
        fake.seed(json!({
            "apiVersion": SOURCE_API, "kind": "ExternalArtifact",
            "metadata": {"name": "apps", "namespace": FLUX_NS},
            "spec": {"sourceRef": {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": "repo"}},
        }));
        let results = Results::new(fake.client(), FLUX_NS.into(), T);
        World {
            upstream: ArtifactServer::start().await,
            host: TestHost::start().await,
            fake,
            results,
        }
    }

    /// A Kustomization in artifact mode reading `source` (kind, name), at `path`.
    fn kustomization(&self, name: &str, path: &str, kind: &str, source: &str) {
        self.fake.seed(json!({
            "apiVersion": KS_API, "kind": "Kustomization",
            "metadata": {"name": name, "namespace": FLUX_NS,
                         "annotations": {"flux-converger.io/gate": "artifact"}},
            "spec": {"interval": "10m", "path": path, "prune": true,
                     "sourceRef": {"kind": kind, "name": source}},
        }));
    }

    /// source-controller publishing `revision` of `files` in the upstream GitRepository.
    fn publish(&self, revision: &str, files: &[(&str, Value)]) -> Upstream {
        let yamls: Vec<(&str, String)> = files
            .iter()
            .map(|(path, object)| (*path, serde_saphyr::to_string(object).unwrap()))
            .collect();
        let entries: Vec<(&str, &str)> = yamls.iter().map(|(p, y)| (*p, y.as_str())).collect();
        self.publish_files(revision, &entries)
    }

    /// source-controller publishing `revision` of these files (path, text).
    fn publish_files(&self, revision: &str, entries: &[(&str, &str)]) -> Upstream {
        let archive = flux_artifact(entries);
        let path = format!(
            "gitrepository/{FLUX_NS}/repo/{}.tar.gz",
            revision.replace(':', "-")
        );
        let digest = sha256(&archive);
        let size = archive.len();
        let url = self.upstream.put(&path, archive);
        self.fake.seed(json!({
            "apiVersion": SOURCE_API, "kind": "GitRepository",
            "metadata": {"name": "repo", "namespace": FLUX_NS},
            "spec": {"interval": "1m", "url": "https://example.com/repo.git"},
            "status": {"artifact": {"url": url, "digest": digest, "revision": revision,
                                    "path": path, "size": size,
                                    "lastUpdateTime": "2026-11-30T00:00:00Z"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                                       "message": "stored artifact", "lastTransitionTime": "2026-11-30T00:00:00Z"}]}
        }));
        Upstream {
            revision: revision.into(),
            digest,
            size,
        }
    }

    fn resolver(&self) -> Resolver {
        Resolver {
            client: self.fake.client(),
            fetcher: Fetcher::new(FetchOptions {
                retries: 1,
                backoff: Duration::from_millis(10),
                ..FetchOptions::default()
            })
            .unwrap(),
            kustomize: KustomizeCommand::default(),
            strict: true,
            allow_cross_namespace: true,
        }
    }

    fn gate(&self) -> Gate {
        self.bare_gate()
            .with_artifact_host(Arc::new(self.host.clone()))
    }

    /// The gate without an artifact host.
    fn bare_gate(&self) -> Gate {
        Gate::standalone(GateConfig {
            client: self.fake.client(),
            namespace: FLUX_NS.into(),
            resolver: self.resolver(),
            results: self.results.clone(),
            metrics: Metrics::default(),
            handoff_timeout: WAIT,
            call_timeout: T,
            default_service_account: None,
            events: EventSink::disabled(),
            default_gate: GateMode::Suspend,
        })
    }

    fn kustomize_controller(&self) -> KustomizeController {
        KustomizeController::start(
            self.fake.client(),
            KustomizeOptions {
                resolver: self.resolver(),
                namespace: Some(FLUX_NS.into()),
                retry_interval: Duration::from_secs(3600),
            },
        )
    }

    fn external_artifact(&self) -> Value {
        self.fake
            .get(SOURCE_API, "ExternalArtifact", Some(FLUX_NS), "apps")
            .unwrap()
    }

    fn ks(&self, name: &str) -> Value {
        self.fake
            .get(KS_API, "Kustomization", Some(FLUX_NS), name)
            .unwrap()
    }

    fn last(&self, name: &str) -> RevisionRecord {
        self.results.last(FLUX_NS, name).expect("a record")
    }

    /// Plays the service's Kustomization watch and tick for the gate's observer until Flux's
    /// answer to the published revision is recorded on `name`'s newest record (at most 30 s).
    async fn answered(&self, gate: &Gate, name: &str) -> RevisionRecord {
        let observer = gate.observer();
        for _ in 0..3000 {
            if let Ok(ks) = serde_json::from_value(self.ks(name)) {
                observer.kustomization(&ks);
            }
            observer.tick().await;
            let record = self.last(name);
            if record
                .flux
                .as_ref()
                .is_some_and(|f| f.outcome != FluxOutcome::Pending)
            {
                return record;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "no answer from Flux recorded for {name}: {:#?}",
            self.last(name)
        );
    }

    fn claim_size(&self, claim: &str) -> String {
        self.fake
            .get("v1", "PersistentVolumeClaim", Some(NS), claim)
            .unwrap()["spec"]["resources"]["requests"]["storage"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The writes made to anything but the results ConfigMaps and Events (the record).
    fn object_writes(&self) -> Vec<String> {
        self.fake
            .writes()
            .iter()
            .filter(|r| !r.path.contains("/configmaps") && !r.path.contains("/events"))
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }
}

fn ready(object: &Value) -> Value {
    object["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Checks the ExternalArtifact publishes `upstream` exactly, served by the host with the
/// upstream's bytes, and says Ready=True.
async fn assert_published(w: &World, upstream: &Upstream) {
    let ea = w.external_artifact();
    let hex = upstream.digest.trim_start_matches("sha256:");
    let path = format!("externalartifact/{FLUX_NS}/apps/{hex}.tar.gz");
    let artifact = &ea["status"]["artifact"];
    assert_eq!(artifact["url"], json!(w.host.server.url(&path)), "{ea:#}");
    assert_eq!(artifact["path"], json!(path));
    assert_eq!(artifact["revision"], json!(upstream.revision));
    assert_eq!(artifact["digest"], json!(upstream.digest));
    assert_eq!(artifact["size"], json!(upstream.size));
    let updated = artifact["lastUpdateTime"].as_str().unwrap();
    assert!(
        updated.parse::<jiff::Timestamp>().is_ok(),
        "lastUpdateTime {updated} is RFC 3339"
    );
    let served = reqwest::get(artifact["url"].as_str().unwrap())
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        sha256(&served),
        upstream.digest,
        "the same bytes as upstream"
    );
    let r = ready(&ea);
    assert_eq!(r["status"], "True", "{ea:#}");
    assert_eq!(r["reason"], "Succeeded");
    assert_eq!(
        r["message"],
        json!(format!(
            "stored artifact for converged revision '{}'",
            upstream.revision
        ))
    );
    assert_eq!(r["observedGeneration"], ea["metadata"]["generation"]);
    assert!(r["lastTransitionTime"].as_str().is_some());
    // Written through the status subresource by the service.
    let managers: Vec<&str> = ea["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["subresource"] == "status")
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, vec!["flux-converger"], "{ea:#}");
}

fn assert_record_published(record: &RevisionRecord, revision: &str) {
    assert_eq!(record.revision, revision);
    assert_eq!(record.state, RevisionState::Converged, "{record:#?}");
    assert_eq!(record.gate, Some(GateMode::Artifact));
    let h = record.handoff.as_ref().expect("a hand-off");
    assert_eq!(
        (h.mode, h.action.as_str()),
        (GateMode::Artifact, "published")
    );
    assert!(h.at.parse::<jiff::Timestamp>().is_ok(), "{}", h.at);
    assert!(
        !record.warnings.iter().any(|w| w.starts_with("waiting for")),
        "{record:#?}"
    );
}

#[tokio::test]
async fn converged_revisions_are_published_and_a_refused_one_never_reaches_flux() {
    let w = World::new().await;
    w.kustomization("apps", "./apps", "ExternalArtifact", "apps");
    let kc = w.kustomize_controller();
    let gate = w.gate();

    // R1: the StatefulSet as it runs: converged (nothing to do) and published; Flux applies it
    // from the published URL.
    let r1 = w.publish("main@sha1:1", &[("apps/web.yaml", statefulset("1Gi"))]);
    let outcome = gate
        .run(FLUX_NS, "apps", flux_converger::model::Trigger::Watch)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    assert_published(&w, &r1).await;
    let record = w.answered(&gate, "apps").await;
    assert_record_published(&record, &r1.revision);
    assert_eq!(record.digest.as_deref(), Some(r1.digest.as_str()));
    assert_eq!(
        record.flux.as_ref().map(|f| f.outcome),
        Some(FluxOutcome::Applied),
        "{record:#?}"
    );
    let applied = kc
        .wait_for(WAIT, |r| r.revision == r1.revision && r.result.is_ok())
        .await
        .expect("Flux applies the published revision");
    assert_eq!(
        applied.result,
        Ok(vec!["StatefulSet/default/web".to_string()])
    );

    // R2 grows `data`: the claims grow, then the revision is published and applied.
    let r2 = w.publish("main@sha1:2", &[("apps/web.yaml", statefulset("2Gi"))]);
    let outcome = gate
        .run(FLUX_NS, "apps", flux_converger::model::Trigger::Watch)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    for i in 0..2 {
        assert_eq!(w.claim_size(&format!("data-web-{i}")), "2Gi");
    }
    assert_published(&w, &r2).await;
    assert_record_published(&w.last("apps"), &r2.revision);
    kc.wait_for(WAIT, |r| r.revision == r2.revision && r.result.is_ok())
        .await
        .expect("Flux applies the grown revision");
    assert_eq!(
        w.ks("apps")["status"]["lastAppliedRevision"],
        json!(r2.revision)
    );
    let published_before = w.external_artifact()["status"]["artifact"].clone();

    // R3 shrinks it (to a size not published before, so its tarball is new): refused, not published. status.artifact keeps R2; Ready=False says why.
    let r3 = w.publish("main@sha1:3", &[("apps/web.yaml", statefulset("512Mi"))]);
    let outcome = gate
        .run(FLUX_NS, "apps", flux_converger::model::Trigger::Watch)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Refused));
    let ea = w.external_artifact();
    assert_eq!(ea["status"]["artifact"], published_before, "{ea:#}");
    let r = ready(&ea);
    assert_eq!(r["status"], "False", "{ea:#}");
    assert_eq!(r["reason"], "ConvergeRefused");
    let message = r["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "revision {}: StatefulSet default/web refused (shrink): ",
            r3.revision
        )),
        "{message}"
    );
    let record = w.last("apps");
    assert_eq!(record.state, RevisionState::Refused);
    assert_eq!(record.handoff, None);
    assert_eq!(w.host.publishes(), 2, "R1 and R2 only");
    for i in 0..2 {
        assert_eq!(w.claim_size(&format!("data-web-{i}")), "2Gi");
    }
    // Flux never sees R3: the stand-in reconciles only what the ExternalArtifact names.
    let ks = w.ks("apps");
    assert_eq!(ks["status"]["lastAttemptedRevision"], json!(r2.revision));
    assert!(
        kc.reconciled().iter().all(|r| r.revision != r3.revision),
        "{:?}",
        kc.reconciled()
    );
    assert!(
        w.host
            .server
            .requests()
            .iter()
            .all(|p| !p.contains(r3.digest.trim_start_matches("sha256:"))),
        "the refused revision is never served"
    );
}

#[tokio::test]
async fn two_kustomizations_on_one_external_artifact_publish_once_both_converged() {
    let w = World::new().await;
    w.kustomization("apps", "./apps", "ExternalArtifact", "apps");
    w.kustomization("config", "./config", "ExternalArtifact", "apps");
    let kc = w.kustomize_controller();
    let gate = w.gate();
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": NS}, "data": {"size": "1Gi"}});
    let r1 = w.publish(
        "main@sha1:1",
        &[
            ("apps/web.yaml", statefulset("1Gi")),
            ("config/settings.yaml", config_map),
        ],
    );

    // `apps` converges first: converged, waiting for `config`; nothing is published.
    let outcome = gate
        .run(FLUX_NS, "apps", flux_converger::model::Trigger::Watch)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    let first = w.last("apps");
    assert_eq!(first.state, RevisionState::Converged);
    let h = first.handoff.as_ref().unwrap();
    assert_eq!((h.mode, h.action.as_str()), (GateMode::Artifact, "waiting"));
    assert_eq!(
        first.warnings,
        vec![format!(
            "waiting for {FLUX_NS}/config to converge {} before publishing",
            r1.revision
        )]
    );
    assert_eq!(w.host.publishes(), 0);
    assert!(
        w.external_artifact()["status"]["artifact"].is_null(),
        "{:#}",
        w.external_artifact()
    );

    // `config` converges last: it publishes, and `apps`'s record says published too.
    let outcome = gate
        .run(FLUX_NS, "config", flux_converger::model::Trigger::Watch)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    assert_eq!(w.host.publishes(), 1);
    assert_published(&w, &r1).await;
    let last = w.last("config");
    assert_record_published(&last, &r1.revision);
    let apps = w.last("apps");
    assert_record_published(&apps, &r1.revision);
    assert_eq!(apps.started_at, first.started_at, "updated in place");
    assert_eq!(
        apps.handoff.as_ref().unwrap().at,
        last.handoff.as_ref().unwrap().at
    );
    assert_eq!(w.results.history(FLUX_NS, "apps").len(), 1);
    for name in ["apps", "config"] {
        kc.wait_for(WAIT, |r| {
            r.name == name && r.revision == r1.revision && r.result.is_ok()
        })
        .await
        .unwrap_or_else(|| panic!("Flux applies {name} from the published artifact"));
    }
}

#[tokio::test]
async fn an_upstream_without_artifact_is_source_not_ready_and_wrong_references_are_refused() {
    let w = World::new().await;
    w.kustomization("apps", "./apps", "ExternalArtifact", "apps");
    let gate = w.gate();
    w.fake.clear_requests();

    // The upstream has no artifact yet: waited for, and the ExternalArtifact says so.
    let outcome = gate
        .run(FLUX_NS, "apps", flux_converger::model::Trigger::Watch)
        .await;
    assert_eq!(outcome, GateOutcome::Deferred);
    let ea = w.external_artifact();
    assert!(ea["status"]["artifact"].is_null());
    let r = ready(&ea);
    assert_eq!(r["status"], "False", "{ea:#}");
    assert_eq!(r["reason"], "SourceNotReady");
    assert_eq!(
        r["message"],
        "source GitRepository/flux-system/repo is not ready: it has no artifact"
    );
    // Once said, not said again: the next run writes nothing.
    w.fake.clear_requests();
    assert_eq!(
        gate.run(FLUX_NS, "apps", flux_converger::model::Trigger::Resync)
            .await,
        GateOutcome::Deferred
    );
    assert_eq!(w.object_writes(), Vec::<String>::new());

    // Wrong references: refused with a message saying what to fix, nothing written.
    w.fake.seed(json!({
        "apiVersion": SOURCE_API, "kind": "ExternalArtifact",
        "metadata": {"name": "bare", "namespace": FLUX_NS}, "spec": {},
    }));
    w.fake.seed(json!({
        "apiVersion": SOURCE_API, "kind": "ExternalArtifact",
        "metadata": {"name": "chart", "namespace": FLUX_NS},
        "spec": {"sourceRef": {"kind": "HelmChart", "name": "podinfo"}},
    }));
    for (name, kind, source, expected) in [
        (
            "git",
            "GitRepository",
            "repo",
            "Kustomization flux-system/git has flux-converger.io/gate: artifact but its spec.sourceRef is a GitRepository: the artifact gate needs spec.sourceRef {kind: ExternalArtifact, name: ...}",
        ),
        (
            "missing",
            "ExternalArtifact",
            "nowhere",
            "ExternalArtifact flux-system/nowhere not found",
        ),
        (
            "bare",
            "ExternalArtifact",
            "bare",
            "ExternalArtifact flux-system/bare has no spec.sourceRef: the artifact gate publishes the converged revisions of the GitRepository, OCIRepository or Bucket it names",
        ),
        (
            "chart",
            "ExternalArtifact",
            "chart",
            "ExternalArtifact flux-system/chart: unsupported spec.sourceRef.kind \"HelmChart\" (the artifact gate publishes from a GitRepository, OCIRepository or Bucket)",
        ),
    ] {
        w.kustomization(name, "./apps", kind, source);
        w.fake.clear_requests();
        let outcome = gate
            .run(FLUX_NS, name, flux_converger::model::Trigger::Watch)
            .await;
        assert_eq!(outcome, GateOutcome::Done(RevisionState::Refused), "{name}");
        let record = w.last(name);
        assert_eq!(record.state, RevisionState::Refused, "{name}");
        assert_eq!(record.gate, Some(GateMode::Artifact));
        assert_eq!(
            record.error.as_ref().map(|e| e.message.as_str()),
            Some(expected),
            "{name}"
        );
        assert_eq!(w.object_writes(), Vec::<String>::new(), "{name}");
    }
    assert_eq!(w.host.publishes(), 0);

    // A render Flux would fail too (invalid YAML) is refused at resolve; the ExternalArtifact
    // says so, naming the upstream's revision.
    w.publish_files("main@sha1:bad", &[("apps/web.yaml", "kind: [unclosed")]);
    let outcome = gate
        .run(FLUX_NS, "apps", flux_converger::model::Trigger::Watch)
        .await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Refused));
    let ea = w.external_artifact();
    assert!(ea["status"]["artifact"].is_null());
    let r = ready(&ea);
    assert_eq!(r["reason"], "ConvergeRefused", "{ea:#}");
    let message = r["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "revision main@sha1:bad refused at resolve: Kustomization flux-system/apps: "
        ),
        "{message}"
    );
}

#[tokio::test]
async fn the_fake_serves_external_artifact_status_as_a_subresource() {
    let w = World::new().await;
    let api: kube::Api<flux_converger::flux::objects::ExternalArtifact> =
        kube::Api::namespaced(w.fake.client(), FLUX_NS);
    let before = w.external_artifact();
    // A status patch changes only status: spec and generation stay.
    let status = json!({"spec": {"sourceRef": {"kind": "Bucket", "name": "other"}},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "SourceNotReady",
            "message": "m", "lastTransitionTime": "2026-12-01T00:00:00Z"}]}});
    api.patch_status(
        "apps",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .unwrap();
    let after = w.external_artifact();
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(
        after["metadata"]["generation"],
        before["metadata"]["generation"]
    );
    assert_eq!(ready(&after)["reason"], "SourceNotReady");
    // A patch of the main resource ignores status.
    let main = json!({"spec": {"sourceRef": {"kind": "GitRepository", "name": "repo2"}},
        "status": {"conditions": []}});
    api.patch(
        "apps",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&main),
    )
    .await
    .unwrap();
    let last = w.external_artifact();
    assert_eq!(last["spec"]["sourceRef"]["name"], "repo2");
    assert_eq!(ready(&last)["reason"], "SourceNotReady", "{last:#}");
    assert_eq!(
        last["metadata"]["generation"].as_i64(),
        before["metadata"]["generation"].as_i64().map(|g| g + 1)
    );
    // The CRD's schema holds for status too: a condition without its required fields is 422.
    let bad = json!({"status": {"conditions": [{"type": "Ready", "status": "Maybe"}]}});
    let err = api
        .patch_status(
            "apps",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&bad),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err}"
    );
}

/// Without a storage because the default `--storage-path` cannot be created, the gate's
/// refusal names the directory and why (not only the flag), and nothing is published.
#[tokio::test]
async fn without_storage_the_artifact_gate_names_the_directory() {
    let w = World::new().await;
    w.kustomization("apps", "./apps", "ExternalArtifact", "apps");
    w.publish("main@sha1:1", &[("apps/web.yaml", statefulset("1Gi"))]);
    let why = "the default --storage-path /nowhere/data does not exist and cannot be created \
               (creating /nowhere/data: Read-only file system (os error 30))";
    let gate = w.bare_gate().with_no_artifact_host(why.to_string());
    w.fake.clear_requests();
    let outcome = gate
        .run(FLUX_NS, "apps", flux_converger::model::Trigger::Watch)
        .await;
    let GateOutcome::Failed { message } = outcome else {
        panic!("{outcome:?}");
    };
    for word in [
        "no artifact storage",
        "/nowhere/data",
        "Read-only file system",
        "--storage-path",
    ] {
        assert!(message.contains(word), "{word:?} missing from {message}");
    }
    assert_eq!(w.host.publishes(), 0);
    assert!(w.external_artifact()["status"]["artifact"].is_null());
    // Refused before the converge: a revision that could never be published writes nothing
    // (no dry run, no claim, no StatefulSet, no intent).
    let writes: Vec<String> = w
        .fake
        .requests()
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(writes, Vec::<String>::new());
}
