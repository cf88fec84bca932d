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
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::cluster::{CallError, FIELD_MANAGER, with_deadline};
use crate::journal::RECORD_LABEL;
pub use crate::journal::Shard;
use crate::model::{Key, Kind, RevisionRecord, RevisionState};
use crate::records::Records;

/// Value of [`RECORD_LABEL`] on a Kustomization's results ConfigMaps (each kind has its own,
/// [`crate::model::KindSpec::record`], so objects of two kinds that share a name keep separate
/// histories).
pub const RESULTS_RECORD: &str = "results";
/// Revisions kept per Kustomization.
pub const HISTORY: usize = 20;
/// Bytes of record JSON one ConfigMap may carry: the API server's limit is 1 MiB for the whole
/// object, and the metadata (labels, managedFields) needs room too.
pub const BUDGET: usize = 900 * 1024;
/// A text field is first cut to this many bytes; [`fit`] cuts further when that is not enough.
pub const FIRST_CAP: usize = 8 * 1024;
/// Below this, [`fit`] drops old records instead of cutting messages further.
const LAST_CAP: usize = 512;

/// The record label's value and the ConfigMap name prefix of one kind's results.
fn scope(kind: Kind) -> (&'static str, &'static str) {
    (kind.spec().record, kind.spec().record_prefix)
}
const MAX_NAME: usize = 253;
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

impl From<CallError> for ResultsError {
    fn from(e: CallError) -> Self {
        ResultsError::Call(e)
    }
}

/// The ConfigMap name of the results of Kustomization `namespace/name`; names too long for
/// the readable form fall back to a digest (a namespace has no dots, so no collisions).
pub fn results_configmap_name(namespace: &str, name: &str) -> String {
    results_configmap_name_of(Kind::KUSTOMIZATION, namespace, name)
}

/// [`results_configmap_name`] of a gated object of any kind.
pub fn results_configmap_name_of(kind: Kind, namespace: &str, name: &str) -> String {
    let prefix = scope(kind).1;
    let readable = format!("{prefix}.{namespace}.{name}");
    if readable.len() <= MAX_NAME {
        return readable;
    }
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    format!("{prefix}.{}", &hex::encode(digest)[..40])
}

/// Puts `record` into `records` (newest first): replaces the record with the same revision and
/// start time (keeping the larger attempt count), else goes in front. Then a failed record
/// right behind a failed record of the same revision and generation ([`is_repeat`]) is folded
/// into it: one record whose `attempts` adds both, with the newer error and times. Keeps at
/// most [`HISTORY`].
///
/// Why fold: a Kustomization failing on every retry (an unreachable artifact) would otherwise
/// push its whole history out with identical records, one per backoff.
pub fn insert(records: &mut Vec<RevisionRecord>, mut record: RevisionRecord) {
    let at = match records
        .iter()
        .position(|r| r.revision == record.revision && r.started_at == record.started_at)
    {
        Some(i) => {
            record.attempts = record.attempts.max(records[i].attempts);
            keep_newer_volumes(&mut record, &records[i]);
            records[i] = record;
            i
        }
        None => {
            record.volumes = crate::model::VolumeSummary::of(&record.statefulsets);
            records.insert(0, record);
            0
        }
    };
    if records
        .get(at + 1)
        .is_some_and(|older| is_repeat(&records[at], older))
    {
        let older = records.remove(at + 1);
        records[at].attempts = records[at].attempts.saturating_add(older.attempts);
    }
    records.truncate(HISTORY);
}

/// The record's volumes after a write of it: per claim, the newer of what `record` says and
/// what `stored` (the same record as kept) says, by `since`. Two writers keep the record: the
/// run that made it (the hand-off, Flux's answer, a re-check) and the claim follower (each
/// claim's state change); whichever writes a copy it read before the other's write does not
/// take the other's news back. Then the revision's summary is recomputed from them.
fn keep_newer_volumes(record: &mut RevisionRecord, stored: &RevisionRecord) {
    let since = |v: &crate::model::Volume| v.since.parse::<jiff::Timestamp>().ok();
    for entry in &mut record.statefulsets {
        let Some(kept) = stored
            .statefulsets
            .iter()
            .find(|e| e.namespace == entry.namespace && e.name == entry.name)
        else {
            continue;
        };
        for volume in &mut entry.volumes {
            if let Some(old) = kept.volumes.iter().find(|v| v.claim == volume.claim)
                && since(old) > since(volume)
            {
                *volume = old.clone();
            }
        }
    }
    record.volumes = crate::model::VolumeSummary::of(&record.statefulsets);
}

/// Whether `newer` is one more failed attempt at what `older` failed: both failed, on the same
/// revision at the same generation (a new spec is a new attempt at something else).
pub fn is_repeat(newer: &RevisionRecord, older: &RevisionRecord) -> bool {
    newer.state == RevisionState::Failed
        && older.state == RevisionState::Failed
        && newer.revision == older.revision
        && newer.generation == older.generation
}

/// Cuts `text` to at most `max` bytes (on a character boundary), saying how much was cut.
pub fn truncate_text(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let cut = text.len();
    let mut end = max.saturating_sub(40).min(text.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("… [truncated, {cut} bytes]"));
}

/// Every free-text field of a record, cut to `max` bytes.
fn cap_record(record: &mut RevisionRecord, max: usize) {
    let cap = |t: &mut String| truncate_text(t, max);
    for w in &mut record.warnings {
        cap(w);
    }
    if let Some(e) = &mut record.error {
        cap(&mut e.message);
        if let Some(h) = &mut e.hint {
            cap(h);
        }
    }
    if let Some(f) = &mut record.flux
        && let Some(m) = &mut f.message
    {
        cap(m);
    }
    for s in &mut record.statefulsets {
        if let Some(r) = &mut s.refusal {
            cap(&mut r.message);
        }
        if let Some(e) = &mut s.error {
            cap(&mut e.message);
            if let Some(h) = &mut e.hint {
                cap(h);
            }
        }
        for d in &mut s.deferred {
            cap(&mut d.reason);
        }
    }
}

fn size(records: &[RevisionRecord]) -> usize {
    serde_json::to_vec(records)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}

/// Makes `records` (newest first) fit in `budget` bytes of JSON: every text field cut to
/// [`FIRST_CAP`], then cut further (down to a floor), then the oldest records dropped, and as a
/// last resort the newest record's StatefulSet entries cut (saying so in its warnings).
pub fn fit(mut records: Vec<RevisionRecord>, budget: usize) -> Vec<RevisionRecord> {
    records.truncate(HISTORY);
    let mut max = FIRST_CAP;
    loop {
        for r in &mut records {
            cap_record(r, max);
        }
        if size(&records) <= budget || max <= LAST_CAP {
            break;
        }
        max /= 2;
    }
    while records.len() > 1 && size(&records) > budget {
        records.pop();
    }
    if let Some(newest) = records.first_mut() {
        let total = newest.statefulsets.len();
        while size(std::slice::from_ref(newest)) > budget && !newest.statefulsets.is_empty() {
            newest.statefulsets.truncate(newest.statefulsets.len() / 2);
        }
        if newest.statefulsets.len() < total {
            newest.warnings.push(format!(
                "{} of {total} StatefulSet entries left out so the record fits in its ConfigMap",
                total - newest.statefulsets.len()
            ));
        }
    }
    records
}

/// The ConfigMap (in `namespace`) holding the records of Kustomization `ks_namespace/ks_name`.
pub fn to_configmap(
    namespace: &str,
    ks_namespace: &str,
    ks_name: &str,
    records: &[RevisionRecord],
    resource_version: Option<String>,
) -> Result<ConfigMap, ResultsError> {
    let json = serde_json::to_string(records).map_err(|e| ResultsError::Corrupt {
        object: format!(
            "ConfigMap {namespace}/{}",
            results_configmap_name(ks_namespace, ks_name)
        ),
        message: e.to_string(),
    })?;
    Ok(configmap(
        Kind::KUSTOMIZATION,
        namespace,
        ks_namespace,
        ks_name,
        json,
        resource_version,
    ))
}

/// [`to_configmap`] of records already encoded.
fn configmap(
    kind: Kind,
    namespace: &str,
    ks_namespace: &str,
    ks_name: &str,
    records_json: String,
    resource_version: Option<String>,
) -> ConfigMap {
    let name = results_configmap_name_of(kind, ks_namespace, ks_name);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                RECORD_LABEL.to_string(),
                scope(kind).0.to_string(),
            )])),
            resource_version,
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            ("namespace".to_string(), ks_namespace.to_string()),
            ("name".to_string(), ks_name.to_string()),
            ("records".to_string(), records_json),
        ])),
        ..ConfigMap::default()
    }
}

/// `(namespace, name, records)` of a results ConfigMap.
pub fn from_configmap(
    cm: &ConfigMap,
) -> Result<(String, String, Vec<RevisionRecord>), ResultsError> {
    let object = format!(
        "ConfigMap {}/{}",
        cm.metadata.namespace.as_deref().unwrap_or_default(),
        cm.metadata.name.as_deref().unwrap_or_default()
    );
    let corrupt = |message: String| ResultsError::Corrupt {
        object: object.clone(),
        message,
    };
    let data = cm.data.as_ref().ok_or_else(|| corrupt("no data".into()))?;
    let field = |key: &str| {
        data.get(key)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| corrupt(format!("data.{key} is missing")))
    };
    let namespace = field("namespace")?.clone();
    let name = field("name")?.clone();
    let records: Vec<RevisionRecord> = serde_json::from_str(field("records")?)
        .map_err(|e| corrupt(format!("data.records: {e}")))?;
    Ok((namespace, name, records))
}

/// Returns the heap pages the load freed (the list's pages and objects, the records parsed to
/// be encoded) to the system: glibc keeps freed memory in its arenas, so without
/// this the load's peak stays resident for the life of the process.
fn release_free_memory() {
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
mod tests {
    use super::*;
    use crate::model::{StatefulSetEntry, StatefulSetOutcome, StepError, Trigger};

    fn record(revision: &str, started: &str) -> RevisionRecord {
        RevisionRecord {
            volumes: Default::default(),
            revision: revision.into(),
            digest: None,
            trigger: Trigger::Webhook,
            started_at: started.into(),
            finished_at: None,
            state: RevisionState::Running,
            statefulsets: Vec::new(),
            handoff: None,
            flux: None,
            warnings: Vec::new(),
            error: None,
            generation: None,
            gate: None,
            attempts: 1,
        }
    }

    #[test]
    fn insert_replaces_same_run_and_keeps_newest_first() {
        let mut records = Vec::new();
        for i in 0..25 {
            insert(&mut records, record(&format!("r{i}"), &format!("t{i}")));
        }
        assert_eq!(records.len(), HISTORY);
        assert_eq!(records[0].revision, "r24");
        assert_eq!(records[HISTORY - 1].revision, "r5");
        let mut done = record("r24", "t24");
        done.state = RevisionState::Converged;
        insert(&mut records, done);
        assert_eq!(records.len(), HISTORY);
        assert_eq!(records[0].state, RevisionState::Converged);
        // Same revision, another run: a new record.
        insert(&mut records, record("r24", "t25"));
        assert_eq!(records[0].started_at, "t25");
        assert_eq!(records[1].started_at, "t24");
    }

    fn failed(revision: &str, started: &str, generation: i64, error: &str) -> RevisionRecord {
        let mut r = record(revision, started);
        r.state = RevisionState::Failed;
        r.generation = Some(generation);
        r.error = Some(StepError::new("resolve", error));
        r
    }

    fn running(revision: &str, started: &str, generation: i64) -> RevisionRecord {
        let mut r = record(revision, started);
        r.generation = Some(generation);
        r
    }

    #[test]
    fn failed_attempts_of_one_revision_fold_into_one_record_by_table() {
        // (case, records put in order, expected (revision, started, state, attempts, error))
        type Want = (
            &'static str,
            &'static str,
            RevisionState,
            u32,
            Option<&'static str>,
        );
        let f = RevisionState::Failed;
        let cases: Vec<(&str, Vec<RevisionRecord>, Vec<Want>)> = vec![
            (
                "a run writes running, then failed; the next attempt folds into it",
                vec![
                    running("r1", "t1", 1),
                    failed("r1", "t1", 1, "e1"),
                    running("r1", "t2", 1),
                    failed("r1", "t2", 1, "e2"),
                    running("r1", "t3", 1),
                    failed("r1", "t3", 1, "e3"),
                ],
                vec![("r1", "t3", f, 3, Some("e3"))],
            ),
            (
                "a failure before the running record (resolve) folds too",
                vec![failed("r1", "t1", 1, "e1"), failed("r1", "t2", 1, "e2")],
                vec![("r1", "t2", f, 2, Some("e2"))],
            ),
            (
                "while the next attempt runs, the folded record stays behind it",
                vec![
                    failed("r1", "t1", 1, "e1"),
                    failed("r1", "t2", 1, "e2"),
                    running("r1", "t3", 1),
                ],
                vec![
                    ("r1", "t3", RevisionState::Running, 1, None),
                    ("r1", "t2", f, 2, Some("e2")),
                ],
            ),
            (
                "the final record written twice keeps its count",
                vec![
                    failed("r1", "t1", 1, "e1"),
                    failed("r1", "t2", 1, "e2"),
                    failed("r1", "t2", 1, "e2"),
                ],
                vec![("r1", "t2", f, 2, Some("e2"))],
            ),
            (
                "another revision is another record",
                vec![failed("r1", "t1", 1, "e1"), failed("r2", "t2", 1, "e2")],
                vec![
                    ("r2", "t2", f, 1, Some("e2")),
                    ("r1", "t1", f, 1, Some("e1")),
                ],
            ),
            (
                "a new generation is another record",
                vec![failed("r1", "t1", 1, "e1"), failed("r1", "t2", 2, "e2")],
                vec![
                    ("r1", "t2", f, 1, Some("e2")),
                    ("r1", "t1", f, 1, Some("e1")),
                ],
            ),
            (
                "a success between failures ends the run of failures",
                vec![
                    failed("r1", "t1", 1, "e1"),
                    {
                        let mut r = running("r1", "t2", 1);
                        r.state = RevisionState::Converged;
                        r
                    },
                    failed("r1", "t3", 1, "e3"),
                ],
                vec![
                    ("r1", "t3", f, 1, Some("e3")),
                    ("r1", "t2", RevisionState::Converged, 1, None),
                    ("r1", "t1", f, 1, Some("e1")),
                ],
            ),
        ];
        for (case, puts, want) in cases {
            let mut records = Vec::new();
            for r in puts {
                insert(&mut records, r);
            }
            let got: Vec<(&str, &str, RevisionState, u32, Option<&str>)> = records
                .iter()
                .map(|r| {
                    let error = r.error.as_ref().map(|e| e.message.as_str());
                    (
                        r.revision.as_str(),
                        r.started_at.as_str(),
                        r.state,
                        r.attempts,
                        error,
                    )
                })
                .collect();
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn attempts_is_absent_from_the_json_unless_repeated() {
        let mut r = failed("r1", "t1", 1, "e1");
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("attempts").is_none(), "{json}");
        let back: RevisionRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back.attempts, 1);
        r.attempts = 4;
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["attempts"], 4);
    }

    #[test]
    fn truncate_text_by_table() {
        for (text, max, expected) in [
            ("short", 100, "short".to_string()),
            ("", 0, String::new()),
            (
                &"x".repeat(100) as &str,
                50,
                format!("{}… [truncated, 100 bytes]", "x".repeat(10)),
            ),
            // Never splits a character: 'é' is two bytes.
            (
                &"é".repeat(30) as &str,
                45,
                format!("{}… [truncated, 60 bytes]", "é".repeat(2)),
            ),
        ] {
            let mut t = text.to_string();
            truncate_text(&mut t, max);
            assert_eq!(t, expected, "{text:?} {max}");
        }
    }

    fn big_record(revision: &str, message_len: usize, statefulsets: usize) -> RevisionRecord {
        let mut r = record(revision, revision);
        r.error = Some(StepError {
            step: "resolve".into(),
            message: "m".repeat(message_len),
            hint: Some("h".repeat(message_len)),
        });
        r.statefulsets = (0..statefulsets)
            .map(|i| StatefulSetEntry {
                volumes: Default::default(),
                namespace: "ns".into(),
                name: format!("sts-{i}"),
                outcome: StatefulSetOutcome::Failed,
                old_uid: None,
                new_uid: None,
                templates: Vec::new(),
                changes: Vec::new(),
                claims: Vec::new(),
                deferred: Vec::new(),
                refusal: None,
                error: Some(StepError {
                    step: "grow".into(),
                    message: "e".repeat(message_len),
                    hint: None,
                }),
            })
            .collect();
        r
    }

    #[test]
    fn fit_by_table() {
        // (records, budget, expected count, newest's error message at most this long, sts kept)
        type Case = (Vec<RevisionRecord>, usize, usize, usize, Option<usize>);
        let cases: Vec<Case> = vec![
            // Small records: untouched.
            (vec![record("a", "1"), record("b", "0")], BUDGET, 2, 0, None),
            // A 1 MB message is cut to the first cap, and then fits.
            (
                vec![big_record("a", 1 << 20, 0)],
                BUDGET,
                1,
                FIRST_CAP,
                None,
            ),
            // Many big records: messages cut further before history is dropped.
            (
                (0..20)
                    .map(|i| big_record(&format!("r{i}"), 100_000, 3))
                    .collect(),
                BUDGET,
                20,
                FIRST_CAP,
                Some(3),
            ),
            // A tiny budget: only the newest stays.
            (
                (0..5)
                    .map(|i| big_record(&format!("r{i}"), 10_000, 0))
                    .collect(),
                2_000,
                1,
                LAST_CAP,
                None,
            ),
            // Even one record is too big with all its StatefulSets: entries are cut.
            (
                vec![big_record("a", 10_000, 2_000)],
                50_000,
                1,
                LAST_CAP,
                Some(0),
            ),
        ];
        for (i, (records, budget, count, max_message, sts)) in cases.into_iter().enumerate() {
            let fitted = fit(records, budget);
            assert_eq!(fitted.len(), count, "case {i}");
            assert!(
                size(&fitted) <= budget,
                "case {i}: {} > {budget}",
                size(&fitted)
            );
            if let Some(e) = &fitted[0].error {
                assert!(
                    e.message.len() <= max_message,
                    "case {i}: {}",
                    e.message.len()
                );
                assert!(e.message.contains("truncated"), "case {i}");
            }
            if let Some(kept) = sts {
                let got = fitted[0].statefulsets.len();
                if kept == 0 {
                    assert!(got < 2_000, "case {i}");
                    assert!(
                        fitted[0].warnings.iter().any(|w| w.contains("left out")),
                        "case {i}"
                    );
                } else {
                    assert_eq!(got, kept, "case {i}");
                }
            }
        }
    }

    /// A loaded history is kept as the bytes its ConfigMap holds, and answers the same records;
    /// its one parsed record keeps no spare room (held for the life of the process).
    #[test]
    fn kept_histories_answer_what_was_loaded() {
        let records: Vec<RevisionRecord> = (0..20)
            .map(|i| RevisionRecord {
                statefulsets: vec![StatefulSetEntry {
                    volumes: Default::default(),
                    namespace: "apps".into(),
                    name: format!("db-{i}"),
                    outcome: StatefulSetOutcome::Converged,
                    old_uid: None,
                    new_uid: None,
                    templates: Vec::new(),
                    changes: Vec::new(),
                    claims: Vec::new(),
                    deferred: Vec::new(),
                    refusal: None,
                    error: None,
                }],
                ..record(&format!("main@sha1:{i}"), "t")
            })
            .collect();
        let cm = to_configmap("flux-system", "apps", "web", &records, None).unwrap();
        let (_, _, loaded) = from_configmap(&cm).unwrap();
        let kept = History::encode(&loaded);
        assert_eq!(kept.records(), records);
        assert_eq!(kept.json.get(), cm.data.as_ref().unwrap()["records"]);
        let last = kept.last.expect("the newest record is kept parsed");
        assert_eq!(last, records[0]);
        // The one parsed record holds no spare room (a clone, not serde's grown Vec).
        assert_eq!(last.statefulsets.capacity(), last.statefulsets.len());
    }

    #[test]
    fn configmap_round_trip_and_names() {
        let records = vec![record("main@sha1:1", "t1"), record("main@sha1:0", "t0")];
        let cm = to_configmap("flux-system", "apps", "web", &records, Some("7".into())).unwrap();
        assert_eq!(
            cm.metadata.name.as_deref(),
            Some("flux-converger-results.apps.web")
        );
        assert_eq!(
            cm.metadata.labels.as_ref().unwrap()[RECORD_LABEL],
            RESULTS_RECORD
        );
        let (ns, name, back) = from_configmap(&cm).unwrap();
        assert_eq!((ns.as_str(), name.as_str()), ("apps", "web"));
        assert_eq!(back, records);
        let long = "n".repeat(250);
        let hashed = results_configmap_name("apps", &long);
        assert!(
            hashed.len() <= MAX_NAME
                && hashed.starts_with(Kind::KUSTOMIZATION.spec().record_prefix)
        );
        assert_ne!(hashed, results_configmap_name("apps2", &long));
        let mut broken = cm.clone();
        broken
            .data
            .as_mut()
            .unwrap()
            .insert("records".into(), "{".into());
        let e = from_configmap(&broken).unwrap_err().to_string();
        assert!(
            e.contains("flux-converger-results.apps.web") && e.contains("data.records"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn memory_results_keep_history_and_unfinished() {
        let results = Results::memory();
        assert!(results.is_loaded());
        results.put("a", "x", record("r1", "t1")).await.unwrap();
        let mut done = record("r0", "t0");
        done.state = RevisionState::Converged;
        results.put("a", "y", done).await.unwrap();
        assert_eq!(results.unfinished(), [("a".to_string(), "x".to_string())]);
        assert_eq!(results.last("a", "y").unwrap().revision, "r0");
        assert!(results.history("b", "z").is_empty());
    }

    /// Which records a replica reads: its shard's by label, or (unsharded) the unlabelled ones
    /// every earlier version wrote.
    #[test]
    fn shard_selection_by_table() {
        use crate::journal::SHARD_LABEL;
        let a = Shard::Named("flux-converger-3d8dfb26".into());
        let b = Shard::Named("flux-converger-51051576".into());
        let labels = |shard: Option<&str>| {
            let mut l = BTreeMap::from([(RECORD_LABEL.to_string(), RESULTS_RECORD.to_string())]);
            if let Some(shard) = shard {
                l.insert(SHARD_LABEL.to_string(), shard.to_string());
            }
            l
        };
        let cases: &[(&Shard, Option<&str>, bool)] = &[
            (&Shard::Unsharded, None, true),
            (&Shard::Unsharded, Some("flux-converger-3d8dfb26"), false),
            (&a, None, false),
            (&a, Some("flux-converger-3d8dfb26"), true),
            (&a, Some("flux-converger-51051576"), false),
            (&b, Some("flux-converger-51051576"), true),
        ];
        for (shard, label, owns) in cases {
            assert_eq!(
                shard.owns(Some(&labels(*label))),
                *owns,
                "{shard:?} {label:?}"
            );
        }
        assert!(Shard::Unsharded.owns(None));
        assert!(!a.owns(None));
        assert_eq!(
            Shard::Unsharded.selector(RESULTS_RECORD),
            "flux-converger.io/record=results,!flux-converger.io/shard"
        );
        assert_eq!(
            a.selector(RESULTS_RECORD),
            "flux-converger.io/record=results,flux-converger.io/shard=flux-converger-3d8dfb26"
        );
        assert_eq!(Shard::Unsharded.label(), None);
        assert_eq!(
            a.label(),
            Some((
                SHARD_LABEL.to_string(),
                "flux-converger-3d8dfb26".to_string()
            ))
        );
    }

    fn cm(name: &str, revisions: &[&str], rv: &str) -> ConfigMap {
        let records: Vec<_> = revisions.iter().map(|r| record(r, r)).collect();
        to_configmap("flux-system", "apps", name, &records, Some(rv.into())).unwrap()
    }

    fn revisions(results: &Results, name: &str) -> Vec<String> {
        results
            .history("apps", name)
            .into_iter()
            .map(|r| r.revision)
            .collect()
    }

    /// Notes a write of this process (what `put` does once the server took it).
    fn wrote(results: &Results, name: &str, revisions: &[&str], rv: &str) {
        let mut entries = results.entries();
        let entry = entries
            .entry(("apps".to_string(), name.to_string()))
            .or_default();
        let records: Vec<_> = revisions.iter().map(|r| record(r, r)).collect();
        entry.history = History::encode(&records);
        entry.resource_version = Some(rv.into());
        entry.pending.push(rv.into());
    }

    /// What the watch's events do to the histories, in the order the server sends them: the
    /// leader's own echoes never put an older history back, another writer's changes are
    /// taken, deletes forget, a relist replaces.
    #[test]
    fn watch_events_by_table() {
        enum Step {
            /// A write of ours the server answered with this resourceVersion.
            Wrote(&'static [&'static str], &'static str),
            Apply(&'static [&'static str], &'static str),
            Delete,
            Relist(&'static [(&'static [&'static str], &'static str)]),
        }
        use Step::*;
        /// (what, the events in order, the history after them: `None` when forgotten)
        type Case<'a> = (&'a str, &'a [Step], Option<&'a [&'a str]>);
        let cases: &[Case] = &[
            (
                "another writer's record is taken",
                &[Apply(&["r1"], "5")],
                Some(&["r1"]),
            ),
            (
                "a newer one replaces it",
                &[Apply(&["r1"], "5"), Apply(&["r2", "r1"], "6")],
                Some(&["r2", "r1"]),
            ),
            (
                "our echo after a newer write of ours keeps the newer",
                &[
                    Wrote(&["running"], "5"),
                    Wrote(&["converged"], "6"),
                    Apply(&["running"], "5"),
                ],
                Some(&["converged"]),
            ),
            (
                "a write older than our unechoed one is not applied",
                &[Wrote(&["mine"], "7"), Apply(&["theirs"], "6")],
                Some(&["mine"]),
            ),
            (
                "once every write of ours is echoed, others' are taken again",
                &[
                    Wrote(&["mine"], "7"),
                    Apply(&["mine"], "7"),
                    Apply(&["theirs", "mine"], "8"),
                ],
                Some(&["theirs", "mine"]),
            ),
            ("a delete forgets", &[Apply(&["r1"], "5"), Delete], None),
            (
                "a delete older than our unechoed write is not applied",
                &[Apply(&["r1"], "5"), Wrote(&["r2"], "9"), Delete],
                Some(&["r2"]),
            ),
            (
                "a relist replaces",
                &[Apply(&["r1"], "5"), Relist(&[(&["r3"], "11")])],
                Some(&["r3"]),
            ),
            (
                "a relist without it forgets it",
                &[Apply(&["r1"], "5"), Relist(&[])],
                None,
            ),
            (
                "a relist holding our own write keeps ours",
                &[Wrote(&["mine"], "7"), Relist(&[(&["mine"], "7")])],
                Some(&["mine"]),
            ),
        ];
        for (what, steps, want) in cases {
            let results = Results::memory();
            for step in *steps {
                match step {
                    Wrote(revs, rv) => wrote(&results, "web", revs, rv),
                    Apply(revs, rv) => results.apply(&cm("web", revs, rv)),
                    Delete => results.deleted(&cm("web", &[], "0")),
                    Relist(items) => {
                        let mut listed = Listed::default();
                        for (revs, rv) in items.iter() {
                            listed.add(&Shard::Unsharded, &cm("web", revs, rv));
                        }
                        results.replace_all(listed)
                    }
                }
            }
            let got = revisions(&results, "web");
            match want {
                Some(want) => assert_eq!(got, *want, "{what}"),
                None => assert!(
                    !results.keys().contains(&("apps".into(), "web".into())),
                    "{what}: {got:?}"
                ),
            }
        }
    }

    /// An event changes the generation (so `/status` re-encodes), an echo of ours does not.
    #[test]
    fn only_a_change_moves_the_generation() {
        let results = Results::memory();
        wrote(&results, "web", &["r1"], "5");
        let before = results.generation();
        results.apply(&cm("web", &["r1"], "5"));
        assert_eq!(results.generation(), before, "our own echo");
        results.apply(&cm("web", &["r2", "r1"], "6"));
        assert!(results.generation() > before, "another writer's change");
    }
}
