//! Measures the time from a webhook to the start of its run while many Kustomizations fail
//! (issue 18, item 2), against a running `flux-converger serve` and the fake API server. Driven
//! by `hack/queue-fairness.sh`, which starts both; any `serve` binary can be measured, so the
//! same script gives the figure before and after a change.
//!
//! 1. A healthy Kustomization (its GitRepository served by an artifact server in this process)
//!    is created and its first revision waited for.
//! 2. `--failing` Kustomizations are created whose GitRepositories point at an artifact URL on
//!    a closed local port: every run of theirs fails, and they keep coming back.
//! 3. After `--settle`, the healthy source publishes a second revision and `/hook` gets its
//!    webhook; then one failing Kustomization that already failed (so waits on its backoff)
//!    gets a webhook too. Each time is from just before the POST to the `startedAt` of the
//!    record the run writes (read from `/status`), so polling adds nothing to it.
//!
//! Prints one `key=value` line per figure; a run that did not start within `--timeout` is
//! reported as `>TIMEOUT`.

use test_support::flux_standin;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use flux_converger::flux::event::{Event, InvolvedObject};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use flux_standin::{
    ArtifactServer, GitSource, create_kustomization, git_repository_resource, kustomization,
    kustomization_resource,
};

#[derive(Parser)]
#[command(about = "Time from webhook to run start with many failing Kustomizations")]
struct Args {
    /// The fake API server's kubeconfig (`fake-apiserver --kubeconfig-out`).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The service's `--listen` address, e.g. `http://127.0.0.1:9292`.
    #[arg(long)]
    service: String,
    /// Kustomizations whose artifact cannot be downloaded.
    #[arg(long, default_value_t = 1000)]
    failing: usize,
    /// The Kustomizations' namespace.
    #[arg(long, default_value = "flux-system")]
    namespace: String,
    /// How long the failing ones run before the webhooks (seconds).
    #[arg(long, default_value_t = 20)]
    settle: u64,
    /// How long a run may take to start before it is reported as not started (seconds).
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    flux_converger::tls::install_crypto_provider();
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = kube::Client::try_from(config)?;
    let http = reqwest::Client::new();
    let ns = args.namespace.as_str();
    let timeout = Duration::from_secs(args.timeout);

    // 1. The healthy one, first: it must have converged once before the failing ones arrive.
    let source =
        GitSource::create(client.clone(), ArtifactServer::start().await, ns, "healthy").await?;
    let r1 = source
        .publish("one", &[("apps/settings.yaml", &config_map(1))])
        .await?;
    create_kustomization(
        &client,
        &kustomization(ns, "healthy", "healthy", "./apps", None, false),
    )
    .await?;
    let start = Instant::now();
    while newest(&http, &args.service, ns, "healthy")
        .await
        .is_none_or(|r| r["revision"] != json!(r1.revision) || r["state"] == json!("running"))
    {
        anyhow::ensure!(
            start.elapsed() < timeout,
            "the healthy revision never finished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("healthy {} finished", r1.revision);

    // 2. The failing ones.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?.port()
    };
    seed_failing(&client, ns, args.failing, port).await?;
    eprintln!(
        "{} failing Kustomizations created; settling {} s",
        args.failing, args.settle
    );
    tokio::time::sleep(Duration::from_secs(args.settle)).await;
    let failed = count_failed(&http, &args.service).await;
    println!("failing={} failed_once_or_more={failed}", args.failing);

    // 3a. A new healthy revision and its webhook.
    let r2 = source
        .publish("two", &[("apps/settings.yaml", &config_map(2))])
        .await?;
    let at = jiff::Timestamp::now();
    post_hook(&http, &args.service, event("GitRepository", ns, "healthy")).await?;
    let started = wait_started(&http, &args.service, ns, "healthy", timeout, |r| {
        r["revision"] == json!(r2.revision)
    })
    .await;
    report("healthy_webhook_to_run_start", at, started, timeout);

    // 3b. A webhook for a failing Kustomization that failed before and waits on its backoff.
    let name = format!("failing-{:04}", args.failing / 2);
    let at = jiff::Timestamp::now();
    post_hook(&http, &args.service, event("Kustomization", ns, &name)).await?;
    let started = wait_started(&http, &args.service, ns, &name, timeout, |r| {
        started_at(r).is_some_and(|t| t >= at)
    })
    .await;
    report("failing_webhook_to_run_start", at, started, timeout);
    Ok(())
}

fn config_map(revision: u32) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: default\ndata:\n  revision: \"{revision}\"\n"
    )
}

async fn seed_failing(
    client: &kube::Client,
    ns: &str,
    count: usize,
    port: u16,
) -> anyhow::Result<()> {
    let sources: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &git_repository_resource());
    let kustomizations: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kustomization_resource());
    for i in 0..count {
        let name = format!("failing-{i:04}");
        let source: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"namespace": ns, "name": name},
            "spec": {"url": "https://git.example.com/failing.git", "interval": "1m"},
        }))?;
        sources.create(&PostParams::default(), &source).await?;
        let status = json!({"status": {"artifact": {
            "url": format!("http://127.0.0.1:{port}/gitrepository/{ns}/{name}/1.tar.gz"),
            "revision": "main@sha1:1111111111111111111111111111111111111111",
            "digest": format!("sha256:{}", "0".repeat(64)), "path": "x", "size": 1,
            "lastUpdateTime": "2026-01-01T00:00:00Z"}}});
        sources
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        let ks: DynamicObject =
            serde_json::from_value(kustomization(ns, &name, &name, "./", None, false))?;
        kustomizations.create(&PostParams::default(), &ks).await?;
    }
    Ok(())
}

fn event(kind: &str, ns: &str, name: &str) -> Event {
    Event {
        involved_object: InvolvedObject {
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        },
        severity: "info".into(),
        message: "queue-fairness".into(),
        reason: "Progressing".into(),
        ..Default::default()
    }
}

async fn post_hook(http: &reqwest::Client, service: &str, event: Event) -> anyhow::Result<()> {
    let response = http
        .post(format!("{service}/hook"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&event)?)
        .send()
        .await?;
    anyhow::ensure!(
        response.status().is_success(),
        "/hook answered {}",
        response.status()
    );
    Ok(())
}

/// The newest record of one Kustomization, from `/status/{ns}/{name}`.
async fn newest(http: &reqwest::Client, service: &str, ns: &str, name: &str) -> Option<Value> {
    let bytes = http
        .get(format!("{service}/status/{ns}/{name}"))
        .send()
        .await
        .ok()?
        .bytes()
        .await
        .ok()?;
    let body: Value = serde_json::from_slice(&bytes).ok()?;
    body["revisions"].get(0).cloned()
}

async fn count_failed(http: &reqwest::Client, service: &str) -> usize {
    let Ok(response) = http.get(format!("{service}/status")).send().await else {
        return 0;
    };
    let bytes = response.bytes().await.unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let rows = body
        .get("kustomizations")
        .or(Some(&body))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    rows.iter()
        .filter(|row| row["last"]["state"] == json!("failed"))
        .count()
}

fn started_at(record: &Value) -> Option<jiff::Timestamp> {
    record["startedAt"].as_str()?.parse().ok()
}

/// The `startedAt` of the first newest record that `matches`, or `None` after `timeout`.
async fn wait_started(
    http: &reqwest::Client,
    service: &str,
    ns: &str,
    name: &str,
    timeout: Duration,
    matches: impl Fn(&Value) -> bool,
) -> Option<jiff::Timestamp> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(record) = newest(http, service, ns, name).await
            && matches(&record)
        {
            return started_at(&record);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

fn report(figure: &str, at: jiff::Timestamp, started: Option<jiff::Timestamp>, timeout: Duration) {
    match started {
        Some(t) => {
            let ms = t.duration_since(at).as_secs_f64() * 1000.0;
            println!("{figure}_ms={ms:.0}");
        }
        None => println!("{figure}_ms=>{}", timeout.as_millis()),
    }
}
