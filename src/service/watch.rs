//! The watches that keep the index current, and the resync that makes the service
//! level-triggered: a lost webhook, a restart or a missed event loses nothing, because what is
//! due is recomputed from the index (cluster state) and the last finished records.
//!
//! Kustomizations are watched with the server-side label selector of `--watch-label-selector`
//! (Flux's sharding); the four source kinds are watched whole, since only their revision is
//! kept. A watch is ready only on its first `InitDone` (the full list), never on its first
//! event. A source kind whose CRD is missing (ExternalArtifact before Flux 2.7) counts as
//! synced and empty, and its watch keeps retrying in case the CRD is installed later.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::flux::objects::{Kustomization, SourceKind};
use crate::http::backend::NotReady;
use crate::model::Key;
use crate::model::Trigger;
use crate::records::Records;
use crate::records::metrics::Metrics;
use crate::service::gate::observe::Observer;
use crate::service::index::{Due, Index, SourceKey};
use crate::service::queue::Queue;

/// The source kinds Flux renders from, in the order readiness reports them.
pub const SOURCE_KINDS: [SourceKind; 4] = [
    SourceKind::GitRepository,
    SourceKind::OCIRepository,
    SourceKind::Bucket,
    SourceKind::ExternalArtifact,
];

/// Whether each watch has listed everything once, and what the access check found.
#[derive(Clone, Default)]
pub struct Readiness {
    inner: Arc<ReadinessFlags>,
}

#[derive(Default)]
struct ReadinessFlags {
    kustomizations: AtomicBool,
    sources: [AtomicBool; 4],
    /// The access check's last answer (`service::access`); `None` until it has answered for
    /// every permission. One lock for both halves, so no reader pairs an old list with a new
    /// `final_answer`.
    access: RwLock<Option<AccessAnswer>>,
}

struct AccessAnswer {
    missing: Vec<String>,
    /// Asked with every watch synced: before, a Kustomization not yet listed may name a
    /// service account, and so need `impersonate` nobody has asked about.
    final_answer: bool,
}

fn slot(kind: SourceKind) -> usize {
    match kind {
        SourceKind::GitRepository => 0,
        SourceKind::OCIRepository => 1,
        SourceKind::Bucket => 2,
        SourceKind::ExternalArtifact => 3,
    }
}

impl Readiness {
    pub fn mark_kustomizations(&self) {
        self.inner.kustomizations.store(true, Ordering::Release);
    }

    pub fn mark_source(&self, kind: SourceKind) {
        self.inner.sources[slot(kind)].store(true, Ordering::Release);
    }

    /// The watches not synced yet, by resource name; empty once every cache is synced.
    pub fn unsynced(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if !self.inner.kustomizations.load(Ordering::Acquire) {
            missing.push("kustomizations");
        }
        for kind in SOURCE_KINDS {
            if !self.inner.sources[slot(kind)].load(Ordering::Acquire) {
                missing.push(kind.plural());
            }
        }
        missing
    }

    /// Records the access check's answer: the permissions missing, by name (empty: none), and
    /// whether it was asked with every watch synced (`final_answer`).
    pub fn set_missing_access(&self, missing: Vec<String>, final_answer: bool) {
        *self.inner.access.write().unwrap_or_else(|e| e.into_inner()) = Some(AccessAnswer {
            missing,
            final_answer,
        });
    }

    /// `Ok` once the access check found every permission granted, with whether that answer
    /// was given with the synced Kustomizations known (one read, so both halves agree); else
    /// why not.
    pub fn access(&self) -> Result<bool, NotReady> {
        match &*self.inner.access.read().unwrap_or_else(|e| e.into_inner()) {
            None => Err(NotReady::AccessNotChecked),
            Some(answer) if answer.missing.is_empty() => Ok(answer.final_answer),
            Some(answer) => Err(NotReady::MissingPermissions(answer.missing.clone())),
        }
    }

    pub fn synced(&self) -> bool {
        self.unsynced().is_empty()
    }

    /// Resolves once every watch is synced.
    pub async fn wait_synced(&self, poll: Duration) {
        while !self.synced() {
            tokio::time::sleep(poll).await;
        }
    }
}

/// What the watches and the resync share: the index they feed, the queue they fill, the
/// records that say what finished.
#[derive(Clone)]
pub struct Feed {
    pub index: Arc<RwLock<Index>>,
    pub queue: Queue<Key>,
    pub records: Arc<dyn Records>,
    pub readiness: Readiness,
    /// The open gates, told of every Kustomization and source event before anything is
    /// queued, so a gate closes before the run of a newer revision starts.
    pub observer: Option<Observer>,
    /// The tasks the watches start off their loops (forgetting a deleted Kustomization's
    /// records): owned by the service, which waits for them at shutdown.
    pub tasks: tokio_util::task::TaskTracker,
}

impl Feed {
    fn index_mut(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(|e| e.into_inner())
    }

    fn index(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `key` when a watch event made it due: something changed (a revision, the
    /// spec, a new Kustomization), so an earlier failure's backoff no longer applies.
    /// Unfinished and deferred runs wait for the resync (or the queue's own retry), so a
    /// stream of status updates does not turn into a stream of runs.
    fn offer(&self, key: Key, changed: bool) {
        let last = self.records.last(&key.namespace, &key.name);
        let due = self.index().due(&key, last.as_ref());
        match due {
            Some(Due::NewRevision | Due::SpecChanged) => self.queue.push_now(key, Trigger::Watch),
            Some(Due::NeverRun) if changed => self.queue.push_now(key, Trigger::Watch),
            Some(Due::NeverRun) => self.queue.push(key, Trigger::Watch),
            Some(Due::Unfinished | Due::Deferred) | None => return,
        }
        if let Some(due) = due {
            tracing::debug!(due = due.as_str(), "queued by a watch event");
        }
    }

    /// Queues every handled Kustomization that is due, for any reason; returns how many, by
    /// reason. Reads only the index and the records in memory: no API request. Logs nothing
    /// above debug: with a thousand Kustomizations failing, a line per key at every resync
    /// drowns the log, so the caller logs the counts in one line.
    pub fn queue_due(&self, trigger: Trigger) -> DueCounts {
        let due = self
            .index()
            .due_keys(|key| self.records.last(&key.namespace, &key.name));
        let mut counts = DueCounts::default();
        for (key, why) in due {
            tracing::debug!(kustomization = %key, due = why.as_str(), trigger = ?trigger, "queued");
            counts.add(why);
            self.queue.push(key, trigger);
        }
        counts
    }

    /// Forgets the records of Kustomizations that are gone (their results ConfigMap and their
    /// `/status` row), each only if the index still does not hold it. Only the leader does:
    /// another replica's watch may lag behind the runs of the leader, whose records it would
    /// then delete.
    pub async fn forget_gone(self, keys: Vec<Key>) {
        if self.queue.is_paused() || !self.readiness.synced() {
            return;
        }
        for key in keys {
            if self.index().entry(&key).is_some() {
                continue;
            }
            match self.records.forget(&key.namespace, &key.name).await {
                Ok(()) => {
                    tracing::debug!(kustomization = %key, "Kustomization gone: its results are forgotten")
                }
                Err(error) => {
                    tracing::warn!(kustomization = %key, %error, "forgetting the results of a deleted Kustomization; retried at the next resync")
                }
            }
        }
    }

    /// Watches Kustomizations (optionally by label selector) into the index, forever.
    pub async fn watch_kustomizations(self, client: Client, label_selector: Option<String>) {
        let api: Api<Kustomization> = Api::all(client);
        let mut config = watcher::Config::default();
        if let Some(selector) = &label_selector {
            config = config.labels(selector);
        }
        let mut listed: Vec<Kustomization> = Vec::new();
        let mut stream = watcher(api, config).default_backoff().boxed();
        loop {
            match stream.try_next().await {
                Ok(Some(event)) => match event {
                    watcher::Event::Init => listed.clear(),
                    watcher::Event::InitApply(ks) => listed.push(ks),
                    watcher::Event::InitDone => {
                        let keys = {
                            let mut index = self.index_mut();
                            index.reset_kustomizations(listed.iter());
                            index.handled_keys(None)
                        };
                        // An answer or a hold the watch missed while it was down.
                        if let Some(observer) = &self.observer {
                            for ks in &listed {
                                observer.kustomization(ks);
                            }
                        }
                        listed = Vec::new();
                        self.readiness.mark_kustomizations();
                        tracing::info!(handled = keys.len(), "Kustomizations listed");
                        for key in keys {
                            self.offer(key, false);
                        }
                    }
                    watcher::Event::Apply(ks) => {
                        let applied = self.index_mut().apply_kustomization(&ks);
                        if let Some(observer) = &self.observer {
                            observer.kustomization(&ks);
                        }
                        if let Some((key, applied)) = applied
                            && applied.handled
                        {
                            self.offer(key, applied.changed);
                        }
                    }
                    watcher::Event::Delete(ks) => {
                        if let (Some(ns), Some(name)) = (&ks.metadata.namespace, &ks.metadata.name)
                        {
                            let key = Key::kustomization(ns, name);
                            self.index_mut().delete_kustomization(&key);
                            if let Some(observer) = &self.observer {
                                observer.forget(&key);
                            }
                            // Off the watch's loop: the delete is an API call.
                            self.tasks.spawn(self.clone().forget_gone(vec![key]));
                        }
                    }
                },
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(%error, "watching Kustomizations; retrying");
                }
            }
        }
    }

    /// Watches one source kind's revisions into the index, forever.
    pub async fn watch_sources(self, client: Client, kind: SourceKind) {
        let resource = ApiResource {
            group: "source.toolkit.fluxcd.io".into(),
            version: "v1".into(),
            api_version: "source.toolkit.fluxcd.io/v1".into(),
            kind: kind.as_str().into(),
            plural: kind.plural().into(),
        };
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let mut listed: Vec<(SourceKey, Option<String>)> = Vec::new();
        let mut listed_upstreams: Vec<(SourceKey, SourceKey)> = Vec::new();
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut absent_logged = false;
        loop {
            match stream.try_next().await {
                Ok(Some(event)) => match event {
                    watcher::Event::Init => {
                        listed.clear();
                        listed_upstreams.clear();
                    }
                    watcher::Event::InitApply(obj) => {
                        if let Some((source, revision)) = source_of(kind, &obj) {
                            if let Some(up) = upstream_of(kind, &obj) {
                                listed_upstreams.push((source.clone(), up));
                            }
                            listed.push((source, revision));
                        }
                    }
                    watcher::Event::InitDone => {
                        let all = std::mem::take(&mut listed);
                        let count = all.len();
                        self.index_mut().reset_sources(kind, all);
                        if kind == SourceKind::ExternalArtifact {
                            let upstreams = std::mem::take(&mut listed_upstreams);
                            self.index_mut().reset_upstreams(upstreams);
                        }
                        self.readiness.mark_source(kind);
                        tracing::info!(kind = kind.as_str(), sources = count, "sources listed");
                        let keys = self.index().handled_keys(None);
                        for key in keys {
                            self.offer(key, false);
                        }
                    }
                    watcher::Event::Apply(obj) => {
                        if let Some((source, revision)) = source_of(kind, &obj) {
                            let mut keys = Vec::new();
                            if kind == SourceKind::ExternalArtifact {
                                let up = upstream_of(kind, &obj);
                                keys = self.index_mut().apply_upstream(source.clone(), up);
                            }
                            let moved = self.index_mut().apply_source(source, revision.clone());
                            // Closed before the new revision's run is queued.
                            if let Some(observer) = &self.observer {
                                observer.source_moved(&moved, revision.as_deref());
                            }
                            keys.extend(moved);
                            for key in keys {
                                self.offer(key, true);
                            }
                        }
                    }
                    watcher::Event::Delete(obj) => {
                        if let Some((source, _)) = source_of(kind, &obj) {
                            self.index_mut().delete_source(&source);
                        }
                    }
                },
                Ok(None) => return,
                Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                    if status.code == 404 =>
                {
                    // The CRD is not installed: nothing of this kind can be referenced.
                    self.readiness.mark_source(kind);
                    if !absent_logged {
                        tracing::info!(
                            kind = kind.as_str(),
                            "CRD not installed; treating the kind as empty"
                        );
                        absent_logged = true;
                    }
                }
                Err(error) => {
                    tracing::warn!(kind = kind.as_str(), %error, "watching sources; retrying");
                }
            }
        }
    }

    /// Every `period`, queues what is due (level-triggered), once the caches are synced.
    pub async fn resync(self, period: Duration, metrics: Metrics) {
        let mut ticker = tokio::time::interval(period.max(Duration::from_millis(10)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate; the startup pass covers it.
        ticker.tick().await;
        loop {
            ticker.tick().await;
            if !self.readiness.synced() {
                continue;
            }
            let due = self.queue_due(Trigger::Resync);
            // A delete the watch missed (a relist, a restart) is found here.
            let gone = self.index().gone(self.records.keys());
            if !gone.is_empty() {
                self.clone().forget_gone(gone).await;
            }
            let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
            metrics.last_resync.set(now);
            // One line per resync, however many are due; at debug when nothing is.
            let waiting = self.queue.waiting();
            if due.total() > 0 {
                tracing::info!(
                    due = due.total(),
                    never_run = due.never_run,
                    new_revision = due.new_revision,
                    unfinished = due.unfinished,
                    deferred = due.deferred,
                    spec_changed = due.spec_changed,
                    ready_new = waiting.new,
                    ready_retry = waiting.retry,
                    backing_off = waiting.backing_off,
                    running = self.queue.running(),
                    "resync"
                );
            } else {
                tracing::debug!(due = 0, "resync");
            }
        }
    }
}

/// How many Kustomizations one pass found due, by reason ([`Feed::queue_due`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DueCounts {
    pub never_run: usize,
    pub new_revision: usize,
    pub unfinished: usize,
    pub deferred: usize,
    pub spec_changed: usize,
}

impl DueCounts {
    pub fn add(&mut self, due: Due) {
        let slot = match due {
            Due::NeverRun => &mut self.never_run,
            Due::NewRevision => &mut self.new_revision,
            Due::Unfinished => &mut self.unfinished,
            Due::Deferred => &mut self.deferred,
            Due::SpecChanged => &mut self.spec_changed,
        };
        *slot += 1;
    }

    pub fn total(&self) -> usize {
        self.never_run + self.new_revision + self.unfinished + self.deferred + self.spec_changed
    }
}

/// The upstream an ExternalArtifact names in `spec.sourceRef`, when it is a kind the
/// `artifact` gate publishes from (GitRepository, OCIRepository, Bucket); namespace defaults
/// to the ExternalArtifact's.
fn upstream_of(kind: SourceKind, obj: &DynamicObject) -> Option<SourceKey> {
    if kind != SourceKind::ExternalArtifact {
        return None;
    }
    let reference = obj.data.pointer("/spec/sourceRef")?;
    let up_kind = SourceKind::parse(reference.get("kind")?.as_str()?)
        .filter(|k| *k != SourceKind::ExternalArtifact)?;
    let name = reference.get("name")?.as_str()?.to_string();
    let namespace = reference
        .get("namespace")
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty())
        .map(String::from)
        .or_else(|| obj.metadata.namespace.clone())?;
    Some(SourceKey {
        kind: up_kind,
        namespace,
        name,
    })
}

/// A source object's key and its artifact revision.
fn source_of(kind: SourceKind, obj: &DynamicObject) -> Option<(SourceKey, Option<String>)> {
    let namespace = obj.metadata.namespace.clone()?;
    let name = obj.metadata.name.clone()?;
    let revision = obj
        .data
        .pointer("/status/artifact/revision")
        .and_then(|v| v.as_str())
        .filter(|r| !r.is_empty())
        .map(String::from);
    Some((
        SourceKey {
            kind,
            namespace,
            name,
        },
        revision,
    ))
}

/// A cache of the cluster's StorageClasses for the converges (`allowVolumeExpansion`), and the
/// task that keeps it: one list and a watch for the whole service instead of a cluster-wide list
/// per converge. Not part of [`Readiness`]: a converge that finds the cache not yet listed
/// (forbidden, or the server slow) lists StorageClasses itself, so a missing grant costs a
/// request per converge, never readiness. An empty list is a listed, empty cache.
pub fn storage_class_cache(
    client: Client,
) -> (
    Store<StorageClass>,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (store, writer) = reflector::store();
    let api: Api<StorageClass> = Api::all(client);
    let task = async move {
        let mut stream = reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .boxed();
        let mut failing = false;
        loop {
            match stream.try_next().await {
                Ok(Some(event)) => {
                    if let watcher::Event::InitDone = event {
                        failing = false;
                        tracing::debug!("StorageClasses listed");
                    }
                }
                Ok(None) => return,
                // Logged once per outage: the backoff retries every few seconds for ever.
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(%error, "watching StorageClasses; retrying (converges list them meanwhile)");
                }
                Err(error) => tracing::debug!(%error, "watching StorageClasses; retrying"),
            }
        }
    };
    (store, task)
}
