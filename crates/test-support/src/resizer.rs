//! A stand-in for the external-resizer (and the kubelet's file system resize): it drives a
//! claim's expansion exactly as the real one is seen from the API server, through the
//! `persistentvolumeclaims/status` subresource (merge patches of `allocatedResources`,
//! `allocatedResourceStatuses`, `conditions` and `capacity`) and core/v1 Events on the claim,
//! with the real reasons and messages (kubernetes-csi/external-resizer, `pkg/controller` and
//! `pkg/util`). Never a back door: a watch sees each step as it would on a cluster, and the fake
//! validates each status write as a real server does (on 1.28 it drops the resize statuses).
//!
//! Its modify path plays the resizer's `modifycontroller` (issue #38): a claim moved to another
//! VolumeAttributesClass goes `modifyVolumeStatus` `InProgress` (condition `ModifyingVolume`,
//! Event `VolumeModify`), then `currentVolumeAttributesClassName` (Event
//! `VolumeModifySuccessful`), or `Infeasible` (condition `ModifyVolumeError`, Event
//! `VolumeModifyFailed`), or `Pending` for a class that does not exist; the server drops all of
//! it where the feature is off, as a real one does.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// `FileSystemResizePending`'s message, as the resizer writes it.
pub const FS_PENDING_MESSAGE: &str =
    "Waiting for user to (re-)start a pod to finish file system resize of volume on node.";

/// One resizer of one CSI driver (named in its Events' source, as `external-resizer <driver>`).
#[derive(Clone)]
pub struct Resizer {
    client: kube::Client,
    driver: String,
}

fn claims(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "PersistentVolumeClaim".into(),
        plural: "persistentvolumeclaims".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn events(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl Resizer {
    pub fn new(client: kube::Client, driver: &str) -> Self {
        Resizer {
            client,
            driver: driver.to_string(),
        }
    }

    async fn claim(&self, ns: &str, name: &str) -> Result<Value, kube::Error> {
        let c = claims(&self.client, ns).get(name).await?;
        Ok(serde_json::to_value(c).unwrap_or_default())
    }

    async fn status(&self, ns: &str, name: &str, status: Value) -> Result<Value, kube::Error> {
        let params = PatchParams {
            field_manager: Some("csi-resizer".into()),
            ..PatchParams::default()
        };
        let patched = claims(&self.client, ns)
            .patch_status(name, &params, &Patch::Merge(json!({"status": status})))
            .await?;
        Ok(serde_json::to_value(patched).unwrap_or_default())
    }

    /// Records an Event on the claim as client-go's recorder does (core/v1, `source.component`).
    pub async fn event(
        &self,
        ns: &str,
        claim: &Value,
        type_: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let name = claim["metadata"]["name"].as_str().unwrap_or_default();
        let at = now();
        let event: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": format!("{name}."), "namespace": ns},
            "involvedObject": {
                "kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns, "name": name,
                "uid": claim["metadata"]["uid"], "resourceVersion": claim["metadata"]["resourceVersion"],
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": format!("external-resizer {}", self.driver)},
            "firstTimestamp": at,
            "lastTimestamp": at,
            "count": 1,
        }))
        .unwrap_or_else(|e| panic!("event: {e}"));
        events(&self.client, ns)
            .create(&PostParams::default(), &event)
            .await?;
        Ok(())
    }

    fn volume(claim: &Value) -> String {
        claim["spec"]["volumeName"]
            .as_str()
            .unwrap_or("pvc-unknown")
            .to_string()
    }

    /// `markControllerResizeInProgress`: the expansion starts in the control plane.
    pub async fn start(&self, ns: &str, name: &str) -> Result<(), kube::Error> {
        let claim = self.claim(ns, name).await?;
        let request = claim["spec"]["resources"]["requests"]["storage"].clone();
        let claim = self
            .status(
                ns,
                name,
                json!({
                    "allocatedResources": {"storage": request},
                    "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"},
                    "conditions": [{"type": "Resizing", "status": "True", "lastTransitionTime": now()}],
                }),
            )
            .await?;
        let message = format!(
            "External resizer is resizing volume {}",
            Self::volume(&claim)
        );
        self.event(ns, &claim, "Normal", "Resizing", &message).await
    }

    /// `markForPendingNodeExpansion`: the volume grew, the node grows the file system at the
    /// next mount (the claim's capacity is the kubelet's to update).
    pub async fn needs_node(&self, ns: &str, name: &str) -> Result<(), kube::Error> {
        let claim = self
            .status(
                ns,
                name,
                json!({
                    "allocatedResourceStatuses": {"storage": "NodeResizePending"},
                    "conditions": [{"type": "FileSystemResizePending", "status": "True",
                                    "lastTransitionTime": now(), "message": FS_PENDING_MESSAGE}],
                }),
            )
            .await?;
        self.event(
            ns,
            &claim,
            "Normal",
            "FileSystemResizeRequired",
            "Require file system resize of volume on node",
        )
        .await
    }

    /// `markPVCResizeFinished`: the capacity is the request, no resize status, no condition.
    pub async fn finish(&self, ns: &str, name: &str) -> Result<(), kube::Error> {
        let claim = self.claim(ns, name).await?;
        let request = claim["spec"]["resources"]["requests"]["storage"].clone();
        let claim = self
            .status(
                ns,
                name,
                json!({
                    "capacity": {"storage": request},
                    "allocatedResourceStatuses": {"storage": null},
                    "conditions": null,
                }),
            )
            .await?;
        self.event(
            ns,
            &claim,
            "Normal",
            "VolumeResizeSuccessful",
            "Resize volume succeeded",
        )
        .await
    }

    /// A final error from the driver (`markControllerExpansionInfeasible`): the size is refused
    /// for good.
    pub async fn infeasible(&self, ns: &str, name: &str, why: &str) -> Result<(), kube::Error> {
        let claim = self.claim(ns, name).await?;
        let message = format!(
            "resize volume {:?} by resizer {:?} failed: rpc error: code = OutOfRange desc = {why}",
            Self::volume(&claim),
            self.driver
        );
        let claim = self
            .status(
                ns,
                name,
                json!({
                    "allocatedResourceStatuses": {"storage": "ControllerResizeInfeasible"},
                    "conditions": [{"type": "ControllerResizeError", "status": "True",
                                    "lastTransitionTime": now(), "message": message}],
                }),
            )
            .await?;
        self.event(ns, &claim, "Warning", "VolumeResizeFailed", &message)
            .await
    }

    /// The claim's `spec.volumeAttributesClassName`, and its conditions but the modify ones.
    async fn modify_target(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<(Value, String, Value), kube::Error> {
        let claim = self.claim(ns, name).await?;
        let class = claim["spec"]["volumeAttributesClassName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let kept: Vec<Value> = claim["status"]["conditions"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter(|c| c["type"] != "ModifyVolumeError" && c["type"] != "ModifyingVolume")
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Ok((claim, class, json!(kept)))
    }

    /// `markControllerModifyVolumeStatus(InProgress)`: the modification of the volume to the
    /// claim's class starts.
    pub async fn modify_start(&self, ns: &str, name: &str) -> Result<(), kube::Error> {
        let (claim, class, mut conditions) = self.modify_target(ns, name).await?;
        if let Some(cs) = conditions.as_array_mut() {
            cs.push(json!({"type": "ModifyingVolume", "status": "True",
                           "lastTransitionTime": now(), "message": "ModifyVolume operation in progress."}));
        }
        self.status(
            ns,
            name,
            json!({
                "modifyVolumeStatus": {"targetVolumeAttributesClassName": class, "status": "InProgress"},
                "conditions": conditions,
            }),
        )
        .await?;
        let message = format!(
            "external resizer is modifying volume {} with vac {class}",
            claim["metadata"]["name"].as_str().unwrap_or_default()
        );
        self.event(ns, &claim, "Normal", "VolumeModify", &message)
            .await
    }

    /// `markControllerModifyVolumeCompleted`: the volume has the claim's class
    /// (`currentVolumeAttributesClassName`), no modify status, no modify condition.
    pub async fn modify_finish(&self, ns: &str, name: &str) -> Result<(), kube::Error> {
        let (claim, class, conditions) = self.modify_target(ns, name).await?;
        self.status(
            ns,
            name,
            json!({
                "currentVolumeAttributesClassName": class,
                "modifyVolumeStatus": null,
                "conditions": conditions,
            }),
        )
        .await?;
        let message = format!(
            "external resizer modified volume {} with vac {class} successfully",
            claim["metadata"]["name"].as_str().unwrap_or_default()
        );
        self.event(ns, &claim, "Normal", "VolumeModifySuccessful", &message)
            .await
    }

    /// A final `InvalidArgument` from the driver: `modifyVolumeStatus` `Infeasible`, the
    /// `ModifyVolumeError` condition, the `VolumeModifyFailed` Event.
    pub async fn modify_infeasible(
        &self,
        ns: &str,
        name: &str,
        why: &str,
    ) -> Result<(), kube::Error> {
        let (claim, class, mut conditions) = self.modify_target(ns, name).await?;
        let error = format!("rpc error: code = InvalidArgument desc = {why}");
        if let Some(cs) = conditions.as_array_mut() {
            cs.push(json!({"type": "ModifyVolumeError", "status": "True", "lastTransitionTime": now(),
                           "message": format!("ModifyVolume failed with error: {error}. Waiting for retry.")}));
        }
        self.status(
            ns,
            name,
            json!({
                "modifyVolumeStatus": {"targetVolumeAttributesClassName": class, "status": "Infeasible"},
                "conditions": conditions,
            }),
        )
        .await?;
        self.event(ns, &claim, "Warning", "VolumeModifyFailed", &error)
            .await
    }

    /// The class the claim names does not exist: `modifyVolumeStatus` `Pending` and the
    /// `VolumeModifyFailed` Event (`VAC "x" does not exist.`).
    pub async fn modify_pending(&self, ns: &str, name: &str) -> Result<(), kube::Error> {
        let (claim, class, _) = self.modify_target(ns, name).await?;
        self.status(
            ns,
            name,
            json!({"modifyVolumeStatus": {"targetVolumeAttributesClassName": class, "status": "Pending"}}),
        )
        .await?;
        let message = format!("VAC {class:?} does not exist.");
        self.event(ns, &claim, "Warning", "VolumeModifyFailed", &message)
            .await
    }

    /// The kubelet's `NodeExpandVolume` once a pod mounts the claim again (an offline or
    /// node-side expansion): the capacity is the request, no resize status or condition, the
    /// `FileSystemResizeSuccessful` Event.
    pub async fn node_finish(&self, ns: &str, name: &str) -> Result<(), kube::Error> {
        let claim = self.claim(ns, name).await?;
        let request = claim["spec"]["resources"]["requests"]["storage"].clone();
        let claim = self
            .status(
                ns,
                name,
                json!({
                    "capacity": {"storage": request},
                    "allocatedResourceStatuses": {"storage": null},
                    "conditions": null,
                }),
            )
            .await?;
        let message = format!(
            "MountVolume.NodeExpandVolume succeeded for volume {:?}",
            Self::volume(&claim)
        );
        self.event(ns, &claim, "Normal", "FileSystemResizeSuccessful", &message)
            .await
    }

    /// A failure the resizer retries (`markControllerExpansionFailed`, not final): the
    /// `ControllerResizeError` condition beside the status still in progress.
    pub async fn error(&self, ns: &str, name: &str, why: &str) -> Result<(), kube::Error> {
        let claim = self.claim(ns, name).await?;
        let message = format!(
            "resize volume {:?} by resizer {:?} failed: rpc error: code = Internal desc = {why}",
            Self::volume(&claim),
            self.driver
        );
        let claim = self
            .status(
                ns,
                name,
                json!({
                    "conditions": [
                        {"type": "Resizing", "status": "True", "lastTransitionTime": now()},
                        {"type": "ControllerResizeError", "status": "True",
                         "lastTransitionTime": now(), "message": message},
                    ],
                }),
            )
            .await?;
        self.event(ns, &claim, "Warning", "VolumeResizeFailed", &message)
            .await
    }
}
