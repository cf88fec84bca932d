//! Namespaces as a lifecycle, as the namespace controller and the service-account controller
//! make them (creating into a missing or terminating namespace is refused by `admission`'s
//! `NamespaceLifecycle`): a new namespace gets its `default` ServiceAccount; a namespace the
//! DELETE marked `Terminating` (`deletion`) is emptied by the controller (through the garbage
//! collector, so finalizers hold it), the namespace last.
//!
//! Seeding a namespaced object into a namespace nobody created creates that namespace, so
//! tests that seed fixtures keep writing next to them.

use std::time::Duration;

use serde_json::{Value, json};

use crate::deletion::{self, Propagation};
use crate::resources;
use crate::store::{Key, State, Store, now};

/// How often the namespace controller looks again at a terminating namespace.
const NAMESPACE_RESYNC: Duration = Duration::from_millis(50);

fn namespace(state: &State, name: &str) -> Option<Value> {
    state
        .get(&Key::new(&resources::NAMESPACE, None, name))
        .cloned()
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

/// The namespace controller, on a namespace just marked `Terminating`
/// (`Change::NamespaceTerminating`): a pass at every resync until the namespace is gone (one
/// pass at once without a runtime, a synchronous test helper).
pub fn start_finalizer(store: &Store, state: &mut State, name: &str) {
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
                let key = Key::of(rt, &obj);
                let (_, _, commit) =
                    deletion::begin_delete(state, rt, &key, Propagation::Background);
                super::after_commit(store, state, commit);
            }
        }
    }
    if left == 0 {
        state.remove(resources::NAMESPACE, &ns_key);
        return true;
    }
    false
}
