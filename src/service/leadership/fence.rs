//! The converge's [`Fence`] inside the service: a write goes out only while this replica can
//! prove it holds the Lease ([`Tenure`]), and an orphan delete starts only while shutdown has
//! not sealed the [`WindowTracker`], which then waits for the window to close.

use crate::converge::fence::{Fence, Fenced, Window};
use crate::service::leadership::tenure::Tenure;
use crate::service::leadership::windows::WindowTracker;

#[derive(Clone, Debug, Default)]
pub struct ServiceFence {
    pub tenure: Tenure,
    pub windows: WindowTracker,
}

impl Fence for ServiceFence {
    fn check(&self) -> Result<(), Fenced> {
        self.tenure.check()
    }

    fn open_window(&self) -> Result<Window, Fenced> {
        self.tenure.check()?;
        match self.windows.open() {
            Some(guard) => Ok(Window::held(guard)),
            None => Err(Fenced::Stopping),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_opens_only_for_a_replica_that_may_write_and_is_not_stopping() {
        let fence = ServiceFence::default();
        assert!(fence.open_window().is_err(), "leadership not set up");
        assert_eq!(fence.windows.open_count(), 0);
        fence.tenure.bind_always();
        let window = fence.open_window().expect("may write");
        assert_eq!(fence.windows.open_count(), 1);
        drop(window);
        assert_eq!(fence.windows.open_count(), 0);
        fence.windows.seal();
        let refused = fence.open_window().expect_err("stopping");
        assert_eq!(refused, Fenced::Stopping);
        assert!(refused.to_string().contains("stopping"), "{refused}");
        assert!(fence.check().is_ok(), "other writes are the grace's to cut");
    }
}
