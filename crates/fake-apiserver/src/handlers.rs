//! Request entry point: request log and fault rules first, then routing to discovery or to a
//! resource verb (`verbs`). Every verb runs under the state lock, so each request is atomic like
//! an etcd transaction.

use axum::body::Body;
use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use serde_json::Value;

use super::authz;
use super::deletion;
use super::discovery;
use super::errors::ApiError;
use super::eviction;
use super::faults::{self, Fault, RequestRecord};
use super::query::Query;
use super::request::{Target, content_type, is_dry_run};
use super::resources;
use super::response::{error_response, json_response};
use super::reviews;
use super::scale;
use super::store::Store;
use super::verbs;
use super::writes;

/// The connection was dropped on purpose (a fault rule): the client sees a transport error.
#[derive(Debug)]
pub struct ConnectionDropped;

impl std::fmt::Display for ConnectionDropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by a fault rule of the fake API server")
    }
}

impl std::error::Error for ConnectionDropped {}

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
        && !(s == "scale" && rt == resources::STATEFULSET)
        && !(s == "eviction" && rt == resources::POD)
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

pub async fn handle(
    store: Store,
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
    let mut record = RequestRecord {
        id: 0,
        method: parts.method.clone(),
        path: path.clone(),
        query: raw_query.clone(),
        field_manager: query.get("fieldManager").map(str::to_string),
        dry_run: is_dry_run(&parts.method, &query, &body_json),
        watch: query.flag("watch"),
        content_type: content_type(&parts),
        impersonate_user: parts
            .headers
            .get("impersonate-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        code: None,
    };
    let (id, fault) = {
        let mut state = store.lock();
        state.request_seq += 1;
        record.id = state.request_seq;
        state.requests.push(record);
        (
            state.request_seq,
            faults::pick(&mut state.faults, &parts.method, &path),
        )
    };
    let answered = |resp: Response<Body>| {
        let mut state = store.lock();
        if let Some(r) = state.requests.iter_mut().rev().find(|r| r.id == id) {
            r.code = Some(resp.status().as_u16());
        }
        Ok(resp)
    };
    match fault {
        Some(Fault::Status {
            code,
            reason,
            message,
        }) => return answered(error_response(&ApiError::custom(code, &reason, &message))),
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        Some(Fault::Drop) => return Err(ConnectionDropped),
        Some(Fault::DropAfterWrite) => {
            let _ = dispatch(&store, &parts, &path, &query, &body, body_json);
            return Err(ConnectionDropped);
        }
        None => {}
    }
    answered(dispatch(&store, &parts, &path, &query, &body, body_json))
}

/// A path nothing is served at. Built-in group/versions this server serves answer a JSON
/// `Status` 404; paths under a custom resource group, a group version the server does not
/// serve (`storage.k8s.io/v1beta1` without its runtime-config), or under no group at all,
/// fall through to the real server's mux, which answers the plain text `404 page not found`.
fn unrouted(store: &Store, path: &str) -> Response<Body> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let group_version = match segs.as_slice() {
        ["api", v, ..] => Some(("", *v)),
        ["apis", g, v, ..] => Some((*g, *v)),
        _ => None,
    };
    let built_in = group_version.is_some_and(|(g, v)| {
        let state = store.lock();
        resources::ALL
            .iter()
            .filter(|r| state.serves(r))
            .chain(reviews::ALL)
            .any(|r| r.group == g && r.version == v && !r.custom)
    });
    if built_in {
        return error_response(&ApiError::no_route());
    }
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Body::from("404 page not found\n"))
        .expect("static response parts are valid")
}

fn dispatch(
    store: &Store,
    parts: &http::request::Parts,
    path: &str,
    query: &Query,
    raw_body: &Bytes,
    body: Value,
) -> Response<Body> {
    if let Some(resp) = discovery::answer(store, &parts.method, path) {
        return resp;
    }
    if let Some(target) = reviews::route(path) {
        if let Err(e) = authz::authorize(&mut store.lock(), parts, &target, query, &body) {
            return error_response(&e);
        }
        if parts.method != Method::POST {
            return error_response(&ApiError::method_not_allowed());
        }
        return match reviews::answer(&store.lock(), parts, &target, &body) {
            Ok((code, v)) => json_response(code, &v),
            Err(e) => error_response(&e),
        };
    }
    let Some(target) = route(path).filter(|t| store.lock().serves(&t.rt)) else {
        return unrouted(store, path);
    };
    if let Err(e) = authz::authorize(&mut store.lock(), parts, &target, query, &body) {
        return error_response(&e);
    }
    let result = match (&parts.method, &target.name) {
        (_, Some(name)) if target.subresource.as_deref() == Some("scale") => {
            verbs::write(store, |s| {
                scale::handle(s, parts, &target, name, query, raw_body, body)
            })
        }
        (&Method::POST, Some(name)) if target.subresource.as_deref() == Some("eviction") => {
            verbs::write(store, |s| eviction::evict(s, &target, name, query, body))
        }
        (_, Some(_)) if target.subresource.as_deref() == Some("eviction") => {
            Err(ApiError::method_not_allowed())
        }
        (&Method::GET, Some(name)) => verbs::get(store, &target, name, verbs::as_table(parts)),
        (&Method::GET, None) if query.flag("watch") => {
            return match super::watch::start(store, &target, query, verbs::as_table(parts)) {
                Ok(r) => r,
                Err(e) => error_response(&e),
            };
        }
        (&Method::GET, None) => verbs::list(store, &target, query, verbs::as_table(parts)),
        (&Method::POST, None) => {
            verbs::write(store, |s| writes::create(s, parts, &target, query, body))
        }
        (&Method::PUT, Some(name)) => verbs::write(store, |s| {
            writes::update(s, parts, &target, name, query, body)
        }),
        (&Method::PATCH, Some(name)) => verbs::write(store, |s| {
            writes::patch_object(s, parts, &target, name, query, raw_body, body)
        }),
        (&Method::DELETE, Some(name)) => {
            verbs::write(store, |s| deletion::delete(s, &target, name, query, &body))
        }
        (&Method::DELETE, None) => verbs::delete_collection(store, &target, query, &body),
        _ => Err(ApiError::method_not_allowed()),
    };
    match result {
        Ok((code, v)) => json_response(code, &v),
        Err(e) => error_response(&e),
    }
}
