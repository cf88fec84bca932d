//! The work queue: keyed by Kustomization, coalescing, one run per key at a time, per-key
//! exponential backoff with jitter after a failure.
//!
//! Triggers come from three places at once (webhook, watches, resync) and say the same thing
//! (look at this Kustomization again), so a key is held at most once: a newer trigger replaces
//! a waiting one, and a trigger that arrives while the key runs becomes a single follow-up run.
//! Deadlines live in tokio-util's `DelayQueue`; this module adds the key map, the running set
//! and the backoff book around it. The workers are a `Stream` of ready keys (`ready()`), so the
//! caller chooses the concurrency (`for_each_concurrent`) and no task is spawned here.

use std::collections::HashMap;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::Stream;
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};

use crate::service::record::Trigger;

/// How long a key waits after consecutive failures.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BackoffPolicy {
    /// The wait after the first failure.
    pub base: Duration,
    /// The longest wait, however many failures.
    pub max: Duration,
    /// Up to this fraction of the wait is added at random, so keys that failed together (an
    /// API server restart) do not retry together.
    pub jitter: f64,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        // kustomize-controller retries a failed reconcile after its retryInterval (default:
        // the interval, minutes); a converge failure is usually transient (a conflict, a
        // timeout), so start sooner and cap at five minutes, the default resync.
        BackoffPolicy {
            base: Duration::from_secs(2),
            max: Duration::from_secs(300),
            jitter: 0.2,
        }
    }
}

impl BackoffPolicy {
    /// The wait after `failures` consecutive failures (≥ 1), with `sample` in `[0, 1)` choosing
    /// the jitter. Pure, so the curve is table-tested.
    pub fn delay(&self, failures: u32, sample: f64) -> Duration {
        let exponent = failures.saturating_sub(1).min(31);
        let wait = self
            .base
            .saturating_mul(1u32 << exponent.min(30))
            .min(self.max);
        let extra = wait.mul_f64(self.jitter.clamp(0.0, 1.0) * sample.clamp(0.0, 1.0));
        (wait + extra).min(self.max.mul_f64(1.0 + self.jitter.clamp(0.0, 1.0)))
    }
}

/// How a run of a key ended, as far as the queue cares.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Finished (converged, refused, superseded, not handled): forget the backoff.
    Done,
    /// Left claims to grow later: the resync brings it back, not the queue.
    Deferred,
    /// Failed: run again after the backoff.
    Retry,
}

struct Scheduled {
    slot: delay_queue::Key,
    trigger: Trigger,
    deadline: Instant,
}

struct Running {
    trigger: Trigger,
    /// A trigger that arrived during the run, and whether it was urgent.
    follow_up: Option<(Trigger, bool)>,
}

struct Backoff {
    failures: u32,
    until: Instant,
}

struct Shared<K> {
    delay: DelayQueue<K>,
    scheduled: HashMap<K, Scheduled>,
    running: HashMap<K, Running>,
    backoff: HashMap<K, Backoff>,
    policy: BackoffPolicy,
    paused: bool,
    closed: bool,
    waker: Option<Waker>,
    depth: Gauge,
}

impl<K: Clone + Eq + Hash> Shared<K> {
    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    fn update_depth(&self) {
        let follow_ups = self
            .running
            .values()
            .filter(|r| r.follow_up.is_some())
            .count();
        self.depth.set((self.scheduled.len() + follow_ups) as i64);
    }

    /// Holds `key` until `deadline`, or sooner when it already waits for an earlier one.
    fn schedule(&mut self, key: K, trigger: Trigger, deadline: Instant) {
        match self.scheduled.get_mut(&key) {
            Some(s) => {
                s.trigger = trigger;
                if deadline < s.deadline {
                    s.deadline = deadline;
                    self.delay.reset_at(&s.slot, deadline);
                }
            }
            None => {
                let slot = self.delay.insert_at(key.clone(), deadline);
                self.scheduled.insert(
                    key,
                    Scheduled {
                        slot,
                        trigger,
                        deadline,
                    },
                );
            }
        }
        self.wake();
    }

    fn push(&mut self, key: K, trigger: Trigger, urgent: bool) {
        if self.closed {
            return;
        }
        if urgent {
            self.backoff.remove(&key);
        }
        if let Some(running) = self.running.get_mut(&key) {
            let was_urgent = running.follow_up.as_ref().is_some_and(|(_, u)| *u);
            running.follow_up = Some((trigger, urgent || was_urgent));
        } else {
            let now = Instant::now();
            let deadline = match self.backoff.get(&key) {
                Some(b) if b.until > now => b.until,
                _ => now,
            };
            self.schedule(key, trigger, deadline);
        }
        self.update_depth();
    }
}

/// The queue's handle: cheap to clone, shared by the webhook, the watches and the workers.
pub struct Queue<K> {
    shared: Arc<Mutex<Shared<K>>>,
}

impl<K> Clone for Queue<K> {
    fn clone(&self) -> Self {
        Queue {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K: Clone + Eq + Hash + Unpin> Queue<K> {
    /// An empty queue; `depth` follows the number of keys waiting (the `queue_depth` series).
    pub fn new(policy: BackoffPolicy, depth: Gauge) -> Self {
        Queue {
            shared: Arc::new(Mutex::new(Shared {
                delay: DelayQueue::new(),
                scheduled: HashMap::new(),
                running: HashMap::new(),
                backoff: HashMap::new(),
                policy,
                paused: false,
                closed: false,
                waker: None,
                depth,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared<K>> {
        // A panic while holding the lock leaves the maps consistent (each change is one
        // statement), so a poisoned lock is still usable.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `key` to run as soon as it may: now, or when a failure's backoff ends.
    pub fn push(&self, key: K, trigger: Trigger) {
        self.lock().push(key, trigger, false);
    }

    /// Queues `key` to run now, forgetting any backoff: something changed (a new revision, a
    /// new spec, Flux reporting the wedge) that makes the earlier failure old news.
    pub fn push_now(&self, key: K, trigger: Trigger) {
        self.lock().push(key, trigger, true);
    }

    /// Records how the run of `key` ended and schedules what follows it.
    pub fn complete(&self, key: &K, completion: Completion) {
        let mut shared = self.lock();
        let Some(running) = shared.running.remove(key) else {
            return;
        };
        let now = Instant::now();
        match completion {
            Completion::Done | Completion::Deferred => {
                shared.backoff.remove(key);
                if let Some((trigger, _)) = running.follow_up {
                    shared.schedule(key.clone(), trigger, now);
                }
            }
            Completion::Retry => {
                let failures = shared.backoff.get(key).map_or(0, |b| b.failures) + 1;
                let wait = shared.policy.delay(failures, rand::random_range(0.0..1.0));
                shared.backoff.insert(
                    key.clone(),
                    Backoff {
                        failures,
                        until: now + wait,
                    },
                );
                // A trigger that arrived during the failing run waits out the backoff too: it
                // was most likely about the revision that just failed. The caller pushes again
                // with `push_now` when it knows something changed since.
                let trigger = running.follow_up.map_or(running.trigger, |(t, _)| t);
                let deadline = now + wait;
                if !shared.closed {
                    shared.schedule(key.clone(), trigger, deadline);
                }
            }
        }
        shared.update_depth();
    }

    /// Consecutive failures of `key` so far (0 after a success).
    pub fn failures(&self, key: &K) -> u32 {
        self.lock().backoff.get(key).map_or(0, |b| b.failures)
    }

    /// Keys waiting (not running), follow-ups included.
    pub fn depth(&self) -> usize {
        let shared = self.lock();
        shared.scheduled.len()
            + shared
                .running
                .values()
                .filter(|r| r.follow_up.is_some())
                .count()
    }

    /// Keys running now.
    pub fn running(&self) -> usize {
        self.lock().running.len()
    }

    /// Stops (or resumes) handing out keys; pushes are still held. A replica that is not the
    /// leader pauses, so it keeps its book of what is due without writing anything.
    pub fn pause(&self, paused: bool) {
        let mut shared = self.lock();
        shared.paused = paused;
        shared.wake();
    }

    /// Whether keys are held back (this replica does not lead).
    pub fn is_paused(&self) -> bool {
        self.lock().paused
    }

    /// Ends `ready()` (after the keys already handed out finish) and refuses further pushes.
    pub fn close(&self) {
        let mut shared = self.lock();
        shared.closed = true;
        shared.wake();
    }

    /// The keys due, one at a time, each with the trigger that queued it last. A key is not
    /// handed out again until [`Queue::complete`] is called for it.
    pub fn ready(&self) -> Ready<K> {
        Ready {
            queue: self.clone(),
        }
    }
}

/// The stream of keys due (see [`Queue::ready`]).
pub struct Ready<K> {
    queue: Queue<K>,
}

impl<K: Clone + Eq + Hash + Unpin> Stream for Ready<K> {
    type Item = (K, Trigger);

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut shared = self.queue.lock();
        loop {
            if shared.closed {
                return Poll::Ready(None);
            }
            if shared.paused {
                shared.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            match shared.delay.poll_expired(cx) {
                Poll::Ready(Some(expired)) => {
                    let key = expired.into_inner();
                    let Some(scheduled) = shared.scheduled.remove(&key) else {
                        continue;
                    };
                    shared.running.insert(
                        key.clone(),
                        Running {
                            trigger: scheduled.trigger,
                            follow_up: None,
                        },
                    );
                    shared.update_depth();
                    return Poll::Ready(Some((key, scheduled.trigger)));
                }
                // Empty: the DelayQueue keeps the waker and wakes it on the next insert; ours
                // is kept too for pause and close.
                Poll::Ready(None) | Poll::Pending => {
                    shared.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
