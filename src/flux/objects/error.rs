//! Why a Flux object could not be read, with a missing CRD told apart from a missing object.

use crate::cluster::CallError;

/// Why a Flux object could not be read. Each names the object.
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    #[error(
        "{kind} {namespace}/{name} not found: the CRD {plural}.{group} is not installed (is Flux installed, and new enough for {kind}?)"
    )]
    CrdMissing {
        kind: String,
        plural: String,
        group: String,
        namespace: String,
        name: String,
    },
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        kind: String,
        namespace: String,
        name: String,
    },
    #[error(
        "Kustomization {namespace}/{name}: unsupported spec.sourceRef.kind {kind:?} (expected GitRepository, OCIRepository, Bucket or ExternalArtifact)"
    )]
    UnsupportedSourceKind {
        namespace: String,
        name: String,
        kind: String,
    },
    #[error(
        "Kustomization {namespace}/{name}: can't access '{reference}', cross-namespace references have been blocked"
    )]
    CrossNamespace {
        namespace: String,
        name: String,
        reference: String,
    },
    #[error("source {source_name} is not ready: it has no artifact{ready}")]
    NoArtifact { source_name: String, ready: String },
    /// The read failed or found no answer within its deadline (the error names the call).
    #[error("reading {kind} {namespace}/{name}: {error}")]
    Kube {
        kind: String,
        namespace: String,
        name: String,
        /// Boxed: every `Result` of a resolve carries this enum.
        error: Box<CallError>,
    },
}

impl ObjectsError {
    /// Whether the user's objects are wrong (exit 2) rather than the cluster being unreachable.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, Self::Kube { .. })
    }
}
