//! Fencing: a converge asks, right before each kind of write that could fight another
//! replica's (the claim patches, the orphan delete), whether this process may still write.
//!
//! The converge does not know about Leases: the service gives it a [`Fence`] backed by its
//! leadership (a replica that lost its Lease, or can no longer prove on its own clock that it
//! still holds it, answers `Err`); the command line runs alone and passes none. A refused check
//! stops the converge before the write, as any failed step does: what was written so far is
//! finished by whoever holds the Lease now, from the journal.
//!
//! The same object hears about the converge's *window*: from right before the orphan delete
//! until the re-apply returns, the StatefulSet is (or may be) absent, and a process that stops
//! there leaves the pods without a controller until someone resumes the intent. A fence that
//! answers [`Fence::open_window`] with a held [`Window`] promises not to stop the process while
//! it lives (the service's shutdown waits for it); one that refuses stops the converge before
//! the delete, like [`Fence::check`].

use std::sync::Arc;
use std::time::Duration;

/// Why this process may not write now: named in the run's error, and counted by its label.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fenced {
    #[error("leadership is not set up yet")]
    NotSetUp,
    #[error("the Lease {lease} is held by {holder}")]
    HeldBy { lease: String, holder: String },
    #[error("this replica does not hold the Lease {lease}")]
    NotHeld { lease: String },
    #[error("this replica has not renewed the Lease {lease}")]
    NotRenewed { lease: String },
    #[error(
        "this replica cannot prove it still holds the Lease {lease}: its last renewal was \
         {since:.1?} ago, and a renewal is trusted for {valid:?} (lease duration {duration:?} \
         minus a margin of {margin:?})"
    )]
    Unproven {
        lease: String,
        since: Duration,
        valid: Duration,
        duration: Duration,
        margin: Duration,
    },
    #[error("the service is stopping")]
    Stopping,
}

impl Fenced {
    /// The reason as a metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Fenced::NotSetUp => "not_set_up",
            Fenced::HeldBy { .. } => "held_by_another",
            Fenced::NotHeld { .. } => "not_held",
            Fenced::NotRenewed { .. } => "not_renewed",
            Fenced::Unproven { .. } => "unproven",
            Fenced::Stopping => "stopping",
        }
    }
}

/// May this process write now? `Err` carries why not (named in the run's error).
pub trait Fence: Send + Sync + std::fmt::Debug {
    fn check(&self) -> Result<(), Fenced>;

    /// Asked right before the orphan delete (and a resume's re-apply of an absent object):
    /// the [`Fence::check`], and a [`Window`] the converge holds until the re-apply returns.
    fn open_window(&self) -> Result<Window, Fenced> {
        self.check().map(|()| Window::none())
    }
}

/// Shared form the converge's options carry.
pub type SharedFence = Arc<dyn Fence>;

/// Held by the converge between its orphan delete and the end of its re-apply; dropping it
/// tells whoever handed it out that the window closed (by success, failure or cancellation).
#[must_use = "the window closes when this is dropped"]
pub struct Window {
    _held: Option<Box<dyn Send + Sync>>,
}

impl Window {
    /// Nobody waits for this window.
    pub fn none() -> Self {
        Window { _held: None }
    }

    /// A window that stays open until `guard` is dropped with it.
    pub fn held(guard: impl Send + Sync + 'static) -> Self {
        Window {
            _held: Some(Box::new(guard)),
        }
    }
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("held", &self._held.is_some())
            .finish()
    }
}

/// A fence that always lets writes through (the command line; tests).
#[derive(Clone, Copy, Debug, Default)]
pub struct Open;

impl Fence for Open {
    fn check(&self) -> Result<(), Fenced> {
        Ok(())
    }
}
