//! Namespaces as a precondition and a lifecycle, as the `NamespaceLifecycle` admission plugin,
//! the namespace controller and the service-account controller make them: creating in a
//! missing namespace is a 404 (`namespaces "x" not found`), in a terminating one a 403; a new
//! namespace gets its `default` ServiceAccount; deleting a namespace answers it `Terminating`
//! and the controller then deletes its contents (through the garbage collector, so finalizers
//! hold it) and the namespace last.
//!
//! Seeding a namespaced object into a namespace nobody created creates that namespace, so
//! tests that seed fixtures keep writing next to them.

use std::time::Duration;

use serde_json::{Value, json};

use super::errors::ApiError;
use super::gc::{self, Propagation};
use super::resources::{self, ResourceType};
use super::store::{Key, State, Store, now};

/// How often the namespace controller looks again at a terminating namespace.
const NAMESPACE_RESYNC: Duration = Duration::from_millis(50);

fn namespace(state: &State, name: &str) -> Option<Value> {
    state
        .get(&Key::new(&resources::NAMESPACE, None, name))
        .cloned()
}

/// `NamespaceLifecycle` on create: the namespace must exist and not be terminating.
pub fn admit_create(
    state: &State,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
) -> Result<(), ApiError> {
    let Some(ns) = ns.filter(|_| rt.namespaced) else {
        return Ok(());
    };
    match namespace(state, ns) {
        None => Err(ApiError::not_found(&resources::NAMESPACE, ns)),
        Some(obj) if obj["metadata"].get("deletionTimestamp").is_some() => {
            let mut details = serde_json::Map::new();
            if !name.is_empty() {
                details.insert("name".into(), json!(name));
            }
            if !rt.group.is_empty() {
                details.insert("group".into(), json!(rt.group));
            }
            details.insert("kind".into(), json!(rt.plural));
            details.insert(
                "causes".into(),
                json!([{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace",
                }]),
            );
            let subject = if name.is_empty() {
                rt.qualified_plural()
            } else {
                format!("{} {name:?}", rt.qualified_plural())
            };
            Err(ApiError {
                code: 403,
                body: json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": format!("{subject} is forbidden: unable to create new content in namespace {ns} because it is being terminated"),
                    "reason": "Forbidden",
                    "details": Value::Object(details),
                    "code": 403,
                }),
            })
        }
        Some(_) => Ok(()),
    }
}

/// The service-account controller: every namespace has a `default` ServiceAccount.
pub fn after_create(state: &mut State, ns_obj: &Value) {
    let name = ns_obj["metadata"]["name"].as_str().unwrap_or_default();
    let key = Key::new(&resources::SERVICE_ACCOUNT, Some(name), "default");
    if name.is_empty() || state.get(&key).is_some() {
        return;
    }
    let uid = state.new_uid();
    state.insert(
        resources::SERVICE_ACCOUNT,
        json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": name, "uid": uid, "creationTimestamp": now()},
        }),
    );
}

/// The namespace a seeded object lives in, created (Active) when missing.
pub fn ensure_for_seed(state: &mut State, ns: &str) {
    if namespace(state, ns).is_some() {
        return;
    }
    let uid = state.new_uid();
    let obj = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": ns,
            "uid": uid,
            "creationTimestamp": now(),
            "labels": {"kubernetes.io/metadata.name": ns},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    });
    let stored = state.insert(resources::NAMESPACE, obj);
    after_create(state, &stored);
}

/// DELETE of a namespace: marked `Terminating` now (the answer), emptied and removed later.
pub fn begin_delete(store: &Store, state: &mut State, name: &str, dry_run: bool) -> Value {
    let Some(mut ns) = namespace(state, name) else {
        return Value::Null;
    };
    if ns["metadata"].get("deletionTimestamp").is_none() {
        ns["metadata"]["deletionTimestamp"] = json!(now());
        ns["status"] = json!({"phase": "Terminating"});
        if dry_run {
            return ns;
        }
        ns = state.replace(resources::NAMESPACE, ns);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let store = store.clone();
                let name = name.to_string();
                handle.spawn(async move {
                    loop {
                        tokio::time::sleep(NAMESPACE_RESYNC).await;
                        if finalize(&store, &mut store.lock(), &name) {
                            break;
                        }
                    }
                });
            }
            Err(_) => {
                finalize(store, state, name);
            }
        }
    }
    ns
}

/// One pass of the namespace controller: delete what is left, remove the namespace once
/// nothing is. Returns whether the namespace is gone.
fn finalize(store: &Store, state: &mut State, name: &str) -> bool {
    let ns_key = Key::new(&resources::NAMESPACE, None, name);
    let Some(ns) = state.get(&ns_key) else {
        return true;
    };
    if ns["metadata"].get("deletionTimestamp").is_none() {
        return true;
    }
    let mut left = 0;
    for rt in resources::ALL.iter().filter(|r| r.namespaced) {
        for obj in state.list(rt, Some(name)) {
            left += 1;
            if obj["metadata"].get("deletionTimestamp").is_none() {
                gc::begin_delete(
                    store,
                    state,
                    rt,
                    &Key::of(rt, &obj),
                    Propagation::Background,
                );
            }
        }
    }
    if left == 0 {
        state.remove(resources::NAMESPACE, &ns_key);
        return true;
    }
    false
}
