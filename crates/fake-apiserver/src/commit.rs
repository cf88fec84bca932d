//! What a write hands back: its answer and what it committed to the store ([`Written`],
//! [`Commit`]). The caller runs the controllers on the commit (`controllers::after_commit`)
//! before it lets the state lock go; the write pipeline never runs a controller itself, the way
//! a real API server only writes to etcd and kube-controller-manager reacts to what it then
//! watches.

use serde_json::Value;

use super::errors::ApiError;
use super::resources::ResourceType;
use super::store::Pending;

/// What one write committed to the store, for the controllers its caller runs after it.
#[derive(Debug, Clone)]
pub struct Commit {
    /// The type written.
    pub rt: ResourceType,
    /// The namespace the controllers look at again (`None`: every namespace).
    pub namespace: Option<String>,
    pub change: Change,
}

/// What the controllers have to do about a commit.
#[derive(Debug, Clone)]
pub enum Change {
    /// An object stored, replaced or removed: the volume binder, the StatefulSet controller and
    /// pvc-protection look again.
    Stored,
    /// A Namespace created (as stored): first the service-account controller gives it its
    /// `default` ServiceAccount.
    NamespaceCreated(Value),
    /// First work for the garbage collector: the finalizers of an object being deleted, or the
    /// dependents of an owner just removed.
    Collect(Pending),
    /// A Namespace marked `Terminating`: the namespace controller empties it, then removes it.
    /// Nothing else runs.
    NamespaceTerminating(String),
    /// An object being deleted, removed by the update that took its last finalizer. Nothing
    /// runs: the controllers see the removal at the next write.
    Finalized,
}

impl Commit {
    pub fn new(rt: &ResourceType, namespace: Option<&str>, change: Change) -> Self {
        Commit {
            rt: *rt,
            namespace: namespace.map(str::to_string),
            change,
        }
    }

    /// An object of `rt` stored, replaced or removed in `namespace`.
    pub fn stored(rt: &ResourceType, namespace: Option<&str>) -> Self {
        Commit::new(rt, namespace, Change::Stored)
    }
}

/// What a write answered (the HTTP code and the object), and what it committed: `None` for a
/// dry run or a write that changed nothing.
#[derive(Debug, Clone)]
pub struct Written {
    pub code: u16,
    pub object: Value,
    pub commit: Option<Commit>,
}

impl Written {
    /// An answer that committed nothing.
    pub fn answer(code: u16, object: Value) -> Self {
        Written {
            code,
            object,
            commit: None,
        }
    }

    pub fn committed(code: u16, object: Value, commit: Commit) -> Self {
        Written {
            code,
            object,
            commit: Some(commit),
        }
    }
}

pub type WriteResult = Result<Written, ApiError>;
