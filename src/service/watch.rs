//! The watches that keep the index current, and the resync that makes the service
//! level-triggered: a lost webhook, a restart or a missed event loses nothing, because what is
//! due is recomputed from the index (cluster state) and the last finished records.
//!
//! Kustomizations are watched with the server-side label selector of `--watch-label-selector`
//! (Flux's sharding); the four source kinds cluster-wide without one, and with one (a shard)
//! only in the namespaces the shard's handled Kustomizations read them from
//! ([`wanted_watches`]), so a shard's start lists what it reads, not the whole cluster. Only a
//! source's revision (and an ExternalArtifact's upstream) is kept, and every object is read
//! lean (`flux::objects::lean`: no `managedFields`) and applied as it arrives. A watch is ready
//! only on its first `InitDone` (the full list), never on its first event. A source kind whose
//! CRD is missing (ExternalArtifact before Flux 2.7) counts as synced and empty, and its watch
//! keeps retrying in case the CRD is installed later.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::ApiResource;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::flux::objects::lean::{WatchedKustomization, WatchedSource};
use crate::flux::objects::{Kustomization, SourceKind};
use crate::http::backend::NotReady;
use crate::model::Key;
use crate::model::Trigger;
use crate::records::Records;
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
    /// Whether the Kustomizations have been listed once.
    pub fn kustomizations_synced(&self) -> bool {
        self.inner.kustomizations.load(Ordering::Acquire)
    }

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
    /// Told when what the index reads may have changed (a Kustomization's source, whether it
    /// is handled, an ExternalArtifact's upstream) or a source watch listed for the first
    /// time: [`Feed::watch_source_kinds`] looks again.
    pub sources_changed: Arc<tokio::sync::Notify>,
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
        // Before the records are read every Kustomization looks never run: queued now, 10,000 of
        // them would each be taken and found not due. The start queues what is due once they
        // are read (`service::lead`).
        if !self.records.is_loaded() {
            return;
        }
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

    /// Watches Kustomizations (optionally by label selector) into the index, forever. Each
    /// listed object is applied as it arrives and dropped (only the index's entry stays), read
    /// lean ([`WatchedKustomization`]: no `managedFields`); the end of a list removes what it
    /// did not list, and gives the heap the list freed back to the system.
    pub async fn watch_kustomizations(self, client: Client, label_selector: Option<String>) {
        let api: Api<WatchedKustomization> = Api::all(client);
        let mut config = watcher::Config::default();
        if let Some(selector) = &label_selector {
            config = config.labels(selector);
        }
        let mut relist = 0;
        let mut absent_logged = false;
        let mut stream = watcher(api, config.page_size(LIST_PAGE))
            .default_backoff()
            .boxed();
        loop {
            match stream.try_next().await {
                Ok(Some(event)) => match event {
                    watcher::Event::Init => relist = self.index_mut().begin_relist(),
                    watcher::Event::InitApply(ks) => {
                        let ks = Kustomization::from(ks);
                        self.index_mut().apply_kustomization(&ks);
                        // An answer or a hold the watch missed while it was down.
                        if let Some(observer) = &self.observer {
                            observer.kustomization(&ks);
                        }
                    }
                    watcher::Event::InitDone => {
                        let keys = {
                            let mut index = self.index_mut();
                            index.end_kustomization_relist(relist);
                            index.handled_keys(None)
                        };
                        release_free_memory();
                        self.readiness.mark_kustomizations();
                        self.sources_changed.notify_one();
                        tracing::info!(handled = keys.len(), "Kustomizations listed");
                        for key in keys {
                            self.offer(key, false);
                        }
                    }
                    watcher::Event::Apply(ks) => {
                        let ks = Kustomization::from(ks);
                        let applied = self.index_mut().apply_kustomization(&ks);
                        if let Some(observer) = &self.observer {
                            observer.kustomization(&ks);
                        }
                        if let Some((key, applied)) = applied {
                            if applied.changed {
                                // Its source, or whether it is handled, may have changed.
                                self.sources_changed.notify_one();
                            }
                            if applied.handled {
                                self.offer(key, applied.changed);
                            }
                        }
                    }
                    watcher::Event::Delete(ks) => {
                        if let (Some(ns), Some(name)) = (&ks.metadata.namespace, &ks.metadata.name)
                        {
                            let key = Key::kustomization(ns, name);
                            self.index_mut().delete_kustomization(&key);
                            self.sources_changed.notify_one();
                            if let Some(observer) = &self.observer {
                                observer.forget(&key);
                            }
                            // Off the watch's loop: the delete is an API call.
                            self.tasks.spawn(self.clone().forget_gone(vec![key]));
                        }
                    }
                },
                Ok(None) => return,
                // A cluster without Flux's Kustomization CRD (Argo CD alone) has none to gate:
                // listed as empty, so the other kinds' service becomes ready; the watch keeps
                // retrying and lists them once the CRD is installed.
                Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                    if status.code == 404 =>
                {
                    if !absent_logged {
                        tracing::info!(
                            "Kustomization CRD not installed; no Kustomization to gate yet"
                        );
                        absent_logged = true;
                        self.readiness.mark_kustomizations();
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "watching Kustomizations; retrying");
                }
            }
        }
    }

    /// Watches the sources the index needs, forever: with `scoped` (a shard,
    /// `--watch-label-selector`), only the namespaces the handled Kustomizations read each kind
    /// from ([`wanted_watches`]), started and stopped as those change; without it, each kind
    /// cluster-wide. A kind is ready once every watch of it has listed once (and at once when
    /// nothing reads it); it stays ready when a Kustomization later reads from a namespace
    /// not watched yet (that watch's list makes its Kustomizations due).
    pub async fn watch_source_kinds(self, client: Client, scoped: bool) {
        // Owned here: dropping this future (the service's shutdown) aborts every watch.
        let mut tasks = tokio::task::JoinSet::new();
        let mut running: std::collections::HashMap<SourceWatch, tokio::task::AbortHandle> =
            std::collections::HashMap::new();
        let listed: Arc<std::sync::Mutex<std::collections::HashSet<SourceWatch>>> = Arc::default();
        loop {
            let wanted = if scoped {
                if !self.readiness.kustomizations_synced() {
                    self.sources_changed.notified().await;
                    continue;
                }
                wanted_watches(&self.index(), NAMESPACED_WATCHES)
            } else {
                SOURCE_KINDS
                    .iter()
                    .map(|kind| SourceWatch {
                        kind: *kind,
                        namespace: None,
                    })
                    .collect()
            };
            let stopped: Vec<SourceWatch> = running
                .keys()
                .filter(|w| !wanted.contains(*w))
                .cloned()
                .collect();
            for watch in stopped {
                if let Some(task) = running.remove(&watch) {
                    task.abort();
                }
                listed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&watch);
                tracing::info!(
                    kind = watch.kind.as_str(),
                    namespace = watch.namespace.as_deref().unwrap_or("*"),
                    "no handled Kustomization reads from here: source watch stopped"
                );
            }
            {
                // What no watch covers any more is forgotten (a kind switched from
                // cluster-wide to namespaces forgets the other namespaces).
                let mut index = self.index_mut();
                for kind in SOURCE_KINDS {
                    let of_kind: Vec<&SourceWatch> =
                        wanted.iter().filter(|w| w.kind == kind).collect();
                    if !of_kind.iter().any(|w| w.namespace.is_none()) {
                        index.retain_sources(kind, |ns| {
                            of_kind.iter().any(|w| w.namespace.as_deref() == Some(ns))
                        });
                    }
                }
            }
            for watch in &wanted {
                if running.contains_key(watch) {
                    continue;
                }
                let task = tasks.spawn(self.clone().watch_sources(
                    client.clone(),
                    watch.clone(),
                    listed.clone(),
                ));
                running.insert(watch.clone(), task);
            }
            // Ready per kind once each of its watches has listed (none wanted: ready now).
            {
                let listed = listed.lock().unwrap_or_else(|e| e.into_inner());
                for kind in SOURCE_KINDS {
                    if wanted
                        .iter()
                        .filter(|w| w.kind == kind)
                        .all(|w| listed.contains(w))
                    {
                        self.readiness.mark_source(kind);
                    }
                }
            }
            // Woken by a change of what the index reads (debounced: a relist of 10,000
            // Kustomizations is one recomputation), or a watch's first list. Finished tasks
            // (aborted ones) are reaped meanwhile.
            loop {
                tokio::select! {
                    _ = self.sources_changed.notified() => break,
                    Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Watches one source kind's revisions (in one namespace, or all) into the index, until
    /// stopped. Each listed object is applied as it arrives; the end of a list removes what it
    /// did not list.
    async fn watch_sources(
        self,
        client: Client,
        watch: SourceWatch,
        listed_once: Arc<std::sync::Mutex<std::collections::HashSet<SourceWatch>>>,
    ) {
        let kind = watch.kind;
        let resource = ApiResource {
            group: "source.toolkit.fluxcd.io".into(),
            version: "v1".into(),
            api_version: "source.toolkit.fluxcd.io/v1".into(),
            kind: kind.as_str().into(),
            plural: kind.plural().into(),
        };
        let api: Api<WatchedSource> = match &watch.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        let shown_namespace = watch.namespace.clone().unwrap_or_else(|| "*".into());
        let mut listed_upstreams: Vec<(SourceKey, SourceKey)> = Vec::new();
        let mut relist = 0;
        let mut count = 0usize;
        let mut stream = watcher(api, watcher::Config::default().page_size(LIST_PAGE))
            .default_backoff()
            .boxed();
        let mut absent_logged = false;
        let synced = |feed: &Feed| {
            let first = listed_once
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(watch.clone());
            if first {
                feed.sources_changed.notify_one();
            }
        };
        loop {
            match stream.try_next().await {
                Ok(Some(event)) => match event {
                    watcher::Event::Init => {
                        relist = self.index_mut().begin_source_relist();
                        listed_upstreams.clear();
                        count = 0;
                    }
                    watcher::Event::InitApply(obj) => {
                        if let Some((source, revision)) = source_of(kind, &obj) {
                            if let Some(up) = upstream_of(kind, &obj) {
                                listed_upstreams.push((source.clone(), up));
                            }
                            self.index_mut()
                                .apply_listed_source(source, revision, relist);
                            count += 1;
                        }
                    }
                    watcher::Event::InitDone => {
                        {
                            let mut index = self.index_mut();
                            index.end_source_relist(kind, watch.namespace.as_deref(), relist);
                            if kind == SourceKind::ExternalArtifact {
                                let upstreams = std::mem::take(&mut listed_upstreams);
                                index.reset_upstreams(watch.namespace.as_deref(), upstreams);
                            }
                        }
                        release_free_memory();
                        synced(&self);
                        if kind == SourceKind::ExternalArtifact {
                            // The upstreams it names are read (and so watched) too.
                            self.sources_changed.notify_one();
                        }
                        tracing::info!(kind = kind.as_str(), namespace = %shown_namespace, sources = count, "sources listed");
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
                                if !keys.is_empty() {
                                    self.sources_changed.notify_one();
                                }
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
                    synced(&self);
                    if !absent_logged {
                        tracing::info!(
                            kind = kind.as_str(),
                            "CRD not installed; treating the kind as empty"
                        );
                        absent_logged = true;
                    }
                }
                Err(error) => {
                    tracing::warn!(kind = kind.as_str(), namespace = %shown_namespace, %error, "watching sources; retrying");
                }
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
fn upstream_of(kind: SourceKind, obj: &WatchedSource) -> Option<SourceKey> {
    if kind != SourceKind::ExternalArtifact {
        return None;
    }
    let reference = obj.spec.source_ref.as_ref()?;
    let up_kind =
        SourceKind::parse(&reference.kind).filter(|k| *k != SourceKind::ExternalArtifact)?;
    let namespace = reference
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .or(obj.metadata.namespace.as_deref())?;
    Some(SourceKey::new(up_kind, namespace, &reference.name))
}

/// A source object's key and its artifact revision.
fn source_of(kind: SourceKind, obj: &WatchedSource) -> Option<(SourceKey, Option<String>)> {
    let namespace = obj.metadata.namespace.as_deref()?;
    let name = obj.metadata.name.as_deref()?;
    Some((
        SourceKey::new(kind, namespace, name),
        obj.revision().map(String::from),
    ))
}

/// Objects per page of a watch's list: kube-runtime's default. A page is held whole while it is
/// read (its body, then its lean objects, before each is applied); its body is one large
/// buffer, given back to the system when freed (`cmd::serve` fixes glibc's mmap threshold).
/// Pages of 100 cost five times the requests for no gain worth it at 10,000 Kustomizations
/// (`hack/fleet-memory.sh`).
pub const LIST_PAGE: u32 = 500;

/// One watch of source objects: a kind, in one namespace or (`None`) all of them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceWatch {
    pub kind: SourceKind,
    pub namespace: Option<String>,
}

/// Past this many namespaces, a kind is watched cluster-wide instead: each watch is a
/// connection of its own and a list at start, and a shard that reads from that many
/// namespaces gains nothing from splitting it.
pub const NAMESPACED_WATCHES: usize = 8;

/// The source watches a shard needs: for each kind, the namespaces its handled Kustomizations
/// read that kind from (their `sourceRef`, and for the `artifact` gate the upstream their
/// ExternalArtifact names), or one cluster-wide watch past `cap` namespaces. Pure.
pub fn wanted_watches(index: &Index, cap: usize) -> std::collections::BTreeSet<SourceWatch> {
    let mut by_kind: std::collections::BTreeMap<SourceKind, std::collections::BTreeSet<&str>> =
        Default::default();
    for source in index.read_sources() {
        by_kind
            .entry(source.kind)
            .or_default()
            .insert(&source.namespace);
    }
    let mut wanted = std::collections::BTreeSet::new();
    for (kind, namespaces) in by_kind {
        if namespaces.len() > cap {
            wanted.insert(SourceWatch {
                kind,
                namespace: None,
            });
        } else {
            wanted.extend(namespaces.into_iter().map(|ns| SourceWatch {
                kind,
                namespace: Some(ns.to_string()),
            }));
        }
    }
    wanted
}

/// Gives the heap a list freed back to the system: glibc keeps freed pages in its arenas,
/// so without this a list's peak stays resident for the life of the process.
fn release_free_memory() {
    crate::records::results::release_free_memory();
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
