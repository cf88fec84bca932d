//! PersistentVolumeClaim: create defaults and admission (`pvc-protection` finalizer, default
//! StorageClass), `ValidatePersistentVolumeClaimUpdate` (1.28 and 1.32 wording) and the
//! `PersistentVolumeClaimResize` admission plugin (403).

use serde_json::{Value, json};

use super::super::errors::Cause;
use super::super::version::{AttributesClasses, KubeVersion};
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

/// Whether the emulated server has `RecoverVolumeExpansionFailure` on: beta and on by default
/// from 1.32 (GA and locked on from 1.34), alpha and off in 1.28. It decides the shrink rule of
/// a Bound claim's request and whether the status keeps `allocatedResources` and
/// `allocatedResourceStatuses`.
pub fn recovers_expansion(version: KubeVersion) -> bool {
    version.minor() >= 32
}

/// What a server that does not know or has not enabled VolumeAttributesClass does to a claim
/// it is given (`old`: the claim as stored, on an update): 1.28 has no such field and its
/// decoder drops it; with the gate off (`DropDisabledFields`, `pkg/api/persistentvolumeclaim`)
/// a claim that had no class does not get one. Then the status' `currentVolumeAttributesClassName`
/// and `modifyVolumeStatus` the same way (`DropDisabledFieldsFromStatus`), for status writes.
pub fn drop_disabled(new: &mut Value, old: Option<&Value>, classes: AttributesClasses) {
    let had = |pointer: &str| {
        old.and_then(|o| o.pointer(pointer))
            .is_some_and(|v| !v.is_null())
    };
    let drop = match classes {
        AttributesClasses::Absent => true,
        AttributesClasses::Disabled => !had("/spec/volumeAttributesClassName"),
        AttributesClasses::Beta | AttributesClasses::Ga => false,
    };
    if drop && let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("volumeAttributesClassName");
    }
    if !classes.enabled()
        && let Some(status) = new.get_mut("status").and_then(Value::as_object_mut)
    {
        for field in ["currentVolumeAttributesClassName", "modifyVolumeStatus"] {
            if classes == AttributesClasses::Absent || !had(&format!("/status/{field}")) {
                status.remove(field);
            }
        }
    }
}

/// `spec.volumeAttributesClassName` of a claim (`None` when unset or null).
fn attributes_class(obj: &Value) -> Option<&str> {
    obj.pointer("/spec/volumeAttributesClassName")
        .and_then(Value::as_str)
}

/// The rules of a class change on an update (`ValidatePersistentVolumeClaimUpdate`): with the
/// gate off, no change at all; with it on, once set, no going back to nil or `""`: always in
/// the beta (1.31 to 1.33), and from GA (1.34) only while the driver has applied a class
/// (`status.currentVolumeAttributesClassName`).
fn attributes_class_causes(new: &Value, old: &Value, classes: AttributesClasses) -> Vec<Cause> {
    let (before, after) = (
        old.pointer("/spec/volumeAttributesClassName"),
        new.pointer("/spec/volumeAttributesClassName"),
    );
    let norm = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
    if norm(before) == norm(after) {
        return Vec::new();
    }
    let field = "spec.volumeAttributesClassName";
    let emptied = attributes_class(new).is_some_and(str::is_empty);
    let cleared = norm(after).is_none();
    match classes {
        AttributesClasses::Absent => Vec::new(),
        AttributesClasses::Disabled => vec![Cause::forbidden(
            field,
            "update is forbidden when the VolumeAttributesClass feature gate is disabled",
        )],
        AttributesClasses::Beta if norm(before).is_some() && cleared => vec![Cause::forbidden(
            field,
            "update from non-nil value to nil is forbidden",
        )],
        AttributesClasses::Beta if norm(before).is_some() && emptied => vec![Cause::forbidden(
            field,
            "update from non-nil value to an empty string is forbidden",
        )],
        AttributesClasses::Ga
            if old
                .pointer("/status/currentVolumeAttributesClassName")
                .is_some_and(|v| !v.is_null()) =>
        {
            if cleared {
                vec![Cause::forbidden(
                    field,
                    "update to nil is forbidden when status.currentVolumeAttributesClassName is not nil",
                )]
            } else if emptied {
                vec![Cause::forbidden(
                    field,
                    "update to empty string is forbidden when status.currentVolumeAttributesClassName is not nil",
                )]
            } else {
                Vec::new()
            }
        }
        _ => Vec::new(),
    }
}

pub fn validate_update(
    new: &Value,
    old: &Value,
    version: KubeVersion,
    classes: AttributesClasses,
) -> Vec<Cause> {
    let recovers = recovers_expansion(version);
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
    // A Bound claim's class is left out of the comparison (its own rules follow); an unbound
    // claim's class is part of the immutable spec. With the gate off the field only reaches
    // here unchanged or as a change the gate's own rule refuses.
    if classes != AttributesClasses::Absent && bound {
        match new_spec.get("volumeAttributesClassName") {
            Some(v) => old_spec["volumeAttributesClassName"] = v.clone(),
            None => {
                if let Some(m) = old_spec.as_object_mut() {
                    m.remove("volumeAttributesClassName");
                }
            }
        }
    }
    if !semantic_eq(&new_spec, &old_spec) {
        let what = if recovers {
            "resources.requests and volumeAttributesClassName"
        } else {
            "resources.requests"
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
        if !recovers {
            causes.push(Cause::forbidden(
                "spec.resources.requests.storage",
                "field can not be less than previous value",
            ));
        } else {
            // RecoverVolumeExpansionFailure: a request may be lowered, but only to a size still
            // above what the volume holds.
            let capacity = storage(old, "/status/capacity/storage").unwrap_or_else(zero);
            if new_size.cmp(&capacity).is_le() {
                causes.push(Cause::forbidden(
                    "spec.resources.requests.storage",
                    "field can not be less than status.capacity",
                ));
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
    causes.extend(attributes_class_causes(new, old, classes));
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

/// The `ClaimResourceStatus` values the API server accepts in
/// `status.allocatedResourceStatuses` (`resizeStatusSet`), in the order `sets.List` prints them.
pub const RESIZE_STATUSES: [&str; 5] = [
    "ControllerResizeInProgress",
    "ControllerResizeInfeasible",
    "NodeResizeInProgress",
    "NodeResizeInfeasible",
    "NodeResizePending",
];

/// `validatePersistentVolumeClaimResourceKey`: a key is a qualified name, and a native one
/// (no prefix, or a `kubernetes.io/` one) can only be `storage`.
fn resource_key_causes(key: &str, field: &str) -> Vec<Cause> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if !name_ok || prefix.is_some_and(str::is_empty) {
        return vec![Cause::invalid(
            field,
            &format!("{key:?}"),
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        )];
    }
    let native = match prefix {
        None => true,
        Some(p) => p == "kubernetes.io" || p.ends_with(".kubernetes.io"),
    };
    if native && key != "storage" {
        return vec![Cause::not_supported(
            field,
            &format!("{key:?}"),
            &["storage"],
        )];
    }
    Vec::new()
}

/// A write of a claim's `status` subresource, as the real server takes it: the status
/// strategy's `DropDisabledFieldsFromStatus` (without `RecoverVolumeExpansionFailure`, a
/// status that did not carry `allocatedResources` or `allocatedResourceStatuses` does not get
/// them: servers before 1.32 drop what the resizer writes there), then
/// `ValidatePersistentVolumeClaimStatusUpdate` (every `allocatedResourceStatuses` value must be
/// a `ClaimResourceStatus`, keys must be `storage` or prefixed). Quantities are stored
/// canonical, as the server re-serialises them.
pub fn status_update(
    new: &mut Value,
    old: &Value,
    version: KubeVersion,
    classes: AttributesClasses,
) -> Vec<Cause> {
    drop_disabled(new, Some(old), classes);
    for map in ["/status/capacity", "/status/allocatedResources"] {
        if let Some(m) = new.pointer_mut(map) {
            super::canonicalize_map(m);
        }
    }
    // Maps and lists left empty (a resizer's patch removing its last entry) are not written:
    // the Go fields are `omitempty`.
    if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
        status.retain(|k, v| {
            !(matches!(
                k.as_str(),
                "allocatedResources" | "allocatedResourceStatuses" | "conditions" | "capacity"
            ) && (v.is_null()
                || v.as_object().is_some_and(|m| m.is_empty())
                || v.as_array().is_some_and(|a| a.is_empty())))
        });
    }
    if !recovers_expansion(version) {
        for field in ["allocatedResources", "allocatedResourceStatuses"] {
            let had = old
                .pointer(&format!("/status/{field}"))
                .is_some_and(|v| v.as_object().is_some_and(|m| !m.is_empty()));
            if !had && let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
                status.remove(field);
            }
        }
        return Vec::new();
    }
    let mut causes = Vec::new();
    let path = "status.allocatedResourceStatus";
    if let Some(statuses) = new
        .pointer("/status/allocatedResourceStatuses")
        .and_then(Value::as_object)
    {
        for (key, value) in statuses {
            causes.extend(resource_key_causes(key, path));
            if !value.as_str().is_some_and(|v| RESIZE_STATUSES.contains(&v)) {
                // The real server names the key, not the value (`field.NotSupported(path, k, ...)`),
                // printed as a `ResourceName`'s `String()`: unquoted.
                causes.push(Cause::not_supported(path, key, &RESIZE_STATUSES));
            }
        }
    }
    if let Some(allocated) = new
        .pointer("/status/allocatedResources")
        .and_then(Value::as_object)
    {
        for key in allocated.keys() {
            causes.extend(resource_key_causes(key, "status.allocatedResources"));
        }
    }
    causes
}
