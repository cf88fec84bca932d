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

pub mod entry;
pub mod handoff;
pub mod modes;
pub mod observe;
pub mod publish;
pub mod recheck;
pub mod state;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::Store;

use crate::cluster::tenant::{self, TenantCluster};
use crate::commands;
use crate::converge::{self, ConvergeError};
use crate::flux::objects::{self, Kustomization, ObjectsError};
use crate::flux::render::RenderedStatefulSet;
use crate::flux::render::resolve::{ResolveError, Resolved, Resolver};
use crate::journal::SecretJournal;
use crate::journal::watched::WatchedJournal;
pub use crate::model::GateOutcome;
use crate::model::HandoffAction;
use crate::model::Key;
use crate::model::{
    FluxOutcome, GateMode, RevisionRecord, RevisionState, StatefulSetEntry, StatefulSetOutcome,
    StepError, Trigger,
};
use crate::records::events::{
    EventSink, REASON_CONVERGED, REASON_FAILED, REASON_REFUSED, RevisionEvent, Severity,
};
use crate::records::metrics::Metrics;
use crate::records::results::Results;
use crate::storage::host::ArtifactHost;
use observe::{Observer, ObserverConfig};
use state::Gating;

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
    /// Asked by every converge right before its claim patches and its orphan delete: the
    /// service's Lease (`None`: nothing fences, e.g. a single replica without election).
    pub fence: Option<crate::converge::fence::SharedFence>,
}

/// One revision at a time of one Kustomization. Cheap to clone.
#[derive(Clone)]
pub struct Gate {
    config: std::sync::Arc<GateConfig>,
    /// The open gates: a run hands off and registers here; the watches close them.
    observer: Observer,
    /// The service's StorageClass cache; `None` lists them on every converge.
    storage_classes: Option<Store<StorageClass>>,
    statefulsets: Option<crate::cluster::WatchedStatefulSets>,
    /// The server's "forbidden in place" answers, shared by every run (one dry run fewer per
    /// re-create once the server has said it).
    in_place: converge::prove::InPlaceMemory,
    /// The service's watch of its intents; `None` reads each converge's intent from the server.
    intents: Option<crate::journal::watched::IntentCache>,
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

fn ks_name(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Gate {
    pub fn new(config: GateConfig) -> Self {
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
            storage_classes: None,
            statefulsets: None,
            in_place: converge::prove::InPlaceMemory::default(),
            intents: None,
            artifact_host: None,
            no_artifact_host: None,
        }
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

    /// Converges read StorageClasses from `store` (the service's reflector) instead of
    /// listing them each time: one request fewer per converge, and with many Kustomizations
    /// the cluster-wide list is not repeated per revision.
    /// Kept out of [`GateConfig`] so that existing literal configs stay valid.
    pub fn with_storage_classes(mut self, store: Store<StorageClass>) -> Self {
        self.storage_classes = Some(store);
        self
    }

    /// The service's watch of Flux's StatefulSets: converges decide on its copy (confirmed
    /// by the proof's answer) and see their orphan delete complete in it
    /// (`cluster::WatchedStatefulSets`).
    pub fn with_statefulsets(mut self, watched: crate::cluster::WatchedStatefulSets) -> Self {
        self.statefulsets = Some(watched);
        self
    }

    /// The service's watch of its intents (in `--namespace`): a converge's load of its intent
    /// is answered from it where it can be (`journal::watched`).
    pub fn with_intents(mut self, intents: crate::journal::watched::IntentCache) -> Self {
        self.intents = Some(intents);
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
            let gating = Gating::of(&ks, self.config.default_gate);
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
                .pass(namespace, name, handler, trigger, target.as_ref())
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
    ) -> Pass {
        let mode = handler.mode();
        let c = &self.config;
        let key = ks_name(namespace, name);
        self.close_interrupted(namespace, name).await;
        let started_at = now();
        let t = Instant::now();
        // Artifact mode renders the upstream's artifact: the ExternalArtifact holds only what
        // was converged already.
        let resolved = c
            .resolver
            .resolve_from_within(namespace, name, target.map(|t| &t.upstream), c.call_timeout)
            .await;
        c.metrics.step("resolve", t.elapsed().as_secs_f64());
        let resolved = match resolved {
            Ok(r) => r,
            Err(e) => {
                return Pass::Finished(
                    self.unresolved(
                        namespace,
                        name,
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
            .resolved(self, &Key::new(namespace, name), &resolved.revision)
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
                self.save(namespace, name, &record).await;
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
        let entries = self.converge_all(&resolved).await;
        c.metrics.step("converge", t.elapsed().as_secs_f64());
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
        c.metrics.step("handoff", t.elapsed().as_secs_f64());
        if let Err(message) = handed {
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
            let key = Key::new(namespace, name);
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
        namespace: &str,
        name: &str,
        attempt: Attempt<'_>,
        started_at: String,
        error: ResolveError,
    ) -> GateOutcome {
        let Attempt {
            mode,
            trigger,
            target,
        } = attempt;
        let c = &self.config;
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
                        &publish::Update::NotPublished {
                            reason: publish::REASON_SOURCE_NOT_READY,
                            message: error.to_string(),
                        },
                    )
                    .await;
                }
                return GateOutcome::Deferred;
            }
            _ => {}
        }
        let Ok(ks) =
            objects::get_kustomization_within(&c.client, namespace, name, c.call_timeout).await
        else {
            return GateOutcome::Failed {
                message: error.to_string(),
            };
        };
        // The revision the refusal or failure is about, read with the service's own identity
        // even when the policy blocks the reference: `--no-cross-namespace-refs` is
        // kustomize-controller's rule for what a Kustomization may apply from, not for what
        // the service may read to record. With the revision recorded, the index does not
        // find the same refusal due again at the next resync.
        let source = match target {
            Some(t) => {
                let (kind, ns, n) = &t.upstream;
                objects::read_source_within(&c.client, *kind, ns, n, c.call_timeout).await
            }
            None => objects::get_source_within(&c.client, &ks, true, c.call_timeout).await,
        }
        .ok()
        .and_then(|s| s.status.artifact);
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
        self.finish(&ks, record, outcome).await
    }

    /// Converges the StatefulSets of the render, in namespace/name order, all under the
    /// Kustomization's tenant identity and all or nothing (`converge::converge_all`): every
    /// one is decided, proven and pre-flighted before any is written, so a refusal (or a
    /// failure) of one leaves the others untouched (`held`) instead of applying half a
    /// revision that is then never handed off.
    async fn converge_all(&self, resolved: &Resolved) -> Vec<StatefulSetEntry> {
        let c = &self.config;
        let ks = &resolved.kustomization;
        let ks_namespace = ks.metadata.namespace.clone().unwrap_or_default();
        // The same question a resume on start asks of an intent's Kustomization.
        let user = tenant::kustomization_user(ks, c.default_service_account.as_deref());
        let tenant_client = match &user {
            None => Ok(c.client.clone()),
            Some(user) => tenant::impersonating(&c.client, user),
        };
        let mut sorted: Vec<&RenderedStatefulSet> = resolved.rendered.statefulsets.iter().collect();
        sorted.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let tenant_client = match tenant_client {
            Ok(client) => client,
            Err(e) => {
                return sorted
                    .iter()
                    .map(|s| entry::failed(&s.namespace, &s.name, "impersonate", e.to_string()))
                    .collect();
            }
        };
        // A StatefulSet of the render that does not decode fails the revision before any
        // write: the others are held, as for any failure before writing.
        let mut desired = Vec::with_capacity(sorted.len());
        for rendered in &sorted {
            let (ns, name) = (rendered.namespace.as_str(), rendered.name.as_str());
            match serde_json::from_value::<StatefulSet>(rendered.object.clone()) {
                Ok(mut d) => {
                    d.metadata.namespace = Some(ns.to_string());
                    desired.push(d);
                }
                Err(e) => {
                    let why =
                        format!("not written: StatefulSet {ns}/{name} of the same revision failed");
                    return sorted
                        .iter()
                        .map(|s| {
                            if std::ptr::eq(*s, *rendered) {
                                entry::failed(
                                    ns,
                                    name,
                                    "render",
                                    format!("StatefulSet {ns}/{name}: {e}"),
                                )
                            } else {
                                entry::held(&s.namespace, &s.name, why.clone())
                            }
                        })
                        .collect();
                }
            }
        }
        let mut cluster = TenantCluster::new(tenant_client, c.client.clone(), c.call_timeout);
        if let Some(store) = &self.storage_classes {
            cluster = cluster.with_storage_classes(store.clone());
        }
        if let Some(watched) = &self.statefulsets {
            cluster = cluster.with_statefulsets(watched.clone());
        }
        // Recorded with the shard's label, so only this shard resumes it after a crash.
        let journal = WatchedJournal::new(
            SecretJournal::new(c.client.clone(), c.namespace.clone(), c.call_timeout)
                .scoped(c.results.shard()),
            self.intents.clone(),
        );
        let options = converge::Options {
            fence: c.fence.clone(),
            revision: Some(resolved.revision.clone()),
            act_as: user.clone(),
            in_place: self.in_place.clone(),
            kustomization: Some(format!(
                "{ks_namespace}/{}",
                ks.metadata.name.as_deref().unwrap_or_default()
            )),
            ..converge::Options::default()
        };
        let results = converge::converge_all(&cluster, &journal, &desired, &options).await;
        let mut entries = Vec::with_capacity(results.len());
        for (d, result) in desired.iter().zip(results) {
            entries.push(self.entry_of(&cluster, d, result, user.as_deref()).await);
        }
        entries
    }

    /// The record entry of one StatefulSet's converge result, counted in the metrics; a
    /// failure's message names the missing permission under a tenant.
    async fn entry_of(
        &self,
        cluster: &TenantCluster,
        desired: &StatefulSet,
        result: Result<converge::Report, ConvergeError>,
        user: Option<&str>,
    ) -> StatefulSetEntry {
        let c = &self.config;
        let ns = desired.metadata.namespace.as_deref().unwrap_or_default();
        let name = desired.metadata.name.as_deref().unwrap_or_default();
        match result {
            Ok(report) => {
                let e = entry::from_report(&report);
                c.metrics.claims_grown.inc_by(e.claims.len() as u64);
                if report.recreated {
                    c.metrics.statefulsets_recreated.inc();
                }
                if let Some(r) = &e.refusal {
                    c.metrics.refusal(r.code.as_str());
                }
                for s in &report.steps {
                    c.metrics.step(s.step.as_str(), s.millis / 1000.0);
                }
                tracing::info!(statefulset = %name, namespace = %ns, outcome = ?e.outcome, "converged");
                e
            }
            Err(error) => {
                let message = match (&error, user) {
                    (ConvergeError::Call { cause, .. }, Some(user))
                        if cause.code() == Some(403) =>
                    {
                        tenant::forbidden_message(user, cause)
                    }
                    (
                        ConvergeError::Access {
                            step,
                            code: 403,
                            message,
                            ..
                        },
                        Some(user),
                    ) => {
                        let call = if *step == converge::Step::Preflight {
                            "dry-run create of"
                        } else {
                            "server-side apply dry run of"
                        };
                        let cause = crate::cluster::CallError::api(
                            call,
                            format!("StatefulSet {ns}/{name}"),
                            403,
                            "Forbidden",
                            message,
                        );
                        tenant::forbidden_message(user, &cause)
                    }
                    _ => error.to_string(),
                };
                tracing::warn!(statefulset = %name, namespace = %ns, error = %message, "converge failed");
                let hint = self.hint(cluster, desired).await;
                entry::from_error(ns, name, &error, message, hint)
            }
        }
    }

    /// What an operator runs by hand to finish: the commands that render the revision again
    /// and plan (or, for a StatefulSet left deleted, converge) it, naming the Kustomization
    /// from the owner labels the render put on `desired`. Never the rendered object itself:
    /// it may carry values substituted from Secrets ([`commands::manual_hint`]). `None` when
    /// the cluster cannot even be read or the object names no Kustomization.
    async fn hint(&self, cluster: &TenantCluster, desired: &StatefulSet) -> Option<String> {
        use crate::cluster::Cluster as _;
        let ns = desired.metadata.namespace.clone().unwrap_or_default();
        let name = desired.metadata.name.clone().unwrap_or_default();
        let labels = desired.metadata.labels.as_ref()?;
        let ks_namespace = labels.get(objects::OWNER_NAMESPACE_LABEL)?;
        let ks_name = labels.get(objects::OWNER_NAME_LABEL)?;
        let live = cluster.get_statefulset(&ns, &name).await.ok()?;
        Some(commands::manual_hint(&commands::ManualHint {
            namespace: ks_namespace,
            name: ks_name,
            journal_namespace: &self.config.namespace,
            absent: live.is_none(),
        }))
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
        self.save(&namespace, &name, &record).await;
        if publish {
            c.metrics.revision(record.state.as_str());
            if let Some(event) = revision_event(&record) {
                c.events.publish(ks, &event).await;
            }
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

/// The event a finished record gives: converged, refused and failed revisions (a superseded
/// one is followed by the run of its successor, which gives its own).
pub fn revision_event(record: &RevisionRecord) -> Option<RevisionEvent> {
    let details = entry::describe(&record.statefulsets);
    let error = record
        .error
        .as_ref()
        .map(|e| format!("{}: {}", e.step, e.message));
    let join = |head: String| {
        [
            Some(head),
            (!details.is_empty()).then(|| details.clone()),
            error.clone(),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n")
    };
    let (severity, reason, message) = match record.state {
        RevisionState::Converged => {
            let flux = match &record.flux {
                Some(f) => match f.outcome {
                    FluxOutcome::Applied => "Flux applied it".to_string(),
                    FluxOutcome::Failed => format!(
                        "Flux failed to apply it: {}",
                        f.message.as_deref().unwrap_or_default()
                    ),
                    FluxOutcome::Timeout => "Flux has not applied it yet (timed out)".into(),
                    FluxOutcome::Pending => "Flux's answer is pending".into(),
                    FluxOutcome::Raced => format!(
                        "Flux attempted {} instead",
                        f.attempted_revision
                            .as_deref()
                            .unwrap_or("another revision")
                    ),
                },
                None => "handed off".into(),
            };
            let mode = record.gate.map(GateMode::as_str).unwrap_or("off");
            let waiting = record
                .handoff
                .as_ref()
                .is_some_and(|h| h.action == HandoffAction::Waiting);
            let head = if waiting {
                // Artifact mode, other consumers of the ExternalArtifact still to converge it:
                // the warnings name them.
                let whom: Vec<&str> = record
                    .warnings
                    .iter()
                    .filter(|w| w.starts_with(publish::WAITING_PREFIX))
                    .map(String::as_str)
                    .collect();
                format!(
                    "revision {} converged, not published yet: {}",
                    record.revision,
                    whom.join("; ")
                )
            } else {
                format!(
                    "revision {} converged, handed off ({mode}): {flux}",
                    record.revision
                )
            };
            (Severity::Info, REASON_CONVERGED, join(head))
        }
        RevisionState::Refused => (
            Severity::Error,
            REASON_REFUSED,
            join(format!(
                "revision {} refused: not handed off",
                record.revision
            )),
        ),
        RevisionState::Failed => (
            Severity::Error,
            REASON_FAILED,
            join(format!("revision {} failed: will retry", record.revision)),
        ),
        RevisionState::Running | RevisionState::Superseded => return None,
    };
    Some(RevisionEvent {
        severity,
        reason: reason.to_string(),
        message,
        revision: record.revision.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::StatefulSetEntry;
    use crate::model::{FluxResult, Handoff};

    fn record(state: RevisionState, flux: Option<FluxOutcome>) -> RevisionRecord {
        RevisionRecord {
            revision: "main@sha1:2".into(),
            digest: None,
            trigger: Trigger::Webhook,
            started_at: "t".into(),
            finished_at: None,
            state,
            statefulsets: vec![StatefulSetEntry {
                namespace: "apps".into(),
                name: "web".into(),
                outcome: StatefulSetOutcome::Converged,
                old_uid: Some("u1".into()),
                new_uid: Some("u2".into()),
                templates: Vec::new(),
                changes: Vec::new(),
                claims: Vec::new(),
                deferred: Vec::new(),
                refusal: None,
                error: None,
            }],
            handoff: None,
            flux: flux.map(|outcome| FluxResult {
                outcome,
                applied_revision: None,
                message: Some("boom".into()),
                attempted_revision: None,
            }),
            warnings: Vec::new(),
            error: None,
            generation: None,
            gate: Some(GateMode::Reconcile),
            attempts: 1,
        }
    }

    #[test]
    fn revision_event_by_table() {
        let sts = "StatefulSet apps/web: recreated without restarting pods";
        for (state, flux, expected) in [
            (
                RevisionState::Converged,
                Some(FluxOutcome::Applied),
                Some((
                    Severity::Info,
                    REASON_CONVERGED,
                    format!(
                        "revision main@sha1:2 converged, handed off (reconcile): Flux applied it\n{sts}"
                    ),
                )),
            ),
            (
                RevisionState::Converged,
                Some(FluxOutcome::Failed),
                Some((
                    Severity::Info,
                    REASON_CONVERGED,
                    format!(
                        "revision main@sha1:2 converged, handed off (reconcile): Flux failed to apply it: boom\n{sts}"
                    ),
                )),
            ),
            (
                RevisionState::Refused,
                None,
                Some((
                    Severity::Error,
                    REASON_REFUSED,
                    format!("revision main@sha1:2 refused: not handed off\n{sts}"),
                )),
            ),
            (
                RevisionState::Failed,
                None,
                Some((
                    Severity::Error,
                    REASON_FAILED,
                    format!("revision main@sha1:2 failed: will retry\n{sts}"),
                )),
            ),
            (RevisionState::Superseded, None, None),
            (RevisionState::Running, None, None),
        ] {
            let got =
                revision_event(&record(state, flux)).map(|e| (e.severity, e.reason, e.message));
            let expected = expected.map(|(s, r, m)| (s, r.to_string(), m));
            assert_eq!(got, expected, "{state:?}");
        }
    }

    #[test]
    fn an_artifact_revision_waiting_for_other_consumers_says_so() {
        let mut r = record(RevisionState::Converged, None);
        r.gate = Some(GateMode::Artifact);
        r.handoff = Some(Handoff {
            mode: GateMode::Artifact,
            at: "t".into(),
            action: HandoffAction::Waiting,
            requested_at: None,
            resuspended_at: None,
            attempts: Vec::new(),
            retry_at: None,
        });
        r.warnings = vec![publish::waiting_warning("team", "db", "main@sha1:2")];
        let e = revision_event(&r).unwrap();
        assert_eq!(
            e.message,
            "revision main@sha1:2 converged, not published yet: waiting for team/db to converge main@sha1:2 before publishing\nStatefulSet apps/web: recreated without restarting pods"
        );
        r.handoff.as_mut().unwrap().action = HandoffAction::Published;
        r.flux = Some(FluxResult {
            outcome: FluxOutcome::Applied,
            applied_revision: None,
            message: None,
            attempted_revision: None,
        });
        assert_eq!(
            revision_event(&r).unwrap().message,
            "revision main@sha1:2 converged, handed off (artifact): Flux applied it\nStatefulSet apps/web: recreated without restarting pods"
        );
    }
}
