//! Substitution of whole objects, as kustomize-controller's `SubstituteVariables` does per
//! resource: the opt-out marker, the no-variables shortcut, envsubst over the object's YAML
//! text and the YAML round trip.

use serde_json::Value;

use super::{DISABLE_KEY, DISABLED_VALUE, Options, SubstituteError, Variables, envsubst, vars};

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

/// Parses like sigs.k8s.io/yaml (YAML 1.1 scalars: `yes`/`on` are booleans, `0755` is octal),
/// with the same budget and stack as every other YAML read, so an object the render accepted
/// (a large ConfigMap, a deep CRD) cannot fail here or overflow the worker's stack.
fn from_yaml(text: &str) -> Result<Value, String> {
    crate::manifest::with_parse_stack(|| {
        let mut options = crate::manifest::yaml_options();
        options.legacy_octal_numbers = true;
        serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|e| e.to_string())
    })
}

/// Whether substitution runs at all for this Kustomization.
fn runs(vars: &Variables, options: &Options) -> bool {
    options.always || !vars.is_empty()
}

/// Text without `$` (or the NUL that ends Go's scan) comes out of envsubst unchanged.
fn untouched(text: &str) -> bool {
    !text.contains(['$', '\0'])
}

/// Substitutes `${...}` in one rendered object, as kustomize-controller does on the object's YAML text.
/// Objects labelled or annotated `kustomize.toolkit.fluxcd.io/substitute: disabled` are returned unchanged.
///
/// The object is first written as YAML; quoting then follows this crate's emitter rather than
/// kustomize's (the two agree on plain, quoted and block strings as far as tested). When the
/// text kustomize printed is at hand, [`substitute_stream`] substitutes exactly that, as Flux does.
pub fn substitute_object(
    object: &Value,
    vars: &Variables,
    options: &Options,
) -> Result<Value, SubstituteError> {
    if !runs(vars, options) || substitution_disabled(object) {
        return Ok(object.clone());
    }
    let original = Original::Parsed(object);
    vars::validate_names(vars).map_err(|e| original.wrap(e))?;
    let text = to_yaml(object).map_err(|e| original.wrap(e))?;
    if untouched(&text) {
        return Ok(object.clone());
    }
    substitute_text(&text, &original, vars, options)
}

/// Substitutes one YAML document (one object, as `kustomize build` printed it) and returns the
/// resulting object. This is the closest match to Flux: quoting in the text decides whether
/// `replicas: ${N}` becomes a number and `replicas: "${N}"` a string, as it does for Flux.
/// The document is parsed once on the common path (parsing dominates the cost); the original
/// is parsed as well only to look for the opt-out marker when its key appears in the text.
pub fn substitute_document(
    text: &str,
    vars: &Variables,
    options: &Options,
) -> Result<Value, SubstituteError> {
    let parse_as_is = || from_yaml(text).map_err(|message| SubstituteError::Document { message });
    if !runs(vars, options) {
        return parse_as_is();
    }
    let parsed;
    let original = if text.contains(DISABLE_KEY) {
        parsed = parse_as_is()?;
        if substitution_disabled(&parsed) {
            return Ok(parsed);
        }
        Original::Parsed(&parsed)
    } else {
        Original::Text(text)
    };
    vars::validate_names(vars).map_err(|e| original.wrap(e))?;
    if untouched(text) {
        return parse_as_is();
    }
    substitute_text(text, &original, vars, options)
}

/// The object a document holds, for error messages; parsed only when an error needs it.
enum Original<'a> {
    Parsed(&'a Value),
    Text(&'a str),
}

impl Original<'_> {
    fn wrap(&self, reason: SubstituteError) -> SubstituteError {
        let object = match self {
            Original::Parsed(object) => object_id(object),
            Original::Text(text) => match from_yaml(text) {
                Ok(object) => object_id(&object),
                Err(_) => "(unparsable YAML document)".to_owned(),
            },
        };
        SubstituteError::Object {
            object,
            reason: Box::new(reason),
        }
    }
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
    original: &Original<'_>,
    vars: &Variables,
    options: &Options,
) -> Result<Value, SubstituteError> {
    let out = envsubst(text, vars, options.strict).map_err(|e| original.wrap(e))?;
    from_yaml(&out).map_err(|message| original.wrap(SubstituteError::Yaml { message }))
}
