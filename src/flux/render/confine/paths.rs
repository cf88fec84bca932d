//! The lexical path checks: a path joined inside the root or refused, and what kustomize
//! fetches instead of reading from the tree.

use std::path::{Component, Path, PathBuf};

use crate::flux::render::error::RenderError;

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

/// Whether kustomize downloads `reference` over http(s) when it loads it as a file
/// (`loader.IsRemoteFile`: the URL's scheme, which Go lower-cases).
pub fn is_http(reference: &str) -> bool {
    let lower = reference.to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// Whether kustomize fetches `reference` instead of reading the tree: Flux's list
/// ([`is_remote`]), an http(s) URL, or anything `git.NewRepoSpecFromURL` takes for a git
/// repository to clone (api/internal/git/repospec.go: after an optional `git::`, an ssh, https,
/// http or file URL, a `user@host:path` address, a github.com path).
pub fn is_fetched(reference: &str) -> bool {
    if is_remote(reference) || is_http(reference) {
        return true;
    }
    let lower = reference.to_ascii_lowercase();
    let rest = lower.strip_prefix("git::").unwrap_or(&lower);
    if ["ssh://", "https://", "http://", "file://"]
        .iter()
        .any(|s| rest.starts_with(s))
    {
        return true;
    }
    // extractUsername: ^[a-zA-Z][a-zA-Z0-9-]*@
    let mut chars = rest.chars();
    if chars.next().is_some_and(|c| c.is_ascii_alphabetic()) {
        for c in chars {
            if c == '@' {
                return true;
            }
            if !(c.is_ascii_alphanumeric() || c == '-') {
                break;
            }
        }
    }
    rest.starts_with("github.com/") || rest.starts_with("github.com:")
}

/// The path of a `file://` git URL (after an optional `git::`): kustomize clones the local
/// repository there, which is a read of that path.
pub fn file_url_path(reference: &str) -> Option<&str> {
    let lower = reference.to_ascii_lowercase();
    let skip = if lower.starts_with("git::") { 5 } else { 0 };
    lower[skip..]
        .starts_with("file://")
        .then(|| &reference[skip + "file://".len()..])
}
