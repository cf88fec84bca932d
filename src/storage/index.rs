//! What is published: for each ExternalArtifact, the artifact it points at now and the one
//! before (source-controller's retention: Flux may still be fetching the previous one when the
//! status moves on). Persisted as `<storage>/published.json`, written to a temporary file and
//! renamed, so a crash leaves the old index or the new one, never a torn one.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::StorageError;

/// How many artifacts per ExternalArtifact stay pinned: the published one and the previous.
pub const RETAINED: usize = 2;

/// One published artifact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Relative path served (`externalartifact/<ns>/<name>/<hex>.tar.gz`).
    pub path: String,
    /// `sha256:<hex>`.
    pub digest: String,
    pub size: u64,
    /// Where the bytes can be fetched again when the blob is lost (an empty volume after a
    /// reschedule): the upstream source's artifact URL, then the published URL (a peer).
    #[serde(default)]
    pub urls: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct File {
    version: u32,
    /// `namespace/name` → newest first.
    artifacts: BTreeMap<String, Vec<Entry>>,
}

/// The published artifacts of every ExternalArtifact.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Index {
    by_key: BTreeMap<String, Vec<Entry>>,
}

/// `namespace/name` of an ExternalArtifact.
pub fn key_text(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Index {
    /// Reads the index; a missing file is an empty index (a fresh volume).
    pub fn load(path: &Path) -> Result<Self, StorageError> {
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(error) => {
                return Err(StorageError::Io {
                    context: format!("reading {}", path.display()),
                    error,
                });
            }
        };
        let file: File = serde_json::from_slice(&text).map_err(|e| StorageError::Index {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Ok(Self {
            by_key: file.artifacts,
        })
    }

    /// Writes the index atomically (temporary file in the same directory, fsync, rename).
    pub fn save(&self, path: &Path) -> Result<(), StorageError> {
        use std::io::Write as _;
        let io = |context: &str| {
            let context = format!("{context} {}", path.display());
            move |error| StorageError::Io { context, error }
        };
        let file = File {
            version: 1,
            artifacts: self.by_key.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&file).map_err(|e| StorageError::Index {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io("writing"))?;
        tmp.write_all(&bytes).map_err(io("writing"))?;
        tmp.as_file().sync_all().map_err(io("syncing"))?;
        tmp.persist(path).map_err(|e| StorageError::Io {
            context: format!("replacing {}", path.display()),
            error: e.error,
        })?;
        Ok(())
    }

    /// Records `entry` as the artifact `key` publishes now. The one before stays; older ones
    /// are returned (no longer pinned by this key). Recording the current one again changes
    /// nothing but its URLs.
    pub fn record(&mut self, key: &str, entry: Entry) -> Vec<Entry> {
        let entries = self.by_key.entry(key.to_string()).or_default();
        if let Some(position) = entries.iter().position(|e| e.path == entry.path) {
            let mut known = entries.remove(position);
            for url in entry.urls {
                if !known.urls.contains(&url) {
                    known.urls.push(url);
                }
            }
            known.size = entry.size;
            entries.insert(0, known);
        } else {
            entries.insert(0, entry);
        }
        entries.split_off(RETAINED.min(entries.len()))
    }

    /// The artifact `key` publishes now.
    pub fn current(&self, key: &str) -> Option<&Entry> {
        self.by_key.get(key).and_then(|e| e.first())
    }

    /// Every retained entry, with its key.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.by_key
            .iter()
            .flat_map(|(key, entries)| entries.iter().map(move |e| (key.as_str(), e)))
    }

    /// The entry served at `path`.
    pub fn by_path(&self, path: &str) -> Option<&Entry> {
        self.entries().map(|(_, e)| e).find(|e| e.path == path)
    }

    /// Digests no eviction may remove.
    pub fn pinned(&self) -> HashSet<String> {
        self.entries().map(|(_, e)| e.digest.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u8) -> Entry {
        Entry {
            path: format!("externalartifact/apps/db/{n}.tar.gz"),
            digest: format!("sha256:{}", format!("{n:02x}").repeat(32)),
            size: u64::from(n),
            urls: vec![format!("http://upstream/{n}.tar.gz")],
        }
    }

    #[test]
    fn retention_keeps_the_published_and_the_previous_by_table() {
        // (published in order, expected retained newest first, expected dropped by the last)
        let cases: [(&[u8], &[u8], &[u8]); 5] = [
            (&[1], &[1], &[]),
            (&[1, 2], &[2, 1], &[]),
            (&[1, 2, 3], &[3, 2], &[1]),
            (&[1, 2, 2], &[2, 1], &[]),
            (&[1, 2, 1], &[1, 2], &[]),
        ];
        for (published, retained, dropped) in cases {
            let mut index = Index::default();
            let mut last = Vec::new();
            for n in published {
                last = index.record("apps/db", entry(*n));
            }
            let got: Vec<&Entry> = index.entries().map(|(_, e)| e).collect();
            let want: Vec<Entry> = retained.iter().map(|n| entry(*n)).collect();
            assert_eq!(got, want.iter().collect::<Vec<_>>(), "{published:?}");
            let want_dropped: Vec<Entry> = dropped.iter().map(|n| entry(*n)).collect();
            assert_eq!(last, want_dropped, "{published:?}");
            assert_eq!(
                index.current("apps/db"),
                Some(&entry(*published.last().unwrap()))
            );
        }
    }

    #[test]
    fn recording_again_merges_urls() {
        let mut index = Index::default();
        index.record("apps/db", entry(1));
        let mut peer = entry(1);
        peer.urls = vec!["http://peer/x".into()];
        index.record("apps/db", peer);
        assert_eq!(
            index.current("apps/db").unwrap().urls,
            vec![
                "http://upstream/1.tar.gz".to_string(),
                "http://peer/x".into()
            ]
        );
    }

    #[test]
    fn the_index_survives_a_save_and_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("published.json");
        assert_eq!(Index::load(&path).unwrap(), Index::default());
        let mut index = Index::default();
        index.record("apps/db", entry(1));
        index.record("apps/db", entry(2));
        index.record("team/web", entry(3));
        index.save(&path).unwrap();
        let loaded = Index::load(&path).unwrap();
        assert_eq!(loaded, index);
        assert_eq!(loaded.by_path(&entry(1).path), Some(&entry(1)));
        assert_eq!(loaded.pinned().len(), 3);
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            Index::load(&path),
            Err(StorageError::Index { .. })
        ));
    }
}
