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

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use sha2::{Digest, Sha256};

use crate::cluster::{CallError, FIELD_MANAGER, with_deadline};
use crate::journal::RECORD_LABEL;
use crate::service::record::{RevisionRecord, RevisionState};

/// Value of [`RECORD_LABEL`] on results ConfigMaps.
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

const NAME_PREFIX: &str = "flux-converger-results";
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
    let readable = format!("{NAME_PREFIX}.{namespace}.{name}");
    if readable.len() <= MAX_NAME {
        return readable;
    }
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    format!("{NAME_PREFIX}.{}", &hex::encode(digest)[..40])
}

/// Puts `record` into `records` (newest first): replaces the record with the same revision and
/// start time, else goes in front. Keeps at most [`HISTORY`].
pub fn insert(records: &mut Vec<RevisionRecord>, record: RevisionRecord) {
    match records
        .iter()
        .position(|r| r.revision == record.revision && r.started_at == record.started_at)
    {
        Some(i) => records[i] = record,
        None => records.insert(0, record),
    }
    records.truncate(HISTORY);
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
    let name = results_configmap_name(ks_namespace, ks_name);
    let json = serde_json::to_string(records).map_err(|e| ResultsError::Corrupt {
        object: format!("ConfigMap {namespace}/{name}"),
        message: e.to_string(),
    })?;
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                RECORD_LABEL.to_string(),
                RESULTS_RECORD.to_string(),
            )])),
            resource_version,
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            ("namespace".to_string(), ks_namespace.to_string()),
            ("name".to_string(), ks_name.to_string()),
            ("records".to_string(), json),
        ])),
        ..ConfigMap::default()
    })
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
    let mut records: Vec<RevisionRecord> = serde_json::from_str(field("records")?)
        .map_err(|e| corrupt(format!("data.records: {e}")))?;
    compact(&mut records);
    Ok((namespace, name, records))
}

/// Returns the heap pages the load freed (the list's body and objects, the spare room
/// [`compact`] gave back) to the system: glibc keeps freed memory in its arenas, so without
/// this the load's peak stays resident for the life of the process.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; it takes no pointer from us.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Gives back what deserialising left spare: serde grows each `Vec` by doubling from 4, so a
/// history of 20 holds room for 32 records and each record's one StatefulSet room for four
/// (~1.3 kB each). Kept for every handled Kustomization for as long as the process runs, that
/// spare room was a third of serve's memory with 1,000 × 20 records (`benches/service.rs`).
fn compact(records: &mut Vec<RevisionRecord>) {
    records.shrink_to_fit();
    for record in records.iter_mut() {
        record.statefulsets.shrink_to_fit();
        record.warnings.shrink_to_fit();
        for set in &mut record.statefulsets {
            set.templates.shrink_to_fit();
            set.changes.shrink_to_fit();
            set.claims.shrink_to_fit();
            set.deferred.shrink_to_fit();
        }
    }
}

#[derive(Clone, Default)]
struct Entry {
    records: Vec<RevisionRecord>,
    /// The [`Results::generation`] of its last change.
    version: u64,
    /// Of the ConfigMap last read or written; `None` until one exists.
    resource_version: Option<String>,
}

struct Store {
    client: kube::Client,
    namespace: String,
    call_timeout: Duration,
}

struct Inner {
    store: Option<Store>,
    entries: Mutex<HashMap<(String, String), Entry>>,
    loaded: AtomicBool,
    budget: usize,
    /// Bumped by every change of any history (what `/status` caches against).
    generation: AtomicU64,
}

/// The revision history of every handled Kustomization. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct Results {
    inner: Arc<Inner>,
}

impl Results {
    /// Persisted in ConfigMaps in `namespace`, written with `client`'s own identity.
    pub fn new(client: kube::Client, namespace: String, call_timeout: Duration) -> Self {
        Self::build(
            Some(Store {
                client,
                namespace,
                call_timeout,
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
            Some(Store {
                client,
                namespace,
                call_timeout,
            }),
            budget,
            false,
        )
    }

    fn build(store: Option<Store>, budget: usize, loaded: bool) -> Self {
        Results {
            inner: Arc::new(Inner {
                store,
                entries: Mutex::new(HashMap::new()),
                loaded: AtomicBool::new(loaded),
                budget,
                generation: AtomicU64::new(0),
            }),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<(String, String), Entry>> {
        // The map stays consistent even if a holder panicked: keep using it.
        self.inner.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads every results ConfigMap. An unreadable one is logged and skipped (its
    /// Kustomization starts a new history), so one bad record cannot keep the service unready.
    pub async fn load(&self) -> Result<(), ResultsError> {
        let Some(store) = &self.inner.store else {
            return Ok(());
        };
        let api: Api<ConfigMap> = Api::namespaced(store.client.clone(), &store.namespace);
        let params = ListParams::default().labels(&format!("{RECORD_LABEL}={RESULTS_RECORD}"));
        let list = with_deadline(
            store.call_timeout,
            "list",
            &format!("results ConfigMaps of namespace {}", store.namespace),
            api.list(&params),
        )
        .await?;
        let mut read = HashMap::new();
        let version = self.bump();
        for cm in &list.items {
            match from_configmap(cm) {
                Ok((namespace, name, records)) => {
                    read.insert(
                        (namespace, name),
                        Entry {
                            records,
                            version,
                            resource_version: cm.metadata.resource_version.clone(),
                        },
                    );
                }
                Err(e) => tracing::warn!(error = %e, "skipping an unreadable results record"),
            }
        }
        *self.entries() = read;
        drop(list);
        release_free_memory();
        // After the swap as well: a reader that saw the first bump with the old entries must
        // not keep what it built from them.
        self.bump();
        self.inner.loaded.store(true, Ordering::SeqCst);
        Ok(())
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
        self.entries()
            .get(&(namespace.to_string(), name.to_string()))
            .map(|e| e.records.clone())
            .unwrap_or_default()
    }

    pub fn last(&self, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.entries()
            .get(&(namespace.to_string(), name.to_string()))
            .and_then(|e| e.records.first().cloned())
    }

    /// Every Kustomization with records (`(namespace, name)`, sorted).
    pub fn keys(&self) -> Vec<(String, String)> {
        let mut keys: Vec<_> = self.entries().keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Forgets the history of a Kustomization that is gone: from memory (so `/status` drops it)
    /// and its ConfigMap (already gone is fine). Returns whether there was one; a Kustomization
    /// without records costs no request.
    pub async fn remove(&self, namespace: &str, name: &str) -> Result<bool, ResultsError> {
        let removed = {
            let mut entries = self.entries();
            let removed = entries
                .remove(&(namespace.to_string(), name.to_string()))
                .is_some();
            if removed {
                self.bump();
            }
            removed
        };
        let Some(store) = self.inner.store.as_ref().filter(|_| removed) else {
            return Ok(removed);
        };
        let api: Api<ConfigMap> = Api::namespaced(store.client.clone(), &store.namespace);
        let cm_name = results_configmap_name(namespace, name);
        let object = format!("ConfigMap {}/{cm_name}", store.namespace);
        let deleted = with_deadline(
            store.call_timeout,
            "delete",
            &object,
            api.delete(&cm_name, &DeleteParams::default()),
        )
        .await;
        match deleted {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(404) => Ok(true),
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
                e.records
                    .first()
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
        let key = (namespace.to_string(), name.to_string());
        let budget = self.inner.budget;
        let merged = |entry: &mut Entry| {
            let mut records = std::mem::take(&mut entry.records);
            insert(&mut records, record.clone());
            entry.records = fit(records, budget);
            entry.version = self.bump();
            (entry.records.clone(), entry.resource_version.clone())
        };
        let (mut records, mut version) = merged(self.entries().entry(key.clone()).or_default());
        let Some(store) = &self.inner.store else {
            return Ok(());
        };
        let api: Api<ConfigMap> = Api::namespaced(store.client.clone(), &store.namespace);
        let cm_name = results_configmap_name(namespace, name);
        let object = format!("ConfigMap {}/{cm_name}", store.namespace);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        for _ in 0..ATTEMPTS {
            let cm = to_configmap(&store.namespace, namespace, name, &records, version.clone())?;
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
                    let mut entries = self.entries();
                    let entry = entries.entry(key).or_default();
                    entry.resource_version = cm.metadata.resource_version;
                    return Ok(());
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
                            records: match from_configmap(&cm) {
                                Ok((_, _, records)) => records,
                                Err(e) => {
                                    tracing::warn!(error = %e, "overwriting an unreadable results record");
                                    Vec::new()
                                }
                            },
                            // Set by `merged` below, which bumps it.
                            version: 0,
                            resource_version: cm.metadata.resource_version,
                        },
                        None => Entry {
                            records: std::mem::take(&mut entry.records),
                            version: 0,
                            resource_version: None,
                        },
                    };
                    (records, version) = merged(entry);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::record::{StatefulSetEntry, StatefulSetOutcome, StepError, Trigger};

    fn record(revision: &str, started: &str) -> RevisionRecord {
        RevisionRecord {
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

    /// A loaded history keeps no spare room: it is held for the life of the process.
    #[test]
    fn loaded_histories_hold_no_spare_room() {
        let records: Vec<RevisionRecord> = (0..20)
            .map(|i| RevisionRecord {
                statefulsets: vec![StatefulSetEntry {
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
        assert_eq!(loaded, records);
        assert_eq!(loaded.capacity(), loaded.len());
        for record in &loaded {
            assert_eq!(record.statefulsets.capacity(), record.statefulsets.len());
        }
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
        assert!(hashed.len() <= MAX_NAME && hashed.starts_with(NAME_PREFIX));
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
}
