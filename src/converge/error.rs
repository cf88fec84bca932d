//! Why a converge stopped, and what it left behind: every message says whether running it again
//! retries (nothing written) or finishes (an intent kept) the work.

use super::report::Step;
use crate::cluster::CallError;
use crate::journal::JournalError;

/// What a failed converge left behind, so its message never claims "nothing was written"
/// after a write.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Written {
    /// No write of this converge reached the server: run again to retry.
    Nothing,
    /// Something was written (claims grown, an earlier intent finished) but no intent is
    /// pending: what was written stands, and the next run decides again from there.
    Partial,
    /// An intent is in the journal: the next run finishes it.
    IntentKept,
}

impl std::fmt::Display for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Written::Nothing => "nothing was written: run converge again to retry",
            Written::Partial => {
                "what was written so far stands (claims only grow; no delete is pending): run \
                 converge again to finish the work"
            }
            Written::IntentKept => {
                "the intent is kept in the journal: run converge again to finish the work"
            }
        })
    }
}

/// Why a converge stopped. Each message names the step, the object and the server's words,
/// and says what was written; re-running the converge finishes the work.
#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    #[error("step {step} of StatefulSet {namespace}/{name} failed: {cause}; {written}")]
    Call {
        step: Step,
        namespace: String,
        name: String,
        // Not a `source`: the message already carries it, and `{:#}` would print it twice.
        cause: CallError,
        written: Written,
    },
    #[error("step {step} of StatefulSet {namespace}/{name} failed: {cause}; {written}")]
    Journal {
        step: Step,
        namespace: String,
        name: String,
        cause: JournalError,
        written: Written,
    },
    /// A dry run (the proof, or the pre-flight create) was answered 401, 404 or RBAC's 403:
    /// the converger's access (or the namespace) must be fixed; the object itself was not
    /// judged, so this is no refusal.
    #[error("step {step} of StatefulSet {namespace}/{name} failed: {message}; {written}")]
    Access {
        /// `prove` or `preflight`.
        step: Step,
        namespace: String,
        name: String,
        message: String,
        /// The HTTP status of the dry run's answer (401, 403 or 404).
        code: u16,
        written: Written,
    },
    #[error(
        "StatefulSet {namespace}/{name} is being deleted by someone else (no intent of ours); \
         {written} once it is gone"
    )]
    Terminating {
        namespace: String,
        name: String,
        written: Written,
    },
    #[error("desired object {what}: {message}")]
    Invalid { what: String, message: String },
    /// The fence refused the next write: this replica may no longer write (it lost its Lease,
    /// or cannot prove it still holds it). Whoever holds the Lease finishes from the journal.
    #[error(
        "step {step} of StatefulSet {namespace}/{name} stopped: this replica may no longer write: \
         {message}; {written}"
    )]
    Fenced {
        step: Step,
        namespace: String,
        name: String,
        message: String,
        written: Written,
    },
}

impl ConvergeError {
    /// The step that failed, when the failure is in one.
    pub fn step(&self) -> Option<Step> {
        match self {
            ConvergeError::Call { step, .. }
            | ConvergeError::Journal { step, .. }
            | ConvergeError::Fenced { step, .. }
            | ConvergeError::Access { step, .. } => Some(*step),
            _ => None,
        }
    }

    /// What the failed converge left behind (`Nothing` for a bad desired object).
    pub fn written(&self) -> Written {
        match self {
            ConvergeError::Call { written, .. }
            | ConvergeError::Journal { written, .. }
            | ConvergeError::Access { written, .. }
            | ConvergeError::Terminating { written, .. }
            | ConvergeError::Fenced { written, .. } => *written,
            ConvergeError::Invalid { .. } => Written::Nothing,
        }
    }
}
