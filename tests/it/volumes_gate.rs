//! The recovery path end to end through the gate (issue #40): git grows `web`'s volume to
//! 10Gi, the gate converges it and hands the revision off, the follower sees the resizer refuse
//! the size for good (`infeasible`, a Warning on the Kustomization), git reverts to 5Gi, and
//! the next revision is converged as a recovery (the claim lowered above its capacity, the
//! StatefulSet re-created with the declared template, `recovered` in the record and a
//! `VolumeResizeRecovered` Event) until the claim grows to 5Gi (`VolumesGrown`). On 1.28 the
//! same revert is refused `recovery-unsupported`, with nothing written.

use std::time::Duration;

use fake_apiserver::{FakeApiServer, KubeVersion};
use flux_converger::cluster::{Cluster as _, KubeCluster};
use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::render::KustomizeCommand;
use flux_converger::flux::render::resolve::Resolver;
use flux_converger::model::{GateMode, Kind, RevisionState, Trigger, VolumeState};
use flux_converger::records::events::EventSink;
use flux_converger::records::metrics::Metrics;
use flux_converger::records::results::Results;
use flux_converger::service::gate::{Gate, GateConfig, GateOutcome};
use flux_converger::service::volumes::{FollowerConfig, VolumeFollower};
use serde_json::{Value, json};
use test_support::flux_standin::flux_archive::{ArtifactServer, flux_artifact, sha256};
use test_support::resizer::Resizer;
use test_support::web;

const NS: &str = "default";
const FLUX_NS: &str = "flux-system";
const T: Duration = Duration::from_secs(5);

struct World {
    fake: FakeApiServer,
    server: ArtifactServer,
    results: Results,
    gate: Gate,
    resizer: Resizer,
}

impl World {
    async fn new(version: KubeVersion) -> World {
        flux_converger::tls::install_crypto_provider();
        let fake = FakeApiServer::with_version(version);
        fake.seed_fixture("v1.28/storageclasses.yaml");
        fake.enable_statefulset_controller();
        let live: k8s_openapi::api::apps::v1::StatefulSet =
            serde_json::from_value(web::statefulset(1, "1Gi", web::applied_by_apps())).unwrap();
        KubeCluster::new(fake.client(), T)
            .apply(&live)
            .await
            .unwrap();
        fake.bind_when_made([(NS, "data-web-0")]).await.unwrap();
        fake.seed(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": FLUX_NS,
                         "annotations": {"flux-converger.io/gate": "reconcile"}},
            "spec": {"interval": "10m", "path": "./apps", "prune": true,
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}},
        }));
        let results = Results::new(fake.client(), FLUX_NS.into(), T);
        let events = EventSink::new(fake.client(), None, Some("flux-converger-0".into())).unwrap();
        let metrics = Metrics::default();
        let follower = VolumeFollower::new(FollowerConfig {
            client: fake.client(),
            results: vec![(Kind::KUSTOMIZATION, results.clone())],
            events: events.clone(),
            metrics: metrics.clone(),
            resize_timeout: Duration::from_secs(1800),
            call_timeout: T,
            statefulsets: None,
            restart_retry: Duration::from_secs(10),
        });
        let gate = Gate::standalone(GateConfig {
            client: fake.client(),
            namespace: FLUX_NS.into(),
            resolver: Resolver {
                client: fake.client(),
                fetcher: Fetcher::new(FetchOptions::default()).unwrap(),
                kustomize: KustomizeCommand::default(),
                strict: true,
                allow_cross_namespace: true,
            },
            results: results.clone(),
            metrics,
            handoff_timeout: Duration::from_secs(30),
            call_timeout: T,
            default_service_account: None,
            events,
            default_gate: GateMode::Off,
        });
        let gate = gate
            .clone()
            .with_step(gate.step().clone().with_volumes(follower));
        let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");
        World {
            fake,
            server: ArtifactServer::start().await,
            results,
            gate,
            resizer,
        }
    }

    /// source-controller publishing `revision`, `web`'s volume declared at `size`.
    fn publish(&self, revision: &str, size: &str) {
        let yaml = serde_saphyr::to_string(&web::statefulset(1, size, json!({}))).unwrap();
        let archive = flux_artifact(&[("apps/web.yaml", yaml.as_str())]);
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

    async fn run(&self) -> GateOutcome {
        self.gate.run(FLUX_NS, "apps", Trigger::Watch).await
    }

    fn claim(&self) -> Value {
        self.fake
            .get("v1", "PersistentVolumeClaim", Some(NS), "data-web-0")
            .unwrap()
    }

    fn template(&self) -> Value {
        self.fake
            .get("apps/v1", "StatefulSet", Some(NS), "web")
            .unwrap()["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
            .clone()
    }

    fn volume_state(&self) -> Option<VolumeState> {
        let last = self.results.last(FLUX_NS, "apps")?;
        Some(last.statefulsets.first()?.volumes.first()?.state)
    }

    async fn recorded(&self, state: VolumeState) {
        for _ in 0..500 {
            if self.volume_state() == Some(state) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "never {state}: {:?}",
            self.results.last(FLUX_NS, "apps").map(|r| r.statefulsets)
        );
    }

    /// The reasons of the Events on the Kustomization.
    fn reasons(&self) -> Vec<String> {
        self.fake
            .list("events.k8s.io/v1", "Event", Some(FLUX_NS))
            .iter()
            .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    async fn event(&self, reason: &str) {
        for _ in 0..500 {
            if self.reasons().iter().any(|r| r == reason) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no {reason} Event: {:?}", self.reasons());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_expansion_is_recovered_by_a_revert_in_git() {
    let w = World::new(KubeVersion::V1_32).await;
    w.publish("main@sha1:2", "10Gi");
    assert_eq!(w.run().await, GateOutcome::Done(RevisionState::Converged));
    assert_eq!(
        w.claim()["spec"]["resources"]["requests"]["storage"],
        "10Gi"
    );
    assert_eq!(w.volume_state(), Some(VolumeState::Requested));

    // The driver refuses 10Gi for good: the record and a Warning say so.
    w.resizer.start(NS, "data-web-0").await.unwrap();
    w.resizer
        .infeasible(
            NS,
            "data-web-0",
            "10Gi exceeds the volume type's maximum of 8Gi",
        )
        .await
        .unwrap();
    w.recorded(VolumeState::Infeasible).await;
    w.event("VolumeResizeInfeasible").await;
    let uid = w
        .fake
        .get("apps/v1", "StatefulSet", Some(NS), "web")
        .unwrap()["metadata"]["uid"]
        .clone();

    // Git reverts to 5Gi: a recovery, not a shrink.
    w.publish("main@sha1:3", "5Gi");
    assert_eq!(w.run().await, GateOutcome::Done(RevisionState::Converged));
    let last = w.results.last(FLUX_NS, "apps").unwrap();
    assert_eq!(last.revision, "main@sha1:3");
    assert_eq!(w.claim()["spec"]["resources"]["requests"]["storage"], "5Gi");
    assert_eq!(w.template(), "5Gi");
    assert_ne!(
        w.fake
            .get("apps/v1", "StatefulSet", Some(NS), "web")
            .unwrap()["metadata"]["uid"],
        uid,
        "re-created with the declared template"
    );
    let v = &last.statefulsets[0].volumes[0];
    assert_eq!(v.state, VolumeState::Recovered, "{v:?}");
    assert_eq!(
        (v.requested.as_deref(), v.capacity.as_deref()),
        (Some("5Gi"), Some("1Gi"))
    );
    assert!(
        v.message
            .as_deref()
            .unwrap()
            .contains("its expansion to 10Gi failed (infeasible)")
    );
    w.event("VolumeResizeRecovered").await;

    // The resizer takes up 5Gi and grows it.
    w.resizer.start(NS, "data-web-0").await.unwrap();
    w.recorded(VolumeState::Resizing).await;
    w.resizer.finish(NS, "data-web-0").await.unwrap();
    w.recorded(VolumeState::Grown).await;
    w.event("VolumesGrown").await;
    assert!(
        w.results
            .last(FLUX_NS, "apps")
            .unwrap()
            .volumes
            .unwrap()
            .all_grown()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_1_28_the_revert_is_refused_recovery_unsupported_with_nothing_written() {
    let w = World::new(KubeVersion::V1_28).await;
    w.publish("main@sha1:2", "10Gi");
    assert_eq!(w.run().await, GateOutcome::Done(RevisionState::Converged));
    // A 1.28 resizer: no resize status; the failure is an Event only.
    w.resizer.start(NS, "data-web-0").await.unwrap();
    let pvc = w.claim();
    w.resizer
        .event(
            NS,
            &pvc,
            "Warning",
            "VolumeResizeFailed",
            "resize volume \"pv-data-web-0\" failed: quota exceeded",
        )
        .await
        .unwrap();
    w.recorded(VolumeState::Error).await;

    w.publish("main@sha1:3", "5Gi");
    w.fake.clear_requests();
    assert_eq!(w.run().await, GateOutcome::Done(RevisionState::Refused));
    let last = w.results.last(FLUX_NS, "apps").unwrap();
    let refusal = last.statefulsets[0].refusal.as_ref().unwrap();
    assert_eq!(refusal.code.as_str(), "recovery-unsupported");
    assert!(
        refusal
            .message
            .contains("field can not be less than previous value"),
        "{}",
        refusal.message
    );
    assert_eq!(
        w.claim()["spec"]["resources"]["requests"]["storage"],
        "10Gi"
    );
    assert_eq!(w.template(), "10Gi");
    let cluster_writes: Vec<_> = w
        .fake
        .writes()
        .into_iter()
        .filter(|r| {
            r.path.contains("/statefulsets/") || r.path.contains("/persistentvolumeclaims/")
        })
        .collect();
    assert!(cluster_writes.is_empty(), "{cluster_writes:?}");
}
