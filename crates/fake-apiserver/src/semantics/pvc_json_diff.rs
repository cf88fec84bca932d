//! The diff 1.36 embeds in the "spec is immutable" message of a claim (`real-v1.36.2.json`,
//! `02.pvc.merge-grow-pending`): apimachinery's `diff.Diff`, a unified diff (three lines of
//! context, no file header) of the two internal `core.PersistentVolumeClaimSpec` values as
//! `json.MarshalIndent(v, "", " ")` writes them. The internal types carry no JSON tags, so keys
//! are the Go field names in declaration order; `metav1.LabelSelector` keeps its tags.

use std::fmt::Write as _;

use serde_json::Value;

/// The diff of two claim specs (the API's JSON), as a 1.36 server prints it.
pub fn spec_diff(old: &Value, new: &Value) -> String {
    let (a, b) = (indented(&internal_spec(old)), indented(&internal_spec(new)));
    let diff = similar::TextDiff::from_lines(&a, &b);
    let mut out = String::new();
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        let _ = write!(out, "{hunk}");
    }
    out
}

/// A value in Go field order: `(key, value)` pairs, rendered as an object.
enum Go {
    Null,
    Str(String),
    List(Vec<Go>),
    Struct(Vec<(&'static str, Go)>),
    /// A Go map: keys sorted, as encoding/json writes them.
    Map(Vec<(String, Go)>),
    /// Already a JSON value with its own (tagged) keys.
    Tagged(Value),
}

fn ptr_str(v: Option<&Value>) -> Go {
    match v.and_then(Value::as_str) {
        Some(s) => Go::Str(s.to_string()),
        None => Go::Null,
    }
}

fn string(v: Option<&Value>) -> Go {
    Go::Str(v.and_then(Value::as_str).unwrap_or_default().to_string())
}

fn resource_list(v: Option<&Value>) -> Go {
    match v.and_then(Value::as_object) {
        Some(m) => {
            let mut entries: Vec<(String, Go)> = m
                .iter()
                .map(|(k, q)| {
                    (
                        k.clone(),
                        Go::Str(q.as_str().unwrap_or_default().to_string()),
                    )
                })
                .collect();
            entries.sort_by(|x, y| x.0.cmp(&y.0));
            Go::Map(entries)
        }
        None => Go::Null,
    }
}

fn object_ref(v: Option<&Value>, with_namespace: bool) -> Go {
    let Some(r) = v.filter(|r| r.is_object()) else {
        return Go::Null;
    };
    let mut fields = vec![
        ("APIGroup", ptr_str(r.get("apiGroup"))),
        ("Kind", string(r.get("kind"))),
        ("Name", string(r.get("name"))),
    ];
    if with_namespace {
        fields.push(("Namespace", ptr_str(r.get("namespace"))));
    }
    Go::Struct(fields)
}

/// `core.PersistentVolumeClaimSpec` of 1.36, from the API's JSON.
fn internal_spec(spec: &Value) -> Go {
    let modes = match spec.get("accessModes").and_then(Value::as_array) {
        Some(a) => Go::List(
            a.iter()
                .map(|m| Go::Str(m.as_str().unwrap_or_default().to_string()))
                .collect(),
        ),
        None => Go::Null,
    };
    let selector = match spec.get("selector").filter(|s| s.is_object()) {
        Some(s) => Go::Tagged(s.clone()),
        None => Go::Null,
    };
    let resources = spec.get("resources");
    Go::Struct(vec![
        ("AccessModes", modes),
        ("Selector", selector),
        (
            "Resources",
            Go::Struct(vec![
                (
                    "Limits",
                    resource_list(resources.and_then(|r| r.get("limits"))),
                ),
                (
                    "Requests",
                    resource_list(resources.and_then(|r| r.get("requests"))),
                ),
            ]),
        ),
        ("VolumeName", string(spec.get("volumeName"))),
        ("StorageClassName", ptr_str(spec.get("storageClassName"))),
        ("VolumeMode", ptr_str(spec.get("volumeMode"))),
        ("DataSource", object_ref(spec.get("dataSource"), false)),
        ("DataSourceRef", object_ref(spec.get("dataSourceRef"), true)),
        (
            "VolumeAttributesClassName",
            ptr_str(spec.get("volumeAttributesClassName")),
        ),
    ])
}

/// A string as encoding/json writes it (HTML characters escaped).
fn quote(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// `json.MarshalIndent(v, "", " ")`, ending in a newline (difflib's SplitLines adds one).
fn indented(v: &Go) -> String {
    let mut out = String::new();
    write_go(&mut out, v, 0);
    out.push('\n');
    out
}

fn pad(out: &mut String, depth: usize) {
    out.push('\n');
    out.extend(std::iter::repeat_n(' ', depth));
}

fn write_entries<'a, K: AsRef<str> + 'a>(
    out: &mut String,
    entries: impl ExactSizeIterator<Item = (K, &'a Go)>,
    depth: usize,
) {
    if entries.len() == 0 {
        out.push_str("{}");
        return;
    }
    out.push('{');
    let n = entries.len();
    for (i, (k, v)) in entries.enumerate() {
        pad(out, depth + 1);
        out.push_str(&quote(k.as_ref()));
        out.push_str(": ");
        write_go(out, v, depth + 1);
        if i + 1 < n {
            out.push(',');
        }
    }
    pad(out, depth);
    out.push('}');
}

fn write_go(out: &mut String, v: &Go, depth: usize) {
    match v {
        Go::Null => out.push_str("null"),
        Go::Str(s) => out.push_str(&quote(s)),
        Go::List(items) if items.is_empty() => out.push_str("[]"),
        Go::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                pad(out, depth + 1);
                write_go(out, item, depth + 1);
                if i + 1 < items.len() {
                    out.push(',');
                }
            }
            pad(out, depth);
            out.push(']');
        }
        Go::Struct(fields) => write_entries(out, fields.iter().map(|(k, v)| (*k, v)), depth),
        Go::Map(entries) => write_entries(out, entries.iter().map(|(k, v)| (k.as_str(), v)), depth),
        Go::Tagged(value) => write_go(out, &tagged(value), depth),
    }
}

/// A tagged (API) JSON value: objects keep their keys, sorted as Go's struct order cannot be
/// known here (a label selector's `matchLabels` precedes `matchExpressions` either way).
fn tagged(v: &Value) -> Go {
    match v {
        Value::Null => Go::Null,
        Value::String(s) => Go::Str(s.clone()),
        Value::Array(a) => Go::List(a.iter().map(tagged).collect()),
        Value::Object(m) => {
            let mut entries: Vec<(String, Go)> =
                m.iter().map(|(k, v)| (k.clone(), tagged(v))).collect();
            entries.sort_by(|x, y| x.0.cmp(&y.0));
            Go::Map(entries)
        }
        other => Go::Str(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// The recorded answer of a real v1.36.2 to growing a Pending claim (`real-v1.36.2.json`,
    /// `02.pvc.merge-grow-pending`), byte for byte.
    #[test]
    fn the_diff_of_a_grown_request_is_the_recorded_one() {
        let old = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                         "storageClassName": "fd32d-noexp", "volumeMode": "Filesystem"});
        let mut new = old.clone();
        new["resources"]["requests"]["storage"] = json!("2Gi");
        assert_eq!(
            super::spec_diff(&old, &new),
            "@@ -6,7 +6,7 @@\n  \"Resources\": {\n   \"Limits\": null,\n   \"Requests\": {\n-   \"storage\": \"1Gi\"\n+   \"storage\": \"2Gi\"\n   }\n  },\n  \"VolumeName\": \"\",\n"
        );
    }
}
