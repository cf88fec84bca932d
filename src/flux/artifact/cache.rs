//! What the fetcher needs of a blob cache, declared on the fetcher's side so that the fetch
//! does not depend on the storage that implements it (the storage's `Store` does): the
//! storage already depends on the fetcher to fill its blobs, and the edge must go one way.

use std::path::PathBuf;

use futures::future::BoxFuture;

use super::error::ArtifactError;
use crate::digest::Digest;

/// What a download hands the cache: a temporary file in the directory the cache gave it, fully
/// written and verified against the digest, and its size.
pub type Downloaded = (tempfile::NamedTempFile, u64);

/// One download attempt, run by the cache on a miss with the directory to write into (the
/// cache's own file system, so the blob is kept by a rename).
pub type Download =
    Box<dyn FnOnce(PathBuf) -> BoxFuture<'static, Result<Downloaded, ArtifactError>> + Send>;

/// A digest-keyed cache of verified artifact blobs, shared by every fetch of one process.
pub trait BlobCache: Send + Sync + std::fmt::Debug {
    /// The blob of `digest` opened for reading: the one held, else the one `download` writes
    /// (a single attempt shared with every concurrent caller of the same digest, whose error
    /// is every caller's). The blob is held against eviction until it is open; an open file
    /// stays readable after an eviction removes its name.
    fn open_blob<'a>(
        &'a self,
        digest: &'a Digest,
        download: Download,
    ) -> BoxFuture<'a, Result<std::fs::File, ArtifactError>>;

    /// How many callers wait on the download of `digest` in flight (0: none in flight).
    fn waiting(&self, digest: &Digest) -> usize;

    /// Downloads that completed into the cache, and their bytes.
    fn downloads(&self) -> (u64, u64);
}
