//! `reconcile`: the Kustomization is never suspended; a converged revision is handed off by
//! writing `reconcile.fluxcd.io/requestedAt`, and Flux's answer is the status that handled
//! that token.

use futures::future::BoxFuture;

use super::{Mode, Run, open_gate};
use crate::flux::objects::Kustomization;
use crate::model::{GateMode, Handoff, HandoffAction, RevisionRecord, Trigger};
use crate::service::gate::error::HandoffError;
use crate::service::gate::handoff::{self, Since};
use crate::service::gate::publish::Target;
use crate::service::gate::state::Open;
use crate::service::gate::{Gate, GateOutcome};

pub struct Reconcile;

impl Mode for Reconcile {
    fn mode(&self) -> GateMode {
        GateMode::Reconcile
    }

    fn prepare<'a>(
        &'a self,
        _gate: &'a Gate,
        _ks: &'a Kustomization,
        _trigger: Trigger,
    ) -> BoxFuture<'a, Result<Option<Target>, GateOutcome>> {
        Box::pin(async { Ok(None) })
    }

    fn hand_off<'a>(
        &'a self,
        gate: &'a Gate,
        run: Run<'a>,
        record: &'a mut RevisionRecord,
    ) -> BoxFuture<'a, Result<Option<Open>, HandoffError>> {
        let c = &gate.config;
        let (namespace, name) = (run.namespace, run.name);
        Box::pin(open_gate(
            gate,
            GateMode::Reconcile,
            run,
            record,
            async move |at: &str| {
                handoff::request_reconcile(&c.client, namespace, name, at, c.call_timeout).await?;
                Ok((
                    Since::Token(at.to_string()),
                    HandoffAction::ReconcileRequested,
                    Some(at.to_string()),
                ))
            },
        ))
    }

    fn recovered(&self, handoff: &Handoff, _ks: &Kustomization) -> Option<Since> {
        handoff.requested_at.clone().map(Since::Token)
    }
}
