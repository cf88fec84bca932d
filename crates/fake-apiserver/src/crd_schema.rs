//! Flux's and Argo CD's custom resources as their CustomResourceDefinitions make the real server
//! treat them (`tests/fixtures/flux-crds/`, the CRDs Flux ships; `tests/fixtures/argocd-crds/`,
//! Argo CD's): unknown fields pruned, schema defaults
//! applied (`spec.force: false`, `status.observedGeneration: -1`, ...), then required fields,
//! enums and types validated, on every write, the `status` subresource included. A failure is
//! the real 422 with one cause per field, children before their parent's required fields,
//! and, when the CRD has CEL rules, the closing `<nil>` cause saying they were not run.
//!
//! Not checked (see docs/fake-apiserver.md): `pattern`, `format`, length and range limits,
//! the CEL rules themselves.

use std::sync::OnceLock;

use serde_json::{Value, json};

use super::errors::{ApiError, Cause};
use super::resources::{self, ResourceType};
use super::store::obj_name;
use super::version::KubeVersion;

struct Crd {
    rt: ResourceType,
    schema: Value,
    has_cel: bool,
}

fn load(rt: ResourceType, yaml: &str) -> Crd {
    let crd: Value = serde_saphyr::from_str(yaml).expect("a shipped CRD parses");
    let version = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == json!(rt.version)))
        .cloned()
        .expect("the CRD serves the emulated version");
    let schema = version["schema"]["openAPIV3Schema"].clone();
    let has_cel = schema.to_string().contains("x-kubernetes-validations");
    Crd {
        rt,
        schema,
        has_cel,
    }
}

fn crds() -> &'static [Crd] {
    static CRDS: OnceLock<Vec<Crd>> = OnceLock::new();
    CRDS.get_or_init(|| {
        vec![
            load(
                resources::KUSTOMIZATION,
                include_str!("../../../tests/fixtures/flux-crds/kustomizations.yaml"),
            ),
            load(
                resources::HELM_RELEASE,
                include_str!("../../../tests/fixtures/flux-crds/helmreleases.yaml"),
            ),
            load(
                resources::GIT_REPOSITORY,
                include_str!("../../../tests/fixtures/flux-crds/gitrepositories.yaml"),
            ),
            load(
                resources::OCI_REPOSITORY,
                include_str!("../../../tests/fixtures/flux-crds/ocirepositories.yaml"),
            ),
            load(
                resources::BUCKET,
                include_str!("../../../tests/fixtures/flux-crds/buckets.yaml"),
            ),
            load(
                resources::EXTERNAL_ARTIFACT,
                include_str!("../../../tests/fixtures/flux-crds/externalartifacts.yaml"),
            ),
            load(
                resources::APPLICATION,
                include_str!("../../../tests/fixtures/argocd-crds/application-crd.yaml"),
            ),
            load(
                resources::APP_PROJECT,
                include_str!("../../../tests/fixtures/argocd-crds/appproject-crd.yaml"),
            ),
        ]
    })
}

fn crd_of(rt: &ResourceType) -> Option<&'static Crd> {
    crds().iter().find(|c| c.rt == *rt)
}

fn preserves_unknown(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"] == json!(true)
}

/// Drops fields the schema does not declare (structural pruning); `metadata` is left alone.
fn prune(schema: &Value, v: &mut Value, top: bool) {
    if preserves_unknown(schema) {
        return;
    }
    match v {
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            m.retain(|k, _| {
                (top && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                    || props.is_some_and(|p| p.contains_key(k))
                    || additional.is_some_and(|a| a.is_object() || *a == json!(true))
            });
            for (k, child) in m.iter_mut() {
                if top && k == "metadata" {
                    continue;
                }
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    prune(s, child, false);
                } else if let Some(s) = additional.filter(|a| a.is_object()) {
                    prune(s, child, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for item in items {
                    prune(s, item, false);
                }
            }
        }
        _ => {}
    }
}

/// Drops `null`s the schema neither allows (`nullable`) nor defaults, as the real server's
/// decoder does before defaulting (`PruneNonNullableNullsWithoutDefaults`): a JSON patch
/// `add /operation null` removes an Application's `operation`.
fn prune_nulls(schema: &Value, v: &mut Value) {
    let field_schema = |k: &str| {
        schema
            .get("properties")
            .and_then(|p| p.get(k))
            .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
    };
    match v {
        Value::Object(m) => {
            m.retain(|k, child| {
                !(child.is_null()
                    && field_schema(k).is_some_and(|s| {
                        s["nullable"] != json!(true) && s.get("default").is_none()
                    }))
            });
            for (k, child) in m.iter_mut() {
                if let Some(s) = field_schema(k) {
                    prune_nulls(s, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for item in items {
                    prune_nulls(s, item);
                }
            }
        }
        _ => {}
    }
}

/// Fills `default`s of missing properties of the objects present, depth first.
fn default(schema: &Value, v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, s) in props {
                    if !m.contains_key(k)
                        && let Some(d) = s.get("default")
                    {
                        m.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = m.get_mut(k) {
                        default(s, child);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for item in items {
                    default(s, item);
                }
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_ok(schema: &Value, v: &Value) -> bool {
    if schema["x-kubernetes-int-or-string"] == json!(true) {
        return v.is_string() || v.is_i64() || v.is_u64();
    }
    match schema.get("type").and_then(Value::as_str) {
        None => true,
        Some("number") => v.is_number(),
        Some(t) => t == type_name(v),
    }
}

/// Go's `%q` of a JSON scalar, as the enum error prints the value and the supported ones.
fn quoted(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn validate(schema: &Value, v: &Value, path: &str, causes: &mut Vec<Cause>) {
    if v.is_null() && schema["nullable"] == json!(true) {
        return;
    }
    if !type_ok(schema, v) {
        let want = schema["type"].as_str().unwrap_or_default();
        causes.push(Cause {
            reason: "FieldValueTypeInvalid",
            message: format!(
                "Invalid value: \"{}\": {path} in body must be of type {want}: \"{}\"",
                type_name(v),
                type_name(v)
            ),
            field: path.to_string(),
        });
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let listed: Vec<String> = allowed.iter().map(quoted).collect();
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {}: supported values: {}",
                quoted(v),
                listed.join(", ")
            ),
            field: path.to_string(),
        });
    }
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match v {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                let mut keys: Vec<&String> = m.keys().filter(|k| props.contains_key(*k)).collect();
                keys.sort();
                for k in keys {
                    if path.is_empty() && k == "metadata" {
                        continue;
                    }
                    validate(&props[k], &m[k], &join(k), causes);
                }
            }
            if let Some(s) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, child) in m {
                    validate(s, child, &join(k), causes);
                }
            }
            for req in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !m.contains_key(req) {
                    causes.push(Cause::required(&join(req), ""));
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate(s, item, &format!("{path}[{i}]"), causes);
                }
            }
        }
        _ => {}
    }
}

/// Defaults without pruning or validation: what a read of a stored object shows.
pub fn default_only(rt: &ResourceType, obj: &mut Value) {
    if let Some(crd) = crd_of(rt) {
        default(&crd.schema, obj);
    }
}

/// Pruning, defaulting and validation of a write, in the real server's order.
pub fn admit(rt: &ResourceType, obj: &mut Value, version: KubeVersion) -> Result<(), ApiError> {
    let Some(crd) = crd_of(rt) else {
        return Ok(());
    };
    prune(&crd.schema, obj, true);
    prune_nulls(&crd.schema, obj);
    default(&crd.schema, obj);
    let mut causes = Vec::new();
    validate(&crd.schema, obj, "", &mut causes);
    if causes.is_empty() {
        return Ok(());
    }
    if crd.has_cel {
        // The skipped rules' value is printed quoted until 1.36, bare from then on.
        let null = if version >= KubeVersion::V1_36 {
            "null"
        } else {
            "\"null\""
        };
        causes.push(Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {null}: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"),
            field: "<nil>".into(),
        });
    }
    Err(ApiError::invalid(rt, obj_name(obj), &causes))
}
