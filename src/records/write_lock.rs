//! One write at a time per history: the results store's saves and its forget of the same key
//! never interleave. Without it a forget racing a save of the same process loses to it: the
//! delete's precondition names the version the save is replacing (409, kept as "written
//! since"), and the save puts the entry back in memory, so a deleted Kustomization's results
//! stayed until the next resync.
//!
//! A lock exists only while someone holds or waits for it: with ten thousand histories, a
//! lock kept per key for the life of the process would cost memory for nothing.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// Per-key async locks, created on first use and dropped with the last holder.
pub struct WriteLocks<K> {
    locks: Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>,
}

impl<K> Default for WriteLocks<K> {
    fn default() -> Self {
        WriteLocks {
            locks: Mutex::new(HashMap::new()),
        }
    }
}

/// Held while one write of a key runs; dropping it lets the next one in.
pub struct Held<'a, K: Eq + Hash> {
    locks: &'a WriteLocks<K>,
    key: K,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl<K: Eq + Hash> WriteLocks<K> {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<K, Arc<tokio::sync::Mutex<()>>>> {
        // Each change of the map is one statement: a poisoned lock is still consistent.
        self.locks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<K: Clone + Eq + Hash> WriteLocks<K> {
    /// Waits for the writes of `key` started earlier to finish; the caller's write then runs
    /// alone until the returned guard drops.
    pub async fn lock(&self, key: &K) -> Held<'_, K> {
        let lock = self.map().entry(key.clone()).or_default().clone();
        let guard = lock.lock_owned().await;
        Held {
            locks: self,
            key: key.clone(),
            guard: Some(guard),
        }
    }

    /// Keys with a lock held or awaited (what the map costs).
    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Eq + Hash> Drop for Held<'_, K> {
    fn drop(&mut self) {
        // Released first, so the count below sees only the map's own handle and the waiters'.
        drop(self.guard.take());
        let mut map = self.locks.map();
        if map
            .get(&self.key)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_second_write_of_a_key_waits_for_the_first_and_other_keys_do_not() {
        let locks = Arc::new(WriteLocks::<&'static str>::default());
        let first = locks.lock(&"a").await;
        // Another key is not held up.
        let other = tokio::time::timeout(Duration::from_secs(5), locks.lock(&"b")).await;
        assert!(other.is_ok());
        drop(other);
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let waiting = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let _held = locks.lock(&"a").await;
                let _ = tx.send(());
            })
        };
        tokio::task::yield_now().await;
        assert!(
            rx.try_recv().is_err(),
            "the second write ran while the first held the key"
        );
        drop(first);
        waiting.await.unwrap();
        assert!(rx.try_recv().is_ok());
    }

    #[tokio::test]
    async fn a_lock_lives_only_while_held_or_awaited() {
        let locks = WriteLocks::<String>::default();
        assert!(locks.is_empty());
        let held = locks.lock(&"a".to_string()).await;
        assert_eq!(locks.len(), 1);
        drop(held);
        assert!(locks.is_empty());
    }
}
