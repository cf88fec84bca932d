//! [`Storage`]: the blob store, the published index and the artifact client together; what
//! the `artifact` gate publishes through ([`ArtifactHost`]) and what the server reads.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use super::host::{ArtifactHost, ArtifactKey, HostError, Published};
use super::index::{self, Entry, Index};
use super::store::{Lease, Store};
use super::{Retention, StorageConfig, StorageError};
use crate::digest::Digest;
use crate::flux::artifact::{ArtifactError, FetchOptions, Fetcher};

/// An artifact the cluster says is published (an ExternalArtifact's `status.artifact`), which
/// this replica must serve too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// `status.artifact.path`.
    pub path: String,
    /// `status.artifact.digest`.
    pub digest: String,
    /// `status.artifact.size`.
    pub size: u64,
    /// Where the bytes may be fetched, in order: the upstream source's artifact URL when it
    /// still publishes this digest, then `status.artifact.url` (a peer replica).
    pub urls: Vec<String>,
}

/// Reads the ExternalArtifact `namespace/name` from the cluster and says what its status
/// publishes (set by [`super::follow`]): a request that misses before the watch has caught up
/// still finds what the leader published.
pub type Lookup = Arc<dyn Fn(String, String) -> BoxFuture<'static, Option<Expected>> + Send + Sync>;

/// The artifact storage of one replica.
pub struct Storage {
    lookup: std::sync::OnceLock<Lookup>,
    fetcher: Fetcher,
    store: Store,
    index: tokio::sync::Mutex<Index>,
    /// What the server looks paths up in, without waiting on a publish's index write.
    served: Mutex<Index>,
    index_path: PathBuf,
    adv_addr: String,
    /// `--artifact-retention-*`.
    retention: Retention,
    /// `namespace/name` of ExternalArtifacts whose published artifact could not be restored.
    lost: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("index_path", &self.index_path)
            .field("adv_addr", &self.adv_addr)
            .finish_non_exhaustive()
    }
}

/// The path source-controller's layout gives an ExternalArtifact's tarball.
pub fn artifact_path(namespace: &str, name: &str, digest: &Digest) -> String {
    format!("externalartifact/{namespace}/{name}/{}.tar.gz", digest.hex)
}

impl Storage {
    /// Opens the storage under `config.path` (created with its parents if missing, and proved
    /// writable: [`super::prepare`]) and loads what was published. Call [`Storage::restore`]
    /// next to fetch what the volume lost.
    pub fn open(config: &StorageConfig, fetch: FetchOptions) -> Result<Arc<Self>, StorageError> {
        let root = config.path.clone().ok_or_else(|| StorageError::Io {
            context: "opening the storage".into(),
            error: std::io::Error::other("no --storage-path"),
        })?;
        super::prepare(&root)?;
        let store = Store::open(&root, config.max_cache_bytes)?;
        let index_path = root.join("published.json");
        let index = Index::load(&index_path)?;
        store.set_pinned(index.pinned());
        let fetcher = Fetcher::new(fetch)
            .map_err(|e| StorageError::Client(e.to_string()))?
            .with_store(store.clone());
        tracing::info!(path = %root.display(), published = index.entries().count(),
            adv_addr = %config.adv_addr, retention_records = config.retention.records,
            retention_ttl = ?config.retention.ttl, "artifact storage opened");
        Ok(Arc::new(Self {
            lookup: std::sync::OnceLock::new(),
            fetcher,
            store,
            served: Mutex::new(index.clone()),
            index: tokio::sync::Mutex::new(index),
            index_path,
            adv_addr: config.adv_addr.clone(),
            retention: config.retention,
            lost: Mutex::new(HashSet::new()),
        }))
    }

    /// Sets how a request that misses the index looks the ExternalArtifact up (once).
    pub fn set_lookup(&self, lookup: Lookup) {
        let _ = self.lookup.set(lookup);
    }

    /// On a miss: the ExternalArtifact the path names (`externalartifact/<ns>/<name>/…`), if
    /// its status says this storage publishes exactly that path.
    async fn look_up(&self, path: &str) -> Option<()> {
        let lookup = self.lookup.get()?.clone();
        let mut parts = path.split('/');
        let (Some("externalartifact"), Some(namespace), Some(name), Some(_), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        let expected = lookup(namespace.to_string(), name.to_string()).await?;
        if expected.path != path || !expected.urls.contains(&self.url_of(path)) {
            return None;
        }
        match self.expect(namespace, name, expected).await {
            Ok(()) => Some(()),
            Err(error) => {
                tracing::warn!(path, %error, "a published artifact is missing and could not be fetched");
                None
            }
        }
    }

    /// The artifact client the renders use: it downloads through this storage's store.
    pub fn fetcher(&self) -> Fetcher {
        self.fetcher.clone()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// `http://<--storage-adv-addr>/<path>`.
    pub fn url_of(&self, path: &str) -> String {
        format!("http://{}/{path}", self.adv_addr)
    }

    /// Whether `url` is a replica's artifact server (this one's advertised address, which a
    /// Service spreads over every replica): fetched with the peer header.
    fn is_peer(&self, url: &str) -> bool {
        url.starts_with(&format!("http://{}/", self.adv_addr))
    }

    /// Whether the artifact `key` publishes could not be restored (an empty volume after a
    /// reschedule, and neither the upstream nor a peer still has it): the gate says so on the
    /// ExternalArtifact's condition and the next revision republishes.
    pub fn lost(&self, key: &ArtifactKey) -> bool {
        self.lost_set()
            .contains(&index::key_text(&key.namespace, &key.name))
    }

    /// Every ExternalArtifact whose published artifact is lost (see [`Storage::lost`]).
    pub fn lost_keys(&self) -> Vec<ArtifactKey> {
        let mut keys: Vec<ArtifactKey> = self
            .lost_set()
            .iter()
            .filter_map(|text| {
                let (namespace, name) = text.split_once('/')?;
                Some(ArtifactKey {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                })
            })
            .collect();
        keys.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        keys
    }

    fn lost_set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn served(&self) -> std::sync::MutexGuard<'_, Index> {
        self.served.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `--artifact-retention-*`.
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// Records `entry` for `key` (persisted before it returns) and re-pins. First `key`'s
    /// artifacts are garbage-collected with the current one (what the ExternalArtifact points
    /// at until the caller writes the new status) kept, as source-controller collects before
    /// it writes the next artifact: right after, `records` + 1 are on disk.
    async fn record(&self, key: &str, entry: Entry) -> Result<(), StorageError> {
        let mut index = self.index.lock().await;
        let mut updated = index.clone();
        let now = index::now_ms();
        let removed = updated.collect(key, self.retention, now);
        updated.record(key, entry, now);
        let removed = removed.into_iter().map(|e| (key.to_string(), e)).collect();
        self.commit(&mut index, updated, removed).await
    }

    /// Saves `updated` as the index, re-pins, and removes from disk the blobs of `removed`
    /// that nothing published pins any more.
    async fn commit(
        &self,
        index: &mut Index,
        updated: Index,
        removed: Vec<(String, Entry)>,
    ) -> Result<(), StorageError> {
        let path = self.index_path.clone();
        let snapshot = updated.clone();
        tokio::task::spawn_blocking(move || snapshot.save(&path))
            .await
            .map_err(|e| StorageError::Io {
                context: "saving the published index".into(),
                error: std::io::Error::other(e.to_string()),
            })??;
        *index = updated;
        *self.served() = index.clone();
        self.store.set_pinned(index.pinned());
        let digests: Vec<Digest> = removed
            .iter()
            .filter_map(|(_, e)| Digest::parse(&e.digest).ok())
            .collect();
        self.store.discard(&digests);
        let mut by_key: std::collections::BTreeMap<&str, usize> = Default::default();
        for (key, old) in &removed {
            tracing::debug!(artifact = %key, path = %old.path, "artifact garbage collected");
            *by_key.entry(key).or_default() += 1;
        }
        for (key, count) in by_key {
            // source-controller's event: "garbage collected %d artifacts".
            tracing::info!(artifact = %key, count, "garbage collected {count} artifacts");
        }
        Ok(())
    }

    /// Removes every artifact of the ExternalArtifact `namespace/name`, which was deleted: as
    /// source-controller removes all of an object's artifacts when it goes. Returns the paths.
    pub async fn forget(&self, namespace: &str, name: &str) -> Result<Vec<String>, StorageError> {
        let key = index::key_text(namespace, name);
        let mut index = self.index.lock().await;
        let mut updated = index.clone();
        let removed = updated.forget(&key);
        self.lost_set().remove(&key);
        if removed.is_empty() {
            return Ok(Vec::new());
        }
        let paths = removed.iter().map(|e| e.path.clone()).collect();
        let removed = removed.into_iter().map(|e| (key.clone(), e)).collect();
        self.commit(&mut index, updated, removed).await?;
        Ok(paths)
    }

    /// Garbage-collects every ExternalArtifact's artifacts (`--artifact-retention-*`), the
    /// current ones kept: what runs besides each publish, so an artifact past its TTL goes
    /// though no new revision comes. Returns the paths removed.
    pub async fn collect_garbage(&self) -> Result<Vec<String>, StorageError> {
        let mut index = self.index.lock().await;
        let mut updated = index.clone();
        let removed = updated.collect_all(self.retention, index::now_ms());
        if removed.is_empty() {
            return Ok(Vec::new());
        }
        let paths = removed.iter().map(|(_, e)| e.path.clone()).collect();
        self.commit(&mut index, updated, removed).await?;
        Ok(paths)
    }

    /// The stored blob of `digest`, downloaded from `url` unless the store holds it. `peer`:
    /// `url` is another replica's artifact server (sent with the peer header).
    async fn ensure_blob(
        &self,
        url: &str,
        digest: &Digest,
        peer: bool,
    ) -> Result<Lease, ArtifactError> {
        let download = self.fetcher.download(url, digest, peer)?;
        self.store.ensure(digest, download).await
    }

    /// Fetches the blob of `digest` from the first of `urls` that has it (one attempt each).
    async fn fetch_from(&self, digest: &Digest, urls: &[String]) -> Result<Lease, String> {
        let mut errors = Vec::new();
        for url in urls {
            match self.ensure_blob(url, digest, self.is_peer(url)).await {
                Ok(lease) => return Ok(lease),
                Err(error) => errors.push(error.to_string()),
            }
        }
        if errors.is_empty() {
            errors.push("no URL to fetch it from".into());
        }
        Err(errors.join("; "))
    }

    /// Makes sure every published artifact is on disk: one the volume lost is fetched again
    /// from where it came from; the current artifact of a key that cannot be restored is lost.
    pub async fn restore(&self) {
        let entries: Vec<(String, Entry, bool)> = {
            let index = self.index.lock().await;
            index
                .entries()
                .map(|(key, e)| (key.to_string(), e.clone(), index.current(key) == Some(e)))
                .collect()
        };
        for (key, entry, current) in entries {
            let Ok(digest) = Digest::parse(&entry.digest) else {
                continue;
            };
            if self.store.get(&digest).await.is_some() {
                continue;
            }
            match self.fetch_from(&digest, &entry.urls).await {
                Ok(_) => {
                    tracing::info!(artifact = %key, path = %entry.path, "published artifact restored");
                    if current {
                        self.lost_set().remove(&key);
                    }
                }
                Err(error) => {
                    tracing::warn!(artifact = %key, path = %entry.path, %error,
                        "a published artifact is missing and cannot be fetched again");
                    if current {
                        self.lost_set().insert(key);
                    }
                }
            }
        }
    }

    /// Keeps what the cluster says `namespace/name` publishes (`status.artifact`), fetching it
    /// unless held: how a follower serves the leader's artifacts, and how an empty volume is
    /// refilled. A path that is not this storage's layout for the key is refused.
    pub async fn expect(
        &self,
        namespace: &str,
        name: &str,
        expected: Expected,
    ) -> Result<(), String> {
        let digest = Digest::parse(&expected.digest).map_err(|e| e.to_string())?;
        if expected.path != artifact_path(namespace, name, &digest) {
            return Err(format!(
                "path {:?} is not {:?}: not published by this storage",
                expected.path,
                artifact_path(namespace, name, &digest)
            ));
        }
        let key = index::key_text(namespace, name);
        let entry = Entry {
            path: expected.path.clone(),
            digest: digest.to_string(),
            size: expected.size,
            urls: expected.urls.clone(),
            created: 0,
        };
        let known = self.served().current(&key).is_some_and(|current| {
            (&current.path, &current.digest, current.size, &current.urls)
                == (&entry.path, &entry.digest, entry.size, &entry.urls)
        });
        if !known {
            self.record(&key, entry).await.map_err(|e| e.to_string())?;
        }
        if self.store.get(&digest).await.is_some() {
            self.lost_set().remove(&key);
            return Ok(());
        }
        match self.fetch_from(&digest, &expected.urls).await {
            Ok(lease) => {
                tracing::info!(artifact = %key, path = %expected.path, bytes = lease.size,
                    "fetched a published artifact this replica lacked");
                self.lost_set().remove(&key);
                Ok(())
            }
            Err(error) => {
                self.lost_set().insert(key);
                Err(error)
            }
        }
    }

    /// The blob served at `path`, verified. On a miss, unless `from_peer` (a replica asking:
    /// it must not make this one ask back), the blob is fetched from where the index says it
    /// came from, so a follower serves what the leader published.
    pub async fn open_path(&self, path: &str, from_peer: bool) -> Option<(Lease, String)> {
        let known = self.served().by_path(path).cloned();
        let entry = match known {
            Some(entry) => entry,
            None if from_peer => return None,
            None => {
                self.look_up(path).await?;
                self.served().by_path(path).cloned()?
            }
        };
        let digest = Digest::parse(&entry.digest).ok()?;
        if let Some(lease) = self.store.get(&digest).await {
            return Some((lease, entry.digest));
        }
        if from_peer {
            return None;
        }
        match self.fetch_from(&digest, &entry.urls).await {
            Ok(lease) => Some((lease, entry.digest)),
            Err(error) => {
                tracing::warn!(path, %error, "a published artifact is missing and could not be fetched");
                None
            }
        }
    }
}

impl ArtifactHost for Storage {
    fn publish<'a>(
        &'a self,
        key: &'a ArtifactKey,
        upstream_url: &'a str,
        digest: &'a str,
    ) -> BoxFuture<'a, Result<Published, HostError>> {
        Box::pin(async move {
            let shown = index::key_text(&key.namespace, &key.name);
            let digest = Digest::parse(digest).map_err(|e| HostError(e.to_string()))?;
            let lease = self
                .ensure_blob(upstream_url, &digest, false)
                .await
                .map_err(|e| HostError(format!("ExternalArtifact {shown}: {e}")))?;
            let path = artifact_path(&key.namespace, &key.name, &digest);
            let url = self.url_of(&path);
            let entry = Entry {
                path: path.clone(),
                digest: digest.to_string(),
                size: lease.size,
                urls: vec![upstream_url.to_string(), url.clone()],
                created: 0,
            };
            self.record(&shown, entry)
                .await
                .map_err(|e| HostError(format!("ExternalArtifact {shown}: {e}")))?;
            self.lost_set().remove(&shown);
            tracing::info!(artifact = %shown, %path, bytes = lease.size, digest = %digest, "artifact published");
            Ok(Published {
                url,
                path,
                digest: digest.to_string(),
                size: i64::try_from(lease.size).unwrap_or(i64::MAX),
            })
        })
    }
}
