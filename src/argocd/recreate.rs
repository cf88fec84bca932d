//! How a StatefulSet of an Application is re-created so that Argo CD's next sync updates it
//! instead of conflicting: with the field manager Argo CD applies with, `argocd-controller`
//! (`common.ArgoCDSSAManager`, passed to kubectl's apply options in every mode), by the
//! operation its apply mode records:
//!
//! - client-side apply (the default): kubectl records its writes as operation `Update` and
//!   keeps the object's previous configuration in the `kubectl.kubernetes.io/last-applied-configuration`
//!   annotation, from which its next three-way merge computes what to remove. The re-create is a
//!   create (`Update`) carrying that annotation exactly as kubectl would have written it;
//! - `ServerSideApply=true` (the Application's sync options, or the object's
//!   `argocd.argoproj.io/sync-options`; `ServerSideApply=false` there turns it off): a
//!   server-side apply (`Apply`), forced, as Argo CD's is.
//!
//! The object is the managed resources' `targetState` as is: its tracking annotation
//! (`argocd.argoproj.io/tracking-id`) or label stays, so Argo CD still counts it as its own.
//! `Replace=true` applies with `kubectl replace`, which overwrites the whole object: the
//! client-side re-create serves it too.

use serde_json::Value;

use super::application::{SERVER_SIDE_APPLY, SYNC_OPTIONS_ANNOTATION};

/// The field manager Argo CD applies with, in both modes.
pub const FIELD_MANAGER: &str = "argocd-controller";
/// kubectl's record of the last client-side apply.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The per-object option turning server-side apply off.
const NO_SERVER_SIDE_APPLY: &str = "ServerSideApply=false";

/// How Argo CD applies an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyMode {
    ClientSide,
    ServerSide,
}

/// The write that re-creates the StatefulSet, and what the API server records for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A create (and its dry runs) with `fieldManager`, recorded as `Update`.
    Update,
    /// A forced server-side apply with `fieldManager`, recorded as `Apply`.
    Apply,
}

/// What the re-create writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Recreate {
    pub mode: ApplyMode,
    pub field_manager: &'static str,
    pub operation: Operation,
    /// The object to write: the target, with the last-applied annotation under client-side apply.
    pub object: Value,
}

/// gitops-engine's `shouldUseServerSideApply` for a real (not dry-run) apply: the object's
/// `ServerSideApply=false` wins, else the sync's `ServerSideApply=true` or the object's.
pub fn apply_mode(sync_options: &[String], object: &Value) -> ApplyMode {
    let annotation: Vec<&str> = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(SYNC_OPTIONS_ANNOTATION))
        .and_then(Value::as_str)
        .map(|csv| {
            csv.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if annotation.contains(&NO_SERVER_SIDE_APPLY) {
        return ApplyMode::ClientSide;
    }
    if sync_options.iter().any(|o| o == SERVER_SIDE_APPLY)
        || annotation.contains(&SERVER_SIDE_APPLY)
    {
        ApplyMode::ServerSide
    } else {
        ApplyMode::ClientSide
    }
}

/// The re-create of `target` (a managed resource's `targetState`) for an Application whose sync
/// options are `sync_options`.
pub fn recreate(sync_options: &[String], target: &Value) -> Recreate {
    let mode = apply_mode(sync_options, target);
    match mode {
        ApplyMode::ServerSide => Recreate {
            mode,
            field_manager: FIELD_MANAGER,
            operation: Operation::Apply,
            object: target.clone(),
        },
        ApplyMode::ClientSide => Recreate {
            mode,
            field_manager: FIELD_MANAGER,
            operation: Operation::Update,
            object: with_last_applied(target),
        },
    }
}

/// `target` with the last-applied annotation kubectl's `CreateApplyAnnotation` writes: the
/// object without that annotation (an absent `annotations` becomes `{}`, as kubectl's accessor
/// sets an empty map), encoded as Go's `json.Encoder` does (sorted keys, HTML-escaped, a
/// trailing newline).
pub fn with_last_applied(target: &Value) -> Value {
    let mut object = target.clone();
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return object;
    };
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Default::default()));
    if !annotations.is_object() {
        *annotations = Value::Object(Default::default());
    }
    if let Some(map) = annotations.as_object_mut() {
        map.remove(LAST_APPLIED_ANNOTATION);
    }
    let encoded = go_json(&object);
    if let Some(map) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        map.insert(LAST_APPLIED_ANNOTATION.into(), Value::String(encoded));
    }
    object
}

/// Go's `json.NewEncoder(w).Encode(v)` of an unstructured object: map keys sorted, no spaces,
/// `<`, `>`, `&`, U+2028 and U+2029 escaped, a newline at the end.
pub fn go_json(value: &Value) -> String {
    let mut out = String::new();
    write_go(value, &mut out);
    out.push('\n');
    out
}

fn write_go(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_go(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

/// A JSON string as Go's encoder writes it with HTML escaping on (its default).
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target(annotations: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "apps", "annotations": annotations,
                         "labels": {"app.kubernetes.io/instance": "db"}},
            "spec": {"serviceName": "db", "replicas": 1}})
    }

    #[test]
    fn apply_mode_by_table() {
        let ssa = vec!["ServerSideApply=true".to_string()];
        let none: Vec<String> = vec![];
        for (options, annotation, mode) in [
            (&none, None, ApplyMode::ClientSide),
            (&ssa, None, ApplyMode::ServerSide),
            (&none, Some("ServerSideApply=true"), ApplyMode::ServerSide),
            (
                &none,
                Some("Prune=false, ServerSideApply=true"),
                ApplyMode::ServerSide,
            ),
            (&ssa, Some("ServerSideApply=false"), ApplyMode::ClientSide),
            (&ssa, Some("Replace=true"), ApplyMode::ServerSide),
            (&none, Some("serversideapply=true"), ApplyMode::ClientSide),
        ] {
            let annotations = match annotation {
                Some(a) => json!({SYNC_OPTIONS_ANNOTATION: a}),
                None => json!({}),
            };
            assert_eq!(
                apply_mode(options, &target(annotations)),
                mode,
                "{options:?} {annotation:?}"
            );
        }
        // "ServerSideApply=true " with a space is not the option (an exact match, as Argo CD's).
        assert_eq!(
            apply_mode(&["ServerSideApply=true ".to_string()], &target(json!({}))),
            ApplyMode::ClientSide
        );
    }

    #[test]
    fn server_side_applies_the_target_as_is() {
        let t = target(json!({"argocd.argoproj.io/tracking-id": "db:apps/StatefulSet:apps/db"}));
        let r = recreate(&["ServerSideApply=true".to_string()], &t);
        assert_eq!(
            r,
            Recreate {
                mode: ApplyMode::ServerSide,
                field_manager: "argocd-controller",
                operation: Operation::Apply,
                object: t,
            }
        );
    }

    #[test]
    fn client_side_creates_with_kubectls_last_applied_annotation() {
        let t = target(
            json!({"argocd.argoproj.io/tracking-id": "db:apps/StatefulSet:apps/db",
            "kubectl.kubernetes.io/last-applied-configuration": "{\"stale\":true}\n"}),
        );
        let r = recreate(&[], &t);
        assert_eq!(r.operation, Operation::Update);
        assert_eq!(r.field_manager, "argocd-controller");
        let annotations = &r.object["metadata"]["annotations"];
        // The tracking annotation and label stay.
        assert_eq!(
            annotations["argocd.argoproj.io/tracking-id"],
            "db:apps/StatefulSet:apps/db"
        );
        assert_eq!(
            r.object["metadata"]["labels"]["app.kubernetes.io/instance"],
            "db"
        );
        assert_eq!(
            annotations[LAST_APPLIED_ANNOTATION],
            "{\"apiVersion\":\"apps/v1\",\"kind\":\"StatefulSet\",\"metadata\":{\"annotations\":{\"argocd.argoproj.io/tracking-id\":\"db:apps/StatefulSet:apps/db\"},\"labels\":{\"app.kubernetes.io/instance\":\"db\"},\"name\":\"db\",\"namespace\":\"apps\"},\"spec\":{\"replicas\":1,\"serviceName\":\"db\"}}\n"
        );
    }

    #[test]
    fn an_object_without_annotations_records_an_empty_map_as_kubectl_does() {
        let t = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"}});
        let r = with_last_applied(&t);
        assert_eq!(
            r["metadata"]["annotations"][LAST_APPLIED_ANNOTATION],
            "{\"apiVersion\":\"apps/v1\",\"kind\":\"StatefulSet\",\"metadata\":{\"annotations\":{},\"name\":\"db\"}}\n"
        );
    }

    #[test]
    fn strings_are_escaped_as_gos_encoder_escapes_them() {
        let v = json!({"b": "<a href=\"x\">&</a>", "a": "tab\there\u{2028}\u{1}\u{8}\u{c}é", "n": 1.5, "z": [true, null, -3]});
        assert_eq!(
            go_json(&v),
            "{\"a\":\"tab\\there\\u2028\\u0001\\b\\fé\",\"b\":\"\\u003ca href=\\\"x\\\"\\u003e\\u0026\\u003c/a\\u003e\",\"n\":1.5,\"z\":[true,null,-3]}\n"
        );
    }
}
