//! The converger's own artifact storage: what the `artifact` gate publishes to Flux, and the
//! digest-keyed cache every render downloads through.
//!
//! - [`blobs`]: the files, one per digest, written by rename after verification; the cache bound.
//! - [`store`]: one download per digest, shared by concurrent callers; leases against eviction.
//! - [`index`]: what each ExternalArtifact publishes (kept: the current and the previous).
//! - [`artifacts`]: [`Storage`], the [`host::ArtifactHost`] the gate publishes through.
//! - [`server`]: the HTTP artifact server Flux fetches from (`--storage-addr`).
//! - [`follow`]: every replica keeps what the ExternalArtifacts publish (restart, followers).

pub mod artifacts;
pub mod blobs;
pub mod follow;
pub mod host;
pub mod index;
pub mod server;
pub mod store;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

pub use artifacts::{Expected, Storage};

/// Default bound of the render cache (unpinned blobs). Published artifacts come on top.
pub const DEFAULT_MAX_CACHE_BYTES: u64 = 1 << 30;

/// `--storage-addr`'s default port, as source-controller's (`:9090`).
pub const DEFAULT_STORAGE_PORT: u16 = 9090;

/// Why the storage could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{context}: {error}")]
    Io {
        context: String,
        error: std::io::Error,
    },
    #[error("published index {path}: {message}")]
    Index { path: String, message: String },
    #[error("artifact client: {0}")]
    Client(String),
}

/// Where the storage lives and how it is reached (`serve --storage-*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageConfig {
    /// `--storage-path`; `None`: no storage (renders download to a temporary file each time,
    /// no artifact server, the `artifact` gate cannot publish).
    pub path: Option<PathBuf>,
    /// `--storage-addr`: the artifact server's listen address.
    pub addr: SocketAddr,
    /// `--storage-adv-addr`: `host[:port]` written into published URLs.
    pub adv_addr: String,
    /// `--storage-max-cache-size`: bytes of cached (not published) artifacts kept.
    pub max_cache_bytes: u64,
}

impl Default for StorageConfig {
    /// No storage: what tests and embedders get unless they ask for one.
    fn default() -> Self {
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), DEFAULT_STORAGE_PORT);
        Self {
            path: None,
            addr,
            adv_addr: default_adv_addr(addr, None),
            max_cache_bytes: DEFAULT_MAX_CACHE_BYTES,
        }
    }
}

/// source-controller's default for `--storage-adv-addr`: the listen address's host, or the
/// machine's host name when it listens on every interface (in a pod: the pod's name, which
/// only resolves through a headless Service; set the flag to the Service's DNS name), and the
/// listen port.
pub fn default_adv_addr(addr: SocketAddr, hostname: Option<&str>) -> String {
    let host = if addr.ip().is_unspecified() {
        hostname
            .map(str::to_string)
            .or_else(system_hostname)
            .unwrap_or_else(|| "localhost".to_string())
    } else {
        match addr.ip() {
            IpAddr::V6(v6) => format!("[{v6}]"),
            IpAddr::V4(v4) => v4.to_string(),
        }
    };
    format!("{host}:{}", addr.port())
}

/// The host name (`HOSTNAME` as a pod sets it, else `/etc/hostname`).
fn system_hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advertised_address_defaults_like_source_controller() {
        let any = |port| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
        for (addr, hostname, expected) in [
            (any(9090), Some("converger-0"), "converger-0:9090"),
            (
                "127.0.0.1:8081".parse().unwrap(),
                Some("x"),
                "127.0.0.1:8081",
            ),
            ("[::1]:9090".parse().unwrap(), None, "[::1]:9090"),
        ] {
            assert_eq!(default_adv_addr(addr, hostname), expected, "{addr}");
        }
    }
}
