//! The on-disk blob store: one file per digest under `<storage>/blobs/<algorithm>/<hex>`.
//!
//! A blob only ever appears under its digest name by a rename of a temporary file that was
//! hashed while it was written, so a crash leaves at most a stray file in `<storage>/tmp`
//! (cleared at open), never a half blob under a digest name. Blobs found at open were verified
//! by an earlier process but the disk may have changed since: they are re-hashed once before
//! their first use (`verified: false`). Unpinned blobs (the render cache) are bounded in bytes
//! and go least recently used first; pinned ones (published artifacts) are never evicted.
//!
//! Blocking file work (rename, remove, scan): callers hold the store's lock only briefly and
//! hash outside it.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::digest::{Algorithm, Digest, Hasher};

use super::StorageError;

/// One blob the store holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobInfo {
    pub path: PathBuf,
    pub size: u64,
    /// Hashed by this process (written, or re-checked after open).
    pub verified: bool,
}

#[derive(Debug)]
struct Entry {
    size: u64,
    /// Logical clock of the last use: the smallest goes first.
    last_used: u64,
    verified: bool,
    /// Handles given out and not yet dropped: such a blob is not evicted under a reader.
    users: u32,
    /// Garbage-collected while being read: removed when its last reader lets it go.
    discarded: bool,
}

/// The blobs of one storage directory.
#[derive(Debug)]
pub struct Blobs {
    root: PathBuf,
    max_cached_bytes: u64,
    entries: HashMap<String, Entry>,
    pinned: HashSet<String>,
    clock: u64,
}

const ALGORITHMS: [Algorithm; 3] = [Algorithm::Sha256, Algorithm::Sha384, Algorithm::Sha512];

impl Blobs {
    /// Opens (creating) `root`: clears `tmp/`, lists the blobs left by an earlier process (as
    /// not yet verified, oldest modification first in the LRU order).
    pub fn open(root: &Path, max_cached_bytes: u64) -> Result<Self, StorageError> {
        let io = |what: &str, path: &Path| {
            let what = format!("{what} {}", path.display());
            move |error| StorageError::Io {
                context: what,
                error,
            }
        };
        let tmp = root.join("tmp");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(io("clearing", &tmp))?;
        }
        std::fs::create_dir_all(&tmp).map_err(io("creating", &tmp))?;
        let mut found = Vec::new();
        for algorithm in ALGORITHMS {
            let dir = root.join("blobs").join(algorithm.as_str());
            std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
            for item in std::fs::read_dir(&dir).map_err(io("listing", &dir))? {
                let item = item.map_err(io("listing", &dir))?;
                let name = item.file_name().to_string_lossy().into_owned();
                let Ok(digest) = Digest::parse(&format!("{}:{name}", algorithm.as_str())) else {
                    tracing::warn!(file = %item.path().display(), "ignoring a file that is not named by a digest");
                    continue;
                };
                let meta = item.metadata().map_err(io("reading", &item.path()))?;
                if !meta.is_file() {
                    continue;
                }
                let modified = meta.modified().ok();
                found.push((digest.to_string(), meta.len(), modified));
            }
        }
        found.sort_by_key(|(_, _, modified)| *modified);
        let mut blobs = Blobs {
            root: root.to_path_buf(),
            max_cached_bytes,
            entries: HashMap::new(),
            pinned: HashSet::new(),
            clock: 0,
        };
        for (digest, size, _) in found {
            blobs.clock += 1;
            blobs.entries.insert(
                digest,
                Entry {
                    size,
                    last_used: blobs.clock,
                    verified: false,
                    users: 0,
                    discarded: false,
                },
            );
        }
        Ok(blobs)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where temporary downloads go: on the same file system, so the final rename is atomic.
    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// The file a blob of `digest` lives in.
    pub fn path_of(&self, digest: &Digest) -> PathBuf {
        self.root
            .join("blobs")
            .join(digest.algorithm.as_str())
            .join(&digest.hex)
    }

    /// The blob of `digest`, if held; counts as a use.
    pub fn get(&mut self, digest: &Digest) -> Option<BlobInfo> {
        self.clock += 1;
        let clock = self.clock;
        let path = self.path_of(digest);
        let entry = self.entries.get_mut(&digest.to_string())?;
        entry.last_used = clock;
        Some(BlobInfo {
            path,
            size: entry.size,
            verified: entry.verified,
        })
    }

    pub fn contains(&self, digest: &Digest) -> bool {
        self.entries.contains_key(&digest.to_string())
    }

    /// Moves a fully written and verified temporary file into place under its digest name.
    pub fn insert(
        &mut self,
        digest: &Digest,
        file: tempfile::NamedTempFile,
        size: u64,
    ) -> Result<BlobInfo, StorageError> {
        let path = self.path_of(digest);
        file.persist(&path).map_err(|e| StorageError::Io {
            context: format!("moving a verified blob to {}", path.display()),
            error: e.error,
        })?;
        self.clock += 1;
        self.entries.insert(
            digest.to_string(),
            Entry {
                size,
                last_used: self.clock,
                verified: true,
                users: 0,
                discarded: false,
            },
        );
        Ok(BlobInfo {
            path,
            size,
            verified: true,
        })
    }

    pub fn mark_verified(&mut self, digest: &Digest) {
        if let Some(entry) = self.entries.get_mut(&digest.to_string()) {
            entry.verified = true;
        }
    }

    /// Removes a blob (it failed verification, or it was evicted).
    pub fn remove(&mut self, digest: &Digest) {
        self.entries.remove(&digest.to_string());
        let path = self.path_of(digest);
        if let Err(error) = std::fs::remove_file(&path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), %error, "removing a blob");
        }
    }

    /// A reader takes the blob: not evicted until [`Blobs::release`].
    pub fn acquire(&mut self, digest: &Digest) {
        if let Some(entry) = self.entries.get_mut(&digest.to_string()) {
            entry.users += 1;
        }
    }

    pub fn release(&mut self, digest: &Digest) {
        let key = digest.to_string();
        let unpinned = !self.pinned.contains(&key);
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        entry.users = entry.users.saturating_sub(1);
        if entry.users == 0 && entry.discarded && unpinned {
            self.remove(digest);
        }
    }

    /// Removes the blob of a garbage-collected artifact from disk: at once, or when its last
    /// reader lets it go; kept while another published artifact pins it. Not left to the
    /// cache's bound: a collected artifact leaves the disk, as source-controller deletes its
    /// file, whatever room the cache has.
    pub fn discard(&mut self, digest: &Digest) {
        let key = digest.to_string();
        if self.pinned.contains(&key) {
            return;
        }
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        if entry.users > 0 {
            entry.discarded = true;
        } else {
            self.remove(digest);
        }
    }

    /// Replaces the set of pinned digests (every published artifact's), then evicts.
    pub fn set_pinned(&mut self, pinned: HashSet<String>) -> Vec<String> {
        self.pinned = pinned;
        self.evict()
    }

    /// Bytes of the unpinned blobs (the cache).
    pub fn cached_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|(digest, _)| !self.pinned.contains(*digest))
            .map(|(_, e)| e.size)
            .sum()
    }

    /// Bytes of every blob.
    pub fn total_bytes(&self) -> u64 {
        self.entries.values().map(|e| e.size).sum()
    }

    /// Removes unpinned blobs, least recently used first, until the cache fits its bound.
    /// A blob being read is skipped (it goes at a later eviction). Returns the removed digests.
    pub fn evict(&mut self) -> Vec<String> {
        let mut cached = self.cached_bytes();
        let mut removed = Vec::new();
        if cached <= self.max_cached_bytes {
            return removed;
        }
        let mut candidates: Vec<(u64, String, u64)> = self
            .entries
            .iter()
            .filter(|(digest, e)| !self.pinned.contains(*digest) && e.users == 0)
            .map(|(digest, e)| (e.last_used, digest.clone(), e.size))
            .collect();
        candidates.sort();
        for (_, digest, size) in candidates {
            if cached <= self.max_cached_bytes {
                break;
            }
            if let Ok(parsed) = Digest::parse(&digest) {
                self.remove(&parsed);
                tracing::debug!(digest = %digest, bytes = size, "evicted a cached artifact");
                cached = cached.saturating_sub(size);
                removed.push(digest);
            }
        }
        removed
    }
}

/// Hashes the file at `path` and says whether it has `digest`. Blocking.
pub fn verify_file(path: &Path, digest: &Digest) -> std::io::Result<bool> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Hasher::new(digest.algorithm);
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hasher.finish() == digest.hex)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::digest_of;
    use std::io::Write as _;

    fn put(blobs: &mut Blobs, data: &[u8]) -> Digest {
        let digest = digest_of(Algorithm::Sha256, data);
        let mut file = tempfile::NamedTempFile::new_in(blobs.tmp_dir()).unwrap();
        file.write_all(data).unwrap();
        blobs.insert(&digest, file, data.len() as u64).unwrap();
        digest
    }

    #[test]
    fn the_cache_keeps_its_bound_least_recently_used_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut blobs = Blobs::open(dir.path(), 25).unwrap();
        let a = put(&mut blobs, &[b'a'; 10]);
        let b = put(&mut blobs, &[b'b'; 10]);
        // a is used again: b is now the least recently used.
        assert!(blobs.get(&a).is_some());
        let c = put(&mut blobs, &[b'c'; 10]);
        let removed = blobs.evict();
        assert_eq!(removed, vec![b.to_string()]);
        assert!(blobs.contains(&a) && blobs.contains(&c) && !blobs.contains(&b));
        assert!(!blobs.path_of(&b).exists());
        assert_eq!(blobs.cached_bytes(), 20);
    }

    #[test]
    fn pinned_and_read_blobs_are_never_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let mut blobs = Blobs::open(dir.path(), 0).unwrap();
        let pinned = put(&mut blobs, b"published");
        let read = put(&mut blobs, b"being unpacked");
        let cached = put(&mut blobs, b"cached");
        blobs.acquire(&read);
        let removed = blobs.set_pinned([pinned.to_string()].into_iter().collect());
        assert_eq!(removed, vec![cached.to_string()]);
        assert!(blobs.contains(&pinned) && blobs.contains(&read));
        blobs.release(&read);
        assert_eq!(blobs.evict(), vec![read.to_string()]);
        assert!(blobs.contains(&pinned));
    }

    #[test]
    fn a_discarded_blob_leaves_the_disk_unless_pinned_or_after_its_reader() {
        let dir = tempfile::tempdir().unwrap();
        let mut blobs = Blobs::open(dir.path(), 1 << 20).unwrap();
        let free = put(&mut blobs, b"collected");
        let read = put(&mut blobs, b"collected, being read");
        let pinned = put(&mut blobs, b"collected, still published by another");
        blobs.set_pinned([pinned.to_string()].into_iter().collect());
        blobs.acquire(&read);
        for digest in [&free, &read, &pinned] {
            blobs.discard(digest);
        }
        assert!(!blobs.contains(&free) && !blobs.path_of(&free).exists());
        assert!(blobs.contains(&read) && blobs.contains(&pinned));
        blobs.release(&read);
        assert!(!blobs.contains(&read) && !blobs.path_of(&read).exists());
        assert!(blobs.path_of(&pinned).exists());
    }

    #[test]
    fn a_reopened_store_lists_its_blobs_unverified_and_clears_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let digest = {
            let mut blobs = Blobs::open(dir.path(), 1 << 20).unwrap();
            std::fs::write(blobs.tmp_dir().join("half-download"), b"x").unwrap();
            put(&mut blobs, b"kept across a restart")
        };
        std::fs::write(dir.path().join("blobs/sha256/not-a-digest"), b"x").unwrap();
        let mut blobs = Blobs::open(dir.path(), 1 << 20).unwrap();
        let info = blobs.get(&digest).unwrap();
        assert!(!info.verified);
        assert_eq!(info.size, 21);
        assert!(verify_file(&info.path, &digest).unwrap());
        assert_eq!(std::fs::read_dir(blobs.tmp_dir()).unwrap().count(), 0);
        assert_eq!(blobs.total_bytes(), 21);
    }

    #[test]
    fn a_corrupt_blob_fails_verification() {
        let dir = tempfile::tempdir().unwrap();
        let mut blobs = Blobs::open(dir.path(), 1 << 20).unwrap();
        let digest = put(&mut blobs, b"the right bytes");
        let path = blobs.path_of(&digest);
        assert!(verify_file(&path, &digest).unwrap());
        std::fs::write(&path, b"the wrong bytes").unwrap();
        assert!(!verify_file(&path, &digest).unwrap());
    }
}
