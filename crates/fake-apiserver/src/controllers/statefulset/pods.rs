//! Pods as the StatefulSet controller and the admission plugins shape them (`pod-web-0.yaml`),
//! and the scheduler/kubelet stand-in of `set_pods_ready`.

use serde_json::{Value, json};

use super::claims::claim_templates;
use super::{HASH_LABEL, owner_ref};
use crate::resources;
use crate::semantics::pod::default_pod;
use crate::store::{Key, State, now, obj_name};

pub fn new_pod(state: &mut State, set: &Value, ordinal: i64, revision: &str) -> Value {
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

pub use crate::semantics::pod::is_ready;

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

pub fn ordinal_of(pod_name: &str, set_name: &str) -> Option<i64> {
    pod_name
        .strip_prefix(set_name)?
        .strip_prefix('-')?
        .parse()
        .ok()
}
