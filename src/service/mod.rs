//! `serve`: the service around the converge (docs/service.md). It starts the watches, the
//! resync, the leader loop, the workers and the HTTP servers, each a task it owns (cancelled
//! through one `CancellationToken`); the tasks those start are owned in turn (the observer's
//! and the watch feed's `TaskTracker`s, the artifact follower's and each listener's
//! `JoinSet`). [`Running`] stops them in the one order that never leaves a StatefulSet
//! between its orphan delete and its re-apply (queue closed, running revisions given the
//! grace, open windows waited for past it, then everything else) and awaits every one.
//!
//! - [`parts`]: the parts built from the configuration; [`resume`]: the journal's intents a
//!   previous process left; [`gate`]: one revision of one gated object; [`queue`], [`index`],
//!   [`watch`]: what is due and when; [`leadership`]: the Lease, its tenure and the fence of
//!   every write; [`access`], [`backend`]: what `http` reads of the service.

pub mod access;
pub mod backend;
mod config;
pub mod gate;
pub mod helm;
pub mod hook_limit;
pub mod index;
pub mod leadership;
mod parts;
pub mod queue;
pub mod resume;
pub mod step;
pub mod volumes;
pub mod watch;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::http::backend::Backend;
use crate::model::Key;
use crate::model::Trigger;
use crate::records::Records;
use crate::records::metrics::Metrics;
use crate::records::results::Results;
use crate::service::backend::ServiceBackend;
pub use crate::service::config::{Config, ConfigBuilder, Tuning};
pub use crate::service::gate::GateOutcome;
use crate::service::hook_limit::HookLimit;
use crate::service::index::Index;
use crate::service::leadership::fence::ServiceFence;
use crate::service::leadership::windows::{RunWindows, WindowTracker};
use crate::service::leadership::{LeaderError, Leadership};
pub use crate::service::parts::build_parts;
use crate::service::queue::Queue;
pub use crate::service::resume::JournalResume;
use crate::service::watch::{Feed, Readiness, SOURCE_KINDS};

/// How long shutdown waits for the Lease's release (it expires on its own otherwise).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// One revision of one Kustomization: render → converge → hand off → observe (the gate). Its
/// outcome goes to the queue as it is ([`Queue::complete`]).
pub trait Runner: Send + Sync + 'static {
    fn run<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        trigger: Trigger,
    ) -> BoxFuture<'a, GateOutcome>;

    /// What follows the hand-offs of its runs from the watches (`None`: a runner that hands
    /// nothing off and waits for nothing).
    fn observer(&self) -> Option<gate::observe::Observer> {
        None
    }
}

/// How often the observer closes gates past `--handoff-timeout` and re-opens the ones Flux's
/// retry schedule makes due.
const OBSERVE_TICK: Duration = Duration::from_secs(1);

/// How often the leader says which published artifacts are lost (the storage tries to restore
/// them every [`crate::storage::follow::RETRY_LOST`]).
const LOST_REPORT: Duration = Duration::from_secs(15);

/// What finishes a previous process's unfinished converges when this one starts leading.
pub trait Resume: Send + Sync + 'static {
    fn resume_all(&self) -> BoxFuture<'_, ()>;

    /// The intents the last [`Resume::resume_all`] left in the journal because they are not
    /// what they say (named in `/status` as `refusedIntents`).
    fn refused(&self) -> Vec<crate::journal::RefusedIntent> {
        Vec::new()
    }
}

/// The parts [`start_with`] assembles: the gate, the results, the HTTP app, the resume.
pub struct Parts {
    pub runner: Arc<dyn Runner>,
    /// The results: [`start_with`] follows them from the cluster (on every replica) and reads
    /// what is due from them.
    pub results: Results,
    pub resume: Arc<dyn Resume>,
    /// Builds the HTTP app over the service's backend.
    pub app: Box<dyn FnOnce(Arc<dyn Backend>) -> axum::Router + Send>,
    /// The app of the metrics port (`http::metrics_router`): it never sees the backend.
    pub metrics_app: axum::Router,
    pub metrics: Metrics,
    /// The fence the runner's and the resume's converges ask: [`start_with`] binds it to the
    /// leadership it sets up and waits for its windows at shutdown.
    pub fence: ServiceFence,
    /// The artifact storage, when `--storage-path` is set and writable: [`start_with`] serves
    /// it on `--storage-addr` and keeps it following the ExternalArtifacts.
    pub storage: Option<Arc<crate::storage::Storage>>,
    /// The HelmReleases' runs (`service::helm`): [`start_with`] gives them their own watch,
    /// queue and workers; `None` gates Kustomizations only.
    pub helm: Option<helm::HelmGate>,
    /// The claim follower the runs hand their converged revisions to (`service::volumes`):
    /// [`start_with`] resumes it from the records when this replica leads, stops it when it
    /// does not and at shutdown; `None` follows nothing.
    pub volumes: Option<volumes::VolumeFollower>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("cannot listen on {addr} ({flag}): {error}")]
    Listen {
        flag: &'static str,
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error("{0}")]
    Setup(String),
}

/// A started service.
pub struct Running {
    /// The address `--listen` bound (the port is known even for `:0`).
    pub addr: SocketAddr,
    /// The address `--metrics-addr` bound.
    pub metrics_addr: SocketAddr,
    /// The address `--storage-addr` bound (with a storage).
    pub storage_addr: Option<SocketAddr>,
    pub backend: ServiceBackend,
    queue: Queue<Key>,
    /// The HelmReleases' queue, closed with the Kustomizations'.
    helm_queue: Option<Queue<Key>>,
    cancel: CancellationToken,
    workers: Option<JoinHandle<()>>,
    server: Option<JoinHandle<()>>,
    background: Vec<JoinHandle<()>>,
    leadership: Leadership,
    shutdown_grace: Duration,
    windows: WindowTracker,
    /// Cancelled when the grace has passed: each run stops once it holds no window.
    cut: CancellationToken,
    /// The tasks the watches and the observer start: awaited at shutdown, after every window
    /// closed, so no write of theirs is left in flight.
    tasks: Vec<tokio_util::task::TaskTracker>,
    /// The claim follower, stopped at shutdown (its tasks are among `tasks`).
    volumes: Option<volumes::VolumeFollower>,
}

impl Running {
    /// Whether this replica leads (always, without `--leader-elect`).
    pub fn is_leading(&self) -> bool {
        self.leadership.is_leading()
    }

    /// The converges' open windows (orphan delete sent, re-apply not returned): what shutdown
    /// waits for past its grace.
    pub fn windows(&self) -> WindowTracker {
        self.windows.clone()
    }

    /// Stops gracefully: no new revision starts and the running ones get the shutdown grace.
    /// Then no converge starts an orphan delete any more; a run between its orphan delete and
    /// its re-apply is waited for, however long past the grace (its own timeouts bound it),
    /// and every other run is stopped at once. Then the watches and the HTTP server stop and
    /// the Lease is released.
    pub async fn shutdown(self) {
        let Running {
            queue,
            helm_queue,
            cancel,
            workers,
            server,
            background,
            leadership,
            shutdown_grace,
            windows,
            cut,
            tasks,
            volumes,
            ..
        } = self;
        queue.close();
        if let Some(helm_queue) = &helm_queue {
            helm_queue.close();
        }
        let running = queue.running() + helm_queue.as_ref().map_or(0, Queue::running);
        if running > 0 {
            tracing::info!(running, "shutting down: waiting for running revisions");
        }
        let mut waited = false;
        if let Some(mut workers) = workers
            && tokio::time::timeout(shutdown_grace, &mut workers)
                .await
                .is_err()
        {
            windows.seal();
            cut.cancel();
            let open = windows.open_count();
            waited = open > 0;
            tracing::warn!(grace = ?shutdown_grace, running = queue.running(), open,
                "running revisions did not finish in time: stopping those outside a window (the next leader runs them again)");
            if open > 0 {
                tracing::warn!(
                    open,
                    "waiting past the grace for converges between their orphan delete and their re-apply"
                );
            }
            let _ = workers.await;
        }
        // The resume at start (in the leader loop, cancelled below) holds windows too.
        windows.seal();
        if windows.open_count() > 0 {
            waited = true;
            tracing::warn!(
                open = windows.open_count(),
                "waiting for resumed converges between their orphan delete and their re-apply"
            );
            windows.closed().await;
        }
        if waited {
            tracing::info!("every re-apply returned");
        }
        cancel.cancel();
        if let Some(volumes) = &volumes {
            volumes.stop();
        }
        for task in background {
            let _ = task.await;
        }
        // The watches are stopped: nothing starts a task any more. Each task is bounded by
        // the call timeout; the grace bounds the wait for all of them.
        let owned = async {
            for tracker in &tasks {
                tracker.close();
                tracker.wait().await;
            }
        };
        if tokio::time::timeout(shutdown_grace, owned).await.is_err() {
            tracing::warn!(grace = ?shutdown_grace, "tasks still running after the grace: abandoned");
        }
        if let Some(server) = server {
            let _ = server.await;
        }
        leadership.release(RELEASE_TIMEOUT).await;
        tracing::info!("stopped");
    }

    /// Resolves when the HTTP server or the workers stop on their own (a fatal error: both
    /// run until [`Running::shutdown`] otherwise). Cancel-safe.
    pub async fn stopped(&mut self) {
        let (Some(server), Some(workers)) = (self.server.as_mut(), self.workers.as_mut()) else {
            return;
        };
        tokio::select! {
            _ = server => self.server = None,
            _ = workers => self.workers = None,
        }
    }

    /// Runs until the service stops on its own, then shuts down.
    pub async fn wait(mut self) {
        self.stopped().await;
        self.shutdown().await;
    }
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
        resume,
        app,
        metrics_app,
        metrics,
        fence,
        storage,
        helm,
        volumes,
    } = parts;
    let index = Arc::new(RwLock::new(Index::new(config.default_gate)));
    let queue: Queue<Key> = Queue::new(tuning.backoff, metrics.queue_depth.clone());
    // Nothing runs before this replica leads and has finished the previous one's intents.
    queue.pause(true);
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
        records: records.clone(),
        readiness: readiness.clone(),
        observer: observer.clone(),
    };
    // The HelmReleases' lane: paused with the Kustomizations' until this replica leads.
    let helm_lane = helm.map(|gate| {
        let queue = Queue::new(tuning.backoff, Default::default());
        queue.pause(true);
        helm::lane::Lane::new(gate, queue)
    });
    let backend = ServiceBackend {
        helm: helm_lane.clone(),
        index: index.clone(),
        queue: queue.clone(),
        records,
        readiness: readiness.clone(),
        status: Arc::default(),
        hook_limit: Arc::new(HookLimit::new(config.hook_min_interval)),
        resume: Some(resume.clone()),
        storage_unavailable: match &storage {
            Some(_) => None,
            None => config.storage.unavailable.clone(),
        },
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
    background.push(until_cancelled(
        &cancel,
        Box::pin(
            feed.clone()
                .watch_kustomizations(client.clone(), config.watch_label_selector.clone()),
        ),
    ));
    for kind in SOURCE_KINDS {
        background.push(until_cancelled(
            &cancel,
            Box::pin(feed.clone().watch_sources(client.clone(), kind)),
        ));
    }
    background.push(until_cancelled(
        &cancel,
        Box::pin(feed.clone().resync(config.resync, metrics.clone())),
    ));
    if let Some(observer) = observer {
        background.push(until_cancelled(
            &cancel,
            Box::pin(observer.run_ticks(OBSERVE_TICK)),
        ));
    }
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
            },
            index.clone(),
            readiness.clone(),
            config.call_timeout,
        )),
    ));
    background.push(until_cancelled(&cancel, Box::pin(results.clone().follow())));
    if let Some(lane) = &helm_lane {
        background.push(until_cancelled(
            &cancel,
            Box::pin(lane.gate.results().clone().follow()),
        ));
        background.push(until_cancelled(
            &cancel,
            Box::pin(
                lane.clone()
                    .watch(client.clone(), config.watch_label_selector.clone()),
            ),
        ));
        background.push(until_cancelled(
            &cancel,
            Box::pin(lane.clone().resync(config.resync)),
        ));
    }
    background.push(until_cancelled(
        &cancel,
        Box::pin(lead(
            feed.clone(),
            leadership.subscribe(),
            results.clone(),
            resume,
            helm_lane.clone(),
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
    let helm_queue = helm_lane.as_ref().map(|l| l.queue.clone());
    let workers = {
        let kustomizations = work(
            queue.clone(),
            index.clone(),
            results.clone(),
            runner,
            config.workers.max(1),
            cut.clone(),
        );
        let helm_releases = {
            let cut = cut.clone();
            let workers = config.workers.max(1);
            async move {
                if let Some(lane) = helm_lane {
                    lane.work(workers, cut).await;
                }
            }
        };
        tokio::spawn(async move {
            tokio::join!(kustomizations, helm_releases);
        })
    };

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
    tracing::info!(%addr, %metrics_addr, namespace = %config.namespace, workers = config.workers,
        default_gate = %config.default_gate, leader_elect = config.leader_elect,
        lease = %config.leader_election_id, shard = ?results.shard(),
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
        helm_queue,
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

/// Follows leadership: on taking the lead (once the results are read), finish the previous
/// leader's intents, queue whatever is due (trigger `startup`) and let the workers run; on
/// losing it, pause them. The results need no re-reading on either side: [`Results::follow`]
/// watches them on every replica, so a follower's `/status` follows the leader's writes and a
/// new leader starts from its predecessor's last records.
async fn lead(
    feed: Feed,
    mut leading: tokio::sync::watch::Receiver<bool>,
    results: Results,
    resume: Arc<dyn Resume>,
    helm: Option<helm::lane::Lane>,
    volumes: Option<volumes::VolumeFollower>,
) {
    results.loaded().await;
    if let Some(lane) = &helm {
        lane.gate.results().loaded().await;
    }
    loop {
        let is_leading = *leading.borrow_and_update();
        if is_leading {
            feed.readiness.wait_synced(Duration::from_millis(50)).await;
            resume.resume_all().await;
            if let Some(observer) = &feed.observer {
                let open = feed
                    .records
                    .keys()
                    .into_iter()
                    .filter_map(|key| {
                        let last = feed.records.last(&key.namespace, &key.name)?;
                        index::gate_open(&last).then_some((key, last))
                    })
                    .collect();
                observer.recover(open).await;
            }
            // Claims a previous leader followed are followed again from its records.
            if let Some(volumes) = &volumes {
                volumes.resume();
            }
            let due = feed.queue_due(Trigger::Startup);
            tracing::info!(
                queued = due.total(),
                never_run = due.never_run,
                new_revision = due.new_revision,
                unfinished = due.unfinished,
                deferred = due.deferred,
                spec_changed = due.spec_changed,
                "leading: converging"
            );
            feed.queue.pause(false);
            if let Some(lane) = &helm {
                let queued = lane.queue_all(Trigger::Startup);
                tracing::info!(queued, "leading: HelmReleases queued");
                lane.queue.pause(false);
            }
            if leading.changed().await.is_err() {
                return;
            }
        } else {
            feed.queue.pause(true);
            if let Some(lane) = &helm {
                lane.queue.pause(true);
            }
            // Only the leader follows claims (and writes what they do).
            if let Some(volumes) = &volumes {
                volumes.stop();
            }
            tracing::info!("not leading: serving status only");
            if leading.changed().await.is_err() {
                return;
            }
        }
    }
}

/// The workers: at most `workers` revisions at once, one per Kustomization. A key handed out
/// is run only if it is still due (a webhook for a revision already finished, a refused
/// revision, a follow-up made moot by the run before it are skipped).
/// `cut`: the shutdown grace has passed; a run is dropped as soon as it holds no window.
async fn work(
    queue: Queue<Key>,
    index: Arc<RwLock<Index>>,
    store: Results,
    runner: Arc<dyn Runner>,
    workers: usize,
    cut: CancellationToken,
) {
    queue
        .ready()
        .for_each_concurrent(workers, |(key, trigger)| {
            let (queue, index, store, runner, cut) = (
                queue.clone(),
                index.clone(),
                store.clone(),
                runner.clone(),
                cut.clone(),
            );
            async move {
                let last = store.last(&key.namespace, &key.name);
                let (due, spec) = {
                    let index = index.read().unwrap_or_else(|e| e.into_inner());
                    (
                        index.due(&key, last.as_ref()),
                        index.entry(&key).map(|e| e.spec_digest),
                    )
                };
                let Some(due) = due else {
                    tracing::debug!(kustomization = %key, trigger = ?trigger, "not due; skipped");
                    // Nothing to do: what the last record says stands (or nothing does).
                    let outcome = last.map_or(GateOutcome::NotHandled, |r| GateOutcome::Done(r.state));
                    queue.complete(&key, &outcome);
                    return;
                };
                // The attempt this run is: a retry logs only its end (one line per attempt).
                let attempt = queue.failures(&key) + 1;
                if attempt == 1 {
                    tracing::info!(kustomization = %key, trigger = ?trigger, due = due.as_str(), "run");
                } else {
                    tracing::debug!(kustomization = %key, trigger = ?trigger, due = due.as_str(), attempt, "run");
                }
                let windows = RunWindows::default();
                let outcome = tokio::select! {
                    biased;
                    outcome = windows.scope(runner.run(&key.namespace, &key.name, trigger))
                        .instrument(tracing::info_span!("run", kustomization = %key, revision = tracing::field::Empty)) => outcome,
                    () = async {
                        cut.cancelled().await;
                        windows.none_open().await;
                    } => {
                        tracing::warn!(kustomization = %key,
                            "stopped by the shutdown outside a window: run again by the next leader");
                        let stopped = GateOutcome::Failed { message: "stopped by the shutdown".into() };
                        queue.complete(&key, &stopped);
                        return;
                    }
                };
                if matches!(outcome, GateOutcome::Done(_) | GateOutcome::Deferred)
                    && let Some(spec) = spec
                {
                    index
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .note_finished(&key, spec);
                }
                let retry_in = queue.complete(&key, &outcome);
                match (&outcome, retry_in) {
                    (GateOutcome::Done(state), _) => {
                        tracing::info!(kustomization = %key, state = state.as_str(), "finished");
                    }
                    (GateOutcome::Deferred, _) => {
                        tracing::info!(kustomization = %key, "deferred: claims grow once Bound");
                    }
                    (GateOutcome::NotHandled, _) => {}
                    (GateOutcome::Failed { message }, retry_in) => {
                        tracing::warn!(kustomization = %key, error = %message, attempt,
                            retry_in = ?retry_in.unwrap_or_default(), "failed; retrying with backoff");
                    }
                }
                if retry_in.is_some() {
                    // The source moved on while the failed run ran: the new revision is new
                    // work, and need not wait for the old one's backoff.
                    let failed = store.last(&key.namespace, &key.name).map(|r| r.revision);
                    let now = index
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .source_revision(&key)
                        .map(String::from);
                    if now.is_some() && failed.is_some() && now != failed {
                        queue.push_now(key, Trigger::Watch);
                    }
                }
            }
        })
        .await;
}

impl Runner for gate::Gate {
    fn run<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        trigger: Trigger,
    ) -> BoxFuture<'a, GateOutcome> {
        Box::pin(gate::Gate::run(self, namespace, name, trigger))
    }

    fn observer(&self) -> Option<gate::observe::Observer> {
        Some(gate::Gate::observer(self))
    }
}

/// Starts `flux-converger serve`: the results store, the gate (render → converge → hand off),
/// the HTTP app, the watches, the workers and (with `leader_elect`) the Lease. Returns once
/// the HTTP server listens.
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
