//! Starting `serve`: the parts built from the configuration ([`super::parts`]), the gated kinds
//! on their one lane ([`Lane`]), the HTTP servers, the Lease, and the task that follows
//! leadership. Every task started here belongs to the returned [`Running`], which stops them in
//! the one safe order.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::backend::ServiceBackend;
use super::config::{Config, Tuning};
use super::error::ServiceError;
use super::hook_limit::HookLimit;
use super::index::Index;
use super::kind::GatedKind;
use super::kustomization::Kustomizations;
use super::lane::Lane;
use super::leadership::Leadership;
use super::parts::Parts;
use super::parts::build_parts;
use super::resume::Resume;
use super::running::Running;
use super::volumes::VolumeFollower;
use super::watch::{Feed, Readiness};
use super::{access, gate};
use crate::records::Records;

/// How often the leader says which published artifacts are lost (the storage tries to restore
/// them every [`crate::storage::follow::RETRY_LOST`]).
const LOST_REPORT: Duration = Duration::from_secs(15);

/// Starts `flux-converger serve`: the gated kinds (their watches, records and runs) on one
/// lane, the HTTP apps, the workers and (with `leader_elect`) the Lease. Returns once the HTTP
/// server listens.
pub async fn start(config: Config, client: kube::Client) -> Result<Running, ServiceError> {
    start_tuned(config, client, Tuning::default()).await
}

/// [`start`] with non-flag knobs (tests shorten the Lease and the backoff).
pub async fn start_tuned(
    config: Config,
    client: kube::Client,
    tuning: Tuning,
) -> Result<Running, ServiceError> {
    let (parts, caches) = build_parts(&config, &client, &tuning)?;
    let mut running = start_with(config, client, tuning, parts).await?;
    // Stopped with the other watches (`shutdown` cancels, then awaits `background`).
    let cancel = running.cancel.clone();
    running.background.push(tokio::spawn(async move {
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = caches => {}
        }
    }));
    Ok(running)
}

/// Starts the service from its parts (see [`Parts`]) and returns once it listens.
pub async fn start_with(
    config: Config,
    client: kube::Client,
    tuning: Tuning,
    parts: Parts,
) -> Result<Running, ServiceError> {
    let Parts {
        runner,
        results,
        queue,
        kinds,
        resume,
        app,
        metrics_app,
        metrics,
        fence,
        storage,
        volumes,
    } = parts;
    // The Kustomizations: the first kind, whose run the parts give (the gate, or a test's
    // stand-in), and whose watches feed an index of them and of their sources.
    let index = Arc::new(RwLock::new(Index::new(config.default_gate)));
    let readiness = Readiness::default();
    let records: Arc<dyn Records> = Arc::new(results.clone());
    let observer = runner.observer();
    let feed_tasks = tokio_util::task::TaskTracker::new();
    let tasks: Vec<_> = std::iter::once(feed_tasks.clone())
        .chain(observer.as_ref().map(|o| o.tasks().clone()))
        .chain(volumes.as_ref().map(|v| v.tasks().clone()))
        .collect();
    let feed = Feed {
        tasks: feed_tasks,
        index: index.clone(),
        queue: queue.clone(),
        records,
        readiness: readiness.clone(),
        observer,
        sources_changed: Arc::default(),
    };
    let kustomizations: Arc<dyn GatedKind> = Arc::new(Kustomizations::new(
        runner,
        results,
        feed,
        config.watch_label_selector.clone(),
        match &storage {
            Some(_) => None,
            None => config.storage.unavailable.clone(),
        },
    ));
    let lane = Lane::new(
        std::iter::once(kustomizations).chain(kinds).collect(),
        queue.clone(),
        Arc::new(HookLimit::new(config.hook_min_interval)),
    );
    let backend = ServiceBackend {
        lane: lane.clone(),
        readiness: readiness.clone(),
        resume: Some(resume.clone()),
    };

    let (listener, addr) = bind("--listen", config.listen).await?;
    let (metrics_listener, metrics_addr) = bind("--metrics-addr", config.metrics_addr).await?;
    let storage_listener = match &storage {
        Some(_) => Some(bind("--storage-addr", config.storage.addr).await?),
        None => None,
    };

    let leadership = if config.leader_elect {
        Leadership::elect(
            client.clone(),
            &config.namespace,
            &config.leader_election_id,
            &tuning.lease,
            &fence.tenure,
        )
        .await?
    } else {
        fence.tenure.bind_always();
        Leadership::always()
    };

    let cancel = CancellationToken::new();
    let mut background = Vec::new();
    let until_cancelled = |cancel: &CancellationToken, task: BoxFuture<'static, ()>| {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = task => {}
            }
        })
    };
    // Every kind's watches and ticks, and its records followed on every replica.
    for task in lane.tasks(&client) {
        background.push(until_cancelled(&cancel, task));
    }
    for kind in lane.kinds() {
        background.push(until_cancelled(
            &cancel,
            Box::pin(kind.results().clone().follow()),
        ));
    }
    background.push(until_cancelled(
        &cancel,
        Box::pin(lane.clone().resync(config.resync, metrics.clone())),
    ));
    background.push(until_cancelled(
        &cancel,
        Box::pin(access::check(
            client.clone(),
            access::Needs {
                namespace: config.namespace.clone(),
                leader_elect: config.leader_elect,
                impersonating: config.default_service_account.is_some(),
                status_auth: config.http.status_auth == crate::http::StatusAuthMode::Kubernetes,
                helm_releases: false,
                argocd: config.argocd.is_some(),
            },
            index,
            readiness,
            config.call_timeout,
        )),
    ));
    background.push(until_cancelled(
        &cancel,
        Box::pin(lead(
            lane.clone(),
            leadership.subscribe(),
            resume,
            volumes.clone(),
        )),
    ));

    let storage_addr = storage_listener.as_ref().map(|(_, addr)| *addr);
    if let (Some(storage), Some((listener, storage_addr))) = (storage, storage_listener) {
        // The leader says on an ExternalArtifact when what it publishes is lost (an empty
        // volume, the upstream moved on, no replica has it), after each restore attempt.
        let reporter = {
            let storage = storage.clone();
            let client = client.clone();
            let mut leading = leadership.subscribe();
            let call_timeout = config.call_timeout;
            async move {
                let mut ticker = tokio::time::interval(LOST_REPORT);
                loop {
                    ticker.tick().await;
                    if *leading.borrow_and_update() {
                        gate::publish::report_lost(&client, &storage, call_timeout).await;
                    }
                }
            }
        };
        background.push(until_cancelled(&cancel, Box::pin(reporter)));
        // Every replica serves and follows, leader or not: a failover never makes Flux's
        // fetch of a published artifact fail.
        background.push(until_cancelled(
            &cancel,
            Box::pin(crate::storage::follow::follow(
                storage.clone(),
                client.clone(),
            )),
        ));
        let stop = cancel.child_token();
        let edge = config.http.edge;
        background.push(tokio::spawn(async move {
            if let Err(error) =
                crate::storage::server::run(listener, storage, edge, stop.cancelled_owned()).await
            {
                tracing::error!(%error, port = "--storage-addr", "artifact server stopped");
            }
        }));
        tracing::info!(%storage_addr, "serving artifacts");
    }

    let cut = CancellationToken::new();
    let workers = tokio::spawn(lane.clone().work(config.workers.max(1), cut.clone()));

    let router = app(Arc::new(backend.clone()));
    // One task for both ports: either stopping on its own stops the other, and `stopped()`
    // sees it.
    let server = {
        let stop = cancel.child_token();
        let edge = config.http.edge;
        tokio::spawn(async move {
            tokio::join!(
                serve_http(listener, router, edge, stop.clone(), "--listen"),
                serve_http(metrics_listener, metrics_app, edge, stop, "--metrics-addr"),
            );
        })
    };
    let kinds: Vec<_> = lane.kinds().iter().map(|k| k.kind().as_str()).collect();
    tracing::info!(%addr, %metrics_addr, namespace = %config.namespace, workers = config.workers,
        kinds = ?kinds,
        default_gate = %config.default_gate, leader_elect = config.leader_elect,
        lease = %config.leader_election_id, shard = ?lane.kinds()[0].results().shard(),
        hook_min_interval = ?config.hook_min_interval,
        status_auth = ?config.http.status_auth,
        header_read_timeout = ?config.http.edge.header_read_timeout,
        request_timeout = ?config.http.edge.request_timeout,
        max_connections = config.http.edge.max_connections, "serving");

    Ok(Running {
        addr,
        metrics_addr,
        storage_addr,
        backend,
        queue,
        cancel,
        workers: Some(workers),
        server: Some(server),
        background,
        leadership,
        shutdown_grace: tuning.shutdown_grace,
        windows: fence.windows,
        cut,
        tasks,
        volumes,
    })
}

/// Binds one of the service's ports and reads back the address (the port is known for `:0`).
async fn bind(
    flag: &'static str,
    addr: SocketAddr,
) -> Result<(tokio::net::TcpListener, SocketAddr), ServiceError> {
    let listen_error = |error| ServiceError::Listen { flag, addr, error };
    let listener = crate::http::listen::bind(addr)
        .await
        .map_err(listen_error)?;
    let local = listener.local_addr().map_err(listen_error)?;
    Ok((listener, local))
}

/// Serves one port under the edge limits until `stop`, and stops the other port with it when
/// it ends on its own.
async fn serve_http(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    edge: crate::http::edge::EdgeLimits,
    stop: CancellationToken,
    flag: &'static str,
) {
    let result =
        crate::http::edge::serve(listener, router, edge, stop.clone().cancelled_owned()).await;
    if let Err(error) = result {
        tracing::error!(%error, port = flag, "HTTP server stopped");
    }
    stop.cancel();
}

/// Follows leadership: on taking the lead (once every kind's records are read and its watches
/// synced), finish the previous leader's intents, follow again the claims it followed, let each
/// kind take over what it left open, queue whatever is due (trigger `startup`) and let the
/// workers run; on losing it, pause them and stop following claims. The records need no
/// re-reading on either side: each kind's results follow the cluster on every replica, so a
/// follower's `/status` follows the leader's writes and a new leader starts from its
/// predecessor's last records.
async fn lead(
    lane: Lane,
    mut leading: tokio::sync::watch::Receiver<bool>,
    resume: Arc<dyn Resume>,
    volumes: Option<VolumeFollower>,
) {
    for kind in lane.kinds() {
        kind.results().loaded().await;
    }
    loop {
        let is_leading = *leading.borrow_and_update();
        if is_leading {
            lane.synced(Duration::from_millis(50)).await;
            resume.resume_all().await;
            // Claims a previous leader followed are followed again from its records.
            if let Some(volumes) = &volumes {
                volumes.resume();
            }
            lane.lead().await;
        } else {
            lane.follow();
            // Only the leader follows claims (and writes what they do).
            if let Some(volumes) = &volumes {
                volumes.stop();
            }
        }
        if leading.changed().await.is_err() {
            return;
        }
    }
}
