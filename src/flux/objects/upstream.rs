//! The upstream an ExternalArtifact publishes from, for the `artifact` gate.

use super::sources::{ExternalArtifact, SourceKind};

/// Why an ExternalArtifact cannot be published by the `artifact` gate: the user's objects are
/// wrong, so the revision is refused (nothing is written) until they are fixed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UpstreamError {
    #[error(
        "ExternalArtifact {namespace}/{name} has no spec.sourceRef: the artifact gate publishes the converged revisions of the GitRepository, OCIRepository or Bucket it names"
    )]
    Missing { namespace: String, name: String },
    #[error(
        "ExternalArtifact {namespace}/{name}: unsupported spec.sourceRef.kind {kind:?} (the artifact gate publishes from a GitRepository, OCIRepository or Bucket)"
    )]
    UnsupportedKind {
        namespace: String,
        name: String,
        kind: String,
    },
    #[error(
        "ExternalArtifact {namespace}/{name}: can't access '{reference}', cross-namespace references have been blocked"
    )]
    CrossNamespace {
        namespace: String,
        name: String,
        reference: String,
    },
}

/// The upstream an ExternalArtifact names in `spec.sourceRef` (namespace defaults to the
/// ExternalArtifact's). Only the kinds source-controller produces: publishing one
/// ExternalArtifact from another would chain two gates. With `allow_cross_namespace` off
/// (`--no-cross-namespace-refs`) a reference into another namespace is refused as Flux
/// refuses a Kustomization's: otherwise a tenant could have the service publish, in its own
/// namespace, what another tenant's source holds.
pub fn upstream_reference(
    artifact: &ExternalArtifact,
    allow_cross_namespace: bool,
) -> Result<(SourceKind, String, String), UpstreamError> {
    let namespace = artifact.metadata.namespace.clone().unwrap_or_default();
    let name = artifact.metadata.name.clone().unwrap_or_default();
    let Some(reference) = artifact
        .spec
        .source_ref
        .as_ref()
        .filter(|r| !r.kind.is_empty() && !r.name.is_empty())
    else {
        return Err(UpstreamError::Missing { namespace, name });
    };
    let kind = match SourceKind::parse(&reference.kind) {
        Some(k @ (SourceKind::GitRepository | SourceKind::OCIRepository | SourceKind::Bucket)) => k,
        _ => {
            return Err(UpstreamError::UnsupportedKind {
                namespace,
                name,
                kind: reference.kind.clone(),
            });
        }
    };
    let upstream_namespace = reference
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| namespace.clone());
    if !allow_cross_namespace && upstream_namespace != namespace {
        return Err(UpstreamError::CrossNamespace {
            reference: format!("{kind}/{upstream_namespace}/{}", reference.name),
            namespace,
            name,
        });
    }
    Ok((kind, upstream_namespace, reference.name.clone()))
}
