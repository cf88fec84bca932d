//! Why an artifact could not be fetched or unpacked, and how callers tell a bad artifact from a
//! failing network (the service retries one and records the other).

use crate::digest::DigestError;

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

    pub(super) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |error| Self::Io { context, error }
    }
}

/// A digest that cannot be parsed is a bad artifact reference, shown as it always was.
impl From<DigestError> for ArtifactError {
    fn from(error: DigestError) -> Self {
        Self::BadDigest {
            digest: error.digest,
            reason: error.reason,
        }
    }
}
