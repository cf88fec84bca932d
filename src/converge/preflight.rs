//! The pre-flight, pure part: what the server's answer to a dry-run CREATE of the object the
//! converge will re-apply means.
//!
//! The proof (a dry-run UPDATE) says Flux's apply over the live object would pass; it never
//! exercises what only a create goes through: the RBAC verb `create` (a server-side apply
//! that creates is authorised as `create`), admission webhooks and policies that match
//! CREATE, and validation that runs on create only. The re-apply after the orphan delete is a
//! create, so it is asked once before the first write: a re-create that would fail must
//! leave the StatefulSet untouched, never deleted.

use crate::cluster::CallError;
use crate::decide::{Refusal, RefusalCode};

/// The RBAC authorizer's words when a verb is not granted (`User "x" cannot create resource
/// "statefulsets" in API group "apps" ...`): tells an access failure from an admission denial
/// answered 403 (a quota, a webhook), which is about the object.
pub const RBAC_CANNOT_CREATE: &str = "cannot create resource";

/// What the answer to the pre-flight means.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// The server would create it: 409 AlreadyExists (existence is checked last, after
    /// authorization, admission and validation) or 201 (someone deleted it meanwhile: later
    /// steps handle the absence).
    Passed,
    /// The server refuses to create the object: the re-create would fail the same way.
    Refused(Refusal),
    /// The converger may not create it (401, RBAC's 403) or nothing is there to create into
    /// (404): access to fix, not a statement about the object.
    Denied { message: String, cause: CallError },
    /// No answer worth judging (5xx, 408, 429, timeout, connection): try again later.
    Failed(CallError),
}

/// Reads the pre-flight's answer. `acting_as` names who the re-apply runs as, for messages
/// (the impersonated user, or `None` for the converger's own identity).
pub fn classify(
    namespace: &str,
    name: &str,
    acting_as: Option<&str>,
    answer: Result<(), CallError>,
) -> Verdict {
    let error = match answer {
        Ok(()) => return Verdict::Passed,
        Err(e) => e,
    };
    let who = match acting_as {
        Some(user) => format!("{user:?}"),
        None => "the converger's own identity".to_string(),
    };
    let text = error.server_text();
    let reason = match error.kind.as_ref() {
        crate::cluster::CallErrorKind::Api { reason, .. } => reason.as_str(),
        _ => "",
    };
    match error.code() {
        Some(409) if reason == "AlreadyExists" => Verdict::Passed,
        Some(403) if text.contains(RBAC_CANNOT_CREATE) => Verdict::Denied {
            message: format!(
                "the pre-flight of StatefulSet {namespace}/{name} was denied (HTTP 403: \
                 \"{text}\"): {who} needs the RBAC verb \"create\" on \"statefulsets\" in API \
                 group \"apps\" in namespace {namespace}, because the re-apply after the orphan \
                 delete creates the object"
            ),
            cause: error,
        },
        Some(401) => Verdict::Denied {
            message: format!(
                "the API server does not accept the converger's credentials for the pre-flight \
                 of StatefulSet {namespace}/{name} (HTTP 401: \"{text}\"): renew or fix the \
                 kubeconfig or service account token"
            ),
            cause: error,
        },
        Some(404) => Verdict::Denied {
            message: format!(
                "the pre-flight create of StatefulSet {namespace}/{name} found nothing to create \
                 into (HTTP 404: \"{text}\"): namespace {namespace} or the apps/v1 API is missing"
            ),
            cause: error,
        },
        Some(code) if (400..500).contains(&code) && code != 408 && code != 429 => {
            Verdict::Refused(Refusal {
                namespace: namespace.to_string(),
                name: name.to_string(),
                code: RefusalCode::CreateRefused,
                message: format!(
                    "the server refuses to create StatefulSet {namespace}/{name} as {who} (HTTP \
                     {code}, dry-run create): \"{text}\"; the re-create after the orphan delete \
                     would fail the same way, so nothing was written"
                ),
            })
        }
        _ => Verdict::Failed(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::CallErrorKind;

    /// The three answers of a real v1.32.6 to a dry-run create (conformance steps
    /// `08.preflight.dry-run-create-existing|invalid|forbidden`), then the rest of the table.
    #[test]
    fn answers_by_table() {
        let api = |code: u16, reason: &str, message: &str| {
            Err(CallError::api(
                "dry-run create of",
                "StatefulSet fd32d/imp-old",
                code,
                reason,
                message,
            ))
        };
        let rbac = "statefulsets.apps is forbidden: User \"system:serviceaccount:fd32d:fd-sa\" cannot create resource \"statefulsets\" in API group \"apps\" in the namespace \"fd32d\"";
        let webhook = "admission webhook \"deny.example.com\" denied the request: no new StatefulSets on Fridays";
        #[derive(Debug, PartialEq)]
        enum Want {
            Passed,
            Refused,
            Denied,
            Failed,
        }
        let cases: Vec<(&str, Result<(), CallError>, Want)> = vec![
            ("created (gone meanwhile)", Ok(()), Want::Passed),
            (
                "existing",
                api(
                    409,
                    "AlreadyExists",
                    "statefulsets.apps \"imp-old\" already exists",
                ),
                Want::Passed,
            ),
            (
                "409 that is not AlreadyExists",
                api(409, "Conflict", "Operation cannot be fulfilled"),
                Want::Refused,
            ),
            (
                "invalid on create",
                api(
                    422,
                    "Invalid",
                    "StatefulSet.apps \"imp-old\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                ),
                Want::Refused,
            ),
            ("webhook", api(400, "BadRequest", webhook), Want::Refused),
            (
                "quota (403, not RBAC)",
                api(403, "Forbidden", "exceeded quota: compute"),
                Want::Refused,
            ),
            ("RBAC", api(403, "Forbidden", rbac), Want::Denied),
            (
                "401",
                api(401, "Unauthorized", "Unauthorized"),
                Want::Denied,
            ),
            (
                "404",
                api(404, "NotFound", "namespaces \"fd32d\" not found"),
                Want::Denied,
            ),
            ("408", api(408, "Timeout", "slow"), Want::Failed),
            ("429", api(429, "TooManyRequests", "later"), Want::Failed),
            ("500", api(500, "InternalError", "etcd"), Want::Failed),
            ("503", api(503, "ServiceUnavailable", "x"), Want::Failed),
            (
                "timeout",
                Err(CallError::new(
                    "dry-run create of",
                    "x",
                    CallErrorKind::Timeout { after_ms: 5 },
                )),
                Want::Failed,
            ),
        ];
        for (what, answer, want) in cases {
            let got = match classify("fd32d", "imp-old", None, answer) {
                Verdict::Passed => Want::Passed,
                Verdict::Refused(r) => {
                    assert_eq!(r.code, RefusalCode::CreateRefused, "{what}");
                    Want::Refused
                }
                Verdict::Denied { .. } => Want::Denied,
                Verdict::Failed(_) => Want::Failed,
            };
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn messages_name_the_account_the_verb_and_quote_the_server() {
        let rbac = "statefulsets.apps is forbidden: User \"system:serviceaccount:team:deployer\" cannot create resource \"statefulsets\" in API group \"apps\" in the namespace \"team\"";
        let e = CallError::api(
            "dry-run create of",
            "StatefulSet team/db",
            403,
            "Forbidden",
            rbac,
        );
        let Verdict::Denied { message, cause } = classify(
            "team",
            "db",
            Some("system:serviceaccount:team:deployer"),
            Err(e),
        ) else {
            panic!("not denied")
        };
        for part in [
            "system:serviceaccount:team:deployer",
            "\"create\" on \"statefulsets\"",
            "\"apps\"",
            "namespace team",
        ] {
            assert!(message.contains(part), "{part}: {message}");
        }
        assert_eq!(cause.code(), Some(403));

        let webhook = "admission webhook \"deny.example.com\" denied the request: no";
        let e = CallError::api(
            "dry-run create of",
            "StatefulSet team/db",
            400,
            "BadRequest",
            webhook,
        );
        let Verdict::Refused(r) = classify("team", "db", None, Err(e)) else {
            panic!("not refused")
        };
        assert!(r.message.contains(webhook), "{}", r.message);
        assert!(r.message.contains("nothing was written"), "{}", r.message);
        assert_eq!((r.namespace.as_str(), r.name.as_str()), ("team", "db"));
    }
}
