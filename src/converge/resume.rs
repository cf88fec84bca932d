//! Finishing what an earlier converge left in the journal: one StatefulSet's intent before its
//! converge, or every intent on start ([`resume_all`]).

use std::future::Future;
use std::sync::atomic::Ordering;

use k8s_openapi::api::apps::v1::StatefulSet;
use tracing::{debug, info, warn};

use super::error::ConvergeError;
use super::options::Options;
use super::report::{Outcome, Report, ResumeAction, ResumeReport, Step};
use super::run::Run;
use super::work::Prep;
use crate::cluster::Cluster;
use crate::journal::{
    Intent, Journal, JournalError, OWN_IDENTITY, RefusedIntent, Unreadable, inconsistency,
    intent_record_name,
};

/// Why a converge did not resume the intent it found for its StatefulSet.
pub(super) enum Skipped {
    Unreadable(Unreadable),
    Refused(RefusedIntent),
}

impl<C: Cluster, J: Journal> Run<'_, C, J> {
    /// prepare, then write: one StatefulSet on its own (a resume's continued procedure).
    pub(super) async fn procedure(
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

    /// Why the journal's intent for this StatefulSet is not resumed by this converge, if it is
    /// not: its record, StatefulSet and desired object disagree, or (unless the caller is an
    /// operator) it was recorded under another identity than this converge acts as, which is
    /// the one its Kustomization uses now.
    pub(super) fn refusal_of(&self, intent: &Intent) -> Option<RefusedIntent> {
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
    pub(super) async fn resume(
        &self,
    ) -> Result<Result<Option<ResumeReport>, Skipped>, ConvergeError> {
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
    pub(super) async fn finish(
        &self,
        intent: Intent,
        rendered: bool,
    ) -> Result<ResumeReport, ConvergeError> {
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

    pub(super) async fn clear(&self) -> Result<(), ConvergeError> {
        self.writing();
        self.journal
            .clear(&self.namespace, &self.name)
            .await
            .map_err(self.journal_err(Step::Clear))?;
        self.intent_kept.store(false, Ordering::SeqCst);
        Ok(())
    }
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
pub async fn resume_all<C, J, F, Fut, E>(
    cluster_for: F,
    journal: &J,
    options: &Options,
) -> Result<Resumed, JournalError>
where
    C: Cluster,
    J: Journal,
    F: Fn(&Intent) -> Fut,
    Fut: Future<Output = Result<C, E>>,
    E: std::fmt::Display,
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
                resumed
                    .not_resumed
                    .push(not_resumed(&intent, reason.to_string()));
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
