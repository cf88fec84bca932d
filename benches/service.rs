//! Load figures for `serve`, printed for the report (not a timed test): `/status`,
//! `/status/{ns}/{name}` and `/hook` latency under an open-loop load, and the API requests a
//! resync makes with nothing changed. The service runs in process with the real router,
//! index, queue and watches, against the in-repo fake API server holding 1,000 handled
//! Kustomizations, each with 20 revision records; the gate is replaced by a no-op (nothing is
//! due, so it is never called in steady state).
//!
//! `cargo bench --bench service` (env `RATE`, `SECONDS`, `KUSTOMIZATIONS` to change the load).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use flux_converger::flux::render::KustomizeCommand;
use flux_converger::http::{AppState, HookAuth, metrics_router, router};
use flux_converger::service::leader::LeaseSettings;
use flux_converger::service::queue::BackoffPolicy;
use flux_converger::service::record::{GateMode, RevisionRecord, RevisionState, Trigger};
use flux_converger::service::results::Results;
use flux_converger::service::{
    Config, Parts, Resume, RunOutcome, Runner, Tuning, metrics, start_with,
};
use futures::future::BoxFuture;
use serde_json::json;
use support::FakeApiServer;

const NS: &str = "flux-system";
const TOKEN: &str = "bench-token";

struct Noop;
impl Runner for Noop {
    fn run<'a>(&'a self, _: &'a str, _: &'a str, _: Trigger) -> BoxFuture<'a, RunOutcome> {
        Box::pin(async { RunOutcome::Done(RevisionState::Converged) })
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
                Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
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

fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
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
    let config = Config {
        listen: "127.0.0.1:0".parse().expect("an address"),
        metrics_addr: "127.0.0.1:0".parse().expect("an address"),
        namespace: NS.into(),
        hmac_key: None,
        hook_token: Some(TOKEN.into()),
        allow_unauthenticated_hooks: false,
        // As in production: most of the load's hooks fall inside the interval and queue
        // nothing, which is what a burst costs a real service.
        hook_min_interval: Duration::from_secs(10),
        default_gate: GateMode::Off,
        watch_label_selector: None,
        workers: 2,
        resync: Duration::from_millis(500),
        handoff_timeout: Duration::from_secs(60),
        leader_elect: false,
        no_cross_namespace_refs: false,
        default_service_account: None,
        events_addr: None,
        kustomize: KustomizeCommand::default(),
        call_timeout: Duration::from_secs(10),
        fetch: Default::default(),
        storage: Default::default(),
    };
    let tuning = Tuning {
        lease: LeaseSettings::new("bench"),
        backoff: BackoffPolicy::default(),
        reload: Duration::from_secs(15),
        shutdown_grace: Duration::from_secs(5),
    };
    let parts = Parts {
        runner: Arc::new(Noop),
        store: Arc::new(results),
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
    };
    let running = start_with(config, fake.client(), tuning, parts)
        .await
        .expect("the service starts");
    let ready = Instant::now();
    while running.backend.queue.depth() > 0
        || running.backend.queue.running() > 0
        || flux_converger::http::backend::Backend::ready(&running.backend).is_err()
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

    let base = format!("http://{}", running.addr);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .expect("an HTTP client");
    let list = {
        let (http, base) = (http.clone(), base.clone());
        load(rate, seconds, move |_| http.get(format!("{base}/status"))).await
    };
    report("GET /status (1,000 rows)", rate, &list);
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
        "resident memory: {rss_start:.1} MB at start, {rss_seeded:.1} MB seeded (fake + records), {:.1} MB after the load (fake + service + load generator in one process)",
        rss_mb()
    );
    running.shutdown().await;
}
