//! The service's journal: the intent Secrets ([`SecretJournal`]), with the load every converge
//! starts with answered from a watch of them where the watch cannot be missing one, and the
//! intents the last resume refused ([`IntentCache::refused`], for `/status` and the
//! `flux_converger_intents_refused` gauge).
//!
//! Nearly every converge finds no intent for its StatefulSet, so the load was a request spent
//! on a known answer (issue #18: the service's converge with warm caches). The watch is
//! trusted only to say "none", and only when nothing of this process's own could be missing
//! from it:
//! - it has listed once and its last answer was not an error (while it retries, a write made
//!   meanwhile could be missing: the server is asked);
//! - no intent this process recorded for that StatefulSet is still uncleared (a converge that
//!   failed after its record leaves one, whose watch event may not have arrived yet);
//! - an intent the watch shows is always read from the server, so a stale copy never starts a
//!   resume.
//!
//! What is left is the lag of the watch behind another process's record made at the same
//! moment (the `converge` command run by hand on the same StatefulSet), which a read would
//! race just the same.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::cluster::Synced;
use crate::journal::{
    INTENT_RECORD, Intent, Journal, JournalError, Listing, RECORD_LABEL, RefusedIntent,
    SecretJournal, intent_record_name,
};

type Key = (String, String);

/// The watched intents of one namespace, shared by every run of the service. Cheap to clone.
#[derive(Clone)]
pub struct IntentCache {
    store: Store<Secret>,
    namespace: String,
    synced: Synced,
    /// StatefulSets whose intent this process recorded and has not cleared yet.
    uncleared: Arc<Mutex<HashSet<Key>>>,
    /// What the last resume on start refused, by StatefulSet.
    refused: Arc<Mutex<Vec<RefusedIntent>>>,
}

impl IntentCache {
    /// The cache and the watch that fills it (to be run for the life of the process). Every
    /// intent of the namespace is watched, whichever shard recorded it: a load goes by name.
    pub fn watch(
        client: Client,
        namespace: &str,
    ) -> (Self, impl std::future::Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store();
        let api: Api<Secret> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().labels(&format!("{RECORD_LABEL}={INTENT_RECORD}"));
        let synced = Synced::default();
        let follower = synced.clone();
        let task = async move {
            let stream = reflector(writer, watcher(api, config)).default_backoff();
            let warning = "watching intents; retrying (converges read their intent meanwhile)";
            follower.follow(stream, warning, |_| {}).await;
        };
        (Self::new(store, namespace, synced), task)
    }

    fn new(store: Store<Secret>, namespace: &str, synced: Synced) -> Self {
        IntentCache {
            store,
            namespace: namespace.to_string(),
            synced,
            uncleared: Arc::default(),
            refused: Arc::default(),
        }
    }

    /// The namespace whose intents it watches.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Keeps what a resume refused (replacing the last resume's), for [`IntentCache::refused`].
    pub fn set_refused(&self, refused: Vec<RefusedIntent>) {
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner) = refused;
    }

    /// The intents the last resume refused that are still in the journal as far as the watch
    /// knows (one a later converge finished, or a person deleted, drops out), in the order of
    /// the namespace and name of their StatefulSets.
    pub fn refused(&self) -> Vec<RefusedIntent> {
        let refused = self
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if !self.is_synced() {
            return refused;
        }
        let mut left: Vec<RefusedIntent> = refused
            .into_iter()
            .filter(|r| {
                // `Secret ns/name` (the journal's listing) or `intent name` (a resume's).
                let record = r
                    .object
                    .rsplit(['/', ' '])
                    .next()
                    .unwrap_or_default()
                    .to_string();
                self.store
                    .get(&ObjectRef::new(&record).within(&self.namespace))
                    .is_some()
            })
            .collect();
        left.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        left
    }

    /// A cache over a store the caller fills (tests drive its watch events by hand).
    pub fn over(store: Store<Secret>, namespace: &str) -> Self {
        Self::new(store, namespace, Synced::trusted())
    }

    fn uncleared(&self) -> std::sync::MutexGuard<'_, HashSet<Key>> {
        self.uncleared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the watch has listed and its last answer was not an error: until then every
    /// load reads the server.
    pub fn is_synced(&self) -> bool {
        self.synced.of(&self.store)
    }

    /// Whether the watch alone can say there is no intent for `namespace/name`.
    fn knows_none(&self, namespace: &str, name: &str) -> bool {
        self.is_synced()
            && !self
                .uncleared()
                .contains(&(namespace.to_string(), name.to_string()))
            && self
                .store
                .get(&ObjectRef::new(&intent_record_name(namespace, name)).within(&self.namespace))
                .is_none()
    }
}

/// [`SecretJournal`] with its `load` answered by an [`IntentCache`] where it can be
/// (the service's journal of one run; without a cache, the journal itself).
pub struct WatchedJournal {
    inner: SecretJournal,
    cache: Option<IntentCache>,
}

impl WatchedJournal {
    pub fn new(inner: SecretJournal, cache: Option<IntentCache>) -> Self {
        WatchedJournal { inner, cache }
    }
}

impl Journal for WatchedJournal {
    async fn record(&self, intent: &Intent) -> Result<(), JournalError> {
        // Before the write: a record whose answer is lost may still have landed.
        if let Some(cache) = &self.cache {
            cache
                .uncleared()
                .insert((intent.namespace.clone(), intent.name.clone()));
        }
        self.inner.record(intent).await
    }

    async fn load(&self, namespace: &str, name: &str) -> Result<Option<Intent>, JournalError> {
        if let Some(cache) = &self.cache
            && self.inner.namespace() == cache.namespace
            && cache.knows_none(namespace, name)
        {
            return Ok(None);
        }
        self.inner.load(namespace, name).await
    }

    async fn list(&self) -> Result<Listing, JournalError> {
        self.inner.list().await
    }

    async fn clear(&self, namespace: &str, name: &str) -> Result<(), JournalError> {
        self.inner.clear(namespace, name).await?;
        if let Some(cache) = &self.cache {
            cache
                .uncleared()
                .remove(&(namespace.to_string(), name.to_string()));
        }
        Ok(())
    }
}
