//! What the `artifact` gate publishes, as the gate, the storage and the records name it: plain
//! values, so the records can describe a publication without importing the storage.

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
