//! The desired StatefulSets of an Application, from Argo CD's API server's answer to
//! `GET /api/v1/applications/{name}/managed-resources`: `{"items": [{group, kind, namespace,
//! name, targetState, liveState, ...}]}`, each state a JSON document in a string (`"null"` when
//! absent). `targetState` is what the application-controller applies for `status.sync.revision`,
//! namespace set and tracking annotation included.
//!
//! Refused, before anything is written: a body over the cap (`--max-unpacked-size`), a body or
//! a `targetState` that is not JSON, a target that is not the StatefulSet its item names, a
//! tracking id naming another object, and a StatefulSet the Application's AppProject would not
//! let Argo CD sync (its namespace is not a permitted destination, or the kind is excluded).

use serde::Deserialize;
use serde_json::Value;

use super::application::{Application, TRACKING_ID_ANNOTATION};
use super::project::{AppProject, NotPermitted};

/// One desired StatefulSet, as Argo CD would apply it.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetStatefulSet {
    pub namespace: String,
    pub name: String,
    pub object: Value,
}

/// Why the answer is refused.
#[derive(Debug, thiserror::Error)]
pub enum ManagedError {
    #[error(
        "the managed-resources answer is {size} bytes, over the {max}-byte cap (--max-unpacked-size)"
    )]
    TooLarge { size: u64, max: u64 },
    #[error("the managed-resources answer is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("the targetState of StatefulSet {namespace}/{name} is not JSON: {error}")]
    StateNotJson {
        namespace: String,
        name: String,
        #[source]
        error: serde_json::Error,
    },
    #[error(
        "the targetState of StatefulSet {namespace}/{name} is {found}, not that apps/v1 StatefulSet"
    )]
    NotTheStatefulSet {
        namespace: String,
        name: String,
        found: String,
    },
    #[error(
        "StatefulSet {namespace}/{name}: argocd.argoproj.io/tracking-id {value:?} names another object"
    )]
    TrackingMismatch {
        namespace: String,
        name: String,
        value: String,
    },
    #[error("StatefulSet {namespace}/{name}: {error}")]
    NotPermitted {
        namespace: String,
        name: String,
        #[source]
        error: NotPermitted,
    },
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    items: Option<Vec<Item>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Item {
    group: String,
    kind: String,
    namespace: String,
    name: String,
    target_state: Option<String>,
}

/// The StatefulSets `body` (the API server's answer) says Argo CD applies for `app`, each
/// checked against `project`; `max` is the byte cap. A StatefulSet whose target is absent
/// (`"null"`: Argo CD would prune it) is not desired and left out.
pub fn statefulsets(
    body: &[u8],
    max: u64,
    app: &Application,
    project: &AppProject,
) -> Result<Vec<TargetStatefulSet>, ManagedError> {
    let size = body.len() as u64;
    if size > max {
        return Err(ManagedError::TooLarge { size, max });
    }
    let answer: Answer = serde_json::from_slice(body).map_err(ManagedError::NotJson)?;
    let mut found = Vec::new();
    for item in answer.items.unwrap_or_default() {
        if item.kind != "StatefulSet" || item.group != "apps" {
            continue;
        }
        let (namespace, name) = (item.namespace.clone(), item.name.clone());
        let text = item.target_state.as_deref().unwrap_or("null");
        let object: Value =
            serde_json::from_str(text).map_err(|error| ManagedError::StateNotJson {
                namespace: namespace.clone(),
                name: name.clone(),
                error,
            })?;
        if object.is_null() {
            continue;
        }
        let field = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        let is_it = field("/apiVersion") == Some("apps/v1")
            && field("/kind") == Some("StatefulSet")
            && field("/metadata/name") == Some(name.as_str())
            && field("/metadata/namespace") == Some(namespace.as_str());
        if !is_it || namespace.is_empty() {
            return Err(ManagedError::NotTheStatefulSet {
                found: format!(
                    "{} {} {}/{}",
                    field("/apiVersion").unwrap_or("?"),
                    field("/kind").unwrap_or("?"),
                    field("/metadata/namespace").unwrap_or(""),
                    field("/metadata/name").unwrap_or("")
                ),
                namespace,
                name,
            });
        }
        if let Some(value) = field(&format!(
            "/metadata/annotations/{}",
            TRACKING_ID_ANNOTATION.replace('/', "~1")
        )) && !tracks(value, app, &namespace, &name)
        {
            return Err(ManagedError::TrackingMismatch {
                namespace,
                name,
                value: value.to_owned(),
            });
        }
        project
            .permits_statefulset(&namespace)
            .map_err(|error| ManagedError::NotPermitted {
                namespace: namespace.clone(),
                name: name.clone(),
                error,
            })?;
        found.push(TargetStatefulSet {
            namespace,
            name,
            object,
        });
    }
    Ok(found)
}

/// Whether a tracking id (`<app>:apps/StatefulSet:<namespace>/<name>`) is this Application's for
/// this StatefulSet. The application part is the Application's name, or `<namespace>_<name>`
/// for an Application outside Argo CD's own namespace (`InstanceName`), which cannot be told
/// from here: either is accepted.
fn tracks(value: &str, app: &Application, namespace: &str, name: &str) -> bool {
    let object = format!(":apps/StatefulSet:{namespace}/{name}");
    let Some(instance) = value.strip_suffix(&object) else {
        return false;
    };
    instance == app.name() || instance == format!("{}_{}", app.namespace(), app.name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app() -> Application {
        serde_json::from_value(json!({"metadata": {"name": "db", "namespace": "argocd"},
            "spec": {"project": "team", "destination": {"server": "https://kubernetes.default.svc", "namespace": "apps"}}}))
        .unwrap()
    }

    fn project(namespaces: &str) -> AppProject {
        serde_json::from_value(json!({"metadata": {"name": "team", "namespace": "argocd"},
            "spec": {"destinations": [{"server": "*", "namespace": namespaces}]}}))
        .unwrap()
    }

    fn sts(namespace: &str, name: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": namespace,
                "annotations": {"argocd.argoproj.io/tracking-id": format!("db:apps/StatefulSet:{namespace}/{name}")}},
            "spec": {"serviceName": name, "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"resources": {"requests": {"storage": "2Gi"}}}}]}})
    }

    fn item(group: &str, kind: &str, namespace: &str, name: &str, target: &str) -> Value {
        json!({"group": group, "kind": kind, "namespace": namespace, "name": name,
            "targetState": target, "liveState": "null", "normalizedLiveState": "null",
            "predictedLiveState": "null", "resourceVersion": "", "modified": true})
    }

    fn body(items: Vec<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({"items": items})).unwrap()
    }

    #[test]
    fn statefulsets_are_read_from_target_state_and_the_rest_ignored() {
        let b = body(vec![
            item(
                "",
                "Service",
                "apps",
                "db",
                &json!({"apiVersion": "v1", "kind": "Service"}).to_string(),
            ),
            item(
                "apps",
                "StatefulSet",
                "apps",
                "db",
                &sts("apps", "db").to_string(),
            ),
            item("apps", "StatefulSet", "apps", "gone", "null"),
            item("", "Secret", "apps", "s", "not even json"),
        ]);
        let got = statefulsets(&b, 1 << 20, &app(), &project("*")).unwrap();
        assert_eq!(
            got,
            vec![TargetStatefulSet {
                namespace: "apps".into(),
                name: "db".into(),
                object: sts("apps", "db"),
            }]
        );
        assert!(
            statefulsets(b"{}", 10, &app(), &project("*"))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn refusals_by_table() {
        let mut other_tracking = sts("apps", "db");
        other_tracking["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"] =
            json!("other:apps/StatefulSet:apps/db");
        let mut other_ns_tracking = sts("apps", "db");
        other_ns_tracking["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"] =
            json!("argocd_db:apps/StatefulSet:apps/db");
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "db", "namespace": "apps"}});
        for (name, b, max, namespaces, expected) in [
            (
                "over the cap",
                body(vec![item(
                    "apps",
                    "StatefulSet",
                    "apps",
                    "db",
                    &sts("apps", "db").to_string(),
                )]),
                100,
                "*",
                Some("over the 100-byte cap (--max-unpacked-size)"),
            ),
            (
                "not json",
                b"<html>".to_vec(),
                1000,
                "*",
                Some("the managed-resources answer is not JSON"),
            ),
            (
                "a state that is not json",
                body(vec![item("apps", "StatefulSet", "apps", "db", "{broken")]),
                1000,
                "*",
                Some("the targetState of StatefulSet apps/db is not JSON"),
            ),
            (
                "another kind in the state",
                body(vec![item(
                    "apps",
                    "StatefulSet",
                    "apps",
                    "db",
                    &deployment.to_string(),
                )]),
                1000,
                "*",
                Some("is apps/v1 Deployment apps/db, not that apps/v1 StatefulSet"),
            ),
            (
                "another name in the state",
                body(vec![item(
                    "apps",
                    "StatefulSet",
                    "apps",
                    "web",
                    &sts("apps", "db").to_string(),
                )]),
                1000,
                "*",
                Some("StatefulSet apps/web is apps/v1 StatefulSet apps/db"),
            ),
            (
                "tracked for another app",
                body(vec![item(
                    "apps",
                    "StatefulSet",
                    "apps",
                    "db",
                    &other_tracking.to_string(),
                )]),
                1000,
                "*",
                Some("names another object"),
            ),
            (
                "outside the project's namespaces",
                body(vec![item(
                    "apps",
                    "StatefulSet",
                    "kube-system",
                    "db",
                    &sts("kube-system", "db").to_string(),
                )]),
                10000,
                "apps",
                Some(
                    "StatefulSet kube-system/db: namespace kube-system is not permitted in project 'team'",
                ),
            ),
            (
                "an app outside argocd's namespace tracks as ns_name",
                body(vec![item(
                    "apps",
                    "StatefulSet",
                    "apps",
                    "db",
                    &other_ns_tracking.to_string(),
                )]),
                10000,
                "apps",
                None,
            ),
        ] {
            let got = statefulsets(&b, max, &app(), &project(namespaces));
            match (got, expected) {
                (Ok(_), None) => {}
                (Err(e), Some(text)) => assert!(e.to_string().contains(text), "{name}: {e}"),
                (got, expected) => panic!("{name}: {got:?}, expected {expected:?}"),
            }
        }
    }
}
