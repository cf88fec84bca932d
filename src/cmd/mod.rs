//! The CLI commands. Each reads its input, calls the library and prints; exit codes are
//! the contract of DESIGN.md §5: 0 done/planned, 3 refused, 2 bad input or usage, 1 other failure.

pub mod converge;
pub mod plan;
pub mod render;

/// Process exit codes (DESIGN.md §5).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    Done = 0,
    Failure = 1,
    BadInput = 2,
    Refused = 3,
}

/// Marks an error as the user's input being wrong (exit 2) rather than a failure (exit 1).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct BadInput(#[from] pub anyhow::Error);

/// Wraps any error as bad input (exit 2).
pub fn bad_input(e: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(BadInput(e.into()))
}

/// The exit code an error maps to: 2 when any cause in its chain is [`BadInput`], else 1.
pub fn exit_code_of(e: &anyhow::Error) -> Exit {
    if e.chain().any(|c| c.is::<BadInput>()) {
        Exit::BadInput
    } else {
        Exit::Failure
    }
}
