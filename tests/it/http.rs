//! Every route through `http::router` and `http::metrics_router` (the two ports `serve` runs)
//! with `tower::ServiceExt::oneshot` and a stand-in backend: the webhook's authentication, limits
//! and errors; `/status`; probes; metrics on their own port; the dashboard's escaping and headers.

use test_support::http_standin as standin;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use axum::response::Response;
use flux_converger::flux::event::{SignatureAlgorithm, sign};
use flux_converger::http::{AppState, HookAuth, metrics_router, router};
use flux_converger::model::{RevisionState, StatefulSetOutcome};
use flux_converger::records::metrics;
use serde_json::{Value, json};
use standin::{StandIn, seeded};
use tower::ServiceExt;

const KEY: &[u8] = b"hmac-key-with-newline\n";
const TOKEN: &str = "s3cr3t-token";

struct App {
    backend: Arc<StandIn>,
    state: AppState,
    registry: Arc<prometheus_client::registry::Registry>,
}

impl App {
    fn new(backend: StandIn, auth: HookAuth) -> App {
        let (registry, metrics) = metrics::registry();
        let backend = Arc::new(backend);
        let state = AppState {
            backend: backend.clone(),
            metrics,
            auth,
        };
        App {
            backend,
            state,
            registry: Arc::new(registry),
        }
    }

    /// A request to the metrics port (`--metrics-addr`).
    async fn send_metrics_port(&self, request: Request<Body>) -> Response {
        metrics_router(self.registry.clone())
            .oneshot(request)
            .await
            .expect("the router is infallible")
    }

    async fn send(&self, request: Request<Body>) -> Response {
        router(self.state.clone())
            .oneshot(request)
            .await
            .expect("the router is infallible")
    }

    async fn get(&self, uri: &str) -> (StatusCode, String, Response) {
        let response = self
            .send(Request::get(uri).body(Body::empty()).expect("request"))
            .await;
        let status = response.status();
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("body");
        let text = String::from_utf8(bytes.to_vec()).expect("utf-8 body");
        (status, text, Response::from_parts(parts, Body::empty()))
    }

    async fn get_json(&self, uri: &str) -> (StatusCode, Value) {
        let (status, text, response) = self.get(uri).await;
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some("application/json"),
            "{uri}"
        );
        (status, serde_json::from_str(&text).expect("JSON body"))
    }

    async fn hook(&self, body: Vec<u8>, headers: &[(&str, &str)]) -> (StatusCode, Value) {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri("/hook")
            .header(header::CONTENT_TYPE, "application/json")
            .header("gotk-component", "source-controller");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self
            .send(request.body(Body::from(body)).expect("request"))
            .await;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, value)
    }

    async fn metrics(&self) -> String {
        let response = self
            .send_metrics_port(
                Request::get("/metrics")
                    .body(Body::empty())
                    .expect("request"),
            )
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        String::from_utf8(bytes.to_vec()).expect("utf-8 body")
    }
}

fn new_artifact(namespace: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "involvedObject": {
            "kind": "GitRepository", "namespace": namespace, "name": "source",
            "uid": "2f7e", "apiVersion": "source.toolkit.fluxcd.io/v1", "resourceVersion": "1234"
        },
        "severity": "info",
        "timestamp": "2026-11-30T08:00:00Z",
        "message": "stored artifact for commit 'grow web'",
        "reason": "NewArtifact",
        "metadata": { "revision": "main@sha1:9f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b" },
        "reportingController": "source-controller",
        "reportingInstance": "source-controller-7c9d"
    }))
    .expect("event JSON")
}

fn hmac_only() -> HookAuth {
    HookAuth {
        hmac_key: Some(KEY.to_vec()),
        token: None,
    }
}

const ALGORITHMS: [SignatureAlgorithm; 4] = [
    SignatureAlgorithm::Sha1,
    SignatureAlgorithm::Sha256,
    SignatureAlgorithm::Sha384,
    SignatureAlgorithm::Sha512,
];

#[tokio::test]
async fn hook_without_auth_queues_what_the_event_names() {
    let app = App::new(seeded(), HookAuth::default());
    let (status, body) = app.hook(new_artifact("apps"), &[]).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(body, json!({ "queued": ["apps/db", "apps/web"] }));
    let events = app.backend.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, "NewArtifact");
    assert_eq!(
        events[0].metadata.get("revision").map(String::as_str),
        Some("main@sha1:9f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b")
    );

    let (status, body) = app.hook(new_artifact("elsewhere"), &[]).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(body, json!({ "queued": [] }));
}

#[tokio::test]
async fn hook_accepts_each_algorithm_flux_may_sign_with() {
    let app = App::new(seeded(), hmac_only());
    for algorithm in ALGORITHMS {
        let body = new_artifact("data");
        let signature = sign(algorithm, KEY, &body);
        let (status, queued) = app.hook(body, &[("x-signature", &signature)]).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{}", algorithm.as_str());
        assert_eq!(queued, json!({ "queued": ["data/cache", "data/kafka"] }));
    }
    assert_eq!(app.backend.events().len(), ALGORITHMS.len());
}

#[tokio::test]
async fn hook_refuses_bad_signatures_and_queues_nothing() {
    let app = App::new(seeded(), hmac_only());
    let body = new_artifact("apps");
    let mut cases: Vec<(String, Option<String>)> = vec![
        ("missing".into(), None),
        ("empty".into(), Some(String::new())),
        (
            "no algorithm".into(),
            Some(hex_of(&sign(SignatureAlgorithm::Sha256, KEY, &body))),
        ),
        (
            "unknown algorithm".into(),
            Some(format!("md5={}", "00".repeat(16))),
        ),
        ("not hex".into(), Some("sha256=not-hex".into())),
    ];
    for algorithm in ALGORITHMS {
        let name = algorithm.as_str();
        // The key as a careless sender would have trimmed it.
        cases.push((
            format!("{name} trimmed key"),
            Some(sign(algorithm, b"hmac-key-with-newline", &body)),
        ));
        cases.push((
            format!("{name} other body"),
            Some(sign(algorithm, KEY, b"{}")),
        ));
        let good = sign(algorithm, KEY, &body);
        let mut flipped: Vec<char> = good.chars().collect();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == '0' { '1' } else { '0' };
        cases.push((
            format!("{name} last digit"),
            Some(flipped.into_iter().collect()),
        ));
    }
    for (case, signature) in cases {
        let headers: Vec<(&str, &str)> = signature
            .iter()
            .map(|s| ("x-signature", s.as_str()))
            .collect();
        let (status, answer) = app.hook(body.clone(), &headers).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{case}");
        assert!(
            answer["error"]
                .as_str()
                .is_some_and(|e| e.contains("X-Signature")),
            "{case}: {answer}"
        );
    }
    assert!(
        app.backend.events().is_empty(),
        "a refused hook queued something"
    );
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("flux_converger_hook_requests_total{code=\"401\"} 17"),
        "{metrics}"
    );
}

fn hex_of(signature: &str) -> String {
    signature
        .split_once('=')
        .map(|(_, hex)| hex.to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn hook_token_is_required_when_configured() {
    let auth = HookAuth {
        hmac_key: None,
        token: Some(TOKEN.into()),
    };
    let app = App::new(seeded(), auth);
    let wrong = format!("Bearer {TOKEN}x");
    let basic = format!("Basic {TOKEN}");
    let cases: [(&str, Option<&str>); 4] = [
        ("missing", None),
        ("wrong", Some(&wrong)),
        ("not bearer", Some(&basic)),
        ("bare token", Some(TOKEN)),
    ];
    for (case, authorization) in cases {
        let headers: Vec<(&str, &str)> = authorization
            .iter()
            .map(|a| ("authorization", *a))
            .collect();
        let (status, answer) = app.hook(new_artifact("apps"), &headers).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{case}");
        assert!(answer["error"].is_string(), "{case}");
    }
    assert!(app.backend.events().is_empty());
    let right = format!("Bearer {TOKEN}");
    let (status, _) = app
        .hook(new_artifact("apps"), &[("authorization", &right)])
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn hook_with_token_and_hmac_needs_both() {
    let auth = HookAuth {
        hmac_key: Some(KEY.to_vec()),
        token: Some(TOKEN.into()),
    };
    let app = App::new(seeded(), auth);
    let body = new_artifact("apps");
    let signature = sign(SignatureAlgorithm::Sha256, KEY, &body);
    let bearer = format!("Bearer {TOKEN}");
    let (status, _) = app.hook(body.clone(), &[("x-signature", &signature)]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "signature without token");
    let (status, _) = app.hook(body.clone(), &[("authorization", &bearer)]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "token without signature");
    let (status, _) = app
        .hook(
            body,
            &[("authorization", &bearer), ("x-signature", &signature)],
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(app.backend.events().len(), 1);
}

/// A valid event padded with a long message to exactly `size` bytes.
fn event_of_size(size: usize) -> Vec<u8> {
    let head = br#"{"involvedObject":{"kind":"GitRepository","namespace":"apps","name":"source"},"message":""#;
    let tail = br#""}"#;
    let mut body = head.to_vec();
    body.resize(size - tail.len(), b'x');
    body.extend_from_slice(tail);
    body
}

#[tokio::test]
async fn hook_caps_the_body_at_three_mebibytes() {
    let limit = 3 * 1024 * 1024;
    let app = App::new(seeded(), hmac_only());
    let at_limit = event_of_size(limit);
    let signature = sign(SignatureAlgorithm::Sha256, KEY, &at_limit);
    let (status, _) = app.hook(at_limit, &[("x-signature", &signature)]).await;
    assert_eq!(status, StatusCode::ACCEPTED, "exactly 3 MiB is allowed");

    let over = event_of_size(limit + 1);
    let signature = sign(SignatureAlgorithm::Sha256, KEY, &over);
    let (status, answer) = app.hook(over, &[("x-signature", &signature)]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("3145728")),
        "{answer}"
    );

    // Streamed without a Content-Length, the cap still holds (a well-formed signature, so
    // the body is read at all).
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..4).map(|_| Ok(vec![b' '; 1024 * 1024])).collect();
    let request = Request::post("/hook")
        .header("x-signature", "sha256=00")
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .expect("request");
    let response = app.send(request).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(app.backend.events().len(), 1);
    assert!(
        app.metrics()
            .await
            .contains("flux_converger_hook_requests_total{code=\"413\"} 2")
    );
}

#[tokio::test]
async fn hook_answers_400_with_a_json_error_for_bad_payloads() {
    let app = App::new(seeded(), HookAuth::default());
    let cases: [(&str, &[u8], &str); 7] = [
        ("not json", b"revision=main", "not a JSON event"),
        ("empty", b"", "not a JSON event"),
        (
            "truncated",
            br#"{"involvedObject":{"kind":"#,
            "not a JSON event",
        ),
        ("array", b"[1,2]", "not a JSON event"),
        (
            "no involvedObject",
            br#"{"reason":"NewArtifact","metadata":{"revision":"main@sha1:00"}}"#,
            "no involvedObject",
        ),
        (
            "null involvedObject",
            br#"{"involvedObject":null}"#,
            "no involvedObject",
        ),
        (
            "no name",
            br#"{"involvedObject":{"kind":"GitRepository","namespace":"apps"}}"#,
            "has no name",
        ),
    ];
    for (case, body, words) in cases {
        let (status, answer) = app.hook(body.to_vec(), &[]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{case}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(error.contains(words), "{case}: {answer}");
    }
    assert!(app.backend.events().is_empty());
}

#[tokio::test]
async fn hook_is_post_only() {
    let app = App::new(seeded(), HookAuth::default());
    let (status, _, _) = app.get("/hook").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn status_lists_sorted_summaries_without_statefulsets() {
    let app = App::new(seeded(), HookAuth::default());
    let (status, body) = app.get_json("/status").await;
    assert_eq!(status, StatusCode::OK);
    let list = body["kustomizations"].as_array().expect("a list");
    let names: Vec<String> = list
        .iter()
        .map(|k| {
            format!(
                "{}/{}",
                k["namespace"].as_str().unwrap_or(""),
                k["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "apps/db",
            "apps/web",
            "data/cache",
            "data/kafka",
            "flux-system/infra",
            "team-b/search"
        ]
    );
    let web = &list[1];
    assert_eq!(web["gate"], "suspend");
    assert_eq!(
        web["sourceRevision"],
        "main@sha1:9f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b"
    );
    assert_eq!(web["last"]["state"], "converged");
    assert_eq!(web["last"]["handoff"]["action"], "unsuspended");
    assert_eq!(web["last"]["flux"]["outcome"], "applied");
    assert!(web["last"].get("statefulsets").is_none(), "{web}");
    assert_eq!(list[4]["last"], Value::Null, "never run");
    assert_eq!(list[0]["sourceRevision"], standin::hostile_revision());
}

#[tokio::test]
async fn status_filters_by_namespace() {
    let app = App::new(seeded(), HookAuth::default());
    let (_, body) = app.get_json("/status?namespace=data").await;
    let names: Vec<&str> = body["kustomizations"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|k| k["name"].as_str())
        .collect();
    assert_eq!(names, ["cache", "kafka"]);
    let (_, body) = app.get_json("/status?namespace=nowhere").await;
    assert_eq!(body, json!({ "kustomizations": [], "helmReleases": [] }));
    let (_, body) = app.get_json("/status?namespace=").await;
    assert_eq!(
        body["kustomizations"].as_array().map(Vec::len),
        Some(6),
        "empty means all"
    );
}

#[tokio::test]
async fn status_of_one_kustomization_has_its_history() {
    let app = App::new(seeded(), HookAuth::default());
    let (status, body) = app.get_json("/status/apps/web").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["namespace"], "apps");
    assert_eq!(body["name"], "web");
    assert_eq!(body["gate"], "suspend");
    let revisions = body["revisions"].as_array().expect("revisions");
    let states: Vec<&str> = revisions
        .iter()
        .filter_map(|r| r["state"].as_str())
        .collect();
    assert_eq!(
        states,
        ["converged", "superseded", "converged"],
        "newest first"
    );
    let web = &revisions[0]["statefulsets"][0];
    assert_eq!(web["name"], "web");
    assert_eq!(
        web["templates"][0],
        json!({ "template": "data", "from": "1Gi", "to": "2Gi" })
    );
    assert_eq!(web["claims"].as_array().map(Vec::len), Some(3));
    assert!(web["oldUid"].is_string() && web["newUid"].is_string());

    let (status, body) = app.get_json("/status/flux-system/infra").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["revisions"], json!([]));
}

#[tokio::test]
async fn status_of_an_unhandled_kustomization_is_404() {
    let app = App::new(seeded(), HookAuth::default());
    for uri in ["/status/apps/nope", "/status/nope/web"] {
        let (status, body) = app.get_json(uri).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.contains("not handled")),
            "{body}"
        );
    }
    let (status, body) = app.get_json("/status/apps/web/extra").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"].is_string());
}

#[tokio::test]
async fn probes() {
    let app = App::new(seeded(), HookAuth::default());
    assert_eq!(app.get("/healthz").await.0, StatusCode::OK);
    assert_eq!(app.get("/readyz").await.0, StatusCode::OK);
    let mut waiting = seeded();
    waiting.not_ready = Some("Kustomization cache not synced".into());
    let app = App::new(waiting, HookAuth::default());
    assert_eq!(
        app.get("/healthz").await.0,
        StatusCode::OK,
        "alive while not ready"
    );
    let (status, text, _) = app.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(text.contains("Kustomization cache not synced"), "{text}");
}

#[tokio::test]
async fn metrics_expose_every_series() {
    let app = App::new(seeded(), HookAuth::default());
    app.hook(new_artifact("apps"), &[]).await;
    app.hook(b"nope".to_vec(), &[]).await;
    let m = &app.state.metrics;
    use flux_converger::model::Kind;
    m.revision(Kind::KUSTOMIZATION, "converged");
    m.revision(Kind::HELM_RELEASE, "converged");
    m.refusal(Kind::KUSTOMIZATION, "shrink");
    m.claims_grown(Kind::KUSTOMIZATION, 3);
    m.claims_grown(Kind::HELM_RELEASE, 2);
    m.recreated(Kind::KUSTOMIZATION);
    m.queue_depth.set(2);
    m.step(Kind::KUSTOMIZATION, "grow", 0.02);
    m.last_resync.set(1_796_000_000.0);
    let response = app
        .send_metrics_port(
            Request::get("/metrics")
                .body(Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    assert_eq!(
        content_type,
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let text = app.metrics().await;
    for series in [
        "flux_converger_hook_requests_total{code=\"202\"} 1",
        "flux_converger_hook_requests_total{code=\"400\"} 1",
        "flux_converger_revisions_total{state=\"converged\",kind=\"Kustomization\"} 1",
        "flux_converger_revisions_total{state=\"converged\",kind=\"HelmRelease\"} 1",
        "flux_converger_refusals_total{code=\"shrink\",kind=\"Kustomization\"} 1",
        "flux_converger_claims_grown_total{kind=\"Kustomization\"} 3",
        "flux_converger_claims_grown_total{kind=\"HelmRelease\"} 2",
        "flux_converger_statefulsets_recreated_total{kind=\"Kustomization\"} 1",
        "flux_converger_queue_depth 2",
        "flux_converger_step_duration_seconds_count{step=\"grow\",kind=\"Kustomization\"} 1",
        "flux_converger_last_resync_timestamp_seconds 1796000000",
        "# EOF",
    ] {
        assert!(text.contains(series), "{series} missing from\n{text}");
    }
}

/// The metrics port is open to every namespace (Flux's `allow-scraping`): it answers `/metrics`
/// and `/healthz` and nothing that reads the results or takes a webhook; `--listen` no longer
/// answers `/metrics`.
#[tokio::test]
async fn metrics_have_a_port_of_their_own() {
    let app = App::new(seeded(), HookAuth::default());
    let (status, body) = app.get_json("/metrics").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "--listen: {body}");
    let table: &[(Method, &str, StatusCode)] = &[
        (Method::GET, "/metrics", StatusCode::OK),
        (Method::GET, "/healthz", StatusCode::OK),
        (Method::GET, "/", StatusCode::NOT_FOUND),
        (Method::GET, "/status", StatusCode::NOT_FOUND),
        (Method::GET, "/status/apps/web", StatusCode::NOT_FOUND),
        (
            Method::GET,
            "/kustomizations/apps/web",
            StatusCode::NOT_FOUND,
        ),
        (Method::GET, "/readyz", StatusCode::NOT_FOUND),
        (Method::POST, "/hook", StatusCode::NOT_FOUND),
    ];
    for (method, uri, want) in table {
        let response = app
            .send_metrics_port(
                Request::builder()
                    .method(method.clone())
                    .uri(*uri)
                    .body(Body::from(new_artifact("apps")))
                    .expect("request"),
            )
            .await;
        assert_eq!(response.status(), *want, "{method} {uri}");
        assert_eq!(
            response.headers().get(header::X_CONTENT_TYPE_OPTIONS),
            Some(&header::HeaderValue::from_static("nosniff")),
            "{uri}"
        );
    }
    assert!(
        app.backend.events().is_empty(),
        "the metrics port queued nothing"
    );
}

#[tokio::test]
async fn unknown_paths_are_json_404s() {
    let app = App::new(seeded(), HookAuth::default());
    let (status, body) = app.get_json("/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"].is_string());
}

#[tokio::test]
async fn dashboard_headers_forbid_inline_script_and_sniffing() {
    let app = App::new(seeded(), HookAuth::default());
    for uri in [
        "/",
        "/kustomizations/apps/web",
        "/status",
        "/assets/dashboard.js",
        "/nope",
    ] {
        let (_, _, response) = app.get(uri).await;
        let headers = response.headers();
        let csp = headers
            .get(header::CONTENT_SECURITY_POLICY)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(csp.contains("script-src 'self'"), "{uri}: {csp}");
        assert!(csp.contains("default-src 'none'"), "{uri}: {csp}");
        assert!(!csp.contains("unsafe"), "{uri}: {csp}");
        assert_eq!(
            headers
                .get(header::X_CONTENT_TYPE_OPTIONS)
                .and_then(|v| v.to_str().ok()),
            Some("nosniff"),
            "{uri}"
        );
    }
}

#[tokio::test]
async fn dashboard_escapes_a_hostile_branch_name() {
    let app = App::new(seeded(), HookAuth::default());
    for uri in ["/", "/kustomizations/apps/db"] {
        let (status, page, _) = app.get(uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert!(!page.contains("<b>pwned"), "{uri}: unescaped markup");
        assert!(
            !page.contains("alert(1)</script>"),
            "{uri}: unescaped script"
        );
        assert!(page.contains("feat/&#34;&#62;&#60;b&#62;pwned&#60;/b&#62;&#60;script&#62;alert(1)&#60;/script&#62;&#39;&#38;x@sha1:"), "{uri}: {page}");
        // Only the page's own script, loaded from the binary.
        assert_eq!(page.matches("<script").count(), 1, "{uri}");
        assert!(page.contains(r#"<script src="/assets/dashboard.js" defer></script>"#));
        for tag in tags(&page) {
            assert!(
                !has_event_handler(tag),
                "{uri}: an inline event handler in {tag}"
            );
            assert!(!tag.contains(" style="), "{uri}: an inline style in {tag}");
            let external = ["src=\"http", "href=\"http", "src=\"//", "href=\"//"];
            assert!(
                !external.iter().any(|e| tag.contains(e)),
                "{uri}: an external reference in {tag}"
            );
        }
    }
}

/// The start tags of a page (`<name ...>`), as written by the server.
fn tags(page: &str) -> Vec<&str> {
    page.split('<')
        .skip(1)
        .filter(|t| t.starts_with(|c: char| c.is_ascii_alphabetic()))
        .filter_map(|t| t.split_once('>').map(|(tag, _)| tag))
        .collect()
}

fn has_event_handler(tag: &str) -> bool {
    tag.split_whitespace()
        .skip(1)
        .any(|attribute| attribute.to_ascii_lowercase().starts_with("on"))
}

#[test]
fn tag_scan_finds_handlers() {
    let page = r#"<p>click on me</p><img src=x onerror="x()"><a href="/" title="on">"#;
    let found: Vec<bool> = tags(page).into_iter().map(has_event_handler).collect();
    assert_eq!(found, [false, true, false]);
}

#[tokio::test]
async fn dashboard_rows_show_state_refusal_and_failure() {
    let app = App::new(seeded(), HookAuth::default());
    let (status, page, response) = app.get("/").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(page.matches("<tr class=\"row ").count(), 6);
    for state in ["converged", "refused", "failed", "running", "none"] {
        assert!(
            page.contains(&format!("<tr class=\"row state-{state}\"")),
            "{state}"
        );
    }
    assert!(page.contains(r#"<span class="code">shrink</span>"#));
    assert!(page.contains(standin::SHRINK_MESSAGE));
    assert!(page.contains(r#"<span class="code">step grow</span>"#));
    assert!(page.contains(r#"href="/kustomizations/apps/web""#));
}

/// The overview lists every kind the service gates, each row driven by its kind: a HelmRelease
/// row next to the Kustomizations, its state from its own records, its link its own page.
#[tokio::test]
async fn dashboard_lists_helmreleases_next_to_kustomizations() {
    let mut refused = standin::record(
        "v2",
        RevisionState::Refused,
        "2026-11-30T09:00:00Z",
        Some("2026-11-30T09:00:01Z"),
    );
    refused.statefulsets = vec![standin::set("apps", "cache", StatefulSetOutcome::Refused)];
    refused.statefulsets[0].refusal = Some(flux_converger::model::RefusalEntry {
        code: flux_converger::model::RefusalCode::Shrink,
        message: "template data of apps/cache: 1Gi is smaller than the live 2Gi".into(),
    });
    let app = App::new(
        seeded().with_helm_release("apps", "cache", vec![refused]),
        HookAuth::default(),
    );
    let (status, page, _) = app.get("/").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page.matches("<tr class=\"row ").count(), 7);
    assert!(
        page.contains(
            r#"<tr class="row state-refused" data-kind="HelmRelease" data-namespace="apps" data-name="cache">"#
        ),
        "{page}"
    );
    assert!(page.contains(r#"href="/helmreleases/apps/cache""#));
    assert!(page.contains(r#"<span class="kind">HelmRelease</span>"#));
    // Its refusal's code is read from its own newest record.
    assert_eq!(
        page.matches(r#"<span class="code">shrink</span>"#).count(),
        2
    );
    let (_, page, _) = app.get("/?state=refused&namespace=apps").await;
    assert_eq!(page.matches("<tr class=\"row ").count(), 2, "{page}");
    let (status, page, _) = app.get("/helmreleases/apps/cache").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("apps/cache"));
}

/// A revision whose followed claims (issue #40) are grown, resizing and infeasible: the
/// overview shows a volume column and the infeasible claim as loudly as a refusal; the
/// drill-down a row per claim with capacity → request, its state and what to do.
fn with_volumes() -> StandIn {
    use flux_converger::model::{
        GateMode, RevisionState, StatefulSetOutcome, Volume, VolumeState, VolumeSummary,
    };
    let volume = |claim: &str, capacity: &str, state: VolumeState, message: Option<&str>| Volume {
        claim: claim.into(),
        requested: Some("10Gi".into()),
        capacity: Some(capacity.into()),
        state,
        message: message.map(str::to_string),
        since: "2026-12-01T10:05:00Z".into(),
        attributes: None,
        restart: None,
    };
    let mut r = standin::record(
        "main@sha1:7",
        RevisionState::Converged,
        "2026-12-01T10:00:00Z",
        Some("2026-12-01T10:00:02Z"),
    );
    let mut db = standin::set("apps", "db", StatefulSetOutcome::Converged);
    db.volumes = vec![
        volume("data-db-0", "10Gi", VolumeState::Grown, None),
        volume(
            "data-db-1",
            "1Gi",
            VolumeState::Resizing,
            Some("ControllerResizeInProgress"),
        ),
        volume(
            "data-db-2",
            "1Gi",
            VolumeState::Infeasible,
            Some(
                "ControllerResizeInfeasible (ControllerResizeError: 10Gi exceeds the volume type's maximum)",
            ),
        ),
    ];
    r.statefulsets = vec![db];
    r.volumes = VolumeSummary::of(&r.statefulsets);
    StandIn::new().with(
        "apps",
        "db",
        GateMode::Suspend,
        Some("main@sha1:7"),
        vec![r],
    )
}

#[tokio::test]
async fn dashboard_shows_the_volumes_and_an_infeasible_one_as_a_refusal() {
    let app = App::new(with_volumes(), HookAuth::default());
    let (status, page, _) = app.get("/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("<th>Volumes</th>"), "{page}");
    assert!(
        page.contains(r#"<td class="volumes"><span class="badge state-refused">"#),
        "the worst state leads: {page}"
    );
    assert!(
        page.contains("1 infeasible · 1 resizing · 1 grown"),
        "{page}"
    );
    assert!(
        page.contains(r#"<tr class="problem volume state-refused">"#),
        "{page}"
    );
    assert!(page.contains(r#"<span class="code">volume infeasible</span> <span class="subject">apps/db claim data-db-2</span>"#), "{page}");
    assert!(
        page.contains("exceeds the volume type&#39;s maximum"),
        "{page}"
    );

    let (status, page, _) = app.get("/kustomizations/apps/db").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        page.matches(r#"<tr class="volume state-"#).count(),
        3,
        "{page}"
    );
    assert!(
        page.contains(r#"<td class="claim"><code>data-db-1</code></td>"#),
        "{page}"
    );
    assert!(
        page.contains(r#"<span class="sizes">1Gi → 10Gi</span>"#),
        "{page}"
    );
    assert!(
        page.contains("Declare a size it can take in git"),
        "the advice: {page}"
    );

    let (_, body, _) = app.get("/status/apps/db").await;
    let detail: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(detail["revisions"][0]["volumes"]["infeasible"], 1);
    assert_eq!(
        detail["revisions"][0]["statefulsets"][0]["volumes"][2]["state"],
        "infeasible"
    );
    let (_, body, _) = app.get("/status").await;
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        list["kustomizations"][0]["last"]["volumes"],
        json!({"grown": 1, "resizing": 1, "filesystemPending": 0, "infeasible": 1,
               "error": 0, "stalled": 0, "requested": 0})
    );
}

#[tokio::test]
async fn dashboard_filters_by_state_and_namespace() {
    let app = App::new(seeded(), HookAuth::default());
    let (_, page, _) = app.get("/?state=refused").await;
    assert_eq!(page.matches("<tr class=\"row ").count(), 1);
    assert!(page.contains("data-name=\"db\""));
    assert!(page.contains(r#"<option value="refused" selected>"#));

    let (_, page, _) = app.get("/?namespace=data&state=").await;
    assert_eq!(page.matches("<tr class=\"row ").count(), 2);
    assert!(page.contains(r#"<option value="data" selected>"#));
    assert!(
        page.contains(r#"href="/?namespace=data&#38;state=failed""#),
        "chips keep the namespace"
    );

    let (_, page, _) = app.get("/?namespace=data&state=converged").await;
    assert!(page.contains("No handled Kustomization matches"));

    let (status, page, _) = app.get("/?state=%3Cb%3E").await;
    assert_eq!(status, StatusCode::OK, "an unknown state shows everything");
    assert_eq!(page.matches("<tr class=\"row ").count(), 6);
}

#[tokio::test]
async fn drill_down_shows_plans_uids_refusals_and_failures() {
    let app = App::new(seeded(), HookAuth::default());
    let (status, page, _) = app.get("/kustomizations/apps/web").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page.matches("<details class=\"revision").count(), 3);
    assert!(page.contains("<code>data</code> 1Gi → 2Gi"));
    assert!(page.contains("<code>data-web-2</code> 1Gi → 2Gi"));
    assert!(page.contains(r#"<code class="uid">6f1c2a9e-0000-4000-8000-000000000003</code> → <code class="uid">b83d77f0-1111-4111-8111-000000000003</code>"#));
    assert!(page.contains("unsuspended"));

    let (_, page, _) = app.get("/kustomizations/apps/db").await;
    assert!(page.contains(r#"<span class="code">shrink</span>"#));
    assert!(
        page.contains("Volumes never shrink."),
        "advice for the code"
    );

    let (_, page, _) = app.get("/kustomizations/data/kafka").await;
    assert!(page.contains(r#"<span class="code">step grow</span>"#));
    assert!(
        page.contains("kubectl -n data patch pvc data-kafka-2"),
        "the hint"
    );

    let (_, page, _) = app.get("/kustomizations/team-b/search").await;
    assert!(
        page.contains(
            "<code>data-search-4</code>: Pending: the API server only grows Bound claims"
        )
    );
    assert!(page.contains("HealthCheckFailed"));
    assert!(page.contains("reconcile-requested"));

    let (status, page, _) = app.get("/kustomizations/apps/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(page.contains("apps/nope is not handled"));
}

#[tokio::test]
async fn assets_come_from_the_binary() {
    let app = App::new(StandIn::new(), HookAuth::default());
    let (status, script, response) = app.get("/assets/dashboard.js").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        response.headers()[header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|t| t.starts_with("text/javascript"))
    );
    assert!(script.contains("DOMParser"));
    assert!(!script.contains("innerHTML"), "no HTML built from strings");
    let (status, style, response) = app.get("/assets/dashboard.css").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        response.headers()[header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|t| t.starts_with("text/css"))
    );
    assert!(!style.contains("url("), "nothing fetched from elsewhere");
    let (_, page, _) = app.get("/").await;
    assert!(page.contains("No handled Kustomization matches"));
}

/// One router for several requests, as `serve` runs it: the dashboard keeps its pages there.
async fn send_to(router: &axum::Router, uri: &str, headers: &[(&str, &str)]) -> Response {
    let mut request = Request::get(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    router
        .clone()
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("the router is infallible")
}

async fn body_of(response: Response) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    String::from_utf8(bytes.to_vec()).expect("utf-8 body")
}

fn header_of(response: &Response, name: header::HeaderName) -> String {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

fn dashboard_router(backend: Arc<dyn flux_converger::http::Backend>) -> axum::Router {
    let (_registry, metrics) = metrics::registry();
    router(AppState {
        backend,
        metrics,
        auth: HookAuth::default(),
    })
}

#[tokio::test]
async fn dashboard_is_built_once_per_change_and_answers_304_while_unchanged() {
    let backend = Arc::new(standin::Versioned::new(seeded()));
    let app = dashboard_router(backend.clone());

    let first = send_to(&app, "/", &[]).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(header_of(&first, header::CACHE_CONTROL), "no-cache");
    let etag = header_of(&first, header::ETAG);
    let tag = etag
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or_else(|| panic!("a strong quoted ETag: {etag:?}"));
    assert!(
        tag.len() == 16 && tag.bytes().all(|b| b.is_ascii_hexdigit()),
        "{etag}"
    );
    let page = body_of(first).await;
    assert!(
        page.contains(&format!("data-etag=\"{tag}\"")),
        "the page carries its own ETag for its script"
    );
    assert_eq!(backend.lists(), 1);

    // Unchanged: the kept page, not a render.
    let again = send_to(&app, "/", &[]).await;
    assert_eq!(header_of(&again, header::ETAG), etag);
    assert_eq!(body_of(again).await, page);
    for if_none_match in [
        etag.clone(),
        format!("W/{etag}"),
        format!("\"0000000000000000\", {etag}"),
        "*".to_string(),
    ] {
        let revalidated = send_to(&app, "/", &[("if-none-match", &if_none_match)]).await;
        assert_eq!(
            revalidated.status(),
            StatusCode::NOT_MODIFIED,
            "{if_none_match}"
        );
        assert_eq!(header_of(&revalidated, header::ETAG), etag);
        assert_eq!(header_of(&revalidated, header::CACHE_CONTROL), "no-cache");
        assert_eq!(body_of(revalidated).await, "", "a 304 has no body");
    }
    let other = send_to(&app, "/", &[("if-none-match", "\"0000000000000000\"")]).await;
    assert_eq!(other.status(), StatusCode::OK, "another tag gets the page");
    assert_eq!(backend.lists(), 1, "every answer came from the kept page");

    // Another filter is another page, kept on its own.
    let refused = body_of(send_to(&app, "/?state=refused", &[]).await).await;
    assert_eq!(refused.matches("<tr class=\"row ").count(), 1);
    let _ = send_to(&app, "/?state=refused", &[]).await;
    assert_eq!(backend.lists(), 2);
    // A page past the last shows the last, and is kept too: polling it renders nothing.
    let past = send_to(&app, "/?page=9", &[]).await;
    assert_eq!(header_of(&past, header::ETAG), etag, "the same page as /");
    let _ = send_to(&app, "/?page=9", &[]).await;
    assert_eq!(backend.lists(), 3);

    // A change: the old tag gets the new page, built once.
    backend.replace(seeded().with(
        "apps",
        "zz-new",
        flux_converger::model::GateMode::Suspend,
        Some("main@sha1:0123456789012345678901234567890123456789"),
        Vec::new(),
    ));
    let changed = send_to(&app, "/", &[("if-none-match", &etag)]).await;
    assert_eq!(changed.status(), StatusCode::OK);
    let new_etag = header_of(&changed, header::ETAG);
    assert_ne!(new_etag, etag);
    let page = body_of(changed).await;
    assert_eq!(page.matches("<tr class=\"row ").count(), 7);
    assert!(page.contains("data-name=\"zz-new\""));
    assert_eq!(backend.lists(), 4);

    // A change elsewhere that leaves this page as it was: rebuilt, but the same bytes keep
    // the same tag, so the tab still gets a 304.
    backend.replace(seeded().with(
        "apps",
        "zz-new",
        flux_converger::model::GateMode::Suspend,
        Some("main@sha1:0123456789012345678901234567890123456789"),
        Vec::new(),
    ));
    let same = send_to(&app, "/", &[("if-none-match", &new_etag)]).await;
    assert_eq!(same.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(backend.lists(), 5);
}

/// A backend that does not track a version is rendered per request, with the same ETag.
#[tokio::test]
async fn dashboard_of_an_untracked_backend_still_answers_304() {
    let app = dashboard_router(Arc::new(seeded()));
    let first = send_to(&app, "/", &[]).await;
    let etag = header_of(&first, header::ETAG);
    assert!(!etag.is_empty());
    let again = send_to(&app, "/", &[("if-none-match", &etag)]).await;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
}

fn row_keys(page: &str) -> Vec<(String, String)> {
    page.split("<tr class=\"row ")
        .skip(1)
        .map(|row| {
            let attribute = |name: &str| {
                row.split_once(&format!("{name}=\""))
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .map(|(value, _)| value.to_string())
                    .unwrap_or_default()
            };
            (attribute("data-namespace"), attribute("data-name"))
        })
        .collect()
}

#[tokio::test]
async fn dashboard_pages_past_200_rows_in_a_stable_order() {
    let backend = standin::scaled(1000, 1);
    let mut everyone: Vec<(String, String)> = flux_converger::http::Backend::rows(
        &backend,
        flux_converger::model::Kind::KUSTOMIZATION,
        None,
    )
    .into_iter()
    .map(|s| (s.namespace, s.name))
    .collect();
    everyone.sort();
    let app = dashboard_router(Arc::new(backend));

    let mut seen = Vec::new();
    for page in 1..=5 {
        let uri = if page == 1 {
            "/".to_string()
        } else {
            format!("/?page={page}")
        };
        let body = body_of(send_to(&app, &uri, &[]).await).await;
        let keys = row_keys(&body);
        assert_eq!(keys.len(), 200, "{uri}");
        let first = (page - 1) * 200 + 1;
        assert!(
            body.contains(&format!("{first}–{} of 1000 shown", first + 199)),
            "{uri}"
        );
        if page < 5 {
            assert!(
                body.contains(&format!("rel=\"next\" href=\"/?page={}\"", page + 1)),
                "{uri}"
            );
        } else {
            assert!(
                !body.contains("rel=\"next\""),
                "{uri}: no page after the last"
            );
        }
        if page > 1 {
            let previous = if page == 2 {
                "/".to_string()
            } else {
                format!("/?page={}", page - 1)
            };
            assert!(
                body.contains(&format!("rel=\"prev\" href=\"{previous}\"")),
                "{uri}"
            );
        }
        assert!(
            body.contains(&format!(
                "<span class=\"page current\" aria-current=\"page\">{page}</span>"
            )),
            "{uri}"
        );
        seen.extend(keys);
    }
    assert_eq!(
        seen, everyone,
        "every row once, sorted by namespace and name"
    );

    // Past the last page: the last; not a number: the first.
    let past = body_of(send_to(&app, "/?page=99", &[]).await).await;
    assert_eq!(row_keys(&past), everyone[800..].to_vec());
    let junk = body_of(send_to(&app, "/?page=x", &[]).await).await;
    assert_eq!(row_keys(&junk), everyone[..200].to_vec());

    // Filters stay in the page links; the summary counts every page.
    let converged = body_of(send_to(&app, "/?state=converged&page=2", &[]).await).await;
    assert!(
        converged.contains("href=\"/?state=converged&#38;page=3\""),
        "{converged}"
    );
    assert!(converged.contains("<span class=\"count\">429</span> converged"));
    assert!(converged.contains("201–400 of 429 shown"));
    let one_namespace = body_of(send_to(&app, "/?namespace=team-01", &[]).await).await;
    assert_eq!(row_keys(&one_namespace).len(), 25);
    assert!(
        !one_namespace.contains("aria-current"),
        "one page needs no page bar"
    );
}

/// Without a well-formed `X-Signature` nothing of the body is read: a body that never ends
/// is refused 401 at once instead of being waited for.
#[tokio::test]
async fn hook_refuses_a_missing_or_malformed_signature_before_reading_the_body() {
    let app = App::new(seeded(), hmac_only());
    for (case, signature) in [("missing", None), ("malformed", Some("sha256=zz"))] {
        let endless = futures::stream::pending::<Result<Vec<u8>, std::io::Error>>();
        let mut request = Request::post("/hook");
        if let Some(signature) = signature {
            request = request.header("x-signature", signature);
        }
        let request = request.body(Body::from_stream(endless)).expect("request");
        let response = tokio::time::timeout(std::time::Duration::from_secs(60), app.send(request))
            .await
            .unwrap_or_else(|_| panic!("{case}: the body was waited for"));
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{case}");
    }
    assert!(app.backend.events().is_empty());
}
