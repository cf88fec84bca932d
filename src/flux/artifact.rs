//! Issue #4: to be implemented.
