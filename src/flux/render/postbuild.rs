//! What kustomize-controller does to each built object before applying it: check it names
//! itself, run post-build substitution, put `commonMetadata` on its top-level metadata, and
//! label it with its owner Kustomization. Pure: the variables were collected beforehand.

use serde_json::{Map, Value};

use super::error::RenderError;
use super::rendered::RenderedStatefulSet;
use crate::flux::objects::{KustomizationSpec, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL};
use crate::flux::substitute::{self, Variables};

/// The Kustomization an object is rendered for.
#[derive(Clone, Debug)]
pub struct Owner<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub spec: &'a KustomizationSpec,
}

/// Reads kustomize's output, substituting each document's text as kustomize printed it when
/// kustomize-controller would: `postBuild` is set and there is at least one variable (or the
/// `Always` strategy). Substituting the printed text, not a re-serialised object, keeps
/// Flux's typing: `replicas: ${N}` becomes a number, `"${N}"` stays a string.
pub fn substitute_built(
    text: &str,
    owner: &Owner<'_>,
    variables: &Variables,
    strict: bool,
) -> Result<Vec<Value>, RenderError> {
    let always = owner
        .spec
        .post_build
        .as_ref()
        .and_then(|p| p.substitute_strategy.as_deref())
        .is_some_and(|s| s.eq_ignore_ascii_case("always"));
    let substitute = owner.spec.post_build.is_some() && (!variables.is_empty() || always);
    if !substitute {
        return super::stream::parse_stream(text);
    }
    let options = substitute::Options { strict, always };
    let mut objects = Vec::new();
    for doc in substitute::split_documents(text) {
        if doc.trim().is_empty() {
            continue;
        }
        let object = substitute::substitute_document(doc, variables, &options)
            .map_err(|error| RenderError::Substitute { error })?;
        if !object.is_null() {
            objects.push(object);
        }
    }
    Ok(objects)
}

/// Applies the per-object steps after substitution to every built object, in order: identity
/// check, `commonMetadata`, owner labels.
pub fn post_build(objects: Vec<Value>, owner: &Owner<'_>) -> Result<Vec<Value>, RenderError> {
    objects
        .into_iter()
        .enumerate()
        .map(|(index, mut object)| {
            check_identity(&object, index)?;
            let metadata = metadata_of(&mut object, index)?;
            if let Some(common) = &owner.spec.common_metadata {
                put_all(metadata, "labels", &common.labels, index)?;
                put_all(metadata, "annotations", &common.annotations, index)?;
            }
            let owner_labels = [
                (OWNER_NAME_LABEL.to_string(), owner.name.to_string()),
                (
                    OWNER_NAMESPACE_LABEL.to_string(),
                    owner.namespace.to_string(),
                ),
            ];
            put_all(
                metadata,
                "labels",
                owner_labels.iter().map(|(k, v)| (k, v)),
                index,
            )?;
            Ok(object)
        })
        .collect()
}

/// kustomize-controller refuses an object without apiVersion, kind or name.
fn check_identity(object: &Value, index: usize) -> Result<(), RenderError> {
    let present = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if !object.is_object()
        || !present("/apiVersion")
        || !present("/kind")
        || !present("/metadata/name")
    {
        // Names what is missing, never the object: after substitution it may hold values
        // from Secrets (crate::redact masks them at the exits; this text need not carry them).
        let missing: Vec<&str> = [
            ("apiVersion", "/apiVersion"),
            ("kind", "/kind"),
            ("metadata.name", "/metadata/name"),
        ]
        .into_iter()
        .filter(|(_, p)| !present(p))
        .map(|(field, _)| field)
        .collect();
        let shown = if object.is_object() {
            format!(
                "{} (missing {})",
                substitute::object_id(object),
                missing.join(", ")
            )
        } else {
            format!("a YAML {} instead of a mapping", json_type(object))
        };
        return Err(RenderError::InvalidObject {
            index,
            message: format!("failed to decode Kubernetes apiVersion, kind and name from {shown}"),
        });
    }
    Ok(())
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "sequence",
        Value::Object(_) => "mapping",
    }
}

fn metadata_of(object: &mut Value, index: usize) -> Result<&mut Map<String, Value>, RenderError> {
    let shown = substitute::object_id(object);
    match object.get_mut("metadata") {
        Some(Value::Object(m)) => Ok(m),
        _ => Err(RenderError::InvalidObject {
            index,
            message: format!("{shown}: metadata is not a mapping"),
        }),
    }
}

fn put_all<'a>(
    metadata: &mut Map<String, Value>,
    field: &str,
    entries: impl IntoIterator<Item = (&'a String, &'a String)>,
    index: usize,
) -> Result<(), RenderError> {
    let mut entries = entries.into_iter().peekable();
    if entries.peek().is_none() {
        return Ok(());
    }
    let slot = metadata
        .entry(field.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    let Value::Object(map) = slot else {
        return Err(RenderError::InvalidObject {
            index,
            message: format!("metadata.{field} is not a mapping"),
        });
    };
    for (k, v) in entries {
        map.insert(k.clone(), Value::from(v.as_str()));
    }
    Ok(())
}

/// The `apps/v1` StatefulSets among the objects, with the namespace they will be applied in.
/// A namespaced object without a namespace makes kustomize-controller refuse the whole revision
/// ("namespace not specified"), so it is an error here too rather than a guess.
pub fn statefulsets(objects: &[Value]) -> Result<Vec<RenderedStatefulSet>, RenderError> {
    let mut out = Vec::new();
    for object in objects {
        let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
        if s("/kind") != "StatefulSet" || s("/apiVersion") != "apps/v1" {
            continue;
        }
        let namespace = s("/metadata/namespace");
        if namespace.is_empty() {
            return Err(RenderError::NoNamespace {
                object: substitute::object_id(object),
            });
        }
        out.push(RenderedStatefulSet {
            namespace: namespace.to_string(),
            name: s("/metadata/name").to_string(),
            object: object.clone(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flux::objects::CommonMetadata;
    use serde_json::json;

    fn owner(spec: &KustomizationSpec) -> Owner<'_> {
        Owner {
            name: "apps",
            namespace: "flux-system",
            spec,
        }
    }

    #[test]
    fn common_metadata_then_owner_labels_on_top_level_only() {
        let spec = KustomizationSpec {
            common_metadata: Some(CommonMetadata {
                labels: [("team".to_string(), "db".to_string())].into(),
                annotations: [("note".to_string(), "x".to_string())].into(),
            }),
            ..Default::default()
        };
        let objects = vec![json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "prod", "labels": {"team": "old", "app": "web"}},
            "spec": {"template": {"metadata": {"labels": {"app": "web"}}}}
        })];
        let got = post_build(objects, &owner(&spec)).unwrap();
        assert_eq!(
            got[0],
            json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "web", "namespace": "prod",
                    "labels": {"team": "db", "app": "web",
                               "kustomize.toolkit.fluxcd.io/name": "apps",
                               "kustomize.toolkit.fluxcd.io/namespace": "flux-system"},
                    "annotations": {"note": "x"}},
                "spec": {"template": {"metadata": {"labels": {"app": "web"}}}}
            })
        );
    }

    #[test]
    fn objects_without_identity_are_refused() {
        let spec = KustomizationSpec::default();
        for bad in [
            json!({"kind": "ConfigMap", "metadata": {"name": "x"}}),
            json!({"apiVersion": "v1", "metadata": {"name": "x"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
            json!("text"),
        ] {
            let e = post_build(vec![bad.clone()], &owner(&spec)).unwrap_err();
            assert!(
                e.to_string()
                    .contains("failed to decode Kubernetes apiVersion, kind and name"),
                "{bad}: {e}"
            );
        } // Never the object's content: it may hold values substituted from Secrets.
        let e = post_build(
            vec![json!({"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"token": "s3cr3t-value"}})],
            &owner(&spec),
        )
        .unwrap_err()
        .to_string();
        assert!(!e.contains("s3cr3t-value"), "{e}");
        assert!(e.contains("ConfigMap/x (missing apiVersion)"), "{e}");
    }

    const BUILT: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  size: ${SIZE}\n---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: s\nspec:\n  replicas: ${N:=1}\n  serviceName: \"${N:=1}\"\n";

    #[test]
    fn no_substitution_without_post_build_or_variables() {
        // `${SIZE}` stays literal: no postBuild at all, or postBuild without variables.
        for spec in [
            KustomizationSpec::default(),
            KustomizationSpec {
                post_build: Some(Default::default()),
                ..Default::default()
            },
        ] {
            let got = substitute_built(BUILT, &owner(&spec), &Variables::new(), true).unwrap();
            assert_eq!(got[0]["data"]["size"], "${SIZE}");
            assert_eq!(got[1]["spec"]["replicas"], "${N:=1}");
        }
    }

    #[test]
    fn substitution_keeps_the_typing_of_the_printed_text() {
        let spec = KustomizationSpec {
            post_build: Some(Default::default()),
            ..Default::default()
        };
        let vars: Variables = [("SIZE".to_string(), "2Gi".to_string())].into();
        let got = substitute_built(BUILT, &owner(&spec), &vars, true).unwrap();
        assert_eq!(got[0]["data"]["size"], "2Gi");
        assert_eq!(got[1]["spec"]["replicas"], json!(1));
        assert_eq!(got[1]["spec"]["serviceName"], "1");
    }

    #[test]
    fn strict_mode_names_the_object_and_variable() {
        let spec = KustomizationSpec {
            post_build: Some(crate::flux::objects::PostBuild {
                substitute_strategy: Some("Always".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = substitute_built(BUILT, &owner(&spec), &Variables::new(), true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("ConfigMap/c"), "{e}");
        assert!(
            e.contains("variable not set (strict mode): \"SIZE\""),
            "{e}"
        );
        let lenient = substitute_built(BUILT, &owner(&spec), &Variables::new(), false).unwrap();
        assert_eq!(lenient[0]["data"]["size"], json!(null));
    }

    #[test]
    fn statefulsets_need_a_namespace() {
        let sts = |ns: Option<&str>| {
            let mut o = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"}});
            if let Some(ns) = ns {
                o["metadata"]["namespace"] = json!(ns);
            }
            o
        };
        let other = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}});
        let got = statefulsets(&[other.clone(), sts(Some("prod"))]).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].namespace.as_str(), got[0].name.as_str()),
            ("prod", "web")
        );
        let e = statefulsets(&[sts(None)]).unwrap_err().to_string();
        assert!(e.contains("StatefulSet/web namespace not specified"), "{e}");
    }
}
