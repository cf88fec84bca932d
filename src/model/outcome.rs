//! How a run ended, as one type from the StatefulSets up to the queue.
//!
//! A StatefulSet's converge ends in a [`StatefulSetOutcome`] (with its [`RefusalCode`] when
//! refused); the revision's [`RevisionState`] is computed from those by one function
//! ([`RevisionState::of_statefulsets`]); the run's [`GateOutcome`] carries that state (or why
//! there is none) to the queue, whose next step is again one function of it
//! (`service::queue::After::of`). Nothing maps one outcome to another anywhere else.
//!
//! [`RefusalCode`]: crate::model::RefusalCode

use crate::model::{RevisionState, StatefulSetEntry, StatefulSetOutcome};

/// How a run ended: the one outcome type from the gate to the queue. `Gate::run` returns it,
/// the worker passes it as it is to `Queue::complete`, which decides what follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GateOutcome {
    /// Converged (handed off), refused, or superseded (too many restarts): nothing to retry
    /// until the revision or the Kustomization's spec changes.
    Done(RevisionState),
    /// A step failed (one attempt: nothing inside the run waits to retry): the queue retries
    /// it with backoff, in its retry lane, so no worker is held while it waits.
    Failed { message: String },
    /// Nothing wrong, but not finished either (the source has no artifact yet, claims wait to
    /// bind): re-check at the next resync.
    Deferred,
    /// The annotation is `off` (or unreadable), or the Kustomization is gone.
    NotHandled,
}

impl GateOutcome {
    /// Whether the queue runs it again after a backoff (only a failure is retried).
    pub fn retries(&self) -> bool {
        matches!(self, GateOutcome::Failed { .. })
    }
}

impl RevisionState {
    /// The state a revision's StatefulSets give it before the hand-off: `refused` if one was
    /// refused (a refusal wins over a failure: retrying cannot make the revision acceptable),
    /// `failed` if one failed or was held, else `converged` (every one converged, had nothing
    /// to do, or waits for claims to bind): the only state that is handed off.
    pub fn of_statefulsets(entries: &[StatefulSetEntry]) -> RevisionState {
        let any =
            |outcomes: &[StatefulSetOutcome]| entries.iter().any(|e| outcomes.contains(&e.outcome));
        if any(&[StatefulSetOutcome::Refused]) {
            RevisionState::Refused
        } else if any(&[StatefulSetOutcome::Failed, StatefulSetOutcome::Held]) {
            RevisionState::Failed
        } else {
            RevisionState::Converged
        }
    }
}
