//! What a converge did, for people (`-o text`) and programs (`-o json`, the service's status).

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::Serialize;

use crate::decide::{Plan, Refusal, RefusalCode};

/// The steps of docs/converge.md, plus the bookkeeping around them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Finishing an intent an earlier run left unfinished.
    Resume,
    /// Reading the StatefulSet, its namespace's claims and the StorageClasses.
    Read,
    Decide,
    Prove,
    /// The dry-run create of the object to re-apply, before the first write.
    Preflight,
    /// Recording the intent in the journal.
    Record,
    Grow,
    Orphan,
    Wait,
    Reapply,
    /// Clearing the intent from the journal.
    Clear,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Resume => "resume",
            Step::Read => "read",
            Step::Decide => "decide",
            Step::Prove => "prove",
            Step::Preflight => "preflight",
            Step::Record => "record",
            Step::Grow => "grow",
            Step::Orphan => "orphan",
            Step::Wait => "wait",
            Step::Reapply => "reapply",
            Step::Clear => "clear",
        }
    }

    /// Whether the step comes before any write of the procedure.
    pub fn before_writes(self) -> bool {
        matches!(
            self,
            Step::Read | Step::Decide | Step::Prove | Step::Preflight | Step::Record
        )
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepTiming {
    pub step: Step,
    pub millis: f64,
}

/// How a converge ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Claims grown and/or the StatefulSet recreated.
    Converged,
    /// Live already matches what can be converged; nothing was written.
    Unchanged,
    /// No live StatefulSet: Flux's apply creates it at the declared size.
    Absent,
    /// Refused (see `refusal`); nothing was written.
    Refused,
    /// Dry run: decided and proven, nothing written (`claims` says what would be grown).
    Proven,
    /// Someone else re-created the StatefulSet while we converged it (the orphan delete's
    /// uid precondition failed, or the wait saw a new uid), and the new object declares the
    /// desired sizes: converged, by them. Nothing of ours was applied over it.
    RecreatedElsewhere,
    /// Someone else replaced the StatefulSet while we converged it (as for
    /// `RecreatedElsewhere`), but the object now under that name does not declare the desired
    /// sizes (or is gone again): NOT converged. Claims grown so far stay grown; nothing was
    /// deleted or applied over it; the next converge decides against the new object.
    ReplacedElsewhere,
    /// The StatefulSet vanished before our orphan delete (404): someone deleted it on purpose
    /// (Flux's prune, an operator). It is not re-applied; claims grown so far stay grown.
    DeletedElsewhere,
    /// Not written because another StatefulSet of the same set (the same revision, the same
    /// file) was refused or failed: a revision is converged all or nothing (`held_by` says
    /// which one). The next run decides again.
    Held,
    /// The server takes the declared immutable changes in place (a server with KEP-4650's
    /// `StatefulSetUpdateVolumeClaimTemplate` gate, `revisionHistoryLimit` on 1.33 and later):
    /// nothing re-created, nothing applied by the converger (Flux's apply passes); claims the
    /// server leaves small were grown (`claims` says which). Converged, as far as the
    /// converger is concerned.
    AcceptedByServer,
}

impl Outcome {
    /// The outcome's name as serialised (`converged`, `deleted-elsewhere`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Converged => "converged",
            Outcome::Unchanged => "unchanged",
            Outcome::Absent => "absent",
            Outcome::Refused => "refused",
            Outcome::Proven => "proven",
            Outcome::RecreatedElsewhere => "recreated-elsewhere",
            Outcome::ReplacedElsewhere => "replaced-elsewhere",
            Outcome::DeletedElsewhere => "deleted-elsewhere",
            Outcome::Held => "held",
            Outcome::AcceptedByServer => "accepted-by-server",
        }
    }
}

/// What happened (or, in a dry run, would happen) to one claim of the StatefulSet.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimAction {
    Resized,
    /// Dry run: would be resized.
    WouldResize,
    /// Already at or above the declared size.
    Skipped,
    /// Should grow but cannot yet (not Bound).
    Deferred,
    /// Its failed expansion recovered from: the request lowered to the declared size.
    Recovered,
    /// Dry run: would be lowered to the declared size (a recovery).
    WouldRecover,
    /// Moved to its template's VolumeAttributesClass (and not grown: a claim grown and moved is
    /// `resized`, with `volumeAttributesClass`).
    Modified,
    /// Dry run: would be moved to its template's VolumeAttributesClass.
    WouldModify,
}

/// A claim's VolumeAttributesClass change: `from` its class as read (`None`: none).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClassChange {
    pub from: Option<String>,
    pub to: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimReport {
    pub claim: String,
    pub template: String,
    pub action: ClaimAction,
    /// The claim's requested size when read.
    pub from: Option<String>,
    /// The size it was (or would be) grown to.
    pub to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The VolumeAttributesClass it is (or would be) moved to, when its template moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_attributes_class: Option<ClassChange>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusalReport {
    pub code: RefusalCode,
    pub message: String,
}

/// What finishing an earlier run's intent took.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResumeAction {
    /// The StatefulSet was gone: the recorded desired object was applied.
    Reapplied,
    /// Present with the recorded uid: the procedure was carried on.
    Continued,
    /// Present with another uid: someone re-created it, nothing left to do.
    AlreadyRecreated,
    /// Present with the recorded uid, but the recorded object is now refused: nothing was
    /// deleted, the intent is dropped.
    Abandoned,
    /// Absent, and the intent does not say our delete was sent (an intent of an earlier
    /// version, recorded before the claims grew): someone else deleted it (Flux's prune, an
    /// operator). Not brought back; the intent is dropped.
    DeletedElsewhere,
    /// Dry run: an unfinished intent exists; a real run finishes it first.
    Pending,
    /// Absent, the intent says our delete was sent, but the caller has no render that still
    /// has the StatefulSet (the service's resume on start; the command's for a StatefulSet its
    /// file lacks): not re-created, since someone may have pruned it since; the intent is
    /// kept for the next converge of its Kustomization (whose render says).
    NotRendered,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeReport {
    pub action: ResumeAction,
    pub recorded_uid: String,
    pub recorded_at: String,
    /// The source revision recorded with the intent, when the recorder knew it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The continued procedure, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<Box<Report>>,
}

/// The result of converging one StatefulSet.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub namespace: String,
    pub name: String,
    pub outcome: Outcome,
    pub dry_run: bool,
    pub plan: Option<Plan>,
    pub refusal: Option<RefusalReport>,
    pub claims: Vec<ClaimReport>,
    /// Whether this run deleted and re-applied the StatefulSet.
    pub recreated: bool,
    pub old_uid: Option<String>,
    pub new_uid: Option<String>,
    /// An earlier run's intent finished before this converge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed: Option<ResumeReport>,
    /// This StatefulSet's journal record, when it exists but does not parse: ignored (fix or
    /// delete it; the next intent recorded replaces it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable_intent: Option<crate::journal::Unreadable>,
    /// This StatefulSet's intent, when it is not what it says (docs/converge.md, the journal):
    /// not resumed, converged as if there were none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_intent: Option<crate::journal::RefusedIntent>,
    /// Why an `held` StatefulSet was not written: "not written: StatefulSet NS/NAME of the
    /// same revision was refused" (or "failed").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    pub steps: Vec<StepTiming>,
    /// The claims to follow after this converge (docs/converge.md, *Following the volumes*):
    /// each it grew or recovered, and each other claim asking for more than it holds, where its
    /// expansion stood when read. Absent when none (and in a dry run, which grows nothing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::volume::Volume>,
}

impl Report {
    pub(crate) fn new(namespace: &str, name: &str, dry_run: bool) -> Self {
        Report {
            namespace: namespace.to_string(),
            name: name.to_string(),
            outcome: Outcome::Unchanged,
            dry_run,
            plan: None,
            refusal: None,
            claims: Vec::new(),
            recreated: false,
            old_uid: None,
            new_uid: None,
            resumed: None,
            unreadable_intent: None,
            refused_intent: None,
            held_by: None,
            steps: Vec::new(),
            volumes: Vec::new(),
        }
    }

    /// Sets what happened to one claim (the grow learns it claim by claim); `from` is kept
    /// when `None` is given.
    pub(crate) fn claim_outcome(
        &mut self,
        claim: &str,
        action: ClaimAction,
        from: Option<String>,
        to: Option<String>,
        reason: Option<String>,
    ) {
        if let Some(c) = self.claims.iter_mut().find(|c| c.claim == claim) {
            c.action = action;
            if from.is_some() {
                c.from = from;
            }
            c.to = to;
            c.reason = reason;
        }
    }

    /// The claim's VolumeAttributesClass was not changed by this converge (it was not asked
    /// for after all, or someone else moved it first).
    pub(crate) fn class_left(&mut self, claim: &str) {
        if let Some(c) = self.claims.iter_mut().find(|c| c.claim == claim) {
            c.volume_attributes_class = None;
        }
    }

    /// Adds a step's duration; consecutive parts of one step (the reads) add up.
    pub(crate) fn timed(&mut self, step: Step, took: Duration) {
        let millis = took.as_secs_f64() * 1000.0;
        match self.steps.last_mut() {
            Some(last) if last.step == step => last.millis += millis,
            _ => self.steps.push(StepTiming { step, millis }),
        }
    }

    pub(crate) fn refused(&mut self, refusal: &Refusal) {
        self.outcome = Outcome::Refused;
        self.refusal = Some(RefusalReport {
            code: refusal.code,
            message: refusal.message.clone(),
        });
    }

    /// The refusal, as `decide` spells it, when the converge was refused.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refusal.as_ref().map(|r| Refusal {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            code: r.code,
            message: r.message.clone(),
        })
    }

    /// Human-readable summary, one fact per line.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        if let Some(r) = self
            .resumed
            .as_ref()
            .filter(|r| r.action == ResumeAction::Pending)
        {
            line(format!(
                "StatefulSet {}/{}: an earlier run left an unfinished intent (recorded {}, uid {}): \
                 a real run finishes it first",
                self.namespace, self.name, r.recorded_at, r.recorded_uid
            ));
        } else if let Some(r) = &self.resumed {
            line(format!(
                "StatefulSet {}/{}: resumed an unfinished intent (recorded {}, uid {}): {}",
                self.namespace,
                self.name,
                r.recorded_at,
                r.recorded_uid,
                serde_plain(&r.action)
            ));
        }
        if let Some(r) = &self.refused_intent {
            line(format!(
                "StatefulSet {}/{}: intent {} not resumed (left in the journal): {}",
                self.namespace, self.name, r.object, r.reason
            ));
        }
        let what = match self.outcome {
            Outcome::Converged if self.recreated => {
                "converged (claims grown, StatefulSet recreated)"
            }
            Outcome::Converged => "converged (claims grown)",
            Outcome::Unchanged => "nothing to do",
            Outcome::Absent => "not in the cluster: Flux will create it",
            Outcome::Refused => "refused",
            Outcome::Proven => "dry run: decided and proven by the server, nothing written",
            Outcome::RecreatedElsewhere => {
                "re-created by someone else meanwhile, at the desired sizes: done"
            }
            Outcome::ReplacedElsewhere => {
                "replaced by someone else meanwhile with an object that does not declare the \
                 desired sizes: NOT converged (nothing deleted or applied over it)"
            }
            Outcome::DeletedElsewhere => {
                "deleted by someone else before our orphan delete: not re-applied"
            }
            Outcome::Held => "held",
            Outcome::AcceptedByServer => {
                "the server takes the declared changes in place: not re-created (Flux's apply \
                 passes), only claims it leaves small grown"
            }
        };
        line(format!(
            "StatefulSet {}/{}: {what}",
            self.namespace, self.name
        ));
        if let Some(r) = &self.refusal {
            line(format!("  refusal {}: {}", r.code, r.message));
        }
        if let Some(why) = &self.held_by {
            line(format!("  {why}"));
        }
        if let Some(plan) = &self.plan {
            for g in &plan.grown {
                line(format!(
                    "  template {}: {} -> {}{}",
                    g.template,
                    g.from.as_str(),
                    g.to.as_str(),
                    if self.dry_run {
                        " (would recreate)"
                    } else {
                        ""
                    }
                ));
            }
        }
        for c in &self.claims {
            line(format!(
                "  claim {}: {}{}{}{}",
                c.claim,
                serde_plain(&c.action),
                match (&c.from, &c.to) {
                    (Some(f), Some(t)) => format!(" {f} -> {t}"),
                    (Some(f), None) => format!(" (at {f})"),
                    _ => String::new(),
                },
                c.volume_attributes_class
                    .as_ref()
                    .map(|v| format!(
                        ", VolumeAttributesClass {} -> {}",
                        v.from.as_deref().unwrap_or("none"),
                        v.to
                    ))
                    .unwrap_or_default(),
                c.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ));
        }
        for v in &self.volumes {
            line(format!(
                "  volume {}: {}{}{}",
                v.claim,
                v.state,
                match (&v.requested, &v.capacity) {
                    (Some(r), Some(c)) => format!(" ({r} requested, {c} held)"),
                    _ => String::new(),
                },
                v.attributes
                    .as_ref()
                    .map(|a| format!("; VolumeAttributesClass {}: {}", a.class, a.state))
                    .unwrap_or_default()
            ));
        }
        if self.recreated {
            line(format!(
                "  uid {} -> {}",
                self.old_uid.as_deref().unwrap_or("?"),
                self.new_uid.as_deref().unwrap_or("?")
            ));
        }
        if !self.steps.is_empty() {
            let steps: Vec<String> = self
                .steps
                .iter()
                .map(|s| format!("{} {:.0}ms", s.step, s.millis))
                .collect();
            line(format!("  steps: {}", steps.join(", ")));
        }
        out
    }
}

fn serde_plain<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// The claims of a StatefulSet: `<template>-<name>-<ordinal>`, every ordinal found (also
/// scaled-away ones), as `(claim, template)` pairs in claim-name order.
pub fn claims_of(sts: &StatefulSet, claims: &[PersistentVolumeClaim]) -> Vec<(String, String)> {
    let name = sts.metadata.name.as_deref().unwrap_or_default();
    let templates: Vec<&str> = sts
        .spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.as_ref())
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t.metadata.name.as_deref())
                .collect()
        })
        .unwrap_or_default();
    let mut found: Vec<(String, String)> = claims
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .filter_map(|claim| {
            templates.iter().find_map(|t| {
                let ordinal = claim
                    .strip_prefix(t)?
                    .strip_prefix('-')?
                    .strip_prefix(name)?
                    .strip_prefix('-')?;
                (!ordinal.is_empty() && ordinal.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| (claim.to_string(), t.to_string()))
            })
        })
        .collect();
    found.sort();
    found
}

/// Per-claim outcome from a plan: resized (or would be) for `plan.resize`, deferred for
/// `plan.deferred`, skipped for every other claim of the StatefulSet.
pub fn claim_reports(
    desired: &StatefulSet,
    claims: &[PersistentVolumeClaim],
    plan: &Plan,
    dry_run: bool,
) -> Vec<ClaimReport> {
    let size_of = |claim: &str| {
        claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(claim))
            .and_then(|c| {
                c.spec
                    .as_ref()?
                    .resources
                    .as_ref()?
                    .requests
                    .as_ref()?
                    .get("storage")
            })
            .map(|q| q.0.clone())
    };
    let class_change = |claim: &str| {
        plan.modify
            .iter()
            .find(|m| m.claim == claim)
            .map(|m| ClassChange {
                from: m.from.clone(),
                to: m.to.clone(),
            })
    };
    claims_of(desired, claims)
        .into_iter()
        .map(|(claim, template)| {
            let volume_attributes_class = class_change(&claim);
            let report = if let Some(r) = plan.recover.iter().find(|r| r.claim == claim) {
                ClaimReport {
                    action: if dry_run {
                        ClaimAction::WouldRecover
                    } else {
                        ClaimAction::Recovered
                    },
                    from: Some(r.from.as_str().to_string()),
                    to: Some(r.to.as_str().to_string()),
                    reason: Some(format!(
                        "its expansion failed ({}) and holds {}: request lowered to the declared size",
                        r.state, r.capacity
                    )),
                    claim,
                    template,
                    volume_attributes_class: None,
                }
            } else if let Some(r) = plan.resize.iter().find(|r| r.claim == claim) {
                ClaimReport {
                    action: if dry_run {
                        ClaimAction::WouldResize
                    } else {
                        ClaimAction::Resized
                    },
                    from: Some(r.from.as_str().to_string()),
                    to: Some(r.to.as_str().to_string()),
                    reason: None,
                    claim,
                    template,
                    volume_attributes_class: None,
                }
            } else if let Some(d) = plan.deferred.iter().find(|d| d.claim == claim) {
                ClaimReport {
                    action: ClaimAction::Deferred,
                    from: size_of(&claim),
                    to: None,
                    reason: Some(d.reason.clone()),
                    claim,
                    template,
                    volume_attributes_class: None,
                }
            } else if volume_attributes_class.is_some() {
                ClaimReport {
                    action: if dry_run {
                        ClaimAction::WouldModify
                    } else {
                        ClaimAction::Modified
                    },
                    from: size_of(&claim),
                    to: None,
                    reason: None,
                    claim,
                    template,
                    volume_attributes_class: None,
                }
            } else {
                ClaimReport {
                    action: ClaimAction::Skipped,
                    from: size_of(&claim),
                    to: None,
                    reason: Some("already at or above the declared size".to_string()),
                    claim,
                    template,
                    volume_attributes_class: None,
                }
            };
            ClaimReport {
                volume_attributes_class,
                ..report
            }
        })
        .collect()
}

/// The claims to follow once `plan` is written (docs/converge.md, *Following the volumes*):
/// each claim of the StatefulSet it grows (its request raised to the declared size), recovers
/// (lowered to it) or moves to another VolumeAttributesClass (with its `attributes`), and each
/// other Bound claim asking for more than it holds, where its expansion stands as read at `now`.
pub fn volumes(
    desired: &StatefulSet,
    claims: &[PersistentVolumeClaim],
    plan: &Plan,
    now: jiff::Timestamp,
) -> Vec<crate::volume::Volume> {
    use crate::volume::{self, Volume, VolumeState};
    claims_of(desired, claims)
        .into_iter()
        .filter_map(|(name, _)| {
            let claim = claims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name.as_str()))?;
            if let Some(r) = plan.recover.iter().find(|r| r.claim == name) {
                return Some(Volume {
                    claim: name.clone(),
                    requested: Some(r.to.as_str().to_string()),
                    capacity: Some(r.capacity.as_str().to_string()),
                    state: VolumeState::Recovered,
                    message: Some(format!(
                        "its expansion to {} failed ({}): request lowered to {}, above its \
                         capacity {}, for the driver to grow it to that",
                        r.from, r.state, r.to, r.capacity
                    )),
                    since: now.to_string(),
                    attributes: None,
                    restart: None,
                });
            }
            let attributes = plan.modify.iter().find(|m| m.claim == name).map(|m| {
                volume::Attributes::asked(&m.to, volume::current_attributes_class(claim), now)
            });
            let observed = match plan.resize.iter().find(|r| r.claim == name) {
                Some(r) => {
                    let mut raised = claim.clone();
                    raised
                        .spec
                        .get_or_insert_with(Default::default)
                        .resources
                        .get_or_insert_with(Default::default)
                        .requests
                        .get_or_insert_with(Default::default)
                        .insert(
                            "storage".into(),
                            k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                                r.to.as_str().to_string(),
                            ),
                        );
                    volume::classify(&raised, &[], None)
                }
                None if volume::is_growing(claim) || attributes.is_some() => {
                    volume::classify(claim, &[], None)
                }
                None => return None,
            };
            Some(Volume {
                attributes,
                ..Volume::observed(&name, observed, now)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sts(name: &str, templates: &[&str]) -> StatefulSet {
        let vcts: Vec<serde_json::Value> = templates
            .iter()
            .map(|t| serde_json::json!({"metadata": {"name": t}}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"selector": {}, "template": {}, "volumeClaimTemplates": vcts}
        }))
        .unwrap()
    }

    fn pvc(name: &str) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap()
    }

    #[test]
    fn claims_are_matched_by_template_name_and_ordinal() {
        let claims: Vec<_> = [
            "data-web-0",
            "data-web-7",
            "logs-web-1",
            "data-web",
            "data-web-x",
            "data-web-1-a",
            "data-webby-0",
            "data-other-0",
            "data-web-",
            "data-web-web-0",
            "other-web-0",
        ]
        .iter()
        .map(|n| pvc(n))
        .collect();
        let got = claims_of(&sts("web", &["data", "logs", "data-web"]), &claims);
        let want = [
            ("data-web-0", "data"),
            ("data-web-7", "data"),
            ("data-web-web-0", "data-web"),
            ("logs-web-1", "logs"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(c, t)| (c.to_string(), t.to_string()))
            .collect();
        assert_eq!(got, want);
    }
}
