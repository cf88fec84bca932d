//! The hand-back: a sync operation written on the Application, as Argo CD's own API writes one
//! (`SetAppOperation`: `operation` set, `status.operationState` cleared, refused while another
//! operation is set), and the reader of the application-controller's answer.
//!
//! The operation copies `spec.syncPolicy.syncOptions` and `retry` (what the API copies: the
//! controller reads only the operation's options, so without them a `ServerSideApply=true`
//! Application would be synced client-side), names `flux-converger` as its initiator, and
//! carries a nonce in `operation.info`, which the controller copies into
//! `status.operationState.operation`: the finished state carrying the nonce is the answer to
//! this hand-back and to no other sync.

use serde_json::{Value, json};

use super::act::IMMUTABLE_ERROR;
use super::application::{Application, Revision};

/// The `operation.info` item's name, and the initiator's username.
pub const INITIATOR: &str = "flux-converger";

/// Why no operation may be written now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandBackRefused {
    /// Another operation is set (Argo CD's API answers `another operation is already in
    /// progress`): writing would replace someone's sync.
    #[error("another operation is already in progress")]
    OperationInProgress,
    /// The Application was not read from the server (no `metadata.resourceVersion`): the write
    /// needs it as its precondition.
    #[error("the Application carries no resourceVersion to write against")]
    NoResourceVersion,
}

/// The JSON merge patch that starts the hand-back's sync on `app` (as read) at `revision` (the
/// one converged): `metadata.resourceVersion` makes it a precondition (the server answers 409
/// if the Application changed since it was read, so an operation someone set meanwhile is
/// never replaced), `operation` the request, `status.operationState` cleared as Argo CD's API
/// clears it.
pub fn hand_back(
    app: &Application,
    revision: &Revision,
    nonce: &str,
) -> Result<Value, HandBackRefused> {
    if app.operation_requested() {
        return Err(HandBackRefused::OperationInProgress);
    }
    let resource_version = app
        .metadata
        .resource_version
        .as_deref()
        .filter(|rv| !rv.is_empty())
        .ok_or(HandBackRefused::NoResourceVersion)?;
    let mut sync = json!({
        // What an API sync without a strategy runs: hooks, not forced (`force` would delete and
        // re-create a refused object, pods included).
        "syncStrategy": {"hook": {}},
    });
    if revision.revisions.is_empty() {
        if !revision.revision.is_empty() {
            sync["revision"] = json!(revision.revision);
        }
    } else {
        sync["revisions"] = json!(revision.revisions);
    }
    if !app.sync_options().is_empty() {
        sync["syncOptions"] = json!(app.sync_options());
    }
    let mut operation = json!({
        "sync": sync,
        "initiatedBy": {"username": INITIATOR},
        "info": [{"name": INITIATOR, "value": nonce}],
    });
    if let Some(retry) = app.retry() {
        operation["retry"] = retry.clone();
    }
    Ok(json!({
        "metadata": {"resourceVersion": resource_version},
        "operation": operation,
        "status": {"operationState": null},
    }))
}

/// The application-controller's answer to a hand-back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandBack {
    /// `Succeeded` at this revision.
    Applied { revision: Revision },
    /// `Failed` or `Error`, with its message; `immutable`: on the same StatefulSet error.
    Failed {
        revision: Revision,
        phase: String,
        message: String,
        immutable: bool,
    },
}

/// What became of the hand-back carrying `nonce`: `None` while there is no answer yet (the
/// operation is still set, it runs or waits for a retry, or the operation state is not the one
/// carrying the nonce); else the finished state's verdict.
pub fn handed_back(app: &Application, nonce: &str) -> Option<HandBack> {
    if app.operation_requested() {
        return None;
    }
    let state = app.operation_state()?;
    if state.info(INITIATOR) != Some(nonce) || !state.completed() {
        return None;
    }
    let revision = state.revision();
    Some(match state.phase.as_str() {
        "Succeeded" => HandBack::Applied { revision },
        phase => HandBack::Failed {
            revision,
            phase: phase.to_owned(),
            message: state.message.clone(),
            immutable: state.message.contains(IMMUTABLE_ERROR)
                || state
                    .sync_result
                    .iter()
                    .flat_map(|r| &r.resources)
                    .any(|r| r.kind == "StatefulSet" && r.message.contains(IMMUTABLE_ERROR)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(value: Value) -> Application {
        serde_json::from_value(value).expect("an Application")
    }

    fn rev(sha: &str) -> Revision {
        Revision {
            revision: sha.into(),
            revisions: vec![],
        }
    }

    fn failed_app() -> Value {
        json!({
            "metadata": {"name": "db", "namespace": "argocd", "resourceVersion": "5120"},
            "spec": {"project": "", "destination": {"server": "https://kubernetes.default.svc", "namespace": "apps"},
                     "syncPolicy": {"syncOptions": ["ServerSideApply=true", "CreateNamespace=true"],
                                    "retry": {"limit": 2, "backoff": {"duration": "5s", "factor": 2}, "refresh": true}}},
            "status": {"operationState": {"phase": "Failed", "message": "x",
                       "operation": {"sync": {"revision": "abc"}}}}
        })
    }

    #[test]
    fn the_operation_copies_the_options_and_retry_and_carries_the_nonce() {
        let patch = hand_back(&app(failed_app()), &rev("abc"), "n-1").unwrap();
        assert_eq!(
            patch,
            json!({
                "metadata": {"resourceVersion": "5120"},
                "operation": {
                    "sync": {"revision": "abc", "syncOptions": ["ServerSideApply=true", "CreateNamespace=true"],
                             "syncStrategy": {"hook": {}}},
                    "initiatedBy": {"username": "flux-converger"},
                    "info": [{"name": "flux-converger", "value": "n-1"}],
                    "retry": {"limit": 2, "backoff": {"duration": "5s", "factor": 2}, "refresh": true},
                },
                "status": {"operationState": null},
            })
        );
    }

    #[test]
    fn without_options_or_retry_none_are_written_and_multi_source_names_revisions() {
        let mut v = failed_app();
        v["spec"]["syncPolicy"] = json!({});
        let many = Revision {
            revision: String::new(),
            revisions: vec!["a".into(), "b".into()],
        };
        let patch = hand_back(&app(v), &many, "n").unwrap();
        assert_eq!(
            patch["operation"],
            json!({
                "sync": {"revisions": ["a", "b"], "syncStrategy": {"hook": {}}},
                "initiatedBy": {"username": "flux-converger"},
                "info": [{"name": "flux-converger", "value": "n"}],
            })
        );
    }

    #[test]
    fn never_over_another_operation_nor_without_a_resource_version() {
        let mut v = failed_app();
        v["operation"] = json!({"sync": {}});
        assert_eq!(
            hand_back(&app(v), &rev("abc"), "n"),
            Err(HandBackRefused::OperationInProgress)
        );
        let mut v = failed_app();
        v["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        assert_eq!(
            hand_back(&app(v), &rev("abc"), "n"),
            Err(HandBackRefused::NoResourceVersion)
        );
    }

    fn answered(phase: &str, nonce: Option<&str>, message: &str, operation: bool) -> Value {
        let info = nonce
            .map(|n| json!([{"name": "flux-converger", "value": n}]))
            .unwrap_or(json!([]));
        let mut v = json!({
            "metadata": {"name": "db", "namespace": "argocd"},
            "status": {"operationState": {
                "phase": phase, "message": message, "finishedAt": "2026-08-22T10:00:00Z",
                "operation": {"sync": {"revision": "abc"}, "initiatedBy": {"username": "flux-converger"}, "info": info},
                "syncResult": {"revision": "abc", "resources": []}}}
        });
        if operation {
            v["operation"] = json!({"sync": {"revision": "abc"}});
        }
        v
    }

    #[test]
    fn the_answer_by_table() {
        let immutable = "one or more objects failed to apply, reason: StatefulSet.apps \"db\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas' are forbidden";
        for (name, v, expected) in [
            (
                "succeeded",
                answered(
                    "Succeeded",
                    Some("n"),
                    "successfully synced (all tasks run)",
                    false,
                ),
                Some(HandBack::Applied {
                    revision: rev("abc"),
                }),
            ),
            (
                "failed on the same error",
                answered("Failed", Some("n"), immutable, false),
                Some(HandBack::Failed {
                    revision: rev("abc"),
                    phase: "Failed".into(),
                    message: immutable.into(),
                    immutable: true,
                }),
            ),
            (
                "error on another",
                answered(
                    "Error",
                    Some("n"),
                    "Failed to load application project",
                    false,
                ),
                Some(HandBack::Failed {
                    revision: rev("abc"),
                    phase: "Error".into(),
                    message: "Failed to load application project".into(),
                    immutable: false,
                }),
            ),
            (
                "completed but .operation not cleared yet",
                answered("Succeeded", Some("n"), "", true),
                None,
            ),
            (
                "waiting for a retry",
                answered(
                    "Running",
                    Some("n"),
                    "x. Retrying attempt #1 at 3:04PM.",
                    true,
                ),
                None,
            ),
            (
                "another sync's state",
                answered("Succeeded", Some("other"), "", false),
                None,
            ),
            ("no nonce", answered("Succeeded", None, "", false), None),
        ] {
            assert_eq!(handed_back(&app(v), "n"), expected, "{name}");
        }
        assert_eq!(
            handed_back(&app(json!({"metadata": {"name": "db"}})), "n"),
            None
        );
    }
}
