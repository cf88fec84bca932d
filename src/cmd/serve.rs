//! `flux-converger serve`: flags → [`Config`] → start → wait for SIGTERM/SIGINT → graceful
//! shutdown (a second signal stops at once). Every flag is also `FLUX_CONVERGER_<FLAG>`, so a Deployment can set them from a
//! ConfigMap. `--namespace` is the global `-n/--namespace` (where results, intents and the
//! Lease live); `--kubeconfig` and `--context` are the global ones too.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::ValueEnum;
use flux_converger::flux::render::{DEFAULT_KUSTOMIZE, KustomizeCommand};
use flux_converger::model::GateMode;
use flux_converger::service::leadership::lease::{check_election_id, default_election_id};
use flux_converger::service::{self, Config};

use super::{Exit, KubeArgs, bad_input, listen_addr};

/// The namespace file of the pod's service account.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// `--storage-path`'s default, source-controller's (the manifests mount the volume there).
const DEFAULT_STORAGE_PATH: &str = "/data";

/// Where Flux itself runs; the service runs next to it.
const DEFAULT_NAMESPACE: &str = "flux-system";

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum DefaultGate {
    Suspend,
    Reconcile,
    /// Only Kustomizations reading an ExternalArtifact can be handled this way; any other is
    /// refused (nothing written), as with the annotation.
    Artifact,
    Off,
}

impl From<DefaultGate> for GateMode {
    fn from(gate: DefaultGate) -> Self {
        match gate {
            DefaultGate::Suspend => GateMode::Suspend,
            DefaultGate::Reconcile => GateMode::Reconcile,
            DefaultGate::Artifact => GateMode::Artifact,
            DefaultGate::Off => GateMode::Off,
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address of `/hook`, `/status`, the dashboard and the probes (`:PORT` or `HOST:PORT`);
    /// 9292 is Flux's receiver port.
    #[arg(long, value_name = "ADDR", default_value = ":9292", value_parser = listen_addr::parse, env = "FLUX_CONVERGER_LISTEN")]
    listen: SocketAddr,
    /// Address of `/metrics` (and `/healthz`) alone: 8080 is the port Flux's `allow-scraping`
    /// NetworkPolicy opens to every namespace, so the dashboard and `/hook` stay off it.
    #[arg(long, value_name = "ADDR", default_value = ":8080", value_parser = listen_addr::parse, env = "FLUX_CONVERGER_METRICS_ADDR")]
    metrics_addr: SocketAddr,
    /// File holding the `generic-hmac` key (raw bytes, as the Provider's Secret `token`).
    #[arg(long, value_name = "FILE", env = "FLUX_CONVERGER_HMAC_KEY_FILE")]
    hmac_key_file: Option<PathBuf>,
    /// File holding the bearer token `/hook` requires.
    #[arg(long, value_name = "FILE", env = "FLUX_CONVERGER_HOOK_TOKEN_FILE")]
    hook_token_file: Option<PathBuf>,
    /// Serve `/hook` without `--hmac-key-file` or `--hook-token-file`: anyone who reaches the
    /// port can then queue runs. Only for a loopback or otherwise closed network.
    #[arg(long, env = "FLUX_CONVERGER_ALLOW_UNAUTHENTICATED_HOOKS", num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    allow_unauthenticated_hooks: bool,
    /// At most one webhook-triggered run per Kustomization in this interval (`0s`: no limit);
    /// the watches and the resync are not limited.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = humantime::parse_duration, env = "FLUX_CONVERGER_HOOK_MIN_INTERVAL")]
    hook_min_interval: Duration,
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
    /// The Lease `--leader-elect` contends for (Flux's flag), and a shard's label on its
    /// results and intents. Default: `flux-converger`, or with `--watch-label-selector`
    /// `flux-converger-<first 8 hex digits of sha256(selector)>`, so each shard leads on its own.
    #[arg(long, value_name = "NAME", env = "FLUX_CONVERGER_LEADER_ELECTION_ID")]
    leader_election_id: Option<String>,
    /// Revisions handled at once (one per Kustomization at a time).
    #[arg(long, default_value_t = 2, env = "FLUX_CONVERGER_WORKERS")]
    workers: usize,
    /// How often every handled Kustomization is compared with its last finished revision.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration, env = "FLUX_CONVERGER_RESYNC")]
    resync: Duration,
    /// How long to wait for Flux to apply a handed-off revision.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration, env = "FLUX_CONVERGER_HANDOFF_TIMEOUT")]
    handoff_timeout: Duration,
    /// A followed claim neither grown nor infeasible this long after its request is reported
    /// `stalled` (and still followed), with a `VolumeResizeStalled` Event.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration, env = "FLUX_CONVERGER_RESIZE_TIMEOUT")]
    resize_timeout: Duration,
    /// Bounds every API call.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, env = "FLUX_CONVERGER_TIMEOUT")]
    timeout: Duration,
    /// How long a stop waits for running revisions before cutting them; a converge between
    /// its orphan delete and its re-apply is waited for past it.
    #[arg(long, default_value = "25s", value_parser = humantime::parse_duration, env = "FLUX_CONVERGER_SHUTDOWN_GRACE")]
    shutdown_grace: Duration,
    // The switches take `--flag`, `--flag=true` and `--flag=false`, as Go's pflag does for
    // Flux's controllers (Flux's multi-tenancy guide writes `--no-cross-namespace-refs=true`).
    /// Elect a leader among replicas with a Lease in `--namespace`; only it converges.
    #[arg(long, env = "FLUX_CONVERGER_LEADER_ELECT", num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    leader_elect: bool,
    /// Refuse source references to another namespace (kustomize-controller's flag).
    #[arg(long, env = "FLUX_CONVERGER_NO_CROSS_NAMESPACE_REFS", num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    no_cross_namespace_refs: bool,
    /// Service account impersonated for Kustomizations without `spec.serviceAccountName`.
    #[arg(
        long,
        value_name = "SA",
        env = "FLUX_CONVERGER_DEFAULT_SERVICE_ACCOUNT"
    )]
    default_service_account: Option<String>,
    /// The field manager a HelmRelease's StatefulSets are proven and re-created with:
    /// helm-controller's, so its next server-side upgrade owns their fields instead of
    /// conflicting with the re-create.
    #[arg(long, value_name = "NAME", default_value = flux_converger::helm::manifest::DEFAULT_FIELD_MANAGER, env = "FLUX_CONVERGER_HELM_FIELD_MANAGER")]
    helm_field_manager: String,
    /// notification-controller's event address (Flux's `--events-addr`).
    #[arg(long, value_name = "URL", env = "FLUX_CONVERGER_EVENTS_ADDR")]
    events_addr: Option<String>,
    /// The kustomize build command.
    #[arg(long, value_name = "CMD", default_value = DEFAULT_KUSTOMIZE, env = "FLUX_CONVERGER_KUSTOMIZE")]
    kustomize: String,
    /// The artifact server's listen address (source-controller's `--storage-addr`): Flux
    /// fetches what the `artifact` gate publishes from it.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:9090", value_parser = listen_addr::parse, env = "FLUX_CONVERGER_STORAGE_ADDR")]
    storage_addr: SocketAddr,
    /// `host[:port]` written into published artifact URLs (source-controller's
    /// `--storage-adv-addr`); default: the host name and the `--storage-addr` port, as
    /// source-controller's. Set it to the Service's DNS name.
    #[arg(
        long,
        value_name = "HOST[:PORT]",
        env = "FLUX_CONVERGER_STORAGE_ADV_ADDR"
    )]
    storage_adv_addr: Option<String>,
    /// The path to the directory where artifacts will be stored (source-controller's flag; a
    /// volume): published artifacts and the download cache. Created with its parents at start;
    /// one given that cannot be created or written is exit 2. Only the default, `/data`, when
    /// it cannot be created means no storage (said at start; the `artifact` gate refuses).
    /// [default: /data]
    #[arg(long, value_name = "DIR", env = "FLUX_CONVERGER_STORAGE_PATH")]
    storage_path: Option<PathBuf>,
    /// The maximum number of artifacts to be kept in storage after a garbage collection
    /// (source-controller's flag), per ExternalArtifact; the one it points at is never removed.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 2,
        env = "FLUX_CONVERGER_ARTIFACT_RETENTION_RECORDS"
    )]
    artifact_retention_records: usize,
    /// The duration after which stale artifacts are garbage collected (source-controller's
    /// flag).
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = humantime::parse_duration, env = "FLUX_CONVERGER_ARTIFACT_RETENTION_TTL")]
    artifact_retention_ttl: Duration,
    /// Bytes of downloaded artifacts kept for the next render (least recently used out
    /// first); published artifacts are kept on top of it.
    #[arg(long, value_name = "SIZE", env = "FLUX_CONVERGER_STORAGE_CACHE_MAX_SIZE",
          default_value_t = flux_converger::storage::DEFAULT_MAX_CACHE_BYTES,
          value_parser = super::artifact_limits::parse_size)]
    storage_cache_max_size: u64,
    #[command(flatten)]
    http: super::http_flags::HttpArgs,
    #[command(flatten)]
    build: super::build_limits::BuildLimitArgs,
    #[command(flatten)]
    argocd: super::argocd_flags::ArgoCdArgs,
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
    if hmac_key.is_none() && hook_token.is_none() && !args.allow_unauthenticated_hooks {
        return Err(bad_input(anyhow::anyhow!(
            "/hook needs --hmac-key-file or --hook-token-file (the Provider's Secret); \
             --allow-unauthenticated-hooks serves it open, for a closed network only"
        )));
    }
    if args.listen.port() != 0 && args.listen.port() == args.metrics_addr.port() {
        return Err(bad_input(anyhow::anyhow!(
            "--listen {} and --metrics-addr {} use the same port {}: /metrics has a port of its own",
            args.listen,
            args.metrics_addr,
            args.listen.port()
        )));
    }
    for (flag, other) in [
        ("--listen", args.listen),
        ("--metrics-addr", args.metrics_addr),
    ] {
        if args.storage_addr.port() != 0 && args.storage_addr.port() == other.port() {
            return Err(bad_input(anyhow::anyhow!(
                "--storage-addr {} and {flag} {other} use the same port {}",
                args.storage_addr,
                args.storage_addr.port()
            )));
        }
    }
    let storage_adv_addr = match &args.storage_adv_addr {
        Some(adv) => adv_addr(adv)
            .map_err(|e| bad_input(anyhow::anyhow!("--storage-adv-addr {adv:?}: {e}")))?,
        None => flux_converger::storage::default_adv_addr(args.storage_addr, None),
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
    let http = args
        .http
        .config()
        .map_err(|e| bad_input(anyhow::anyhow!(e)))?;
    let argocd = args
        .argocd
        .config()
        .map_err(|e| bad_input(anyhow::anyhow!(e)))?;
    let watch_label_selector = args.watch_label_selector.clone().filter(|s| !s.is_empty());
    let leader_election_id = match args.leader_election_id.as_deref().filter(|s| !s.is_empty()) {
        Some(id) => {
            check_election_id(id)
                .map_err(|e| bad_input(anyhow::anyhow!("--leader-election-id {e}")))?;
            id.to_string()
        }
        None => default_election_id(watch_label_selector.as_deref()),
    };
    Ok(Config::builder(namespace(
        kube.namespace.as_deref(),
        Path::new(SERVICE_ACCOUNT_NAMESPACE),
    ))
    .listen(args.listen)
    .metrics_addr(args.metrics_addr)
    .hmac_key(hmac_key)
    .hook_token(hook_token)
    .allow_unauthenticated_hooks(args.allow_unauthenticated_hooks)
    .hook_min_interval(args.hook_min_interval)
    .default_gate(args.default_gate.into())
    .watch_label_selector(watch_label_selector)
    .leader_election_id(leader_election_id)
    .workers(args.workers)
    .resync(args.resync)
    .handoff_timeout(args.handoff_timeout)
    .resize_timeout(args.resize_timeout)
    .leader_elect(args.leader_elect)
    .no_cross_namespace_refs(args.no_cross_namespace_refs)
    .default_service_account(args.default_service_account.clone())
    .helm_field_manager(args.helm_field_manager.clone())
    .events_addr(args.events_addr.clone())
    .kustomize(kustomize)
    .call_timeout(args.timeout)
    .fetch(args.limits.fetch_options())
    .storage(flux_converger::storage::StorageConfig {
        path: Some(
            args.storage_path
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STORAGE_PATH)),
        ),
        unavailable: None,
        addr: args.storage_addr,
        adv_addr: storage_adv_addr,
        max_cache_bytes: args.storage_cache_max_size,
        retention: flux_converger::storage::Retention {
            records: args.artifact_retention_records,
            ttl: args.artifact_retention_ttl,
        },
    })
    .http(http)
    .argocd(argocd)
    .build())
}

/// Creates the storage directory as source-controller does at start ([`flux_converger::storage::prepare`]).
/// A `--storage-path` given (flag or env) that cannot be created or written is bad input, exit
/// 2 naming the flag and the error; only the default, when absent and not creatable (no volume
/// mounted, a read-only root), means no storage, with the reason kept for the log line at
/// start, the `artifact` gate's refusal and `/readyz`.
fn settle_storage(
    storage: &mut flux_converger::storage::StorageConfig,
    given: bool,
) -> anyhow::Result<()> {
    let Some(path) = storage.path.clone() else {
        return Ok(());
    };
    let absent = !path.exists();
    match flux_converger::storage::prepare(&path) {
        Ok(()) => Ok(()),
        Err(error) if given || !absent => Err(bad_input(anyhow::anyhow!(
            "--storage-path {}: {error}",
            path.display()
        ))),
        Err(error) => {
            storage.path = None;
            storage.unavailable = Some(format!(
                "the default --storage-path {} does not exist and cannot be created ({error}); \
                 mount a volume there or set --storage-path",
                path.display()
            ));
            Ok(())
        }
    }
}

/// `--storage-adv-addr` as source-controller takes it: `host[:port]`; a leading `http://` is
/// dropped (URLs are always `http://<adv-addr>/<path>`), anything with a path is refused.
fn adv_addr(text: &str) -> Result<String, String> {
    let bare = text.strip_prefix("http://").unwrap_or(text);
    let bare = bare.strip_suffix('/').unwrap_or(bare);
    if bare.is_empty() || bare.contains('/') || bare.contains("://") || bare.contains(' ') {
        return Err("expected HOST or HOST:PORT".into());
    }
    reqwest::Url::parse(&format!("http://{bare}/")).map_err(|e| e.to_string())?;
    Ok(bare.to_string())
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

/// Large buffers (a page of a list, a response body: above 128 KiB) are always given their
/// own mapping, returned to the system when freed. glibc otherwise raises its mmap threshold
/// after the first such buffer is freed (up to 32 MiB) and takes the next ones from its heap,
/// where what they leave behind stays resident: at 10,000 Kustomizations the start's lists
/// left ~3 MB more resident, peak and idle (`hack/fleet-memory.sh`).
fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets one of glibc's allocation parameters; it takes no pointer.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

pub async fn run(args: Args, kube: KubeArgs) -> anyhow::Result<Exit> {
    fix_mmap_threshold();
    let mut config = config(&args, &kube)?;
    settle_storage(&mut config.storage, args.storage_path.is_some())?;
    let client = kube.client().await?;
    let tuning = service::Tuning {
        shutdown_grace: args.shutdown_grace,
        ..Default::default()
    };
    let mut running = service::start_tuned(config, client, tuning)
        .await
        .context("starting the service")?;
    let failed = tokio::select! {
        _ = terminated() => false,
        _ = running.stopped() => true,
    };
    // The stop may wait minutes for a re-apply; someone at a terminal who signals again means
    // "now", and the next start resumes whatever that cuts from its intent.
    tokio::select! {
        _ = running.shutdown() => {}
        _ = terminated() => {
            tracing::warn!("signalled again: stopping now; an unfinished converge is resumed from its intent at the next start");
            anyhow::bail!("stopped by a second signal before the shutdown finished");
        }
    }
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

    /// The switches parse as Flux's controllers' (pflag): bare, `=true`, `=false`, and from
    /// their environment variable.
    #[test]
    fn switches_take_a_bare_flag_or_a_boolean_value() {
        use clap::Parser as _;
        let parse = |extra: &[&str]| {
            let mut argv = vec!["serve"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map(|c| c.args.no_cross_namespace_refs)
        };
        assert!(!parse(&[]).unwrap());
        assert!(parse(&["--no-cross-namespace-refs"]).unwrap());
        assert!(parse(&["--no-cross-namespace-refs=true"]).unwrap());
        assert!(!parse(&["--no-cross-namespace-refs=false"]).unwrap());
        assert!(parse(&["--no-cross-namespace-refs=maybe"]).is_err());
        let leader = Cli::try_parse_from(["serve", "--leader-elect"]).unwrap();
        assert!(leader.args.leader_elect);
        let bare_then_positional_free = Cli::try_parse_from([
            "serve",
            "--allow-unauthenticated-hooks",
            "--leader-elect=false",
        ])
        .unwrap();
        assert!(bare_then_positional_free.args.allow_unauthenticated_hooks);
        assert!(!bare_then_positional_free.args.leader_elect);
    }

    /// The flag's default is the service's own (the manifests' termination grace is sized from
    /// it), and a value given reaches the stop.
    #[test]
    fn shutdown_grace_defaults_to_the_services() {
        use clap::Parser as _;
        let parsed = Cli::try_parse_from(["serve"]).unwrap();
        assert_eq!(
            parsed.args.shutdown_grace,
            service::Tuning::default().shutdown_grace
        );
        let parsed = Cli::try_parse_from(["serve", "--shutdown-grace", "2m"]).unwrap();
        assert_eq!(parsed.args.shutdown_grace, Duration::from_secs(120));
    }

    /// The artifact caps reach the service as `render` takes them, defaults included.
    #[test]
    fn artifact_caps_reach_the_service() {
        use clap::Parser as _;
        let kube = KubeArgs::default();
        let parsed = Cli::try_parse_from(["serve", "--allow-unauthenticated-hooks"]).unwrap();
        let fetch = config(&parsed.args, &kube).unwrap().fetch;
        assert_eq!(fetch.unpack.max_bytes, 100 << 20);
        assert_eq!(fetch.unpack.max_file_bytes, 32 << 20);
        let parsed = Cli::try_parse_from([
            "serve",
            "--allow-unauthenticated-hooks",
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

    /// The storage flags as source-controller's: defaults, an advertised address given with
    /// or without a scheme, and what is refused.
    #[test]
    fn storage_flags_table() {
        use clap::Parser as _;
        let kube = KubeArgs::default();
        let base = ["serve", "--allow-unauthenticated-hooks"];
        let parsed = Cli::try_parse_from(base).unwrap();
        let storage = config(&parsed.args, &kube).unwrap().storage;
        assert_eq!(storage.path, Some(PathBuf::from("/data")));
        assert_eq!(storage.addr, "0.0.0.0:9090".parse::<SocketAddr>().unwrap());
        assert!(storage.adv_addr.ends_with(":9090"), "{}", storage.adv_addr);
        assert_eq!(
            storage.max_cache_bytes,
            flux_converger::storage::DEFAULT_MAX_CACHE_BYTES
        );
        let cases: &[(&[&str], Result<&str, &str>)] = &[
            (
                &[
                    "--storage-adv-addr",
                    "converger.flux-system.svc.cluster.local.",
                ],
                Ok("converger.flux-system.svc.cluster.local."),
            ),
            (
                &["--storage-adv-addr", "http://converger:9090/"],
                Ok("converger:9090"),
            ),
            (&["--storage-addr", "127.0.0.1:9191"], Ok("127.0.0.1:9191")),
            (
                &["--storage-adv-addr", "converger/artifacts"],
                Err("--storage-adv-addr"),
            ),
            (
                &["--storage-adv-addr", "https://x:1"],
                Err("--storage-adv-addr"),
            ),
            (&["--storage-addr", ":8080"], Err("same port 8080")),
            (&["--storage-addr", ":9292"], Err("same port 9292")),
        ];
        for (args, want) in cases {
            let parsed = Cli::try_parse_from(base.iter().chain(args.iter())).unwrap();
            match (config(&parsed.args, &kube), want) {
                (Ok(config), Ok(adv)) => assert_eq!(config.storage.adv_addr, *adv, "{args:?}"),
                (Err(error), Err(word)) => {
                    assert!(format!("{error:#}").contains(word), "{args:?}: {error:#}")
                }
                (got, want) => panic!("{args:?}: {:?} vs {want:?}", got.map(|c| c.storage)),
            }
        }
        let parsed = Cli::try_parse_from(
            base.iter().chain(
                [
                    "--storage-cache-max-size",
                    "64Mi",
                    "--storage-path",
                    "/var/x",
                ]
                .iter(),
            ),
        )
        .unwrap();
        let storage = config(&parsed.args, &kube).unwrap().storage;
        assert_eq!(storage.max_cache_bytes, 64 << 20);
        assert_eq!(storage.path, Some(PathBuf::from("/var/x")));
    }

    /// source-controller's retention flags and defaults (2 records, 1m) reach the storage.
    #[test]
    fn artifact_retention_flags_as_source_controllers() {
        use clap::Parser as _;
        let kube = KubeArgs::default();
        let parse = |extra: &[&str]| {
            let args = ["serve", "--allow-unauthenticated-hooks"]
                .iter()
                .chain(extra)
                .copied()
                .collect::<Vec<_>>();
            config(&Cli::try_parse_from(args).unwrap().args, &kube)
                .unwrap()
                .storage
                .retention
        };
        assert_eq!(parse(&[]), flux_converger::storage::Retention::default());
        assert_eq!(parse(&[]).records, 2);
        assert_eq!(parse(&[]).ttl, Duration::from_secs(60));
        let given = parse(&[
            "--artifact-retention-records",
            "5",
            "--artifact-retention-ttl",
            "1m30s",
        ]);
        assert_eq!(given.records, 5);
        assert_eq!(given.ttl, Duration::from_secs(90));
        assert!(
            Cli::try_parse_from(["serve", "--artifact-retention-records", "-1"]).is_err(),
            "a negative count is refused"
        );
    }

    /// A `--storage-path` given is created (parents too) or exit 2 naming the flag; only the
    /// default, absent and not creatable, means no storage, with the directory in the reason.
    #[test]
    fn the_storage_path_is_created_or_refused_and_only_the_default_may_be_absent() {
        use flux_converger::storage::StorageConfig;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let nested = dir.path().join("new/nested/storage");
        let under_a_file = file.join("storage");
        let settle = |path: &Path, given: bool| {
            let mut storage = StorageConfig {
                path: Some(path.to_path_buf()),
                ..StorageConfig::default()
            };
            settle_storage(&mut storage, given).map(|()| storage)
        };
        // Given, absent: created and kept.
        let created = settle(&nested, true).unwrap();
        assert!(nested.is_dir());
        assert_eq!(created.path.as_deref(), Some(nested.as_path()));
        assert_eq!(created.unavailable, None);
        // Given, not creatable: exit 2 naming the flag, the path and the error.
        let error = settle(&under_a_file, true).unwrap_err();
        assert_eq!(
            super::super::exit_code_of(&error),
            Exit::BadInput,
            "{error:#}"
        );
        let text = format!("{error:#}");
        for word in ["--storage-path", under_a_file.to_str().unwrap(), "os error"] {
            assert!(text.contains(word), "{word:?} missing from {text}");
        }
        // The default, absent and not creatable: no storage, the directory in the reason.
        let absent = settle(&under_a_file, false).unwrap();
        assert_eq!(absent.path, None);
        let why = absent.unavailable.unwrap();
        assert!(why.contains(under_a_file.to_str().unwrap()), "{why}");
        assert!(why.contains("--storage-path"), "{why}");
        // The default, absent but creatable: created, as a path given.
        let default_dir = dir.path().join("data");
        assert!(settle(&default_dir, false).unwrap().path.is_some());
        assert!(default_dir.is_dir());
        // The default, present but not a writable directory: refused as well.
        assert!(settle(&file, false).is_err());
    }

    /// What reaches the service from the webhook and port flags, and which combinations are
    /// bad input (exit 2, before any client is built).
    #[test]
    fn hook_auth_and_ports_table() {
        use clap::Parser as _;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "k\n").unwrap();
        let key = key.to_str().unwrap();
        let kube = KubeArgs::default();
        let all = |port| SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), port);
        type Want = Result<(SocketAddr, SocketAddr, bool, Duration), &'static [&'static str]>;
        let ten = Duration::from_secs(10);
        let cases: &[(&str, &[&str], Want)] = &[
            (
                "defaults, with a key",
                &["--hmac-key-file", key],
                Ok((all(9292), all(8080), false, ten)),
            ),
            (
                "a token is enough",
                &["--hook-token-file", key],
                Ok((all(9292), all(8080), false, ten)),
            ),
            (
                "open on purpose",
                &["--allow-unauthenticated-hooks"],
                Ok((all(9292), all(8080), true, ten)),
            ),
            (
                "neither",
                &[],
                Err(&[
                    "--hmac-key-file",
                    "--hook-token-file",
                    "--allow-unauthenticated-hooks",
                ]),
            ),
            (
                "host:port forms and an interval",
                &[
                    "--hmac-key-file",
                    key,
                    "--listen",
                    "127.0.0.1:9000",
                    "--metrics-addr",
                    "0.0.0.0:9001",
                    "--hook-min-interval",
                    "1h",
                ],
                Ok((
                    "127.0.0.1:9000".parse().unwrap(),
                    "0.0.0.0:9001".parse().unwrap(),
                    false,
                    Duration::from_secs(3600),
                )),
            ),
            (
                "same port",
                &["--hmac-key-file", key, "--listen", ":8080"],
                Err(&["--listen", "--metrics-addr", "same port 8080"]),
            ),
            (
                "same port, other hosts",
                &[
                    "--hmac-key-file",
                    key,
                    "--listen",
                    "127.0.0.1:9300",
                    "--metrics-addr",
                    "0.0.0.0:9300",
                ],
                Err(&["same port 9300"]),
            ),
            (
                "two ephemeral ports",
                &[
                    "--hmac-key-file",
                    key,
                    "--listen",
                    ":0",
                    "--metrics-addr",
                    ":0",
                ],
                Ok((all(0), all(0), false, ten)),
            ),
        ];
        for (case, flags, want) in cases {
            let parsed = Cli::try_parse_from([&["serve"], *flags].concat()).unwrap();
            match (config(&parsed.args, &kube), want) {
                (Ok(c), Ok((listen, metrics, open, interval))) => {
                    assert_eq!(
                        (
                            c.listen,
                            c.metrics_addr,
                            c.allow_unauthenticated_hooks,
                            c.hook_min_interval
                        ),
                        (*listen, *metrics, *open, *interval),
                        "{case}"
                    );
                }
                (Err(e), Err(words)) => {
                    assert_eq!(super::super::exit_code_of(&e), Exit::BadInput, "{case}");
                    let message = format!("{e:#}");
                    for word in *words {
                        assert!(message.contains(word), "{case}: {message}");
                    }
                }
                (got, want) => panic!("{case}: got {:?}, want {want:?}", got.map(|c| c.listen)),
            }
        }
    }

    /// The Lease (and a shard's record label) from `--leader-election-id` and
    /// `--watch-label-selector`; a name that is no Lease name or label value is bad input.
    #[test]
    fn leader_election_id_table() {
        use clap::Parser as _;
        let kube = KubeArgs::default();
        let cases: &[(&[&str], Result<&str, &str>)] = &[
            (&[], Ok("flux-converger")),
            (
                &["--watch-label-selector", "shard=a"],
                Ok("flux-converger-3d8dfb26"),
            ),
            (
                &["--watch-label-selector", "shard=b"],
                Ok("flux-converger-51051576"),
            ),
            // An empty selector is no selector.
            (&["--watch-label-selector", ""], Ok("flux-converger")),
            (
                &[
                    "--watch-label-selector",
                    "shard=a",
                    "--leader-election-id",
                    "conv-a",
                ],
                Ok("conv-a"),
            ),
            (&["--leader-election-id", "mine"], Ok("mine")),
            (
                &["--leader-election-id", "Not_A_Name"],
                Err("--leader-election-id"),
            ),
        ];
        for (flags, want) in cases {
            let parsed = Cli::try_parse_from(
                ["serve", "--allow-unauthenticated-hooks"]
                    .into_iter()
                    .chain(flags.iter().copied()),
            )
            .unwrap();
            match (config(&parsed.args, &kube), want) {
                (Ok(c), Ok(id)) => assert_eq!(c.leader_election_id, *id, "{flags:?}"),
                (Err(e), Err(word)) => {
                    assert_eq!(super::super::exit_code_of(&e), Exit::BadInput, "{flags:?}");
                    assert!(format!("{e:#}").contains(word), "{flags:?}: {e:#}");
                }
                (got, want) => panic!(
                    "{flags:?}: got {:?}, want {want:?}",
                    got.map(|c| c.leader_election_id)
                ),
            }
        }
    }

    /// The build's bounds reach the service; the output cap follows --max-unpacked-size unless set.
    #[test]
    fn build_limits_reach_the_service() {
        use clap::Parser as _;
        let kube = KubeArgs::default();
        let kustomize = |args: &[&str]| {
            let parsed = Cli::try_parse_from(
                ["serve", "--allow-unauthenticated-hooks"]
                    .into_iter()
                    .chain(args.iter().copied()),
            )
            .unwrap();
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
        let no_remote = |args: &[&str]| {
            let parsed = Cli::try_parse_from(
                ["serve", "--allow-unauthenticated-hooks"]
                    .into_iter()
                    .chain(args.iter().copied()),
            )
            .unwrap();
            config(&parsed.args, &kube)
                .unwrap()
                .kustomize
                .no_remote_bases
        };
        assert!(!no_remote(&[]));
        assert!(no_remote(&["--no-remote-bases"]));
    }
}
