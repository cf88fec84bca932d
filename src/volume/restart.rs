//! Finishing offline file system resizes on request (issue #38, part 2): which pod of a
//! StatefulSet to restart next, if any, and why not. Pure: the StatefulSet and its pods as
//! watched, and its followed claims, in; the next step out.
//!
//! A volume whose driver expands only offline (or whose file system grows at mount) stays
//! `filesystem-pending` until a pod mounts it again. With the StatefulSet's annotation
//! [`ANNOTATION`]` = "true"` (in git: the owner's decision), once every followed claim of the
//! StatefulSet is `grown` or `filesystem-pending`, the pods of the `filesystem-pending` claims
//! are restarted through the Eviction API, one at a time, highest ordinal first; never while a
//! pod of the StatefulSet is not Ready (or missing, or terminating), never while a rolling
//! update is in progress (`currentRevision` ≠ `updateRevision`); the next only once the pod
//! restarted before is back and Ready and every claim it was restarted for is `grown`.
//!
//! What was decided is in the claims' `restart` (pod and uid), written before the eviction is
//! sent: a decision found there is finished, never taken twice. The eviction carries the uid as
//! its precondition, so a pod already replaced is never evicted again; a pod found under
//! another uid (or terminating, or gone) was evicted.

use super::{Restart, Volume, VolumeState};

/// The StatefulSet annotation that opts in; only the value `"true"` does.
pub const ANNOTATION: &str = "flux-converger.io/restart-for-resize";

/// One pod of the StatefulSet as watched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    pub uid: String,
    /// Running with its `Ready` condition `True`.
    pub ready: bool,
    /// It has a `deletionTimestamp`.
    pub deleting: bool,
}

/// The StatefulSet as the restart reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetView {
    /// `flux-converger.io/restart-for-resize: "true"`.
    pub opted_in: bool,
    /// `spec.replicas`.
    pub replicas: i64,
    /// `spec.ordinals.start`.
    pub start: i64,
    pub current_revision: Option<String>,
    pub update_revision: Option<String>,
    /// Its pods (the ones named `<set>-<ordinal>`), by any order.
    pub pods: Vec<PodView>,
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing to restart (not opted in, or no claim waits for a restart).
    Idle,
    /// A restart is due but must wait: why.
    Wait(String),
    /// Evict `pod` (under `uid`) so the node grows `claims`' file systems at its next mount;
    /// record it first (the claims' `restart`) unless it already is.
    Evict {
        pod: String,
        uid: String,
        claims: Vec<String>,
    },
    /// `pod`, recorded for `claims`, is already gone or replaced: it was evicted (by this
    /// service before it stopped, or by anyone): mark the claims `restarted`.
    Evicted { pod: String, claims: Vec<String> },
}

/// The ordinal of a claim `<template>-<statefulset>-<ordinal>` of `statefulset`.
pub fn claim_ordinal(claim: &str, statefulset: &str) -> Option<i64> {
    let (rest, ordinal) = claim.rsplit_once('-')?;
    if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let template = rest.strip_suffix(statefulset)?.strip_suffix('-')?;
    if template.is_empty() {
        return None;
    }
    ordinal.parse().ok()
}

/// Whether a StatefulSet's annotations opt in (exactly `"true"`).
pub fn opted_in(annotations: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// The next step for StatefulSet `statefulset` (`set`), whose followed claims are `volumes`.
pub fn next(statefulset: &str, set: &SetView, volumes: &[Volume]) -> Next {
    if !set.opted_in {
        return Next::Idle;
    }
    let pod_name = |ordinal: i64| format!("{statefulset}-{ordinal}");
    let pod = |name: &str| set.pods.iter().find(|p| p.name == name);

    // A restart already decided comes first, finished before any other is taken.
    let mut decided: Vec<(&Restart, &Volume)> = volumes
        .iter()
        .filter_map(|v| v.restart.as_ref().map(|r| (r, v)))
        .collect();
    decided.sort_by(|a, b| b.0.pod.cmp(&a.0.pod));
    if let Some((restart, _)) = decided.first() {
        let claims: Vec<String> = decided
            .iter()
            .filter(|(r, _)| r.pod == restart.pod)
            .map(|(_, v)| v.claim.clone())
            .collect();
        let replaced = pod(&restart.pod).is_none_or(|p| p.uid != restart.uid || p.deleting);
        if restart.evicted_at.is_none() {
            if replaced {
                return Next::Evicted {
                    pod: restart.pod.clone(),
                    claims,
                };
            }
            // Recorded, not (yet) accepted: sent again (under the same uid) once the gates
            // allow it, as a first decision would be.
            if let Some(why) = gates(statefulset, set) {
                return Next::Wait(why);
            }
            return Next::Evict {
                pod: restart.pod.clone(),
                uid: restart.uid.clone(),
                claims,
            };
        }
        return Next::Wait(match pod(&restart.pod) {
            Some(p) if p.uid != restart.uid && p.ready && !p.deleting => format!(
                "pod {} is back and Ready; waiting for claim {} to grow before the next restart",
                restart.pod,
                claims.join(", ")
            ),
            _ => format!(
                "pod {} was evicted; waiting for it to be back and Ready and for claim {} to \
                 grow",
                restart.pod,
                claims.join(", ")
            ),
        });
    }

    let pending: Vec<&Volume> = volumes
        .iter()
        .filter(|v| v.state == VolumeState::FilesystemPending)
        .collect();
    // Only pods that exist can be restarted: a claim of an ordinal scaled away waits for one.
    let mut ordinals: Vec<i64> = pending
        .iter()
        .filter_map(|v| claim_ordinal(&v.claim, statefulset))
        .filter(|o| *o >= set.start && *o < set.start + set.replicas)
        .collect();
    ordinals.sort_unstable();
    ordinals.dedup();
    let Some(&ordinal) = ordinals.last() else {
        return Next::Idle;
    };
    if let Some(v) = volumes
        .iter()
        .find(|v| !matches!(v.state, VolumeState::Grown | VolumeState::FilesystemPending))
    {
        return Next::Wait(format!(
            "claim {} is {}: pods are restarted once every claim of the StatefulSet is grown \
             or filesystem-pending",
            v.claim, v.state
        ));
    }
    if let Some(why) = gates(statefulset, set) {
        return Next::Wait(why);
    }
    let name = pod_name(ordinal);
    let Some(p) = pod(&name) else {
        return Next::Wait(format!("pod {name} does not exist"));
    };
    let claims = pending
        .iter()
        .filter(|v| claim_ordinal(&v.claim, statefulset) == Some(ordinal))
        .map(|v| v.claim.clone())
        .collect();
    Next::Evict {
        pod: name,
        uid: p.uid.clone(),
        claims,
    }
}

/// Why no pod may be restarted now: a rolling update in progress, or a pod of the StatefulSet
/// missing, terminating or not Ready.
fn gates(statefulset: &str, set: &SetView) -> Option<String> {
    if set.current_revision != set.update_revision {
        return Some(format!(
            "a rolling update is in progress (currentRevision {}, updateRevision {})",
            set.current_revision.as_deref().unwrap_or("<unset>"),
            set.update_revision.as_deref().unwrap_or("<unset>")
        ));
    }
    for ordinal in set.start..set.start + set.replicas {
        let name = format!("{statefulset}-{ordinal}");
        match set.pods.iter().find(|p| p.name == name) {
            None => return Some(format!("pod {name} does not exist")),
            Some(p) if p.deleting => return Some(format!("pod {name} is terminating")),
            Some(p) if !p.ready => return Some(format!("pod {name} is not Ready")),
            Some(_) => {}
        }
    }
    None
}

#[cfg(test)]
mod tests;
