//! Converging StatefulSets against a cluster (docs/converge.md): decide → prove → pre-flight
//! → grow → record → orphan-delete → wait → re-apply → clear, so that a run interrupted
//! anywhere is finished by the next one.
//!
//! A set (one revision, one file) is converged all or nothing: every StatefulSet is decided,
//! proven and pre-flighted before any is written, so one refusal leaves the others untouched
//! rather than applying half a revision.
//!
//! The order of the writes is what keeps data safe: claims grow (only from the version they
//! were decided on, so nobody's raise is undone) while the old StatefulSet still owns its
//! pods; the intent holding the desired object is recorded right before the delete, so from
//! then on an absent StatefulSet is ours to re-apply, and before then one is someone else's
//! to keep deleted; the delete orphans (pods and claims stay) and carries the uid it decided
//! on (a StatefulSet re-created by someone else is never deleted).

pub mod fence;
pub mod preflight;
pub mod prove;
pub mod report;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use tracing::{debug, info, warn};

use crate::cluster::{CallError, Cluster, DeleteOutcome, WaitOutcome, is_conflict};
use crate::decide::{Plan, Refusal, decide, declares_desired_sizes};
use crate::journal::{
    Intent, Journal, JournalError, OWN_IDENTITY, RefusedIntent, Unreadable, inconsistency,
    intent_record_name,
};

pub use report::{
    ClaimAction, ClaimReport, Outcome, RefusalReport, Report, ResumeAction, ResumeReport, Step,
    StepTiming,
};

/// How many times one claim's grow is re-read and decided again after a 409 before the
/// converge gives up (someone writing the claim that often is a fight, not a race).
pub const MAX_CLAIM_CONFLICTS: usize = 5;

/// Knobs of one converge.
#[derive(Clone, Debug)]
pub struct Options {
    /// Decide and prove only; write nothing (not even the journal, nor a resume).
    pub dry_run: bool,
    /// How long the orphan delete may take (the garbage collector removes the finalizer).
    pub wait_timeout: Duration,
    /// The source revision the desired object was rendered from, when known (the service
    /// passes the artifact's): recorded in the intent so a resume says what it finishes.
    pub revision: Option<String>,
    /// Asked right before the claim patches and right before the orphan delete (and a
    /// resume's re-apply): the service's Lease, so a replica that lost it writes nothing more.
    pub fence: Option<fence::SharedFence>,
    /// Who the cluster's writes act as: the impersonated user (`system:serviceaccount:NS:SA`),
    /// `None` for the process's own identity. Recorded in the intent, so a resume acts as the
    /// same identity, never with more rights; named in access failures.
    pub act_as: Option<String>,
    /// The server's "forbidden in place" answers, shared by the converges that pass the same
    /// memory (one run of the command; every run of the service).
    pub in_place: prove::InPlaceMemory,
    /// The Kustomization (`namespace/name`) whose revision is converged, when known (the
    /// service's): recorded in the intent, so a resume on start can ask which identity that
    /// Kustomization would use now.
    pub kustomization: Option<String>,
    /// The caller is an operator (the `converge` command): an intent recorded under any
    /// identity is finished under the caller's own. Otherwise (the service) an intent recorded
    /// under another identity than [`Options::act_as`] is refused, not resumed.
    pub resume_as_operator: bool,
    /// The StatefulSets `(namespace, name)` the caller's current render has (the command: its
    /// file), for [`resume_all`]: an absent StatefulSet whose intent says our delete was sent
    /// is re-created only if its render still has it. `None`: no render at hand (the service
    /// on start), so none is re-created there; the next converge of its Kustomization does it.
    pub renders: Option<Arc<BTreeSet<(String, String)>>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dry_run: false,
            wait_timeout: Duration::from_secs(120),
            revision: None,
            fence: None,
            act_as: None,
            in_place: prove::InPlaceMemory::default(),
            kustomization: None,
            resume_as_operator: false,
            renders: None,
        }
    }
}

/// What a failed converge left behind, so its message never claims "nothing was written"
/// after a write.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Written {
    /// No write of this converge reached the server: run again to retry.
    Nothing,
    /// Something was written (claims grown, an earlier intent finished) but no intent is
    /// pending: what was written stands, and the next run decides again from there.
    Partial,
    /// An intent is in the journal: the next run finishes it.
    IntentKept,
}

impl std::fmt::Display for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Written::Nothing => "nothing was written: run converge again to retry",
            Written::Partial => {
                "what was written so far stands (claims only grow; no delete is pending): run \
                 converge again to finish the work"
            }
            Written::IntentKept => {
                "the intent is kept in the journal: run converge again to finish the work"
            }
        })
    }
}

/// Why a converge stopped. Each message names the step, the object and the server's words,
/// and says what was written; re-running the converge finishes the work.
#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    #[error("step {step} of StatefulSet {namespace}/{name} failed: {cause}; {written}")]
    Call {
        step: Step,
        namespace: String,
        name: String,
        // Not a `source`: the message already carries it, and `{:#}` would print it twice.
        cause: CallError,
        written: Written,
    },
    #[error("step {step} of StatefulSet {namespace}/{name} failed: {cause}; {written}")]
    Journal {
        step: Step,
        namespace: String,
        name: String,
        cause: JournalError,
        written: Written,
    },
    /// A dry run (the proof, or the pre-flight create) was answered 401, 404 or RBAC's 403:
    /// the converger's access (or the namespace) must be fixed; the object itself was not
    /// judged, so this is no refusal.
    #[error("step {step} of StatefulSet {namespace}/{name} failed: {message}; {written}")]
    Access {
        /// `prove` or `preflight`.
        step: Step,
        namespace: String,
        name: String,
        message: String,
        /// The HTTP status of the dry run's answer (401, 403 or 404).
        code: u16,
        written: Written,
    },
    #[error(
        "StatefulSet {namespace}/{name} is being deleted by someone else (no intent of ours); \
         {written} once it is gone"
    )]
    Terminating {
        namespace: String,
        name: String,
        written: Written,
    },
    #[error("desired object {what}: {message}")]
    Invalid { what: String, message: String },
    /// The fence refused the next write: this replica may no longer write (it lost its Lease,
    /// or cannot prove it still holds it). Whoever holds the Lease finishes from the journal.
    #[error(
        "step {step} of StatefulSet {namespace}/{name} stopped: this replica may no longer write: \
         {message}; {written}"
    )]
    Fenced {
        step: Step,
        namespace: String,
        name: String,
        message: String,
        written: Written,
    },
}

impl ConvergeError {
    /// The step that failed, when the failure is in one.
    pub fn step(&self) -> Option<Step> {
        match self {
            ConvergeError::Call { step, .. }
            | ConvergeError::Journal { step, .. }
            | ConvergeError::Fenced { step, .. }
            | ConvergeError::Access { step, .. } => Some(*step),
            _ => None,
        }
    }

    /// What the failed converge left behind (`Nothing` for a bad desired object).
    pub fn written(&self) -> Written {
        match self {
            ConvergeError::Call { written, .. }
            | ConvergeError::Journal { written, .. }
            | ConvergeError::Access { written, .. }
            | ConvergeError::Terminating { written, .. }
            | ConvergeError::Fenced { written, .. } => *written,
            ConvergeError::Invalid { .. } => Written::Nothing,
        }
    }
}

/// `(namespace, name)` of a desired object; both must be set (the caller defaults the namespace).
fn identity(desired: &StatefulSet) -> Result<(String, String), ConvergeError> {
    let name = desired.metadata.name.clone().filter(|n| !n.is_empty());
    let namespace = desired.metadata.namespace.clone().filter(|n| !n.is_empty());
    match (namespace, name) {
        (Some(ns), Some(n)) => Ok((ns, n)),
        (_, None) => Err(ConvergeError::Invalid {
            what: "StatefulSet".into(),
            message: "metadata.name is missing".into(),
        }),
        (None, Some(n)) => Err(ConvergeError::Invalid {
            what: format!("StatefulSet {n}"),
            message: "metadata.namespace is missing".into(),
        }),
    }
}

/// One converge's context: the StatefulSet, and what it has written so far (atomics, not
/// cells: the converge future must stay `Send` for the service's workers).
struct Run<'a, C, J> {
    cluster: &'a C,
    journal: &'a J,
    namespace: String,
    name: String,
    options: &'a Options,
    /// A write of this converge reached (or may have reached) the server.
    wrote: AtomicBool,
    /// An intent for this StatefulSet is in the journal.
    intent_kept: AtomicBool,
}

/// The claim's `spec.resources.requests.storage` as read, for reports.
fn claim_request(claim: &PersistentVolumeClaim) -> Option<String> {
    claim
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .map(|q| q.0.clone())
}

impl<'a, C: Cluster, J: Journal> Run<'a, C, J> {
    fn new(
        cluster: &'a C,
        journal: &'a J,
        namespace: &str,
        name: &str,
        options: &'a Options,
    ) -> Self {
        Run {
            cluster,
            journal,
            namespace: namespace.to_string(),
            name: name.to_string(),
            options,
            wrote: AtomicBool::new(false),
            intent_kept: AtomicBool::new(false),
        }
    }

    fn written(&self) -> Written {
        if self.intent_kept.load(Ordering::SeqCst) {
            Written::IntentKept
        } else if self.wrote.load(Ordering::SeqCst) {
            Written::Partial
        } else {
            Written::Nothing
        }
    }

    /// Marks a write as sent: even a failed one may have reached the server.
    fn writing(&self) {
        self.wrote.store(true, Ordering::SeqCst);
    }

    fn call_err(&self, step: Step) -> impl FnOnce(CallError) -> ConvergeError + '_ {
        move |cause| ConvergeError::Call {
            step,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            cause,
            written: self.written(),
        }
    }

    /// Asks the fence (if any) whether the write of `step` may go out.
    fn fenced(&self, step: Step) -> Result<(), ConvergeError> {
        match &self.options.fence {
            Some(fence) => fence.check().map_err(self.fence_err(step)),
            None => Ok(()),
        }
    }

    /// Opens the window of `step` (the orphan delete, or a resume's re-apply of an absent
    /// object): the fence's check, and a guard held until the re-apply returns, so the
    /// service never stops this process while the StatefulSet may be absent.
    fn window(&self, step: Step) -> Result<fence::Window, ConvergeError> {
        match &self.options.fence {
            Some(fence) => fence.open_window().map_err(self.fence_err(step)),
            None => Ok(fence::Window::none()),
        }
    }

    fn fence_err(&self, step: Step) -> impl FnOnce(String) -> ConvergeError + '_ {
        move |message| {
            warn!(statefulset = %self.name, namespace = %self.namespace, step = step.as_str(),
                  %message, "fenced: not writing");
            ConvergeError::Fenced {
                step,
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                message,
                written: self.written(),
            }
        }
    }

    fn access_err(&self, step: Step, message: String, cause: &CallError) -> ConvergeError {
        ConvergeError::Access {
            step,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            message,
            code: cause.code().unwrap_or_default(),
            written: self.written(),
        }
    }

    fn journal_err(&self, step: Step) -> impl FnOnce(JournalError) -> ConvergeError + '_ {
        move |cause| ConvergeError::Journal {
            step,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            cause,
            written: self.written(),
        }
    }

    /// prepare, then write: one StatefulSet on its own (a resume's continued procedure).
    async fn procedure(
        &self,
        desired: &StatefulSet,
        live: StatefulSet,
        report: &mut Report,
        resuming: Option<&Intent>,
    ) -> Result<(), ConvergeError> {
        // A resume decides on the object it read, never on a watched copy: never `Stale`.
        match self.prepare(desired, live, false, report, resuming).await? {
            Prep::Work(Some(work)) => self.write(desired, work, report, resuming).await,
            Prep::Work(None) | Prep::Stale => Ok(()),
        }
    }

    /// The write-free phase over a live object: decide → prove → pre-flight. `Work(None)` when
    /// there is nothing to write (refused, unchanged, a dry run); `Work(Some)` is what the
    /// write phase does. `watched`: `live` is a watched copy ([`Cluster::watched_statefulset`]),
    /// which the proof's answer must confirm, else `Stale`. `resuming`: the intent already in
    /// the journal (and a terminating object is ours).
    async fn prepare(
        &self,
        desired: &StatefulSet,
        live: StatefulSet,
        watched: bool,
        report: &mut Report,
        resuming: Option<&Intent>,
    ) -> Result<Prep, ConvergeError> {
        let (ns, name) = (self.namespace.as_str(), self.name.as_str());
        let uid = live.metadata.uid.clone().unwrap_or_default();
        report.old_uid = Some(uid.clone());

        if live.metadata.deletion_timestamp.is_some() {
            if resuming.is_none() {
                return Err(ConvergeError::Terminating {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                    written: self.written(),
                });
            }
            // Our own delete was issued (claims were grown before it): carry on from the delete,
            // which also turns someone else's cascading delete into an orphaning one.
            report.outcome = Outcome::Converged;
            return Ok(Prep::Work(Some(Work::InFlight { uid })));
        }

        // One after the other on purpose: two requests at once on one client open a second
        // connection (and, over TLS, a second handshake) that costs more than the request.
        let t = Instant::now();
        let claims = self
            .cluster
            .list_claims(ns)
            .await
            .map_err(self.call_err(Step::Read))?;
        let classes = self
            .cluster
            .list_storage_classes()
            .await
            .map_err(self.call_err(Step::Read))?;
        report.timed(Step::Read, t.elapsed());

        let t = Instant::now();
        let decided = decide(desired, Some(&live), &claims, &classes);
        report.timed(Step::Decide, t.elapsed());
        let mut plan = match decided {
            Ok(plan) => plan,
            // A refusal stands only on the object as read from the server.
            Err(_) if watched => return Ok(Prep::Stale),
            Err(refusal) => {
                refuse(report, &refusal);
                return Ok(Prep::Work(None));
            }
        };
        report.claims = report::claim_reports(desired, &claims, &plan, self.options.dry_run);
        report.plan = Some(plan.clone());

        let t = Instant::now();
        let proof = prove::proof_object(desired, &live);
        let proved = self
            .cluster
            .dry_run_apply(&proof)
            .await
            .map_err(|e| prove::classify(ns, name, e));
        report.timed(Step::Prove, t.elapsed());
        if watched && !prove::confirms(&live, &proved) {
            debug!(statefulset = %name, namespace = %ns,
                   "the watched copy is not the live object: reading it and deciding again");
            return Ok(Prep::Stale);
        }
        if let Err(verdict) = proved {
            return self.not_proven(report, verdict).map(Prep::Work);
        }

        // Proven apart from what the re-create carries: does the server take that in place?
        let mut accepted = false;
        let memory = &self.options.in_place;
        if plan.recreate && memory.forbids(&plan.changes, Instant::now()) {
            debug!(statefulset = %name, namespace = %ns,
                   "the server forbade these changes in place within the hour: not asked again");
        } else if plan.recreate {
            let t = Instant::now();
            let answer = self.cluster.dry_run_apply(desired).await.map(|_| ());
            report.timed(Step::Prove, t.elapsed());
            match prove::classify_in_place(ns, name, answer) {
                prove::InPlace::Forbidden => memory.forbidden(&plan.changes, Instant::now()),
                prove::InPlace::Accepted => {
                    info!(statefulset = %name, namespace = %ns,
                          "the server takes the immutable changes in place: not re-created");
                    accepted = true;
                    plan.recreate = false;
                    report.plan = Some(plan.clone());
                }
                prove::InPlace::Other(verdict) => {
                    return self.not_proven(report, verdict).map(Prep::Work);
                }
            }
        }

        if plan.resize.is_empty() && !plan.recreate {
            report.outcome = if accepted {
                Outcome::AcceptedByServer
            } else {
                Outcome::Unchanged
            };
            return Ok(Prep::Work(None));
        }

        if plan.recreate {
            // The re-apply after the orphan delete is a create: ask the server now whether it
            // would pass, while nothing is written yet.
            let t = Instant::now();
            let answer = self.cluster.dry_run_create(desired).await.map(|_| ());
            report.timed(Step::Preflight, t.elapsed());
            let acting_as = self.options.act_as.as_deref();
            match preflight::classify(ns, name, acting_as, answer) {
                preflight::Verdict::Passed => {}
                preflight::Verdict::Refused(refusal) => {
                    report.claims.clear();
                    refuse(report, &refusal);
                    return Ok(Prep::Work(None));
                }
                preflight::Verdict::Denied { message, cause } => {
                    return Err(self.access_err(Step::Preflight, message, &cause));
                }
                preflight::Verdict::Failed(e) => return Err(self.call_err(Step::Preflight)(e)),
            }
        }

        if self.options.dry_run {
            report.outcome = if accepted {
                Outcome::AcceptedByServer
            } else {
                Outcome::Proven
            };
            return Ok(Prep::Work(None));
        }
        Ok(Prep::Work(Some(Work::Planned(Box::new(Planned {
            uid,
            live,
            claims,
            classes,
            plan,
            accepted,
        })))))
    }

    /// A proof's dry run that did not pass: a refusal (nothing written), or an error.
    fn not_proven(
        &self,
        report: &mut Report,
        verdict: prove::Verdict,
    ) -> Result<Option<Work>, ConvergeError> {
        match verdict {
            prove::Verdict::Refused(refusal) => {
                report.claims.clear();
                refuse(report, &refusal);
                Ok(None)
            }
            prove::Verdict::Denied { message, cause } => {
                Err(self.access_err(Step::Prove, message, &cause))
            }
            prove::Verdict::Failed(e) => Err(self.call_err(Step::Prove)(e)),
        }
    }

    /// The write phase of one StatefulSet: [fence] → grow → [fence] → [record] → orphan →
    /// wait → re-apply.
    async fn write(
        &self,
        desired: &StatefulSet,
        work: Work,
        report: &mut Report,
        resuming: Option<&Intent>,
    ) -> Result<(), ConvergeError> {
        let (ns, name) = (self.namespace.as_str(), self.name.as_str());
        let planned = match work {
            Work::InFlight { uid } => {
                return self.recreate(desired, &uid, report, true, None).await;
            }
            Work::Planned(planned) => planned,
        };
        let Planned {
            uid,
            live,
            claims,
            classes,
            plan,
            accepted,
        } = *planned;

        if !plan.resize.is_empty() {
            self.fenced(Step::Grow)?;
        }
        let t = Instant::now();
        let grow = Grow {
            desired,
            live: &live,
            claims: &claims,
            classes: &classes,
        };
        self.grow(&grow, &plan, report).await?;
        report.timed(Step::Grow, t.elapsed());
        report.outcome = if accepted {
            Outcome::AcceptedByServer
        } else {
            Outcome::Converged
        };
        if !plan.recreate {
            return Ok(());
        }

        // The intent is recorded once the claims are grown and the window of the delete is
        // open, right before the delete: until then the live StatefulSet is untouched and a
        // crash loses nothing (the next run decides again and skips grown claims); from now on
        // it says "our delete is next". A refused window records nothing, so no intent says
        // `deleting` for a delete that was never sent.
        let window = self.window(Step::Orphan)?;
        if !resuming.is_some_and(|i| i.deleting) {
            let t = Instant::now();
            let intent = Intent {
                namespace: ns.to_string(),
                name: name.to_string(),
                uid: uid.clone(),
                desired: desired.clone(),
                plan: serde_json::to_value(&plan).unwrap_or(serde_json::Value::Null),
                recorded_at: jiff::Timestamp::now().to_string(),
                revision: resuming
                    .and_then(|i| i.revision.clone())
                    .or_else(|| self.options.revision.clone()),
                deleting: true,
                act_as: resuming.and_then(|i| i.act_as.clone()).or_else(|| {
                    Some(
                        self.options
                            .act_as
                            .clone()
                            .unwrap_or_else(|| OWN_IDENTITY.to_string()),
                    )
                }),
                kustomization: resuming
                    .and_then(|i| i.kustomization.clone())
                    .or_else(|| self.options.kustomization.clone()),
            };
            self.writing();
            self.journal
                .record(&intent)
                .await
                .map_err(self.journal_err(Step::Record))?;
            self.intent_kept.store(true, Ordering::SeqCst);
            report.timed(Step::Record, t.elapsed());
        }
        self.recreate(desired, &uid, report, false, Some(window))
            .await
    }

    /// Grows each claim of the plan from the version it was decided on. A 409 means the claim
    /// changed since the read (an operator, a volume autoscaler): it is read again and decided
    /// again, so a request raised meanwhile is left as it is, never lowered.
    async fn grow(
        &self,
        on: &Grow<'_>,
        plan: &Plan,
        report: &mut Report,
    ) -> Result<(), ConvergeError> {
        let ns = self.namespace.as_str();
        for r in &plan.resize {
            let mut version = on
                .claims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(r.claim.as_str()))
                .and_then(|c| c.metadata.resource_version.clone())
                .unwrap_or_default();
            let (mut from, mut to) = (r.from.clone(), r.to.clone());
            let mut conflicts = 0;
            loop {
                info!(statefulset = %self.name, namespace = %ns, claim = %r.claim,
                      from = from.as_str(), to = to.as_str(), resource_version = %version,
                      "growing claim");
                self.writing();
                let grown = self
                    .cluster
                    .resize_claim(ns, &r.claim, to.as_str(), &version)
                    .await;
                let conflict = match grown {
                    Ok(()) => {
                        report.claim_outcome(
                            &r.claim,
                            ClaimAction::Resized,
                            Some(from.as_str().to_string()),
                            Some(to.as_str().to_string()),
                            None,
                        );
                        break;
                    }
                    Err(e) if is_conflict(&e) && conflicts < MAX_CLAIM_CONFLICTS => e,
                    Err(e) => return Err(self.call_err(Step::Grow)(e)),
                };
                conflicts += 1;
                let fresh = self
                    .cluster
                    .get_claim(ns, &r.claim)
                    .await
                    .map_err(self.call_err(Step::Grow))?;
                let Some(fresh) = fresh else {
                    warn!(statefulset = %self.name, namespace = %ns, claim = %r.claim,
                          "claim deleted by someone else meanwhile: not growing it");
                    report.claim_outcome(
                        &r.claim,
                        ClaimAction::Skipped,
                        None,
                        None,
                        Some("deleted by someone else while the converge ran".into()),
                    );
                    break;
                };
                let again = match decide(
                    on.desired,
                    Some(on.live),
                    std::slice::from_ref(&fresh),
                    on.classes,
                ) {
                    Ok(again) => again,
                    Err(refusal) => {
                        warn!(statefulset = %self.name, namespace = %ns, claim = %r.claim,
                              message = %refusal.message, "claim changed meanwhile and is now refused");
                        return Err(self.call_err(Step::Grow)(conflict));
                    }
                };
                let now = claim_request(&fresh);
                if let Some(next) = again.resize.into_iter().next() {
                    info!(statefulset = %self.name, namespace = %ns, claim = %r.claim,
                          "claim changed meanwhile: decided again on the version read now");
                    version = fresh.metadata.resource_version.clone().unwrap_or_default();
                    (from, to) = (next.from, next.to);
                    continue;
                }
                if let Some(d) = again.deferred.into_iter().next() {
                    report.claim_outcome(
                        &r.claim,
                        ClaimAction::Deferred,
                        now,
                        None,
                        Some(d.reason),
                    );
                } else {
                    info!(statefulset = %self.name, namespace = %ns, claim = %r.claim,
                          request = now.as_deref().unwrap_or_default(),
                          "claim raised by someone else meanwhile: left as it is");
                    report.claim_outcome(
                        &r.claim,
                        ClaimAction::Skipped,
                        now,
                        None,
                        Some(format!(
                            "raised by someone else to at least {to} while the converge ran: \
                             left as it is, never lowered"
                        )),
                    );
                }
                break;
            }
        }
        Ok(())
    }

    /// orphan → wait → re-apply. `ours_in_flight`: the object was seen terminating while an
    /// intent of ours says our delete was sent, so "already gone" is our delete's doing.
    /// `window`: the delete's window, when the caller opened it (before recording the intent).
    async fn recreate(
        &self,
        desired: &StatefulSet,
        uid: &str,
        report: &mut Report,
        ours_in_flight: bool,
        window: Option<fence::Window>,
    ) -> Result<(), ConvergeError> {
        let (ns, name) = (self.namespace.as_str(), self.name.as_str());
        let _window = match window {
            Some(window) => window,
            None => self.window(Step::Orphan)?,
        };
        info!(statefulset = %name, namespace = %ns, uid, "orphan-deleting");
        let t = Instant::now();
        self.writing();
        let deleted = self
            .cluster
            .orphan_delete(ns, name, uid)
            .await
            .map_err(self.call_err(Step::Orphan))?;
        report.timed(Step::Orphan, t.elapsed());
        let version = match deleted {
            DeleteOutcome::UidMismatch { message } => {
                warn!(statefulset = %name, namespace = %ns, uid, %message,
                      "replaced by someone else meanwhile: not deleting it");
                return self.replaced(desired, report).await;
            }
            DeleteOutcome::Absent if !ours_in_flight => {
                warn!(statefulset = %name, namespace = %ns, uid,
                      "deleted by someone else before our orphan delete: not re-applying it");
                report.outcome = Outcome::DeletedElsewhere;
                return Ok(());
            }
            DeleteOutcome::Absent | DeleteOutcome::Gone => None,
            DeleteOutcome::Deleting { resource_version } => Some(resource_version),
        };
        if let Some(version) = version {
            let t = Instant::now();
            let waited = self
                .cluster
                .wait_gone(ns, name, uid, version.as_deref(), self.options.wait_timeout)
                .await
                .map_err(self.call_err(Step::Wait))?;
            report.timed(Step::Wait, t.elapsed());
            if let WaitOutcome::Replaced { uid: other } = waited {
                warn!(statefulset = %name, namespace = %ns, uid = %other,
                      "re-created by someone else meanwhile: not applying over it");
                return self.replaced(desired, report).await;
            }
        }
        let t = Instant::now();
        let applied = self
            .cluster
            .apply(desired)
            .await
            .map_err(self.call_err(Step::Reapply))?;
        report.timed(Step::Reapply, t.elapsed());
        report.recreated = true;
        report.new_uid = applied.metadata.uid;
        info!(statefulset = %name, namespace = %ns, old_uid = uid,
              new_uid = report.new_uid.as_deref().unwrap_or_default(), "re-applied");
        Ok(())
    }

    /// Someone else's object holds the name: converged only if it declares the desired sizes.
    async fn replaced(
        &self,
        desired: &StatefulSet,
        report: &mut Report,
    ) -> Result<(), ConvergeError> {
        let live = self
            .cluster
            .get_statefulset(&self.namespace, &self.name)
            .await
            .map_err(self.call_err(Step::Wait))?;
        report.new_uid = live.as_ref().and_then(|l| l.metadata.uid.clone());
        report.outcome = match live {
            Some(live) if declares_desired_sizes(&live, desired) => Outcome::RecreatedElsewhere,
            _ => Outcome::ReplacedElsewhere,
        };
        Ok(())
    }

    /// Why the journal's intent for this StatefulSet is not resumed by this converge, if it is
    /// not: its record, StatefulSet and desired object disagree, or (unless the caller is an
    /// operator) it was recorded under another identity than this converge acts as, which is
    /// the one its Kustomization uses now.
    fn refusal_of(&self, intent: &Intent) -> Option<RefusedIntent> {
        let (ns, name) = (self.namespace.as_str(), self.name.as_str());
        let record = intent_record_name(ns, name);
        let current = self.options.act_as.as_deref().unwrap_or(OWN_IDENTITY);
        let reason = inconsistency(&record, intent).or_else(|| match intent.act_as.as_deref() {
            Some(recorded) if !self.options.resume_as_operator && recorded != current => Some(
                format!("it was recorded as {recorded:?}, but this converge acts as {current:?}"),
            ),
            _ => None,
        })?;
        Some(RefusedIntent {
            object: format!("intent {record}"),
            namespace: intent.namespace.clone(),
            name: intent.name.clone(),
            act_as: intent.act_as.clone(),
            reason,
        })
    }

    /// Finishes the journal's intent for this StatefulSet, if there is one. An intent that
    /// does not parse, or is not what it says, is reported (`Err(Skipped)` inside `Ok`) and
    /// otherwise ignored: a hand-edited record must not wedge the StatefulSet, and a forged
    /// one is never acted on.
    async fn resume(&self) -> Result<Result<Option<ResumeReport>, Skipped>, ConvergeError> {
        let (ns, name) = (self.namespace.as_str(), self.name.as_str());
        let loaded = match self.journal.load(ns, name).await {
            Ok(loaded) => loaded,
            Err(e) => match Unreadable::of(&e) {
                Some(unreadable) => {
                    // The caller reports it (the report's `unreadable_intent`): debug only here.
                    debug!(statefulset = %name, namespace = %ns, record = %unreadable.object,
                           error = %e, "unreadable journal record: ignored");
                    return Ok(Err(Skipped::Unreadable(unreadable)));
                }
                None => return Err(self.journal_err(Step::Resume)(e)),
            },
        };
        let Some(intent) = loaded else {
            return Ok(Ok(None));
        };
        if let Some(refused) = self.refusal_of(&intent) {
            warn!(statefulset = %name, namespace = %ns, record = %refused.object,
                  act_as = refused.act_as.as_deref().unwrap_or_default(), reason = %refused.reason,
                  "not resuming an intent that is not what it says: left in the journal");
            return Ok(Err(Skipped::Refused(refused)));
        }
        self.intent_kept.store(true, Ordering::SeqCst);
        // This converge's desired object is this StatefulSet: its render has it.
        // Boxed: the resume's procedure is a whole converge, kept off the caller's stack.
        Box::pin(self.finish(intent, true))
            .await
            .map(|r| Ok(Some(r)))
    }

    /// Finishes `intent`. `rendered`: the caller's current render has this StatefulSet, so an
    /// absent one whose intent says our delete was sent is re-created; otherwise it is left
    /// absent and the intent kept ([`ResumeAction::NotRendered`]).
    async fn finish(&self, intent: Intent, rendered: bool) -> Result<ResumeReport, ConvergeError> {
        let (ns, name) = (self.namespace.as_str(), self.name.as_str());
        info!(statefulset = %name, namespace = %ns, uid = %intent.uid,
              recorded_at = %intent.recorded_at, revision = intent.revision.as_deref().unwrap_or_default(),
              "resuming an unfinished intent");
        let live = self
            .cluster
            .get_statefulset(ns, name)
            .await
            .map_err(self.call_err(Step::Resume))?;
        let mut resumed = ResumeReport {
            action: ResumeAction::Continued,
            recorded_uid: intent.uid.clone(),
            recorded_at: intent.recorded_at.clone(),
            revision: intent.revision.clone(),
            report: None,
        };
        match live {
            None if intent.deleting && !rendered => {
                warn!(statefulset = %name, namespace = %ns, uid = %intent.uid,
                      "absent, and no render at hand says its Kustomization still has it: not \
                       re-created; the intent is kept for its Kustomization's next converge");
                resumed.action = ResumeAction::NotRendered;
                return Ok(resumed);
            }
            None if intent.deleting => {
                let _window = self.window(Step::Reapply)?;
                self.writing();
                let applied = self
                    .cluster
                    .apply(&intent.desired)
                    .await
                    .map_err(self.call_err(Step::Reapply))?;
                info!(statefulset = %name, namespace = %ns,
                      new_uid = applied.metadata.uid.as_deref().unwrap_or_default(),
                      "re-applied the recorded desired object");
                resumed.action = ResumeAction::Reapplied;
            }
            None => {
                warn!(statefulset = %name, namespace = %ns, uid = %intent.uid,
                      "deleted by someone else before any delete of ours: not brought back");
                resumed.action = ResumeAction::DeletedElsewhere;
            }
            Some(live) if live.metadata.uid.as_deref() != Some(intent.uid.as_str()) => {
                resumed.action = ResumeAction::AlreadyRecreated;
            }
            Some(live) => {
                let mut intent = intent;
                if intent.deleting && live.metadata.deletion_timestamp.is_none() {
                    // Present with the recorded uid and not terminating: the delete the intent
                    // announced was never sent (a crash or a refusal right before it). Say so
                    // in the journal first, so a prune of the StatefulSet from now on is never
                    // undone by a later resume; the write phase marks it again right before
                    // its own delete.
                    self.fenced(Step::Resume)?;
                    intent.deleting = false;
                    self.writing();
                    self.journal
                        .record(&intent)
                        .await
                        .map_err(self.journal_err(Step::Resume))?;
                }
                let mut inner = Report::new(ns, name, false);
                self.procedure(&intent.desired, live, &mut inner, Some(&intent))
                    .await?;
                if inner.outcome == Outcome::Refused {
                    warn!(statefulset = %name, namespace = %ns,
                          refusal = ?inner.refusal, "recorded intent is now refused: dropping it");
                    resumed.action = ResumeAction::Abandoned;
                }
                resumed.report = Some(Box::new(inner));
            }
        }
        self.clear().await?;
        Ok(resumed)
    }

    async fn clear(&self) -> Result<(), ConvergeError> {
        self.writing();
        self.journal
            .clear(&self.namespace, &self.name)
            .await
            .map_err(self.journal_err(Step::Clear))?;
        self.intent_kept.store(false, Ordering::SeqCst);
        Ok(())
    }
}

/// Why a converge did not resume the intent it found for its StatefulSet.
enum Skipped {
    Unreadable(Unreadable),
    Refused(RefusedIntent),
}

/// What the write-free phase of one StatefulSet found.
enum Prep {
    /// `None`: nothing to write.
    Work(Option<Work>),
    /// It decided on a watched copy the proof's answer did not confirm (another uid, a
    /// terminating object, or a refusal the copy may have caused): read the object and
    /// prepare again.
    Stale,
}

/// What the write phase of one StatefulSet does, as the write-free phase prepared it.
enum Work {
    /// A resume found our own delete in flight: carry on from the delete.
    InFlight { uid: String },
    /// Grow the planned claims; when the plan re-creates: record, orphan, wait, re-apply.
    Planned(Box<Planned>),
}

/// Everything the write phase decided on: the live object, claims and classes as read.
struct Planned {
    uid: String,
    live: StatefulSet,
    claims: Vec<PersistentVolumeClaim>,
    classes: Vec<StorageClass>,
    plan: Plan,
    /// The server takes the plan's immutable changes in place: claims only, no re-create.
    accepted: bool,
}

/// What the grow decides again on after a conflict.
struct Grow<'a> {
    desired: &'a StatefulSet,
    live: &'a StatefulSet,
    claims: &'a [PersistentVolumeClaim],
    classes: &'a [StorageClass],
}

fn refuse(report: &mut Report, refusal: &Refusal) {
    info!(statefulset = %refusal.name, namespace = %refusal.namespace,
          code = %refusal.code, message = %refusal.message, "refused");
    report.refused(refusal);
}

/// One StatefulSet after the write-free phase: the work left for the write phase, if any.
struct Prepared<'a, C, J> {
    run: Run<'a, C, J>,
    desired: StatefulSet,
    report: Report,
    work: Option<Work>,
}

/// The write-free phase of one StatefulSet: finish an earlier intent for it (that intent's
/// own work, decided before this converge), read, decide, prove, pre-flight.
async fn prepare_one<'a, C: Cluster, J: Journal>(
    cluster: &'a C,
    journal: &'a J,
    desired: &StatefulSet,
    options: &'a Options,
) -> Result<Prepared<'a, C, J>, ConvergeError> {
    let (namespace, name) = identity(desired)?;
    let run = Run::new(cluster, journal, &namespace, &name, options);
    let mut report = Report::new(&namespace, &name, options.dry_run);
    let desired = clean_desired(desired);

    let t = Instant::now();
    if options.dry_run {
        // Only say that a real run would first finish an earlier intent.
        match journal.load(&namespace, &name).await {
            Ok(Some(intent)) if run.refusal_of(&intent).is_some() => {
                report.refused_intent = run.refusal_of(&intent);
            }
            Ok(found) => {
                report.resumed = found.map(|intent| ResumeReport {
                    action: ResumeAction::Pending,
                    recorded_uid: intent.uid,
                    recorded_at: intent.recorded_at,
                    revision: intent.revision,
                    report: None,
                });
            }
            Err(e) => match Unreadable::of(&e) {
                Some(unreadable) => report.unreadable_intent = Some(unreadable),
                None => return Err(run.journal_err(Step::Resume)(e)),
            },
        }
    } else {
        match run.resume().await? {
            Ok(resumed) => report.resumed = resumed,
            Err(Skipped::Unreadable(unreadable)) => report.unreadable_intent = Some(unreadable),
            Err(Skipped::Refused(refused)) => report.refused_intent = Some(refused),
        }
    }
    report.timed(Step::Resume, t.elapsed());

    // A watched copy is decided on only where no resume just changed the object.
    let t = Instant::now();
    let watched = if report.resumed.is_none() {
        cluster.watched_statefulset(&namespace, &name)
    } else {
        None
    };
    let mut from_watch = watched.is_some();
    let mut live = match watched {
        Some(copy) => Some(copy),
        None => cluster
            .get_statefulset(&namespace, &name)
            .await
            .map_err(run.call_err(Step::Read))?,
    };
    report.timed(Step::Read, t.elapsed());
    let work = loop {
        let Some(object) = live else {
            report.outcome = Outcome::Absent;
            break None;
        };
        match run
            .prepare(&desired, object, from_watch, &mut report, None)
            .await?
        {
            Prep::Work(work) => break work,
            Prep::Stale => {
                from_watch = false;
                let t = Instant::now();
                live = cluster
                    .get_statefulset(&namespace, &name)
                    .await
                    .map_err(run.call_err(Step::Read))?;
                report.timed(Step::Read, t.elapsed());
            }
        }
    };
    Ok(Prepared {
        run,
        desired,
        report,
        work,
    })
}

/// The write phase of one prepared StatefulSet, then the intent cleared.
async fn write_one<C: Cluster, J: Journal>(
    prepared: Prepared<'_, C, J>,
) -> Result<Report, ConvergeError> {
    let Prepared {
        run,
        desired,
        mut report,
        work,
    } = prepared;
    if let Some(work) = work {
        run.write(&desired, work, &mut report, None).await?;
    }
    if run.intent_kept.load(Ordering::SeqCst) {
        let t = Instant::now();
        run.clear().await?;
        report.timed(Step::Clear, t.elapsed());
    }
    Ok(report)
}

/// "not written: StatefulSet NS/NAME of the same revision was refused" (or "failed").
fn held_message(desired: &StatefulSet, what: &str) -> String {
    format!(
        "not written: StatefulSet {}/{} of the same revision {what}",
        desired.metadata.namespace.as_deref().unwrap_or_default(),
        desired.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A prepared report turned into "held": what it planned stays in it, but no claim reads as
/// grown (nothing was written).
fn held(mut report: Report, why: &str) -> Report {
    info!(statefulset = %report.name, namespace = %report.namespace, reason = why, "held");
    report.outcome = Outcome::Held;
    report.held_by = Some(why.to_string());
    for c in &mut report.claims {
        if c.action == ClaimAction::Resized {
            c.action = ClaimAction::WouldResize;
        }
    }
    report
}

/// Converges a set of StatefulSets (one revision, one file) all or nothing: each is first
/// prepared (an earlier intent for it finished, read, decided, proven, pre-flighted); if any
/// is refused or fails there, none is written and every other one is [`Outcome::Held`].
/// Otherwise each is written in turn; if one's writes fail, the ones not yet started are held
/// and its error is returned in its place. One result per desired object, in order.
pub async fn converge_all<C: Cluster, J: Journal>(
    cluster: &C,
    journal: &J,
    desired: &[StatefulSet],
    options: &Options,
) -> Vec<Result<Report, ConvergeError>> {
    use tracing::Instrument as _;
    let spans: Vec<tracing::Span> = desired.iter().map(statefulset_span).collect();
    let mut prepared = Vec::with_capacity(desired.len());
    for (d, span) in desired.iter().zip(&spans) {
        prepared.push(
            prepare_one(cluster, journal, d, options)
                .instrument(span.clone())
                .await,
        );
    }
    let blocker = prepared.iter().zip(desired).find_map(|(p, d)| match p {
        Err(_) => Some(held_message(d, "failed")),
        Ok(p) if p.report.outcome == Outcome::Refused => Some(held_message(d, "was refused")),
        Ok(_) => None,
    });
    if let Some(why) = blocker {
        return prepared
            .into_iter()
            .map(|p| match p {
                Err(e) => Err(e),
                Ok(p) if p.report.outcome == Outcome::Refused => Ok(p.report),
                Ok(p) => Ok(held(p.report, &why)),
            })
            .collect();
    }
    let mut results = Vec::with_capacity(prepared.len());
    let mut stopped: Option<String> = None;
    for ((p, d), span) in prepared.into_iter().zip(desired).zip(spans) {
        let p = match p {
            Ok(p) => p,
            Err(e) => {
                results.push(Err(e));
                continue;
            }
        };
        if let Some(why) = &stopped {
            results.push(Ok(held(p.report, why)));
            continue;
        }
        let written = write_one(p).instrument(span).await;
        if written.is_err() {
            stopped = Some(held_message(d, "failed"));
        }
        results.push(written);
    }
    results
}

/// The span one StatefulSet's converge runs in: every event inside it, the wire's request
/// trace included (`crate::wire`), carries `statefulset = namespace/name`.
fn statefulset_span(desired: &StatefulSet) -> tracing::Span {
    let namespace = desired.metadata.namespace.as_deref().unwrap_or_default();
    let name = desired.metadata.name.as_deref().unwrap_or_default();
    tracing::info_span!("converge", statefulset = %format!("{namespace}/{name}"))
}

/// Converges one StatefulSet to `desired` (namespace and name set): first finishes an
/// unfinished intent for it, then decides, proves, pre-flights the re-create and, when there
/// is something to do, grows claims and, when the plan carries an immutable change the server
/// will not take in place, records the intent, orphan-deletes, waits and re-applies. The set of one of [`converge_all`].
///
/// A refusal is a report with [`Outcome::Refused`]: nothing was written for it. A converge
/// with nothing to do writes nothing, not even the journal.
pub async fn converge<C: Cluster, J: Journal>(
    cluster: &C,
    journal: &J,
    desired: &StatefulSet,
    options: &Options,
) -> Result<Report, ConvergeError> {
    let one = converge_all(cluster, journal, std::slice::from_ref(desired), options).await;
    // `converge_all` answers once per desired object; the fallback is never reached.
    one.into_iter().next().unwrap_or_else(|| {
        Err(ConvergeError::Invalid {
            what: "StatefulSet".into(),
            message: "the converge returned no result".into(),
        })
    })
}

/// An intent [`resume_all`] did not finish (it is not what it says, the identity it was
/// recorded under cannot be used, or its StatefulSet is absent and no render says it is still
/// wanted): it stays in the journal.
pub type NotResumed = RefusedIntent;

/// What [`resume_all`] found and did.
#[derive(Debug, Default)]
pub struct Resumed {
    /// Each intent's StatefulSet `(namespace, name)` and what finishing it took.
    #[allow(clippy::type_complexity)]
    pub results: Vec<(String, String, Result<ResumeReport, ConvergeError>)>,
    /// Records with the intent label that do not parse: skipped, each named once.
    pub unreadable: Vec<Unreadable>,
    /// Intents left in the journal: not what they say, their identity cannot be used, or
    /// their StatefulSet absent with no render at hand that still has it.
    pub not_resumed: Vec<NotResumed>,
}

/// Finishes every unfinished intent in the journal (on start), each under the cluster
/// `cluster_for` gives for it (the identity it was recorded under, checked by the caller
/// against the one its Kustomization uses now): an intent it has no cluster for, one whose
/// record, StatefulSet and desired object disagree, and one whose StatefulSet is absent and
/// not in [`Options::renders`] are reported in [`Resumed::not_resumed`] and kept. Each
/// StatefulSet is resumed on its own, and one failing (or one unreadable record) does not
/// stop the others.
pub async fn resume_all<C, J, F, Fut>(
    cluster_for: F,
    journal: &J,
    options: &Options,
) -> Result<Resumed, JournalError>
where
    C: Cluster,
    J: Journal,
    F: Fn(&Intent) -> Fut,
    Fut: Future<Output = Result<C, String>>,
{
    let listing = journal.list().await?;
    // The caller reports them (`Resumed::unreadable`), once each: debug only here.
    for u in &listing.unreadable {
        debug!(record = %u.object, message = %u.message, "unreadable journal record: skipped");
    }
    for r in &listing.refused {
        warn!(statefulset = %r.name, namespace = %r.namespace, record = %r.object,
              act_as = r.act_as.as_deref().unwrap_or_default(), reason = %r.reason,
              "not resuming an intent that is not what it says; kept in the journal");
    }
    let mut resumed = Resumed {
        results: Vec::with_capacity(listing.intents.len()),
        unreadable: listing.unreadable,
        not_resumed: listing.refused,
    };
    for intent in listing.intents {
        let record = format!(
            "intent {}",
            intent_record_name(&intent.namespace, &intent.name)
        );
        let not_resumed = |intent: &Intent, reason: String| NotResumed {
            object: record.clone(),
            namespace: intent.namespace.clone(),
            name: intent.name.clone(),
            act_as: intent.act_as.clone(),
            reason,
        };
        // The journal checked the record's name; the desired object is checked here too, as
        // every journal's listing may not.
        if let Some(reason) = inconsistency(
            &intent_record_name(&intent.namespace, &intent.name),
            &intent,
        ) {
            warn!(statefulset = %intent.name, namespace = %intent.namespace, %reason,
                  "not resuming an intent that is not what it says; kept in the journal");
            resumed.not_resumed.push(not_resumed(&intent, reason));
            continue;
        }
        let cluster = match cluster_for(&intent).await {
            Ok(cluster) => cluster,
            Err(reason) => {
                warn!(statefulset = %intent.name, namespace = %intent.namespace,
                      act_as = intent.act_as.as_deref().unwrap_or_default(), %reason,
                      "not resuming an intent: its identity cannot be used; kept in the journal");
                resumed.not_resumed.push(not_resumed(&intent, reason));
                continue;
            }
        };
        let run = Run::new(&cluster, journal, &intent.namespace, &intent.name, options);
        run.intent_kept.store(true, Ordering::SeqCst);
        let (namespace, name) = (intent.namespace.clone(), intent.name.clone());
        let rendered = options
            .renders
            .as_ref()
            .is_some_and(|r| r.contains(&(namespace.clone(), name.clone())));
        let kept = not_resumed(
            &intent,
            format!(
                "StatefulSet {namespace}/{name} is absent and its intent says our delete was \
                 sent, but no render at hand still has it (someone may have pruned it since): \
                 not re-created; the next converge of its Kustomization finishes it, or delete \
                 the intent"
            ),
        );
        match Box::pin(run.finish(intent, rendered)).await {
            Ok(report) if report.action == ResumeAction::NotRendered => {
                resumed.not_resumed.push(kept);
            }
            result => resumed.results.push((namespace, name, result)),
        }
    }
    Ok(resumed)
}

/// The desired object as it is sent: server-owned fields (`status`, uid, resourceVersion,
/// managedFields, timestamps) removed, so a desired file exported from a cluster still applies.
/// `plan -o commands` re-applies with it too, so the manual procedure sends the same object.
pub fn clean_desired(desired: &StatefulSet) -> StatefulSet {
    let mut d = desired.clone();
    d.status = None;
    let m = &mut d.metadata;
    m.uid = None;
    m.resource_version = None;
    m.managed_fields = None;
    m.creation_timestamp = None;
    m.deletion_timestamp = None;
    m.deletion_grace_period_seconds = None;
    m.generation = None;
    d
}

#[cfg(test)]
mod memory;
#[cfg(test)]
mod tests;
