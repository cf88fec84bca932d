//! Keeping the build inside the artifact root.
//!
//! kustomize-controller builds on a filesystem that refuses any path outside the artifact
//! root. An external kustomize with load restrictions off has no such guard, so before the
//! build every path the tree can make kustomize read (`spec.path`, `spec.components`, and the
//! file references of every kustomization file below the root) is checked lexically. That is
//! sound because the unpacked tree holds no symlinks (the untar skips them, and `--path` is
//! copied the same way), so a path's lexical form is where it leads.

use std::path::{Component, Path, PathBuf};

use super::RenderError;

/// Resolves `relative` against `base` (a directory inside `root`) without touching the disk,
/// refusing absolute paths and any `..` that climbs above `root`. `what` names the reference.
pub fn join_within(
    root: &Path,
    base: &Path,
    relative: &str,
    what: &str,
) -> Result<PathBuf, RenderError> {
    let escape = || RenderError::Escapes {
        what: what.to_string(),
        path: relative.to_string(),
    };
    let rel = Path::new(relative);
    if rel.is_absolute() {
        return Err(escape());
    }
    let base_rel = base.strip_prefix(root).map_err(|_| escape())?;
    let mut parts: Vec<std::ffi::OsString> = Vec::new();
    for c in base_rel.components().chain(rel.components()) {
        match c {
            Component::Normal(p) => parts.push(p.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(escape());
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(escape()),
        }
    }
    let mut out = root.to_path_buf();
    out.extend(parts);
    Ok(out)
}

/// Whether a kustomize reference is remote (kustomize fetches it; not a path in the tree).
/// The prefixes are kustomize's own list, as Flux's `IsLocalRelativePath` uses it.
pub fn is_remote(reference: &str) -> bool {
    const REMOTE: [&str; 8] = [
        "git::",
        "gh:",
        "ssh://",
        "https://",
        "http://",
        "git@",
        "github.com:",
        "github.com/",
    ];
    let lower = reference.to_ascii_lowercase();
    REMOTE
        .iter()
        .any(|p| p.len() < lower.len() && lower.starts_with(p))
}

/// Flux's rule for `spec.components`: local and relative (`file://` stripped before the check).
pub fn is_local_relative(path: &str) -> bool {
    if is_remote(path) {
        return false;
    }
    let lower = path.to_ascii_lowercase();
    let stripped = lower.strip_prefix("file://").unwrap_or(&lower);
    !Path::new(path).is_absolute() && !Path::new(stripped).is_absolute()
}

/// The local file references of one kustomization file (parsed), as `(field, path)`.
/// Inline values (patches given as text, generator literals) are not paths and are skipped.
pub fn references(kustomization: &serde_json::Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let strings = |field: &str, out: &mut Vec<(String, String)>| {
        if let Some(items) = kustomization.get(field).and_then(|v| v.as_array()) {
            for item in items.iter().filter_map(|v| v.as_str()) {
                out.push((field.to_string(), item.to_string()));
            }
        }
    };
    for field in [
        "resources",
        "bases",
        "components",
        "crds",
        "configurations",
        "generators",
        "transformers",
        "validators",
    ] {
        strings(field, &mut out);
    }
    if let Some(items) = kustomization
        .get("patchesStrategicMerge")
        .and_then(|v| v.as_array())
    {
        for item in items.iter().filter_map(|v| v.as_str()) {
            // An inline patch is YAML text; a path is one line.
            if !item.contains('\n') && !item.trim_start().starts_with('{') {
                out.push(("patchesStrategicMerge".into(), item.to_string()));
            }
        }
    }
    for field in ["patches", "patchesJson6902", "replacements"] {
        if let Some(items) = kustomization.get(field).and_then(|v| v.as_array()) {
            for item in items {
                if let Some(p) = item.get("path").and_then(|v| v.as_str()) {
                    out.push((format!("{field}[].path"), p.to_string()));
                }
            }
        }
    }
    if let Some(p) = kustomization
        .get("openapi")
        .and_then(|o| o.get("path"))
        .and_then(|v| v.as_str())
    {
        out.push(("openapi.path".into(), p.to_string()));
    }
    for field in ["configMapGenerator", "secretGenerator"] {
        if let Some(items) = kustomization.get(field).and_then(|v| v.as_array()) {
            for item in items {
                if let Some(files) = item.get("files").and_then(|v| v.as_array()) {
                    for f in files.iter().filter_map(|v| v.as_str()) {
                        // `key=path` or `path`.
                        let path = f.split_once('=').map_or(f, |(_, p)| p);
                        out.push((format!("{field}[].files"), path.to_string()));
                    }
                }
                if let Some(envs) = item.get("envs").and_then(|v| v.as_array()) {
                    for e in envs.iter().filter_map(|v| v.as_str()) {
                        out.push((format!("{field}[].envs"), e.to_string()));
                    }
                }
                if let Some(e) = item.get("env").and_then(|v| v.as_str()) {
                    out.push((format!("{field}[].env"), e.to_string()));
                }
            }
        }
    }
    out.retain(|(_, p)| !is_remote(p));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_within_by_table() {
        let root = Path::new("/r");
        let base = Path::new("/r/apps/prod");
        for (rel, expected) in [
            ("x.yaml", Some("/r/apps/prod/x.yaml")),
            ("./x.yaml", Some("/r/apps/prod/x.yaml")),
            ("../base", Some("/r/apps/base")),
            ("../../shared", Some("/r/shared")),
            ("../../../etc/passwd", None),
            ("/etc/passwd", None),
            ("a/../../..", Some("/r")),
            ("a/../../../..", None),
        ] {
            let got = join_within(root, base, rel, "test").ok();
            assert_eq!(got, expected.map(PathBuf::from), "{rel}");
        }
    }

    #[test]
    fn component_paths_by_table() {
        for (path, local) in [
            ("../components/a", true),
            ("components/a", true),
            ("/abs", false),
            ("file:///abs", false),
            ("https://github.com/x/y", false),
            ("github.com/x/y", false),
            ("git@github.com:x/y", false),
        ] {
            assert_eq!(is_local_relative(path), local, "{path}");
        }
    }

    #[test]
    fn references_lists_every_path_field() {
        let k = serde_json::json!({
            "resources": ["a.yaml", "../base", "https://github.com/x/y//z"],
            "components": ["../c"],
            "patchesStrategicMerge": ["p.yaml", "apiVersion: v1\nkind: X\n"],
            "patches": [{"path": "q.yaml"}, {"patch": "- op: add"}],
            "configMapGenerator": [{"name": "c", "files": ["k=../f.txt", "g.txt"], "envs": ["e.env"]}],
            "secretGenerator": [{"name": "s", "env": "s.env"}],
            "openapi": {"path": "schema.json"}
        });
        let got: Vec<String> = references(&k).into_iter().map(|(_, p)| p).collect();
        assert_eq!(
            got,
            [
                "a.yaml",
                "../base",
                "../c",
                "p.yaml",
                "q.yaml",
                "schema.json",
                "../f.txt",
                "g.txt",
                "e.env",
                "s.env"
            ]
        );
    }
}
