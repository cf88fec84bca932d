//! kustomize-controller's generator: the kustomization file a directory is built from.
//!
//! When the directory has `kustomization.yaml`, `kustomization.yml` or `Kustomization`, that
//! file is used. Otherwise one is generated listing, in `filepath.Walk` order (lexical per
//! directory, depth first), every `.yaml`/`.yml` file that parses as Kubernetes YAML, and each
//! subdirectory holding a kustomization file (listed as a directory, not descended). A file
//! that does not parse fails the whole build, naming the file, as Flux does.

use std::path::{Path, PathBuf};

use super::error::RenderError;

/// kustomize's recognised kustomization file names, in its order of preference.
pub const KUSTOMIZATION_FILE_NAMES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// The kustomization file of `dir`, if it has one (a directory of that name does not count).
pub fn find_kustomization_file(dir: &Path) -> Option<PathBuf> {
    KUSTOMIZATION_FILE_NAMES
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
}

/// The path of `path` relative to `root`, for messages.
pub fn display_relative(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => format!("./{}", rel.display()),
        Err(_) => path.display().to_string(),
    }
}

/// Whether YAML text parses as Kubernetes objects: every document a mapping (empty ones allowed).
///
/// Parsed with the shared reader's budget (a large CRD bundle parses here where Flux parses it),
/// and only the shape of each document is kept: the contents are checked and dropped as they
/// stream by, so the check needs no more memory than the text, whatever the file holds.
pub fn check_kubernetes_yaml(text: &str) -> Result<(), String> {
    let docs: Vec<Shape> = crate::manifest::with_parse_stack(|| {
        serde_saphyr::from_multiple_with_options(text, crate::manifest::yaml_options())
    })
    .map_err(|e| e.to_string())?;
    for (i, doc) in docs.iter().enumerate() {
        match doc {
            Shape::Mapping | Shape::Null => {}
            Shape::Other(found) => {
                return Err(format!("document {i} is not a mapping (found {found})"));
            }
        }
    }
    Ok(())
}

/// The top of a YAML document, without its contents.
enum Shape {
    Mapping,
    Null,
    Other(&'static str),
}

impl<'de> serde::Deserialize<'de> for Shape {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ShapeVisitor)
    }
}

struct ShapeVisitor;

impl<'de> serde::de::Visitor<'de> for ShapeVisitor {
    type Value = Shape;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a YAML document")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        use serde::de::IgnoredAny;
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Shape::Mapping)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Shape::Other("a sequence"))
    }

    fn visit_unit<E>(self) -> Result<Shape, E> {
        Ok(Shape::Null)
    }

    fn visit_none<E>(self) -> Result<Shape, E> {
        Ok(Shape::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Shape, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::Other("a boolean"))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::Other("a number"))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::Other("a number"))
    }

    fn visit_i128<E>(self, _: i128) -> Result<Shape, E> {
        Ok(Shape::Other("a number"))
    }

    fn visit_u128<E>(self, _: u128) -> Result<Shape, E> {
        Ok(Shape::Other("a number"))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::Other("a number"))
    }

    fn visit_str<E>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::Other("a string"))
    }

    fn visit_bytes<E>(self, _: &[u8]) -> Result<Shape, E> {
        Ok(Shape::Other("a string"))
    }
}

pub(crate) fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a sequence",
        serde_json::Value::Object(_) => "a mapping",
    }
}

/// The resources a generated kustomization lists for `base`: `./`-relative, in Walk order.
pub fn scan_manifests(root: &Path, base: &Path) -> Result<Vec<String>, RenderError> {
    let mut out = Vec::new();
    walk(root, base, base, &mut out)?;
    Ok(out)
}

fn walk(root: &Path, base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), RenderError> {
    let io = |path: &Path| {
        let path = display_relative(root, path);
        move |error| RenderError::Io {
            context: format!("reading {path}"),
            error,
        }
    };
    let mut entries: Vec<(std::ffi::OsString, PathBuf, std::fs::FileType)> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let file_type = entry.file_type().map_err(io(&entry.path()))?;
        entries.push((entry.file_name(), entry.path(), file_type));
    }
    // Go's filepath.Walk visits names in byte order.
    entries.sort_by(|a, b| a.0.as_encoded_bytes().cmp(b.0.as_encoded_bytes()));
    for (_, path, file_type) in entries {
        let relative = || {
            let rel = path.strip_prefix(base).unwrap_or(&path);
            format!("./{}", rel.display())
        };
        if file_type.is_dir() {
            if find_kustomization_file(&path).is_some() {
                out.push(relative());
            } else {
                walk(root, base, &path, out)?;
            }
            continue;
        }
        if !file_type.is_file() {
            continue; // symlinks: the artifact has none; a copied --path tree skips them too
        }
        let is_yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml") | Some("yml")
        );
        if !is_yaml {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        check_kubernetes_yaml(&text).map_err(|message| RenderError::InvalidYaml {
            file: display_relative(root, &path),
            message,
        })?;
        out.push(relative());
    }
    Ok(())
}

/// The kustomization kustomize-controller generates for a directory without one.
pub fn generated_kustomization(resources: Vec<String>) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn scan_lists_yaml_in_walk_order_and_stops_at_kustomizations() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n";
        write(root, "apps/b.yaml", cm);
        write(root, "apps/a.yml", cm);
        write(root, "apps/README.md", "not yaml");
        write(root, "apps/sub/z.yaml", cm);
        write(root, "apps/sub-k/kustomization.yaml", "resources: []\n");
        write(root, "apps/sub-k/ignored.yaml", "{{ not yaml");
        write(root, "apps/A.yaml", cm);
        write(root, "apps/empty.yaml", "");
        let got = scan_manifests(root, &root.join("apps")).unwrap();
        assert_eq!(
            got,
            [
                "./A.yaml",
                "./a.yml",
                "./b.yaml",
                "./empty.yaml",
                "./sub/z.yaml",
                "./sub-k"
            ]
        );
    }

    #[test]
    fn unparsable_yaml_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "apps/bad.yaml", "a: [\n");
        let e = scan_manifests(dir.path(), &dir.path().join("apps")).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("./apps/bad.yaml"), "{text}");
        assert!(matches!(e, RenderError::InvalidYaml { .. }));
    }

    #[test]
    fn kubernetes_yaml_check_by_table() {
        for (text, ok) in [
            ("", true),
            ("---\n", true),
            ("a: 1\n---\nb: 2\n", true),
            ("- 1\n", false),
            ("just a string\n", false),
            ("a: [\n", false),
            ("a: {b: [1, {c: d}]}\n---\n\n---\nx: ~\n", true),
            ("a: 1\n---\n- 1\n", false),
            ("~\n", true),
            ("true\n", false),
            ("1.5\n", false),
            ("[a, b]\n", false),
        ] {
            assert_eq!(check_kubernetes_yaml(text).is_ok(), ok, "{text:?}");
        }
    }

    /// A CRD bundle past every default of the YAML crate's budget (1,024 documents, 250,000
    /// nodes, depth 64), as real bundles are and Flux parses them.
    pub(crate) fn large_bundle() -> String {
        let mut text = String::new();
        for i in 0..1_100 {
            text.push_str(&format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n"
            ));
            for k in 0..120 {
                text.push_str(&format!("  k{k}: v{k}\n"));
            }
        }
        // One deeply nested schema, as a CRD's openAPIV3Schema can be.
        text.push_str(
            "---\napiVersion: example.com/v1\nkind: Deep\nmetadata:\n  name: deep\nspec:\n",
        );
        for depth in 0..100 {
            text.push_str(&format!("{}n{depth}:\n", "  ".repeat(depth + 1)));
        }
        text.push_str(&format!("{}leaf: true\n", "  ".repeat(101)));
        text
    }

    #[test]
    fn a_large_bundle_passes_the_parse_check() {
        let text = large_bundle();
        let defaults = serde_saphyr::from_multiple::<serde_json::Value>(&text);
        assert!(
            defaults.is_err(),
            "the bundle must exceed the crate's default budget"
        );
        check_kubernetes_yaml(&text).unwrap();
    }

    #[test]
    fn kustomization_file_names_by_preference() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(find_kustomization_file(dir.path()), None);
        std::fs::create_dir(dir.path().join("kustomization.yaml")).unwrap();
        assert_eq!(find_kustomization_file(dir.path()), None);
        write(dir.path(), "Kustomization", "resources: []\n");
        assert_eq!(
            find_kustomization_file(dir.path()),
            Some(dir.path().join("Kustomization"))
        );
        write(dir.path(), "kustomization.yml", "resources: []\n");
        assert_eq!(
            find_kustomization_file(dir.path()),
            Some(dir.path().join("kustomization.yml"))
        );
    }
}
