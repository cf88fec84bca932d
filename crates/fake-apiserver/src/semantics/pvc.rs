//! PersistentVolumeClaim: create defaults and admission (`pvc-protection` finalizer, default
//! StorageClass), `ValidatePersistentVolumeClaimUpdate` (1.28 and 1.32 wording) and the
//! `PersistentVolumeClaimResize` admission plugin (403).

use serde_json::{Value, json};

use super::super::errors::Cause;
use super::super::version::KubeVersion;
use super::quantity::Quantity;
use super::{canonicalize_resources, semantic_eq, set_default};

pub const NOT_EXPANDABLE: &str = "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize";

pub fn default(obj: &mut Value) {
    set_default(obj, "spec", json!({}));
    set_default(&mut obj["spec"], "volumeMode", json!("Filesystem"));
    if let Some(r) = obj["spec"].get_mut("resources") {
        canonicalize_resources(Some(r));
    }
    if let Some(cap) = obj.pointer_mut("/status/capacity") {
        super::canonicalize_map(cap);
    }
}

/// Admission on create: the `StorageObjectInUseProtection` finalizer and, when the claim names
/// no class, the default class (`DefaultStorageClass`).
pub fn admit_create(obj: &mut Value, default_class: Option<String>) {
    let finalizers = obj["metadata"]
        .as_object_mut()
        .map(|m| m.entry("finalizers").or_insert_with(|| json!([])));
    if let Some(Value::Array(f)) = finalizers
        && !f.iter().any(|x| x == "kubernetes.io/pvc-protection")
    {
        f.push(json!("kubernetes.io/pvc-protection"));
    }
    if obj["spec"].get("storageClassName").is_none()
        && let Some(class) = default_class
    {
        obj["spec"]["storageClassName"] = json!(class);
    }
    if obj.get("status").is_none_or(|s| s.get("phase").is_none()) {
        obj["status"] = json!({"phase": "Pending"});
    }
}

fn storage(obj: &Value, pointer: &str) -> Option<Quantity> {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .and_then(Quantity::parse)
}

fn zero() -> Quantity {
    Quantity::parse("0").expect("zero parses")
}

pub fn validate_update(new: &Value, old: &Value, version: KubeVersion) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut new_spec = new["spec"].clone();
    let mut old_spec = old["spec"].clone();
    // The volume binder may set volumeName once.
    if old_spec["volumeName"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        match new_spec.get("volumeName") {
            Some(v) => old_spec["volumeName"] = v.clone(),
            None => {
                if let Some(m) = old_spec.as_object_mut() {
                    m.remove("volumeName");
                }
            }
        }
    }
    let bound = old.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");
    if bound && new_spec.pointer("/resources/requests").is_some() {
        match old_spec.pointer("/resources/requests/storage") {
            Some(s) => new_spec["resources"]["requests"]["storage"] = s.clone(),
            None => {
                if let Some(r) = new_spec
                    .pointer_mut("/resources/requests")
                    .and_then(Value::as_object_mut)
                {
                    r.remove("storage");
                }
            }
        }
    }
    if version >= KubeVersion::V1_32
        && bound
        && let Some(v) = new_spec.get("volumeAttributesClassName")
    {
        old_spec["volumeAttributesClassName"] = v.clone();
    }
    if !semantic_eq(&new_spec, &old_spec) {
        let what = match version {
            KubeVersion::V1_28 => "resources.requests",
            KubeVersion::V1_32 | KubeVersion::V1_36 => {
                "resources.requests and volumeAttributesClassName"
            }
        };
        causes.push(Cause::forbidden(
            "spec",
            &format!(
                "spec is immutable after creation except {what} for bound claims\n{}",
                super::pvc_diff::spec_diff(&old_spec, &new_spec, version)
            ),
        ));
    }
    let old_size = storage(old, "/spec/resources/requests/storage").unwrap_or_else(zero);
    let new_size = storage(new, "/spec/resources/requests/storage").unwrap_or_else(zero);
    if new_size.cmp(&old_size).is_lt() {
        match version {
            KubeVersion::V1_28 => causes.push(Cause::forbidden(
                "spec.resources.requests.storage",
                "field can not be less than previous value",
            )),
            KubeVersion::V1_32 | KubeVersion::V1_36 => {
                let capacity = storage(old, "/status/capacity/storage").unwrap_or_else(zero);
                if new_size.cmp(&capacity).is_le() {
                    causes.push(Cause::forbidden(
                        "spec.resources.requests.storage",
                        "field can not be less than status.capacity",
                    ));
                }
            }
        }
    }
    if old["spec"].get("volumeMode") != new["spec"].get("volumeMode") {
        let mode = new["spec"]["volumeMode"].as_str().unwrap_or_default();
        causes.push(Cause::invalid(
            "volumeMode",
            &format!("\"{mode}\""),
            "field is immutable",
        ));
    }
    causes
}

/// `PersistentVolumeClaimResize`: a grown request needs a Bound claim whose class exists and
/// allows expansion. `class` is the claim's StorageClass, if it exists.
pub fn admit_update(new: &Value, old: &Value, class: Option<&Value>) -> Result<(), String> {
    let old_size = storage(old, "/spec/resources/requests/storage").unwrap_or_else(zero);
    let new_size = storage(new, "/spec/resources/requests/storage").unwrap_or_else(zero);
    if new_size.cmp(&old_size).is_le() {
        return Ok(());
    }
    if old.pointer("/status/phase").and_then(Value::as_str) != Some("Bound") {
        return Err("Only bound persistent volume claims can be expanded".into());
    }
    let allowed = class.is_some_and(|c| c["allowVolumeExpansion"] == json!(true));
    if allowed {
        Ok(())
    } else {
        Err(NOT_EXPANDABLE.into())
    }
}
