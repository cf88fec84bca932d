//! From what a converge returned to the StatefulSet entries of a revision record, and from the
//! entries to what happens to the revision. Pure: table-tested without a cluster.

use crate::converge::{ClaimAction, ConvergeError, Outcome, Report};
use crate::model::{
    ClaimChange, DeferredClaim, RefusalEntry, StatefulSetEntry, StatefulSetOutcome, StepError,
    TemplateChange,
};

/// The entry for a converge that returned a report.
pub fn from_report(report: &Report) -> StatefulSetEntry {
    let mut entry = empty(&report.namespace, &report.name);
    entry.old_uid = report.old_uid.clone();
    entry.new_uid = report.new_uid.clone();
    if let Some(plan) = &report.plan {
        entry.templates = plan
            .grown
            .iter()
            .map(|g| TemplateChange {
                template: g.template.clone(),
                from: g.from.as_str().to_string(),
                to: g.to.as_str().to_string(),
            })
            .collect();
        entry.changes = plan
            .changes
            .iter()
            .filter(|c| c.class != crate::decide::ChangeClass::StorageGrown)
            .cloned()
            .collect();
    }
    for c in &report.claims {
        match c.action {
            ClaimAction::Resized => entry.claims.push(ClaimChange {
                claim: c.claim.clone(),
                from: c.from.clone().unwrap_or_default(),
                to: c.to.clone().unwrap_or_default(),
            }),
            ClaimAction::Deferred => entry.deferred.push(DeferredClaim {
                claim: c.claim.clone(),
                reason: c.reason.clone().unwrap_or_default(),
            }),
            _ => {}
        }
    }
    entry.volumes = report.volumes.clone();
    entry.volumes.sort_by(|a, b| a.claim.cmp(&b.claim));
    entry.refusal = report.refusal.as_ref().map(|r| RefusalEntry {
        code: r.code,
        message: r.message.clone(),
    });
    if report.outcome == Outcome::Held {
        // Nothing was written: no template grown, no claim grown, only why.
        let mut held = empty(&report.namespace, &report.name);
        held.old_uid = report.old_uid.clone();
        held.outcome = StatefulSetOutcome::Held;
        held.error = Some(held_error(
            report
                .held_by
                .clone()
                .unwrap_or_else(|| "not written".into()),
        ));
        return held;
    }
    entry.outcome = match report.outcome {
        Outcome::Refused => StatefulSetOutcome::Refused,
        Outcome::Converged | Outcome::RecreatedElsewhere | Outcome::AcceptedByServer
            if !entry.deferred.is_empty() =>
        {
            StatefulSetOutcome::Deferred
        }
        Outcome::Converged | Outcome::RecreatedElsewhere | Outcome::AcceptedByServer => {
            StatefulSetOutcome::Converged
        }
        Outcome::Unchanged | Outcome::Absent if !entry.deferred.is_empty() => {
            StatefulSetOutcome::Deferred
        }
        Outcome::Unchanged | Outcome::Absent => StatefulSetOutcome::Unchanged,
        // Replaced or deleted by someone else meanwhile (the next run decides against what
        // is there then), a dry-run outcome, or one added to `converge` after this was
        // written: never taken for success, so the revision is retried, not handed off.
        #[allow(unreachable_patterns)]
        other => {
            entry.error = Some(StepError::new(
                "converge",
                format!(
                    "StatefulSet {}/{}: converge ended {}: not converged, retried",
                    report.namespace,
                    report.name,
                    other.as_str()
                ),
            ));
            StatefulSetOutcome::Failed
        }
    };
    entry
}

/// The entry for a converge that failed; `message` is the error as it should be shown (a
/// 403 already names the missing permission), `hint` what to run by hand.
pub fn from_error(
    namespace: &str,
    name: &str,
    error: &ConvergeError,
    message: String,
    hint: Option<String>,
) -> StatefulSetEntry {
    let mut entry = empty(namespace, name);
    entry.outcome = StatefulSetOutcome::Failed;
    entry.error = Some(StepError {
        step: error
            .step()
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|| "converge".into()),
        message,
        hint,
    });
    entry
}

/// The `error` of a held entry: step `held`, the message naming the StatefulSet that was
/// refused or failed (the dashboard shows that one's problem, not this).
fn held_error(message: String) -> StepError {
    StepError {
        step: "held".into(),
        message,
        hint: None,
    }
}

/// An entry not written because `by` was refused or failed in the same revision.
pub fn held(namespace: &str, name: &str, message: String) -> StatefulSetEntry {
    let mut entry = empty(namespace, name);
    entry.outcome = StatefulSetOutcome::Held;
    entry.error = Some(held_error(message));
    entry
}

/// An entry that failed before the converge started (the rendered object does not decode).
pub fn failed(namespace: &str, name: &str, step: &str, message: String) -> StatefulSetEntry {
    let mut entry = empty(namespace, name);
    entry.outcome = StatefulSetOutcome::Failed;
    entry.error = Some(StepError {
        step: step.into(),
        message,
        hint: None,
    });
    entry
}

fn empty(namespace: &str, name: &str) -> StatefulSetEntry {
    StatefulSetEntry {
        namespace: namespace.to_string(),
        name: name.to_string(),
        outcome: StatefulSetOutcome::Unchanged,
        old_uid: None,
        new_uid: None,
        templates: Vec::new(),
        changes: Vec::new(),
        claims: Vec::new(),
        deferred: Vec::new(),
        refusal: None,
        error: None,
        volumes: Vec::new(),
    }
}

/// The warnings deferred claims leave on the record: nothing waiting will not mend.
pub fn deferred_warnings(entries: &[StatefulSetEntry]) -> Vec<String> {
    entries
        .iter()
        .flat_map(|e| {
            e.deferred.iter().map(move |d| {
                format!(
                    "StatefulSet {}/{}: claim {} deferred: {}",
                    e.namespace, e.name, d.claim, d.reason
                )
            })
        })
        .collect()
}

/// One line per StatefulSet that did something, was refused or failed (for events).
pub fn describe(entries: &[StatefulSetEntry]) -> String {
    let mut lines = Vec::new();
    for e in entries {
        let what = match e.outcome {
            StatefulSetOutcome::Unchanged => continue,
            StatefulSetOutcome::Refused => match &e.refusal {
                Some(r) => format!("refused ({}): {}", r.code, r.message),
                None => "refused".into(),
            },
            StatefulSetOutcome::Failed => match &e.error {
                Some(err) => format!("failed at {}: {}", err.step, err.message),
                None => "failed".into(),
            },
            StatefulSetOutcome::Held => match &e.error {
                Some(err) => format!("held: {}", err.message),
                None => "held: not written".into(),
            },
            StatefulSetOutcome::Converged | StatefulSetOutcome::Deferred => {
                let mut parts = Vec::new();
                for t in &e.templates {
                    parts.push(format!("template {} {} -> {}", t.template, t.from, t.to));
                }
                if !e.claims.is_empty() {
                    parts.push(format!("{} claim(s) grown", e.claims.len()));
                }
                if e.new_uid.is_some() {
                    parts.push("recreated without restarting pods".into());
                }
                if !e.deferred.is_empty() {
                    parts.push(format!("{} claim(s) deferred", e.deferred.len()));
                }
                parts.join(", ")
            }
        };
        lines.push(format!("StatefulSet {}/{}: {what}", e.namespace, e.name));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RevisionState;

    fn entry(name: &str, outcome: StatefulSetOutcome) -> StatefulSetEntry {
        let mut e = empty("ns", name);
        e.outcome = outcome;
        e
    }

    #[test]
    fn revision_state_of_statefulsets_by_table() {
        use RevisionState::{Converged as HandOff, Failed as RFailed, Refused as RRefused};
        use StatefulSetOutcome::*;
        for (outcomes, expected) in [
            (vec![], HandOff),
            (vec![Unchanged, Converged, Deferred], HandOff),
            (vec![Converged, Failed], RFailed),
            (vec![Failed, Refused], RRefused),
            (vec![Refused, Converged], RRefused),
            (vec![Held, Refused], RRefused),
            (vec![Held, Failed], RFailed),
            (vec![Held, Unchanged], RFailed),
        ] {
            let entries: Vec<_> = outcomes
                .iter()
                .enumerate()
                .map(|(i, o)| entry(&format!("s{i}"), *o))
                .collect();
            assert_eq!(
                RevisionState::of_statefulsets(&entries),
                expected,
                "{outcomes:?}"
            );
        }
    }

    #[test]
    fn carried_changes_reach_the_record_and_a_change_taken_in_place_is_converged() {
        use crate::decide::{Change, ChangeClass, Plan};
        let change = |class| Change {
            class,
            field: "spec.podManagementPolicy".into(),
            live: "\"Parallel\"".into(),
            declared: "\"OrderedReady\"".into(),
            note: None,
        };
        for outcome in [Outcome::Converged, Outcome::AcceptedByServer] {
            let mut report = Report::new("ns", "db", false);
            report.outcome = outcome;
            report.plan = Some(Plan {
                namespace: "ns".into(),
                name: "db".into(),
                recreate: outcome == Outcome::Converged,
                changes: vec![
                    change(ChangeClass::PodManagementPolicy),
                    change(ChangeClass::StorageGrown),
                ],
                grown: Vec::new(),
                resize: Vec::new(),
                deferred: Vec::new(),
                recover: Vec::new(),
                modify: Vec::new(),
                attribute_classes: Default::default(),
            });
            let e = from_report(&report);
            assert_eq!(e.outcome, StatefulSetOutcome::Converged, "{outcome:?}");
            assert!(e.error.is_none(), "{outcome:?}: {:?}", e.error);
            // Storage growth is listed in `templates`; the record lists the others.
            assert_eq!(e.changes, vec![change(ChangeClass::PodManagementPolicy)]);
        }
    }

    #[test]
    fn a_held_report_is_a_held_entry_naming_why_and_nothing_grown() {
        let mut report = Report::new("ns", "a-db", false);
        report.outcome = Outcome::Held;
        report.held_by =
            Some("not written: StatefulSet ns/b-cache of the same revision was refused".into());
        report.old_uid = Some("u1".into());
        report.plan = Some(crate::decide::Plan {
            namespace: "ns".into(),
            name: "a-db".into(),
            recreate: true,
            changes: Vec::new(),
            grown: vec![crate::decide::TemplateGrowth {
                template: "data".into(),
                from: "1Gi".parse().unwrap(),
                to: "2Gi".parse().unwrap(),
            }],
            resize: Vec::new(),
            deferred: Vec::new(),
            recover: Vec::new(),
            modify: Vec::new(),
            attribute_classes: Default::default(),
        });
        let e = from_report(&report);
        assert_eq!(e.outcome, StatefulSetOutcome::Held);
        assert!(e.templates.is_empty() && e.claims.is_empty() && e.new_uid.is_none());
        let error = e.error.as_ref().unwrap();
        assert_eq!(error.step, "held");
        assert_eq!(
            error.message,
            "not written: StatefulSet ns/b-cache of the same revision was refused"
        );
        assert_eq!(
            describe(&[e]),
            "StatefulSet ns/a-db: held: not written: StatefulSet ns/b-cache of the same revision was refused"
        );
    }

    #[test]
    fn describe_and_warnings() {
        let mut grown = entry("web", StatefulSetOutcome::Deferred);
        grown.templates.push(TemplateChange {
            template: "data".into(),
            from: "1Gi".into(),
            to: "2Gi".into(),
        });
        grown.claims.push(ClaimChange {
            claim: "data-web-0".into(),
            from: "1Gi".into(),
            to: "2Gi".into(),
        });
        grown.new_uid = Some("u2".into());
        grown.deferred.push(DeferredClaim {
            claim: "data-web-4".into(),
            reason: "claim is Pending".into(),
        });
        let mut refused = entry("db", StatefulSetOutcome::Refused);
        refused.refusal = Some(RefusalEntry {
            code: crate::model::RefusalCode::Shrink,
            message: "template data: 2Gi -> 1Gi".into(),
        });
        let entries = vec![
            grown,
            entry("cache", StatefulSetOutcome::Unchanged),
            refused,
        ];
        assert_eq!(
            describe(&entries),
            "StatefulSet ns/web: template data 1Gi -> 2Gi, 1 claim(s) grown, recreated without restarting pods, 1 claim(s) deferred\n\
             StatefulSet ns/db: refused (shrink): template data: 2Gi -> 1Gi"
        );
        assert_eq!(
            deferred_warnings(&entries),
            ["StatefulSet ns/web: claim data-web-4 deferred: claim is Pending"]
        );
    }
}
