//! The simulated garbage collector, run on the commits of deletions (`Change::Collect`).
//!
//! A deletion with `Orphan`/`Foreground` left a finalizer (`orphan`/`foregroundDeletion`) and a
//! `deletionTimestamp` on the object (`deletion`); after the configured delay the collector
//! strips the ownerReferences to the object from its dependents (orphan) or deletes them
//! (foreground), removes the finalizer and deletes the object: the MODIFIED ... DELETED
//! sequence of `watch-orphan-delete.jsonl`. `Background` deletes at once and
//! the collector deletes the dependents after the delay. The collector also plays the
//! pvc-protection controller: `kubernetes.io/pvc-protection` goes once no scheduled pod that
//! is not being deleted mounts the claim (the claim waits, and is looked at again after pod
//! writes). Pending pods of a cluster without nodes never hold a claim.
//! Other finalizers stay until a client removes them.

use serde_json::{Value, json};

use crate::deletion::{self, FOREGROUND, ORPHAN, Propagation, finalizers};
use crate::resources;
use crate::store::{Pending, State, Store, obj_uid};
use crate::version::GcMode;

/// Finalizers the simulated controllers remove.
const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
const PV_PROTECTION: &str = "kubernetes.io/pv-protection";
const HANDLED: &[&str] = &[ORPHAN, FOREGROUND, PVC_PROTECTION, PV_PROTECTION];

/// A scheduled pod that is not being deleted mounts the claim (the real controller ignores
/// unscheduled pods: no kubelet will start them on a terminating claim).
fn claim_in_use(state: &State, namespace: &str, claim: &str) -> bool {
    state
        .list(&resources::POD, Some(namespace))
        .iter()
        .any(|pod| {
            pod["metadata"].get("deletionTimestamp").is_none()
                && pod
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty())
                && pod
                    .pointer("/spec/volumes")
                    .and_then(Value::as_array)
                    .is_some_and(|vols| {
                        vols.iter().any(|v| {
                            v.pointer("/persistentVolumeClaim/claimName") == Some(&json!(claim))
                        })
                    })
        })
}

/// Schedules again the claims that waited for their pods, once no pod uses them.
pub fn recheck_protected(store: &Store, state: &mut State) {
    let waiting = std::mem::take(&mut state.pvc_waiting);
    for p in waiting {
        if claim_in_use(state, &p.key.namespace, &p.key.name) {
            state.pvc_waiting.push(p);
        } else {
            schedule(store, state, p);
        }
    }
}

/// Runs `finish` after the collector's delay, or parks it while the collector is stuck.
pub fn schedule(store: &Store, state: &mut State, p: Pending) {
    match state.gc {
        GcMode::Stuck => state.gc_pending.push(p),
        GcMode::After(delay) => match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                state.gc_inflight += 1;
                let store = store.clone();
                handle.spawn(async move {
                    tokio::time::sleep(delay).await;
                    let mut state = store.lock();
                    state.gc_inflight -= 1;
                    finish(&store, &mut state, p);
                });
            }
            // No runtime (a synchronous test helper): finish now.
            Err(_) => finish(store, state, p),
        },
    }
}

/// The collector's pass over one object: process the finalizers it knows, then delete the
/// object once none is left; for an object already gone, delete its remaining dependents.
pub fn finish(store: &Store, state: &mut State, p: Pending) {
    if let GcMode::Stuck = state.gc {
        state.gc_pending.push(p);
        return;
    }
    let current = state.get(&p.key).filter(|o| obj_uid(o) == p.uid).cloned();
    let Some(obj) = current else {
        // The owner is gone (background deletion): delete what still points at it.
        for (rt, key) in state.dependents(&p.key.namespace, &p.uid) {
            let (_, _, commit) = deletion::begin_delete(state, &rt, &key, Propagation::Background);
            super::after_commit(store, state, commit);
        }
        return;
    };
    let f = finalizers(&obj);
    if f.iter().any(|x| x == ORPHAN) {
        for (rt, key) in state.dependents(&p.key.namespace, &p.uid) {
            if let Some(mut dep) = state.get(&key).cloned() {
                if let Some(refs) = dep
                    .pointer_mut("/metadata/ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| r["uid"] != p.uid.as_str());
                    if refs.is_empty()
                        && let Some(m) = dep["metadata"].as_object_mut()
                    {
                        m.remove("ownerReferences");
                    }
                }
                state.replace(rt, dep);
            }
        }
    }
    if f.iter().any(|x| x == FOREGROUND) {
        for (rt, key) in state.dependents(&p.key.namespace, &p.uid) {
            let (_, _, commit) = deletion::begin_delete(state, &rt, &key, Propagation::Background);
            super::after_commit(store, state, commit);
        }
    }
    let protected = p.rt == resources::PVC
        && f.iter().any(|x| x == PVC_PROTECTION)
        && claim_in_use(state, &p.key.namespace, &p.key.name);
    let remaining: Vec<String> = f
        .iter()
        .filter(|x| !HANDLED.contains(&x.as_str()) || (protected && *x == PVC_PROTECTION))
        .cloned()
        .collect();
    if protected {
        state.pvc_waiting.push(p.clone());
    }
    if remaining.is_empty() {
        state.remove(p.rt, &p.key);
        if p.rt == resources::STATEFULSET || p.rt == resources::POD || p.rt == resources::PVC {
            super::after_write(store, state, &p.rt, Some(&p.key.namespace));
        }
    } else if remaining.len() != f.len() {
        let mut o = obj;
        o["metadata"]["finalizers"] = json!(remaining);
        state.replace(p.rt, o);
    }
}
