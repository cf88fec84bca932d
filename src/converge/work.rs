//! What the write-free phase hands the write phase of one StatefulSet: the types both sides
//! (and the set's all-or-nothing loop between them) agree on.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

use crate::decide::Plan;

/// What the write-free phase of one StatefulSet found.
pub(super) enum Prep {
    /// `None`: nothing to write.
    Work(Option<Work>),
    /// It decided on a watched copy the proof's answer did not confirm (another uid, a
    /// terminating object, or a refusal the copy may have caused): read the object and
    /// prepare again.
    Stale,
}

/// What the write phase of one StatefulSet does, as the write-free phase prepared it.
pub(super) enum Work {
    /// A resume found our own delete in flight: carry on from the delete.
    InFlight { uid: String },
    /// Grow the planned claims; when the plan re-creates: record, orphan, wait, re-apply.
    Planned(Box<Planned>),
}

/// Everything the write phase decided on: the live object, claims and classes as read.
pub(super) struct Planned {
    pub(super) uid: String,
    pub(super) live: StatefulSet,
    pub(super) claims: Vec<PersistentVolumeClaim>,
    pub(super) classes: Vec<StorageClass>,
    pub(super) plan: Plan,
    /// The server takes the plan's immutable changes in place: claims only, no re-create.
    pub(super) accepted: bool,
}

/// What the grow decides again on after a conflict.
pub(super) struct Grow<'a> {
    pub(super) desired: &'a StatefulSet,
    pub(super) live: &'a StatefulSet,
    pub(super) claims: &'a [PersistentVolumeClaim],
    pub(super) classes: &'a [StorageClass],
}
