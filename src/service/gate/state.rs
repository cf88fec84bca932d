//! What a Kustomization's annotations say about its gate, parsed here and nowhere else, and
//! the states a gate can be in. The index (what is due, `/status`) and the gate (what a run
//! does) both read [`Gating`], so they can never disagree on a value; the observer keeps the
//! [`GateState`] of every Kustomization whose gate is not simply closed.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::flux::objects::Kustomization;
use crate::model::GateMode;
use crate::service::gate::handoff::Since;

/// The annotation choosing a Kustomization's gate mode.
pub const GATE_ANNOTATION: &str = "flux-converger.io/gate";
/// The annotation that stops everything for a Kustomization; its value is the reason shown.
pub const HOLD_ANNOTATION: &str = "flux-converger.io/hold";
/// The hold reason of a reconcile-mode Kustomization a person suspended (`flux suspend`).
pub const SUSPENDED_IN_FLUX: &str = "suspended in Flux (spec.suspend)";
/// The reason shown for a hold annotation with an empty value.
const NO_REASON: &str = "held (no reason given)";

/// The gating a Kustomization asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gating {
    /// The annotation's mode, else the default; `Off` for a value that is none of them.
    pub mode: GateMode,
    /// An annotation value that is not a mode (handled as `off`: a typo never gates).
    pub invalid: Option<String>,
    /// Why nothing may run: the hold annotation's reason, or, in reconcile mode, a
    /// `spec.suspend` a person set (in suspend mode `spec.suspend` is the gate's own).
    pub hold: Option<String>,
}

impl Gating {
    /// Reads `annotations` and `spec.suspend`; `default` is `--default-gate`.
    pub fn parse(
        annotations: Option<&BTreeMap<String, String>>,
        spec_suspend: bool,
        default: GateMode,
    ) -> Gating {
        let get = |key: &str| annotations.and_then(|a| a.get(key));
        let (mode, invalid) = match get(GATE_ANNOTATION) {
            None => (default, None),
            Some(text) => match GateMode::parse(text.trim()) {
                Some(mode) => (mode, None),
                None => (GateMode::Off, Some(text.clone())),
            },
        };
        let hold = match get(HOLD_ANNOTATION).map(|r| r.trim()) {
            Some("") => Some(NO_REASON.to_string()),
            Some(reason) => Some(reason.to_string()),
            None if mode == GateMode::Reconcile && spec_suspend => {
                Some(SUSPENDED_IN_FLUX.to_string())
            }
            None => None,
        };
        Gating {
            mode,
            invalid,
            hold,
        }
    }

    /// [`Gating::parse`] of a Kustomization.
    pub fn of(kustomization: &Kustomization, default: GateMode) -> Gating {
        Gating::parse(
            kustomization.metadata.annotations.as_ref(),
            kustomization.spec.suspend,
            default,
        )
    }

    /// The mode, or why the annotation is not one (logged by the gate, which then leaves the
    /// Kustomization alone).
    pub fn mode(&self) -> Result<GateMode, String> {
        match &self.invalid {
            None => Ok(self.mode),
            Some(v) => Err(format!(
                "annotation {GATE_ANNOTATION}: {v:?} is not one of {}",
                GateMode::VALUES.join(", ")
            )),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gating_by_table() {
        let d = GateMode::Suspend;
        for (annotations, suspend, default, mode, invalid, hold) in [
            (vec![], false, d, GateMode::Suspend, None, None),
            (vec![], true, d, GateMode::Suspend, None, None),
            (
                vec![("gate", "reconcile")],
                true,
                d,
                GateMode::Reconcile,
                None,
                Some(SUSPENDED_IN_FLUX),
            ),
            (
                vec![("gate", "reconcile")],
                false,
                d,
                GateMode::Reconcile,
                None,
                None,
            ),
            (vec![("gate", " off ")], false, d, GateMode::Off, None, None),
            (
                vec![("gate", "yes")],
                false,
                d,
                GateMode::Off,
                Some("yes"),
                None,
            ),
            (
                vec![("hold", "migrating the database")],
                false,
                GateMode::Reconcile,
                GateMode::Reconcile,
                None,
                Some("migrating the database"),
            ),
            (
                vec![("gate", "reconcile"), ("hold", "mine")],
                true,
                d,
                GateMode::Reconcile,
                None,
                Some("mine"),
            ),
            (vec![("hold", " ")], false, d, d, None, Some(NO_REASON)),
        ] {
            let map: BTreeMap<String, String> = annotations
                .iter()
                .map(|(k, v)| {
                    let key = if *k == "gate" {
                        GATE_ANNOTATION
                    } else {
                        HOLD_ANNOTATION
                    };
                    (key.to_string(), v.to_string())
                })
                .collect();
            let got = Gating::parse(Some(&map), suspend, default);
            assert_eq!(
                got,
                Gating {
                    mode,
                    invalid: invalid.map(String::from),
                    hold: hold.map(String::from),
                },
                "{annotations:?} suspend={suspend}"
            );
        }
    }

    #[test]
    fn an_unknown_mode_names_the_values() {
        let map: BTreeMap<String, String> =
            [(GATE_ANNOTATION.to_string(), "yes".to_string())].into();
        let gating = Gating::parse(Some(&map), false, GateMode::Suspend);
        let message = gating.mode().unwrap_err();
        assert!(
            message.starts_with(
                "annotation flux-converger.io/gate: \"yes\" is not one of suspend, reconcile, artifact, off"
            ),
            "{message}"
        );
    }
}
