//! The Event a finished revision record gives: what an operator reads on the gated object
//! (`kubectl describe`, `flux events`). Pure: a record in, an Event (or none) out.

use super::artifact_status::WAITING_PREFIX;
use super::entry;
use super::events::{REASON_CONVERGED, REASON_FAILED, REASON_REFUSED, RevisionEvent, Severity};
use crate::model::{FluxOutcome, GateMode, HandoffAction, RevisionRecord, RevisionState};

/// The event a finished record gives: converged, refused and failed revisions (a superseded
/// one is followed by the run of its successor, which gives its own).
pub fn revision_event(record: &RevisionRecord) -> Option<RevisionEvent> {
    revision_event_answered_by(record, "Flux")
}

/// [`revision_event`] for a kind whose hand-back is answered by another tool than Flux (`"Argo
/// CD"`): the record's `flux` is that tool's answer, and the message names it.
pub fn revision_event_answered_by(
    record: &RevisionRecord,
    answerer: &str,
) -> Option<RevisionEvent> {
    let details = entry::describe(&record.statefulsets);
    let error = record
        .error
        .as_ref()
        .map(|e| format!("{}: {}", e.step, e.message));
    let join = |head: String| {
        [
            Some(head),
            (!details.is_empty()).then(|| details.clone()),
            error.clone(),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n")
    };
    let (severity, reason, message) = match record.state {
        RevisionState::Converged => {
            let flux = match &record.flux {
                Some(f) => match f.outcome {
                    FluxOutcome::Applied => format!("{answerer} applied it"),
                    FluxOutcome::Failed => format!(
                        "{answerer} failed to apply it: {}",
                        f.message.as_deref().unwrap_or_default()
                    ),
                    FluxOutcome::Timeout => {
                        format!("{answerer} has not applied it yet (timed out)")
                    }
                    FluxOutcome::Pending => format!("{answerer}'s answer is pending"),
                    FluxOutcome::Raced => format!(
                        "{answerer} attempted {} instead",
                        f.attempted_revision
                            .as_deref()
                            .unwrap_or("another revision")
                    ),
                },
                None => "handed off".into(),
            };
            let mode = record.gate.map(GateMode::as_str).unwrap_or("off");
            let waiting = record
                .handoff
                .as_ref()
                .is_some_and(|h| h.action == HandoffAction::Waiting);
            let head = if waiting {
                // Artifact mode, other consumers of the ExternalArtifact still to converge it:
                // the warnings name them.
                let whom: Vec<&str> = record
                    .warnings
                    .iter()
                    .filter(|w| w.starts_with(WAITING_PREFIX))
                    .map(String::as_str)
                    .collect();
                format!(
                    "revision {} converged, not published yet: {}",
                    record.revision,
                    whom.join("; ")
                )
            } else {
                format!(
                    "revision {} converged, handed off ({mode}): {flux}",
                    record.revision
                )
            };
            (Severity::Info, REASON_CONVERGED, join(head))
        }
        RevisionState::Refused => (
            Severity::Error,
            REASON_REFUSED,
            join(format!(
                "revision {} refused: not handed off",
                record.revision
            )),
        ),
        RevisionState::Failed => (
            Severity::Error,
            REASON_FAILED,
            join(format!("revision {} failed: will retry", record.revision)),
        ),
        RevisionState::Running | RevisionState::Superseded => return None,
    };
    Some(RevisionEvent {
        severity,
        reason: reason.to_string(),
        message,
        revision: record.revision.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FluxResult, Handoff};
    use crate::model::{StatefulSetEntry, StatefulSetOutcome, Trigger};

    fn record(state: RevisionState, flux: Option<FluxOutcome>) -> RevisionRecord {
        RevisionRecord {
            volumes: Default::default(),
            revision: "main@sha1:2".into(),
            digest: None,
            trigger: Trigger::Webhook,
            started_at: "t".into(),
            finished_at: None,
            state,
            statefulsets: vec![StatefulSetEntry {
                volumes: Default::default(),
                namespace: "apps".into(),
                name: "web".into(),
                outcome: StatefulSetOutcome::Converged,
                old_uid: Some("u1".into()),
                new_uid: Some("u2".into()),
                templates: Vec::new(),
                changes: Vec::new(),
                claims: Vec::new(),
                deferred: Vec::new(),
                refusal: None,
                error: None,
            }],
            handoff: None,
            flux: flux.map(|outcome| FluxResult {
                outcome,
                applied_revision: None,
                message: Some("boom".into()),
                attempted_revision: None,
            }),
            warnings: Vec::new(),
            error: None,
            generation: None,
            gate: Some(GateMode::Reconcile),
            attempts: 1,
        }
    }

    #[test]
    fn revision_event_by_table() {
        let sts = "StatefulSet apps/web: recreated without restarting pods";
        for (state, flux, expected) in [
            (
                RevisionState::Converged,
                Some(FluxOutcome::Applied),
                Some((
                    Severity::Info,
                    REASON_CONVERGED,
                    format!(
                        "revision main@sha1:2 converged, handed off (reconcile): Flux applied it\n{sts}"
                    ),
                )),
            ),
            (
                RevisionState::Converged,
                Some(FluxOutcome::Failed),
                Some((
                    Severity::Info,
                    REASON_CONVERGED,
                    format!(
                        "revision main@sha1:2 converged, handed off (reconcile): Flux failed to apply it: boom\n{sts}"
                    ),
                )),
            ),
            (
                RevisionState::Refused,
                None,
                Some((
                    Severity::Error,
                    REASON_REFUSED,
                    format!("revision main@sha1:2 refused: not handed off\n{sts}"),
                )),
            ),
            (
                RevisionState::Failed,
                None,
                Some((
                    Severity::Error,
                    REASON_FAILED,
                    format!("revision main@sha1:2 failed: will retry\n{sts}"),
                )),
            ),
            (RevisionState::Superseded, None, None),
            (RevisionState::Running, None, None),
        ] {
            let got =
                revision_event(&record(state, flux)).map(|e| (e.severity, e.reason, e.message));
            let expected = expected.map(|(s, r, m)| (s, r.to_string(), m));
            assert_eq!(got, expected, "{state:?}");
        }
    }

    /// An Argo CD Application's hand-back is answered by Argo CD: the message says so.
    #[test]
    fn another_answerer_is_named() {
        let got = |outcome| {
            revision_event_answered_by(&record(RevisionState::Converged, Some(outcome)), "Argo CD")
                .unwrap()
                .message
        };
        let sts = "StatefulSet apps/web: recreated without restarting pods";
        assert_eq!(
            got(FluxOutcome::Applied),
            format!(
                "revision main@sha1:2 converged, handed off (reconcile): Argo CD applied it\n{sts}"
            )
        );
        assert_eq!(
            got(FluxOutcome::Timeout),
            format!(
                "revision main@sha1:2 converged, handed off (reconcile): Argo CD has not applied it yet (timed out)\n{sts}"
            )
        );
    }

    #[test]
    fn an_artifact_revision_waiting_for_other_consumers_says_so() {
        let mut r = record(RevisionState::Converged, None);
        r.gate = Some(GateMode::Artifact);
        r.handoff = Some(Handoff {
            mode: GateMode::Artifact,
            at: "t".into(),
            action: HandoffAction::Waiting,
            requested_at: None,
            resuspended_at: None,
            attempts: Vec::new(),
            retry_at: None,
        });
        r.warnings = vec![crate::records::artifact_status::waiting_warning(
            "team",
            "db",
            "main@sha1:2",
        )];
        let e = revision_event(&r).unwrap();
        assert_eq!(
            e.message,
            "revision main@sha1:2 converged, not published yet: waiting for team/db to converge main@sha1:2 before publishing\nStatefulSet apps/web: recreated without restarting pods"
        );
        r.handoff.as_mut().unwrap().action = HandoffAction::Published;
        r.flux = Some(FluxResult {
            outcome: FluxOutcome::Applied,
            applied_revision: None,
            message: None,
            attempted_revision: None,
        });
        assert_eq!(
            revision_event(&r).unwrap().message,
            "revision main@sha1:2 converged, handed off (artifact): Flux applied it\nStatefulSet apps/web: recreated without restarting pods"
        );
    }
}
