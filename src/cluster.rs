//! Issue #3: to be implemented.
