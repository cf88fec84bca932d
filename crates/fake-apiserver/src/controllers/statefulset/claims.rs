//! The claims of one ordinal, from `volumeClaimTemplates`: created once, never resized here
//! (a grown template only reaches new claims), owned per the retention policy.

use serde_json::{Value, json};

use super::{create, owner_ref};
use crate::resources;
use crate::semantics;
use crate::store::{Key, State, obj_name, obj_uid};

pub fn claim_templates(set: &Value) -> Vec<Value> {
    set.pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub fn ensure_claims(state: &mut State, set: &Value, ordinal: i64) {
    let ns = set["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let set_name = obj_name(set);
    for t in claim_templates(set) {
        let claim_name = format!("{}-{set_name}-{ordinal}", obj_name(&t));
        let key = Key::new(&resources::PVC, Some(&ns), &claim_name);
        if let Some(existing) = state.get(&key).cloned() {
            sync_claim_owner(state, set, existing);
            continue;
        }
        let mut labels = t.pointer("/metadata/labels").cloned().unwrap_or(json!({}));
        if let Some(m) = set
            .pointer("/spec/selector/matchLabels")
            .and_then(Value::as_object)
        {
            for (k, v) in m {
                labels[k] = v.clone();
            }
        }
        let mut annotations = t
            .pointer("/metadata/annotations")
            .cloned()
            .unwrap_or(json!({}));
        let class = t
            .pointer("/spec/storageClassName")
            .and_then(Value::as_str)
            .and_then(|c| state.get(&Key::new(&resources::STORAGE_CLASS, None, c)))
            .and_then(|c| c["provisioner"].as_str().map(str::to_string));
        if let Some(p) = class {
            annotations["volume.beta.kubernetes.io/storage-provisioner"] = json!(p);
            annotations["volume.kubernetes.io/storage-provisioner"] = json!(p);
        }
        let mut metadata = json!({
            "name": claim_name,
            "namespace": ns,
            "labels": labels,
            "finalizers": ["kubernetes.io/pvc-protection"],
        });
        if annotations.as_object().is_some_and(|a| !a.is_empty()) {
            metadata["annotations"] = annotations;
        }
        if set.pointer("/spec/persistentVolumeClaimRetentionPolicy/whenDeleted")
            == Some(&json!("Delete"))
        {
            let mut r = owner_ref(set);
            r["controller"] = json!(false);
            metadata["ownerReferences"] = json!([r]);
        }
        let mut claim = json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": metadata,
            "spec": t["spec"].clone(),
            "status": {"phase": "Pending"},
        });
        semantics::default(&resources::PVC, &mut claim, state.version);
        // Created through the API by the real controller: what the server drops, it drops.
        let classes = state.attributes_classes();
        semantics::drop_disabled(&resources::PVC, &mut claim, None, classes);
        create(state, resources::PVC, claim);
    }
}

/// Retention policy `whenDeleted: Delete` gives each claim an ownerReference to its set (and
/// re-created sets take over existing claims); `Retain` removes it.
fn sync_claim_owner(state: &mut State, set: &Value, mut claim: Value) {
    let delete = set.pointer("/spec/persistentVolumeClaimRetentionPolicy/whenDeleted")
        == Some(&json!("Delete"));
    let uid = obj_uid(set);
    let refs: Vec<Value> = claim
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let has_mine = refs.iter().any(|r| r["uid"] == uid);
    let other_set = refs
        .iter()
        .any(|r| r["kind"] == "StatefulSet" && r["uid"] != uid);
    let next: Vec<Value> = if delete && !has_mine && !other_set {
        let mut r = owner_ref(set);
        r["controller"] = json!(false);
        refs.iter().cloned().chain(std::iter::once(r)).collect()
    } else if !delete && has_mine {
        refs.iter().filter(|r| r["uid"] != uid).cloned().collect()
    } else {
        return;
    };
    if next.is_empty() {
        if let Some(m) = claim["metadata"].as_object_mut() {
            m.remove("ownerReferences");
        }
    } else {
        claim["metadata"]["ownerReferences"] = json!(next);
    }
    state.replace(resources::PVC, claim);
}
