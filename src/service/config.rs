//! What `serve` is configured with: [`Config`] (its flags) and [`Tuning`] (the knobs that are
//! not flags), and [`ConfigBuilder`], which starts from the documented flag defaults so a test,
//! an example or the binary names only what it changes and a new field needs one default, here.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::running::RELEASE_TIMEOUT;
use crate::flux::render::KustomizeCommand;
use crate::model::GateMode;
use crate::service::leadership::LeaseSettings;
use crate::service::leadership::lease::default_election_id;
use crate::service::queue::BackoffPolicy;

/// Everything `flux-converger serve` is configured with (its flags, docs/service.md).
#[derive(Clone, Debug)]
pub struct Config {
    /// `/hook`, `/status`, the dashboard and the probes.
    pub listen: SocketAddr,
    /// `/metrics` (and `/healthz`), on a port of its own.
    pub metrics_addr: SocketAddr,
    /// Where results and intents live (and the Lease).
    pub namespace: String,
    pub hmac_key: Option<Vec<u8>>,
    pub hook_token: Option<String>,
    /// Without it, [`start`] refuses to serve `/hook` with neither key nor token.
    pub allow_unauthenticated_hooks: bool,
    /// At most one webhook-triggered run per Kustomization in this interval (zero: no limit).
    pub hook_min_interval: Duration,
    pub default_gate: GateMode,
    pub watch_label_selector: Option<String>,
    /// The Lease this replica (with `leader_elect`) contends for, and with a
    /// `watch_label_selector` the shard its results and intents are labelled with
    /// (`leader::default_election_id` derives it from the selector by default).
    pub leader_election_id: String,
    pub workers: usize,
    pub resync: Duration,
    pub handoff_timeout: Duration,
    /// `--resize-timeout`: a followed claim neither grown nor infeasible this long after its
    /// request is reported `stalled` (docs/converge.md, *Following the volumes*).
    pub resize_timeout: Duration,
    pub leader_elect: bool,
    pub no_cross_namespace_refs: bool,
    pub default_service_account: Option<String>,
    /// `--helm-field-manager`: the field manager a HelmRelease's StatefulSets are proven and
    /// re-created with (helm-controller's, so its next server-side upgrade owns them).
    pub helm_field_manager: String,
    pub events_addr: Option<String>,
    pub kustomize: KustomizeCommand,
    pub call_timeout: Duration,
    /// Download and unpack caps of an artifact (`--max-*`; Flux's untar defaults).
    pub fetch: crate::flux::artifact::FetchOptions,
    /// The artifact storage (`--storage-*`): the render cache and what the `artifact` gate
    /// publishes. `StorageConfig::default()` has none.
    pub storage: crate::storage::StorageConfig,
    /// The limits of every listener and who may read the results (`--http-*`,
    /// `--status-auth`).
    pub http: crate::http::HttpConfig,
    /// The Argo CD lane (`--argocd-*`): Applications are gated only with one.
    pub argocd: Option<ArgoCdConfig>,
}

/// Knobs that are not flags: defaults suit a cluster; tests shorten them.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// The Lease (with `leader_elect`).
    pub lease: LeaseSettings,
    pub backoff: BackoffPolicy,
    /// How long shutdown waits for running revisions before it stops them. A converge between
    /// its orphan delete and its re-apply is waited for past it (bounded by its own orphan
    /// wait and call timeouts); any other run cut short is finished from its journal or run
    /// again by the next leader. The manifests' `terminationGracePeriodSeconds` covers both.
    pub shutdown_grace: Duration,
    /// `restart-for-resize`: the first wait before an eviction a PodDisruptionBudget (or a
    /// failure) held back is tried again; it doubles up to five minutes.
    pub restart_retry: Duration,
}

impl Tuning {
    /// The longest a stop can take with API calls bounded by `call_timeout`: the grace, then a
    /// window opened right before it ended (the orphan delete's call, the orphan wait, the
    /// re-apply's call), then the Lease's release. A pod's `terminationGracePeriodSeconds`
    /// must exceed it, or the kubelet's SIGKILL cuts the window after all.
    pub fn longest_stop(&self, call_timeout: Duration) -> Duration {
        let window = call_timeout + crate::converge::Options::default().wait_timeout + call_timeout;
        self.shutdown_grace + window + RELEASE_TIMEOUT
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            lease: LeaseSettings::new(crate::service::leadership::default_identity()),
            backoff: BackoffPolicy::default(),
            shutdown_grace: Duration::from_secs(25),
            restart_retry: Duration::from_secs(10),
        }
    }
}

impl Config {
    /// A builder at the documented flag defaults (docs/service.md), results and intents in
    /// `namespace`. Where a default depends on the running pod it is the one `serve` falls back
    /// to: no HMAC key nor token, and no artifact storage (`StorageConfig::default()`; `serve`
    /// sets `--storage-path`'s directory once it has checked it can write there).
    pub fn builder(namespace: impl Into<String>) -> ConfigBuilder {
        ConfigBuilder {
            config: Config {
                listen: SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 9292),
                metrics_addr: SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 8080),
                namespace: namespace.into(),
                hmac_key: None,
                hook_token: None,
                allow_unauthenticated_hooks: false,
                hook_min_interval: Duration::from_secs(10),
                default_gate: GateMode::Off,
                watch_label_selector: None,
                leader_election_id: String::new(),
                workers: 2,
                resync: Duration::from_secs(5 * 60),
                handoff_timeout: Duration::from_secs(10 * 60),
                resize_timeout: Duration::from_secs(30 * 60),
                leader_elect: false,
                no_cross_namespace_refs: false,
                default_service_account: None,
                helm_field_manager: crate::helm::manifest::DEFAULT_FIELD_MANAGER.to_string(),
                events_addr: None,
                kustomize: KustomizeCommand::default(),
                call_timeout: Duration::from_secs(30),
                fetch: Default::default(),
                storage: Default::default(),
                http: Default::default(),
                argocd: None,
            },
            leader_election_id: None,
        }
    }
}

/// [`Config`] field by field, from [`Config::builder`]'s defaults; one setter per field, named
/// as it.
#[derive(Clone, Debug)]
#[must_use]
pub struct ConfigBuilder {
    config: Config,
    /// Kept apart so that, unset, [`ConfigBuilder::build`] derives it from the final
    /// `watch_label_selector` (as the flag's default is), whatever order the setters ran in.
    leader_election_id: Option<String>,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $field(mut self, $field: $ty) -> Self {
                self.config.$field = $field;
                self
            }
        )*
    };
}

impl ConfigBuilder {
    setters! {
        /// `--listen`: `/hook`, `/status`, the dashboard and the probes.
        listen: SocketAddr,
        /// `--metrics-addr`.
        metrics_addr: SocketAddr,
        /// `--namespace` (what [`Config::builder`] was given).
        namespace: String,
        /// `--hmac-key-file`'s key.
        hmac_key: Option<Vec<u8>>,
        /// `--hook-token-file`'s token.
        hook_token: Option<String>,
        /// `--allow-unauthenticated-hooks`.
        allow_unauthenticated_hooks: bool,
        /// `--hook-min-interval`.
        hook_min_interval: Duration,
        /// `--default-gate`.
        default_gate: GateMode,
        /// `--watch-label-selector`.
        watch_label_selector: Option<String>,
        /// `--workers`.
        workers: usize,
        /// `--resync`.
        resync: Duration,
        /// `--handoff-timeout`.
        handoff_timeout: Duration,
        /// `--resize-timeout`.
        resize_timeout: Duration,
        /// `--leader-elect`.
        leader_elect: bool,
        /// `--no-cross-namespace-refs`.
        no_cross_namespace_refs: bool,
        /// `--default-service-account`.
        default_service_account: Option<String>,
        /// `--helm-field-manager`.
        helm_field_manager: String,
        /// `--events-addr`.
        events_addr: Option<String>,
        /// `--kustomize` (and the `--build-*` flags applied to it).
        kustomize: KustomizeCommand,
        /// `--timeout`.
        call_timeout: Duration,
        /// `--max-*`.
        fetch: crate::flux::artifact::FetchOptions,
        /// `--storage-*`.
        storage: crate::storage::StorageConfig,
        /// `--http-*`, `--status-auth`.
        http: crate::http::HttpConfig,
        /// `--argocd-*`.
        argocd: Option<ArgoCdConfig>,
    }

    /// `--leader-election-id`; unset, derived from the selector at [`ConfigBuilder::build`].
    pub fn leader_election_id(mut self, id: impl Into<String>) -> Self {
        self.leader_election_id = Some(id.into());
        self
    }

    pub fn build(self) -> Config {
        let mut config = self.config;
        config.leader_election_id = self
            .leader_election_id
            .unwrap_or_else(|| default_election_id(config.watch_label_selector.as_deref()));
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_election_id_follows_the_selector_unless_set() {
        let plain = Config::builder("ns").build();
        assert_eq!(plain.leader_election_id, "flux-converger");
        let shard = Config::builder("ns")
            .watch_label_selector(Some("shard=a".into()))
            .build();
        assert_eq!(
            shard.leader_election_id,
            default_election_id(Some("shard=a"))
        );
        let named = Config::builder("ns")
            .leader_election_id("mine")
            .watch_label_selector(Some("shard=a".into()))
            .build();
        assert_eq!(named.leader_election_id, "mine");
    }
}

/// `--argocd-namespaces`' default: Argo CD's own namespace.
pub const DEFAULT_ARGOCD_NAMESPACE: &str = "argocd";

/// The Argo CD lane's flags (`--argocd-*`, docs/argocd.md); the service gates Applications only
/// when it has one ([`crate::service::config::Config::argocd`]).
#[derive(Clone)]
pub struct ArgoCdConfig {
    /// `--argocd-namespaces`: where Applications are watched. The first is Argo CD's own,
    /// where its AppProjects and `argocd-cm` are read.
    pub namespaces: Vec<String>,
    /// `--argocd-server`: `https://host[:port][/root-path]`.
    pub server: String,
    /// `--argocd-token-file`: read at each call (a mounted Secret rotates).
    pub token_file: std::path::PathBuf,
    /// `--argocd-ca-file`: the only roots trusted when set.
    pub ca_file: Option<std::path::PathBuf>,
    /// `--argocd-hook-token-file`'s token: what `POST /hook/argocd` requires (`None`: the route
    /// is not served).
    pub hook_token: Option<String>,
}

impl ArgoCdConfig {
    /// Argo CD's own namespace: its AppProjects and `argocd-cm`.
    pub fn own_namespace(&self) -> &str {
        self.namespaces
            .first()
            .map(String::as_str)
            .unwrap_or(DEFAULT_ARGOCD_NAMESPACE)
    }
}

/// Never prints the hook token.
impl std::fmt::Debug for ArgoCdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgoCdConfig")
            .field("namespaces", &self.namespaces)
            .field("server", &self.server)
            .field("token_file", &self.token_file)
            .field("ca_file", &self.ca_file)
            .field(
                "hook_token",
                &self.hook_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}
