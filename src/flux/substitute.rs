//! Flux's post-build variable substitution, as a pure function.
//!
//! kustomize-controller (fluxcd/pkg `kustomize/kustomize_varsub.go`) substitutes each rendered
//! object separately: it skips objects labelled or annotated
//! `kustomize.toolkit.fluxcd.io/substitute: disabled`, skips everything when no variable exists
//! (unless `substituteStrategy: Always`), otherwise runs fluxcd/pkg `envsubst` over the object's
//! YAML text and parses the result again. The grammar is reproduced quirk for quirk (see
//! `parse`), because a size written as `${SIZE:=10Gi}` must come out exactly as Flux applies it.
//!
//! A render gathers the variables once per Kustomization and substitutes kustomize's output:
//!
//! ```
//! use std::collections::BTreeMap;
//! use flux_converger::flux::substitute::{Options, VarSource, collect_variables, substitute_stream};
//!
//! let inline = BTreeMap::from([("SIZE".to_owned(), "20Gi".to_owned())]);
//! // `postBuild.substituteFrom: [{kind: ConfigMap, name: cluster-vars, optional: true}]`, absent.
//! let from = [VarSource::from_config_map("cluster-vars", true, None)];
//! let vars = collect_variables(&from, Some(&inline))?;
//! let built = "kind: PersistentVolumeClaim\nmetadata:\n  name: data\nspec:\n  resources:\n    requests:\n      storage: ${SIZE}\n";
//! let objects = substitute_stream(built, &vars, &Options::default())?;
//! assert_eq!(objects[0]["spec"]["resources"]["requests"]["storage"], "20Gi");
//! # Ok::<(), flux_converger::flux::substitute::SubstituteError>(())
//! ```

mod error;
mod eval;
mod glob;
mod object;
mod parse;
mod vars;

pub use error::{FluxSyntaxError, SubstituteError};
pub use object::{
    object_id, split_documents, substitute_document, substitute_object, substitute_stream,
    substitution_disabled,
};
pub use vars::{VARIABLE_NAME_PATTERN, VarSource, VarSourceKind, collect_variables, is_valid_name};

/// Variables for substitution, by name. Built from `postBuild.substituteFrom` then `postBuild.substitute`.
pub type Variables = std::collections::BTreeMap<String, String>;

/// The label and annotation that opt an object out of substitution, and its value.
pub const DISABLE_KEY: &str = "kustomize.toolkit.fluxcd.io/substitute";
pub const DISABLED_VALUE: &str = "disabled";

/// How substitution runs, from the Kustomization's `postBuild` and the controller's flags.
/// kustomize-controller substitutes only when `spec.postBuild` is set at all; that check is
/// the caller's (with `postBuild` absent, do not call into this module).
#[derive(Clone, Debug)]
pub struct Options {
    /// Strict mode (Flux's default since kustomize-controller 1.9): an unset variable without default fails.
    pub strict: bool,
    /// `postBuild.substituteStrategy: Always` runs substitution even with no variables.
    pub always: bool,
}

impl Default for Options {
    /// kustomize-controller 1.9's defaults: strict on, substitute only with variables.
    fn default() -> Self {
        Options {
            strict: true,
            always: false,
        }
    }
}

struct MapLookup<'a> {
    vars: &'a Variables,
    strict: bool,
}

impl eval::Lookup for MapLookup<'_> {
    /// Non-strict Flux reports every variable as set (empty when missing).
    fn lookup(&self, name: &str) -> (&str, bool) {
        match self.vars.get(name) {
            Some(v) => (v.as_str(), true),
            None => ("", !self.strict),
        }
    }
}

/// Flux's envsubst over one text: only `${...}` expands, `$var` stays, `$${var}` gives
/// `${var}`. Strict: an unset variable referenced without a default-providing operator
/// (`=` `:=` `:-` `:?` `:+`) fails with `variable not set (strict mode): "<name>"`; a set but
/// empty variable is fine. Non-strict: unset variables read as empty.
pub fn envsubst(text: &str, vars: &Variables, strict: bool) -> Result<String, SubstituteError> {
    let nodes = parse::parse(text).map_err(SubstituteError::Syntax)?;
    let mut out = Vec::with_capacity(text.len());
    eval::eval_nodes(&nodes, &MapLookup { vars, strict }, &mut out)
        .map_err(|eval::EvalError::NotSet(name)| SubstituteError::VariableNotSet { name })?;
    String::from_utf8(out).map_err(|_| SubstituteError::InvalidUtf8)
}
