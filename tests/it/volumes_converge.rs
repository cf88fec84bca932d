//! A converge and its volumes (issue #40) against the fake API server: the claims it leaves
//! to follow, and the recovery from a failed expansion by a size declared back down in git,
//! allowed (1.32), refused with nothing written (1.28: `recovery-unsupported`; at the capacity:
//! `shrink`), and finished by the next run after a stop between the lowering and the re-create.
//! The expansion's failure is played by the resizer stand-in, through the claim's status
//! subresource and Events, as a real resizer writes it.

use std::time::Duration;

use fake_apiserver::{FakeApiServer, Fault, FaultRule, KubeVersion};
use flux_converger::cluster::{Cluster as _, KubeCluster};
use flux_converger::converge::{self, ClaimAction, ConvergeError, Options, Outcome, Step};
use flux_converger::decide::RefusalCode;
use flux_converger::journal::{ConfigMapJournal, Journal as _};
use flux_converger::volume::VolumeState;
use http::Method;
use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::{Value, json};
use test_support::resizer::Resizer;

const NS: &str = "default";
const JOURNAL_NS: &str = "flux-system";

fn db(size: &str) -> StatefulSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {
            "serviceName": "db", "replicas": 1,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                         "spec": {"containers": [{"name": "db", "image": "postgres"}]}},
            "volumeClaimTemplates": [
                {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                  "storageClassName": "expandable", "resources": {"requests": {"storage": size}}}},
            ],
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

fn claim(fake: &FakeApiServer) -> Value {
    fake.get("v1", "PersistentVolumeClaim", Some(NS), "data-db-0")
        .unwrap()
}

fn template_size(fake: &FakeApiServer) -> String {
    let sts = fake.get("apps/v1", "StatefulSet", Some(NS), "db").unwrap();
    sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .unwrap()
        .to_string()
}

fn request(fake: &FakeApiServer) -> String {
    claim(fake)["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `db` live at `template`, its claim Bound at 1Gi and raised to `template` (an earlier
/// revision's converge), the expansion then failed as `fail` plays it.
async fn world(
    version: KubeVersion,
    template: &str,
) -> (FakeApiServer, KubeCluster, ConfigMapJournal) {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::with_version(version);
    let path = format!(
        "{}/tests/fixtures/v1.28/storageclasses.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    fake.seed_yaml(&std::fs::read_to_string(path).unwrap());
    fake.seed(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-db-0", "namespace": NS, "labels": {"app": "db"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                 "volumeMode": "Filesystem",
                 "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-data-db-0"},
    }));
    fake.set_pvc_phase(NS, "data-db-0", "Bound");
    let client = fake.client();
    let cluster = KubeCluster::new(client.clone(), Duration::from_secs(5));
    cluster.apply(&db(template)).await.unwrap();
    let rv = claim(&fake)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    cluster
        .patch_claim(
            NS,
            "data-db-0",
            &flux_converger::cluster::ClaimPatch::storage(template),
            &rv,
        )
        .await
        .unwrap();
    let journal = ConfigMapJournal::new(client, JOURNAL_NS, Duration::from_secs(5));
    (fake, cluster, journal)
}

#[tokio::test]
async fn a_converge_lists_the_claims_it_grew_to_follow() {
    let (fake, cluster, journal) = world(KubeVersion::V1_32, "1Gi").await;
    let report = converge::converge(&cluster, &journal, &db("2Gi"), &opts())
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Converged);
    assert_eq!(report.volumes.len(), 1, "{:?}", report.volumes);
    let v = &report.volumes[0];
    assert_eq!(
        (
            v.claim.as_str(),
            v.requested.as_deref(),
            v.capacity.as_deref(),
            v.state
        ),
        (
            "data-db-0",
            Some("2Gi"),
            Some("1Gi"),
            VolumeState::Requested
        )
    );
    // The command's `-o json` carries them.
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["volumes"][0]["state"], "requested");
    assert_eq!(request(&fake), "2Gi");

    // A dry run grows nothing and follows nothing.
    let (_fake, cluster, journal) = world(KubeVersion::V1_32, "1Gi").await;
    let dry = Options {
        dry_run: true,
        ..opts()
    };
    let report = converge::converge(&cluster, &journal, &db("2Gi"), &dry)
        .await
        .unwrap();
    assert!(report.volumes.is_empty());
    assert!(
        serde_json::to_value(&report)
            .unwrap()
            .get("volumes")
            .is_none()
    );
}

#[tokio::test]
async fn a_failed_expansion_is_recovered_by_a_size_declared_back_down() {
    let (fake, cluster, journal) = world(KubeVersion::V1_32, "10Gi").await;
    let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");
    resizer.start(NS, "data-db-0").await.unwrap();
    resizer
        .infeasible(NS, "data-db-0", "volume size 10Gi exceeds the limit")
        .await
        .unwrap();
    let old_uid =
        fake.get("apps/v1", "StatefulSet", Some(NS), "db").unwrap()["metadata"]["uid"].clone();
    fake.clear_requests();

    let report = converge::converge(&cluster, &journal, &db("5Gi"), &opts())
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Converged, "{report:?}");
    assert!(report.recreated);
    assert_eq!(report.claims[0].action, ClaimAction::Recovered);
    assert_eq!(
        (
            report.claims[0].from.as_deref(),
            report.claims[0].to.as_deref()
        ),
        (Some("10Gi"), Some("5Gi"))
    );
    assert_eq!(report.volumes[0].state, VolumeState::Recovered);
    assert_eq!(request(&fake), "5Gi");
    assert_eq!(template_size(&fake), "5Gi");
    assert_ne!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "db").unwrap()["metadata"]["uid"],
        old_uid
    );
    // The lowering was asked as a dry run before the first write, and came before the delete.
    let claim_patches: Vec<(bool, usize)> = fake
        .requests()
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.method == Method::PATCH && r.path.ends_with("/persistentvolumeclaims/data-db-0")
        })
        .map(|(i, r)| (r.dry_run, i))
        .collect();
    let delete = fake
        .requests()
        .iter()
        .position(|r| r.method == Method::DELETE && r.path.ends_with("/statefulsets/db"))
        .unwrap();
    let first_write = fake.requests().iter().position(|r| r.is_write()).unwrap();
    assert!(
        matches!(claim_patches.as_slice(), [(true, dry), (false, real)] if *dry < first_write && *real < delete),
        "{claim_patches:?}, first write {first_write}, delete {delete}"
    );
    assert!(
        journal.load(NS, "db").await.unwrap().is_none(),
        "intent cleared"
    );
}

#[tokio::test]
async fn on_1_28_the_recovery_is_refused_and_nothing_is_written() {
    let (fake, cluster, journal) = world(KubeVersion::V1_28, "10Gi").await;
    let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");
    resizer.start(NS, "data-db-0").await.unwrap();
    resizer
        .error(NS, "data-db-0", "quota exceeded")
        .await
        .unwrap();
    fake.clear_requests();
    let report = converge::converge(&cluster, &journal, &db("5Gi"), &opts())
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Refused);
    let refusal = report.refusal.as_ref().unwrap();
    assert_eq!(refusal.code, RefusalCode::RecoveryUnsupported);
    assert!(
        refusal
            .message
            .contains("field can not be less than previous value"),
        "{}",
        refusal.message
    );
    assert!(
        refusal.message.contains("Kubernetes 1.32 or later"),
        "{}",
        refusal.message
    );
    assert!(fake.writes().is_empty(), "{:?}", fake.writes());
    assert_eq!(request(&fake), "10Gi");
    assert!(report.volumes.is_empty());

    // What the records know (the 1.28 resizer's failure Event) decides the same way.
    let (fake, cluster, journal) = world(KubeVersion::V1_28, "10Gi").await;
    fake.clear_requests();
    let known = Options {
        known_states: std::sync::Arc::new(
            [("default/data-db-0".to_string(), VolumeState::Error)].into(),
        ),
        ..opts()
    };
    let report = converge::converge(&cluster, &journal, &db("5Gi"), &known)
        .await
        .unwrap();
    assert_eq!(
        report.refusal.unwrap().code,
        RefusalCode::RecoveryUnsupported
    );
    assert!(fake.writes().is_empty());
}

#[tokio::test]
async fn declared_at_the_capacity_is_still_a_shrink_and_nothing_is_written() {
    let (fake, cluster, journal) = world(KubeVersion::V1_32, "10Gi").await;
    let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");
    resizer.start(NS, "data-db-0").await.unwrap();
    resizer
        .infeasible(NS, "data-db-0", "too large")
        .await
        .unwrap();
    fake.clear_requests();
    let report = converge::converge(&cluster, &journal, &db("1Gi"), &opts())
        .await
        .unwrap();
    let refusal = report.refusal.unwrap();
    assert_eq!(refusal.code, RefusalCode::Shrink);
    assert!(
        refusal.message.contains("capacity 1Gi"),
        "{}",
        refusal.message
    );
    assert!(fake.writes().is_empty());
}

/// A converge stopped after lowering the claim (its orphan delete failed): the intent says it
/// is a recovery, so the next run finishes it instead of refusing a template shrink.
#[tokio::test]
async fn a_recovery_stopped_before_its_re_create_is_finished_by_the_next_run() {
    let (fake, cluster, journal) = world(KubeVersion::V1_32, "10Gi").await;
    let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");
    resizer.start(NS, "data-db-0").await.unwrap();
    resizer
        .infeasible(NS, "data-db-0", "too large")
        .await
        .unwrap();
    fake.add_fault(FaultRule {
        method: Some(Method::DELETE),
        path_contains: "/statefulsets/db".into(),
        nth: 0,
        action: Fault::Status {
            code: 500,
            reason: "InternalError".into(),
            message: "etcdserver: request timed out".into(),
        },
    });
    let stopped = converge::converge(&cluster, &journal, &db("5Gi"), &opts()).await;
    match stopped {
        Err(e @ ConvergeError::Call { .. }) => assert_eq!(e.step(), Some(Step::Orphan)),
        other => panic!("{other:?}"),
    }
    assert_eq!(request(&fake), "5Gi", "lowered before the stop");
    assert_eq!(template_size(&fake), "10Gi");
    fake.clear_faults();

    let report = converge::converge(&cluster, &journal, &db("5Gi"), &opts())
        .await
        .unwrap();
    assert!(report.resumed.is_some(), "{report:?}");
    assert_ne!(report.outcome, Outcome::Refused, "{report:?}");
    assert_eq!(template_size(&fake), "5Gi");
    assert!(journal.load(NS, "db").await.unwrap().is_none());
}
