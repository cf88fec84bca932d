//! What the service keeps about what it did, behind the model's types: the per-revision results
//! (persisted in the cluster, followed by every replica), the Events it publishes on the gated
//! objects, and its metrics. Written by the gate, read by `/status` through `http::backend`.

pub mod answer_event;
pub mod artifact_status;
pub mod codec;
pub mod entry;
pub mod events;
pub mod history;
pub mod metrics;
pub mod results;
pub mod revision_event;
pub mod status_cache;
pub mod volume_event;
pub mod write_lock;

use crate::model::{Key, RevisionRecord};

/// The per-revision records the service finished, newest first: what is due depends on them.
/// The results store implements it; tests give an in-memory stand-in.
pub trait Records: Send + Sync + 'static {
    /// The newest record of `namespace/name`.
    fn last(&self, namespace: &str, name: &str) -> Option<RevisionRecord>;
    /// Every kept record of `namespace/name`, newest first.
    fn history(&self, namespace: &str, name: &str) -> Vec<RevisionRecord>;
    /// [`Records::history`] as its JSON array (`None` when there are no records): what
    /// `/status/{ns}/{name}` serves. Default: encodes the history on every call; a store
    /// keeping its histories encoded answers without parsing them.
    fn history_json(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<std::sync::Arc<serde_json::value::RawValue>> {
        let history = self.history(namespace, name);
        if history.is_empty() {
            return None;
        }
        serde_json::value::to_raw_value(&history)
            .ok()
            .map(std::sync::Arc::from)
    }
    /// Whether the records have been read (once) from where they persist.
    fn is_loaded(&self) -> bool;
    /// Changes whenever any record changes, so `/status` can keep its encoded bodies until
    /// then; `None` (the default) when not tracked: nothing is cached.
    fn generation(&self) -> Option<u64> {
        None
    }
    /// Changes whenever the records of this Kustomization change (`None`: not tracked).
    fn version(&self, _namespace: &str, _name: &str) -> Option<u64> {
        None
    }
    /// Every Kustomization with records (none by default: nothing to forget).
    fn keys(&self) -> Vec<Key> {
        Vec::new()
    }
    /// Forgets the records of a Kustomization that is gone, where they persist too.
    fn forget<'a>(
        &'a self,
        _namespace: &'a str,
        _name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}
