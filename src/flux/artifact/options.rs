//! The knobs of a fetch and of an unpack, with Flux's defaults: `render` and `serve` fill them
//! from the same flags, so both refuse exactly what Flux's own reader would.

use std::time::Duration;

pub use crate::model::limits::DEFAULT_MAX_UNPACKED_BYTES;
/// Default cap on the downloaded (compressed) artifact: a gzip'd tree is smaller than the tree,
/// so nothing larger than the unpacked cap can be a valid artifact.
pub const DEFAULT_MAX_DOWNLOAD_BYTES: u64 = DEFAULT_MAX_UNPACKED_BYTES;
/// Default cap on one unpacked file. Every YAML file of the tree is read whole (the generator's
/// parse check, kustomize), so this bounds the memory one file can take; Kubernetes caps an
/// object near 1.5 MiB, so even the largest CRD bundles stay far below it.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 32 << 20;
/// Default cap on the number of archive entries.
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;

/// Caps on what an archive may unpack to: an artifact comes from any tenant's repository, so
/// none of it may exhaust the disk or memory every tenant shares. `render` and `serve` fill it
/// from the same flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Bytes of all files together.
    pub max_bytes: u64,
    pub max_entries: u64,
    /// Bytes of any one file, refused from its tar header before a byte of it is written.
    pub max_file_bytes: u64,
}

impl Default for UnpackLimits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_UNPACKED_BYTES,
            max_entries: DEFAULT_MAX_ENTRIES,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }
}

/// How artifacts are fetched.
///
/// By default a fetch is a single download attempt: a failure goes back to the caller, and
/// the service retries it through its queue's backoff, so a failing source never holds a
/// worker while it waits ([`ArtifactError::is_bad_input`](super::error::ArtifactError::is_bad_input) tells a retryable failure from a bad
/// artifact). The CLI, which has no queue, asks for retries (`render --fetch-retries`).
#[derive(Clone, Debug)]
pub struct FetchOptions {
    pub max_download_bytes: u64,
    pub unpack: UnpackLimits,
    /// Attempts after the first one, on connection errors and 5xx (default none).
    pub retries: u32,
    /// First backoff between attempts; doubles each retry up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// Per-request timeout (whole download).
    pub timeout: Duration,
    /// `SOURCE_CONTROLLER_LOCALHOST`: replaces the URL's host (and port), as Flux does.
    pub host_override: Option<String>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self {
            max_download_bytes: DEFAULT_MAX_DOWNLOAD_BYTES,
            unpack: UnpackLimits::default(),
            retries: 0,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(10),
            timeout: Duration::from_secs(300),
            host_override: None,
        }
    }
}

impl FetchOptions {
    /// Reads `SOURCE_CONTROLLER_LOCALHOST` (empty = unset), as kustomize-controller does.
    pub fn with_env_host_override(mut self) -> Self {
        self.host_override = std::env::var("SOURCE_CONTROLLER_LOCALHOST")
            .ok()
            .filter(|h| !h.is_empty());
        self
    }
}
