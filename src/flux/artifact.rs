//! Fetching a Flux source artifact: streaming download, digest check, safe untar.
//!
//! The artifact comes from source-controller over plain HTTP without auth, so nothing in it is
//! trusted: the digest is checked while streaming (the file is never read twice), the download
//! and the unpacked tree are capped (decompression bombs), and entries that could write outside
//! the temporary root (absolute paths, `..`) or are not plain files/directories are refused.
//! Symlinks and hard links are skipped, as kustomize-controller does, so the unpacked tree has
//! none: the render's confinement checks can then reason about paths lexically.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use sha2::Digest as _;
use tokio::io::AsyncWriteExt;

/// Default cap on the bytes of all unpacked files: fluxcd/pkg's `tar.DefaultMaxUntarSize`
/// (100 MiB), so a revision Flux's own untar accepts by default is accepted here too, and one it
/// refuses cannot grow the converger's disk and memory instead.
pub const DEFAULT_MAX_UNPACKED_BYTES: u64 = 100 << 20;
/// Default cap on the downloaded (compressed) artifact: a gzip'd tree is smaller than the tree,
/// so nothing larger than the unpacked cap can be a valid artifact.
pub const DEFAULT_MAX_DOWNLOAD_BYTES: u64 = DEFAULT_MAX_UNPACKED_BYTES;
/// Default cap on one unpacked file. Every YAML file of the tree is read whole (the generator's
/// parse check, kustomize), so this bounds the memory one file can take; Kubernetes caps an
/// object near 1.5 MiB, so even the largest CRD bundles stay far below it.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 32 << 20;
/// Default cap on the number of archive entries.
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;

/// A digest algorithm Flux may publish.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Sha256,
    Sha384,
    Sha512,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sha256 => "sha256",
            Self::Sha384 => "sha384",
            Self::Sha512 => "sha512",
        }
    }

    fn hex_len(self) -> usize {
        match self {
            Self::Sha256 => 64,
            Self::Sha384 => 96,
            Self::Sha512 => 128,
        }
    }
}

/// An expected artifact digest, `<algorithm>:<hex>` (bare hex means sha256, as Flux's old format).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    pub algorithm: Algorithm,
    /// Lowercase hex.
    pub hex: String,
}

impl Digest {
    pub fn parse(text: &str) -> Result<Self, ArtifactError> {
        let bad = |reason: &str| ArtifactError::BadDigest {
            digest: text.to_string(),
            reason: reason.to_string(),
        };
        let (algorithm, hex) = match text.split_once(':') {
            None => (Algorithm::Sha256, text),
            Some(("sha256", h)) => (Algorithm::Sha256, h),
            Some(("sha384", h)) => (Algorithm::Sha384, h),
            Some(("sha512", h)) => (Algorithm::Sha512, h),
            Some((other, _)) => {
                return Err(bad(&format!(
                    "unsupported algorithm {other:?} (expected sha256, sha384 or sha512)"
                )));
            }
        };
        let hex = hex.to_ascii_lowercase();
        if hex.len() != algorithm.hex_len() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad(&format!(
                "expected {} hex digits for {}",
                algorithm.hex_len(),
                algorithm.as_str()
            )));
        }
        Ok(Self { algorithm, hex })
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.algorithm.as_str(), self.hex)
    }
}

/// A running hash of one of the supported algorithms (also the storage's re-check of a blob).
pub enum Hasher {
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
}

impl Hasher {
    pub fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::Sha256 => Self::Sha256(sha2::Sha256::new()),
            Algorithm::Sha384 => Self::Sha384(sha2::Sha384::new()),
            Algorithm::Sha512 => Self::Sha512(sha2::Sha512::new()),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Self::Sha256(h) => h.update(data),
            Self::Sha384(h) => h.update(data),
            Self::Sha512(h) => h.update(data),
        }
    }

    /// The lowercase hex of the digest.
    pub fn finish(self) -> String {
        match self {
            Self::Sha256(h) => hex::encode(h.finalize()),
            Self::Sha384(h) => hex::encode(h.finalize()),
            Self::Sha512(h) => hex::encode(h.finalize()),
        }
    }
}

/// Computes the digest of `data` with `algorithm` (for tests and offline artifacts).
pub fn digest_of(algorithm: Algorithm, data: &[u8]) -> Digest {
    let mut h = Hasher::new(algorithm);
    h.update(data);
    Digest {
        algorithm,
        hex: h.finish(),
    }
}

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
/// worker while it waits ([`ArtifactError::is_bad_input`] tells a retryable failure from a bad
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

/// An artifact unpacked into a temporary directory, removed when this is dropped.
#[derive(Debug)]
pub struct UnpackedArtifact {
    dir: tempfile::TempDir,
    pub stats: UnpackStats,
}

impl UnpackedArtifact {
    /// The artifact root (Flux's archive root `.`).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}

/// What an unpack wrote and skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnpackStats {
    pub files: u64,
    pub dirs: u64,
    pub bytes: u64,
    /// Symlinks and hard links, skipped as kustomize-controller does.
    pub skipped_links: Vec<String>,
}

/// Why an artifact could not be fetched or unpacked. Each names the URL or the entry.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("invalid artifact digest {digest:?}: {reason}")]
    BadDigest { digest: String, reason: String },
    #[error("invalid artifact URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    /// The artifact was garbage-collected (superseded): re-read the source's status.
    #[error("artifact {url} not found (404): it was probably superseded by a newer revision")]
    NotFound { url: String },
    #[error("downloading artifact {url}: HTTP {status}")]
    Http { url: String, status: u16 },
    #[error("downloading artifact {url}: {message}")]
    Connection { url: String, message: String },
    #[error(
        "artifact {url} is larger than the maximum download size of {limit} bytes{declared} (--max-artifact-size)"
    )]
    TooLarge {
        url: String,
        limit: u64,
        declared: String,
    },
    #[error("artifact {url} digest mismatch: expected {expected}, computed {actual}")]
    DigestMismatch {
        url: String,
        expected: String,
        actual: String,
    },
    #[error("archive {archive}: unsafe entry {entry:?}: {reason}")]
    UnsafeEntry {
        archive: String,
        entry: String,
        reason: String,
    },
    #[error(
        "archive {archive}: more than {limit} entries (decompression bomb?) (--max-artifact-entries)"
    )]
    TooManyEntries { archive: String, limit: u64 },
    #[error(
        "archive {archive}: unpacks to more than {limit} bytes (decompression bomb?) at entry {entry:?} (--max-unpacked-size)"
    )]
    UnpackedTooLarge {
        archive: String,
        limit: u64,
        entry: String,
    },
    #[error(
        "archive {archive}: file {entry:?} is {size} bytes, more than the maximum file size of {limit} bytes (--max-file-size)"
    )]
    FileTooLarge {
        archive: String,
        entry: String,
        size: u64,
        limit: u64,
    },
    #[error(
        "archive {archive}: decompresses to more than {limit} bytes and 1 MiB of tar headers (decompression bomb?) at or after entry {entry:?}: refused (--max-unpacked-size)"
    )]
    StreamTooLarge {
        archive: String,
        limit: u64,
        /// The last entry whose header was read when the cap was hit.
        entry: String,
    },
    #[error(
        "archive {archive}: a {record} record of {size} bytes, more than the maximum header record size of {limit} bytes (decompression bomb?)"
    )]
    HeaderRecordTooLarge {
        archive: String,
        record: &'static str,
        size: u64,
        limit: u64,
    },
    #[error("archive {archive}: not a valid tar.gz: {message}")]
    Corrupt { archive: String, message: String },
    #[error("{context}: {error}")]
    Io {
        context: String,
        error: std::io::Error,
    },
}

impl ArtifactError {
    /// Whether the artifact or its metadata is wrong (exit 2) rather than the network or disk failing.
    pub fn is_bad_input(&self) -> bool {
        !matches!(
            self,
            Self::Connection { .. } | Self::Io { .. } | Self::Http { .. }
        )
    }

    /// A failed download that may pass at the next attempt: the connection, or a 5xx.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Connection { .. } => true,
            Self::Http { status, .. } => *status >= 500,
            _ => false,
        }
    }

    /// A copy of this error, for every caller that shared one download (an I/O error keeps
    /// its kind and text).
    pub fn duplicate(&self) -> Self {
        match self {
            Self::BadDigest { digest, reason } => Self::BadDigest {
                digest: digest.clone(),
                reason: reason.clone(),
            },
            Self::BadUrl { url, reason } => Self::BadUrl {
                url: url.clone(),
                reason: reason.clone(),
            },
            Self::NotFound { url } => Self::NotFound { url: url.clone() },
            Self::Http { url, status } => Self::Http {
                url: url.clone(),
                status: *status,
            },
            Self::Connection { url, message } => Self::Connection {
                url: url.clone(),
                message: message.clone(),
            },
            Self::TooLarge {
                url,
                limit,
                declared,
            } => Self::TooLarge {
                url: url.clone(),
                limit: *limit,
                declared: declared.clone(),
            },
            Self::DigestMismatch {
                url,
                expected,
                actual,
            } => Self::DigestMismatch {
                url: url.clone(),
                expected: expected.clone(),
                actual: actual.clone(),
            },
            Self::UnsafeEntry {
                archive,
                entry,
                reason,
            } => Self::UnsafeEntry {
                archive: archive.clone(),
                entry: entry.clone(),
                reason: reason.clone(),
            },
            Self::TooManyEntries { archive, limit } => Self::TooManyEntries {
                archive: archive.clone(),
                limit: *limit,
            },
            Self::UnpackedTooLarge {
                archive,
                limit,
                entry,
            } => Self::UnpackedTooLarge {
                archive: archive.clone(),
                limit: *limit,
                entry: entry.clone(),
            },
            Self::FileTooLarge {
                archive,
                entry,
                size,
                limit,
            } => Self::FileTooLarge {
                archive: archive.clone(),
                entry: entry.clone(),
                size: *size,
                limit: *limit,
            },
            Self::StreamTooLarge {
                archive,
                limit,
                entry,
            } => Self::StreamTooLarge {
                archive: archive.clone(),
                limit: *limit,
                entry: entry.clone(),
            },
            Self::HeaderRecordTooLarge {
                archive,
                record,
                size,
                limit,
            } => Self::HeaderRecordTooLarge {
                archive: archive.clone(),
                record,
                size: *size,
                limit: *limit,
            },
            Self::Corrupt { archive, message } => Self::Corrupt {
                archive: archive.clone(),
                message: message.clone(),
            },
            Self::Io { context, error } => Self::Io {
                context: context.clone(),
                error: std::io::Error::new(error.kind(), error.to_string()),
            },
        }
    }

    fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |error| Self::Io { context, error }
    }
}

/// Applies `SOURCE_CONTROLLER_LOCALHOST`: like Go's `u.Host = override`, the whole
/// `host[:port]` is replaced (no port in the override means the scheme's default port).
pub fn rewrite_host(url: &str, host_override: Option<&str>) -> Result<reqwest::Url, ArtifactError> {
    let bad = |reason: String| ArtifactError::BadUrl {
        url: url.to_string(),
        reason,
    };
    let mut parsed = reqwest::Url::parse(url).map_err(|e| bad(e.to_string()))?;
    if let Some(host_port) = host_override {
        let with_scheme = format!("{}://{}", parsed.scheme(), host_port);
        let authority = reqwest::Url::parse(&with_scheme)
            .map_err(|e| bad(format!("SOURCE_CONTROLLER_LOCALHOST={host_port:?}: {e}")))?;
        parsed
            .set_host(authority.host_str())
            .map_err(|e| bad(format!("SOURCE_CONTROLLER_LOCALHOST={host_port:?}: {e}")))?;
        parsed.set_port(authority.port()).map_err(|()| {
            bad(format!(
                "SOURCE_CONTROLLER_LOCALHOST={host_port:?}: cannot set port"
            ))
        })?;
    }
    Ok(parsed)
}

/// Downloads, verifies and unpacks artifacts; with a store ([`Fetcher::with_store`]) every
/// digest is downloaded once and unpacked from the store after.
#[derive(Clone, Debug)]
pub struct Fetcher {
    client: reqwest::Client,
    options: FetchOptions,
    store: Option<crate::storage::store::Store>,
}

/// The request header a replica sends when it fetches a published artifact from a peer: the
/// peer answers from what it holds and never fetches on a miss, so two replicas missing one
/// artifact cannot ask each other in a loop.
pub const PEER_HEADER: &str = "x-flux-converger-peer";

impl Fetcher {
    /// Builds the HTTP client. The rustls provider must be installed first
    /// (`tls::install_crypto_provider`).
    pub fn new(options: FetchOptions) -> Result<Self, ArtifactError> {
        let client = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ArtifactError::Connection {
                url: String::new(),
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(Self {
            client,
            options,
            store: None,
        })
    }

    /// Downloads through `store`: one download per digest, shared by concurrent fetches.
    pub fn with_store(mut self, store: crate::storage::store::Store) -> Self {
        self.store = Some(store);
        self
    }

    pub fn options(&self) -> &FetchOptions {
        &self.options
    }

    pub fn store(&self) -> Option<&crate::storage::store::Store> {
        self.store.as_ref()
    }

    /// Downloads `url` (or takes it from the store), checks it against `digest` and unpacks it
    /// into a fresh temporary root.
    pub async fn fetch(&self, url: &str, digest: &str) -> Result<UnpackedArtifact, ArtifactError> {
        let mut backoff = self.options.backoff;
        let mut attempt: u32 = 0;
        loop {
            match self.fetch_once(url, digest).await {
                Err(error) if error.is_retryable() && attempt < self.options.retries => {
                    attempt += 1;
                    tracing::warn!(url, attempt, %error, "artifact download failed, retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.options.max_backoff);
                }
                other => return other,
            }
        }
    }

    async fn fetch_once(&self, url: &str, digest: &str) -> Result<UnpackedArtifact, ArtifactError> {
        let expected = Digest::parse(digest)?;
        let target = rewrite_host(url, self.options.host_override.as_deref())?;
        let name = target.to_string();
        let limits = self.options.unpack.clone();
        match &self.store {
            Some(store) => {
                let lease = self.ensure_in(store, target, &expected, false).await?;
                // Opened before the lease goes: an eviction may remove the name, not the file.
                let file = std::fs::File::open(&lease.path).map_err(ArtifactError::io(format!(
                    "opening the stored artifact {}",
                    lease.path.display()
                )))?;
                drop(lease);
                unpack_opened(file, name, limits).await
            }
            None => {
                let (file, _) =
                    download_once(&self.client, &self.options, &target, &expected, None, false)
                        .await?;
                let path = file.path().to_path_buf();
                let unpacked = unpack_path(path, name, limits).await;
                drop(file);
                unpacked
            }
        }
    }

    /// The stored blob of `digest`, downloaded from `url` unless the store holds it. `peer`:
    /// `url` is another replica's artifact server (sent with [`PEER_HEADER`]). Needs a store.
    pub async fn ensure_blob(
        &self,
        url: &str,
        digest: &Digest,
        peer: bool,
    ) -> Result<crate::storage::store::Lease, ArtifactError> {
        let Some(store) = &self.store else {
            return Err(ArtifactError::Io {
                context: "keeping an artifact".into(),
                error: std::io::Error::other("no storage configured (--storage-path)"),
            });
        };
        let target = rewrite_host(url, self.options.host_override.as_deref())?;
        self.ensure_in(store, target, digest, peer).await
    }

    async fn ensure_in(
        &self,
        store: &crate::storage::store::Store,
        target: reqwest::Url,
        expected: &Digest,
        peer: bool,
    ) -> Result<crate::storage::store::Lease, ArtifactError> {
        let client = self.client.clone();
        let options = self.options.clone();
        let wanted = expected.clone();
        store
            .ensure(expected, move |dir| {
                Box::pin(async move {
                    download_once(&client, &options, &target, &wanted, Some(&dir), peer).await
                })
            })
            .await
    }
}

/// One download attempt into a temporary file (in `dir`, else the system's), hashing while
/// streaming: the file is returned only when its digest matches.
async fn download_once(
    client: &reqwest::Client,
    options: &FetchOptions,
    url: &reqwest::Url,
    expected: &Digest,
    dir: Option<&Path>,
    peer: bool,
) -> Result<(tempfile::NamedTempFile, u64), ArtifactError> {
    let name = url.to_string();
    let mut request = client.get(url.clone());
    if peer {
        request = request.header(PEER_HEADER, "1");
    }
    let response = request
        .send()
        .await
        .map_err(|e| ArtifactError::Connection {
            url: name.clone(),
            message: error_chain(&e),
        })?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(ArtifactError::NotFound { url: name });
    }
    if !status.is_success() {
        return Err(ArtifactError::Http {
            url: name,
            status: status.as_u16(),
        });
    }
    let limit = options.max_download_bytes;
    if let Some(declared) = response.content_length()
        && declared > limit
    {
        return Err(ArtifactError::TooLarge {
            url: name,
            limit,
            declared: format!(" (Content-Length {declared})"),
        });
    }
    let mut builder = tempfile::Builder::new();
    builder.prefix("flux-converger-artifact-").suffix(".tar.gz");
    let file = match dir {
        Some(dir) => builder.tempfile_in(dir),
        None => builder.tempfile(),
    }
    .map_err(ArtifactError::io(
        "creating a temporary file for the artifact",
    ))?;
    let mut out = tokio::fs::File::from_std(
        file.reopen()
            .map_err(ArtifactError::io("opening the temporary artifact file"))?,
    );
    let mut hasher = Hasher::new(expected.algorithm);
    let mut total: u64 = 0;
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ArtifactError::Connection {
            url: name.clone(),
            message: error_chain(&e),
        })?;
        total = total.saturating_add(chunk.len() as u64);
        if total > limit {
            return Err(ArtifactError::TooLarge {
                url: name,
                limit,
                declared: String::new(),
            });
        }
        hasher.update(&chunk);
        out.write_all(&chunk)
            .await
            .map_err(ArtifactError::io("writing the temporary artifact file"))?;
    }
    out.flush()
        .await
        .map_err(ArtifactError::io("writing the temporary artifact file"))?;
    out.sync_all()
        .await
        .map_err(ArtifactError::io("syncing the temporary artifact file"))?;
    let actual = hasher.finish();
    if actual != expected.hex {
        return Err(ArtifactError::DigestMismatch {
            url: name,
            expected: expected.to_string(),
            actual: format!("{}:{}", expected.algorithm.as_str(), actual),
        });
    }
    tracing::debug!(url = %url, bytes = total, digest = %expected, "artifact downloaded and verified");
    Ok((file, total))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        message.push_str(": ");
        message.push_str(&c.to_string());
        cause = c.source();
    }
    message
}

/// Unpacks a local `.tar.gz` (offline `--artifact`) into a fresh temporary root, off the async runtime.
pub async fn unpack_file(
    path: &Path,
    limits: UnpackLimits,
) -> Result<UnpackedArtifact, ArtifactError> {
    unpack_path(path.to_path_buf(), path.display().to_string(), limits).await
}

/// Unpacks an already opened archive (a stored blob) into a fresh temporary root.
async fn unpack_opened(
    file: std::fs::File,
    name: String,
    limits: UnpackLimits,
) -> Result<UnpackedArtifact, ArtifactError> {
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::Builder::new()
            .prefix("flux-converger-render-")
            .tempdir()
            .map_err(ArtifactError::io("creating a temporary directory"))?;
        let stats = unpack(std::io::BufReader::new(file), dir.path(), &name, &limits)?;
        Ok(UnpackedArtifact { dir, stats })
    })
    .await
    .map_err(|e| ArtifactError::Io {
        context: "unpacking task".into(),
        error: std::io::Error::other(e.to_string()),
    })?
}

async fn unpack_path(
    path: PathBuf,
    name: String,
    limits: UnpackLimits,
) -> Result<UnpackedArtifact, ArtifactError> {
    let file = std::fs::File::open(&path).map_err(ArtifactError::io(format!(
        "opening archive {}",
        path.display()
    )))?;
    unpack_opened(file, name, limits).await
}

/// The safe relative path of an entry, or why it is unsafe. `None` for the root entry `.`.
fn safe_relative(raw: &Path) -> Result<Option<PathBuf>, String> {
    let mut out = PathBuf::new();
    for component in raw.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err("path contains \"..\"".into()),
            Component::RootDir | Component::Prefix(_) => return Err("absolute path".into()),
        }
    }
    Ok(if out.as_os_str().is_empty() {
        None
    } else {
        Some(out)
    })
}

/// Cap on one tar extension record: a GNU long name (`L`) or long link (`K`), or a PAX header
/// (`x`, `g`). Such a record is read whole into memory before the entry it describes, so its
/// size, which the archive declares, must be checked before a byte of it is read. A path is at
/// most `PATH_MAX` (4 KiB) on Linux and source-controller writes nothing else there, so 64 KiB is
/// far above any real artifact (Go's archive/tar, Flux's reader, stops at 1 MiB).
pub const MAX_HEADER_RECORD_BYTES: u64 = 64 << 10;

/// Room in the decompressed stream for tar's own bytes (headers, padding) above
/// `--max-unpacked-size`: the files are capped exactly by their declared sizes, which name the
/// entry; the stream cap bounds everything else, and this much overhead lets the per-entry
/// refusal come first for any honest tree.
pub const TAR_OVERHEAD_BYTES: u64 = 1 << 20;

/// The decompressed stream under the archive reader, counted: every byte tar reads (headers,
/// extension records, padding, the data of skipped entries) counts against the cap, so no part
/// of the tar format can inflate more than `--max-unpacked-size`. Reads stop at the cap: the
/// reader never asks gzip for more than one byte past it.
struct CappedStream<R> {
    inner: R,
    read: u64,
    limit: u64,
    /// Set when the cap was hit, read by [`unpack`] to tell the refusal from a corrupt stream
    /// whatever tar wrapped the I/O error in.
    exceeded: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<R: Read> Read for CappedStream<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = self.limit.saturating_sub(self.read).saturating_add(1);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.read = self.read.saturating_add(n as u64);
        if self.read > self.limit {
            self.exceeded.set(true);
            return Err(std::io::Error::other(
                "decompressed stream over --max-unpacked-size",
            ));
        }
        Ok(n)
    }
}

/// The extension records read so far for the next real entry.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: Option<Vec<u8>>,
}

/// What an extension record is called in errors.
fn record_kind(kind: tar::EntryType) -> Option<&'static str> {
    use tar::EntryType as T;
    match kind {
        T::GNULongName => Some("GNU long name"),
        T::GNULongLink => Some("GNU long link name"),
        T::XHeader => Some("PAX header"),
        T::XGlobalHeader => Some("PAX global header"),
        _ => None,
    }
}

/// Unpacks a gzip'd tar stream into `dest` (an empty directory), enforcing `limits`.
/// Blocking: call it from `spawn_blocking`.
///
/// Why raw entries: `tar::Archive::entries()` merges GNU long names (`L`/`K`) and PAX headers
/// (`x`) into the entry they describe by reading each record whole (`read_all`) before the
/// caller sees any header, so a record declaring 3 GiB is allocated before a cap can look at
/// it. `entries_with_seek` changes only how data is skipped, and no setting of `Archive` bounds
/// those reads. With `raw(true)` every record arrives as an entry of its own with its header
/// first: its declared size is checked against [`MAX_HEADER_RECORD_BYTES`] before it is read,
/// and the name, link name and PAX `path`/`size` are applied here as tar would (a GNU long name
/// wins over a PAX `path`, as in tar and Go's archive/tar). Raw mode does not apply a PAX `size`
/// to the data that follows, so an entry whose PAX `size` disagrees with its header is refused:
/// two readers must never see two different trees in one archive. Underneath, [`CappedStream`]
/// bounds the whole decompressed stream by `limits.max_bytes`.
pub fn unpack(
    reader: impl Read,
    dest: &Path,
    archive_name: &str,
    limits: &UnpackLimits,
) -> Result<UnpackStats, ArtifactError> {
    let exceeded = std::rc::Rc::new(std::cell::Cell::new(false));
    let stream = CappedStream {
        inner: flate2::read::GzDecoder::new(reader),
        read: 0,
        limit: limits.max_bytes.saturating_add(TAR_OVERHEAD_BYTES),
        exceeded: exceeded.clone(),
    };
    let last_entry = std::cell::RefCell::new(String::new());
    let fail = |e: std::io::Error| {
        if exceeded.get() {
            ArtifactError::StreamTooLarge {
                archive: archive_name.to_string(),
                limit: limits.max_bytes,
                entry: last_entry.borrow().clone(),
            }
        } else {
            ArtifactError::Corrupt {
                archive: archive_name.to_string(),
                message: e.to_string(),
            }
        }
    };
    let corrupt = |message: &str| ArtifactError::Corrupt {
        archive: archive_name.to_string(),
        message: message.to_string(),
    };
    let mut archive = tar::Archive::new(stream);
    let mut stats = UnpackStats::default();
    let mut entries_seen: u64 = 0;
    let mut declared_total: u64 = 0;
    let mut pending = Pending::default();
    for entry in archive.entries().map_err(fail)?.raw(true) {
        let mut entry = entry.map_err(fail)?;
        let kind = entry.header().entry_type();
        if let Some(what) = record_kind(kind) {
            let size = entry.header().entry_size().map_err(fail)?;
            if size > MAX_HEADER_RECORD_BYTES {
                return Err(ArtifactError::HeaderRecordTooLarge {
                    archive: archive_name.to_string(),
                    record: what,
                    size,
                    limit: MAX_HEADER_RECORD_BYTES,
                });
            }
            let slot = match kind {
                tar::EntryType::GNULongName => &mut pending.long_name,
                tar::EntryType::GNULongLink => &mut pending.long_link,
                tar::EntryType::XHeader => &mut pending.pax,
                // A global header changes nothing we keep (uid, times): read past it.
                _ => {
                    std::io::copy(&mut entry, &mut std::io::sink()).map_err(fail)?;
                    continue;
                }
            };
            if slot.is_some() {
                return Err(corrupt(&format!(
                    "two {what} records describing the same member"
                )));
            }
            let mut data = Vec::with_capacity(size as usize);
            (&mut entry)
                .take(MAX_HEADER_RECORD_BYTES)
                .read_to_end(&mut data)
                .map_err(fail)?;
            *slot = Some(data);
            continue;
        }
        let records = std::mem::take(&mut pending);
        let pax_value = |key: &[u8]| -> Option<Vec<u8>> {
            let pax = records.pax.as_deref()?;
            tar::PaxExtensions::new(pax)
                .filter_map(Result::ok)
                .find(|e| e.key_bytes() == key)
                .map(|e| e.value_bytes().to_vec())
        };
        let raw_bytes: Vec<u8> = match &records.long_name {
            Some(name) => name.strip_suffix(&[0]).unwrap_or(name).to_vec(),
            None => pax_value(b"path").unwrap_or_else(|| entry.header().path_bytes().into_owned()),
        };
        let raw = {
            use std::os::unix::ffi::OsStrExt as _;
            PathBuf::from(std::ffi::OsStr::from_bytes(&raw_bytes))
        };
        let entry_name = raw.display().to_string();
        last_entry.replace(entry_name.clone());
        entries_seen += 1;
        if entries_seen > limits.max_entries {
            return Err(ArtifactError::TooManyEntries {
                archive: archive_name.to_string(),
                limit: limits.max_entries,
            });
        }
        let unsafe_entry = |reason: &str| ArtifactError::UnsafeEntry {
            archive: archive_name.to_string(),
            entry: entry_name.clone(),
            reason: reason.to_string(),
        };
        // Count declared sizes of every entry, also skipped ones: their data is still inflated.
        let declared = entry.header().entry_size().map_err(fail)?;
        if let Some(pax_size) = pax_value(b"size") {
            let pax_size = std::str::from_utf8(&pax_size)
                .ok()
                .and_then(|s| s.parse::<u64>().ok());
            if pax_size != Some(declared) {
                return Err(unsafe_entry(&format!(
                    "PAX size {} disagrees with the header's {declared}",
                    pax_size.map_or_else(|| "(invalid)".to_string(), |s| s.to_string())
                )));
            }
        }
        declared_total = declared_total.saturating_add(declared);
        if declared_total > limits.max_bytes {
            return Err(ArtifactError::UnpackedTooLarge {
                archive: archive_name.to_string(),
                limit: limits.max_bytes,
                entry: entry_name,
            });
        }
        use tar::EntryType as T;
        match kind {
            T::Symlink | T::Link => {
                tracing::debug!(archive = archive_name, entry = %entry_name, "skipping link in artifact");
                stats.skipped_links.push(entry_name);
                continue;
            }
            T::Char | T::Block | T::Fifo => return Err(unsafe_entry("device file or fifo")),
            T::Regular | T::Continuous | T::Directory => {}
            _ => return Err(unsafe_entry("unsupported entry type")),
        }
        let Some(relative) = safe_relative(&raw).map_err(|r| unsafe_entry(&r))? else {
            continue; // the root entry "."
        };
        let target = dest.join(&relative);
        if kind == T::Directory {
            std::fs::create_dir_all(&target)
                .map_err(ArtifactError::io(format!("creating {}", target.display())))?;
            stats.dirs += 1;
            continue;
        }
        if declared > limits.max_file_bytes {
            return Err(ArtifactError::FileTooLarge {
                archive: archive_name.to_string(),
                entry: entry_name,
                size: declared,
                limit: limits.max_file_bytes,
            });
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(ArtifactError::io(format!("creating {}", parent.display())))?;
        }
        let mut out = std::fs::File::create(&target)
            .map_err(ArtifactError::io(format!("creating {}", target.display())))?;
        // The tar reader yields exactly the declared size; the cap holds even if it did not.
        let remaining = limits
            .max_bytes
            .saturating_sub(stats.bytes)
            .min(limits.max_file_bytes);
        let written = std::io::copy(
            &mut (&mut entry).take(remaining.saturating_add(1)),
            &mut out,
        )
        .map_err(fail)?;
        if written > remaining {
            return Err(ArtifactError::UnpackedTooLarge {
                archive: archive_name.to_string(),
                limit: limits.max_bytes,
                entry: entry_name,
            });
        }
        stats.bytes += written;
        stats.files += 1;
    }
    if pending.long_name.is_some() || pending.long_link.is_some() || pending.pax.is_some() {
        return Err(corrupt(
            "members found describing a future member but no future member found",
        ));
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_by_table() {
        let h64 = "a".repeat(64);
        let h96 = "B".repeat(96);
        let h128 = "c".repeat(128);
        let ok = [
            (h64.clone(), Algorithm::Sha256, h64.clone()),
            (format!("sha256:{h64}"), Algorithm::Sha256, h64.clone()),
            (
                format!("sha384:{h96}"),
                Algorithm::Sha384,
                h96.to_lowercase(),
            ),
            (format!("sha512:{h128}"), Algorithm::Sha512, h128.clone()),
        ];
        for (text, algorithm, hex) in ok {
            assert_eq!(
                Digest::parse(&text).unwrap(),
                Digest { algorithm, hex },
                "{text}"
            );
        }
        for bad in [
            format!("md5:{h64}"),
            format!("sha1:{}", "a".repeat(40)),
            format!("sha256:{h96}"),
            "sha256:zz".to_string(),
            String::new(),
            format!("sha512:{h64}"),
        ] {
            assert!(
                matches!(Digest::parse(&bad), Err(ArtifactError::BadDigest { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn host_rewrite_replaces_host_and_port_like_go() {
        let url =
            "http://source-controller.flux-system.svc.cluster.local./gitrepository/ns/r/abc.tar.gz";
        for (over, expected) in [
            (None, url.to_string()),
            (
                Some("localhost:8080"),
                "http://localhost:8080/gitrepository/ns/r/abc.tar.gz".to_string(),
            ),
            (
                Some("127.0.0.1"),
                "http://127.0.0.1/gitrepository/ns/r/abc.tar.gz".to_string(),
            ),
        ] {
            assert_eq!(
                rewrite_host(url, over).unwrap().as_str(),
                expected,
                "{over:?}"
            );
        }
        let with_port = "http://sc:9090/a.tar.gz";
        assert_eq!(
            rewrite_host(with_port, Some("localhost")).unwrap().as_str(),
            "http://localhost/a.tar.gz"
        );
        assert!(rewrite_host("not a url", None).is_err());
    }

    #[test]
    fn entry_paths_are_checked_by_table() {
        for (raw, expected) in [
            (".", Ok(None)),
            ("./", Ok(None)),
            ("./a/b.yaml", Ok(Some(PathBuf::from("a/b.yaml")))),
            ("a/./b.yaml", Ok(Some(PathBuf::from("a/b.yaml")))),
            ("../x", Err(())),
            ("a/../../x", Err(())),
            ("/etc/passwd", Err(())),
        ] {
            let got = safe_relative(Path::new(raw)).map_err(|_| ());
            assert_eq!(got, expected, "{raw}");
        }
    }

    #[test]
    fn digest_of_known_value() {
        assert_eq!(
            digest_of(Algorithm::Sha256, b"").hex,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
