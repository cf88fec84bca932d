//! A template declared below its live size: a recovery from failed expansions (each claim above
//! the declared size Bound, failed to grow, and holding less than it), or a shrink, refused.
//! Kept apart from the rest of the decision because it alone reads how each claim's last
//! expansion ended (its status, and what the service's records know besides).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::{ClaimRecovery, KnownStates, claim_storage, is_claim_of};
use crate::quantity::Quantity;
use crate::volume::{self, VolumeState};

/// What a template declared below its live size is.
pub(super) enum Recovery {
    /// A recovery: these claims are lowered to the declared size.
    Recover(Vec<ClaimRecovery>),
    /// A shrink, refused; with why it is not a recovery when one of its claims failed to grow
    /// (otherwise the refusal reads as it always has).
    Shrink(Option<String>),
}

/// How the claim's last expansion ended: what its status says when that is `grown` (the
/// capacity is the truth), else a failure `known` from elsewhere, else its status.
fn last_expansion(claim: &PersistentVolumeClaim, known: &KnownStates) -> VolumeState {
    let own = volume::classify(claim, &[], None).state;
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    match known.get(name) {
        Some(state) if state.is_failed() && own != VolumeState::Grown => *state,
        _ => own,
    }
}

/// Whether declaring `template` at `to` (below its live size) recovers from failed expansions:
/// every claim of the template whose request is above `to` must be Bound, have failed to grow
/// (`infeasible` or `error`) and hold less than `to`.
pub(super) fn recovery<'a>(
    template: &str,
    statefulset: &str,
    to: &Quantity,
    claims: impl Iterator<Item = &'a PersistentVolumeClaim>,
    known: &KnownStates,
) -> Recovery {
    let mut recovered = Vec::new();
    let mut not = Vec::new();
    let mut any_failed = false;
    for claim in claims {
        let Some(name) = claim.metadata.name.as_deref() else {
            continue;
        };
        if !is_claim_of(name, template, statefulset) {
            continue;
        }
        let Ok(from) = claim_storage(claim) else {
            continue;
        };
        if from == *to && known.get(name) == Some(&VolumeState::Recovered) {
            // Lowered by this recovery already (a converge stopped before its re-create):
            // part of it, nothing left to lower.
            any_failed = true;
            recovered.push(ClaimRecovery {
                claim: name.to_owned(),
                template: template.to_owned(),
                capacity: volume::capacity(claim).unwrap_or_else(|| from.clone()),
                from: from.clone(),
                to: to.clone(),
                state: VolumeState::Recovered,
            });
            continue;
        }
        if from <= *to {
            continue;
        }
        let state = last_expansion(claim, known);
        any_failed |= state.is_failed();
        let capacity = volume::capacity(claim);
        match (&capacity, state.is_failed()) {
            (_, false) => not.push(format!(
                "claim {name:?} asks for {from} and its expansion has not failed (it is {state})"
            )),
            (None, true) => not.push(format!("claim {name:?} has no capacity (not Bound)")),
            (Some(c), true) if c >= to => not.push(format!(
                "the declared {to} is not above claim {name:?}'s capacity {c}, and a request \
                 may not be lowered to its capacity or below"
            )),
            (Some(c), true) => recovered.push(ClaimRecovery {
                claim: name.to_owned(),
                template: template.to_owned(),
                capacity: c.clone(),
                from,
                to: to.clone(),
                state,
            }),
        }
    }
    if !any_failed {
        return Recovery::Shrink(None);
    }
    if !not.is_empty() {
        return Recovery::Shrink(Some(not.join("; ")));
    }
    recovered.sort_by(|a, b| a.claim.cmp(&b.claim));
    Recovery::Recover(recovered)
}
