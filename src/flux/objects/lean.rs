//! Flux's objects as the service's watches read them: only the fields the service reads, the
//! rest skipped while the JSON is parsed, never allocated.
//!
//! Why: a watch's list holds a page of objects at once, and with 10,000 Kustomizations the
//! parsed `metadata.managedFields` (every field path of every manager, as JSON maps) were most
//! of the process's heap (heaptrack, issue 36). Here `metadata` keeps the identity, the
//! `resourceVersion` the watch resumes from, the `generation`, and the gate's own annotations
//! (`flux-converger.io/…`); `managedFields`, labels (the selector is the server's), owner
//! references, finalizers, other annotations (`kubectl.kubernetes.io/last-applied-configuration`)
//! and a source's spec and conditions are skipped. A Kustomization keeps its typed spec and
//! status (the index digests the spec; the observer reads the status), which already ignore
//! every field Flux has and the service does not read (`status.inventory`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::core::{ApiResource, DynamicResourceScope, NamespaceResourceScope, Resource};
use serde::{Deserialize, Deserializer};

use super::{Kustomization, KustomizationSpec, KustomizationStatus};

/// The annotations a watched object keeps: the gate's own.
pub const KEPT_ANNOTATIONS: &str = "flux-converger.io/";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    annotations: Option<KeptAnnotations>,
}

/// `metadata.annotations`, keeping only [`KEPT_ANNOTATIONS`]: the others are read as borrowed
/// text where the JSON allows it and dropped at once.
struct KeptAnnotations(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for KeptAnnotations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = KeptAnnotations;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of annotations")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<KeptAnnotations, A::Error> {
                let mut kept = BTreeMap::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key.starts_with(KEPT_ANNOTATIONS) {
                        let value: String = map.next_value()?;
                        kept.insert(key.into_owned(), value);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(KeptAnnotations(kept))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// `metadata` with only what the service reads (see the module's comment).
pub fn lean_metadata<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let meta = LeanMeta::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        generation: meta.generation,
        deletion_timestamp: meta.deletion_timestamp,
        annotations: meta
            .annotations
            .map(|a| a.0)
            .filter(|a: &BTreeMap<String, String>| !a.is_empty()),
        ..ObjectMeta::default()
    })
}

/// A Kustomization as the service's watch reads it: [`Kustomization`] with a lean `metadata`.
#[derive(Clone, Debug, Deserialize)]
pub struct WatchedKustomization {
    #[serde(deserialize_with = "lean_metadata")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: KustomizationSpec,
    #[serde(default)]
    pub status: Option<KustomizationStatus>,
}

impl From<WatchedKustomization> for Kustomization {
    fn from(ks: WatchedKustomization) -> Self {
        Kustomization {
            metadata: ks.metadata,
            spec: ks.spec,
            status: ks.status,
        }
    }
}

impl Resource for WatchedKustomization {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        <Kustomization as Resource>::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        <Kustomization as Resource>::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        <Kustomization as Resource>::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        <Kustomization as Resource>::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// `spec.sourceRef` of an ExternalArtifact (the upstream it publishes from).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct LeanReference {
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LeanSourceSpec {
    pub source_ref: Option<LeanReference>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct LeanArtifact {
    pub revision: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct LeanSourceStatus {
    pub artifact: Option<LeanArtifact>,
}

/// A source (GitRepository, OCIRepository, Bucket, ExternalArtifact) as the service's watches
/// read it: its key, `spec.sourceRef` (an ExternalArtifact's upstream) and
/// `status.artifact.revision`. Typed by an [`ApiResource`], as a `DynamicObject` is.
#[derive(Clone, Debug, Deserialize)]
pub struct WatchedSource {
    #[serde(deserialize_with = "lean_metadata")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: LeanSourceSpec,
    #[serde(default)]
    pub status: LeanSourceStatus,
}

impl WatchedSource {
    /// `status.artifact.revision`, when not empty.
    pub fn revision(&self) -> Option<&str> {
        self.status
            .artifact
            .as_ref()?
            .revision
            .as_deref()
            .filter(|r| !r.is_empty())
    }
}

impl Resource for WatchedSource {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn managed_fields() -> serde_json::Value {
        json!([{"manager": "kustomize-controller", "operation": "Apply",
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "time": "2026-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:interval": {}, "f:path": {}, "f:sourceRef": {"f:kind": {}, "f:name": {}}}}}])
    }

    #[test]
    fn a_watched_kustomization_keeps_what_is_read_and_nothing_else() {
        let object = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {
                "name": "apps", "namespace": "flux-system", "uid": "u1",
                "resourceVersion": "42", "generation": 3,
                "labels": {"kustomize.toolkit.fluxcd.io/name": "flux-system"},
                "annotations": {
                    "flux-converger.io/gate": "suspend",
                    "flux-converger.io/hold": "db migration",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"a\": 1}",
                    "reconcile.fluxcd.io/requestedAt": "t"
                },
                "finalizers": ["finalizers.fluxcd.io"],
                "managedFields": managed_fields()
            },
            "spec": {"interval": "10m", "retryInterval": "1m", "path": "./apps", "prune": true,
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}},
            "status": {"lastAppliedRevision": "main@sha1:1",
                       "inventory": {"entries": [{"id": "default_web_apps_StatefulSet", "v": "v1"}]},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded"}]}
        });
        let watched: WatchedKustomization = serde_json::from_value(object.clone()).unwrap();
        let ks: Kustomization = watched.into();
        let full: Kustomization = serde_json::from_value(object).unwrap();
        let meta = &ks.metadata;
        assert_eq!(meta.name.as_deref(), Some("apps"));
        assert_eq!(meta.namespace.as_deref(), Some("flux-system"));
        assert_eq!(meta.uid.as_deref(), Some("u1"));
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
        assert_eq!(meta.generation, Some(3));
        assert!(meta.managed_fields.is_none() && meta.labels.is_none());
        assert!(meta.finalizers.is_none());
        assert_eq!(
            meta.annotations,
            Some(BTreeMap::from([
                ("flux-converger.io/gate".to_string(), "suspend".to_string()),
                (
                    "flux-converger.io/hold".to_string(),
                    "db migration".to_string()
                ),
            ]))
        );
        // What the index, the gate and the observer read is what the full read gives.
        assert_eq!(ks.spec, full.spec);
        assert_eq!(ks.status, full.status);
        use crate::gated::Gated as _;
        assert_eq!(
            ks.gating(crate::model::GateMode::Off),
            full.gating(crate::model::GateMode::Off)
        );
    }

    #[test]
    fn a_watched_source_keeps_its_key_upstream_and_revision() {
        let object = json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "ExternalArtifact",
            "metadata": {"name": "app", "namespace": "apps", "resourceVersion": "7",
                         "managedFields": managed_fields()},
            "spec": {"sourceRef": {"apiVersion": "source.toolkit.fluxcd.io/v1",
                                   "kind": "GitRepository", "name": "repo", "namespace": "flux-system"},
                     "ignore": "*.md"},
            "status": {"artifact": {"revision": "main@sha1:2", "url": "http://x/a.tar.gz",
                                    "digest": "sha256:0", "path": "a", "size": 1},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        });
        let source: WatchedSource = serde_json::from_value(object).unwrap();
        assert_eq!(source.metadata.name.as_deref(), Some("app"));
        assert_eq!(source.metadata.resource_version.as_deref(), Some("7"));
        assert!(source.metadata.managed_fields.is_none());
        assert_eq!(source.revision(), Some("main@sha1:2"));
        assert_eq!(
            source.spec.source_ref,
            Some(LeanReference {
                kind: "GitRepository".into(),
                name: "repo".into(),
                namespace: Some("flux-system".into()),
            })
        );
        let bare: WatchedSource = serde_json::from_value(json!({
            "metadata": {"name": "repo", "namespace": "apps"},
            "status": {"artifact": {"revision": ""}}
        }))
        .unwrap();
        assert_eq!(bare.revision(), None);
        assert!(bare.spec.source_ref.is_none());
    }
}
