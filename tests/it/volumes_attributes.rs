//! A template's VolumeAttributesClass moved in git (issue #38) against the fake over real HTTP:
//! converged where the server serves the API (`v1` on 1.36, `v1beta1` on a 1.32 with the gate
//! on), each claim patched to the class under its resourceVersion precondition and the
//! StatefulSet re-created; each refusal (`volume-attributes-class-removed`, `-missing`,
//! `-unsupported` on 1.28 and a default 1.32) with nothing written; and the move followed by the
//! service's claim follower as the resizer stand-in plays the external-resizer's modify path,
//! to `modified` and to `infeasible` (its Event `VolumeModifyInfeasible`, its metrics).

use std::time::Duration;

use fake_apiserver::{FakeApiServer, KubeVersion};
use flux_converger::cluster::{ClaimPatch, Cluster as _, KubeCluster, is_conflict};
use flux_converger::converge::{self, ClaimAction, Options, Outcome};
use flux_converger::decide::RefusalCode;
use flux_converger::journal::ConfigMapJournal;
use flux_converger::model::{
    GateMode, Key, Kind, ModifyState, RevisionRecord, RevisionState, Trigger,
};
use flux_converger::records::events::{EventSink, EventTarget};
use flux_converger::records::metrics::registry;
use flux_converger::records::results::Results;
use flux_converger::service::volumes::{FollowerConfig, VolumeFollower};
use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::{Value, json};
use test_support::resizer::Resizer;

const NS: &str = "default";
const FLUX_NS: &str = "flux-system";

fn db(class: Option<&str>) -> StatefulSet {
    let mut template = json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
        "storageClassName": "expandable", "resources": {"requests": {"storage": "1Gi"}}}});
    if let Some(c) = class {
        template["spec"]["volumeAttributesClassName"] = json!(c);
    }
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {
            "serviceName": "db", "replicas": 2, "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                         "spec": {"containers": [{"name": "db", "image": "postgres"}]}},
            "volumeClaimTemplates": [template],
        }
    }))
    .unwrap()
}

fn opts() -> Options {
    Options {
        wait_timeout: Duration::from_secs(5),
        ..Options::default()
    }
}

struct World {
    fake: FakeApiServer,
    cluster: KubeCluster,
    journal: ConfigMapJournal,
}

/// `db` live in `silver` (where the server keeps the field) with its two claims Bound at 1Gi
/// in it; the classes `silver` and `gold` exist where the API is served (`api_version`).
async fn world(version: KubeVersion, gate: bool, api_version: Option<&str>) -> World {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::with_version(version);
    if gate {
        fake.enable_volume_attributes_class();
    }
    let path = format!(
        "{}/tests/fixtures/v1.28/storageclasses.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    fake.seed_yaml(&std::fs::read_to_string(path).unwrap());
    if let Some(v) = api_version {
        for name in ["silver", "gold"] {
            fake.seed(json!({"apiVersion": v, "kind": "VolumeAttributesClass",
                             "metadata": {"name": name}, "driverName": "ebs.csi.aws.com",
                             "parameters": {"type": name}}));
        }
    }
    let keeps = version != KubeVersion::V1_28;
    for i in 0..2 {
        let name = format!("data-db-{i}");
        let mut claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "db"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                     "volumeMode": "Filesystem",
                     "resources": {"requests": {"storage": "1Gi"}}, "volumeName": format!("pv-{name}")},
        });
        if keeps {
            // Provisioned in it: the class the volume has.
            claim["spec"]["volumeAttributesClassName"] = json!("silver");
            claim["status"] = json!({"currentVolumeAttributesClassName": "silver"});
        }
        fake.seed(claim);
        fake.set_pvc_phase(NS, &name, "Bound");
    }
    let cluster = KubeCluster::new(fake.client(), Duration::from_secs(5));
    cluster.apply(&db(Some("silver"))).await.unwrap();
    let journal = ConfigMapJournal::new(fake.client(), FLUX_NS, Duration::from_secs(5));
    World {
        fake,
        cluster,
        journal,
    }
}

impl World {
    fn claim(&self, i: usize) -> Value {
        self.fake
            .get(
                "v1",
                "PersistentVolumeClaim",
                Some(NS),
                &format!("data-db-{i}"),
            )
            .unwrap()
    }

    fn template_class(&self) -> Value {
        let sts = self
            .fake
            .get("apps/v1", "StatefulSet", Some(NS), "db")
            .unwrap();
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["volumeAttributesClassName"].clone()
    }
}

#[tokio::test]
async fn a_class_move_is_converged_where_the_server_serves_the_api() {
    for (version, gate, api) in [
        (KubeVersion::V1_36, false, "storage.k8s.io/v1"),
        (KubeVersion::V1_32, true, "storage.k8s.io/v1beta1"),
    ] {
        let w = world(version, gate, Some(api)).await;
        let old_uid = w
            .fake
            .get("apps/v1", "StatefulSet", Some(NS), "db")
            .unwrap()["metadata"]["uid"]
            .clone();
        w.fake.clear_requests();
        let report = converge::converge(&w.cluster, &w.journal, &db(Some("gold")), &opts())
            .await
            .unwrap();
        assert_eq!(
            report.outcome,
            Outcome::Converged,
            "{version:?}: {report:?}"
        );
        assert!(report.recreated, "{version:?}");
        assert_eq!(w.template_class(), "gold", "{version:?}");
        let new = w
            .fake
            .get("apps/v1", "StatefulSet", Some(NS), "db")
            .unwrap();
        assert_ne!(new["metadata"]["uid"], old_uid, "{version:?}: re-created");
        for i in 0..2 {
            assert_eq!(
                w.claim(i)["spec"]["volumeAttributesClassName"],
                "gold",
                "{version:?}"
            );
            assert_eq!(
                w.claim(i)["spec"]["resources"]["requests"]["storage"],
                "1Gi",
                "{version:?}: the size untouched"
            );
        }
        for c in &report.claims {
            assert_eq!(c.action, ClaimAction::Modified, "{version:?}: {c:?}");
            let class = c.volume_attributes_class.as_ref().unwrap();
            assert_eq!(
                (class.from.as_deref(), class.to.as_str()),
                (Some("silver"), "gold")
            );
        }
        assert_eq!(report.volumes.len(), 2);
        for v in &report.volumes {
            let a = v.attributes.as_ref().unwrap();
            assert_eq!(
                (a.class.as_str(), a.state),
                ("gold", ModifyState::Modifying)
            );
        }
        // The class was read before the first write: discovery, then the class, as the
        // service (no tenant here).
        let requests = w.fake.requests();
        let first_write = requests.iter().position(|r| r.is_write()).unwrap();
        let class_read = requests
            .iter()
            .position(|r| r.path.ends_with("/volumeattributesclasses/gold"))
            .expect("the class is read");
        assert!(class_read < first_write, "{version:?}: {requests:?}");
        assert!(
            requests[class_read]
                .path
                .starts_with(&format!("/apis/{api}/")),
            "{version:?}: {}",
            requests[class_read].path
        );
    }
}

#[tokio::test]
async fn the_class_patch_carries_the_resource_version_it_was_decided_on() {
    let w = world(KubeVersion::V1_36, false, Some("storage.k8s.io/v1")).await;
    let stale = w.claim(0)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // Someone else changes the claim after it was read.
    w.fake
        .modify("v1", "PersistentVolumeClaim", Some(NS), "data-db-0", |c| {
            c["metadata"]["labels"]["touched"] = json!("yes");
        });
    let patch = ClaimPatch {
        storage: None,
        attributes_class: Some("gold".into()),
    };
    let e = w
        .cluster
        .patch_claim(NS, "data-db-0", &patch, &stale)
        .await
        .unwrap_err();
    assert!(is_conflict(&e), "{e}");
    assert_eq!(w.claim(0)["spec"]["volumeAttributesClassName"], "silver");
    // A claim someone moved to the declared class already is left alone by the converge.
    let fresh = w.claim(0)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    w.cluster
        .patch_claim(NS, "data-db-0", &patch, &fresh)
        .await
        .unwrap();
    w.fake.clear_requests();
    let report = converge::converge(&w.cluster, &w.journal, &db(Some("gold")), &opts())
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Converged);
    let patched: Vec<String> = w
        .fake
        .writes()
        .iter()
        .filter(|r| r.path.contains("/persistentvolumeclaims/"))
        .map(|r| r.path.rsplit('/').next().unwrap().to_string())
        .collect();
    assert_eq!(patched, ["data-db-1"]);
}

/// A refusal case: its name, the server (version, gate, the classes' API version), the class
/// declared, the code and words expected.
type Refusing = (
    &'static str,
    KubeVersion,
    bool,
    Option<&'static str>,
    Option<&'static str>,
    RefusalCode,
    &'static str,
);

#[tokio::test]
async fn each_refusal_writes_nothing() {
    let cases: Vec<Refusing> = vec![
        (
            "removed",
            KubeVersion::V1_36,
            false,
            Some("storage.k8s.io/v1"),
            None,
            RefusalCode::VolumeAttributesClassRemoved,
            "would be removed (live \"silver\", desired <unset>)",
        ),
        (
            "missing",
            KubeVersion::V1_36,
            false,
            Some("storage.k8s.io/v1"),
            Some("platinum"),
            RefusalCode::VolumeAttributesClassMissing,
            "\"platinum\", which does not exist (storage.k8s.io/v1, cluster-scoped)",
        ),
        (
            "missing in the beta",
            KubeVersion::V1_32,
            true,
            Some("storage.k8s.io/v1beta1"),
            Some("platinum"),
            RefusalCode::VolumeAttributesClassMissing,
            "(storage.k8s.io/v1beta1, cluster-scoped)",
        ),
        (
            "1.32 with the gate off",
            KubeVersion::V1_32,
            false,
            None,
            Some("gold"),
            RefusalCode::VolumeAttributesClassUnsupported,
            "serves no VolumeAttributesClass API",
        ),
        (
            "1.28",
            KubeVersion::V1_28,
            false,
            None,
            Some("gold"),
            RefusalCode::VolumeAttributesClassUnsupported,
            "serves no VolumeAttributesClass API",
        ),
    ];
    for (name, version, gate, api, class, code, words) in cases {
        let w = world(version, gate, api).await;
        w.fake.clear_requests();
        let report = converge::converge(&w.cluster, &w.journal, &db(class), &opts())
            .await
            .unwrap();
        assert_eq!(report.outcome, Outcome::Refused, "{name}: {report:?}");
        let refusal = report.refusal.as_ref().unwrap();
        assert_eq!(refusal.code, code, "{name}");
        assert!(
            refusal.message.contains(words),
            "{name}: {}",
            refusal.message
        );
        assert!(w.fake.writes().is_empty(), "{name}: {:?}", w.fake.writes());
        assert!(report.volumes.is_empty(), "{name}");
    }
}

/// The follower over the fake, following `record` of `flux-system/apps`.
async fn follow(
    fake: &FakeApiServer,
    record: &RevisionRecord,
) -> (
    Results,
    VolumeFollower,
    prometheus_client::registry::Registry,
) {
    let results = Results::new(fake.client(), FLUX_NS.into(), Duration::from_secs(5));
    results.put(FLUX_NS, "apps", record.clone()).await.unwrap();
    let (registry, metrics) = registry();
    let follower = VolumeFollower::new(FollowerConfig {
        client: fake.client(),
        results: vec![(Kind::KUSTOMIZATION, results.clone())],
        events: EventSink::new(fake.client(), None, Some("flux-converger-0".into())).unwrap(),
        metrics,
        resize_timeout: Duration::from_secs(1800),
        call_timeout: Duration::from_secs(5),
        statefulsets: None,
        restart_retry: Duration::from_secs(10),
    });
    let key = Key::kustomization(FLUX_NS, "apps");
    follower.follow(
        Kind::KUSTOMIZATION,
        &key,
        record,
        EventTarget::named(Kind::KUSTOMIZATION, &key),
        true,
    );
    (results, follower, registry)
}

async fn recorded(results: &Results, claim: &str, state: ModifyState) {
    for _ in 0..500 {
        let got = results.last(FLUX_NS, "apps").unwrap().statefulsets[0]
            .volumes
            .iter()
            .find(|v| v.claim == claim)
            .and_then(|v| v.attributes.as_ref())
            .map(|a| a.state);
        if got == Some(state) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{claim} never {state}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_move_is_followed_to_modified_and_to_infeasible() {
    let w = world(KubeVersion::V1_36, false, Some("storage.k8s.io/v1")).await;
    let report = converge::converge(&w.cluster, &w.journal, &db(Some("gold")), &opts())
        .await
        .unwrap();
    let mut record = RevisionRecord::new(
        "main@sha1:2",
        Trigger::Watch,
        jiff::Timestamp::now().to_string(),
        RevisionState::Converged,
        GateMode::Reconcile,
        Some(1),
    );
    record.statefulsets = vec![flux_converger::records::entry::from_report(&report)];
    let (results, _follower, registry) = follow(&w.fake, &record).await;
    let resizer = Resizer::new(w.fake.client(), "ebs.csi.aws.com");
    resizer.modify_start(NS, "data-db-0").await.unwrap();
    resizer.modify_finish(NS, "data-db-0").await.unwrap();
    recorded(&results, "data-db-0", ModifyState::Modified).await;
    resizer.modify_start(NS, "data-db-1").await.unwrap();
    resizer
        .modify_infeasible(
            NS,
            "data-db-1",
            "throughput 500 is above the volume type's maximum",
        )
        .await
        .unwrap();
    recorded(&results, "data-db-1", ModifyState::Infeasible).await;
    let last = results.last(FLUX_NS, "apps").unwrap();
    let summary = last.volumes.unwrap();
    assert_eq!(
        (
            summary.modified,
            summary.modify_infeasible,
            summary.modifying
        ),
        (1, 1, 0)
    );
    assert_eq!(summary.grown, 2, "their sizes never moved");
    let infeasible = last.statefulsets[0]
        .volumes
        .iter()
        .find(|v| v.claim == "data-db-1")
        .unwrap()
        .attributes
        .clone()
        .unwrap();
    let message = infeasible.message.unwrap();
    assert!(message.contains("ModifyVolumeError"), "{message}");
    assert!(
        message.contains("above the volume type's maximum"),
        "{message}"
    );
    assert_eq!(infeasible.current.as_deref(), Some("silver"));
    // The Event on the Kustomization, once; no VolumesGrown for a revision that grew nothing.
    let mut events = Vec::new();
    for _ in 0..500 {
        events = w
            .fake
            .list("events.k8s.io/v1", "Event", Some(FLUX_NS))
            .into_iter()
            .map(|e| {
                (
                    e["reason"].as_str().unwrap_or_default().to_string(),
                    e["type"].as_str().unwrap_or_default().to_string(),
                    e["note"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect::<Vec<_>>();
        if events.iter().any(|(r, _, _)| r == "VolumeModifyInfeasible") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let infeasible: Vec<_> = events
        .iter()
        .filter(|(r, _, _)| r == "VolumeModifyInfeasible")
        .collect();
    assert_eq!(infeasible.len(), 1, "{events:?}");
    assert_eq!(infeasible[0].1, "Warning");
    assert!(
        infeasible[0]
            .2
            .contains("claim data-db-1 (VolumeAttributesClass gold, has silver)"),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|(r, _, _)| r == "VolumesGrown"),
        "{events:?}"
    );
    let text = flux_converger::records::metrics::encode(&registry);
    for (state, n) in [
        ("modified", 1),
        ("modifying", 0),
        ("infeasible", 1),
        ("grown", 2),
    ] {
        assert!(
            text.contains(&format!(
                "flux_converger_claims{{state=\"{state}\",kind=\"Kustomization\"}} {n}"
            )),
            "{state}: {text}"
        );
    }
}

/// A tenant's converge (the Kustomization's service account, impersonated) reads the class as
/// the service: the tenant needs no right on VolumeAttributesClasses (cluster-scoped, like
/// StorageClasses), its claims are patched as itself.
#[tokio::test]
async fn a_tenant_moves_its_claims_and_the_class_is_read_as_the_service() {
    let w = world(KubeVersion::V1_36, false, Some("storage.k8s.io/v1")).await;
    let tenant = "system:serviceaccount:default:deployer";
    w.fake.grant(
        NS,
        tenant,
        json!([
            {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "watch", "patch", "create", "delete"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["list", "patch"]},
        ]),
    );
    let impersonated =
        flux_converger::cluster::tenant::impersonating(&w.fake.client(), tenant).unwrap();
    let cluster = flux_converger::cluster::tenant::TenantCluster::new(
        impersonated,
        w.fake.client(),
        Duration::from_secs(5),
    );
    w.fake.clear_rbac_requests();
    let report = converge::converge(&cluster, &w.journal, &db(Some("gold")), &opts())
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Converged, "{report:?}");
    let asked = w.fake.rbac_requests();
    let class_reads: Vec<_> = asked
        .iter()
        .filter(|r| r.resource == "volumeattributesclasses")
        .collect();
    assert!(!class_reads.is_empty());
    assert!(
        class_reads.iter().all(|r| r.user != tenant && r.allowed),
        "{class_reads:?}"
    );
    assert!(
        asked.iter().any(|r| r.user == tenant
            && r.verb == "patch"
            && r.resource == "persistentvolumeclaims"),
        "{asked:?}"
    );
    assert!(asked.iter().all(|r| r.allowed), "{asked:?}");
}
