//! The variables of one Kustomization: `postBuild.substituteFrom` then `postBuild.substitute`,
//! merged as kustomize-controller's `LoadVariables` does, without touching the cluster: the
//! caller fetches the ConfigMaps and Secrets and hands them over.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use super::{SubstituteError, Variables};

/// Flux's rule for variable names. Go's POSIX classes are ASCII-only.
pub const VARIABLE_NAME_PATTERN: &str = "^[_[:alpha:]][_[:alpha:][:digit:]]*$";

/// What a `substituteFrom` entry points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VarSourceKind {
    ConfigMap,
    Secret,
}

impl VarSourceKind {
    /// The resource name the API server uses in its NotFound message.
    fn resource(self) -> &'static str {
        match self {
            VarSourceKind::ConfigMap => "configmaps",
            VarSourceKind::Secret => "secrets",
        }
    }
}

impl fmt::Display for VarSourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VarSourceKind::ConfigMap => "ConfigMap",
            VarSourceKind::Secret => "Secret",
        })
    }
}

impl FromStr for VarSourceKind {
    type Err = SubstituteError;

    fn from_str(kind: &str) -> Result<Self, Self::Err> {
        match kind {
            "ConfigMap" => Ok(VarSourceKind::ConfigMap),
            "Secret" => Ok(VarSourceKind::Secret),
            other => Err(SubstituteError::UnknownSourceKind {
                kind: other.to_owned(),
            }),
        }
    }
}

/// One `postBuild.substituteFrom` entry together with what the caller found for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VarSource {
    pub kind: VarSourceKind,
    pub name: String,
    /// `optional: true` tolerates a missing object (the entry then adds no variables).
    pub optional: bool,
    /// The object's variables (ConfigMap `data`, Secret `data` decoded); `None` = not found.
    pub data: Option<BTreeMap<String, String>>,
}

impl VarSource {
    /// From a ConfigMap as read from the API (`None` when the API answered NotFound).
    /// Only `data` counts: Flux ignores `binaryData`.
    pub fn from_config_map(name: &str, optional: bool, found: Option<&ConfigMap>) -> Self {
        VarSource {
            kind: VarSourceKind::ConfigMap,
            name: name.to_owned(),
            optional,
            data: found.map(|cm| cm.data.clone().unwrap_or_default()),
        }
    }

    /// From a Secret as read from the API or a file (`None` when not found). `data` arrives
    /// base64-decoded from k8s-openapi; Flux converts the bytes with Go's `string()`, which
    /// keeps them verbatim, so bytes that are not UTF-8 become U+FFFD here. `stringData`
    /// (only ever present in files, the API server folds it into `data`) wins, as on a write.
    pub fn from_secret(name: &str, optional: bool, found: Option<&Secret>) -> Self {
        let data = found.map(|secret| {
            let mut vars: BTreeMap<String, String> = secret
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            for (k, v) in secret.string_data.iter().flatten() {
                vars.insert(k.clone(), v.clone());
            }
            vars
        });
        VarSource {
            kind: VarSourceKind::Secret,
            name: name.to_owned(),
            optional,
            data,
        }
    }
}

impl VarSource {
    /// From an object as JSON (a file, or a raw API answer), checked to be of the right kind;
    /// a Secret's `data` is base64-decoded. `None` = not found.
    pub fn from_object(
        kind: VarSourceKind,
        name: &str,
        optional: bool,
        found: Option<&serde_json::Value>,
    ) -> Result<Self, SubstituteError> {
        let Some(object) = found else {
            return Ok(VarSource {
                kind,
                name: name.to_owned(),
                optional,
                data: None,
            });
        };
        let actual = object.get("kind").and_then(serde_json::Value::as_str);
        if actual.is_some_and(|k| k != kind.to_string()) {
            return Err(SubstituteError::Invalid(format!(
                "substitute from '{kind}/{name}': the object is a {}, not a {kind}",
                actual.unwrap_or_default()
            )));
        }
        let invalid = |e: serde_json::Error| {
            SubstituteError::Invalid(format!("substitute from '{kind}/{name}': {e}"))
        };
        Ok(match kind {
            VarSourceKind::ConfigMap => {
                let cm: ConfigMap = serde_json::from_value(object.clone()).map_err(invalid)?;
                VarSource::from_config_map(name, optional, Some(&cm))
            }
            VarSourceKind::Secret => {
                let secret: Secret = serde_json::from_value(object.clone()).map_err(invalid)?;
                VarSource::from_secret(name, optional, Some(&secret))
            }
        })
    }
}

/// Merges the variables in Flux's order: each `substituteFrom` entry in turn (later wins), then
/// the inline `postBuild.substitute` (wins over all). Newlines are removed from every value;
/// every name must match [`VARIABLE_NAME_PATTERN`]. A missing non-optional source fails with
/// Flux's text, e.g. `substitute from 'ConfigMap/vars' error: configmaps "vars" not found`.
pub fn collect_variables(
    from: &[VarSource],
    inline: Option<&BTreeMap<String, String>>,
) -> Result<Variables, SubstituteError> {
    let mut vars = Variables::new();
    for source in from {
        match &source.data {
            None if source.optional => continue,
            None => {
                return Err(SubstituteError::SourceNotFound {
                    kind: source.kind,
                    resource: source.kind.resource(),
                    name: source.name.clone(),
                });
            }
            Some(data) => {
                for (k, v) in data {
                    vars.insert(k.clone(), v.replace('\n', ""));
                }
            }
        }
    }
    for (k, v) in inline.into_iter().flatten() {
        vars.insert(k.clone(), v.replace('\n', ""));
    }
    validate_names(&vars)?;
    Ok(vars)
}

/// Whether `name` matches [`VARIABLE_NAME_PATTERN`].
pub fn is_valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b) if b == b'_' || b.is_ascii_alphabetic() => {
            bytes.all(|b| b == b'_' || b.is_ascii_alphanumeric())
        }
        _ => false,
    }
}

/// Fails on the first invalid name (in name order; Flux walks a Go map, so its pick varies).
pub(crate) fn validate_names(vars: &Variables) -> Result<(), SubstituteError> {
    match vars.keys().find(|name| !is_valid_name(name)) {
        Some(name) => Err(SubstituteError::InvalidVariableName { name: name.clone() }),
        None => Ok(()),
    }
}
