//! Pod spec defaults (`SetDefaults_PodSpec`, `SetDefaults_Container`): the fixtures' live
//! StatefulSet template and `pod-web-0.yaml` show which ones the server adds.

use serde_json::{Value, json};

use super::super::version::KubeVersion;
use super::set_default;

/// Running with a `Ready` condition `True` (`podutil.IsPodReady`, what a PodDisruptionBudget
/// counts as healthy and a StatefulSet as ready).
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

/// `Always` for `:latest` or untagged images, `IfNotPresent` otherwise.
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_container(c: &mut Value) {
    if !c.is_object() {
        return;
    }
    set_default(c, "resources", json!({}));
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    let policy = pull_policy(c["image"].as_str().unwrap_or_default());
    set_default(c, "imagePullPolicy", json!(policy));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            set_default(p, "protocol", json!("TCP"));
        }
    }
    super::canonicalize_resources(c.get_mut("resources"));
}

/// Defaults of a pod spec, in a pod template or a pod.
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(default_container);
        }
    }
    if let Some(vols) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for v in vols {
            for source in ["configMap", "secret"] {
                if let Some(s) = v.get_mut(source) {
                    set_default(s, "defaultMode", json!(420));
                }
            }
        }
    }
}

/// A pod template: spec defaults plus the `creationTimestamp: null` a server before 1.36
/// serialises (1.36 omits the zero time).
pub fn default_template(template: &mut Value, version: KubeVersion) {
    if !template.is_object() {
        return;
    }
    set_default(template, "metadata", json!({}));
    if version < KubeVersion::V1_36 {
        set_default(&mut template["metadata"], "creationTimestamp", Value::Null);
    }
    if let Some(spec) = template.get_mut("spec") {
        default_pod_spec(spec);
    }
}

/// A pod as stored: spec defaults plus the admission-added fields of `pod-web-0.yaml`
/// (service account, tolerations, priority); status starts Pending with no node.
pub fn default_pod(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec") else {
        return;
    };
    default_pod_spec(spec);
    set_default(spec, "enableServiceLinks", json!(true));
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    set_default(spec, "priority", json!(0));
    set_default(spec, "serviceAccountName", json!("default"));
    let sa = spec["serviceAccountName"].clone();
    set_default(spec, "serviceAccount", sa);
    set_default(
        spec,
        "tolerations",
        json!([
            {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
            {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300}
        ]),
    );
}
