//! Argo CD on the fake API server and the API server client: Applications and AppProjects are
//! validated against Argo CD's own CRDs (tests/fixtures/argocd-crds/), `operation` and `status`
//! are plain fields (no status subresource, so the generation moves with them), the Application
//! fixtures of each failure shape are valid objects, and the managed-resources client talks
//! HTTPS to a stand-in of Argo CD's API server, never leaking its token.

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use flux_converger::argocd::api::{ApiError, ApiOptions, ArgoCdApi};
use flux_converger::argocd::application::Application;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use test_support::argocd_standin::{self, ArgoCdServer};

fn fixture_yaml(rel: &str) -> Value {
    let path = format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"));
    serde_saphyr::from_str(&text).expect("fixture YAML parses")
}

/// One raw request through the client: (status code, JSON body).
async fn raw(client: &kube::Client, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = http::Request::builder().method(method).uri(path);
    if body.is_some() {
        let ct = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        req = req.header("content-type", ct);
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let resp = client
        .send(req.body(kube::client::Body::from(bytes)).unwrap())
        .await
        .expect("the fake answers");
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), usize::MAX)
        .await
        .unwrap();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes).to_string()));
    (code, v)
}

const APPS: &str = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications";
const PROJECTS: &str = "/apis/argoproj.io/v1alpha1/namespaces/argocd/appprojects";

fn fake() -> FakeApiServer {
    let fake = FakeApiServer::new();
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "argocd"}}));
    fake
}

fn application(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
           "metadata": {"name": name}, "spec": spec})
}

fn good_spec() -> Value {
    json!({"project": "default",
           "destination": {"server": "https://kubernetes.default.svc", "namespace": "apps"},
           "source": {"repoURL": "https://git.example.com/x.git", "path": "db", "targetRevision": "main"}})
}

#[tokio::test]
async fn applications_are_validated_against_argo_cds_crd() {
    let fake = fake();
    let client = fake.client();

    let (code, made) = raw(&client, "POST", APPS, Some(application("db", good_spec()))).await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(made["metadata"]["generation"], 1);

    // Required fields, by the schema: `spec` of the object, `destination`/`project` of the spec.
    let (code, body) = raw(
        &client,
        "POST",
        APPS,
        Some(application("bad", json!({"source": {"repoURL": "x"}}))),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(
        body["message"],
        "Application.argoproj.io \"bad\" is invalid: [spec.destination: Required value, spec.project: Required value]"
    );
    // Types: a retry limit is an integer; an operation's info item needs its name and value.
    let mut spec = good_spec();
    spec["syncPolicy"] = json!({"retry": {"limit": "two"}});
    let (code, body) = raw(&client, "POST", APPS, Some(application("typed", spec))).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["details"]["causes"][0]["field"],
        "spec.syncPolicy.retry.limit"
    );
    let mut with_op = application("op", good_spec());
    with_op["operation"] = json!({"info": [{"name": "flux-converger"}]});
    let (code, body) = raw(&client, "POST", APPS, Some(with_op)).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["details"]["causes"][0]["field"],
        "operation.info[0].value"
    );

    // Unknown fields are pruned, at the top and inside the spec.
    let mut unknown = application("pruned", good_spec());
    unknown["spec"]["notAField"] = json!(1);
    unknown["extra"] = json!(true);
    let (code, body) = raw(&client, "POST", APPS, Some(unknown)).await;
    assert_eq!(code, 201, "{body}");
    assert!(body["spec"].get("notAField").is_none() && body.get("extra").is_none());

    // AppProjects too.
    let (code, body) = raw(&client, "POST", PROJECTS, Some(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team"},
        "spec": {"destinations": [{"server": "*", "namespace": "apps"}],
                 "destinationServiceAccounts": [{"server": "*", "namespace": "apps", "defaultServiceAccount": "deployer"}],
                 "sourceRepos": ["*"]}}))).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = raw(
        &client,
        "POST",
        PROJECTS,
        Some(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "bad"},
        "spec": {"destinationServiceAccounts": [{"namespace": "apps"}]}})),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "AppProject.argoproj.io \"bad\" is invalid: [spec.destinationServiceAccounts[0].defaultServiceAccount: Required value, spec.destinationServiceAccounts[0].server: Required value]"
    );
}

#[tokio::test]
async fn operation_and_status_are_plain_fields_and_move_the_generation() {
    let fake = fake();
    let client = fake.client();
    // Created with a status: kept (no status subresource strips it).
    let mut app = application("db", good_spec());
    app["status"] = json!({"sync": {"status": "OutOfSync", "revision": "abc"}});
    let (code, made) = raw(&client, "POST", APPS, Some(app)).await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(made["status"]["sync"]["revision"], "abc");
    assert_eq!(made["metadata"]["generation"], 1);

    // A status write through the object moves the generation.
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{APPS}/db"),
        Some(json!({"status": {"sync": {"status": "Synced", "revision": "abc"}}})),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["metadata"]["generation"], 2);
    // An operation written with a resourceVersion precondition: stored, generation moves.
    let rv = body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{APPS}/db"),
        Some(json!({"metadata": {"resourceVersion": rv},
                    "operation": {"sync": {"revision": "abc"}, "initiatedBy": {"username": "flux-converger"},
                                  "info": [{"name": "flux-converger", "value": "n1"}]}})),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["operation"]["info"][0]["value"], "n1");
    assert_eq!(body["metadata"]["generation"], 3);
    // The same precondition again: the Application changed, 409.
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{APPS}/db"),
        Some(json!({"metadata": {"resourceVersion": rv}, "operation": null})),
    )
    .await;
    assert_eq!(code, 409, "{body}");
    // A label is metadata: no generation change.
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{APPS}/db"),
        Some(json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(body["metadata"]["generation"], 3);
    // There is no /status subresource to write to.
    let (code, _) = raw(
        &client,
        "PATCH",
        &format!("{APPS}/db/status"),
        Some(json!({"status": {}})),
    )
    .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn the_failure_shape_fixtures_are_valid_applications() {
    let fake = fake();
    let api: Api<Application> = Api::namespaced(fake.client(), "argocd");
    for rel in [
        "argocd/application-failed-client-side-apply.yaml",
        "argocd/application-failed-server-side-apply.yaml",
        "argocd/application-comparison-error.yaml",
    ] {
        let mut v = fixture_yaml(rel);
        for k in ["resourceVersion", "uid", "creationTimestamp", "generation"] {
            v["metadata"].as_object_mut().unwrap().remove(k);
        }
        let app: Application = serde_json::from_value(v.clone()).unwrap();
        let made = api
            .create(&PostParams::default(), &app)
            .await
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        // Nothing the schema knows is pruned: the typed read is the fixture's.
        assert_eq!(made.status, app.status, "{rel}");
        assert_eq!(made.spec, app.spec, "{rel}");
        api.delete(made.metadata.name.as_deref().unwrap(), &Default::default())
            .await
            .unwrap();
    }
    // The typed Application writes through kube's Api as any resource.
    let app: Application = serde_json::from_value(application("typed", good_spec())).unwrap();
    let made = api.create(&PostParams::default(), &app).await.unwrap();
    let patched = api
        .patch(
            "typed",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(made.metadata.generation, patched.metadata.generation);
    assert_eq!(
        patched.annotation("argocd.argoproj.io/refresh"),
        Some("normal")
    );
}

fn options(server: &ArgoCdServer, token_file: &std::path::Path) -> ApiOptions {
    ApiOptions {
        server: server.url.clone(),
        token_file: token_file.to_path_buf(),
        ca_file: Some(server.ca_file.clone()),
        timeout: Duration::from_secs(5),
        max_body: 1 << 20,
    }
}

#[tokio::test]
async fn the_client_reads_managed_resources_over_verified_tls_with_the_token() {
    flux_converger::tls::install_crypto_provider();
    let server = ArgoCdServer::start("s3cret-token").await.unwrap();
    let sts = argocd_standin::tracked(
        &argocd_standin::statefulset("apps", "db", "2Gi"),
        "db",
        "apps",
    );
    server.set_targets("argocd", "db", vec![sts.clone()]);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();

    let api = ArgoCdApi::new(&options(&server, &token)).unwrap();
    let body = api
        .managed_resources("argocd", "db", "default")
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&body).unwrap();
    let target: Value =
        serde_json::from_str(answer["items"][0]["targetState"].as_str().unwrap()).unwrap();
    assert_eq!(target, sts);
    let seen = server.requests();
    assert_eq!(
        seen.last().map(|r| r.path_and_query.as_str()),
        Some("/api/v1/applications/db/managed-resources?appNamespace=argocd&project=default")
    );

    // A wrong token: 401 with Argo CD's words, no token in the error.
    std::fs::write(&token, "wrong-token").unwrap();
    let e = api
        .managed_resources("argocd", "db", "default")
        .await
        .unwrap_err();
    assert!(matches!(e, ApiError::Status { status: 401, .. }), "{e}");
    assert_eq!(e.label(), "unauthorized");
    let text = format!("{e} {e:?} {api:?}");
    assert!(
        !text.contains("wrong-token") && !text.contains("s3cret"),
        "{text}"
    );
    assert!(text.contains("invalid session"), "{text}");

    // An Application the server does not know: 404 (`permission denied` in Argo CD's words).
    std::fs::write(&token, "s3cret-token").unwrap();
    let e = api
        .managed_resources("argocd", "other", "default")
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ApiError::Status {
                status: 403 | 404,
                ..
            }
        ),
        "{e}"
    );

    // An empty or missing token file: no call at all.
    std::fs::write(&token, "  \n").unwrap();
    let before = server.requests().len();
    let e = api
        .managed_resources("argocd", "db", "default")
        .await
        .unwrap_err();
    assert!(matches!(e, ApiError::EmptyToken { .. }), "{e}");
    let e = ArgoCdApi::new(&options(&server, &dir.path().join("absent")))
        .unwrap()
        .managed_resources("argocd", "db", "default")
        .await
        .unwrap_err();
    assert_eq!(e.label(), "token");
    assert_eq!(server.requests().len(), before);
}

#[tokio::test]
async fn the_client_refuses_an_unverified_server_and_an_oversized_answer() {
    flux_converger::tls::install_crypto_provider();
    let server = ArgoCdServer::start("t0ken-value").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken-value").unwrap();

    // Another CA: the handshake fails, the request (and its token) is never sent.
    let other = ArgoCdServer::start("x").await.unwrap();
    let mut opts = options(&server, &token);
    opts.ca_file = Some(other.ca_file.clone());
    let e = ArgoCdApi::new(&opts)
        .unwrap()
        .managed_resources("argocd", "db", "default")
        .await
        .unwrap_err();
    assert_eq!(e.label(), "connection", "{e}");
    assert!(server.requests().is_empty());
    assert!(!format!("{e:?}").contains("t0ken-value"));

    // Over the cap: refused while reading, whatever Content-Length says.
    let big: Vec<Value> = (0..200)
        .map(|i| {
            let ns = format!("ns-{i}");
            argocd_standin::tracked(&argocd_standin::statefulset(&ns, "db", "2Gi"), "db", &ns)
        })
        .collect();
    server.set_targets("argocd", "db", big);
    let mut opts = options(&server, &token);
    opts.max_body = 4096;
    let e = ArgoCdApi::new(&opts)
        .unwrap()
        .managed_resources("argocd", "db", "default")
        .await
        .unwrap_err();
    assert!(matches!(e, ApiError::TooLarge { max: 4096, .. }), "{e}");

    // Nothing listening: a connection error naming the URL.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut opts = options(&server, &token);
    opts.server = format!("https://{closed}");
    let e = ArgoCdApi::new(&opts)
        .unwrap()
        .managed_resources("argocd", "db", "default")
        .await
        .unwrap_err();
    assert_eq!(e.label(), "connection");
    assert!(e.to_string().contains(&closed.to_string()), "{e}");
}
