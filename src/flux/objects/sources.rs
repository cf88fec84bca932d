//! The four source kinds a Kustomization may reference, and [`Source`]: any of them reduced to
//! what resolving needs.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::error::ObjectsError;
use super::kustomization::CrossNamespaceSourceReference;
use super::status::{Artifact, Condition, SourceStatus};

/// `source.toolkit.fluxcd.io/v1` GitRepository (spec unused beyond the URL, for messages).
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "source.toolkit.fluxcd.io",
    version = "v1",
    kind = "GitRepository",
    plural = "gitrepositories",
    namespaced,
    status = "SourceStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase", default)]
pub struct GitRepositorySpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// `source.toolkit.fluxcd.io/v1` OCIRepository.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "source.toolkit.fluxcd.io",
    version = "v1",
    kind = "OCIRepository",
    plural = "ocirepositories",
    namespaced,
    status = "SourceStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase", default)]
pub struct OCIRepositorySpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// `source.toolkit.fluxcd.io/v1` Bucket.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "source.toolkit.fluxcd.io",
    version = "v1",
    kind = "Bucket",
    plural = "buckets",
    namespaced,
    status = "SourceStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase", default)]
pub struct BucketSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucket_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// `source.toolkit.fluxcd.io/v1` ExternalArtifact (Flux 2.7+).
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "source.toolkit.fluxcd.io",
    version = "v1",
    kind = "ExternalArtifact",
    plural = "externalartifacts",
    namespaced,
    status = "SourceStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase", default)]
pub struct ExternalArtifactSpec {
    /// What the artifact is made from (optional in Flux's API). For the `artifact` gate, the
    /// upstream GitRepository/OCIRepository/Bucket whose converged revisions are published;
    /// an empty namespace means the ExternalArtifact's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<CrossNamespaceSourceReference>,
}

/// The source kinds a Kustomization may reference.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    GitRepository,
    OCIRepository,
    Bucket,
    ExternalArtifact,
}

impl SourceKind {
    /// Parses `spec.sourceRef.kind` (exact, as the CRD's enum is).
    pub fn parse(kind: &str) -> Option<Self> {
        match kind {
            "GitRepository" => Some(Self::GitRepository),
            "OCIRepository" => Some(Self::OCIRepository),
            "Bucket" => Some(Self::Bucket),
            "ExternalArtifact" => Some(Self::ExternalArtifact),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::GitRepository => "GitRepository",
            Self::OCIRepository => "OCIRepository",
            Self::Bucket => "Bucket",
            Self::ExternalArtifact => "ExternalArtifact",
        }
    }

    /// The resource plural, used to check discovery when a get answers 404.
    pub fn plural(self) -> &'static str {
        match self {
            Self::GitRepository => "gitrepositories",
            Self::OCIRepository => "ocirepositories",
            Self::Bucket => "buckets",
            Self::ExternalArtifact => "externalartifacts",
        }
    }
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A source of any kind, reduced to what resolving needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    pub kind: SourceKind,
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    pub status: SourceStatus,
}

impl Source {
    /// `Kind/namespace/name`, as Flux names a source in its messages.
    pub fn display_name(&self) -> String {
        format!("{}/{}/{}", self.kind, self.namespace, self.name)
    }

    /// The `Ready` condition, if the source controller has set one.
    pub fn ready_condition(&self) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.type_ == "Ready")
    }

    /// The artifact to fetch. kustomize-controller uses the published artifact whatever the
    /// Ready condition says (a failing source still serves its last good revision); only a
    /// missing artifact stops it.
    pub fn artifact(&self) -> Result<&Artifact, ObjectsError> {
        match &self.status.artifact {
            Some(a) if !a.url.is_empty() => Ok(a),
            _ => {
                let ready = self
                    .ready_condition()
                    .map(|c| {
                        format!(
                            " (Ready={}: {})",
                            c.status,
                            c.message.as_deref().unwrap_or("no message")
                        )
                    })
                    .unwrap_or_default();
                Err(ObjectsError::NoArtifact {
                    source_name: self.display_name(),
                    ready,
                })
            }
        }
    }
}
