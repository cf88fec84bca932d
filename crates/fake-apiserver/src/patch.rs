//! The three classic patch types: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
//! strategic merge patch.
//!
//! Strategic merge is simplified: it is a JSON merge patch, except that the lists this project
//! touches and that carry a patch merge key in the Kubernetes types are merged by that key
//! (`containers` by `name`, `volumeMounts` by `mountPath`, `ownerReferences` by `uid`, ...),
//! `finalizers` merge as a set, and `$patch: delete` / `$patch: replace` are honoured inside
//! such lists and maps. Lists without a known merge key are replaced, as in a merge patch.

use serde_json::{Map, Value};

use super::errors::ApiError;

pub fn merge_patch(doc: &mut Value, patch: &Value) {
    json_patch::merge(doc, patch);
}

pub fn json_patch(doc: &mut Value, patch_body: &[u8]) -> Result<(), ApiError> {
    let mut ops: json_patch::Patch = serde_json::from_slice(patch_body)
        .map_err(|e| ApiError::bad_request(&format!("json: cannot unmarshal: {e}")))?;
    // The server's JSON patch (evanphx/json-patch) passes a `test` of `null` on a missing
    // member: it is dropped here before the crate, which would fail it, sees it.
    ops.0.retain(|op| match op {
        json_patch::PatchOperation::Test(t) => {
            !(t.value.is_null() && doc.pointer(t.path.as_str()).is_none_or(Value::is_null))
        }
        _ => true,
    });
    json_patch::patch(doc, &ops).map_err(|e| {
        // A failed `test` is reported without detail (the real server's wording).
        let message = match e.kind {
            json_patch::PatchErrorKind::TestFailed => {
                "the server rejected our request due to an error in our request".to_string()
            }
            _ => format!("the server rejected our request due to an error in our request: {e}"),
        };
        ApiError::custom(422, "Invalid", &message)
    })
}

/// The merge key of a list field in the Kubernetes types, by field name.
pub fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "hostAliases"
        | "resourceClaims" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ports" => "containerPort",
        "ownerReferences" => "uid",
        "conditions" => "type",
        "tolerations" => "key",
        _ => return None,
    })
}

/// Fields whose list of scalars merges as a set.
fn merges_as_set(field: &str) -> bool {
    matches!(field, "finalizers")
}

pub fn strategic_merge(doc: &mut Value, patch: &Value) {
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => strategic_object(d, p),
        (doc, patch) => *doc = patch.clone(),
    }
}

fn strategic_object(doc: &mut Map<String, Value>, patch: &Map<String, Value>) {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replaced = patch.clone();
        replaced.remove("$patch");
        *doc = replaced;
        return;
    }
    for (k, pv) in patch {
        // Directives (`$patch`, `$setElementOrder/...`, `$retainKeys`) are not data.
        if k.starts_with('$') {
            continue;
        }
        match pv {
            Value::Null => {
                doc.remove(k);
            }
            Value::Object(po) => {
                if po.get("$patch").and_then(Value::as_str) == Some("delete") {
                    doc.remove(k);
                    continue;
                }
                let entry = doc
                    .entry(k.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !entry.is_object() {
                    *entry = Value::Object(Map::new());
                }
                if let Value::Object(eo) = entry {
                    strategic_object(eo, po);
                }
            }
            Value::Array(pa) => {
                if let Some(mk) = merge_key(k) {
                    let target = doc.entry(k.clone()).or_insert_with(|| Value::Array(vec![]));
                    if let Value::Array(ta) = target {
                        merge_list_by_key(ta, pa, mk);
                    } else {
                        *target = Value::Array(pa.clone());
                    }
                } else if merges_as_set(k) {
                    let target = doc.entry(k.clone()).or_insert_with(|| Value::Array(vec![]));
                    if let Value::Array(ta) = target {
                        for v in pa {
                            if !ta.contains(v) {
                                ta.push(v.clone());
                            }
                        }
                    } else {
                        *target = Value::Array(pa.clone());
                    }
                } else {
                    doc.insert(k.clone(), pv.clone());
                }
            }
            _ => {
                doc.insert(k.clone(), pv.clone());
            }
        }
    }
}

fn merge_list_by_key(target: &mut Vec<Value>, patch: &[Value], key: &str) {
    if patch
        .iter()
        .any(|p| p.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *target = patch
            .iter()
            .filter(|p| p.get("$patch").is_none())
            .cloned()
            .collect();
        return;
    }
    for p in patch {
        let Some(id) = p.get(key) else {
            target.push(p.clone());
            continue;
        };
        let pos = target.iter().position(|t| t.get(key) == Some(id));
        let delete = p.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                target.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge(&mut target[i], p),
            (None, false) => target.push(p.clone()),
        }
    }
}
