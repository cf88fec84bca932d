//! The StatefulSets Flux manages, from one watch the service keeps: what a converge decides on
//! before its proof, and where it sees its orphan delete complete.
//!
//! Issue #18 asks the service's converge with warm caches for N+7 requests; the get of the
//! StatefulSet and the watch for its deletion were two of the N+9. Neither is trusted further
//! than the server confirms it:
//! - the copy decided on is only a guess until the proof's own answer (the tenant's dry-run
//!   apply, authoritative) names the same uid on a live, non-terminating object. The proof sends
//!   the copy's immutable fields (templates, pod management policy), so a copy that is stale in
//!   any of them is refused by the server; either way the converge reads the object and decides
//!   again (`converge::set::prepare_one`), and the delete's uid precondition comes from the answer.
//! - a deletion is read from the watch only for an object the watch holds (or saw deleted) under
//!   that uid, and only while the watch has listed and not failed since; past
//!   [`TRUST_WAIT`] without an answer the server is asked, as without the watch.
//!
//! Objects are kept without their pod template, managed fields, annotations (but the one that
//! opts in to restarting pods for a resize, `flux-converger.io/restart-for-resize`, which the
//! claim follower reads) and status: what a decision reads is the immutable spec and the
//! templates, and a pod template can be most of a StatefulSet's bytes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use super::WaitOutcome;
use super::synced::Synced;

/// How long a wait for a deletion trusts the watch alone: an orphan delete completes in tens
/// of milliseconds on a healthy control plane, so a watch that has said nothing by then is
/// as likely stalled as the garbage collector slow, and one request settles it.
pub const TRUST_WAIT: Duration = Duration::from_secs(10);

/// How long a deletion seen by the watch is remembered: a wait that starts after the watch
/// already removed the object still reads "gone" from it.
const TOMBSTONE_TTL: Duration = Duration::from_secs(600);

type Key = (String, String);

/// Cheap to clone; every clone reads the one watch.
#[derive(Clone)]
pub struct WatchedStatefulSets {
    store: Store<StatefulSet>,
    synced: Synced,
    /// Bumped after every event the store took and at every error, so a wait looks again.
    changed: tokio::sync::watch::Receiver<u64>,
    /// uid of each object the watch saw deleted, and when.
    deleted: Arc<Mutex<HashMap<Key, (String, Instant)>>>,
}

/// Drops what no decision reads (see the module doc).
fn slim(sts: &mut StatefulSet) {
    use crate::volume::restart::ANNOTATION;
    sts.metadata.managed_fields = None;
    sts.metadata.annotations = sts
        .metadata
        .annotations
        .take()
        .and_then(|mut a| a.remove_entry(ANNOTATION))
        .map(|kept| std::collections::BTreeMap::from([kept]));
    sts.status = None;
    if let Some(spec) = sts.spec.as_mut() {
        spec.template = PodTemplateSpec::default();
    }
}

fn key_of(sts: &StatefulSet) -> Key {
    (
        sts.metadata.namespace.clone().unwrap_or_default(),
        sts.metadata.name.clone().unwrap_or_default(),
    )
}

impl WatchedStatefulSets {
    /// The cache and the watch that fills it (to be run for the life of the process):
    /// StatefulSets of every namespace carrying `label_selector` (Flux's owner label: only
    /// what a Kustomization applied can be converged).
    pub fn watch(
        client: Client,
        label_selector: &str,
    ) -> (Self, impl std::future::Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store();
        let api: Api<StatefulSet> = Api::all(client);
        let config = watcher::Config::default().labels(label_selector);
        let (bump, changed) = tokio::sync::watch::channel(0u64);
        let cache = Self::new(store, changed);
        let (synced, deleted) = (cache.synced.clone(), cache.deleted.clone());
        let task = async move {
            let stream = reflector(writer, watcher(api, config).modify(slim)).default_backoff();
            let warning = "watching StatefulSets; retrying (converges read them meanwhile)";
            synced
                .follow(stream, warning, |event| {
                    if let Some(watcher::Event::Delete(sts)) = event {
                        remember(&deleted, sts);
                    }
                    bump.send_modify(|n| *n = n.wrapping_add(1));
                })
                .await;
        };
        (cache, task)
    }

    fn new(store: Store<StatefulSet>, changed: tokio::sync::watch::Receiver<u64>) -> Self {
        WatchedStatefulSets {
            store,
            synced: Synced::default(),
            changed,
            deleted: Arc::default(),
        }
    }

    /// Whether the watch has listed and its last answer was not an error.
    pub fn is_synced(&self) -> bool {
        self.synced.of(&self.store)
    }

    /// The watched copy of `namespace/name` (without its pod template), when the watch is
    /// synced and holds it not terminating; `None` means: read the server.
    pub fn get(&self, namespace: &str, name: &str) -> Option<StatefulSet> {
        if !self.is_synced() {
            return None;
        }
        let sts = self.store.get(&ObjectRef::new(name).within(namespace))?;
        sts.metadata
            .deletion_timestamp
            .is_none()
            .then(|| sts.as_ref().clone())
    }

    /// What the watch says of the object `namespace/name` with `uid`: gone or replaced, or
    /// `None` once it cannot tell (not synced, failed, never held that uid, or nothing within
    /// [`TRUST_WAIT`]): then the server is asked.
    pub async fn wait_gone(&self, namespace: &str, name: &str, uid: &str) -> Option<WaitOutcome> {
        let mut changed = self.changed.clone();
        let key = (namespace.to_string(), name.to_string());
        let look = async {
            loop {
                changed.borrow_and_update();
                if !self.is_synced() {
                    return None;
                }
                match self.store.get(&ObjectRef::new(name).within(namespace)) {
                    Some(sts) if sts.metadata.uid.as_deref() == Some(uid) => {}
                    Some(sts) if self.saw_deleted(&key, uid) => {
                        return Some(WaitOutcome::Replaced {
                            uid: sts.metadata.uid.clone().unwrap_or_default(),
                        });
                    }
                    None if self.saw_deleted(&key, uid) => return Some(WaitOutcome::Gone),
                    // Never watched under that uid: only the server knows.
                    _ => return None,
                }
                changed.changed().await.ok()?;
            }
        };
        tokio::time::timeout(TRUST_WAIT, look).await.ok().flatten()
    }

    fn saw_deleted(&self, key: &Key, uid: &str) -> bool {
        lock(&self.deleted)
            .get(key)
            .is_some_and(|(seen, _)| seen == uid)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn remember(deleted: &Mutex<HashMap<Key, (String, Instant)>>, sts: &StatefulSet) {
    let now = Instant::now();
    let mut deleted = lock(deleted);
    deleted.retain(|_, (_, at)| now.duration_since(*at) < TOMBSTONE_TTL);
    deleted.insert(
        key_of(sts),
        (sts.metadata.uid.clone().unwrap_or_default(), now),
    );
}
