//! The domain model every part shares: a gated object's key, the gate mode, the trigger, the
//! per-revision record with each StatefulSet's outcome, the refusal code and the one outcome of a
//! run (`outcome`). `http`, `records`, `service` and the CLI
//! all speak these types; nothing here does I/O or imports another module of the crate but the
//! pure core (`decide`).

pub mod artifact;
pub mod body;
mod key;
mod kind;
pub mod limits;
mod outcome;
mod record;

pub use key::Key;
pub use kind::{Kind, KindSpec};
pub use outcome::GateOutcome;
pub use record::*;
