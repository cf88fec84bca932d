//! The fake kube-apiserver of the tests, on its own: for manual experiments with kubectl and
//! for comparing it with a real cluster request by request.
//!
//! ```sh
//! cargo run --example fake-apiserver -- --listen 127.0.0.1:8080 --kubeconfig-out /tmp/fake.kubeconfig --controllers
//! kubectl --kubeconfig /tmp/fake.kubeconfig get statefulsets -A
//! ```
//! Every request is printed on stderr (method, path, query, field manager, dry run).
//! `--tls` serves HTTPS with a self-signed certificate (written into the kubeconfig), as a real
//! API server does: the wire of a TLS client (handshakes, records, Nagle) shows only then.
//! `--quiet` prints no request (for timing runs, `hack/converge-wire.sh`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use fake_apiserver::{FakeApiServer, KubeVersion};

#[derive(Parser)]
#[command(about = "Fake kube-apiserver (test double of flux-converger)")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Where to write a kubeconfig pointing at the server.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Run the simulated StatefulSet controller.
    #[arg(long)]
    controllers: bool,
    /// Kubernetes minor version to emulate (28, 32 or 36).
    #[arg(long, default_value_t = 28)]
    minor: u32,
    /// YAML files to seed (multi-document; e.g. the fixtures).
    #[arg(long)]
    seed: Vec<PathBuf>,
    /// Authorize requests without impersonation as this user against the seeded RBAC objects
    /// (e.g. `system:serviceaccount:flux-system:flux-converger`) instead of as the admin.
    #[arg(long)]
    authorize_default_as: Option<String>,
    /// Serve HTTPS with a self-signed certificate for localhost and 127.0.0.1 (trusted by the
    /// kubeconfig written with --kubeconfig-out).
    #[arg(long)]
    tls: bool,
    /// Milliseconds the simulated garbage collector takes to finish an orphan delete (default:
    /// the fake's own, ~0.15 s as measured on a real one). 0 isolates the wire in timing runs.
    #[arg(long)]
    orphan_gc_ms: Option<u64>,
    /// Print no request.
    #[arg(long)]
    quiet: bool,
    /// StatefulSets (one per file) to create through the server (a server-side apply by
    /// `kustomize-controller`, defaulted as a real creation is), after the seed.
    #[arg(long)]
    apply: Vec<PathBuf>,
    /// Set these StatefulSet claims (`NAMESPACE/NAME`) Bound once the controller has made them.
    #[arg(long)]
    bind: Vec<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let Some(version) = KubeVersion::of_minor(args.minor) else {
        anyhow::bail!("--minor {}: only 28, 32 and 36 are emulated", args.minor);
    };
    let fake = FakeApiServer::with_version(version);
    for file in &args.seed {
        let yaml = std::fs::read_to_string(file)
            .with_context(|| format!("reading seed file {}", file.display()))?;
        fake.seed_yaml(&yaml);
    }
    if args.controllers {
        fake.enable_statefulset_controller();
    }
    if let Some(ms) = args.orphan_gc_ms {
        fake.set_orphan_gc(fake_apiserver::GcMode::After(Duration::from_millis(ms)));
    }
    if let Some(user) = &args.authorize_default_as {
        fake.authorize_default_as(user);
    }
    for file in &args.apply {
        apply_statefulsets(&fake, file).await?;
    }
    if !args.bind.is_empty() {
        bind_when_made(&fake, &args.bind).await?;
    }
    let served = fake
        .serve_on_with(&args.listen, args.tls)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    if let Some(out) = &args.kubeconfig_out {
        std::fs::copy(&served.kubeconfig, out)
            .with_context(|| format!("writing kubeconfig {}", out.display()))?;
    }
    eprintln!(
        "fake kube-apiserver {} listening on {}",
        version_name(version),
        served.url
    );

    let mut seen = 0;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let log = fake.requests();
        if args.quiet {
            continue;
        }
        for r in &log[seen..] {
            eprintln!(
                "{} {}{}{} manager={} dryRun={} -> {}",
                r.method,
                r.path,
                if r.query.is_empty() { "" } else { "?" },
                r.query,
                r.field_manager.as_deref().unwrap_or("-"),
                r.dry_run,
                r.code.map_or("…".to_string(), |c| c.to_string()),
            );
        }
        seen = log.len();
    }
    drop(served);
    Ok(())
}

/// Creates each StatefulSet of `file` as Flux would (server-side apply, field manager
/// `kustomize-controller`), through the fake's own handler.
async fn apply_statefulsets(fake: &FakeApiServer, file: &PathBuf) -> anyhow::Result<()> {
    use flux_converger::cluster::{Cluster as _, KubeCluster};
    let yaml =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let cluster = KubeCluster::new(fake.client(), Duration::from_secs(5));
    let sts: k8s_openapi::api::apps::v1::StatefulSet = serde_saphyr::from_str(&yaml)
        .with_context(|| format!("--apply {}: one StatefulSet", file.display()))?;
    cluster
        .apply(&sts)
        .await
        .with_context(|| format!("--apply {}", file.display()))?;
    Ok(())
}

/// Waits for the StatefulSet controller to make each claim, then marks it Bound.
async fn bind_when_made(fake: &FakeApiServer, claims: &[String]) -> anyhow::Result<()> {
    let mut named = Vec::with_capacity(claims.len());
    for claim in claims {
        named.push(
            claim
                .split_once('/')
                .with_context(|| format!("--bind {claim:?}: expected NAMESPACE/NAME"))?,
        );
    }
    fake.bind_when_made(named)
        .await
        .map_err(|claim| anyhow::anyhow!("--bind {claim}: the claim was never made"))
}

fn version_name(v: KubeVersion) -> &'static str {
    v.git_version()
}
