//! What the dashboard shows, computed from the records without I/O: state colours and icons,
//! the problem a row must show, advice per refusal code, relative times. The templates only lay
//! these values out (and escape every one of them).

use std::time::Duration;

use jiff::Timestamp;

use crate::model::{
    FluxOutcome, FluxResult, GateMode, Handoff, ModifyState, RevisionRecord, RevisionState,
    StatefulSetEntry, StatefulSetOutcome, StatusRow, StepError, Volume, VolumeState, VolumeSummary,
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
        | VolumeState::Recovered
        | VolumeState::Restarted => "running",
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

/// A claim's move to another VolumeAttributesClass as shown: `infeasible` as loud as a
/// refusal, `modified` as converged, `modifying` in progress.
pub fn modify_badge(state: ModifyState) -> Badge {
    Badge {
        key: match state {
            ModifyState::Modified => "converged",
            ModifyState::Infeasible => "refused",
            ModifyState::Modifying => "running",
        },
        label: state.as_str(),
    }
}

impl VolumesView {
    pub fn of(summary: &VolumeSummary) -> Self {
        // Worst first: what the badge shows.
        let counts: Vec<(u32, &'static str, Badge)> = vec![
            (
                summary.infeasible,
                "infeasible",
                volume_badge(VolumeState::Infeasible),
            ),
            (
                summary.modify_infeasible,
                "modify-infeasible",
                modify_badge(ModifyState::Infeasible),
            ),
            (
                summary.stalled,
                "stalled",
                volume_badge(VolumeState::Stalled),
            ),
            (summary.error, "error", volume_badge(VolumeState::Error)),
            (
                summary.filesystem_pending,
                "filesystem-pending",
                volume_badge(VolumeState::FilesystemPending),
            ),
            (
                summary.restarted,
                "restarted",
                volume_badge(VolumeState::Restarted),
            ),
            (
                summary.resizing,
                "resizing",
                volume_badge(VolumeState::Resizing),
            ),
            (
                summary.requested,
                "requested",
                volume_badge(VolumeState::Requested),
            ),
            (
                summary.modifying,
                "modifying",
                modify_badge(ModifyState::Modifying),
            ),
            (summary.grown, "grown", volume_badge(VolumeState::Grown)),
            (
                summary.modified,
                "modified",
                modify_badge(ModifyState::Modified),
            ),
        ];
        let worst = counts
            .iter()
            .find(|(n, _, _)| *n > 0)
            .map(|(_, _, b)| *b)
            .unwrap_or_else(|| volume_badge(VolumeState::Grown));
        let text: Vec<String> = counts
            .iter()
            .filter(|(n, _, _)| *n > 0)
            .map(|(n, s, _)| format!("{n} {s}"))
            .collect();
        VolumesView {
            badge: worst,
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
            let size = set
                .volumes
                .iter()
                .filter(|v| v.state == VolumeState::Infeasible)
                .map(move |v| Problem {
                    kind: "refused",
                    code: "volume infeasible".to_string(),
                    subject: Some(format!("{}/{} claim {}", set.namespace, set.name, v.claim)),
                    message: v.message.clone().unwrap_or_default(),
                    more: 0,
                });
            let class = set.volumes.iter().filter_map(move |v| {
                let a = v.attributes.as_ref()?;
                (a.state == ModifyState::Infeasible).then(|| Problem {
                    kind: "refused",
                    code: "volume modify infeasible".to_string(),
                    subject: Some(format!("{}/{} claim {}", set.namespace, set.name, v.claim)),
                    message: a.message.clone().unwrap_or_default(),
                    more: 0,
                })
            });
            size.chain(class)
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
        "volume-attributes-class-removed" => {
            "A volumeClaimTemplate's volumeAttributesClassName was removed: a claim's class never goes \
             back to none once applied. Keep a class in git (moving to another class is carried)."
        }
        "volume-attributes-class-missing" => {
            "The VolumeAttributesClass git moves to does not exist. Create it (cluster-scoped, with \
             the CSI driver's parameters), or declare an existing class; the next revision is tried \
             again."
        }
        "volume-attributes-class-unsupported" => {
            "This API server serves no VolumeAttributesClass API (GA in 1.34; 1.31 to 1.33 only \
             with the feature gate and the beta API enabled). Revert volumeAttributesClassName in \
             git, or enable the feature in the control plane."
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
    /// Its move to another VolumeAttributesClass, when one was asked for.
    pub attributes: Option<AttributesView>,
    /// The pod restarted for it (`restart-for-resize`), when one was.
    pub restart: Option<String>,
}

/// A claim's class move on the drill-down: current → declared class, its state, the words.
#[derive(Clone, Debug)]
pub struct AttributesView {
    pub badge: Badge,
    pub current: String,
    pub class: String,
    pub message: Option<String>,
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
        VolumeState::Restarted => Some(
            "Its pod was evicted (flux-converger.io/restart-for-resize): the file system grows when \
             the new pod mounts the claim.",
        ),
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
            attributes: v.attributes.as_ref().map(|a| AttributesView {
                badge: modify_badge(a.state),
                current: a.current.clone().unwrap_or_else(|| "none".into()),
                class: a.class.clone(),
                message: a.message.clone(),
                advice: (a.state == ModifyState::Infeasible).then_some(
                    "The driver refused this VolumeAttributesClass for good. Declare another class \
                     in git; the claim is patched to it.",
                ),
            }),
            restart: v.restart.as_ref().map(|r| match &r.evicted_at {
                Some(at) => format!("pod {} evicted at {at}", r.pod),
                None => format!("pod {} to be evicted", r.pod),
            }),
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
mod tests;
