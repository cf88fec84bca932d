//! The one lane every gated kind runs on: each kind's watches push keys into one queue, the
//! workers take them (at most `--workers` runs at once, one per object), ask the key's kind
//! whether it still runs, run it, and complete it with the kind's retry schedule; the resync
//! asks every kind what is due; nothing runs while this replica does not lead; shutdown drains
//! the runs inside the windows an orphan delete opened. The lane never names a kind: a
//! [`Key`] carries its kind, and the kind's [`GatedKind`] says the rest.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::hook_limit::HookLimit;
use super::kind::{GatedKind, Take};
use super::leadership::windows::RunWindows;
use super::queue::Queue;
use crate::flux::event::Event;
use crate::model::{GateOutcome, Key, Kind, Trigger};
use crate::records::metrics::Metrics;

/// The kinds the service gates, in the order `/status` lists them, and what they share: the
/// queue and the hook limit. Cheap to clone.
#[derive(Clone)]
pub struct Lane {
    kinds: Arc<Vec<Arc<dyn GatedKind>>>,
    queue: Queue<Key>,
    hook_limit: Arc<HookLimit<Key>>,
}

impl Lane {
    /// A lane over `kinds` (each at most once, each made with `queue` to push into), paused
    /// until this replica leads.
    pub fn new(
        kinds: Vec<Arc<dyn GatedKind>>,
        queue: Queue<Key>,
        hook_limit: Arc<HookLimit<Key>>,
    ) -> Self {
        queue.pause(true);
        Lane {
            kinds: Arc::new(kinds),
            queue,
            hook_limit,
        }
    }

    /// The kinds, in `/status` order.
    pub fn kinds(&self) -> &[Arc<dyn GatedKind>] {
        &self.kinds
    }

    /// The kind `kind` names, if the service gates it.
    pub fn kind(&self, kind: Kind) -> Option<&Arc<dyn GatedKind>> {
        self.kinds.iter().find(|k| k.kind() == kind)
    }

    /// The kind whose resource plural is `plural` (`/status/{plural}/...`).
    pub fn kind_of_plural(&self, plural: &str) -> Option<&Arc<dyn GatedKind>> {
        self.kinds.iter().find(|k| k.kind().plural() == plural)
    }

    pub fn queue(&self) -> &Queue<Key> {
        &self.queue
    }

    /// Every kind's watches and other tasks, to run for the service's life.
    pub fn tasks(&self, client: &kube::Client) -> Vec<BoxFuture<'static, ()>> {
        let mut tasks = Vec::new();
        for kind in self.kinds.iter() {
            tasks.extend(kind.watches(client));
            tasks.extend(kind.tasks());
        }
        tasks
    }

    /// The watches not synced yet, of every kind (`/readyz`).
    pub fn unsynced(&self) -> Vec<&'static str> {
        self.kinds.iter().flat_map(|k| k.unsynced()).collect()
    }

    /// Waits until every kind's watches listed everything once.
    pub async fn synced(&self, poll: Duration) {
        while !self.unsynced().is_empty() {
            tokio::time::sleep(poll).await;
        }
    }

    /// Queues what every kind says is due now with `trigger`; returns how many.
    pub async fn queue_due(&self, trigger: Trigger) -> usize {
        let mut queued = 0;
        for kind in self.kinds.iter() {
            queued += kind.queue_due(trigger).await;
        }
        queued
    }

    /// Takes the lead: each kind first reads its records, then takes over what the last
    /// leader left open; then everything due is queued and the workers run.
    pub async fn lead(&self) {
        for kind in self.kinds.iter() {
            kind.results().loaded().await;
        }
        for kind in self.kinds.iter() {
            kind.lead().await;
        }
        let queued = self.queue_due(Trigger::Startup).await;
        tracing::info!(queued, "leading: converging");
        self.queue.pause(false);
    }

    /// Stops running anything (this replica does not lead any more).
    pub fn follow(&self) {
        self.queue.pause(true);
        tracing::info!("not leading: serving status only");
    }

    /// Queues every kind's due objects every `period` once the watches are synced: a lost
    /// event, a lost webhook, a hand-back never answered is seen at the latest then.
    pub async fn resync(self, period: Duration, metrics: Metrics) {
        let mut ticker = tokio::time::interval(period.max(Duration::from_millis(10)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate; the start of a leadership covers it.
        ticker.tick().await;
        loop {
            ticker.tick().await;
            if !self.unsynced().is_empty() {
                continue;
            }
            self.queue_due(Trigger::Resync).await;
            let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
            metrics.last_resync.set(now);
        }
    }

    /// Queues the objects a notification event (already authenticated and parsed) names, at
    /// most one run per object per `--hook-min-interval`; returns what it names, sorted, as
    /// `/hook` answers it (`namespace/name` of a Kustomization, `Kind/namespace/name` of
    /// another kind). Never waits on the cluster.
    pub fn hook(&self, event: &Event) -> Vec<String> {
        let object = &event.involved_object;
        let mut named = Vec::new();
        for kind in self.kinds.iter() {
            let route = kind.hook(event);
            for key in route.keys {
                // Answered the same either way: the caller learns nothing about timing.
                named.push(answer_name(&key));
                if !self.hook_limit.admit(&key) {
                    tracing::debug!(kind = %key.kind, object = %key, wedged = route.wedged,
                        "webhook inside --hook-min-interval: nothing queued (the watches and the resync are not limited)");
                    continue;
                }
                tracing::info!(kind = %key.kind, object = %key, event_kind = %object.kind,
                    event_object = %format!("{}/{}", object.namespace, object.name),
                    reason = %event.reason, wedged = route.wedged, "queued by webhook");
                // New work, and a hook runs now even on backoff: the limiter above is what
                // keeps a replayed or forged hook from turning into a retry storm.
                self.queue.push_now(key, Trigger::Webhook);
            }
        }
        named.sort();
        named
    }

    /// Queues `key` now if its kind handles it (a wake-up naming the object itself, under the
    /// hook limit); whether it names a handled object.
    pub fn wake(&self, key: Key) -> bool {
        let Some(kind) = self.kind(key.kind) else {
            return false;
        };
        if !kind.handles(&key) {
            return false;
        }
        if self.hook_limit.admit(&key) {
            tracing::info!(kind = %key.kind, object = %key, "queued by webhook");
            self.queue.push_now(key, Trigger::Webhook);
        }
        true
    }

    /// The workers: at most `workers` runs at once, one per object, whatever its kind. A key
    /// handed out runs only if its kind says it still does. `cut`: the shutdown grace has
    /// passed; a run is dropped as soon as it holds no window.
    pub async fn work(self, workers: usize, cut: CancellationToken) {
        self.queue
            .ready()
            .for_each_concurrent(workers.max(1), |(key, trigger)| {
                let (lane, cut) = (self.clone(), cut.clone());
                async move { lane.work_one(key, trigger, cut).await }
            })
            .await;
    }

    async fn work_one(&self, key: Key, trigger: Trigger, cut: CancellationToken) {
        let Some(kind) = self.kind(key.kind).cloned() else {
            tracing::warn!(kind = %key.kind, object = %key, "a key of a kind the service does not gate; dropped");
            self.queue.complete(&key, &GateOutcome::NotHandled);
            return;
        };
        let due = match kind.take(&key) {
            Take::Run { due } => due,
            Take::Skip(outcome) => {
                tracing::debug!(kind = %key.kind, object = %key, trigger = ?trigger, "not due; skipped");
                self.queue.complete(&key, &outcome);
                return;
            }
        };
        // The attempt this run is: a retry logs only its end (one line per attempt).
        let attempt = self.queue.failures(&key) + 1;
        if attempt == 1 {
            tracing::info!(kind = %key.kind, object = %key, trigger = ?trigger, due, "run");
        } else {
            tracing::debug!(kind = %key.kind, object = %key, trigger = ?trigger, due, attempt, "run");
        }
        let windows = RunWindows::default();
        let span = tracing::info_span!("run", kind = %key.kind, object = %key,
            revision = tracing::field::Empty);
        let outcome = tokio::select! {
            biased;
            outcome = windows.scope(kind.run(&key, trigger)).instrument(span) => outcome,
            () = async {
                cut.cancelled().await;
                windows.none_open().await;
            } => {
                tracing::warn!(kind = %key.kind, object = %key,
                    "stopped by the shutdown outside a window: run again by the next leader");
                let stopped = GateOutcome::Failed { message: "stopped by the shutdown".into() };
                self.queue.complete(&key, &stopped);
                return;
            }
        };
        // A failure waits the object's own retry schedule, as its controller would before
        // trying it again.
        let completed = self
            .queue
            .complete_after(&key, &outcome, kind.retry_interval(&key));
        let retry_in = completed.retry_in;
        match &outcome {
            GateOutcome::Done(state) => {
                tracing::info!(kind = %key.kind, object = %key, state = state.as_str(), "finished");
            }
            GateOutcome::Deferred => {
                tracing::info!(kind = %key.kind, object = %key, "deferred: claims grow once Bound");
            }
            GateOutcome::NotHandled => {}
            // One line per change: a retry failing the same way again is not news.
            GateOutcome::Failed { message } if completed.repeated => {
                tracing::debug!(kind = %key.kind, object = %key, error = %message, attempt,
                    retry_in = ?retry_in.unwrap_or_default(), "failed again; retrying with backoff");
            }
            GateOutcome::Failed { message } => {
                tracing::warn!(kind = %key.kind, object = %key, error = %message, attempt,
                    retry_in = ?retry_in.unwrap_or_default(), "failed; retrying with backoff");
            }
        }
        for now in kind.finished(&key, &outcome, retry_in) {
            self.queue.push_now(now, Trigger::Watch);
        }
    }
}

/// How `/hook` names an object it queued: `namespace/name` for a Kustomization (as it always
/// has), `Kind/namespace/name` for the other kinds.
fn answer_name(key: &Key) -> String {
    if key.kind == Kind::KUSTOMIZATION {
        key.to_string()
    } else {
        key.qualified()
    }
}
