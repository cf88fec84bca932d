//! The writes of a resource path as the pipeline takes them from a request: create, update,
//! and patch in each of its types (merge, strategic merge, JSON patch) and server-side apply,
//! with apply's own checks and `resourceVersion` precondition, and the `create` authorization
//! an apply of a missing object needs. Each runs under the caller's state lock and hands back
//! what it committed.

use bytes::Bytes;
use serde_json::{Value, json};

use super::apply;
use super::authz;
use super::commit::WriteResult;
use super::errors::ApiError;
use super::patch;
use super::pipeline::{
    Managed, WriteOpts, check_identity, create_object, update_object, with_type,
};
use super::query::Query;
use super::request::{Target, content_type, field_manager};
use super::semantics;
use super::store::{Key, State, now};
use super::typed;

pub fn create(
    state: &mut State,
    parts: &http::request::Parts,
    t: &Target,
    query: &Query,
    body: Value,
) -> WriteResult {
    if t.rt.namespaced && t.namespace.is_none() {
        return Err(ApiError::method_not_allowed());
    }
    check_identity(t, None, &body)?;
    let opts = WriteOpts {
        dry_run: query.dry_run(),
        managed: Managed::Update(field_manager(parts, query).unwrap_or_else(|| "unknown".into())),
        subresource: None,
        require_rv: false,
    };
    create_object(state, &t.rt, t.namespace.as_deref(), body, &opts)
}

pub fn update(
    state: &mut State,
    parts: &http::request::Parts,
    t: &Target,
    name: &str,
    query: &Query,
    body: Value,
) -> WriteResult {
    check_identity(t, Some(name), &body)?;
    let opts = WriteOpts {
        dry_run: query.dry_run(),
        managed: Managed::Update(field_manager(parts, query).unwrap_or_else(|| "unknown".into())),
        subresource: t.subresource.clone(),
        require_rv: true,
    };
    let key = Key::new(&t.rt, t.namespace.as_deref(), name);
    let Some(old) = state.get(&key).cloned() else {
        return Err(ApiError::not_found(&t.rt, name));
    };
    update_object(state, &t.rt, &old, body, &opts)
}

fn parse_apply_body(raw: &Bytes) -> Result<Value, ApiError> {
    if let Ok(v) = serde_json::from_slice::<Value>(raw) {
        return Ok(v);
    }
    let text = std::str::from_utf8(raw)
        .map_err(|_| ApiError::bad_request("the apply patch is not UTF-8"))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(&format!("error decoding YAML: {e}")))
}

pub fn patch_object(
    state: &mut State,
    parts: &http::request::Parts,
    t: &Target,
    name: &str,
    query: &Query,
    raw: &Bytes,
    body: Value,
) -> WriteResult {
    let ct = content_type(parts).unwrap_or_default();
    let dry_run = query.dry_run();
    let key = Key::new(&t.rt, t.namespace.as_deref(), name);
    let old = state.get(&key).cloned();
    if ct == "application/apply-patch+yaml" {
        let Some(manager) = query.get("fieldManager").map(str::to_string) else {
            return Err(ApiError::apply_needs_manager());
        };
        let applied = parse_apply_body(raw)?;
        if !applied.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not an object",
            ));
        }
        semantics::check_shape(&t.rt, &applied)?;
        check_identity(t, Some(name), &applied)?;
        typed::check_apply(&t.rt, &applied, name)?;
        if applied
            .pointer("/metadata/managedFields")
            .is_some_and(|m| !m.is_null())
        {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        // A resourceVersion in the applied object is a precondition, as on update.
        if let (Some(want), Some(live)) = (
            applied
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty()),
            old.as_ref(),
        ) && live
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            != Some(want)
        {
            return Err(ApiError::conflict_modified(&t.rt, name));
        }
        let on_status = t.subresource.as_deref() == Some("status");
        let skip_status = t.rt.status_subresource && !on_status;
        let merged = apply::apply(
            old.as_ref(),
            &applied,
            &manager,
            query.flag("force"),
            &t.rt.api_version(),
            skip_status,
            &now(),
        )?;
        let opts = WriteOpts {
            dry_run,
            managed: Managed::Done,
            subresource: t.subresource.clone(),
            require_rv: false,
        };
        return match old {
            Some(old) => update_object(state, &t.rt, &old, merged, &opts),
            None => {
                authz::authorize_create_on_apply(state, parts, t, query)?;
                let mut obj = merged;
                obj["metadata"]["name"] = json!(name);
                create_object(state, &t.rt, t.namespace.as_deref(), obj, &opts)
            }
        };
    }
    let Some(old) = old else {
        return Err(ApiError::not_found(&t.rt, name));
    };
    let mut doc = with_type(&t.rt, old.clone());
    match ct.as_str() {
        "application/merge-patch+json" => patch::merge_patch(&mut doc, &body),
        "application/strategic-merge-patch+json" => {
            if t.rt.custom {
                return Err(ApiError::unsupported_media_type(true));
            }
            patch::strategic_merge(&mut doc, &body)
        }
        "application/json-patch+json" => patch::json_patch(&mut doc, raw)?,
        _ => return Err(ApiError::unsupported_media_type(t.rt.custom)),
    }
    let opts = WriteOpts {
        dry_run,
        managed: Managed::Update(field_manager(parts, query).unwrap_or_else(|| "unknown".into())),
        subresource: t.subresource.clone(),
        require_rv: false,
    };
    update_object(state, &t.rt, &old, doc, &opts)
}
