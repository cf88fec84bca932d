//! The converger's own artifact storage: what the `artifact` gate publishes to Flux, and the
//! digest-keyed cache every render downloads through.

pub mod host;
