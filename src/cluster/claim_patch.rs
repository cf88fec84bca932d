//! A claim's change as one merge patch: its storage request (grown, or lowered by a recovery),
//! its VolumeAttributesClass, or both, always under the resourceVersion it was decided on, so
//! a claim someone changed since is never written over (409 instead).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, Patch, PatchParams};

use super::{CallError, FIELD_MANAGER, KubeCluster, with_deadline};

/// One claim's change: its storage request, its VolumeAttributesClass, or both, sent as one
/// merge patch under one resourceVersion precondition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimPatch {
    pub storage: Option<String>,
    pub attributes_class: Option<String>,
}

impl ClaimPatch {
    /// A new request and nothing else.
    pub fn storage(storage: &str) -> ClaimPatch {
        ClaimPatch {
            storage: Some(storage.to_string()),
            attributes_class: None,
        }
    }

    /// The merge patch, with the resourceVersion it is conditional on.
    pub fn body(&self, resource_version: &str) -> serde_json::Value {
        let mut spec = serde_json::Map::new();
        if let Some(storage) = &self.storage {
            spec.insert(
                "resources".into(),
                serde_json::json!({"requests": {"storage": storage}}),
            );
        }
        if let Some(class) = &self.attributes_class {
            spec.insert("volumeAttributesClassName".into(), serde_json::json!(class));
        }
        serde_json::json!({
            "metadata": {"resourceVersion": resource_version},
            "spec": spec,
        })
    }

    /// What the patch sets, for the call's name in errors.
    fn what(&self) -> &'static str {
        match (&self.storage, &self.attributes_class) {
            (Some(_), Some(_)) => {
                "spec.resources.requests.storage and spec.volumeAttributesClassName"
            }
            (None, Some(_)) => "spec.volumeAttributesClassName",
            _ => "spec.resources.requests.storage",
        }
    }
}

impl KubeCluster {
    /// The merge patch of `change` to a claim, conditional on the version read, for real or
    /// (`dry_run`) as a question.
    pub(super) async fn patch_claim_request(
        &self,
        namespace: &str,
        claim: &str,
        change: &ClaimPatch,
        resource_version: &str,
        dry_run: bool,
    ) -> Result<(), CallError> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        // A resourceVersion in a merge patch is a precondition: the server answers 409 if the
        // claim changed since it was read (since Kubernetes 1.32 a request may be lowered, so
        // an unconditional patch could undo someone else's raise; a class someone else moved
        // is not moved back either).
        let patch = change.body(resource_version);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            dry_run,
            ..PatchParams::default()
        };
        let call = format!(
            "{}merge patch of {} of",
            if dry_run { "dry-run " } else { "" },
            change.what()
        );
        with_deadline(
            self.call_timeout,
            &call,
            &format!("PersistentVolumeClaim {namespace}/{claim}"),
            api.patch(claim, &params, &Patch::Merge(&patch)),
        )
        .await
        .map(|_| ())
    }
}
