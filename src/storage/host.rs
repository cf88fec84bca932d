//! What the `artifact` gate needs from the storage: publish one verified tarball for one
//! ExternalArtifact and get back what goes into its `status.artifact`. A trait so that the gate
//! is tested without the HTTP server, and the server without the gate.

use futures::future::BoxFuture;

/// The ExternalArtifact a tarball is published for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArtifactKey {
    pub namespace: String,
    pub name: String,
}

/// What Flux reads from `status.artifact` (source.toolkit.fluxcd.io/v1 `Artifact`), minus the
/// revision and time the gate fills in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// `http://<--storage-adv-addr>/<path>`.
    pub url: String,
    /// Relative path under the storage, as source-controller writes it (`externalartifact/<ns>/<name>/<digest hex>.tar.gz`).
    pub path: String,
    /// `sha256:<hex>`: the same bytes and digest as the upstream's artifact.
    pub digest: String,
    pub size: i64,
}

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
