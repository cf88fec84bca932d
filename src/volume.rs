//! Where a claim's expansion stands, read from the API server's own signals (docs/converge.md,
//! *Following the volumes*). Pure: a claim (and the resize Events about it) in, a state out.
//!
//! Raising a claim's request is only asking: the external-resizer (and, for an offline driver,
//! the kubelet at the next mount) makes the volume grow, and says how it goes on the claim's
//! status (`k8s.io/api/core/v1`: the `allocatedResourceStatuses` `ClaimResourceStatus`, the
//! `PersistentVolumeClaimConditionType` conditions) and in Events on the claim. A converge is
//! only done for the volume when `status.capacity` reaches the request; until then this module
//! says which of the table's states the claim is in, with the words the driver used.
//!
//! A claim often carries several signals at once (`Resizing` beside `FileSystemResizePending`,
//! `ControllerResizeInProgress` beside a `ControllerResizeError` condition): the first that
//! applies wins, in the order of [`VolumeState`]'s precedence: `grown`, `infeasible`, `error`,
//! `filesystem-pending`, `resizing`, `requested`. Servers before 1.32 have no
//! `allocatedResourceStatuses`: where a claim has none, the conditions and the newest resize
//! Event since the request decide.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::{Deserialize, Serialize};

use crate::quantity::Quantity;

/// `ClaimResourceStatus` values (`status.allocatedResourceStatuses.storage`), as
/// `k8s.io/api/core/v1` spells them.
pub mod status {
    pub const CONTROLLER_RESIZE_IN_PROGRESS: &str = "ControllerResizeInProgress";
    pub const CONTROLLER_RESIZE_INFEASIBLE: &str = "ControllerResizeInfeasible";
    pub const NODE_RESIZE_PENDING: &str = "NodeResizePending";
    pub const NODE_RESIZE_IN_PROGRESS: &str = "NodeResizeInProgress";
    pub const NODE_RESIZE_INFEASIBLE: &str = "NodeResizeInfeasible";
}

/// `PersistentVolumeClaimConditionType` values, as `k8s.io/api/core/v1` spells them.
pub mod condition {
    pub const RESIZING: &str = "Resizing";
    pub const FILE_SYSTEM_RESIZE_PENDING: &str = "FileSystemResizePending";
    pub const CONTROLLER_RESIZE_ERROR: &str = "ControllerResizeError";
    pub const NODE_RESIZE_ERROR: &str = "NodeResizeError";
    pub const MODIFY_VOLUME_ERROR: &str = "ModifyVolumeError";
    pub const MODIFYING_VOLUME: &str = "ModifyingVolume";
}

/// `PersistentVolumeClaimModifyVolumeStatus` values (`status.modifyVolumeStatus.status`).
pub mod modify_status {
    pub const PENDING: &str = "Pending";
    pub const IN_PROGRESS: &str = "InProgress";
    pub const INFEASIBLE: &str = "Infeasible";
}

/// The reasons of the Events the external-resizer, the expand controller and the kubelet
/// record on a claim while it grows.
pub mod reason {
    pub const VOLUME_RESIZE_FAILED: &str = "VolumeResizeFailed";
    pub const FILE_SYSTEM_RESIZE_REQUIRED: &str = "FileSystemResizeRequired";
    pub const RESIZING: &str = "Resizing";
    pub const EXTERNAL_EXPANDING: &str = "ExternalExpanding";
    pub const VOLUME_RESIZE_SUCCESSFUL: &str = "VolumeResizeSuccessful";
    pub const FILE_SYSTEM_RESIZE_SUCCESSFUL: &str = "FileSystemResizeSuccessful";

    /// The external-resizer's modify path (`pkg/util`: `VolumeModify`, `VolumeModifyFailed`,
    /// `VolumeModifySuccess`).
    pub const VOLUME_MODIFY: &str = "VolumeModify";
    pub const VOLUME_MODIFY_FAILED: &str = "VolumeModifyFailed";
    pub const VOLUME_MODIFY_SUCCESSFUL: &str = "VolumeModifySuccessful";

    /// Every reason [`super::classify_attributes`] reads.
    pub const MODIFY: [&str; 3] = [
        VOLUME_MODIFY,
        VOLUME_MODIFY_FAILED,
        VOLUME_MODIFY_SUCCESSFUL,
    ];

    /// Every reason [`super::classify`] reads.
    pub const ALL: [&str; 6] = [
        VOLUME_RESIZE_FAILED,
        FILE_SYSTEM_RESIZE_REQUIRED,
        RESIZING,
        EXTERNAL_EXPANDING,
        VOLUME_RESIZE_SUCCESSFUL,
        FILE_SYSTEM_RESIZE_SUCCESSFUL,
    ];
}

/// Where one claim's expansion stands (the `state` of a record's `volumes`). The table of
/// docs/converge.md; the order of the variants is the precedence of the signals, first wins.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VolumeState {
    /// `status.capacity.storage` ≥ the request: done (an end state).
    Grown,
    /// The driver refused the size for good (`ControllerResizeInfeasible`,
    /// `NodeResizeInfeasible`): an end state; changing git is the way out.
    Infeasible,
    /// The driver failed and retries (`ControllerResizeError`, `NodeResizeError`, or before
    /// 1.32 a `VolumeResizeFailed` Event): still followed.
    Error,
    /// The volume grew; the node grows the file system at the claim's next mount.
    FilesystemPending,
    /// The resizer or the kubelet is at it.
    Resizing,
    /// Asked for, no signal yet.
    Requested,
    /// Not Bound: cannot grow yet (the gate's re-check grows it once it binds).
    Deferred,
    /// Past `--resize-timeout` without reaching an end state: still followed.
    Stalled,
    /// Its failed expansion was recovered from (the request lowered to what git declares,
    /// above the capacity): followed again from here.
    Recovered,
    /// It was `filesystem-pending` and its pod was evicted (the StatefulSet opted in with
    /// `flux-converger.io/restart-for-resize: "true"`): the node grows the file system when
    /// the pod's successor mounts it; followed until `grown`.
    Restarted,
}

impl VolumeState {
    pub const ALL: [VolumeState; 10] = [
        VolumeState::Grown,
        VolumeState::Infeasible,
        VolumeState::Error,
        VolumeState::FilesystemPending,
        VolumeState::Resizing,
        VolumeState::Requested,
        VolumeState::Deferred,
        VolumeState::Stalled,
        VolumeState::Recovered,
        VolumeState::Restarted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VolumeState::Grown => "grown",
            VolumeState::Infeasible => "infeasible",
            VolumeState::Error => "error",
            VolumeState::FilesystemPending => "filesystem-pending",
            VolumeState::Resizing => "resizing",
            VolumeState::Requested => "requested",
            VolumeState::Deferred => "deferred",
            VolumeState::Stalled => "stalled",
            VolumeState::Recovered => "recovered",
            VolumeState::Restarted => "restarted",
        }
    }

    /// `grown` and `infeasible`: nothing more will happen to the claim without a change.
    pub fn is_end(self) -> bool {
        matches!(self, VolumeState::Grown | VolumeState::Infeasible)
    }

    /// `infeasible` and `error`: an expansion that failed, which a size declared back down in
    /// git may recover from (docs/converge.md, *Recovering from a failed expansion*).
    pub fn is_failed(self) -> bool {
        matches!(self, VolumeState::Infeasible | VolumeState::Error)
    }
}

impl std::fmt::Display for VolumeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with the wire spelling (`grown`, ...), as the JSON of a record reads.
impl PartialEq<&str> for VolumeState {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Where a claim's move to another VolumeAttributesClass stands (`attributes.state`), read
/// from its status as the external-resizer writes it (`k8s.io/api/core/v1`:
/// `currentVolumeAttributesClassName`, `modifyVolumeStatus`, the `ModifyVolumeError`
/// condition). The order of the variants is the precedence of the signals, first wins.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModifyState {
    /// `status.currentVolumeAttributesClassName` is the declared class: done (an end state).
    Modified,
    /// The driver refused the class for good (`modifyVolumeStatus.status: Infeasible`): an
    /// end state; declaring another class in git is the way out.
    Infeasible,
    /// Asked for (`Pending`: the class is not there yet; `InProgress`; or no word yet); a
    /// `ModifyVolumeError` condition beside it is the driver retrying.
    Modifying,
}

impl ModifyState {
    pub const ALL: [ModifyState; 3] = [
        ModifyState::Modified,
        ModifyState::Infeasible,
        ModifyState::Modifying,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ModifyState::Modified => "modified",
            ModifyState::Infeasible => "infeasible",
            ModifyState::Modifying => "modifying",
        }
    }

    /// `modified` and `infeasible`.
    pub fn is_end(self) -> bool {
        matches!(self, ModifyState::Modified | ModifyState::Infeasible)
    }
}

impl std::fmt::Display for ModifyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with the wire spelling, as the JSON of a record reads.
impl PartialEq<&str> for ModifyState {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A claim's move to the VolumeAttributesClass its template declares, beside its size (the
/// `attributes` of a followed claim): the class, the one the driver last applied, where the
/// move stands, the driver's words, and since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attributes {
    /// The declared class (`spec.volumeAttributesClassName` as patched).
    pub class: String,
    /// `status.currentVolumeAttributesClassName`: the class the volume has now.
    #[serde(default)]
    pub current: Option<String>,
    pub state: ModifyState,
    #[serde(default)]
    pub message: Option<String>,
    /// RFC 3339: when the move entered `state`.
    pub since: String,
}

impl Attributes {
    /// A move to `class` just asked for, from `current`.
    pub fn asked(class: &str, current: Option<String>, since: jiff::Timestamp) -> Self {
        Attributes {
            class: class.to_string(),
            current,
            state: ModifyState::Modifying,
            message: None,
            since: since.to_string(),
        }
    }
}

/// The pod a `filesystem-pending` claim's restart evicts (`restart` of a followed claim):
/// written into the record before the eviction is sent, so whoever leads next knows which pod
/// (by uid) this restart is about, and never evicts its successor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restart {
    pub pod: String,
    /// The pod's uid when the restart was decided: the eviction's precondition.
    pub uid: String,
    /// RFC 3339: when the eviction was accepted; absent while it is only decided (or a
    /// PodDisruptionBudget holds it back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evicted_at: Option<String>,
}

/// One followed claim as the records keep it (`volumes` of a StatefulSet entry, the CLI's
/// `-o json`): what it asks for, what it holds, where its expansion stands, the driver's words,
/// and since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub claim: String,
    /// `spec.resources.requests.storage`.
    #[serde(default)]
    pub requested: Option<String>,
    /// `status.capacity.storage`.
    #[serde(default)]
    pub capacity: Option<String>,
    pub state: VolumeState,
    #[serde(default)]
    pub message: Option<String>,
    /// RFC 3339: when the claim entered `state`.
    pub since: String,
    /// Its move to another VolumeAttributesClass, when the converge asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<Attributes>,
    /// The pod evicted (or to evict) to finish its file system resize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<Restart>,
}

impl Volume {
    /// `observed` of `claim`, in that state since `since`.
    pub fn observed(claim: &str, observed: Observed, since: jiff::Timestamp) -> Self {
        Volume {
            claim: claim.to_string(),
            requested: observed.requested,
            capacity: observed.capacity,
            state: observed.state,
            message: observed.message,
            since: since.to_string(),
            attributes: None,
            restart: None,
        }
    }

    /// Whether nothing more will happen to it without a change: its size at an end state, and
    /// its class move (if any) too.
    pub fn is_end(&self) -> bool {
        self.state.is_end() && self.attributes.as_ref().is_none_or(|a| a.state.is_end())
    }
}

/// One Event about a claim, as much of it as the classification reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResizeEvent {
    pub reason: String,
    pub message: String,
    /// When it last happened (`lastTimestamp`, else `eventTime`, else `firstTimestamp`).
    pub at: jiff::Timestamp,
}

/// Where a claim stands, and what the driver said about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub state: VolumeState,
    /// The driver's words (conditions, Events), and what to do where that is not obvious.
    pub message: Option<String>,
    /// `spec.resources.requests.storage`, as spelled on the claim.
    pub requested: Option<String>,
    /// `status.capacity.storage`, as spelled on the claim.
    pub capacity: Option<String>,
}

fn quantity(
    raw: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Option<Quantity> {
    raw.and_then(|q| Quantity::try_from(q).ok())
}

/// The claim's `spec.resources.requests.storage`.
pub fn requested(claim: &PersistentVolumeClaim) -> Option<Quantity> {
    quantity(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage")),
    )
}

/// The claim's `status.capacity.storage`: what the volume holds now.
pub fn capacity(claim: &PersistentVolumeClaim) -> Option<Quantity> {
    quantity(
        claim
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage")),
    )
}

/// Whether the claim is `Bound`.
pub fn is_bound(claim: &PersistentVolumeClaim) -> bool {
    claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// Whether the claim asks for more than its volume holds (a Bound claim whose request is above
/// its capacity): a claim to follow.
pub fn is_growing(claim: &PersistentVolumeClaim) -> bool {
    is_bound(claim)
        && match (requested(claim), capacity(claim)) {
            (Some(r), Some(c)) => r > c,
            (Some(_), None) => true,
            _ => false,
        }
}

/// Collapses runs of whitespace (a driver's multi-line error) so a message reads on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Where `claim` stands, from its status and `events` (the Events about it; those before
/// `not_before`, the request this expansion answers, are ignored). See the module docs.
pub fn classify(
    claim: &PersistentVolumeClaim,
    events: &[ResizeEvent],
    not_before: Option<jiff::Timestamp>,
) -> Observed {
    let requested_q = requested(claim);
    let capacity_q = capacity(claim);
    let raw = |q: &Option<Quantity>| q.as_ref().map(|q| q.as_str().to_string());
    let observed = |state, message: Option<String>| Observed {
        state,
        message,
        requested: raw(&requested_q),
        capacity: raw(&capacity_q),
    };
    let status = claim.status.as_ref();
    if !is_bound(claim) {
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
        let what = if phase.is_empty() {
            "has no phase".to_string()
        } else {
            format!("is {phase}")
        };
        return observed(
            VolumeState::Deferred,
            Some(format!("claim {what}, not Bound: it grows once it binds")),
        );
    }
    if let (Some(r), Some(c)) = (&requested_q, &capacity_q)
        && c >= r
    {
        return observed(VolumeState::Grown, None);
    }
    // The resizer writes the size it works on into `allocatedResources` when it starts: while
    // that is another size than the request (a request raised again, or lowered by a
    // recovery), its statuses and error conditions are about that other request.
    let allocated_size = quantity(
        status
            .and_then(|s| s.allocated_resources.as_ref())
            .and_then(|m| m.get("storage")),
    );
    if allocated_size.is_some() && allocated_size != requested_q {
        return observed(VolumeState::Requested, None);
    }
    let allocated = status
        .and_then(|s| s.allocated_resource_statuses.as_ref())
        .and_then(|m| m.get("storage"))
        .map(String::as_str);
    let conditions: Vec<(&str, &str)> = status
        .and_then(|s| s.conditions.as_ref())
        .map(|cs| {
            cs.iter()
                .filter(|c| c.status == "True")
                .map(|c| (c.type_.as_str(), c.message.as_deref().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    let condition = |types: &[&str]| {
        conditions
            .iter()
            .find(|(t, _)| types.contains(t))
            .map(|(t, m)| (*t, one_line(m)))
    };
    // Event times are whole seconds (`metav1.Time`): one of the request's own second counts.
    let not_before = not_before.and_then(|t| jiff::Timestamp::from_second(t.as_second()).ok());
    let mut recent: Vec<&ResizeEvent> = events
        .iter()
        .filter(|e| reason::ALL.contains(&e.reason.as_str()))
        .filter(|e| not_before.is_none_or(|t| e.at >= t))
        .collect();
    recent.sort_by_key(|e| e.at);
    let newest_failure = recent
        .iter()
        .rev()
        .find(|e| e.reason == reason::VOLUME_RESIZE_FAILED)
        .map(|e| one_line(&e.message));
    // Without `allocatedResourceStatuses` (servers before 1.32, drivers that do not set it)
    // the newest resize Event since the request is a signal of its own.
    let fallback = if allocated.is_none() {
        recent.last().map(|e| e.reason.as_str())
    } else {
        None
    };
    let with_failure = |head: String| match &newest_failure {
        Some(event) if !head.contains(event.as_str()) => {
            format!("{head}; newest VolumeResizeFailed Event: {event}")
        }
        _ => head,
    };

    if let Some(s @ (status::CONTROLLER_RESIZE_INFEASIBLE | status::NODE_RESIZE_INFEASIBLE)) =
        allocated
    {
        let head = match condition(&[
            condition::CONTROLLER_RESIZE_ERROR,
            condition::NODE_RESIZE_ERROR,
        ]) {
            Some((t, m)) if !m.is_empty() => format!("{s} ({t}: {m})"),
            _ => s.to_string(),
        };
        return observed(
            VolumeState::Infeasible,
            Some(format!(
                "{}: the driver will not grow this volume to the request; declare a size \
                 above the capacity in git to recover",
                with_failure(head)
            )),
        );
    }
    if let Some((t, m)) = condition(&[
        condition::CONTROLLER_RESIZE_ERROR,
        condition::NODE_RESIZE_ERROR,
    ]) {
        let head = if m.is_empty() {
            t.to_string()
        } else {
            format!("{t}: {m}")
        };
        return observed(
            VolumeState::Error,
            Some(format!("{}; the driver retries", with_failure(head))),
        );
    }
    if fallback == Some(reason::VOLUME_RESIZE_FAILED) {
        let head = newest_failure.clone().unwrap_or_default();
        return observed(
            VolumeState::Error,
            Some(format!("VolumeResizeFailed: {head}; the driver retries")),
        );
    }
    let fs_condition = condition(&[condition::FILE_SYSTEM_RESIZE_PENDING]);
    if allocated == Some(status::NODE_RESIZE_PENDING)
        || fs_condition.is_some()
        || fallback == Some(reason::FILE_SYSTEM_RESIZE_REQUIRED)
    {
        let said = match &fs_condition {
            Some((t, m)) if !m.is_empty() => format!(": {t}: {m}"),
            _ => String::new(),
        };
        return observed(
            VolumeState::FilesystemPending,
            Some(format!(
                "the volume grew; the node grows the file system when a pod next mounts the \
                 claim (restart the pod using it){said}"
            )),
        );
    }
    let resizing = condition(&[condition::RESIZING]);
    if matches!(
        allocated,
        Some(status::CONTROLLER_RESIZE_IN_PROGRESS | status::NODE_RESIZE_IN_PROGRESS)
    ) || resizing.is_some()
        || matches!(
            fallback,
            Some(reason::RESIZING | reason::EXTERNAL_EXPANDING)
        )
    {
        let message = match (allocated, &resizing) {
            (_, Some((_, m))) if !m.is_empty() => Some(m.clone()),
            (Some(s), _) => Some(s.to_string()),
            _ => None,
        };
        return observed(VolumeState::Resizing, message);
    }
    observed(VolumeState::Requested, None)
}

/// `status.currentVolumeAttributesClassName` of a claim.
pub fn current_attributes_class(claim: &PersistentVolumeClaim) -> Option<String> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.current_volume_attributes_class_name.clone())
        .filter(|c| !c.is_empty())
}

/// Where `claim`'s move to the VolumeAttributesClass `class` stands, from its status and the
/// modify Events about it since `not_before` (see [`ModifyState`]): the state, the driver's
/// words, the class it has now.
pub fn classify_attributes(
    claim: &PersistentVolumeClaim,
    class: &str,
    events: &[ResizeEvent],
    not_before: Option<jiff::Timestamp>,
) -> (ModifyState, Option<String>, Option<String>) {
    let current = current_attributes_class(claim);
    if current.as_deref() == Some(class) {
        return (ModifyState::Modified, None, current);
    }
    let status = claim.status.as_ref();
    let condition = |kind: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == kind && c.status == "True"))
            .and_then(|c| c.message.as_deref())
            .map(one_line)
            .filter(|m| !m.is_empty())
    };
    let not_before = not_before.and_then(|t| jiff::Timestamp::from_second(t.as_second()).ok());
    let newest_failure = events
        .iter()
        .filter(|e| e.reason == reason::VOLUME_MODIFY_FAILED)
        .filter(|e| not_before.is_none_or(|t| e.at >= t))
        .max_by_key(|e| e.at)
        .map(|e| one_line(&e.message));
    let with_failure = |head: String| match &newest_failure {
        Some(event) if !head.contains(event.as_str()) => {
            format!("{head}; newest VolumeModifyFailed Event: {event}")
        }
        _ => head,
    };
    let modify = status
        .and_then(|s| s.modify_volume_status.as_ref())
        .filter(|m| m.target_volume_attributes_class_name.as_deref() == Some(class));
    let error = condition(condition::MODIFY_VOLUME_ERROR);
    match modify.map(|m| m.status.as_str()) {
        Some(modify_status::INFEASIBLE) => {
            let said = error
                .or_else(|| condition(condition::MODIFYING_VOLUME))
                .map(|m| format!("Infeasible ({}: {m})", condition::MODIFY_VOLUME_ERROR))
                .unwrap_or_else(|| "Infeasible".to_string());
            (
                ModifyState::Infeasible,
                Some(format!(
                    "{}: the driver will not apply the VolumeAttributesClass {class:?} to this \
                     volume; declare another class in git",
                    with_failure(said)
                )),
                current,
            )
        }
        Some(modify_status::PENDING) => (
            ModifyState::Modifying,
            Some(with_failure(format!(
                "Pending: the VolumeAttributesClass {class:?} cannot be applied yet (does it \
                 exist?)"
            ))),
            current,
        ),
        Some(_) => {
            let message = match error {
                Some(m) => Some(with_failure(format!(
                    "{}: {m}; the driver retries",
                    condition::MODIFY_VOLUME_ERROR
                ))),
                None => condition(condition::MODIFYING_VOLUME).or(Some("InProgress".to_string())),
            };
            (ModifyState::Modifying, message, current)
        }
        None => (
            ModifyState::Modifying,
            newest_failure
                .clone()
                .map(|e| format!("VolumeModifyFailed: {e}")),
            current,
        ),
    }
}

/// `observed` past the resize timeout: a claim not at an end state (nor deferred) `timeout`
/// after its request is `stalled`, with what it was doing kept in the message.
pub fn past_timeout(
    observed: Observed,
    requested_at: jiff::Timestamp,
    now: jiff::Timestamp,
    timeout: std::time::Duration,
) -> Observed {
    if observed.state.is_end() || observed.state == VolumeState::Deferred {
        return observed;
    }
    let waited = now.duration_since(requested_at);
    let limit = jiff::SignedDuration::try_from(timeout).unwrap_or(jiff::SignedDuration::MAX);
    if waited < limit {
        return observed;
    }
    let shown = humantime::format_duration(timeout);
    let message = match &observed.message {
        Some(m) => format!(
            "still {} after {shown} (--resize-timeout): {m}",
            observed.state
        ),
        None => format!("still {} after {shown} (--resize-timeout)", observed.state),
    };
    Observed {
        state: VolumeState::Stalled,
        message: Some(message),
        ..observed
    }
}

pub mod follow;
pub mod restart;

#[cfg(test)]
mod tests;
