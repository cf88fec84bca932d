//! One revision of one Kustomization: resolve + render → converge each StatefulSet of the
//! render, in name order → hand off to Flux only if none was refused or failed → observe what
//! Flux does with it → record.
//!
//! Order matters for safety: every refusal happens before the first write (the converge
//! decides, proves and pre-flights every StatefulSet of the revision before it writes any; a
//! refused StatefulSet means nothing of the revision is written and no hand-off), and the
//! source is read again just before the hand-off so that a result for a revision that has
//! meanwhile moved on is never handed off: the run starts over for the new revision.
//!
//! Identities: the StatefulSet and claim calls impersonate the Kustomization's service
//! account (`spec.serviceAccountName`, else `--default-service-account`), as
//! kustomize-controller does; the render, the intents, the results, the hand-off and the
//! Events use the service's own identity.

pub mod error;
pub mod handoff;
pub mod modes;
pub mod observe;
pub mod publish;
pub mod recheck;
pub mod state;

use std::time::{Duration, Instant};

use crate::flux::objects::{self, Kustomization, ObjectsError};
use crate::flux::render::resolve::{ResolveError, Resolver, Unresolved};
use crate::gated::{Desired, Gated};
pub use crate::model::GateOutcome;
use crate::model::Key;
use crate::model::{
    GateMode, RevisionRecord, RevisionState, StatefulSetOutcome, StepError, Trigger,
};
use crate::records::entry;
use crate::records::events::EventSink;
use crate::records::metrics::Metrics;
use crate::records::results::Results;
use crate::records::revision_event::revision_event;
use crate::service::step::ConvergeStep;
use crate::storage::host::ArtifactHost;
use observe::{Observer, ObserverConfig};

/// The warning a Kustomization with `spec.force: true` gets under the `suspend` or `reconcile`
/// gate: Flux would re-create (pods and all) a StatefulSet whose unconverged revision it applies.
pub const FORCE_WARNING: &str = "spec.force is true: with the suspend or reconcile gate, Flux re-creates a StatefulSet it cannot patch (pods and all) whenever it applies a revision the gate did not converge; remove spec.force";

/// How many times a run starts over because the source moved on during the converge.
const MAX_RESTARTS: usize = 3;

/// What the gate needs; built by the service runtime.
pub struct GateConfig {
    /// The service's own identity.
    pub client: kube::Client,
    /// Where results and intents are kept (the service's namespace).
    pub namespace: String,
    pub resolver: Resolver,
    pub results: Results,
    pub metrics: Metrics,
    /// How long to wait for Flux to apply a handed-off revision.
    pub handoff_timeout: Duration,
    /// Bounds every API call.
    pub call_timeout: Duration,
    /// kustomize-controller's `--default-service-account`.
    pub default_service_account: Option<String>,
    pub events: EventSink,
    /// The mode of Kustomizations without the `flux-converger.io/gate` annotation.
    pub default_gate: GateMode,
}

/// One revision at a time of one Kustomization. Cheap to clone.
#[derive(Clone)]
pub struct Gate {
    config: std::sync::Arc<GateConfig>,
    /// The open gates: a run hands off and registers here; the watches close them.
    observer: Observer,
    /// The converge step, shared with every other kind's runs.
    step: ConvergeStep,
    /// Where the `artifact` gate publishes converged tarballs; `None`: a Kustomization in
    /// artifact mode fails its hand-off naming the missing storage.
    artifact_host: Option<std::sync::Arc<dyn ArtifactHost>>,
    /// Why there is no artifact host, when the storage was meant to be there (the default
    /// `--storage-path` cannot be created): the refusal names the directory.
    no_artifact_host: Option<String>,
}

/// What a pass was started with: the mode, the trigger, and (artifact mode) the
/// ExternalArtifact and its upstream.
struct Attempt<'a> {
    mode: GateMode,
    trigger: Trigger,
    target: Option<&'a publish::Target>,
}

/// How one pass over a revision ended.
enum Pass {
    Finished(GateOutcome),
    /// The source moved on before the hand-off: start over.
    Superseded,
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// `record` as the failure its attempt would be: what [`crate::records::results::is_repeat`]
/// compares with the last record to tell a retry of a failed revision.
fn failed_like(record: &RevisionRecord) -> RevisionRecord {
    let mut failed = record.clone();
    failed.state = RevisionState::Failed;
    failed
}

fn ks_name(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Gate {
    pub fn new(config: GateConfig, step: ConvergeStep) -> Self {
        let observer = Observer::new(ObserverConfig {
            client: config.client.clone(),
            results: config.results.clone(),
            call_timeout: config.call_timeout,
            handoff_timeout: config.handoff_timeout,
            default_gate: config.default_gate,
            allow_cross_namespace: config.resolver.allow_cross_namespace,
        });
        Gate {
            config: std::sync::Arc::new(config),
            observer,
            step,
            artifact_host: None,
            no_artifact_host: None,
        }
    }

    /// A gate with a converge step of its own (no caches shared with other kinds, no fence):
    /// for a gate run alone, as the tests run it.
    pub fn standalone(config: GateConfig) -> Self {
        let step = ConvergeStep::new(crate::service::step::StepConfig {
            client: config.client.clone(),
            namespace: config.namespace.clone(),
            shard: config.results.shard(),
            call_timeout: config.call_timeout,
            metrics: config.metrics.clone(),
            fence: None,
        });
        Gate::new(config, step)
    }

    /// This gate with another converge step (a test adds the service's caches to its own).
    pub fn with_step(mut self, step: ConvergeStep) -> Self {
        self.step = step;
        self
    }

    /// The converge step this gate's runs use.
    pub fn step(&self) -> &ConvergeStep {
        &self.step
    }

    /// The observer of this gate's hand-offs, for the watches to feed and the tick to drive.
    pub fn observer(&self) -> Observer {
        self.observer.clone()
    }

    /// The storage the `artifact` gate publishes through (the service's artifact server).
    /// Kept out of [`GateConfig`], as the StorageClass cache is, so that existing literal
    /// configs stay valid.
    pub fn with_artifact_host(mut self, host: std::sync::Arc<dyn ArtifactHost>) -> Self {
        self.artifact_host = Some(host);
        self
    }

    /// Why there is no artifact host ([`crate::storage::StorageConfig::unavailable`]): the
    /// `artifact` gate's refusal says it instead of only naming the flag.
    pub fn with_no_artifact_host(mut self, why: String) -> Self {
        self.no_artifact_host = Some(why);
        self
    }

    /// Handles the revision the Kustomization's source publishes now.
    pub async fn run(&self, namespace: &str, name: &str, trigger: Trigger) -> GateOutcome {
        let key = ks_name(namespace, name);
        for _ in 0..=MAX_RESTARTS {
            let ks = match objects::get_kustomization_within(
                &self.config.client,
                namespace,
                name,
                self.config.call_timeout,
            )
            .await
            {
                Ok(ks) => ks,
                Err(ObjectsError::NotFound { .. } | ObjectsError::CrdMissing { .. }) => {
                    return GateOutcome::NotHandled;
                }
                Err(e) => {
                    return GateOutcome::Failed {
                        message: e.to_string(),
                    };
                }
            };
            let gating = ks.gating(self.config.default_gate);
            let mode = match gating.mode() {
                Ok(GateMode::Off) => return GateOutcome::NotHandled,
                Ok(mode) => mode,
                Err(message) => {
                    tracing::warn!(kustomization = %key, %message, "not handled");
                    return GateOutcome::NotHandled;
                }
            };
            if let Some(reason) = &gating.hold {
                // Nothing at all while held; removing the hold makes it due again at once.
                tracing::info!(kustomization = %key, %reason, "held: not run");
                return GateOutcome::NotHandled;
            }
            if ks.spec.force {
                tracing::warn!(kustomization = %key, mode = %mode, "{FORCE_WARNING}");
            }
            let Some(handler) = modes::of(mode) else {
                return GateOutcome::NotHandled;
            };
            let target = match handler.prepare(self, &ks, trigger).await {
                Ok(target) => target,
                Err(outcome) => return outcome,
            };
            match self
                .pass(namespace, name, handler, trigger, target.as_ref(), ks)
                .await
            {
                Pass::Finished(outcome) => return outcome,
                Pass::Superseded => {
                    tracing::info!(kustomization = %key, "source moved on: starting over");
                }
            }
        }
        GateOutcome::Done(RevisionState::Superseded)
    }

    async fn pass(
        &self,
        namespace: &str,
        name: &str,
        handler: &dyn modes::Mode,
        trigger: Trigger,
        target: Option<&publish::Target>,
        ks: Kustomization,
    ) -> Pass {
        let mode = handler.mode();
        let c = &self.config;
        let key = ks_name(namespace, name);
        self.close_interrupted(namespace, name).await;
        let started_at = now();
        let t = Instant::now();
        // Artifact mode renders the upstream's artifact: the ExternalArtifact holds only what
        // was converged already. The Kustomization is the one `run` read: one read per attempt.
        let resolved = c
            .resolver
            .resolve_read(ks.clone(), target.map(|t| &t.upstream), c.call_timeout)
            .await;
        c.metrics.step(
            crate::model::Kind::KUSTOMIZATION,
            "resolve",
            t.elapsed().as_secs_f64(),
        );
        let resolved = match resolved {
            Ok(r) => r,
            Err(e) => {
                return Pass::Finished(
                    self.unresolved(
                        &ks,
                        Attempt {
                            mode,
                            trigger,
                            target,
                        },
                        started_at,
                        e,
                    )
                    .await,
                );
            }
        };
        handler
            .resolved(
                self,
                &Key::kustomization(namespace, name),
                &resolved.revision,
            )
            .await;
        // A re-check of claims left to grow updates the revision's record instead of adding one.
        let recheck = c.results.last(namespace, name).filter(|last| {
            recheck::is_recheck(
                last,
                &resolved.revision,
                resolved.kustomization.metadata.generation,
            )
        });
        let mut record = match &recheck {
            Some(previous) => previous.clone(),
            None => {
                let record = RevisionRecord::new(
                    resolved.revision.clone(),
                    trigger,
                    started_at,
                    RevisionState::Running,
                    mode,
                    resolved.kustomization.metadata.generation,
                )
                .with_digest(
                    resolved
                        .source
                        .status
                        .artifact
                        .as_ref()
                        .and_then(|a| a.digest.clone()),
                );
                // A retry of a revision that failed at this generation is shown `running` but
                // not written: what is stored (the failure) is what a restart must retry, and
                // the attempt writes once, at its end, if it ends otherwise.
                let retry = c.results.last(namespace, name).is_some_and(|last| {
                    crate::records::results::is_repeat(&failed_like(&record), &last)
                });
                if retry {
                    self.note(namespace, name, &record);
                } else {
                    self.save(namespace, name, &record).await;
                }
                record
            }
        };
        if resolved.kustomization.spec.force && !record.warnings.iter().any(|w| w == FORCE_WARNING)
        {
            record.warnings.push(FORCE_WARNING.to_string());
        }
        // The run's span (service::worker) names the revision from here on: the converge's
        // events and its request trace carry it.
        tracing::Span::current().record("revision", record.revision.as_str());
        tracing::info!(kustomization = %key, revision = %record.revision, recheck = recheck.is_some(),
            statefulsets = resolved.rendered.statefulsets.len(), "converging revision");

        let t = Instant::now();
        let owner = Key::kustomization(namespace, name);
        let user = resolved
            .kustomization
            .user(c.default_service_account.as_deref());
        let entries = self
            .step
            .converge_all(Desired::of_render(&resolved, &owner, user.as_deref()))
            .await;
        c.metrics.step(
            crate::model::Kind::KUSTOMIZATION,
            "converge",
            t.elapsed().as_secs_f64(),
        );
        match &recheck {
            Some(previous) => {
                record.statefulsets = recheck::merge(&previous.statefulsets, entries);
                record.warnings = recheck::warnings(
                    &previous.warnings,
                    &previous.statefulsets,
                    &record.statefulsets,
                );
            }
            None => {
                record.statefulsets = entries;
                let force = record.warnings.iter().any(|w| w == FORCE_WARNING);
                record.warnings = entry::deferred_warnings(&record.statefulsets);
                if force {
                    record.warnings.push(FORCE_WARNING.to_string());
                }
            }
        }
        let ks = &resolved.kustomization;
        // A re-check that changed nothing (claims still Pending) is not news: no Event.
        let publish = recheck
            .as_ref()
            .is_none_or(|p| p.statefulsets != record.statefulsets);
        match RevisionState::of_statefulsets(&record.statefulsets) {
            RevisionState::Refused => {
                record.state = RevisionState::Refused;
                self.report_not_published(target, &record).await;
                let outcome = GateOutcome::Done(RevisionState::Refused);
                return Pass::Finished(self.finish(ks, record, outcome).await);
            }
            RevisionState::Failed => {
                record.state = RevisionState::Failed;
                self.report_not_published(target, &record).await;
                let message = entry::describe(&record.statefulsets);
                let outcome = GateOutcome::Failed { message };
                return Pass::Finished(self.finish(ks, record, outcome).await);
            }
            _ => {}
        }

        // The result is only worth handing off if it is still the revision Flux will apply
        // (artifact mode: the revision the upstream publishes, which is what would be
        // published).
        let reread = match target {
            Some(t) => {
                let (kind, ns, n) = &t.upstream;
                objects::read_source_within(&c.client, *kind, ns, n, c.call_timeout).await
            }
            None => {
                objects::get_source_within(
                    &c.client,
                    ks,
                    c.resolver.allow_cross_namespace,
                    c.call_timeout,
                )
                .await
            }
        };
        let upstream_artifact = match reread {
            Ok(source) => {
                let artifact = source.status.artifact.clone();
                let now_published = source.status.artifact.map(|a| a.revision);
                if now_published.as_deref() != Some(record.revision.as_str()) {
                    record.state = RevisionState::Superseded;
                    record.warnings.push(format!(
                        "the source moved on to {} before the hand-off",
                        now_published.as_deref().unwrap_or("no artifact")
                    ));
                    self.finish(ks, record, GateOutcome::Done(RevisionState::Superseded))
                        .await;
                    return Pass::Superseded;
                }
                artifact
            }
            Err(e) => {
                record.state = RevisionState::Failed;
                record.error = Some(StepError::new(
                    "handoff",
                    format!("re-reading the source before the hand-off: {e}"),
                ));
                self.report_not_published(target, &record).await;
                let outcome = GateOutcome::Failed {
                    message: e.to_string(),
                };
                return Pass::Finished(self.finish(ks, record, outcome).await);
            }
        };

        let t = Instant::now();
        let mut open = None;
        let run = modes::Run {
            namespace,
            name,
            ks,
            target,
            upstream: upstream_artifact.as_ref(),
            recheck: recheck.is_some(),
        };
        let handed = handler
            .hand_off(self, run, &mut record)
            .await
            .map(|o| open = o);
        c.metrics.step(
            crate::model::Kind::KUSTOMIZATION,
            "handoff",
            t.elapsed().as_secs_f64(),
        );
        if let Err(error) = handed {
            c.metrics.error(
                crate::model::Kind::KUSTOMIZATION,
                &format!("handoff_{}", error.metric_label()),
            );
            let message = error.to_string();
            record.state = RevisionState::Failed;
            record.error = Some(StepError::new("handoff", message.clone()));
            self.report_not_published(target, &record).await;
            return Pass::Finished(
                self.finish(ks, record, GateOutcome::Failed { message })
                    .await,
            );
        }
        record.state = RevisionState::Converged;
        let deferred = record
            .statefulsets
            .iter()
            .any(|s| s.outcome == StatefulSetOutcome::Deferred);
        let outcome = if deferred {
            GateOutcome::Deferred
        } else {
            GateOutcome::Done(RevisionState::Converged)
        };
        let outcome = self.finish_with(ks, record, outcome, publish).await;
        // Registered once the record is saved, so the observer's update finds it final.
        if let Some(open) = open {
            let key = Key::kustomization(namespace, name);
            self.observer.opened(key.clone(), open);
            self.observer.check_soon(key);
        }
        Pass::Finished(outcome)
    }

    /// A revision that could not be resolved or rendered: gone Kustomizations are not handled,
    /// a source without an artifact is waited for, bad input (a cross-namespace reference
    /// blocked, a render Flux would fail too) is refused, the rest failed (retried).
    async fn unresolved(
        &self,
        ks: &Kustomization,
        attempt: Attempt<'_>,
        started_at: String,
        unresolved: Unresolved,
    ) -> GateOutcome {
        let Attempt {
            mode,
            trigger,
            target,
        } = attempt;
        let c = &self.config;
        let namespace = ks.metadata.namespace.as_deref().unwrap_or_default();
        let name = ks.metadata.name.as_deref().unwrap_or_default();
        let Unresolved { error, source } = unresolved;
        match &error {
            ResolveError::Objects(ObjectsError::NotFound { kind, .. })
                if kind == "Kustomization" =>
            {
                return GateOutcome::NotHandled;
            }
            ResolveError::Objects(ObjectsError::NoArtifact { .. }) => {
                tracing::info!(kustomization = %ks_name(namespace, name), error = %error, "waiting for an artifact");
                if let Some(t) = target {
                    self.write_artifact_status(
                        t,
                        &crate::records::artifact_status::Update::NotPublished {
                            reason: crate::records::artifact_status::REASON_SOURCE_NOT_READY,
                            message: error.to_string(),
                        },
                    )
                    .await;
                }
                return GateOutcome::Deferred;
            }
            _ => {}
        }
        // The revision the refusal or failure is about: the source as the resolve read it,
        // else read now with the service's own identity even when the policy blocks the
        // reference: `--no-cross-namespace-refs` is kustomize-controller's rule for what a
        // Kustomization may apply from, not for what the service may read to record. With the
        // revision recorded, the index does not find the same refusal due again at the next
        // resync.
        let source = match source {
            Some(source) => source.status.artifact,
            None => match target {
                Some(t) => {
                    let (kind, ns, n) = &t.upstream;
                    objects::read_source_within(&c.client, *kind, ns, n, c.call_timeout).await
                }
                None => objects::get_source_within(&c.client, ks, true, c.call_timeout).await,
            }
            .ok()
            .and_then(|s| s.status.artifact),
        };
        let refused = error.is_bad_input();
        let state = if refused {
            RevisionState::Refused
        } else {
            RevisionState::Failed
        };
        let revision = source.as_ref().map(|a| a.revision.clone());
        let record = RevisionRecord::new(
            revision.unwrap_or_default(),
            trigger,
            started_at,
            state,
            mode,
            ks.metadata.generation,
        )
        .with_digest(source.and_then(|a| a.digest))
        .with_error(StepError::new("resolve", error.to_string()));
        let outcome = if refused {
            GateOutcome::Done(RevisionState::Refused)
        } else {
            GateOutcome::Failed {
                message: error.to_string(),
            }
        };
        self.report_not_published(target, &record).await;
        self.finish(ks, record, outcome).await
    }

    /// Writes the final record, counts it, and publishes its event; returns `outcome`.
    async fn finish(
        &self,
        ks: &Kustomization,
        record: RevisionRecord,
        outcome: GateOutcome,
    ) -> GateOutcome {
        self.finish_with(ks, record, outcome, true).await
    }

    /// [`Gate::finish`], publishing the event only when `publish`.
    async fn finish_with(
        &self,
        ks: &Kustomization,
        mut record: RevisionRecord,
        outcome: GateOutcome,
        publish: bool,
    ) -> GateOutcome {
        let c = &self.config;
        let namespace = ks.metadata.namespace.clone().unwrap_or_default();
        let name = ks.metadata.name.clone().unwrap_or_default();
        record.finished_at = Some(now());
        // The same failure again (same revision, generation, error and StatefulSets) is one
        // more attempt, not news: counted in memory (the leader's `/status` shows it), written
        // with the next record that is news, and no Event. Each attempt cost a ConfigMap
        // write and an Event with a thousand sources failing.
        let repeat = self
            .previous(&namespace, &name, &record)
            .is_some_and(|previous| crate::records::results::is_same_failure(&record, &previous));
        if repeat {
            self.note(&namespace, &name, &record);
        } else {
            self.save(&namespace, &name, &record).await;
        }
        self.step.follow_volumes(
            &Key::kustomization(&namespace, &name),
            &c.results,
            &record,
            crate::records::events::EventTarget::of(ks),
        );
        if publish {
            c.metrics
                .revision(crate::model::Kind::KUSTOMIZATION, record.state.as_str());
        }
        if publish
            && !repeat
            && let Some(event) = revision_event(&record)
        {
            c.events.publish(ks, &event).await;
        }
        // A failure is logged once, by the worker, with its attempt and its retry.
        if record.state == RevisionState::Failed {
            tracing::debug!(kustomization = %ks_name(&namespace, &name), revision = %record.revision,
                state = record.state.as_str(), "revision finished");
        } else {
            tracing::info!(kustomization = %ks_name(&namespace, &name), revision = %record.revision,
                state = record.state.as_str(), "revision finished");
        }
        outcome
    }

    /// A `running` record at the start of a run was left by a process that stopped mid-run
    /// (only one run per Kustomization at a time): it is closed as `failed`, so the history
    /// never shows two revisions running, and this run handles the revision again.
    async fn close_interrupted(&self, namespace: &str, name: &str) {
        let Some(mut stale) = self.config.results.last(namespace, name) else {
            return;
        };
        if stale.state != RevisionState::Running {
            return;
        }
        stale.state = RevisionState::Failed;
        stale.finished_at = Some(now());
        stale.error = Some(StepError::new(
            "interrupted",
            "the service stopped while handling this revision; it is handled again",
        ));
        self.save(namespace, name, &stale).await;
    }

    /// The newest record before this attempt's own (`running`, when it was noted).
    fn previous(
        &self,
        namespace: &str,
        name: &str,
        record: &RevisionRecord,
    ) -> Option<RevisionRecord> {
        let results = &self.config.results;
        let last = results.last(namespace, name)?;
        if last.revision == record.revision && last.started_at == record.started_at {
            return results.history(namespace, name).into_iter().nth(1);
        }
        Some(last)
    }

    /// Keeps `record` in memory only ([`Results::note`]): written with the next record saved.
    fn note(&self, namespace: &str, name: &str, record: &RevisionRecord) {
        self.config.results.note(namespace, name, record.clone());
    }

    async fn save(&self, namespace: &str, name: &str, record: &RevisionRecord) {
        if let Err(e) = self
            .config
            .results
            .put(namespace, name, record.clone())
            .await
        {
            // The record stays in memory (and on `/status`); the next write retries it.
            tracing::warn!(kustomization = %ks_name(namespace, name), revision = %record.revision,
                error = %e, "could not persist the revision record");
        }
    }
}
