//! `cargo run --release --example demo`: the whole product on loopback, with no cluster.
//!
//! Starts the in-repo fake kube-apiserver with its controllers (StatefulSets, pods, the
//! garbage collector; Flux's kinds served), stand-ins for source-controller (a local artifact
//! server with a git-like history), kustomize-controller and notification-controller, a volume
//! provisioner/resizer, and `serve` itself through `service::start`, as `flux-converger serve`
//! runs it, with its artifact storage. Then it walks five revisions (applied, grown in steps,
//! refused, grown past what the driver allows, recovered by a revert)
//! through two Kustomizations at once: `apps` behind the `suspend` gate (or `--gate reconcile`)
//! and `cache` behind the `artifact` gate (it reads an ExternalArtifact the converger publishes
//! only once converged). Then an Argo CD walk beside them (examples/demo/argocd.rs): an Argo CD
//! Application on Argo CD's stand-ins (its application-controller and its API server's
//! managed-resources endpoint), whose sync stops on a grown StatefulSet and is converged and
//! handed back, then refused a shrink. Each step is checked against the cluster and `/status`;
//! then it prints the dashboard's URL and serves until Ctrl-C.
//!
//! An example and not a `demo` subcommand: the fake API server is test code (`crates/fake-apiserver`,
//! built on dev-dependencies such as hyper), and it must never ship in the release binary.

mod argocd;
mod cluster;
mod progress;
mod scenario;
mod status;
mod volumes;
mod walk;

use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::render::KustomizeCommand;
use flux_converger::flux::render::resolve::Resolver;
use flux_converger::model::GateMode;
use flux_converger::service::application::ArgoCdConfig;
use flux_converger::service::{self, Config};
use flux_converger::storage::StorageConfig;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

use fake_apiserver::FakeApiServer;
use progress::Progress;
use scenario::{CACHE, EXTERNAL_ARTIFACT, FLUX_NS, HMAC_KEY, SOURCE, WEB};
use test_support::flux_standin::{
    ArtifactServer, GitSource, KustomizeController, KustomizeOptions, create_kustomization,
    external_artifact_resource, kustomization,
};

#[derive(Parser)]
#[command(
    about = "flux-converger's whole loop on loopback: a fake API server, Flux stand-ins and `serve`"
)]
struct Args {
    /// Exit after the walk (0 only when every step was observed); for CI.
    #[arg(long)]
    no_wait: bool,
    /// Where `serve` listens (dashboard, /status, /hook); loopback only.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where `serve` answers /metrics (a port of its own, as in a cluster); loopback only.
    #[arg(long, default_value = "127.0.0.1:0")]
    metrics_addr: SocketAddr,
    /// The hand-off `apps` asks for (`flux-converger.io/gate`); `cache` always walks the
    /// artifact gate.
    #[arg(long, default_value = "suspend", value_parser = parse_gate)]
    gate: GateMode,
    /// How long each step may take before it counts as not happened.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    step_timeout: Duration,
}

fn parse_gate(text: &str) -> Result<GateMode, String> {
    match GateMode::parse(text) {
        Some(GateMode::Off | GateMode::Artifact) | None => Err(format!(
            "{text}: expected suspend or reconcile (the artifact gate is walked in every run, by flux-system/cache)"
        )),
        Some(gate) => Ok(gate),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("demo: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.listen.ip().is_loopback(),
        "--listen {}: the demo serves on loopback only",
        args.listen
    );
    flux_converger::tls::install_crypto_provider();
    let mut p = Progress::new();
    p.section("flux-converger demo: the whole loop on loopback, no cluster");

    // The cluster: API server, its controllers, storage.
    // A 1.32 server: a failed expansion can be recovered from (RecoverVolumeExpansionFailure).
    let fake = FakeApiServer::with_version(fake_apiserver::KubeVersion::V1_32);
    fake.seed_yaml(include_str!(
        "../../tests/fixtures/v1.28/storageclasses.yaml"
    ));
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": FLUX_NS, "labels": {"kubernetes.io/metadata.name": FLUX_NS}}}));
    fake.enable_statefulset_controller();
    fake.set_pods_ready(true);
    let served = fake.serve().await;
    let kubeconfig = kube::config::Kubeconfig::read_from(&served.kubeconfig)
        .context("reading the fake API server's kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("kube config for the fake API server")?;
    let client = kube::Client::try_from(config).context("kube client")?;
    let _volumes = AbortOnDrop(volumes::start(fake.clone()));
    p.did(&format!(
        "kube-apiserver (in-repo fake, {}) on {}, with the StatefulSet controller, garbage collector, a provisioner and a CSI resizer stand-in; Flux's kinds served",
        fake.version().git_version(),
        served.url
    ));

    // Flux.
    let artifacts = ArtifactServer::start().await;
    let source = GitSource::create(client.clone(), artifacts.clone(), FLUX_NS, SOURCE).await?;
    let suspended = args.gate == GateMode::Suspend;
    create_kustomization(
        &client,
        &kustomization(
            FLUX_NS,
            WEB.kustomization,
            SOURCE,
            WEB.path,
            Some(args.gate.as_str()),
            suspended,
        ),
    )
    .await?;
    // The artifact gate: an ExternalArtifact naming the same GitRepository as its upstream (as
    // the user declares it in git), and a Kustomization reading it.
    create_external_artifact(&client).await?;
    let mut cache = kustomization(
        FLUX_NS,
        CACHE.kustomization,
        SOURCE,
        CACHE.path,
        Some(GateMode::Artifact.as_str()),
        false,
    );
    cache["spec"]["sourceRef"] = json!({"kind": "ExternalArtifact", "name": EXTERNAL_ARTIFACT});
    create_kustomization(&client, &cache).await?;
    let kustomize_controller = KustomizeController::start(
        client.clone(),
        KustomizeOptions {
            resolver: resolver(client.clone())?,
            namespace: Some(FLUX_NS.to_string()),
            retry_interval: Duration::from_secs(2),
        },
    );
    p.did(&format!(
        "source-controller stand-in serving artifacts on http://{}; GitRepository {FLUX_NS}/{SOURCE}",
        artifacts.addr
    ));
    p.did(&format!(
        "kustomize-controller stand-in (following ExternalArtifacts, as with --feature-gates=ExternalArtifact=true); Kustomization {FLUX_NS}/{} (path {}, flux-converger.io/gate: {}{})",
        WEB.kustomization,
        WEB.path,
        args.gate,
        if suspended { ", suspended" } else { "" }
    ));
    p.did(&format!(
        "ExternalArtifact {FLUX_NS}/{EXTERNAL_ARTIFACT} (spec.sourceRef GitRepository {SOURCE}, no artifact yet); Kustomization {FLUX_NS}/{} (path {}, spec.sourceRef ExternalArtifact {EXTERNAL_ARTIFACT}, flux-converger.io/gate: artifact)",
        CACHE.kustomization, CACHE.path
    ));

    // Argo CD, beside Flux.
    let argo = argocd::start(&fake, &client).await?;
    argo.describe(&p);

    // The converger, as `flux-converger serve` starts it, with its artifact storage (a
    // directory that exists, a port chosen first so the advertised address is right).
    let storage_dir = tempfile::tempdir().context("artifact storage directory")?;
    let storage_addr = free_port().context("a free port for the artifact server")?;
    let storage = StorageConfig {
        path: Some(storage_dir.path().to_path_buf()),
        addr: storage_addr,
        adv_addr: storage_addr.to_string(),
        ..StorageConfig::default()
    };
    let running = service::start(
        service_config(&args, storage, argo.config.clone()),
        client.clone(),
    )
    .await
    .context("starting the service")?;
    let api = status::ServiceApi::new(running.addr);
    let ready = api.ready(args.step_timeout).await;
    p.check(
        ready.is_ok(),
        &format!("flux-converger serve on http://{} is ready", running.addr),
        || ready.clone().err().unwrap_or_default(),
    );
    p.check(
        running.storage_addr == Some(storage_addr),
        &format!(
            "its artifact server on http://{storage_addr} (--storage-path {}, --storage-adv-addr {storage_addr})",
            storage_dir.path().display()
        ),
        || format!("storage address {:?}", running.storage_addr),
    );
    p.detail("notification-controller stand-in posts generic-hmac signed events to /hook");

    let world = walk::World {
        fake: fake.clone(),
        source,
        service: api.clone(),
        gate: args.gate,
        timeout: args.step_timeout,
        flux: kustomize_controller,
        resizer: volumes::Resizer::new(client.clone(), "csi.demo.example.com"),
    };
    if ready.is_ok() {
        walk::walk(&world, &mut p).await;
        argocd::walk(
            &argocd::World {
                fake: &fake,
                argo: &argo,
                service: &api,
                resizer: &world.resizer,
                timeout: args.step_timeout,
            },
            &mut p,
        )
        .await;
        walk::never_deleted(&fake, &mut p);
    }

    p.section("see it yourself");
    let dashboard = api.head("/").await;
    p.check(
        matches!(&dashboard, Ok((200, t)) if t.starts_with("text/html")),
        &format!("dashboard:  {}", api.url("/")),
        || format!("{dashboard:?}"),
    );
    let page = format!("/applications/{}/{}", argocd::ARGO_NS, argocd::APP);
    let application_page = api.head(&page).await;
    p.check(
        matches!(&application_page, Ok((200, t)) if t.starts_with("text/html")),
        &format!("its Application page: {}", api.url(&page)),
        || format!("{application_page:?}"),
    );
    for ks in [WEB.kustomization, CACHE.kustomization] {
        p.did(&format!(
            "status:     curl {}",
            api.url(&format!("/status/{FLUX_NS}/{ks}"))
        ));
    }
    p.did(&format!(
        "status:     curl {}",
        api.url(&format!(
            "/status/applications/{}/{}",
            argocd::ARGO_NS,
            argocd::APP
        ))
    ));
    p.did(&format!(
        "metrics:    curl http://{}/metrics",
        running.metrics_addr
    ));
    p.did(&format!(
        "cluster:    kubectl --kubeconfig {} get statefulsets,pods,pvc,kustomizations,externalartifacts,applications -A",
        served.kubeconfig.display()
    ));
    let failures = p.failures().to_vec();
    if failures.is_empty() {
        println!("\nevery step happened as described.");
    } else {
        println!("\n{} step(s) did not happen:", failures.len());
        for f in &failures {
            println!("  - {f}");
        }
    }
    if !args.no_wait {
        println!("serving until Ctrl-C …");
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
    }
    running.shutdown().await;
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn resolver(client: kube::Client) -> anyhow::Result<Resolver> {
    Ok(Resolver {
        client,
        fetcher: Fetcher::new(FetchOptions::default())?,
        kustomize: KustomizeCommand::default(),
        strict: true,
        allow_cross_namespace: true,
    })
}

/// A loopback port free now (bound, read, released), so `--storage-adv-addr` can name it.
fn free_port() -> std::io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// The ExternalArtifact `cache`, as the user declares it in git: its upstream is the demo's
/// GitRepository; its status is the converger's to write.
async fn create_external_artifact(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), FLUX_NS, &external_artifact_resource());
    let object = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "ExternalArtifact",
        "metadata": {"name": EXTERNAL_ARTIFACT, "namespace": FLUX_NS},
        "spec": {"sourceRef": {"apiVersion": "source.toolkit.fluxcd.io/v1",
                               "kind": "GitRepository", "name": SOURCE}},
    });
    api.patch(
        EXTERNAL_ARTIFACT,
        &PatchParams::apply("flux").force(),
        &Patch::Apply(&object),
    )
    .await
    .with_context(|| format!("creating ExternalArtifact {FLUX_NS}/{EXTERNAL_ARTIFACT}"))?;
    Ok(())
}

/// What `flux-converger serve` would build from its flags for this cluster: the defaults,
/// but the webhook key, loopback ports, one replica (no leader election), short waits, the
/// artifact storage and the `--argocd-*` flags naming Argo CD's stand-ins.
fn service_config(args: &Args, storage: StorageConfig, argocd: ArgoCdConfig) -> Config {
    Config::builder(FLUX_NS)
        .listen(args.listen)
        .metrics_addr(args.metrics_addr)
        .hmac_key(Some(HMAC_KEY.to_vec()))
        .resync(Duration::from_secs(30))
        .handoff_timeout(args.step_timeout)
        .call_timeout(Duration::from_secs(10))
        .storage(storage)
        .argocd(Some(argocd))
        .build()
}

/// Stops a background task with the demo.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
