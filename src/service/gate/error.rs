//! Why a hand-off (or the close of a gate) failed: the run records it as the revision's error
//! (`handoff`) and retries; each reason has a metric label.

use crate::cluster::CallError;
use crate::storage::host::HostError;

/// A hand-off that did not happen, or a gate that could not be closed.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// A hold was set while the revision converged: nothing is handed off until it goes.
    #[error("held ({reason}): not handed off; handed off once the hold is removed")]
    Held { reason: String },
    /// The write that opens or closes the gate (`spec.suspend`, `requestedAt`) or a read of
    /// the consumers failed.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The `artifact` gate was given no ExternalArtifact to publish for.
    #[error("artifact mode without its ExternalArtifact")]
    NoTarget,
    /// The `artifact` gate has no storage to publish to (the message names why).
    #[error("{0}")]
    NoStorage(String),
    /// The upstream moved on or publishes no digest: nothing verified to publish.
    #[error("{what}")]
    Upstream { what: String },
    /// The storage could not take the tarball.
    #[error("publishing {revision} to the artifact storage: {cause}")]
    Storage { revision: String, cause: HostError },
    /// The ExternalArtifact's status could not be written.
    #[error("publishing {revision}: {cause}")]
    Status { revision: String, cause: CallError },
}

impl HandoffError {
    /// The reason as a metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            HandoffError::Held { .. } => "held",
            HandoffError::Call(_) => "call",
            HandoffError::NoTarget => "no_target",
            HandoffError::NoStorage(_) => "no_storage",
            HandoffError::Upstream { .. } => "upstream",
            HandoffError::Storage { .. } => "storage",
            HandoffError::Status { .. } => "status",
        }
    }
}
