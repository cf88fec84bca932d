//! The controllers of kube-controller-manager the fake plays, run after each commit: the
//! caller of a write (the HTTP verbs, the face's seeding helpers, a controller's own writes)
//! hands what the write pipeline committed to [`after_commit`], under the lock the write held.
//! The pipeline never calls them, the way a real API server only stores and the controllers
//! react to what they watch; running them at once, synchronously, is what lets a test see their
//! effects as soon as its write returns.
//!
//! - `statefulset`: claims, pods, ControllerRevisions, adoption and status of StatefulSets;
//! - `binder`: PersistentVolumes pre-bound by `claimRef` bound to their claims;
//! - `disruption`: the status of PodDisruptionBudgets (what an eviction may spend);
//! - `gc`: the garbage collector (orphan, background and foreground deletion, pvc-protection);
//! - `namespaces`: the namespace controller (empties a terminating namespace) and the
//!   service-account controller (a new namespace's `default` ServiceAccount).

pub mod binder;
pub mod disruption;
pub mod gc;
pub mod namespaces;
pub mod statefulset;

use crate::commit::{Change, Commit};
use crate::resources::{self, ResourceType};
use crate::store::{State, Store};

/// Runs the controllers on what a write committed (`None`: a dry run or a no-op, nothing runs),
/// under the lock the write held.
pub fn after_commit(store: &Store, state: &mut State, commit: Option<Commit>) {
    let Some(commit) = commit else {
        return;
    };
    match commit.change {
        Change::Stored => {}
        Change::NamespaceCreated(ns) => namespaces::after_create(state, &ns),
        Change::Collect(pending) => gc::schedule(store, state, pending),
        Change::NamespaceTerminating(name) => {
            namespaces::start_finalizer(store, state, &name);
            return;
        }
        Change::Finalized => return,
    }
    after_write(store, state, &commit.rt, commit.namespace.as_deref());
}

/// What every commit wakes: the volume binder (after claim and volume writes), the disruption
/// controller (pods, budgets, StatefulSets: before the StatefulSet controller, which may replace
/// a pod just removed, and after it), the StatefulSet controller over the StatefulSets of
/// `namespace` (all for `None` or `""`), and pvc-protection's waiting claims. Also run on its own to reconcile everything stored, when the StatefulSet
/// controller is switched on.
pub fn after_write(store: &Store, state: &mut State, rt: &ResourceType, namespace: Option<&str>) {
    if (*rt == resources::PVC || *rt == resources::PERSISTENT_VOLUME) && binder::bind(state) {
        // A claim just bound may let the StatefulSet controller go on.
        after_write(store, state, &resources::PVC, namespace);
        return;
    }
    let namespace = namespace.filter(|n| !n.is_empty());
    let budgets = [
        resources::POD,
        resources::POD_DISRUPTION_BUDGET,
        resources::STATEFULSET,
    ];
    let budgets = budgets.contains(rt);
    if budgets {
        disruption::reconcile(state, namespace);
    }
    let relevant = [
        resources::STATEFULSET,
        resources::POD,
        resources::PVC,
        resources::CONTROLLER_REVISION,
    ];
    if state.sts_controller && relevant.contains(rt) {
        for set in state.list(&resources::STATEFULSET, namespace) {
            statefulset::reconcile(state, &set);
        }
        if budgets {
            disruption::reconcile(state, namespace);
        }
    }
    // Pods may have gone (here or in the write itself): claims waiting for them can go on.
    if !state.pvc_waiting.is_empty() {
        gc::recheck_protected(store, state);
    }
}
