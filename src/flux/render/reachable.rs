//! The walk over what a build can reach: every kustomization file and plugin config from the
//! directory built, each reference checked by [`super::confine`] to stay inside the artifact
//! root (and, with `--no-remote-bases`, to fetch nothing), before anything is built or fetched.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::RenderError;
use super::{confine, generator};

/// The one YAML document of a kustomization file (none is an empty mapping), under the shared
/// parser budget.
pub(super) fn read_kustomization(root: &Path, file: &Path) -> Result<Value, RenderError> {
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
pub(super) struct Confinement<'a> {
    pub(super) root: &'a Path,
    pub(super) no_remote_bases: bool,
}

impl Confinement<'_> {
    /// Follows the kustomization files reachable from `dir` and refuses any reference that
    /// leaves the root, in the kustomization files and in every plugin config they list.
    pub(super) fn check(&self, dir: &Path) -> Result<(), RenderError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
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
}
