//! When a cache over a kube-runtime reflector may answer for the server: once its watch has
//! listed, and while its last answer was not an error. Shared by the service's caches that
//! stand in for a read a converge would send (`WatchedStatefulSets`, the intents watch), so
//! both trust their watch on the same terms.

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::FutureExt;
use futures::{Stream, TryStreamExt};
use kube::runtime::reflector::{Lookup, Store};
use kube::runtime::watcher;

/// Cheap to clone; every clone reads the one flag.
#[derive(Clone, Debug, Default)]
pub struct Synced(Arc<AtomicBool>);

impl Synced {
    /// A store the caller fills itself (tests drive its events by hand): trusted from the start.
    pub fn trusted() -> Self {
        Synced(Arc::new(AtomicBool::new(true)))
    }

    /// Whether `store` has listed and the watch's last answer was not an error: until then a
    /// cache reads the server.
    pub fn of<K>(&self, store: &Store<K>) -> bool
    where
        K: Lookup + Clone + 'static,
        K::DynamicType: Eq + Hash + Clone,
    {
        matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
            && self.0.load(Ordering::SeqCst)
    }

    /// Runs a reflector's `stream` for the life of the process. False from a watch error
    /// (`warning` logged once per outage) until the watch answers again: an event, or the end
    /// of a relist, never its start (a relist replaces the store only at its end, so until
    /// then the store may miss what changed while the watch was down). `on_change` runs after
    /// every event the store took and at every error (`None`), so a waiter looks again.
    pub async fn follow<K, S>(
        &self,
        stream: S,
        warning: &'static str,
        mut on_change: impl FnMut(Option<&watcher::Event<K>>),
    ) where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    {
        let mut stream = std::pin::pin!(stream);
        loop {
            match stream.try_next().await {
                Ok(Some(watcher::Event::Init | watcher::Event::InitApply(_))) => {}
                Ok(Some(event)) => {
                    self.0.store(true, Ordering::SeqCst);
                    on_change(Some(&event));
                }
                Ok(None) => return,
                Err(error) => {
                    if self.0.swap(false, Ordering::SeqCst) {
                        tracing::warn!(%error, "{warning}");
                    }
                    on_change(None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Trusted after a relist's end, not at its start; distrusted at an error until the next
    /// event; `on_change` sees every event but a relist's own and every error.
    #[tokio::test]
    async fn trust_follows_the_watch_by_table() {
        use watcher::Event::*;
        let (store, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        let synced = Synced::default();
        let steps: Vec<(
            Result<watcher::Event<ConfigMap>, watcher::Error>,
            bool,
            usize,
        )> = vec![
            (Ok(Init), false, 0),
            (Ok(InitApply(cm("a"))), false, 0),
            (Ok(InitDone), true, 1),
            (Ok(Apply(cm("b"))), true, 2),
            (Err(watcher::Error::NoResourceVersion), false, 3),
            (Ok(Init), false, 3),
            (Ok(InitDone), true, 4),
            (Ok(Delete(cm("b"))), true, 5),
        ];
        let mut changes = 0;
        for (i, (event, trusted, changed)) in steps.into_iter().enumerate() {
            if let Ok(e) = &event {
                writer.apply_watcher_event(e);
            }
            synced
                .follow(futures::stream::iter([event]), "test", |_| changes += 1)
                .await;
            assert_eq!(synced.of(&store), trusted, "step {i}");
            assert_eq!(changes, changed, "step {i}");
        }
        assert!(Synced::trusted().0.load(Ordering::SeqCst));
    }
}
