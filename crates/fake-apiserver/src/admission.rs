//! Validating admission on CREATE, as a test installs it: what an admission webhook or a
//! ValidatingAdmissionPolicy matching only CREATE answers. It runs where the real server runs
//! validating admission (after defaults and validation, before the store looks for an existing
//! object), so it answers creates, dry-run creates included, and the create a server-side
//! apply of a missing object makes, but never an update: a dry-run UPDATE passes it.

use serde_json::Value;

use super::errors::ApiError;
use super::faults::CreateDenial;
use super::resources::ResourceType;
use super::store::State;

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
