//! One converge's context ([`Run`]): the StatefulSet, what has been written so far, and the
//! errors that say so. The phases are `impl Run` blocks of their own modules (`prepare`,
//! `write`, `resume`).

use std::sync::atomic::{AtomicBool, Ordering};

use tracing::warn;

use super::error::{ConvergeError, Written};
use super::fence;
use super::options::Options;
use super::report::Step;
use crate::cluster::{CallError, Cluster};
use crate::journal::{Journal, JournalError};

/// One converge's context: the StatefulSet, and what it has written so far (atomics, not
/// cells: the converge future must stay `Send` for the service's workers).
pub(super) struct Run<'a, C, J> {
    pub(super) cluster: &'a C,
    pub(super) journal: &'a J,
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) options: &'a Options,
    /// A write of this converge reached (or may have reached) the server.
    pub(super) wrote: AtomicBool,
    /// An intent for this StatefulSet is in the journal.
    pub(super) intent_kept: AtomicBool,
}

impl<'a, C: Cluster, J: Journal> Run<'a, C, J> {
    pub(super) fn new(
        cluster: &'a C,
        journal: &'a J,
        namespace: &str,
        name: &str,
        options: &'a Options,
    ) -> Self {
        Run {
            cluster,
            journal,
            namespace: namespace.to_string(),
            name: name.to_string(),
            options,
            wrote: AtomicBool::new(false),
            intent_kept: AtomicBool::new(false),
        }
    }

    pub(super) fn written(&self) -> Written {
        if self.intent_kept.load(Ordering::SeqCst) {
            Written::IntentKept
        } else if self.wrote.load(Ordering::SeqCst) {
            Written::Partial
        } else {
            Written::Nothing
        }
    }

    /// Marks a write as sent: even a failed one may have reached the server.
    pub(super) fn writing(&self) {
        self.wrote.store(true, Ordering::SeqCst);
    }

    pub(super) fn call_err(&self, step: Step) -> impl FnOnce(CallError) -> ConvergeError + '_ {
        move |cause| ConvergeError::Call {
            step,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            cause,
            written: self.written(),
        }
    }

    /// Asks the fence (if any) whether the write of `step` may go out.
    pub(super) fn fenced(&self, step: Step) -> Result<(), ConvergeError> {
        match &self.options.fence {
            Some(fence) => fence.check().map_err(self.fence_err(step)),
            None => Ok(()),
        }
    }

    /// Opens the window of `step` (the orphan delete, or a resume's re-apply of an absent
    /// object): the fence's check, and a guard held until the re-apply returns, so the
    /// service never stops this process while the StatefulSet may be absent.
    pub(super) fn window(&self, step: Step) -> Result<fence::Window, ConvergeError> {
        match &self.options.fence {
            Some(fence) => fence.open_window().map_err(self.fence_err(step)),
            None => Ok(fence::Window::none()),
        }
    }

    pub(super) fn fence_err(&self, step: Step) -> impl FnOnce(fence::Fenced) -> ConvergeError + '_ {
        move |fenced| {
            let message = fenced.to_string();
            warn!(statefulset = %self.name, namespace = %self.namespace, step = step.as_str(),
                  %message, "fenced: not writing");
            ConvergeError::Fenced {
                step,
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                message,
                written: self.written(),
            }
        }
    }

    pub(super) fn access_err(
        &self,
        step: Step,
        message: String,
        cause: &CallError,
    ) -> ConvergeError {
        ConvergeError::Access {
            step,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            message,
            code: cause.code().unwrap_or_default(),
            written: self.written(),
        }
    }

    pub(super) fn journal_err(
        &self,
        step: Step,
    ) -> impl FnOnce(JournalError) -> ConvergeError + '_ {
        move |cause| ConvergeError::Journal {
            step,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            cause,
            written: self.written(),
        }
    }
}
