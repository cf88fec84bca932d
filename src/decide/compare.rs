//! How a live and a desired StatefulSet are compared: each side normalised as the API server
//! stores it (its defaults applied, what it adds removed, empty values dropped), then the first
//! field that differs, named by its path, quantities compared by value. Pure JSON work, apart
//! from the rules that decide what a difference means.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Map, Value};

use super::{Change, ChangeClass, MUTABLE_SPEC_FIELDS};
use crate::quantity::Quantity;

/// Printed for a value that is absent.
pub(super) const UNSET: &str = "<unset>";

/// The spec fields an update may not change, with the server's defaults applied, so a desired
/// object that leaves a field to its default equals the live object that shows it.
pub(super) fn immutable_spec(sts: &StatefulSet) -> Value {
    let mut spec = sts
        .spec
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_else(|| Value::Object(Map::new()));
    if let Value::Object(m) = &mut spec {
        for f in MUTABLE_SPEC_FIELDS.iter().chain(&["volumeClaimTemplates"]) {
            m.remove(*f);
        }
        default_field(m, "podManagementPolicy", Value::from("OrderedReady"));
        default_field(m, "revisionHistoryLimit", Value::from(10));
        if m.get("serviceName").is_some_and(|v| v == "") {
            m.remove("serviceName");
        }
    }
    strip_empty(&mut spec);
    spec
}

/// [`immutable_spec`] without the fields that have a refusal code of their own (`selector`,
/// `serviceName`) and those a re-create carries (`podManagementPolicy`,
/// `revisionHistoryLimit`).
pub(super) fn other_immutable_spec(sts: &StatefulSet) -> Value {
    let mut spec = immutable_spec(sts);
    if let Value::Object(m) = &mut spec {
        for f in [
            "selector",
            "serviceName",
            "podManagementPolicy",
            "revisionHistoryLimit",
        ] {
            m.remove(f);
        }
    }
    spec
}

/// A normalised template split into everything but its labels and annotations (must not
/// change), and those (carried by a re-create).
pub(super) fn split_template(t: &PersistentVolumeClaim) -> (Value, Value) {
    let mut fields = normalised_template(t);
    let mut meta = Map::new();
    if let Some(Value::Object(m)) = fields.get_mut("metadata") {
        for key in ["labels", "annotations"] {
            if let Some(v) = m.remove(key) {
                meta.insert(key.to_owned(), v);
            }
        }
    }
    strip_empty(&mut fields);
    (fields, Value::Object(meta))
}

/// A volumeClaimTemplate without what the server adds (`apiVersion`, `kind`, `status`,
/// `metadata.creationTimestamp`, `volumeMode: Filesystem`, the mirrored data source) and
/// without the storage request and the VolumeAttributesClass, which are compared on their own.
fn normalised_template(t: &PersistentVolumeClaim) -> Value {
    let mut v = serde_json::to_value(t).unwrap_or_else(|_| Value::Object(Map::new()));
    if let Value::Object(m) = &mut v {
        for f in ["apiVersion", "kind", "status"] {
            m.remove(f);
        }
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            meta.remove("creationTimestamp");
        }
        if let Some(Value::Object(spec)) = m.get_mut("spec") {
            default_field(spec, "volumeMode", Value::from("Filesystem"));
            mirror_data_source(spec);
            // Compared on its own: a move to another class is carried, a removal refused.
            spec.remove("volumeAttributesClassName");
            if let Some(Value::Object(requests)) = spec
                .get_mut("resources")
                .and_then(|r| r.get_mut("requests"))
            {
                requests.remove("storage");
            }
        }
    }
    strip_empty(&mut v);
    v
}

fn default_field(m: &mut Map<String, Value>, key: &str, default: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_owned(), default);
    }
}

/// The API server fills `dataSourceRef` from `dataSource` and back (for a ref without
/// namespace); doing the same on both sides makes either spelling compare equal.
fn mirror_data_source(spec: &mut Map<String, Value>) {
    let source = spec.get("dataSource").filter(|v| !v.is_null()).cloned();
    let reference = spec.get("dataSourceRef").filter(|v| !v.is_null()).cloned();
    match (source, reference) {
        (Some(s), None) => {
            spec.insert("dataSourceRef".into(), s);
        }
        (None, Some(r)) if r.get("namespace").is_none_or(|n| n.is_null() || n == "") => {
            let mut s = r;
            if let Value::Object(o) = &mut s {
                o.remove("namespace");
            }
            spec.insert("dataSource".into(), s);
        }
        _ => {}
    }
}

/// Removes nulls, empty maps and empty lists: the API server treats them as absent.
fn strip_empty(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.values_mut().for_each(strip_empty);
            m.retain(|_, v| !is_empty(v));
        }
        Value::Array(items) => items.iter_mut().for_each(strip_empty),
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

pub(super) struct Difference {
    pub(super) path: String,
    live: Option<Value>,
    desired: Option<Value>,
}

fn show(v: &Option<Value>) -> String {
    match v {
        None => UNSET.to_owned(),
        Some(v) => v.to_string(),
    }
}

impl Difference {
    pub(super) fn change(&self, class: ChangeClass, note: Option<String>) -> Change {
        Change {
            class,
            field: self.path.clone(),
            live: show(&self.live),
            declared: show(&self.desired),
            note,
        }
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "{} differs: live {}, desired {}",
            self.path,
            show(&self.live),
            show(&self.desired)
        )
    }
}

/// The first field (in key order) where `live` and `desired` differ; quantities under
/// `resources.requests`/`resources.limits` compare by value.
pub(super) fn first_difference(
    path: &str,
    live: Option<&Value>,
    desired: Option<&Value>,
) -> Option<Difference> {
    let child = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    let empty = Map::new();
    let map_or_absent = |v: Option<&Value>| matches!(v, None | Some(Value::Object(_)));
    match (live, desired) {
        // An absent map on one side: descend anyway, so the message names the leaf.
        (Some(Value::Object(_)), _) | (_, Some(Value::Object(_)))
            if map_or_absent(live) && map_or_absent(desired) =>
        {
            let l = live.and_then(Value::as_object).unwrap_or(&empty);
            let d = desired.and_then(Value::as_object).unwrap_or(&empty);
            let mut keys: Vec<&String> = l.keys().chain(d.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .find_map(|k| first_difference(&child(k), l.get(k), d.get(k)))
        }
        (Some(Value::Array(l)), Some(Value::Array(d))) if l.len() == d.len() => l
            .iter()
            .zip(d)
            .enumerate()
            .find_map(|(i, (l, d))| first_difference(&format!("{path}[{i}]"), Some(l), Some(d))),
        (l, d) if l == d => None,
        (Some(Value::String(l)), Some(Value::String(d)))
            if is_quantity_path(path)
                && matches!((Quantity::parse(l), Quantity::parse(d)), (Ok(a), Ok(b)) if a == b) =>
        {
            None
        }
        (l, d) => Some(Difference {
            path: path.to_owned(),
            live: l.cloned(),
            desired: d.cloned(),
        }),
    }
}

fn is_quantity_path(path: &str) -> bool {
    let mut parts = path.rsplit('.');
    let _key = parts.next();
    matches!(
        (parts.next(), parts.next()),
        (Some("requests" | "limits"), Some("resources"))
    )
}
