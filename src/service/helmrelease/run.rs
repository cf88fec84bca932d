//! One run of a HelmRelease (`helm.toolkit.fluxcd.io/v2`) whose upgrade helm-controller gave up
//! on because the StatefulSet immutable-field error refused it. It reads the HelmRelease and
//! Helm's newest release record, and:
//!
//! - when a hand-back is open (the last record handed back a token helm-controller has not
//!   answered), records helm-controller's answer once it has one: the upgrade it retried, and
//!   the release record that upgrade wrote;
//! - else asks `helm::act::when_to_act`; anything but "converge" writes nothing and is kept,
//!   with why, for `/status`;
//! - else converges the record's StatefulSets as the Kustomization's are converged (the gate's
//!   converge step, the same decide, prove, pre-flight, all or nothing, grow, orphan delete and
//!   re-create; Helm's ownership metadata and field manager on the re-create) and hands back:
//!   `reconcile.fluxcd.io/requestedAt` and `reconcile.fluxcd.io/forceAt` set to one new token,
//!   as `flux reconcile helmrelease --force` does.
//!
//! A hand-back whose upgrade failed again on the same error is not converged again until the
//! HelmRelease's generation or the newest record's version changes (`helm::act::retry_allowed`).
//! The release Secrets are only read, never written or annotated: helm-controller digests them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};

use crate::cluster::{CallError, FIELD_MANAGER, with_deadline};
use crate::flux::render::RenderedStatefulSet;
use crate::gated::{Desired, Gated};
use crate::helm::act::{self, Act, HandBack};
use crate::helm::helmrelease::{
    FORCE_REQUEST_ANNOTATION, HelmRelease, RECONCILE_REQUEST_ANNOTATION,
};
use crate::helm::manifest;
use crate::helm::release::{self, NAME_LABEL, OWNER_LABEL, ReleaseRecord};
use crate::model::{
    FluxOutcome, FluxResult, GateMode, GateOutcome, Handoff, HandoffAction, Key, Kind,
    RevisionRecord, RevisionState, StepError, Trigger,
};
use crate::records::answer_event::answer_event;
use crate::records::entry;
use crate::records::events::EventSink;
use crate::records::results::Results;
use crate::records::revision_event::revision_event;
use crate::service::step::ConvergeStep;

/// What the HelmRelease runs need; built by the service beside the gate.
pub struct HelmConfig {
    /// The service's own (fenced) identity: reads, the hand-back and the records.
    pub client: kube::Client,
    /// The HelmReleases' records (their own ConfigMaps: `Results::of_kind`).
    pub results: Results,
    pub events: EventSink,
    pub call_timeout: Duration,
    /// How long a hand-back waits for helm-controller's answer before it is recorded as
    /// timed out (`--handoff-timeout`).
    pub handoff_timeout: Duration,
    /// helm-controller's `--default-service-account`.
    pub default_service_account: Option<String>,
    /// The cap on a release record's decoded size (`--max-unpacked-size`).
    pub max_decoded_bytes: u64,
}

/// The HelmRelease runs. Cheap to clone.
#[derive(Clone)]
pub struct HelmGate {
    config: Arc<HelmConfig>,
    /// The converge step (and its caches, fence and journal), shared with the other kinds.
    step: ConvergeStep,
    /// Why a HelmRelease is not acted on now (`/status`), by key; nothing is written for it.
    waiting: Arc<Mutex<HashMap<Key, String>>>,
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// What a run ended on, besides its outcome: kept for `/status` when nothing was written.
enum Run {
    Outcome(GateOutcome),
    Waiting(String),
}

impl HelmGate {
    pub fn new(config: HelmConfig, step: ConvergeStep) -> Self {
        HelmGate {
            config: Arc::new(config),
            step,
            waiting: Arc::default(),
        }
    }

    pub fn results(&self) -> &Results {
        &self.config.results
    }

    fn waiting_map(&self) -> MutexGuard<'_, HashMap<Key, String>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why `key` is not acted on now, if it is waiting.
    pub fn waiting(&self, key: &Key) -> Option<String> {
        self.waiting_map().get(key).cloned()
    }

    /// Forgets a HelmRelease that is gone or no longer opted in.
    pub fn forget(&self, key: &Key) {
        self.waiting_map().remove(key);
    }

    /// Handles the HelmRelease `namespace/name` as it is now.
    pub async fn run(&self, namespace: &str, name: &str, trigger: Trigger) -> GateOutcome {
        let key = Key::helm_release(namespace, name);
        match self.run_once(&key, trigger).await {
            Run::Outcome(outcome) => {
                self.forget(&key);
                outcome
            }
            Run::Waiting(why) => {
                tracing::info!(helmrelease = %key, reason = %why, "not acting now");
                self.waiting_map().insert(key, why);
                GateOutcome::NotHandled
            }
        }
    }

    async fn run_once(&self, key: &Key, trigger: Trigger) -> Run {
        let c = &self.config;
        let shown = format!("HelmRelease {key}");
        let api: Api<HelmRelease> = Api::namespaced(c.client.clone(), &key.namespace);
        let hr = match with_deadline(c.call_timeout, "get", &shown, api.get_opt(&key.name)).await {
            Ok(Some(hr)) => hr,
            Ok(None) => return Run::Outcome(GateOutcome::NotHandled),
            Err(e) => return failed(e),
        };
        let gating = hr.gating(GateMode::Off);
        match gating.mode() {
            Ok(GateMode::Reconcile) => {}
            Ok(_) => return Run::Outcome(GateOutcome::NotHandled),
            Err(message) => {
                tracing::warn!(helmrelease = %key, %message, "not handled");
                return Run::Outcome(GateOutcome::NotHandled);
            }
        }
        if let Some(reason) = gating.hold {
            return Run::Waiting(format!("held: {reason}"));
        }
        let newest = match self.newest_record(&hr).await {
            Ok(newest) => newest,
            Err(Newest::Call(e)) => return failed(e),
            Err(Newest::Bad(message)) => {
                // A record that cannot be read is refused, once per generation: nothing of it
                // is converged, and helm-controller is not asked to try again.
                let last = c.results.last(&key.namespace, &key.name);
                let revision = message.0.clone();
                if last.as_ref().is_some_and(|l| {
                    l.state == RevisionState::Refused
                        && l.revision == revision
                        && l.generation == hr.metadata.generation
                }) {
                    return Run::Outcome(GateOutcome::Done(RevisionState::Refused));
                }
                let mut record = RevisionRecord::new(
                    revision,
                    trigger,
                    now(),
                    RevisionState::Refused,
                    GateMode::Reconcile,
                    hr.metadata.generation,
                )
                .with_error(StepError::new("release", message.1));
                return Run::Outcome(self.finish(&hr, &mut record).await);
            }
        };
        let info = newest.as_ref().map(ReleaseRecord::summary);
        let last = c.results.last(&key.namespace, &key.name);

        // An open hand-back: helm-controller's answer is what this run records.
        if let Some(last) = last.as_ref().filter(|l| open_token(l).is_some()) {
            return Run::Outcome(self.observe(&hr, last.clone(), info.as_ref()).await);
        }
        let version = match act::when_to_act(&hr, info.as_ref()) {
            Act::Wait(why) => return Run::Waiting(why.to_string()),
            Act::Converge { version } => version,
        };
        if let Some(blocked) = last.as_ref().and_then(|l| blocked_by(l, &hr, version)) {
            return Run::Waiting(blocked);
        }
        // A refused record is not converged again until it or the HelmRelease changes, as a
        // refused revision of a Kustomization is not: the same input is refused the same way.
        if last.as_ref().is_some_and(|l| {
            l.state == RevisionState::Refused
                && l.revision == format!("v{version}")
                && l.generation == hr.metadata.generation
        }) {
            return Run::Outcome(GateOutcome::Done(RevisionState::Refused));
        }
        let Some(record) = newest else {
            return Run::Waiting("no release record found".into());
        };
        Run::Outcome(self.converge(&hr, &record, version, trigger).await)
    }

    /// The newest release record of the HelmRelease's release, decoded under the cap; `None`
    /// when there is none.
    async fn newest_record(&self, hr: &HelmRelease) -> Result<Option<ReleaseRecord>, Newest> {
        let c = &self.config;
        let release = hr.release_name();
        let storage = hr.storage_namespace();
        let selector = format!("{}={},{NAME_LABEL}={release}", OWNER_LABEL.0, OWNER_LABEL.1);
        let api: Api<Secret> = Api::namespaced(c.client.clone(), storage);
        let what = format!("release Secrets {selector} in namespace {storage}");
        let listed = with_deadline(
            c.call_timeout,
            "list",
            &what,
            api.list(&ListParams::default().labels(&selector)),
        )
        .await
        .map_err(Newest::Call)?;
        let Some(secret) = release::newest(&listed.items, Some(&release)) else {
            return Ok(None);
        };
        let version = release::parse_secret_name(secret.metadata.name.as_deref().unwrap_or(""))
            .map(|(_, v)| format!("v{v}"))
            .unwrap_or_default();
        release::decode_secret(secret, c.max_decoded_bytes)
            .map(Some)
            .map_err(|e| Newest::Bad((version, e.to_string())))
    }

    /// Records helm-controller's answer to the open hand-back of `last`, or its timeout.
    async fn observe(
        &self,
        hr: &HelmRelease,
        mut last: RevisionRecord,
        newest: Option<&release::ReleaseInfo>,
    ) -> GateOutcome {
        let Some(token) = open_token(&last) else {
            return GateOutcome::Done(last.state);
        };
        let answer = act::handed_back(hr, &token, newest);
        let flux = match answer {
            Some(HandBack::Applied { version }) => FluxResult::applied(version),
            Some(HandBack::Failed {
                version,
                message,
                immutable,
            }) => {
                if immutable {
                    last.warnings.push(
                        "helm-controller's upgrade failed again on the StatefulSet immutable-field error: not converged again until the HelmRelease's generation or the release version changes"
                            .to_string(),
                    );
                }
                FluxResult::failed(message, version)
            }
            None => match FluxResult::unanswered(
                last.handoff.as_ref(),
                self.config.handoff_timeout,
                jiff::Timestamp::now(),
                "helm-controller did not handle the request",
            ) {
                Some(timeout) => timeout,
                None => return GateOutcome::Done(RevisionState::Converged),
            },
        };
        tracing::info!(helmrelease = %hr.key(), outcome = ?flux.outcome, "hand-back answered");
        last.flux = Some(flux);
        // The same revision, answered: its record is updated (not counted again) and the answer
        // gets its own Event; the `Converged` one was published at the hand-back.
        let key = hr.key();
        self.save(&key, &last).await;
        if let Some(event) = answer_event(Kind::HELM_RELEASE, &last) {
            self.config.events.publish(hr, &event).await;
        }
        GateOutcome::Done(last.state)
    }

    /// Converges the StatefulSets of record `version`, then hands back.
    async fn converge(
        &self,
        hr: &HelmRelease,
        record: &ReleaseRecord,
        version: i64,
        trigger: Trigger,
    ) -> GateOutcome {
        let c = &self.config;
        let key = hr.key();
        let revision = format!("v{version}");
        let mut out = RevisionRecord::new(
            revision.clone(),
            trigger,
            now(),
            RevisionState::Running,
            GateMode::Reconcile,
            hr.metadata.generation,
        );
        let source = format!(
            "release record {} of HelmRelease {key}",
            release::secret_name(&record.name, version)
        );
        let objects = match manifest::statefulsets(record, hr.release_namespace(), &source) {
            Ok(objects) => objects,
            Err(e) => {
                out.state = RevisionState::Refused;
                out.error = Some(StepError::new("release", e.to_string()));
                return self.finish(hr, &mut out).await;
            }
        };
        let rendered: Vec<RenderedStatefulSet> = objects
            .into_iter()
            .map(|object| RenderedStatefulSet {
                namespace: object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                name: object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                object,
            })
            .collect();
        self.save(&key, &out).await;
        tracing::info!(helmrelease = %key, revision = %revision, statefulsets = rendered.len(),
            "converging release record");
        let user = hr.user(c.default_service_account.as_deref());
        let entries = self
            .step
            .converge_all(Desired {
                owner: &key,
                revision: &revision,
                statefulsets: &rendered,
                user: user.as_deref(),
            })
            .await;
        out.statefulsets = entries;
        out.warnings = entry::deferred_warnings(&out.statefulsets);
        match RevisionState::of_statefulsets(&out.statefulsets) {
            RevisionState::Refused => {
                out.state = RevisionState::Refused;
                return self.finish(hr, &mut out).await;
            }
            RevisionState::Failed => {
                out.state = RevisionState::Failed;
                self.finish(hr, &mut out).await;
                return GateOutcome::Failed {
                    message: entry::describe(&out.statefulsets),
                };
            }
            _ => {}
        }
        let token = now();
        if let Err(e) = self.hand_back(&key, &token).await {
            out.state = RevisionState::Failed;
            out.error = Some(StepError::new("handoff", e.to_string()));
            self.finish(hr, &mut out).await;
            return GateOutcome::Failed {
                message: e.to_string(),
            };
        }
        out.handoff = Some(Handoff {
            mode: GateMode::Reconcile,
            at: token.clone(),
            action: HandoffAction::ReconcileRequested,
            requested_at: Some(token),
            resuspended_at: None,
            attempts: Vec::new(),
            retry_at: None,
        });
        out.state = RevisionState::Converged;
        self.finish(hr, &mut out).await
    }

    /// `reconcile.fluxcd.io/requestedAt` and `reconcile.fluxcd.io/forceAt` to `token`, as
    /// `flux reconcile helmrelease --force` writes them: helm-controller retries the upgrade
    /// now, past its exhausted retries.
    async fn hand_back(&self, key: &Key, token: &str) -> Result<(), CallError> {
        let c = &self.config;
        let api: Api<HelmRelease> = Api::namespaced(c.client.clone(), &key.namespace);
        let patch = serde_json::json!({"metadata": {"annotations": {
            RECONCILE_REQUEST_ANNOTATION: token,
            FORCE_REQUEST_ANNOTATION: token,
        }}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        with_deadline(
            c.call_timeout,
            "merge patch of reconcile.fluxcd.io/requestedAt and forceAt of",
            &format!("HelmRelease {key}"),
            api.patch(&key.name, &params, &Patch::Merge(&patch)),
        )
        .await
        .map(|_| ())
    }

    /// Saves `record` as final, counts it and publishes its Event on the HelmRelease.
    async fn finish(&self, hr: &HelmRelease, record: &mut RevisionRecord) -> GateOutcome {
        let c = &self.config;
        self.step
            .finish(&c.results, &c.events, hr, record, revision_event)
            .await
    }

    async fn save(&self, key: &Key, record: &RevisionRecord) {
        self.step.save(&self.config.results, key, record).await;
    }
}

/// Why the newest record could not be had.
enum Newest {
    Call(CallError),
    /// `(version, why)`: a record that does not read as one.
    Bad((String, String)),
}

fn failed(e: CallError) -> Run {
    Run::Outcome(GateOutcome::Failed {
        message: e.to_string(),
    })
}

/// The token of a hand-back helm-controller has not answered yet.
fn open_token(record: &RevisionRecord) -> Option<String> {
    if record.state != RevisionState::Converged || record.flux.is_some() {
        return None;
    }
    record.handoff.as_ref()?.requested_at.clone()
}

/// Why a converge of record `version` must not run again: the last hand-back's upgrade failed
/// on the same error and neither the generation nor the newest record changed since.
fn blocked_by(last: &RevisionRecord, hr: &HelmRelease, version: i64) -> Option<String> {
    let flux = last.flux.as_ref()?;
    let again = flux.outcome == FluxOutcome::Failed
        && flux
            .message
            .as_deref()
            .is_some_and(|m| m.contains(act::IMMUTABLE_ERROR));
    if !again
        || act::retry_allowed(
            last.generation,
            flux.attempted_revision.as_deref(),
            hr.metadata.generation,
            version,
        )
    {
        return None;
    }
    Some(format!(
        "the upgrade handed back after converging {} failed again on the StatefulSet immutable-field error ({}): not retried until the HelmRelease's generation or the release version changes",
        last.revision,
        flux.attempted_revision
            .as_deref()
            .unwrap_or("no new record")
    ))
}
