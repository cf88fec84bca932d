//! The re-check of a converged revision that left claims to grow once Bound.
//!
//! Such a revision is due again at every resync until its claims have grown. Each re-check is
//! the same revision, handled already and handed off already: it updates that revision's
//! record in place (claims grown since are added to their StatefulSet's entry, the ones still
//! waiting replace the `deferred` list) instead of adding a record. Otherwise a claim that
//! stays Pending would add a record at every resync and push the revision history out. Pure:
//! table-tested without a cluster.

use crate::model::HandoffAction;
use crate::model::{GateMode, RevisionRecord, RevisionState, StatefulSetEntry, StatefulSetOutcome};

use crate::records::entry;
use crate::service::index::has_deferred;

/// Whether a run of `revision`, with the Kustomization at `generation`, re-checks `last`: the
/// same revision, converged with claims left to grow, and the same spec. The spec is compared
/// by generation, counting the two changes the suspend gate's own hand-off made (unsuspend,
/// suspend again); any other change is a new run with its own record.
pub fn is_recheck(last: &RevisionRecord, revision: &str, generation: Option<i64>) -> bool {
    // Each opening of the gate is an unsuspend and a resuspend: two generations.
    let toggles = match &last.handoff {
        Some(h) if h.mode == GateMode::Suspend && h.action == HandoffAction::Resuspended => {
            2 * h.attempts.len().max(1) as i64
        }
        _ => 0,
    };
    last.revision == revision
        && last.state == RevisionState::Converged
        && has_deferred(last)
        && last.generation.map(|g| g + toggles) == generation
}

/// The StatefulSet entries of the record after a re-check: `previous` (the record's) with what
/// the re-check (`now`) did added in.
pub fn merge(previous: &[StatefulSetEntry], now: Vec<StatefulSetEntry>) -> Vec<StatefulSetEntry> {
    let mut merged: Vec<StatefulSetEntry> = previous.to_vec();
    for entry in now {
        match merged
            .iter_mut()
            .find(|e| e.namespace == entry.namespace && e.name == entry.name)
        {
            Some(old) => merge_entry(old, entry),
            None => merged.push(entry),
        }
    }
    merged
}

fn merge_entry(old: &mut StatefulSetEntry, now: StatefulSetEntry) {
    for claim in now.claims {
        match old.claims.iter_mut().find(|c| c.claim == claim.claim) {
            // Grown again: from the size first recorded to the newest.
            Some(c) => c.to = claim.to,
            None => old.claims.push(claim),
        }
    }
    for template in now.templates {
        if !old
            .templates
            .iter()
            .any(|t| t.template == template.template)
        {
            old.templates.push(template);
        }
    }
    if now.old_uid.is_some() && now.new_uid.is_some() && now.old_uid != now.new_uid {
        old.old_uid = now.old_uid;
        old.new_uid = now.new_uid;
    }
    // A claim followed again by the re-check is as the re-check read it; the others keep
    // what the follower last wrote.
    for volume in now.volumes {
        match old.volumes.iter_mut().find(|v| v.claim == volume.claim) {
            // Where it stood, it stands: since then, not since this re-check.
            Some(v)
                if (&v.state, &v.requested, &v.capacity, &v.message)
                    == (
                        &volume.state,
                        &volume.requested,
                        &volume.capacity,
                        &volume.message,
                    ) => {}
            Some(v) => *v = volume,
            None => old.volumes.push(volume),
        }
    }
    old.volumes.sort_by(|a, b| a.claim.cmp(&b.claim));
    old.deferred = now.deferred;
    old.refusal = now.refusal;
    old.error = now.error;
    let did_something = !old.claims.is_empty()
        || !old.templates.is_empty()
        || (old.old_uid.is_some() && old.old_uid != old.new_uid);
    old.outcome = match now.outcome {
        StatefulSetOutcome::Refused
        | StatefulSetOutcome::Failed
        | StatefulSetOutcome::Deferred
        | StatefulSetOutcome::Held => now.outcome,
        StatefulSetOutcome::Converged | StatefulSetOutcome::Unchanged if did_something => {
            StatefulSetOutcome::Converged
        }
        StatefulSetOutcome::Converged | StatefulSetOutcome::Unchanged => now.outcome,
    };
}

/// The record's warnings after a re-check: the previous ones without the deferred claims they
/// listed, then the claims still deferred.
pub fn warnings(
    previous: &[String],
    previous_entries: &[StatefulSetEntry],
    merged: &[StatefulSetEntry],
) -> Vec<String> {
    let stale = entry::deferred_warnings(previous_entries);
    let mut warnings: Vec<String> = previous
        .iter()
        .filter(|w| !stale.contains(w))
        .cloned()
        .collect();
    for w in entry::deferred_warnings(merged) {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClaimChange, DeferredClaim, Handoff, TemplateChange, Trigger};

    fn entry(outcome: StatefulSetOutcome) -> StatefulSetEntry {
        StatefulSetEntry {
            volumes: Default::default(),
            namespace: "apps".into(),
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

    fn claim(name: &str, from: &str, to: &str) -> ClaimChange {
        ClaimChange {
            claim: name.into(),
            from: from.into(),
            to: to.into(),
        }
    }

    fn deferred(name: &str) -> DeferredClaim {
        DeferredClaim {
            claim: name.into(),
            reason: "Pending".into(),
        }
    }

    /// The first run: recreated, two claims grown, one deferred.
    fn first() -> StatefulSetEntry {
        let mut e = entry(StatefulSetOutcome::Deferred);
        e.old_uid = Some("u1".into());
        e.new_uid = Some("u2".into());
        e.templates = vec![TemplateChange {
            template: "data".into(),
            from: "1Gi".into(),
            to: "2Gi".into(),
        }];
        e.claims = vec![claim("data-web-0", "1Gi", "2Gi")];
        e.deferred = vec![deferred("data-web-5")];
        e
    }

    #[test]
    fn merge_by_table() {
        let still_pending = {
            let mut e = entry(StatefulSetOutcome::Deferred);
            e.deferred = vec![deferred("data-web-5")];
            e
        };
        let grown_now = {
            let mut e = entry(StatefulSetOutcome::Converged);
            e.old_uid = Some("u2".into());
            e.new_uid = Some("u2".into());
            e.claims = vec![claim("data-web-5", "1Gi", "2Gi")];
            e
        };
        let failed_now = {
            let mut e = entry(StatefulSetOutcome::Failed);
            e.deferred = vec![deferred("data-web-5")];
            e
        };
        let other = StatefulSetEntry {
            name: "db".into(),
            ..entry(StatefulSetOutcome::Unchanged)
        };
        let cases: Vec<(&str, Vec<StatefulSetEntry>, Vec<StatefulSetEntry>)> = vec![
            (
                "still pending: nothing changes",
                vec![still_pending],
                vec![first()],
            ),
            (
                "bound and grown: added, no longer deferred",
                vec![grown_now],
                vec![{
                    let mut e = first();
                    e.outcome = StatefulSetOutcome::Converged;
                    e.claims.push(claim("data-web-5", "1Gi", "2Gi"));
                    e.deferred.clear();
                    e
                }],
            ),
            (
                "a failed re-check shows as failed, keeping what was done",
                vec![failed_now],
                vec![{
                    let mut e = first();
                    e.outcome = StatefulSetOutcome::Failed;
                    e
                }],
            ),
            (
                "a StatefulSet the first run did not list is added",
                vec![other.clone()],
                vec![first(), other],
            ),
        ];
        for (what, now, want) in cases {
            assert_eq!(merge(&[first()], now), want, "{what}");
        }
    }

    #[test]
    fn warnings_drop_the_claims_grown_since() {
        let before = vec![
            "hand-off: Flux has not applied it yet".to_string(),
            "StatefulSet apps/web: claim data-web-5 deferred: Pending".to_string(),
        ];
        let mut grown = first();
        grown.deferred.clear();
        assert_eq!(
            warnings(&before, &[first()], &[grown]),
            ["hand-off: Flux has not applied it yet"]
        );
        assert_eq!(warnings(&before, &[first()], &[first()]), before);
    }

    fn record(
        generation: Option<i64>,
        handoff: Option<(GateMode, HandoffAction)>,
    ) -> RevisionRecord {
        RevisionRecord {
            volumes: Default::default(),
            revision: "main@sha1:2".into(),
            digest: None,
            trigger: Trigger::Watch,
            started_at: "t".into(),
            finished_at: Some("t".into()),
            state: RevisionState::Converged,
            statefulsets: vec![first()],
            handoff: handoff.map(|(mode, action)| Handoff {
                mode,
                at: "t".into(),
                action,
                requested_at: None,
                resuspended_at: None,
                attempts: Vec::new(),
                retry_at: None,
            }),
            flux: None,
            warnings: Vec::new(),
            error: None,
            generation,
            gate: None,
            attempts: 1,
        }
    }

    #[test]
    fn is_recheck_by_table() {
        let suspend = Some((GateMode::Suspend, HandoffAction::Resuspended));
        let reconcile = Some((GateMode::Reconcile, HandoffAction::ReconcileRequested));
        let refused = RevisionRecord {
            state: RevisionState::Refused,
            ..record(Some(3), None)
        };
        let nothing_deferred = RevisionRecord {
            statefulsets: vec![entry(StatefulSetOutcome::Converged)],
            ..record(Some(3), None)
        };
        for (what, last, revision, generation, want) in [
            (
                "suspend: its own two toggles",
                record(Some(3), suspend),
                "main@sha1:2",
                Some(5),
                true,
            ),
            (
                "suspend: another change",
                record(Some(3), suspend),
                "main@sha1:2",
                Some(6),
                false,
            ),
            (
                "reconcile: unchanged",
                record(Some(3), reconcile),
                "main@sha1:2",
                Some(3),
                true,
            ),
            (
                "reconcile: spec changed",
                record(Some(3), reconcile),
                "main@sha1:2",
                Some(4),
                false,
            ),
            (
                "not handed off again",
                record(Some(3), None),
                "main@sha1:2",
                Some(3),
                true,
            ),
            (
                "another revision",
                record(Some(3), None),
                "main@sha1:3",
                Some(3),
                false,
            ),
            ("refused", refused, "main@sha1:2", Some(3), false),
            (
                "nothing deferred",
                nothing_deferred,
                "main@sha1:2",
                Some(3),
                false,
            ),
            (
                "no generation known",
                record(None, None),
                "main@sha1:2",
                Some(3),
                false,
            ),
        ] {
            assert_eq!(is_recheck(&last, revision, generation), want, "{what}");
        }
    }
}
