//! Reading Kubernetes objects from YAML files: multi-document streams and `List`s.
//!
//! Shared by every command that takes objects from a file (`plan`, `converge`, `render`).
//! Errors name the file and the document index so bad input can be found.
//!
//! The stream is split into documents here rather than by the YAML crate, because the crate
//! drops empty documents and the index a user sees in an error must be the one they count in
//! the file. A document marker (`---` at the start of a line) cannot occur inside a YAML scalar,
//! so splitting on it is exact.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::quantity::Quantity;

/// One object read from a YAML stream, with where it came from.
#[derive(Clone, Debug)]
pub struct Document {
    /// The file the object was read from (`-` for stdin).
    pub source: String,
    /// 0-based index of the YAML document in the stream (items of a `List` share their document's index).
    pub index: usize,
    pub object: serde_json::Value,
}

/// Why a YAML input could not be read. Every variant names the source and, where known, the document.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{source_name}: {message}")]
    Invalid {
        source_name: String,
        message: String,
    },
    #[error("{source_name}: cannot read: {message}")]
    Read {
        source_name: String,
        message: String,
    },
    #[error("{source_name}: document {index}: invalid YAML: {message}")]
    Yaml {
        source_name: String,
        index: usize,
        message: String,
    },
    /// An object that parsed as YAML but is not a valid object of its kind.
    #[error("{source_name}: document {index} ({object}): field {field}: {message}")]
    Field {
        source_name: String,
        index: usize,
        /// `Kind namespace/name` as far as known.
        object: String,
        field: String,
        message: String,
    },
}

/// YAML parser options: serde-saphyr's default budget is sized for configuration files and
/// rejects a large render or `kubectl get -A -o yaml` of a big cluster, so it is raised here.
///
/// Alias expansion is bounded tighter than the crate's defaults: every file of a tenant's
/// artifact is read with these options, and a billion-laughs file (nine levels of nine aliases)
/// under the defaults (1,000,000 recorded anchor events, as many replayed) peaked at 112 MB
/// before it was refused. [`MAX_ALIAS_EVENTS`] keeps such a file under 100 MB of peak RSS and is
/// still far above what anchors in a real manifest expand to (a shared block of a few dozen
/// nodes used a few hundred times). kustomize's own output carries no anchors, so the big
/// render streams this parser reads are not affected.
pub fn yaml_options() -> serde_saphyr::Options {
    let mut alias_limits = serde_saphyr::options::AliasLimits::default();
    alias_limits.max_total_replayed_events = MAX_ALIAS_EVENTS;
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: Some(4 * 1024 * 1024 * 1024),
            max_events: 500_000_000,
            max_nodes: 200_000_000,
            max_documents: 10_000_000,
            max_depth: 512,
            max_total_scalar_bytes: 4 * 1024 * 1024 * 1024,
            max_recorded_anchor_events: MAX_ALIAS_EVENTS,
            max_recorded_anchor_bytes: MAX_ALIAS_BYTES,
        },
        alias_limits: alias_limits,
    }
}

/// Events an alias may replay, and events kept for anchors, in one YAML stream
/// ([`yaml_options`]).
pub const MAX_ALIAS_EVENTS: usize = 100_000;
/// Bytes of owned scalar text kept for anchors in one YAML stream.
pub const MAX_ALIAS_BYTES: usize = 16 << 20;

/// Stack for a YAML parse. serde's deserializers recurse once per nesting level (some 30 KiB a
/// level in a debug build, measured), so the depth [`yaml_options`] allows would overflow a
/// 2 MiB worker-thread stack and abort the whole process: parsing runs on a thread of its own
/// with room for it. Only the stack pages a parse touches become resident.
const PARSE_STACK_BYTES: usize = 64 << 20;

/// Runs `parse` on a thread with [`PARSE_STACK_BYTES`] of stack (on this thread if none can be
/// started), so no accepted nesting depth can overflow the caller's stack.
pub fn with_parse_stack<T: Send, F: FnOnce() -> T + Send>(parse: F) -> T {
    let slot = std::sync::Mutex::new(Some(parse));
    let take = || {
        slot.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    };
    let done = std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("yaml-parse".into())
            .stack_size(PARSE_STACK_BYTES)
            .spawn_scoped(scope, || take().map(|f| f()));
        match spawned {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(error) => {
                tracing::warn!(%error, "cannot start a YAML parse thread; parsing on this one");
                None
            }
        }
    });
    match done {
        Some(value) => value,
        None => match take() {
            Some(f) => f(),
            None => unreachable!("the parse ran and returned a value"),
        },
    }
}

/// Reads every object of a YAML file (`-` is stdin): multi-document streams and `List`s are flattened.
pub fn read_documents(path: &str) -> Result<Vec<Document>, ManifestError> {
    let read_err = |e: std::io::Error| ManifestError::Read {
        source_name: path.to_owned(),
        message: e.to_string(),
    };
    let text = if path == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(read_err)?;
        text
    } else {
        std::fs::read_to_string(path).map_err(read_err)?
    };
    parse_documents(path, &text)
}

/// Parses every object of YAML `text` read from `source` (named in errors).
pub fn parse_documents(source: &str, text: &str) -> Result<Vec<Document>, ManifestError> {
    with_parse_stack(|| parse_documents_here(source, text))
}

fn parse_documents_here(source: &str, text: &str) -> Result<Vec<Document>, ManifestError> {
    let mut out = Vec::new();
    for (index, chunk) in split_documents(text).into_iter().enumerate() {
        if chunk.is_blank {
            continue;
        }
        let value: Value = serde_saphyr::from_str_with_options(chunk.text, yaml_options())
            .map_err(|e| yaml_error(source, index, &chunk, e))?;
        match value {
            Value::Null => {}
            Value::Object(_) => flatten(source, index, value, &mut out)?,
            other => {
                return Err(ManifestError::Yaml {
                    source_name: source.to_owned(),
                    index,
                    message: format!(
                        "a document must be a mapping (a Kubernetes object), found {}",
                        kind_of(&other)
                    ),
                });
            }
        }
    }
    Ok(out)
}

/// Objects of the kinds `plan` and `converge` work on, typed and checked.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    pub statefulsets: Vec<Located<StatefulSet>>,
    pub claims: Vec<PersistentVolumeClaim>,
    pub classes: Vec<StorageClass>,
    /// The VolumeAttributesClasses (`storage.k8s.io/v1` or `v1beta1`), `(apiVersion, name)`.
    pub attribute_classes: Vec<(String, String)>,
}

/// A typed object with where it came from.
#[derive(Clone, Debug)]
pub struct Located<T> {
    pub source: String,
    pub index: usize,
    pub object: T,
}

impl Objects {
    /// Types the StatefulSets (`apps/v1`), PersistentVolumeClaims (`v1`), StorageClasses and
    /// VolumeAttributesClasses (`storage.k8s.io/*`) of `docs`; other kinds are ignored. Namespaced objects without a
    /// namespace take `default_namespace`. Every object must have a name, every quantity the
    /// decision reads must parse, and no object may appear twice.
    pub fn from_documents(
        docs: &[Document],
        default_namespace: &str,
    ) -> Result<Objects, ManifestError> {
        let mut out = Objects::default();
        let mut seen = std::collections::HashSet::new();
        for doc in docs {
            let api_version = doc.object.get("apiVersion").and_then(Value::as_str);
            let kind = doc.object.get("kind").and_then(Value::as_str);
            let (Some(api_version), Some(kind)) = (api_version, kind) else {
                let missing = if api_version.is_none() {
                    "apiVersion"
                } else {
                    "kind"
                };
                return Err(field_error(
                    doc,
                    missing,
                    "missing: not a Kubernetes object",
                ));
            };
            let wanted = match (api_version, kind) {
                ("apps/v1", "StatefulSet") => true,
                ("v1", "PersistentVolumeClaim") => true,
                (v, "StorageClass" | "VolumeAttributesClass")
                    if v.starts_with("storage.k8s.io/") =>
                {
                    true
                }
                _ => false,
            };
            if !wanted {
                continue;
            }
            let mut value = doc.object.clone();
            quantities_as_strings(&mut value);
            if kind != "StorageClass" && kind != "VolumeAttributesClass" {
                default_namespace_of(&mut value, default_namespace);
            }
            let name = value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if name.is_empty() {
                return Err(field_error(
                    doc,
                    "metadata.name",
                    "missing: every object needs a name",
                ));
            }
            let namespace = value
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !seen.insert((kind.to_owned(), namespace.to_owned(), name.to_owned())) {
                return Err(field_error(
                    doc,
                    "metadata.name",
                    "the same object appears twice",
                ));
            }
            match kind {
                "StatefulSet" => {
                    let sts: StatefulSet = typed(doc, &value)?;
                    check_statefulset(&sts).map_err(|(f, m)| object_error(doc, &value, &f, &m))?;
                    out.statefulsets.push(Located {
                        source: doc.source.clone(),
                        index: doc.index,
                        object: sts,
                    });
                }
                "PersistentVolumeClaim" => {
                    let pvc: PersistentVolumeClaim = typed(doc, &value)?;
                    check_claim(&pvc).map_err(|(f, m)| object_error(doc, &value, &f, &m))?;
                    out.claims.push(pvc);
                }
                "VolumeAttributesClass" => out
                    .attribute_classes
                    .push((api_version.to_owned(), name.to_owned())),
                _ => out.classes.push(typed(doc, &value)?),
            }
        }
        Ok(out)
    }
}

/// Checks what the decision reads from a StatefulSet: template names and quantities.
/// Returns the offending field path and why.
pub fn check_statefulset(sts: &StatefulSet) -> Result<(), (String, String)> {
    let templates = sts
        .spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.as_deref())
        .unwrap_or_default();
    let mut names = std::collections::HashSet::new();
    for (i, t) in templates.iter().enumerate() {
        let path = format!("spec.volumeClaimTemplates[{i}]");
        let name = t.metadata.name.as_deref().unwrap_or("");
        if name.is_empty() {
            return Err((
                format!("{path}.metadata.name"),
                "missing: every volumeClaimTemplate needs a name".into(),
            ));
        }
        if !names.insert(name) {
            return Err((
                format!("{path}.metadata.name"),
                format!("template name {name:?} is used twice"),
            ));
        }
        let resources = t.spec.as_ref().and_then(|s| s.resources.as_ref());
        let requests = resources.and_then(|r| r.requests.as_ref());
        if requests.and_then(|r| r.get("storage")).is_none() {
            return Err((
                format!("{path}.spec.resources.requests.storage"),
                "missing: a volumeClaimTemplate must request storage".into(),
            ));
        }
        check_quantities(resources, &format!("{path}.spec.resources"))?;
    }
    Ok(())
}

/// Checks what the decision reads from a claim: its storage request.
pub fn check_claim(pvc: &PersistentVolumeClaim) -> Result<(), (String, String)> {
    let resources = pvc.spec.as_ref().and_then(|s| s.resources.as_ref());
    if resources
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .is_none()
    {
        return Err((
            "spec.resources.requests.storage".into(),
            "missing: a claim must request storage".into(),
        ));
    }
    check_quantities(resources, "spec.resources")
}

fn check_quantities(
    resources: Option<&k8s_openapi::api::core::v1::VolumeResourceRequirements>,
    path: &str,
) -> Result<(), (String, String)> {
    let Some(r) = resources else { return Ok(()) };
    for (map_name, map) in [("requests", &r.requests), ("limits", &r.limits)] {
        for (key, q) in map.iter().flatten() {
            Quantity::parse(&q.0)
                .map_err(|e| (format!("{path}.{map_name}.{key}"), e.to_string()))?;
        }
    }
    Ok(())
}

/// `Kind namespace/name` of a raw object, for error messages.
pub fn describe(object: &Value) -> String {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let name = object.pointer("/metadata/name").and_then(Value::as_str);
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str);
    match (namespace, name) {
        (Some(ns), Some(n)) => format!("{kind} {ns}/{n}"),
        (None, Some(n)) => format!("{kind} {n}"),
        _ => format!("{kind} without name"),
    }
}

fn field_error(doc: &Document, field: &str, message: &str) -> ManifestError {
    object_error(doc, &doc.object, field, message)
}

fn object_error(doc: &Document, object: &Value, field: &str, message: &str) -> ManifestError {
    ManifestError::Field {
        source_name: doc.source.clone(),
        index: doc.index,
        object: describe(object),
        field: field.to_owned(),
        message: message.to_owned(),
    }
}

fn typed<T: DeserializeOwned>(doc: &Document, value: &Value) -> Result<T, ManifestError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        object_error(doc, value, &path, &e.inner().to_string())
    })
}

/// The API server reads an unquoted number as a quantity (`storage: 10`); the typed structs
/// only take strings, so numbers in the maps that hold quantities are turned into their text.
fn quantities_as_strings(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match (key.as_str(), &mut *v) {
                    (
                        "requests" | "limits" | "capacity" | "allocatedResources" | "hard",
                        Value::Object(q),
                    ) => {
                        for n in q.values_mut() {
                            if let Value::Number(num) = n {
                                *n = Value::String(num.to_string());
                            }
                        }
                    }
                    (_, v) => quantities_as_strings(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(quantities_as_strings),
        _ => {}
    }
}

fn default_namespace_of(value: &mut Value, default_namespace: &str) {
    let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let has = meta
        .get("namespace")
        .and_then(Value::as_str)
        .is_some_and(|ns| !ns.is_empty());
    if !has {
        meta.insert(
            "namespace".into(),
            Value::String(default_namespace.to_owned()),
        );
    }
}

/// Appends `value`, or its items when it is a `List` (`kind: List` or any `*List` with `items`).
fn flatten(
    source: &str,
    index: usize,
    value: Value,
    out: &mut Vec<Document>,
) -> Result<(), ManifestError> {
    let is_list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && value
            .get("items")
            .is_some_and(|i| i.is_array() || i.is_null());
    if !is_list {
        out.push(Document {
            source: source.to_owned(),
            index,
            object: value,
        });
        return Ok(());
    }
    let Value::Object(mut map) = value else {
        return Ok(());
    };
    let items = match map.remove("items") {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    for (i, item) in items.into_iter().enumerate() {
        if !item.is_object() {
            return Err(ManifestError::Yaml {
                source_name: source.to_owned(),
                index,
                message: format!(
                    "items[{i}] of the List must be a mapping (a Kubernetes object), found {}",
                    kind_of(&item)
                ),
            });
        }
        out.push(Document {
            source: source.to_owned(),
            index,
            object: item,
        });
    }
    Ok(())
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

struct Chunk<'a> {
    text: &'a str,
    /// 0-based line of the chunk's first line in the whole stream.
    first_line: usize,
    /// Only blank lines, comments, directives and markers: an empty document.
    is_blank: bool,
}

fn is_marker(line: &str, marker: &str) -> bool {
    line.strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']))
}

/// Splits a YAML stream at its `---` document markers. Directive lines (`%...`) belong to the
/// document after them; a marker with no content before it does not start a second document.
fn split_documents(text: &str) -> Vec<Chunk<'_>> {
    let mut chunks = Vec::new();
    let mut start = 0; // byte offset of the current chunk
    let mut start_line = 0;
    let mut has_content = false;
    let mut is_blank = true;
    let mut offset = 0;
    for (line_no, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        if is_marker(bare, "---") && has_content {
            chunks.push(Chunk {
                text: &text[start..offset],
                first_line: start_line,
                is_blank,
            });
            start = offset;
            start_line = line_no;
            is_blank = true;
        }
        let trimmed = bare.trim_start();
        let meaningful = !(trimmed.is_empty()
            || trimmed.starts_with('#')
            || (bare.starts_with('%') && !has_content));
        if meaningful {
            has_content = true;
            let only_marker =
                (is_marker(bare, "---") && bare[3..].trim().is_empty()) || is_marker(bare, "...");
            if !only_marker {
                is_blank = false;
            }
        }
        offset += line.len();
    }
    if start < text.len() || chunks.is_empty() {
        chunks.push(Chunk {
            text: &text[start..],
            first_line: start_line,
            is_blank,
        });
    }
    chunks
}

fn yaml_error(
    source: &str,
    index: usize,
    chunk: &Chunk<'_>,
    e: serde_saphyr::Error,
) -> ManifestError {
    // Re-parse with the chunk moved to its place in the file, so the line in the message is
    // the line in the file (only on this error path: padding every chunk would be quadratic).
    let padded = format!("{}{}", "\n".repeat(chunk.first_line), chunk.text);
    let e = serde_saphyr::from_str_with_options::<Value>(&padded, yaml_options())
        .err()
        .unwrap_or(e);
    let full = e.to_string();
    // The first line says where and what; the rest is a source snippet.
    let first = full.lines().next().unwrap_or("").trim();
    let message = first.strip_prefix("error: ").unwrap_or(first).to_owned();
    ManifestError::Yaml {
        source_name: source.to_owned(),
        index,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Vec<Document> {
        parse_documents("t.yaml", text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn multi_document_indices_count_empty_documents() {
        let docs = parse("---\n---\na: 1\n---\n# only a comment\n---\nb: 2\n...\n");
        let got: Vec<_> = docs.iter().map(|d| (d.index, d.object.clone())).collect();
        assert_eq!(
            got,
            vec![
                (1, serde_json::json!({"a": 1})),
                (3, serde_json::json!({"b": 2}))
            ]
        );
    }

    #[test]
    fn leading_marker_and_directive_do_not_start_a_document() {
        let docs = parse("%YAML 1.2\n---\na: 1\n--- \nb: 2\n");
        assert_eq!(docs.iter().map(|d| d.index).collect::<Vec<_>>(), vec![0, 1]);
        let docs = parse("# header\n---\na: 1\n");
        assert_eq!(docs[0].index, 0);
    }

    #[test]
    fn block_scalars_and_inline_markers() {
        let docs = parse("a: |\n  ---x\n  y\n--- {b: 1}\n");
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].object["a"], "---x\ny\n");
        assert_eq!(docs[1].object["b"], 1);
    }

    #[test]
    fn lists_are_flattened_with_their_document_index() {
        let docs = parse(
            "kind: ConfigMap\n---\napiVersion: v1\nkind: List\nitems:\n- kind: A\n- kind: B\n---\nkind: StatefulSetList\nitems: []\n",
        );
        let kinds: Vec<_> = docs
            .iter()
            .map(|d| (d.index, d.object["kind"].as_str().unwrap_or("").to_owned()))
            .collect();
        assert_eq!(
            kinds,
            vec![(0, "ConfigMap".into()), (1, "A".into()), (1, "B".into())]
        );
    }

    #[test]
    fn yaml_errors_name_document_and_file_line() {
        let err = parse_documents("f.yaml", "a: 1\n---\nb: 2\n---\nc: [1,\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("f.yaml: document 2: invalid YAML: "),
            "{msg}"
        );
        assert!(msg.contains("line 5"), "{msg}");
        let err = parse_documents("f.yaml", "a: 1\n---\n- x\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("document 1: invalid YAML: a document must be a mapping"),
            "{err}"
        );
    }

    #[test]
    fn a_large_list_is_not_rejected_by_the_budget() {
        // One document with more nodes than serde-saphyr's default budget (250,000) allows.
        let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n");
        for i in 0..20_000 {
            text.push_str(&format!(
                "- {{apiVersion: v1, kind: ConfigMap, metadata: {{name: c{i}}}, data: {{k: v}}}}\n"
            ));
        }
        assert_eq!(parse(&text).len(), 20_000);
    }

    const STS: &str = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: web\nspec:\n  selector: {matchLabels: {app: web}}\n  template: {}\n  volumeClaimTemplates:\n  - metadata: {name: data}\n    spec:\n      resources:\n        requests:\n          storage: STORAGE\n";

    #[test]
    fn objects_are_typed_with_the_default_namespace() {
        let text = format!(
            "{}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data-web-0, namespace: other}}\nspec: {{resources: {{requests: {{storage: 10}}}}}}\n---\napiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: fast}}\nprovisioner: x\n",
            STS.replace("STORAGE", "1Gi")
        );
        let objects = Objects::from_documents(&parse(&text), "team").unwrap();
        assert_eq!(objects.statefulsets.len(), 1);
        assert_eq!(
            objects.statefulsets[0].object.metadata.namespace.as_deref(),
            Some("team")
        );
        assert_eq!(
            objects.claims[0].metadata.namespace.as_deref(),
            Some("other")
        );
        let storage = &objects.claims[0]
            .spec
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"];
        assert_eq!(storage.0, "10");
        assert_eq!(objects.classes[0].metadata.namespace, None);
    }

    #[test]
    fn object_errors_name_file_document_object_and_field() {
        let text = format!(
            "apiVersion: v1\nkind: ConfigMap\n---\n{}",
            STS.replace("STORAGE", "lots")
        );
        let err = Objects::from_documents(&parse(&text), "default").unwrap_err();
        assert_eq!(
            err.to_string(),
            "t.yaml: document 1 (StatefulSet default/web): field spec.volumeClaimTemplates[0].spec.resources.requests.storage: \"lots\" is not a Kubernetes quantity: it has no digits before its suffix"
        );
        let text = STS
            .replace("STORAGE", "1Gi")
            .replace("name: web", "labels: {}");
        let err = Objects::from_documents(&parse(&text), "default").unwrap_err();
        assert!(
            err.to_string()
                .contains("document 0 (StatefulSet without name): field metadata.name: missing"),
            "{err}"
        );
        let text = STS
            .replace("STORAGE", "1Gi")
            .replace("  template: {}\n", "  template: 3\n");
        let err = Objects::from_documents(&parse(&text), "default").unwrap_err();
        assert!(
            err.to_string()
                .contains("field spec.template: invalid type"),
            "{err}"
        );
        let text = format!(
            "{}---\n{}",
            STS.replace("STORAGE", "1Gi"),
            STS.replace("STORAGE", "2Gi")
        );
        let err = Objects::from_documents(&parse(&text), "default").unwrap_err();
        assert!(err.to_string().contains("document 1"), "{err}");
        assert!(err.to_string().contains("appears twice"), "{err}");
    }

    /// A document as deep as the options allow, parsed from a thread with the 2 MiB stack of a
    /// tokio worker: without the parse's own stack this aborts the process.
    #[test]
    fn the_deepest_accepted_document_parses_on_a_small_stack() {
        let deepest = 505;
        let mut text =
            String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\nspec:\n");
        for d in 0..deepest {
            text.push_str(&format!("{}n{d}:\n", "  ".repeat(d + 1)));
        }
        text.push_str(&format!("{}leaf: true\n", "  ".repeat(deepest + 1)));
        let parsed = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || parse_documents("deep.yaml", &text).map(|d| d.len()))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(parsed.unwrap(), 1);
    }
}
