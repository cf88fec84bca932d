//! Acting as a Kustomization's tenant, as kustomize-controller does: the StatefulSet and claim
//! calls of a converge impersonate `system:serviceaccount:<ns>:<spec.serviceAccountName>`, so a
//! tenant can never make the converger touch what its own service account cannot.
//!
//! Impersonation wraps the service's own client (one connection pool, any transport, the
//! in-process test server too) rather than building a client per tenant from a kubeconfig.

use std::time::Duration;

use http::HeaderValue;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::Store;

use crate::cluster::{
    CallError, Cluster, DeleteOutcome, KubeCluster, WaitOutcome, WatchedStatefulSets,
};

/// The header the API server's impersonation filter reads.
pub const IMPERSONATE_USER: &str = "impersonate-user";

/// Why a tenant client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot impersonate {user:?}: not a valid header value")]
pub struct TenantError {
    pub user: String,
}

/// `client`, acting as `user` on every request.
pub fn impersonating(client: &kube::Client, user: &str) -> Result<kube::Client, TenantError> {
    let value = HeaderValue::from_str(user).map_err(|_| TenantError {
        user: user.to_string(),
    })?;
    let inner = client.clone();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        request
            .headers_mut()
            .insert(IMPERSONATE_USER, value.clone());
        async move { inner.send(request).await }
    });
    Ok(kube::Client::new(service, client.default_namespace()))
}

/// The converge's cluster for one tenant: StatefulSets and claims as the tenant, StorageClasses
/// (cluster-scoped, read-only, which tenants usually may not list) as the service.
pub struct TenantCluster {
    tenant: KubeCluster,
    service: KubeCluster,
}

impl TenantCluster {
    pub fn new(tenant: kube::Client, service: kube::Client, call_timeout: Duration) -> Self {
        TenantCluster {
            tenant: KubeCluster::new(tenant, call_timeout),
            service: KubeCluster::new(service, call_timeout),
        }
    }

    /// The field manager of Helm releases' StatefulSets (`--helm-field-manager`), for the
    /// tenant's writes and the service's reads alike.
    pub fn with_helm_field_manager(mut self, manager: &str) -> Self {
        self.tenant = self.tenant.with_helm_field_manager(manager);
        self.service = self.service.with_helm_field_manager(manager);
        self
    }

    /// Writes the StatefulSets `writes` names as it says (an Argo CD Application's: its
    /// controller's field manager and apply mode); the tenant writes, so only its side needs it.
    pub fn with_writes_as(mut self, writes: crate::cluster::WritesAs) -> Self {
        self.tenant = self.tenant.with_writes_as(writes);
        self
    }

    /// StorageClasses from the service's cache (they are the service's reads, never the
    /// tenant's), so a converge lists none once the cache has its first list.
    pub fn with_storage_classes(mut self, store: Store<StorageClass>) -> Self {
        self.service = self.service.with_storage_classes(store);
        self
    }

    /// StatefulSets from the service's watch: a guess to decide on, which the tenant's own
    /// proof confirms (its answer is the tenant's read), and the orphan delete's completion.
    pub fn with_statefulsets(mut self, watched: WatchedStatefulSets) -> Self {
        self.tenant = self.tenant.with_statefulsets(watched);
        self
    }
}

impl Cluster for TenantCluster {
    async fn get_statefulset(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StatefulSet>, CallError> {
        self.tenant.get_statefulset(namespace, name).await
    }

    fn watched_statefulset(&self, namespace: &str, name: &str) -> Option<StatefulSet> {
        self.tenant.watched_statefulset(namespace, name)
    }

    async fn list_claims(&self, namespace: &str) -> Result<Vec<PersistentVolumeClaim>, CallError> {
        self.tenant.list_claims(namespace).await
    }

    async fn list_storage_classes(&self) -> Result<Vec<StorageClass>, CallError> {
        self.service.list_storage_classes().await
    }

    async fn dry_run_apply(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        self.tenant.dry_run_apply(object).await
    }

    async fn dry_run_create(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        self.tenant.dry_run_create(object).await
    }

    async fn get_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>, CallError> {
        self.tenant.get_claim(namespace, name).await
    }

    async fn patch_claim(
        &self,
        namespace: &str,
        claim: &str,
        patch: &crate::cluster::ClaimPatch,
        resource_version: &str,
    ) -> Result<(), CallError> {
        self.tenant
            .patch_claim(namespace, claim, patch, resource_version)
            .await
    }

    /// The service's read: VolumeAttributesClasses are cluster-scoped, like StorageClasses.
    async fn attribute_classes(
        &self,
        names: &std::collections::BTreeSet<String>,
    ) -> Result<crate::decide::AttributeClasses, CallError> {
        self.service.attribute_classes(names).await
    }

    async fn resize_claim_dry_run(
        &self,
        namespace: &str,
        claim: &str,
        storage: &str,
        resource_version: &str,
    ) -> Result<(), CallError> {
        self.tenant
            .resize_claim_dry_run(namespace, claim, storage, resource_version)
            .await
    }

    async fn orphan_delete(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<DeleteOutcome, CallError> {
        self.tenant.orphan_delete(namespace, name, uid).await
    }

    async fn wait_gone(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        from_resource_version: Option<&str>,
        timeout: Duration,
    ) -> Result<WaitOutcome, CallError> {
        self.tenant
            .wait_gone(namespace, name, uid, from_resource_version, timeout)
            .await
    }

    async fn apply(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        self.tenant.apply(object).await
    }
}

/// The RBAC permission a failed call needed, as `verb resource in namespace ns`, read from the
/// call and object the cluster code names (`None` when it is not a tenant call).
pub fn permission(error: &CallError) -> Option<String> {
    let call = error.call.as_str();
    let verb = if call.starts_with("get") {
        "get"
    } else if call.starts_with("list") {
        "list"
    } else if call.starts_with("watch") || call.starts_with("wait") {
        "watch"
    } else if call.contains("delete") {
        "delete"
    } else if call.contains("create") {
        "create"
    } else if call.contains("apply") || call.contains("patch") {
        "patch"
    } else {
        return None;
    };
    let object = error.object.as_str();
    let (resource, rest) = if let Some(rest) = object.strip_prefix("StatefulSet ") {
        ("statefulsets.apps", rest)
    } else if let Some(rest) = object.strip_prefix("PersistentVolumeClaims of namespace ") {
        ("persistentvolumeclaims", rest)
    } else if let Some(rest) = object.strip_prefix("PersistentVolumeClaim ") {
        ("persistentvolumeclaims", rest)
    } else {
        return None;
    };
    let namespace = rest.split('/').next().unwrap_or(rest);
    Some(format!("{verb} {resource} in namespace {namespace}"))
}

/// The message of a call refused (403) under a tenant's identity: who, what permission, and
/// the server's words.
pub fn forbidden_message(user: &str, error: &CallError) -> String {
    match permission(error) {
        Some(p) => format!(
            "{user} may not {p} (grant it to the Kustomization's service account): {}",
            error.server_text()
        ),
        None => format!("{user} is forbidden: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_by_table() {
        for (call, object, expected) in [
            (
                "get",
                "StatefulSet team/web",
                Some("get statefulsets.apps in namespace team"),
            ),
            (
                "server-side apply dry run of",
                "StatefulSet team/web",
                Some("patch statefulsets.apps in namespace team"),
            ),
            (
                "server-side apply of",
                "StatefulSet team/web",
                Some("patch statefulsets.apps in namespace team"),
            ),
            (
                "dry-run create of",
                "StatefulSet team/web",
                Some("create statefulsets.apps in namespace team"),
            ),
            (
                "orphan delete of",
                "StatefulSet team/web",
                Some("delete statefulsets.apps in namespace team"),
            ),
            (
                "wait for the deletion of",
                "StatefulSet team/web",
                Some("watch statefulsets.apps in namespace team"),
            ),
            (
                "list",
                "PersistentVolumeClaims of namespace team",
                Some("list persistentvolumeclaims in namespace team"),
            ),
            (
                "merge patch of spec.resources.requests.storage of",
                "PersistentVolumeClaim team/data-web-0",
                Some("patch persistentvolumeclaims in namespace team"),
            ),
            ("list", "StorageClasses", None),
            ("create", "ConfigMap flux-system/x", None),
        ] {
            let e = CallError::api(call, object, 403, "Forbidden", "nope");
            assert_eq!(permission(&e).as_deref(), expected, "{call} {object}");
        }
        let e = CallError::api(
            "get",
            "StatefulSet team/web",
            403,
            "Forbidden",
            "statefulsets.apps \"web\" is forbidden",
        );
        assert_eq!(
            forbidden_message("system:serviceaccount:team:deployer", &e),
            "system:serviceaccount:team:deployer may not get statefulsets.apps in namespace team \
             (grant it to the Kustomization's service account): statefulsets.apps \"web\" is forbidden"
        );
    }
}
