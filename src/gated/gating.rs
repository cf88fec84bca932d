//! What a gated object's annotations say about its gate, parsed here and nowhere else. The
//! index (what is due, `/status`) and the gate (what a run does) both read [`Gating`] (through
//! [`super::Gated::gating`]), so they can never disagree on a value.

use std::collections::BTreeMap;

use crate::model::GateMode;

/// The annotation choosing a gated object's gate mode.
pub const GATE_ANNOTATION: &str = "flux-converger.io/gate";
/// The annotation that stops everything for a gated object; its value is the reason shown.
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
    /// The annotation values this kind of object accepts, as the refusal lists them.
    pub values: &'static [&'static str],
}

impl Gating {
    /// Reads `annotations` and `spec.suspend` of an object every mode applies to (a
    /// Kustomization); `default` is `--default-gate`.
    pub fn parse(
        annotations: Option<&BTreeMap<String, String>>,
        spec_suspend: bool,
        default: GateMode,
    ) -> Gating {
        Gating::parse_among(annotations, spec_suspend, default, GateMode::VALUES)
    }

    /// [`Gating::parse`] for an object only some modes apply to (`values`, by name): any other
    /// value, a mode or not, is not one of them and handled as `off`.
    pub fn parse_among(
        annotations: Option<&BTreeMap<String, String>>,
        spec_suspend: bool,
        default: GateMode,
        values: &'static [&'static str],
    ) -> Gating {
        let get = |key: &str| annotations.and_then(|a| a.get(key));
        let (mode, invalid) = match get(GATE_ANNOTATION) {
            None => (default, None),
            Some(text) => match GateMode::parse(text.trim()) {
                Some(mode) if values.contains(&mode.as_str()) => (mode, None),
                _ => (GateMode::Off, Some(text.clone())),
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
            values,
        }
    }

    /// The mode, or why the annotation is not one (logged by the gate, which then leaves the
    /// object alone).
    pub fn mode(&self) -> Result<GateMode, String> {
        match &self.invalid {
            None => Ok(self.mode),
            Some(v) => Err(format!(
                "annotation {GATE_ANNOTATION}: {v:?} is not one of {}",
                self.values.join(", ")
            )),
        }
    }
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
                    values: GateMode::VALUES,
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
