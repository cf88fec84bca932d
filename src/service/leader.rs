//! Leadership: of several replicas, only the one holding the Lease converges and hands off.
//! Every replica watches, keeps its index and serves `/status`; leadership gates the writes
//! only (the queue is paused while not leading). The Lease itself is kube-lease-manager's: it
//! renews with server-side apply and tolerates clock skew. What a replica can prove about it
//! between renewals, which the converge's fence asks before each write, is [`Tenure`]'s.

use std::time::Duration;

use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::service::tenure::{Tenure, observing_client};

/// The Lease's name in `--namespace`.
pub const LEASE_NAME: &str = "flux-converger";

/// How the Lease is held.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub name: String,
    /// This replica's identity (the pod's name).
    pub identity: String,
    /// How long a holder's lock is valid after its last renewal.
    pub duration: Duration,
    /// How long before expiry the holder renews (also the clock skew tolerated).
    pub grace: Duration,
    /// How long before the lock's expiry (on this replica's own clock, from its last renewal)
    /// the fence stops its writes: the clock skew between replicas and the time a write takes
    /// to land. Below `grace`, so a renewal on time never lets the proof lapse.
    pub margin: Duration,
}

impl LeaseSettings {
    /// kube-lease-manager's defaults: a 30 s lock renewed 5 s before it expires, so a replica
    /// that dies is replaced within half a minute and a slow API server does not flap it; its
    /// writes stop 2 s before the lock could expire for the others.
    pub fn new(identity: impl Into<String>) -> Self {
        LeaseSettings {
            name: LEASE_NAME.to_string(),
            identity: identity.into(),
            duration: Duration::from_secs(30),
            grace: Duration::from_secs(5),
            margin: Duration::from_secs(2),
        }
    }
}

/// This replica's identity: the pod's name (`HOSTNAME` in a pod), else a random suffix so two
/// processes on one machine never share a lock.
pub fn default_identity() -> String {
    match std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
    {
        Some(name) if !name.is_empty() => name,
        _ => format!("flux-converger-{:08x}", rand::random::<u32>()),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("leader election: cannot use the Lease {namespace}/{name}: {error}")]
    Lease {
        namespace: String,
        name: String,
        error: LeaseManagerError,
    },
}

/// Whether this replica leads now, and a way to hear when that changes.
pub struct Leadership {
    receiver: watch::Receiver<bool>,
    /// Kept so that, without election, the channel never closes.
    _sender: Option<watch::Sender<bool>>,
    task: Option<JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>>,
}

impl Leadership {
    /// No election (`--leader-elect` not given): this replica always leads.
    pub fn always() -> Self {
        let (sender, receiver) = watch::channel(true);
        Leadership {
            receiver,
            _sender: Some(sender),
            task: None,
        }
    }

    /// Takes part in the election for `settings.name` in `namespace`; the Lease is created if
    /// missing. kube-lease-manager runs the renewal in its own task, over a client that tells
    /// `tenure` every answer about the Lease.
    pub async fn elect(
        client: kube::Client,
        namespace: &str,
        settings: &LeaseSettings,
        tenure: &Tenure,
    ) -> Result<Self, LeaderError> {
        tenure.bind_elected(namespace, settings);
        let client = observing_client(client, namespace, &settings.name, tenure.clone());
        let manager = LeaseManagerBuilder::new(client, settings.name.clone())
            .with_namespace(namespace)
            .with_identity(settings.identity.clone())
            .with_duration(settings.duration.as_secs().max(1))
            .with_grace(settings.grace.as_secs().max(1))
            .with_field_manager("flux-converger")
            .build()
            .await
            .map_err(|error| LeaderError::Lease {
                namespace: namespace.to_string(),
                name: settings.name.clone(),
                error,
            })?;
        let (receiver, task) = manager.watch().await;
        Ok(Leadership {
            receiver,
            _sender: None,
            task: Some(task),
        })
    }

    pub fn is_leading(&self) -> bool {
        *self.receiver.borrow()
    }

    /// A receiver that sees every change of leadership.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.receiver.clone()
    }

    /// Gives the Lease up (if held) so another replica takes over without waiting for it to
    /// expire; bounded by `timeout`. Every other receiver must have been dropped first.
    pub async fn release(self, timeout: Duration) {
        let Leadership { receiver, task, .. } = self;
        drop(receiver);
        if let Some(task) = task {
            match tokio::time::timeout(timeout, task).await {
                Ok(Ok(Ok(_))) => tracing::info!("lease released"),
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "releasing the lease"),
                Ok(Err(e)) => tracing::warn!(error = %e, "the lease task ended abnormally"),
                Err(_) => tracing::warn!("releasing the lease timed out; it expires on its own"),
            }
        }
    }
}
