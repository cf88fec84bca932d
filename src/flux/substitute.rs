//! Flux's post-build variable substitution, as a pure function (issue #4).
//!
//! kustomize-controller (fluxcd/pkg `kustomize/kustomize_varsub.go`) substitutes each rendered
//! object separately: it skips objects labelled or annotated
//! `kustomize.toolkit.fluxcd.io/substitute: disabled`, skips everything when no variable exists
//! (unless `substituteStrategy: Always`), otherwise runs fluxcd/pkg `envsubst` over the object's
//! YAML text and parses the result again. The grammar is reproduced quirk for quirk (see
//! `parse`), because a size written as `${SIZE:=10Gi}` must come out exactly as Flux applies it.

mod eval;
mod glob;
mod parse;
mod vars;

use serde_json::Value;

pub use vars::{VARIABLE_NAME_PATTERN, VarSource, VarSourceKind, collect_variables, is_valid_name};

/// Variables for substitution, by name. Built from `postBuild.substituteFrom` then `postBuild.substitute`.
pub type Variables = std::collections::BTreeMap<String, String>;

/// The label and annotation that opt an object out of substitution, and its value.
pub const DISABLE_KEY: &str = "kustomize.toolkit.fluxcd.io/substitute";
pub const DISABLED_VALUE: &str = "disabled";

/// A `${...}` expression Flux's parser rejects; the texts are fluxcd/pkg `envsubst/parse`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FluxSyntaxError {
    #[error("bad substitution")]
    BadSubstitution,
    #[error("missing closing brace")]
    MissingClosingBrace,
    #[error("unable to parse variable name")]
    ParseVariableName,
    #[error("unable to parse substitution within function")]
    ParseFuncSubstitution,
    #[error("unable to parse default function")]
    ParseDefaultFunction,
    /// Ours: Go's growable stacks accept any depth, a Rust stack does not.
    #[error("substitutions nested deeper than {} levels", parse::MAX_DEPTH)]
    TooDeep,
}

/// Why a substitution failed. Messages follow Flux's where Flux has one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubstituteError {
    #[error("{0}")]
    Invalid(String),
    /// The text has a `${...}` Flux cannot parse.
    #[error("{0}")]
    Syntax(FluxSyntaxError),
    /// Strict mode: a variable without default is unset. Flux: `variable not set (strict mode): "X"`.
    #[error("variable not set (strict mode): {}", go_quote(name))]
    VariableNotSet { name: String },
    /// A byte-offset operator (`${v:n}`, `${v#p}`) split a multi-byte character; Flux fails
    /// on the same input when it parses the resulting YAML.
    #[error(
        "substitution produced invalid UTF-8 (a byte-offset operator split a multi-byte character)"
    )]
    InvalidUtf8,
    #[error("'{name}' var name is invalid, must match '{pattern}'", pattern = VARIABLE_NAME_PATTERN)]
    InvalidVariableName { name: String },
    /// A non-optional `substituteFrom` object is missing (Flux quotes the API's NotFound).
    #[error("substitute from '{kind}/{name}' error: {resource} \"{name}\" not found")]
    SourceNotFound {
        kind: VarSourceKind,
        resource: &'static str,
        name: String,
    },
    #[error("substituteFrom kind '{kind}' is not supported, must be ConfigMap or Secret")]
    UnknownSourceKind { kind: String },
    /// The substituted text is no longer valid YAML (Flux: `YAMLToJSON: ...`).
    #[error("YAMLToJSON: {message}")]
    Yaml { message: String },
    /// The object could not be turned into YAML text, or the given text is not YAML.
    #[error("cannot handle the object as YAML: {message}")]
    Document { message: String },
    /// Any of the above for one object, worded like kustomize-controller's build failure.
    #[error("post build failed for '{object}': {}", flux_chain(reason))]
    Object {
        /// `Kind/namespace/name` (or `Kind/name` when cluster-scoped).
        object: String,
        reason: Box<SubstituteError>,
    },
}

/// The wrapping kustomize-controller adds between the object and the envsubst error.
fn flux_chain(reason: &SubstituteError) -> String {
    match reason {
        SubstituteError::Syntax(_)
        | SubstituteError::VariableNotSet { .. }
        | SubstituteError::InvalidUtf8 => {
            format!("envsubst error: variable substitution failed: {reason}")
        }
        SubstituteError::InvalidVariableName { .. } | SubstituteError::Yaml { .. } => {
            format!("envsubst error: {reason}")
        }
        other => other.to_string(),
    }
}

/// Go's `%q` for the characters a variable name can hold.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// How substitution runs, from the Kustomization's `postBuild` and the controller's flags.
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

/// Whether the object opts out with the label or annotation `kustomize.toolkit.fluxcd.io/substitute: disabled`.
pub fn substitution_disabled(object: &Value) -> bool {
    ["labels", "annotations"].iter().any(|field| {
        object
            .pointer(&format!("/metadata/{field}"))
            .and_then(|m| m.get(DISABLE_KEY))
            .and_then(Value::as_str)
            == Some(DISABLED_VALUE)
    })
}

/// `Kind/namespace/name`, the way the converger names objects in errors.
pub fn object_id(object: &Value) -> String {
    let field = |path: &str| object.pointer(path).and_then(Value::as_str).unwrap_or("");
    let (kind, namespace, name) = (
        field("/kind"),
        field("/metadata/namespace"),
        field("/metadata/name"),
    );
    if namespace.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}/{namespace}/{name}")
    }
}

fn in_object(object: &Value, reason: SubstituteError) -> SubstituteError {
    SubstituteError::Object {
        object: object_id(object),
        reason: Box::new(reason),
    }
}

/// Serialises like kyaml for substitution purposes: plain scalars where possible, literal
/// blocks for multi-line strings, and never folded lines (a fold inside `${...}` would change
/// the expression).
fn to_yaml(object: &Value) -> Result<String, SubstituteError> {
    let options = serde_saphyr::ser_options! {
        folded_wrap_chars: usize::MAX,
    };
    serde_saphyr::to_string_with_options(object, options).map_err(|e| SubstituteError::Document {
        message: e.to_string(),
    })
}

/// Parses like sigs.k8s.io/yaml (YAML 1.1 scalars: `yes`/`on` are booleans, `0755` is octal).
fn from_yaml(text: &str) -> Result<Value, String> {
    let options = serde_saphyr::options! {
        legacy_octal_numbers: true,
    };
    serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|e| e.to_string())
}

/// Whether [`substitute_object`] would change anything at all for this object.
fn applies(object: &Value, vars: &Variables, options: &Options) -> bool {
    !substitution_disabled(object) && (options.always || !vars.is_empty())
}

/// Substitutes `${...}` in one rendered object, as kustomize-controller does on the object's YAML text.
/// Objects labelled or annotated `kustomize.toolkit.fluxcd.io/substitute: disabled` are returned unchanged.
///
/// The object is first written as YAML; quoting then follows this crate's emitter rather than
/// the source file. When the object's YAML text as kustomize printed it is at hand, prefer
/// [`substitute_document`], which substitutes that text exactly as Flux does.
pub fn substitute_object(
    object: &Value,
    vars: &Variables,
    options: &Options,
) -> Result<Value, SubstituteError> {
    if !applies(object, vars, options) {
        return Ok(object.clone());
    }
    let text = to_yaml(object).map_err(|e| in_object(object, e))?;
    substitute_text(&text, object, vars, options)
}

/// Substitutes one YAML document (one object, as `kustomize build` printed it) and returns the
/// resulting object. This is the closest match to Flux: quoting in the text decides whether
/// `replicas: ${N}` becomes a number and `replicas: "${N}"` a string, as it does for Flux.
pub fn substitute_document(
    text: &str,
    vars: &Variables,
    options: &Options,
) -> Result<Value, SubstituteError> {
    let object = from_yaml(text).map_err(|message| SubstituteError::Document { message })?;
    if !applies(&object, vars, options) {
        return Ok(object);
    }
    substitute_text(text, &object, vars, options)
}

/// Splits a multi-document YAML stream (e.g. `kustomize build` output) into its documents, at
/// lines that are exactly `---` plus optional spaces or tabs, as fluxcd/pkg's
/// `splitYAMLDocuments` does. Empty documents are kept; callers skip them.
pub fn split_documents(stream: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in stream.split_inclusive('\n') {
        let content = line.trim_end_matches('\n').trim_end_matches('\r');
        let is_separator = content
            .strip_prefix("---")
            .is_some_and(|rest| rest.chars().all(|c| c == ' ' || c == '\t'));
        if is_separator {
            docs.push(&stream[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    docs.push(&stream[start..]);
    docs
}

/// Substitutes every object of a `kustomize build` output stream separately, as
/// kustomize-controller does per resource, and returns the objects in order (empty documents
/// dropped). Each object keeps the quoting kustomize printed, so results match Flux's.
pub fn substitute_stream(
    stream: &str,
    vars: &Variables,
    options: &Options,
) -> Result<Vec<Value>, SubstituteError> {
    let mut objects = Vec::new();
    for doc in split_documents(stream) {
        let object = substitute_document(doc, vars, options)?;
        if !object.is_null() {
            objects.push(object);
        }
    }
    Ok(objects)
}

fn substitute_text(
    text: &str,
    object: &Value,
    vars: &Variables,
    options: &Options,
) -> Result<Value, SubstituteError> {
    vars::validate_names(vars).map_err(|e| in_object(object, e))?;
    let out = envsubst(text, vars, options.strict).map_err(|e| in_object(object, e))?;
    from_yaml(&out).map_err(|message| in_object(object, SubstituteError::Yaml { message }))
}
