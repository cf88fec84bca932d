//! Per-revision results: what the service did with one revision of one Kustomization.
//!
//! These shapes are a contract (`GET /status`, the dashboard, the results ConfigMaps): field
//! names are camelCase and every enum is spelled as the service issue and `docs/` spell it.
//! Persisted records are read back by later versions, so fields are only ever added, and every
//! added field has a default.

use serde::{Deserialize, Serialize};

pub use crate::decide::RefusalCode;
pub use crate::volume::{Attributes, ModifyState, Restart, Volume, VolumeState};

/// How a Kustomization hands a converged revision to Flux (annotation `flux-converger.io/gate`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateMode {
    /// Kept suspended between revisions; unsuspended for one converged revision.
    Suspend,
    /// `reconcile.fluxcd.io/requestedAt` after the converge.
    Reconcile,
    /// The Kustomization reads an ExternalArtifact the service publishes only once the
    /// revision of its upstream is converged (docs/gate.md, the artifact gate).
    Artifact,
    /// Not handled.
    Off,
}

impl GateMode {
    /// Every value of the annotation, as an unknown one's message lists them.
    pub const VALUES: &'static [&'static str] = &["suspend", "reconcile", "artifact", "off"];

    pub fn as_str(self) -> &'static str {
        match self {
            GateMode::Suspend => "suspend",
            GateMode::Reconcile => "reconcile",
            GateMode::Artifact => "artifact",
            GateMode::Off => "off",
        }
    }

    /// `suspend`, `reconcile`, `artifact` or `off`; anything else is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "suspend" => Some(GateMode::Suspend),
            "reconcile" => Some(GateMode::Reconcile),
            "artifact" => Some(GateMode::Artifact),
            "off" => Some(GateMode::Off),
            _ => None,
        }
    }
}

impl std::fmt::Display for GateMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What started a revision's run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    /// notification-controller's webhook.
    Webhook,
    /// The periodic resync (what is due, level-triggered).
    Resync,
    /// Taking the lead (a start, or a new leader).
    Startup,
    /// A watch event: a source's new revision, a Kustomization added or its spec changed.
    Watch,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Webhook => "webhook",
            Trigger::Resync => "resync",
            Trigger::Startup => "startup",
            Trigger::Watch => "watch",
        }
    }
}

/// Where one revision stands.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RevisionState {
    Running,
    /// Every StatefulSet converged (or had nothing to do) and the revision was handed off.
    Converged,
    /// At least one StatefulSet was refused: not handed off, not retried until the revision changes.
    Refused,
    /// A step failed: retried with backoff.
    Failed,
    /// A newer revision replaced it before hand-off.
    Superseded,
}

impl RevisionState {
    pub fn as_str(self) -> &'static str {
        match self {
            RevisionState::Running => "running",
            RevisionState::Converged => "converged",
            RevisionState::Refused => "refused",
            RevisionState::Failed => "failed",
            RevisionState::Superseded => "superseded",
        }
    }
}

/// How one StatefulSet of the revision ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StatefulSetOutcome {
    Converged,
    Unchanged,
    Refused,
    Failed,
    /// Some claims could not grow yet (not Bound); re-checked at every resync.
    Deferred,
    /// Not written because another StatefulSet of the same revision was refused or failed
    /// (a revision is converged all or nothing); `error.message` names which. Never handed off.
    Held,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateChange {
    pub template: String,
    pub from: String,
    pub to: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimChange {
    pub claim: String,
    pub from: String,
    pub to: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeferredClaim {
    pub claim: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusalEntry {
    /// The refusal code, spelled on the wire as [`RefusalCode`]'s `Display` (`shrink`,
    /// `not-expandable`, `selector-changed`, ..., docs/http-api.md).
    pub code: RefusalCode,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepError {
    /// The step that failed (`read`, `prove`, `grow`, `orphan`, ..., or `resolve`, `handoff`).
    pub step: String,
    pub message: String,
    /// What an operator runs by hand to finish (from the same plan as `plan -o commands`).
    #[serde(default)]
    pub hint: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetEntry {
    pub namespace: String,
    pub name: String,
    pub outcome: StatefulSetOutcome,
    #[serde(default)]
    pub old_uid: Option<String>,
    #[serde(default)]
    pub new_uid: Option<String>,
    #[serde(default)]
    pub templates: Vec<TemplateChange>,
    /// The immutable changes a re-create carried (or the server took in place) besides the
    /// storage growth `templates` lists, each with its note; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<crate::decide::Change>,
    #[serde(default)]
    pub claims: Vec<ClaimChange>,
    #[serde(default)]
    pub deferred: Vec<DeferredClaim>,
    #[serde(default)]
    pub refusal: Option<RefusalEntry>,
    #[serde(default)]
    pub error: Option<StepError>,
    /// The claims followed after the converge (each it grew or recovered, each other claim
    /// asking for more than it holds), where each expansion stands; kept current by the
    /// service's claim follower. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
}

/// How many of a revision's followed claims are in each state (`volumes` of a record): what
/// `/status` rows and the dashboard's overview show. A claim `recovered` and not taken up by
/// the driver yet counts as `requested`. Beside the size states, the claims moved to another
/// VolumeAttributesClass by their `attributes.state` (`modified`, `modifying`,
/// `modifyInfeasible`), and those whose pod was restarted (`restarted`): each absent when 0.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSummary {
    pub grown: u32,
    pub resizing: u32,
    pub filesystem_pending: u32,
    pub infeasible: u32,
    pub error: u32,
    pub stalled: u32,
    pub requested: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarted: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub modified: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub modifying: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub modify_infeasible: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl VolumeSummary {
    /// The summary of `entries`' volumes; `None` when none is followed.
    pub fn of(entries: &[StatefulSetEntry]) -> Option<Self> {
        let mut summary = VolumeSummary::default();
        let mut any = false;
        for v in entries.iter().flat_map(|e| &e.volumes) {
            let slot = match v.state {
                VolumeState::Grown => &mut summary.grown,
                VolumeState::Resizing => &mut summary.resizing,
                VolumeState::FilesystemPending => &mut summary.filesystem_pending,
                VolumeState::Infeasible => &mut summary.infeasible,
                VolumeState::Error => &mut summary.error,
                VolumeState::Stalled => &mut summary.stalled,
                VolumeState::Requested | VolumeState::Recovered => &mut summary.requested,
                VolumeState::Restarted => &mut summary.restarted,
                // Not Bound: listed in `deferred`, re-checked by the gate, not followed.
                VolumeState::Deferred => continue,
            };
            *slot += 1;
            any = true;
            if let Some(a) = &v.attributes {
                *match a.state {
                    crate::volume::ModifyState::Modified => &mut summary.modified,
                    crate::volume::ModifyState::Modifying => &mut summary.modifying,
                    crate::volume::ModifyState::Infeasible => &mut summary.modify_infeasible,
                } += 1;
            }
        }
        any.then_some(summary)
    }

    /// Whether every followed claim grew.
    pub fn all_grown(&self) -> bool {
        self.grown > 0
            && self.resizing
                + self.filesystem_pending
                + self.infeasible
                + self.error
                + self.stalled
                + self.requested
                + self.restarted
                == 0
    }
}

/// The hand-off to Flux, once done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handoff {
    pub mode: GateMode,
    /// RFC 3339 time of the hand-off write.
    pub at: String,
    /// What the hand-off wrote, and what became of it since.
    pub action: HandoffAction,
    /// The `reconcile.fluxcd.io/requestedAt` token written (reconcile mode).
    #[serde(default)]
    pub requested_at: Option<String>,
    /// RFC 3339 time the Kustomization was suspended again (suspend mode).
    #[serde(default)]
    pub resuspended_at: Option<String>,
    /// Every time the gate opened for this revision, oldest first, with Flux's answer to each:
    /// the first hand-off, then each re-open on Flux's retry schedule after Flux failed or
    /// did not answer (suspend mode). Absent in records of earlier versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<HandoffAttempt>,
    /// RFC 3339 time the gate opens again for this revision (suspend mode, after a failure or
    /// a timeout, while the source still publishes it and Flux has not applied it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}

impl Handoff {
    /// Whether the hand-off has waited `timeout` or longer at `now` without an answer: what
    /// makes a hand-back `timeout`. A time that does not parse has not waited.
    pub fn waited(&self, timeout: std::time::Duration, now: jiff::Timestamp) -> bool {
        let Ok(at) = self.at.parse::<jiff::Timestamp>() else {
            return false;
        };
        let timeout = jiff::SignedDuration::try_from(timeout).unwrap_or(jiff::SignedDuration::MAX);
        now.duration_since(at) >= timeout
    }
}

/// What a hand-off did (`handoff.action`, spelled as the JSON has always spelled it).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HandoffAction {
    /// Suspend mode: `spec.suspend=false` written.
    Unsuspended,
    /// Reconcile mode: the `reconcile.fluxcd.io/requestedAt` token written.
    ReconcileRequested,
    /// Suspend mode: suspended again once Flux answered (or the gate timed out).
    Resuspended,
    /// Artifact mode: converged, other consumers of the ExternalArtifact have not converged
    /// the revision yet.
    Waiting,
    /// Artifact mode: the ExternalArtifact's status names the revision.
    Published,
}

impl HandoffAction {
    pub fn as_str(self) -> &'static str {
        match self {
            HandoffAction::Unsuspended => "unsuspended",
            HandoffAction::ReconcileRequested => "reconcile-requested",
            HandoffAction::Resuspended => "resuspended",
            HandoffAction::Waiting => "waiting",
            HandoffAction::Published => "published",
        }
    }
}

/// Compares with the wire spelling, as the JSON of a record reads.
impl PartialEq<&str> for HandoffAction {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for HandoffAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One opening of the gate for a revision and what Flux answered to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandoffAttempt {
    /// RFC 3339 time the gate opened.
    pub at: String,
    /// `pending` while open, then Flux's answer (`applied`, `failed`, `raced`, `timeout`).
    pub outcome: FluxOutcome,
    /// Flux's message (its Ready condition), or why the gate closed without an answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FluxOutcome {
    Applied,
    Failed,
    Timeout,
    /// The gate is open: Flux has not answered yet (or the gate closed before it could).
    Pending,
    /// Flux attempted another revision than the handed-off one (`attemptedRevision`): it
    /// raced the gate (reconcile mode, or a source that moved on while the gate was open).
    Raced,
}

impl FluxOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            FluxOutcome::Applied => "applied",
            FluxOutcome::Failed => "failed",
            FluxOutcome::Timeout => "timeout",
            FluxOutcome::Pending => "pending",
            FluxOutcome::Raced => "raced",
        }
    }
}

/// What Flux did with the handed-off revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FluxResult {
    pub outcome: FluxOutcome,
    #[serde(default)]
    pub applied_revision: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    /// The revision Flux attempted when it raced the gate (`status.lastAttemptedRevision`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempted_revision: Option<String>,
}

impl FluxResult {
    /// The controller applied what was handed back (at `revision`, when it says).
    pub fn applied(revision: Option<String>) -> FluxResult {
        FluxResult {
            outcome: FluxOutcome::Applied,
            applied_revision: revision,
            message: None,
            attempted_revision: None,
        }
    }

    /// The controller failed what was handed back (at `attempted`, when it says).
    pub fn failed(message: String, attempted: Option<String>) -> FluxResult {
        FluxResult {
            outcome: FluxOutcome::Failed,
            applied_revision: None,
            message: Some(message),
            attempted_revision: attempted,
        }
    }

    /// What a hand-back still unanswered says at `now`: `None` while it may still be answered,
    /// a `timeout` (`silent`, then how long it waited) once `handoff` has waited `timeout`.
    pub fn unanswered(
        handoff: Option<&Handoff>,
        timeout: std::time::Duration,
        now: jiff::Timestamp,
        silent: &str,
    ) -> Option<FluxResult> {
        if !handoff.is_some_and(|h| h.waited(timeout, now)) {
            return None;
        }
        Some(FluxResult {
            outcome: FluxOutcome::Timeout,
            applied_revision: None,
            message: Some(format!(
                "{silent} within {}",
                humantime::format_duration(timeout)
            )),
            attempted_revision: None,
        })
    }
}

/// One revision of one Kustomization, as the service handled it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRecord {
    /// The source artifact revision, e.g. `main@sha1:<hex>`.
    pub revision: String,
    /// The artifact digest, e.g. `sha256:<hex>`.
    #[serde(default)]
    pub digest: Option<String>,
    pub trigger: Trigger,
    pub started_at: String,
    #[serde(default)]
    pub finished_at: Option<String>,
    pub state: RevisionState,
    #[serde(default)]
    pub statefulsets: Vec<StatefulSetEntry>,
    #[serde(default)]
    pub handoff: Option<Handoff>,
    #[serde(default)]
    pub flux: Option<FluxResult>,
    /// Conditions that waiting mends (deferred claims, a hand-off that timed out).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// A failure before or after the StatefulSets (resolve, render, hand-off).
    #[serde(default)]
    pub error: Option<StepError>,
    /// The Kustomization's `metadata.generation` when the revision was handled: a refused
    /// revision is retried when its spec changed (a new generation), not before.
    #[serde(default)]
    pub generation: Option<i64>,
    /// The gate mode the revision was handed off with.
    #[serde(default)]
    pub gate: Option<GateMode>,
    /// How many consecutive failed attempts of this revision (at this generation) the record
    /// stands for: a retry that fails again updates the record (this count, its error, its
    /// times) instead of adding one, so a failing Kustomization keeps its history. 1, and
    /// absent from the JSON, for every record that is not such a repeat.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub attempts: u32,
    /// How many of its followed claims are in each state (`grown`, `resizing`,
    /// `filesystemPending`, `infeasible`, `error`, `stalled`, `requested`): the summary of its
    /// StatefulSets' `volumes`, kept with them. Absent when no claim is followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<VolumeSummary>,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl StepError {
    /// A failure of `step`, without a hint.
    pub fn new(step: impl Into<String>, message: impl Into<String>) -> Self {
        StepError {
            step: step.into(),
            message: message.into(),
            hint: None,
        }
    }
}

impl RevisionRecord {
    /// A record as a run starts it: `state`, one attempt, nothing converged or handed off
    /// yet. Every record is made here, so a field added later gets its default in one place.
    pub fn new(
        revision: impl Into<String>,
        trigger: Trigger,
        started_at: impl Into<String>,
        state: RevisionState,
        gate: GateMode,
        generation: Option<i64>,
    ) -> Self {
        RevisionRecord {
            revision: revision.into(),
            digest: None,
            trigger,
            started_at: started_at.into(),
            finished_at: None,
            state,
            statefulsets: Vec::new(),
            handoff: None,
            flux: None,
            warnings: Vec::new(),
            error: None,
            generation,
            gate: Some(gate),
            attempts: 1,
            volumes: None,
        }
    }

    /// The same record, with `error` as its failure.
    pub fn with_error(mut self, error: StepError) -> Self {
        self.error = Some(error);
        self
    }

    /// The same record, with the artifact's digest.
    pub fn with_digest(mut self, digest: Option<String>) -> Self {
        self.digest = digest;
        self
    }

    /// The record as `GET /status` shows it: everything but `statefulsets`.
    pub fn summary(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(map) = value.as_object_mut() {
            map.remove("statefulsets");
        }
        value
    }
}

/// One handled gated object as `GET /status` lists it, whatever its kind: every kind's rows
/// have this shape, under the field its kind names (`kustomizations`, `helmReleases`, ...),
/// `kind` telling them apart.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRow {
    pub kind: super::Kind,
    pub namespace: String,
    pub name: String,
    pub gate: GateMode,
    /// The revision its source publishes now (`status.artifact.revision`), if any.
    pub source_revision: Option<String>,
    /// The newest record without its StatefulSets ([`RevisionRecord::summary`]).
    pub last: Option<serde_json::Value>,
    /// Why nothing runs for it: the `flux-converger.io/hold` annotation's reason, or, in
    /// reconcile mode, `spec.suspend` ([`crate::gated::gating::Gating`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
    /// Why the service does not act on it now, when that is not a hold (a HelmRelease whose
    /// upgrade helm-controller has not given up on, ...): nothing is written for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// One handled gated object with its history, newest first (`GET /status/{ns}/{name}` for a
/// Kustomization, `GET /status/{plural}/{ns}/{name}` for the other kinds).
/// `R` is how the history is held: the records, or (the service's `/status`) the JSON array
/// the results keep, spliced in unparsed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetail<R = Vec<RevisionRecord>> {
    pub kind: super::Kind,
    pub namespace: String,
    pub name: String,
    pub gate: GateMode,
    pub source_revision: Option<String>,
    /// As [`StatusRow::hold`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
    /// As [`StatusRow::waiting`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    pub revisions: R,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handoff(at: &str) -> Handoff {
        Handoff {
            mode: GateMode::Reconcile,
            at: at.into(),
            action: HandoffAction::ReconcileRequested,
            requested_at: None,
            resuspended_at: None,
            attempts: Vec::new(),
            retry_at: None,
        }
    }

    /// A hand-back is `timeout` once it has waited `--handoff-timeout`, never before, and never
    /// when its time does not parse or there is none.
    #[test]
    fn an_unanswered_hand_back_by_table() {
        let now: jiff::Timestamp = "2026-12-05T12:10:00Z".parse().unwrap();
        let ten = std::time::Duration::from_secs(600);
        for (at, expected) in [
            (Some("2026-12-05T12:00:00Z"), true),
            (Some("2026-12-05T11:00:00Z"), true),
            (Some("2026-12-05T12:00:01Z"), false),
            (Some("not a time"), false),
            (None, false),
        ] {
            let h = at.map(handoff);
            let got =
                FluxResult::unanswered(h.as_ref(), ten, now, "helm-controller did not answer");
            assert_eq!(got.is_some(), expected, "{at:?}");
            if let Some(r) = got {
                assert_eq!(r.outcome, FluxOutcome::Timeout);
                assert_eq!(
                    r.message.as_deref(),
                    Some("helm-controller did not answer within 10m")
                );
            }
        }
    }
}
