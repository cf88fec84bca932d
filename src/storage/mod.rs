//! The converger's own artifact storage: what the `artifact` gate publishes to Flux, and the
//! digest-keyed cache every render downloads through.
//!
//! - [`blobs`]: the files, one per digest, written by rename after verification; the cache bound.
//! - [`store`]: one download per digest, shared by concurrent callers; leases against eviction.
//! - [`index`]: what each ExternalArtifact publishes, and source-controller's garbage collection
//!   of the ones it no longer points at (`--artifact-retention-records`, `--artifact-retention-ttl`).
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
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// How many published artifacts each ExternalArtifact keeps, and for how long: source-controller's
/// `--artifact-retention-records` and `--artifact-retention-ttl`, with its defaults (2, 1m).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// The maximum number of artifacts to be kept in storage after a garbage collection.
    pub records: usize,
    /// The duration after which stale artifacts are garbage collected.
    pub ttl: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            records: 2,
            ttl: Duration::from_secs(60),
        }
    }
}

impl Retention {
    /// How often every ExternalArtifact's artifacts are collected besides at each publish
    /// (source-controller collects at each reconcile of the object): about once per TTL, so
    /// an expired artifact goes within two TTLs, at most every second and at least every
    /// minute.
    pub fn sweep_interval(&self) -> Duration {
        self.ttl
            .clamp(Duration::from_secs(1), Duration::from_secs(60))
    }
}

/// Where the storage lives and how it is reached (`serve --storage-*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageConfig {
    /// `--storage-path`; `None`: no storage (renders download to a temporary file each time,
    /// no artifact server, the `artifact` gate cannot publish). A path given is created
    /// (parents too) and must be writable, as source-controller's.
    pub path: Option<PathBuf>,
    /// Why there is no storage (`path: None`) though one was meant to be there: the default
    /// directory neither exists nor can be created. The `artifact` gate's refusal and
    /// `/readyz` (while a Kustomization uses that gate) say it, so no one is left guessing.
    pub unavailable: Option<String>,
    /// `--storage-addr`: the artifact server's listen address.
    pub addr: SocketAddr,
    /// `--storage-adv-addr`: `host[:port]` written into published URLs.
    pub adv_addr: String,
    /// `--storage-max-cache-size`: bytes of cached (not published) artifacts kept.
    pub max_cache_bytes: u64,
    /// `--artifact-retention-*`: the garbage collection of published artifacts.
    pub retention: Retention,
}

impl Default for StorageConfig {
    /// No storage: what tests and embedders get unless they ask for one.
    fn default() -> Self {
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), DEFAULT_STORAGE_PORT);
        Self {
            path: None,
            unavailable: None,
            addr,
            adv_addr: default_adv_addr(addr, None),
            max_cache_bytes: DEFAULT_MAX_CACHE_BYTES,
            retention: Retention::default(),
        }
    }
}

/// Creates the storage directory and its parents, as source-controller does at start, and
/// proves it writable by creating and removing a file in it: a volume mounted read-only or a
/// path under a file is found here, at start, not at the first publish.
pub fn prepare(path: &Path) -> Result<(), StorageError> {
    std::fs::create_dir_all(path).map_err(|error| StorageError::Io {
        context: format!("creating {}", path.display()),
        error,
    })?;
    let probe = tempfile::Builder::new()
        .prefix(".write-test")
        .tempfile_in(path)
        .map_err(|error| StorageError::Io {
            context: format!("writing in {}", path.display()),
            error,
        })?;
    probe.close().map_err(|error| StorageError::Io {
        context: format!("removing a test file in {}", path.display()),
        error,
    })
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
