//! `serve`: the service around the converge (docs/service.md). The only place that spawns tasks.

pub mod events;
pub mod gate;
pub mod metrics;
pub mod record;
pub mod results;
