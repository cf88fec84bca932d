//! A fleet of Kustomizations on the fake API server, and a `flux-converger serve` process
//! against it (issue 36): what serve's memory, its API load and its start-up cost at 1,000 and
//! 10,000 objects. Driven by `hack/fleet-memory.sh`, `hack/failing-load.sh` and
//! `hack/shard-start.sh`, which build the release binaries; any `serve` binary can be given, so
//! the same run measures an older build for the "before" figure.
//!
//! Serve runs under the shipped RBAC (manifests/, installed in the fake as
//! `test_support::rbac_check::install` does). The fake runs in this process (its request log, `fake_apiserver::RequestRecord`, is what the
//! load is counted from); serve is a child process, so its `/proc/<pid>/status` (`VmRSS`,
//! `VmHWM`) is its own.
//!
//! The objects are shaped as Flux leaves them on a cluster (modelled on Flux 2.x's objects, not
//! copied from one): a Kustomization applied by a parent Kustomization carries
//! `metadata.managedFields` of kustomize-controller's apply, its finalizer update and its status
//! updates, a finalizer, Flux's owner labels, and a status with conditions and an inventory of
//! [`INVENTORY`] objects; a GitRepository carries source-controller's managed fields and an
//! artifact.
//!
//! - `memory`: N Kustomizations (each its own GitRepository, [`PER_NAMESPACE`] per namespace),
//!   each with the results ConfigMap a leader wrote for its converged revision, so nothing is
//!   due: serve starts, lists, becomes ready and idles. Prints the time to ready and serve's
//!   RSS and peak RSS (ready, then after `--idle` seconds).
//! - `failing-load`: N Kustomizations whose artifacts cannot be downloaded (a closed local port):
//!   every run fails. Prints the API requests serve sent per second over `--window` seconds
//!   from its readiness, by verb and resource, and serve's WARN lines.
//! - `shard-start`: N Kustomizations and N GitRepositories, of which `--shard` of the namespaces
//!   hold the Kustomizations of one shard (label `sharding.fluxcd.io/key: one`); serve runs
//!   with `--watch-label-selector sharding.fluxcd.io/key=one`. Prints the requests of its start
//!   (until ready) by kind, and the time to ready.
//!
//! Every figure is one line `key=value`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use fake_apiserver::{FakeApiServer, RequestRecord};
use flux_converger::model::{
    FluxOutcome, FluxResult, GateMode, Handoff, HandoffAction, RevisionRecord, RevisionState,
    Trigger,
};
use serde_json::{Value, json};

/// Kustomizations per namespace.
const PER_NAMESPACE: usize = 100;
/// Objects in each Kustomization's `status.inventory`.
const INVENTORY: usize = 12;
const REVISION: &str = "main@sha1:9f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b";
const SERVICE_NS: &str = "flux-system";

#[derive(Copy, Clone, Debug, ValueEnum)]
enum Mode {
    Memory,
    FailingLoad,
    ShardStart,
}

#[derive(Parser)]
#[command(about = "A fleet of Kustomizations on the fake API server and serve against it")]
struct Args {
    #[arg(value_enum)]
    mode: Mode,
    /// The `flux-converger` binary to run (`serve`).
    #[arg(long)]
    serve: PathBuf,
    /// Kustomizations (and GitRepositories).
    #[arg(long, default_value_t = 1000)]
    kustomizations: usize,
    /// `memory`: seconds serve idles after it is ready before the last reading.
    #[arg(long, default_value_t = 30)]
    idle: u64,
    /// `failing-load`: seconds over which the requests are counted, from readiness.
    #[arg(long, default_value_t = 300)]
    window: u64,
    /// `shard-start`: namespaces whose Kustomizations are the shard's (of N/100).
    #[arg(long, default_value_t = 2)]
    shard: usize,
    /// The Kustomizations' `spec.retryInterval` (none: Flux's default, their `interval`, 10m).
    #[arg(long)]
    retry_interval: Option<String>,
    /// Serve as the fake's admin (`system:masters`) instead of under the shipped RBAC: for a
    /// build whose permissions differ from this tree's manifests (an older or newer one).
    #[arg(long)]
    as_admin: bool,
    /// Where serve's log goes (for the WARN count); a temporary file by default.
    #[arg(long)]
    log: Option<PathBuf>,
}

fn namespace(i: usize) -> String {
    format!("team-{:03}", i / PER_NAMESPACE)
}

fn name(i: usize) -> String {
    format!("app-{i:05}")
}

fn managed(manager: &str, operation: &str, subresource: Option<&str>, fields: Value) -> Value {
    let mut entry = json!({"manager": manager, "operation": operation,
                           "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                           "time": "2026-11-30T08:00:00Z", "fieldsType": "FieldsV1",
                           "fieldsV1": fields});
    if let Some(s) = subresource {
        entry["subresource"] = json!(s);
    }
    entry
}

/// A Kustomization as a parent Kustomization applied it and kustomize-controller reconciled it.
fn kustomization(i: usize, retry_interval: Option<&str>, labels: Value) -> Value {
    let (ns, n) = (namespace(i), name(i));
    let inventory: Vec<Value> = (0..INVENTORY)
        .map(|k| json!({"id": format!("{ns}_{n}-{k}_apps_Deployment"), "v": "v1"}))
        .collect();
    let mut labels = labels;
    labels["kustomize.toolkit.fluxcd.io/name"] = json!("flux-system");
    labels["kustomize.toolkit.fluxcd.io/namespace"] = json!("flux-system");
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {
            "namespace": ns, "name": n, "labels": labels, "generation": 1,
            "annotations": {"flux-converger.io/gate": "reconcile"},
            "finalizers": ["finalizers.fluxcd.io"],
            "managedFields": [
                managed("kustomize-controller", "Apply", None, json!({
                    "f:metadata": {"f:annotations": {"f:flux-converger.io/gate": {}},
                                   "f:labels": {"f:kustomize.toolkit.fluxcd.io/name": {}, "f:kustomize.toolkit.fluxcd.io/namespace": {}}},
                    "f:spec": {"f:interval": {}, "f:path": {}, "f:prune": {},
                               "f:sourceRef": {"f:kind": {}, "f:name": {}}, "f:timeout": {}, "f:wait": {}}})),
                managed("kustomize-controller", "Update", None, json!({
                    "f:metadata": {"f:finalizers": {".": {}, "v:\"finalizers.fluxcd.io\"": {}}}})),
                managed("kustomize-controller", "Update", Some("status"), json!({
                    "f:status": {"f:conditions": {}, "f:inventory": {".": {}, "f:entries": {}},
                                 "f:lastAppliedRevision": {}, "f:lastAttemptedRevision": {},
                                 "f:observedGeneration": {}}})),
            ],
        },
        "spec": {"interval": "10m", "retryInterval": retry_interval, "path": format!("./apps/{n}"),
                 "prune": true, "timeout": "3m", "wait": false,
                 "sourceRef": {"kind": "GitRepository", "name": n}},
        "status": {
            "observedGeneration": 1, "lastAppliedRevision": REVISION, "lastAttemptedRevision": REVISION,
            "inventory": {"entries": inventory},
            "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded",
                            "message": format!("Applied revision: {REVISION}"),
                            "observedGeneration": 1, "lastTransitionTime": "2026-11-30T08:00:00Z"}],
        },
    })
}

/// A GitRepository as source-controller leaves it; its artifact is served at `url`.
fn git_repository(i: usize, url: &str) -> Value {
    let (ns, n) = (namespace(i), name(i));
    json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {
            "namespace": ns, "name": n, "generation": 1,
            "finalizers": ["gitrepository.fluxcd.io"],
            "managedFields": [
                {"manager": "kustomize-controller", "operation": "Apply",
                 "apiVersion": "source.toolkit.fluxcd.io/v1", "time": "2026-11-30T08:00:00Z",
                 "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:interval": {}, "f:ref": {"f:branch": {}}, "f:url": {}}}},
                {"manager": "source-controller", "operation": "Update", "subresource": "status",
                 "apiVersion": "source.toolkit.fluxcd.io/v1", "time": "2026-11-30T08:00:00Z",
                 "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:artifact": {".": {}, "f:digest": {}, "f:lastUpdateTime": {},
                              "f:path": {}, "f:revision": {}, "f:size": {}, "f:url": {}},
                              "f:conditions": {}, "f:observedGeneration": {}}}},
            ],
        },
        "spec": {"interval": "1m", "url": format!("https://git.example.com/{ns}/{n}.git"),
                 "ref": {"branch": "main"}, "timeout": "60s"},
        "status": {
            "observedGeneration": 1,
            "artifact": {"url": url, "revision": REVISION,
                         "digest": format!("sha256:{}", "0".repeat(64)),
                         "path": format!("gitrepository/{ns}/{n}/latest.tar.gz"), "size": 1,
                         "lastUpdateTime": "2026-11-30T08:00:00Z"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                            "message": format!("stored artifact for revision '{REVISION}'"),
                            "observedGeneration": 1, "lastTransitionTime": "2026-11-30T08:00:00Z"}],
        },
    })
}

/// The results ConfigMap a leader wrote for Kustomization `i`'s converged revision.
fn results(i: usize) -> anyhow::Result<Value> {
    let mut record = RevisionRecord::new(
        REVISION,
        Trigger::Watch,
        "2026-11-30T08:00:00Z",
        RevisionState::Converged,
        GateMode::Reconcile,
        Some(1),
    );
    record.finished_at = Some("2026-11-30T08:00:03Z".into());
    record.handoff = Some(Handoff {
        mode: GateMode::Reconcile,
        at: "2026-11-30T08:00:02Z".into(),
        action: HandoffAction::ReconcileRequested,
        requested_at: Some("2026-11-30T08:00:02Z".into()),
        resuspended_at: None,
        attempts: Vec::new(),
        retry_at: None,
    });
    record.flux = Some(FluxResult {
        outcome: FluxOutcome::Applied,
        applied_revision: Some(REVISION.into()),
        message: Some(format!("Applied revision: {REVISION}")),
        attempted_revision: None,
    });
    let cm = flux_converger::records::results::to_configmap(
        SERVICE_NS,
        &namespace(i),
        &name(i),
        &[record],
        None,
    )?;
    let mut cm = serde_json::to_value(cm)?;
    cm["apiVersion"] = json!("v1");
    cm["kind"] = json!("ConfigMap");
    Ok(cm)
}

/// Reads `VmRSS` and `VmHWM` of `pid` in MB.
fn memory(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |key: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The requests of `log`, counted by `METHOD resource` (a watch as `WATCH`).
fn by_kind(log: &[&RequestRecord]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in log {
        let parts: Vec<&str> = r.path.split('/').filter(|p| !p.is_empty()).collect();
        // /api/v1/namespaces/ns/configmaps/x, /apis/group/v1/namespaces/ns/plural/x, cluster-wide
        // /apis/group/v1/plural.
        let skip = if parts.first() == Some(&"api") { 2 } else { 3 };
        let rest = &parts[skip.min(parts.len())..];
        let resource = match rest {
            ["namespaces", _, plural, ..] => plural.to_string(),
            [plural, ..] => plural.to_string(),
            [] => r.path.clone(),
        };
        let verb = if r.watch {
            "WATCH".to_string()
        } else {
            r.method.to_string()
        };
        *counts.entry(format!("{verb} {resource}")).or_default() += 1;
    }
    counts
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::new();
    // Serve runs as its service account under the shipped ClusterRole and Role (manifests/),
    // as in a cluster: the access check is answered by its rules reviews.
    if !args.as_admin {
        test_support::rbac_check::install(&fake);
    }
    let n = args.kustomizations;
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SERVICE_NS}}));
    for t in 0..n.div_ceil(PER_NAMESPACE) {
        fake.seed(json!({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": namespace(t * PER_NAMESPACE)}}));
    }
    let closed = port()?;
    let url = |i: usize| {
        format!(
            "http://127.0.0.1:{closed}/gitrepository/{}/{}/latest.tar.gz",
            namespace(i),
            name(i)
        )
    };
    let seeding = Instant::now();
    for i in 0..n {
        let shard = match args.mode {
            Mode::ShardStart if i / PER_NAMESPACE < args.shard => {
                json!({"sharding.fluxcd.io/key": "one"})
            }
            Mode::ShardStart => json!({"sharding.fluxcd.io/key": "two"}),
            _ => json!({}),
        };
        let mut ks = kustomization(i, args.retry_interval.as_deref(), shard);
        if args.retry_interval.is_none()
            && let Some(spec) = ks["spec"].as_object_mut()
        {
            spec.remove("retryInterval");
        }
        fake.seed(ks);
        fake.seed(git_repository(i, &url(i)));
        if matches!(args.mode, Mode::Memory) {
            fake.seed(results(i)?);
        }
    }
    eprintln!("seeded {n} Kustomizations in {:?}", seeding.elapsed());
    let served = fake.serve().await;
    let storage = tempfile::tempdir()?;
    let log_path = match &args.log {
        Some(path) => path.clone(),
        None => storage.path().join("serve.log"),
    };
    let listen = format!("127.0.0.1:{}", port()?);
    let mut command = tokio::process::Command::new(&args.serve);
    command
        .arg("--kubeconfig")
        .arg(&served.kubeconfig)
        .args(["serve", "--namespace", SERVICE_NS, "--listen", &listen])
        .args(["--metrics-addr", &format!("127.0.0.1:{}", port()?)])
        .args(["--allow-unauthenticated-hooks", "--default-gate", "off"])
        .arg("--storage-path")
        .arg(storage.path().join("artifacts"))
        .args(["--storage-addr", &format!("127.0.0.1:{}", port()?)])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path)?)
        .kill_on_drop(true);
    if matches!(args.mode, Mode::ShardStart) {
        command.args(["--watch-label-selector", "sharding.fluxcd.io/key=one"]);
    }
    fake.clear_requests();
    let started = Instant::now();
    let mut child = command.spawn().context("starting serve")?;
    let pid = child.id().context("serve's pid")?;
    let http = reqwest::Client::new();
    let mut peak_while_starting = 0f64;
    loop {
        if let Some((_, hwm)) = memory(pid) {
            peak_while_starting = hwm;
        }
        let ready = http
            .get(format!("http://{listen}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            break;
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!(
                "serve exited before it was ready ({status}); its log: {}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "serve not ready within 10 minutes (its log: {})",
            log_path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ready_after = started.elapsed();
    let at_ready = fake.requests().len();
    println!("mode={:?} kustomizations={n}", args.mode);
    println!("ready_s={:.2}", ready_after.as_secs_f64());
    let (rss, hwm) = memory(pid).unwrap_or_default();
    println!("rss_ready_mb={rss:.1} peak_ready_mb={hwm:.1}");
    let start_log = fake.requests();
    let start_requests: Vec<&RequestRecord> = start_log.iter().take(at_ready).collect();
    println!("start_requests={}", start_requests.len());
    for (kind, count) in by_kind(&start_requests) {
        println!("start {kind}={count}");
    }
    match args.mode {
        Mode::Memory => {
            tokio::time::sleep(Duration::from_secs(args.idle)).await;
            let (rss, hwm) = memory(pid).unwrap_or_default();
            println!(
                "rss_idle_mb={rss:.1} peak_mb={hwm:.1} (peak while starting {peak_while_starting:.1})"
            );
        }
        Mode::FailingLoad => {
            let from = fake.requests().len();
            tokio::time::sleep(Duration::from_secs(args.window)).await;
            let log = fake.requests();
            let window: Vec<&RequestRecord> = log.iter().skip(from).collect();
            println!(
                "window_s={} requests={} requests_per_s={:.1}",
                args.window,
                window.len(),
                window.len() as f64 / args.window as f64
            );
            for (kind, count) in by_kind(&window) {
                println!("window {kind}={count}");
            }
            let body = http
                .get(format!("http://{listen}/status"))
                .send()
                .await?
                .bytes()
                .await?;
            let status: Value = serde_json::from_slice(&body)?;
            let rows = status["kustomizations"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let failed = rows
                .iter()
                .filter(|r| r["last"]["state"] == "failed")
                .count();
            let attempts: u64 = rows
                .iter()
                .map(|r| r["last"]["attempts"].as_u64().unwrap_or(1))
                .sum();
            println!("failed={failed} attempts_total={attempts}");
            let (rss, hwm) = memory(pid).unwrap_or_default();
            println!("rss_mb={rss:.1} peak_mb={hwm:.1}");
        }
        Mode::ShardStart => {
            let (rss, hwm) = memory(pid).unwrap_or_default();
            println!("rss_mb={rss:.1} peak_mb={hwm:.1}");
        }
    }
    drop(child);
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let warn = text.lines().filter(|l| l.contains(" WARN ")).count();
    let info = text.lines().filter(|l| l.contains(" INFO ")).count();
    println!("log_lines={} warn={warn} info={info}", text.lines().count());
    Ok(())
}
