//! `serve`: the service around the converge (docs/service.md). The gated kinds run on one lane
//! ([`lane`]): each kind ([`kind::GatedKind`]: [`kustomization`], [`helmrelease`]) says what its
//! objects are and what a run of one does, the lane queues, runs, retries and pauses them, and
//! every run converges through the one converge step ([`step`]). [`start`] starts the watches,
//! the resync, the leader loop, the workers and the HTTP servers, each a task the returned
//! [`Running`] owns; it stops them in the one order that never leaves a StatefulSet between its
//! orphan delete and its re-apply (queue closed, running revisions given the grace, open
//! windows waited for past it, then everything else) and awaits every one.
//!
//! - [`start`], [`running`]: start-up and shutdown; [`parts`]: the parts built from the
//!   configuration ([`config`]); [`resume`]: the journal's intents a previous process left.
//! - [`lane`], [`kind`], [`queue`], [`hook_limit`]: what every kind shares.
//! - [`kustomization`] (with [`gate`], [`index`], [`watch`]), [`helmrelease`]: the kinds.
//! - [`step`], [`volumes`]: the converge step and the claim follower every kind's runs use.
//! - [`leadership`]: the Lease, its tenure and the fence of every write; [`access`],
//!   [`backend`]: what `http` reads of the service.

pub mod access;
pub mod application;
pub mod backend;
mod config;
pub mod error;
pub mod gate;
pub mod helmrelease;
pub mod hook_limit;
pub mod index;
pub mod kind;
pub mod kustomization;
pub mod lane;
pub mod leadership;
mod parts;
pub mod queue;
pub mod resume;
mod running;
mod start;
pub mod step;
pub mod volumes;
pub mod watch;

pub use crate::service::config::{Config, ConfigBuilder, Tuning};
pub use crate::service::error::ServiceError;
pub use crate::service::gate::GateOutcome;
pub use crate::service::kustomization::Runner;
pub use crate::service::parts::{Parts, build_parts};
pub use crate::service::resume::{JournalResume, Resume};
pub use crate::service::running::Running;
pub use crate::service::start::{start, start_tuned, start_with};
