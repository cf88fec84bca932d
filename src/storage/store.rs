//! The blob store shared by the renders and the artifact server: a digest is downloaded and
//! verified once, however many Kustomizations render it and however many ask at once.
//!
//! Concurrent requests for one digest join a single in-flight download (a shared future per
//! digest): the first caller's download is every caller's, and its error is every caller's
//! too, so a failing upstream is hit once per wave of requests, not once per Kustomization.
//! A download is one attempt: retries belong to the caller (the service's queue backoff).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};

use super::StorageError;
use super::blobs::{Blobs, verify_file};
use crate::digest::Digest;
pub use crate::flux::artifact::Downloaded;
use crate::flux::artifact::{ArtifactError, BlobCache, Download};

type Flight = Shared<BoxFuture<'static, Result<(), Arc<ArtifactError>>>>;

struct Inner {
    blobs: Mutex<Blobs>,
    flights: Mutex<HashMap<String, Flight>>,
    downloads: AtomicU64,
    downloaded_bytes: AtomicU64,
}

/// The digest-keyed blob store (cheap to clone).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("root", &self.blobs().root().display().to_string())
            .finish_non_exhaustive()
    }
}

/// A blob held for reading: it is not evicted until this is dropped. Open the file while
/// holding it; an open file stays readable after an eviction removes its name.
#[derive(Debug)]
pub struct Lease {
    store: Store,
    digest: Digest,
    pub path: PathBuf,
    pub size: u64,
}

impl Lease {
    pub fn digest(&self) -> &Digest {
        &self.digest
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut blobs = self.store.blobs();
        blobs.release(&self.digest);
        blobs.evict();
    }
}

impl Store {
    /// Opens the store under `root`, the cache (unpinned blobs) bounded to `max_cached_bytes`.
    pub fn open(root: &std::path::Path, max_cached_bytes: u64) -> Result<Self, StorageError> {
        let blobs = Blobs::open(root, max_cached_bytes)?;
        Ok(Self {
            inner: Arc::new(Inner {
                blobs: Mutex::new(blobs),
                flights: Mutex::new(HashMap::new()),
                downloads: AtomicU64::new(0),
                downloaded_bytes: AtomicU64::new(0),
            }),
        })
    }

    fn blobs(&self) -> MutexGuard<'_, Blobs> {
        // A panic while holding the lock leaves the map consistent (each step is one insert
        // or remove), so a poisoned lock is used as is.
        self.inner
            .blobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn flights(&self) -> MutexGuard<'_, HashMap<String, Flight>> {
        self.inner
            .flights
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Where a download writes its temporary file (same file system as the blobs).
    pub fn tmp_dir(&self) -> PathBuf {
        self.blobs().tmp_dir()
    }

    /// Downloads that completed into the store, and their bytes (the one-download figure).
    pub fn downloads(&self) -> (u64, u64) {
        (
            self.inner.downloads.load(Ordering::Relaxed),
            self.inner.downloaded_bytes.load(Ordering::Relaxed),
        )
    }

    /// How many callers wait on the download of `digest` in flight (0: none in flight): lets
    /// a test hold an upstream until every concurrent fetch has joined the one download.
    pub fn waiting(&self, digest: &Digest) -> usize {
        self.flights()
            .get(&digest.to_string())
            .and_then(Shared::strong_count)
            .map_or(0, |n| n.saturating_sub(1))
    }

    pub fn contains(&self, digest: &Digest) -> bool {
        self.blobs().contains(digest)
    }

    /// Bytes of the unpinned blobs and of all blobs.
    pub fn bytes(&self) -> (u64, u64) {
        let blobs = self.blobs();
        (blobs.cached_bytes(), blobs.total_bytes())
    }

    /// Pins exactly `digests` (the published artifacts) and evicts what the bound asks.
    pub fn set_pinned(&self, digests: HashSet<String>) {
        self.blobs().set_pinned(digests);
    }

    /// Removes the blobs of garbage-collected artifacts ([`Blobs::discard`]).
    pub fn discard<'a>(&self, digests: impl IntoIterator<Item = &'a Digest>) {
        let mut blobs = self.blobs();
        for digest in digests {
            blobs.discard(digest);
        }
    }

    /// The blob of `digest`, if held and intact. A blob found at open is hashed once before its
    /// first use; one that does not match its name is deleted (logged) and reported missing.
    pub async fn get(&self, digest: &Digest) -> Option<Lease> {
        let info = {
            let mut blobs = self.blobs();
            let info = blobs.get(digest)?;
            blobs.acquire(digest);
            info
        };
        let lease = Lease {
            store: self.clone(),
            digest: digest.clone(),
            path: info.path.clone(),
            size: info.size,
        };
        if info.verified {
            return Some(lease);
        }
        let path = info.path.clone();
        let check = digest.clone();
        let intact = tokio::task::spawn_blocking(move || verify_file(&path, &check))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r);
        match intact {
            Ok(true) => {
                self.blobs().mark_verified(digest);
                Some(lease)
            }
            Ok(false) => {
                tracing::warn!(digest = %digest, path = %info.path.display(),
                    "a stored artifact does not match its digest: deleted");
                drop(lease);
                self.blobs().remove(digest);
                None
            }
            Err(error) => {
                tracing::warn!(digest = %digest, path = %info.path.display(), %error,
                    "cannot read a stored artifact: deleted");
                drop(lease);
                self.blobs().remove(digest);
                None
            }
        }
    }

    /// The blob of `digest`: from the store, else from `download` (one attempt), shared with
    /// every concurrent caller asking for the same digest.
    pub async fn ensure<F>(&self, digest: &Digest, download: F) -> Result<Lease, ArtifactError>
    where
        F: FnOnce(PathBuf) -> BoxFuture<'static, Result<Downloaded, ArtifactError>>,
    {
        if let Some(lease) = self.get(digest).await {
            return Ok(lease);
        }
        let key = digest.to_string();
        let flight = {
            let mut flights = self.flights();
            match flights.get(&key) {
                Some(flight) => flight.clone(),
                None => {
                    let store = self.clone();
                    let wanted = digest.clone();
                    let started = download(self.tmp_dir());
                    let flight = async move {
                        let result = match started.await {
                            Ok((file, size)) => {
                                let inserted = store.blobs().insert(&wanted, file, size);
                                match inserted {
                                    Ok(_) => {
                                        store.inner.downloads.fetch_add(1, Ordering::Relaxed);
                                        store
                                            .inner
                                            .downloaded_bytes
                                            .fetch_add(size, Ordering::Relaxed);
                                        Ok(())
                                    }
                                    Err(e) => Err(Arc::new(ArtifactError::Io {
                                        context: "storing the artifact".into(),
                                        error: std::io::Error::other(e.to_string()),
                                    })),
                                }
                            }
                            Err(e) => Err(Arc::new(e)),
                        };
                        store.flights().remove(&wanted.to_string());
                        result
                    }
                    .boxed()
                    .shared();
                    flights.insert(key, flight.clone());
                    flight
                }
            }
        };
        match flight.await {
            Ok(()) => self.get(digest).await.ok_or_else(|| ArtifactError::Io {
                context: format!("artifact {digest}"),
                error: std::io::Error::other(
                    "evicted right after its download: the cache bound is smaller than the artifact",
                ),
            }),
            Err(error) => Err(error.duplicate()),
        }
    }
}

/// The fetcher's cache: a render's fetch opens the blob while holding its lease, then lets the
/// lease go (an eviction may remove the name, not the open file).
impl BlobCache for Store {
    fn open_blob<'a>(
        &'a self,
        digest: &'a Digest,
        download: Download,
    ) -> BoxFuture<'a, Result<std::fs::File, ArtifactError>> {
        Box::pin(async move {
            let lease = self.ensure(digest, download).await?;
            std::fs::File::open(&lease.path).map_err(|error| ArtifactError::Io {
                context: format!("opening the stored artifact {}", lease.path.display()),
                error,
            })
        })
    }

    fn waiting(&self, digest: &Digest) -> usize {
        Store::waiting(self, digest)
    }

    fn downloads(&self) -> (u64, u64) {
        Store::downloads(self)
    }
}
