//! Validating admission on CREATE: the `NamespaceLifecycle` plugin (creating in a missing
//! namespace is a 404 `namespaces "x" not found`, in a terminating one a 403), and what a test
//! installs, as an admission webhook or a ValidatingAdmissionPolicy matching only CREATE answers.
//!
//! A webhook denial runs where the real server runs validating admission (after defaults and
//! validation, before the store looks for an existing object), so it answers creates, dry-run
//! creates included, and the create a server-side apply of a missing object makes, but never
//! an update: a dry-run UPDATE passes it.

use serde_json::{Value, json};

use super::errors::ApiError;
use super::faults::CreateDenial;
use super::resources::{self, ResourceType};
use super::store::{Key, State};

/// The real server's words for a webhook's denial (apiserver
/// `pkg/admission/plugin/webhook/errors.ToStatusErr`): `admission webhook "NAME" denied the
/// request: MSG`, the webhook's code (at least 400), no details.
fn denied(d: &CreateDenial) -> ApiError {
    let code = d.code.max(400);
    let reason = if code == 400 {
        "BadRequest"
    } else {
        "Forbidden"
    };
    let mut e = ApiError::custom(
        code,
        reason,
        &format!(
            "admission webhook {:?} denied the request: {}",
            d.webhook, d.message
        ),
    );
    if let Some(m) = e.body.as_object_mut() {
        m.remove("details");
    }
    e
}

/// The validating admission of a create of `obj`.
pub fn admit_create(state: &State, rt: &ResourceType, _obj: &Value) -> Result<(), ApiError> {
    match state.create_denials.iter().find(|d| d.kind == rt.kind) {
        Some(d) => Err(denied(d)),
        None => Ok(()),
    }
}

/// `NamespaceLifecycle` on create: the namespace must exist and not be terminating.
pub fn namespace_lifecycle(
    state: &State,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
) -> Result<(), ApiError> {
    let Some(ns) = ns.filter(|_| rt.namespaced) else {
        return Ok(());
    };
    match state.get(&Key::new(&resources::NAMESPACE, None, ns)) {
        None => Err(ApiError::not_found(&resources::NAMESPACE, ns)),
        Some(obj) if obj["metadata"].get("deletionTimestamp").is_some() => {
            let mut details = serde_json::Map::new();
            if !name.is_empty() {
                details.insert("name".into(), json!(name));
            }
            if !rt.group.is_empty() {
                details.insert("group".into(), json!(rt.group));
            }
            details.insert("kind".into(), json!(rt.plural));
            details.insert(
                "causes".into(),
                json!([{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace",
                }]),
            );
            let subject = if name.is_empty() {
                rt.qualified_plural()
            } else {
                format!("{} {name:?}", rt.qualified_plural())
            };
            Err(ApiError {
                code: 403,
                body: json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": format!("{subject} is forbidden: unable to create new content in namespace {ns} because it is being terminated"),
                    "reason": "Forbidden",
                    "details": Value::Object(details),
                    "code": 403,
                }),
            })
        }
        Some(_) => Ok(()),
    }
}
