//! Converging StatefulSets against a cluster (docs/converge.md): decide → prove → pre-flight
//! → grow → record → orphan-delete → wait → re-apply → clear, so that a run interrupted
//! anywhere is finished by the next one.
//!
//! A set (one revision, one file) is converged all or nothing: every StatefulSet is decided,
//! proven and pre-flighted before any is written, so one refusal leaves the others untouched
//! rather than applying half a revision.
//!
//! The order of the writes is what keeps data safe: claims grow (only from the version they
//! were decided on, so nobody's raise is undone) while the old StatefulSet still owns its
//! pods; the intent holding the desired object is recorded right before the delete, so from
//! then on an absent StatefulSet is ours to re-apply, and before then one is someone else's
//! to keep deleted; the delete orphans (pods and claims stay) and carries the uid it decided
//! on (a StatefulSet re-created by someone else is never deleted).
//!
//! - [`options`]: the knobs ([`Options`]); [`error`]: why a converge stopped and what it wrote.
//! - [`set`]: a set all or nothing ([`converge_all`], [`converge`]).
//! - [`prepare`]: the write-free phase (decide, [`prove`], [`preflight`]); [`write`]: the
//!   write phase; [`resume`]: an intent finished ([`resume_all`] on start).
//! - `run`, `work`: one converge's context, and what the two phases hand each other.
//! - [`report`]: what a converge did; [`fence`]: the service's say before each write.

pub mod desired;
pub mod error;
pub mod fence;
pub mod options;
pub mod preflight;
mod prepare;
pub mod prove;
pub mod report;
pub mod resume;
mod run;
pub mod set;
mod work;
pub mod write;

pub use desired::clean_desired;
pub use error::{ConvergeError, Written};
pub use options::Options;
pub use report::{
    ClaimAction, ClaimReport, Outcome, RefusalReport, Report, ResumeAction, ResumeReport, Step,
    StepTiming,
};
pub use resume::{NotResumed, Resumed, resume_all};
pub use set::{converge, converge_all};
pub use write::MAX_CLAIM_CONFLICTS;

#[cfg(test)]
mod memory;
#[cfg(test)]
mod tests;
