//! The service's parts, built once from the configuration: what `start_with` runs.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::config::{Config, Tuning};
use super::error::ServiceError;
use super::helmrelease::{HelmConfig, HelmGate, HelmReleases};
use super::kind::GatedKind;
use super::kustomization::Runner;
use super::leadership::fence::ServiceFence;
use super::queue::Queue;
use super::resume::{JournalResume, Resume};
use super::volumes::VolumeFollower;
use super::{gate, watch};
use crate::http::backend::Backend;
use crate::model::Key;
use crate::model::Kind;
use crate::records::metrics::Metrics;
use crate::records::results::{Results, Shard};

/// The parts [`start_with`] assembles: the Kustomizations' run and records, the other gated
/// kinds, the queue they share, the resume, the HTTP apps.
pub struct Parts {
    /// One revision of one Kustomization (the gate; a test's stand-in).
    pub runner: Arc<dyn Runner>,
    /// The Kustomizations' records: [`start_with`] follows them from the cluster (on every
    /// replica) and reads what is due from them.
    pub results: Results,
    /// The lane's queue: every kind is made with it, to push its due objects into.
    pub queue: Queue<Key>,
    /// The gated kinds after the Kustomizations, in the order `/status` lists them
    /// (HelmReleases; a test's stand-in kind).
    pub kinds: Vec<Arc<dyn GatedKind>>,
    pub resume: Arc<dyn Resume>,
    /// Builds the HTTP app over the service's backend.
    pub app: Box<dyn FnOnce(Arc<dyn Backend>) -> axum::Router + Send>,
    /// The app of the metrics port (`http::metrics_router`): it never sees the backend.
    pub metrics_app: axum::Router,
    pub metrics: Metrics,
    /// The fence the runs' and the resume's converges ask: [`start_with`] binds it to the
    /// leadership it sets up and waits for its windows at shutdown.
    pub fence: ServiceFence,
    /// The artifact storage, when `--storage-path` is set and writable: [`start_with`] serves
    /// it on `--storage-addr` and keeps it following the ExternalArtifacts.
    pub storage: Option<Arc<crate::storage::Storage>>,
    /// The claim follower the runs hand their converged revisions to (`service::volumes`):
    /// [`start_with`] resumes it from the records when this replica leads, stops it when it
    /// does not and at shutdown; `None` follows nothing.
    pub volumes: Option<VolumeFollower>,
}

/// The parts [`start_tuned`] starts (the gate over the results, the resume, the HTTP apps),
/// and the StorageClass and intent watches the gate's converges read, to be run beside them.
/// Public so a test can wrap one (the runner, to see the order in which runs start) before
/// [`start_with`].
pub fn build_parts(
    config: &Config,
    client: &kube::Client,
    tuning: &Tuning,
) -> Result<(Parts, BoxFuture<'static, ()>), ServiceError> {
    // Every write of the parts goes through the Lease's fence ([`leadership::writer`]):
    // converge steps, hand-offs, publishes, results, intents, re-suspends and Events alike.
    // [`start_with`] binds the tenure once leadership is set up; before that nothing writes.
    let fence = ServiceFence::default();
    let client = &crate::service::leadership::writer::fenced(client.clone(), fence.tenure.clone());
    // Decided before anything else: the webhook is never open by accident.
    let auth = crate::http::HookAuth {
        hmac_key: config.hmac_key.clone(),
        token: config.hook_token.clone(),
    };
    if auth.is_open() {
        if !config.allow_unauthenticated_hooks {
            return Err(ServiceError::Setup(
                "/hook needs an HMAC key or a bearer token (or allow_unauthenticated_hooks)"
                    .to_string(),
            ));
        }
        tracing::warn!(listen = %config.listen,
            "/hook accepts unauthenticated requests (--allow-unauthenticated-hooks): anyone who reaches this port can queue runs");
    }
    let (registry, metrics) = crate::records::metrics::registry();
    let sandbox = config.kustomize.sandbox_status();
    sandbox.log_start();
    metrics.render_sandbox(&sandbox);
    // A shard (`--watch-label-selector`) keeps to its own records, named by its Lease.
    let shard = match &config.watch_label_selector {
        Some(_) => Shard::Named(config.leader_election_id.clone()),
        None => Shard::Unsharded,
    };
    let results = Results::sharded(
        client.clone(),
        config.namespace.clone(),
        config.call_timeout,
        shard.clone(),
    );
    // One attempt per fetch: a failing download must not hold a worker through sleeps; its
    // retries go back through the queue's backoff, behind new work (docs/service.md, queue).
    let fetch = crate::flux::artifact::FetchOptions {
        retries: 0,
        ..config.fetch.clone().with_env_host_override()
    };
    // Without a storage the service still renders (each one downloading to a temporary
    // file); only the `artifact` gate needs it. A path given is created and must be usable
    // (source-controller's start): no storage only when there is no path, which `serve` says
    // why (`unavailable`: the default directory cannot be created), once, here.
    let storage = match &config.storage.path {
        Some(path) => match crate::storage::Storage::open(&config.storage, fetch.clone()) {
            Ok(storage) => Some(storage),
            Err(error) => {
                return Err(ServiceError::Setup(format!(
                    "--storage-path {}: {error}",
                    path.display()
                )));
            }
        },
        None => {
            if let Some(why) = &config.storage.unavailable {
                tracing::warn!(reason = %why,
                    "no artifact storage: the artifact gate cannot publish, no artifact server, renders download every time");
            }
            None
        }
    };
    let fetcher = match &storage {
        Some(storage) => storage.fetcher(),
        None => crate::flux::artifact::Fetcher::new(fetch)
            .map_err(|e| ServiceError::Setup(format!("artifact client: {e}")))?,
    };
    let resolver = crate::flux::render::resolve::Resolver {
        client: client.clone(),
        fetcher,
        kustomize: config.kustomize.clone(),
        strict: true,
        allow_cross_namespace: !config.no_cross_namespace_refs,
    };
    let events = crate::records::events::EventSink::new(
        client.clone(),
        config.events_addr.as_deref(),
        Some(tuning.lease.identity.clone()),
    )
    .map_err(|e| ServiceError::Setup(format!("--events-addr: {e}")))?;
    let (storage_classes, storage_class_watch) = watch::storage_class_cache(client.clone());
    let (intents, intent_watch) =
        crate::journal::watched::IntentCache::watch(client.clone(), &config.namespace);
    let (statefulsets, statefulset_watch) = crate::cluster::WatchedStatefulSets::watch(
        client.clone(),
        crate::flux::objects::OWNER_NAME_LABEL,
    );
    let helm_results = Results::of_kind(
        client.clone(),
        config.namespace.clone(),
        config.call_timeout,
        shard.clone(),
        Kind::HELM_RELEASE,
    );
    // Applications, with `--argocd-server` (their records apart, as HelmReleases').
    let app_results = config.argocd.as_ref().map(|_| {
        Results::of_kind(
            client.clone(),
            config.namespace.clone(),
            config.call_timeout,
            shard.clone(),
            Kind::APPLICATION,
        )
    });
    let mut followed = vec![
        (Kind::KUSTOMIZATION, results.clone()),
        (Kind::HELM_RELEASE, helm_results.clone()),
    ];
    followed.extend(app_results.iter().map(|r| (Kind::APPLICATION, r.clone())));
    // One follower of the claims for every gated kind (`service::volumes`).
    let volumes = super::volumes::VolumeFollower::new(super::volumes::FollowerConfig {
        client: client.clone(),
        results: followed,
        events: events.clone(),
        metrics: metrics.clone(),
        resize_timeout: config.resize_timeout,
        call_timeout: config.call_timeout,
        statefulsets: Some(statefulsets.clone()),
        restart_retry: tuning.restart_retry,
    });
    // One converge step (its caches, journal and fence) for every kind's runs.
    let step = super::step::ConvergeStep::new(super::step::StepConfig {
        client: client.clone(),
        namespace: config.namespace.clone(),
        shard: shard.clone(),
        call_timeout: config.call_timeout,
        metrics: metrics.clone(),
        fence: Some(Arc::new(fence.clone())),
    })
    .with_helm_field_manager(&config.helm_field_manager)
    .with_storage_classes(storage_classes)
    .with_statefulsets(statefulsets)
    .with_intents(intents.clone())
    .with_volumes(volumes.clone());
    let gate = gate::Gate::new(
        gate::GateConfig {
            client: client.clone(),
            namespace: config.namespace.clone(),
            resolver,
            results: results.clone(),
            metrics: metrics.clone(),
            handoff_timeout: config.handoff_timeout,
            call_timeout: config.call_timeout,
            default_service_account: config.default_service_account.clone(),
            events: events.clone(),
            default_gate: config.default_gate,
        },
        step.clone(),
    );
    // The `artifact` gate publishes through the storage; without one, a Kustomization in that
    // mode fails its hand-off naming the missing storage.
    let gate = match (&storage, &config.storage.unavailable) {
        (Some(storage), _) => gate.with_artifact_host(storage.clone()),
        (None, Some(why)) => gate.with_no_artifact_host(why.clone()),
        (None, None) => gate,
    };
    // HelmReleases share the converge step (its caches, fence and journal) and keep their
    // records apart.
    let helm = HelmGate::new(
        HelmConfig {
            client: client.clone(),
            results: helm_results,
            events: events.clone(),
            call_timeout: config.call_timeout,
            handoff_timeout: config.handoff_timeout,
            default_service_account: config.default_service_account.clone(),
            max_decoded_bytes: config.fetch.unpack.max_bytes,
        },
        step.clone(),
    );
    // The one queue every kind pushes into; nothing runs before this replica leads.
    let queue = Queue::new(tuning.backoff, metrics.queue_depth.clone());
    let helm_releases = Arc::new(HelmReleases::new(
        helm,
        queue.clone(),
        config.watch_label_selector.clone(),
    ));
    let mut kinds: Vec<Arc<dyn super::kind::GatedKind>> = vec![helm_releases];
    if let (Some(argo), Some(app_results)) = (&config.argocd, app_results) {
        kinds.push(super::application::build(
            argo,
            super::application::AppConfig {
                client: client.clone(),
                results: app_results,
                events,
                call_timeout: config.call_timeout,
                handoff_timeout: config.handoff_timeout,
                default_service_account: config.default_service_account.clone(),
                argocd_namespace: argo.own_namespace().to_string(),
                api: super::application::api(argo, config)?,
                max_body: config.fetch.unpack.max_bytes,
            },
            step,
            queue.clone(),
            config.watch_label_selector.clone(),
        ));
    }
    let resume = JournalResume {
        client: client.clone(),
        namespace: config.namespace.clone(),
        call_timeout: config.call_timeout,
        wait_timeout: crate::converge::Options::default().wait_timeout,
        fence: Some(Arc::new(fence.clone())),
        shard,
        default_service_account: config.default_service_account.clone(),
        argocd_namespace: config
            .argocd
            .as_ref()
            .map(|a| a.own_namespace().to_string()),
        intents: Some(intents),
        refused_gauge: Some(metrics.intents_refused.clone()),
    };
    let app_metrics = metrics.clone();
    // `--status-auth=kubernetes`: the results are read through the API server's reviews.
    let router_options = crate::http::RouterOptions {
        status_auth: match config.http.status_auth {
            crate::http::StatusAuthMode::None => None,
            crate::http::StatusAuthMode::Kubernetes => Some(Arc::new(
                crate::http::auth::StatusAuth::new(Arc::new(crate::http::reviewer::KubeReviewer {
                    client: client.clone(),
                    timeout: config.call_timeout,
                })),
            )),
        },
        argocd_hook_token: config.argocd.as_ref().and_then(|a| a.hook_token.clone()),
    };
    let parts = Parts {
        runner: Arc::new(gate),
        results,
        resume: Arc::new(resume),
        app: Box::new(move |backend| {
            crate::http::router_with(
                crate::http::AppState {
                    backend,
                    metrics: app_metrics,
                    auth,
                },
                router_options,
            )
        }),
        metrics_app: crate::http::metrics_router(Arc::new(registry)),
        metrics,
        fence,
        storage,
        queue,
        kinds,
        volumes: Some(volumes),
    };
    let caches = async move {
        tokio::join!(storage_class_watch, intent_watch, statefulset_watch);
    };
    Ok((parts, Box::pin(caches)))
}
