//! The three gate modes as types. Each says, at every point of a run and of the observer's
//! follow-up, what its mode does: prepare the Kustomization before the converge, hand a
//! converged revision to Flux, and what closing, recovering and re-opening a gate mean for it.
//! The run loop (`service::gate`) and the observer (`gate::observe`) ask [`of`] for the mode
//! of a Kustomization and call these; neither names a mode.

mod artifact;
mod reconcile;
mod suspend;

use std::time::Duration;

use futures::future::BoxFuture;

use super::publish::Target;
use super::state::Open;
use super::{Gate, GateOutcome};
use crate::flux::objects::{Artifact, Kustomization};
use crate::model::{
    FluxOutcome, FluxResult, GateMode, Handoff, HandoffAction, HandoffAttempt, Key, RevisionRecord,
    Trigger,
};
use crate::service::gate::error::HandoffError;
use crate::service::gate::handoff::{Since, applied_already};

/// What one mode does. `'static` values, one per mode ([`of`]).
pub trait Mode: Send + Sync {
    /// The annotation value this type implements.
    fn mode(&self) -> GateMode;

    /// Before the revision is resolved: what the run renders from (artifact mode: the
    /// ExternalArtifact and its upstream, checked before anything is read or written) and
    /// what must be written first (suspend mode: `spec.suspend=true`, so Flux cannot apply the
    /// pending revision unconverged). `Err` ends the run with that outcome.
    fn prepare<'a>(
        &'a self,
        gate: &'a Gate,
        ks: &'a Kustomization,
        trigger: Trigger,
    ) -> BoxFuture<'a, Result<Option<Target>, GateOutcome>>;

    /// The run resolved `revision`: a gate still open for an older one is closed where the
    /// mode keeps a gate per revision (suspend).
    fn resolved<'a>(
        &'a self,
        _gate: &'a Gate,
        _key: &'a Key,
        _revision: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// Hands the converged revision to Flux, filling the record's `handoff` and `flux`; the
    /// open gate (if any) is what the observer follows. `Err`: the hand-off failed (retried).
    fn hand_off<'a>(
        &'a self,
        gate: &'a Gate,
        run: Run<'a>,
        record: &'a mut RevisionRecord,
    ) -> BoxFuture<'a, Result<Option<Open>, HandoffError>>;

    /// Whether an open gate stands for its revision only, so a move of the source closes it
    /// (suspend: the next revision must be converged before Flux may apply it).
    fn closes_when_the_source_moves(&self) -> bool {
        false
    }

    /// Closes the gate on the cluster once Flux answered (suspend: `spec.suspend=true`):
    /// the Kustomization the write returned (its spec schedules a re-open), `None` when
    /// closing writes nothing.
    fn close<'a>(
        &'a self,
        _client: &'a kube::Client,
        _key: &'a Key,
        _call_timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Kustomization>, HandoffError>> {
        Box::pin(async { Ok(None) })
    }

    /// Whether a gate Flux failed (or did not answer) opens again for the same revision on
    /// Flux's retry schedule (suspend: Flux cannot retry by itself while suspended).
    fn reopens(&self) -> bool {
        false
    }

    /// What the record's `handoff.action` becomes once the gate closed (`None`: unchanged).
    fn closed_action(&self) -> Option<HandoffAction> {
        None
    }

    /// A gate a previous process left open: what makes a status Flux's answer to it, read
    /// from the Kustomization now; `None` when it is not open any more.
    fn recovered(&self, handoff: &Handoff, ks: &Kustomization) -> Option<Since>;
}

/// The type of `mode`; `None` for `off` (not handled).
pub fn of(mode: GateMode) -> Option<&'static dyn Mode> {
    match mode {
        GateMode::Suspend => Some(&suspend::Suspend),
        GateMode::Reconcile => Some(&reconcile::Reconcile),
        GateMode::Artifact => Some(&artifact::Artifact),
        GateMode::Off => None,
    }
}

/// What a hand-off is given of its run.
pub struct Run<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The Kustomization as the resolve read it.
    pub ks: &'a Kustomization,
    /// Artifact mode: the ExternalArtifact and its upstream ([`Mode::prepare`]).
    pub target: Option<&'a Target>,
    /// The upstream's artifact as re-read right before the hand-off.
    pub upstream: Option<&'a Artifact>,
    /// A re-check of claims left to grow (the record is the revision's earlier one).
    pub recheck: bool,
}

/// The suspend and reconcile hand-off around its one write (`write`: the unsuspend or the
/// `requestedAt` token). Flux applied this revision before (the converge found nothing, or
/// only lagging claims, to do): nothing is written, since unsuspending or requesting a
/// reconcile would only make it apply the same revision again; a re-check keeps what the
/// hand-off recorded. A hold set during the converge (seen by the watch) stops it before the
/// write: the revision is recorded failed, due again once the hold is removed.
async fn open_gate<F>(
    gate: &Gate,
    mode: GateMode,
    run: Run<'_>,
    record: &mut RevisionRecord,
    write: F,
) -> Result<Option<Open>, HandoffError>
where
    F: AsyncFnOnce(&str) -> Result<(Since, HandoffAction, Option<String>), HandoffError>,
{
    if applied_already(run.ks, &record.revision) {
        if !run.recheck || record.flux.is_none() {
            record.flux = Some(FluxResult {
                outcome: FluxOutcome::Applied,
                applied_revision: Some(record.revision.clone()),
                message: Some(
                    "Flux had already applied this revision: not handed off again".into(),
                ),
                attempted_revision: None,
            });
        }
        return Ok(None);
    }
    if let Some(reason) = gate
        .observer
        .held(&Key::kustomization(run.namespace, run.name))
    {
        return Err(HandoffError::Held { reason });
    }
    let attempted_before = run
        .ks
        .status
        .as_ref()
        .and_then(|s| s.last_attempted_revision.clone());
    let at = super::now();
    let (since, action, requested_at) = write(&at).await?;
    record.handoff = Some(Handoff {
        mode,
        at: at.clone(),
        action,
        requested_at,
        resuspended_at: None,
        attempts: vec![HandoffAttempt {
            at,
            outcome: FluxOutcome::Pending,
            message: None,
        }],
        retry_at: None,
    });
    record.flux = Some(FluxResult {
        outcome: FluxOutcome::Pending,
        applied_revision: None,
        message: Some("the gate is open: waiting for Flux's answer".into()),
        attempted_revision: None,
    });
    tracing::info!(kustomization = %format!("{}/{}", run.namespace, run.name),
        revision = %record.revision, mode = %mode, "handed off");
    Ok(Some(Open {
        mode,
        revision: record.revision.clone(),
        started_at: record.started_at.clone(),
        since,
        attempted_before,
        deadline: tokio::time::Instant::now() + gate.config.handoff_timeout,
        attempt: 1,
    }))
}
