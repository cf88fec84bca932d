//! The dashboard in a real browser: headless Chromium loads the page from the service itself
//! (`service::start` against the fake API server, its results seeded as the results ConfigMaps
//! a leader writes, the Kustomizations and sources they belong to next to them), runs the
//! page's own script under the strict CSP, and the rendered DOM is checked: rows, a refusal's
//! code and message, a drill-down, the hostile branch name shown as text. Screenshots land in
//! `target/tmp/dashboard-browser/`.
//!
//! Needs `chromium` (`hack/ci-chromium.sh` installs it). Without it the test fails when
//! `CI=true` and skips with a message otherwise. `CHROMIUM=/path` picks another binary.
//!
//! The stand-in backend (`data/http_standin.rs`) stays for what the service cannot give: a
//! count of the page's own refreshes, and the scale figures (1,000 Kustomizations × 20
//! revisions), an ignored test that measures and prints, never asserts:
//! `cargo test --test it dashboard_browser:: -- --ignored --nocapture`.

use test_support::http_standin as standin;
use test_support::rbac_check;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering};

use fake_apiserver::FakeApiServer;
use flux_converger::flux::event::Event;
use flux_converger::http::{AppState, Backend, HookAuth, router};
use flux_converger::model::{GateMode, RevisionRecord, StatusDetail, StatusRow};
use flux_converger::records::{metrics, results};
use flux_converger::service::index::GATE_ANNOTATION;
use flux_converger::service::leadership::lease::LEASE_NAME;
use flux_converger::service::{self, Config};
use serde_json::json;
use standin::StandIn;

/// A guard against a wedged browser, not a performance limit: a page load takes well under this.
const BROWSER_GUARD: Duration = Duration::from_secs(300);

fn find_chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in [
            "chromium",
            "chromium-browser",
            "google-chrome",
            "google-chrome-stable",
        ] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// The browser, or `None` (skip) outside CI; in CI a missing browser is a failure.
fn browser_or_skip() -> Option<PathBuf> {
    match find_chromium() {
        Some(path) => Some(path),
        None if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true but chromium is not installed: run hack/ci-chromium.sh first")
        }
        None => {
            eprintln!(
                "SKIPPED: chromium not found (install it with hack/ci-chromium.sh or set CHROMIUM=/path); \
                 the dashboard was not checked in a browser"
            );
            None
        }
    }
}

fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-browser");
    std::fs::create_dir_all(&dir).expect("screenshot directory under target/");
    dir
}

/// Counts the dashboard's list requests, to see the page's script refresh it.
struct Counting {
    inner: StandIn,
    lists: AtomicUsize,
}

impl Backend for Counting {
    fn hook(&self, event: &Event) -> Vec<String> {
        self.inner.hook(event)
    }
    fn rows(&self, kind: flux_converger::model::Kind, namespace: Option<&str>) -> Vec<StatusRow> {
        if kind == flux_converger::model::Kind::KUSTOMIZATION {
            self.lists.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.rows(kind, namespace)
    }
    fn detail(
        &self,
        kind: flux_converger::model::Kind,
        namespace: &str,
        name: &str,
    ) -> Option<StatusDetail> {
        self.inner.detail(kind, namespace, name)
    }
    fn ready(&self) -> Result<(), flux_converger::http::backend::NotReady> {
        self.inner.ready()
    }
    fn last_record(
        &self,
        kind: flux_converger::model::Kind,
        namespace: &str,
        name: &str,
    ) -> Option<RevisionRecord> {
        self.inner.last_record(kind, namespace, name)
    }
}

/// Serves `router` over real HTTP on a loopback port, as `serve` does.
async fn serve(backend: Arc<dyn Backend>) -> SocketAddr {
    let (_registry, metrics) = metrics::registry();
    let state = AppState {
        backend,
        metrics,
        auth: HookAuth::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("loopback port");
    let addr = listener.local_addr().expect("bound address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router(state)).await;
    });
    addr
}

pub struct Browser {
    path: PathBuf,
}

pub struct Page {
    pub dom: String,
    pub log: String,
}

impl Browser {
    /// Runs headless Chromium once on `url` with `extra` flags; a fresh profile each time.
    async fn run(&self, url: &str, extra: &[String]) -> Page {
        let profile = tempfile::tempdir().expect("profile directory");
        let mut command = tokio::process::Command::new(&self.path);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-quic",
                "--no-first-run",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(url)
            .kill_on_drop(true);
        let output = tokio::time::timeout(BROWSER_GUARD, command.output())
            .await
            .unwrap_or_else(|_| panic!("chromium did not finish loading {url}"))
            .expect("chromium runs");
        let log = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "chromium failed on {url}: {log}");
        Page {
            dom: String::from_utf8_lossy(&output.stdout).into_owned(),
            log,
        }
    }

    /// The DOM after the page's scripts ran for `budget_ms` of virtual time.
    pub async fn dom(&self, url: &str, budget_ms: u32) -> Page {
        let page = self
            .run(
                url,
                &[
                    format!("--virtual-time-budget={budget_ms}"),
                    "--dump-dom".into(),
                ],
            )
            .await;
        assert!(
            !page.log.contains("Content Security Policy"),
            "the page broke its own CSP on {url}: {}",
            page.log
        );
        page
    }

    pub async fn screenshot(&self, url: &str, file: &Path, width: u32, height: u32) {
        self.run(
            url,
            &[
                "--virtual-time-budget=2000".into(),
                format!("--window-size={width},{height}"),
                format!("--screenshot={}", file.display()),
            ],
        )
        .await;
        let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        assert!(size > 10_000, "screenshot {} is empty", file.display());
    }
}

fn rows(dom: &str) -> usize {
    dom.matches("<tr class=\"row state-").count()
}

/// The checks, given only where the service listens: the seeded results must hold the
/// Kustomizations of `standin::seeded` (six, one refused with a hostile branch name).
pub async fn check_dashboard(base: &str, browser: &Browser, out: &Path) {
    // The list, after the script ran and refreshed the rows twice in place (10 s period).
    let page = browser.dom(&format!("{base}/"), 25_000).await;
    let dom = &page.dom;
    assert!(
        dom.contains("<html lang=\"en\" class=\"live\">"),
        "the page's script did not run, or a refresh failed (class stale):\n{dom}"
    );
    assert_eq!(rows(dom), 6, "one row per handled Kustomization:\n{dom}");
    for state in ["converged", "refused", "failed", "running", "none"] {
        assert!(
            dom.contains(&format!("<tr class=\"row state-{state}\"")),
            "a {state} row"
        );
    }
    assert!(
        dom.contains("<span class=\"code\">shrink</span>"),
        "the refusal code on its row"
    );
    assert!(
        dom.contains(standin::SHRINK_MESSAGE),
        "the refusal message on its row"
    );
    assert!(
        dom.contains("<span class=\"code\">step grow</span>"),
        "the failed step on its row"
    );

    // The hostile branch name is text, not markup: no element came out of it.
    assert!(
        !dom.contains("<b>pwned</b>"),
        "markup from a branch name was parsed"
    );
    assert_eq!(
        dom.matches("<script").count(),
        1,
        "only the page's own script"
    );
    assert!(dom.contains(
        "feat/\"&gt;&lt;b&gt;pwned&lt;/b&gt;&lt;script&gt;alert(1)&lt;/script&gt;'&amp;x@sha1:"
    ));

    // Filters are in the URL, so the refreshes keep them.
    let page = browser.dom(&format!("{base}/?state=refused"), 12_000).await;
    assert_eq!(rows(&page.dom), 1, "state filter");
    assert!(
        page.dom
            .contains("<option value=\"refused\" selected=\"\">"),
        "{}",
        page.dom
    );
    let page = browser.dom(&format!("{base}/?namespace=data"), 3_000).await;
    assert_eq!(rows(&page.dom), 2, "namespace filter");

    // The drill-down: history, plans, uids, the refusal with advice, the failure with its hint.
    let page = browser
        .dom(&format!("{base}/kustomizations/apps/web"), 3_000)
        .await;
    assert_eq!(
        page.dom.matches("<details class=\"revision").count(),
        3,
        "three revisions"
    );
    assert!(
        page.dom
            .contains("<details class=\"revision state-converged\" open=\"\">"),
        "newest open"
    );
    assert!(page.dom.contains("<code>data-web-0</code> 1Gi → 2Gi"));
    assert!(page.dom.contains("6f1c2a9e-0000-4000-8000-000000000003"));
    let page = browser
        .dom(&format!("{base}/kustomizations/apps/db"), 3_000)
        .await;
    assert!(
        page.dom.contains("Volumes never shrink."),
        "what to do about the refusal"
    );
    assert!(!page.dom.contains("<b>pwned</b>"));
    let page = browser
        .dom(&format!("{base}/kustomizations/data/kafka"), 3_000)
        .await;
    assert!(page.dom.contains("kubectl -n data patch pvc data-kafka-2"));

    browser
        .screenshot(&format!("{base}/"), &out.join("dashboard.png"), 1440, 720)
        .await;
    browser
        .screenshot(
            &format!("{base}/kustomizations/team-b/search"),
            &out.join("drill-down.png"),
            1440,
            900,
        )
        .await;
}

/// Seeds what a leader leaves behind for the records of `standin`: each Kustomization
/// (annotated with its gate) and the GitRepository it follows at its source revision, and its
/// history as the results ConfigMap `Results::put` writes.
fn seed_service_state(fake: &FakeApiServer, standin: &StandIn) {
    for summary in standin.rows(flux_converger::model::Kind::KUSTOMIZATION, None) {
        let (namespace, name) = (summary.namespace.as_str(), summary.name.as_str());
        fake.seed(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"interval": "1m", "url": format!("https://git.example.com/{namespace}/{name}.git")},
            "status": {"artifact": {
                "url": format!("http://source-controller.flux-system.svc/gitrepository/{namespace}/{name}/latest.tar.gz"),
                "revision": summary.source_revision, "digest": format!("sha256:{}", "0".repeat(64)),
                "path": format!("gitrepository/{namespace}/{name}/latest.tar.gz"),
                "lastUpdateTime": "2026-11-30T08:00:00Z"}}
        }));
        fake.seed(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {GATE_ANNOTATION: summary.gate.as_str()}},
            "spec": {"interval": "10m", "path": "./", "prune": true,
                     "suspend": summary.gate == GateMode::Suspend,
                     "sourceRef": {"kind": "GitRepository", "name": name}}
        }));
        let history = standin
            .detail(flux_converger::model::Kind::KUSTOMIZATION, namespace, name)
            .map(|d| d.revisions)
            .unwrap_or_default();
        if history.is_empty() {
            continue;
        }
        let cm = results::to_configmap(rbac_check::NAMESPACE, namespace, name, &history, None)
            .expect("the seeded history fits a ConfigMap");
        fake.seed(serde_json::to_value(cm).expect("a ConfigMap serialises"));
    }
}

/// Another replica holds the Lease, so this one serves `/status` and the dashboard from the
/// results alone and runs nothing (a leader would re-run the `running` and never-run rows).
fn seed_other_leader(fake: &FakeApiServer) {
    let now = jiff::Timestamp::now().to_string();
    fake.seed(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": LEASE_NAME, "namespace": rbac_check::NAMESPACE},
        "spec": {"holderIdentity": "flux-converger-leader", "leaseDurationSeconds": 3600,
                 "acquireTime": now, "renewTime": now}
    }));
}

fn service_config() -> Config {
    test_support::service::config(rbac_check::NAMESPACE)
        .hmac_key(Some(b"webhook-key".to_vec()))
        .allow_unauthenticated_hooks(false)
        .hook_min_interval(Duration::from_secs(10))
        .default_gate(GateMode::Suspend)
        .handoff_timeout(Duration::from_secs(60))
        .leader_elect(true)
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_chromium_from_the_service() {
    let Some(path) = browser_or_skip() else {
        return;
    };
    flux_converger::tls::install_crypto_provider();
    let seeded = standin::seeded();
    let fake = FakeApiServer::new();
    seed_service_state(&fake, &seeded);
    seed_other_leader(&fake);
    rbac_check::install(&fake);
    let running = service::start(service_config(), fake.client())
        .await
        .expect("the service starts");
    // Ready (watches synced, results read) and every Kustomization indexed at its revision.
    let expected = seeded.rows(flux_converger::model::Kind::KUSTOMIZATION, None);
    while running.backend.ready().is_err()
        || running
            .backend
            .rows(flux_converger::model::Kind::KUSTOMIZATION, None)
            != expected
    {
        rbac_check::assert_none_refused(&fake.rbac_requests());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !running.is_leading(),
        "the seeded Lease is another replica's"
    );
    for summary in &expected {
        assert_eq!(
            running.backend.detail(
                flux_converger::model::Kind::KUSTOMIZATION,
                &summary.namespace,
                &summary.name
            ),
            seeded.detail(
                flux_converger::model::Kind::KUSTOMIZATION,
                &summary.namespace,
                &summary.name
            ),
            "the service reads back the seeded history of {}/{}",
            summary.namespace,
            summary.name
        );
    }

    let browser = Browser { path };
    let out = out_dir();
    check_dashboard(&format!("http://{}", running.addr), &browser, &out).await;
    eprintln!("screenshots in {}", out.display());
    running.shutdown().await;
    // Served as the converger's service account, under the shipped roles alone.
    rbac_check::assert_allowed(&fake.rbac_requests());
}

/// The page refreshes itself in place: counted on a stand-in backend (the service's answers
/// come from memory, so it has nothing to count them by).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_refreshes_itself_in_chromium() {
    let Some(path) = browser_or_skip() else {
        return;
    };
    let backend = Arc::new(Counting {
        inner: standin::seeded(),
        lists: AtomicUsize::new(0),
    });
    let addr = serve(backend.clone()).await;
    let browser = Browser { path };

    // 25 s of the page's (virtual) time: the first load and two refreshes of the 10 s period.
    let page = browser.dom(&format!("http://{addr}/"), 25_000).await;
    assert!(
        page.dom.contains("<html lang=\"en\" class=\"live\">"),
        "{}",
        page.dom
    );
    assert_eq!(rows(&page.dom), 6, "the rows swapped in by the refresh");
    let lists = backend.lists.load(Ordering::SeqCst);
    assert!(
        lists >= 3,
        "the page refreshed itself {} times, not twice",
        lists.saturating_sub(1)
    );
}

/// Serves `router` like [`serve`], counting the answers of `GET /` by status; `on_answer`
/// runs after each with the counts so far (200s, 304s).
async fn serve_counting(
    backend: Arc<dyn Backend>,
    on_answer: impl Fn(usize, usize) + Clone + Send + Sync + 'static,
) -> (SocketAddr, Arc<(AtomicUsize, AtomicUsize)>) {
    let counts = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
    let (_registry, metrics) = metrics::registry();
    let state = AppState {
        backend,
        metrics,
        auth: HookAuth::default(),
    };
    let counted = counts.clone();
    let app = router(state).layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let (counted, on_answer) = (counted.clone(), on_answer.clone());
            async move {
                let listed = request.uri().path() == "/";
                let response = next.run(request).await;
                if listed {
                    match response.status() {
                        axum::http::StatusCode::OK => {
                            counted.0.fetch_add(1, Ordering::SeqCst);
                        }
                        axum::http::StatusCode::NOT_MODIFIED => {
                            counted.1.fetch_add(1, Ordering::SeqCst);
                        }
                        _ => {}
                    }
                    on_answer(
                        counted.0.load(Ordering::SeqCst),
                        counted.1.load(Ordering::SeqCst),
                    );
                }
                response
            }
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("loopback port");
    let addr = listener.local_addr().expect("bound address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, counts)
}

/// The page's refresh revalidates with `If-None-Match`: while nothing changes the service
/// answers 304 (no body, nothing rendered) and the page stays as it is; after a change the
/// next refresh gets the new page and swaps its rows in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_refresh_revalidates_and_gets_304_until_a_change() {
    let Some(path) = browser_or_skip() else {
        return;
    };
    let backend = Arc::new(standin::Versioned::new(standin::seeded()));
    let changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let on_answer = {
        let (backend, changed) = (backend.clone(), changed.clone());
        // After the second 304 a new Kustomization appears (a record moves the version).
        move |_ok: usize, not_modified: usize| {
            if not_modified >= 2 && !changed.swap(true, Ordering::SeqCst) {
                backend.replace(standin::seeded().with(
                    "apps",
                    "zz-new",
                    GateMode::Suspend,
                    Some("main@sha1:0123456789012345678901234567890123456789"),
                    Vec::new(),
                ));
            }
        }
    };
    let (addr, counts) = serve_counting(backend.clone(), on_answer).await;
    let browser = Browser { path };

    // 45 s of the page's time: the load and four refreshes (10 s period).
    let page = browser.dom(&format!("http://{addr}/"), 45_000).await;
    let dom = &page.dom;
    assert!(
        dom.contains("<html lang=\"en\" class=\"live\">"),
        "the script ran and no refresh failed:\n{dom}"
    );
    let (ok, not_modified) = (
        counts.0.load(Ordering::SeqCst),
        counts.1.load(Ordering::SeqCst),
    );
    assert!(
        changed.load(Ordering::SeqCst),
        "two refreshes got a 304 ({ok} 200s, {not_modified} 304s)"
    );
    assert_eq!(
        ok, 2,
        "the load and the refresh after the change got the page"
    );
    assert!(not_modified >= 2, "{not_modified} 304s");
    assert_eq!(
        backend.lists(),
        2,
        "one render per version: the 304s rendered nothing"
    );
    assert_eq!(
        rows(dom),
        7,
        "the new row swapped in after the change:\n{dom}"
    );
    assert!(dom.contains("data-name=\"zz-new\""));
    assert!(
        dom.contains(" ago</time>"),
        "the script shows record times relative to now"
    );
    assert!(
        dom.contains("checked "),
        "the header says when it last checked"
    );
}

/// Past 200 rows the list is paged: each page is its own URL, refreshed in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_pages_in_chromium() {
    let Some(path) = browser_or_skip() else {
        return;
    };
    let backend = Arc::new(standin::Versioned::new(standin::scaled(450, 2)));
    let addr = serve(backend.clone()).await;
    let browser = Browser { path };

    let page = browser.dom(&format!("http://{addr}/"), 3_000).await;
    assert_eq!(rows(&page.dom), 200, "the first page");
    assert!(page.dom.contains("rel=\"next\" href=\"/?page=2\""));
    assert!(page.dom.contains("1–200 of 450 shown"));

    // The last page, through a refresh (12 s: one refresh, answered 304).
    let page = browser.dom(&format!("http://{addr}/?page=3"), 12_000).await;
    let dom = &page.dom;
    assert!(dom.contains("<html lang=\"en\" class=\"live\">"), "{dom}");
    assert_eq!(rows(dom), 50, "the last page's rows");
    assert!(dom.contains("401–450 of 450 shown"));
    assert!(dom.contains("<span class=\"page current\" aria-current=\"page\">3</span>"));
    assert!(dom.contains("rel=\"prev\" href=\"/?page=2\""));
    assert!(!dom.contains("rel=\"next\""));
    assert_eq!(
        backend.lists(),
        2,
        "each page rendered once, its refresh answered from the kept page"
    );
    browser
        .screenshot(
            &format!("http://{addr}/?page=3"),
            &out_dir().join("pages.png"),
            1440,
            900,
        )
        .await;
}

/// 1,000 Kustomizations × 20 revisions: server render time and Chromium's load, printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn dashboard_scale_figures() {
    use tower::ServiceExt;

    let backend = Arc::new(standin::scaled(1000, 20));
    let (_registry, metrics) = metrics::registry();
    let state = AppState {
        backend: backend.clone(),
        metrics,
        auth: HookAuth::default(),
    };
    let mut renders = Vec::new();
    let mut bytes = 0;
    for _ in 0..20 {
        let started = Instant::now();
        let request = axum::http::Request::get("/")
            .body(axum::body::Body::empty())
            .expect("request");
        let response = router(state.clone())
            .oneshot(request)
            .await
            .expect("response");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        renders.push(started.elapsed());
        bytes = body.len();
    }
    renders.sort();
    let mut details = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let request = axum::http::Request::get("/kustomizations/team-07/app-0007")
            .body(axum::body::Body::empty())
            .expect("request");
        let response = router(state.clone())
            .oneshot(request)
            .await
            .expect("response");
        let _ = axum::body::to_bytes(response.into_body(), usize::MAX).await;
        details.push(started.elapsed());
    }
    details.sort();
    println!(
        "server render, / with 1000 rows ({bytes} bytes): median {:?}, max {:?}; drill-down with 20 revisions: median {:?}",
        renders[renders.len() / 2],
        renders[renders.len() - 1],
        details[details.len() / 2],
    );

    let Some(path) = find_chromium() else {
        println!("chromium not found: no browser figures");
        return;
    };
    let browser = Browser { path };
    let (_registry, metrics) = metrics::registry();
    let addr = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("port");
        let addr = listener.local_addr().expect("addr");
        let state = AppState {
            backend,
            metrics,
            auth: HookAuth::default(),
        };
        tokio::spawn(async move {
            let _ = axum::serve(listener, router(state)).await;
        });
        addr
    };
    let blank = {
        let started = Instant::now();
        browser.run("about:blank", &["--dump-dom".into()]).await;
        started.elapsed()
    };
    let started = Instant::now();
    let page = browser.dom(&format!("http://{addr}/"), 1).await;
    let load = started.elapsed();
    assert_eq!(rows(&page.dom), 200, "the first page of 1000 rows");
    println!(
        "chromium --dump-dom of / with 1000 rows: {load:?} (about:blank: {blank:?}, so the page costs about {:?})",
        load.saturating_sub(blank)
    );
    browser
        .screenshot(
            &format!("http://{addr}/"),
            &out_dir().join("scale.png"),
            1440,
            900,
        )
        .await;
}
