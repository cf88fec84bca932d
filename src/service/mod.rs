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

use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::http::backend::Backend;
use crate::model::Key;
use crate::records::metrics::Metrics;
use crate::records::results::Results;
pub use crate::service::config::{Config, ConfigBuilder, Tuning};
pub use crate::service::gate::GateOutcome;
pub use crate::service::kustomization::Runner;
use crate::service::leadership::LeaderError;
use crate::service::leadership::fence::ServiceFence;
pub use crate::service::parts::build_parts;
use crate::service::queue::Queue;
pub use crate::service::resume::JournalResume;
pub use crate::service::running::Running;
pub use crate::service::start::{start, start_tuned, start_with};

/// What finishes a previous process's unfinished converges when this one starts leading.
pub trait Resume: Send + Sync + 'static {
    fn resume_all(&self) -> BoxFuture<'_, ()>;

    /// The intents the last [`Resume::resume_all`] left in the journal because they are not
    /// what they say (named in `/status` as `refusedIntents`).
    fn refused(&self) -> Vec<crate::journal::RefusedIntent> {
        Vec::new()
    }
}

/// The parts [`start_with`] assembles: the Kustomizations' run and records, the other gated
/// kinds, the queue they share, the resume, the HTTP apps.
pub struct Parts {
    /// One revision of one Kustomization (the gate; a test's stand-in).
    pub runner: Arc<dyn Runner>,
    /// The Kustomizations' records: [`start_with`] follows them from the cluster (on every
    /// replica) and reads what is due from them.
    pub results: Results,
    /// The lane's queue: every kind is made with it, to push its due objects into.
    pub queue: Queue<Key>,
    /// The gated kinds after the Kustomizations, in the order `/status` lists them
    /// (HelmReleases; a test's stand-in kind).
    pub kinds: Vec<Arc<dyn kind::GatedKind>>,
    pub resume: Arc<dyn Resume>,
    /// Builds the HTTP app over the service's backend.
    pub app: Box<dyn FnOnce(Arc<dyn Backend>) -> axum::Router + Send>,
    /// The app of the metrics port (`http::metrics_router`): it never sees the backend.
    pub metrics_app: axum::Router,
    pub metrics: Metrics,
    /// The fence the runs' and the resume's converges ask: [`start_with`] binds it to the
    /// leadership it sets up and waits for its windows at shutdown.
    pub fence: ServiceFence,
    /// The artifact storage, when `--storage-path` is set and writable: [`start_with`] serves
    /// it on `--storage-addr` and keeps it following the ExternalArtifacts.
    pub storage: Option<Arc<crate::storage::Storage>>,
    /// The claim follower the runs hand their converged revisions to (`service::volumes`):
    /// [`start_with`] resumes it from the records when this replica leads, stops it when it
    /// does not and at shutdown; `None` follows nothing.
    pub volumes: Option<volumes::VolumeFollower>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("cannot listen on {addr} ({flag}): {error}")]
    Listen {
        flag: &'static str,
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error("{0}")]
    Setup(String),
}
