//! `web` in `default`: one volume claim template, `data` of class `expandable`; the
//! StatefulSet the converge tests, the gate tests and the converge bench grow.
use serde_json::{Value, json};

/// `web` with `replicas` ordinals whose claims request `size`, labelled `labels` (`{}`: none).
pub fn statefulset(replicas: usize, size: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "default", "labels": labels},
        "spec": {
            "serviceName": "web", "replicas": replicas, "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "app", "image": "busybox"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                "resources": {"requests": {"storage": size}}}}],
        }
    })
}

/// The owner labels kustomize-controller puts on what Kustomization `flux-system/apps`
/// applies: what the service's StatefulSet watch selects on.
pub fn applied_by_apps() -> Value {
    json!({"kustomize.toolkit.fluxcd.io/name": "apps",
           "kustomize.toolkit.fluxcd.io/namespace": "flux-system"})
}
