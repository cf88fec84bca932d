//! The work queue: keyed by Kustomization, coalescing, one run per key at a time, two lanes
//! (new work ahead of retries), per-key backoff with jitter after a failure: the key's own
//! retry schedule (a Kustomization's `retryInterval`, else its `interval`), else doubling.
//!
//! Triggers come from three places at once (webhook, watches, resync) and say the same thing
//! (look at this Kustomization again), so a key is held at most once: a newer trigger replaces
//! a waiting one, and a trigger that arrives while the key runs becomes a single follow-up run.
//!
//! Why lanes: with many Kustomizations failing (an unreachable artifact, a tenant without
//! rights) every resync and every backoff that ends puts them back in line, and a healthy
//! Kustomization's new revision must not queue behind all of them. Keys ready to run wait in
//! one of two lanes, each first-in first-out: [`Lane::New`] (a webhook, a watch event: a new
//! revision, a new spec) and [`Lane::Retry`] (the resync, the start, a failure's retry). A
//! worker that frees up always takes the oldest key of the new lane first. A key on backoff
//! waits in tokio-util's `DelayQueue` until its deadline and then joins the retry lane.
//!
//! The workers are a `Stream` of ready keys (`ready()`), so the caller chooses the concurrency
//! (`for_each_concurrent`, which asks for the next key only when a worker is free, so the
//! choice of lane is made at the last moment) and no task is spawned here.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::Stream;
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};

use crate::model::Trigger;
use crate::service::gate::GateOutcome;

/// How long a key waits after a failure: the key's own retry schedule when it states one (a
/// Kustomization's `spec.retryInterval`, else its `spec.interval`, as kustomize-controller
/// requeues a failed reconcile), else a doubling backoff; either moved at random by up to
/// `jitter` of itself, up or down, as Flux's runtime jitters its intervals.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BackoffPolicy {
    /// The shortest wait, whatever the key's schedule says; and the first wait of a key that
    /// states none, doubled at each further failure.
    pub base: Duration,
    /// The longest wait of a key that states no schedule of its own (a key that does waits
    /// its own interval, however long: that is what its controller does).
    pub max: Duration,
    /// The fraction of the wait added or taken away at random, so keys that failed together
    /// (an API server restart, a source-controller outage) do not retry together. fluxcd/pkg
    /// `runtime/jitter.Percent`: `d * (1 + p * (2r - 1))`, `r` uniform in `[0, 1)`;
    /// `--interval-jitter-percentage` defaults to 10.
    pub jitter: f64,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        // The floor and the fallback schedule (a HelmRelease's lane states no interval here)
        // are the old queue's; a Kustomization waits its own retryInterval/interval.
        BackoffPolicy {
            base: Duration::from_secs(2),
            max: Duration::from_secs(300),
            jitter: 0.1,
        }
    }
}

impl BackoffPolicy {
    /// The wait after `failures` consecutive failures (≥ 1) of a key whose own retry schedule
    /// is `interval` (`None` or zero: none), with `sample` in `[0, 1)` choosing the jitter.
    /// Pure, so the schedule is table-tested.
    pub fn delay(&self, failures: u32, interval: Option<Duration>, sample: f64) -> Duration {
        let wait = match interval.filter(|d| !d.is_zero()) {
            Some(interval) => interval.max(self.base),
            None => {
                let exponent = failures.saturating_sub(1).min(30);
                self.base
                    .saturating_mul(1u32 << exponent)
                    .min(self.max.max(self.base))
            }
        };
        let p = self.jitter.clamp(0.0, 0.99);
        let factor = 1.0 + p * (2.0 * sample.clamp(0.0, 1.0) - 1.0);
        wait.mul_f64(factor)
    }
}

/// Where a ready key waits. Ordered: a worker takes from the first lane that holds a key.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// Something changed: a webhook, a watch event (a new source revision, a new or changed
    /// Kustomization).
    New,
    /// Nothing new was seen: the periodic resync, the start, a failure's retry.
    Retry,
}

impl Lane {
    /// The lane a push with `trigger` goes to. Pure, so table-tested.
    pub fn of(trigger: Trigger) -> Lane {
        match trigger {
            Trigger::Webhook | Trigger::Watch => Lane::New,
            Trigger::Resync | Trigger::Startup => Lane::Retry,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Lane::New => "new",
            Lane::Retry => "retry",
        }
    }
}

/// What the queue does once a run ended, by the gate's outcome. Pure, so table-tested.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum After {
    /// Finished, refused, superseded, not handled, or left for the resync (deferred claims):
    /// the backoff is forgotten and only a follow-up trigger runs it again.
    Forget,
    /// Failed: run again after the backoff, in the retry lane.
    Retry,
}

impl After {
    pub fn of(outcome: &GateOutcome) -> After {
        match outcome {
            GateOutcome::Done(_) | GateOutcome::Deferred | GateOutcome::NotHandled => After::Forget,
            GateOutcome::Failed { .. } => After::Retry,
        }
    }
}

/// How many keys wait where (see [`Queue::waiting`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Waiting {
    /// Ready, in the new lane.
    pub new: usize,
    /// Ready, in the retry lane.
    pub retry: usize,
    /// Waiting for a deadline (a failure's backoff).
    pub backing_off: usize,
    /// Running, with a follow-up run held for when they finish.
    pub follow_ups: usize,
}

impl Waiting {
    pub fn total(&self) -> usize {
        self.new + self.retry + self.backing_off + self.follow_ups
    }
}

/// Where a key that is not running waits.
enum Slot {
    /// Until `deadline` (a failure's backoff), then it joins its lane.
    Delayed {
        slot: delay_queue::Key,
        deadline: Instant,
    },
    /// In its lane, at `ticket` (the lane's order).
    Ready { ticket: u64 },
}

struct Scheduled {
    trigger: Trigger,
    lane: Lane,
    slot: Slot,
}

struct Running {
    trigger: Trigger,
    /// A trigger that arrived during the run, whether it was urgent, and its lane.
    follow_up: Option<FollowUp>,
}

#[derive(Copy, Clone)]
struct FollowUp {
    trigger: Trigger,
    urgent: bool,
    lane: Lane,
}

struct Backoff {
    failures: u32,
    until: Instant,
    /// What the last failure said: a retry failing the same way is not news (one log line
    /// per change, [`Completed::repeated`]).
    message: String,
}

/// How a run's end was taken ([`Queue::complete_after`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completed {
    /// The wait before a failed run's retry.
    pub retry_in: Option<Duration>,
    /// The failure says what the one before it said (same message): not news.
    pub repeated: bool,
}

struct Shared<K> {
    delay: DelayQueue<K>,
    scheduled: HashMap<K, Scheduled>,
    /// The ready keys, by `(lane, ticket)`: the first entry is the next handed out.
    ready: BTreeMap<(Lane, u64), K>,
    next_ticket: u64,
    running: HashMap<K, Running>,
    backoff: HashMap<K, Backoff>,
    policy: BackoffPolicy,
    paused: bool,
    closed: bool,
    waker: Option<Waker>,
    depth: Gauge,
}

/// Two triggers for one key make one: the newer trigger (what the record will name, as
/// before lanes) in the better lane of the two. A resync never demotes a webhook waiting in
/// the new lane.
fn merge(old: (Trigger, Lane), new: (Trigger, Lane)) -> (Trigger, Lane) {
    (new.0, old.1.min(new.1))
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

    fn ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    /// Puts `key` at the end of `lane` (ready now).
    fn enqueue(&mut self, key: &K, lane: Lane) -> Slot {
        let ticket = self.ticket();
        self.ready.insert((lane, ticket), key.clone());
        Slot::Ready { ticket }
    }

    /// Holds `key` in `lane` until `deadline` (ready now when it has passed), or sooner when it
    /// already waits for an earlier one. A key already waiting keeps its place unless it moves
    /// up a lane or its deadline comes sooner.
    fn schedule(&mut self, key: K, trigger: Trigger, lane: Lane, deadline: Instant) {
        let now = Instant::now();
        let due_now = deadline <= now;
        match self.scheduled.remove(&key) {
            Some(old) => {
                let (trigger, lane) = merge((old.trigger, old.lane), (trigger, lane));
                let slot = match old.slot {
                    // Waits in its lane already: moved only up a lane.
                    Slot::Ready { ticket } if lane == old.lane => Slot::Ready { ticket },
                    Slot::Ready { ticket } => {
                        self.ready.remove(&(old.lane, ticket));
                        self.enqueue(&key, lane)
                    }
                    Slot::Delayed { slot, .. } if due_now => {
                        self.delay.try_remove(&slot);
                        self.enqueue(&key, lane)
                    }
                    Slot::Delayed {
                        slot,
                        deadline: old_deadline,
                    } => {
                        let deadline = deadline.min(old_deadline);
                        self.delay.reset_at(&slot, deadline);
                        Slot::Delayed { slot, deadline }
                    }
                };
                self.scheduled.insert(
                    key,
                    Scheduled {
                        trigger,
                        lane,
                        slot,
                    },
                );
            }
            None => {
                let slot = if due_now {
                    self.enqueue(&key, lane)
                } else {
                    Slot::Delayed {
                        slot: self.delay.insert_at(key.clone(), deadline),
                        deadline,
                    }
                };
                self.scheduled.insert(
                    key,
                    Scheduled {
                        trigger,
                        lane,
                        slot,
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
        let lane = Lane::of(trigger);
        if let Some(running) = self.running.get_mut(&key) {
            let follow_up = match running.follow_up {
                Some(old) => {
                    let (trigger, lane) = merge((old.trigger, old.lane), (trigger, lane));
                    FollowUp {
                        trigger,
                        urgent: urgent || old.urgent,
                        lane,
                    }
                }
                None => FollowUp {
                    trigger,
                    urgent,
                    lane,
                },
            };
            running.follow_up = Some(follow_up);
        } else {
            let now = Instant::now();
            let deadline = match self.backoff.get(&key) {
                Some(b) if b.until > now => b.until,
                _ => now,
            };
            self.schedule(key, trigger, lane, deadline);
        }
        self.update_depth();
    }

    /// Moves every key whose deadline passed into its lane; registers the timer's waker.
    fn promote_expired(&mut self, cx: &mut Context<'_>) {
        while let Poll::Ready(Some(expired)) = self.delay.poll_expired(cx) {
            let key = expired.into_inner();
            let Some(lane) = self.scheduled.get(&key).map(|s| s.lane) else {
                continue;
            };
            let slot = self.enqueue(&key, lane);
            if let Some(s) = self.scheduled.get_mut(&key) {
                s.slot = slot;
            }
        }
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
                ready: BTreeMap::new(),
                next_ticket: 0,
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

    /// Queues `key` in the lane of `trigger`, to run as soon as it may: now, or when a
    /// failure's backoff ends.
    pub fn push(&self, key: K, trigger: Trigger) {
        self.lock().push(key, trigger, false);
    }

    /// Queues `key` in the lane of `trigger` to run now, forgetting any backoff: something
    /// changed (a new revision, a new spec, a webhook) that makes the earlier failure old news.
    pub fn push_now(&self, key: K, trigger: Trigger) {
        self.lock().push(key, trigger, true);
    }

    /// Records how the run of `key` ended (the gate's outcome, as it returned it) and
    /// schedules what follows it; returns the wait before a failed run's retry. A key that
    /// states no retry schedule of its own ([`Queue::complete_after`]).
    pub fn complete(&self, key: &K, outcome: &GateOutcome) -> Option<Duration> {
        self.complete_after(key, outcome, None).retry_in
    }

    /// [`Queue::complete`] for a key whose own retry schedule is `interval` (a
    /// Kustomization's `retryInterval`, else its `interval`): a failure waits that long, give
    /// or take the jitter, as its controller would before trying again.
    pub fn complete_after(
        &self,
        key: &K,
        outcome: &GateOutcome,
        interval: Option<Duration>,
    ) -> Completed {
        let mut shared = self.lock();
        let Some(running) = shared.running.remove(key) else {
            return Completed::default();
        };
        let now = Instant::now();
        let completed = match (After::of(outcome), outcome) {
            (After::Retry, GateOutcome::Failed { message }) => {
                let previous = shared.backoff.remove(key);
                let failures = previous.as_ref().map_or(0, |b| b.failures) + 1;
                let repeated = previous.is_some_and(|b| b.message == *message);
                let wait = shared
                    .policy
                    .delay(failures, interval, rand::random_range(0.0..1.0));
                shared.backoff.insert(
                    key.clone(),
                    Backoff {
                        failures,
                        until: now + wait,
                        message: message.clone(),
                    },
                );
                // A trigger that arrived during the failing run waits out the backoff too: it
                // was most likely about the revision that just failed. The caller pushes again
                // with `push_now` when it knows something changed since.
                let trigger = running.follow_up.map_or(running.trigger, |f| f.trigger);
                if !shared.closed {
                    shared.schedule(key.clone(), trigger, Lane::Retry, now + wait);
                }
                Completed {
                    retry_in: Some(wait),
                    repeated,
                }
            }
            _ => {
                shared.backoff.remove(key);
                if let Some(f) = running.follow_up {
                    shared.schedule(key.clone(), f.trigger, f.lane, now);
                }
                Completed::default()
            }
        };
        shared.update_depth();
        completed
    }

    /// Consecutive failures of `key` so far (0 after a success).
    pub fn failures(&self, key: &K) -> u32 {
        self.lock().backoff.get(key).map_or(0, |b| b.failures)
    }

    /// Keys waiting (not running), follow-ups included.
    pub fn depth(&self) -> usize {
        self.waiting().total()
    }

    /// Keys waiting, by where they wait.
    pub fn waiting(&self) -> Waiting {
        let shared = self.lock();
        let ready_in = |lane: Lane| shared.ready.range((lane, 0)..=(lane, u64::MAX)).count();
        let new = ready_in(Lane::New);
        let retry = ready_in(Lane::Retry);
        Waiting {
            new,
            retry,
            backing_off: shared.scheduled.len() - new - retry,
            follow_ups: shared
                .running
                .values()
                .filter(|r| r.follow_up.is_some())
                .count(),
        }
    }

    /// The lane `key` waits in, if it waits (not running).
    pub fn lane(&self, key: &K) -> Option<Lane> {
        self.lock().scheduled.get(key).map(|s| s.lane)
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

    /// The keys due, one at a time, each with the trigger that queued it last: the new lane's
    /// first, then the retry lane's, each oldest first. A key is not handed out again until
    /// [`Queue::complete`] is called for it.
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
        if shared.closed {
            return Poll::Ready(None);
        }
        // Our waker is kept for pushes, pause and close; the DelayQueue keeps it for deadlines.
        shared.waker = Some(cx.waker().clone());
        if shared.paused {
            return Poll::Pending;
        }
        shared.promote_expired(cx);
        let Some((_, key)) = shared.ready.pop_first() else {
            return Poll::Pending;
        };
        let Some(scheduled) = shared.scheduled.remove(&key) else {
            // Not reachable: a ready key is always scheduled. Ask to be polled again.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        };
        shared.running.insert(
            key.clone(),
            Running {
                trigger: scheduled.trigger,
                follow_up: None,
            },
        );
        shared.update_depth();
        Poll::Ready(Some((key, scheduled.trigger)))
    }
}

#[cfg(test)]
mod tests;
