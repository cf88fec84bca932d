//! The shipped RBAC (manifests/), proven against what the code sends: every flow that exists runs
//! against the fake API server, the whole service (`service::start`) among them, and the request
//! log is evaluated with RBAC's rules (`rbac/check.rs`). The test fails on a request the install
//! would refuse, and on a grant that nothing sends, unless the grant is on the pending list of
//! code no flow can run yet (empty now); a listed grant that a flow does send fails too, so the
//! list only shrinks. The service's start-up access check (`service::access::PERMISSIONS`) is
//! held to the same log: every request covered, every permission sent, all of it granted; and
//! run under roles that lack a permission, it keeps `/readyz` at 503 naming it.

use test_support::rbac_check as check;
mod fake_authz;
use test_support::flux_standin;

use std::collections::BTreeSet;
use std::time::Duration;

use check::{Access, Grant};
use fake_apiserver::authz::RbacRequest;
use fake_apiserver::{FakeApiServer, Fault, FaultRule, GcMode, KubeVersion, Method};
use flux_converger::cluster::{Cluster as _, KubeCluster, WaitOutcome, impersonating_client};
use flux_converger::converge::{Options, converge};
use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::render::KustomizeCommand;
use flux_converger::flux::render::resolve::Resolver;
use flux_converger::journal::ConfigMapJournal;
use flux_converger::service::access::{self, Asked, Needs, PERMISSIONS, Permission, Scope};
use flux_standin::flux_archive;
use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::{Value, json};

/// Grants no flow here sends yet, each with what will send it. Empty: the service's own
/// end-to-end flow (`service_end_to_end`) sends all of its grants; a grant added for code this
/// test cannot run yet goes here, and leaves once a flow sends it.
const PENDING_SERVICE: &[(&str, &str, &str, &str)] = &[];

const NS: &str = "apps";
const TENANT: &str = "reconciler";

fn statefulset(size: &str) -> StatefulSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "serviceName": "web", "replicas": 2, "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "app", "image": "busybox",
                                  "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                "resources": {"requests": {"storage": size}}}}],
        }
    }))
    .unwrap()
}

fn fixture(rel: &str) -> String {
    std::fs::read_to_string(fake_apiserver::fixture_path(rel)).unwrap()
}

/// A cluster with `apps/web` at 1Gi, its claims Bound, and an empty request log.
async fn world() -> FakeApiServer {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::new();
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    fake.enable_statefulset_controller();
    KubeCluster::new(fake.client(), Duration::from_secs(5))
        .apply(&statefulset("1Gi"))
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
    fake.clear_requests();
    fake
}

fn opts() -> Options {
    Options {
        dry_run: false,
        wait_timeout: Duration::from_secs(10),
        ..Options::default()
    }
}

/// What a tenant's service account needs for its StatefulSets to be converged as it (the
/// namespaced part; docs/operating.md lists the same).
fn tenant_rules() -> Value {
    json!([
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "watch", "patch", "create", "delete"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["list", "patch"]},
    ])
}

/// Lets `user` (a tenant's service account) converge in `namespace`: the rules above.
fn grant_tenant(fake: &FakeApiServer, namespace: &str, user: &str) {
    fake.grant(namespace, user, tenant_rules());
}

/// And the StorageClass list a bare `KubeCluster` makes as the identity it is given (the gate
/// reads StorageClasses as the service instead, so a tenant behind the service needs none).
fn grant_storageclasses(fake: &FakeApiServer, user: &str) {
    let (sa_ns, sa) = fake_apiserver::authz::service_account(user).unwrap();
    fake.seed(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                     "metadata": {"name": "tenant-storageclasses"},
                     "rules": [{"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["list"]}]}));
    fake.seed(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": format!("tenant-storageclasses-{sa_ns}-{sa}")},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tenant-storageclasses"},
                     "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}]}));
}

fn journal(client: kube::Client) -> ConfigMapJournal {
    ConfigMapJournal::new(client, check::NAMESPACE, Duration::from_secs(5))
}

/// Converge under the converger's own identity (a Kustomization without a service account and
/// no --default-service-account): dry run, a refusal, a grow + recreate, and one interrupted at
/// the orphan delete and finished by the next run.
async fn converge_own_identity() -> Vec<RbacRequest> {
    let fake = world().await;
    check::install(&fake);
    let cluster = KubeCluster::new(fake.client(), Duration::from_secs(5));
    let journal = journal(fake.client());
    // On start the service moves an earlier version's intent ConfigMap into a Secret (this
    // one names a StatefulSet that is gone, so its resume only clears it).
    let mut legacy = serde_json::to_value(
        flux_converger::journal::intent_to_configmap(check::NAMESPACE, &{
            let mut intent = flux_converger::journal::Intent {
                namespace: NS.into(),
                name: "gone".into(),
                uid: "u-gone".into(),
                desired: statefulset("2Gi"),
                plan: json!({}),
                recorded_at: String::new(),
                revision: None,
                deleting: false,
                act_as: Some("-".into()),
                kustomization: None,
            };
            intent.desired.metadata.name = Some("gone".into());
            intent
        })
        .unwrap(),
    )
    .unwrap();
    legacy["apiVersion"] = json!("v1");
    legacy["kind"] = json!("ConfigMap");
    fake.seed(legacy);
    journal.migrate_legacy().await.unwrap();
    // On start the service finishes what an earlier run left.
    flux_converger::converge::resume_all(
        |_: &flux_converger::journal::Intent| std::future::ready(Ok::<_, String>(&cluster)),
        &journal,
        &opts(),
    )
    .await
    .unwrap();
    let dry = Options {
        dry_run: true,
        ..opts()
    };
    converge(&cluster, &journal, &statefulset("2Gi"), &dry)
        .await
        .unwrap();
    converge(&cluster, &journal, &statefulset("512Mi"), &opts())
        .await
        .unwrap();
    // Interrupted after the orphan delete was sent, while the garbage collector is slow: the next
    // run finds the StatefulSet still terminating and waits for it from a fresh list.
    fake.set_orphan_gc(GcMode::Stuck);
    fake.add_fault(FaultRule {
        method: Some(Method::DELETE),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: Fault::DropAfterWrite,
    });
    assert!(
        converge(&cluster, &journal, &statefulset("2Gi"), &opts())
            .await
            .is_err()
    );
    fake.set_orphan_gc(GcMode::After(Duration::from_millis(150)));
    converge(&cluster, &journal, &statefulset("2Gi"), &opts())
        .await
        .unwrap();
    converge(&cluster, &journal, &statefulset("3Gi"), &opts())
        .await
        .unwrap();
    fake.gc_settled().await;
    // A wait that has no version to watch from (a resume, an expired watch) lists first.
    let waited = cluster
        .wait_gone(
            NS,
            "web",
            "uid-of-an-older-web",
            None,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert!(matches!(waited, WaitOutcome::Replaced { .. }), "{waited:?}");
    assert_eq!(
        fake.get("v1", "PersistentVolumeClaim", Some(NS), "data-web-0")
            .unwrap()["spec"]["resources"]["requests"]["storage"],
        "3Gi"
    );
    fake.rbac_requests()
}

/// Converge as a tenant's service account (the Kustomization's spec.serviceAccountName): the
/// StatefulSet and claim work goes through impersonation, the journal stays the converger's.
async fn converge_impersonating() -> Vec<RbacRequest> {
    let fake = world().await;
    check::install(&fake);
    let tenant = format!("system:serviceaccount:{NS}:{TENANT}");
    grant_tenant(&fake, NS, &tenant);
    grant_storageclasses(&fake, &tenant);
    let served = fake.serve().await;
    let kubeconfig = kube::config::Kubeconfig::read_from(&served.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let tenant = impersonating_client(&config, NS, TENANT).unwrap();
    let cluster = KubeCluster::new(tenant, Duration::from_secs(5));
    let journal = journal(kube::Client::try_from(config).unwrap());
    converge(&cluster, &journal, &statefulset("2Gi"), &opts())
        .await
        .unwrap();
    fake.gc_settled().await;
    fake.rbac_requests()
}

/// The four kinds a Kustomization's sourceRef may name, with a minimal spec of each.
const SOURCES: [(&str, &str); 4] = [
    (
        "GitRepository",
        r#"{"interval": "1m", "url": "https://example.com/repo.git"}"#,
    ),
    (
        "OCIRepository",
        r#"{"interval": "1m", "url": "oci://example.com/repo"}"#,
    ),
    (
        "Bucket",
        r#"{"interval": "1m", "bucketName": "b", "endpoint": "minio.example.com"}"#,
    ),
    ("ExternalArtifact", r#"{}"#),
];

/// Resolve and render a Kustomization from the cluster (Kustomization, source, substituteFrom
/// ConfigMap and an absent optional Secret), as the gate does before converging.
async fn render_from_cluster() -> Vec<RbacRequest> {
    flux_converger::tls::install_crypto_provider();
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/render");
    let files = flux_archive::files_under(&data.join("vars"));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let archive = flux_archive::flux_artifact(&refs);
    let server = flux_archive::ArtifactServer::start().await;
    let path = "gitrepository/flux-system/repo/0123abcd.tar.gz";
    let url = server.put(path, archive.clone());
    let fake = FakeApiServer::new();
    let ks: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(data.join("vars.ks.yaml")).unwrap())
            .unwrap();
    for (kind, spec) in SOURCES {
        let mut source_ks = ks.clone();
        source_ks["metadata"]["name"] = json!(format!("db-{}", kind.to_lowercase()));
        source_ks["spec"]["sourceRef"]["kind"] = json!(kind);
        fake.seed(source_ks);
        fake.seed(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": kind,
            "metadata": {"name": "repo", "namespace": "flux-system"},
            "spec": serde_json::from_str::<Value>(spec).unwrap(),
            "status": {"artifact": {"url": url, "digest": flux_archive::sha256(&archive),
                                    "revision": "main@sha1:0123abcd", "path": path, "size": 1,
                                    "lastUpdateTime": "2026-11-29T00:00:00Z"}}
        }));
    }
    fake.seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "db-sizes", "namespace": "flux-system"},
                     "data": {"DB_SIZE": "5Gi", "REPLICAS": "2"}}));
    check::install(&fake);
    let resolver = Resolver {
        client: fake.client(),
        fetcher: Fetcher::new(FetchOptions::default()).unwrap(),
        kustomize: KustomizeCommand::default(),
        strict: true,
        allow_cross_namespace: true,
    };
    for (kind, _) in SOURCES {
        let name = format!("db-{}", kind.to_lowercase());
        let resolved = resolver.resolve("flux-system", &name).await.unwrap();
        assert_eq!(resolved.rendered.statefulsets.len(), 1, "{kind}");
    }
    fake.rbac_requests()
}

/// Leader election as the service runs it: kube-lease-manager acquiring, holding and releasing
/// the Lease in the service's namespace.
async fn leader_election() -> Vec<RbacRequest> {
    let fake = FakeApiServer::new();
    check::install(&fake);
    let manager = kube_lease_manager::LeaseManagerBuilder::new(fake.client(), "flux-converger")
        .with_namespace(check::NAMESPACE)
        .with_identity("flux-converger-0")
        .build()
        .await
        .unwrap();
    assert!(manager.changed().await.unwrap(), "the only candidate leads");
    manager.release().await.unwrap();
    fake.rbac_requests()
}

/// The service's records and Events (svc-gate's `Results` and `EventSink`): a revision's record
/// written `running` then final (create, then replace with its resourceVersion), loaded back as
/// at startup, and an Event published twice on the Kustomization (a create, then the series patch).
/// Issue #38 under the shipped roles: a template moved to another VolumeAttributesClass
/// (discovery and the class read as the converger, each claim patched to it), then the claims'
/// follow on a StatefulSet that opts in to `restart-for-resize`: its pods watched, the pod of a
/// `filesystem-pending` claim evicted.
async fn attributes_and_restart() -> Vec<RbacRequest> {
    use flux_converger::model::{
        GateMode, Key, Kind, RevisionRecord, RevisionState, Trigger, Volume, VolumeState,
    };
    use flux_converger::records::events::{EventSink, EventTarget};
    use flux_converger::records::results::Results;
    use flux_converger::service::volumes::{FollowerConfig, VolumeFollower};
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::with_version(KubeVersion::V1_36);
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    fake.seed(
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
                     "metadata": {"name": "gold"}, "driverName": "ebs.csi.aws.com"}),
    );
    fake.enable_statefulset_controller();
    fake.set_pods_ready(true);
    let with_class = |size: &str| {
        let mut sts = statefulset(size);
        sts.metadata.annotations = Some(
            [(
                "flux-converger.io/restart-for-resize".to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        if let Some(t) = sts
            .spec
            .as_mut()
            .and_then(|s| s.volume_claim_templates.as_mut())
        {
            t[0].spec.as_mut().unwrap().volume_attributes_class_name = Some("gold".into());
        }
        sts
    };
    let cluster = KubeCluster::new(fake.client(), Duration::from_secs(5));
    cluster.apply(&statefulset("1Gi")).await.unwrap();
    fake.bind_when_made([(NS, "data-web-0"), (NS, "data-web-1")])
        .await
        .unwrap();
    check::install(&fake);
    fake.clear_rbac_requests();
    let journal = journal(fake.client());
    let report = converge(&cluster, &journal, &with_class("2Gi"), &opts())
        .await
        .unwrap();
    assert_eq!(report.outcome, flux_converger::converge::Outcome::Converged);
    fake.gc_settled().await;
    // data-web-0 grew; data-web-1 grew offline: the node finishes it when its pod mounts it
    // again.
    fake.modify("v1", "PersistentVolumeClaim", Some(NS), "data-web-0", |c| {
        c["status"]["capacity"] = json!({"storage": "2Gi"});
    });
    fake.modify("v1", "PersistentVolumeClaim", Some(NS), "data-web-1", |c| {
        c["status"]["allocatedResourceStatuses"] = json!({"storage": "NodeResizePending"});
        c["status"]["allocatedResources"] = json!({"storage": "2Gi"});
    });
    let results = Results::new(
        fake.client(),
        check::NAMESPACE.into(),
        Duration::from_secs(5),
    );
    let mut record = RevisionRecord::new(
        "main@sha1:2",
        Trigger::Watch,
        jiff::Timestamp::now().to_string(),
        RevisionState::Converged,
        GateMode::Reconcile,
        Some(1),
    );
    record.statefulsets = vec![flux_converger::records::entry::from_report(&report)];
    for v in &mut record.statefulsets[0].volumes {
        *v = Volume {
            state: VolumeState::Requested,
            ..v.clone()
        };
    }
    results.put(NS, "apps", record.clone()).await.unwrap();
    let follower = VolumeFollower::new(FollowerConfig {
        client: fake.client(),
        results: vec![(Kind::KUSTOMIZATION, results.clone())],
        events: EventSink::new(fake.client(), None, Some("flux-converger-0".into())).unwrap(),
        metrics: Default::default(),
        resize_timeout: Duration::from_secs(1800),
        call_timeout: Duration::from_secs(5),
        statefulsets: None,
        restart_retry: Duration::from_millis(200),
    });
    let key = Key::kustomization(NS, "apps");
    follower.follow(
        Kind::KUSTOMIZATION,
        &key,
        &record,
        EventTarget::named(Kind::KUSTOMIZATION, &key),
        true,
    );
    for _ in 0..500 {
        let asked = fake.rbac_requests();
        let sent = |verb: &str, what: &str| {
            asked
                .iter()
                .any(|r| r.verb == verb && r.resource_path() == what && r.allowed)
        };
        if sent("create", "pods/eviction") && sent("watch", "pods") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    follower.stop();
    assert!(
        fake.rbac_requests()
            .iter()
            .any(|r| r.resource_path() == "pods/eviction" && r.verb == "create"),
        "{:?}",
        fake.rbac_requests()
    );
    fake.rbac_requests()
}

async fn records_and_events() -> Vec<RbacRequest> {
    use flux_converger::model::{RevisionRecord, RevisionState};
    use flux_converger::records::events::{EventSink, RevisionEvent, Severity};
    use flux_converger::records::results::Results;
    let fake = FakeApiServer::new();
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-a"}}));
    check::install(&fake);
    let results = Results::new(
        fake.client(),
        check::NAMESPACE.into(),
        Duration::from_secs(5),
    );
    results.load().await.unwrap();
    let record = |state: &str| -> RevisionRecord {
        serde_json::from_value(
            json!({"revision": "main@sha1:0123abcd", "trigger": "webhook",
                                      "startedAt": "2026-11-30T08:00:00Z", "state": state}),
        )
        .unwrap()
    };
    results
        .put("tenant-a", "apps", record("running"))
        .await
        .unwrap();
    results
        .put("tenant-a", "apps", record("converged"))
        .await
        .unwrap();
    let restarted = Results::new(
        fake.client(),
        check::NAMESPACE.into(),
        Duration::from_secs(5),
    );
    restarted.load().await.unwrap();
    assert_eq!(
        restarted.last("tenant-a", "apps").map(|r| r.state),
        Some(RevisionState::Converged)
    );

    let sink = EventSink::new(fake.client(), None, Some("flux-converger-0".into())).unwrap();
    let kustomization: flux_converger::flux::objects::Kustomization =
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "tenant-a", "uid": "1b2c"},
            "spec": {"interval": "10m", "path": "./", "prune": true,
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}}
        }))
        .unwrap();
    let event = RevisionEvent {
        severity: Severity::Info,
        reason: "Converged".into(),
        message: "web: grew data-web-0 1Gi -> 2Gi".into(),
        revision: "main@sha1:0123abcd".into(),
    };
    sink.publish(&kustomization, &event).await;
    sink.publish(&kustomization, &event).await;
    assert_eq!(
        fake.list("events.k8s.io/v1", "Event", Some("tenant-a"))
            .len(),
        1,
        "one Event, a series of two"
    );
    fake.rbac_requests()
}

/// kustomize-controller, played: once the Kustomization is unsuspended (a newer generation) or
/// asked to reconcile, it reports the source's current revision applied.
fn play_flux(fake: &FakeApiServer, name: &'static str) -> tokio::task::JoinHandle<()> {
    let fake = fake.clone();
    let ks_api = "kustomize.toolkit.fluxcd.io/v1";
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let Some(ks) = fake.get(ks_api, "Kustomization", Some("flux-system"), name) else {
                continue;
            };
            let generation = ks["metadata"]["generation"].as_i64().unwrap_or(0);
            let token = ks["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
                .as_str()
                .map(str::to_string);
            let unsuspended = ks["spec"]["suspend"] != json!(true)
                && ks["status"]["observedGeneration"].as_i64() != Some(generation);
            let requested = token.is_some()
                && ks["status"]["lastHandledReconcileAt"].as_str() != token.as_deref();
            if !unsuspended && !requested {
                continue;
            }
            let Some(repo) = fake.get(
                "source.toolkit.fluxcd.io/v1",
                "GitRepository",
                Some("flux-system"),
                "repo",
            ) else {
                continue;
            };
            let revision = repo["status"]["artifact"]["revision"].clone();
            fake.modify(ks_api, "Kustomization", Some("flux-system"), name, |ks| {
                let status = &mut ks["status"];
                status["observedGeneration"] = json!(generation);
                status["lastAttemptedRevision"] = revision.clone();
                status["lastAppliedRevision"] = revision.clone();
                if let Some(t) = &token {
                    status["lastHandledReconcileAt"] = json!(t);
                }
                status["conditions"] = json!([{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T00:00:00Z",
                    "reason": "ReconciliationSucceeded", "observedGeneration": generation,
                    "message": format!("Applied revision: {revision}")}]);
            });
        }
    })
}

/// One revision through the service's gate (svc-gate's `Gate::run`), in both hand-off modes: a
/// `suspend` Kustomization converged as its service account, a `reconcile` one as the
/// converger; resolve, converge, hand-off writes on the Kustomization, records and Events.
async fn gate_both_modes() -> Vec<RbacRequest> {
    use flux_converger::model::{GateMode, RevisionState, Trigger};
    use flux_converger::records::events::EventSink;
    use flux_converger::records::metrics::Metrics;
    use flux_converger::records::results::Results;
    use flux_converger::service::gate::{Gate, GateConfig, GateOutcome};
    let fake = world().await;
    let server = flux_archive::ArtifactServer::start().await;
    let yaml = serde_saphyr::to_string(&statefulset("2Gi")).unwrap();
    let archive = flux_archive::flux_artifact(&[("apps/web.yaml", yaml.as_str())]);
    let path = "gitrepository/flux-system/repo/2.tar.gz";
    let url = server.put(path, archive.clone());
    fake.seed(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": "flux-system"},
        "spec": {"interval": "1m", "url": "https://example.com/repo.git"},
        "status": {"artifact": {"url": url, "digest": flux_archive::sha256(&archive),
                                "revision": "main@sha1:2", "path": path, "size": archive.len(),
                                "lastUpdateTime": "2026-11-30T00:00:00Z"}}
    }));
    for (name, gate, sa) in [
        ("tenant", "suspend", Some(TENANT)),
        ("own", "reconcile", None),
    ] {
        let mut ks = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": "flux-system",
                         "annotations": {"flux-converger.io/gate": gate}},
            "spec": {"interval": "10m", "path": "./apps", "prune": true, "suspend": gate == "suspend",
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}},
            "status": {"lastAppliedRevision": "main@sha1:1", "observedGeneration": 1}
        });
        if let Some(sa) = sa {
            ks["spec"]["serviceAccountName"] = json!(sa);
        }
        fake.seed(ks);
    }
    // The artifact gate: a Kustomization reading an ExternalArtifact whose upstream is the
    // same GitRepository; the publish writes the ExternalArtifact's status.
    fake.seed(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "ExternalArtifact",
        "metadata": {"name": "published", "namespace": "flux-system"},
        "spec": {"sourceRef": {"kind": "GitRepository", "name": "repo"}}
    }));
    fake.seed(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "artifact", "namespace": "flux-system",
                     "annotations": {"flux-converger.io/gate": "artifact"}},
        "spec": {"interval": "10m", "path": "./apps", "prune": true,
                 "sourceRef": {"kind": "ExternalArtifact", "name": "published"}},
        "status": {"lastAppliedRevision": "main@sha1:1", "observedGeneration": 1}
    }));
    check::install(&fake);
    grant_tenant(
        &fake,
        NS,
        &format!("system:serviceaccount:flux-system:{TENANT}"),
    );
    let config = GateConfig {
        client: fake.client(),
        namespace: check::NAMESPACE.into(),
        resolver: Resolver {
            client: fake.client(),
            fetcher: Fetcher::new(FetchOptions::default()).unwrap(),
            kustomize: KustomizeCommand::default(),
            strict: true,
            allow_cross_namespace: true,
        },
        results: Results::new(
            fake.client(),
            check::NAMESPACE.into(),
            Duration::from_secs(5),
        ),
        metrics: Metrics::default(),
        handoff_timeout: Duration::from_secs(30),
        call_timeout: Duration::from_secs(5),
        default_service_account: None,
        events: EventSink::new(fake.client(), None, Some("flux-converger-0".into())).unwrap(),
        default_gate: GateMode::Suspend,
    };
    let storage_dir = tempfile::tempdir().unwrap();
    let storage = flux_converger::storage::Storage::open(
        &flux_converger::storage::StorageConfig {
            path: Some(storage_dir.path().to_path_buf()),
            addr: "127.0.0.1:0".parse().unwrap(),
            adv_addr: "127.0.0.1:9090".into(),
            max_cache_bytes: 1 << 30,
            ..Default::default()
        },
        FetchOptions::default(),
    )
    .unwrap();
    let gate = Gate::standalone(config).with_artifact_host(storage);
    for name in ["tenant", "own", "artifact"] {
        let flux = play_flux(&fake, name);
        let outcome = gate.run("flux-system", name, Trigger::Webhook).await;
        flux.abort();
        assert_eq!(
            outcome,
            GateOutcome::Done(RevisionState::Converged),
            "{name}"
        );
        fake.gc_settled().await;
    }
    fake.rbac_requests()
}

/// A HelmRelease wedged on the immutable error, converged and handed back under the shipped
/// roles (the install with its HelmRelease component): the HelmRelease read and patched, its
/// release Secrets listed, the StatefulSet converged as for a Kustomization.
async fn helm_release() -> Vec<RbacRequest> {
    use flux_converger::model::{GateOutcome, RevisionState, Trigger};
    let fake = crate::helm_service::world().await;
    check::install(&fake);
    let gate = crate::helm_service::helm_gate(&fake);
    let outcome = gate.run("demo", "web", Trigger::Watch).await;
    assert_eq!(outcome, GateOutcome::Done(RevisionState::Converged));
    fake.gc_settled().await;
    fake.rbac_requests()
}

/// An Argo CD Application (the opt-in component `manifests/argocd` installed) through the whole
/// service (`service::start` with `--argocd-*`, as `serve` runs it) under the shipped roles
/// alone, next to Argo CD's stand-ins (the application-controller runs as the stand-ins' own
/// identity, as Flux's do): Argo CD syncs `argocd/db` at 1Gi, git grows it, the sync stops on
/// the immutable-field error after its retry; the service (watching Applications and
/// AppProjects, reading the AppProject and `argocd-cm` for the identity) converges and hands it
/// back (the sync operation, an update), and Argo CD's sync succeeds with the nonce. The test
/// reads the Application from the fake's store, never through the API as the service.
async fn argocd_application() -> Vec<RbacRequest> {
    use crate::argocd_service as argo;
    use flux_converger::argocd::application::Application;
    use test_support::argocd_standin::{ArgoCdController, ArgoCdOptions, ArgoCdServer, Repo};
    let fake = argo::cluster();
    check::install(&fake);
    let argocd = check::flux_client(&fake);
    let repo = Repo::default();
    argo::publish(&repo, argo::REV_A, "1Gi");
    let token = "argocd-token";
    let server = ArgoCdServer::start_with(token, repo.clone()).await.unwrap();
    argo::create_application(
        argocd.clone(),
        json!({}),
        json!({"automated": {"prune": true, "selfHeal": true}, "retry": {"limit": 1}}),
    )
    .await;
    let _controller = ArgoCdController::start(argocd, repo.clone(), ArgoCdOptions::default());
    let app = |fake: &FakeApiServer| -> Application {
        serde_json::from_value(
            fake.get(
                "argoproj.io/v1alpha1",
                "Application",
                Some(argo::ARGO_NS),
                "db",
            )
            .expect("the Application"),
        )
        .expect("an Application")
    };
    while !(argo::completed(&app(&fake)) && argo::synced_at(&app(&fake), argo::REV_A)) {
        poll(&fake).await;
    }
    argo::bind_claims(&fake).await;

    let flags = argo::flags(&server, token, "hook-token");
    let running = flux_converger::service::start(
        service_config().argocd(Some(flags.config.clone())).build(),
        fake.client(),
    )
    .await
    .expect("the service starts under the shipped RBAC with manifests/argocd");
    loop {
        let (code, body) = readyz(running.addr).await;
        if code == 200 {
            break;
        }
        assert!(!body.contains("missing permissions"), "{body}");
        poll(&fake).await;
    }
    argo::publish(&repo, argo::REV_B, "2Gi");
    let handed_back = |a: &Application| {
        argo::completed(a)
            && argo::synced_at(a, argo::REV_B)
            && a.operation_state()
                .is_some_and(|s| s.info("flux-converger").is_some())
    };
    while !handed_back(&app(&fake)) {
        poll(&fake).await;
    }
    let applied = |d: &Value| d["revisions"][0]["flux"]["outcome"] == json!("applied");
    while !applied(
        &status(
            running.addr,
            &format!("/status/applications/{}/db", argo::ARGO_NS),
        )
        .await,
    ) {
        poll(&fake).await;
    }
    assert_eq!(
        fake.get("v1", "PersistentVolumeClaim", Some(argo::NS), "data-db-1")
            .unwrap()["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    running.shutdown().await;
    drop(flags.dir);
    fake.gc_settled().await;
    fake.rbac_requests()
}

/// An Application whose compared revision moved on since its sync failed, run under the
/// shipped roles: the one write is the refresh annotation Argo CD removes once done (a patch).
async fn argocd_refresh() -> Vec<RbacRequest> {
    use crate::argocd_service as argo;
    let world = argo::stopped(|a| a["status"]["sync"]["revision"] = json!(argo::REV_C)).await;
    check::install(&world.fake);
    let gate = world.gate();
    assert_eq!(
        argo::run(&gate).await,
        flux_converger::model::GateOutcome::NotHandled
    );
    let app = world
        .fake
        .get(
            "argoproj.io/v1alpha1",
            "Application",
            Some(argo::ARGO_NS),
            "db",
        )
        .unwrap();
    assert_eq!(
        app["metadata"]["annotations"]["argocd.argoproj.io/refresh"],
        "normal"
    );
    world.fake.rbac_requests()
}

fn web_yaml(size: &str) -> String {
    serde_saphyr::to_string(&statefulset(size)).unwrap()
}

/// `GET` on the running service, as JSON.
async fn status(addr: std::net::SocketAddr, path: &str) -> Value {
    let response = reqwest::get(format!("http://{addr}{path}"))
        .await
        .expect("the service answers");
    let text = response.text().await.unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_default()
}

/// `GET /readyz` on the running service: status and body.
async fn readyz(addr: std::net::SocketAddr) -> (u16, String) {
    let response = reqwest::get(format!("http://{addr}/readyz"))
        .await
        .expect("the service answers");
    let code = response.status().as_u16();
    (code, response.text().await.unwrap_or_default())
}

/// The service's configuration in these flows: leader election on, the webhook keyed.
fn service_config() -> flux_converger::service::ConfigBuilder {
    test_support::service::config(check::NAMESPACE)
        .hmac_key(Some(b"webhook-key".to_vec()))
        .allow_unauthenticated_hooks(false)
        .hook_min_interval(Duration::from_secs(10))
        .default_gate(flux_converger::model::GateMode::Suspend)
        .handoff_timeout(Duration::from_secs(60))
        .leader_elect(true)
}

/// A wait step of the service's flow: a refused request fails the test at once, naming it.
async fn poll(fake: &FakeApiServer) {
    check::assert_none_refused(&fake.rbac_requests());
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// The whole service (`service::start`, as `serve` runs it, leader election on) under the
/// shipped roles alone, next to Flux's stand-ins (their own identity): a Kustomization with the
/// suspend gate converged at startup, then a grown revision announced by a signed webhook,
/// converged, handed off and applied by Flux; then a graceful shutdown (Lease released).
async fn service_end_to_end() -> Vec<RbacRequest> {
    use flux_converger::service::start;
    use flux_standin::{
        ArtifactServer, GitSource, KustomizeController, KustomizeOptions, create_kustomization,
        kustomization, post_event,
    };
    const KEY: &[u8] = b"webhook-key";
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::new();
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    fake.enable_statefulset_controller();
    check::install(&fake);
    let flux = check::flux_client(&fake);
    let source = GitSource::create(
        flux.clone(),
        ArtifactServer::start().await,
        "flux-system",
        "repo",
    )
    .await
    .unwrap();
    let r1 = source
        .publish("web at 1Gi", &[("apps/web.yaml", web_yaml("1Gi").as_str())])
        .await
        .unwrap();
    let ks = kustomization(
        "flux-system",
        "apps",
        "repo",
        "./apps",
        Some("suspend"),
        false,
    );
    create_kustomization(&flux, &ks).await.unwrap();
    let _kustomize_controller = KustomizeController::start(
        flux.clone(),
        KustomizeOptions {
            resolver: Resolver {
                client: flux.clone(),
                fetcher: Fetcher::new(FetchOptions::default()).unwrap(),
                kustomize: KustomizeCommand::default(),
                strict: true,
                allow_cross_namespace: true,
            },
            namespace: Some("flux-system".into()),
            retry_interval: Duration::from_millis(300),
        },
    );
    let applied = |fake: &FakeApiServer| {
        fake.get(
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some("flux-system"),
            "apps",
        )
        .and_then(|k| {
            k["status"]["lastAppliedRevision"]
                .as_str()
                .map(String::from)
        })
    };
    while applied(&fake).as_deref() != Some(r1.revision.as_str()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for i in 0..2 {
        let claim = format!("data-web-{i}");
        while fake
            .get("v1", "PersistentVolumeClaim", Some(NS), &claim)
            .is_none()
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        fake.set_pvc_phase(NS, &claim, "Bound");
    }

    let running = start(
        service_config().hmac_key(Some(KEY.to_vec())).build(),
        fake.client(),
    )
    .await
    .expect("the service starts under the shipped RBAC");
    // The access check finds every permission it asks for granted by the shipped roles.
    loop {
        let (code, body) = readyz(running.addr).await;
        if code == 200 {
            break;
        }
        assert!(!body.contains("missing permissions"), "{body}");
        poll(&fake).await;
    }
    let newest = |detail: &Value| detail["revisions"][0].clone();
    let converged_and_applied = |r: &Value, revision: &str| {
        r["revision"] == json!(revision)
            && r["state"] == json!("converged")
            && r["flux"]["outcome"] == json!("applied")
    };
    while !converged_and_applied(
        &newest(&status(running.addr, "/status/flux-system/apps").await),
        &r1.revision,
    ) {
        poll(&fake).await;
    }

    let r2 = source
        .publish("web at 2Gi", &[("apps/web.yaml", web_yaml("2Gi").as_str())])
        .await
        .unwrap();
    let event = source.new_artifact_event(&r2).await.unwrap();
    let delivery = post_event(&format!("http://{}/hook", running.addr), KEY, &event)
        .await
        .unwrap();
    assert_eq!(delivery.status, 202, "{}", delivery.body);
    let last = loop {
        let r = newest(&status(running.addr, "/status/flux-system/apps").await);
        if r["revision"] == json!(r2.revision)
            && r["state"] != json!("running")
            && (r["state"] != json!("converged")
                || (!r["flux"].is_null() && r["flux"]["outcome"] != json!("pending")))
        {
            break r;
        }
        poll(&fake).await;
    };
    // A refused write ends the revision `failed`: name the refusal rather than the record.
    check::assert_none_refused(&fake.rbac_requests());
    assert!(converged_and_applied(&last, &r2.revision), "{last:#}");
    assert_eq!(applied(&fake).as_deref(), Some(r2.revision.as_str()));
    assert_eq!(
        fake.get("v1", "PersistentVolumeClaim", Some(NS), "data-web-1")
            .unwrap()["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    // The resizer grows the claims; the service follows them (its claim and Event watches,
    // under the shipped roles) until the record says every one grew.
    // (The stand-in acts as a controller of its own, as Flux's stand-ins do.)
    let resizer = test_support::resizer::Resizer::new(check::flux_client(&fake), "ebs.csi.aws.com");
    for i in 0..2 {
        resizer.finish(NS, &format!("data-web-{i}")).await.unwrap();
    }
    while newest(&status(running.addr, "/status/flux-system/apps").await)["volumes"]["grown"]
        != json!(2)
    {
        poll(&fake).await;
    }
    running.shutdown().await;
    fake.gc_settled().await;
    fake.rbac_requests()
}

/// `--status-auth=kubernetes` under the shipped roles: the service becomes ready (its access
/// check asks for the two reviews too), then a reader's token is reviewed and whether it may
/// get a Kustomization asked, as the service's own identity; the reader may not (403).
async fn status_auth_reads() -> Vec<RbacRequest> {
    use flux_converger::http::{HttpConfig, StatusAuthMode};
    let fake = FakeApiServer::new();
    check::install(&fake);
    fake.add_token("reader-token", "reader", &[]);
    let config = service_config()
        .http(HttpConfig {
            status_auth: StatusAuthMode::Kubernetes,
            ..HttpConfig::default()
        })
        .build();
    let running = flux_converger::service::start(config, fake.client())
        .await
        .expect("the service starts");
    loop {
        let (code, body) = readyz(running.addr).await;
        if code == 200 {
            break;
        }
        assert!(!body.contains("missing permissions"), "{body}");
        poll(&fake).await;
    }
    let answer = reqwest::Client::new()
        .get(format!("http://{}/status/{NS}/web", running.addr))
        .bearer_auth("reader-token")
        .send()
        .await
        .expect("the service answers");
    assert_eq!(answer.status().as_u16(), 403);
    running.shutdown().await;
    fake.rbac_requests()
}

/// Whether a permission of the access check's table covers a request the code sent.
fn covers(p: &Permission, a: &Access) -> bool {
    p.verb == a.verb
        && p.group == a.group
        && p.resource == a.resource
        && match p.scope {
            Scope::Cluster => true,
            Scope::Own => a.namespace.as_deref() == Some(check::NAMESPACE),
        }
}

/// Everything the access check can ask, every flag on.
fn every_check() -> Vec<Asked> {
    access::needed(&Needs {
        namespace: check::NAMESPACE.into(),
        leader_elect: true,
        impersonating: true,
        status_auth: true,
        helm_releases: true,
        argocd: true,
    })
}

/// A permission the check asks, as RBAC would see it (no name; `None`: every namespace).
fn asked_access(a: &Asked) -> Access {
    Access {
        verb: a.verb.into(),
        group: a.group.into(),
        resource: a.resource.into(),
        namespace: a.namespace.clone(),
        name: None,
    }
}

/// The service under an install whose ClusterRole lacks `create` on StatefulSets (the shipped
/// one before the re-apply was known to be a create): it starts, but `/readyz` stays 503 and
/// names the missing permission, before any revision could orphan-delete a StatefulSet.
/// Checked with two rules reviews (its namespace and cluster-wide) and one access review: the
/// permission the rules do not show, asked on its own before it is reported.
async fn lacking_create_statefulsets() -> Vec<RbacRequest> {
    let fake = FakeApiServer::new();
    check::install(&fake);
    fake.modify(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        "flux-converger",
        |role| {
            for rule in role["rules"].as_array_mut().unwrap() {
                if rule["resources"] == json!(["statefulsets"]) {
                    rule["verbs"] = json!(["get", "list", "watch", "patch", "delete"]);
                }
            }
        },
    );
    let running = flux_converger::service::start(service_config().build(), fake.client())
        .await
        .expect("the service starts");
    let (code, body) = loop {
        let (code, body) = readyz(running.addr).await;
        if code == 200 || body.contains("missing permissions") {
            break (code, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(code, 503);
    assert_eq!(
        body,
        "not ready: missing permissions: create statefulsets.apps cluster-wide\n"
    );
    // Asked as itself, under its own identity, and only asked: the reviews are no write.
    let reviews = |resource: &str| -> Vec<Access> {
        check::converger_accesses(&fake.rbac_requests())
            .into_iter()
            .filter(|a| a.resource == resource)
            .collect()
    };
    assert_eq!(
        reviews("selfsubjectrulesreviews").len(),
        2,
        "one rules review per namespace asked about: flux-system, and cluster-wide"
    );
    assert_eq!(
        reviews("selfsubjectaccessreviews").len(),
        1,
        "one access review: the permission the rules do not show"
    );
    running.shutdown().await;
    fake.rbac_requests()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_lacking_a_permission_is_not_ready_and_names_it() {
    lacking_create_statefulsets().await;
}

/// Issue #38's grants are asked at start-up under the rules-review check like every other:
/// an install without the VolumeAttributesClass and pod rules (an install from before #38)
/// keeps `/readyz` at 503 naming the four, each confirmed missing by its own access review
/// (the rules show none of them; `pods/eviction` is matched as a subresource).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_without_the_class_and_eviction_grants_is_not_ready_and_names_them() {
    let fake = FakeApiServer::new();
    check::install(&fake);
    fake.modify(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        "flux-converger",
        |role| {
            let rules = role["rules"].as_array_mut().unwrap();
            let before = rules.len();
            rules.retain(|rule| {
                ![
                    json!(["volumeattributesclasses"]),
                    json!(["pods"]),
                    json!(["pods/eviction"]),
                ]
                .contains(&rule["resources"])
            });
            assert_eq!(
                rules.len(),
                before - 3,
                "the shipped role has the three rules"
            );
        },
    );
    let running = flux_converger::service::start(service_config().build(), fake.client())
        .await
        .expect("the service starts");
    let (code, body) = checked(running.addr).await;
    assert_eq!(code, 503);
    assert_eq!(
        body,
        "not ready: missing permissions: get volumeattributesclasses.storage.k8s.io cluster-wide, \
         list pods cluster-wide, watch pods cluster-wide, create pods/eviction cluster-wide\n"
    );
    let confirmed = check::converger_accesses(&fake.rbac_requests())
        .into_iter()
        .filter(|a| a.resource == "selfsubjectaccessreviews")
        .count();
    assert_eq!(confirmed, 4, "one access review per permission missing");
    running.shutdown().await;
}

/// `--argocd-server` on an install without the Argo CD component (manifests/argocd): the service
/// starts, but `/readyz` stays 503 naming every permission the component grants, before any
/// Application is run. (`argocd-cm` is read with the install's own `get configmaps`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_argocd_lane_without_its_component_is_not_ready_and_names_it() {
    use crate::argocd_service as argo;
    let fake = FakeApiServer::new();
    check::install(&fake);
    fake.remove(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        None,
        "flux-converger-argocd",
    );
    let server = test_support::argocd_standin::ArgoCdServer::start_with("t", Default::default())
        .await
        .unwrap();
    let flags = argo::flags(&server, "t", "h");
    let running = flux_converger::service::start(
        service_config().argocd(Some(flags.config.clone())).build(),
        fake.client(),
    )
    .await
    .expect("the service starts");
    let (code, body) = checked(running.addr).await;
    assert_eq!(code, 503);
    assert_eq!(
        body,
        "not ready: missing permissions: get applications.argoproj.io cluster-wide, \
         list applications.argoproj.io cluster-wide, watch applications.argoproj.io cluster-wide, \
         update applications.argoproj.io cluster-wide, patch applications.argoproj.io cluster-wide, \
         get appprojects.argoproj.io cluster-wide, list appprojects.argoproj.io cluster-wide, \
         watch appprojects.argoproj.io cluster-wide\n"
    );
    // Each missing permission confirmed by its own access review (the rules show none).
    let confirmed = check::converger_accesses(&fake.rbac_requests())
        .into_iter()
        .filter(|a| a.resource == "selfsubjectaccessreviews")
        .count();
    assert_eq!(confirmed, 8, "one access review per permission missing");
    running.shutdown().await;
}

/// `/readyz` until the access check has answered: its body then.
async fn checked(addr: std::net::SocketAddr) -> (u16, String) {
    loop {
        let (code, body) = readyz(addr).await;
        if code == 200 || body.contains("missing permissions") {
            return (code, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A review the API server does not answer says nothing about the permission: it is asked
/// again, and the service becomes ready without ever reporting it missing. Run as the admin
/// (`system:masters`), whose rights no rules review shows (that group is no RBAC rule on a
/// real server either): every permission is then confirmed by an access review, so both
/// kinds of review meet a fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_that_fails_is_retried_not_reported_missing() {
    let fake = FakeApiServer::new();
    for (path, nth, action) in [
        ("/selfsubjectrulesreviews", 0, Fault::Drop),
        (
            "/selfsubjectaccessreviews",
            1,
            Fault::Status {
                code: 503,
                reason: "ServiceUnavailable".into(),
                message: "the server is currently unable to handle the request".into(),
            },
        ),
    ] {
        fake.add_fault(FaultRule {
            method: Some(Method::POST),
            path_contains: path.into(),
            nth,
            action,
        });
    }
    let running = flux_converger::service::start(service_config().build(), fake.client())
        .await
        .expect("the service starts");
    assert_eq!(checked(running.addr).await, (200, "ok\n".to_string()));
    let failed = fake
        .requests()
        .iter()
        .filter(|r| r.path.contains("/selfsubject") && r.code != Some(201))
        .count();
    assert_eq!(failed, 2, "both faults were met and retried");
    let confirmed = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/selfsubjectaccessreviews") && r.code == Some(201))
        .count();
    let expected = access::needed(&Needs {
        namespace: check::NAMESPACE.into(),
        leader_elect: true,
        impersonating: false,
        status_auth: false,
        helm_releases: false,
        argocd: false,
    });
    assert_eq!(
        confirmed,
        expected.len(),
        "each permission confirmed once (no impersonation, status auth, HelmRelease records or Argo CD here)"
    );
    running.shutdown().await;
}

/// A handled Kustomization that names a service account makes the service impersonate: once
/// the watches have synced, the check asks for `impersonate` too, and names it when missing.
/// The answer given before the sync never makes the replica ready: the Kustomizations are
/// listed well after the first pass has answered, and the second pass is slow, so a replica
/// ready on the first pass's answer would be seen ready here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kustomization_with_a_service_account_makes_impersonate_needed() {
    let fake = FakeApiServer::new();
    fake.add_fault(FaultRule {
        method: Some(Method::GET),
        path_contains: "/kustomizations".into(),
        nth: 0,
        action: Fault::Delay(Duration::from_millis(1000)),
    });
    for nth in 0..80 {
        for path in ["/selfsubjectaccessreviews", "/selfsubjectrulesreviews"] {
            fake.add_fault(FaultRule {
                method: Some(Method::POST),
                path_contains: path.into(),
                nth,
                action: Fault::Delay(Duration::from_millis(100)),
            });
        }
    }
    fake.seed(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "tenant", "namespace": "flux-system",
                     "annotations": {"flux-converger.io/gate": "suspend"}},
        "spec": {"interval": "10m", "path": "./apps", "prune": true, "suspend": true,
                 "serviceAccountName": TENANT,
                 "sourceRef": {"kind": "GitRepository", "name": "repo"}}
    }));
    check::install(&fake);
    fake.modify(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        "flux-converger",
        |role| {
            role["rules"]
                .as_array_mut()
                .unwrap()
                .retain(|rule| rule["resources"] != json!(["serviceaccounts"]));
        },
    );
    let running = flux_converger::service::start(service_config().build(), fake.client())
        .await
        .expect("the service starts");
    assert_eq!(
        checked(running.addr).await,
        (
            503,
            "not ready: missing permissions: impersonate serviceaccounts cluster-wide\n"
                .to_string()
        )
    );
    running.shutdown().await;
}

fn pending_keys() -> BTreeSet<(&'static str, &'static str, &'static str)> {
    PENDING_SERVICE
        .iter()
        .map(|(g, r, v, _)| (*g, *r, *v))
        .collect()
}

fn lines<T: ToString>(items: &[T]) -> String {
    items
        .iter()
        .map(|i| format!("\n  {}", i.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_rbac_allows_exactly_what_the_code_sends() {
    let mut requests = Vec::new();
    requests.extend(converge_own_identity().await);
    requests.extend(converge_impersonating().await);
    requests.extend(render_from_cluster().await);
    requests.extend(leader_election().await);
    requests.extend(records_and_events().await);
    requests.extend(attributes_and_restart().await);
    requests.extend(gate_both_modes().await);
    requests.extend(helm_release().await);
    requests.extend(argocd_application().await);
    requests.extend(argocd_refresh().await);
    requests.extend(service_end_to_end().await);
    requests.extend(status_auth_reads().await);
    // The access review is sent only for what the rules reviews do not show.
    requests.extend(lacking_create_statefulsets().await);
    let accesses = check::converger_accesses(&requests);
    let grants = check::installed_grants();

    let denied = check::denied(&grants, &accesses);
    assert!(denied.is_empty(), "the install refuses:{}", lines(&denied));

    let pending = pending_keys();
    let unused: Vec<Grant> = check::unused(&grants, &accesses);
    let unexplained: Vec<&Grant> = unused
        .iter()
        .filter(|g| !pending.contains(&g.key()))
        .collect();
    assert!(
        unexplained.is_empty(),
        "granted, but nothing sends it:{}",
        lines(&unexplained)
    );
    let sent: Vec<&(&str, &str, &str, &str)> = PENDING_SERVICE
        .iter()
        .filter(|(g, r, v, _)| !unused.iter().any(|u| u.key() == (*g, *r, *v)))
        .collect();
    assert!(
        sent.is_empty(),
        "now sent by a flow here: drop from PENDING_SERVICE: {sent:?}"
    );
    // Every pending entry is a grant the install has (no stale entries).
    for key in &pending {
        assert!(
            grants.iter().any(|g| g.key() == *key),
            "{key:?} is pending but not granted"
        );
    }

    // The access check's table is what the code sends as itself, no more and no less (the
    // review calls themselves aside), and the shipped roles grant all of it.
    let uncovered: Vec<&Access> = accesses
        .iter()
        .filter(|a| !a.resource.starts_with("selfsubject"))
        .filter(|a| !PERMISSIONS.iter().any(|p| covers(p, a)))
        .collect();
    assert!(
        uncovered.is_empty(),
        "sent, but not in service::access::PERMISSIONS:{}",
        lines(&uncovered)
    );
    let unsent: Vec<String> = PERMISSIONS
        .iter()
        .filter(|p| !accesses.iter().any(|a| covers(p, a)))
        .map(|p| format!("{p:?}"))
        .collect();
    assert!(
        unsent.is_empty(),
        "in service::access::PERMISSIONS, but nothing sends it:{}",
        lines(&unsent)
    );
    let refused_by_install: Vec<String> = every_check()
        .into_iter()
        .filter(|a| !grants.iter().any(|g| g.allows(&asked_access(a))))
        .map(|a| a.to_string())
        .collect();
    assert!(
        refused_by_install.is_empty(),
        "the access check asks for what the install does not grant:{}",
        lines(&refused_by_install)
    );

    // The StatefulSet and claim writes of an impersonated converge are the tenant's: the
    // converger only needs to impersonate that one account.
    let tenant = format!("system:serviceaccount:{NS}:{TENANT}");
    let tenant_writes: BTreeSet<String> = check::accesses_of(&requests, &tenant)
        .into_iter()
        .filter(|a| ["patch", "create", "delete"].contains(&a.verb.as_str()))
        .map(|a| format!("{} {}", a.verb, a.resource))
        .collect();
    assert_eq!(
        tenant_writes,
        [
            "create statefulsets",
            "delete statefulsets",
            "patch persistentvolumeclaims",
            "patch statefulsets"
        ]
        .map(String::from)
        .into()
    );
    assert!(accesses.iter().any(|a| a.verb == "impersonate"
        && a.namespace.as_deref() == Some(NS)
        && a.name.as_deref() == Some(TENANT)));
    // Every request of every flow was allowed by the fake's RBAC (the converger under the
    // shipped roles, tenants under the rules docs/operating.md gives them).
    let refused: Vec<String> = requests
        .iter()
        .filter(|r| !r.allowed)
        .map(|r| format!("{} {}", r.user, Access::from(r)))
        .collect();
    assert!(
        refused.is_empty(),
        "refused by the fake's RBAC:{}",
        lines(&refused)
    );
}

fn access(verb: &str, group: &str, resource: &str, ns: Option<&str>, name: Option<&str>) -> Access {
    Access {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        namespace: ns.map(str::to_string),
        name: name.map(str::to_string),
    }
}

fn grant(role_ns: Option<&str>, group: &str, resource: &str, verb: &str, names: &[&str]) -> Grant {
    Grant {
        role: "test".into(),
        namespace: role_ns.map(str::to_string),
        group: group.into(),
        resource: resource.into(),
        verb: verb.into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
    }
}

#[test]
fn rbac_rules_match_like_the_api_server_by_table() {
    let cm_get = access("get", "", "configmaps", Some("flux-system"), Some("x"));
    let cases: Vec<(Grant, Access, bool)> = vec![
        (
            grant(None, "", "configmaps", "get", &[]),
            cm_get.clone(),
            true,
        ),
        (
            grant(Some("flux-system"), "", "configmaps", "get", &[]),
            cm_get.clone(),
            true,
        ),
        (
            grant(Some("other"), "", "configmaps", "get", &[]),
            cm_get.clone(),
            false,
        ),
        (
            grant(None, "", "configmaps", "list", &[]),
            cm_get.clone(),
            false,
        ),
        (
            grant(None, "apps", "configmaps", "get", &[]),
            cm_get.clone(),
            false,
        ),
        (
            grant(None, "", "configmaps", "get", &["x"]),
            cm_get.clone(),
            true,
        ),
        (
            grant(None, "", "configmaps", "get", &["y"]),
            cm_get.clone(),
            false,
        ),
        (
            grant(None, "", "configmaps", "create", &["x"]),
            access("create", "", "configmaps", Some("a"), None),
            false,
        ),
        (
            grant(Some("flux-system"), "", "configmaps", "list", &[]),
            access("list", "", "configmaps", None, None),
            false,
        ),
        (
            grant(None, "apps", "statefulsets", "patch", &[]),
            access("patch", "apps", "statefulsets/scale", Some("a"), Some("w")),
            false,
        ),
        (
            grant(None, "apps", "statefulsets/*", "patch", &[]),
            access("patch", "apps", "statefulsets/scale", Some("a"), Some("w")),
            true,
        ),
        (grant(None, "*", "*", "*", &[]), cm_get.clone(), true),
    ];
    for (g, a, allowed) in cases {
        assert_eq!(g.allows(&a), allowed, "{g} vs {a}");
    }
}

/// The check fails both ways on a changed install: a missing verb is refused, an extra one unused.
#[test]
fn the_check_fails_on_a_missing_or_an_extra_grant() {
    let grants = check::installed_grants();
    let delete_sts = access("delete", "apps", "statefulsets", Some("db"), Some("web"));
    assert!(check::denied(&grants, std::slice::from_ref(&delete_sts)).is_empty());
    let without: Vec<Grant> = grants
        .iter()
        .filter(|g| !(g.resource == "statefulsets" && g.verb == "delete"))
        .cloned()
        .collect();
    assert_eq!(
        check::denied(&without, std::slice::from_ref(&delete_sts)),
        vec![delete_sts]
    );
    let mut with_extra = grants.clone();
    with_extra.push(grant(None, "", "pods", "delete", &[]));
    let unused = check::unused(&with_extra, &[]);
    assert!(unused.iter().any(|g| g.resource == "pods"));
    // Records are confined to flux-system: a journal elsewhere is refused.
    let elsewhere = access(
        "delete",
        "",
        "configmaps",
        Some("default"),
        Some("flux-converger-intent.a.web"),
    );
    assert_eq!(
        check::denied(&grants, std::slice::from_ref(&elsewhere)).len(),
        1
    );
}
