//! The service's side of `SERVICE=1 hack/converge-wire.sh`: one converge with the caches the
//! service keeps warm (StorageClass reflector, intents watch, StatefulSet watch, the server's
//! "forbidden in place" remembered), timed from its first request to its report, the way a run
//! of `serve` converges. A first converge (`--warm`) fills the caches and the connection pool;
//! the second (`--desired`) is the one timed, printed in milliseconds on stdout.
//!
//! ```sh
//! cargo run --release --example service-converge -- --kubeconfig KC --warm 2gi.yaml --desired 3gi.yaml
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use clap::Parser;
use flux_converger::cluster::{KubeCluster, WatchedStatefulSets};
use flux_converger::converge::{Options, Outcome, converge};
use flux_converger::journal::ConfigMapJournal;
use flux_converger::journal::watched::{IntentCache, WatchedJournal};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::{WatchStreamExt as _, reflector, watcher};

#[derive(Parser)]
#[command(about = "One converge with the service's caches warm, timed (hack/converge-wire.sh)")]
struct Args {
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The converge that warms the caches (not timed).
    #[arg(long)]
    warm: PathBuf,
    /// The converge that is timed.
    #[arg(long)]
    desired: PathBuf,
}

/// Until both watches have listed and the StatefulSet watch holds `name` (with `uid`, when
/// given), polled every 5 ms for up to 5 s.
async fn settle(
    intents: &IntentCache,
    statefulsets: &WatchedStatefulSets,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> anyhow::Result<()> {
    for _ in 0..1000 {
        let held = statefulsets
            .get(namespace, name)
            .is_some_and(|s| uid.is_none_or(|u| s.metadata.uid.as_deref() == Some(u)));
        if intents.is_synced() && held {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    anyhow::bail!("the caches did not settle")
}

fn read(path: &PathBuf) -> anyhow::Result<StatefulSet> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    Ok(serde_saphyr::from_str(&text)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // `RUST_LOG=flux_converger::wire=debug` traces each request (stderr).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    flux_converger::tls::install_crypto_provider();
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = flux_converger::wire::kube_client(config)?;
    let (warm, desired) = (read(&args.warm)?, read(&args.desired)?);
    let (namespace, name) = (
        desired
            .metadata
            .namespace
            .clone()
            .unwrap_or("default".into()),
        desired
            .metadata
            .name
            .clone()
            .context("desired without a name")?,
    );

    let (classes, writer) = reflector::store();
    let api: kube::Api<StorageClass> = kube::Api::all(client.clone());
    tokio::spawn(
        reflector(writer, watcher(api, watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    classes.wait_until_ready().await?;
    let (intents, watch) = IntentCache::watch(client.clone(), &namespace);
    tokio::spawn(watch);
    let (statefulsets, watch) = WatchedStatefulSets::watch(
        client.clone(),
        flux_converger::flux::objects::OWNER_NAME_LABEL,
    );
    tokio::spawn(watch);
    let cluster = KubeCluster::new(client.clone(), Duration::from_secs(10))
        .with_storage_classes(classes)
        .with_statefulsets(statefulsets.clone());
    let journal = WatchedJournal::new(
        ConfigMapJournal::new(client, &namespace, Duration::from_secs(10)),
        Some(intents.clone()),
    );
    let options = Options::default();

    // Warm: every cache synced and holding the object, then the first converge.
    settle(&intents, &statefulsets, &namespace, &name, None).await?;
    let first = converge(&cluster, &journal, &warm, &options).await?;
    ensure!(first.outcome == Outcome::Converged, "warm-up: {first:?}");
    settle(
        &intents,
        &statefulsets,
        &namespace,
        &name,
        first.new_uid.as_deref(),
    )
    .await?;
    // The intent's clear seen by the watch too: the load is then answered from it.
    tokio::time::sleep(Duration::from_millis(50)).await;

    tracing::info!("timed converge starts");
    let t = Instant::now();
    let report = converge(&cluster, &journal, &desired, &options).await?;
    let took = t.elapsed();
    ensure!(
        report.outcome == Outcome::Converged && report.recreated,
        "{report:?}"
    );
    println!("{:.3}", took.as_secs_f64() * 1000.0);
    Ok(())
}
