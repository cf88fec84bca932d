//! An intent as a converge records it, for the tests that put intents in the journal by hand.

use flux_converger::journal::Intent;
use serde_json::json;

/// The intent for StatefulSet `default/<name>` (uid `u-1`, recorded right before its orphan
/// delete, under the recorder's own identity).
pub fn intent(name: &str) -> Intent {
    let desired = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": name}}, "serviceName": name,
                 "template": {"metadata": {"labels": {"app": name}}}}
    }))
    .unwrap();
    Intent {
        namespace: "default".into(),
        name: name.into(),
        uid: "u-1".into(),
        desired,
        plan: json!({}),
        recorded_at: "2026-12-01T00:00:00Z".into(),
        revision: None,
        deleting: true,
        act_as: Some("-".into()),
        kustomization: None,
    }
}
