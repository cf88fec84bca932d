//! The Events the followed volumes give on their gated object (docs/gate.md, Events): what an
//! operator reads in `kubectl describe` and `flux events` when a claim will not grow, has not
//! grown in time, every claim grew, or a failed expansion was recovered from. Pure: a claim's
//! change in, an Event (or none) out.

use super::events::{
    REASON_VOLUME_MODIFY_INFEASIBLE, REASON_VOLUME_RESIZE_INFEASIBLE,
    REASON_VOLUME_RESIZE_RECOVERED, REASON_VOLUME_RESIZE_STALLED, REASON_VOLUME_RESTART_BLOCKED,
    REASON_VOLUME_RESTARTED, REASON_VOLUMES_GROWN, RevisionEvent, Severity,
};
use crate::model::{ModifyState, Volume, VolumeState};

fn sizes(v: &Volume) -> String {
    match (&v.requested, &v.capacity) {
        (Some(r), Some(c)) => format!(" ({r} requested, {c} held)"),
        (Some(r), None) => format!(" ({r} requested)"),
        _ => String::new(),
    }
}

/// The Event of a claim of StatefulSet `statefulset` (`namespace/name`) entering `volume`'s
/// state, when that state is one an operator must hear of: `infeasible` and `stalled`
/// (Warning), `recovered` (Normal).
pub fn change_event(revision: &str, statefulset: &str, volume: &Volume) -> Option<RevisionEvent> {
    let said = volume
        .message
        .as_deref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    let (severity, reason, what) = match volume.state {
        VolumeState::Infeasible => (
            Severity::Error,
            REASON_VOLUME_RESIZE_INFEASIBLE,
            "the driver will not grow it",
        ),
        VolumeState::Stalled => (
            Severity::Error,
            REASON_VOLUME_RESIZE_STALLED,
            "not grown within --resize-timeout",
        ),
        VolumeState::Recovered => (
            Severity::Info,
            REASON_VOLUME_RESIZE_RECOVERED,
            "recovered from a failed expansion",
        ),
        _ => return None,
    };
    Some(RevisionEvent {
        severity,
        reason: reason.to_string(),
        message: format!(
            "revision {revision}: StatefulSet {statefulset}: claim {}{}: {what}{said}",
            volume.claim,
            sizes(volume)
        ),
        revision: revision.to_string(),
    })
}

/// The Event of a claim of `statefulset` whose move to another VolumeAttributesClass entered
/// its `attributes.state`, when an operator must hear of it: `infeasible` (Warning,
/// `VolumeModifyInfeasible`).
pub fn modify_event(revision: &str, statefulset: &str, volume: &Volume) -> Option<RevisionEvent> {
    let a = volume.attributes.as_ref()?;
    if a.state != ModifyState::Infeasible {
        return None;
    }
    let said = a
        .message
        .as_deref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    Some(RevisionEvent {
        severity: Severity::Error,
        reason: REASON_VOLUME_MODIFY_INFEASIBLE.to_string(),
        message: format!(
            "revision {revision}: StatefulSet {statefulset}: claim {} (VolumeAttributesClass {}, \
             has {}): the driver will not apply it{said}",
            volume.claim,
            a.class,
            a.current.as_deref().unwrap_or("none"),
        ),
        revision: revision.to_string(),
    })
}

/// The Event of a pod of `statefulset` restarted (`blocked`: `None`) or held back by a
/// PodDisruptionBudget (`Some`: the server's words) so the node finishes `claims`' file system
/// resize (`flux-converger.io/restart-for-resize`).
pub fn restart_event(
    revision: &str,
    statefulset: &str,
    pod: &str,
    claims: &[String],
    blocked: Option<&str>,
) -> RevisionEvent {
    let (reason, what) = match blocked {
        None => (
            REASON_VOLUME_RESTARTED,
            "evicted so the node grows the file system when its successor mounts".to_string(),
        ),
        Some(why) => (
            REASON_VOLUME_RESTART_BLOCKED,
            format!("not evicted yet, retried: {why}; to finish the file system resize of"),
        ),
    };
    RevisionEvent {
        severity: Severity::Info,
        reason: reason.to_string(),
        message: format!(
            "revision {revision}: StatefulSet {statefulset}: pod {pod} {what} claim{} {} \
             (flux-converger.io/restart-for-resize)",
            if claims.len() == 1 { "" } else { "s" },
            claims.join(", ")
        ),
        revision: revision.to_string(),
    }
}

/// `VolumesGrown`, once every followed claim of the revision grew: `statefulsets` are
/// `(namespace/name, volumes)`. `None` while one has not (or none is followed).
pub fn grown_event(
    revision: &str,
    statefulsets: &[(String, Vec<Volume>)],
) -> Option<RevisionEvent> {
    let all: Vec<(&String, &Volume)> = statefulsets
        .iter()
        .flat_map(|(s, vs)| vs.iter().map(move |v| (s, v)))
        .collect();
    if all.is_empty() || all.iter().any(|(_, v)| v.state != VolumeState::Grown) {
        return None;
    }
    let listed: Vec<String> = all
        .iter()
        .map(|(s, v)| {
            format!(
                "{s} claim {} ({})",
                v.claim,
                v.capacity.as_deref().unwrap_or("?")
            )
        })
        .collect();
    Some(RevisionEvent {
        severity: Severity::Info,
        reason: REASON_VOLUMES_GROWN.to_string(),
        message: format!(
            "revision {revision}: every claim grown: {}",
            listed.join(", ")
        ),
        revision: revision.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(claim: &str, state: VolumeState, message: Option<&str>) -> Volume {
        Volume {
            claim: claim.into(),
            requested: Some("10Gi".into()),
            capacity: Some(
                if state == VolumeState::Grown {
                    "10Gi"
                } else {
                    "1Gi"
                }
                .into(),
            ),
            state,
            message: message.map(str::to_string),
            since: "2026-12-01T10:00:00Z".into(),
            attributes: None,
            restart: None,
        }
    }

    #[test]
    fn the_states_an_operator_must_hear_of_by_table() {
        for (state, reason, severity) in [
            (
                VolumeState::Infeasible,
                Some("VolumeResizeInfeasible"),
                Severity::Error,
            ),
            (
                VolumeState::Stalled,
                Some("VolumeResizeStalled"),
                Severity::Error,
            ),
            (
                VolumeState::Recovered,
                Some("VolumeResizeRecovered"),
                Severity::Info,
            ),
            (VolumeState::Resizing, None, Severity::Info),
            (VolumeState::Error, None, Severity::Info),
            (VolumeState::FilesystemPending, None, Severity::Info),
            (VolumeState::Requested, None, Severity::Info),
            (VolumeState::Grown, None, Severity::Info),
        ] {
            let e = change_event(
                "main@sha1:1",
                "apps/db",
                &volume("data-db-0", state, Some("why")),
            );
            assert_eq!(e.as_ref().map(|e| e.reason.as_str()), reason, "{state}");
            if let Some(e) = e {
                assert_eq!(e.severity, severity, "{state}");
                assert!(e.message.starts_with("revision main@sha1:1: StatefulSet apps/db: claim data-db-0 (10Gi requested, 1Gi held): "), "{}", e.message);
                assert!(e.message.ends_with(": why"), "{}", e.message);
            }
        }
    }

    #[test]
    fn volumes_grown_only_once_every_claim_grew() {
        let grown = |c| volume(c, VolumeState::Grown, None);
        let sets = vec![
            (
                "apps/db".to_string(),
                vec![grown("data-db-0"), grown("data-db-1")],
            ),
            (
                "apps/cache".to_string(),
                vec![volume("data-cache-0", VolumeState::Resizing, None)],
            ),
        ];
        assert!(grown_event("r", &sets).is_none());
        assert!(grown_event("r", &[]).is_none());
        let sets = vec![(
            "apps/db".to_string(),
            vec![grown("data-db-0"), grown("data-db-1")],
        )];
        let e = grown_event("r", &sets).unwrap();
        assert_eq!(e.reason, "VolumesGrown");
        assert_eq!(e.severity, Severity::Info);
        assert_eq!(
            e.message,
            "revision r: every claim grown: apps/db claim data-db-0 (10Gi), apps/db claim data-db-1 (10Gi)"
        );
    }
}
