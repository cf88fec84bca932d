//! Reading the fields kustomize reads as Go's encoding/json decodes them (keys matched
//! case-insensitively, every duplicate checked), refusing any other shape than the decoded one.

use serde_json::{Map, Value};

use super::reference::{Reference, Unchecked, Use};

/// Why `configHome` is refused: kustomize hands it to helm as HELM_CONFIG_HOME unresolved, so a
/// relative one is relative to the service's working directory, not the tree.
const CONFIG_HOME_REFUSED: &str = "helm's config home is passed to helm as it is, relative to the build's working directory and not to the artifact: it cannot be kept inside the artifact root (remove it; a temporary one is used)";

/// One Unicode simple case fold step of Go's `bytes.EqualFold`, as far as it reaches ASCII
/// letters: `ſ` folds to `s` and the Kelvin sign to `k`.
fn folded(c: char) -> char {
    match c {
        'ſ' => 's',
        '\u{212A}' => 'k',
        c => c.to_ascii_lowercase(),
    }
}

/// Whether Go's encoding/json would decode `key` into the field `name`. kustomize decodes
/// kustomization files and builtin plugin configs with it, and it matches keys to fields
/// case-insensitively: `Files:` is `files:`.
pub(super) fn key_is(key: &str, name: &str) -> bool {
    key.chars()
        .map(folded)
        .eq(name.chars().map(|c| c.to_ascii_lowercase()))
}

/// Every value whose key decodes into `name` (a later duplicate wins in Go; all are checked).
pub(super) fn fields<'a>(
    object: &'a Map<String, Value>,
    name: &'a str,
) -> impl Iterator<Item = &'a Value> {
    object
        .iter()
        .filter(move |(k, _)| key_is(k, name))
        .map(|(_, v)| v)
}

pub(super) fn push_string(
    out: &mut Vec<Reference>,
    field: &str,
    value: &Value,
    used: Use,
) -> Result<(), Unchecked> {
    match value {
        Value::Null => Ok(()),
        Value::String(s) => {
            if !s.is_empty() {
                out.push(Reference {
                    field: field.to_string(),
                    reference: s.clone(),
                    used,
                });
            }
            Ok(())
        }
        other => Err(Unchecked::shape(field, "a string", other)),
    }
}

/// A list field whose items must each have one shape (`item` says whether one has it and
/// gives it); null items are skipped as kustomize's decoder does, and anything else is refused
/// naming `what` the field holds.
pub(super) fn list_of<'a, T>(
    field: &str,
    value: &'a Value,
    what: &str,
    item: impl Fn(&'a Value) -> Option<T>,
) -> Result<Vec<T>, Unchecked> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .filter(|v| !v.is_null())
            .map(|v| item(v).ok_or_else(|| Unchecked::shape(field, what, v)))
            .collect(),
        other => Err(Unchecked::shape(field, what, other)),
    }
}

pub(super) fn string_list<'a>(field: &str, value: &'a Value) -> Result<Vec<&'a str>, Unchecked> {
    list_of(field, value, "a list of strings", Value::as_str)
}

pub(super) fn push_strings(
    out: &mut Vec<Reference>,
    field: &str,
    value: &Value,
    used: Use,
) -> Result<(), Unchecked> {
    for s in string_list(field, value)? {
        out.push(Reference {
            field: field.to_string(),
            reference: s.to_string(),
            used,
        });
    }
    Ok(())
}

pub(super) fn mapping<'a>(
    field: &str,
    value: &'a Value,
) -> Result<Option<&'a Map<String, Value>>, Unchecked> {
    match value {
        Value::Null => Ok(None),
        Value::Object(m) => Ok(Some(m)),
        other => Err(Unchecked::shape(field, "a mapping", other)),
    }
}

pub(super) fn mappings<'a>(
    field: &str,
    value: &'a Value,
) -> Result<Vec<&'a Map<String, Value>>, Unchecked> {
    list_of(field, value, "a list of mappings", Value::as_object)
}

/// `files`, `envs`, `env` of a ConfigMap or Secret generator (`types.KvPairSources`).
pub(super) fn kv_sources(
    out: &mut Vec<Reference>,
    prefix: &str,
    item: &Map<String, Value>,
) -> Result<(), Unchecked> {
    for v in fields(item, "files") {
        let field = format!("{prefix}files");
        for f in string_list(&field, v)? {
            // `key=path` or `path` (ParseFileSource; more than one `=` fails in kustomize,
            // and is checked whole here).
            let path = match f.split_once('=') {
                Some((_, p)) if !p.contains('=') => p,
                _ => f,
            };
            out.push(Reference {
                field: field.clone(),
                reference: path.to_string(),
                used: Use::Load,
            });
        }
    }
    for v in fields(item, "envs") {
        push_strings(out, &format!("{prefix}envs"), v, Use::Load)?;
    }
    for v in fields(item, "env") {
        push_string(out, &format!("{prefix}env"), v, Use::Load)?;
    }
    Ok(())
}

pub(super) fn config_home(field: &str, value: &Value) -> Result<(), Unchecked> {
    match value {
        Value::Null => Ok(()),
        Value::String(s) if s.is_empty() => Ok(()),
        Value::String(_) => Err(Unchecked {
            field: field.to_string(),
            reason: CONFIG_HOME_REFUSED.into(),
        }),
        other => Err(Unchecked::shape(field, "a string", other)),
    }
}
