//! A minimal StatefulSet controller (off unless a test switches it on), run synchronously after
//! every write that concerns it, so tests see its effects as soon as their write returns.
//!
//! Per StatefulSet: one ControllerRevision per distinct pod template (an orphaned one with the
//! same template is adopted instead of a new one), the claims `<template>-<set>-<ordinal>` from
//! `volumeClaimTemplates` (never recreated while they exist, so a grown template does not touch
//! existing claims), and the pods `<set>-<ordinal>`: a missing pod is created, an orphaned pod
//! matching the selector is adopted (same uid, no restart), a pod of an older revision is
//! replaced under `RollingUpdate` (all at once, without waiting for readiness), pods above
//! `replicas` are deleted. Status follows. Pods stay Pending (no nodes, as when the fixtures
//! were captured) unless `set_pods_ready(true)`; with `podManagementPolicy: OrderedReady` the
//! controller stops at the first pod that is not Running and Ready, as the real one does, so
//! with Pending pods only ordinal 0 exists.
//!
//! When a set has no ControllerRevision yet but its existing pods all carry one
//! `controller-revision-hash` (seeded from the fixtures), that hash names the first revision,
//! so seeded pods are not restarted.

use serde_json::{Value, json};

use super::FakeApiServer;
use super::apply;
use super::gc;
use super::query::LabelSelector;
use super::resources::{self, ResourceType};
use super::semantics::{self, pod::default_pod};
use super::store::{Key, State, now, obj_name, obj_uid};

const MANAGER: &str = "kube-controller-manager";
const HASH_LABEL: &str = "controller-revision-hash";

/// Called after writes: reconciles the StatefulSets of `namespace` (all for `None` or `""`).
pub fn after_write(
    fake: &FakeApiServer,
    state: &mut State,
    rt: &ResourceType,
    namespace: Option<&str>,
) {
    let relevant = [
        resources::STATEFULSET,
        resources::POD,
        resources::PVC,
        resources::CONTROLLER_REVISION,
    ];
    if state.sts_controller && relevant.contains(rt) {
        let namespace = namespace.filter(|n| !n.is_empty());
        for set in state.list(&resources::STATEFULSET, namespace) {
            reconcile(state, &set);
        }
    }
    // Pods may have gone (here or in the write itself): claims waiting for them can go on.
    if !state.pvc_waiting.is_empty() {
        gc::recheck_protected(fake, state);
    }
}

/// fnv-1a, 32 bits: the hash family the real controller uses for revision names.
fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// `rand.SafeEncodeString`: no vowels, no confusable characters.
fn safe_encode(s: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHABET[b as usize % ALPHABET.len()] as char)
        .collect()
}

fn revision_hash(template: &Value) -> String {
    safe_encode(&fnv32a(template.to_string().as_bytes()).to_string())
}

fn owner_ref(set: &Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": obj_name(set),
        "uid": obj_uid(set),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn controller_uid(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r["controller"] == json!(true))
        .and_then(|r| r["uid"].as_str().map(str::to_string))
}

fn adopt(state: &mut State, rt: ResourceType, mut obj: Value, set: &Value) {
    let refs = obj["metadata"]
        .as_object_mut()
        .map(|m| m.entry("ownerReferences").or_insert_with(|| json!([])));
    if let Some(Value::Array(refs)) = refs {
        refs.push(owner_ref(set));
    }
    state.replace(rt, obj);
}

fn create(state: &mut State, rt: ResourceType, mut obj: Value) {
    obj["metadata"]["uid"] = json!(state.new_uid());
    obj["metadata"]["creationTimestamp"] = json!(now());
    apply::record_update(None, &mut obj, MANAGER, None, &rt.api_version(), &now());
    state.insert(rt, obj);
}

fn template_of_revision(cr: &Value) -> Option<&Value> {
    cr.pointer("/data/spec/template")
}

fn strip_patch_directive(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(m) = t.as_object_mut() {
        m.remove("$patch");
    }
    t
}

/// The update revision's name, adopting or creating the ControllerRevision as needed.
fn ensure_revision(state: &mut State, set: &Value, selector: &LabelSelector) -> String {
    let ns = set["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let name = obj_name(set).to_string();
    let uid = obj_uid(set).to_string();
    let template = set["spec"]["template"].clone();
    let revisions: Vec<Value> = state
        .list(&resources::CONTROLLER_REVISION, Some(&ns))
        .into_iter()
        .filter(|cr| selector.matches(cr))
        .collect();
    let mut mine = Vec::new();
    for cr in revisions {
        match controller_uid(&cr) {
            Some(owner) if owner == uid => mine.push(cr),
            Some(_) => {}
            None => {
                adopt(state, resources::CONTROLLER_REVISION, cr.clone(), set);
                mine.push(cr);
            }
        }
    }
    if let Some(cr) = mine
        .iter()
        .find(|cr| template_of_revision(cr).map(strip_patch_directive).as_ref() == Some(&template))
    {
        return obj_name(cr).to_string();
    }
    let next_revision = mine
        .iter()
        .filter_map(|cr| cr["revision"].as_i64())
        .max()
        .unwrap_or(0)
        + 1;
    let seeded_hash = if mine.is_empty() {
        let hashes: Vec<String> = state
            .list(&resources::POD, Some(&ns))
            .iter()
            .filter(|p| selector.matches(p))
            .filter_map(|p| {
                p.pointer(&format!("/metadata/labels/{HASH_LABEL}"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect();
        match hashes.first() {
            Some(h) if hashes.iter().all(|x| x == h) => Some(h.clone()),
            _ => None,
        }
    } else {
        None
    };
    let cr_name = seeded_hash.unwrap_or_else(|| format!("{name}-{}", revision_hash(&template)));
    let hash = cr_name
        .strip_prefix(&format!("{name}-"))
        .unwrap_or(&cr_name)
        .to_string();
    let mut labels = set
        .pointer("/spec/selector/matchLabels")
        .cloned()
        .unwrap_or(json!({}));
    labels["controller.kubernetes.io/hash"] = json!(hash);
    let mut data_template = template.clone();
    data_template["$patch"] = json!("replace");
    let key = Key::new(&resources::CONTROLLER_REVISION, Some(&ns), &cr_name);
    if state.get(&key).is_none() {
        create(
            state,
            resources::CONTROLLER_REVISION,
            json!({
                "apiVersion": "apps/v1",
                "kind": "ControllerRevision",
                "metadata": {
                    "name": cr_name,
                    "namespace": ns,
                    "labels": labels,
                    "ownerReferences": [owner_ref(set)],
                },
                "data": {"spec": {"template": data_template}},
                "revision": next_revision,
            }),
        );
    }
    cr_name
}

fn claim_templates(set: &Value) -> Vec<Value> {
    set.pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn ensure_claims(state: &mut State, set: &Value, ordinal: i64) {
    let ns = set["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let set_name = obj_name(set);
    for t in claim_templates(set) {
        let claim_name = format!("{}-{set_name}-{ordinal}", obj_name(&t));
        let key = Key::new(&resources::PVC, Some(&ns), &claim_name);
        if let Some(existing) = state.get(&key).cloned() {
            sync_claim_owner(state, set, existing);
            continue;
        }
        let mut labels = t.pointer("/metadata/labels").cloned().unwrap_or(json!({}));
        if let Some(m) = set
            .pointer("/spec/selector/matchLabels")
            .and_then(Value::as_object)
        {
            for (k, v) in m {
                labels[k] = v.clone();
            }
        }
        let mut annotations = t
            .pointer("/metadata/annotations")
            .cloned()
            .unwrap_or(json!({}));
        let class = t
            .pointer("/spec/storageClassName")
            .and_then(Value::as_str)
            .and_then(|c| state.get(&Key::new(&resources::STORAGE_CLASS, None, c)))
            .and_then(|c| c["provisioner"].as_str().map(str::to_string));
        if let Some(p) = class {
            annotations["volume.beta.kubernetes.io/storage-provisioner"] = json!(p);
            annotations["volume.kubernetes.io/storage-provisioner"] = json!(p);
        }
        let mut metadata = json!({
            "name": claim_name,
            "namespace": ns,
            "labels": labels,
            "finalizers": ["kubernetes.io/pvc-protection"],
        });
        if annotations.as_object().is_some_and(|a| !a.is_empty()) {
            metadata["annotations"] = annotations;
        }
        if set.pointer("/spec/persistentVolumeClaimRetentionPolicy/whenDeleted")
            == Some(&json!("Delete"))
        {
            let mut r = owner_ref(set);
            r["controller"] = json!(false);
            metadata["ownerReferences"] = json!([r]);
        }
        let mut claim = json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": metadata,
            "spec": t["spec"].clone(),
            "status": {"phase": "Pending"},
        });
        semantics::default(&resources::PVC, &mut claim);
        create(state, resources::PVC, claim);
    }
}

/// Retention policy `whenDeleted: Delete` gives each claim an ownerReference to its set (and
/// re-created sets take over existing claims); `Retain` removes it.
fn sync_claim_owner(state: &mut State, set: &Value, mut claim: Value) {
    let delete = set.pointer("/spec/persistentVolumeClaimRetentionPolicy/whenDeleted")
        == Some(&json!("Delete"));
    let uid = obj_uid(set);
    let refs: Vec<Value> = claim
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let has_mine = refs.iter().any(|r| r["uid"] == uid);
    let other_set = refs
        .iter()
        .any(|r| r["kind"] == "StatefulSet" && r["uid"] != uid);
    let next: Vec<Value> = if delete && !has_mine && !other_set {
        let mut r = owner_ref(set);
        r["controller"] = json!(false);
        refs.iter().cloned().chain(std::iter::once(r)).collect()
    } else if !delete && has_mine {
        refs.iter().filter(|r| r["uid"] != uid).cloned().collect()
    } else {
        return;
    };
    if next.is_empty() {
        if let Some(m) = claim["metadata"].as_object_mut() {
            m.remove("ownerReferences");
        }
    } else {
        claim["metadata"]["ownerReferences"] = json!(next);
    }
    state.replace(resources::PVC, claim);
}

fn new_pod(state: &mut State, set: &Value, ordinal: i64, revision: &str) -> Value {
    let ns = set["metadata"]["namespace"].as_str().unwrap_or_default();
    let set_name = obj_name(set);
    let pod_name = format!("{set_name}-{ordinal}");
    let template = &set["spec"]["template"];
    let mut labels = template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    labels["apps.kubernetes.io/pod-index"] = json!(ordinal.to_string());
    labels[HASH_LABEL] = json!(revision);
    labels["statefulset.kubernetes.io/pod-name"] = json!(pod_name);
    let mut spec = template["spec"].clone();
    let mut volumes: Vec<Value> = spec["volumes"].as_array().cloned().unwrap_or_default();
    for t in claim_templates(set) {
        let vol = obj_name(&t).to_string();
        volumes.retain(|v| v["name"] != vol.as_str());
        volumes.push(json!({
            "name": vol,
            "persistentVolumeClaim": {"claimName": format!("{vol}-{set_name}-{ordinal}")},
        }));
    }
    // The ServiceAccount admission plugin's projected token volume.
    let suffix: String = state
        .new_uid()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(5)
        .collect();
    let token_volume = format!("kube-api-access-{suffix}");
    volumes.push(json!({
        "name": token_volume,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}}
            ]
        }
    }));
    spec["volumes"] = json!(volumes);
    if let Some(containers) = spec["containers"].as_array_mut() {
        for c in containers {
            let mounts = c
                .as_object_mut()
                .map(|m| m.entry("volumeMounts").or_insert_with(|| json!([])));
            if let Some(Value::Array(mounts)) = mounts {
                mounts.push(json!({
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    "name": token_volume,
                    "readOnly": true,
                }));
            }
        }
    }
    spec["hostname"] = json!(pod_name);
    if let Some(service) = set["spec"]["serviceName"].as_str() {
        spec["subdomain"] = json!(service);
    }
    let mut metadata = json!({
        "name": pod_name,
        "generateName": format!("{set_name}-"),
        "namespace": ns,
        "labels": labels,
        "ownerReferences": [owner_ref(set)],
    });
    if let Some(a) = template.pointer("/metadata/annotations") {
        metadata["annotations"] = a.clone();
    }
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    });
    default_pod(&mut pod);
    if state.pods_ready && claims_usable(state, &pod) {
        start_pod(&mut pod, ordinal as usize);
    }
    pod
}

pub fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/phase") == Some(&json!("Running"))
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

/// Schedules and starts a pod, as a scheduler and kubelet would (what `set_pods_ready` gives).
pub fn start_pod(pod: &mut Value, n: usize) {
    pod["spec"]["nodeName"] = json!("node-1");
    pod["status"] = running_status(n);
}

/// No claim the pod mounts is missing or terminating (else the scheduler leaves it Pending).
pub fn claims_usable(state: &State, pod: &Value) -> bool {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    pod.pointer("/spec/volumes")
        .and_then(Value::as_array)
        .map(|vols| {
            vols.iter()
                .filter_map(|v| {
                    v.pointer("/persistentVolumeClaim/claimName")
                        .and_then(Value::as_str)
                })
                .all(|c| {
                    state
                        .get(&Key::new(&resources::PVC, Some(ns), c))
                        .is_some_and(|claim| claim["metadata"].get("deletionTimestamp").is_none())
                })
        })
        .unwrap_or(true)
}

fn running_status(ordinal_ip: usize) -> Value {
    let condition = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": now()});
    json!({
        "phase": "Running",
        "conditions": [condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
        "hostIP": "10.0.0.1",
        "podIP": format!("10.244.0.{}", ordinal_ip % 250 + 2),
        "qosClass": "BestEffort",
        "startTime": now(),
    })
}

fn ordinal_of(pod_name: &str, set_name: &str) -> Option<i64> {
    pod_name
        .strip_prefix(set_name)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

fn reconcile(state: &mut State, set: &Value) {
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
            state.replace(resources::STATEFULSET, s);
        }
        return;
    }
    let selector = LabelSelector::from_object(&set["spec"]["selector"]);
    let revision = ensure_revision(state, set, &selector);
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

    let ordered = set.pointer("/spec/podManagementPolicy") != Some(&json!("Parallel"));
    for ordinal in start..start + replicas {
        ensure_claims(state, set, ordinal);
        let key = Key::new(&resources::POD, Some(&ns), &format!("{name}-{ordinal}"));
        match state.get(&key).cloned() {
            None => {
                let pod = new_pod(state, set, ordinal, &revision);
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
                        let pod = new_pod(state, set, ordinal, &revision);
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
        if let Some(o) = ordinal_of(obj_name(&pod), &name)
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
