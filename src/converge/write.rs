//! The write phase of one StatefulSet: [fence] → grow → [fence] → [record] → orphan → wait →
//! re-apply, in the order that keeps data safe (docs/converge.md).

use std::sync::atomic::Ordering;
use std::time::Instant;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use tracing::{info, warn};

use super::error::ConvergeError;
use super::fence;
use super::report::{ClaimAction, Outcome, Report, Step};
use super::run::Run;
use super::work::{Grow, Planned, Work};
use crate::cluster::{ClaimPatch, Cluster, DeleteOutcome, WaitOutcome, is_conflict};
use crate::decide::{Plan, decide, declares_desired_sizes};
use crate::journal::{Intent, Journal, OWN_IDENTITY};

/// How many times one claim's grow is re-read and decided again after a 409 before the
/// converge gives up (someone writing the claim that often is a fight, not a race).
pub const MAX_CLAIM_CONFLICTS: usize = 5;

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

impl<C: Cluster, J: Journal> Run<'_, C, J> {
    /// The write phase of one StatefulSet: [fence] → grow → [fence] → [record] → orphan →
    /// wait → re-apply.
    pub(super) async fn write(
        &self,
        desired: &StatefulSet,
        work: Work,
        report: &mut Report,
        resuming: Option<&Intent>,
    ) -> Result<(), ConvergeError> {
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

        if !plan.resize.is_empty() || !plan.recover.is_empty() || !plan.modify.is_empty() {
            self.fenced(Step::Grow)?;
        }
        if !plan.recover.is_empty() && resuming.is_none() {
            // A recovery writes the claims first, and a converge stopped after lowering them
            // must still know it is one (the live template still declares the failed size):
            // the intent, not yet `deleting`, says which claims it lowers.
            let t = Instant::now();
            self.writing();
            self.journal
                .record(&self.intent(desired, &uid, &plan, None, false))
                .await
                .map_err(self.journal_err(Step::Record))?;
            self.intent_kept.store(true, Ordering::SeqCst);
            report.timed(Step::Record, t.elapsed());
        }
        let t = Instant::now();
        self.lower(&plan, &claims, report).await?;
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
            let intent = self.intent(desired, &uid, &plan, resuming, true);
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

    /// The intent of this converge: the desired object, the uid it deletes, the plan, what
    /// it applies for and as whom (kept from the intent being finished, if any).
    fn intent(
        &self,
        desired: &StatefulSet,
        uid: &str,
        plan: &Plan,
        resuming: Option<&Intent>,
        deleting: bool,
    ) -> Intent {
        Intent {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: uid.to_string(),
            desired: desired.clone(),
            plan: serde_json::to_value(plan).unwrap_or(serde_json::Value::Null),
            recorded_at: jiff::Timestamp::now().to_string(),
            revision: resuming
                .and_then(|i| i.revision.clone())
                .or_else(|| self.options.revision.clone()),
            deleting,
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
        }
    }

    /// Lowers each claim a recovery plans to the declared size, from the version it was
    /// decided on (its dry run passed in the write-free phase). A 409 means the claim changed
    /// since: read again, it is lowered from its new version only while it still asks for
    /// more than the declared size and holds less; otherwise it is left as it is.
    async fn lower(
        &self,
        plan: &Plan,
        claims: &[PersistentVolumeClaim],
        report: &mut Report,
    ) -> Result<(), ConvergeError> {
        let ns = self.namespace.as_str();
        for r in plan.recover.iter().filter(|r| r.from != r.to) {
            let mut version = claims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(r.claim.as_str()))
                .and_then(|c| c.metadata.resource_version.clone())
                .unwrap_or_default();
            let mut conflicts = 0;
            loop {
                info!(statefulset = %self.name, namespace = %ns, claim = %r.claim,
                      from = r.from.as_str(), to = r.to.as_str(), capacity = r.capacity.as_str(),
                      resource_version = %version, "lowering a failed claim's request (recovery)");
                self.writing();
                let lowered = self
                    .cluster
                    .patch_claim(ns, &r.claim, &ClaimPatch::storage(r.to.as_str()), &version)
                    .await;
                match lowered {
                    Ok(()) => break,
                    Err(e) if is_conflict(&e) && conflicts < MAX_CLAIM_CONFLICTS => {}
                    Err(e) => return Err(self.call_err(Step::Grow)(e)),
                }
                conflicts += 1;
                let fresh = self
                    .cluster
                    .get_claim(ns, &r.claim)
                    .await
                    .map_err(self.call_err(Step::Grow))?;
                let still = fresh.as_ref().is_some_and(|c| {
                    crate::volume::requested(c).is_some_and(|q| q > r.to)
                        && crate::volume::capacity(c).is_some_and(|q| q < r.to)
                });
                match fresh {
                    Some(c) if still => {
                        version = c.metadata.resource_version.clone().unwrap_or_default();
                    }
                    _ => {
                        warn!(statefulset = %self.name, namespace = %ns, claim = %r.claim,
                              "claim changed meanwhile: no longer one to lower, left as it is");
                        report.claim_outcome(
                            &r.claim,
                            ClaimAction::Skipped,
                            None,
                            None,
                            Some(
                                "changed by someone else while the converge ran: left as it is"
                                    .into(),
                            ),
                        );
                        report.volumes.retain(|v| v.claim != r.claim);
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Grows each claim of the plan, and moves each to its template's VolumeAttributesClass,
    /// from the version it was decided on: one merge patch per claim, both changes together
    /// when it has both. A 409 means the claim changed since the read (an operator, a volume
    /// autoscaler): it is read again and decided again, so a request raised meanwhile is left
    /// as it is, never lowered, and a class someone else moved it to is not moved back.
    pub(super) async fn grow(
        &self,
        on: &Grow<'_>,
        plan: &Plan,
        report: &mut Report,
    ) -> Result<(), ConvergeError> {
        let ns = self.namespace.as_str();
        let mut names: Vec<&str> = plan
            .resize
            .iter()
            .map(|r| r.claim.as_str())
            .chain(plan.modify.iter().map(|m| m.claim.as_str()))
            .collect();
        names.sort_unstable();
        names.dedup();
        for claim in names {
            let resize = plan.resize.iter().find(|r| r.claim == claim);
            let modify = plan.modify.iter().find(|m| m.claim == claim);
            let mut version = on
                .claims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(claim))
                .and_then(|c| c.metadata.resource_version.clone())
                .unwrap_or_default();
            let mut sizes = resize.map(|r| (r.from.clone(), r.to.clone()));
            let mut class = modify.map(|m| m.to.clone());
            let mut conflicts = 0;
            loop {
                let patch = ClaimPatch {
                    storage: sizes.as_ref().map(|(_, to)| to.as_str().to_string()),
                    attributes_class: class.clone(),
                };
                info!(statefulset = %self.name, namespace = %ns, claim,
                      from = sizes.as_ref().map(|(f, _)| f.as_str()).unwrap_or_default(),
                      to = sizes.as_ref().map(|(_, t)| t.as_str()).unwrap_or_default(),
                      volume_attributes_class = class.as_deref().unwrap_or_default(),
                      resource_version = %version, "growing claim");
                self.writing();
                let patched = self.cluster.patch_claim(ns, claim, &patch, &version).await;
                let conflict = match patched {
                    Ok(()) => {
                        match &sizes {
                            Some((from, to)) => report.claim_outcome(
                                claim,
                                ClaimAction::Resized,
                                Some(from.as_str().to_string()),
                                Some(to.as_str().to_string()),
                                None,
                            ),
                            None => {
                                report.claim_outcome(claim, ClaimAction::Modified, None, None, None)
                            }
                        }
                        if class.is_none() {
                            report.class_left(claim);
                        }
                        break;
                    }
                    Err(e) if is_conflict(&e) && conflicts < MAX_CLAIM_CONFLICTS => e,
                    Err(e) => return Err(self.call_err(Step::Grow)(e)),
                };
                conflicts += 1;
                let fresh = self
                    .cluster
                    .get_claim(ns, claim)
                    .await
                    .map_err(self.call_err(Step::Grow))?;
                let Some(fresh) = fresh else {
                    warn!(statefulset = %self.name, namespace = %ns, claim,
                          "claim deleted by someone else meanwhile: not growing it");
                    report.claim_outcome(
                        claim,
                        ClaimAction::Skipped,
                        None,
                        None,
                        Some("deleted by someone else while the converge ran".into()),
                    );
                    report.class_left(claim);
                    report.volumes.retain(|v| v.claim != claim);
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
                        warn!(statefulset = %self.name, namespace = %ns, claim,
                              message = %refusal.message, "claim changed meanwhile and is now refused");
                        return Err(self.call_err(Step::Grow)(conflict));
                    }
                };
                let now = claim_request(&fresh);
                let next_size = again.resize.into_iter().next();
                let next_class = again.modify.into_iter().next();
                if next_size.is_some() || next_class.is_some() {
                    info!(statefulset = %self.name, namespace = %ns, claim,
                          "claim changed meanwhile: decided again on the version read now");
                    version = fresh.metadata.resource_version.clone().unwrap_or_default();
                    sizes = next_size.map(|r| (r.from, r.to));
                    class = next_class.map(|m| m.to);
                    continue;
                }
                // What the claim asks for now is what is followed (if anything is).
                let attributes = report
                    .volumes
                    .iter()
                    .find(|v| v.claim == claim)
                    .and_then(|v| v.attributes.clone());
                report.volumes.retain(|v| v.claim != claim);
                if crate::volume::is_growing(&fresh) || attributes.is_some() {
                    report.volumes.push(crate::volume::Volume {
                        attributes,
                        ..crate::volume::Volume::observed(
                            claim,
                            crate::volume::classify(&fresh, &[], None),
                            jiff::Timestamp::now(),
                        )
                    });
                    report.volumes.sort_by(|a, b| a.claim.cmp(&b.claim));
                }
                let to = sizes
                    .as_ref()
                    .map(|(_, to)| to.to_string())
                    .unwrap_or_default();
                if let Some(d) = again.deferred.into_iter().next() {
                    report.claim_outcome(claim, ClaimAction::Deferred, now, None, Some(d.reason));
                } else if sizes.is_some() {
                    info!(statefulset = %self.name, namespace = %ns, claim,
                          request = now.as_deref().unwrap_or_default(),
                          "claim raised by someone else meanwhile: left as it is");
                    report.claim_outcome(
                        claim,
                        ClaimAction::Skipped,
                        now,
                        None,
                        Some(format!(
                            "raised by someone else to at least {to} while the converge ran: \
                             left as it is, never lowered"
                        )),
                    );
                } else {
                    info!(statefulset = %self.name, namespace = %ns, claim,
                          "claim moved to the declared VolumeAttributesClass by someone else meanwhile: left as it is");
                    report.claim_outcome(
                        claim,
                        ClaimAction::Skipped,
                        now,
                        None,
                        Some(
                            "moved to the declared VolumeAttributesClass by someone else while \
                             the converge ran: left as it is"
                                .into(),
                        ),
                    );
                }
                report.class_left(claim);
                break;
            }
        }
        Ok(())
    }

    /// orphan → wait → re-apply. `ours_in_flight`: the object was seen terminating while an
    /// intent of ours says our delete was sent, so "already gone" is our delete's doing.
    /// `window`: the delete's window, when the caller opened it (before recording the intent).
    pub(super) async fn recreate(
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
    pub(super) async fn replaced(
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
}
