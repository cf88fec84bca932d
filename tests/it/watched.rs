//! A converge that decides on a watched copy of its StatefulSet (the service's
//! `cluster::WatchedStatefulSets`) writes only what the live object, as the server answers,
//! calls for: a copy the proof's answer does not confirm is read again and decided again, and
//! a refusal stands only on the object read from the server.

use test_support::web;

use std::time::Duration;

use fake_apiserver::{FakeApiServer, RequestRecord};
use flux_converger::cluster::{
    CallError, Cluster, DeleteOutcome, KubeCluster, WaitOutcome, WatchedStatefulSets,
};
use flux_converger::converge::{Options, Outcome, converge};
use flux_converger::decide::RefusalCode;
use flux_converger::journal::ConfigMapJournal;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

const CLAIMS: usize = 2;

fn statefulset(size: &str, labelled: bool) -> Value {
    let labels = if labelled {
        web::applied_by_apps()
    } else {
        json!({})
    };
    web::statefulset(CLAIMS, size, labels)
}

fn sts(size: &str, labelled: bool) -> StatefulSet {
    serde_json::from_value(statefulset(size, labelled)).unwrap()
}

/// `web` at `size` with its Bound claims, created through the server as Flux would.
async fn world(size: &str, labelled: bool) -> FakeApiServer {
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/storageclasses.yaml");
    fake.enable_statefulset_controller();
    KubeCluster::new(fake.client(), Duration::from_secs(5))
        .apply(&sts(size, labelled))
        .await
        .unwrap();
    let names: Vec<String> = (0..CLAIMS).map(|i| format!("data-web-{i}")).collect();
    fake.bind_when_made(names.iter().map(|n| ("default", n.as_str())))
        .await
        .unwrap();
    fake.clear_requests();
    fake
}

fn opts() -> Options {
    Options {
        wait_timeout: Duration::from_secs(10),
        ..Options::default()
    }
}

fn live(fake: &FakeApiServer) -> StatefulSet {
    serde_json::from_value(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .unwrap(),
    )
    .unwrap()
}

fn claim_size(fake: &FakeApiServer, name: &str) -> String {
    let claim = fake
        .get("v1", "PersistentVolumeClaim", Some("default"), name)
        .unwrap();
    claim["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .unwrap()
        .to_string()
}

fn statefulset_reads(log: &[RequestRecord]) -> usize {
    log.iter()
        .filter(|r| {
            r.method == http::Method::GET && !r.watch && r.path.ends_with("/statefulsets/web")
        })
        .count()
}

/// [`KubeCluster`] whose watch holds `copy`, whatever the server holds.
struct Copied {
    inner: KubeCluster,
    copy: StatefulSet,
}

impl Cluster for Copied {
    fn watched_statefulset(&self, _: &str, _: &str) -> Option<StatefulSet> {
        Some(self.copy.clone())
    }
    async fn get_statefulset(&self, ns: &str, n: &str) -> Result<Option<StatefulSet>, CallError> {
        self.inner.get_statefulset(ns, n).await
    }
    async fn list_claims(&self, ns: &str) -> Result<Vec<PersistentVolumeClaim>, CallError> {
        self.inner.list_claims(ns).await
    }
    async fn get_claim(
        &self,
        ns: &str,
        n: &str,
    ) -> Result<Option<PersistentVolumeClaim>, CallError> {
        self.inner.get_claim(ns, n).await
    }
    async fn list_storage_classes(&self) -> Result<Vec<StorageClass>, CallError> {
        self.inner.list_storage_classes().await
    }
    async fn dry_run_apply(&self, o: &StatefulSet) -> Result<StatefulSet, CallError> {
        self.inner.dry_run_apply(o).await
    }
    async fn dry_run_create(&self, o: &StatefulSet) -> Result<StatefulSet, CallError> {
        self.inner.dry_run_create(o).await
    }
    async fn patch_claim(
        &self,
        ns: &str,
        claim: &str,
        patch: &flux_converger::cluster::ClaimPatch,
        version: &str,
    ) -> Result<(), CallError> {
        self.inner.patch_claim(ns, claim, patch, version).await
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
        version: &str,
    ) -> Result<(), CallError> {
        self.inner
            .resize_claim_dry_run(ns, claim, storage, version)
            .await
    }
    async fn orphan_delete(
        &self,
        ns: &str,
        n: &str,
        uid: &str,
    ) -> Result<DeleteOutcome, CallError> {
        self.inner.orphan_delete(ns, n, uid).await
    }
    async fn wait_gone(
        &self,
        ns: &str,
        n: &str,
        uid: &str,
        version: Option<&str>,
        timeout: Duration,
    ) -> Result<WaitOutcome, CallError> {
        self.inner.wait_gone(ns, n, uid, version, timeout).await
    }
    async fn apply(&self, o: &StatefulSet) -> Result<StatefulSet, CallError> {
        self.inner.apply(o).await
    }
}

async fn converge_over(
    fake: &FakeApiServer,
    copy: StatefulSet,
    desired: &StatefulSet,
) -> flux_converger::converge::Report {
    let cluster = Copied {
        inner: KubeCluster::new(fake.client(), Duration::from_secs(5)),
        copy,
    };
    let journal = ConfigMapJournal::new(fake.client(), "default", Duration::from_secs(5));
    converge(&cluster, &journal, desired, &opts())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_an_earlier_object_under_the_name_is_read_again_and_the_live_uid_deleted() {
    let fake = world("1Gi", true).await;
    let before = live(&fake);
    let mut copy = before.clone();
    copy.metadata.uid = Some("uid-of-an-object-deleted-since".into());
    let report = converge_over(&fake, copy, &sts("2Gi", true)).await;
    assert_eq!(report.outcome, Outcome::Converged, "{report:?}");
    assert!(report.recreated, "{report:?}");
    assert_eq!(report.old_uid, before.metadata.uid, "{report:?}");
    assert_eq!(statefulset_reads(&fake.requests()), 1);
    for i in 0..CLAIMS {
        assert_eq!(claim_size(&fake, &format!("data-web-{i}")), "2Gi");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_with_stale_templates_is_refused_by_the_proof_and_decided_again() {
    // The copy already declares 2Gi: on it alone the converge would see no template change
    // and only grow claims, leaving Flux's apply refused.
    let fake = world("1Gi", true).await;
    let mut copy = sts("2Gi", true);
    copy.metadata.uid = live(&fake).metadata.uid;
    let report = converge_over(&fake, copy, &sts("2Gi", true)).await;
    assert_eq!(report.outcome, Outcome::Converged, "{report:?}");
    assert!(report.recreated, "{report:?}");
    assert_eq!(statefulset_reads(&fake.requests()), 1);
    let now = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    assert_eq!(
        now["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    for i in 0..CLAIMS {
        assert_eq!(claim_size(&fake, &format!("data-web-{i}")), "2Gi");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_decided_on_a_copy_is_decided_again_on_the_live_object() {
    // The copy says 3Gi, so 2Gi reads as a shrink; the server holds 1Gi.
    let fake = world("1Gi", true).await;
    let mut copy = sts("3Gi", true);
    copy.metadata.uid = live(&fake).metadata.uid;
    let report = converge_over(&fake, copy, &sts("2Gi", true)).await;
    assert_eq!(report.outcome, Outcome::Converged, "{report:?}");
    assert!(report.recreated, "{report:?}");
    assert_eq!(statefulset_reads(&fake.requests()), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_stands_on_the_object_read_from_the_server_and_nothing_is_written() {
    let fake = world("3Gi", true).await;
    let copy = live(&fake);
    let report = converge_over(&fake, copy, &sts("2Gi", true)).await;
    assert_eq!(report.outcome, Outcome::Refused, "{report:?}");
    let refusal = report.refusal.as_ref().unwrap();
    assert_eq!(refusal.code, RefusalCode::Shrink, "{report:?}");
    let log = fake.requests();
    assert_eq!(statefulset_reads(&log), 1);
    let writes: Vec<_> = log
        .iter()
        .filter(|r| r.method != http::Method::GET && !r.query.contains("dryRun"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "{writes:#?}");
}

/// The real watch: it holds the labelled StatefulSet without its pod template, the converge
/// decides on it and sees its delete complete in it; an unlabelled one is read from the server
/// and its delete watched there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_holds_what_flux_applied_and_sees_the_orphan_delete_complete() {
    for labelled in [true, false] {
        let fake = world("1Gi", labelled).await;
        let (watched, task) = WatchedStatefulSets::watch(
            fake.client(),
            flux_converger::flux::objects::OWNER_NAME_LABEL,
        );
        let task = tokio::spawn(task);
        for _ in 0..500 {
            if watched.is_synced() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(watched.is_synced());
        let copy = watched.get("default", "web");
        assert_eq!(copy.is_some(), labelled);
        if let Some(copy) = &copy {
            let spec = copy.spec.as_ref().unwrap();
            assert_eq!(spec.template, Default::default(), "{copy:?}");
            assert!(spec.volume_claim_templates.is_some(), "{copy:?}");
            assert!(copy.metadata.managed_fields.is_none(), "{copy:?}");
            assert_eq!(copy.metadata.uid, live(&fake).metadata.uid);
        }
        fake.clear_requests();
        let cluster =
            KubeCluster::new(fake.client(), Duration::from_secs(5)).with_statefulsets(watched);
        let journal = ConfigMapJournal::new(fake.client(), "default", Duration::from_secs(5));
        let report = converge(&cluster, &journal, &sts("2Gi", labelled), &opts())
            .await
            .unwrap();
        task.abort();
        assert_eq!(report.outcome, Outcome::Converged, "{report:?}");
        assert!(report.recreated, "{report:?}");
        let log = fake.requests();
        let own_watches = log
            .iter()
            .filter(|r| r.watch && r.path == "/apis/apps/v1/namespaces/default/statefulsets")
            .count();
        let expected = usize::from(!labelled);
        assert_eq!(statefulset_reads(&log), expected, "labelled: {labelled}");
        assert_eq!(own_watches, expected, "labelled: {labelled}");
    }
}

/// A watch that has not listed (its task never ran: the server refused it, or it is still
/// starting) is not used: the converge reads the object and watches its delete on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_has_not_listed_is_not_used() {
    let fake = world("1Gi", true).await;
    let (watched, _never_run) = WatchedStatefulSets::watch(
        fake.client(),
        flux_converger::flux::objects::OWNER_NAME_LABEL,
    );
    assert!(!watched.is_synced());
    assert!(watched.get("default", "web").is_none());
    let cluster =
        KubeCluster::new(fake.client(), Duration::from_secs(5)).with_statefulsets(watched);
    let journal = ConfigMapJournal::new(fake.client(), "default", Duration::from_secs(5));
    let report = converge(&cluster, &journal, &sts("2Gi", true), &opts())
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Converged, "{report:?}");
    let log = fake.requests();
    assert_eq!(statefulset_reads(&log), 1);
    assert!(
        log.iter()
            .any(|r| r.watch && r.path == "/apis/apps/v1/namespaces/default/statefulsets"),
        "no watch of the delete on the server"
    );
}
