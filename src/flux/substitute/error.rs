//! Errors, worded as Flux words them so that messages can be compared with
//! kustomize-controller's conditions and events.

use super::VarSourceKind;
use super::parse;
use super::vars::VARIABLE_NAME_PATTERN;

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
    /// Free-form input problems found by callers (kept from the original interface).
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
