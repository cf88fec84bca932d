//! Leadership: of several replicas, only the one holding the Lease converges and hands off.
//! Every replica watches, keeps its index and serves `/status`; leadership gates the writes
//! only (the queue is paused while not leading). The Lease itself is kube-lease-manager's: it
//! renews with server-side apply and tolerates clock skew. What a replica can prove about it
//! between renewals, which the converge's fence asks before each write, is [`Tenure`]'s.

use std::time::Duration;

use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::service::leadership::settings::LeaseSettings;
use crate::service::leadership::tenure::{Tenure, observing_client};

/// The Lease's name in `--namespace` without `--watch-label-selector`.
pub const LEASE_NAME: &str = "flux-converger";

/// The default `--leader-election-id`: [`LEASE_NAME`] for the one install, and for a shard
/// (`--watch-label-selector`) `flux-converger-<first 8 hex of sha256(selector)>`. Flux's
/// sharded controllers each take their own Lease; so must the converger's shards, or two of
/// them exclude each other and only one converges at a time. Derived from the selector (as
/// given, byte for byte) so that each shard's Deployment needs no second flag, every replica of
/// one shard agrees on it, and it stays a valid Lease name and label value (23 characters)
/// whatever the selector holds.
pub fn default_election_id(watch_label_selector: Option<&str>) -> String {
    match watch_label_selector {
        None => LEASE_NAME.to_string(),
        Some(selector) => {
            let digest = hex::encode(Sha256::digest(selector.as_bytes()));
            format!("{LEASE_NAME}-{}", &digest[..8])
        }
    }
}

/// A `--leader-election-id` that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadElectionId {
    #[error("{0:?}: must be 1 to 63 characters")]
    Length(String),
    #[error(
        "{0:?}: must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
    )]
    Characters(String),
}

/// Why a `--leader-election-id` cannot be used: it names a Lease (a DNS subdomain) and is the
/// value of the shard label on the records (at most 63 characters), so it must be both.
pub fn check_election_id(id: &str) -> Result<(), BadElectionId> {
    let valid_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let alphanumeric =
        |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if id.is_empty() || id.len() > 63 {
        return Err(BadElectionId::Length(id.to_string()));
    }
    if !id.chars().all(valid_char)
        || !alphanumeric(id.chars().next())
        || !alphanumeric(id.chars().last())
    {
        return Err(BadElectionId::Characters(id.to_string()));
    }
    Ok(())
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

    /// Takes part in the election for the Lease `name` in `namespace`; the Lease is created if
    /// missing. kube-lease-manager runs the renewal in its own task, over a client that tells
    /// `tenure` every answer about the Lease.
    pub async fn elect(
        client: kube::Client,
        namespace: &str,
        name: &str,
        settings: &LeaseSettings,
        tenure: &Tenure,
    ) -> Result<Self, LeaderError> {
        tenure.bind_elected(namespace, name, settings);
        let client = observing_client(client, namespace, name, tenure.clone());
        let manager = LeaseManagerBuilder::new(client, name.to_string())
            .with_namespace(namespace)
            .with_identity(settings.identity.clone())
            .with_duration(settings.duration.as_secs().max(1))
            .with_grace(settings.grace.as_secs().max(1))
            .with_field_manager("flux-converger")
            .build()
            .await
            .map_err(|error| LeaderError::Lease {
                namespace: namespace.to_string(),
                name: name.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each shard's Lease: the default without a selector, a name of its own per selector
    /// (pinned: a changed derivation would split a running shard's replicas over two Leases).
    #[test]
    fn election_id_by_table() {
        let cases: &[(Option<&str>, &str)] = &[
            (None, "flux-converger"),
            (Some("shard=a"), "flux-converger-3d8dfb26"),
            (Some("shard=b"), "flux-converger-51051576"),
            (
                Some("sharding.fluxcd.io/key=shard1"),
                "flux-converger-73fdc1be",
            ),
            (Some("!sharding.fluxcd.io/key"), "flux-converger-42da7484"),
        ];
        for (selector, want) in cases {
            let id = default_election_id(*selector);
            assert_eq!(id, *want, "{selector:?}");
            assert_eq!(check_election_id(&id), Ok(()), "{selector:?}");
        }
    }

    #[test]
    fn election_id_check_by_table() {
        let long = "a".repeat(64);
        let cases: &[(&str, bool)] = &[
            ("flux-converger", true),
            ("flux-converger-shard1", true),
            ("a", true),
            ("a.b-c", true),
            (&long[..63], true),
            (&long, false),
            ("", false),
            ("Flux", false),
            ("-a", false),
            ("a-", false),
            ("a_b", false),
            ("a/b", false),
        ];
        for (id, ok) in cases {
            assert_eq!(check_election_id(id).is_ok(), *ok, "{id:?}");
        }
    }
}
