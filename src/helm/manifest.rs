//! The objects of a release record's `.manifest`, as the converger re-creates them.
//!
//! Helm writes the manifest as `---` documents, each after a `# Source: <chart>/templates/...`
//! comment (helm-controller's post-renderers re-serialise it through kustomize, which drops the
//! comments); both are split by the crate's YAML reader, under its alias budget. A namespaced
//! object without a namespace goes to the release namespace (Helm's kube client sets it), and the
//! re-created object must carry Helm's ownership metadata: without it the next `helm install`
//! over it refuses ("invalid ownership metadata"), and an upgrade's server-side apply conflicts.

use serde_json::Value;

use super::release::ReleaseRecord;
use crate::manifest::{ManifestError, parse_documents};

/// The label Helm's ownership check requires: `app.kubernetes.io/managed-by: Helm`.
pub const MANAGED_BY_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "Helm");
/// The annotation naming the owning release.
pub const RELEASE_NAME_ANNOTATION: &str = "meta.helm.sh/release-name";
/// The annotation naming the owning release's namespace.
pub const RELEASE_NAMESPACE_ANNOTATION: &str = "meta.helm.sh/release-namespace";

/// The objects of `record`'s manifest, each with Helm's ownership metadata for the release
/// `record.name` in `release_namespace`, StatefulSets without a namespace put in it. Other kinds
/// keep the namespace they were recorded with: whether a kind is namespaced cannot be known
/// offline. `source` names the record in errors.
pub fn objects(
    record: &ReleaseRecord,
    release_namespace: &str,
    source: &str,
) -> Result<Vec<Value>, ManifestError> {
    let docs = parse_documents(source, &record.manifest)?;
    Ok(docs
        .into_iter()
        .map(|doc| {
            let mut object = doc.object;
            if is_statefulset(&object) {
                default_namespace(&mut object, release_namespace);
            }
            add_ownership(&mut object, &record.name, release_namespace);
            object
        })
        .collect())
}

/// Only the StatefulSets of `record`'s manifest, as [`objects`] gives them.
pub fn statefulsets(
    record: &ReleaseRecord,
    release_namespace: &str,
    source: &str,
) -> Result<Vec<Value>, ManifestError> {
    Ok(objects(record, release_namespace, source)?
        .into_iter()
        .filter(is_statefulset)
        .collect())
}

/// `apps/v1` StatefulSet, the kind `plan` and `converge` read.
pub fn is_statefulset(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some("apps/v1")
        && object.get("kind").and_then(Value::as_str) == Some("StatefulSet")
}

/// helm-controller's field manager (`--helm-field-manager`'s default): what a StatefulSet of a
/// release is re-created with, so helm-controller's next server-side upgrade owns the fields
/// it applies instead of failing on a conflict with another manager (docs/helmrelease.md).
pub const DEFAULT_FIELD_MANAGER: &str = "helm-controller";

/// Whether an object carries Helm's ownership metadata (the label `managed-by: Helm` and the
/// release-name annotation): a release's object, which Helm's next upgrade applies.
pub fn is_helm_owned(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    let managed = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY_LABEL.0))
        .is_some_and(|v| v == MANAGED_BY_LABEL.1);
    let released = meta.annotations.as_ref().is_some_and(|a| {
        a.get(RELEASE_NAME_ANNOTATION)
            .is_some_and(|v| !v.is_empty())
    });
    managed && released
}

fn metadata(object: &mut Value) -> Option<&mut serde_json::Map<String, Value>> {
    let map = object.as_object_mut()?;
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    if !metadata.is_object() {
        *metadata = Value::Object(Default::default());
    }
    metadata.as_object_mut()
}

fn default_namespace(object: &mut Value, namespace: &str) {
    if let Some(meta) = metadata(object) {
        let empty = meta
            .get("namespace")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if empty {
            meta.insert("namespace".into(), namespace.into());
        }
    }
}

/// Sets the label and annotations Helm's ownership check reads (`pkg/action/validate.go`),
/// overwriting whatever the chart wrote there: these are the values Helm requires.
fn add_ownership(object: &mut Value, release: &str, namespace: &str) {
    let Some(meta) = metadata(object) else { return };
    let mut set = |field: &str, key: &str, value: &str| {
        let map = meta
            .entry(field)
            .or_insert_with(|| Value::Object(Default::default()));
        if !map.is_object() {
            *map = Value::Object(Default::default());
        }
        if let Some(map) = map.as_object_mut() {
            map.insert(key.into(), value.into());
        }
    };
    set("labels", MANAGED_BY_LABEL.0, MANAGED_BY_LABEL.1);
    set("annotations", RELEASE_NAME_ANNOTATION, release);
    set("annotations", RELEASE_NAMESPACE_ANNOTATION, namespace);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn helm_ownership_by_table() {
        for (labels, annotations, owned) in [
            (
                json!({"app.kubernetes.io/managed-by": "Helm"}),
                json!({"meta.helm.sh/release-name": "web"}),
                true,
            ),
            (
                json!({"app.kubernetes.io/managed-by": "Helm"}),
                json!({}),
                false,
            ),
            (
                json!({"app.kubernetes.io/managed-by": "Helm"}),
                json!({"meta.helm.sh/release-name": ""}),
                false,
            ),
            (
                json!({"app.kubernetes.io/managed-by": "kustomize"}),
                json!({"meta.helm.sh/release-name": "web"}),
                false,
            ),
            (
                json!({}),
                json!({"meta.helm.sh/release-name": "web"}),
                false,
            ),
        ] {
            let meta =
                serde_json::from_value(json!({"labels": labels, "annotations": annotations}))
                    .unwrap();
            assert_eq!(is_helm_owned(&meta), owned, "{labels} {annotations}");
        }
    }

    /// A manifest as Helm writes it: a `# Source:` comment before each document.
    const HELM_MANIFEST: &str = "---\n# Source: web/templates/service.yaml\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  labels:\n    app.kubernetes.io/managed-by: Helm\nspec:\n  clusterIP: None\n---\n# Source: web/templates/statefulset.yaml\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n  serviceName: web\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n  volumeClaimTemplates:\n  - metadata: {name: data}\n    spec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 2Gi}}\n---\n# Source: web/templates/other.yaml\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: cache\n  namespace: elsewhere\n";

    fn record(manifest: &str) -> ReleaseRecord {
        ReleaseRecord {
            name: "web".into(),
            manifest: manifest.into(),
            version: 2,
            namespace: "demo".into(),
            ..Default::default()
        }
    }

    #[test]
    fn statefulsets_get_the_release_namespace_and_helms_ownership() {
        let got = statefulsets(&record(HELM_MANIFEST), "demo", "rec").unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0]["metadata"],
            json!({
                "name": "web",
                "namespace": "demo",
                "labels": {"app": "web", "app.kubernetes.io/managed-by": "Helm"},
                "annotations": {
                    "meta.helm.sh/release-name": "web",
                    "meta.helm.sh/release-namespace": "demo"
                }
            })
        );
        assert_eq!(
            got[0]["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
            "2Gi"
        );
        // A namespace the chart set is kept.
        assert_eq!(got[1]["metadata"]["namespace"], "elsewhere");
        assert_eq!(
            got[1]["metadata"]["annotations"]["meta.helm.sh/release-namespace"],
            "demo"
        );
    }

    #[test]
    fn every_object_carries_ownership_and_only_statefulsets_are_namespaced_here() {
        let all = objects(&record(HELM_MANIFEST), "demo", "rec").unwrap();
        let kinds: Vec<_> = all.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["Service", "StatefulSet", "StatefulSet"]);
        assert_eq!(all[0]["metadata"].get("namespace"), None);
        assert_eq!(
            all[0]["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "Helm"
        );
    }

    #[test]
    fn a_post_rendered_manifest_without_comments_reads_the_same() {
        let kustomized = HELM_MANIFEST
            .lines()
            .filter(|l| !l.starts_with("# Source:"))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(
            statefulsets(&record(&kustomized), "demo", "rec").unwrap(),
            statefulsets(&record(HELM_MANIFEST), "demo", "rec").unwrap()
        );
        assert!(statefulsets(&record(""), "demo", "rec").unwrap().is_empty());
    }

    #[test]
    fn a_manifest_is_read_under_the_alias_budget() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        let manifest = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lol\ndata:\n{}",
            text.lines().map(|l| format!("  {l}\n")).collect::<String>()
        );
        let err = objects(
            &record(&manifest),
            "demo",
            "Secret demo/sh.helm.release.v1.web.v2",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("Secret demo/sh.helm.release.v1.web.v2: document 0: invalid YAML"),
            "{err}"
        );
        assert!(err.contains("budget"), "{err}");
    }
}
