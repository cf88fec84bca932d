//! The states a gate can be in: the observer keeps the [`GateState`] of every Kustomization
//! whose gate is not simply closed. What the annotations ask for is `gated::gating`.

use tokio::time::Instant;

use crate::model::GateMode;
use crate::service::gate::handoff::Since;

/// Where a gate stands. A Kustomization the observer does not track is `Closed`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GateState {
    /// Flux may not apply anything new (suspend mode: `spec.suspend=true`). `reopen`: the
    /// revision Flux failed or did not answer, opened again at the given time.
    Closed { reopen: Option<Reopen> },
    /// Handed off: Flux may apply `revision`, and only its answer for it closes the gate.
    Open(Open),
    /// Held by the hold annotation (or `spec.suspend` in reconcile mode): nothing runs.
    Held { reason: String },
}

/// An open gate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Open {
    pub mode: GateMode,
    pub revision: String,
    /// The record of the revision: its `startedAt` (with the revision, its identity).
    pub started_at: String,
    /// What makes a status Flux's answer to this opening rather than an older one.
    pub since: Since,
    /// `status.lastAttemptedRevision` when the gate opened: another value, not the
    /// revision, is Flux attempting something else (a race).
    pub attempted_before: Option<String>,
    /// `--handoff-timeout` after the opening.
    pub deadline: Instant,
    /// The openings for this revision so far (1 for the first hand-off).
    pub attempt: u32,
}

/// A closed gate waiting to open again for the same converged revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reopen {
    pub revision: String,
    pub started_at: String,
    /// When (Flux's retry schedule, with backoff).
    pub at: Instant,
    /// The Kustomization's generation after the gate closed: any other generation is a spec
    /// change (someone else's write), which makes the revision due for a new converge instead.
    pub generation: i64,
    /// The openings so far.
    pub attempts: u32,
}
