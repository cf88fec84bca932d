//! At most one webhook-triggered run per Kustomization per `--hook-min-interval`.
//!
//! `/hook` is reachable by whoever holds the Provider's key (or by anyone, with
//! `--allow-unauthenticated-hooks`), and Flux's wedge event cancels a failure's backoff: without
//! a limit, a replayed or forged event would start one render and converge per request. A hook
//! inside the interval queues nothing (it is dropped, not postponed): the hook is only a hint,
//! and the watches and the resync, which are not limited, see every change it could announce.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Below this many entries the map is swept only once per interval.
const MIN_SWEEP: usize = 64;

/// The book of when each key last queued a run from a hook. Pure (the clock is a parameter),
/// so its rules are table-tested; [`HookLimit`] is the shared, clocked handle.
#[derive(Debug)]
pub struct HookLimiter<K> {
    interval: Duration,
    admitted: HashMap<K, Instant>,
    /// Sweep when the map reaches this size...
    high_water: usize,
    /// ...or when an interval has passed since this sweep.
    swept_at: Option<Instant>,
}

impl<K: Clone + Eq + Hash> HookLimiter<K> {
    /// `interval` zero admits every hook and keeps no book.
    pub fn new(interval: Duration) -> Self {
        HookLimiter {
            interval,
            admitted: HashMap::new(),
            high_water: MIN_SWEEP,
            swept_at: None,
        }
    }

    /// Whether a hook naming `key` at `now` may queue a run; admitting one starts its interval.
    pub fn admit(&mut self, key: &K, now: Instant) -> bool {
        if self.interval.is_zero() {
            return true;
        }
        if let Some(at) = self.admitted.get(key)
            && now.saturating_duration_since(*at) < self.interval
        {
            return false;
        }
        self.sweep(now);
        self.admitted.insert(key.clone(), now);
        true
    }

    /// Drops the keys whose interval is over (they would be admitted anyway), amortised: when
    /// the map doubled since the last sweep, or an interval passed. So it holds about the keys
    /// hooked within the last interval, however many Kustomizations come and go.
    fn sweep(&mut self, now: Instant) {
        let due = self.admitted.len() >= self.high_water
            || self
                .swept_at
                .is_none_or(|at| now.saturating_duration_since(at) >= self.interval);
        if !due {
            return;
        }
        let interval = self.interval;
        self.admitted
            .retain(|_, at| now.saturating_duration_since(*at) < interval);
        self.high_water = (self.admitted.len() * 2).max(MIN_SWEEP);
        self.swept_at = Some(now);
    }

    /// Keys in the book (for the memory bound's test).
    pub fn len(&self) -> usize {
        self.admitted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.admitted.is_empty()
    }
}

/// The limiter the webhook route shares, on tokio's clock.
#[derive(Debug)]
pub struct HookLimit<K>(Mutex<HookLimiter<K>>);

impl<K: Clone + Eq + Hash> HookLimit<K> {
    pub fn new(interval: Duration) -> Self {
        HookLimit(Mutex::new(HookLimiter::new(interval)))
    }

    /// See [`HookLimiter::admit`].
    pub fn admit(&self, key: &K) -> bool {
        // Each change is one map operation: a poisoned lock is still consistent.
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admit(key, Instant::now())
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_secs(10);

    #[test]
    fn one_admission_per_key_per_interval_table() {
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        // (case, key, seconds after t0, admitted?) applied in order to one limiter, time moving on.
        let steps: &[(&str, &str, u64, bool)] = &[
            ("first hook", "apps/a", 0, true),
            ("again at once", "apps/a", 0, false),
            ("inside the interval", "apps/a", 9, false),
            ("another key is its own", "apps/b", 9, true),
            ("the interval is over", "apps/a", 10, true),
            ("b's interval started at 9", "apps/b", 18, false),
            ("b again", "apps/b", 19, true),
            ("a dropped hook does not extend it", "apps/a", 19, false),
            ("next interval", "apps/a", 20, true),
        ];
        let mut limiter = HookLimiter::new(INTERVAL);
        for (case, key, secs, want) in steps {
            assert_eq!(limiter.admit(key, at(*secs)), *want, "{case}");
        }
    }

    /// The service's book is keyed by [`crate::model::Key`], which carries the kind: a
    /// HelmRelease and a Kustomization of the same namespace and name each get their own
    /// interval (they once shared one slot).
    #[test]
    fn objects_of_two_kinds_with_one_name_are_limited_apart() {
        use crate::model::Key;
        let t0 = Instant::now();
        let mut limiter = HookLimiter::new(INTERVAL);
        let kustomization = Key::kustomization("apps", "web");
        let helm_release = Key::helm_release("apps", "web");
        assert!(limiter.admit(&kustomization, t0));
        assert!(
            limiter.admit(&helm_release, t0),
            "the HelmRelease's hook was limited by the Kustomization's"
        );
        assert!(!limiter.admit(&kustomization, t0));
        assert!(!limiter.admit(&helm_release, t0));
    }

    #[test]
    fn zero_interval_admits_everything_and_keeps_no_book() {
        let mut limiter = HookLimiter::new(Duration::ZERO);
        let now = Instant::now();
        for _ in 0..100 {
            assert!(limiter.admit(&"apps/a", now));
        }
        assert!(limiter.is_empty());
    }

    /// 1,000 Kustomizations hooked once, then quiet: their entries go at the next admission
    /// after the interval, and a steady trickle of new keys never grows the book past about
    /// twice the keys of one interval.
    #[test]
    fn keys_not_seen_for_an_interval_are_dropped() {
        let t0 = Instant::now();
        let mut limiter = HookLimiter::new(INTERVAL);
        for i in 0..1000 {
            assert!(limiter.admit(&format!("apps/k{i}"), t0));
        }
        assert_eq!(limiter.len(), 1000);
        assert!(limiter.admit(&"apps/late".to_string(), t0 + INTERVAL));
        assert_eq!(limiter.len(), 1, "only the key of this interval is kept");

        // A new key every second for an hour: ten keys live at a time.
        let mut peak = 0;
        for s in 0..3600u64 {
            let now = t0 + INTERVAL * 2 + Duration::from_secs(s);
            assert!(limiter.admit(&format!("apps/n{s}"), now));
            peak = peak.max(limiter.len());
        }
        assert!(peak <= MIN_SWEEP + 1, "peak {peak}");
    }
}
