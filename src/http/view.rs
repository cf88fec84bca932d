//! What the dashboard shows, computed from the records without I/O: state colours and icons,
//! the problem a row must show, advice per refusal code, relative times. The templates only lay
//! these values out (and escape every one of them).

use std::time::Duration;

use jiff::Timestamp;

use crate::model::{
    FluxOutcome, FluxResult, GateMode, Handoff, RevisionRecord, RevisionState, StatefulSetEntry,
    StatefulSetOutcome, StatusRow, StepError, Volume, VolumeState, VolumeSummary,
};

/// A state as shown: `key` is the CSS class and the icon's id (a closed set, never data).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Badge {
    pub key: &'static str,
    pub label: &'static str,
}

/// Filter values for `?state=`, in the order the dashboard lists them. `none` is a handled
/// Kustomization the service has not run yet.
pub const STATE_KEYS: [&str; 6] = [
    "converged",
    "refused",
    "failed",
    "running",
    "superseded",
    "none",
];

pub fn state_badge(state: Option<RevisionState>) -> Badge {
    match state {
        Some(RevisionState::Converged) => Badge {
            key: "converged",
            label: "converged",
        },
        Some(RevisionState::Refused) => Badge {
            key: "refused",
            label: "refused",
        },
        Some(RevisionState::Failed) => Badge {
            key: "failed",
            label: "failed",
        },
        Some(RevisionState::Running) => Badge {
            key: "running",
            label: "running",
        },
        Some(RevisionState::Superseded) => Badge {
            key: "superseded",
            label: "superseded",
        },
        None => Badge {
            key: "none",
            label: "not run yet",
        },
    }
}

pub fn outcome_badge(outcome: StatefulSetOutcome) -> Badge {
    match outcome {
        StatefulSetOutcome::Converged => Badge {
            key: "converged",
            label: "converged",
        },
        StatefulSetOutcome::Unchanged => Badge {
            key: "superseded",
            label: "unchanged",
        },
        StatefulSetOutcome::Refused => Badge {
            key: "refused",
            label: "refused",
        },
        StatefulSetOutcome::Failed => Badge {
            key: "failed",
            label: "failed",
        },
        StatefulSetOutcome::Deferred => Badge {
            key: "running",
            label: "deferred",
        },
        StatefulSetOutcome::Held => Badge {
            key: "superseded",
            label: "held",
        },
    }
}

pub fn flux_badge(outcome: FluxOutcome) -> Badge {
    match outcome {
        FluxOutcome::Applied => Badge {
            key: "converged",
            label: "applied",
        },
        FluxOutcome::Failed => Badge {
            key: "failed",
            label: "failed",
        },
        FluxOutcome::Timeout => Badge {
            key: "refused",
            label: "timed out",
        },
        FluxOutcome::Pending => Badge {
            key: "running",
            label: "pending",
        },
        FluxOutcome::Raced => Badge {
            key: "failed",
            label: "raced",
        },
    }
}

/// A followed claim's state as shown: `infeasible` as loud as a refusal, `error` and
/// `stalled` as a failure, `grown` as converged, the rest as in progress.
pub fn volume_badge(state: VolumeState) -> Badge {
    let key = match state {
        VolumeState::Grown => "converged",
        VolumeState::Infeasible => "refused",
        VolumeState::Error | VolumeState::Stalled => "failed",
        VolumeState::Resizing
        | VolumeState::FilesystemPending
        | VolumeState::Requested
        | VolumeState::Recovered => "running",
        VolumeState::Deferred => "superseded",
    };
    Badge {
        key,
        label: state.as_str(),
    }
}

/// The overview's volume column: the worst state among the revision's followed claims, and
/// how many are in each state (`2 grown · 1 resizing`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumesView {
    pub badge: Badge,
    pub counts: String,
}

impl VolumesView {
    pub fn of(summary: &VolumeSummary) -> Self {
        let counts: Vec<(u32, VolumeState)> = vec![
            (summary.infeasible, VolumeState::Infeasible),
            (summary.stalled, VolumeState::Stalled),
            (summary.error, VolumeState::Error),
            (summary.filesystem_pending, VolumeState::FilesystemPending),
            (summary.resizing, VolumeState::Resizing),
            (summary.requested, VolumeState::Requested),
            (summary.grown, VolumeState::Grown),
        ];
        let worst = counts
            .iter()
            .find(|(n, _)| *n > 0)
            .map(|(_, s)| *s)
            .unwrap_or(VolumeState::Grown);
        let text: Vec<String> = counts
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, s)| format!("{n} {s}"))
            .collect();
        VolumesView {
            badge: volume_badge(worst),
            counts: text.join(" · "),
        }
    }
}

/// The followed claims a row must show as loudly as a refusal: each `infeasible` one (the
/// driver will not grow it; git must change), with the StatefulSet and the driver's words.
pub fn volume_problems(record: &RevisionRecord) -> Vec<Problem> {
    record
        .statefulsets
        .iter()
        .flat_map(|set| {
            set.volumes
                .iter()
                .filter(|v| v.state == VolumeState::Infeasible)
                .map(move |v| Problem {
                    kind: "refused",
                    code: "volume infeasible".to_string(),
                    subject: Some(format!("{}/{} claim {}", set.namespace, set.name, v.claim)),
                    message: v.message.clone().unwrap_or_default(),
                    more: 0,
                })
        })
        .collect()
}

/// The `?state=` key of a `/status` row, from its last record's summary (`last.state`), so
/// the summary bar counts every row without copying each row's newest record; `none` when it
/// has not run yet (or the state is one this build does not know).
pub fn summary_state_key(summary: &StatusRow) -> &'static str {
    summary
        .last
        .as_ref()
        .and_then(|last| last.get("state"))
        .and_then(|state| state.as_str())
        .and_then(|state| STATE_KEYS.iter().find(|key| **key == state).copied())
        .unwrap_or("none")
}

/// The page links of a list of `last` pages seen from page `current` (both 1-based): the
/// first, the last and two either side of the current one, `None` where pages are left out.
/// Ten thousand rows still make a short bar.
pub fn page_numbers(current: usize, last: usize) -> Vec<Option<usize>> {
    let mut numbers = Vec::new();
    for page in 1..=last {
        if page == 1 || page == last || page.abs_diff(current) <= 2 {
            numbers.push(Some(page));
        } else if numbers.last().is_some_and(Option::is_some) {
            numbers.push(None);
        }
    }
    numbers
}

/// What to do about a refusal, by code: the message says what differs, this says how out.
pub fn advice(code: &str) -> &'static str {
    match code {
        "shrink" => {
            "Volumes never shrink. Put the size in git back to at least the live size the message names; \
             to really shrink, migrate the data to a new StatefulSet."
        }
        "not-expandable" => {
            "The claim's StorageClass does not allow expansion. Set allowVolumeExpansion: true on it if \
             its CSI driver can expand volumes, or keep the old size in git."
        }
        "selector-changed" => {
            "The selector changed: the re-created StatefulSet would not adopt its pods and its new pods \
             would collide with them. Revert it in git; a new selector needs a new StatefulSet."
        }
        "service-name-changed" => {
            "The serviceName changed: the pods would keep their old DNS subdomain. Revert it in git, or \
             change it by hand (orphan-delete, apply, then delete the pods one at a time)."
        }
        "storage-class-changed" | "access-modes-changed" | "volume-mode-changed" => {
            "A volumeClaimTemplate's class, access modes or volume mode changed: existing claims cannot \
             follow. Revert it in git; moving the data to new claims is a migration made by hand."
        }
        "template-removed" => {
            "A volumeClaimTemplate was removed or renamed: the pods would lose that volume. Keep it in \
             git, or remove it by hand (orphan-delete, apply, delete the old claims once unneeded)."
        }
        "other-immutable" => {
            "Another immutable StatefulSet field changed (the message names it). Revert it in git, or \
             replace the StatefulSet deliberately by hand: flux-converger will not."
        }
        "rejected" => {
            "The API server refused the server-side dry run (admission webhook, quota, validation). \
             Fix what its message names in git; the next revision is tried again."
        }
        "create-refused" => {
            "The API server would refuse to create the StatefulSet again (an admission webhook or \
             policy on CREATE, create-only validation), so it was not deleted. Fix what its message \
             names (in git, or the policy); the next revision is tried again."
        }
        "recovery-unsupported" => {
            "Git declares a size back down after a failed expansion, but this API server will not \
             lower a claim's request (Kubernetes before 1.32). Declare the failed size again in git \
             and fix what refused the expansion, or upgrade the control plane."
        }
        _ => "Read the message; the revision is retried when the source revision changes.",
    }
}

/// What a refused or failed revision must show on its row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// `refused` or `failed`: the badge key.
    pub kind: &'static str,
    /// The refusal code, or `step <name>`.
    pub code: String,
    /// The StatefulSet it is about, when it is about one.
    pub subject: Option<String>,
    pub message: String,
    /// How many more StatefulSets of the revision have a problem too.
    pub more: usize,
}

pub fn problem(record: &RevisionRecord) -> Option<Problem> {
    match record.state {
        RevisionState::Refused => {
            let mut refused = record
                .statefulsets
                .iter()
                .filter_map(|set| set.refusal.as_ref().map(|refusal| (set, refusal)));
            let (set, refusal) = refused.next()?;
            Some(Problem {
                kind: "refused",
                code: refusal.code.to_string(),
                subject: Some(format!("{}/{}", set.namespace, set.name)),
                message: refusal.message.clone(),
                more: refused.count(),
            })
        }
        RevisionState::Failed => {
            let failed: Vec<(&StatefulSetEntry, &StepError)> = record
                .statefulsets
                .iter()
                // A held StatefulSet names the one that failed: show that one.
                .filter(|set| set.outcome != StatefulSetOutcome::Held)
                .filter_map(|set| set.error.as_ref().map(|err| (set, err)))
                .collect();
            if let Some(err) = &record.error {
                return Some(Problem {
                    kind: "failed",
                    code: format!("step {}", err.step),
                    subject: None,
                    message: err.message.clone(),
                    more: failed.len(),
                });
            }
            let (set, err) = failed.first()?;
            Some(Problem {
                kind: "failed",
                code: format!("step {}", err.step),
                subject: Some(format!("{}/{}", set.namespace, set.name)),
                message: err.message.clone(),
                more: failed.len() - 1,
            })
        }
        _ => None,
    }
}

/// `42s ago`, `5m ago`, `3h ago`, `2d ago`; `None` when the time does not parse.
pub fn ago(at: &str, now: Timestamp) -> Option<String> {
    let at: Timestamp = at.parse().ok()?;
    let seconds = now.as_second() - at.as_second();
    Some(match seconds {
        s if s < 5 => "just now".to_string(),
        s if s < 60 => format!("{s}s ago"),
        s if s < 3600 => format!("{}m ago", s / 60),
        s if s < 86_400 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86_400),
    })
}

/// How long a run took, to the second (to the millisecond under one second).
pub fn took(started: &str, finished: &str) -> Option<String> {
    let started: Timestamp = started.parse().ok()?;
    let finished: Timestamp = finished.parse().ok()?;
    let span = finished.duration_since(started);
    let millis = u64::try_from(span.as_millis()).ok()?;
    let rounded = if millis < 1000 {
        Duration::from_millis(millis)
    } else {
        Duration::from_secs(millis.div_ceil(1000))
    };
    Some(humantime::format_duration(rounded).to_string())
}

#[derive(Clone, Debug)]
pub struct FluxView {
    pub badge: Badge,
    pub applied_revision: Option<String>,
    pub message: Option<String>,
}

impl FluxView {
    fn of(flux: &FluxResult) -> Self {
        FluxView {
            badge: flux_badge(flux.outcome),
            applied_revision: flux.applied_revision.clone(),
            message: flux.message.clone(),
        }
    }
}

/// One row of the dashboard.
#[derive(Clone, Debug)]
pub struct Row {
    /// What kind of gated object it is: its drill-down's path and its label.
    pub kind: crate::model::Kind,
    pub namespace: String,
    pub name: String,
    pub gate: GateMode,
    pub source_revision: Option<String>,
    pub badge: Badge,
    /// The revision the last record is about.
    pub revision: Option<String>,
    /// The source publishes a revision the last record is not about (yet).
    pub behind: bool,
    /// When the last run finished (or started), RFC 3339. Shown as is: the page is rendered
    /// once per change and served for as long as nothing changes, so a relative time would go
    /// stale; the page's script turns it into `5m ago` in the browser.
    pub at: Option<String>,
    pub flux: Option<FluxView>,
    pub problem: Option<Problem>,
    pub warnings: Vec<String>,
    /// Why nothing runs for it (the hold annotation, or `spec.suspend` in reconcile mode).
    pub hold: Option<String>,
    /// The followed claims of the last record, when it has any.
    pub volumes: Option<VolumesView>,
    /// Its infeasible claims, shown as a refusal is.
    pub volume_problems: Vec<Problem>,
}

impl Row {
    pub fn new(summary: &StatusRow, last: Option<&RevisionRecord>) -> Row {
        let at = last.map(|r| {
            r.finished_at
                .clone()
                .unwrap_or_else(|| r.started_at.clone())
        });
        Row {
            kind: summary.kind,
            namespace: summary.namespace.clone(),
            name: summary.name.clone(),
            gate: summary.gate,
            source_revision: summary.source_revision.clone(),
            badge: state_badge(last.map(|r| r.state)),
            revision: last.map(|r| r.revision.clone()),
            behind: match (&summary.source_revision, last) {
                (Some(source), Some(last)) => *source != last.revision,
                _ => false,
            },
            at,
            flux: last.and_then(|r| r.flux.as_ref()).map(FluxView::of),
            problem: last.and_then(problem),
            warnings: last.map(|r| r.warnings.clone()).unwrap_or_default(),
            hold: summary.hold.clone(),
            volumes: last.and_then(|r| r.volumes.as_ref()).map(VolumesView::of),
            volume_problems: last.map(volume_problems).unwrap_or_default(),
        }
    }

    pub fn href(&self) -> String {
        detail_href_of(self.kind, &self.namespace, &self.name)
    }
}

/// The drill-down's path. Kubernetes names are DNS labels (no `/`, `?` or `#`); the template
/// escapes the attribute all the same.
pub fn detail_href(namespace: &str, name: &str) -> String {
    detail_href_of(crate::model::Kind::KUSTOMIZATION, namespace, name)
}

/// The drill-down's path of a gated object of any kind: `/<plural>/{namespace}/{name}`.
pub fn detail_href_of(kind: crate::model::Kind, namespace: &str, name: &str) -> String {
    format!("/{}/{namespace}/{name}", kind.plural())
}

#[derive(Clone, Debug)]
pub struct StepView {
    pub step: String,
    pub message: String,
    pub hint: Option<String>,
}

impl StepView {
    fn of(err: &StepError) -> Self {
        StepView {
            step: err.step.clone(),
            message: err.message.clone(),
            hint: err.hint.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RefusalView {
    pub code: String,
    pub message: String,
    pub advice: &'static str,
}

#[derive(Clone, Debug)]
pub struct SetView {
    pub namespace: String,
    pub name: String,
    pub badge: Badge,
    pub entry: StatefulSetEntry,
    /// Orphan-deleted and re-applied: the uid before and after.
    pub recreated: Option<(String, String)>,
    pub refusal: Option<RefusalView>,
    pub error: Option<StepView>,
    /// Its followed claims, one row each.
    pub volumes: Vec<VolumeView>,
}

/// One followed claim on the drill-down: capacity → request, its state and the driver's words.
#[derive(Clone, Debug)]
pub struct VolumeView {
    pub claim: String,
    pub badge: Badge,
    pub capacity: String,
    pub requested: String,
    pub message: Option<String>,
    pub since: String,
    /// What an operator does about its state, where there is something to do.
    pub advice: Option<&'static str>,
}

/// What to do about a followed claim's state (docs/converge.md, *Following the volumes*).
pub fn volume_advice(state: VolumeState) -> Option<&'static str> {
    match state {
        VolumeState::Infeasible => Some(
            "The driver refused this size for good. Declare a size it can take in git, above the \
             claim's capacity: flux-converger lowers the request and re-creates the StatefulSet \
             (Kubernetes 1.32 and later).",
        ),
        VolumeState::FilesystemPending => Some(
            "The volume grew; the file system grows when a pod next mounts the claim. Restart the \
             pod that uses it.",
        ),
        VolumeState::Stalled => Some(
            "Not grown within --resize-timeout. Read the claim's Events (kubectl describe pvc) and \
             the CSI driver's logs; it is still followed.",
        ),
        VolumeState::Error => Some("The driver failed and retries; it is still followed."),
        _ => None,
    }
}

impl VolumeView {
    fn of(v: &Volume) -> Self {
        VolumeView {
            claim: v.claim.clone(),
            badge: volume_badge(v.state),
            capacity: v.capacity.clone().unwrap_or_else(|| "?".into()),
            requested: v.requested.clone().unwrap_or_else(|| "?".into()),
            message: v.message.clone(),
            since: v.since.clone(),
            advice: volume_advice(v.state),
        }
    }
}

impl SetView {
    fn of(entry: &StatefulSetEntry) -> Self {
        SetView {
            namespace: entry.namespace.clone(),
            name: entry.name.clone(),
            badge: outcome_badge(entry.outcome),
            recreated: match (&entry.old_uid, &entry.new_uid) {
                (Some(old), Some(new)) if old != new => Some((old.clone(), new.clone())),
                _ => None,
            },
            refusal: entry.refusal.as_ref().map(|r| RefusalView {
                code: r.code.to_string(),
                message: r.message.clone(),
                advice: advice(r.code.as_str()),
            }),
            error: entry.error.as_ref().map(StepView::of),
            volumes: entry.volumes.iter().map(VolumeView::of).collect(),
            entry: entry.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct HandoffView {
    pub mode: GateMode,
    pub action: String,
    pub at: String,
    pub requested_at: Option<String>,
    pub resuspended_at: Option<String>,
}

impl HandoffView {
    fn of(handoff: &Handoff) -> Self {
        HandoffView {
            mode: handoff.mode,
            action: handoff.action.to_string(),
            at: handoff.at.clone(),
            requested_at: handoff.requested_at.clone(),
            resuspended_at: handoff.resuspended_at.clone(),
        }
    }
}

/// One revision of the drill-down.
#[derive(Clone, Debug)]
pub struct RevisionView {
    pub revision: String,
    pub digest: Option<String>,
    pub trigger: &'static str,
    pub badge: Badge,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub ago: Option<String>,
    pub took: Option<String>,
    pub warnings: Vec<String>,
    pub error: Option<StepView>,
    pub handoff: Option<HandoffView>,
    pub flux: Option<FluxView>,
    pub statefulsets: Vec<SetView>,
}

impl RevisionView {
    pub fn new(record: &RevisionRecord, now: Timestamp) -> Self {
        RevisionView {
            revision: record.revision.clone(),
            digest: record.digest.clone(),
            trigger: match record.trigger {
                crate::model::Trigger::Webhook => "webhook",
                crate::model::Trigger::Resync => "resync",
                crate::model::Trigger::Startup => "startup",
                crate::model::Trigger::Watch => "watch",
            },
            badge: state_badge(Some(record.state)),
            started_at: record.started_at.clone(),
            finished_at: record.finished_at.clone(),
            ago: ago(&record.started_at, now),
            took: record
                .finished_at
                .as_deref()
                .and_then(|finished| took(&record.started_at, finished)),
            warnings: record.warnings.clone(),
            error: record.error.as_ref().map(StepView::of),
            handoff: record.handoff.as_ref().map(HandoffView::of),
            flux: record.flux.as_ref().map(FluxView::of),
            statefulsets: record.statefulsets.iter().map(SetView::of).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RefusalCode;
    use crate::model::{RefusalEntry, Trigger};

    fn record(state: RevisionState) -> RevisionRecord {
        RevisionRecord {
            volumes: Default::default(),
            revision: "main@sha1:abc".into(),
            digest: None,
            trigger: Trigger::Webhook,
            started_at: "2026-11-30T08:00:00Z".into(),
            finished_at: Some("2026-11-30T08:00:03Z".into()),
            state,
            statefulsets: Vec::new(),
            handoff: None,
            flux: None,
            warnings: Vec::new(),
            error: None,
            generation: None,
            gate: None,
            attempts: 1,
        }
    }

    fn set(name: &str, outcome: StatefulSetOutcome) -> StatefulSetEntry {
        StatefulSetEntry {
            volumes: Default::default(),
            namespace: "apps".into(),
            name: name.into(),
            outcome,
            old_uid: None,
            new_uid: None,
            templates: Vec::new(),
            changes: Vec::new(),
            claims: Vec::new(),
            deferred: Vec::new(),
            refusal: None,
            error: None,
        }
    }

    fn refused(name: &str, code: RefusalCode) -> StatefulSetEntry {
        StatefulSetEntry {
            refusal: Some(RefusalEntry {
                code,
                message: format!("{name} refused"),
            }),
            ..set(name, StatefulSetOutcome::Refused)
        }
    }

    fn failed(name: &str, step: &str) -> StatefulSetEntry {
        StatefulSetEntry {
            error: Some(StepError {
                step: step.into(),
                message: format!("{name} failed"),
                hint: None,
            }),
            ..set(name, StatefulSetOutcome::Failed)
        }
    }

    #[test]
    fn problem_table() {
        let run_error = StepError::new("resolve", "no artifact");
        type Want = Option<(
            &'static str,
            &'static str,
            Option<&'static str>,
            &'static str,
            usize,
        )>;
        let cases: Vec<(&str, RevisionRecord, Want)> = vec![
            ("converged", record(RevisionState::Converged), None),
            ("running", record(RevisionState::Running), None),
            ("superseded", record(RevisionState::Superseded), None),
            (
                "refused, first of two",
                RevisionRecord {
                    statefulsets: vec![
                        set("ok", StatefulSetOutcome::Converged),
                        refused("db", RefusalCode::Shrink),
                        refused("cache", RefusalCode::NotExpandable),
                    ],
                    ..record(RevisionState::Refused)
                },
                Some(("refused", "shrink", Some("apps/db"), "db refused", 1)),
            ),
            (
                "refused without entries",
                record(RevisionState::Refused),
                None,
            ),
            (
                "failed in a StatefulSet",
                RevisionRecord {
                    statefulsets: vec![failed("db", "grow")],
                    ..record(RevisionState::Failed)
                },
                Some(("failed", "step grow", Some("apps/db"), "db failed", 0)),
            ),
            (
                "failed after one held: the failed one is shown",
                RevisionRecord {
                    statefulsets: vec![failed("a-db", "held"), failed("b-cache", "preflight")]
                        .into_iter()
                        .enumerate()
                        .map(|(i, mut e)| {
                            if i == 0 {
                                e.outcome = StatefulSetOutcome::Held;
                            }
                            e
                        })
                        .collect(),
                    ..record(RevisionState::Failed)
                },
                Some((
                    "failed",
                    "step preflight",
                    Some("apps/b-cache"),
                    "b-cache failed",
                    0,
                )),
            ),
            (
                "failed before the StatefulSets",
                RevisionRecord {
                    error: Some(run_error.clone()),
                    statefulsets: vec![failed("db", "orphan")],
                    ..record(RevisionState::Failed)
                },
                Some(("failed", "step resolve", None, "no artifact", 1)),
            ),
        ];
        for (case, record, want) in cases {
            let got = problem(&record);
            let got = got.as_ref().map(|p| {
                (
                    p.kind,
                    p.code.as_str(),
                    p.subject.as_deref(),
                    p.message.as_str(),
                    p.more,
                )
            });
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn ago_table() {
        let now: Timestamp = "2026-11-30T08:00:00Z".parse().expect("timestamp");
        let cases = [
            ("2026-11-30T08:00:00Z", Some("just now")),
            ("2026-11-30T08:00:10Z", Some("just now")),
            ("2026-11-30T07:59:18Z", Some("42s ago")),
            ("2026-11-30T07:55:00Z", Some("5m ago")),
            ("2026-11-30T05:00:00Z", Some("3h ago")),
            ("2026-11-28T08:00:00Z", Some("2d ago")),
            ("2026-11-30T09:00:00+01:00", Some("just now")),
            ("yesterday", None),
        ];
        for (at, want) in cases {
            assert_eq!(ago(at, now).as_deref(), want, "{at}");
        }
    }

    #[test]
    fn took_table() {
        let cases = [
            (
                "2026-11-30T08:00:00Z",
                "2026-11-30T08:00:00.250Z",
                Some("250ms"),
            ),
            ("2026-11-30T08:00:00Z", "2026-11-30T08:00:03Z", Some("3s")),
            (
                "2026-11-30T08:00:00Z",
                "2026-11-30T08:03:04.2Z",
                Some("3m 5s"),
            ),
            ("2026-11-30T08:00:00Z", "later", None),
        ];
        for (started, finished, want) in cases {
            assert_eq!(took(started, finished).as_deref(), want, "{finished}");
        }
    }

    #[test]
    fn row_is_behind_when_the_source_moved_on() {
        let summary = StatusRow {
            kind: crate::model::Kind::KUSTOMIZATION,
            waiting: None,
            namespace: "apps".into(),
            name: "web".into(),
            gate: GateMode::Suspend,
            source_revision: Some("main@sha1:def".into()),
            last: None,
            hold: None,
        };
        let last = record(RevisionState::Converged);
        let row = Row::new(&summary, Some(&last));
        assert!(row.behind);
        assert_eq!(row.badge.key, "converged");
        assert_eq!(row.at.as_deref(), Some("2026-11-30T08:00:03Z"));
        assert_eq!(row.href(), "/kustomizations/apps/web");
        let never = Row::new(&summary, None);
        assert!(!never.behind);
        assert_eq!(never.badge.key, "none");
    }

    #[test]
    fn page_numbers_table() {
        let cases: [(usize, usize, &[Option<usize>]); 7] = [
            (1, 0, &[]),
            (1, 1, &[Some(1)]),
            (2, 5, &[Some(1), Some(2), Some(3), Some(4), Some(5)]),
            (1, 8, &[Some(1), Some(2), Some(3), None, Some(8)]),
            (
                5,
                10,
                &[
                    Some(1),
                    None,
                    Some(3),
                    Some(4),
                    Some(5),
                    Some(6),
                    Some(7),
                    None,
                    Some(10),
                ],
            ),
            (10, 10, &[Some(1), None, Some(8), Some(9), Some(10)]),
            (
                4,
                7,
                &[
                    Some(1),
                    Some(2),
                    Some(3),
                    Some(4),
                    Some(5),
                    Some(6),
                    Some(7),
                ],
            ),
        ];
        for (current, last, want) in cases {
            assert_eq!(page_numbers(current, last), want, "{current} of {last}");
        }
    }

    #[test]
    fn summary_state_key_table() {
        let summary = |last: Option<serde_json::Value>| StatusRow {
            kind: crate::model::Kind::KUSTOMIZATION,
            waiting: None,
            namespace: "apps".into(),
            name: "web".into(),
            gate: GateMode::Suspend,
            source_revision: None,
            last,
            hold: None,
        };
        for (state, want) in [
            (RevisionState::Converged, "converged"),
            (RevisionState::Refused, "refused"),
            (RevisionState::Failed, "failed"),
            (RevisionState::Running, "running"),
            (RevisionState::Superseded, "superseded"),
        ] {
            let last = record(state).summary();
            assert_eq!(summary_state_key(&summary(Some(last))), want);
            // The same key the row's badge gets from the whole record.
            assert_eq!(state_badge(Some(state)).key, want);
        }
        assert_eq!(summary_state_key(&summary(None)), "none");
        assert_eq!(
            summary_state_key(&summary(Some(serde_json::json!({"state": "retired"})))),
            "none"
        );
    }

    #[test]
    fn a_held_statefulset_has_its_own_badge() {
        let held = outcome_badge(StatefulSetOutcome::Held);
        assert_eq!(held.label, "held");
        assert_eq!(held.key, "superseded");
    }

    #[test]
    fn every_refusal_code_has_its_own_advice() {
        let codes = [
            "shrink",
            "not-expandable",
            "selector-changed",
            "service-name-changed",
            "storage-class-changed",
            "template-removed",
            "other-immutable",
            "rejected",
            "create-refused",
        ];
        let fallback = advice("something-new");
        for code in codes {
            assert_ne!(advice(code), fallback, "{code}");
        }
    }

    #[test]
    fn set_view_shows_recreation_only_when_the_uid_changed() {
        let mut entry = set("db", StatefulSetOutcome::Converged);
        entry.old_uid = Some("u1".into());
        entry.new_uid = Some("u2".into());
        assert_eq!(
            SetView::of(&entry).recreated,
            Some(("u1".into(), "u2".into()))
        );
        entry.new_uid = Some("u1".into());
        assert_eq!(SetView::of(&entry).recreated, None);
    }
}
