//! Reading Flux objects from a cluster under a deadline, each 404 told apart (object or CRD).

use std::time::Duration;

use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::error::ObjectsError;
use super::kustomization::Kustomization;
use super::sources::{Bucket, ExternalArtifact, GitRepository, OCIRepository, Source, SourceKind};
use super::status::SourceStatus;
use crate::cluster::with_deadline;

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

/// A source object taken apart into its generation and status (every kind alike).
pub(super) trait HasSourceStatus {
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
