//! Converging one StatefulSet against a cluster (DESIGN.md §2): decide → prove → grow →
//! orphan-delete → wait → re-apply, with an intent in the journal so that a run interrupted
//! anywhere is finished by the next one.
//!
//! The order of the writes is what keeps data safe: claims grow while the old StatefulSet
//! still owns its pods; the delete orphans (pods and claims stay) and carries the uid it
//! decided on (a StatefulSet re-created by someone else is never deleted); the intent holding
//! the desired object is written before the first write and cleared after the last, so a
//! crash between delete and re-apply is healed by re-applying from the journal.

pub mod prove;
pub mod report;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use tracing::{info, warn};

use crate::cluster::{CallError, Cluster, DeleteOutcome, WaitOutcome};
use crate::decide::{Plan, Refusal, decide};
use crate::journal::{Intent, Journal, JournalError};

pub use report::{
    ClaimAction, ClaimReport, Outcome, RefusalReport, Report, ResumeAction, ResumeReport, Step,
    StepTiming,
};

/// Knobs of one converge.
#[derive(Clone, Debug)]
pub struct Options {
    /// Decide and prove only; write nothing (not even the journal, nor a resume).
    pub dry_run: bool,
    /// How long the orphan delete may take (the garbage collector removes the finalizer).
    pub wait_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dry_run: false,
            wait_timeout: Duration::from_secs(120),
        }
    }
}

/// Why a converge stopped. Each message names the step, the object and the server's words,
/// and says whether anything was written; re-running the converge finishes the work.
#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    #[error("step {step} of StatefulSet {namespace}/{name} failed: {cause}; {}", hint(*step))]
    Call {
        step: Step,
        namespace: String,
        name: String,
        // Not a `source`: the message already carries it, and `{:#}` would print it twice.
        cause: CallError,
    },
    #[error("step {step} of StatefulSet {namespace}/{name} failed: {cause}; {}", hint(*step))]
    Journal {
        step: Step,
        namespace: String,
        name: String,
        cause: JournalError,
    },
    #[error(
        "StatefulSet {namespace}/{name} is being deleted by someone else (no intent of ours): \
         nothing was written; run converge again once it is gone"
    )]
    Terminating { namespace: String, name: String },
    #[error("desired object {what}: {message}")]
    Invalid { what: String, message: String },
}

fn hint(step: Step) -> &'static str {
    if step.before_writes() {
        "nothing was written: run converge again to retry"
    } else {
        "the intent is kept in the journal: run converge again to finish the work"
    }
}

impl ConvergeError {
    /// The step that failed, when the failure is in one.
    pub fn step(&self) -> Option<Step> {
        match self {
            ConvergeError::Call { step, .. } | ConvergeError::Journal { step, .. } => Some(*step),
            _ => None,
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

/// One converge's context: the StatefulSet and where timings go.
struct Run<'a, C, J> {
    cluster: &'a C,
    journal: &'a J,
    namespace: String,
    name: String,
    options: &'a Options,
}

impl<C: Cluster, J: Journal> Run<'_, C, J> {
    fn call_err(&self, step: Step) -> impl FnOnce(CallError) -> ConvergeError + '_ {
        move |cause| ConvergeError::Call {
            step,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            cause,
        }
    }

    fn journal_err(&self, step: Step) -> impl FnOnce(JournalError) -> ConvergeError + '_ {
        move |cause| ConvergeError::Journal {
            step,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            cause,
        }
    }

    /// decide → prove → [record] → grow → orphan → wait → re-apply, over a live object.
    /// `resuming`: the intent is already in the journal (and a terminating object is ours).
    async fn procedure(
        &self,
        desired: &StatefulSet,
        live: StatefulSet,
        report: &mut Report,
        resuming: bool,
    ) -> Result<(), ConvergeError> {
        let (ns, name) = (self.namespace.as_str(), self.name.as_str());
        let uid = live.metadata.uid.clone().unwrap_or_default();
        report.old_uid = Some(uid.clone());

        if live.metadata.deletion_timestamp.is_some() {
            if !resuming {
                return Err(ConvergeError::Terminating {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                });
            }
            // Our own delete was issued (claims were grown before it): carry on from the delete,
            // which also turns someone else's cascading delete into an orphaning one.
            report.outcome = Outcome::Converged;
            return self.recreate(desired, &uid, report).await;
        }

        let t = Instant::now();
        let (claims, classes) = futures::try_join!(
            self.cluster.list_claims(ns),
            self.cluster.list_storage_classes()
        )
        .map_err(self.call_err(Step::Read))?;
        report.timed(Step::Read, t.elapsed());

        let t = Instant::now();
        let decided = decide(desired, Some(&live), &claims, &classes);
        report.timed(Step::Decide, t.elapsed());
        let plan = match decided {
            Ok(plan) => plan,
            Err(refusal) => {
                refuse(report, &refusal);
                return Ok(());
            }
        };
        report.claims = report::claim_reports(desired, &claims, &plan, self.options.dry_run);
        report.plan = Some(plan.clone());

        let t = Instant::now();
        let proof = prove::proof_object(desired, &live);
        let proved = self.cluster.dry_run_apply(&proof).await;
        report.timed(Step::Prove, t.elapsed());
        if let Err(e) = proved {
            match prove::classify(ns, name, e) {
                prove::Verdict::Refused(refusal) => {
                    report.claims.clear();
                    refuse(report, &refusal);
                    return Ok(());
                }
                prove::Verdict::Failed(e) => return Err(self.call_err(Step::Prove)(e)),
            }
        }

        if plan.resize.is_empty() && !plan.recreate {
            report.outcome = Outcome::Unchanged;
            return Ok(());
        }
        if self.options.dry_run {
            report.outcome = Outcome::Proven;
            return Ok(());
        }

        if !resuming {
            let t = Instant::now();
            let intent = Intent {
                namespace: ns.to_string(),
                name: name.to_string(),
                uid: uid.clone(),
                desired: desired.clone(),
                plan: serde_json::to_value(&plan).unwrap_or(serde_json::Value::Null),
                recorded_at: jiff::Timestamp::now().to_string(),
            };
            self.journal
                .record(&intent)
                .await
                .map_err(self.journal_err(Step::Record))?;
            report.timed(Step::Record, t.elapsed());
        }

        let t = Instant::now();
        self.grow(&plan).await?;
        report.timed(Step::Grow, t.elapsed());
        report.outcome = Outcome::Converged;
        if plan.recreate {
            self.recreate(desired, &uid, report).await?;
        }
        Ok(())
    }

    async fn grow(&self, plan: &Plan) -> Result<(), ConvergeError> {
        for r in &plan.resize {
            info!(statefulset = %self.name, namespace = %self.namespace, claim = %r.claim,
                  from = r.from.as_str(), to = r.to.as_str(), "growing claim");
            self.cluster
                .resize_claim(&self.namespace, &r.claim, r.to.as_str())
                .await
                .map_err(self.call_err(Step::Grow))?;
        }
        Ok(())
    }

    /// orphan → wait → re-apply.
    async fn recreate(
        &self,
        desired: &StatefulSet,
        uid: &str,
        report: &mut Report,
    ) -> Result<(), ConvergeError> {
        let (ns, name) = (self.namespace.as_str(), self.name.as_str());
        info!(statefulset = %name, namespace = %ns, uid, "orphan-deleting");
        let t = Instant::now();
        let deleted = self
            .cluster
            .orphan_delete(ns, name, uid)
            .await
            .map_err(self.call_err(Step::Orphan))?;
        report.timed(Step::Orphan, t.elapsed());
        let version = match deleted {
            DeleteOutcome::UidMismatch { message } => {
                warn!(statefulset = %name, namespace = %ns, uid, %message,
                      "re-created by someone else meanwhile: not deleting it");
                report.outcome = Outcome::RecreatedElsewhere;
                return Ok(());
            }
            DeleteOutcome::Gone => None,
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
                report.outcome = Outcome::RecreatedElsewhere;
                return Ok(());
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

    /// Finishes the journal's intent for this StatefulSet, if there is one.
    async fn resume(&self) -> Result<Option<ResumeReport>, ConvergeError> {
        let (ns, name) = (self.namespace.as_str(), self.name.as_str());
        let Some(intent) = self
            .journal
            .load(ns, name)
            .await
            .map_err(self.journal_err(Step::Resume))?
        else {
            return Ok(None);
        };
        info!(statefulset = %name, namespace = %ns, uid = %intent.uid,
              recorded_at = %intent.recorded_at, "resuming an unfinished intent");
        let live = self
            .cluster
            .get_statefulset(ns, name)
            .await
            .map_err(self.call_err(Step::Resume))?;
        let mut resumed = ResumeReport {
            action: ResumeAction::Continued,
            recorded_uid: intent.uid.clone(),
            recorded_at: intent.recorded_at.clone(),
            report: None,
        };
        match live {
            None => {
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
            Some(live) if live.metadata.uid.as_deref() != Some(intent.uid.as_str()) => {
                resumed.action = ResumeAction::AlreadyRecreated;
            }
            Some(live) => {
                let mut inner = Report::new(ns, name, false);
                self.procedure(&intent.desired, live, &mut inner, true)
                    .await?;
                if inner.outcome == Outcome::Refused {
                    warn!(statefulset = %name, namespace = %ns,
                          refusal = ?inner.refusal, "recorded intent is now refused: dropping it");
                    resumed.action = ResumeAction::Abandoned;
                }
                resumed.report = Some(Box::new(inner));
            }
        }
        self.journal
            .clear(ns, name)
            .await
            .map_err(self.journal_err(Step::Clear))?;
        Ok(Some(resumed))
    }
}

fn refuse(report: &mut Report, refusal: &Refusal) {
    info!(statefulset = %refusal.name, namespace = %refusal.namespace,
          code = %refusal.code, message = %refusal.message, "refused");
    report.refused(refusal);
}

/// Converges one StatefulSet to `desired` (namespace and name set): first finishes an
/// unfinished intent for it, then decides, proves and, when there is something to do,
/// records the intent, grows claims, orphan-deletes, waits and re-applies.
///
/// A refusal is a report with [`Outcome::Refused`]: nothing was written for it. A converge
/// with nothing to do writes nothing, not even the journal.
pub async fn converge<C: Cluster, J: Journal>(
    cluster: &C,
    journal: &J,
    desired: &StatefulSet,
    options: &Options,
) -> Result<Report, ConvergeError> {
    let (namespace, name) = identity(desired)?;
    let run = Run {
        cluster,
        journal,
        namespace: namespace.clone(),
        name: name.clone(),
        options,
    };
    let mut report = Report::new(&namespace, &name, options.dry_run);
    let desired = clean_desired(desired);

    let t = Instant::now();
    if options.dry_run {
        // Only say that a real run would first finish an earlier intent.
        report.resumed = journal
            .load(&namespace, &name)
            .await
            .map_err(run.journal_err(Step::Resume))?
            .map(|intent| ResumeReport {
                action: ResumeAction::Pending,
                recorded_uid: intent.uid,
                recorded_at: intent.recorded_at,
                report: None,
            });
    } else {
        report.resumed = run.resume().await?;
    }
    report.timed(Step::Resume, t.elapsed());

    let t = Instant::now();
    let live = cluster
        .get_statefulset(&namespace, &name)
        .await
        .map_err(run.call_err(Step::Read))?;
    report.timed(Step::Read, t.elapsed());
    let Some(live) = live else {
        report.outcome = Outcome::Absent;
        return Ok(report);
    };
    run.procedure(&desired, live, &mut report, false).await?;
    if matches!(
        report.outcome,
        Outcome::Converged | Outcome::RecreatedElsewhere
    ) {
        let t = Instant::now();
        journal
            .clear(&namespace, &name)
            .await
            .map_err(run.journal_err(Step::Clear))?;
        report.timed(Step::Clear, t.elapsed());
    }
    Ok(report)
}

/// Finishes every unfinished intent in the journal (on start): each StatefulSet is resumed
/// on its own, and one failing does not stop the others. Yields `(namespace, name, result)`.
#[allow(clippy::type_complexity)]
pub async fn resume_all<C: Cluster, J: Journal>(
    cluster: &C,
    journal: &J,
    options: &Options,
) -> Result<Vec<(String, String, Result<Option<ResumeReport>, ConvergeError>)>, JournalError> {
    let intents = journal.list().await?;
    let mut results = Vec::with_capacity(intents.len());
    for intent in intents {
        let run = Run {
            cluster,
            journal,
            namespace: intent.namespace.clone(),
            name: intent.name.clone(),
            options,
        };
        let result = run.resume().await;
        results.push((intent.namespace, intent.name, result));
    }
    Ok(results)
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
