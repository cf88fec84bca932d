//! The Flux stand-ins (`crates/test-support/src/flux_standin.rs`) against the fake API server: what the
//! service's end-to-end tests and the demo rely on them to do, checked here once.

use test_support::flux_standin;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_apiserver::FakeApiServer;
use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::event::Event;
use flux_converger::flux::render::KustomizeCommand;
use flux_converger::flux::render::resolve::Resolver;
use flux_standin::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn resolver(client: kube::Client) -> Resolver {
    Resolver {
        client,
        fetcher: Fetcher::new(FetchOptions::default()).unwrap(),
        kustomize: KustomizeCommand::default(),
        strict: true,
        allow_cross_namespace: true,
    }
}

fn ks(fake: &FakeApiServer) -> Value {
    fake.get(
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some("flux-system"),
        "apps",
    )
    .unwrap()
}

/// Polls the fake until `pred` holds for the Kustomization (what a Flux user watches).
async fn until_ks(fake: &FakeApiServer, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let k = ks(fake);
        if pred(&k) {
            return k;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Kustomization never reached the expected state: {k:#}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ready(k: &Value) -> (String, String, String) {
    let c = k["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null);
    (
        c["status"].as_str().unwrap_or_default().to_string(),
        c["reason"].as_str().unwrap_or_default().to_string(),
        c["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn source_publishes_and_kustomize_controller_applies_refuses_and_obeys_requests() {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/storageclasses.yaml");
    fake.enable_statefulset_controller();
    let client = fake.client();
    let server = ArtifactServer::start().await;
    let source = GitSource::create(client.clone(), server.clone(), "flux-system", "repo")
        .await
        .unwrap();

    // source-controller: an artifact in Flux's layout, announced in status.
    let one = flux_standin::web_statefulset("1Gi");
    let r1 = source
        .publish("web at 1Gi", &[("apps/web.yaml", one.as_str())])
        .await
        .unwrap();
    assert_eq!(r1.number, 1);
    assert!(r1.revision.starts_with("main@sha1:"));
    assert_eq!(r1.revision.len(), "main@sha1:".len() + 40);
    let repo = fake
        .get(
            "source.toolkit.fluxcd.io/v1",
            "GitRepository",
            Some("flux-system"),
            "repo",
        )
        .unwrap();
    let artifact = &repo["status"]["artifact"];
    assert_eq!(artifact["revision"], json!(r1.revision));
    assert_eq!(artifact["digest"], json!(r1.digest));
    assert_eq!(artifact["url"], json!(r1.url));
    assert_eq!(artifact["size"], json!(r1.size));
    assert!(artifact["lastUpdateTime"].as_str().unwrap().ends_with('Z'));
    assert_eq!(repo["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(repo["status"]["conditions"][0]["status"], "True");

    // kustomize-controller: applies the first revision as kustomize-controller.
    create_kustomization(
        &client,
        &kustomization("flux-system", "apps", "repo", "./apps", None, false),
    )
    .await
    .unwrap();
    let kc = KustomizeController::start(
        client.clone(),
        KustomizeOptions {
            resolver: resolver(client.clone()),
            namespace: Some("flux-system".into()),
            retry_interval: Duration::from_millis(300),
        },
    );
    let k = until_ks(&fake, |k| {
        k["status"]["lastAppliedRevision"] == json!(r1.revision)
    })
    .await;
    assert_eq!(
        ready(&k),
        (
            "True".into(),
            "ReconciliationSucceeded".into(),
            format!("Applied revision: {}", r1.revision)
        )
    );
    assert_eq!(k["status"]["lastAttemptedRevision"], json!(r1.revision));
    assert_eq!(
        k["status"]["observedGeneration"],
        k["metadata"]["generation"]
    );
    let sts = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    assert_eq!(
        sts["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"],
        "apps"
    );
    let appliers: Vec<&str> = sts["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["operation"] == "Apply")
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(appliers, ["kustomize-controller"]);
    let writes = fake.writes();
    assert!(
        writes.iter().any(|w| w.path.contains("/statefulsets/web")
            && w.field_manager.as_deref() == Some("kustomize-controller")),
        "applied with kustomize-controller's field manager"
    );
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.path.contains("/statefulsets/web") && r.dry_run),
        "dry-ran before applying"
    );

    // A grown template is refused by the API server: Flux's message, nothing applied.
    let two = flux_standin::web_statefulset("2Gi");
    let r2 = source
        .publish("web at 2Gi", &[("apps/web.yaml", two.as_str())])
        .await
        .unwrap();
    assert_ne!(r2.revision, r1.revision);
    let k = until_ks(&fake, |k| {
        k["status"]["lastAttemptedRevision"] == json!(r2.revision) && ready(k).0 == "False"
    })
    .await;
    assert_eq!(k["status"]["lastAppliedRevision"], json!(r1.revision));
    let (_, reason, message) = ready(&k);
    assert_eq!(reason, "ReconciliationFailed");
    assert!(
        message.starts_with(
            "StatefulSet/default/web dry-run failed (Invalid): StatefulSet.apps \"web\" is invalid: \
             spec: Forbidden: updates to statefulset spec for fields other than"
        ),
        "{message}"
    );
    let live = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    assert_eq!(
        live["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "1Gi"
    );
    // The failed revision is retried after the retry interval, and still fails.
    assert!(
        kc.wait_for(WAIT, |r| r.why == Why::Retry && r.revision == r2.revision)
            .await
            .unwrap()
            .result
            .is_err()
    );

    // Suspended: a new revision is not applied; a requested reconcile on resume is handled.
    fake.modify(
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some("flux-system"),
        "apps",
        |k| k["spec"]["suspend"] = json!(true),
    );
    // A pass that listed the Kustomization before the suspend may still be reconciling: the
    // stand-in, as kustomize-controller, acts on what it read.
    kc.settle().await;
    let r3 = source
        .publish("web back at 1Gi", &[("apps/web.yaml", one.as_str())])
        .await
        .unwrap();
    let before = kc.reconciled().len();
    // Observed, not timed: wait for the GitRepository write to reach the stand-in's watch and
    // the Kustomization to be listed again, then check nothing was attempted.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        kc.reconciled().len(),
        before,
        "a suspended Kustomization is left alone"
    );
    assert_eq!(
        ks(&fake)["status"]["lastAttemptedRevision"],
        json!(r2.revision)
    );
    fake.modify(
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some("flux-system"),
        "apps",
        |k| {
            k["spec"]["suspend"] = json!(false);
            k["metadata"]["annotations"] = json!({REQUESTED_AT: "token-1"});
        },
    );
    let k = until_ks(&fake, |k| {
        k["status"]["lastAppliedRevision"] == json!(r3.revision)
    })
    .await;
    assert_eq!(k["status"]["lastHandledReconcileAt"], "token-1");
    assert_eq!(ready(&k).0, "True");
    assert!(
        kc.reconciled().iter().any(
            |r| r.revision == r3.revision && matches!(r.why, Why::Requested | Why::SpecChanged)
        )
    );
    assert_eq!(source.history().len(), 3);
}

/// What, the Kustomization, its source's revision, retry due, the expected answer.
type Case = (&'static str, Value, Option<&'static str>, bool, Option<Why>);

#[test]
fn should_reconcile_table() {
    let base = |suspend: bool, generation: i64, observed: i64, attempted: &str, applied: &str| {
        json!({
            "metadata": {"generation": generation},
            "spec": {"suspend": suspend},
            "status": {"observedGeneration": observed, "lastAttemptedRevision": attempted,
                       "lastAppliedRevision": applied},
        })
    };
    let mut requested = base(false, 1, 1, "r1", "r1");
    requested["metadata"]["annotations"] = json!({REQUESTED_AT: "t2"});
    requested["status"]["lastHandledReconcileAt"] = json!("t1");
    let mut handled = requested.clone();
    handled["status"]["lastHandledReconcileAt"] = json!("t2");
    let mut suspended_request = requested.clone();
    suspended_request["spec"]["suspend"] = json!(true);
    let cases: Vec<Case> = vec![
        (
            "in sync",
            base(false, 1, 1, "r1", "r1"),
            Some("r1"),
            true,
            None,
        ),
        (
            "suspended, new revision",
            base(true, 1, 1, "r1", "r1"),
            Some("r2"),
            true,
            None,
        ),
        (
            "suspended, request",
            suspended_request,
            Some("r1"),
            true,
            None,
        ),
        (
            "no artifact yet",
            base(false, 1, 1, "", ""),
            None,
            true,
            None,
        ),
        (
            "new revision",
            base(false, 1, 1, "r1", "r1"),
            Some("r2"),
            false,
            Some(Why::NewRevision),
        ),
        (
            "never reconciled",
            json!({"metadata": {"generation": 1}, "spec": {}}),
            Some("r1"),
            false,
            Some(Why::SpecChanged),
        ),
        (
            "unsuspended",
            base(false, 2, 1, "r1", "r1"),
            Some("r1"),
            false,
            Some(Why::SpecChanged),
        ),
        (
            "request",
            requested,
            Some("r1"),
            false,
            Some(Why::Requested),
        ),
        ("request handled", handled, Some("r1"), false, None),
        (
            "failed, not due",
            base(false, 1, 1, "r2", "r1"),
            Some("r2"),
            false,
            None,
        ),
        (
            "failed, due",
            base(false, 1, 1, "r2", "r1"),
            Some("r2"),
            true,
            Some(Why::Retry),
        ),
    ];
    for (what, ks, revision, due, want) in cases {
        assert_eq!(should_reconcile(&ks, revision, due), want, "{what}");
    }
}

#[test]
fn object_names_and_stages_follow_flux() {
    let sts = json!({"kind": "StatefulSet", "metadata": {"name": "web", "namespace": "db"}});
    let ns = json!({"kind": "Namespace", "metadata": {"name": "db"}});
    let sc = json!({"kind": "StorageClass", "metadata": {"name": "fast"}});
    assert_eq!(object_name(&sts), "StatefulSet/db/web");
    assert_eq!(object_name(&ns), "Namespace/db");
    assert_eq!((stage_of(&ns), stage_of(&sc), stage_of(&sts)), (0, 1, 2));
}

/// What a receiving webhook saw: headers and the raw body.
type Seen = Arc<Mutex<Vec<(axum::http::HeaderMap, Vec<u8>)>>>;

#[tokio::test]
async fn notification_controller_posts_signed_new_artifact_events() {
    flux_converger::tls::install_crypto_provider();
    let seen: Seen = Arc::default();
    let failures_left = Arc::new(Mutex::new(1));
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post({
            let seen = seen.clone();
            let failures_left = failures_left.clone();
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                seen.lock().unwrap().push((headers, body.to_vec()));
                let mut left = failures_left.lock().unwrap();
                if *left > 0 {
                    *left -= 1;
                    return (axum::http::StatusCode::SERVICE_UNAVAILABLE, "not yet");
                }
                (axum::http::StatusCode::ACCEPTED, "{\"queued\":[]}")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let fake = FakeApiServer::new();
    let server = ArtifactServer::start().await;
    let source = GitSource::create(fake.client(), server, "flux-system", "repo")
        .await
        .unwrap();
    let published = source
        .publish("grow web\n\nbody", &[("apps/a.yaml", "a: 1\n")])
        .await
        .unwrap();
    let event = source.new_artifact_event(&published).await.unwrap();
    // A trailing newline is part of the key, as Flux reads the secret.
    let key = b"demo-key\n";
    let delivery = post_event(&url, key, &event).await.unwrap();
    assert_eq!(
        (delivery.status, delivery.attempts),
        (202, 2),
        "retried a 503 once"
    );

    let seen = seen.lock().unwrap();
    let (headers, body) = seen.last().unwrap();
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["gotk-component"], "source-controller");
    assert_eq!(headers["x-signature"], signature(key, body).as_str());
    assert_ne!(
        headers["x-signature"],
        signature(b"demo-key", body).as_str()
    );
    let got: Event = serde_json::from_slice(body).unwrap();
    assert_eq!(got, event);
    assert_eq!(got.reason, "NewArtifact");
    assert_eq!(got.severity, "info");
    assert_eq!(got.message, "stored artifact for commit 'grow web'");
    assert_eq!(got.metadata["revision"], published.revision);
    assert!(!got.metadata.contains_key("digest"));
    assert_eq!(got.involved_object.kind, "GitRepository");
    assert_eq!(got.involved_object.namespace, "flux-system");
    assert!(got.involved_object.uid.is_some());
}

#[test]
fn signature_is_hmac_sha256_of_the_raw_body() {
    // RFC 4231 test case 2.
    assert_eq!(
        signature(b"Jefe", b"what do ya want for nothing?"),
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
}
