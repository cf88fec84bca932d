//! The verbs on a resource path: get, list (plain or as a Table), create, update, the patch
//! types and server-side apply, delete and deletecollection.

use bytes::Bytes;
use http::header;
use serde_json::{Value, json};

use super::apply;
use super::errors::{ApiError, VerbResult};
use super::gc::{self, Propagation};
use super::paging;
use super::patch;
use super::pipeline::{
    Managed, WriteOpts, check_identity, create_object, update_object, with_type,
};
use super::query::{Query, Selectors};
use super::request::{Target, content_type, field_manager, is_dry_run};
use super::resources;
use super::semantics;
use super::store::{Key, Store, now};
use super::table;

pub fn as_table(parts: &http::request::Parts) -> bool {
    table::wants_table(
        parts
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    )
}

pub fn get(store: &Store, t: &Target, name: &str, as_table: bool) -> VerbResult {
    let state = store.lock();
    let key = Key::new(&t.rt, t.namespace.as_deref(), name);
    match state.get(&key) {
        Some(obj) if as_table => {
            let rv = obj["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            Ok((200, table::table(&t.rt, std::slice::from_ref(obj), rv)))
        }
        Some(obj) => Ok((200, with_type(&t.rt, obj.clone()))),
        None => Err(ApiError::not_found(&t.rt, name)),
    }
}

pub fn list(store: &Store, t: &Target, query: &Query, as_table: bool) -> VerbResult {
    let selectors = Selectors::from_query(query, &t.rt)?;
    let has_selectors = query.get("labelSelector").is_some_and(|s| !s.is_empty())
        || query.get("fieldSelector").is_some_and(|s| !s.is_empty());
    let state = store.lock();
    let selected: Vec<Value> = state
        .list(&t.rt, t.namespace.as_deref())
        .into_iter()
        .filter(|o| selectors.matches(o))
        .collect();
    let page = paging::page(
        selected,
        query,
        t.namespace.is_none(),
        has_selectors,
        state.rv,
    )?;
    let mut metadata = json!({"resourceVersion": state.rv.to_string()});
    if let Some(token) = &page.continue_token {
        metadata["continue"] = json!(token);
    }
    if let Some(n) = page.remaining {
        metadata["remainingItemCount"] = json!(n);
    }
    if as_table {
        let mut table = table::table(&t.rt, &page.items, &state.rv.to_string());
        table["metadata"] = metadata;
        return Ok((200, table));
    }
    let items: Vec<Value> = page
        .items
        .into_iter()
        .map(|mut o| {
            // Built-in lists carry the type once, on the list; custom resources keep it per item.
            if !t.rt.custom
                && let Some(m) = o.as_object_mut()
            {
                m.remove("apiVersion");
                m.remove("kind");
            }
            o
        })
        .collect();
    Ok((
        200,
        json!({
            "kind": t.rt.list_kind(),
            "apiVersion": t.rt.api_version(),
            "metadata": metadata,
            "items": items,
        }),
    ))
}

pub fn create(
    store: &Store,
    parts: &http::request::Parts,
    t: &Target,
    query: &Query,
    body: Value,
) -> VerbResult {
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
    let mut state = store.lock();
    create_object(
        store,
        &mut state,
        &t.rt,
        t.namespace.as_deref(),
        body,
        &opts,
    )
}

pub fn update(
    store: &Store,
    parts: &http::request::Parts,
    t: &Target,
    name: &str,
    query: &Query,
    body: Value,
) -> VerbResult {
    check_identity(t, Some(name), &body)?;
    let opts = WriteOpts {
        dry_run: query.dry_run(),
        managed: Managed::Update(field_manager(parts, query).unwrap_or_else(|| "unknown".into())),
        subresource: t.subresource.clone(),
        require_rv: true,
    };
    let mut state = store.lock();
    let key = Key::new(&t.rt, t.namespace.as_deref(), name);
    let Some(old) = state.get(&key).cloned() else {
        return Err(ApiError::not_found(&t.rt, name));
    };
    update_object(store, &mut state, &t.rt, &old, body, &opts)
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
    store: &Store,
    parts: &http::request::Parts,
    t: &Target,
    name: &str,
    query: &Query,
    raw: &Bytes,
    body: Value,
) -> VerbResult {
    let ct = content_type(parts).unwrap_or_default();
    let dry_run = query.dry_run();
    let mut state = store.lock();
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
        super::typed::check_apply(&t.rt, &applied, name)?;
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
            Some(old) => update_object(store, &mut state, &t.rt, &old, merged, &opts),
            None => {
                super::authz::authorize_create_on_apply(&mut state, parts, t, query)?;
                let mut obj = merged;
                obj["metadata"]["name"] = json!(name);
                create_object(store, &mut state, &t.rt, t.namespace.as_deref(), obj, &opts)
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
    update_object(store, &mut state, &t.rt, &old, doc, &opts)
}

/// DeleteOptions from the body (kube-rs, kubectl) or the query string.
struct DeleteOptions {
    propagation: Option<Propagation>,
    uid: Option<String>,
    resource_version: Option<String>,
    dry_run: bool,
}

fn delete_options(query: &Query, body: &Value) -> Result<DeleteOptions, ApiError> {
    let policy = body
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .or_else(|| query.get("propagationPolicy"))
        .map(str::to_string);
    let propagation = match policy.as_deref() {
        None => None,
        Some("Orphan") => Some(Propagation::Orphan),
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some(other) => {
            return Err(ApiError::custom(
                422,
                "Invalid",
                &format!(
                    "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            ));
        }
    };
    let orphan_flag = body
        .get("orphanDependents")
        .and_then(Value::as_bool)
        .or_else(|| query.get("orphanDependents").map(|v| v == "true"));
    let propagation = propagation.or(match orphan_flag {
        Some(true) => Some(Propagation::Orphan),
        Some(false) => Some(Propagation::Background),
        None => None,
    });
    Ok(DeleteOptions {
        propagation,
        uid: body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        resource_version: body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
        dry_run: is_dry_run(&http::Method::DELETE, query, body),
    })
}

pub fn delete(store: &Store, t: &Target, name: &str, query: &Query, body: &Value) -> VerbResult {
    let opts = delete_options(query, body)?;
    let mut state = store.lock();
    let key = Key::new(&t.rt, t.namespace.as_deref(), name);
    let Some(obj) = state.get(&key).cloned() else {
        return Err(ApiError::not_found(&t.rt, name));
    };
    let uid = obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(wanted) = &opts.uid
        && *wanted != uid
    {
        return Err(ApiError::precondition_uid(&t.rt, name, wanted, &uid));
    }
    let rv = obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(wanted) = &opts.resource_version
        && *wanted != rv
    {
        return Err(ApiError::precondition_rv(&t.rt, name, wanted, &rv));
    }
    if t.rt == resources::NAMESPACE {
        let ns = super::namespaces::begin_delete(store, &mut state, name, opts.dry_run);
        return Ok((200, with_type(&t.rt, ns)));
    }
    let policy = opts.propagation.unwrap_or(Propagation::Background);
    let (result, gone) = if opts.dry_run {
        gc::would_delete(&obj, &t.rt, policy)
    } else {
        gc::begin_delete(store, &mut state, &t.rt, &key, policy)
    };
    let result = with_type(&t.rt, result);
    if gone && !t.rt.returns_deleted_object {
        let mut details = json!({"name": name, "kind": t.rt.plural, "uid": uid});
        if !t.rt.group.is_empty() {
            details["group"] = json!(t.rt.group);
        }
        return Ok((
            200,
            json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            }),
        ));
    }
    Ok((200, result))
}

pub fn delete_collection(store: &Store, t: &Target, query: &Query, body: &Value) -> VerbResult {
    let opts = delete_options(query, body)?;
    let selectors = Selectors::from_query(query, &t.rt)?;
    let mut state = store.lock();
    let victims: Vec<Value> = state
        .list(&t.rt, t.namespace.as_deref())
        .into_iter()
        .filter(|o| selectors.matches(o))
        .collect();
    let policy = opts.propagation.unwrap_or(Propagation::Background);
    let mut items = Vec::new();
    for v in victims {
        let key = Key::of(&t.rt, &v);
        let (obj, _) = if opts.dry_run {
            gc::would_delete(&v, &t.rt, policy)
        } else {
            gc::begin_delete(store, &mut state, &t.rt, &key, policy)
        };
        items.push(obj);
    }
    Ok((
        200,
        json!({
            "kind": t.rt.list_kind(),
            "apiVersion": t.rt.api_version(),
            "metadata": {"resourceVersion": state.rv.to_string()},
            "items": items,
        }),
    ))
}
