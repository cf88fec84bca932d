//! What the `artifact` gate needs from the storage: publish one verified tarball for one
//! ExternalArtifact and get back what goes into its `status.artifact`. A trait so that the gate
//! is tested without the HTTP server, and the server without the gate.

use futures::future::BoxFuture;

pub use crate::model::artifact::{ArtifactKey, Published};

/// Why a tarball could not be published; the gate records it as a failed hand-off and retries.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HostError(pub String);

pub trait ArtifactHost: Send + Sync + 'static {
    /// Makes the upstream tarball at `upstream_url` with `digest` servable for `key` (downloaded
    /// and verified unless the storage holds it already), keeps it and the one published before
    /// it for `key`, lets older ones go, and says what to write into `status.artifact`.
    fn publish<'a>(
        &'a self,
        key: &'a ArtifactKey,
        upstream_url: &'a str,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Published, HostError>>;
}
