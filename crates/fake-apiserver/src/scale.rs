//! The `scale` subresource of StatefulSets (`kubectl scale`): an `autoscaling/v1` Scale view of
//! `spec.replicas`, written back through the normal update pipeline (the commit handed back is
//! the StatefulSet's).

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};

use super::commit::{WriteResult, Written};
use super::errors::ApiError;
use super::patch;
use super::pipeline::{Managed, WriteOpts, update_object};
use super::query::Query;
use super::request::{Target, content_type, field_manager};
use super::store::{Key, State};

/// `matchLabels` as the label-selector string the Scale status carries.
fn selector_string(set: &Value) -> String {
    let mut pairs: Vec<String> = set
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    pairs.join(",")
}

pub fn scale_of(set: &Value) -> Value {
    let meta = &set["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": set["spec"]["replicas"]},
        "status": {
            "replicas": set.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": selector_string(set),
        },
    })
}

pub fn handle(
    state: &mut State,
    parts: &http::request::Parts,
    t: &Target,
    name: &str,
    query: &Query,
    raw: &Bytes,
    body: Value,
) -> WriteResult {
    let key = Key::new(&t.rt, t.namespace.as_deref(), name);
    let Some(set) = state.get(&key).cloned() else {
        return Err(ApiError::not_found(&t.rt, name));
    };
    let current = scale_of(&set);
    let wanted = match parts.method {
        Method::GET => return Ok(Written::answer(200, current)),
        Method::PUT => body,
        Method::PATCH => {
            let mut doc = current.clone();
            match content_type(parts).unwrap_or_default().as_str() {
                "application/merge-patch+json" => patch::merge_patch(&mut doc, &body),
                "application/strategic-merge-patch+json" => patch::strategic_merge(&mut doc, &body),
                "application/json-patch+json" => patch::json_patch(&mut doc, raw)?,
                _ => return Err(ApiError::unsupported_media_type(false)),
            }
            doc
        }
        _ => return Err(ApiError::method_not_allowed()),
    };
    if let Some(rv) = wanted
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
        && Some(rv)
            != set
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
    {
        return Err(ApiError::conflict_modified(&t.rt, name));
    }
    let Some(replicas) = wanted.pointer("/spec/replicas").and_then(Value::as_i64) else {
        return Err(ApiError::bad_request(
            "Scale.spec.replicas must be an integer",
        ));
    };
    let mut candidate = set.clone();
    candidate["spec"]["replicas"] = json!(replicas);
    let opts = WriteOpts {
        dry_run: query.dry_run(),
        managed: Managed::Update(field_manager(parts, query).unwrap_or_else(|| "unknown".into())),
        subresource: None,
        require_rv: false,
    };
    let written = update_object(state, &t.rt, &set, candidate, &opts)?;
    Ok(Written {
        object: scale_of(&written.object),
        ..written
    })
}
