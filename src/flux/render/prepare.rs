//! The tree made ready to build: `spec.path` resolved, the kustomization file written with the
//! spec overlay (generated when the directory has none), and what the build can reach checked.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::RenderError;
use super::reachable::{Confinement, read_kustomization};
use super::{confine, generator, overlay};

/// Resolves `spec.path`, writes the kustomization file with the spec overlay, and checks every
/// path the build can reach stays inside the root. Returns the directory to build.
pub fn prepare(
    root: &Path,
    spec: &crate::flux::objects::KustomizationSpec,
) -> Result<PathBuf, RenderError> {
    prepare_with(root, spec, false)
}

/// [`prepare`], and with `no_remote_bases` (kustomize-controller's `--no-remote-bases`) the
/// check that the build fetches nothing either.
pub fn prepare_with(
    root: &Path,
    spec: &crate::flux::objects::KustomizationSpec,
    no_remote_bases: bool,
) -> Result<PathBuf, RenderError> {
    let path = spec
        .path
        .as_deref()
        .filter(|p| !p.is_empty())
        .unwrap_or(".");
    let dir = confine::join_within(root, root, path, "spec.path")?;
    if !dir.is_dir() {
        return Err(RenderError::PathNotFound {
            path: path.to_string(),
        });
    }
    for c in &spec.components {
        if confine::is_local_relative(c) {
            confine::join_within(root, &dir, c, "spec.components entry")?;
        }
    }
    let (file, mut kustomization) = match generator::find_kustomization_file(&dir) {
        Some(file) => {
            let value = read_kustomization(root, &file)?;
            (file, value)
        }
        None => {
            let resources = generator::scan_manifests(root, &dir)?;
            (
                dir.join("kustomization.yaml"),
                generator::generated_kustomization(resources),
            )
        }
    };
    let Value::Object(map) = &mut kustomization else {
        return Err(RenderError::KustomizationFile {
            file: generator::display_relative(root, &file),
            message: format!(
                "expected a mapping, found {}",
                generator::json_type(&kustomization)
            ),
        });
    };
    overlay::apply(map, spec, |c| dir.join(c).exists())?;
    let text = serde_json::to_string_pretty(&kustomization).map_err(|e| RenderError::Overlay {
        message: e.to_string(),
    })?;
    std::fs::write(&file, text).map_err(|error| RenderError::Io {
        context: format!("writing {}", file.display()),
        error,
    })?;
    Confinement {
        root,
        no_remote_bases,
    }
    .check(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flux::objects::KustomizationSpec;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn prepare_refuses_escaping_path_and_references() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            root,
            "apps/kustomization.yaml",
            "resources: [../../outside.yaml]\n",
        );
        write(root, "ok/kustomization.yaml", "resources: [../apps]\n");
        let spec = |path: &str| KustomizationSpec {
            path: Some(path.into()),
            ..Default::default()
        };
        for (path, needle) in [
            ("../x", "spec.path \"../x\" escapes the artifact root"),
            ("/etc", "spec.path \"/etc\" escapes the artifact root"),
            ("missing", "kustomization path not found"),
            (
                "apps",
                "./apps/kustomization.yaml: resources \"../../outside.yaml\" escapes",
            ),
            (
                "ok",
                "./apps/kustomization.yaml: resources \"../../outside.yaml\" escapes",
            ),
        ] {
            let e = prepare(root, &spec(path)).unwrap_err().to_string();
            assert!(e.contains(needle), "{path}: {e}");
        }
        let with_component = KustomizationSpec {
            path: Some("ok".into()),
            components: vec!["../../c".into()],
            ..Default::default()
        };
        let e = prepare(root, &with_component).unwrap_err().to_string();
        assert!(
            e.contains("spec.components entry \"../../c\" escapes"),
            "{e}"
        );
    }

    /// The plugin configs a kustomization lists are checked like its own fields: inline, by
    /// file, through a directory; a config that is not builtin is refused as such.

    #[test]
    fn prepare_checks_plugin_configs_by_table() {
        let cm = |files: &str| {
            format!(
                "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {{name: x}}\nfiles: [{files}]\n"
            )
        };
        for (tree, refused) in [
            (vec![("kustomization.yaml", "generators: [gen.yaml]\n".to_string()), ("gen.yaml", cm("k=f.txt"))], None),
            (
                vec![("kustomization.yaml", "generators: [gen.yaml]\n".to_string()), ("gen.yaml", cm("k=/etc/passwd"))],
                Some("./kustomization.yaml: generators[0] (ConfigMapGenerator gen.yaml): files \"/etc/passwd\" escapes the artifact root"),
            ),
            (
                vec![("kustomization.yaml", format!("generators:\n- |\n{}", cm("../../x").lines().map(|l| format!("  {l}\n")).collect::<String>()))],
                Some("generators[0] (ConfigMapGenerator inline #0): files \"../../x\" escapes"),
            ),
            (
                vec![
                    ("apps/kustomization.yaml", "transformers: [../t]\n".to_string()),
                    ("t/kustomization.yaml", "resources: [p.yaml]\n".to_string()),
                    ("t/p.yaml", "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: ../../secret\n".to_string()),
                ],
                Some("./apps/kustomization.yaml: transformers[0] (./t/kustomization.yaml) (PatchTransformer ./t/p.yaml): path \"../../secret\" escapes"),
            ),
            (
                vec![
                    ("kustomization.yaml", "transformers: [t]\n".to_string()),
                    ("t/kustomization.yaml", "resources: [p.yaml]\npatches: [{path: x.yaml}]\n".to_string()),
                ],
                Some("transformers[0] (./t/kustomization.yaml): patches: a kustomization whose output configures plugins may only list resources"),
            ),
            (
                vec![("kustomization.yaml", "validators: [v.yaml]\n".to_string()), ("v.yaml", "apiVersion: example.com/v1\nkind: Validate\nmetadata:\n  annotations:\n    config.kubernetes.io/function: 'exec: {path: ./v.sh}'\n".to_string())],
                Some("./kustomization.yaml: validators[0] (v.yaml): kind \"Validate\" apiVersion \"example.com/v1\" is not a kustomize builtin plugin"),
            ),
            (
                vec![("kustomization.yaml", "generators: [https://example.com/gen.yaml]\n".to_string())],
                Some("a remote plugin config cannot be checked before the build"),
            ),
            (
                vec![("kustomization.yaml", "Resources: [/etc/passwd]\n".to_string())],
                Some("./kustomization.yaml: resources \"/etc/passwd\" escapes"),
            ),
            (
                vec![("kustomization.yaml", "resources: [git@x/../../../../etc/passwd]\n".to_string())],
                Some("escapes the artifact root"),
            ),
            (
                vec![("kustomization.yaml", "resources: ['file:///etc/repo']\n".to_string())],
                Some("resources \"/etc/repo\" escapes"),
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            for (rel, text) in &tree {
                write(dir.path(), rel, text);
            }
            let path = if tree[0].0.starts_with("apps/") { "apps" } else { "." };
            let spec = KustomizationSpec {
                path: Some(path.into()),
                ..Default::default()
            };
            match (prepare(dir.path(), &spec), refused) {
                (Ok(_), None) => {}
                (Err(e), Some(needle)) => {
                    assert!(e.to_string().contains(needle), "{tree:?}: {e}");
                    assert!(e.is_bad_input());
                }
                (got, _) => panic!("{tree:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn no_remote_bases_refuses_every_remote_reference_by_table() {
        for (kustomization, needle) in [
            (
                "resources: [github.com/org/repo//base?ref=v1]\n",
                "resources \"github.com/org/repo//base?ref=v1\" is remote",
            ),
            (
                "resources: [https://example.com/x.yaml]\n",
                "resources \"https://example.com/x.yaml\" is remote",
            ),
            (
                "components: [ssh://git@example.com/org/repo]\n",
                "components",
            ),
            (
                "patches: [{path: 'https://example.com/p.yaml'}]\n",
                "patches[].path",
            ),
            (
                "generators: [https://example.com/gen.yaml]\n",
                "generators[0]",
            ),
            (
                "helmCharts: [{name: db, repo: 'https://charts.example.com'}]\n",
                "helmCharts[].repo",
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), "kustomization.yaml", kustomization);
            let e = prepare_with(dir.path(), &KustomizationSpec::default(), true).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(needle), "{kustomization}: {text}");
            assert!(
                text.contains("remote bases are disallowed (--no-remote-bases), all resources must refer to local files included in the source artifact"),
                "{text}"
            );
            assert!(e.is_bad_input());
            // Allowed by default (kustomize fetches it), except a plugin config it cannot check.
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), "kustomization.yaml", kustomization);
            let allowed = prepare(dir.path(), &KustomizationSpec::default());
            assert_eq!(
                allowed.is_ok(),
                !kustomization.starts_with("generators"),
                "{kustomization}: {allowed:?}"
            );
        }
    }

    #[test]
    fn prepare_writes_back_to_the_file_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "Kustomization", "resources: []\n");
        let spec = KustomizationSpec {
            target_namespace: Some("t".into()),
            ..Default::default()
        };
        let built = prepare(root, &spec).unwrap();
        assert_eq!(built, root.to_path_buf());
        assert!(!root.join("kustomization.yaml").exists());
        let text = std::fs::read_to_string(root.join("Kustomization")).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["namespace"], "t");
    }
}
