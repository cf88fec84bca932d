//! One run of an Argo CD Application (`argoproj.io/v1alpha1`) whose sync Argo CD stopped on the
//! StatefulSet immutable-field error (docs/argocd.md). It reads the Application, and:
//!
//! - when a hand-back is open (the last record wrote a sync operation carrying a nonce Argo CD
//!   has not finished), records Argo CD's answer once the finished `operationState` carries the
//!   nonce (`applied` / `failed`), or `timeout` past `--handoff-timeout`;
//! - else asks `argocd::act::when_to_act`: anything but "converge" writes nothing (but for
//!   "refresh": the `argocd.argoproj.io/refresh: normal` annotation, once per pair of revisions)
//!   and is kept, with why, for `/status`;
//! - else reads the AppProject and `argocd-cm` (the identity Argo CD would sync with,
//!   `argocd::project::identity`), the desired StatefulSets from Argo CD's API server
//!   (`argocd::api`, `argocd::managed`: refused before any write when oversized, not JSON or
//!   outside the project's destinations), converges them through the shared converge step with
//!   Argo CD's field manager and apply mode (`argocd::recreate`), and hands back: `operation`
//!   written (an update carrying the resourceVersion it read, only while `.operation` is empty),
//!   as Argo CD's own API writes a sync.
//!
//! A hand-back whose sync failed again on the same error is not converged again until the
//! Application's `status.sync.revision` or its spec changes (the record keeps both: its
//! `revision` and its `digest`, the spec's); the CRD has no status subresource, so the
//! generation is no signal. A refused Application is refused once per revision and spec.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;

use crate::argocd::act::{self, Act, Failure, Fingerprint, IMMUTABLE_ERROR, Memory};
use crate::argocd::api::{ApiError, ArgoCdApi};
use crate::argocd::application::{Application, REFRESH_ANNOTATION, Revision};
use crate::argocd::managed::{self, TargetStatefulSet};
use crate::argocd::operation::{self, HandBack, HandBackRefused};
use crate::argocd::project::{self, AppProject, Identity, Impersonation};
use crate::argocd::recreate;
use crate::cluster::{CallError, FIELD_MANAGER, WriteAs, WriteOperation, WritesAs, with_deadline};
use crate::flux::render::RenderedStatefulSet;
use crate::gated::{Desired, Gated};
use crate::model::{
    FluxOutcome, FluxResult, GateMode, GateOutcome, Handoff, HandoffAction, Key, Kind,
    RevisionRecord, RevisionState, StepError, Trigger,
};
use crate::records::answer_event::answer_event;
use crate::records::entry;
use crate::records::events::EventSink;
use crate::records::results::Results;
use crate::records::revision_event::revision_event_answered_by;
use crate::service::step::ConvergeStep;

/// Argo CD's settings ConfigMap, in its own namespace: whether sync impersonation is on.
pub const ARGOCD_CM: &str = "argocd-cm";

/// The warning a record carries when the sync it handed back failed again on the same error:
/// what keeps the Application from being converged again until its revision or spec changes.
pub const FAILED_AGAIN: &str = "Argo CD's sync failed again on the StatefulSet immutable-field error: not converged again until the Application's status.sync.revision or its spec changes";

/// How often the hand-back's write is tried again when the Application changed since it was
/// read (the application-controller writes its status often).
const HANDBACK_CONFLICTS: usize = 5;

/// What the Application runs need; built by the service beside the other kinds'.
pub struct AppConfig {
    /// The service's own (fenced) identity: reads, the refresh, the hand-back and the records.
    pub client: kube::Client,
    /// The Applications' records (their own ConfigMaps: `Results::of_kind`).
    pub results: Results,
    pub events: EventSink,
    pub call_timeout: Duration,
    /// How long a hand-back waits for Argo CD's answer before it is recorded as timed out
    /// (`--handoff-timeout`).
    pub handoff_timeout: Duration,
    /// `--default-service-account`: the identity when impersonation is off in `argocd-cm`.
    pub default_service_account: Option<String>,
    /// Argo CD's own namespace (the first of `--argocd-namespaces`): its AppProjects and
    /// `argocd-cm`.
    pub argocd_namespace: String,
    /// Argo CD's API server (`--argocd-server`, `--argocd-token-file`, `--argocd-ca-file`).
    pub api: ArgoCdApi,
    /// The most bytes of a managed-resources answer read (`--max-unpacked-size`).
    pub max_body: u64,
}

/// The Application runs. Cheap to clone.
#[derive(Clone)]
pub struct AppGate {
    config: Arc<AppConfig>,
    /// The converge step (and its caches, fence and journal), shared with the other kinds.
    step: ConvergeStep,
    /// Why an Application is not acted on now (`/status`), by key; nothing is written for it.
    waiting: Arc<Mutex<HashMap<Key, String>>>,
    /// Moves whenever `waiting` changes (the dashboard's pages are kept per version).
    waiting_changes: Arc<AtomicU64>,
    /// The refresh asked for each Application: the failed and the compared revision then
    /// (`act::Memory::refresh_asked`). Kept by the leader: a new one asks once more.
    refreshed: Arc<Mutex<HashMap<Key, (Revision, Revision)>>>,
    /// Applications whose AppProject changed since their last run: a refusal of the same
    /// revision and spec is looked at again once.
    recheck: Arc<Mutex<HashSet<Key>>>,
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a run ended on, besides its outcome: kept for `/status` when nothing was written.
enum Run {
    Outcome(GateOutcome),
    Waiting(String),
}

/// How the hand-back went.
enum HandedBack {
    /// The operation is written.
    Written,
    /// Someone else's operation is set: nothing written, for this reason.
    Preempted(String),
}

impl AppGate {
    pub fn new(config: AppConfig, step: ConvergeStep) -> Self {
        AppGate {
            config: Arc::new(config),
            step,
            waiting: Arc::default(),
            waiting_changes: Arc::default(),
            refreshed: Arc::default(),
            recheck: Arc::default(),
        }
    }

    pub fn results(&self) -> &Results {
        &self.config.results
    }

    /// Why `key` is not acted on now, if it is waiting.
    pub fn waiting(&self, key: &Key) -> Option<String> {
        lock(&self.waiting).get(key).cloned()
    }

    /// A number that moves whenever a waiting reason changes.
    pub fn waiting_version(&self) -> u64 {
        self.waiting_changes.load(Ordering::SeqCst)
    }

    fn set_waiting(&self, key: &Key, why: Option<String>) {
        let mut waiting = lock(&self.waiting);
        let changed = match why {
            Some(why) => waiting.insert(key.clone(), why.clone()).as_ref() != Some(&why),
            None => waiting.remove(key).is_some(),
        };
        if changed {
            self.waiting_changes.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `key`'s AppProject changed: its next run looks at a refusal of the same revision and
    /// spec again.
    pub fn recheck(&self, key: &Key) {
        lock(&self.recheck).insert(key.clone());
    }

    /// Forgets an Application that is gone or no longer opted in.
    pub fn forget(&self, key: &Key) {
        self.set_waiting(key, None);
        lock(&self.refreshed).remove(key);
        lock(&self.recheck).remove(key);
    }

    /// Handles the Application `namespace/name` as it is now.
    pub async fn run(&self, namespace: &str, name: &str, trigger: Trigger) -> GateOutcome {
        let key = Key::new(Kind::APPLICATION, namespace, name);
        match self.run_once(&key, trigger).await {
            Run::Outcome(outcome) => {
                self.set_waiting(&key, None);
                outcome
            }
            Run::Waiting(why) => {
                if self.waiting(&key).as_deref() != Some(why.as_str()) {
                    tracing::info!(application = %key, reason = %why, "not acting now");
                }
                self.set_waiting(&key, Some(why));
                GateOutcome::NotHandled
            }
        }
    }

    async fn run_once(&self, key: &Key, trigger: Trigger) -> Run {
        let c = &self.config;
        let api: Api<Application> = Api::namespaced(c.client.clone(), &key.namespace);
        let shown = format!("Application {key}");
        let app = match with_deadline(c.call_timeout, "get", &shown, api.get_opt(&key.name)).await {
            Ok(Some(app)) => app,
            Ok(None) => return Run::Outcome(GateOutcome::NotHandled),
            Err(e) => return call_failed(e),
        };
        let gating = act::gating(&app);
        match gating.mode() {
            Ok(GateMode::Reconcile) => {}
            Ok(_) => return Run::Outcome(GateOutcome::NotHandled),
            Err(message) => {
                tracing::warn!(application = %key, %message, "not handled");
                return Run::Outcome(GateOutcome::NotHandled);
            }
        }
        let last = c.results.last(&key.namespace, &key.name);

        // An open hand-back: Argo CD's answer is what this run records (a hold does not stop
        // the answer from being read: nothing is written to the cluster for it).
        if let Some(last) = last.as_ref().filter(|l| open_nonce(l).is_some()) {
            return Run::Outcome(self.observe(&app, last.clone()).await);
        }
        let memory = Memory {
            failed_handback: last
                .as_ref()
                .filter(|l| failed_again(l) && same_attempt(l, &app))
                .map(|_| Fingerprint::of(&app)),
            refresh_asked: lock(&self.refreshed).get(key).cloned(),
            applied_handback: last
                .as_ref()
                .filter(|l| answered_applied(l) && same_attempt(l, &app))
                .map(|_| Fingerprint::of(&app)),
        };
        let failure = match act::when_to_act(&app, &gating, &memory) {
            Act::Wait(why) => return Run::Waiting(why.to_string()),
            Act::Refresh { failed, compared } => {
                return match self.refresh(key).await {
                    Ok(()) => {
                        lock(&self.refreshed)
                            .insert(key.clone(), (failed.clone(), compared.clone()));
                        Run::Waiting(format!(
                            "the sync failed at revision {failed}, Argo CD compares {compared}: asked it to refresh ({REFRESH_ANNOTATION}: normal)"
                        ))
                    }
                    Err(e) => call_failed(e),
                };
            }
            Act::Converge(failure) => failure,
        };
        // A refused Application is not converged again until its revision or spec (or its
        // AppProject) changes: the same input is refused the same way.
        let project_changed = lock(&self.recheck).remove(key);
        if !project_changed
            && last
                .as_ref()
                .is_some_and(|l| l.state == RevisionState::Refused && same_attempt(l, &app))
        {
            return Run::Outcome(GateOutcome::Done(RevisionState::Refused));
        }
        Run::Outcome(self.converge(&app, &failure, trigger).await)
    }

    /// Asks Argo CD to compare again (`argocd.argoproj.io/refresh: normal`, which it removes
    /// once done).
    async fn refresh(&self, key: &Key) -> Result<(), CallError> {
        let c = &self.config;
        let api: Api<Application> = Api::namespaced(c.client.clone(), &key.namespace);
        let patch =
            serde_json::json!({"metadata": {"annotations": {REFRESH_ANNOTATION: "normal"}}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        with_deadline(
            c.call_timeout,
            "merge patch of argocd.argoproj.io/refresh of",
            &format!("Application {key}"),
            api.patch(&key.name, &params, &Patch::Merge(&patch)),
        )
        .await
        .map(|_| ())
    }

    /// Records Argo CD's answer to the open hand-back of `last`, or its timeout.
    async fn observe(&self, app: &Application, mut last: RevisionRecord) -> GateOutcome {
        let Some(nonce) = open_nonce(&last) else {
            return GateOutcome::Done(last.state);
        };
        let flux = match operation::handed_back(app, &nonce) {
            Some(HandBack::Applied { revision }) => FluxResult::applied(Some(revision.to_string())),
            Some(HandBack::Failed {
                revision,
                phase,
                message,
                immutable,
            }) => {
                if immutable {
                    last.warnings.push(FAILED_AGAIN.to_string());
                }
                FluxResult::failed(
                    format!("{phase}: {message}"),
                    Some(revision.to_string()).filter(|r| !r.is_empty()),
                )
            }
            None => match FluxResult::unanswered(
                last.handoff.as_ref(),
                self.config.handoff_timeout,
                jiff::Timestamp::now(),
                "Argo CD did not finish the sync handed back",
            ) {
                Some(timeout) => timeout,
                None => return GateOutcome::Done(RevisionState::Converged),
            },
        };
        tracing::info!(application = %app.key(), outcome = ?flux.outcome, "hand-back answered");
        last.flux = Some(flux);
        // The same revision, answered: its record is updated (not counted again) and the answer
        // gets its own Event (`HandoffApplied`, `HandoffFailed`, `HandoffTimeout`), as a
        // HelmRelease's; the `Converged` one was published at the hand-back.
        self.save(&app.key(), &last).await;
        if let Some(event) = answer_event(Kind::APPLICATION, &last) {
            self.config.events.publish(app, &event).await;
        }
        GateOutcome::Done(last.state)
    }

    /// Reads what Argo CD applies for the failed revision, converges it as the identity Argo CD
    /// syncs with, then hands back.
    async fn converge(
        &self,
        app: &Application,
        failure: &Failure,
        trigger: Trigger,
    ) -> GateOutcome {
        let c = &self.config;
        let key = app.key();
        let revision = failure.revision.to_string();
        let mut out = RevisionRecord::new(
            revision.clone(),
            trigger,
            now(),
            RevisionState::Running,
            GateMode::Reconcile,
            None,
        )
        .with_digest(Some(app.spec_digest()));
        tracing::info!(application = %key, revision = %revision, shape = %failure.shape,
            "Argo CD stopped on the StatefulSet immutable-field error: converging");

        // The project: where the StatefulSets may go, and as whom Argo CD syncs.
        let project = match self.project(app).await {
            Ok(Some(project)) => project,
            Ok(None) => {
                out.state = RevisionState::Refused;
                out.error = Some(StepError::new(
                    "project",
                    format!(
                        "AppProject {}/{} does not exist: Argo CD would not sync the Application either",
                        c.argocd_namespace,
                        app.project()
                    ),
                ));
                return self.finish(app, &mut out).await;
            }
            Err(e) => return self.failed(app, &mut out, "project", e.to_string()).await,
        };
        let impersonation = match self.impersonation().await {
            Ok(i) => i,
            Err(e) => return self.failed(app, &mut out, "project", e.to_string()).await,
        };
        let identity = match project::identity(
            &project,
            app,
            impersonation,
            c.default_service_account.as_deref(),
        ) {
            Ok(identity) => identity,
            Err(e) => {
                out.state = RevisionState::Refused;
                out.error = Some(StepError::new("identity", e.to_string()));
                return self.finish(app, &mut out).await;
            }
        };

        // What Argo CD applies, from its API server.
        let body = match c
            .api
            .managed_resources(app.namespace(), app.name(), app.project())
            .await
        {
            Ok(body) => body,
            // An answer over the cap is refused (as an oversized one `managed` reads).
            Err(e @ ApiError::TooLarge { .. }) => {
                out.state = RevisionState::Refused;
                out.error = Some(StepError::new("managed-resources", e.to_string()));
                return self.finish(app, &mut out).await;
            }
            Err(e) => {
                tracing::warn!(application = %key, error = %e, reason = e.label(),
                    "reading the managed resources from Argo CD's API server failed");
                return self
                    .failed(app, &mut out, "managed-resources", e.to_string())
                    .await;
            }
        };
        let targets = match managed::statefulsets(&body, c.max_body, app, &project) {
            Ok(targets) => targets,
            Err(e) => {
                out.state = RevisionState::Refused;
                out.error = Some(StepError::new("managed-resources", e.to_string()));
                return self.finish(app, &mut out).await;
            }
        };
        if let Some(missing) = missing(failure, &targets) {
            return self
                .failed(
                    app,
                    &mut out,
                    "managed-resources",
                    format!(
                        "Argo CD's managed resources hold no target for StatefulSet {missing}, on which its sync stopped (its cache may be behind): tried again"
                    ),
                )
                .await;
        }

        // As Argo CD would write them: its field manager, its apply mode, its tracking kept.
        let mut writes = WritesAs::new();
        let rendered: Vec<RenderedStatefulSet> = targets
            .into_iter()
            .map(|t| {
                let r = recreate::recreate(app.sync_options(), &t.object);
                writes.insert((t.namespace.clone(), t.name.clone()), write_as(&r));
                RenderedStatefulSet {
                    namespace: t.namespace,
                    name: t.name,
                    object: r.object,
                }
            })
            .collect();
        self.save(&key, &out).await;
        tracing::info!(application = %key, revision = %revision, statefulsets = rendered.len(),
            identity = identity.source(), "converging Argo CD's targets");
        let entries = self
            .step
            .converge_all_as(
                Desired {
                    owner: &key,
                    revision: &revision,
                    statefulsets: &rendered,
                    user: identity.user(),
                },
                writes,
            )
            .await;
        out.statefulsets = entries;
        out.warnings = entry::deferred_warnings(&out.statefulsets);
        out.warnings.push(identity_note(&identity));
        match RevisionState::of_statefulsets(&out.statefulsets) {
            RevisionState::Refused => {
                out.state = RevisionState::Refused;
                return self.finish(app, &mut out).await;
            }
            RevisionState::Failed => {
                out.state = RevisionState::Failed;
                self.finish(app, &mut out).await;
                return GateOutcome::Failed {
                    message: entry::describe(&out.statefulsets),
                };
            }
            _ => {}
        }
        let nonce = nonce();
        match self.hand_back(&key, &failure.revision, &nonce).await {
            Ok(HandedBack::Written) => {
                let at = now();
                out.handoff = Some(Handoff {
                    mode: GateMode::Reconcile,
                    at,
                    action: HandoffAction::ReconcileRequested,
                    requested_at: Some(nonce),
                    resuspended_at: None,
                    attempts: Vec::new(),
                    retry_at: None,
                });
            }
            Ok(HandedBack::Preempted(why)) => {
                out.warnings.push(format!("not handed back: {why}"));
            }
            Err(e) => {
                out.state = RevisionState::Failed;
                out.error = Some(StepError::new("handoff", e.to_string()));
                self.finish(app, &mut out).await;
                return GateOutcome::Failed {
                    message: e.to_string(),
                };
            }
        }
        out.state = RevisionState::Converged;
        self.finish(app, &mut out).await
    }

    async fn project(&self, app: &Application) -> Result<Option<AppProject>, CallError> {
        let c = &self.config;
        read_project(
            &c.client,
            &c.argocd_namespace,
            app.project(),
            c.call_timeout,
        )
        .await
    }

    async fn impersonation(&self) -> Result<Impersonation, CallError> {
        let c = &self.config;
        read_impersonation(&c.client, &c.argocd_namespace, c.call_timeout).await
    }

    /// Writes the sync operation at `revision` carrying `nonce`, as Argo CD's API does
    /// (`SetAppOperation`): an update of the Application as read, `operation` set and
    /// `status.operationState` cleared, carrying the resourceVersion read (a 409 if it changed
    /// since: read again and tried again), and only while `.operation` is empty.
    async fn hand_back(
        &self,
        key: &Key,
        revision: &Revision,
        nonce: &str,
    ) -> Result<HandedBack, CallError> {
        let c = &self.config;
        let shown = format!("Application {key}");
        let api: Api<DynamicObject> = Api::namespaced_with(
            c.client.clone(),
            &key.namespace,
            &ApiResource::erase::<Application>(&()),
        );
        let mut conflicts = 0;
        loop {
            let raw = with_deadline(c.call_timeout, "get", &shown, api.get(&key.name)).await?;
            let mut object = serde_json::to_value(&raw).map_err(|e| decode_error(&shown, e))?;
            let app: Application =
                serde_json::from_value(object.clone()).map_err(|e| decode_error(&shown, e))?;
            let patch = match operation::hand_back(&app, revision, nonce) {
                Ok(patch) => patch,
                Err(HandBackRefused::OperationInProgress) => {
                    return Ok(HandedBack::Preempted(
                        HandBackRefused::OperationInProgress.to_string(),
                    ));
                }
                Err(e) => return Err(CallError::new("update of", &shown, other(e.to_string()))),
            };
            object["operation"] = patch["operation"].clone();
            if let Some(status) = object.get_mut("status").and_then(|s| s.as_object_mut()) {
                status.remove("operationState");
            }
            let updated: DynamicObject =
                serde_json::from_value(object).map_err(|e| decode_error(&shown, e))?;
            let params = PostParams {
                dry_run: false,
                field_manager: Some(FIELD_MANAGER.to_string()),
            };
            match with_deadline(
                c.call_timeout,
                "update (sync operation) of",
                &shown,
                api.replace(&key.name, &params, &updated),
            )
            .await
            {
                Ok(_) => {
                    tracing::info!(application = %key, revision = %revision, nonce,
                        "handed back: sync operation written");
                    return Ok(HandedBack::Written);
                }
                Err(e) if crate::cluster::is_conflict(&e) && conflicts < HANDBACK_CONFLICTS => {
                    conflicts += 1;
                    tracing::debug!(application = %key, conflicts,
                        "the Application changed since it was read: reading it again");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Records a failure of `step` (retried with the queue's backoff): nothing was written.
    async fn failed(
        &self,
        app: &Application,
        out: &mut RevisionRecord,
        step: &str,
        message: String,
    ) -> GateOutcome {
        out.state = RevisionState::Failed;
        out.error = Some(StepError::new(step, message.clone()));
        self.finish(app, out).await;
        GateOutcome::Failed { message }
    }

    /// Saves `record` as final, counts it and publishes its Event on the Application (its
    /// answer is Argo CD's).
    async fn finish(&self, app: &Application, record: &mut RevisionRecord) -> GateOutcome {
        let c = &self.config;
        self.step
            .finish(&c.results, &c.events, app, record, |r| {
                revision_event_answered_by(r, "Argo CD")
            })
            .await
    }

    async fn save(&self, key: &Key, record: &RevisionRecord) {
        self.step.save(&self.config.results, key, record).await;
    }
}

/// AppProject `name` in Argo CD's namespace; `None` when it does not exist.
pub async fn read_project(
    client: &kube::Client,
    argocd_namespace: &str,
    name: &str,
    call_timeout: Duration,
) -> Result<Option<AppProject>, CallError> {
    let api: Api<AppProject> = Api::namespaced(client.clone(), argocd_namespace);
    with_deadline(
        call_timeout,
        "get",
        &format!("AppProject {argocd_namespace}/{name}"),
        api.get_opt(name),
    )
    .await
}

/// What `argocd-cm` says about sync impersonation (off without it).
pub async fn read_impersonation(
    client: &kube::Client,
    argocd_namespace: &str,
    call_timeout: Duration,
) -> Result<Impersonation, CallError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), argocd_namespace);
    let cm = with_deadline(
        call_timeout,
        "get",
        &format!("ConfigMap {argocd_namespace}/{ARGOCD_CM}"),
        api.get_opt(ARGOCD_CM),
    )
    .await?;
    Ok(Impersonation::from_argocd_cm(
        cm.as_ref().and_then(|cm| cm.data.as_ref()),
    ))
}

/// Why the identity Argo CD would sync an Application with could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("AppProject {namespace}/{name} does not exist")]
    NoProject { namespace: String, name: String },
    /// Its AppProject names no identity for it (the message says why).
    #[error("{0}")]
    Project(String),
}

/// The identity Argo CD would sync Application `namespace/name` with now (read from the
/// cluster: the Application, its AppProject, `argocd-cm`), and how its StatefulSet `desired`
/// is written ([`WriteAs`]): what a resume of its intent checks and writes with.
pub async fn identity_now(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    argocd_namespace: &str,
    default_service_account: Option<&str>,
    desired: &serde_json::Value,
    call_timeout: Duration,
) -> Result<(Option<String>, WriteAs), IdentityError> {
    let api: Api<Application> = Api::namespaced(client.clone(), namespace);
    let app = with_deadline(
        call_timeout,
        "get",
        &format!("Application {namespace}/{name}"),
        api.get(name),
    )
    .await?;
    let project = read_project(client, argocd_namespace, app.project(), call_timeout)
        .await?
        .ok_or_else(|| IdentityError::NoProject {
            namespace: argocd_namespace.to_string(),
            name: app.project().to_string(),
        })?;
    let impersonation = read_impersonation(client, argocd_namespace, call_timeout).await?;
    let identity = project::identity(&project, &app, impersonation, default_service_account)
        .map_err(|e| IdentityError::Project(e.to_string()))?;
    let r = recreate::recreate(app.sync_options(), desired);
    Ok((identity.user().map(str::to_string), write_as(&r)))
}

/// How `argocd::recreate` says a StatefulSet is re-created, as the cluster writes it.
fn write_as(r: &recreate::Recreate) -> WriteAs {
    WriteAs {
        field_manager: r.field_manager.to_string(),
        operation: match r.operation {
            recreate::Operation::Update => WriteOperation::Create,
            recreate::Operation::Apply => WriteOperation::Apply,
        },
    }
}

fn call_failed(e: CallError) -> Run {
    Run::Outcome(GateOutcome::Failed {
        message: e.to_string(),
    })
}

fn other(message: String) -> crate::cluster::CallErrorKind {
    crate::cluster::CallErrorKind::Other { message }
}

fn decode_error(shown: &str, e: serde_json::Error) -> CallError {
    CallError::new("decode of", shown, other(e.to_string()))
}

/// A new hand-back's nonce: 128 random bits, in hex.
fn nonce() -> String {
    format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

/// The nonce of a hand-back Argo CD has not answered yet.
fn open_nonce(record: &RevisionRecord) -> Option<String> {
    if record.state != RevisionState::Converged || record.flux.is_some() {
        return None;
    }
    record.handoff.as_ref()?.requested_at.clone()
}

/// Whether the record's hand-back was answered: Argo CD applied it.
fn answered_applied(record: &RevisionRecord) -> bool {
    record.handoff.is_some()
        && record
            .flux
            .as_ref()
            .is_some_and(|f| f.outcome == FluxOutcome::Applied)
}

/// Whether the record's hand-back failed again on the same error.
fn failed_again(record: &RevisionRecord) -> bool {
    record.flux.as_ref().is_some_and(|f| {
        f.outcome == FluxOutcome::Failed
            && (record.warnings.iter().any(|w| w == FAILED_AGAIN)
                || f.message
                    .as_deref()
                    .is_some_and(|m| m.contains(IMMUTABLE_ERROR)))
    })
}

/// Whether `record` was made for the Application as it is: the same revision compared and the
/// same spec (never the generation, which moves with every status write).
fn same_attempt(record: &RevisionRecord, app: &Application) -> bool {
    record.revision == app.sync_revision().to_string()
        && record.digest.as_deref() == Some(app.spec_digest().as_str())
}

/// A StatefulSet the failure names that the targets do not hold.
fn missing(failure: &Failure, targets: &[TargetStatefulSet]) -> Option<String> {
    failure
        .statefulsets
        .iter()
        .find(|n| {
            !targets.iter().any(|t| {
                t.name == n.name && n.namespace.as_deref().is_none_or(|ns| ns == t.namespace)
            })
        })
        .map(|n| match &n.namespace {
            Some(ns) => format!("{ns}/{}", n.name),
            None => n.name.clone(),
        })
}

/// Which identity the converge acted as, as the record says it (among its warnings: a record
/// has no field of its own for it).
pub fn identity_note(identity: &Identity) -> String {
    match identity.user() {
        Some(user) => format!("identity: converged as {user} ({})", identity.source()),
        None => "identity: converged as the service's own identity".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argocd::act::{Named, Shape};

    fn record(revision: &str, digest: &str, flux: Option<FluxResult>) -> RevisionRecord {
        let mut r = RevisionRecord::new(
            revision,
            Trigger::Watch,
            "2026-08-22T10:00:00Z",
            RevisionState::Converged,
            GateMode::Reconcile,
            None,
        )
        .with_digest(Some(digest.into()));
        r.flux = flux;
        r
    }

    fn app(revision: &str) -> Application {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db", "namespace": "argocd"},
            "spec": {"project": "default", "destination": {"name": "in-cluster", "namespace": "apps"}},
            "status": {"sync": {"status": "OutOfSync", "revision": revision}}
        }))
        .unwrap()
    }

    #[test]
    fn a_failed_hand_back_blocks_only_the_same_revision_and_spec() {
        let a = app("abc");
        let failed = FluxResult {
            outcome: FluxOutcome::Failed,
            applied_revision: None,
            message: Some(format!("Failed: x {IMMUTABLE_ERROR} y")),
            attempted_revision: Some("abc".into()),
        };
        let r = record("abc", &a.spec_digest(), Some(failed.clone()));
        assert!(failed_again(&r) && same_attempt(&r, &a));
        assert!(!same_attempt(&r, &app("def")), "a new revision");
        let mut changed = a.clone();
        changed.spec.destination.namespace = "other".into();
        assert!(!same_attempt(&r, &changed), "a changed spec");
        let mut generation_only = a.clone();
        generation_only.metadata.generation = Some(42);
        assert!(
            same_attempt(&r, &generation_only),
            "the generation is no signal"
        );
        let other = FluxResult {
            message: Some("Failed: something else".into()),
            ..failed
        };
        assert!(!failed_again(&record("abc", &a.spec_digest(), Some(other))));
        assert!(!failed_again(&record("abc", &a.spec_digest(), None)));
    }

    #[test]
    fn an_open_hand_back_is_one_converged_and_unanswered() {
        let mut r = record("abc", "d", None);
        assert_eq!(open_nonce(&r), None, "no hand-off");
        r.handoff = Some(Handoff {
            mode: GateMode::Reconcile,
            at: "2026-08-22T10:00:00Z".into(),
            action: HandoffAction::ReconcileRequested,
            requested_at: Some("n".into()),
            resuspended_at: None,
            attempts: Vec::new(),
            retry_at: None,
        });
        assert_eq!(open_nonce(&r).as_deref(), Some("n"));
        r.flux = Some(FluxResult {
            outcome: FluxOutcome::Applied,
            applied_revision: Some("abc".into()),
            message: None,
            attempted_revision: None,
        });
        assert_eq!(open_nonce(&r), None, "answered");
        let n = nonce();
        assert_eq!(n.len(), 32);
        assert_ne!(n, nonce());
    }

    #[test]
    fn a_named_statefulset_missing_from_the_targets_is_found() {
        let failure = Failure {
            shape: Shape::SyncFailed,
            revision: Revision::default(),
            statefulsets: vec![
                Named {
                    namespace: Some("apps".into()),
                    name: "db".into(),
                },
                Named {
                    namespace: None,
                    name: "cache".into(),
                },
            ],
            message: String::new(),
        };
        let target = |ns: &str, name: &str| TargetStatefulSet {
            namespace: ns.into(),
            name: name.into(),
            object: serde_json::Value::Null,
        };
        assert_eq!(
            missing(&failure, &[target("apps", "db"), target("x", "cache")]),
            None
        );
        assert_eq!(
            missing(&failure, &[target("other", "db"), target("x", "cache")]).as_deref(),
            Some("apps/db")
        );
        assert_eq!(
            missing(&failure, &[target("apps", "db")]).as_deref(),
            Some("cache")
        );
    }

    #[test]
    fn the_identity_is_said_in_the_record() {
        assert_eq!(
            identity_note(&Identity::Project {
                user: "system:serviceaccount:apps:deployer".into()
            }),
            "identity: converged as system:serviceaccount:apps:deployer (AppProject destinationServiceAccounts)"
        );
        assert_eq!(
            identity_note(&Identity::Own),
            "identity: converged as the service's own identity"
        );
    }
}
