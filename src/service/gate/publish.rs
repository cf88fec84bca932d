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
//! moves only when `Ready` changes status).

use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::GateOutcome;
use super::handoff::Since;
use super::state::Open;
use crate::cluster::{CallError, FIELD_MANAGER, with_deadline};
use crate::flux::objects::{
    self, Artifact, Condition, ExternalArtifact, Kustomization, ObjectsError, SourceKind,
    SourceStatus, UpstreamError,
};
use crate::model::HandoffAction;
use crate::model::{
    FluxOutcome, FluxResult, GateMode, Handoff, RevisionRecord, RevisionState, StatefulSetOutcome,
    StepError, Trigger,
};
use crate::storage::host::{ArtifactKey, Published};

/// `Ready=True`: the converged revision is stored and published (source-controller's reason).
pub const REASON_SUCCEEDED: &str = "Succeeded";
/// `Ready=False`: the upstream's revision was refused by the converge; not published.
pub const REASON_CONVERGE_REFUSED: &str = "ConvergeRefused";
/// `Ready=False`: the upstream's revision failed (retried with backoff); not published yet.
pub const REASON_CONVERGE_FAILED: &str = "ConvergeFailed";
/// `Ready=False`: the upstream has no artifact to converge.
pub const REASON_SOURCE_NOT_READY: &str = "SourceNotReady";

/// Conditions carry at most this much of a message (the CRD allows 32768 bytes; an API
/// server's message quoted whole can be longer).
const MAX_MESSAGE: usize = 4096;

/// The prefix of the warning a converged, not yet published record carries per consumer.
pub const WAITING_PREFIX: &str = "waiting for ";

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

/// What to say in the ExternalArtifact's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// `revision` (the upstream's) is converged and stored as `published`.
    Published {
        published: Published,
        revision: String,
    },
    /// Nothing new is published: `status.artifact` stays; `Ready=False` for `reason`.
    NotPublished {
        reason: &'static str,
        message: String,
    },
}

/// The `Ready` condition for `update`: `lastTransitionTime` is kept from `previous` when the
/// status (True/False) is the same, else `now`.
pub fn ready_condition(
    previous: Option<&Condition>,
    update: &Update,
    generation: Option<i64>,
    now: &str,
) -> Condition {
    let (status, reason, message) = match update {
        Update::Published { revision, .. } => (
            "True",
            REASON_SUCCEEDED,
            format!("stored artifact for converged revision '{revision}'"),
        ),
        Update::NotPublished { reason, message } => ("False", *reason, message.clone()),
    };
    let mut message = message;
    crate::records::results::truncate_text(&mut message, MAX_MESSAGE);
    let last_transition_time = match previous {
        Some(p) if p.status == status => p
            .last_transition_time
            .clone()
            .unwrap_or_else(|| now.to_string()),
        _ => now.to_string(),
    };
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        observed_generation: generation,
        last_transition_time: Some(last_transition_time),
    }
}

/// The merge patch of the ExternalArtifact's `status` subresource for `update`, or `None` when
/// its status says so already (no write). The artifact's `lastUpdateTime` is kept when the
/// same artifact is published again; other conditions than `Ready` are kept (a merge patch
/// replaces the whole list).
pub fn status_patch(
    current: &SourceStatus,
    generation: Option<i64>,
    update: &Update,
    now: &str,
) -> Option<Value> {
    let previous = current.conditions.iter().find(|c| c.type_ == "Ready");
    let ready = ready_condition(previous, update, generation, now);
    let artifact = match update {
        Update::Published {
            published,
            revision,
        } => {
            let same = current.artifact.as_ref().filter(|a| {
                a.url == published.url
                    && a.revision == *revision
                    && a.digest.as_deref() == Some(published.digest.as_str())
                    && a.path == published.path
                    && a.size == Some(published.size)
            });
            Some(Artifact {
                url: published.url.clone(),
                revision: revision.clone(),
                digest: Some(published.digest.clone()),
                path: published.path.clone(),
                size: Some(published.size),
                last_update_time: Some(
                    same.and_then(|a| a.last_update_time.clone())
                        .unwrap_or_else(|| now.to_string()),
                ),
                metadata: Default::default(),
            })
        }
        Update::NotPublished { .. } => None,
    };
    let condition_same = previous.is_some_and(|p| {
        p.status == ready.status
            && p.reason == ready.reason
            && p.message == ready.message
            && p.observed_generation == ready.observed_generation
    });
    let artifact_same = artifact.is_none() || artifact == current.artifact;
    if condition_same && artifact_same {
        return None;
    }
    let mut conditions: Vec<Condition> = current
        .conditions
        .iter()
        .filter(|c| c.type_ != "Ready")
        .cloned()
        .collect();
    conditions.insert(0, ready);
    let mut status = json!({ "conditions": conditions });
    if let Some(a) = artifact {
        status["artifact"] = json!(a);
    }
    Some(json!({ "status": status }))
}

/// Why a finished record was not published, as the `Ready=False` reason and message: the
/// revision and what stopped it (the refusal code and StatefulSet, or the step that failed).
/// `None` for a record that is not refused or failed.
pub fn not_published(record: &RevisionRecord) -> Option<(&'static str, String)> {
    let revision = if record.revision.is_empty() {
        "(unknown)"
    } else {
        record.revision.as_str()
    };
    let (reason, outcome, word) = match record.state {
        RevisionState::Refused => (
            REASON_CONVERGE_REFUSED,
            StatefulSetOutcome::Refused,
            "refused",
        ),
        RevisionState::Failed => (REASON_CONVERGE_FAILED, StatefulSetOutcome::Failed, "failed"),
        _ => return None,
    };
    let statefulset = record.statefulsets.iter().find(|s| s.outcome == outcome);
    let message = match (statefulset, &record.error) {
        (Some(s), _) => {
            let what = match (&s.refusal, &s.error) {
                (Some(r), _) => format!("({}): {}", r.code, r.message),
                (None, Some(e)) => format!("at {}: {}", e.step, e.message),
                (None, None) => String::new(),
            };
            format!(
                "revision {revision}: StatefulSet {}/{} {word} {what}",
                s.namespace, s.name
            )
            .trim_end()
            .to_string()
        }
        (None, Some(e)) => format!("revision {revision} {word} at {}: {}", e.step, e.message),
        (None, None) => format!("revision {revision} {word}"),
    };
    Some((reason, message))
}

fn artifact_api(client: &kube::Client, namespace: &str) -> Api<ExternalArtifact> {
    Api::namespaced(client.clone(), namespace)
}

/// Writes `update` into the ExternalArtifact's status when it changes anything; returns
/// whether it wrote.
/// The ExternalArtifact's condition reason when the artifact it publishes is lost: the
/// storage volume no longer holds it (a reschedule onto an empty volume) and neither the upstream
/// nor another replica still has it. The next converged revision republishes.
pub const REASON_ARTIFACT_LOST: &str = "ArtifactLost";

/// What `Ready=False ArtifactLost` says.
pub fn lost_message(key: &ArtifactKey) -> String {
    format!(
        "the artifact published for ExternalArtifact {}/{} is lost: the storage no longer holds it and neither its upstream nor another replica still has it; the next converged revision is published again",
        key.namespace, key.name
    )
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
    super::state::Gating::of(kustomization, default_gate).mode() == Ok(GateMode::Artifact)
        && objects::source_reference(kustomization, allow_cross_namespace).is_ok_and(
            |(kind, ns, name)| {
                kind == SourceKind::ExternalArtifact && ns == key.namespace && name == key.name
            },
        )
}

/// The consumers (other than `me`) whose newest record is not `converged` for `revision`:
/// the publish waits for them.
pub fn waiting_for(
    consumers: &[(String, String)],
    me: (&str, &str),
    revision: &str,
    last: impl Fn(&str, &str) -> Option<RevisionRecord>,
) -> Vec<(String, String)> {
    consumers
        .iter()
        .filter(|(ns, name)| (ns.as_str(), name.as_str()) != me)
        .filter(|(ns, name)| {
            !last(ns, name)
                .is_some_and(|r| r.revision == revision && r.state == RevisionState::Converged)
        })
        .cloned()
        .collect()
}

/// The warning a converged record carries while `(ns, name)` has not converged `revision`.
pub fn waiting_warning(namespace: &str, name: &str, revision: &str) -> String {
    format!("{WAITING_PREFIX}{namespace}/{name} to converge {revision} before publishing")
}

/// Marks a converged record as published at `at`: its hand-off says so and the warnings that
/// said it waits for other consumers go.
pub fn mark_published(record: &mut RevisionRecord, at: &str) {
    record.handoff = Some(crate::model::Handoff {
        mode: GateMode::Artifact,
        at: at.to_string(),
        action: HandoffAction::Published,
        requested_at: None,
        resuspended_at: None,
        attempts: Vec::new(),
        retry_at: None,
    });
    record
        .warnings
        .retain(|w| !(w.starts_with(WAITING_PREFIX) && w.ends_with(" before publishing")));
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
    ) -> Result<Option<Open>, String> {
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
        .await
        .map_err(|e| e.to_string())?;
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
            .ok_or_else(|| self.no_storage_message())?;
        let upstream = upstream
            .filter(|a| a.revision == revision)
            .ok_or_else(|| format!("{} no longer publishes {revision}", target.upstream_name()))?;
        let digest = upstream
            .digest
            .clone()
            .ok_or_else(|| format!("{}: the artifact has no digest", target.upstream_name()))?;
        let published = host
            .publish(&target.key, &upstream.url, &digest)
            .await
            .map_err(|e| format!("publishing {revision} to the artifact storage: {e}"))?;
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
        .map_err(|e| format!("publishing {revision}: {e}"))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RefusalEntry, StatefulSetEntry};

    fn published(digest: &str) -> Published {
        Published {
            url: format!("http://converger/externalartifact/team/apps/{digest}.tar.gz"),
            path: format!("externalartifact/team/apps/{digest}.tar.gz"),
            digest: format!("sha256:{digest}"),
            size: 42,
        }
    }

    fn cond(status: &str, reason: &str, message: &str, at: &str) -> Condition {
        Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            observed_generation: Some(1),
            last_transition_time: Some(at.into()),
        }
    }

    fn artifact(digest: &str, revision: &str, at: &str) -> Artifact {
        let p = published(digest);
        Artifact {
            url: p.url,
            revision: revision.into(),
            digest: Some(p.digest),
            path: p.path,
            size: Some(42),
            last_update_time: Some(at.into()),
            metadata: Default::default(),
        }
    }

    #[test]
    fn status_patch_by_table() {
        let pub_a = Update::Published {
            published: published("aa"),
            revision: "main@sha1:1".into(),
        };
        let refused = Update::NotPublished {
            reason: REASON_CONVERGE_REFUSED,
            message: "revision main@sha1:2: StatefulSet team/web refused (shrink): no".into(),
        };
        let stored = "stored artifact for converged revision 'main@sha1:1'";
        let ready_a = SourceStatus {
            artifact: Some(artifact("aa", "main@sha1:1", "T0")),
            conditions: vec![cond("True", REASON_SUCCEEDED, stored, "T0")],
            ..Default::default()
        };
        let other = Condition {
            type_: "Reconciling".into(),
            status: "True".into(),
            ..Default::default()
        };
        let with_other = SourceStatus {
            conditions: vec![other.clone()],
            ..Default::default()
        };
        let refused_then = SourceStatus {
            artifact: Some(artifact("aa", "main@sha1:1", "T0")),
            conditions: vec![cond(
                "False",
                REASON_CONVERGE_REFUSED,
                "revision main@sha1:2: StatefulSet team/web refused (shrink): no",
                "T1",
            )],
            ..Default::default()
        };
        let cases: Vec<(&str, SourceStatus, Update, Option<Value>)> = vec![
            (
                "first publish: artifact and Ready=True, both at now",
                SourceStatus::default(),
                pub_a.clone(),
                Some(json!({"status": {
                    "artifact": {"url": "http://converger/externalartifact/team/apps/aa.tar.gz",
                        "revision": "main@sha1:1", "digest": "sha256:aa",
                        "path": "externalartifact/team/apps/aa.tar.gz", "size": 42,
                        "lastUpdateTime": "NOW"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": stored, "observedGeneration": 1, "lastTransitionTime": "NOW"}]}})),
            ),
            (
                "the same publish again writes nothing",
                ready_a.clone(),
                pub_a.clone(),
                None,
            ),
            (
                "a refusal keeps the artifact, Ready goes False at now",
                ready_a.clone(),
                refused.clone(),
                Some(
                    json!({"status": {"conditions": [{"type": "Ready", "status": "False",
                    "reason": "ConvergeRefused",
                    "message": "revision main@sha1:2: StatefulSet team/web refused (shrink): no",
                    "observedGeneration": 1, "lastTransitionTime": "NOW"}]}}),
                ),
            ),
            (
                "the same refusal again writes nothing",
                refused_then.clone(),
                refused.clone(),
                None,
            ),
            (
                "another False reason keeps the transition time",
                refused_then.clone(),
                Update::NotPublished {
                    reason: REASON_SOURCE_NOT_READY,
                    message: "no artifact".into(),
                },
                Some(
                    json!({"status": {"conditions": [{"type": "Ready", "status": "False",
                    "reason": "SourceNotReady", "message": "no artifact",
                    "observedGeneration": 1, "lastTransitionTime": "T1"}]}}),
                ),
            ),
            (
                "publishing after a refusal: new artifact, transition at now",
                refused_then.clone(),
                Update::Published {
                    published: published("bb"),
                    revision: "main@sha1:3".into(),
                },
                Some(json!({"status": {
                    "artifact": {"url": "http://converger/externalartifact/team/apps/bb.tar.gz",
                        "revision": "main@sha1:3", "digest": "sha256:bb",
                        "path": "externalartifact/team/apps/bb.tar.gz", "size": 42,
                        "lastUpdateTime": "NOW"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": "stored artifact for converged revision 'main@sha1:3'",
                        "observedGeneration": 1, "lastTransitionTime": "NOW"}]}})),
            ),
            (
                "the same artifact with Ready=False again: lastUpdateTime kept",
                refused_then.clone(),
                pub_a.clone(),
                Some(json!({"status": {
                    "artifact": {"url": "http://converger/externalartifact/team/apps/aa.tar.gz",
                        "revision": "main@sha1:1", "digest": "sha256:aa",
                        "path": "externalartifact/team/apps/aa.tar.gz", "size": 42,
                        "lastUpdateTime": "T0"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": stored, "observedGeneration": 1, "lastTransitionTime": "NOW"}]}})),
            ),
            (
                "other conditions are kept",
                with_other,
                refused.clone(),
                Some(json!({"status": {"conditions": [
                    {"type": "Ready", "status": "False", "reason": "ConvergeRefused",
                     "message": "revision main@sha1:2: StatefulSet team/web refused (shrink): no",
                     "observedGeneration": 1, "lastTransitionTime": "NOW"},
                    {"type": "Reconciling", "status": "True"}]}})),
            ),
        ];
        for (what, current, update, expected) in cases {
            assert_eq!(
                status_patch(&current, Some(1), &update, "NOW"),
                expected,
                "{what}"
            );
        }
    }

    fn record(state: RevisionState, entries: Vec<StatefulSetEntry>) -> RevisionRecord {
        RevisionRecord {
            revision: "main@sha1:2".into(),
            digest: None,
            trigger: Trigger::Watch,
            started_at: "t".into(),
            finished_at: None,
            state,
            statefulsets: entries,
            handoff: None,
            flux: None,
            warnings: Vec::new(),
            error: None,
            generation: None,
            attempts: 1,
            gate: Some(GateMode::Artifact),
        }
    }

    fn entry(outcome: StatefulSetOutcome) -> StatefulSetEntry {
        StatefulSetEntry {
            namespace: "team".into(),
            name: "web".into(),
            outcome,
            old_uid: None,
            new_uid: None,
            templates: Vec::new(),
            changes: Vec::new(),
            claims: Vec::new(),
            deferred: Vec::new(),
            refusal: None,
            error: None,
        }
    }

    #[test]
    fn not_published_by_table() {
        let mut refused = entry(StatefulSetOutcome::Refused);
        refused.refusal = Some(RefusalEntry {
            code: crate::model::RefusalCode::Shrink,
            message: "data-web-0 from 2Gi to 1Gi".into(),
        });
        let mut failed = entry(StatefulSetOutcome::Failed);
        failed.error = Some(StepError::new("grow", "409"));
        let mut held = entry(StatefulSetOutcome::Held);
        held.name = "db".into();
        let mut render = record(RevisionState::Refused, Vec::new());
        render.error = Some(StepError::new("resolve", "missing file"));
        let mut api = record(RevisionState::Failed, Vec::new());
        api.error = Some(StepError::new("handoff", "timeout"));
        for (r, expected) in [
            (
                record(RevisionState::Refused, vec![held.clone(), refused]),
                Some((
                    REASON_CONVERGE_REFUSED,
                    "revision main@sha1:2: StatefulSet team/web refused (shrink): data-web-0 from 2Gi to 1Gi",
                )),
            ),
            (
                record(RevisionState::Failed, vec![held, failed]),
                Some((
                    REASON_CONVERGE_FAILED,
                    "revision main@sha1:2: StatefulSet team/web failed at grow: 409",
                )),
            ),
            (
                render,
                Some((
                    REASON_CONVERGE_REFUSED,
                    "revision main@sha1:2 refused at resolve: missing file",
                )),
            ),
            (
                api,
                Some((
                    REASON_CONVERGE_FAILED,
                    "revision main@sha1:2 failed at handoff: timeout",
                )),
            ),
            (record(RevisionState::Converged, Vec::new()), None),
            (record(RevisionState::Superseded, Vec::new()), None),
        ] {
            let got = not_published(&r);
            assert_eq!(
                got,
                expected.map(|(a, b)| (a, b.to_string())),
                "{:?}",
                r.state
            );
        }
    }

    #[test]
    fn waiting_for_by_table() {
        let consumers = vec![
            ("a".to_string(), "one".to_string()),
            ("a".to_string(), "two".to_string()),
            ("b".to_string(), "three".to_string()),
        ];
        let with = |rev: &str, state: RevisionState| {
            let mut r = record(state, Vec::new());
            r.revision = rev.into();
            Some(r)
        };
        type Last = fn(&str, &str) -> Option<RevisionRecord>;
        type AnyLast = Box<dyn Fn(&str, &str) -> Option<RevisionRecord>>;
        let cases: Vec<(&str, AnyLast, Vec<&str>)> = vec![
            (
                "all converged the revision",
                Box::new(move |_: &str, _: &str| with("R", RevisionState::Converged)),
                vec![],
            ),
            (
                "never run",
                Box::new((|_: &str, _: &str| None) as Last),
                vec!["two", "three"],
            ),
            (
                "an older revision, a refusal, a running one",
                Box::new(move |_: &str, n: &str| match n {
                    "two" => with("R0", RevisionState::Converged),
                    _ => with("R", RevisionState::Refused),
                }),
                vec!["two", "three"],
            ),
            (
                "one converged, one running",
                Box::new(move |_: &str, n: &str| match n {
                    "two" => with("R", RevisionState::Converged),
                    _ => with("R", RevisionState::Running),
                }),
                vec!["three"],
            ),
        ];
        for (what, last, expected) in cases {
            let got: Vec<String> = waiting_for(&consumers, ("a", "one"), "R", last)
                .into_iter()
                .map(|(_, n)| n)
                .collect();
            assert_eq!(got, expected, "{what}");
        }
    }

    #[test]
    fn mark_published_fills_the_handoff_and_drops_waiting_warnings() {
        let mut r = record(RevisionState::Converged, Vec::new());
        r.handoff = Some(Handoff {
            mode: GateMode::Artifact,
            at: "t0".into(),
            action: HandoffAction::Waiting,
            requested_at: None,
            resuspended_at: None,
            attempts: Vec::new(),
            retry_at: None,
        });
        r.warnings = vec![
            waiting_warning("a", "two", "R"),
            "claim data-web-0 not Bound yet".into(),
        ];
        mark_published(&mut r, "t1");
        let h = r.handoff.unwrap();
        assert_eq!(
            (h.mode, h.action.as_str(), h.at.as_str()),
            (GateMode::Artifact, "published", "t1")
        );
        assert_eq!(r.warnings, vec!["claim data-web-0 not Bound yet"]);
    }
}
