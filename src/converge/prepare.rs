//! The write-free phase over a live object: decide → prove → pre-flight. Nothing here writes,
//! so a set can prepare every StatefulSet before it writes any.

use std::time::Instant;

use k8s_openapi::api::apps::v1::StatefulSet;
use tracing::{debug, info};

use super::error::ConvergeError;
use super::report::{self, Outcome, Report, Step};
use super::run::Run;
use super::work::{Planned, Prep, Work};
use super::{preflight, prove};
use crate::cluster::Cluster;
use crate::decide::{AttributeClasses, KnownStates, Refusal, RefusalCode, decide_in};
use crate::journal::{Intent, Journal};

impl<C: Cluster, J: Journal> Run<'_, C, J> {
    /// The write-free phase over a live object: decide → prove → pre-flight. `Work(None)` when
    /// there is nothing to write (refused, unchanged, a dry run); `Work(Some)` is what the
    /// write phase does. `watched`: `live` is a watched copy ([`Cluster::watched_statefulset`]),
    /// which the proof's answer must confirm, else `Stale`. `resuming`: the intent already in
    /// the journal (and a terminating object is ours).
    pub(super) async fn prepare(
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
        let known = self.known_states(resuming);
        let unchecked = AttributeClasses::Unchecked;
        let mut decided = decide_in(desired, Some(&live), &claims, &classes, &known, &unchecked);
        report.timed(Step::Decide, t.elapsed());
        // A move to another VolumeAttributesClass: whether the server serves the API and the
        // class exists is read now (discovery, then the class), before anything is written,
        // and decided on. Nothing is read when no class moves.
        if let Ok(plan) = &decided
            && !plan.attribute_classes.is_empty()
        {
            let t = Instant::now();
            let known_classes = self
                .cluster
                .attribute_classes(&plan.attribute_classes)
                .await
                .map_err(self.call_err(Step::Read))?;
            report.timed(Step::Read, t.elapsed());
            decided = decide_in(
                desired,
                Some(&live),
                &claims,
                &classes,
                &known,
                &known_classes,
            );
        }
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

        // A recovery lowers requests, which only a server with RecoverVolumeExpansionFailure
        // (1.32+) takes: ask it for each claim now, while nothing is written.
        if let Some(verdict) = self.prove_recovery(&plan, &claims, report).await? {
            return Ok(Prep::Work(verdict));
        }
        if !self.options.dry_run {
            report.volumes = report::volumes(desired, &claims, &plan, jiff::Timestamp::now());
        }

        if plan.resize.is_empty()
            && plan.recover.is_empty()
            && plan.modify.is_empty()
            && !plan.recreate
        {
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

    /// What is known of the claims' last expansions besides their status: the caller's
    /// (the service's records) for this namespace, and, when finishing an intent of a
    /// recovery, its claims as `recovered` (their requests may already be lowered).
    fn known_states(&self, resuming: Option<&Intent>) -> KnownStates {
        let prefix = format!("{}/", self.namespace);
        let mut known: KnownStates = self
            .options
            .known_states
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), *v)))
            .collect();
        if let Some(recover) = resuming
            .and_then(|i| i.plan.get("recover"))
            .and_then(|r| r.as_array())
        {
            for claim in recover.iter().filter_map(|r| r["claim"].as_str()) {
                known
                    .entry(claim.to_string())
                    .or_insert(crate::volume::VolumeState::Recovered);
            }
        }
        known
    }

    /// The dry run of each lowering a recovery plans: `Some(None)` when the server refuses one
    /// (the refusal `recovery-unsupported` is in `report`), `None` when all pass.
    async fn prove_recovery(
        &self,
        plan: &crate::decide::Plan,
        claims: &[k8s_openapi::api::core::v1::PersistentVolumeClaim],
        report: &mut Report,
    ) -> Result<Option<Option<Work>>, ConvergeError> {
        let (ns, name) = (self.namespace.as_str(), self.name.as_str());
        for r in plan.recover.iter().filter(|r| r.from != r.to) {
            // Conditional on the version decided on, as the lowering itself will be.
            let version = claims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(r.claim.as_str()))
                .and_then(|c| c.metadata.resource_version.clone())
                .unwrap_or_default();
            let t = Instant::now();
            let answer = self
                .cluster
                .resize_claim_dry_run(ns, &r.claim, r.to.as_str(), &version)
                .await;
            report.timed(Step::Prove, t.elapsed());
            match answer {
                Ok(()) => {}
                Err(e) if e.code() == Some(422) => {
                    let refusal = Refusal {
                        namespace: ns.to_string(),
                        name: name.to_string(),
                        code: RefusalCode::RecoveryUnsupported,
                        message: format!(
                            "claim {:?}: its expansion to {} failed ({}), and git declares {} \
                             (above its capacity {}), but the API server refuses to lower its \
                             request: \"{}\"; recovering from a failed expansion needs \
                             Kubernetes 1.32 or later (RecoverVolumeExpansionFailure): nothing \
                             was written; declare {} again in git and fix what refused the \
                             expansion, or upgrade the control plane",
                            r.claim,
                            r.from,
                            r.state,
                            r.to,
                            r.capacity,
                            e.server_text(),
                            r.from
                        ),
                    };
                    report.claims.clear();
                    refuse(report, &refusal);
                    return Ok(Some(None));
                }
                Err(e) => return Err(self.call_err(Step::Prove)(e)),
            }
        }
        Ok(None)
    }

    /// A proof's dry run that did not pass: a refusal (nothing written), or an error.
    pub(super) fn not_proven(
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
}

fn refuse(report: &mut Report, refusal: &Refusal) {
    info!(statefulset = %refusal.name, namespace = %refusal.namespace,
          code = %refusal.code, message = %refusal.message, "refused");
    report.refused(refusal);
    // Nothing is written for a refused StatefulSet: nothing of it to follow.
    report.volumes.clear();
}
