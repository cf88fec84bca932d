//! The PersistentVolume binder of kube-controller-manager, for volumes pre-bound by
//! `spec.claimRef`: a Pending claim named by a volume's `claimRef` (same class, uid unset or
//! equal) is bound to it at once: the volume gets the claim's uid and `Bound`, the claim gets
//! `volumeName`, the volume's capacity and access modes and `Bound`, as the real binder does
//! within a second. Claims no volume names stay Pending (no dynamic provisioning), so resize
//! rules that only apply to Bound claims are reached the way they are on a real cluster.

use serde_json::{Value, json};

use crate::resources;
use crate::store::{State, now, obj_name, obj_namespace, obj_uid};

fn class(obj: &Value) -> &str {
    obj.pointer("/spec/storageClassName")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Binds every Pending claim a volume's `claimRef` names. Returns whether anything changed.
pub fn bind(state: &mut State) -> bool {
    let mut changed = false;
    for pv in state.list(&resources::PERSISTENT_VOLUME, None) {
        if pv.pointer("/status/phase") == Some(&json!("Bound")) {
            continue;
        }
        let Some(claim_ref) = pv.pointer("/spec/claimRef").cloned() else {
            continue;
        };
        let ns = claim_ref["namespace"].as_str().unwrap_or_default();
        let name = claim_ref["name"].as_str().unwrap_or_default();
        let Some(pvc) = state
            .list(&resources::PVC, Some(ns))
            .into_iter()
            .find(|c| obj_name(c) == name)
        else {
            continue;
        };
        let uid_ok = claim_ref["uid"]
            .as_str()
            .is_none_or(|u| u.is_empty() || u == obj_uid(&pvc));
        let pending = pvc.pointer("/status/phase").is_none_or(|p| p == "Pending");
        let wanted_volume = pvc
            .pointer("/spec/volumeName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !uid_ok
            || !pending
            || class(&pv) != class(&pvc)
            || (!wanted_volume.is_empty() && wanted_volume != obj_name(&pv))
            || pvc["metadata"].get("deletionTimestamp").is_some()
        {
            continue;
        }
        let mut volume = pv.clone();
        volume["spec"]["claimRef"] = json!({
            "kind": "PersistentVolumeClaim",
            "namespace": obj_namespace(&pvc).unwrap_or_default(),
            "name": obj_name(&pvc),
            "uid": obj_uid(&pvc),
            "apiVersion": "v1",
            "resourceVersion": pvc["metadata"]["resourceVersion"].clone(),
        });
        volume["status"] = json!({"phase": "Bound", "lastPhaseTransitionTime": now()});
        state.replace(resources::PERSISTENT_VOLUME, volume);

        let mut claim = pvc;
        claim["spec"]["volumeName"] = json!(obj_name(&pv));
        let annotations = &mut claim["metadata"]["annotations"];
        if !annotations.is_object() {
            *annotations = json!({});
        }
        annotations["pv.kubernetes.io/bind-completed"] = json!("yes");
        annotations["pv.kubernetes.io/bound-by-controller"] = json!("yes");
        claim["status"] = json!({
            "phase": "Bound",
            "accessModes": pv.pointer("/spec/accessModes").cloned().unwrap_or(json!([])),
            "capacity": pv.pointer("/spec/capacity").cloned().unwrap_or(json!({})),
        });
        state.replace(resources::PVC, claim);
        changed = true;
    }
    changed
}
