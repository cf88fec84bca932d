//! The [`Cluster`] trait the converge runs over, and its implementation over a `kube::Client`.
//!
//! Every call runs under its own deadline: an API server that stops answering must turn into
//! an error naming the call and the object, never into a converge that hangs with a
//! StatefulSet half done. Errors keep the server's status (code, reason, message, causes)
//! because `converge` tells refusals (4xx of the dry run) from failures to retry (5xx,
//! timeouts, connection errors) by them.

use std::future::Future;
use std::time::Duration;

use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy, WatchEvent, WatchParams,
};
use kube::runtime::reflector::Store;
use serde::Serialize;

mod attribute_classes;
mod claim_patch;
pub mod claims;
pub mod pods;
mod synced;
pub mod tenant;
mod watched;
pub use attribute_classes::ATTRIBUTE_CLASS_GROUP;
pub use claim_patch::ClaimPatch;
pub use synced::Synced;
pub use watched::{TRUST_WAIT, WatchedStatefulSets};

/// Field manager of the StatefulSet dry run and re-apply: parity with Flux (docs/README.md,
/// Contracts); a Helm release's StatefulSet uses helm-controller's ([`field_manager`]).
pub const FLUX_FIELD_MANAGER: &str = "kustomize-controller";
/// Field manager of everything else the converger writes (claims, journal).
pub const FIELD_MANAGER: &str = "flux-converger";

/// What the orphan delete found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The object is terminating; watch from this version for it to go.
    Deleting { resource_version: Option<String> },
    /// Deleted at once (the server answered with a status, not the terminating object).
    Gone,
    /// 404: nothing under that name to delete. Unless our own delete was already sent, someone
    /// else deleted it first (Flux's prune, an operator), and it must not be brought back.
    Absent,
    /// 409 naming the uid precondition: the object under that name has another uid (someone
    /// deleted and re-created it). Any other 409 is an error, not this.
    UidMismatch { message: String },
}

/// The words of the API server's 409 when a delete's `preconditions.uid` does not match the
/// stored object ("the UID in the precondition (X) does not match the UID in record (Y)"); a
/// resourceVersion precondition or an update conflict reads differently, and must not be
/// taken for "someone re-created it".
pub const UID_PRECONDITION: &str = "the UID in the precondition";

/// Whether a failed call is the server's 409 for a uid precondition that does not match.
pub fn is_uid_mismatch(error: &CallError) -> bool {
    error.code() == Some(409) && error.server_text().contains(UID_PRECONDITION)
}

/// Whether a failed call is a 409 Conflict on an update or patch carrying a resourceVersion
/// (the object changed since it was read).
pub fn is_conflict(error: &CallError) -> bool {
    error.code() == Some(409) && !is_uid_mismatch(error)
}

/// Page size of the claim listing: a namespace with thousands of claims is read in bounded
/// answers (each under its own deadline) rather than one answer the deadline may not cover.
pub const LIST_PAGE: u32 = 500;

/// How the wait for a deletion ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    Gone,
    /// An object with another uid now holds the name.
    Replaced {
        uid: String,
    },
}

/// The cluster as the converge sees it. Every call is bounded in time by the implementation
/// and fails with a [`CallError`] naming the call and object.
pub trait Cluster: Send + Sync {
    /// `None` when absent.
    fn get_statefulset(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<StatefulSet>, CallError>> + Send;
    /// A watched copy of the StatefulSet (without its pod template), when the cluster keeps a
    /// watch that holds it: a guess a converge may decide on, to be confirmed by its proof's
    /// answer. `None`: [`Cluster::get_statefulset`].
    fn watched_statefulset(&self, _namespace: &str, _name: &str) -> Option<StatefulSet> {
        None
    }
    /// Every claim of the namespace (read in pages of [`LIST_PAGE`]).
    fn list_claims(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<Vec<PersistentVolumeClaim>, CallError>> + Send;
    /// One claim, `None` when absent: the re-read after a conflicting grow.
    fn get_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<PersistentVolumeClaim>, CallError>> + Send;
    fn list_storage_classes(
        &self,
    ) -> impl Future<Output = Result<Vec<StorageClass>, CallError>> + Send;
    /// Server-side apply with `dryRun=All` (field manager `kustomize-controller`, force).
    fn dry_run_apply(
        &self,
        object: &StatefulSet,
    ) -> impl Future<Output = Result<StatefulSet, CallError>> + Send;
    /// A create with `dryRun=All` (field manager `kustomize-controller`): the server runs
    /// authorization, admission and validation of a create, and checks existence last, so a
    /// 409 AlreadyExists says the re-create after the orphan delete would pass them all.
    fn dry_run_create(
        &self,
        object: &StatefulSet,
    ) -> impl Future<Output = Result<StatefulSet, CallError>> + Send;
    /// Patches a claim's request and/or VolumeAttributesClass ([`ClaimPatch`]) in one merge
    /// patch (field manager `flux-converger`), only if the claim is still at
    /// `resource_version` (the version the decision was made on): otherwise a 409 Conflict
    /// ([`is_conflict`]), so a request someone raised meanwhile is never lowered.
    fn patch_claim(
        &self,
        namespace: &str,
        claim: &str,
        patch: &ClaimPatch,
        resource_version: &str,
    ) -> impl Future<Output = Result<(), CallError>> + Send;
    /// Whether the server serves the VolumeAttributesClass API (discovery of
    /// `storage.k8s.io`: `v1`, else `v1beta1`, else `v1alpha1`) and which of `names` exist
    /// there. Read as the service: classes are cluster-scoped, which tenants may not read.
    fn attribute_classes(
        &self,
        names: &std::collections::BTreeSet<String>,
    ) -> impl Future<Output = Result<crate::decide::AttributeClasses, CallError>> + Send;
    /// A storage-only [`Cluster::patch_claim`] with `dryRun=All`: whether the server would take the claim's
    /// new request (a recovery asks this of every claim it lowers before the first write).
    fn resize_claim_dry_run(
        &self,
        namespace: &str,
        claim: &str,
        storage: &str,
        resource_version: &str,
    ) -> impl Future<Output = Result<(), CallError>> + Send;
    /// Delete with `propagationPolicy=Orphan` and `preconditions.uid`; a 409 is
    /// [`DeleteOutcome::UidMismatch`] only when the server names the uid precondition.
    fn orphan_delete(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> impl Future<Output = Result<DeleteOutcome, CallError>> + Send;
    /// Waits (a watch, from `from_resource_version` when known) until the object with `uid`
    /// is gone, at most `timeout`.
    fn wait_gone(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        from_resource_version: Option<&str>,
        timeout: Duration,
    ) -> impl Future<Output = Result<WaitOutcome, CallError>> + Send;
    /// Server-side apply (field manager `kustomize-controller`, force), or the write a
    /// [`WriteAs`] names for the object; returns the live object.
    fn apply(
        &self,
        object: &StatefulSet,
    ) -> impl Future<Output = Result<StatefulSet, CallError>> + Send;
}

/// Why one API call failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum CallErrorKind {
    /// The server answered with a failure status.
    Api {
        code: u16,
        reason: String,
        message: String,
        /// The messages of `details.causes`, where the server gave any.
        causes: Vec<String>,
    },
    /// No answer within the call's deadline: the call was cancelled.
    Timeout { after_ms: u64 },
    /// The connection failed or broke (nothing is known about whether a write happened).
    Connection { message: String },
    /// Anything else (a body that does not decode, a request that cannot be built).
    Other { message: String },
}

/// One failed API call, naming the call and the object it was about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{call} {object}: {kind}")]
pub struct CallError {
    /// What was asked, e.g. `get StatefulSet` or `patch PersistentVolumeClaim`.
    pub call: String,
    /// `Kind namespace/name` of the object.
    pub object: String,
    /// Boxed: errors travel through every `Result` of the converge and should stay small.
    pub kind: Box<CallErrorKind>,
}

impl std::fmt::Display for CallErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallErrorKind::Api {
                code,
                reason,
                message,
                ..
            } => write!(f, "the server answered {code} {reason}: {message}"),
            CallErrorKind::Timeout { after_ms } => {
                write!(f, "no answer within {after_ms} ms (call cancelled)")
            }
            CallErrorKind::Connection { message } => write!(f, "connection failed: {message}"),
            CallErrorKind::Other { message } => f.write_str(message),
        }
    }
}

impl CallError {
    pub fn new(call: impl Into<String>, object: impl Into<String>, kind: CallErrorKind) -> Self {
        CallError {
            call: call.into(),
            object: object.into(),
            kind: Box::new(kind),
        }
    }

    /// A failure status from the server.
    pub fn api(
        call: impl Into<String>,
        object: impl Into<String>,
        code: u16,
        reason: &str,
        message: &str,
    ) -> Self {
        CallError::new(
            call,
            object,
            CallErrorKind::Api {
                code,
                reason: reason.to_string(),
                message: message.to_string(),
                causes: Vec::new(),
            },
        )
    }

    /// The HTTP status the server answered, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self.kind.as_ref() {
            CallErrorKind::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The server's own words (message and causes), empty when it did not answer.
    pub fn server_text(&self) -> String {
        match self.kind.as_ref() {
            CallErrorKind::Api {
                message, causes, ..
            } => {
                let mut text = message.clone();
                for cause in causes {
                    if !text.contains(cause.as_str()) {
                        text.push_str("; ");
                        text.push_str(cause);
                    }
                }
                text
            }
            _ => String::new(),
        }
    }

    fn from_kube(call: &str, object: &str, e: kube::Error) -> Self {
        let kind = match e {
            kube::Error::Api(status) => CallErrorKind::Api {
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
                causes: status
                    .details
                    .as_ref()
                    .map(|d| d.causes.iter().map(|c| c.message.clone()).collect())
                    .unwrap_or_default(),
            },
            kube::Error::HyperError(e) => CallErrorKind::Connection {
                message: e.to_string(),
            },
            kube::Error::Service(e) => CallErrorKind::Connection {
                message: e.to_string(),
            },
            kube::Error::ReadEvents(e) => CallErrorKind::Connection {
                message: e.to_string(),
            },
            other => CallErrorKind::Other {
                message: other.to_string(),
            },
        };
        CallError::new(call, object, kind)
    }
}

/// Every object of a list, read in pages of [`LIST_PAGE`] (`limit`/`continue`), each page
/// under its own `deadline`. A continue token that expired meanwhile (410) restarts the list
/// once from the beginning, as kubectl does, rather than returning a partial answer.
pub async fn list_pages<K>(
    deadline: Duration,
    api: &Api<K>,
    what: &str,
) -> Result<Vec<K>, CallError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut restarted = false;
    let mut items = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(LIST_PAGE);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = match with_deadline(deadline, "list", what, api.list(&params)).await {
            Ok(page) => page,
            Err(e) if e.code() == Some(410) && token.is_some() && !restarted => {
                restarted = true;
                items.clear();
                token = None;
                continue;
            }
            Err(e) => return Err(e),
        };
        items.extend(page.items);
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(next) => token = Some(next),
            None => return Ok(items),
        }
    }
}

/// Runs one API call under `deadline`, mapping kube's error and the timeout to a [`CallError`].
pub async fn with_deadline<T>(
    deadline: Duration,
    call: &str,
    object: &str,
    fut: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(deadline, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(CallError::from_kube(call, object, e)),
        Err(_) => Err(CallError::new(
            call,
            object,
            CallErrorKind::Timeout {
                after_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            },
        )),
    }
}

pub(crate) fn sts_object(namespace: &str, name: &str) -> String {
    format!("StatefulSet {namespace}/{name}")
}

/// A client acting as a Kustomization's service account (`spec.serviceAccountName`), as
/// kustomize-controller does: a converge then can do no more than Flux itself could.
pub fn impersonating_client(
    config: &kube::Config,
    namespace: &str,
    service_account: &str,
) -> Result<kube::Client, kube::Error> {
    let mut config = config.clone();
    config.auth_info.impersonate = Some(format!(
        "system:serviceaccount:{namespace}:{service_account}"
    ));
    crate::wire::kube_client(config)
}

/// [`Cluster`] over a `kube::Client`; writes as the client's identity.
#[derive(Clone)]
pub struct KubeCluster {
    client: kube::Client,
    call_timeout: Duration,
    storage_classes: Option<Store<StorageClass>>,
    statefulsets: Option<WatchedStatefulSets>,
    /// `--helm-field-manager`: the manager of a Helm release's StatefulSet ([`field_manager`]).
    helm_field_manager: String,
    /// The StatefulSets written otherwise ([`KubeCluster::with_writes_as`]).
    writes_as: std::sync::Arc<WritesAs>,
}

/// The field manager a StatefulSet's dry runs and re-apply use: the controller that applies it
/// next. A Helm release's object (Helm's ownership metadata) is helm-controller's
/// (`helm_field_manager`), whose next server-side upgrade would otherwise conflict with the
/// re-create's manager on `.spec.volumeClaimTemplates`; any other is kustomize-controller's.
pub fn field_manager<'a>(object: &StatefulSet, helm_field_manager: &'a str) -> &'a str {
    if crate::helm::manifest::is_helm_owned(&object.metadata) {
        helm_field_manager
    } else {
        FLUX_FIELD_MANAGER
    }
}

/// How a StatefulSet whose controller is not told by its metadata is written: its dry runs and
/// its re-create carry `field_manager`, and the re-create is `operation`. An Argo CD
/// Application's StatefulSets are `argocd-controller`'s, created (recorded as `Update`, as
/// kubectl's client-side apply records its writes) or server-side applied (`Apply`), as its
/// sync options say (`argocd::recreate`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteAs {
    pub field_manager: String,
    pub operation: WriteOperation,
}

/// The write that re-creates an orphan-deleted StatefulSet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOperation {
    /// A forced server-side apply (managed fields operation `Apply`), as for Flux's objects.
    Apply,
    /// A create (managed fields operation `Update`).
    Create,
}

/// The StatefulSets `(namespace, name)` written as [`WriteAs`] says; every other one as its
/// metadata says ([`field_manager`]).
pub type WritesAs = std::collections::BTreeMap<(String, String), WriteAs>;

impl KubeCluster {
    /// `call_timeout` bounds each call (not the wait for a deletion, which has its own bound).
    pub fn new(client: kube::Client, call_timeout: Duration) -> Self {
        KubeCluster {
            client,
            call_timeout,
            storage_classes: None,
            statefulsets: None,
            helm_field_manager: crate::helm::manifest::DEFAULT_FIELD_MANAGER.to_string(),
            writes_as: Default::default(),
        }
    }

    /// Writes the StatefulSets `writes` names as it says (an Argo CD Application's), each other
    /// one as before.
    pub fn with_writes_as(mut self, writes: WritesAs) -> Self {
        self.writes_as = std::sync::Arc::new(writes);
        self
    }

    /// How `object` is written when [`KubeCluster::with_writes_as`] names it.
    fn write_as(&self, object: &StatefulSet) -> Option<&WriteAs> {
        let key = (
            object.metadata.namespace.clone().unwrap_or_default(),
            object.metadata.name.clone().unwrap_or_default(),
        );
        self.writes_as.get(&key)
    }

    /// The field manager of `object`'s dry runs and re-create.
    fn manager_of<'a>(&'a self, object: &StatefulSet) -> &'a str {
        match self.write_as(object) {
            Some(w) => &w.field_manager,
            None => field_manager(object, &self.helm_field_manager),
        }
    }

    /// The field manager of Helm releases' StatefulSets (`--helm-field-manager`).
    pub fn with_helm_field_manager(mut self, manager: &str) -> Self {
        self.helm_field_manager = manager.to_string();
        self
    }

    /// Takes StorageClasses from a cache the caller keeps (the service's reflector) instead
    /// of listing them on every converge: classes change rarely, and a stale
    /// `allowVolumeExpansion` only costs a grow the server refuses (before the intent is
    /// recorded, so nothing is left half done). Until the cache has its first list, classes
    /// are listed from the server.
    pub fn with_storage_classes(mut self, store: Store<StorageClass>) -> Self {
        self.storage_classes = Some(store);
        self
    }

    /// Decides on StatefulSets from the caller's watch ([`WatchedStatefulSets`]) and sees
    /// orphan deletes complete there: a get and a watch fewer per re-create, each confirmed by
    /// the server as that module says.
    pub fn with_statefulsets(mut self, watched: WatchedStatefulSets) -> Self {
        self.statefulsets = Some(watched);
        self
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn statefulsets(&self, namespace: &str) -> Api<StatefulSet> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn apply_with(
        &self,
        object: &StatefulSet,
        dry_run: bool,
    ) -> Result<StatefulSet, CallError> {
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let name = object.metadata.name.clone().unwrap_or_default();
        let call = if dry_run {
            "server-side apply dry run of"
        } else {
            "server-side apply of"
        };
        let mut params = PatchParams::apply(self.manager_of(object)).force();
        if dry_run {
            params = params.dry_run();
        }
        with_deadline(
            self.call_timeout,
            call,
            &sts_object(&namespace, &name),
            self.statefulsets(&namespace)
                .patch(&name, &params, &Patch::Apply(object)),
        )
        .await
    }

    /// One watch from `resource_version` until the object with `uid` is gone, or replaced.
    /// `Ok(None)` means the watch ended (server timeout, 410) before an answer.
    async fn watch_once(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        resource_version: &str,
        server_timeout: u32,
    ) -> Result<Option<WaitOutcome>, CallError> {
        let object = sts_object(namespace, name);
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(server_timeout.max(1));
        let api = self.statefulsets(namespace);
        let stream = match with_deadline(
            self.call_timeout,
            "watch",
            &object,
            api.watch(&params, resource_version),
        )
        .await
        {
            Ok(stream) => stream,
            // Expired version answered as a status rather than as an event: list and re-watch.
            Err(e) if e.code() == Some(410) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut stream = stream
            .map_err(|e| CallError::from_kube("watch", &object, e))
            .boxed();
        while let Some(event) = stream.next().await {
            match event? {
                WatchEvent::Deleted(sts) if sts.metadata.uid.as_deref() == Some(uid) => {
                    return Ok(Some(WaitOutcome::Gone));
                }
                WatchEvent::Added(sts) | WatchEvent::Modified(sts)
                    if sts.metadata.uid.as_deref() != Some(uid) =>
                {
                    return Ok(Some(WaitOutcome::Replaced {
                        uid: sts.metadata.uid.unwrap_or_default(),
                    }));
                }
                WatchEvent::Error(status) if status.code == 410 => return Ok(None),
                WatchEvent::Error(status) => {
                    return Err(CallError::from_kube(
                        "watch",
                        &object,
                        kube::Error::Api(status),
                    ));
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// Where a (re-)watch starts: a list of the one name gives both the object and the
    /// collection's resourceVersion, which (unlike the object's own) is not older than a
    /// compaction that just expired the previous watch.
    async fn current(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Result<String, WaitOutcome>, CallError> {
        let params = ListParams::default().fields(&format!("metadata.name={name}"));
        let list = with_deadline(
            self.call_timeout,
            "list",
            &sts_object(namespace, name),
            self.statefulsets(namespace).list(&params),
        )
        .await?;
        let found = list
            .items
            .into_iter()
            .find(|s| s.metadata.name.as_deref() == Some(name));
        match found {
            None => Ok(Err(WaitOutcome::Gone)),
            Some(sts) if sts.metadata.uid.as_deref() != Some(uid) => {
                Ok(Err(WaitOutcome::Replaced {
                    uid: sts.metadata.uid.unwrap_or_default(),
                }))
            }
            Some(_) => Ok(Ok(list.metadata.resource_version.unwrap_or_default())),
        }
    }
}

impl Cluster for KubeCluster {
    fn watched_statefulset(&self, namespace: &str, name: &str) -> Option<StatefulSet> {
        self.statefulsets.as_ref()?.get(namespace, name)
    }

    async fn get_statefulset(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StatefulSet>, CallError> {
        with_deadline(
            self.call_timeout,
            "get",
            &sts_object(namespace, name),
            self.statefulsets(namespace).get_opt(name),
        )
        .await
    }

    async fn list_claims(&self, namespace: &str) -> Result<Vec<PersistentVolumeClaim>, CallError> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        list_pages(
            self.call_timeout,
            &api,
            &format!("PersistentVolumeClaims of namespace {namespace}"),
        )
        .await
    }

    async fn get_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>, CallError> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        with_deadline(
            self.call_timeout,
            "get",
            &format!("PersistentVolumeClaim {namespace}/{name}"),
            api.get_opt(name),
        )
        .await
    }

    async fn list_storage_classes(&self) -> Result<Vec<StorageClass>, CallError> {
        if let Some(store) = &self.storage_classes
            && let Some(Ok(())) = store.wait_until_ready().now_or_never()
        {
            return Ok(store
                .state()
                .iter()
                .map(|c| StorageClass::clone(c))
                .collect());
        }
        let api: Api<StorageClass> = Api::all(self.client.clone());
        let list = with_deadline(
            self.call_timeout,
            "list",
            "StorageClasses",
            api.list(&ListParams::default()),
        )
        .await?;
        Ok(list.items)
    }

    async fn dry_run_apply(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        self.apply_with(object, true).await
    }

    async fn dry_run_create(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let name = object.metadata.name.clone().unwrap_or_default();
        let params = PostParams {
            dry_run: true,
            field_manager: Some(self.manager_of(object).to_string()),
        };
        with_deadline(
            self.call_timeout,
            "dry-run create of",
            &sts_object(&namespace, &name),
            self.statefulsets(&namespace).create(&params, object),
        )
        .await
    }

    async fn patch_claim(
        &self,
        namespace: &str,
        claim: &str,
        patch: &ClaimPatch,
        resource_version: &str,
    ) -> Result<(), CallError> {
        self.patch_claim_request(namespace, claim, patch, resource_version, false)
            .await
    }

    async fn attribute_classes(
        &self,
        names: &std::collections::BTreeSet<String>,
    ) -> Result<crate::decide::AttributeClasses, CallError> {
        self.served_attribute_classes(names).await
    }

    async fn resize_claim_dry_run(
        &self,
        namespace: &str,
        claim: &str,
        storage: &str,
        resource_version: &str,
    ) -> Result<(), CallError> {
        let patch = ClaimPatch::storage(storage);
        self.patch_claim_request(namespace, claim, &patch, resource_version, true)
            .await
    }

    async fn orphan_delete(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<DeleteOutcome, CallError> {
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Orphan),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let result = with_deadline(
            self.call_timeout,
            "orphan delete of",
            &sts_object(namespace, name),
            self.statefulsets(namespace).delete(name, &params),
        )
        .await;
        match result {
            // Left: the object, now terminating; Right: a status, the object is already gone.
            Ok(answer) => Ok(match answer.left() {
                Some(sts) => DeleteOutcome::Deleting {
                    resource_version: sts.metadata.resource_version,
                },
                None => DeleteOutcome::Gone,
            }),
            Err(e) if e.code() == Some(404) => Ok(DeleteOutcome::Absent),
            Err(e) if is_uid_mismatch(&e) => Ok(DeleteOutcome::UidMismatch {
                message: e.server_text(),
            }),
            Err(e) => Err(e),
        }
    }

    async fn wait_gone(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        from_resource_version: Option<&str>,
        timeout: Duration,
    ) -> Result<WaitOutcome, CallError> {
        let object = sts_object(namespace, name);
        let started = tokio::time::Instant::now();
        let wait = async {
            if let Some(watched) = &self.statefulsets
                && let Some(done) = watched.wait_gone(namespace, name, uid).await
            {
                return Ok(done);
            }
            let mut version = match from_resource_version {
                Some(v) => v.to_string(),
                None => match self.current(namespace, name, uid).await? {
                    Ok(v) => v,
                    Err(done) => return Ok(done),
                },
            };
            loop {
                let left = timeout.saturating_sub(started.elapsed());
                let server_timeout =
                    u32::try_from(left.as_secs().saturating_add(1)).unwrap_or(u32::MAX);
                if let Some(done) = self
                    .watch_once(namespace, name, uid, &version, server_timeout)
                    .await?
                {
                    return Ok(done);
                }
                // The watch ended without an answer (server timeout or an expired version):
                // look once, then watch again from what we saw.
                version = match self.current(namespace, name, uid).await? {
                    Ok(v) => v,
                    Err(done) => return Ok(done),
                };
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(result) => result,
            Err(_) => Err(CallError::new(
                "wait for the deletion of",
                object,
                CallErrorKind::Timeout {
                    after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                },
            )),
        }
    }

    async fn apply(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        match self.write_as(object) {
            Some(WriteAs {
                field_manager,
                operation: WriteOperation::Create,
            }) => {
                let namespace = object.metadata.namespace.clone().unwrap_or_default();
                let name = object.metadata.name.clone().unwrap_or_default();
                let params = PostParams {
                    dry_run: false,
                    field_manager: Some(field_manager.clone()),
                };
                with_deadline(
                    self.call_timeout,
                    "create of",
                    &sts_object(&namespace, &name),
                    self.statefulsets(&namespace).create(&params, object),
                )
                .await
            }
            _ => self.apply_with(object, false).await,
        }
    }
}

/// A borrowed cluster is a cluster: `resume_all` can then be handed the caller's own cluster
/// for every intent (`|_| Ok(&cluster)`) without cloning a client.
impl<T: Cluster> Cluster for &T {
    async fn get_statefulset(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StatefulSet>, CallError> {
        (**self).get_statefulset(namespace, name).await
    }

    fn watched_statefulset(&self, namespace: &str, name: &str) -> Option<StatefulSet> {
        (**self).watched_statefulset(namespace, name)
    }

    async fn list_claims(&self, namespace: &str) -> Result<Vec<PersistentVolumeClaim>, CallError> {
        (**self).list_claims(namespace).await
    }

    async fn get_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>, CallError> {
        (**self).get_claim(namespace, name).await
    }

    async fn list_storage_classes(&self) -> Result<Vec<StorageClass>, CallError> {
        (**self).list_storage_classes().await
    }

    async fn dry_run_apply(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        (**self).dry_run_apply(object).await
    }

    async fn dry_run_create(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        (**self).dry_run_create(object).await
    }

    async fn resize_claim_dry_run(
        &self,
        namespace: &str,
        claim: &str,
        storage: &str,
        resource_version: &str,
    ) -> Result<(), CallError> {
        (**self)
            .resize_claim_dry_run(namespace, claim, storage, resource_version)
            .await
    }

    async fn patch_claim(
        &self,
        namespace: &str,
        claim: &str,
        patch: &ClaimPatch,
        resource_version: &str,
    ) -> Result<(), CallError> {
        (**self)
            .patch_claim(namespace, claim, patch, resource_version)
            .await
    }

    async fn attribute_classes(
        &self,
        names: &std::collections::BTreeSet<String>,
    ) -> Result<crate::decide::AttributeClasses, CallError> {
        (**self).attribute_classes(names).await
    }

    async fn orphan_delete(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<DeleteOutcome, CallError> {
        (**self).orphan_delete(namespace, name, uid).await
    }

    async fn wait_gone(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        from_resource_version: Option<&str>,
        timeout: Duration,
    ) -> Result<WaitOutcome, CallError> {
        (**self)
            .wait_gone(namespace, name, uid, from_resource_version, timeout)
            .await
    }

    async fn apply(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        (**self).apply(object).await
    }
}
