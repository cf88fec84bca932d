//! The fields of Flux's objects the converger reads, and reading them from a cluster.
//!
//! Only what rendering needs is typed; every other field is ignored (not an error), so a
//! newer Flux with more fields still reads. A 404 is ambiguous in Kubernetes: the object may
//! be missing, or its whole CRD (Flux not installed, or a kind this Flux lacks, such as
//! ExternalArtifact before 2.7). [`get_source`] and [`get_kustomization`] tell them apart
//! because the fix differs (create the object vs install the CRD).

use std::collections::BTreeMap;
use std::time::Duration;

use kube::{Api, Client, CustomResource, Resource};

use crate::cluster::{CallError, with_deadline};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Label kustomize-controller puts on every object it applies: the Kustomization's name.
pub const OWNER_NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
/// Label kustomize-controller puts on every object it applies: the Kustomization's namespace.
pub const OWNER_NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";

/// `kustomize.toolkit.fluxcd.io/v1` Kustomization: the spec fields that shape the render.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "kustomize.toolkit.fluxcd.io",
    version = "v1",
    kind = "Kustomization",
    plural = "kustomizations",
    namespaced,
    status = "KustomizationStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase", default)]
pub struct KustomizationSpec {
    pub source_ref: CrossNamespaceSourceReference,
    /// Path inside the artifact; Flux defaults to the artifact root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name_suffix: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<Patch>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<String>,
    pub ignore_missing_components: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub common_metadata: Option<CommonMetadata>,
    /// Present (even empty) means kustomize-controller runs the post-build step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_build: Option<PostBuild>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    pub suspend: bool,
    pub prune: bool,
    /// How often Flux reconciles (a Go duration, e.g. `10m`): its retry schedule when
    /// `retry_interval` is not set (the suspend gate re-opens on it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// How soon Flux retries a failed reconcile (a Go duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_interval: Option<String>,
    /// Flux re-creates what it cannot patch (a StatefulSet, pods and all): never combined
    /// with the `reconcile` or `suspend` gate (the gate warns).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

/// `spec.sourceRef`; an empty namespace means the Kustomization's own.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct CrossNamespaceSourceReference {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub kind: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// One entry of `spec.patches`: a strategic-merge or JSON6902 patch and its target.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Patch {
    pub patch: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<Selector>,
}

/// kustomize's patch target selector, as Flux spells it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Selector {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<String>,
}

/// One entry of `spec.images`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Image {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_tag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// `spec.commonMetadata`: put on the top-level metadata of every rendered object.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct CommonMetadata {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// `spec.postBuild`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct PostBuild {
    pub substitute: BTreeMap<String, String>,
    pub substitute_from: Vec<SubstituteReference>,
    /// `Always` substitutes even when no variable is defined (so strict mode still checks references).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub substitute_strategy: Option<String>,
}

/// One entry of `postBuild.substituteFrom`: a ConfigMap or Secret in the Kustomization's namespace.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct SubstituteReference {
    pub kind: String,
    pub name: String,
    pub optional: bool,
}

/// `status` of a Kustomization.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct KustomizationStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    pub conditions: Vec<Condition>,
}

/// A status condition. Every field is optional: a malformed condition must not hide the artifact.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// The `status.artifact` every Flux source publishes.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Artifact {
    pub url: String,
    pub revision: String,
    /// `<algorithm>:<hex>`; Flux's older sources wrote bare hex (sha256).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// The `status` shared by GitRepository, OCIRepository, Bucket and ExternalArtifact.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct SourceStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    pub conditions: Vec<Condition>,
}

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

/// The source kinds a Kustomization may reference.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
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

/// Reads one namespaced object under `deadline` (as every call of a converge: a server that
/// stops answering is an error naming the object, not a render that hangs), telling a
/// missing CRD apart from a missing object.
pub async fn get_namespaced<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    deadline: Duration,
) -> Result<K, ObjectsError>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let kind = K::kind(&()).to_string();
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let object = format!("{kind} {namespace}/{name}");
    match with_deadline(deadline, "get", &object, api.get(name)).await {
        Ok(obj) => Ok(obj),
        Err(e) if e.code() == Some(404) => {
            // A missing object answers naming it (`<plural>.<group> "<name>" not found`); a
            // missing resource type ("the server could not find the requested resource")
            // does not.
            let names_object = e.server_text().contains(&format!("\"{name}\" not found"));
            if !names_object
                && !resource_is_served(client, &K::api_version(&()), &K::plural(&()), deadline)
                    .await
            {
                return Err(ObjectsError::CrdMissing {
                    kind,
                    plural: K::plural(&()).to_string(),
                    group: K::group(&()).to_string(),
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                });
            }
            Err(ObjectsError::NotFound {
                kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
        }
        Err(error) => Err(ObjectsError::Kube {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            error: Box::new(error),
        }),
    }
}

/// Whether discovery lists `plural` under `api_version`. Unsure answers (discovery itself
/// failing for another reason than 404) count as served, so we never blame a CRD wrongly.
async fn resource_is_served(
    client: &Client,
    api_version: &str,
    plural: &str,
    deadline: Duration,
) -> bool {
    let discovery = with_deadline(
        deadline,
        "discovery of",
        api_version,
        client.list_api_group_resources(api_version),
    );
    match discovery.await {
        Ok(list) => list.resources.iter().any(|r| r.name == plural),
        Err(e) if e.code() == Some(404) => false,
        Err(_) => true,
    }
}

/// The per-call deadline of the reads that are not given one (the `--timeout` default of the
/// commands): no read of a Flux object waits for ever.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads a Kustomization under [`DEFAULT_CALL_TIMEOUT`].
pub async fn get_kustomization(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Kustomization, ObjectsError> {
    get_kustomization_within(client, namespace, name, DEFAULT_CALL_TIMEOUT).await
}

/// Reads a Kustomization under `deadline`.
pub async fn get_kustomization_within(
    client: &Client,
    namespace: &str,
    name: &str,
    deadline: Duration,
) -> Result<Kustomization, ObjectsError> {
    get_namespaced::<Kustomization>(client, namespace, name, deadline).await
}

/// The source a Kustomization references: kind, namespace (defaults to the Kustomization's)
/// and name. With `allow_cross_namespace` off (kustomize-controller's
/// `--no-cross-namespace-refs`), a reference into another namespace is refused as Flux does.
pub fn source_reference(
    kustomization: &Kustomization,
    allow_cross_namespace: bool,
) -> Result<(SourceKind, String, String), ObjectsError> {
    let ks_namespace = kustomization.metadata.namespace.clone().unwrap_or_default();
    let ks_name = kustomization.metadata.name.clone().unwrap_or_default();
    let reference = &kustomization.spec.source_ref;
    let kind =
        SourceKind::parse(&reference.kind).ok_or_else(|| ObjectsError::UnsupportedSourceKind {
            namespace: ks_namespace.clone(),
            name: ks_name.clone(),
            kind: reference.kind.clone(),
        })?;
    let namespace = reference
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| ks_namespace.clone());
    if !allow_cross_namespace && namespace != ks_namespace {
        return Err(ObjectsError::CrossNamespace {
            namespace: ks_namespace,
            name: ks_name,
            reference: format!("{kind}/{namespace}/{}", reference.name),
        });
    }
    Ok((kind, namespace, reference.name.clone()))
}

/// Reads the source a Kustomization references (see [`source_reference`]) under
/// [`DEFAULT_CALL_TIMEOUT`].
pub async fn get_source(
    client: &Client,
    kustomization: &Kustomization,
    allow_cross_namespace: bool,
) -> Result<Source, ObjectsError> {
    get_source_within(
        client,
        kustomization,
        allow_cross_namespace,
        DEFAULT_CALL_TIMEOUT,
    )
    .await
}

/// Reads the source a Kustomization references under `deadline`.
pub async fn get_source_within(
    client: &Client,
    kustomization: &Kustomization,
    allow_cross_namespace: bool,
    deadline: Duration,
) -> Result<Source, ObjectsError> {
    let (kind, namespace, name) = source_reference(kustomization, allow_cross_namespace)?;
    read_source_within(client, kind, &namespace, &name, deadline).await
}

/// Reads a source of a known kind under [`DEFAULT_CALL_TIMEOUT`].
pub async fn read_source(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
) -> Result<Source, ObjectsError> {
    read_source_within(client, kind, namespace, name, DEFAULT_CALL_TIMEOUT).await
}

/// Reads a source of a known kind under `deadline`.
pub async fn read_source_within(
    client: &Client,
    kind: SourceKind,
    namespace: &str,
    name: &str,
    deadline: Duration,
) -> Result<Source, ObjectsError> {
    let (generation, status) = match kind {
        SourceKind::GitRepository => {
            parts(get_namespaced::<GitRepository>(client, namespace, name, deadline).await?)
        }
        SourceKind::OCIRepository => {
            parts(get_namespaced::<OCIRepository>(client, namespace, name, deadline).await?)
        }
        SourceKind::Bucket => {
            parts(get_namespaced::<Bucket>(client, namespace, name, deadline).await?)
        }
        SourceKind::ExternalArtifact => {
            parts(get_namespaced::<ExternalArtifact>(client, namespace, name, deadline).await?)
        }
    };
    Ok(Source {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
        generation,
        status,
    })
}

trait HasSourceStatus {
    fn into_parts(self) -> (Option<i64>, SourceStatus);
}

macro_rules! source_status {
    ($($t:ty),*) => {$(
        impl HasSourceStatus for $t {
            fn into_parts(self) -> (Option<i64>, SourceStatus) {
                (self.metadata.generation, self.status.unwrap_or_default())
            }
        }
    )*};
}
source_status!(GitRepository, OCIRepository, Bucket, ExternalArtifact);

fn parts(source: impl HasSourceStatus) -> (Option<i64>, SourceStatus) {
    source.into_parts()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kustomization_reads_with_unknown_fields_and_defaults() {
        let ks: Kustomization = serde_json::from_value(serde_json::json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system"},
            "spec": {
                "interval": "10m",
                "sourceRef": {"kind": "GitRepository", "name": "repo"},
                "path": "./apps",
                "prune": true,
                "wait": true,
                "postBuild": {"substitute": {"SIZE": "2Gi"},
                              "substituteFrom": [{"kind": "ConfigMap", "name": "vars", "optional": true}]},
                "commonMetadata": {"labels": {"team": "a"}},
                "futureField": {"x": 1}
            },
            "status": {"lastAppliedRevision": "main@sha1:abc",
                       "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded"}],
                       "inventory": {"entries": []}}
        }))
        .unwrap();
        assert_eq!(ks.spec.path.as_deref(), Some("./apps"));
        assert_eq!(ks.spec.source_ref.kind, "GitRepository");
        assert!(ks.spec.prune);
        assert!(!ks.spec.suspend);
        let pb = ks.spec.post_build.as_ref().unwrap();
        assert_eq!(pb.substitute["SIZE"], "2Gi");
        assert!(pb.substitute_from[0].optional);
        let status = ks.status.unwrap();
        assert_eq!(
            status.last_applied_revision.as_deref(),
            Some("main@sha1:abc")
        );
        assert_eq!(status.conditions[0].type_, "Ready");
    }

    #[test]
    fn source_without_artifact_names_itself_and_its_ready_message() {
        let s = Source {
            kind: SourceKind::GitRepository,
            namespace: "flux-system".into(),
            name: "repo".into(),
            generation: Some(1),
            status: SourceStatus {
                conditions: vec![Condition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    message: Some("auth failed".into()),
                    ..Default::default()
                }],
                ..Default::default()
            },
        };
        let e = s.artifact().unwrap_err().to_string();
        assert_eq!(
            e,
            "source GitRepository/flux-system/repo is not ready: it has no artifact (Ready=False: auth failed)"
        );
    }

    #[test]
    fn source_references_by_table() {
        let ks = |kind: &str, namespace: Option<&str>| Kustomization {
            metadata: kube::core::ObjectMeta {
                name: Some("apps".into()),
                namespace: Some("team".into()),
                ..Default::default()
            },
            spec: KustomizationSpec {
                source_ref: CrossNamespaceSourceReference {
                    kind: kind.into(),
                    name: "repo".into(),
                    namespace: namespace.map(Into::into),
                    ..Default::default()
                },
                ..Default::default()
            },
            status: None,
        };
        let ok = |k: SourceKind, ns: &str| Ok((k, ns.to_string(), "repo".to_string()));
        for (kind, namespace, allow, expected) in [
            ("GitRepository", None, false, ok(SourceKind::GitRepository, "team")),
            ("OCIRepository", Some("team"), false, ok(SourceKind::OCIRepository, "team")),
            ("Bucket", Some(""), false, ok(SourceKind::Bucket, "team")),
            ("GitRepository", Some("flux-system"), true, ok(SourceKind::GitRepository, "flux-system")),
            ("GitRepository", Some("flux-system"), false, Err(
                "Kustomization team/apps: can't access 'GitRepository/flux-system/repo', cross-namespace references have been blocked".to_string())),
            ("HelmChart", None, true, Err(
                "Kustomization team/apps: unsupported spec.sourceRef.kind \"HelmChart\" (expected GitRepository, OCIRepository, Bucket or ExternalArtifact)".to_string())),
        ] {
            let got = source_reference(&ks(kind, namespace), allow).map_err(|e| e.to_string());
            assert_eq!(got, expected, "{kind} {namespace:?} {allow}");
        }
    }

    #[test]
    fn upstream_references_by_table() {
        let ea = |reference: Option<serde_json::Value>| -> ExternalArtifact {
            let mut v = serde_json::json!({
                "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "ExternalArtifact",
                "metadata": {"name": "apps", "namespace": "team"}, "spec": {}
            });
            if let Some(r) = reference {
                v["spec"]["sourceRef"] = r;
            }
            serde_json::from_value(v).unwrap()
        };
        let ok = |k: SourceKind, ns: &str| Ok((k, ns.to_string(), "repo".to_string()));
        for (reference, allow, expected) in [
            (Some(serde_json::json!({"kind": "GitRepository", "name": "repo"})), false, ok(SourceKind::GitRepository, "team")),
            (Some(serde_json::json!({"kind": "OCIRepository", "name": "repo", "namespace": "team"})), false, ok(SourceKind::OCIRepository, "team")),
            (Some(serde_json::json!({"kind": "Bucket", "name": "repo", "namespace": "flux-system"})), true, ok(SourceKind::Bucket, "flux-system")),
            (Some(serde_json::json!({"kind": "GitRepository", "name": "repo", "namespace": "flux-system"})), false, Err(
                "ExternalArtifact team/apps: can't access 'GitRepository/flux-system/repo', cross-namespace references have been blocked".to_string())),
            (Some(serde_json::json!({"kind": "ExternalArtifact", "name": "repo"})), true, Err(
                "ExternalArtifact team/apps: unsupported spec.sourceRef.kind \"ExternalArtifact\" (the artifact gate publishes from a GitRepository, OCIRepository or Bucket)".to_string())),
            (Some(serde_json::json!({"kind": "HelmChart", "name": "repo"})), true, Err(
                "ExternalArtifact team/apps: unsupported spec.sourceRef.kind \"HelmChart\" (the artifact gate publishes from a GitRepository, OCIRepository or Bucket)".to_string())),
            (None, true, Err(
                "ExternalArtifact team/apps has no spec.sourceRef: the artifact gate publishes the converged revisions of the GitRepository, OCIRepository or Bucket it names".to_string())),
        ] {
            let shown = format!("{reference:?} {allow}");
            let got = upstream_reference(&ea(reference), allow).map_err(|e| e.to_string());
            assert_eq!(got, expected, "{shown}");
        }
    }

    #[test]
    fn source_kinds_parse_exactly() {
        for (text, kind) in [
            ("GitRepository", Some(SourceKind::GitRepository)),
            ("OCIRepository", Some(SourceKind::OCIRepository)),
            ("Bucket", Some(SourceKind::Bucket)),
            ("ExternalArtifact", Some(SourceKind::ExternalArtifact)),
            ("HelmRepository", None),
            ("gitrepository", None),
        ] {
            assert_eq!(SourceKind::parse(text), kind, "{text}");
        }
    }

    #[test]
    fn source_status_reads_artifact() {
        let repo: GitRepository = serde_json::from_value(serde_json::json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": "r", "namespace": "n", "generation": 3},
            "spec": {"url": "https://example.com/r", "interval": "1m", "ref": {"branch": "main"}},
            "status": {"artifact": {"url": "http://sc/gitrepository/n/r/abc.tar.gz",
                "revision": "main@sha1:abc", "digest": "sha256:00", "path": "gitrepository/n/r/abc.tar.gz",
                "size": 10, "lastUpdateTime": "2026-11-29T00:00:00Z"}}
        }))
        .unwrap();
        let (generation, status) = repo.into_parts();
        assert_eq!(generation, Some(3));
        let a = status.artifact.unwrap();
        assert_eq!(a.revision, "main@sha1:abc");
        assert_eq!(a.size, Some(10));
    }
}
