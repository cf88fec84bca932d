//! Rendering a revision as kustomize-controller does: generator, spec overlay, kustomize build
//! confined to the artifact root, then the per-object post-build steps.
//!
//! The tree under the artifact root is modified in place (the kustomization file is written),
//! so callers pass a scratch copy: an unpacked artifact, or [`copy_tree`] of a local directory.

pub mod build;
pub mod confine;
pub mod generator;
pub mod overlay;
pub mod postbuild;
pub mod resolve;
pub mod sandbox;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

pub use build::{
    DEFAULT_KUSTOMIZE, DEFAULT_MAX_RENDER_BYTES, DEFAULT_RENDER_TIMEOUT, KustomizeCommand,
};
pub use postbuild::Owner;

use crate::flux::artifact::UnpackLimits;
use crate::flux::substitute::{SubstituteError, Variables};

/// A StatefulSet of the render, with the namespace it will be applied in.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedStatefulSet {
    pub namespace: String,
    pub name: String,
    pub object: Value,
}

/// The objects kustomize-controller would apply, in kustomize's output order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rendered {
    pub objects: Vec<Value>,
    pub statefulsets: Vec<RenderedStatefulSet>,
}

/// What a render needs besides the tree.
#[derive(Clone, Debug)]
pub struct RenderRequest<'a> {
    /// The artifact root (a scratch copy: it is modified).
    pub root: &'a Path,
    pub owner: Owner<'a>,
    /// Already collected from `substituteFrom` and `substitute`.
    pub variables: &'a Variables,
    /// Strict post-build substitution (Flux's default).
    pub strict: bool,
    pub kustomize: &'a KustomizeCommand,
}

/// Why a render failed. Each names the file, path or object at fault.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{what} {path:?} escapes the artifact root")]
    Escapes { what: String, path: String },
    /// A reference the build could follow out of the root without it being seen here: an
    /// unknown shape, a plugin that is not builtin, a remote plugin config. Never quotes the
    /// file a reference points at.
    #[error("{what}: {reason}")]
    Unconfined { what: String, reason: String },
    /// `--no-remote-bases`, in the words of kustomize-controller's flag of that name.
    #[error(
        "{what} {reference:?} is remote: remote bases are disallowed (--no-remote-bases), all resources must refer to local files included in the source artifact"
    )]
    RemoteBase { what: String, reference: String },
    #[error("kustomization path not found: {path:?} is not a directory in the artifact")]
    PathNotFound { path: String },
    #[error("failed to decode Kubernetes YAML from {file}: {message}")]
    InvalidYaml { file: String, message: String },
    #[error("kustomization file {file}: {message}")]
    KustomizationFile { file: String, message: String },
    #[error("kustomization overlay: {message}")]
    Overlay { message: String },
    #[error("invalid kustomize command {command:?}: it is empty")]
    BadCommand { command: String },
    #[error("cannot run kustomize (`{command}`): {error}")]
    KustomizeSpawn {
        command: String,
        error: std::io::Error,
    },
    #[error("kustomize build failed for {dir} (`{command}`, {status}): {stderr}")]
    KustomizeFailed {
        command: String,
        dir: String,
        status: String,
        stderr: String,
        /// kustomize said it could not fetch a remote base: the network, not the tree.
        remote: bool,
    },
    /// Killed by a signal not of our sending (the OOM killer, an operator): this host.
    #[error("kustomize build of {dir} (`{command}`) was killed by {signal}: {stderr}")]
    KustomizeKilled {
        command: String,
        dir: String,
        signal: String,
        stderr: String,
    },
    #[error(
        "kustomize build of {dir} (`{command}`) timed out after {}: killed (--render-timeout)",
        humantime::format_duration(*after)
    )]
    KustomizeTimeout {
        command: String,
        dir: String,
        after: std::time::Duration,
    },
    /// The same overlay always prints as much: input, not this host.
    #[error(
        "kustomize build of {dir} (`{command}`) printed more than the maximum render size of {limit} bytes: killed (--max-render-size)"
    )]
    KustomizeOutputTooLarge {
        command: String,
        dir: String,
        limit: u64,
    },
    #[error("kustomize output: {message}")]
    Output { message: String },
    #[error("built object #{index}: {message}")]
    InvalidObject { index: usize, message: String },
    /// Flux's own wording, naming the object: `post build failed for '<object>': ...`.
    #[error("{error}")]
    Substitute { error: SubstituteError },
    #[error(
        "{object} namespace not specified: kustomize-controller would refuse this revision (set spec.targetNamespace or metadata.namespace)"
    )]
    NoNamespace { object: String },
    /// A local tree larger than an artifact may unpack to.
    #[error("{file}: {what}")]
    TooLarge { file: String, what: String },
    #[error("{context}: {error}")]
    Io {
        context: String,
        error: std::io::Error,
    },
}

impl RenderError {
    /// Whether the revision or the Kustomization is wrong (exit 2, refused) rather than this
    /// host or the network (exit 1, retried): only what no retry of the same input can fix.
    pub fn is_bad_input(&self) -> bool {
        match self {
            Self::Io { .. }
            | Self::KustomizeSpawn { .. }
            | Self::KustomizeKilled { .. }
            | Self::KustomizeTimeout { .. } => false,
            Self::KustomizeFailed { remote, .. } => !remote,
            _ => true,
        }
    }
}

/// Renders the tree under `request.root` for the Kustomization `request.owner`.
pub async fn render(request: &RenderRequest<'_>) -> Result<Rendered, RenderError> {
    let root = request.root.to_path_buf();
    let spec = request.owner.spec.clone();
    let no_remote_bases = request.kustomize.no_remote_bases;
    let dir = tokio::task::spawn_blocking(move || prepare_with(&root, &spec, no_remote_bases))
        .await
        .map_err(|e| RenderError::Io {
            context: "preparing the kustomization".into(),
            error: std::io::Error::other(e.to_string()),
        })??;
    let shown = generator::display_relative(request.root, &dir);
    let text = request
        .kustomize
        .build_within(request.root, &dir, &shown)
        .await?;
    let objects =
        postbuild::substitute_built(&text, &request.owner, request.variables, request.strict)?;
    let objects = postbuild::post_build(objects, &request.owner)?;
    let statefulsets = postbuild::statefulsets(&objects)?;
    tracing::debug!(
        kustomization = %format!("{}/{}", request.owner.namespace, request.owner.name),
        objects = objects.len(),
        statefulsets = statefulsets.len(),
        "rendered"
    );
    Ok(Rendered {
        objects,
        statefulsets,
    })
}

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

fn read_kustomization(root: &Path, file: &Path) -> Result<Value, RenderError> {
    let shown = generator::display_relative(root, file);
    let text = std::fs::read_to_string(file).map_err(|error| RenderError::Io {
        context: format!("reading {shown}"),
        error,
    })?;
    let docs: Vec<Value> = crate::manifest::with_parse_stack(|| {
        serde_saphyr::from_multiple_with_options(&text, crate::manifest::yaml_options())
    })
    .map_err(|e| RenderError::KustomizationFile {
        file: shown.clone(),
        message: e.to_string(),
    })?;
    match docs.len() {
        0 => Ok(Value::Object(Default::default())),
        1 => Ok(docs.into_iter().next().unwrap_or_default()),
        n => Err(RenderError::KustomizationFile {
            file: shown,
            message: format!("expected one YAML document, found {n}"),
        }),
    }
}

/// The check that every reference of the tree stays inside the artifact root (and, with
/// `no_remote_bases`, that none is fetched), before anything is built or fetched.
struct Confinement<'a> {
    root: &'a Path,
    no_remote_bases: bool,
}

impl Confinement<'_> {
    /// Follows the kustomization files reachable from `dir` and refuses any reference that
    /// leaves the root, in the kustomization files and in every plugin config they list.
    fn check(&self, dir: &Path) -> Result<(), RenderError> {
        let mut pending = vec![dir.to_path_buf()];
        let mut seen = HashSet::new();
        let mut parsed = HashSet::new();
        while let Some(d) = pending.pop() {
            if !seen.insert(d.clone()) {
                continue;
            }
            let Some(file) = generator::find_kustomization_file(&d) else {
                continue;
            };
            let shown = generator::display_relative(self.root, &file);
            let kustomization = read_kustomization(self.root, &file)?;
            let references =
                confine::references(&kustomization).map_err(|u| unconfined(&shown, u))?;
            for r in references {
                let what = format!("{shown}: {}", r.field);
                if r.used == confine::Use::Plugins {
                    self.plugin_entry(&d, &what, &r.reference)?;
                    continue;
                }
                let Some(target) = self.reference(&d, &what, &r.reference, r.used)? else {
                    continue;
                };
                if r.used == confine::Use::Follow && target.is_dir() {
                    pending.push(target);
                } else if target.is_file() && parsed.insert(target.clone()) {
                    self.alias_budget(&target)?;
                }
            }
        }
        Ok(())
    }

    /// kustomize parses the YAML files a kustomization names (resources, patches, configs)
    /// with no budget on alias expansion: a billion-laughs file there would be expanded by the
    /// build, in gigabytes. Each such file that has an alias at all is parsed here first under
    /// the shared budget ([`crate::manifest::yaml_options`]), and refused only when that budget
    /// is breached; any other parse error is kustomize's to report, as it always was.
    fn alias_budget(&self, file: &Path) -> Result<(), RenderError> {
        let Ok(text) = std::fs::read_to_string(file) else {
            return Ok(());
        };
        if !text.contains('*') {
            return Ok(());
        }
        let parsed = crate::manifest::with_parse_stack(|| {
            serde_saphyr::from_multiple_with_options::<Value>(
                &text,
                crate::manifest::yaml_options(),
            )
        });
        match parsed {
            // The breach may come wrapped (with the document's location): its text says so.
            Err(e) if e.to_string().contains("budget breached") => Err(RenderError::InvalidYaml {
                file: generator::display_relative(self.root, file),
                message: e.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Checks one reference made from `dir`; the path it names in the tree, if it names one.
    fn reference(
        &self,
        dir: &Path,
        what: &str,
        reference: &str,
        used: confine::Use,
    ) -> Result<Option<PathBuf>, RenderError> {
        let remote = used == confine::Use::Repo || confine::is_fetched(reference);
        if self.no_remote_bases && remote {
            return Err(RenderError::RemoteBase {
                what: what.to_string(),
                reference: reference.to_string(),
            });
        }
        match used {
            confine::Use::Repo => return Ok(None),
            // Downloaded, not read from the disk.
            confine::Use::Load | confine::Use::Follow if confine::is_http(reference) => {
                return Ok(None);
            }
            _ => {}
        }
        if used == confine::Use::Follow
            && let Some(path) = confine::file_url_path(reference)
        {
            // A clone of the local repository at that path.
            confine::join_within(self.root, dir, path, what)?;
        }
        // Whatever kustomize does not fetch it reads as a path, so every other reference is
        // checked as one (a git URL that is not one is then a harmless relative name).
        confine::join_within(self.root, dir, reference, what).map(Some)
    }

    /// One `generators`/`transformers`/`validators` entry of the kustomization in `dir`:
    /// inline configs, a file of configs, or a kustomization directory whose resources are
    /// configs. The configs' own paths are relative to `dir` (kustomize loads every plugin
    /// with the listing kustomization's loader).
    fn plugin_entry(&self, dir: &Path, what: &str, entry: &str) -> Result<(), RenderError> {
        let inline = inline_configs(entry);
        if inline.is_none() && confine::is_fetched(entry) {
            if self.no_remote_bases {
                return Err(RenderError::RemoteBase {
                    what: what.to_string(),
                    reference: entry.to_string(),
                });
            }
            return Err(RenderError::Unconfined {
                what: format!("{what} {entry:?}"),
                reason: "a remote plugin config cannot be checked before the build: refused".into(),
            });
        }
        for (i, config) in inline.iter().flatten().enumerate() {
            self.config(dir, what, &format!("inline #{i}"), config)?;
        }
        // kustomize reads the entry as a path when it does not parse as configs, so it is
        // checked as one whatever this parser made of it.
        let target = confine::join_within(self.root, dir, entry, what)?;
        if target.is_file() {
            self.config_file(dir, what, &target, entry)?;
        } else if target.is_dir() {
            self.config_dir(dir, what, &target, &mut HashSet::new())?;
        }
        Ok(())
    }

    fn config_file(
        &self,
        dir: &Path,
        what: &str,
        file: &Path,
        source: &str,
    ) -> Result<(), RenderError> {
        let configs = read_documents(self.root, file)?;
        let many = configs.len() > 1;
        for (i, config) in configs.iter().enumerate() {
            let source = if many {
                format!("{source} #{i}")
            } else {
                source.to_string()
            };
            self.config(dir, what, &source, config)?;
        }
        Ok(())
    }

    fn config_dir(
        &self,
        dir: &Path,
        what: &str,
        configs: &Path,
        seen: &mut HashSet<PathBuf>,
    ) -> Result<(), RenderError> {
        if !seen.insert(configs.to_path_buf()) {
            return Ok(());
        }
        let Some(file) = generator::find_kustomization_file(configs) else {
            return Ok(());
        };
        let shown = generator::display_relative(self.root, &file);
        let what = format!("{what} ({shown})");
        let kustomization = read_kustomization(self.root, &file)?;
        let resources =
            confine::plain_resources(&kustomization).map_err(|u| unconfined(&what, u))?;
        for entry in resources {
            let field = format!("{what}: resources");
            if confine::is_fetched(&entry) {
                return Err(if self.no_remote_bases {
                    RenderError::RemoteBase {
                        what: field,
                        reference: entry,
                    }
                } else {
                    RenderError::Unconfined {
                        what: format!("{field} {entry:?}"),
                        reason:
                            "a remote plugin config cannot be checked before the build: refused"
                                .into(),
                    }
                });
            }
            let target = confine::join_within(self.root, configs, &entry, &field)?;
            if target.is_dir() {
                self.config_dir(dir, &what, &target, seen)?;
            } else if target.is_file() {
                let source = generator::display_relative(self.root, &target);
                self.config_file(dir, &what, &target, &source)?;
            }
        }
        Ok(())
    }

    /// One plugin config found from `what` in `source`.
    fn config(
        &self,
        dir: &Path,
        what: &str,
        source: &str,
        config: &Value,
    ) -> Result<(), RenderError> {
        let (kind, references) = confine::plugin_references(config)
            .map_err(|u| unconfined(&format!("{what} ({source})"), u))?;
        let what = format!("{what} ({kind} {source})");
        for r in references {
            self.reference(dir, &format!("{what}: {}", r.field), &r.reference, r.used)?;
        }
        Ok(())
    }
}

fn unconfined(what: &str, u: confine::Unchecked) -> RenderError {
    RenderError::Unconfined {
        what: if u.field.is_empty() {
            what.to_string()
        } else {
            format!("{what}: {}", u.field)
        },
        reason: u.reason,
    }
}

/// `entry` as inline plugin configs, when it parses as YAML mappings (what kustomize tries
/// first: `NewResMapFromBytes`).
fn inline_configs(entry: &str) -> Option<Vec<Value>> {
    let docs: Vec<Value> = crate::manifest::with_parse_stack(|| {
        serde_saphyr::from_multiple_with_options(entry, crate::manifest::yaml_options())
    })
    .ok()?;
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    (!docs.is_empty() && docs.iter().all(Value::is_object)).then_some(docs)
}

/// The YAML documents of a file of plugin configs in the tree.
fn read_documents(root: &Path, file: &Path) -> Result<Vec<Value>, RenderError> {
    let shown = generator::display_relative(root, file);
    let text = std::fs::read_to_string(file).map_err(|error| RenderError::Io {
        context: format!("reading {shown}"),
        error,
    })?;
    let docs: Vec<Value> = crate::manifest::with_parse_stack(|| {
        serde_saphyr::from_multiple_with_options(&text, crate::manifest::yaml_options())
    })
    .map_err(|e| RenderError::InvalidYaml {
        file: shown,
        message: e.to_string(),
    })?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Parses kustomize's YAML stream into objects, with the shared parser's raised budget (a
/// render of thousands of objects is one stream). `*List` kinds are not flattened: kustomize
/// already did, and a custom kind named `...List` is an object of its own.
pub fn parse_stream(text: &str) -> Result<Vec<Value>, RenderError> {
    let docs: Vec<Value> = crate::manifest::with_parse_stack(|| {
        serde_saphyr::from_multiple_with_options(text, crate::manifest::yaml_options())
    })
    .map_err(|e| RenderError::Output {
        message: e.to_string(),
    })?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Copies a local tree (offline `--path`) into `dest` the way Flux packs an artifact:
/// regular files and directories only, symlinks dropped.
pub fn copy_tree(src: &Path, dest: &Path) -> Result<(), RenderError> {
    copy_tree_within(src, dest, &UnpackLimits::default())
}

/// [`copy_tree`] under the caps an artifact is unpacked with, so a local tree reaches the render
/// no larger than an artifact could: each file is measured before it is read.
pub fn copy_tree_within(src: &Path, dest: &Path, limits: &UnpackLimits) -> Result<(), RenderError> {
    let mut copied = CopyTotals::default();
    copy_dir(src, src, dest, limits, &mut copied)
}

#[derive(Default)]
struct CopyTotals {
    bytes: u64,
    entries: u64,
}

fn copy_dir(
    root: &Path,
    src: &Path,
    dest: &Path,
    limits: &UnpackLimits,
    copied: &mut CopyTotals,
) -> Result<(), RenderError> {
    let io = |p: &Path| {
        let context = format!("copying {}", p.display());
        move |error| RenderError::Io { context, error }
    };
    for entry in std::fs::read_dir(src).map_err(io(src))? {
        let entry = entry.map_err(io(src))?;
        let path = entry.path();
        let file_type = entry.file_type().map_err(io(&path))?;
        let target = dest.join(entry.file_name());
        copied.entries += 1;
        let too_large = |what: String| RenderError::TooLarge {
            file: generator::display_relative(root, &path),
            what,
        };
        if copied.entries > limits.max_entries {
            return Err(too_large(format!(
                "more than {} files and directories in the tree",
                limits.max_entries
            )));
        }
        if file_type.is_dir() {
            std::fs::create_dir_all(&target).map_err(io(&target))?;
            copy_dir(root, &path, &target, limits, copied)?;
        } else if file_type.is_file() {
            let size = entry.metadata().map_err(io(&path))?.len();
            if size > limits.max_file_bytes {
                return Err(too_large(format!(
                    "{size} bytes, more than the maximum file size of {} bytes",
                    limits.max_file_bytes
                )));
            }
            copied.bytes = copied.bytes.saturating_add(size);
            if copied.bytes > limits.max_bytes {
                return Err(too_large(format!(
                    "the tree holds more than the maximum of {} bytes",
                    limits.max_bytes
                )));
            }
            std::fs::copy(&path, &target).map_err(io(&path))?;
        }
    }
    Ok(())
}

/// Writes objects as a YAML stream (`---` between documents).
pub fn to_yaml_stream<'a>(
    objects: impl IntoIterator<Item = &'a Value>,
) -> Result<String, RenderError> {
    let mut out = String::new();
    for object in objects {
        let text = serde_saphyr::to_string(object).map_err(|e| RenderError::Output {
            message: format!(
                "serialising {}: {e}",
                crate::flux::substitute::object_id(object)
            ),
        })?;
        out.push_str("---\n");
        out.push_str(&text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
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
    fn a_deep_kustomization_file_reads_with_the_shared_budget() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::from("resources: [a.yaml]\npatches:\n- patch: x\n  target:\n");
        for depth in 0..80 {
            text.push_str(&format!("{}n{depth}:\n", "  ".repeat(depth + 2)));
        }
        text.push_str(&format!("{}leaf: true\n", "  ".repeat(82)));
        assert!(serde_saphyr::from_multiple::<Value>(&text).is_err());
        write(dir.path(), "kustomization.yaml", &text);
        let read = read_kustomization(dir.path(), &dir.path().join("kustomization.yaml")).unwrap();
        assert_eq!(read["resources"][0], "a.yaml");
    }

    #[test]
    fn copy_tree_within_measures_each_file_before_reading_it() {
        let src = tempfile::tempdir().unwrap();
        write(src.path(), "a/small.yaml", "x: 1\n");
        write(src.path(), "a/b/big.yaml", &"#".repeat(300));
        let limits = |max_bytes, max_file_bytes, max_entries| UnpackLimits {
            max_bytes,
            max_file_bytes,
            max_entries,
        };
        for (l, refused) in [
            (limits(1000, 300, 10), None),
            (
                limits(1000, 299, 10),
                Some("./a/b/big.yaml: 300 bytes, more than the maximum file size of 299 bytes"),
            ),
            (
                limits(304, 300, 10),
                Some("more than the maximum of 304 bytes"),
            ),
            (
                limits(1000, 300, 3),
                Some("more than 3 files and directories"),
            ),
        ] {
            let dest = tempfile::tempdir().unwrap();
            match (copy_tree_within(src.path(), dest.path(), &l), refused) {
                (Ok(()), None) => {
                    assert!(dest.path().join("a/b/big.yaml").is_file());
                }
                (Err(e), Some(needle)) => {
                    assert!(e.to_string().contains(needle), "{l:?}: {e}");
                    assert!(e.is_bad_input());
                }
                (got, _) => panic!("{l:?}: {got:?}"),
            }
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

    #[test]
    fn yaml_stream_round_trips() {
        let objects = vec![
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "yes", "y": "1"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
        ];
        let text = to_yaml_stream(&objects).unwrap();
        assert_eq!(parse_stream(&text).unwrap(), objects);
    }
}
