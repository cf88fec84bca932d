//! `?watch=1`: a chunked stream of JSON lines (`{"type": ..., "object": ...}`).
//!
//! Without a `resourceVersion` (or with `"0"`) the stream starts with an ADDED event per
//! current object, like the real server; with one, it replays every later event from the
//! store's history, unless a test compacted it (`Store::compact`): then the watch gets
//! the real server's single ERROR event (410 Expired). It ends after
//! `timeoutSeconds` (default 1800 s, like the server's upper bound) or when the client leaves.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt;
use http::{Response, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::errors::ApiError;
use super::query::{Query, Selectors};
use super::request::Target;
use super::store::{Store, Watcher, obj_namespace};
use super::table;

fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

/// `as_table`: each event's object is a one-row Table (what `kubectl get -w` asks for).
pub fn start(
    store: &Store,
    t: &Target,
    query: &Query,
    as_table: bool,
) -> Result<Response<Body>, ApiError> {
    let selectors = Selectors::from_query(query, &t.rt)?;
    let from: Option<u64> = match query.get("resourceVersion") {
        None | Some("") | Some("0") => None,
        Some(v) => Some(
            v.parse()
                .map_err(|_| ApiError::bad_request(&format!("invalid resource version: {v:?}")))?,
        ),
    };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1800);
    if let Some(rv) = from {
        let compacted = store.lock().compacted_rv;
        if rv < compacted {
            // What etcd compaction looks like to a watcher: one ERROR event, then the end.
            let event = json!({"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {rv} ({compacted})"),
                "reason": "Expired", "code": 410,
            }});
            return Ok(Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(line(&event)))
                .expect("static response parts are valid"));
        }
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let initial: Vec<Value> = {
        let mut state = store.lock();
        let ns = t.namespace.clone();
        let in_scope = |o: &Value| {
            ns.as_deref().is_none_or(|n| obj_namespace(o) == Some(n)) && selectors.matches(o)
        };
        let initial = match from {
            None => state
                .list(&t.rt, t.namespace.as_deref())
                .into_iter()
                .filter(|o| in_scope(o))
                .map(|o| json!({"type": "ADDED", "object": o}))
                .collect(),
            Some(rv) => state
                .history
                .iter()
                .filter(|e| e.rt == t.rt && e.rv > rv)
                .filter_map(|e| e.seen_by(in_scope))
                .collect(),
        };
        state.watchers.push(Watcher {
            rt: t.rt,
            namespace: t.namespace.clone(),
            selectors,
            tx,
        });
        initial
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let rt = t.rt;
    let render = move |v: &Value| -> Bytes {
        if as_table && v["type"] != "ERROR" {
            let obj = &v["object"];
            let rv = obj["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            line(
                &json!({"type": v["type"], "object": table::table(&rt, std::slice::from_ref(obj), rv)}),
            )
        } else {
            line(v)
        }
    };
    let head = futures::stream::iter(
        initial
            .into_iter()
            .map(move |v| Ok::<Bytes, Infallible>(render(&v))),
    );
    let live = futures::stream::unfold(rx, move |mut rx| async move {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(v)) => Some((Ok::<Bytes, Infallible>(render(&v)), rx)),
            _ => None,
        }
    });
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(Body::from_stream(head.chain(live)))
        .expect("static response parts are valid"))
}
