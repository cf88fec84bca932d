//! The typed conversion server-side apply starts with: every field of the applied object must
//! be declared in the type's schema, or the real server answers 500 `failed to create typed
//! patch object (<ns>/<name>; <group/version>, Kind=<Kind>): <path>: field not declared in
//! schema`, dry runs included, before any admission or validation. kustomize-controller hits
//! exactly this with a typo in git; the converger must report it as `rejected`, not as an
//! immutable-field refusal.
//!
//! The schema is the k8s-openapi type: a field that does not survive a round trip through it
//! is undeclared. Custom resources are pruned instead (see `crd_schema`).

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::errors::ApiError;
use super::patch::merge_key;
use super::resources::{self, ResourceType};

fn round_trip<T: DeserializeOwned + Serialize>(v: &Value) -> Option<Value> {
    let typed: T = serde_json::from_value(v.clone()).ok()?;
    serde_json::to_value(typed).ok()
}

type RoundTrip = fn(&Value) -> Option<Value>;

/// The object as its k8s-openapi type keeps it; `None` when the type is not known here or the
/// body does not decode (a 400 elsewhere).
fn typed(rt: &ResourceType, v: &Value) -> Option<Value> {
    use k8s_openapi::api::{
        apps::v1 as apps, coordination::v1 as coordination, core::v1 as core, events::v1 as events,
        rbac::v1 as rbac, storage::v1 as storage,
    };
    let table: &[(ResourceType, RoundTrip)] = &[
        (resources::STATEFULSET, round_trip::<apps::StatefulSet>),
        (resources::DEPLOYMENT, round_trip::<apps::Deployment>),
        (
            resources::CONTROLLER_REVISION,
            round_trip::<apps::ControllerRevision>,
        ),
        (resources::PVC, round_trip::<core::PersistentVolumeClaim>),
        (
            resources::PERSISTENT_VOLUME,
            round_trip::<core::PersistentVolume>,
        ),
        (resources::POD, round_trip::<core::Pod>),
        (resources::CONFIGMAP, round_trip::<core::ConfigMap>),
        (resources::SECRET, round_trip::<core::Secret>),
        (resources::NAMESPACE, round_trip::<core::Namespace>),
        (
            resources::SERVICE_ACCOUNT,
            round_trip::<core::ServiceAccount>,
        ),
        (resources::EVENT, round_trip::<core::Event>),
        (resources::EVENT_V1, round_trip::<events::Event>),
        (resources::LEASE, round_trip::<coordination::Lease>),
        (
            resources::STORAGE_CLASS,
            round_trip::<storage::StorageClass>,
        ),
        (resources::ROLE, round_trip::<rbac::Role>),
        (resources::ROLE_BINDING, round_trip::<rbac::RoleBinding>),
        (resources::CLUSTER_ROLE, round_trip::<rbac::ClusterRole>),
        (
            resources::CLUSTER_ROLE_BINDING,
            round_trip::<rbac::ClusterRoleBinding>,
        ),
    ];
    let (_, f) = table.iter().find(|(t, _)| t == rt)?;
    f(v)
}

/// `[name="app"]` for an associative list entry, `[0]` otherwise, as structured-merge-diff
/// prints list elements.
fn element(field: &str, item: &Value, index: usize) -> String {
    match merge_key(field).and_then(|k| item.get(k).map(|v| (k, v))) {
        Some((k, Value::String(s))) => format!("[{k}={s:?}]"),
        Some((k, v)) => format!("[{k}={v}]"),
        None => format!("[{index}]"),
    }
}

fn undeclared(given: &Value, kept: &Value, field: &str, path: &str, out: &mut Vec<String>) {
    match (given, kept) {
        (Value::Object(g), Value::Object(k)) => {
            for (name, child) in g {
                if child.is_null() {
                    continue;
                }
                let here = format!("{path}.{name}");
                match k.get(name) {
                    None => out.push(here),
                    Some(kept_child) => undeclared(child, kept_child, name, &here, out),
                }
            }
        }
        (Value::Array(g), Value::Array(k)) => {
            for (i, (gi, ki)) in g.iter().zip(k).enumerate() {
                undeclared(
                    gi,
                    ki,
                    field,
                    &format!("{path}{}", element(field, gi, i)),
                    out,
                );
            }
        }
        _ => {}
    }
}

/// The real 500 when the applied object has fields its type does not declare.
pub fn check_apply(rt: &ResourceType, applied: &Value, name: &str) -> Result<(), ApiError> {
    if rt.custom {
        return Ok(());
    }
    let Some(kept) = typed(rt, applied) else {
        return Ok(());
    };
    let mut paths = Vec::new();
    undeclared(applied, &kept, "", "", &mut paths);
    if paths.is_empty() {
        return Ok(());
    }
    let errors: Vec<String> = paths
        .iter()
        .map(|p| format!("{p}: field not declared in schema"))
        .collect();
    let detail = if errors.len() == 1 {
        errors[0].clone()
    } else {
        let mut lines = vec!["errors:".to_string()];
        lines.extend(errors.iter().map(|e| format!("  {e}")));
        lines.join("\n")
    };
    let namespace = applied
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Err(ApiError {
        code: 500,
        body: json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": format!(
                "failed to create typed patch object ({namespace}/{name}; {}, Kind={}): {detail}",
                rt.api_version(),
                rt.kind
            ),
            "code": 500,
        }),
    })
}
