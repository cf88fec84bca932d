//! What the `artifact` gate says about a revision, without I/O: the ExternalArtifact's `status`
//! (`Ready` and `status.artifact`) for a published or a not published revision, the message a
//! refused or failed record gives, and the record's side of a publish (which consumers it
//! waits for, and the hand-off a publish fills in). `service::gate::publish` reads and writes
//! the objects; this decides what they say, so it is table-tested without a cluster.

use serde_json::{Value, json};

use crate::flux::objects::{Artifact, Condition, SourceStatus};
use crate::model::artifact::{ArtifactKey, Published};
use crate::model::{GateMode, HandoffAction, RevisionRecord, RevisionState, StatefulSetOutcome};

/// `Ready=True`: the converged revision is stored and published (source-controller's reason).
pub const REASON_SUCCEEDED: &str = "Succeeded";
/// `Ready=False`: the upstream's revision was refused by the converge; not published.
pub const REASON_CONVERGE_REFUSED: &str = "ConvergeRefused";
/// `Ready=False`: the upstream's revision failed (retried with backoff); not published yet.
pub const REASON_CONVERGE_FAILED: &str = "ConvergeFailed";
/// `Ready=False`: the upstream has no artifact to converge.
pub const REASON_SOURCE_NOT_READY: &str = "SourceNotReady";

/// Conditions carry at most this much of a message (the CRD allows 32768 bytes; an API
/// server's message quoted whole can be longer).
const MAX_MESSAGE: usize = 4096;

/// The prefix of the warning a converged, not yet published record carries per consumer.
pub const WAITING_PREFIX: &str = "waiting for ";
/// What to say in the ExternalArtifact's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// `revision` (the upstream's) is converged and stored as `published`.
    Published {
        published: Published,
        revision: String,
    },
    /// Nothing new is published: `status.artifact` stays; `Ready=False` for `reason`.
    NotPublished {
        reason: &'static str,
        message: String,
    },
}

/// The `Ready` condition for `update`: `lastTransitionTime` is kept from `previous` when the
/// status (True/False) is the same, else `now`.
pub fn ready_condition(
    previous: Option<&Condition>,
    update: &Update,
    generation: Option<i64>,
    now: &str,
) -> Condition {
    let (status, reason, message) = match update {
        Update::Published { revision, .. } => (
            "True",
            REASON_SUCCEEDED,
            format!("stored artifact for converged revision '{revision}'"),
        ),
        Update::NotPublished { reason, message } => ("False", *reason, message.clone()),
    };
    let mut message = message;
    super::results::truncate_text(&mut message, MAX_MESSAGE);
    let last_transition_time = match previous {
        Some(p) if p.status == status => p
            .last_transition_time
            .clone()
            .unwrap_or_else(|| now.to_string()),
        _ => now.to_string(),
    };
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        observed_generation: generation,
        last_transition_time: Some(last_transition_time),
    }
}

/// The merge patch of the ExternalArtifact's `status` subresource for `update`, or `None` when
/// its status says so already (no write). The artifact's `lastUpdateTime` is kept when the
/// same artifact is published again; other conditions than `Ready` are kept (a merge patch
/// replaces the whole list).
pub fn status_patch(
    current: &SourceStatus,
    generation: Option<i64>,
    update: &Update,
    now: &str,
) -> Option<Value> {
    let previous = current.conditions.iter().find(|c| c.type_ == "Ready");
    let ready = ready_condition(previous, update, generation, now);
    let artifact = match update {
        Update::Published {
            published,
            revision,
        } => {
            let same = current.artifact.as_ref().filter(|a| {
                a.url == published.url
                    && a.revision == *revision
                    && a.digest.as_deref() == Some(published.digest.as_str())
                    && a.path == published.path
                    && a.size == Some(published.size)
            });
            Some(Artifact {
                url: published.url.clone(),
                revision: revision.clone(),
                digest: Some(published.digest.clone()),
                path: published.path.clone(),
                size: Some(published.size),
                last_update_time: Some(
                    same.and_then(|a| a.last_update_time.clone())
                        .unwrap_or_else(|| now.to_string()),
                ),
                metadata: Default::default(),
            })
        }
        Update::NotPublished { .. } => None,
    };
    let condition_same = previous.is_some_and(|p| {
        p.status == ready.status
            && p.reason == ready.reason
            && p.message == ready.message
            && p.observed_generation == ready.observed_generation
    });
    let artifact_same = artifact.is_none() || artifact == current.artifact;
    if condition_same && artifact_same {
        return None;
    }
    let mut conditions: Vec<Condition> = current
        .conditions
        .iter()
        .filter(|c| c.type_ != "Ready")
        .cloned()
        .collect();
    conditions.insert(0, ready);
    let mut status = json!({ "conditions": conditions });
    if let Some(a) = artifact {
        status["artifact"] = json!(a);
    }
    Some(json!({ "status": status }))
}

/// Why a finished record was not published, as the `Ready=False` reason and message: the
/// revision and what stopped it (the refusal code and StatefulSet, or the step that failed).
/// `None` for a record that is not refused or failed.
pub fn not_published(record: &RevisionRecord) -> Option<(&'static str, String)> {
    let revision = if record.revision.is_empty() {
        "(unknown)"
    } else {
        record.revision.as_str()
    };
    let (reason, outcome, word) = match record.state {
        RevisionState::Refused => (
            REASON_CONVERGE_REFUSED,
            StatefulSetOutcome::Refused,
            "refused",
        ),
        RevisionState::Failed => (REASON_CONVERGE_FAILED, StatefulSetOutcome::Failed, "failed"),
        _ => return None,
    };
    let statefulset = record.statefulsets.iter().find(|s| s.outcome == outcome);
    let message = match (statefulset, &record.error) {
        (Some(s), _) => {
            let what = match (&s.refusal, &s.error) {
                (Some(r), _) => format!("({}): {}", r.code, r.message),
                (None, Some(e)) => format!("at {}: {}", e.step, e.message),
                (None, None) => String::new(),
            };
            format!(
                "revision {revision}: StatefulSet {}/{} {word} {what}",
                s.namespace, s.name
            )
            .trim_end()
            .to_string()
        }
        (None, Some(e)) => format!("revision {revision} {word} at {}: {}", e.step, e.message),
        (None, None) => format!("revision {revision} {word}"),
    };
    Some((reason, message))
}
/// The ExternalArtifact's condition reason when the artifact it publishes is lost: the
/// storage volume no longer holds it (a reschedule onto an empty volume) and neither the upstream
/// nor another replica still has it. The next converged revision republishes.
pub const REASON_ARTIFACT_LOST: &str = "ArtifactLost";

/// What `Ready=False ArtifactLost` says.
pub fn lost_message(key: &ArtifactKey) -> String {
    format!(
        "the artifact published for ExternalArtifact {}/{} is lost: the storage no longer holds it and neither its upstream nor another replica still has it; the next converged revision is published again",
        key.namespace, key.name
    )
}
/// The consumers (other than `me`) whose newest record is not `converged` for `revision`:
/// the publish waits for them.
pub fn waiting_for(
    consumers: &[(String, String)],
    me: (&str, &str),
    revision: &str,
    last: impl Fn(&str, &str) -> Option<RevisionRecord>,
) -> Vec<(String, String)> {
    consumers
        .iter()
        .filter(|(ns, name)| (ns.as_str(), name.as_str()) != me)
        .filter(|(ns, name)| {
            !last(ns, name)
                .is_some_and(|r| r.revision == revision && r.state == RevisionState::Converged)
        })
        .cloned()
        .collect()
}

/// The warning a converged record carries while `(ns, name)` has not converged `revision`.
pub fn waiting_warning(namespace: &str, name: &str, revision: &str) -> String {
    format!("{WAITING_PREFIX}{namespace}/{name} to converge {revision} before publishing")
}

/// Marks a converged record as published at `at`: its hand-off says so and the warnings that
/// said it waits for other consumers go.
pub fn mark_published(record: &mut RevisionRecord, at: &str) {
    record.handoff = Some(crate::model::Handoff {
        mode: GateMode::Artifact,
        at: at.to_string(),
        action: HandoffAction::Published,
        requested_at: None,
        resuspended_at: None,
        attempts: Vec::new(),
        retry_at: None,
    });
    record
        .warnings
        .retain(|w| !(w.starts_with(WAITING_PREFIX) && w.ends_with(" before publishing")));
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Handoff, RefusalEntry, StatefulSetEntry, StepError, Trigger};

    fn published(digest: &str) -> Published {
        Published {
            url: format!("http://converger/externalartifact/team/apps/{digest}.tar.gz"),
            path: format!("externalartifact/team/apps/{digest}.tar.gz"),
            digest: format!("sha256:{digest}"),
            size: 42,
        }
    }

    fn cond(status: &str, reason: &str, message: &str, at: &str) -> Condition {
        Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            observed_generation: Some(1),
            last_transition_time: Some(at.into()),
        }
    }

    fn artifact(digest: &str, revision: &str, at: &str) -> Artifact {
        let p = published(digest);
        Artifact {
            url: p.url,
            revision: revision.into(),
            digest: Some(p.digest),
            path: p.path,
            size: Some(42),
            last_update_time: Some(at.into()),
            metadata: Default::default(),
        }
    }

    #[test]
    fn status_patch_by_table() {
        let pub_a = Update::Published {
            published: published("aa"),
            revision: "main@sha1:1".into(),
        };
        let refused = Update::NotPublished {
            reason: REASON_CONVERGE_REFUSED,
            message: "revision main@sha1:2: StatefulSet team/web refused (shrink): no".into(),
        };
        let stored = "stored artifact for converged revision 'main@sha1:1'";
        let ready_a = SourceStatus {
            artifact: Some(artifact("aa", "main@sha1:1", "T0")),
            conditions: vec![cond("True", REASON_SUCCEEDED, stored, "T0")],
            ..Default::default()
        };
        let other = Condition {
            type_: "Reconciling".into(),
            status: "True".into(),
            ..Default::default()
        };
        let with_other = SourceStatus {
            conditions: vec![other.clone()],
            ..Default::default()
        };
        let refused_then = SourceStatus {
            artifact: Some(artifact("aa", "main@sha1:1", "T0")),
            conditions: vec![cond(
                "False",
                REASON_CONVERGE_REFUSED,
                "revision main@sha1:2: StatefulSet team/web refused (shrink): no",
                "T1",
            )],
            ..Default::default()
        };
        let cases: Vec<(&str, SourceStatus, Update, Option<Value>)> = vec![
            (
                "first publish: artifact and Ready=True, both at now",
                SourceStatus::default(),
                pub_a.clone(),
                Some(json!({"status": {
                    "artifact": {"url": "http://converger/externalartifact/team/apps/aa.tar.gz",
                        "revision": "main@sha1:1", "digest": "sha256:aa",
                        "path": "externalartifact/team/apps/aa.tar.gz", "size": 42,
                        "lastUpdateTime": "NOW"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": stored, "observedGeneration": 1, "lastTransitionTime": "NOW"}]}})),
            ),
            (
                "the same publish again writes nothing",
                ready_a.clone(),
                pub_a.clone(),
                None,
            ),
            (
                "a refusal keeps the artifact, Ready goes False at now",
                ready_a.clone(),
                refused.clone(),
                Some(
                    json!({"status": {"conditions": [{"type": "Ready", "status": "False",
                    "reason": "ConvergeRefused",
                    "message": "revision main@sha1:2: StatefulSet team/web refused (shrink): no",
                    "observedGeneration": 1, "lastTransitionTime": "NOW"}]}}),
                ),
            ),
            (
                "the same refusal again writes nothing",
                refused_then.clone(),
                refused.clone(),
                None,
            ),
            (
                "another False reason keeps the transition time",
                refused_then.clone(),
                Update::NotPublished {
                    reason: REASON_SOURCE_NOT_READY,
                    message: "no artifact".into(),
                },
                Some(
                    json!({"status": {"conditions": [{"type": "Ready", "status": "False",
                    "reason": "SourceNotReady", "message": "no artifact",
                    "observedGeneration": 1, "lastTransitionTime": "T1"}]}}),
                ),
            ),
            (
                "publishing after a refusal: new artifact, transition at now",
                refused_then.clone(),
                Update::Published {
                    published: published("bb"),
                    revision: "main@sha1:3".into(),
                },
                Some(json!({"status": {
                    "artifact": {"url": "http://converger/externalartifact/team/apps/bb.tar.gz",
                        "revision": "main@sha1:3", "digest": "sha256:bb",
                        "path": "externalartifact/team/apps/bb.tar.gz", "size": 42,
                        "lastUpdateTime": "NOW"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": "stored artifact for converged revision 'main@sha1:3'",
                        "observedGeneration": 1, "lastTransitionTime": "NOW"}]}})),
            ),
            (
                "the same artifact with Ready=False again: lastUpdateTime kept",
                refused_then.clone(),
                pub_a.clone(),
                Some(json!({"status": {
                    "artifact": {"url": "http://converger/externalartifact/team/apps/aa.tar.gz",
                        "revision": "main@sha1:1", "digest": "sha256:aa",
                        "path": "externalartifact/team/apps/aa.tar.gz", "size": 42,
                        "lastUpdateTime": "T0"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": stored, "observedGeneration": 1, "lastTransitionTime": "NOW"}]}})),
            ),
            (
                "other conditions are kept",
                with_other,
                refused.clone(),
                Some(json!({"status": {"conditions": [
                    {"type": "Ready", "status": "False", "reason": "ConvergeRefused",
                     "message": "revision main@sha1:2: StatefulSet team/web refused (shrink): no",
                     "observedGeneration": 1, "lastTransitionTime": "NOW"},
                    {"type": "Reconciling", "status": "True"}]}})),
            ),
        ];
        for (what, current, update, expected) in cases {
            assert_eq!(
                status_patch(&current, Some(1), &update, "NOW"),
                expected,
                "{what}"
            );
        }
    }

    fn record(state: RevisionState, entries: Vec<StatefulSetEntry>) -> RevisionRecord {
        RevisionRecord {
            volumes: Default::default(),
            revision: "main@sha1:2".into(),
            digest: None,
            trigger: Trigger::Watch,
            started_at: "t".into(),
            finished_at: None,
            state,
            statefulsets: entries,
            handoff: None,
            flux: None,
            warnings: Vec::new(),
            error: None,
            generation: None,
            attempts: 1,
            gate: Some(GateMode::Artifact),
        }
    }

    fn entry(outcome: StatefulSetOutcome) -> StatefulSetEntry {
        StatefulSetEntry {
            volumes: Default::default(),
            namespace: "team".into(),
            name: "web".into(),
            outcome,
            old_uid: None,
            new_uid: None,
            templates: Vec::new(),
            changes: Vec::new(),
            claims: Vec::new(),
            deferred: Vec::new(),
            refusal: None,
            error: None,
        }
    }

    #[test]
    fn not_published_by_table() {
        let mut refused = entry(StatefulSetOutcome::Refused);
        refused.refusal = Some(RefusalEntry {
            code: crate::model::RefusalCode::Shrink,
            message: "data-web-0 from 2Gi to 1Gi".into(),
        });
        let mut failed = entry(StatefulSetOutcome::Failed);
        failed.error = Some(StepError::new("grow", "409"));
        let mut held = entry(StatefulSetOutcome::Held);
        held.name = "db".into();
        let mut render = record(RevisionState::Refused, Vec::new());
        render.error = Some(StepError::new("resolve", "missing file"));
        let mut api = record(RevisionState::Failed, Vec::new());
        api.error = Some(StepError::new("handoff", "timeout"));
        for (r, expected) in [
            (
                record(RevisionState::Refused, vec![held.clone(), refused]),
                Some((
                    REASON_CONVERGE_REFUSED,
                    "revision main@sha1:2: StatefulSet team/web refused (shrink): data-web-0 from 2Gi to 1Gi",
                )),
            ),
            (
                record(RevisionState::Failed, vec![held, failed]),
                Some((
                    REASON_CONVERGE_FAILED,
                    "revision main@sha1:2: StatefulSet team/web failed at grow: 409",
                )),
            ),
            (
                render,
                Some((
                    REASON_CONVERGE_REFUSED,
                    "revision main@sha1:2 refused at resolve: missing file",
                )),
            ),
            (
                api,
                Some((
                    REASON_CONVERGE_FAILED,
                    "revision main@sha1:2 failed at handoff: timeout",
                )),
            ),
            (record(RevisionState::Converged, Vec::new()), None),
            (record(RevisionState::Superseded, Vec::new()), None),
        ] {
            let got = not_published(&r);
            assert_eq!(
                got,
                expected.map(|(a, b)| (a, b.to_string())),
                "{:?}",
                r.state
            );
        }
    }

    #[test]
    fn waiting_for_by_table() {
        let consumers = vec![
            ("a".to_string(), "one".to_string()),
            ("a".to_string(), "two".to_string()),
            ("b".to_string(), "three".to_string()),
        ];
        let with = |rev: &str, state: RevisionState| {
            let mut r = record(state, Vec::new());
            r.revision = rev.into();
            Some(r)
        };
        type Last = fn(&str, &str) -> Option<RevisionRecord>;
        type AnyLast = Box<dyn Fn(&str, &str) -> Option<RevisionRecord>>;
        let cases: Vec<(&str, AnyLast, Vec<&str>)> = vec![
            (
                "all converged the revision",
                Box::new(move |_: &str, _: &str| with("R", RevisionState::Converged)),
                vec![],
            ),
            (
                "never run",
                Box::new((|_: &str, _: &str| None) as Last),
                vec!["two", "three"],
            ),
            (
                "an older revision, a refusal, a running one",
                Box::new(move |_: &str, n: &str| match n {
                    "two" => with("R0", RevisionState::Converged),
                    _ => with("R", RevisionState::Refused),
                }),
                vec!["two", "three"],
            ),
            (
                "one converged, one running",
                Box::new(move |_: &str, n: &str| match n {
                    "two" => with("R", RevisionState::Converged),
                    _ => with("R", RevisionState::Running),
                }),
                vec!["three"],
            ),
        ];
        for (what, last, expected) in cases {
            let got: Vec<String> = waiting_for(&consumers, ("a", "one"), "R", last)
                .into_iter()
                .map(|(_, n)| n)
                .collect();
            assert_eq!(got, expected, "{what}");
        }
    }

    #[test]
    fn mark_published_fills_the_handoff_and_drops_waiting_warnings() {
        let mut r = record(RevisionState::Converged, Vec::new());
        r.handoff = Some(Handoff {
            mode: GateMode::Artifact,
            at: "t0".into(),
            action: HandoffAction::Waiting,
            requested_at: None,
            resuspended_at: None,
            attempts: Vec::new(),
            retry_at: None,
        });
        r.warnings = vec![
            waiting_warning("a", "two", "R"),
            "claim data-web-0 not Bound yet".into(),
        ];
        mark_published(&mut r, "t1");
        let h = r.handoff.unwrap();
        assert_eq!(
            (h.mode, h.action.as_str(), h.at.as_str()),
            (GateMode::Artifact, "published", "t1")
        );
        assert_eq!(r.warnings, vec!["claim data-web-0 not Bound yet"]);
    }
}
