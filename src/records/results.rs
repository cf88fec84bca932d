//! Per-Kustomization history of revisions (the last [`HISTORY`]), kept in memory for
//! `/status` and persisted in one ConfigMap per Kustomization, so a restart keeps the history
//! and sees which revisions were left `running`.
//!
//! Why one ConfigMap per Kustomization: a Kustomization's records change together (a run
//! replaces its `running` record with the final one) and only one worker handles a
//! Kustomization at a time, so per-object optimistic concurrency is all the locking needed.
//! A ConfigMap holds at most 1 MiB: [`fit`] truncates long messages and drops the oldest
//! records so a write never fails for size.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::value::RawValue;

use crate::cluster::{CallError, FIELD_MANAGER, with_deadline};
pub use crate::journal::Shard;
use crate::model::{Key, Kind, RevisionRecord, RevisionState};
use crate::records::Records;

pub use super::codec::{
    Corrupt, RESULTS_RECORD, from_configmap, results_configmap_name, results_configmap_name_of,
    to_configmap,
};
use super::codec::{configmap, scope};
pub use super::history::{
    BUDGET, FIRST_CAP, HISTORY, fit, insert, is_repeat, is_same_failure, truncate_text,
};
use super::write_lock::WriteLocks;
/// Optimistic-concurrency retries before a put gives up.
const ATTEMPTS: usize = 5;

/// Why the results could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    // Not a `source`: the message carries it, and `{:#}` would print it twice.
    #[error("results: {0}")]
    Call(CallError),
    #[error("results record {object} is unreadable: {message}")]
    Corrupt { object: String, message: String },
    #[error("results record {object}: still conflicting after {attempts} attempts")]
    Conflict { object: String, attempts: usize },
}

impl From<Corrupt> for ResultsError {
    fn from(Corrupt { object, message }: Corrupt) -> Self {
        ResultsError::Corrupt { object, message }
    }
}

impl From<CallError> for ResultsError {
    fn from(e: CallError) -> Self {
        ResultsError::Call(e)
    }
}

/// Returns the heap pages the load freed (the list's pages and objects, the records parsed to
/// be encoded) to the system: glibc keeps freed memory in its arenas, so without
/// this the load's peak stays resident for the life of the process.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; it takes no pointer from us.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// One Kustomization's history as the process keeps it: encoded, plus its newest record parsed.
///
/// Why encoded: with 1,000 handled Kustomizations × 20 records, the records as structs were
/// most of serve's memory (about 3.5 kB each, against ~0.75 kB as JSON), while the whole
/// history is only ever read to be served (`GET /status/{ns}/{name}`, which splices these
/// bytes in), written back to its ConfigMap, or, rarely, searched by the gate (parsed then).
/// The newest record is what the index, `/status`'s rows and the dashboard read at every
/// resync and page, so it is kept parsed.
#[derive(Clone)]
struct History {
    /// The JSON array of the records, newest first, as `serde_json` encodes them (also the
    /// ConfigMap's `data.records`).
    json: Arc<RawValue>,
    last: Option<RevisionRecord>,
}

impl Default for History {
    fn default() -> Self {
        History::encode(&[])
    }
}

impl History {
    fn encode(records: &[RevisionRecord]) -> Self {
        // Encoding these structs cannot fail (string keys, no custom serialisers); were it to,
        // an empty history is kept rather than a panic, and the log says so.
        let json = serde_json::value::to_raw_value(records).unwrap_or_else(|e| {
            tracing::error!(error = %e, "encoding a history; keeping it empty");
            RawValue::NULL.to_owned()
        });
        History {
            json: Arc::from(json),
            // A clone holds no spare room, unlike what serde's Vec growth leaves.
            last: records.first().cloned(),
        }
    }

    /// The records, newest first (parsed from the kept JSON: the gate's rare searches).
    fn records(&self) -> Vec<RevisionRecord> {
        decode(&self.json)
    }
}

fn decode(json: &RawValue) -> Vec<RevisionRecord> {
    serde_json::from_str::<Option<Vec<RevisionRecord>>>(json.get())
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "decoding a kept history; answering it empty");
            None
        })
        .unwrap_or_default()
}

#[derive(Clone, Default)]
struct Entry {
    history: History,
    /// The [`Results::generation`] of its last change.
    version: u64,
    /// Of the ConfigMap last read or written; `None` until one exists.
    resource_version: Option<String>,
    /// resourceVersions this process wrote and the watch has not shown yet, oldest first.
    /// A watch event is ordered after every earlier write of the object: while one of ours is
    /// still to come, an event of someone else's is older than it and is not applied, and the
    /// echo of our own write brings nothing new. Without this, the leader's own echo could put
    /// back its `running` record after the final one and make the revision due again.
    pending: Vec<String>,
}

/// Own writes remembered per Kustomization until the watch shows them (bounded: a watch that
/// lost events relists, and the relist resets them).
const PENDING: usize = 16;

/// Results ConfigMaps per list page (the startup list and the watch's relists). A page is held
/// whole while it is read (its body and its objects, up to ~20 kB per full history): 100 keeps
/// that transient near 4 MB, where 500 made it the process's peak (~65 MB against ~51 MB
/// ready, 1,000 × 20, `benches/service.rs`), at the cost of a request per 100 Kustomizations
/// at start.
pub const PAGE_SIZE: u32 = 100;

/// What a list of results ConfigMaps found, read into the kept form ([`History`]) one
/// ConfigMap at a time, with each one's resourceVersion.
#[derive(Default)]
struct Listed(HashMap<(String, String), (History, Option<String>)>);

impl Listed {
    /// An unreadable record is logged and skipped (its Kustomization starts a new history), so
    /// one bad record cannot keep the service unready.
    fn add(&mut self, shard: &Shard, cm: &ConfigMap) {
        if !shard.owns(cm.metadata.labels.as_ref()) {
            return;
        }
        match from_configmap(cm) {
            Ok((namespace, name, records)) => {
                self.0.insert(
                    (namespace, name),
                    (
                        History::encode(&records),
                        cm.metadata.resource_version.clone(),
                    ),
                );
            }
            Err(e) => tracing::warn!(error = %e, "skipping an unreadable results record"),
        }
    }
}

/// Where the histories persist: ConfigMaps in the service's namespace, this shard's only.
struct Cluster {
    client: kube::Client,
    namespace: String,
    call_timeout: Duration,
    shard: Shard,
    /// Whose records: each kind has its own label value and names.
    kind: Kind,
}

impl Cluster {
    fn api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn object(&self, cm_name: &str) -> String {
        format!("ConfigMap {}/{cm_name}", self.namespace)
    }
}

struct Inner {
    cluster: Option<Cluster>,
    entries: Mutex<HashMap<(String, String), Entry>>,
    loaded: AtomicBool,
    /// Told when `loaded` turns true.
    loaded_signal: tokio::sync::Notify,
    budget: usize,
    /// Bumped by every change of any history (what `/status` caches against).
    generation: AtomicU64,
    /// Whose records these are.
    kind: Kind,
    /// One write at a time per history: a save and the forget of the same key never
    /// interleave.
    writes: WriteLocks<(String, String)>,
}

/// The revision history of every Kustomization this replica handles: the one results store.
/// The gate writes through [`Results::put`]; the index, `/status` and the dashboard read it
/// (also as the index's [`Records`]); [`Results::follow`] keeps it current from the cluster, on
/// the leader and on the followers alike, with one paged list and then a watch. Sharded, it
/// reads and writes only its shard's ConfigMaps ([`Shard`]). Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct Results {
    inner: Arc<Inner>,
}

impl Results {
    /// Persisted in ConfigMaps in `namespace`, written with `client`'s own identity; unsharded.
    pub fn new(client: kube::Client, namespace: String, call_timeout: Duration) -> Self {
        Self::sharded(client, namespace, call_timeout, Shard::Unsharded)
    }

    /// [`Results::new`] for one shard: its ConfigMaps carry the shard's label, and only those
    /// are read, followed and deleted.
    pub fn sharded(
        client: kube::Client,
        namespace: String,
        call_timeout: Duration,
        shard: Shard,
    ) -> Self {
        Self::of_kind(client, namespace, call_timeout, shard, Kind::KUSTOMIZATION)
    }

    /// [`Results::sharded`] for the gated objects of `kind`: their own ConfigMaps (label
    /// `flux-converger.io/record` `helmrelease-results` for HelmReleases), read, followed and
    /// written apart from the other kind's.
    pub fn of_kind(
        client: kube::Client,
        namespace: String,
        call_timeout: Duration,
        shard: Shard,
        kind: Kind,
    ) -> Self {
        Self::build(
            Some(Cluster {
                client,
                namespace,
                call_timeout,
                shard,
                kind,
            }),
            BUDGET,
            false,
        )
    }

    /// In memory only (tests, and runs without a cluster); always loaded.
    pub fn memory() -> Self {
        Self::build(None, BUDGET, true)
    }

    /// Like [`Results::new`] with another size budget per ConfigMap (to test truncation).
    pub fn with_budget(
        client: kube::Client,
        namespace: String,
        call_timeout: Duration,
        budget: usize,
    ) -> Self {
        Self::build(
            Some(Cluster {
                client,
                namespace,
                call_timeout,
                shard: Shard::Unsharded,
                kind: Kind::KUSTOMIZATION,
            }),
            budget,
            false,
        )
    }

    fn build(cluster: Option<Cluster>, budget: usize, loaded: bool) -> Self {
        let kind = cluster.as_ref().map_or(Kind::KUSTOMIZATION, |c| c.kind);
        Results {
            inner: Arc::new(Inner {
                kind,
                cluster,
                entries: Mutex::new(HashMap::new()),
                loaded: AtomicBool::new(loaded),
                loaded_signal: tokio::sync::Notify::new(),
                budget,
                generation: AtomicU64::new(0),
                writes: WriteLocks::default(),
            }),
        }
    }

    /// The kind whose records these are.
    pub fn kind(&self) -> Kind {
        self.inner.kind
    }

    /// The shard whose records these are (the intents journal is kept to the same one).
    pub fn shard(&self) -> Shard {
        self.inner
            .cluster
            .as_ref()
            .map(|c| c.shard.clone())
            .unwrap_or_default()
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<(String, String), Entry>> {
        // The map stays consistent even if a holder panicked: keep using it.
        self.inner.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads this shard's results ConfigMaps, [`PAGE_SIZE`] at a time, in place of what is in
    /// memory. The service reads them through [`Results::follow`] instead; this is for a
    /// one-off reader (a restarted store in a test, a tool).
    pub async fn load(&self) -> Result<(), ResultsError> {
        let Some(cluster) = &self.inner.cluster else {
            return Ok(());
        };
        let api = cluster.api();
        let mut params = ListParams::default()
            .labels(&cluster.shard.selector(scope(cluster.kind).0))
            .limit(PAGE_SIZE);
        let what = format!("results ConfigMaps of namespace {}", cluster.namespace);
        let mut read = Listed::default();
        loop {
            let page =
                with_deadline(cluster.call_timeout, "list", &what, api.list(&params)).await?;
            for cm in &page.items {
                read.add(&cluster.shard, cm);
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        self.replace_all(read);
        Ok(())
    }

    /// Keeps the histories current from the cluster until dropped: a kube-runtime watcher on
    /// this shard's results ConfigMaps, whose first (paged) list is the startup read (the
    /// store counts as loaded once it is in), and whose events bring what the leader writes
    /// to every follower's `/status`, and a takeover its predecessor's last records. A watch
    /// that breaks is resumed, relisting only when the server has compacted past it.
    pub async fn follow(self) {
        let Some(cluster) = &self.inner.cluster else {
            return;
        };
        let selector = cluster.shard.selector(scope(cluster.kind).0);
        let config = watcher::Config::default()
            .labels(&selector)
            .page_size(PAGE_SIZE);
        let mut stream = watcher(cluster.api(), config).default_backoff().boxed();
        // Each listed ConfigMap is read into its kept form as it arrives, so a relist holds one
        // page of ConfigMaps at a time, not every one of them.
        let mut listed = Listed::default();
        loop {
            match stream.try_next().await {
                Ok(Some(watcher::Event::Init)) => listed = Listed::default(),
                Ok(Some(watcher::Event::InitApply(cm))) => listed.add(&cluster.shard, &cm),
                Ok(Some(watcher::Event::InitDone)) => {
                    let count = listed.0.len();
                    self.replace_all(std::mem::take(&mut listed));
                    tracing::info!(configmaps = count, selector = %selector, "results listed");
                }
                Ok(Some(watcher::Event::Apply(cm))) => self.apply(&cm),
                Ok(Some(watcher::Event::Delete(cm))) => self.deleted(&cm),
                Ok(None) => return,
                Err(error) => tracing::warn!(%error, "watching the results; retrying"),
            }
        }
    }

    /// Resolves once the results have been read (at once in memory).
    pub async fn loaded(&self) {
        loop {
            let notified = self.inner.loaded_signal.notified();
            if self.is_loaded() {
                return;
            }
            notified.await;
        }
    }

    /// What a (re)list found, in place of what is in memory. Kept from memory: a history whose
    /// newest write the list predates, and one never persisted (the in-memory history shows a
    /// record even when persisting failed).
    fn replace_all(&self, Listed(read): Listed) {
        {
            let mut entries = self.entries();
            let version = self.bump();
            let mut next = HashMap::with_capacity(read.len());
            for (key, (history, resource_version)) in read {
                let entry = match entries.remove(&key) {
                    // Unchanged: keeps its version, so nothing built from it is thrown away.
                    Some(old) if old.resource_version == resource_version => old,
                    Some(mut old)
                        if resource_version
                            .as_ref()
                            .is_some_and(|rv| old.pending.contains(rv)) =>
                    {
                        // Our own write, and maybe a newer one of ours is still to come.
                        if let Some(rv) = &resource_version {
                            old.pending.retain(|p| p != rv);
                        }
                        old
                    }
                    _ => Entry {
                        history,
                        version,
                        resource_version,
                        pending: Vec::new(),
                    },
                };
                next.insert(key, entry);
            }
            for (key, old) in entries.drain() {
                if old.resource_version.is_none() || !old.pending.is_empty() {
                    next.insert(key, old);
                }
            }
            *entries = next;
        }
        release_free_memory();
        // After the swap as well: a reader that saw the first bump with the old entries must
        // not keep what it built from them.
        self.bump();
        self.inner.loaded.store(true, Ordering::SeqCst);
        self.inner.loaded_signal.notify_waiters();
    }

    /// A results ConfigMap added or changed, as the watch shows it.
    fn apply(&self, cm: &ConfigMap) {
        if !self.shard().owns(cm.metadata.labels.as_ref()) {
            return;
        }
        let (namespace, name, records) = match from_configmap(cm) {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(error = %e, "skipping an unreadable results record");
                return;
            }
        };
        let rv = cm.metadata.resource_version.clone();
        let mut entries = self.entries();
        let entry = entries.entry((namespace, name)).or_default();
        if let Some(at) = rv
            .as_ref()
            .and_then(|rv| entry.pending.iter().position(|p| p == rv))
        {
            entry.pending.drain(..=at);
            return;
        }
        if !entry.pending.is_empty() || (entry.resource_version == rv && rv.is_some()) {
            return;
        }
        entry.history = History::encode(&records);
        entry.resource_version = rv;
        entry.version = self.bump();
    }

    /// A results ConfigMap deleted (by the leader, for a Kustomization that is gone), or no
    /// longer this shard's, as the watch shows it.
    fn deleted(&self, cm: &ConfigMap) {
        let key = match (
            cm.data.as_ref().and_then(|d| d.get("namespace")),
            cm.data.as_ref().and_then(|d| d.get("name")),
        ) {
            (Some(namespace), Some(name)) => (namespace.clone(), name.clone()),
            _ => return,
        };
        let mut entries = self.entries();
        if entries.get(&key).is_some_and(|e| e.pending.is_empty()) {
            entries.remove(&key);
            self.bump();
        }
    }

    pub fn is_loaded(&self) -> bool {
        self.inner.loaded.load(Ordering::SeqCst)
    }

    /// A new generation, for a change about to be made (under the entries' lock).
    fn bump(&self) -> u64 {
        self.inner.generation.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Changes with every change of any history: read it before the histories, and what was
    /// built from them stays valid as long as it is unchanged.
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// The generation of the last change of one Kustomization's history.
    pub fn version(&self, namespace: &str, name: &str) -> Option<u64> {
        self.entries()
            .get(&(namespace.to_string(), name.to_string()))
            .map(|e| e.version)
    }

    /// Newest first, at most [`HISTORY`].
    pub fn history(&self, namespace: &str, name: &str) -> Vec<RevisionRecord> {
        self.history_json(namespace, name)
            .map(|json| decode(&json))
            .unwrap_or_default()
    }

    /// [`Results::history`] as its JSON array, without parsing it (what `/status/{ns}/{name}`
    /// serves); `None` when there are no records.
    pub fn history_json(&self, namespace: &str, name: &str) -> Option<Arc<RawValue>> {
        self.entries()
            .get(&(namespace.to_string(), name.to_string()))
            .map(|e| e.history.json.clone())
    }

    pub fn last(&self, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.entries()
            .get(&(namespace.to_string(), name.to_string()))
            .and_then(|e| e.history.last.clone())
    }

    /// Every Kustomization with records (`(namespace, name)`, sorted).
    pub fn keys(&self) -> Vec<(String, String)> {
        let mut keys: Vec<_> = self.entries().keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Forgets the history of a Kustomization that is gone: from memory (so `/status` drops it)
    /// and its ConfigMap (already gone is fine). Returns whether there was one; a Kustomization
    /// without records costs no request. The delete is conditional on the ConfigMap being the
    /// one last seen (or, never seen, on its carrying this shard's label): a ConfigMap another
    /// shard has written since (its Kustomization moved there) is left alone.
    pub async fn remove(&self, namespace: &str, name: &str) -> Result<bool, ResultsError> {
        // After a save of this history still in flight, so its write is the one deleted.
        let _alone = self
            .inner
            .writes
            .lock(&(namespace.to_string(), name.to_string()))
            .await;
        let removed = {
            let mut entries = self.entries();
            let removed = entries.remove(&(namespace.to_string(), name.to_string()));
            if removed.is_some() {
                self.bump();
            }
            removed
        };
        let Some(removed) = removed else {
            return Ok(false);
        };
        let Some(cluster) = &self.inner.cluster else {
            return Ok(true);
        };
        let api = cluster.api();
        let cm_name = results_configmap_name_of(cluster.kind, namespace, name);
        let object = cluster.object(&cm_name);
        let resource_version = match removed.resource_version {
            Some(rv) => rv,
            None => {
                let found =
                    with_deadline(cluster.call_timeout, "get", &object, api.get_opt(&cm_name))
                        .await?;
                match found {
                    Some(cm) if cluster.shard.owns(cm.metadata.labels.as_ref()) => {
                        cm.metadata.resource_version.unwrap_or_default()
                    }
                    _ => return Ok(true),
                }
            }
        };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(resource_version),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        let deleted = with_deadline(
            cluster.call_timeout,
            "delete",
            &object,
            api.delete(&cm_name, &params),
        )
        .await;
        match deleted {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(404) => Ok(true),
            // Written since: by another shard (kept), or by this one for a Kustomization of
            // the same name created again (kept, it is current).
            Err(e) if e.code() == Some(409) => {
                tracing::debug!(object = %object, error = %e, "results written since: not deleted");
                Ok(true)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Kustomizations (`(namespace, name)`, sorted) whose newest record is still `running`: a
    /// process stopped while handling them, so they are handled first after a restart.
    pub fn unfinished(&self) -> Vec<(String, String)> {
        let mut keys: Vec<_> = self
            .entries()
            .iter()
            .filter(|(_, e)| {
                e.history
                    .last
                    .as_ref()
                    .is_some_and(|r| r.state == RevisionState::Running)
            })
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// Inserts or replaces (same `revision` and `startedAt`) the record in memory only: what
    /// `/status` and the dashboard of this replica show, written to the ConfigMap with the next
    /// [`Results::put`] of this history. For what is not news (one more failed attempt,
    /// folded into the record before it as `attempts`): with a thousand sources failing, a
    /// write per attempt was most of the service's requests.
    pub fn note(&self, namespace: &str, name: &str, record: RevisionRecord) {
        let record = crate::redact::registry()
            .for_namespace(namespace)
            .redact_serde(record);
        let mut entries = self.entries();
        let entry = entries
            .entry((namespace.to_string(), name.to_string()))
            .or_default();
        let mut records = entry.history.records();
        insert(&mut records, record);
        entry.history = History::encode(&fit(records, self.inner.budget));
        entry.version = self.bump();
    }

    /// Inserts or replaces (same `revision` and `startedAt`) the record and persists the
    /// history with optimistic concurrency: on a conflict the ConfigMap is read again and the
    /// record merged into what it holds. The in-memory history shows the record even when
    /// persisting fails.
    pub async fn put(
        &self,
        namespace: &str,
        name: &str,
        record: RevisionRecord,
    ) -> Result<(), ResultsError> {
        // Every record passes here on its way to memory (`/status`, the dashboard) and to the
        // ConfigMap: no value substituted from a Secret of this namespace is kept (crate::redact).
        let record = crate::redact::registry()
            .for_namespace(namespace)
            .redact_serde(record);
        self.change(namespace, name, |records| {
            insert(records, record.clone());
            true
        })
        .await
        .map(|_| ())
    }

    /// Sets the `volumes` of StatefulSet `statefulset` (`namespace/name`) in the record of
    /// `revision` started at `started_at`, and the record's summary, as one change of what is
    /// kept (the claim follower's write: it touches nothing else of the record, whatever the
    /// run that made the record writes meanwhile). `Ok(false)`: no such record or entry, or
    /// nothing changed; nothing was written.
    pub async fn set_volumes(
        &self,
        namespace: &str,
        name: &str,
        revision: &str,
        started_at: &str,
        statefulset: (&str, &str),
        volumes: &[crate::model::Volume],
    ) -> Result<bool, ResultsError> {
        self.change(namespace, name, |records| {
            let Some(record) = records
                .iter_mut()
                .find(|r| r.revision == revision && r.started_at == started_at)
            else {
                return false;
            };
            let Some(entry) = record
                .statefulsets
                .iter_mut()
                .find(|e| e.namespace == statefulset.0 && e.name == statefulset.1)
            else {
                return false;
            };
            if entry.volumes == volumes {
                return false;
            }
            entry.volumes = volumes.to_vec();
            record.volumes = crate::model::VolumeSummary::of(&record.statefulsets);
            true
        })
        .await
    }

    /// Applies `change` to the records of `namespace/name` as kept in memory (under its lock,
    /// so no other change interleaves) and persists them with optimistic concurrency: on a
    /// conflict the ConfigMap is read again and `change` applied to what it holds. `change`
    /// says whether it changed anything; `Ok(false)` when it did not (nothing written).
    async fn change(
        &self,
        namespace: &str,
        name: &str,
        change: impl Fn(&mut Vec<RevisionRecord>) -> bool,
    ) -> Result<bool, ResultsError> {
        let key = (namespace.to_string(), name.to_string());
        let _alone = self.inner.writes.lock(&key).await;
        let budget = self.inner.budget;
        let merged = |entry: &mut Entry| {
            let mut records = entry.history.records();
            if !change(&mut records) {
                return None;
            }
            let records = fit(records, budget);
            entry.history = History::encode(&records);
            entry.version = self.bump();
            Some((entry.history.clone(), entry.resource_version.clone()))
        };
        let Some((mut history, mut version)) =
            merged(self.entries().entry(key.clone()).or_default())
        else {
            return Ok(false);
        };
        let Some(store) = &self.inner.cluster else {
            return Ok(true);
        };
        let api = store.api();
        let cm_name = results_configmap_name_of(store.kind, namespace, name);
        let object = store.object(&cm_name);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        for _ in 0..ATTEMPTS {
            let mut cm = configmap(
                store.kind,
                &store.namespace,
                namespace,
                name,
                history.json.get().to_string(),
                version.clone(),
            );
            if let Some((label, value)) = store.shard.label() {
                cm.metadata
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(label, value);
            }
            let written = match &version {
                None => {
                    with_deadline(
                        store.call_timeout,
                        "create",
                        &object,
                        api.create(&params, &cm),
                    )
                    .await
                }
                Some(_) => {
                    with_deadline(
                        store.call_timeout,
                        "replace",
                        &object,
                        api.replace(&cm_name, &params, &cm),
                    )
                    .await
                }
            };
            match written {
                Ok(cm) => {
                    // What was written is what the cluster holds now, whatever the watch
                    // applied meanwhile.
                    let mut entries = self.entries();
                    let entry = entries.entry(key).or_default();
                    if entry.history.json.get() != history.json.get() {
                        entry.history = history;
                        entry.version = self.bump();
                    }
                    if let Some(rv) = &cm.metadata.resource_version {
                        entry.pending.push(rv.clone());
                        if entry.pending.len() > PENDING {
                            entry.pending.remove(0);
                        }
                    }
                    entry.resource_version = cm.metadata.resource_version;
                    return Ok(true);
                }
                // 409: someone wrote it since we read it (or it exists already); 404: it was
                // deleted. Read it again and merge the record into what it holds now.
                Err(e) if matches!(e.code(), Some(409) | Some(404)) => {
                    tracing::debug!(object = %object, error = %e, "results conflict: merging");
                    let current =
                        with_deadline(store.call_timeout, "get", &object, api.get_opt(&cm_name))
                            .await?;
                    let mut entries = self.entries();
                    let entry = entries.entry(key.clone()).or_default();
                    *entry = match current {
                        // One that does not parse is overwritten rather than blocking every
                        // later write: the history it held is lost, which the log says.
                        Some(cm) => Entry {
                            history: match from_configmap(&cm) {
                                Ok((_, _, records)) => History::encode(&records),
                                Err(e) => {
                                    tracing::warn!(error = %e, "overwriting an unreadable results record");
                                    History::default()
                                }
                            },
                            // Set by `merged` below, which bumps it.
                            version: 0,
                            resource_version: cm.metadata.resource_version,
                            pending: std::mem::take(&mut entry.pending),
                        },
                        None => Entry {
                            history: std::mem::take(&mut entry.history),
                            version: 0,
                            resource_version: None,
                            pending: std::mem::take(&mut entry.pending),
                        },
                    };
                    match merged(entry) {
                        Some(again) => (history, version) = again,
                        // What the change was about is not in the stored records (any more).
                        None => return Ok(false),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ResultsError::Conflict {
            object,
            attempts: ATTEMPTS,
        })
    }
}

/// The index, `/status` and the dashboard read the histories through [`Records`].
impl Records for Results {
    fn last(&self, namespace: &str, name: &str) -> Option<RevisionRecord> {
        Results::last(self, namespace, name)
    }
    fn history(&self, namespace: &str, name: &str) -> Vec<RevisionRecord> {
        Results::history(self, namespace, name)
    }
    fn history_json(&self, namespace: &str, name: &str) -> Option<Arc<RawValue>> {
        Results::history_json(self, namespace, name)
    }
    fn is_loaded(&self) -> bool {
        Results::is_loaded(self)
    }
    fn generation(&self) -> Option<u64> {
        Some(Results::generation(self))
    }
    fn version(&self, namespace: &str, name: &str) -> Option<u64> {
        Results::version(self, namespace, name)
    }
    fn keys(&self) -> Vec<Key> {
        Results::keys(self)
            .into_iter()
            .map(|(namespace, name)| Key::new(Results::kind(self), namespace, name))
            .collect()
    }
    fn forget<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            Results::remove(self, namespace, name)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }
}

#[cfg(test)]
mod volume_tests;

#[cfg(test)]
mod tests;
