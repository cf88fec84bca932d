//! The proof step, pure parts: the object to dry-run, and what the server's answer means.
//!
//! `decide` only knows the volumeClaimTemplates may not change; the server knows every other
//! immutable field (and they vary with the Kubernetes version). Dry-running the desired object
//! with the live templates put back asks the server exactly one question: "apart from the
//! templates, would Flux's apply pass?"

use k8s_openapi::api::apps::v1::StatefulSet;

use crate::cluster::CallError;
use crate::decide::{Refusal, RefusalCode};

/// The start of the server's message when a StatefulSet update touches an immutable field
/// (the field list that follows varies with the Kubernetes version).
pub const IMMUTABLE_PREFIX: &str = "updates to statefulset spec for fields other than";

/// The desired object with the live `volumeClaimTemplates` put back.
///
/// The templates lose `status` and `metadata.creationTimestamp` (server output, not intent);
/// the server accepts them either way.
pub fn proof_object(desired: &StatefulSet, live: &StatefulSet) -> StatefulSet {
    let mut proof = desired.clone();
    let templates = live
        .spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.clone())
        .map(|ts| {
            ts.into_iter()
                .map(|mut t| {
                    t.status = None;
                    t.metadata.creation_timestamp = None;
                    t
                })
                .collect::<Vec<_>>()
        });
    if let Some(spec) = proof.spec.as_mut() {
        spec.volume_claim_templates = templates;
    }
    proof.status = None;
    proof
}

/// What a failed dry run means.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// The server refuses the object: Flux's apply would fail too. Nothing is proven.
    Refused(Refusal),
    /// The server could not answer (5xx, throttled, timeout, connection): try again later.
    Failed(CallError),
    /// 401, 403 or 404: the converger may not ask, or the object's namespace or API is
    /// missing. Not a statement about the object (Flux, with its own access, may well apply
    /// it), so not a refusal: a failure whose message says what access or object to fix.
    Denied { message: String, cause: CallError },
}

/// Reads a failed dry run: 422 naming the immutable fields → `other-immutable`; 401, 403 and
/// 404 → a failure to fix access ([`Verdict::Denied`]); any other rejection of the object
/// (4xx but 408/429, which are about the request, not the object) → `rejected`, quoting the
/// server; anything else is a failure to retry.
pub fn classify(namespace: &str, name: &str, error: CallError) -> Verdict {
    let refusal = |code, message| {
        Verdict::Refused(Refusal {
            namespace: namespace.to_string(),
            name: name.to_string(),
            code,
            message,
        })
    };
    let text = error.server_text();
    match error.code() {
        Some(422) if text.contains(IMMUTABLE_PREFIX) => refusal(
            RefusalCode::OtherImmutable,
            format!(
                "a field other than the volumeClaimTemplates cannot change in place: the server's \
                 dry run of the desired object with the live volumeClaimTemplates put back says \
                 \"{text}\""
            ),
        ),
        Some(401) => Verdict::Denied {
            message: format!(
                "the API server does not accept the converger's credentials (HTTP 401: \"{text}\"): \
                 renew or fix the kubeconfig or service account token"
            ),
            cause: error,
        },
        Some(403) => Verdict::Denied {
            message: format!(
                "the converger may not server-side apply StatefulSet {namespace}/{name} (HTTP 403: \
                 \"{text}\"): it needs the RBAC verb \"patch\" on \"statefulsets\" in API group \
                 \"apps\" in namespace {namespace} (as the identity it acts as, the Kustomization's \
                 service account when impersonating)"
            ),
            cause: error,
        },
        Some(404) => Verdict::Denied {
            message: format!(
                "the server-side apply dry run of StatefulSet {namespace}/{name} found nothing to \
                 apply to (HTTP 404: \"{text}\"): namespace {namespace} or the apps/v1 API is \
                 missing"
            ),
            cause: error,
        },
        Some(code) if (400..500).contains(&code) && code != 408 && code != 429 => refusal(
            RefusalCode::Rejected,
            format!(
                "the server's dry run rejects the desired object (HTTP {code}): \"{text}\"; \
                 Flux's apply would fail the same way and nothing is proven, so nothing is done"
            ),
        ),
        _ => Verdict::Failed(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::CallErrorKind;

    fn fixture_error(file: &str) -> CallError {
        let path = format!("{}/tests/fixtures/v1.28/{file}", env!("CARGO_MANIFEST_DIR"));
        let status: kube::core::Status =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        CallError::new(
            "server-side apply dry run of",
            "StatefulSet default/web",
            CallErrorKind::Api {
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
                causes: status
                    .details
                    .map(|d| d.causes.into_iter().map(|c| c.message).collect())
                    .unwrap_or_default(),
            },
        )
    }

    fn code_of(v: &Verdict) -> Option<RefusalCode> {
        match v {
            Verdict::Refused(r) => Some(r.code),
            Verdict::Failed(_) | Verdict::Denied { .. } => None,
        }
    }

    #[test]
    fn server_answers_map_to_refusals_or_retries() {
        let api = |code: u16, reason: &str, message: &str| {
            CallError::api("dry run", "StatefulSet default/web", code, reason, message)
        };
        let cases: Vec<(&str, CallError, Option<RefusalCode>)> = vec![
            (
                "immutable fixture",
                fixture_error("error-statefulset-update-forbidden.json"),
                Some(RefusalCode::OtherImmutable),
            ),
            (
                "422 for another reason (fixture)",
                fixture_error("error-statefulset-dryrun-invalid-other.json"),
                Some(RefusalCode::Rejected),
            ),
            (
                "400",
                api(400, "BadRequest", "bad"),
                Some(RefusalCode::Rejected),
            ),
            (
                "409 conflict on the object",
                api(409, "Conflict", "field manager conflict"),
                Some(RefusalCode::Rejected),
            ),
            (
                "408 is about the request",
                api(408, "Timeout", "slow"),
                None,
            ),
            ("429 throttled", api(429, "TooManyRequests", "later"), None),
            ("500", api(500, "InternalError", "etcd"), None),
            ("503", api(503, "ServiceUnavailable", "x"), None),
            (
                "timeout",
                CallError::new("dry run", "x", CallErrorKind::Timeout { after_ms: 5 }),
                None,
            ),
            (
                "connection",
                CallError::new(
                    "dry run",
                    "x",
                    CallErrorKind::Connection {
                        message: "reset".into(),
                    },
                ),
                None,
            ),
        ];
        for (what, error, want) in cases {
            assert_eq!(code_of(&classify("default", "web", error)), want, "{what}");
        }
    }

    #[test]
    fn access_failures_are_not_refusals_and_name_what_to_fix() {
        let api = |code: u16, reason: &str, message: &str| {
            CallError::api("dry run", "StatefulSet default/web", code, reason, message)
        };
        let forbidden = "statefulsets.apps \"web\" is forbidden: User \"system:serviceaccount:apps:deployer\" cannot patch resource \"statefulsets\" in API group \"apps\" in the namespace \"default\"";
        let cases = [
            (api(401, "Unauthorized", "Unauthorized"), "credentials"),
            (
                api(403, "Forbidden", forbidden),
                "\"patch\" on \"statefulsets\"",
            ),
            (
                api(404, "NotFound", "namespaces \"default\" not found"),
                "namespace default",
            ),
        ];
        for (error, names) in cases {
            let code = error.code();
            match classify("default", "web", error) {
                Verdict::Denied { message, cause } => {
                    assert!(message.contains(names), "{code:?}: {message}");
                    assert_eq!(cause.code(), code);
                }
                other => panic!("{code:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn refusals_quote_the_server() {
        let Verdict::Refused(r) = classify(
            "default",
            "web",
            fixture_error("error-statefulset-update-forbidden.json"),
        ) else {
            panic!("not refused")
        };
        assert!(
            r.message
                .contains("'replicas', 'ordinals', 'template', 'updateStrategy'"),
            "{}",
            r.message
        );
        let Verdict::Refused(r) = classify(
            "default",
            "web",
            fixture_error("error-statefulset-dryrun-invalid-other.json"),
        ) else {
            panic!("not refused")
        };
        assert!(
            r.message
                .contains("only allowed for updateStrategy 'RollingUpdate'"),
            "{}",
            r.message
        );
        assert_eq!((r.namespace.as_str(), r.name.as_str()), ("default", "web"));
    }

    #[test]
    fn proof_puts_the_live_templates_back_without_server_output() {
        let dir = format!("{}/tests/fixtures/v1.28", env!("CARGO_MANIFEST_DIR"));
        let read = |f: &str| -> StatefulSet {
            serde_saphyr::from_str(&std::fs::read_to_string(format!("{dir}/{f}")).unwrap()).unwrap()
        };
        let desired = read("desired-statefulset-2Gi.yaml");
        let live = read("live-statefulset.yaml");
        let proof = proof_object(&desired, &live);
        let templates = proof
            .spec
            .as_ref()
            .unwrap()
            .volume_claim_templates
            .as_ref()
            .unwrap();
        assert_eq!(templates.len(), 1);
        let t = &templates[0];
        assert!(t.status.is_none() && t.metadata.creation_timestamp.is_none());
        let storage = &t
            .spec
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"];
        assert_eq!(storage.0, "1Gi");
        // Everything else is the desired object's.
        let mut back = proof.clone();
        back.spec.as_mut().unwrap().volume_claim_templates = desired
            .spec
            .as_ref()
            .unwrap()
            .volume_claim_templates
            .clone();
        assert_eq!(back, desired);
        assert!(proof.metadata.uid.is_none());
    }
}
