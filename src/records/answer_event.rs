//! The Event a controller's answer to a hand-off gives, apart from the revision's own
//! (`Converged`, published when the revision was handed off and saying the answer is pending):
//! helm-controller's upgrade after a hand-back applied the release (at which version), failed
//! again (and why), or no answer came within `--handoff-timeout`. Pure: a record in, an Event
//! (or none) out.

use super::events::{
    REASON_HANDOFF_APPLIED, REASON_HANDOFF_FAILED, REASON_HANDOFF_TIMEOUT, RevisionEvent, Severity,
};
use crate::model::{FluxOutcome, Kind, RevisionRecord};

/// The Event of the answer `record.flux` holds, from the controller of `kind`; `None` while
/// there is none (or it is pending, or a race only the Kustomizations' observer records).
pub fn answer_event(kind: Kind, record: &RevisionRecord) -> Option<RevisionEvent> {
    let flux = record.flux.as_ref()?;
    let controller = kind.controller();
    let head = format!("revision {} handed off", record.revision);
    let (severity, reason, message) = match flux.outcome {
        FluxOutcome::Applied => (
            Severity::Info,
            REASON_HANDOFF_APPLIED,
            match flux.applied_revision.as_deref() {
                Some(applied) => format!("{head}: {controller} applied it at {applied}"),
                None => format!("{head}: {controller} applied it"),
            },
        ),
        FluxOutcome::Failed => (
            Severity::Error,
            REASON_HANDOFF_FAILED,
            format!(
                "{head}: {controller} failed it again{}: {}",
                flux.attempted_revision
                    .as_deref()
                    .map(|v| format!(" at {v}"))
                    .unwrap_or_default(),
                flux.message.as_deref().unwrap_or("no message")
            ),
        ),
        FluxOutcome::Timeout => (
            Severity::Error,
            REASON_HANDOFF_TIMEOUT,
            format!(
                "{head}: {}",
                flux.message
                    .clone()
                    .unwrap_or_else(|| format!("{controller} did not answer"))
            ),
        ),
        FluxOutcome::Pending | FluxOutcome::Raced => return None,
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
    use crate::model::{FluxResult, GateMode, RevisionState, Trigger};

    fn answered(flux: Option<FluxResult>) -> RevisionRecord {
        let mut record = RevisionRecord::new(
            "v2",
            Trigger::Watch,
            "t",
            RevisionState::Converged,
            GateMode::Reconcile,
            Some(1),
        );
        record.flux = flux;
        record
    }

    fn flux(
        outcome: FluxOutcome,
        applied: Option<&str>,
        attempted: Option<&str>,
        message: Option<&str>,
    ) -> Option<FluxResult> {
        Some(FluxResult {
            outcome,
            applied_revision: applied.map(String::from),
            message: message.map(String::from),
            attempted_revision: attempted.map(String::from),
        })
    }

    #[test]
    fn answer_event_by_table() {
        let immutable = "Helm upgrade failed: ... Forbidden: updates to statefulset spec for fields other than 'replicas' ... are forbidden";
        for (answer, expected) in [
            (
                flux(FluxOutcome::Applied, Some("v3"), None, None),
                Some((
                    Severity::Info,
                    "HandoffApplied",
                    "revision v2 handed off: helm-controller applied it at v3".to_string(),
                )),
            ),
            (
                flux(FluxOutcome::Failed, None, Some("v3"), Some(immutable)),
                Some((
                    Severity::Error,
                    "HandoffFailed",
                    format!(
                        "revision v2 handed off: helm-controller failed it again at v3: {immutable}"
                    ),
                )),
            ),
            (
                flux(
                    FluxOutcome::Timeout,
                    None,
                    None,
                    Some("helm-controller did not handle the request within 10m"),
                ),
                Some((
                    Severity::Error,
                    "HandoffTimeout",
                    "revision v2 handed off: helm-controller did not handle the request within 10m"
                        .to_string(),
                )),
            ),
            (flux(FluxOutcome::Pending, None, None, None), None),
            (None, None),
        ] {
            let got = answer_event(Kind::HELM_RELEASE, &answered(answer.clone()))
                .map(|e| (e.severity, e.reason, e.message));
            let expected = expected.map(|(s, r, m)| (s, r.to_string(), m));
            assert_eq!(got, expected, "{answer:?}");
        }
    }
}
