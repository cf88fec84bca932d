//! The Kustomization spec's overlay on the kustomization file, as Flux's generator writes it.
//!
//! `targetNamespace` → `namespace`, `namePrefix`/`nameSuffix` replace the file's, `patches` and
//! `components` are appended after the file's own, `images` replace an entry of the same name or
//! are appended. Every other field of the file is kept as written.

use serde_json::{Map, Value};

use super::confine::is_local_relative;
use super::error::RenderError;
use crate::flux::objects::KustomizationSpec;

/// Applies the spec overlay to a parsed kustomization file. `component_exists` answers whether a
/// component path exists (for `ignoreMissingComponents`); kept as a parameter so this stays pure.
pub fn apply(
    kustomization: &mut Map<String, Value>,
    spec: &KustomizationSpec,
    component_exists: impl Fn(&str) -> bool,
) -> Result<(), RenderError> {
    kustomization
        .entry("apiVersion")
        .or_insert_with(|| Value::from("kustomize.config.k8s.io/v1beta1"));
    kustomization
        .entry("kind")
        .or_insert_with(|| Value::from("Kustomization"));

    let non_empty = |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(Value::from);
    if let Some(ns) = non_empty(&spec.target_namespace) {
        kustomization.insert("namespace".into(), ns);
    }
    if let Some(p) = non_empty(&spec.name_prefix) {
        kustomization.insert("namePrefix".into(), p);
    }
    if let Some(s) = non_empty(&spec.name_suffix) {
        kustomization.insert("nameSuffix".into(), s);
    }

    if !spec.patches.is_empty() {
        let list = array_field(kustomization, "patches")?;
        for p in &spec.patches {
            let value = serde_json::to_value(p).map_err(|e| RenderError::Overlay {
                message: format!("spec.patches: {e}"),
            })?;
            list.push(value);
        }
    }

    let mut components = Vec::new();
    for c in &spec.components {
        if !is_local_relative(c) {
            return Err(RenderError::Overlay {
                message: format!("component path '{c}' must be local and relative"),
            });
        }
        if spec.ignore_missing_components && !component_exists(c) {
            continue;
        }
        components.push(Value::from(c.as_str()));
    }
    if !components.is_empty() {
        array_field(kustomization, "components")?.extend(components);
    }

    if !spec.images.is_empty() {
        let list = array_field(kustomization, "images")?;
        for image in &spec.images {
            let value = serde_json::to_value(image).map_err(|e| RenderError::Overlay {
                message: format!("spec.images: {e}"),
            })?;
            let same = list
                .iter()
                .position(|i| i.get("name").and_then(Value::as_str) == Some(image.name.as_str()));
            match same {
                Some(i) => list[i] = value,
                None => list.push(value),
            }
        }
    }
    Ok(())
}

fn array_field<'a>(
    kustomization: &'a mut Map<String, Value>,
    field: &str,
) -> Result<&'a mut Vec<Value>, RenderError> {
    let entry = kustomization
        .entry(field.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if entry.is_null() {
        *entry = Value::Array(Vec::new());
    }
    match entry {
        Value::Array(list) => Ok(list),
        other => Err(RenderError::Overlay {
            message: format!(
                "the kustomization file's {field:?} is {}, expected a list",
                super::generator::json_type(other)
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flux::objects::{Image, Patch, Selector};
    use serde_json::json;

    fn run(file: Value, spec: &KustomizationSpec) -> Result<Value, RenderError> {
        let Value::Object(mut map) = file else {
            panic!("test input is a mapping")
        };
        apply(&mut map, spec, |c| c != "missing")?;
        Ok(Value::Object(map))
    }

    #[test]
    fn overlays_by_table() {
        let base = json!({"resources": ["a.yaml"], "namePrefix": "old-",
                          "patches": [{"path": "p.yaml"}], "components": ["c0"],
                          "images": [{"name": "nginx", "newTag": "1"}, {"name": "redis", "newTag": "6"}]});
        let spec = KustomizationSpec {
            target_namespace: Some("prod".into()),
            name_prefix: Some("new-".into()),
            name_suffix: Some("".into()),
            patches: vec![Patch {
                patch: "- op: replace\n  path: /spec/replicas\n  value: 3\n".into(),
                target: Some(Selector {
                    kind: Some("StatefulSet".into()),
                    name: Some("web".into()),
                    ..Default::default()
                }),
            }],
            components: vec!["../c1".into(), "missing".into()],
            ignore_missing_components: true,
            images: vec![
                Image {
                    name: "nginx".into(),
                    new_name: Some("mirror/nginx".into()),
                    ..Default::default()
                },
                Image {
                    name: "busybox".into(),
                    digest: Some("sha256:00".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let got = run(base, &spec).unwrap();
        assert_eq!(
            got,
            json!({
                "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "resources": ["a.yaml"], "namespace": "prod", "namePrefix": "new-",
                "patches": [{"path": "p.yaml"},
                            {"patch": "- op: replace\n  path: /spec/replicas\n  value: 3\n",
                             "target": {"kind": "StatefulSet", "name": "web"}}],
                "components": ["c0", "../c1"],
                "images": [{"name": "nginx", "newName": "mirror/nginx"}, {"name": "redis", "newTag": "6"},
                           {"name": "busybox", "digest": "sha256:00"}]
            })
        );
    }

    #[test]
    fn empty_spec_changes_nothing_but_type_meta() {
        let got = run(
            json!({"resources": ["a.yaml"]}),
            &KustomizationSpec::default(),
        )
        .unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["a.yaml"]})
        );
    }

    #[test]
    fn remote_or_absolute_components_are_refused() {
        for c in ["/abs", "https://github.com/x/y", "git::https://x"] {
            let spec = KustomizationSpec {
                components: vec![c.into()],
                ..Default::default()
            };
            let e = run(json!({}), &spec).unwrap_err().to_string();
            assert!(e.contains("must be local and relative"), "{c}: {e}");
        }
    }

    #[test]
    fn missing_component_kept_without_ignore() {
        let spec = KustomizationSpec {
            components: vec!["missing".into()],
            ..Default::default()
        };
        let got = run(json!({}), &spec).unwrap();
        assert_eq!(got["components"], json!(["missing"]));
    }

    #[test]
    fn non_list_field_is_an_error() {
        let spec = KustomizationSpec {
            components: vec!["c".into()],
            ..Default::default()
        };
        assert!(run(json!({"components": "c"}), &spec).is_err());
    }
}
