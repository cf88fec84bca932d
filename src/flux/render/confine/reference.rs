//! What the checks find in a kustomization file or a plugin config: each reference and how
//! kustomize uses it, or why the file cannot be checked.

use serde_json::Value;

use crate::flux::render::generator;

/// How kustomize uses a reference found in a kustomization file or a plugin config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// A file kustomize loads (`ifc.Loader.Load`): a path from the kustomization's directory,
    /// or an http(s) URL it downloads.
    Load,
    /// `resources`, `bases`, `components`: a file, a kustomization directory (followed), or a
    /// remote base kustomize clones or downloads.
    Follow,
    /// A `generators`, `transformers` or `validators` entry: inline configs, a file of configs,
    /// or a kustomization directory whose resources are the configs.
    Plugins,
    /// A directory helm reads below (`chartHome`, a chart under it).
    Dir,
    /// Where helm pulls a chart from: never a path, always remote.
    Repo,
}

/// One reference: the field it is in (as the refusal names it), the text, how it is used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub field: String,
    pub reference: String,
    pub used: Use,
}

/// Why a kustomization file or a plugin config cannot be checked: the field (empty for the
/// whole config) and what is wrong with it. It never quotes a file the config points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unchecked {
    pub field: String,
    pub reason: String,
}

impl Unchecked {
    pub(super) fn shape(field: &str, expected: &str, found: &Value) -> Self {
        Self {
            field: field.to_string(),
            reason: format!(
                "expected {expected}, found {}: a field kustomize reads a path from must have its shape",
                generator::json_type(found)
            ),
        }
    }
}
