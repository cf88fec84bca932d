//! The states a gate can be in, and every transition between them, pure: the observer keeps
//! the [`GateState`] of every Kustomization whose gate is not simply closed, and each event
//! (a hand-off, a Kustomization or source event, a tick, a close written) is one function
//! here from the state it finds to the [`Step`] it leaves: the next state and the close it
//! asks for. The observer (`observe.rs`) holds the lock, reads and writes the cluster and
//! the records; what follows from what is decided here and tested by tables. What the
//! annotations ask for is `gated::gating`.

use std::time::Duration;

use tokio::time::Instant;

/// Flux's durations (`1m30s`): read where the Kustomization's fields are.
pub use crate::flux::objects::parse_go_duration;
use crate::model::{FluxOutcome, FluxResult, GateMode};
use crate::service::gate::handoff::Since;

/// The longest wait between two openings for the same revision, unless Flux's own interval is
/// longer (then that).
pub const RETRY_CAP: Duration = Duration::from_secs(3600);
/// The retry schedule when the Kustomization states none Flux would accept (Flux's default
/// interval is required in the CRD; this only guards a value that does not parse).
pub const DEFAULT_RETRY: Duration = Duration::from_secs(600);

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

/// Why a gate closes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Closing {
    /// Flux answered (applied, failed, raced).
    Answer(FluxResult),
    /// `--handoff-timeout` passed without an answer.
    Timeout,
    /// The source moved on to another revision (or lost its artifact) while open.
    SourceMoved(Option<String>),
    /// The hold annotation was set (or `spec.suspend` in reconcile mode).
    Held(String),
}

impl Closing {
    /// Whether the same converged revision is opened again later (suspend mode only: in
    /// reconcile mode Flux keeps retrying on its own).
    pub fn retries(&self) -> bool {
        match self {
            Closing::Answer(f) => f.outcome == FluxOutcome::Failed,
            Closing::Timeout => true,
            Closing::SourceMoved(_) | Closing::Held(_) => false,
        }
    }

    /// What the record shows as Flux's answer.
    pub fn flux(&self, open: &Open, timeout: Duration) -> FluxResult {
        let pending = |message: String| FluxResult {
            outcome: FluxOutcome::Pending,
            applied_revision: None,
            message: Some(message),
            attempted_revision: None,
        };
        match self {
            Closing::Answer(f) => f.clone(),
            Closing::Timeout => FluxResult {
                outcome: FluxOutcome::Timeout,
                applied_revision: None,
                message: Some(format!(
                    "Flux did not apply {} within {}",
                    open.revision,
                    humantime::format_duration(timeout)
                )),
                attempted_revision: None,
            },
            Closing::SourceMoved(to) => pending(format!(
                "the source moved on to {} before Flux answered: gate closed, the new revision is converged first",
                to.as_deref().unwrap_or("no artifact")
            )),
            Closing::Held(reason) => pending(format!("held ({reason}): gate closed")),
        }
    }
}

/// The close a transition asks for: the observer writes it in a task of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Close {
    pub open: Open,
    pub closing: Closing,
}

/// What a transition leaves: the gate's next state (`None`: not tracked, a closed gate) and
/// the close it asks for, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub next: Option<GateState>,
    pub close: Option<Close>,
}

impl Step {
    fn stay(state: Option<GateState>) -> Step {
        Step {
            next: state,
            close: None,
        }
    }

    fn to(next: GateState) -> Step {
        Step::stay(Some(next))
    }

    fn closing(next: Option<GateState>, open: Open, closing: Closing) -> Step {
        Step {
            next,
            close: Some(Close { open, closing }),
        }
    }
}

/// A run handed `open.revision` off: the gate is open until Flux answers. It replaces
/// whatever was tracked (a re-open of an older revision is moot once a newer one is handed
/// off); a hold that arrived during the converge wins: the gate closes at once.
pub fn on_opened(state: Option<GateState>, open: Open) -> Step {
    match state {
        Some(GateState::Held { reason }) => Step::closing(
            Some(GateState::Held {
                reason: reason.clone(),
            }),
            open,
            Closing::Held(reason),
        ),
        _ => Step::to(GateState::Open(open)),
    }
}

/// A Kustomization event: `off` (its gate annotation turned the gate off), `hold` (the hold
/// annotation's reason, or `spec.suspend` in reconcile mode), and `answer`, what its status
/// says of an open gate's revision (`handoff::flux_verdict`).
pub fn on_object(
    state: Option<GateState>,
    off: bool,
    hold: Option<String>,
    answer: impl FnOnce(&Open) -> Option<FluxResult>,
) -> Step {
    if off {
        return Step::stay(None);
    }
    match (state, hold) {
        (Some(GateState::Open(open)), Some(reason)) => Step::closing(
            Some(GateState::Held {
                reason: reason.clone(),
            }),
            open,
            Closing::Held(reason),
        ),
        (_, Some(reason)) => Step::to(GateState::Held { reason }),
        // Resumed: the index makes whatever is due run at once.
        (Some(GateState::Held { .. }), None) => Step::stay(None),
        (Some(GateState::Open(open)), None) => match answer(&open) {
            Some(answer) => Step::closing(None, open, Closing::Answer(answer)),
            None => Step::to(GateState::Open(open)),
        },
        (state @ (Some(GateState::Closed { .. }) | None), None) => Step::stay(state),
    }
}

/// A source event: the source now publishes `revision` (`None`: no artifact). A gate open in
/// a mode that closes when the source moves, for another revision, closes at once; a re-open
/// waiting for another revision is dropped (the new revision is converged first).
/// `closes_when_moved` says which modes close (the mode's own rule, `gate::modes`).
pub fn on_source(
    state: Option<GateState>,
    revision: Option<&str>,
    closes_when_moved: impl Fn(GateMode) -> bool,
) -> Step {
    match state {
        Some(GateState::Open(open))
            if closes_when_moved(open.mode) && Some(open.revision.as_str()) != revision =>
        {
            Step::closing(None, open, Closing::SourceMoved(revision.map(String::from)))
        }
        Some(GateState::Closed {
            reopen: Some(reopen),
        }) if Some(reopen.revision.as_str()) != revision => Step::stay(None),
        state => Step::stay(state),
    }
}

/// What a tick finds due for one gate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// Open past its deadline: closed, after a last read of Flux's answer.
    Expired(Open),
    /// Closed with a re-open whose time has come.
    Reopen(Reopen),
}

/// A tick at `now`: a gate past its deadline or a re-open due is taken out (the observer
/// carries it out); every other gate stays as it is.
pub fn on_tick(state: GateState, now: Instant) -> (Option<GateState>, Option<Due>) {
    match state {
        GateState::Open(open) if open.deadline <= now => (None, Some(Due::Expired(open))),
        GateState::Closed {
            reopen: Some(reopen),
        } if reopen.at <= now => (None, Some(Due::Reopen(reopen))),
        state => (Some(state), None),
    }
}

/// A close written (or a re-open that could not be decided): the re-open it schedules takes
/// the gate only when nothing newer (a hand-off, a hold) took it meanwhile.
pub fn on_closed(state: Option<GateState>, reopen: Reopen) -> GateState {
    state.unwrap_or(GateState::Closed {
        reopen: Some(reopen),
    })
}

/// What the Kustomization says when its gate is due to open again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReopenCheck {
    /// Its gate mode re-opens (suspend).
    pub reopens: bool,
    pub held: bool,
    /// Its generation is the one the close left.
    pub same_generation: bool,
    /// `spec.suspend` is still true (the close's write stands).
    pub suspended: bool,
    /// Flux applied the revision meanwhile.
    pub applied: bool,
}

/// Why a due re-open does not happen, first reason first; `None`: open it again (once the
/// source is confirmed to still publish the revision).
pub fn why_not_reopen(check: ReopenCheck) -> Option<&'static str> {
    if !check.reopens {
        Some("the gate is no longer suspend")
    } else if check.held {
        Some("held")
    } else if !check.same_generation || !check.suspended {
        Some("the spec changed since: the revision is converged again first")
    } else if check.applied {
        Some("Flux applied it meanwhile")
    } else {
        None
    }
}

/// The wait before opening the gate again after `attempts` openings Flux failed or did not
/// answer: Flux's `retryInterval`, else its `interval`, doubled for each further attempt, at
/// most [`RETRY_CAP`] (or the base when that is longer).
pub fn retry_delay(
    retry_interval: Option<&str>,
    interval: Option<&str>,
    attempts: u32,
) -> Duration {
    let parse = |text: Option<&str>| text.and_then(parse_go_duration).filter(|d| !d.is_zero());
    let base = parse(retry_interval)
        .or_else(|| parse(interval))
        .unwrap_or(DEFAULT_RETRY);
    let cap = RETRY_CAP.max(base);
    let doublings = attempts.saturating_sub(1).min(20);
    base.saturating_mul(1u32 << doublings).min(cap)
}

#[cfg(test)]
mod tests;
