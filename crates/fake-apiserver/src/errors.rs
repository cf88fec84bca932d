//! `Status` bodies worded exactly as the real API server words them (see the fixtures'
//! `error-*.json`): clients match on code, reason and message prefixes, so wording is behaviour.

use serde_json::{Value, json};

use super::resources::ResourceType;

/// A failed request: the HTTP code and the `Status` body the real server would send.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub body: Value,
}

/// The answer to a request: the HTTP code and the body, or the error.
pub type VerbResult = Result<(u16, Value), ApiError>;

/// One field error of an Invalid status (`field.Error` in the real server).
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `FieldValueForbidden`, `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: &'static str,
    /// The message without the field path: `Forbidden: ...`, `Invalid value: ...`.
    pub message: String,
    pub field: String,
}

impl Cause {
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
            field: field.to_string(),
        }
    }

    /// `value` is already rendered the way Go's `%#v` would (the real server prints Go values).
    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {value}: {detail}"),
            field: field.to_string(),
        }
    }

    /// `field.NotSupported`: `value` already rendered as the server prints it (a string
    /// quoted, a `Stringer` such as a `ResourceName` as its text), the supported values quoted.
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        let listed: Vec<String> = supported.iter().map(|v| format!("{v:?}")).collect();
        Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {value}: supported values: {}",
                listed.join(", ")
            ),
            field: field.to_string(),
        }
    }

    pub fn too_long(field: &str, limit: usize) -> Self {
        Cause {
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {limit} bytes"),
            field: field.to_string(),
        }
    }

    pub fn required(field: &str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueRequired",
            message: if detail.is_empty() {
                "Required value".to_string()
            } else {
                format!("Required value: {detail}")
            },
            field: field.to_string(),
        }
    }
}

fn status(code: u16, reason: &str, message: String, details: Value) -> ApiError {
    ApiError {
        code,
        body: json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "details": details,
            "code": code,
        }),
    }
}

fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut d = serde_json::Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    d.insert("kind".into(), json!(kind));
    Value::Object(d)
}

impl ApiError {
    /// Any status, e.g. from a fault rule.
    pub fn custom(code: u16, reason: &str, message: &str) -> Self {
        status(code, reason, message.to_string(), json!({}))
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        status(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", rt.qualified_plural()),
            details(name, rt.group, rt.plural),
        )
    }

    /// A path no resource is served at.
    pub fn no_route() -> Self {
        status(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
            json!({}),
        )
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        status(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", rt.qualified_plural()),
            details(name, rt.group, rt.plural),
        )
    }

    /// Update with a stale `resourceVersion`.
    pub fn conflict_modified(rt: &ResourceType, name: &str) -> Self {
        status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                rt.qualified_plural()
            ),
            details(name, rt.group, rt.plural),
        )
    }

    pub fn precondition_uid(rt: &ResourceType, name: &str, wanted: &str, actual: &str) -> Self {
        status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the UID in the precondition ({wanted}) does not match the UID in record ({actual}). The object might have been deleted and then recreated",
                rt.qualified_kind()
            ),
            details(name, rt.group, rt.kind),
        )
    }

    pub fn precondition_rv(rt: &ResourceType, name: &str, wanted: &str, actual: &str) -> Self {
        status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the ResourceVersion in the precondition ({wanted}) does not match the ResourceVersion in record ({actual}). The object might have been modified",
                rt.qualified_kind()
            ),
            details(name, rt.group, rt.kind),
        )
    }

    /// 422 with field causes; one cause is inlined, several are bracketed like Go's aggregate.
    pub fn invalid(rt: &ResourceType, name: &str, causes: &[Cause]) -> Self {
        Self::invalid_kind(&rt.qualified_kind(), rt.group, rt.kind, name, causes)
    }

    pub fn invalid_kind(
        qualified_kind: &str,
        group: &str,
        kind: &str,
        name: &str,
        causes: &[Cause],
    ) -> Self {
        let rendered: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let summary = if rendered.len() == 1 {
            rendered[0].clone()
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let mut d = details(name, group, kind);
        d["causes"] = Value::Array(
            causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect(),
        );
        status(
            422,
            "Invalid",
            format!("{qualified_kind} \"{name}\" is invalid: {summary}"),
            d,
        )
    }

    /// Admission refusal (403): `persistentvolumeclaims "x" is forbidden: ...`.
    pub fn forbidden(rt: &ResourceType, name: &str, why: &str) -> Self {
        status(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {why}", rt.qualified_plural()),
            details(name, rt.group, rt.plural),
        )
    }

    /// A 400: the real server sends no `details` with it.
    pub fn bad_request(message: &str) -> Self {
        let mut e = status(400, "BadRequest", message.to_string(), json!({}));
        if let Some(m) = e.body.as_object_mut() {
            m.remove("details");
        }
        e
    }

    pub fn method_not_allowed() -> Self {
        status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".into(),
            json!({}),
        )
    }

    /// A patch type the resource does not take (custom resources take no strategic merge).
    pub fn unsupported_media_type(custom: bool) -> Self {
        let accepted = if custom {
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        } else {
            "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
        };
        let mut e = status(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted}"
            ),
            json!({}),
        );
        if let Some(m) = e.body.as_object_mut() {
            m.remove("details");
        }
        e
    }

    /// Server-side apply without `fieldManager`.
    pub fn apply_needs_manager() -> Self {
        Self::invalid_kind(
            "PatchOptions.meta.k8s.io",
            "meta.k8s.io",
            "PatchOptions",
            "",
            &[Cause::required(
                "fieldManager",
                "is required for apply patch",
            )],
        )
    }

    /// Server-side apply conflicts without `force` (message shape of the real server).
    pub fn apply_conflicts(api_version: &str, conflicts: &[(String, String)]) -> Self {
        let message = if conflicts.len() == 1 {
            let (manager, field) = &conflicts[0];
            format!(
                "Apply failed with 1 conflict: conflict with \"{manager}\" using {api_version}: {field}"
            )
        } else {
            let mut m = format!("Apply failed with {} conflicts:", conflicts.len());
            for (manager, field) in conflicts {
                m.push_str(&format!(
                    " conflict with \"{manager}\" using {api_version}: {field}\n"
                ));
            }
            m.trim_end().to_string()
        };
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|(manager, field)| {
                json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with \"{manager}\" using {api_version}"),
                    "field": field,
                })
            })
            .collect();
        status(409, "Conflict", message, json!({ "causes": causes }))
    }
}
