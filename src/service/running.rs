//! A started service, and the one order it stops in: no new run starts, the running ones get
//! the shutdown grace, a run between its orphan delete and its re-apply is waited for however
//! long past it, then the watches, the tasks they started, the servers and the Lease.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::backend::ServiceBackend;
use super::leadership::Leadership;
use super::leadership::windows::WindowTracker;
use super::queue::Queue;
use super::volumes::VolumeFollower;
use crate::model::Key;

/// How long shutdown waits for the Lease's release (it expires on its own otherwise).
pub(super) const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// A started service.
pub struct Running {
    /// The address `--listen` bound (the port is known even for `:0`).
    pub addr: SocketAddr,
    /// The address `--metrics-addr` bound.
    pub metrics_addr: SocketAddr,
    /// The address `--storage-addr` bound (with a storage).
    pub storage_addr: Option<SocketAddr>,
    pub backend: ServiceBackend,
    pub(super) queue: Queue<Key>,
    pub(super) cancel: CancellationToken,
    pub(super) workers: Option<JoinHandle<()>>,
    pub(super) server: Option<JoinHandle<()>>,
    pub(super) background: Vec<JoinHandle<()>>,
    pub(super) leadership: Leadership,
    pub(super) shutdown_grace: Duration,
    pub(super) windows: WindowTracker,
    /// Cancelled when the grace has passed: each run stops once it holds no window.
    pub(super) cut: CancellationToken,
    /// The tasks the watches and the observer start: awaited at shutdown, after every window
    /// closed, so no write of theirs is left in flight.
    pub(super) tasks: Vec<tokio_util::task::TaskTracker>,
    /// The claim follower, stopped at shutdown (its tasks are among `tasks`).
    pub(super) volumes: Option<VolumeFollower>,
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
        let running = queue.running();
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
