//! Load figures for `serve`, printed for the report (not a timed test): `/status`,
//! `/status/{ns}/{name}` and `/hook` latency under an open-loop load, and the API requests a
//! resync makes with nothing changed. The service runs in process with the real router,
//! index, queue and watches, against the in-repo fake API server holding 1,000 handled
//! Kustomizations, each with 20 revision records; the gate is replaced by a no-op (nothing is
//! due, so it is never called in steady state).
//!
//! The dashboard: CPU per page of `/` (a repeated page from the kept encoding, a 304 for an
//! unchanged page, a page rendered after a change, and a page rendered per request as before
//! the cache), measured through the router in process (thread CPU time, no socket); then
//! `/status` at `RATE` with the dashboard polled alongside (tabs revalidating, full pages,
//! records changing) and the peak resident memory (`VmHWM`) of the whole process, an upper
//! bound of the service's own (the fake API server and the load generator live in it too).
//!
//! `cargo bench --bench service` (env `RATE`, `SECONDS`, `KUSTOMIZATIONS`, `DASHBOARD_RATE`
//! to change the load).

use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_apiserver::FakeApiServer;
use flux_converger::http::{AppState, Backend, HookAuth, metrics_router, router};
use flux_converger::model::{Kind, RevisionRecord, RevisionState, Trigger};
use flux_converger::records::metrics;
use flux_converger::records::results::Results;
use flux_converger::service::leadership::LeaseSettings;
use flux_converger::service::queue::BackoffPolicy;
use flux_converger::service::{Config, GateOutcome, Parts, Resume, Runner, Tuning, start_with};
use futures::future::BoxFuture;
use serde_json::json;

const NS: &str = "flux-system";
const TOKEN: &str = "bench-token";

struct Noop;
impl Runner for Noop {
    fn run<'a>(&'a self, _: &'a str, _: &'a str, _: Trigger) -> BoxFuture<'a, GateOutcome> {
        Box::pin(async { GateOutcome::Done(RevisionState::Converged) })
    }
}
impl Resume for Noop {
    fn resume_all(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn record(i: usize, r: usize) -> RevisionRecord {
    serde_json::from_value(json!({
        "revision": format!("main@sha1:{:040x}", r),
        "digest": format!("sha256:{:064x}", i * 100 + r),
        "trigger": "webhook",
        "startedAt": format!("2026-11-30T08:{:02}:00Z", r),
        "finishedAt": format!("2026-11-30T08:{:02}:05Z", r),
        "state": "converged",
        "statefulsets": [{
            "namespace": "apps", "name": format!("db-{i}"), "outcome": "converged",
            "oldUid": "0f1e2d3c-0000-0000-0000-000000000001",
            "newUid": "0f1e2d3c-0000-0000-0000-000000000002",
            "templates": [{"template": "data", "from": "1Gi", "to": "2Gi"}],
            "claims": [{"claim": format!("data-db-{i}-0"), "from": "1Gi", "to": "2Gi"},
                       {"claim": format!("data-db-{i}-1"), "from": "1Gi", "to": "2Gi"}]
        }],
        "handoff": {"mode": "suspend", "at": "2026-11-30T08:00:06Z", "action": "resuspended",
                    "resuspendedAt": "2026-11-30T08:00:09Z"},
        "flux": {"outcome": "applied", "appliedRevision": format!("main@sha1:{:040x}", r)},
        "generation": 2, "gate": "suspend"
    }))
    .expect("a valid record")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Sends `rate` requests per second for `seconds` (open loop: a slow answer does not slow the
/// sender), each built by `make(i)`; returns the sorted latencies and the failures.
async fn load(
    rate: u64,
    seconds: u64,
    make: impl Fn(usize) -> reqwest::RequestBuilder,
) -> (Vec<Duration>, usize) {
    let total = (rate * seconds) as usize;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let start = tokio::time::Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..total {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let request = make(i);
        set.spawn(async move {
            let t = Instant::now();
            let ok = match request.send().await {
                // A 304 is the answer a revalidating dashboard tab wants.
                Ok(r) => {
                    (r.status().is_success() || r.status() == reqwest::StatusCode::NOT_MODIFIED)
                        && r.bytes().await.is_ok()
                }
                Err(_) => false,
            };
            (t.elapsed(), ok)
        });
    }
    let mut latencies = Vec::with_capacity(total);
    let mut failures = 0;
    while let Some(done) = set.join_next().await {
        match done {
            Ok((latency, true)) => latencies.push(latency),
            _ => failures += 1,
        }
    }
    latencies.sort();
    (latencies, failures)
}

fn report(name: &str, rate: u64, (latencies, failures): &(Vec<Duration>, usize)) {
    println!(
        "{name:<34} {rate:>5} req/s  n={:<6} p50={:>8.3} ms  p99={:>8.3} ms  max={:>8.3} ms  failures={failures}",
        latencies.len(),
        percentile(latencies, 0.50).as_secs_f64() * 1e3,
        percentile(latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

/// A `/proc/self/status` figure in kB (`VmRSS`, `VmHWM`), as MB.
fn proc_status_mb(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn rss_mb() -> f64 {
    proc_status_mb("VmRSS:")
}

fn cpu_clock(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids are the constants libc names.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process (every thread).
fn process_cpu() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// One request through the router in process: status, ETag, body length.
async fn dashboard_get(
    app: &axum::Router,
    uri: &str,
    if_none_match: Option<&str>,
) -> (axum::http::StatusCode, String, usize) {
    use tower::ServiceExt;
    let mut request = axum::http::Request::get(uri);
    if let Some(tag) = if_none_match {
        request = request.header("if-none-match", tag);
    }
    let response = app
        .clone()
        .oneshot(request.body(axum::body::Body::empty()).expect("a request"))
        .await
        .expect("the router is infallible");
    let status = response.status();
    let etag = response
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a body");
    (status, etag, body.len())
}

/// The CPU one request of `uri` costs when answered from the kept page (nothing spawned, so
/// all of it runs on this thread): `n` requests on a thread of their own, its CPU time / n.
fn cpu_per_kept_request(
    app: &axum::Router,
    uri: &str,
    if_none_match: Option<&str>,
    n: u32,
) -> (Duration, axum::http::StatusCode, usize) {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async {
                    // Warm: the page is built (on the blocking pool) and kept.
                    let (status, _, bytes) = dashboard_get(app, uri, if_none_match).await;
                    let started = thread_cpu();
                    for _ in 0..n {
                        dashboard_get(app, uri, if_none_match).await;
                    }
                    ((thread_cpu() - started) / n, status, bytes)
                })
            })
            .join()
            .expect("the measuring thread")
    })
}

/// The dashboard as a backend that tracks no version: a render for every request, as every
/// request cost before the pages were kept.
struct Untracked(flux_converger::service::backend::ServiceBackend);
impl Backend for Untracked {
    fn hook(&self, event: &flux_converger::flux::event::Event) -> Vec<String> {
        self.0.hook(event)
    }
    fn kinds(&self) -> Vec<Kind> {
        self.0.kinds()
    }
    fn rows(&self, kind: Kind, namespace: Option<&str>) -> Vec<flux_converger::model::StatusRow> {
        self.0.rows(kind, namespace)
    }
    fn detail(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Option<flux_converger::model::StatusDetail> {
        self.0.detail(kind, namespace, name)
    }
    fn last_record(&self, kind: Kind, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.0.last_record(kind, namespace, name)
    }
    fn ready(&self) -> Result<(), flux_converger::http::backend::NotReady> {
        self.0.ready()
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` must not run the load.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run());
}

async fn run() {
    let kustomizations = env("KUSTOMIZATIONS", 1000) as usize;
    let rate = env("RATE", 2000);
    let seconds = env("SECONDS", 3);
    if env("ONLY_PROCESS", 0) == 1 {
        let dashboard_rate = env("DASHBOARD_RATE", 100);
        serve_process_memory(kustomizations, 20, rate, seconds, dashboard_rate).await;
        return;
    }
    let rss_start = rss_mb();

    let fake = FakeApiServer::new();
    let head = 20;
    fake.seed(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"namespace": NS, "name": "repo"},
        "spec": {"url": "https://example.com/repo.git", "interval": "1m"},
        "status": {"artifact": {"url": "http://source-controller/repo.tar.gz",
            "revision": format!("main@sha1:{:040x}", head), "digest": "sha256:00", "path": "x"}}
    }));
    let results = Results::memory();
    for i in 0..kustomizations {
        fake.seed(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"namespace": NS, "name": format!("app-{i:04}"),
                         "annotations": {"flux-converger.io/gate": "suspend"}},
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "repo"}, "path": "./",
                     "interval": "10m", "prune": true, "suspend": true}
        }));
        for r in 1..=head {
            results
                .put(NS, &format!("app-{i:04}"), record(i, r))
                .await
                .expect("memory results");
        }
    }
    let rss_seeded = rss_mb();

    let (registry, metrics) = metrics::registry();
    let registry = Arc::new(registry);
    let app_metrics = metrics.clone();
    let config = Config::builder(NS)
        .listen("127.0.0.1:0".parse().expect("an address"))
        .metrics_addr("127.0.0.1:0".parse().expect("an address"))
        .hook_token(Some(TOKEN.into()))
        // As in production (the default 10 s): most of the load's hooks fall inside the
        // interval and queue nothing, which is what a burst costs a real service.
        .resync(Duration::from_millis(500))
        .handoff_timeout(Duration::from_secs(60))
        .call_timeout(Duration::from_secs(10))
        .build();
    let tuning = Tuning {
        lease: LeaseSettings::new("bench"),
        backoff: BackoffPolicy::default(),
        shutdown_grace: Duration::from_secs(5),
        restart_retry: Duration::from_secs(10),
    };
    let records = results.clone();
    let parts = Parts {
        runner: Arc::new(Noop),
        queue: flux_converger::service::queue::Queue::new(
            tuning.backoff,
            metrics.queue_depth.clone(),
        ),
        results,
        resume: Arc::new(Noop),
        app: Box::new(move |backend| {
            router(AppState {
                backend,
                metrics: app_metrics,
                auth: HookAuth {
                    hmac_key: None,
                    token: Some(TOKEN.into()),
                },
            })
        }),
        metrics_app: metrics_router(registry),
        metrics,
        fence: Default::default(),
        storage: None,
        kinds: Vec::new(),
        volumes: None,
    };
    let running = start_with(config, fake.client(), tuning, parts)
        .await
        .expect("the service starts");
    let ready = Instant::now();
    while running.backend.lane.queue().depth() > 0
        || running.backend.lane.queue().running() > 0
        || Backend::ready(&running.backend).is_err()
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "service ready with {kustomizations} handled Kustomizations x {head} records in {:.0} ms",
        ready.elapsed().as_secs_f64() * 1e3
    );

    // Resync with nothing changed: count every request but the watches over several resyncs.
    fake.clear_requests();
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let requests = fake.requests();
    let other = requests.iter().filter(|r| !r.watch).count();
    println!(
        "resync x5 with nothing changed: {other} API requests besides the watches ({} watch requests)",
        requests.len() - other
    );

    // The dashboard's CPU per page, in process through the router.
    let dashboard_app = |backend: Arc<dyn Backend>| {
        let (_registry, metrics) = metrics::registry();
        router(AppState {
            backend,
            metrics,
            auth: HookAuth::default(),
        })
    };
    let kept = dashboard_app(Arc::new(running.backend.clone()));
    let n = env("DASHBOARD_REQUESTS", 2000) as u32;
    let (cpu, status, bytes) = cpu_per_kept_request(&kept, "/", None, n);
    println!(
        "dashboard /, a repeated page ({status}, {bytes} bytes, 200 of {kustomizations} rows): {:.1} µs CPU",
        cpu.as_secs_f64() * 1e6
    );
    let mut whole = Duration::ZERO;
    let pages = kustomizations.div_ceil(200).max(1);
    for page in 1..=pages {
        whole += cpu_per_kept_request(&kept, &format!("/?page={page}"), None, n / 4).0;
    }
    println!(
        "dashboard, all {kustomizations} rows repeated ({pages} pages): {:.1} µs CPU",
        whole.as_secs_f64() * 1e6
    );
    let (_, etag, _) = dashboard_get(&kept, "/", None).await;
    let (cpu, status, bytes) = cpu_per_kept_request(&kept, "/", Some(&etag), n);
    println!(
        "dashboard /, revalidated unchanged ({status}, {bytes} bytes): {:.1} µs CPU",
        cpu.as_secs_f64() * 1e6
    );
    // After a change: one record more moves the version, the next request builds the page
    // (on the blocking pool: the process's CPU, the service idle around it).
    let mut rebuilds = Vec::new();
    for r in 0..20 {
        records
            .put(
                NS,
                &format!("app-{:04}", r % kustomizations),
                record(r, head + 1 + r),
            )
            .await
            .expect("memory results");
        let started = process_cpu();
        let (status, _, _) = dashboard_get(&kept, "/", Some(&etag)).await;
        assert_eq!(
            status,
            axum::http::StatusCode::OK,
            "a change gives a new page"
        );
        rebuilds.push(process_cpu() - started);
    }
    println!(
        "dashboard /, the first request after a change (a render): median {:.2} ms CPU",
        median(rebuilds).as_secs_f64() * 1e3
    );
    let per_request = dashboard_app(Arc::new(Untracked(running.backend.clone())));
    let mut renders = Vec::new();
    for _ in 0..20 {
        let started = process_cpu();
        dashboard_get(&per_request, "/", None).await;
        renders.push(process_cpu() - started);
    }
    println!(
        "dashboard /, rendered for every request (no kept pages, 200 rows): median {:.2} ms CPU",
        median(renders).as_secs_f64() * 1e3
    );

    let base = format!("http://{}", running.addr);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .expect("an HTTP client");
    // `/status` at `rate` while the dashboard is polled alongside: tabs revalidating (most
    // answered 304), full pages of every page number, and a record changing every 500 ms so
    // the pages are rebuilt under load.
    let dashboard_rate = env("DASHBOARD_RATE", 100);
    let (_, first_etag, _) = dashboard_get(&kept, "/", None).await;
    let changing = {
        let records = records.clone();
        tokio::spawn(async move {
            let mut r = 0;
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                r += 1;
                let _ = records
                    .put(
                        NS,
                        &format!("app-{:04}", r % kustomizations),
                        record(r, 100 + r),
                    )
                    .await;
            }
        })
    };
    let (list, dashboard) = tokio::join!(
        {
            let (http, base) = (http.clone(), base.clone());
            load(rate, seconds, move |_| http.get(format!("{base}/status")))
        },
        {
            let (http, base) = (http.clone(), base.clone());
            load(dashboard_rate, seconds, move |i| {
                let page = i % pages + 1;
                let request = http.get(format!("{base}/?page={page}"));
                if i % 4 == 0 {
                    request
                } else {
                    request.header("if-none-match", first_etag.clone())
                }
            })
        }
    );
    changing.abort();
    report("GET /status (1,000 rows)", rate, &list);
    report("GET /?page=N alongside", dashboard_rate, &dashboard);
    let one = {
        let (http, base) = (http.clone(), base.clone());
        load(rate, seconds, move |i| {
            http.get(format!("{base}/status/{NS}/app-{:04}", i % kustomizations))
        })
        .await
    };
    report("GET /status/{ns}/{name} (20 revs)", rate, &one);
    let hook = {
        let (http, base) = (http.clone(), base.clone());
        load(rate, seconds, move |i| {
            let body = json!({
                "involvedObject": {"kind": "Kustomization", "namespace": NS,
                                   "name": format!("app-{:04}", i % kustomizations)},
                "severity": "info", "message": "Reconciliation finished", "reason": "ReconciliationSucceeded",
                "reportingController": "kustomize-controller"
            });
            http.post(format!("{base}/hook"))
                .header("Authorization", format!("Bearer {TOKEN}"))
                .header("Content-Type", "application/json")
                .body(body.to_string())
        })
        .await
    };
    report("POST /hook", rate, &hook);
    println!(
        "resident memory: {rss_start:.1} MB at start, {rss_seeded:.1} MB seeded (fake + records), {:.1} MB after the load, peak (VmHWM) {:.1} MB (fake + service + load generator in one process)",
        rss_mb(),
        proc_status_mb("VmHWM:")
    );
    running.shutdown().await;
    drop(fake);

    serve_process_memory(kustomizations, head, rate, seconds, dashboard_rate).await;
}

/// `VmRSS` and `VmHWM` of another process, in MB.
fn process_mb(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The memory figure of `serve` alone: the release binary as its own process against the
/// fake API server (served over HTTP by this process), the 1,000 Kustomizations' results
/// seeded as the results ConfigMaps a leader writes, loaded with `/status` at `rate`, every
/// detail, and the dashboard (every page, revalidating tabs), then its `VmHWM` read from
/// `/proc/<pid>/status`.
async fn serve_process_memory(
    kustomizations: usize,
    head: usize,
    rate: u64,
    seconds: u64,
    dashboard_rate: u64,
) {
    use tokio::io::AsyncBufReadExt;

    let fake = FakeApiServer::new();
    fake.seed(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"namespace": NS, "name": "repo"},
        "spec": {"url": "https://example.com/repo.git", "interval": "1m"},
        "status": {"artifact": {"url": "http://source-controller/repo.tar.gz",
            "revision": format!("main@sha1:{:040x}", head), "digest": "sha256:00", "path": "x"}}
    }));
    for i in 0..kustomizations {
        let name = format!("app-{i:04}");
        fake.seed(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"namespace": NS, "name": name,
                         "annotations": {"flux-converger.io/gate": "suspend"}},
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "repo"}, "path": "./",
                     "interval": "10m", "prune": true, "suspend": true}
        }));
        // Newest first, as `Results` keeps them.
        let history: Vec<RevisionRecord> = (1..=head).rev().map(|r| record(i, r)).collect();
        let cm = flux_converger::records::results::to_configmap(NS, NS, &name, &history, None)
            .expect("20 records fit a ConfigMap");
        fake.seed(serde_json::to_value(cm).expect("a ConfigMap"));
    }
    let served = fake.serve().await;
    let token = tempfile::NamedTempFile::new().expect("a token file");
    std::fs::write(token.path(), TOKEN).expect("the token");
    // `SERVE_WRAPPER=heaptrack` runs serve under a profiler to see where its memory goes (the
    // figures are then the wrapper's, not serve's).
    let bin = env!("CARGO_BIN_EXE_flux-converger");
    let mut command = match std::env::var("SERVE_WRAPPER") {
        Ok(wrapper) if !wrapper.is_empty() => {
            let mut command = tokio::process::Command::new(wrapper);
            command.arg(bin);
            command
        }
        _ => tokio::process::Command::new(bin),
    };
    let mut child = command
        .args(["serve", "--kubeconfig"])
        .arg(&served.kubeconfig)
        .args([
            "-n",
            NS,
            "--listen",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .arg("--hook-token-file")
        .arg(token.path())
        .args(["--log-format", "json"])
        .env("RUST_LOG", "warn,flux_converger=info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("serve starts");
    let pid = child.id().expect("a pid");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let addr = loop {
        let Ok(Some(line)) = lines.next_line().await else {
            println!("serve stopped before serving: no memory figure");
            return;
        };
        if let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line)
            && entry["message"] == "serving"
        {
            break entry["addr"].as_str().unwrap_or_default().to_string();
        }
    };
    // Keep reading its log, so a full pipe never blocks it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let base = format!("http://{addr}");
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .expect("an HTTP client");
    let started = Instant::now();
    loop {
        let status = http.get(format!("{base}/status")).send().await;
        let rows = match status {
            Ok(r) if r.status().is_success() => r
                .bytes()
                .await
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .and_then(|v| v["kustomizations"].as_array().map(Vec::len))
                .unwrap_or(0),
            _ => 0,
        };
        let ready = http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready && rows == kustomizations {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            println!(
                "serve not ready with {kustomizations} rows after 2 minutes: no memory figure"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (idle, startup_peak) = process_mb(pid);
    println!(
        "serve process ready ({kustomizations} x {head} records): {idle:.1} MB resident, peak so far (VmHWM) {startup_peak:.1} MB"
    );
    let pages = kustomizations.div_ceil(200).max(1);
    let etag = http
        .get(format!("{base}/"))
        .send()
        .await
        .ok()
        .and_then(|r| {
            r.headers()
                .get("etag")
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        })
        .unwrap_or_default();
    let dashboard = |http: reqwest::Client, base: String, etag: String| {
        load(dashboard_rate, seconds, move |i| {
            // Every page and state filter, a quarter of them full pages, the rest revalidating.
            let page = i % pages + 1;
            let state = ["", "&state=converged", "&state=failed"][i % 3];
            let request = http.get(format!("{base}/?page={page}{state}"));
            if i % 4 == 0 {
                request
            } else {
                request.header("if-none-match", etag.clone())
            }
        })
    };
    let (list, board) = tokio::join!(
        {
            let (http, base) = (http.clone(), base.clone());
            load(rate, seconds, move |_| http.get(format!("{base}/status")))
        },
        dashboard(http.clone(), base.clone(), etag.clone())
    );
    report("serve process: GET /status", rate, &list);
    report(
        "serve process: GET /?page=N alongside",
        dashboard_rate,
        &board,
    );
    let (one, board) = tokio::join!(
        {
            let (http, base) = (http.clone(), base.clone());
            load(rate, seconds, move |i| {
                http.get(format!("{base}/status/{NS}/app-{:04}", i % kustomizations))
            })
        },
        dashboard(http.clone(), base.clone(), etag.clone())
    );
    report("serve process: GET /status/{ns}/{name}", rate, &one);
    report(
        "serve process: GET /?page=N alongside",
        dashboard_rate,
        &board,
    );
    let (rss, hwm) = process_mb(pid);
    println!(
        "serve process memory ({kustomizations} x {head} records): {idle:.1} MB ready and idle, {rss:.1} MB after the load, peak (VmHWM) {hwm:.1} MB"
    );
    let _ = child.start_kill();
    let _ = child.wait().await;
}
