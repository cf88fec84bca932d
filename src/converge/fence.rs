//! Fencing: a converge asks, right before each kind of write that could fight another
//! replica's (the claim patches, the orphan delete), whether this process may still write.
//!
//! The converge does not know about Leases: the service gives it a [`Fence`] backed by its
//! leadership (a replica that lost its Lease, or can no longer prove on its own clock that it
//! still holds it, answers `Err`); the command line runs alone and passes none. A refused check
//! stops the converge before the write, as any failed step does: what was written so far is
//! finished by whoever holds the Lease now, from the journal.

use std::sync::Arc;

/// May this process write now? `Err` carries why not (named in the run's error).
pub trait Fence: Send + Sync + std::fmt::Debug {
    fn check(&self) -> Result<(), String>;
}

/// Shared form the converge's options carry.
pub type SharedFence = Arc<dyn Fence>;

/// A fence that always lets writes through (the command line; tests).
#[derive(Clone, Copy, Debug, Default)]
pub struct Open;

impl Fence for Open {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}
