//! What is published: for each ExternalArtifact, the artifact it points at now and the ones
//! before it that the garbage collection keeps (source-controller's retention: Flux may still
//! be fetching a previous one when the status moves on). Persisted as
//! `<storage>/published.json`, written to a temporary file and renamed, so a crash leaves the
//! old index or the new one, never a torn one.
//!
//! [`garbage`] is source-controller's `GetGarbageFiles` (fluxcd/pkg `artifact/storage/gc.go`)
//! over one ExternalArtifact's entries instead of its directory's files, the time an entry was
//! recorded standing for a file's modification time.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Retention, StorageError};

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
    /// When this artifact became the published one (milliseconds since the Unix epoch): what
    /// the TTL and the order of the garbage collection read, as source-controller reads a
    /// file's modification time. An index written before the field existed reads as the time
    /// it is loaded, so an upgrade starts every TTL afresh rather than collecting at once.
    #[serde(default)]
    pub created: u64,
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The paths of `entries` (one ExternalArtifact's) the garbage collection deletes, as
/// source-controller's `GetGarbageFiles` decides for the files of one object, `current`
/// (the one the ExternalArtifact points at) never among them:
/// 1. every entry older than the TTL;
/// 2. if fewer than `records` remain, that is all;
/// 3. else the oldest of the rest, until `records` remain. When step 1 found any, Flux's
///    loop counts each entry it takes twice (`len(sortedPaths) - collected -
///    len(garbageFiles)`, `garbageFiles` growing with `collected`), so it stops earlier;
///    kept as is, so the two storages keep the same artifacts.
pub fn garbage(entries: &[Entry], current: &str, retention: Retention, now: u64) -> Vec<String> {
    let ttl = u64::try_from(retention.ttl.as_millis()).unwrap_or(u64::MAX);
    let records = retention.records;
    let total = entries.len();
    let mut garbage: Vec<String> = entries
        .iter()
        .filter(|e| e.path != current && now.saturating_sub(e.created) > ttl)
        .map(|e| e.path.clone())
        .collect();
    if total - garbage.len() < records {
        return garbage;
    }
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by_key(|e| e.created);
    let expired = garbage.len();
    let mut collected = 0;
    for entry in sorted {
        if entry.path == current || garbage.contains(&entry.path) {
            continue;
        }
        let left = if expired > 0 {
            total.saturating_sub(collected + garbage.len())
        } else {
            total.saturating_sub(collected)
        };
        if left > records {
            garbage.push(entry.path.clone());
            collected += 1;
        }
    }
    garbage
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
        let mut file: File = serde_json::from_slice(&text).map_err(|e| StorageError::Index {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let now = now_ms();
        for entry in file.artifacts.values_mut().flatten() {
            if entry.created == 0 {
                entry.created = now;
            }
        }
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

    /// Records `entry` as the artifact `key` publishes now, at `now` (its `created`, unless it
    /// was the current one already: then only its URLs and size change). The ones before stay
    /// until [`Index::collect`] lets them go.
    pub fn record(&mut self, key: &str, mut entry: Entry, now: u64) {
        let entries = self.by_key.entry(key.to_string()).or_default();
        match entries.iter().position(|e| e.path == entry.path) {
            Some(position) => {
                let mut known = entries.remove(position);
                for url in entry.urls {
                    if !known.urls.contains(&url) {
                        known.urls.push(url);
                    }
                }
                known.size = entry.size;
                if position > 0 {
                    // Published again: as source-controller writes the file anew.
                    known.created = now;
                }
                entries.insert(0, known);
            }
            None => {
                entry.created = now;
                entries.insert(0, entry);
            }
        }
    }

    /// Garbage-collects `key`'s artifacts ([`garbage`]; the current one stays), returning
    /// the entries removed.
    pub fn collect(&mut self, key: &str, retention: Retention, now: u64) -> Vec<Entry> {
        let Some(entries) = self.by_key.get_mut(key) else {
            return Vec::new();
        };
        let Some(current) = entries.first().map(|e| e.path.clone()) else {
            return Vec::new();
        };
        let paths = garbage(entries, &current, retention, now);
        let (removed, kept): (Vec<Entry>, Vec<Entry>) =
            entries.drain(..).partition(|e| paths.contains(&e.path));
        *entries = kept;
        removed
    }

    /// Drops every artifact of `key` (its ExternalArtifact is gone), returning them.
    pub fn forget(&mut self, key: &str) -> Vec<Entry> {
        self.by_key.remove(key).unwrap_or_default()
    }

    /// [`Index::collect`] for every ExternalArtifact: each removed entry with its key.
    pub fn collect_all(&mut self, retention: Retention, now: u64) -> Vec<(String, Entry)> {
        let keys: Vec<String> = self.by_key.keys().cloned().collect();
        keys.into_iter()
            .flat_map(|key| {
                let removed = self.collect(&key, retention, now);
                removed.into_iter().map(move |e| (key.clone(), e))
            })
            .collect()
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
    use std::time::Duration;

    fn entry(n: u8) -> Entry {
        Entry {
            path: format!("externalartifact/apps/db/{n}.tar.gz"),
            digest: format!("sha256:{}", format!("{n:02x}").repeat(32)),
            size: u64::from(n),
            urls: vec![format!("http://upstream/{n}.tar.gz")],
            created: 0,
        }
    }

    fn retention(records: usize, ttl_ms: u64) -> Retention {
        Retention {
            records,
            ttl: Duration::from_millis(ttl_ms),
        }
    }

    /// fluxcd/pkg's `TestStorage_getGarbageFiles` cases (artifact/storage/gc_test.go), with
    /// the files' creation pauses as `created` times and the check right after the last
    /// pause; plus the cases that pin the current artifact, `records: 0` and Flux's double
    /// count when some expired.
    #[test]
    fn garbage_is_source_controllers_by_table() {
        // (case, entries, pause between them ms, ttl ms, records, deleted)
        type Case<'a> = (&'a str, u8, u64, u64, usize, &'a [u8]);
        let cases: &[Case] = &[
            (
                "delete files based on maxItemsToBeRetained",
                5,
                10,
                120_000,
                2,
                &[1, 2, 3],
            ),
            ("delete files based on ttl", 5, 1000, 3500, 4, &[1, 2]),
            (
                "delete files based on ttl and maxItemsToBeRetained",
                6,
                1000,
                5500,
                4,
                &[1, 2],
            ),
            ("nothing to delete", 2, 10, 120_000, 2, &[]),
            (
                "every expired one, the current never",
                3,
                1000,
                500,
                2,
                &[1, 2],
            ),
            (
                "records 0 keeps the current alone",
                4,
                10,
                120_000,
                0,
                &[1, 2, 3],
            ),
            // 1 expired; Flux then stops at 6 - 2 - (1 + 2) = 1: three are left, not two.
            (
                "the double count after an expired one",
                6,
                1000,
                5500,
                2,
                &[1, 2, 3],
            ),
        ];
        for (case, count, pause, ttl, records, deleted) in cases {
            let entries: Vec<Entry> = (1..=*count)
                .map(|n| Entry {
                    created: u64::from(n) * pause,
                    ..entry(n)
                })
                .collect();
            let now = u64::from(*count + 1) * pause;
            let current = entries.last().unwrap().path.clone();
            let mut got = garbage(&entries, &current, retention(*records, *ttl), now);
            got.sort();
            let want: Vec<String> = deleted.iter().map(|n| entry(*n).path).collect();
            assert_eq!(got, want, "{case}");
        }
    }

    /// The collection reads the index's order (newest first), keeps the current one however
    /// old, and returns what it removed; publishing 5 revisions with a collection before each
    /// (as source-controller collects before it writes the next) leaves 3, then 2, then 1.
    #[test]
    fn collect_before_each_record_leaves_records_plus_the_new_one() {
        let mut index = Index::default();
        let keep = retention(2, 60_000);
        for n in 1..=5u8 {
            let now = u64::from(n) * 10;
            index.collect("apps/db", keep, now);
            index.record("apps/db", entry(n), now);
        }
        let paths = |index: &Index| -> Vec<String> {
            index.entries().map(|(_, e)| e.path.clone()).collect()
        };
        assert_eq!(paths(&index), [5, 4, 3].map(|n| entry(n).path));
        let removed = index.collect("apps/db", keep, 60);
        assert_eq!(
            removed,
            vec![Entry {
                created: 30,
                ..entry(3)
            }]
        );
        assert_eq!(paths(&index), [5, 4].map(|n| entry(n).path));
        // Past the TTL of both: the current one stays.
        let removed = index.collect_all(keep, 200_000);
        assert_eq!(removed.len(), 1);
        assert_eq!(paths(&index), [entry(5).path]);
        assert_eq!(index.current("apps/db").unwrap().path, entry(5).path);
    }

    #[test]
    fn recording_again_merges_urls_and_a_republish_is_new() {
        let mut index = Index::default();
        index.record("apps/db", entry(1), 10);
        let mut peer = entry(1);
        peer.urls = vec!["http://peer/x".into()];
        index.record("apps/db", peer, 20);
        let current = index.current("apps/db").unwrap();
        assert_eq!(
            current.urls,
            vec![
                "http://upstream/1.tar.gz".to_string(),
                "http://peer/x".into()
            ]
        );
        assert_eq!(
            current.created, 10,
            "the current one recorded again keeps its time"
        );
        index.record("apps/db", entry(2), 30);
        index.record("apps/db", entry(1), 40);
        assert_eq!(index.current("apps/db").unwrap().created, 40);
        assert_eq!(index.entries().count(), 2);
    }

    #[test]
    fn the_index_survives_a_save_and_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("published.json");
        assert_eq!(Index::load(&path).unwrap(), Index::default());
        let mut index = Index::default();
        index.record("apps/db", entry(1), 1);
        index.record("apps/db", entry(2), 2);
        index.record("team/web", entry(3), 3);
        index.save(&path).unwrap();
        let loaded = Index::load(&path).unwrap();
        assert_eq!(loaded, index);
        assert_eq!(
            loaded.by_path(&entry(1).path),
            Some(&Entry {
                created: 1,
                ..entry(1)
            })
        );
        assert_eq!(loaded.pinned().len(), 3);
        // Written before `created` existed: read as loaded now.
        std::fs::write(
            &path,
            br#"{"version":1,"artifacts":{"apps/db":[{"path":"p","digest":"sha256:00","size":1}]}}"#,
        )
        .unwrap();
        let before = now_ms();
        let old = Index::load(&path).unwrap();
        assert!(old.current("apps/db").unwrap().created >= before);
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            Index::load(&path),
            Err(StorageError::Index { .. })
        ));
    }
}
