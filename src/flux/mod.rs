//! What the converger reads from and does like Flux: its objects, artifacts, rendering and substitution.

pub mod artifact;
pub mod event;
pub mod objects;
pub mod render;
pub mod substitute;
