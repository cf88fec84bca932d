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

/// A running hash of one of the supported algorithms.
enum Hasher {
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
}

impl Hasher {
    fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::Sha256 => Self::Sha256(sha2::Sha256::new()),
            Algorithm::Sha384 => Self::Sha384(sha2::Sha384::new()),
            Algorithm::Sha512 => Self::Sha512(sha2::Sha512::new()),
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            Self::Sha256(h) => h.update(data),
            Self::Sha384(h) => h.update(data),
            Self::Sha512(h) => h.update(data),
        }
    }

    fn finish(self) -> String {
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
#[derive(Clone, Debug)]
pub struct FetchOptions {
    pub max_download_bytes: u64,
    pub unpack: UnpackLimits,
    /// Attempts after the first one, on connection errors and 5xx.
    pub retries: u32,
    /// First backoff; doubles each retry up to `max_backoff`.
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
            retries: 4,
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
    #[error("downloading artifact {url}: {message} (after {attempts} attempts)")]
    Connection {
        url: String,
        message: String,
        attempts: u32,
    },
    #[error("artifact {url} is larger than the maximum download size of {limit} bytes{declared}")]
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
    #[error("archive {archive}: more than {limit} entries (decompression bomb?)")]
    TooManyEntries { archive: String, limit: u64 },
    #[error(
        "archive {archive}: unpacks to more than {limit} bytes (decompression bomb?) at entry {entry:?}"
    )]
    UnpackedTooLarge {
        archive: String,
        limit: u64,
        entry: String,
    },
    #[error(
        "archive {archive}: file {entry:?} is {size} bytes, more than the maximum file size of {limit} bytes"
    )]
    FileTooLarge {
        archive: String,
        entry: String,
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

/// Downloads, verifies and unpacks artifacts.
#[derive(Clone, Debug)]
pub struct Fetcher {
    client: reqwest::Client,
    options: FetchOptions,
}

/// One attempt's outcome, to decide whether to retry.
enum Attempt {
    Done(tempfile::NamedTempFile),
    Retry(String),
}

impl Fetcher {
    /// Builds the HTTP client. The rustls provider must be installed first
    /// (`tls::install_crypto_provider`).
    pub fn new(options: FetchOptions) -> Result<Self, ArtifactError> {
        let client = reqwest::Client::builder()
            // Explicit, as on the kube client (`wire::kube_client`): no Nagle stall on a
            // request written in more than one TLS record.
            .tcp_nodelay(true)
            .timeout(options.timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ArtifactError::Connection {
                url: String::new(),
                message: format!("cannot build the HTTP client: {e}"),
                attempts: 0,
            })?;
        Ok(Self { client, options })
    }

    pub fn options(&self) -> &FetchOptions {
        &self.options
    }

    /// Downloads `url`, checks it against `digest` and unpacks it into a fresh temporary root.
    pub async fn fetch(&self, url: &str, digest: &str) -> Result<UnpackedArtifact, ArtifactError> {
        let expected = Digest::parse(digest)?;
        let target = rewrite_host(url, self.options.host_override.as_deref())?;
        let file = self.download(&target, &expected).await?;
        let path = file.path().to_path_buf();
        let limits = self.options.unpack.clone();
        let name = target.to_string();
        let unpacked = unpack_path(path, name, limits).await;
        drop(file);
        unpacked
    }

    /// Downloads to a temporary file, hashing while streaming; retries connection errors and 5xx.
    async fn download(
        &self,
        url: &reqwest::Url,
        expected: &Digest,
    ) -> Result<tempfile::NamedTempFile, ArtifactError> {
        let attempts = self.options.retries.saturating_add(1);
        let mut backoff = self.options.backoff;
        let mut last = String::new();
        for attempt in 1..=attempts {
            match self.attempt(url, expected).await? {
                Attempt::Done(file) => return Ok(file),
                Attempt::Retry(message) if attempt < attempts => {
                    tracing::warn!(url = %url, attempt, error = %message, "artifact download failed, retrying");
                    last = message;
                }
                // The last attempt's error is returned: whoever retries logs it.
                Attempt::Retry(message) => last = message,
            }
            if attempt < attempts {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(self.options.max_backoff);
            }
        }
        Err(ArtifactError::Connection {
            url: url.to_string(),
            message: last,
            attempts,
        })
    }

    async fn attempt(
        &self,
        url: &reqwest::Url,
        expected: &Digest,
    ) -> Result<Attempt, ArtifactError> {
        let name = url.to_string();
        let response = match self.client.get(url.clone()).send().await {
            Ok(r) => r,
            Err(e) => return Ok(Attempt::Retry(error_chain(&e))),
        };
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(ArtifactError::NotFound { url: name });
        }
        if status.is_server_error() {
            return Ok(Attempt::Retry(format!("HTTP {}", status.as_u16())));
        }
        if !status.is_success() {
            return Err(ArtifactError::Http {
                url: name,
                status: status.as_u16(),
            });
        }
        let limit = self.options.max_download_bytes;
        if let Some(declared) = response.content_length()
            && declared > limit
        {
            return Err(ArtifactError::TooLarge {
                url: name,
                limit,
                declared: format!(" (Content-Length {declared})"),
            });
        }
        let file = tempfile::Builder::new()
            .prefix("flux-converger-artifact-")
            .suffix(".tar.gz")
            .tempfile()
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
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => return Ok(Attempt::Retry(error_chain(&e))),
            };
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
        let actual = hasher.finish();
        if actual != expected.hex {
            return Err(ArtifactError::DigestMismatch {
                url: name,
                expected: expected.to_string(),
                actual: format!("{}:{}", expected.algorithm.as_str(), actual),
            });
        }
        tracing::debug!(url = %url, bytes = total, digest = %expected, "artifact downloaded and verified");
        Ok(Attempt::Done(file))
    }
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

async fn unpack_path(
    path: PathBuf,
    name: String,
    limits: UnpackLimits,
) -> Result<UnpackedArtifact, ArtifactError> {
    tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(&path).map_err(ArtifactError::io(format!(
            "opening archive {}",
            path.display()
        )))?;
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

/// Unpacks a gzip'd tar stream into `dest` (an empty directory), enforcing `limits`.
/// Blocking: call it from `spawn_blocking`.
pub fn unpack(
    reader: impl Read,
    dest: &Path,
    archive_name: &str,
    limits: &UnpackLimits,
) -> Result<UnpackStats, ArtifactError> {
    let corrupt = |e: std::io::Error| ArtifactError::Corrupt {
        archive: archive_name.to_string(),
        message: e.to_string(),
    };
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(reader));
    let mut stats = UnpackStats::default();
    let mut entries_seen: u64 = 0;
    let mut declared_total: u64 = 0;
    for entry in archive.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        entries_seen += 1;
        let raw = entry.path().map_err(corrupt)?.into_owned();
        let entry_name = raw.display().to_string();
        if entries_seen > limits.max_entries {
            return Err(ArtifactError::TooManyEntries {
                archive: archive_name.to_string(),
                limit: limits.max_entries,
            });
        }
        // Count declared sizes of every entry, also skipped ones: their data is still inflated.
        let declared = entry.header().size().unwrap_or(0);
        declared_total = declared_total.saturating_add(declared);
        if declared_total > limits.max_bytes {
            return Err(ArtifactError::UnpackedTooLarge {
                archive: archive_name.to_string(),
                limit: limits.max_bytes,
                entry: entry_name,
            });
        }
        let unsafe_entry = |reason: &str| ArtifactError::UnsafeEntry {
            archive: archive_name.to_string(),
            entry: entry_name.clone(),
            reason: reason.to_string(),
        };
        let kind = entry.header().entry_type();
        use tar::EntryType as T;
        match kind {
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => continue,
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
        .map_err(corrupt)?;
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
