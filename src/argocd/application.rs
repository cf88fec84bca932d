//! The fields of Argo CD's Application (`argoproj.io/v1alpha1`) the converger reads.
//!
//! As for the Flux kinds, only what is read is typed and every other field is ignored, so a
//! newer Argo CD with more fields still reads; every field is optional, so a partial status
//! (an Application Argo CD has not reconciled yet) still reads. Names are Argo CD's
//! `pkg/apis/application/v1alpha1/types.go`, pinned in tests/fixtures/argocd-crds/.
//!
//! The Application is not a `kube::CustomResource`: besides `spec` and `status` it has a
//! top-level `operation` (the sync request), and its CRD has no status subresource, so
//! `operation` and `status` are plain fields any update writes, and `metadata.generation`
//! moves with every status write. [`Application::spec_digest`] is what tells a changed
//! Application, never the generation.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest as _;

/// `argoproj.io`.
pub const GROUP: &str = "argoproj.io";
/// `v1alpha1`, the only version Argo CD serves.
pub const VERSION: &str = "v1alpha1";
/// `argoproj.io/v1alpha1`.
pub const API_VERSION: &str = "argoproj.io/v1alpha1";
/// The server address of the cluster Argo CD runs in (`common.KubernetesInternalAPIServerAddr`).
pub const IN_CLUSTER_SERVER: &str = "https://kubernetes.default.svc";
/// The name Argo CD gives that cluster (`common.InClusterName`).
pub const IN_CLUSTER_NAME: &str = "in-cluster";
/// The project an Application with `spec.project: ""` belongs to.
pub const DEFAULT_PROJECT: &str = "default";
/// The annotation asking Argo CD to refresh an Application (`normal` or `hard`); Argo CD removes
/// it once the refresh is done.
pub const REFRESH_ANNOTATION: &str = "argocd.argoproj.io/refresh";
/// The Application annotation choosing the diff (`ServerSideDiff=true|false`).
pub const COMPARE_OPTIONS_ANNOTATION: &str = "argocd.argoproj.io/compare-options";
/// The per-object annotation carrying sync options (`ServerSideApply=true`, ...).
pub const SYNC_OPTIONS_ANNOTATION: &str = "argocd.argoproj.io/sync-options";
/// The annotation Argo CD's default (annotation) tracking puts on every object it applies:
/// `<app>:<group>/<kind>:<namespace>/<name>`.
pub const TRACKING_ID_ANNOTATION: &str = "argocd.argoproj.io/tracking-id";
/// The sync option that makes Argo CD apply server-side.
pub const SERVER_SIDE_APPLY: &str = "ServerSideApply=true";

/// An Application, as read.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Application {
    pub metadata: ObjectMeta,
    pub spec: ApplicationSpec,
    /// The sync request in flight, written by whoever starts a sync and cleared (set to null)
    /// by the application-controller once the operation completes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ApplicationStatus>,
}

/// `spec`: the fields read are typed, the rest kept (`rest`) so the whole spec can be compared.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ApplicationSpec {
    pub destination: Destination,
    /// `""` is the `default` project ([`Application::project`]).
    pub project: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_policy: Option<SyncPolicy>,
    /// `source`, `sources` and whatever else a newer Argo CD adds.
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

/// `spec.destination`: a cluster (by `server` URL or by `name`) and a namespace.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Destination {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub server: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// `spec.syncPolicy`. `retry` is kept as written: the hand-back copies it into the operation
/// as is, fields this version does not know included.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct SyncPolicy {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub automated: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sync_options: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Value>,
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

/// `operation` (and `status.operationState.operation`, its copy).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Operation {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncOperation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initiated_by: Option<Initiator>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub info: Vec<Info>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
}

/// `operation.sync`: only what the converger reads of a sync.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct SyncOperation {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub revision: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sync_options: Vec<String>,
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

/// `operation.initiatedBy`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Initiator {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub automated: bool,
}

/// One `operation.info` item: where the hand-back's nonce travels.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default)]
pub struct Info {
    pub name: String,
    pub value: String,
}

/// `operation.retry`: how often the controller retries a failed sync (`limit`; negative is
/// unlimited, 0 none).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Retry {
    pub limit: i64,
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

/// `status`, as the application-controller writes it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ApplicationStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_state: Option<OperationState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconciled_at: Option<String>,
}

/// `status.sync`: `Synced`, `OutOfSync` or `Unknown`, and the revision(s) compared.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct SyncStatus {
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub revision: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<String>,
}

/// One `status.conditions[]` item (`ComparisonError`, `SyncError`, ...).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// One `status.resources[]` item: an object the Application manages.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceStatus {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
}

/// `status.operationState`: the last (or current) operation and how it went.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct OperationState {
    pub operation: Operation,
    /// `Running`, `Terminating`, `Failed`, `Error` or `Succeeded`.
    pub phase: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_result: Option<SyncResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Set when the operation completed, and also while a failed one waits for its retry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    pub retry_count: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// `status.operationState.syncResult`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct SyncResult {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceResult>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub revision: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<String>,
}

/// One `syncResult.resources[]` item: what happened to one object in the sync.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceResult {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `Synced`, `SyncFailed`, `Pruned`, `PruneSkipped`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hook_phase: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sync_phase: String,
}

/// The revision(s) of a comparison or a sync: one for a single source, one per source for
/// `spec.sources` (Argo CD writes `revisions` then, and `revision` empty).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Revision {
    pub revision: String,
    pub revisions: Vec<String>,
}

impl Revision {
    pub fn is_empty(&self) -> bool {
        self.revision.is_empty() && self.revisions.is_empty()
    }
}

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.revisions.is_empty() {
            f.write_str(&self.revision)
        } else {
            f.write_str(&self.revisions.join(","))
        }
    }
}

impl OperationState {
    /// `Failed`, `Error` or `Succeeded`: the controller is done with it (Argo CD's
    /// `OperationPhase.Completed`).
    pub fn completed(&self) -> bool {
        matches!(self.phase.as_str(), "Failed" | "Error" | "Succeeded")
    }

    /// A failed attempt waiting for its retry: phase `Running` with `finishedAt` set (the
    /// controller's own marker for "retry at finishedAt + backoff").
    pub fn retry_pending(&self) -> bool {
        self.phase == "Running" && self.finished_at.is_some()
    }

    /// The value of the `operation.info` item `name` in the operation this state is of.
    pub fn info(&self, name: &str) -> Option<&str> {
        self.operation
            .info
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.value.as_str())
    }

    /// The revision the sync ran at: `syncResult`'s, else what the operation asked for.
    pub fn revision(&self) -> Revision {
        match &self.sync_result {
            Some(r) if !r.revision.is_empty() || !r.revisions.is_empty() => Revision {
                revision: r.revision.clone(),
                revisions: r.revisions.clone(),
            },
            _ => {
                let sync = self.operation.sync.clone().unwrap_or_default();
                Revision {
                    revision: sync.revision,
                    revisions: sync.revisions,
                }
            }
        }
    }
}

impl Application {
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// `spec.project`, `default` when empty (`ApplicationSpec.GetProject`).
    pub fn project(&self) -> &str {
        if self.spec.project.is_empty() {
            DEFAULT_PROJECT
        } else {
            &self.spec.project
        }
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    /// `spec.syncPolicy.syncOptions`, empty when unset.
    pub fn sync_options(&self) -> &[String] {
        self.spec
            .sync_policy
            .as_ref()
            .map(|p| p.sync_options.as_slice())
            .unwrap_or_default()
    }

    /// `spec.syncPolicy.retry` as written.
    pub fn retry(&self) -> Option<&Value> {
        self.spec.sync_policy.as_ref()?.retry.as_ref()
    }

    /// `.operation` is set: a sync is requested or running.
    pub fn operation_requested(&self) -> bool {
        self.operation.is_some()
    }

    pub fn operation_state(&self) -> Option<&OperationState> {
        self.status.as_ref()?.operation_state.as_ref()
    }

    /// `status.sync.status`, empty when never compared.
    pub fn sync_status(&self) -> &str {
        self.status
            .as_ref()
            .and_then(|s| s.sync.as_ref())
            .map(|s| s.status.as_str())
            .unwrap_or_default()
    }

    /// `status.sync.revision(s)`: what the last comparison compared against, the revision the
    /// managed-resources' `targetState` is of.
    pub fn sync_revision(&self) -> Revision {
        let sync = self
            .status
            .as_ref()
            .and_then(|s| s.sync.clone())
            .unwrap_or_default();
        Revision {
            revision: sync.revision,
            revisions: sync.revisions,
        }
    }

    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default()
    }

    pub fn resources(&self) -> &[ResourceStatus] {
        self.status
            .as_ref()
            .map(|s| s.resources.as_slice())
            .unwrap_or_default()
    }

    /// A digest of `spec` (canonical JSON: sorted keys), what a later read is compared with to
    /// tell whether the Application changed. Never `metadata.generation`: without a status
    /// subresource it moves with every status write the controller makes.
    pub fn spec_digest(&self) -> String {
        // `Value`'s maps are sorted (serde_json without `preserve_order`), so equal specs give
        // equal text whatever order the server sent the fields in.
        let canonical = serde_json::to_value(&self.spec)
            .map(|v| v.to_string())
            .unwrap_or_default();
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(canonical.as_bytes()))
        )
    }
}

impl kube::Resource for Application {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Application".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        API_VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "applications".into()
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

    fn app(value: Value) -> Application {
        serde_json::from_value(value).expect("an Application")
    }

    #[test]
    fn a_bare_application_reads_with_defaults() {
        let a = app(json!({"metadata": {"name": "db", "namespace": "argocd"}}));
        assert_eq!(a.project(), "default");
        assert!(a.sync_options().is_empty());
        assert!(a.retry().is_none());
        assert!(!a.operation_requested());
        assert!(a.operation_state().is_none());
        assert_eq!(a.sync_status(), "");
        assert!(a.sync_revision().is_empty());
    }

    #[test]
    fn unknown_fields_are_ignored_and_the_read_ones_typed() {
        let a = app(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "db", "namespace": "argocd"},
            "spec": {
                "project": "team", "destination": {"server": IN_CLUSTER_SERVER, "namespace": "apps"},
                "source": {"repoURL": "https://git.example/x", "path": "db"},
                "syncPolicy": {"syncOptions": ["ServerSideApply=true"], "retry": {"limit": 2, "backoff": {"duration": "5s"}},
                               "futureField": 1},
                "somethingNew": {"a": 1}
            },
            "operation": {"sync": {"revision": "abc"}, "initiatedBy": {"automated": true}, "retry": {"limit": 5}},
            "status": {
                "sync": {"status": "OutOfSync", "revision": "abc"},
                "health": {"status": "Healthy"},
                "operationState": {"phase": "Running", "startedAt": "2026-08-22T10:00:00Z",
                    "operation": {"sync": {"revision": "abc"}, "info": [{"name": "flux-converger", "value": "n1"}]},
                    "syncResult": {"revision": "abc", "resources": [{"kind": "StatefulSet", "name": "db", "status": "SyncFailed", "extra": 1}]}},
                "unknownStatus": true
            }
        }));
        assert_eq!(a.project(), "team");
        assert_eq!(a.sync_options(), ["ServerSideApply=true"]);
        assert_eq!(
            a.retry(),
            Some(&json!({"limit": 2, "backoff": {"duration": "5s"}}))
        );
        assert!(a.operation_requested());
        let state = a.operation_state().unwrap();
        assert_eq!(state.info("flux-converger"), Some("n1"));
        assert_eq!(state.revision().revision, "abc");
        assert!(!state.completed());
        assert!(!state.retry_pending());
        assert_eq!(a.spec.rest["somethingNew"], json!({"a": 1}));
    }

    #[test]
    fn the_spec_digest_follows_the_spec_only() {
        let base = json!({"metadata": {"name": "db", "namespace": "argocd", "generation": 3},
            "spec": {"project": "", "destination": {"name": "in-cluster"}, "source": {"path": "a"}}});
        let a = app(base.clone());
        let mut status_written = base.clone();
        status_written["metadata"]["generation"] = json!(9);
        status_written["status"] = json!({"sync": {"status": "Synced"}});
        assert_eq!(a.spec_digest(), app(status_written).spec_digest());
        let mut spec_changed = base;
        spec_changed["spec"]["source"]["path"] = json!("b");
        assert_ne!(a.spec_digest(), app(spec_changed).spec_digest());
        assert!(a.spec_digest().starts_with("sha256:"));
    }

    #[test]
    fn revisions_print_as_argo_cd_lists_them() {
        let one = Revision {
            revision: "abc".into(),
            revisions: vec![],
        };
        let many = Revision {
            revision: String::new(),
            revisions: vec!["a".into(), "b".into()],
        };
        assert_eq!(one.to_string(), "abc");
        assert_eq!(many.to_string(), "a,b");
        assert!(Revision::default().is_empty());
    }
}
