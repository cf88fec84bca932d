//! Request entry point: request log and fault rules first, then routing to discovery or to a
//! resource verb. Every verb runs under the state lock, so each request is atomic like an etcd
//! transaction.

use axum::body::Body;
use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use serde_json::{Value, json};

use super::FakeApiServer;
use super::apply;
use super::controller;
use super::discovery;
use super::errors::ApiError;
use super::faults::{self, Fault, RequestRecord};
use super::gc::{self, Propagation};
use super::patch;
use super::query::{Query, Selectors};
use super::resources::{self, ResourceType};
use super::semantics;
use super::store::{Key, State, now, obj_name, obj_namespace};
use super::table;
use super::watch;

/// The connection was dropped on purpose (a fault rule): the client sees a transport error.
#[derive(Debug)]
pub struct ConnectionDropped;

impl std::fmt::Display for ConnectionDropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by a fault rule of the fake API server")
    }
}

impl std::error::Error for ConnectionDropped {}

pub fn json_response(code: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("static response parts are valid")
}

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.body)
}

/// Where a resource request points.
#[derive(Debug, Clone)]
pub struct Target {
    pub rt: ResourceType,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// `/api/v1/...` or `/apis/{group}/{version}/...` → resource target.
pub fn route(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] => (Some(ns.to_string()), {
            let mut r = vec![*plural];
            r.extend_from_slice(tail);
            r
        }),
        other => (None, other.to_vec()),
    };
    let (plural, name, sub) = match rest.as_slice() {
        [p] => (*p, None, None),
        [p, n] => (*p, Some(n.to_string()), None),
        [p, n, s] => (*p, Some(n.to_string()), Some(s.to_string())),
        _ => return None,
    };
    let rt = resources::by_path(group, version, plural)?;
    if namespace.is_some() && !rt.namespaced {
        return None;
    }
    if let Some(s) = &sub
        && !(s == "status" && rt.status_subresource)
    {
        return None;
    }
    Some(Target {
        rt,
        namespace,
        name,
        subresource: sub,
    })
}

fn content_type(parts: &http::request::Parts) -> Option<String> {
    parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.split(';').next().unwrap_or(s).trim().to_string())
}

/// The field manager of a write: the query parameter, else the user agent's program name
/// (`kubectl/v1.32 ...` → `kubectl`), as the real server derives it for updates.
fn field_manager(parts: &http::request::Parts, query: &Query) -> Option<String> {
    if let Some(m) = query.get("fieldManager") {
        return Some(m.to_string());
    }
    parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(|ua| ua.split('/').next().unwrap_or(ua).to_string())
}

fn body_dry_run(body: &Value) -> bool {
    body.get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "All"))
}

pub async fn handle(
    fake: FakeApiServer,
    parts: http::request::Parts,
    body: Bytes,
) -> Result<Response<Body>, ConnectionDropped> {
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().unwrap_or_default().to_string();
    let query = Query::parse(&raw_query);
    let body_json: Value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    };
    let record = RequestRecord {
        method: parts.method.clone(),
        path: path.clone(),
        query: raw_query.clone(),
        field_manager: query.get("fieldManager").map(str::to_string),
        dry_run: query.dry_run() || (parts.method == Method::DELETE && body_dry_run(&body_json)),
        watch: query.flag("watch"),
        content_type: content_type(&parts),
        impersonate_user: parts
            .headers
            .get("impersonate-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    };
    let fault = {
        let mut state = fake.lock();
        state.requests.push(record);
        faults::pick(&mut state.faults, &parts.method, &path)
    };
    match fault {
        Some(Fault::Status {
            code,
            reason,
            message,
        }) => return Ok(error_response(&ApiError::custom(code, &reason, &message))),
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        Some(Fault::Drop) => return Err(ConnectionDropped),
        Some(Fault::DropAfterWrite) => {
            let _ = dispatch(&fake, &parts, &path, &query, &body, body_json);
            return Err(ConnectionDropped);
        }
        None => {}
    }
    Ok(dispatch(&fake, &parts, &path, &query, &body, body_json))
}

fn dispatch(
    fake: &FakeApiServer,
    parts: &http::request::Parts,
    path: &str,
    query: &Query,
    raw_body: &Bytes,
    body: Value,
) -> Response<Body> {
    if let Some(resp) = discovery::answer(fake, &parts.method, path) {
        return resp;
    }
    let Some(target) = route(path) else {
        return error_response(&ApiError::no_route());
    };
    let result = match (&parts.method, &target.name) {
        (&Method::GET, Some(name)) => get(fake, &target, name, as_table(parts)),
        (&Method::GET, None) if query.flag("watch") => {
            return match watch::start(fake, &target, query) {
                Ok(r) => r,
                Err(e) => error_response(&e),
            };
        }
        (&Method::GET, None) => list(fake, &target, query, as_table(parts)),
        (&Method::POST, None) => create(fake, parts, &target, query, body),
        (&Method::PUT, Some(name)) => update(fake, parts, &target, name, query, body),
        (&Method::PATCH, Some(name)) => {
            patch_object(fake, parts, &target, name, query, raw_body, body)
        }
        (&Method::DELETE, Some(name)) => delete(fake, &target, name, query, &body),
        (&Method::DELETE, None) => delete_collection(fake, &target, query, &body),
        _ => Err(ApiError::method_not_allowed()),
    };
    match result {
        Ok((code, v)) => json_response(code, &v),
        Err(e) => error_response(&e),
    }
}

type VerbResult = Result<(u16, Value), ApiError>;

fn with_type(rt: &ResourceType, mut obj: Value) -> Value {
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(rt.api_version()));
        m.insert("kind".into(), json!(rt.kind));
    }
    obj
}

fn as_table(parts: &http::request::Parts) -> bool {
    table::wants_table(
        parts
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    )
}

fn get(fake: &FakeApiServer, t: &Target, name: &str, as_table: bool) -> VerbResult {
    let state = fake.lock();
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

fn list(fake: &FakeApiServer, t: &Target, query: &Query, as_table: bool) -> VerbResult {
    let selectors = Selectors::from_query(query)?;
    let state = fake.lock();
    if as_table {
        let items: Vec<Value> = state
            .list(&t.rt, t.namespace.as_deref())
            .into_iter()
            .filter(|o| selectors.matches(o))
            .collect();
        return Ok((200, table::table(&t.rt, &items, &state.rv.to_string())));
    }
    let items: Vec<Value> = state
        .list(&t.rt, t.namespace.as_deref())
        .into_iter()
        .filter(|o| selectors.matches(o))
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
            "metadata": {"resourceVersion": state.rv.to_string()},
            "items": items,
        }),
    ))
}

/// How the write was made, for `managedFields`.
pub enum Managed {
    /// An Update operation by this manager.
    Update(String),
    /// Already computed (server-side apply).
    Done,
}

pub struct WriteOpts {
    pub dry_run: bool,
    pub managed: Managed,
    pub subresource: Option<String>,
    /// PUT semantics for a missing `resourceVersion` on custom resources.
    pub require_rv: bool,
}

fn check_identity(t: &Target, name: Option<&str>, obj: &Value) -> Result<(), ApiError> {
    if t.rt.namespaced
        && let (Some(path_ns), Some(body_ns)) = (t.namespace.as_deref(), obj_namespace(obj))
        && path_ns != body_ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if let Some(name) = name {
        let body_name = obj_name(obj);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(&format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
    }
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && kind != t.rt.kind
    {
        return Err(ApiError::bad_request(&format!(
            "the kind of the object ({kind}) does not match the kind served at this path ({})",
            t.rt.kind
        )));
    }
    Ok(())
}

fn random_suffix(state: &mut State) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let uid = state.new_uid().replace('-', "");
    uid.bytes()
        .take(5)
        .map(|b| ALPHABET[b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Creates an object through the full pipeline (admission, defaults, validation).
pub fn create_object(
    fake: &FakeApiServer,
    state: &mut State,
    rt: &ResourceType,
    namespace: Option<&str>,
    mut obj: Value,
    opts: &WriteOpts,
) -> VerbResult {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request is not an object",
        ));
    }
    obj = with_type(rt, obj);
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    if rt.namespaced {
        obj["metadata"]["namespace"] = json!(namespace.unwrap_or("default"));
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    if obj_name(&obj).is_empty()
        && let Some(prefix) = obj
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .map(str::to_string)
    {
        let suffix = random_suffix(state);
        obj["metadata"]["name"] = json!(format!("{prefix}{suffix}"));
    }
    let name = obj_name(&obj).to_string();
    if let Some(meta) = obj["metadata"].as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
        ] {
            meta.remove(k);
        }
        if matches!(opts.managed, Managed::Update(_)) {
            meta.remove("managedFields");
        }
    }
    if rt.status_subresource
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
        if let Some(s) = semantics::initial_status(rt) {
            m.insert("status".into(), s);
        }
    }
    semantics::check_shape(rt, &obj)?;
    semantics::admit_create(state, rt, &mut obj);
    semantics::default(rt, &mut obj);
    semantics::validate_create(rt, &obj)?;
    let key = Key::new(rt, namespace, &name);
    if state.get(&key).is_some() {
        return Err(ApiError::already_exists(rt, &name));
    }
    obj["metadata"]["uid"] = json!(state.new_uid());
    obj["metadata"]["creationTimestamp"] = json!(now());
    if rt.has_generation {
        obj["metadata"]["generation"] = json!(1);
    }
    if let Managed::Update(manager) = &opts.managed {
        apply::record_update(None, &mut obj, manager, None, &rt.api_version(), &now());
    }
    if opts.dry_run {
        return Ok((201, obj));
    }
    let stored = state.insert(*rt, obj);
    controller::after_write(fake, state, rt, namespace);
    Ok((201, stored))
}

/// Everything but `metadata` and `status`: what bumps `generation`.
fn spec_part(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
    }
    o
}

fn comparable(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        meta.remove("resourceVersion");
    }
    o
}

/// Updates an object through the full pipeline: resourceVersion precondition, status rule,
/// defaults, validation, admission, generation, no-op detection.
pub fn update_object(
    fake: &FakeApiServer,
    state: &mut State,
    rt: &ResourceType,
    old: &Value,
    candidate: Value,
    opts: &WriteOpts,
) -> VerbResult {
    if !candidate.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request is not an object",
        ));
    }
    let name = obj_name(old).to_string();
    let old_rv = old
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    match candidate
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        Some(rv) if rv != old_rv => return Err(ApiError::conflict_modified(rt, &name)),
        Some(_) => {}
        None if opts.require_rv && rt.custom => {
            return Err(ApiError::invalid(rt, &name, &[errors_invalid_rv()]));
        }
        None => {}
    }
    semantics::check_shape(rt, &candidate)?;
    let mut new = with_type(rt, candidate);
    if !new["metadata"].is_object() {
        new["metadata"] = json!({});
    }
    for k in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old["metadata"].get(k) {
            Some(v) => new["metadata"][k] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(k);
                }
            }
        }
    }
    // A deleting object may lose finalizers but gain none.
    let on_status = opts.subresource.as_deref() == Some("status");
    if rt.status_subresource {
        if on_status {
            let status = new.get("status").cloned();
            let managed = new["metadata"].get("managedFields").cloned();
            new = old.clone();
            match status {
                Some(s) => new["status"] = s,
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            if let Some(mf) = managed {
                new["metadata"]["managedFields"] = mf;
            }
        } else {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
    }
    if !on_status {
        semantics::default(rt, &mut new);
        semantics::validate_update(rt, &new, old, state.version)?;
        semantics::admit_update(state, rt, &new, old)?;
    }
    if let Managed::Update(manager) = &opts.managed {
        apply::record_update(
            Some(old),
            &mut new,
            manager,
            opts.subresource.as_deref(),
            &rt.api_version(),
            &now(),
        );
    }
    if rt.has_generation && spec_part(&new) != spec_part(old) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        new["metadata"]["generation"] = json!(generation + 1);
    }
    new["metadata"]["resourceVersion"] = json!(old_rv);
    if comparable(&new) == comparable(old) {
        // Nothing changed: no write, same resourceVersion, no event.
        return Ok((200, with_type(rt, old.clone())));
    }
    if opts.dry_run {
        return Ok((200, new));
    }
    let deleting = new["metadata"].get("deletionTimestamp").is_some();
    let no_finalizers = new["metadata"]["finalizers"]
        .as_array()
        .is_none_or(|f| f.is_empty());
    let key = Key::of(rt, &new);
    if deleting && no_finalizers {
        state.objects.insert(key.clone(), new);
        let gone = state.remove(*rt, &key).unwrap_or_default();
        return Ok((200, gone));
    }
    let namespace = obj_namespace(&new).map(str::to_string);
    let stored = state.replace(*rt, new);
    controller::after_write(fake, state, rt, namespace.as_deref());
    Ok((200, stored))
}

fn errors_invalid_rv() -> super::errors::Cause {
    super::errors::Cause::invalid(
        "metadata.resourceVersion",
        "0x0",
        "must be specified for an update",
    )
}

fn create(
    fake: &FakeApiServer,
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
    let mut state = fake.lock();
    create_object(fake, &mut state, &t.rt, t.namespace.as_deref(), body, &opts)
}

fn update(
    fake: &FakeApiServer,
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
    let mut state = fake.lock();
    let key = Key::new(&t.rt, t.namespace.as_deref(), name);
    let Some(old) = state.get(&key).cloned() else {
        return Err(ApiError::not_found(&t.rt, name));
    };
    update_object(fake, &mut state, &t.rt, &old, body, &opts)
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

fn patch_object(
    fake: &FakeApiServer,
    parts: &http::request::Parts,
    t: &Target,
    name: &str,
    query: &Query,
    raw: &Bytes,
    body: Value,
) -> VerbResult {
    let ct = content_type(parts).unwrap_or_default();
    let dry_run = query.dry_run();
    let mut state = fake.lock();
    let key = Key::new(&t.rt, t.namespace.as_deref(), name);
    let old = state.get(&key).cloned();
    if ct == "application/apply-patch+yaml" {
        let Some(manager) = query.get("fieldManager").map(str::to_string) else {
            return Err(ApiError::apply_needs_manager());
        };
        let applied = parse_apply_body(raw)?;
        check_identity(t, Some(name), &applied)?;
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
            Some(old) => update_object(fake, &mut state, &t.rt, &old, merged, &opts),
            None => {
                let mut obj = merged;
                obj["metadata"]["name"] = json!(name);
                create_object(fake, &mut state, &t.rt, t.namespace.as_deref(), obj, &opts)
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
                return Err(ApiError::unsupported_media_type(&ct));
            }
            patch::strategic_merge(&mut doc, &body)
        }
        "application/json-patch+json" => patch::json_patch(&mut doc, raw)?,
        other => return Err(ApiError::unsupported_media_type(other)),
    }
    let opts = WriteOpts {
        dry_run,
        managed: Managed::Update(field_manager(parts, query).unwrap_or_else(|| "unknown".into())),
        subresource: t.subresource.clone(),
        require_rv: false,
    };
    update_object(fake, &mut state, &t.rt, &old, doc, &opts)
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
        dry_run: query.dry_run() || body_dry_run(body),
    })
}

fn delete(fake: &FakeApiServer, t: &Target, name: &str, query: &Query, body: &Value) -> VerbResult {
    let opts = delete_options(query, body)?;
    let mut state = fake.lock();
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
    let policy = opts.propagation.unwrap_or(Propagation::Background);
    let (result, gone) = if opts.dry_run {
        gc::would_delete(&obj, &t.rt, policy)
    } else {
        gc::begin_delete(fake, &mut state, &t.rt, &key, policy)
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

fn delete_collection(fake: &FakeApiServer, t: &Target, query: &Query, body: &Value) -> VerbResult {
    let opts = delete_options(query, body)?;
    let selectors = Selectors::from_query(query)?;
    let mut state = fake.lock();
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
            gc::begin_delete(fake, &mut state, &t.rt, &key, policy)
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
