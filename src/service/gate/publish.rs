//! The `artifact` gate: a Kustomization whose `spec.sourceRef` is an ExternalArtifact X, and X's
//! `spec.sourceRef` an upstream GitRepository/OCIRepository/Bucket. The service renders the
//! Kustomization from the upstream's artifact, converges it, and only then publishes the same
//! tarball (same bytes, same digest) as X's `status.artifact`. kustomize-controller reads only
//! X, so it can only ever apply converged revisions, and nothing toggles `suspend`.
//!
//! What is written, and when:
//! - published: `status.artifact` {url, revision (the upstream's, exactly), digest, path, size,
//!   lastUpdateTime} and `Ready=True` reason `Succeeded` (source-controller's and
//!   source-watcher's reason for a stored artifact);
//! - not published: `status.artifact` keeps the last converged revision; `Ready=False` with
//!   `ConvergeRefused`, `ConvergeFailed` or `SourceNotReady`, the message naming the revision
//!   and what stopped it (the refusal code and the StatefulSet).
//!
//! Several Kustomizations may read one ExternalArtifact: a revision is published once every
//! one of them (mode `artifact`, `sourceRef` naming X) has a `converged` newest record for it;
//! the last one to converge publishes and fills the others' records in.
//!
//! Status writes are merge patches of the `status` subresource, field manager
//! `flux-converger`, with the service's identity, and only when something changes (so a
//! revision re-checked at every resync does not write every time, and `lastTransitionTime`
//! moves only when `Ready` changes status). What they say is decided without I/O in
//! `records::artifact_status`.

use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams};

use super::GateOutcome;
use super::handoff::Since;
use super::state::Open;
use crate::cluster::{CallError, FIELD_MANAGER, with_deadline};
use crate::flux::objects::{
    self, Artifact, ExternalArtifact, Kustomization, ObjectsError, SourceKind, UpstreamError,
};
use crate::model::HandoffAction;
use crate::model::{
    FluxOutcome, FluxResult, GateMode, Handoff, RevisionRecord, RevisionState, StepError, Trigger,
};
use crate::records::artifact_status::*;
use crate::service::gate::error::HandoffError;
use crate::storage::host::ArtifactKey;

/// The ExternalArtifact a Kustomization in artifact mode reads, and the upstream it names.
#[derive(Clone, Debug)]
pub struct Target {
    pub key: ArtifactKey,
    /// `(kind, namespace, name)` of the upstream source.
    pub upstream: (SourceKind, String, String),
}

impl Target {
    /// `Kind/namespace/name` of the upstream, as Flux names a source.
    pub fn upstream_name(&self) -> String {
        let (kind, ns, name) = &self.upstream;
        format!("{kind}/{ns}/{name}")
    }
}

/// Why a Kustomization in artifact mode has no ExternalArtifact to publish to.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(
        "Kustomization {namespace}/{name} has flux-converger.io/gate: artifact but its spec.sourceRef is a {kind}: the artifact gate needs spec.sourceRef {{kind: ExternalArtifact, name: ...}}"
    )]
    NotExternalArtifact {
        namespace: String,
        name: String,
        kind: String,
    },
    #[error(transparent)]
    Objects(#[from] ObjectsError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

impl TargetError {
    /// Whether the user's objects are wrong (a refusal, nothing written) rather than the API
    /// server failing (retried).
    pub fn is_bad_input(&self) -> bool {
        match self {
            Self::Objects(e) => e.is_bad_input(),
            Self::NotExternalArtifact { .. } | Self::Upstream(_) => true,
        }
    }
}

/// Reads the ExternalArtifact `kustomization` references and the upstream it names. The
/// Kustomization's reference follows kustomize-controller's `--no-cross-namespace-refs`
/// (`allow_cross_namespace`), and so does the ExternalArtifact's ([`objects::upstream_reference`]).
pub async fn target(
    client: &kube::Client,
    kustomization: &Kustomization,
    allow_cross_namespace: bool,
    deadline: Duration,
) -> Result<Target, TargetError> {
    let reference = &kustomization.spec.source_ref;
    if reference.kind != SourceKind::ExternalArtifact.as_str() {
        return Err(TargetError::NotExternalArtifact {
            namespace: kustomization.metadata.namespace.clone().unwrap_or_default(),
            name: kustomization.metadata.name.clone().unwrap_or_default(),
            kind: if reference.kind.is_empty() {
                "(no kind)".into()
            } else {
                reference.kind.clone()
            },
        });
    }
    let (_, namespace, name) = objects::source_reference(kustomization, allow_cross_namespace)?;
    let artifact: ExternalArtifact =
        objects::get_namespaced(client, &namespace, &name, deadline).await?;
    let upstream = objects::upstream_reference(&artifact, allow_cross_namespace)?;
    Ok(Target {
        key: ArtifactKey { namespace, name },
        upstream,
    })
}

fn artifact_api(client: &kube::Client, namespace: &str) -> Api<ExternalArtifact> {
    Api::namespaced(client.clone(), namespace)
}

/// Says on each lost artifact's ExternalArtifact that it is lost (leader only: followers never
/// write). A status that says so already is not written again.
pub async fn report_lost(
    client: &kube::Client,
    storage: &crate::storage::Storage,
    deadline: Duration,
) {
    for key in storage.lost_keys() {
        let update = Update::NotPublished {
            reason: REASON_ARTIFACT_LOST,
            message: lost_message(&key),
        };
        match write_status(client, &key, &update, deadline).await {
            Ok(true) => {
                tracing::warn!(externalartifact = %format!("{}/{}", key.namespace, key.name),
                "published artifact lost: Ready=False ArtifactLost")
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(externalartifact = %format!("{}/{}", key.namespace, key.name),
                %error, "cannot say the published artifact is lost; tried again later")
            }
        }
    }
}

/// Writes `update` into the ExternalArtifact's status when it changes anything; returns
/// whether it wrote.
pub async fn write_status(
    client: &kube::Client,
    key: &ArtifactKey,
    update: &Update,
    deadline: Duration,
) -> Result<bool, CallError> {
    let object = format!("ExternalArtifact {}/{}", key.namespace, key.name);
    let api = artifact_api(client, &key.namespace);
    let current = with_deadline(deadline, "get", &object, api.get(&key.name)).await?;
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = current.status.clone().unwrap_or_default();
    let Some(patch) = status_patch(&status, current.metadata.generation, update, &now) else {
        return Ok(false);
    };
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    with_deadline(
        deadline,
        "merge patch of the status of",
        &object,
        api.patch_status(&key.name, &params, &Patch::Merge(&patch)),
    )
    .await?;
    Ok(true)
}

/// Every Kustomization that reads `key` through the artifact gate (its mode, by annotation
/// or `default_gate`, is `artifact` and its `sourceRef` names the ExternalArtifact), sorted.
pub async fn consumers(
    client: &kube::Client,
    key: &ArtifactKey,
    default_gate: GateMode,
    allow_cross_namespace: bool,
    deadline: Duration,
) -> Result<Vec<(String, String)>, CallError> {
    let api: Api<Kustomization> = Api::all(client.clone());
    let list = with_deadline(
        deadline,
        "list",
        "Kustomizations (the consumers of an ExternalArtifact)",
        api.list(&ListParams::default()),
    )
    .await?;
    let mut found: Vec<(String, String)> = list
        .items
        .iter()
        .filter(|k| is_consumer(k, key, default_gate, allow_cross_namespace))
        .map(|k| {
            (
                k.metadata.namespace.clone().unwrap_or_default(),
                k.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    found.sort();
    Ok(found)
}

/// Whether `kustomization` reads `key` through the artifact gate.
pub fn is_consumer(
    kustomization: &Kustomization,
    key: &ArtifactKey,
    default_gate: GateMode,
    allow_cross_namespace: bool,
) -> bool {
    crate::gated::Gated::gating(kustomization, default_gate).mode() == Ok(GateMode::Artifact)
        && objects::source_reference(kustomization, allow_cross_namespace).is_ok_and(
            |(kind, ns, name)| {
                kind == SourceKind::ExternalArtifact && ns == key.namespace && name == key.name
            },
        )
}

impl super::Gate {
    /// A Kustomization in artifact mode whose ExternalArtifact cannot be published to (its
    /// `sourceRef` is not an ExternalArtifact, the ExternalArtifact is missing or names no
    /// supported upstream): a `refused` record saying why, nothing written to any object.
    pub(super) async fn refuse_target(
        &self,
        kustomization: &Kustomization,
        trigger: Trigger,
        error: &TargetError,
    ) -> GateOutcome {
        let namespace = kustomization.metadata.namespace.clone().unwrap_or_default();
        let name = kustomization.metadata.name.clone().unwrap_or_default();
        tracing::warn!(kustomization = %format!("{namespace}/{name}"), error = %error,
            "artifact gate: refused");
        // No revision: the refusal is about the objects, not a revision; only a spec change
        // makes it due again (service::index).
        let record = RevisionRecord::new(
            String::new(),
            trigger,
            super::now(),
            RevisionState::Refused,
            GateMode::Artifact,
            kustomization.metadata.generation,
        )
        .with_error(StepError::new("resolve", error.to_string()));
        self.finish(
            kustomization,
            record,
            GateOutcome::Done(RevisionState::Refused),
        )
        .await
    }

    /// Says in the ExternalArtifact's `Ready` condition why `record` (refused or failed) is
    /// not published; `status.artifact` keeps the last converged revision. Best effort: a
    /// failed write is logged (the record says the same).
    pub(super) async fn report_not_published(
        &self,
        target: Option<&Target>,
        record: &RevisionRecord,
    ) {
        let (Some(target), Some((reason, message))) = (target, not_published(record)) else {
            return;
        };
        self.write_artifact_status(target, &Update::NotPublished { reason, message })
            .await;
    }

    /// [`write_status`], logged.
    pub(super) async fn write_artifact_status(&self, target: &Target, update: &Update) {
        let c = &self.config;
        let artifact = format!("{}/{}", target.key.namespace, target.key.name);
        // The condition's message is read by whoever reads the ExternalArtifact: no value
        // substituted from a Secret of its namespace goes into it (crate::redact).
        let redacted;
        let update = match update {
            Update::NotPublished { reason, message } => {
                redacted = Update::NotPublished {
                    reason,
                    message: crate::redact::registry()
                        .for_namespace(&target.key.namespace)
                        .redact(message),
                };
                &redacted
            }
            other => other,
        };
        match write_status(&c.client, &target.key, update, c.call_timeout).await {
            Ok(wrote) => {
                tracing::info!(externalartifact = %artifact, wrote, update = ?update, "ExternalArtifact status")
            }
            Err(e) => {
                tracing::warn!(externalartifact = %artifact, error = %e, "could not write the ExternalArtifact status")
            }
        }
    }

    /// The artifact gate's hand-off: the revision is converged; once every consumer of the
    /// ExternalArtifact has converged it, the upstream's tarball is published (the storage
    /// verifies its digest) and the ExternalArtifact's status names it. This record is saved
    /// as converged before the other consumers are looked at, so two consumers finishing
    /// together cannot both wait for each other (at worst both publish: the same artifact,
    /// and the second status write changes nothing).
    pub(super) async fn publish_revision(
        &self,
        namespace: &str,
        name: &str,
        target: &Target,
        upstream: Option<&Artifact>,
        kustomization: &Kustomization,
        record: &mut RevisionRecord,
    ) -> Result<Option<Open>, HandoffError> {
        let c = &self.config;
        let key = format!("{namespace}/{name}");
        let revision = record.revision.clone();
        record.state = RevisionState::Converged;
        record.handoff = Some(Handoff {
            mode: GateMode::Artifact,
            at: super::now(),
            action: HandoffAction::Waiting,
            requested_at: None,
            resuspended_at: None,
            attempts: Vec::new(),
            retry_at: None,
        });
        self.save(namespace, name, record).await;

        let all = consumers(
            &c.client,
            &target.key,
            c.default_gate,
            c.resolver.allow_cross_namespace,
            c.call_timeout,
        )
        .await?;
        let waiting = waiting_for(&all, (namespace, name), &revision, |ns, n| {
            c.results.last(ns, n)
        });
        if !waiting.is_empty() {
            for (ns, n) in &waiting {
                record.warnings.push(waiting_warning(ns, n, &revision));
            }
            tracing::info!(kustomization = %key, revision = %revision,
                waiting = ?waiting, "converged; publishing once the other consumers converged it");
            return Ok(None);
        }

        let host = self
            .artifact_host
            .as_ref()
            .ok_or_else(|| HandoffError::NoStorage(self.no_storage_message()))?;
        let upstream =
            upstream
                .filter(|a| a.revision == revision)
                .ok_or_else(|| HandoffError::Upstream {
                    what: format!("{} no longer publishes {revision}", target.upstream_name()),
                })?;
        let digest = upstream
            .digest
            .clone()
            .ok_or_else(|| HandoffError::Upstream {
                what: format!("{}: the artifact has no digest", target.upstream_name()),
            })?;
        let published = host
            .publish(&target.key, &upstream.url, &digest)
            .await
            .map_err(|cause| HandoffError::Storage {
                revision: revision.clone(),
                cause,
            })?;
        let at = super::now();
        write_status(
            &c.client,
            &target.key,
            &Update::Published {
                published: published.clone(),
                revision: revision.clone(),
            },
            c.call_timeout,
        )
        .await
        .map_err(|cause| HandoffError::Status {
            revision: revision.clone(),
            cause,
        })?;
        tracing::info!(kustomization = %key, revision = %revision, url = %published.url,
            externalartifact = %format!("{}/{}", target.key.namespace, target.key.name), "published");
        mark_published(record, &at);
        // The consumers that converged the revision before: their records say published too.
        for (ns, n) in all
            .iter()
            .filter(|(ns, n)| (ns.as_str(), n.as_str()) != (namespace, name))
        {
            if let Some(mut last) = c.results.last(ns, n).filter(|r| {
                r.revision == revision
                    && r.state == RevisionState::Converged
                    && r.handoff
                        .as_ref()
                        .is_none_or(|h| h.action != HandoffAction::Published)
            }) {
                mark_published(&mut last, &at);
                self.save(ns, n, &last).await;
            }
        }

        // Flux's verdict for this Kustomization, recorded by the observer from the
        // Kustomization watch (no worker waits for it). kustomize-controller cannot have
        // attempted the revision before it was published, so any attempt of it is its answer.
        if super::handoff::applied_already(kustomization, &revision) {
            record.flux = Some(FluxResult {
                outcome: FluxOutcome::Applied,
                applied_revision: Some(revision.clone()),
                message: Some("Flux had already applied this revision".into()),
                attempted_revision: None,
            });
            return Ok(None);
        }
        record.flux = Some(FluxResult {
            outcome: FluxOutcome::Pending,
            applied_revision: None,
            message: Some("published: waiting for Flux's answer".into()),
            attempted_revision: None,
        });
        Ok(Some(Open {
            mode: GateMode::Artifact,
            revision,
            started_at: record.started_at.clone(),
            since: Since::Generation(0),
            attempted_before: kustomization
                .status
                .as_ref()
                .and_then(|s| s.last_attempted_revision.clone()),
            deadline: tokio::time::Instant::now() + c.handoff_timeout,
            attempt: 1,
        }))
    }
}

impl super::Gate {
    /// Why the `artifact` gate cannot publish on this replica: it has no artifact storage
    /// (`--storage-path`), naming the directory and the error when the default one could not
    /// be made. Checked before the converge too (`Gate::run`), so nothing is written for a
    /// revision that could never be published.
    pub(crate) fn no_storage_message(&self) -> String {
        match &self.no_artifact_host {
            Some(why) => format!(
                "no artifact storage: {why}; the artifact gate publishes through the service's artifact server (--storage-path)"
            ),
            None => "no artifact storage is configured: the artifact gate publishes through the service's artifact server (--storage-path)".to_string(),
        }
    }
}
