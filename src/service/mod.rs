//! `serve`: the service around the converge (docs/service.md). The only place that spawns tasks.

pub mod index;
pub mod metrics;
pub mod queue;
pub mod record;
