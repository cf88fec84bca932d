//! `artifact`: the Kustomization reads an ExternalArtifact the service publishes only once
//! every consumer has converged the upstream's revision (`gate::publish`). The hand-off is
//! that publish; nothing of the Kustomization itself is written.

use futures::future::BoxFuture;

use super::{Mode, Run};
use crate::flux::objects::Kustomization;
use crate::model::{GateMode, Handoff, HandoffAction, RevisionRecord, Trigger};
use crate::service::gate::error::HandoffError;
use crate::service::gate::handoff::Since;
use crate::service::gate::publish::{self, Target};
use crate::service::gate::state::Open;
use crate::service::gate::{Gate, GateOutcome};

pub struct Artifact;

impl Mode for Artifact {
    fn mode(&self) -> GateMode {
        GateMode::Artifact
    }

    /// The ExternalArtifact the Kustomization reads and the upstream it names; wrong objects
    /// are refused before anything is read or written, and without storage the revision
    /// could never be published: nothing is written for it (no converge), and `/readyz` says
    /// why while this lasts.
    fn prepare<'a>(
        &'a self,
        gate: &'a Gate,
        ks: &'a Kustomization,
        trigger: Trigger,
    ) -> BoxFuture<'a, Result<Option<Target>, GateOutcome>> {
        Box::pin(async move {
            let c = &gate.config;
            let target = match publish::target(
                &c.client,
                ks,
                c.resolver.allow_cross_namespace,
                c.call_timeout,
            )
            .await
            {
                Ok(t) => t,
                Err(e) if e.is_bad_input() => {
                    return Err(gate.refuse_target(ks, trigger, &e).await);
                }
                Err(e) => {
                    return Err(GateOutcome::Failed {
                        message: e.to_string(),
                    });
                }
            };
            if gate.artifact_host.is_none() {
                let message = gate.no_storage_message();
                let namespace = ks.metadata.namespace.as_deref().unwrap_or_default();
                let name = ks.metadata.name.as_deref().unwrap_or_default();
                tracing::warn!(kustomization = %format!("{namespace}/{name}"), %message, "not converged");
                return Err(GateOutcome::Failed { message });
            }
            Ok(Some(target))
        })
    }

    /// Always through the publish, even when Flux applied the revision already: every
    /// consumer's converge counts, and a publish that changes nothing writes nothing.
    fn hand_off<'a>(
        &'a self,
        gate: &'a Gate,
        run: Run<'a>,
        record: &'a mut RevisionRecord,
    ) -> BoxFuture<'a, Result<Option<Open>, HandoffError>> {
        Box::pin(async move {
            let target = run.target.ok_or(HandoffError::NoTarget)?;
            gate.publish_revision(
                run.namespace,
                run.name,
                target,
                run.upstream,
                run.ks,
                record,
            )
            .await
        })
    }

    fn recovered(&self, handoff: &Handoff, _ks: &Kustomization) -> Option<Since> {
        // Published: Flux could not attempt the revision before, any attempt answers.
        (handoff.action == HandoffAction::Published).then_some(Since::Generation(0))
    }
}
