//! `suspend`: the Kustomization is kept suspended between revisions and unsuspended for one
//! converged revision; once Flux answered (or the hand-off timed out) it is suspended again,
//! and a failure re-opens the gate on Flux's own retry schedule (`gate::observe`).

use std::time::Duration;

use futures::future::BoxFuture;

use super::{Mode, Run, open_gate};
use crate::flux::objects::Kustomization;
use crate::model::{GateMode, Handoff, HandoffAction, Key, RevisionRecord, Trigger};
use crate::service::gate::error::HandoffError;
use crate::service::gate::handoff::{self, Since};
use crate::service::gate::publish::Target;
use crate::service::gate::state::Open;
use crate::service::gate::{Gate, GateOutcome};

pub struct Suspend;

impl Mode for Suspend {
    fn mode(&self) -> GateMode {
        GateMode::Suspend
    }

    fn prepare<'a>(
        &'a self,
        gate: &'a Gate,
        ks: &'a Kustomization,
        _trigger: Trigger,
    ) -> BoxFuture<'a, Result<Option<Target>, GateOutcome>> {
        Box::pin(async move {
            if ks.spec.suspend {
                return Ok(None);
            }
            let c = &gate.config;
            let namespace = ks.metadata.namespace.as_deref().unwrap_or_default();
            let name = ks.metadata.name.as_deref().unwrap_or_default();
            tracing::info!(kustomization = %format!("{namespace}/{name}"), "suspending before the converge");
            handoff::set_suspend(&c.client, namespace, name, true, c.call_timeout)
                .await
                .map(|_| None)
                .map_err(|e| GateOutcome::Failed {
                    message: e.to_string(),
                })
        })
    }

    fn resolved<'a>(
        &'a self,
        gate: &'a Gate,
        key: &'a Key,
        revision: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(gate.observer.superseded(key, revision))
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
            GateMode::Suspend,
            run,
            record,
            async move |_at: &str| {
                let ks =
                    handoff::set_suspend(&c.client, namespace, name, false, c.call_timeout).await?;
                Ok((
                    Since::Generation(ks.metadata.generation.unwrap_or(0)),
                    HandoffAction::Unsuspended,
                    None,
                ))
            },
        ))
    }

    fn closes_when_the_source_moves(&self) -> bool {
        true
    }

    fn close<'a>(
        &'a self,
        client: &'a kube::Client,
        key: &'a Key,
        call_timeout: Duration,
    ) -> BoxFuture<'a, Result<Option<Kustomization>, HandoffError>> {
        Box::pin(async move {
            handoff::set_suspend(client, &key.namespace, &key.name, true, call_timeout)
                .await
                .map(Some)
                .map_err(HandoffError::from)
        })
    }

    fn reopens(&self) -> bool {
        true
    }

    fn closed_action(&self) -> Option<HandoffAction> {
        Some(HandoffAction::Resuspended)
    }

    fn recovered(&self, _handoff: &Handoff, ks: &Kustomization) -> Option<Since> {
        // Still unsuspended: the hand-off's generation is the one Flux answers to.
        (!ks.spec.suspend).then(|| Since::Generation(ks.metadata.generation.unwrap_or(0)))
    }
}
