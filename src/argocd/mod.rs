//! Argo CD Applications (issue #39): the third gated kind, built as pure modules the lane will
//! call, and the thin edge to Argo CD's API server.
//!
//! An Application whose sync stopped on the StatefulSet immutable-field error is converged from
//! what Argo CD itself would apply (the managed resources' `targetState`), then handed back with a
//! sync operation; Argo CD's own options (`Replace=true`, `Force=true`) would delete the
//! StatefulSet with a background cascade, and every pod with it.
//!
//! - [`application`]: the Application fields read.
//! - [`act`]: the pure "when to act" decision, and the gate annotations as an Application reads them.
//! - [`operation`]: the hand-back (the sync operation written) and the reader of Argo CD's answer.
//! - [`project`]: the AppProject fields read, its destinations and destination service accounts.
//! - [`managed`]: the managed-resources answer → the desired StatefulSets, checked.
//! - [`recreate`]: how the re-created StatefulSet is written so Argo CD's next sync owns it.
//! - [`api`]: the Argo CD API server client (the only I/O here).
//!
//! docs/argocd.md is the design; the lane (watch, queue, `/status`, the run) is still to be wired.

pub mod act;
pub mod api;
pub mod application;
pub mod managed;
pub mod operation;
pub mod project;
pub mod recreate;
