//! Sharding as Flux shards its controllers: one Deployment per shard, each with its own
//! `--watch-label-selector` and its own Lease (`--leader-election-id`, derived from the
//! selector by default). Against the in-repo fake API server: two shards lead at once and each
//! converges its own Kustomization; each one's `/status`, results and intents are its own; the
//! results are read once in pages and then followed by a watch.

use test_support::flux_standin;
use test_support::intent as intent_fixture;
use test_support::rbac_check;

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::render::KustomizeCommand;
use flux_converger::flux::render::resolve::Resolver;
use flux_converger::http::backend::Backend;
use flux_converger::journal::{
    ConfigMapJournal, INTENT_RECORD, Journal, RECORD_LABEL, SHARD_LABEL, Shard,
};
use flux_converger::model::{RevisionRecord, RevisionState, Trigger};
use flux_converger::records::results::{PAGE_SIZE, Results, results_configmap_name, to_configmap};
use flux_converger::service::leadership::LeaseSettings;
use flux_converger::service::queue::BackoffPolicy;
use flux_converger::service::{Config, Running, Tuning, start_tuned};
use flux_standin::{
    ArtifactServer, GitSource, KustomizeController, KustomizeOptions, create_kustomization,
    kustomization,
};
use intent_fixture::intent;
use serde_json::{Value, json};

const NS: &str = "flux-system";
const T: Duration = Duration::from_secs(5);
/// The Leases `--watch-label-selector=shard=a` and `=shard=b` lead with by default.
const LEASE_A: &str = "flux-converger-3d8dfb26";
const LEASE_B: &str = "flux-converger-51051576";

/// Polls (no wall-clock bound: a hang is a failure of the test runner's own timeout).
async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The StatefulSet `name` in `default`, 2 replicas, one `data` template of `size`.
fn statefulset(name: &str, size: &str) -> String {
    flux_standin::web_statefulset(size).replace("web", name)
}

fn resolver(client: kube::Client) -> Resolver {
    Resolver {
        client,
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

/// One shard's `serve`, as its Deployment would run it: `--watch-label-selector`,
/// `--leader-elect`, the Lease derived from the selector.
fn shard_config(selector: &str) -> Config {
    // The Lease is left to the builder, which derives it from the selector as `serve` does.
    test_support::service::config(NS)
        .hmac_key(Some(b"webhook-key\n".to_vec()))
        .allow_unauthenticated_hooks(false)
        .watch_label_selector(Some(selector.to_string()))
        .handoff_timeout(Duration::from_secs(60))
        .leader_elect(true)
        .call_timeout(T)
        .build()
}

/// A Lease long enough that a loaded machine renews it in time.
fn tuning(identity: &str) -> Tuning {
    Tuning {
        lease: LeaseSettings {
            duration: Duration::from_secs(6),
            grace: Duration::from_secs(3),
            margin: Duration::from_secs(1),
            ..LeaseSettings::new(identity)
        },
        backoff: BackoffPolicy {
            base: Duration::from_millis(200),
            max: Duration::from_secs(2),
            jitter: 0.0,
        },
        shutdown_grace: Duration::from_secs(30),
        restart_retry: Duration::from_secs(10),
    }
}

async fn start(fake: &FakeApiServer, selector: &str, identity: &str) -> Running {
    start_tuned(shard_config(selector), fake.client(), tuning(identity))
        .await
        .expect("the shard starts")
}

/// The newest record of `revision` for Kustomization `name`, once it is final and Flux's
/// verdict is in.
async fn finished(running: &Running, name: &str, revision: &str) -> RevisionRecord {
    loop {
        if let Some(detail) =
            running
                .backend
                .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, name)
            && let Some(r) = detail.revisions.iter().find(|r| r.revision == revision)
            && r.state != RevisionState::Running
            && (r.state != RevisionState::Converged || r.flux.is_some())
        {
            return r.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn claim_request(fake: &FakeApiServer, claim: &str) -> String {
    fake.get("v1", "PersistentVolumeClaim", Some("default"), claim)
        .and_then(|c| {
            c["spec"]["resources"]["requests"]["storage"]
                .as_str()
                .map(String::from)
        })
        .unwrap_or_default()
}

fn lease_holder(fake: &FakeApiServer, name: &str) -> Option<String> {
    fake.get("coordination.k8s.io/v1", "Lease", Some(NS), name)
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(String::from))
}

fn shard_label_of(fake: &FakeApiServer, configmap: &str) -> Option<String> {
    fake.get("v1", "ConfigMap", Some(NS), configmap)
        .and_then(|cm| {
            cm["metadata"]["labels"][SHARD_LABEL]
                .as_str()
                .map(String::from)
        })
}

/// The Kustomizations `/status` lists, over HTTP.
async fn status_names(running: &Running) -> Vec<String> {
    let text = reqwest::get(format!("http://{}/status", running.addr))
        .await
        .expect("the service answers")
        .text()
        .await
        .expect("a body");
    let body: Value = serde_json::from_str(&text).expect("JSON");
    body["kustomizations"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|k| {
            format!(
                "{}/{}",
                k["namespace"].as_str().unwrap_or_default(),
                k["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// Lists (not watches) of the results ConfigMaps since the requests were last cleared.
fn results_lists(fake: &FakeApiServer) -> Vec<String> {
    fake.requests()
        .iter()
        .filter(|r| {
            r.path == format!("/api/v1/namespaces/{NS}/configmaps")
                && !r.watch
                && matches!(r.method, fake_apiserver::Method::GET)
                // The Kustomizations' store (the HelmReleases' lists its own once too).
                && r.query.contains("record%3Dresults")
        })
        .map(|r| r.query.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_lead_at_once_and_each_converges_and_shows_only_its_own() {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::new();
    rbac_check::install(&fake);
    fake.seed_fixture("v1.28/storageclasses.yaml");
    fake.enable_statefulset_controller();
    let flux = rbac_check::flux_client(&fake);
    let source = GitSource::create(flux.clone(), ArtifactServer::start().await, NS, "repo")
        .await
        .unwrap();
    let files = |size: &str| {
        [
            ("a/web.yaml", statefulset("web-a", size)),
            ("b/web.yaml", statefulset("web-b", size)),
        ]
    };
    let publish = |size: &'static str| {
        let files = files(size);
        let source = &source;
        async move {
            let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
            source
                .publish(&format!("both at {size}"), &files)
                .await
                .unwrap()
        }
    };
    let r1 = publish("1Gi").await.revision;
    // One source, two Kustomizations, each labelled for its shard as Flux's sharding does.
    for shard in ["a", "b"] {
        let mut ks = kustomization(
            NS,
            shard,
            "repo",
            &format!("./{shard}"),
            Some("suspend"),
            false,
        );
        ks["metadata"]["labels"] = json!({"shard": shard});
        create_kustomization(&flux, &ks).await.unwrap();
    }
    let _kc = KustomizeController::start(
        flux.clone(),
        KustomizeOptions {
            resolver: resolver(flux.clone()),
            namespace: Some(NS.into()),
            retry_interval: Duration::from_millis(300),
        },
    );
    for claim in [
        "data-web-a-0",
        "data-web-a-1",
        "data-web-b-0",
        "data-web-b-1",
    ] {
        until(|| {
            fake.get("v1", "PersistentVolumeClaim", Some("default"), claim)
                .is_some()
        })
        .await;
        fake.set_pvc_phase("default", claim, "Bound");
    }

    let a = start(&fake, "shard=a", "shard-a-0").await;
    let b = start(&fake, "shard=b", "shard-b-0").await;
    // Distinct Leases: neither excludes the other.
    until(|| a.is_leading() && b.is_leading()).await;
    assert_eq!(lease_holder(&fake, LEASE_A).as_deref(), Some("shard-a-0"));
    assert_eq!(lease_holder(&fake, LEASE_B).as_deref(), Some("shard-b-0"));
    assert_eq!(lease_holder(&fake, "flux-converger"), None);
    assert_eq!(finished(&a, "a", &r1).await.state, RevisionState::Converged);
    assert_eq!(finished(&b, "b", &r1).await.state, RevisionState::Converged);

    // A follower of shard a: it converges nothing and its /status follows the leader's
    // records through its watch, after one list.
    fake.clear_requests();
    let a_follower = start(&fake, "shard=a", "shard-a-1").await;
    until(|| a_follower.backend.ready().is_ok()).await;
    assert!(!a_follower.is_leading());

    // A new revision grows both StatefulSets: each shard converges its own, both leading.
    let r2 = publish("2Gi").await.revision;
    let ra = finished(&a, "a", &r2).await;
    let rb = finished(&b, "b", &r2).await;
    assert_eq!(ra.state, RevisionState::Converged, "{ra:#?}");
    assert_eq!(rb.state, RevisionState::Converged, "{rb:#?}");
    assert!(a.is_leading() && b.is_leading());
    for claim in [
        "data-web-a-0",
        "data-web-a-1",
        "data-web-b-0",
        "data-web-b-1",
    ] {
        assert_eq!(claim_request(&fake, claim), "2Gi", "{claim}");
    }
    let followed = finished(&a_follower, "a", &r2).await;
    assert_eq!(followed.state, RevisionState::Converged);
    let lists = results_lists(&fake);
    assert_eq!(
        lists.len(),
        1,
        "the follower lists once, then watches: {lists:?}"
    );
    assert!(
        lists[0].contains(&format!("limit={PAGE_SIZE}")),
        "{lists:?}"
    );

    // /status, the records and their ConfigMaps: each shard's own.
    assert_eq!(status_names(&a).await, ["flux-system/a"]);
    assert_eq!(status_names(&b).await, ["flux-system/b"]);
    assert_eq!(status_names(&a_follower).await, ["flux-system/a"]);
    assert!(
        b.backend
            .detail(flux_converger::model::Kind::KUSTOMIZATION, NS, "a")
            .is_none()
    );
    assert_eq!(
        shard_label_of(&fake, &results_configmap_name(NS, "a")).as_deref(),
        Some(LEASE_A)
    );
    assert_eq!(
        shard_label_of(&fake, &results_configmap_name(NS, "b")).as_deref(),
        Some(LEASE_B)
    );

    a_follower.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
    // All of it under the shipped roles (the watch on the results included).
    rbac_check::assert_allowed(&fake.rbac_requests());
}

fn record(revision: &str) -> RevisionRecord {
    RevisionRecord {
        volumes: Default::default(),
        revision: revision.to_string(),
        digest: None,
        trigger: Trigger::Webhook,
        started_at: format!("2026-12-01T00:00:00Z-{revision}"),
        finished_at: None,
        state: RevisionState::Converged,
        statefulsets: Vec::new(),
        handoff: None,
        flux: None,
        warnings: Vec::new(),
        error: None,
        generation: None,
        gate: None,
        attempts: 1,
    }
}

/// A results ConfigMap as `shard` writes it (`None`: unlabelled, as every earlier version).
fn seed_results(fake: &FakeApiServer, name: &str, shard: Option<&str>) {
    let mut cm = serde_json::to_value(
        to_configmap(NS, "apps", name, &[record("main@sha1:1")], None).unwrap(),
    )
    .unwrap();
    cm["apiVersion"] = json!("v1");
    cm["kind"] = json!("ConfigMap");
    if let Some(shard) = shard {
        cm["metadata"]["labels"][SHARD_LABEL] = json!(shard);
    }
    fake.seed(cm);
}

fn sharded(fake: &FakeApiServer, lease: &str) -> Results {
    Results::sharded(fake.client(), NS.into(), T, Shard::Named(lease.into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_read_in_pages_then_followed_and_each_shard_keeps_to_its_own() {
    let fake = FakeApiServer::new();
    let many = 2 * PAGE_SIZE as usize + 1;
    for i in 0..many {
        seed_results(&fake, &format!("a-{i:04}"), Some(LEASE_A));
    }
    for i in 0..3 {
        seed_results(&fake, &format!("b-{i}"), Some(LEASE_B));
    }
    for i in 0..2 {
        seed_results(&fake, &format!("old-{i}"), None);
    }

    // A follower of shard a: one paged list, then the watch.
    fake.clear_requests();
    let follower = sharded(&fake, LEASE_A);
    let following = tokio::spawn(follower.clone().follow());
    follower.loaded().await;
    assert_eq!(follower.keys().len(), many);
    assert!(
        follower
            .keys()
            .iter()
            .all(|(_, name)| name.starts_with("a-"))
    );
    let lists = results_lists(&fake);
    assert_eq!(lists.len(), 3, "{many} in pages of {PAGE_SIZE}: {lists:?}");
    assert!(
        lists
            .iter()
            .all(|q| q.contains(&format!("limit={PAGE_SIZE}"))),
        "{lists:?}"
    );

    // The leader of shard a writes and deletes; the follower sees both, without listing.
    let leader = sharded(&fake, LEASE_A);
    leader.load().await.unwrap();
    fake.clear_requests();
    leader
        .put("apps", "new", record("main@sha1:2"))
        .await
        .unwrap();
    until(|| follower.last("apps", "new").is_some()).await;
    leader
        .put("apps", "a-0000", record("main@sha1:3"))
        .await
        .unwrap();
    until(|| follower.last("apps", "a-0000").map(|r| r.revision) == Some("main@sha1:3".into()))
        .await;
    assert!(leader.remove("apps", "a-0001").await.unwrap());
    until(|| follower.last("apps", "a-0001").is_none()).await;
    assert!(
        results_lists(&fake).is_empty(),
        "{:?}",
        results_lists(&fake)
    );

    // The other shard and the unsharded install each read their own.
    let b = sharded(&fake, LEASE_B);
    b.load().await.unwrap();
    assert_eq!(
        b.keys(),
        [
            ("apps".to_string(), "b-0".to_string()),
            ("apps".into(), "b-1".into()),
            ("apps".into(), "b-2".into())
        ]
    );
    let unsharded = Results::new(fake.client(), NS.into(), T);
    unsharded.load().await.unwrap();
    assert_eq!(
        unsharded.keys(),
        [
            ("apps".to_string(), "old-0".to_string()),
            ("apps".into(), "old-1".into())
        ]
    );

    // A Kustomization moved from shard a to shard b: b takes its history over (and labels
    // it), and a's removal of its own stale copy leaves b's alone.
    b.put("apps", "a-0002", record("main@sha1:4"))
        .await
        .unwrap();
    let moved = results_configmap_name("apps", "a-0002");
    assert_eq!(shard_label_of(&fake, &moved).as_deref(), Some(LEASE_B));
    assert_eq!(
        b.history("apps", "a-0002").len(),
        2,
        "merged with a's history"
    );
    assert!(leader.remove("apps", "a-0002").await.unwrap());
    assert_eq!(shard_label_of(&fake, &moved).as_deref(), Some(LEASE_B));
    following.abort();
}

/// Which intents each journal lists (what a replica resumes when it takes the lead): a shard
/// its own, the unsharded install the unlabelled ones, the operator's `converge` every one.
#[tokio::test]
async fn each_shard_resumes_only_its_own_intents() {
    let fake = FakeApiServer::new();
    let journal = |shard: Option<Shard>| {
        let j = ConfigMapJournal::new(fake.client(), NS, T);
        match shard {
            Some(shard) => j.scoped(shard),
            None => j,
        }
    };
    let a = Shard::Named(LEASE_A.into());
    let b = Shard::Named(LEASE_B.into());
    journal(Some(a.clone()))
        .record(&intent("web-a"))
        .await
        .unwrap();
    journal(Some(b.clone()))
        .record(&intent("web-b"))
        .await
        .unwrap();
    journal(Some(Shard::Unsharded))
        .record(&intent("web"))
        .await
        .unwrap();
    let cm = fake
        .get(
            "v1",
            "Secret",
            Some(NS),
            "flux-converger-intent.default.web-a",
        )
        .expect("recorded");
    assert_eq!(cm["metadata"]["labels"][SHARD_LABEL], json!(LEASE_A));
    assert_eq!(cm["metadata"]["labels"][RECORD_LABEL], json!(INTENT_RECORD));

    let cases: &[(Option<Shard>, &[&str])] = &[
        (Some(a), &["web-a"]),
        (Some(b), &["web-b"]),
        (Some(Shard::Unsharded), &["web"]),
        (None, &["web", "web-a", "web-b"]),
    ];
    for (shard, want) in cases {
        let mut names: Vec<String> = journal(shard.clone())
            .list()
            .await
            .unwrap()
            .intents
            .into_iter()
            .map(|i| i.name)
            .collect();
        names.sort();
        assert_eq!(names, *want, "{shard:?}");
    }
}
