//! DELETE through the write pipeline: DeleteOptions (from the body, as kube-rs and kubectl send
//! them, or the query string), the `uid`/`resourceVersion` preconditions, the dry run, and the
//! start of a deletion in the store.
//!
//! `Orphan`/`Foreground` put a finalizer (`orphan`/`foregroundDeletion`) and a
//! `deletionTimestamp` on the object (bumping `generation`, as the real server does); the
//! garbage collector (`controllers::gc`) finishes it from the commit handed back. `Background`
//! removes the object at once and leaves its dependents to the collector. Deleting a namespace
//! marks it `Terminating`; the namespace controller (`controllers::namespaces`) empties it.

use serde_json::{Value, json};

use super::commit::{Change, Commit, WriteResult, Written};
use super::errors::ApiError;
use super::pipeline::with_type;
use super::query::Query;
use super::request::{Target, is_dry_run};
use super::resources::{self, ResourceType};
use super::store::{Key, Pending, State, now, obj_uid};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Orphan,
    Background,
    Foreground,
}

/// The finalizers a propagation policy puts on the object (the garbage collector removes them).
pub const ORPHAN: &str = "orphan";
pub const FOREGROUND: &str = "foregroundDeletion";

/// DeleteOptions from the body (kube-rs, kubectl) or the query string.
pub struct DeleteOptions {
    pub propagation: Option<Propagation>,
    uid: Option<String>,
    resource_version: Option<String>,
    pub dry_run: bool,
}

impl DeleteOptions {
    /// The `uid` and `resourceVersion` preconditions against the stored `obj` (the real 409s).
    pub fn check(&self, rt: &ResourceType, obj: &Value, name: &str) -> Result<(), ApiError> {
        let uid = obj_uid(obj);
        if let Some(wanted) = &self.uid
            && wanted != uid
        {
            return Err(ApiError::precondition_uid(rt, name, wanted, uid));
        }
        let rv = obj["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default();
        if let Some(wanted) = &self.resource_version
            && wanted != rv
        {
            return Err(ApiError::precondition_rv(rt, name, wanted, rv));
        }
        Ok(())
    }
}

pub fn delete_options(query: &Query, body: &Value) -> Result<DeleteOptions, ApiError> {
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

/// DELETE of one object: options, preconditions, then the deletion (or, on a dry run, what it
/// would leave). Answers the object, or the `Status` of success for a type whose DELETE does
/// not return the deleted object.
pub fn delete(
    state: &mut State,
    t: &Target,
    name: &str,
    query: &Query,
    body: &Value,
) -> WriteResult {
    let opts = delete_options(query, body)?;
    let key = Key::new(&t.rt, t.namespace.as_deref(), name);
    let Some(obj) = state.get(&key).cloned() else {
        return Err(ApiError::not_found(&t.rt, name));
    };
    let uid = obj_uid(&obj).to_string();
    opts.check(&t.rt, &obj, name)?;
    if t.rt == resources::NAMESPACE {
        let (ns, commit) = begin_delete_namespace(state, name, opts.dry_run);
        return Ok(Written {
            code: 200,
            object: with_type(&t.rt, ns),
            commit,
        });
    }
    let policy = opts.propagation.unwrap_or(Propagation::Background);
    let (result, gone, commit) = if opts.dry_run {
        let (result, gone) = would_delete(&obj, &t.rt, policy);
        (result, gone, None)
    } else {
        begin_delete(state, &t.rt, &key, policy)
    };
    let result = with_type(&t.rt, result);
    if gone && !t.rt.returns_deleted_object {
        let mut details = json!({"name": name, "kind": t.rt.plural, "uid": uid});
        if !t.rt.group.is_empty() {
            details["group"] = json!(t.rt.group);
        }
        return Ok(Written {
            code: 200,
            object: json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            }),
            commit,
        });
    }
    Ok(Written {
        code: 200,
        object: result,
        commit,
    })
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The object a deletion would leave (or remove), without touching the store: the dry run.
pub fn would_delete(obj: &Value, rt: &ResourceType, policy: Propagation) -> (Value, bool) {
    let mut f = finalizers(obj);
    match policy {
        Propagation::Orphan if !f.iter().any(|x| x == ORPHAN) => f.push(ORPHAN.into()),
        Propagation::Foreground if !f.iter().any(|x| x == FOREGROUND) => f.push(FOREGROUND.into()),
        _ => {}
    }
    if f.is_empty() {
        return (obj.clone(), true);
    }
    let mut o = obj.clone();
    mark_deleting(&mut o, rt, f);
    (o, false)
}

fn mark_deleting(o: &mut Value, rt: &ResourceType, f: Vec<String>) {
    if o["metadata"].get("deletionTimestamp").is_none() {
        o["metadata"]["deletionTimestamp"] = json!(now());
        o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        if rt.has_generation {
            let g = o["metadata"]["generation"].as_i64().unwrap_or(1);
            o["metadata"]["generation"] = json!(g + 1);
        }
    }
    o["metadata"]["finalizers"] = json!(f);
}

/// Starts a deletion. Returns the object as the response shows it, whether it is gone, and
/// what was committed: the collector's work ([`Change::Collect`]) when finalizers are left or
/// the removed object has dependents; nothing when it was already being deleted with the same
/// finalizers.
pub fn begin_delete(
    state: &mut State,
    rt: &ResourceType,
    key: &Key,
    policy: Propagation,
) -> (Value, bool, Option<Commit>) {
    let Some(obj) = state.get(key).cloned() else {
        return (Value::Null, true, None);
    };
    let uid = obj_uid(&obj).to_string();
    let (mut next, gone) = would_delete(&obj, rt, policy);
    if gone {
        let removed = state.remove(*rt, key).unwrap_or(next);
        let change = if !state.dependents(&key.namespace, &uid).is_empty() {
            Change::Collect(Pending {
                rt: *rt,
                key: key.clone(),
                uid,
            })
        } else {
            Change::Stored
        };
        let commit = Commit::new(rt, Some(&key.namespace), change);
        return (removed, true, Some(commit));
    }
    if obj["metadata"].get("deletionTimestamp").is_some() && next == obj {
        // Already deleting with the same finalizers: nothing to write.
        return (obj, false, None);
    }
    next["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"].clone();
    let stored = state.replace(*rt, next);
    let pending = Pending {
        rt: *rt,
        key: key.clone(),
        uid,
    };
    let commit = Commit::new(rt, Some(&key.namespace), Change::Collect(pending));
    (stored, false, Some(commit))
}

/// DELETE of a namespace: marked `Terminating` now (the answer), emptied and removed later by
/// the namespace controller, from the commit.
pub fn begin_delete_namespace(
    state: &mut State,
    name: &str,
    dry_run: bool,
) -> (Value, Option<Commit>) {
    let Some(mut ns) = state
        .get(&Key::new(&resources::NAMESPACE, None, name))
        .cloned()
    else {
        return (Value::Null, None);
    };
    let mut commit = None;
    if ns["metadata"].get("deletionTimestamp").is_none() {
        ns["metadata"]["deletionTimestamp"] = json!(now());
        ns["status"] = json!({"phase": "Terminating"});
        if dry_run {
            return (ns, None);
        }
        ns = state.replace(resources::NAMESPACE, ns);
        let change = Change::NamespaceTerminating(name.to_string());
        commit = Some(Commit::new(&resources::NAMESPACE, None, change));
    }
    (ns, commit)
}
