//! The converges' open windows (orphan delete sent, re-apply not returned yet), counted so
//! that shutdown waits for them past its grace: a process stopped inside one leaves the
//! StatefulSet absent and its pods without a controller until the next leader resumes the
//! intent. Once shutdown has waited out its grace it seals the tracker: a window that was not
//! open by then is never opened (that converge stops before its delete), so the wait is
//! bounded by the windows already open, each by the converge's own timeouts.

use std::sync::Arc;

use tokio::sync::watch;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct State {
    open: usize,
    sealed: bool,
}

/// Shared by the service's fence (which opens windows for the converges) and its shutdown.
#[derive(Clone, Debug, Default)]
pub struct WindowTracker {
    state: Arc<watch::Sender<State>>,
}

/// One open window; closes it when dropped (the re-apply returned, failed, or the converge
/// was dropped).
#[derive(Debug)]
pub struct WindowGuard {
    state: Arc<watch::Sender<State>>,
}

impl Drop for WindowGuard {
    fn drop(&mut self) {
        self.state
            .send_modify(|s| s.open = s.open.saturating_sub(1));
    }
}

impl WindowTracker {
    /// Opens a window, unless shutdown has sealed the tracker (`None`: do not start the delete).
    pub fn open(&self) -> Option<WindowGuard> {
        let mut opened = false;
        self.state.send_if_modified(|s| {
            opened = !s.sealed;
            if opened {
                s.open += 1;
            }
            opened
        });
        opened.then(|| WindowGuard {
            state: self.state.clone(),
        })
    }

    /// How many windows are open now.
    pub fn open_count(&self) -> usize {
        self.state.borrow().open
    }

    /// No window opens from now on.
    pub fn seal(&self) {
        self.state.send_modify(|s| s.sealed = true);
    }

    pub fn is_sealed(&self) -> bool {
        self.state.borrow().sealed
    }

    /// Resolves once no window is open (at once when none is).
    pub async fn closed(&self) {
        let mut state = self.state.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = state.wait_for(|s| s.open == 0).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sealing_keeps_open_windows_and_refuses_new_ones() {
        use futures::FutureExt as _;
        let tracker = WindowTracker::default();
        assert!(tracker.closed().now_or_never().is_some(), "none open");
        let first = tracker.open().expect("open before sealing");
        let second = tracker.open().expect("open before sealing");
        assert_eq!(tracker.open_count(), 2);
        tracker.seal();
        assert!(tracker.is_sealed());
        assert!(tracker.open().is_none(), "sealed: no new window");
        drop(first);
        assert_eq!(tracker.open_count(), 1);
        assert!(tracker.closed().now_or_never().is_none(), "one still open");
        drop(second);
        assert!(tracker.closed().now_or_never().is_some(), "all closed");
    }
}
