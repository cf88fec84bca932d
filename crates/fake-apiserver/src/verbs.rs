//! The verbs on a resource path, as the HTTP layer runs them: get and list (plain or as a
//! Table) answered from the store; each write (create, update, the patch types and server-side
//! apply, delete, `scale`) run by [`write()`]: the write pipeline under the state lock, then the
//! controllers on what it committed before the lock goes, so a client sees their effects as
//! soon as its write returns; deletecollection as one pipeline delete per object, each followed
//! by the controllers, as the real server deletes item by item.

use http::header;
use serde_json::{Value, json};

use super::commit::WriteResult;
use super::controllers;
use super::deletion::{self, Propagation};
use super::errors::{ApiError, VerbResult};
use super::paging;
use super::pipeline::with_type;
use super::query::{Query, Selectors};
use super::request::Target;
use super::store::{Key, State, Store};
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

/// Runs one write under the state lock: the pipeline (`write`), then the controllers on what it
/// committed, before the lock goes. Answers what the write answered.
pub fn write(store: &Store, write: impl FnOnce(&mut State) -> WriteResult) -> VerbResult {
    let mut state = store.lock();
    let written = write(&mut state)?;
    controllers::after_commit(store, &mut state, written.commit);
    Ok((written.code, written.object))
}

pub fn delete_collection(store: &Store, t: &Target, query: &Query, body: &Value) -> VerbResult {
    let opts = deletion::delete_options(query, body)?;
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
        let obj = if opts.dry_run {
            deletion::would_delete(&v, &t.rt, policy).0
        } else {
            let (obj, _, commit) = deletion::begin_delete(&mut state, &t.rt, &key, policy);
            controllers::after_commit(store, &mut state, commit);
            obj
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
