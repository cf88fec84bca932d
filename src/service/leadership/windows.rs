//! The converges' open windows (orphan delete sent, re-apply not returned yet), counted so
//! that shutdown waits for them past its grace: a process stopped inside one leaves the
//! StatefulSet absent and its pods without a controller until the next leader resumes the
//! intent. Once shutdown has waited out its grace it seals the tracker: a window that was not
//! open by then is never opened (that converge stops before its delete), so the wait is
//! bounded by the windows already open, each by the converge's own timeouts.
//!
//! Each run is counted on its own too ([`RunWindows`], a task-local scope around the run), so
//! shutdown can stop a run that holds no window at the grace while another one's re-apply is
//! still waited for.

use std::future::Future;
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
    /// The run that opened it, when it ran in a [`RunWindows::scope`].
    run: Option<RunWindows>,
}

impl Drop for WindowGuard {
    fn drop(&mut self) {
        self.state
            .send_modify(|s| s.open = s.open.saturating_sub(1));
        if let Some(run) = &self.run {
            run.open.send_modify(|n| *n = n.saturating_sub(1));
        }
    }
}

tokio::task_local! {
    static RUN: RunWindows;
}

/// The windows one run holds.
#[derive(Clone, Debug, Default)]
pub struct RunWindows {
    open: Arc<watch::Sender<usize>>,
}

impl RunWindows {
    /// Polls `run` as this run: the windows its converges open are counted here as well.
    pub async fn scope<F: Future>(&self, run: F) -> F::Output {
        RUN.scope(self.clone(), run).await
    }

    /// Resolves once this run holds no window (at once when it holds none).
    pub async fn none_open(&self) {
        let mut open = self.open.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = open.wait_for(|n| *n == 0).await;
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
        if !opened {
            return None;
        }
        let run = RUN.try_with(RunWindows::clone).ok();
        if let Some(run) = &run {
            run.open.send_modify(|n| *n += 1);
        }
        Some(WindowGuard {
            state: self.state.clone(),
            run,
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

    #[tokio::test]
    async fn each_run_counts_its_own_windows() {
        use futures::FutureExt as _;
        let tracker = WindowTracker::default();
        let (a, b) = (RunWindows::default(), RunWindows::default());
        let held = a.scope(async { tracker.open() }).await.expect("open");
        let other = b.scope(async { tracker.open() }).await.expect("open");
        assert!(b.none_open().now_or_never().is_none(), "b holds one");
        drop(other);
        assert!(b.none_open().now_or_never().is_some(), "b holds none");
        assert!(a.none_open().now_or_never().is_none(), "a holds one");
        assert_eq!(tracker.open_count(), 1);
        drop(held);
        assert!(a.none_open().now_or_never().is_some());
        // Outside any run's scope a window is counted by the tracker alone.
        let unscoped = tracker.open().expect("open");
        assert_eq!(tracker.open_count(), 1);
        assert!(a.none_open().now_or_never().is_some());
        drop(unscoped);
    }
}
