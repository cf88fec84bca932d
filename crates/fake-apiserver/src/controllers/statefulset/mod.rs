//! A minimal StatefulSet controller (off unless a test switches it on), run synchronously after
//! every commit that concerns it (`controllers::after_write`), so tests see its effects as soon
//! as their write returns.
//!
//! Per StatefulSet: one ControllerRevision per distinct pod template (an orphaned one with the
//! same template is adopted instead of a new one), the claims `<template>-<set>-<ordinal>` from
//! `volumeClaimTemplates` (never recreated while they exist, so a grown template does not touch
//! existing claims), and the pods `<set>-<ordinal>`: every orphaned pod matching the selector
//! is adopted first, whatever the policy (same uid, no restart), a missing pod is created, a pod of an older revision is
//! replaced under `RollingUpdate` (all at once, without waiting for readiness), pods above
//! `replicas` are deleted. Status follows. Pods stay Pending (no nodes, as when the fixtures
//! were captured) unless `set_pods_ready(true)`; with `podManagementPolicy: OrderedReady` the
//! controller stops at the first pod that is not Running and Ready, as the real one does, so
//! with Pending pods only ordinal 0 exists.
//!
//! When a set has no ControllerRevision yet but its existing pods all carry one
//! `controller-revision-hash` (seeded from the fixtures), that hash names the first revision,
//! so seeded pods are not restarted.
mod claims;
mod pods;
mod revision;

use serde_json::{Value, json};

use crate::apply;
use crate::query::LabelSelector;
use crate::resources::{self, ResourceType};
use crate::store::{Key, State, now, obj_name, obj_uid};

pub use pods::{claims_usable, is_ready, start_pod};

const MANAGER: &str = "kube-controller-manager";
pub const HASH_LABEL: &str = "controller-revision-hash";

/// fnv-1a, 32 bits: the hash family the real controller uses for revision names.
pub fn owner_ref(set: &Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": obj_name(set),
        "uid": obj_uid(set),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

pub fn controller_uid(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r["controller"] == json!(true))
        .and_then(|r| r["uid"].as_str().map(str::to_string))
}

pub fn adopt(state: &mut State, rt: ResourceType, mut obj: Value, set: &Value) {
    let refs = obj["metadata"]
        .as_object_mut()
        .map(|m| m.entry("ownerReferences").or_insert_with(|| json!([])));
    if let Some(Value::Array(refs)) = refs {
        refs.push(owner_ref(set));
    }
    state.replace(rt, obj);
}

pub fn create(state: &mut State, rt: ResourceType, mut obj: Value) {
    obj["metadata"]["uid"] = json!(state.new_uid());
    obj["metadata"]["creationTimestamp"] = json!(now());
    apply::record_update(None, &mut obj, MANAGER, None, &rt.api_version(), &now());
    state.insert(rt, obj);
}

pub fn reconcile(state: &mut State, set: &Value) {
    let ns = set["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let name = obj_name(set).to_string();
    let uid = obj_uid(set).to_string();
    let generation = set["metadata"]["generation"].as_i64().unwrap_or(1);
    if set["metadata"].get("deletionTimestamp").is_some() {
        if set
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64)
            != Some(generation)
        {
            let mut s = set.clone();
            s["status"]["observedGeneration"] = json!(generation);
            apply::record_update(
                Some(set),
                &mut s,
                MANAGER,
                Some("status"),
                "apps/v1",
                &now(),
            );
            state.replace(resources::STATEFULSET, s);
        }
        return;
    }
    let selector = LabelSelector::from_object(&set["spec"]["selector"]);
    let revision = revision::ensure_revision(state, set, &selector);
    let replicas = set["spec"]["replicas"].as_i64().unwrap_or(1);
    let start = set
        .pointer("/spec/ordinals/start")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let rolling = set.pointer("/spec/updateStrategy/type") == Some(&json!("RollingUpdate"));
    let partition = set
        .pointer("/spec/updateStrategy/rollingUpdate/partition")
        .and_then(Value::as_i64)
        .unwrap_or(0);

    // Adoption comes first and ignores the policy, as the real controller's ClaimPods does:
    // every orphan matching the selector is adopted before any pod is created or waited on.
    for ordinal in start..start + replicas {
        let key = Key::new(&resources::POD, Some(&ns), &format!("{name}-{ordinal}"));
        if let Some(pod) = state.get(&key).cloned()
            && controller_uid(&pod).is_none()
            && selector.matches(&pod)
            && pod["metadata"].get("deletionTimestamp").is_none()
        {
            adopt(state, resources::POD, pod, set);
        }
    }
    let ordered = set.pointer("/spec/podManagementPolicy") != Some(&json!("Parallel"));
    for ordinal in start..start + replicas {
        claims::ensure_claims(state, set, ordinal);
        let key = Key::new(&resources::POD, Some(&ns), &format!("{name}-{ordinal}"));
        match state.get(&key).cloned() {
            None => {
                let pod = pods::new_pod(state, set, ordinal, &revision);
                create(state, resources::POD, pod);
            }
            Some(pod) => match controller_uid(&pod) {
                None if selector.matches(&pod)
                    && pod["metadata"].get("deletionTimestamp").is_none() =>
                {
                    adopt(state, resources::POD, pod, set);
                }
                Some(owner) if owner == uid => {
                    let hash = pod
                        .pointer(&format!("/metadata/labels/{HASH_LABEL}"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if rolling && ordinal >= partition && hash != revision {
                        state.remove(resources::POD, &key);
                        let pod = pods::new_pod(state, set, ordinal, &revision);
                        create(state, resources::POD, pod);
                    }
                }
                _ => {}
            },
        }
        // OrderedReady: the next ordinal waits until this pod runs and is ready.
        if ordered && !state.get(&key).is_some_and(is_ready) {
            break;
        }
    }
    // A cluster with nodes starts the pods whose claims are usable.
    if state.pods_ready {
        for (i, mut pod) in state
            .list(&resources::POD, Some(&ns))
            .into_iter()
            .enumerate()
        {
            if controller_uid(&pod).as_deref() == Some(uid.as_str())
                && !is_ready(&pod)
                && claims_usable(state, &pod)
            {
                start_pod(&mut pod, i);
                state.replace(resources::POD, pod);
            }
        }
    }
    // Scale down: owned pods outside the ordinal range go.
    for pod in state.list(&resources::POD, Some(&ns)) {
        if controller_uid(&pod).as_deref() != Some(uid.as_str()) {
            continue;
        }
        if let Some(o) = pods::ordinal_of(obj_name(&pod), &name)
            && (o < start || o >= start + replicas)
        {
            // Pods here have no node, so deletion is immediate (no graceful period).
            state.remove(resources::POD, &Key::of(&resources::POD, &pod));
        }
    }

    let owned: Vec<Value> = state
        .list(&resources::POD, Some(&ns))
        .into_iter()
        .filter(|p| controller_uid(p).as_deref() == Some(uid.as_str()))
        .collect();
    let updated = owned
        .iter()
        .filter(|p| {
            p.pointer(&format!("/metadata/labels/{HASH_LABEL}"))
                .and_then(Value::as_str)
                == Some(revision.as_str())
        })
        .count();
    let Some(current) = state
        .get(&Key::new(&resources::STATEFULSET, Some(&ns), &name))
        .cloned()
    else {
        return;
    };
    let current_revision = if updated == owned.len() {
        revision.clone()
    } else {
        current
            .pointer("/status/currentRevision")
            .and_then(Value::as_str)
            .unwrap_or(&revision)
            .to_string()
    };
    let ready = owned.iter().filter(|p| is_ready(p)).count();
    let mut status = json!({
        "observedGeneration": generation,
        "replicas": owned.len(),
        "currentReplicas": if current_revision == revision { updated } else { owned.len() - updated },
        "updatedReplicas": updated,
        "currentRevision": current_revision,
        "updateRevision": revision,
        "collisionCount": current.pointer("/status/collisionCount").cloned().unwrap_or(json!(0)),
        "availableReplicas": ready,
    });
    if ready > 0 {
        status["readyReplicas"] = json!(ready);
    }
    if current.get("status") != Some(&status) {
        let mut s = current.clone();
        s["status"] = status;
        apply::record_update(
            Some(&current),
            &mut s,
            MANAGER,
            Some("status"),
            "apps/v1",
            &now(),
        );
        state.replace(resources::STATEFULSET, s);
    }
}
