//! `flux-converger serve`: flags → [`Config`] → start → wait for SIGTERM/SIGINT → graceful
//! shutdown. Every flag is also `FLUX_CONVERGER_<FLAG>`, so a Deployment can set them from a
//! ConfigMap. `--namespace` is the global `-n/--namespace` (where results, intents and the
//! Lease live); `--kubeconfig` and `--context` are the global ones too.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::ValueEnum;
use flux_converger::flux::render::{DEFAULT_KUSTOMIZE, KustomizeCommand};
use flux_converger::service::record::GateMode;
use flux_converger::service::{self, Config};

use super::{Exit, KubeArgs, bad_input};

/// The namespace file of the pod's service account.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Where Flux itself runs; the service runs next to it.
const DEFAULT_NAMESPACE: &str = "flux-system";

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum DefaultGate {
    Suspend,
    Reconcile,
    Off,
}

impl From<DefaultGate> for GateMode {
    fn from(gate: DefaultGate) -> Self {
        match gate {
            DefaultGate::Suspend => GateMode::Suspend,
            DefaultGate::Reconcile => GateMode::Reconcile,
            DefaultGate::Off => GateMode::Off,
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address of every HTTP endpoint (`/hook`, `/status`, the dashboard, probes, `/metrics`).
    #[arg(long, default_value = "0.0.0.0:8080", env = "FLUX_CONVERGER_LISTEN")]
    listen: SocketAddr,
    /// File holding the `generic-hmac` key (raw bytes, as the Provider's Secret `token`).
    #[arg(long, value_name = "FILE", env = "FLUX_CONVERGER_HMAC_KEY_FILE")]
    hmac_key_file: Option<PathBuf>,
    /// File holding the bearer token `/hook` requires.
    #[arg(long, value_name = "FILE", env = "FLUX_CONVERGER_HOOK_TOKEN_FILE")]
    hook_token_file: Option<PathBuf>,
    /// Gate of Kustomizations without the `flux-converger.io/gate` annotation (`off`: opt-in).
    #[arg(long, value_enum, default_value_t = DefaultGate::Off, env = "FLUX_CONVERGER_DEFAULT_GATE")]
    default_gate: DefaultGate,
    /// Only Kustomizations matching this label selector (Flux's sharding flag).
    #[arg(
        long,
        value_name = "SELECTOR",
        env = "FLUX_CONVERGER_WATCH_LABEL_SELECTOR"
    )]
    watch_label_selector: Option<String>,
    /// Revisions handled at once (one per Kustomization at a time).
    #[arg(long, default_value_t = 2, env = "FLUX_CONVERGER_WORKERS")]
    workers: usize,
    /// How often every handled Kustomization is compared with its last finished revision.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration, env = "FLUX_CONVERGER_RESYNC")]
    resync: Duration,
    /// How long to wait for Flux to apply a handed-off revision.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration, env = "FLUX_CONVERGER_HANDOFF_TIMEOUT")]
    handoff_timeout: Duration,
    /// Bounds every API call.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, env = "FLUX_CONVERGER_TIMEOUT")]
    timeout: Duration,
    /// Elect a leader among replicas with a Lease in `--namespace`; only it converges.
    #[arg(long, env = "FLUX_CONVERGER_LEADER_ELECT")]
    leader_elect: bool,
    /// Refuse source references to another namespace (kustomize-controller's flag).
    #[arg(long, env = "FLUX_CONVERGER_NO_CROSS_NAMESPACE_REFS")]
    no_cross_namespace_refs: bool,
    /// Service account impersonated for Kustomizations without `spec.serviceAccountName`.
    #[arg(
        long,
        value_name = "SA",
        env = "FLUX_CONVERGER_DEFAULT_SERVICE_ACCOUNT"
    )]
    default_service_account: Option<String>,
    /// notification-controller's event address (Flux's `--events-addr`).
    #[arg(long, value_name = "URL", env = "FLUX_CONVERGER_EVENTS_ADDR")]
    events_addr: Option<String>,
    /// The kustomize build command.
    #[arg(long, value_name = "CMD", default_value = DEFAULT_KUSTOMIZE, env = "FLUX_CONVERGER_KUSTOMIZE")]
    kustomize: String,
    #[command(flatten)]
    build: super::build_limits::BuildLimitArgs,
    // Last: its help heading covers only its own flags. The same caps as `render`, so one
    // tenant's artifact cannot exhaust the service's memory (an OOM-kill loop for every tenant).
    #[command(flatten)]
    limits: super::artifact_limits::ArtifactLimitArgs,
}

/// The namespace of results, intents and the Lease: `-n`, else the pod's, else `flux-system`.
fn namespace(flag: Option<&str>, service_account_file: &Path) -> String {
    if let Some(ns) = flag.filter(|ns| !ns.is_empty()) {
        return ns.to_string();
    }
    std::fs::read_to_string(service_account_file)
        .ok()
        .map(|text| text.trim().to_string())
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string())
}

fn read_secret(path: &Path, flag: &str) -> anyhow::Result<Vec<u8>> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("{flag} {}: cannot read", path.display()))
        .map_err(bad_input)?;
    if bytes.is_empty() {
        return Err(bad_input(anyhow::anyhow!(
            "{flag} {}: the file is empty",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Builds the service's configuration; every mistake is bad input (exit 2), found before any
/// client is built.
fn config(args: &Args, kube: &KubeArgs) -> anyhow::Result<Config> {
    // The HMAC key is used as stored (a trailing newline is part of it, as Flux signs).
    let hmac_key = match &args.hmac_key_file {
        Some(path) => Some(read_secret(path, "--hmac-key-file")?),
        None => None,
    };
    // A bearer token never carries the newline an editor adds.
    let hook_token = match &args.hook_token_file {
        Some(path) => {
            let bytes = read_secret(path, "--hook-token-file")?;
            let text = String::from_utf8(bytes)
                .map_err(|_| bad_input(anyhow::anyhow!("--hook-token-file: not UTF-8")))?;
            Some(text.trim_end_matches(['\r', '\n']).to_string())
        }
        None => None,
    };
    if args.workers == 0 {
        return Err(bad_input(anyhow::anyhow!("--workers must be at least 1")));
    }
    if args.resync.is_zero() {
        return Err(bad_input(anyhow::anyhow!("--resync must be positive")));
    }
    let kustomize = KustomizeCommand::parse(&args.kustomize)
        .map_err(|e| bad_input(anyhow::anyhow!("--kustomize: {e}")))?;
    let kustomize = args
        .build
        .apply(kustomize, args.limits.max_unpacked_size)
        .map_err(|e| bad_input(anyhow::anyhow!(e)))?;
    if let Some(addr) = &args.events_addr {
        reqwest::Url::parse(addr)
            .map_err(|e| bad_input(anyhow::anyhow!("--events-addr {addr:?}: {e}")))?;
    }
    Ok(Config {
        listen: args.listen,
        namespace: namespace(
            kube.namespace.as_deref(),
            Path::new(SERVICE_ACCOUNT_NAMESPACE),
        ),
        hmac_key,
        hook_token,
        default_gate: args.default_gate.into(),
        watch_label_selector: args.watch_label_selector.clone().filter(|s| !s.is_empty()),
        workers: args.workers,
        resync: args.resync,
        handoff_timeout: args.handoff_timeout,
        leader_elect: args.leader_elect,
        no_cross_namespace_refs: args.no_cross_namespace_refs,
        default_service_account: args.default_service_account.clone(),
        events_addr: args.events_addr.clone(),
        kustomize,
        call_timeout: args.timeout,
        fetch: args.limits.fetch_options(),
    })
}

/// Resolves on SIGTERM (Kubernetes stopping the pod) or SIGINT (Ctrl-C).
async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                    _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the service");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub async fn run(args: Args, kube: KubeArgs) -> anyhow::Result<Exit> {
    let config = config(&args, &kube)?;
    let client = kube.client().await?;
    let mut running = service::start(config, client)
        .await
        .context("starting the service")?;
    let failed = tokio::select! {
        _ = terminated() => false,
        _ = running.stopped() => true,
    };
    running.shutdown().await;
    if failed {
        anyhow::bail!("the service stopped on its own (see the log above)");
    }
    Ok(Exit::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_from_flag_then_service_account_then_flux_system() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("namespace");
        std::fs::write(&file, "team-a\n").unwrap();
        let missing = dir.path().join("missing");
        let table: &[(Option<&str>, &Path, &str)] = &[
            (Some("ops"), &file, "ops"),
            (None, &file, "team-a"),
            (Some(""), &file, "team-a"),
            (None, &missing, "flux-system"),
        ];
        for (flag, path, want) in table {
            assert_eq!(namespace(*flag, path), *want, "{flag:?} {}", path.display());
        }
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// The artifact caps reach the service as `render` takes them, defaults included.
    #[test]
    fn artifact_caps_reach_the_service() {
        use clap::Parser as _;
        let kube = KubeArgs::default();
        let parsed = Cli::try_parse_from(["serve"]).unwrap();
        let fetch = config(&parsed.args, &kube).unwrap().fetch;
        assert_eq!(fetch.unpack.max_bytes, 100 << 20);
        assert_eq!(fetch.unpack.max_file_bytes, 32 << 20);
        let parsed = Cli::try_parse_from([
            "serve",
            "--max-file-size",
            "1Mi",
            "--max-unpacked-size",
            "10Mi",
            "--max-artifact-size",
            "2Mi",
            "--max-artifact-entries",
            "50",
        ])
        .unwrap();
        let fetch = config(&parsed.args, &kube).unwrap().fetch;
        assert_eq!(fetch.unpack.max_file_bytes, 1 << 20);
        assert_eq!(fetch.unpack.max_bytes, 10 << 20);
        assert_eq!(fetch.max_download_bytes, 2 << 20);
        assert_eq!(fetch.unpack.max_entries, 50);
    }

    /// The build's bounds reach the service; the output cap follows --max-unpacked-size unless set.
    #[test]
    fn build_limits_reach_the_service() {
        use clap::Parser as _;
        let kube = KubeArgs::default();
        let kustomize = |args: &[&str]| {
            let parsed =
                Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied())).unwrap();
            let k = config(&parsed.args, &kube).unwrap().kustomize;
            (k.timeout, k.max_output)
        };
        assert_eq!(kustomize(&[]), (Duration::from_secs(120), 100 << 20));
        assert_eq!(
            kustomize(&["--max-unpacked-size", "10Mi"]),
            (Duration::from_secs(120), 10 << 20)
        );
        assert_eq!(
            kustomize(&["--render-timeout", "30s", "--max-render-size", "1Mi"]),
            (Duration::from_secs(30), 1 << 20)
        );
    }
}
