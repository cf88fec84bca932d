//! Why the service could not start.

use std::net::SocketAddr;

use crate::service::leadership::LeaderError;

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
