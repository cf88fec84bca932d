//! The observe half of the hand-off, driven by the service's watches, holding no worker.
//!
//! A run ends at the hand-off (suspend: `spec.suspend=false` written; reconcile: the
//! `requestedAt` token written) and registers the open gate here. From then on only watch
//! events and a periodic tick move it:
//! - a Kustomization event carrying Flux's answer for the revision (applied, failed, or an
//!   attempt of another revision: `raced`) closes the gate (suspend: `spec.suspend=true`)
//!   and records the answer on the revision's record;
//! - a source event moving to another revision closes it at once, before the run of the new
//!   revision is queued, so Flux never reads an artifact that was not converged;
//! - the hold annotation closes it and keeps everything stopped until removed;
//! - the tick closes gates past `--handoff-timeout` (re-reading the Kustomization first, so
//!   an answer a missed event carried is not taken for a timeout) and re-opens, on Flux's
//!   retry schedule with backoff, a revision Flux failed or did not answer while the source
//!   still publishes it and the spec is unchanged: a failed revision is never left frozen.
//!
//! Every decision is a transition of `state.rs` (pure, table-tested), taken under one lock
//! from the event itself; the writes it asks for run here, in a task of their own, so a slow
//! API call never stalls a watch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio_util::task::TaskTracker;

use tokio::time::Instant;

use crate::flux::objects::{self, Kustomization};
use crate::gated::Gated as _;
use crate::model::HandoffAction;
use crate::model::Key;
use crate::model::{FluxOutcome, FluxResult, GateMode, HandoffAttempt, RevisionRecord};
use crate::records::results::Results;
use crate::service::gate::handoff::{self, Since};
use crate::service::gate::state::{
    self, Close, Closing, Due, GateState, Open, Reopen, ReopenCheck, Step, retry_delay,
};

/// What the observer needs; built by the gate from its own configuration.
#[derive(Clone)]
pub struct ObserverConfig {
    pub client: kube::Client,
    pub results: Results,
    pub call_timeout: Duration,
    pub handoff_timeout: Duration,
    pub default_gate: GateMode,
    /// `--no-cross-namespace-refs` negated: how the source is read before a re-open.
    pub allow_cross_namespace: bool,
}

/// The open (and held, and waiting-to-reopen) gates. Cheap to clone.
#[derive(Clone)]
pub struct Observer {
    inner: Arc<Inner>,
}

struct Inner {
    config: ObserverConfig,
    gates: Mutex<HashMap<Key, GateState>>,
    /// Every task the observer starts (a re-read after a hand-off, a close): owned here so
    /// shutdown waits for them (`Running::shutdown`) instead of leaving writes in flight.
    tasks: TaskTracker,
}

/// Whether a gate open in `mode` closes when its source moves on (the mode's own rule).
fn closes_when_moved(mode: GateMode) -> bool {
    super::modes::of(mode).is_some_and(|m| m.closes_when_the_source_moves())
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

fn later(delay: Duration) -> String {
    let millis = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_millis(millis))
        .unwrap_or(jiff::Timestamp::MAX)
        .to_string()
}

impl Observer {
    pub fn new(config: ObserverConfig) -> Self {
        Observer {
            inner: Arc::new(Inner {
                config,
                gates: Mutex::new(HashMap::new()),
                tasks: TaskTracker::new(),
            }),
        }
    }

    /// The observer's tasks: shutdown closes the tracker and waits for them.
    pub fn tasks(&self) -> &TaskTracker {
        &self.inner.tasks
    }

    fn gates(&self) -> MutexGuard<'_, HashMap<Key, GateState>> {
        self.inner.gates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state of `key`'s gate (`Closed` when not tracked).
    pub fn state(&self, key: &Key) -> GateState {
        self.gates()
            .get(key)
            .cloned()
            .unwrap_or(GateState::Closed { reopen: None })
    }

    /// Why `key` is held, as the last Kustomization event said.
    pub fn held(&self, key: &Key) -> Option<String> {
        match self.gates().get(key) {
            Some(GateState::Held { reason }) => Some(reason.clone()),
            _ => None,
        }
    }

    /// How many gates are open now.
    pub fn open_count(&self) -> usize {
        self.gates()
            .values()
            .filter(|s| matches!(s, GateState::Open(_)))
            .count()
    }

    /// A run handed `open.revision` off: the gate is open until Flux answers. Replaces
    /// whatever was tracked (a re-open of an older revision is moot once a newer one is
    /// handed off). A hold that arrived during the converge wins: the gate closes at once.
    pub fn opened(&self, key: Key, open: Open) {
        if let Some(close) = self.transition(&key, |state| state::on_opened(state, open)) {
            self.spawn_close(key, close);
        }
    }

    /// Moves `key`'s gate by `step` (a transition of `state.rs`) under the lock; returns the
    /// close it asks for.
    fn transition(&self, key: &Key, step: impl FnOnce(Option<GateState>) -> Step) -> Option<Close> {
        let mut gates = self.gates();
        let Step { next, close } = step(gates.remove(key));
        if let Some(next) = next {
            gates.insert(key.clone(), next);
        }
        close
    }

    /// Reads the Kustomization once, in a task, as if a watch event had brought it: an answer
    /// Flux gave between the hand-off's write and [`Observer::opened`] is not missed.
    pub fn check_soon(&self, key: Key) {
        let observer = self.clone();
        self.inner.tasks.spawn(async move {
            match observer.read(&key).await {
                Ok(ks) => observer.kustomization(&ks),
                Err(error) => {
                    tracing::debug!(kustomization = %key, %error, "re-reading after the hand-off; the watch and the tick follow it")
                }
            }
        });
    }

    /// A Kustomization event (the service's watch): holds, and Flux's answer to an open gate.
    pub fn kustomization(&self, ks: &Kustomization) {
        let (Some(namespace), Some(name)) = (&ks.metadata.namespace, &ks.metadata.name) else {
            return;
        };
        let key = Key::kustomization(namespace, name);
        let gating = ks.gating(self.inner.config.default_gate);
        let off = gating.mode == GateMode::Off;
        let close = self.transition(&key, |state| {
            state::on_object(state, off, gating.hold, |open| {
                handoff::flux_verdict(
                    ks.status.as_ref(),
                    &open.revision,
                    &open.since,
                    open.attempted_before.as_deref(),
                )
            })
        });
        if let Some(close) = close {
            if let Closing::Held(reason) = &close.closing {
                tracing::info!(kustomization = %key, %reason, "held: closing the open gate");
            }
            self.spawn_close(key, close);
        }
    }

    /// A source event: `keys` read a source that now publishes `revision`. An open gate for
    /// another revision closes at once, and a re-open waiting for one is dropped (the new
    /// revision is converged first; the caller queues it after this returns).
    pub fn source_moved(&self, keys: &[Key], revision: Option<&str>) {
        let closing: Vec<_> = keys
            .iter()
            .filter_map(|key| {
                let close = self.transition(key, |state| {
                    state::on_source(state, revision, closes_when_moved)
                })?;
                Some((key.clone(), close))
            })
            .collect();
        for (key, close) in closing {
            tracing::info!(kustomization = %key, revision = %close.open.revision,
                to = revision.unwrap_or("no artifact"), "the source moved on while the gate was open: closing it");
            self.spawn_close(key, close);
        }
    }

    /// A run is converging `revision` while the gate is still open for another (suspend
    /// mode): the source moved on between that hand-off's record and its registration
    /// ([`Observer::opened`]), so [`Observer::source_moved`] did not find it open. The run has
    /// suspended the Kustomization already (it does before every converge); this closes the
    /// older gate and records why on its record, before the new revision's record is written.
    pub async fn superseded(&self, key: &Key, revision: &str) {
        // Only the open gate: a re-open waiting for the older revision finds the source moved
        // on when it is due, and says so on its record.
        let close = self.transition(key, |state| {
            let step = state::on_source(state.clone(), Some(revision), closes_when_moved);
            if step.close.is_some() {
                step
            } else {
                Step {
                    next: state,
                    close: None,
                }
            }
        });
        if let Some(Close { open, closing }) = close {
            tracing::info!(kustomization = %key, revision = %open.revision, to = revision,
                "the source moved on while the gate was open: closing it");
            self.close_written(key.clone(), open, closing, None).await;
        }
    }

    /// Taking the lead: the gates a previous process left open (its newest record handed off,
    /// Flux's answer pending) are followed again, from the Kustomization as it is now, so none
    /// is left open for ever; an answer Flux gave meanwhile closes it at once.
    pub async fn recover(&self, records: Vec<(Key, RevisionRecord)>) {
        let c = &self.inner.config;
        for (key, record) in records {
            let Some(handoff) = record.handoff.as_ref().filter(|_| {
                record.state == crate::model::RevisionState::Converged
                    && crate::service::index::gate_open(&record)
            }) else {
                continue;
            };
            if self.gates().contains_key(&key) {
                continue;
            }
            let ks = match self.read(&key).await {
                Ok(ks) => ks,
                Err(error) => {
                    tracing::warn!(kustomization = %key, %error, "reading a Kustomization whose gate was left open");
                    continue;
                }
            };
            let Some(since) =
                super::modes::of(handoff.mode).and_then(|m| m.recovered(handoff, &ks))
            else {
                continue;
            };
            tracing::info!(kustomization = %key, revision = %record.revision, "following a gate a previous process left open");
            self.opened(
                key,
                Open {
                    mode: handoff.mode,
                    revision: record.revision.clone(),
                    started_at: record.started_at.clone(),
                    since,
                    attempted_before: ks
                        .status
                        .as_ref()
                        .and_then(|s| s.last_attempted_revision.clone()),
                    deadline: Instant::now() + c.handoff_timeout,
                    attempt: handoff.attempts.len().max(1) as u32,
                },
            );
            self.kustomization(&ks);
        }
    }

    /// The Kustomization is gone: nothing to close or re-open.
    pub fn forget(&self, key: &Key) {
        self.gates().remove(key);
    }

    /// Closes the gates past their deadline and re-opens the ones due. Awaits what it starts.
    pub async fn tick(&self) {
        let now = Instant::now();
        let (expired, due): (Vec<_>, Vec<_>) = {
            let mut gates = self.gates();
            let mut expired = Vec::new();
            let mut due = Vec::new();
            for (key, gate) in std::mem::take(&mut *gates) {
                let (next, found) = state::on_tick(gate, now);
                match found {
                    Some(Due::Expired(open)) => expired.push((key.clone(), open)),
                    Some(Due::Reopen(reopen)) => due.push((key.clone(), reopen)),
                    None => {}
                }
                if let Some(next) = next {
                    gates.insert(key, next);
                }
            }
            (expired, due)
        };
        for (key, open) in expired {
            // An answer whose event was missed (a watch relist) is still an answer.
            let closing = match self.read(&key).await {
                Ok(ks) => handoff::flux_verdict(
                    ks.status.as_ref(),
                    &open.revision,
                    &open.since,
                    open.attempted_before.as_deref(),
                )
                .map(Closing::Answer)
                .unwrap_or(Closing::Timeout),
                Err(_) => Closing::Timeout,
            };
            self.close(key, open, closing).await;
        }
        for (key, reopen) in due {
            self.reopen(key, reopen).await;
        }
    }

    /// Ticks every `period`, forever.
    pub async fn run_ticks(self, period: Duration) {
        let mut ticker = tokio::time::interval(period.max(Duration::from_millis(10)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            self.tick().await;
        }
    }

    async fn read(&self, key: &Key) -> Result<Kustomization, objects::ObjectsError> {
        let c = &self.inner.config;
        objects::get_kustomization_within(&c.client, &key.namespace, &key.name, c.call_timeout)
            .await
    }

    fn spawn_close(&self, key: Key, Close { open, closing }: Close) {
        let observer = self.clone();
        self.inner
            .tasks
            .spawn(async move { observer.close(key, open, closing).await });
    }

    /// Closes an open gate (suspend: `spec.suspend=true`), records why on the revision's
    /// record, and schedules the re-open a failure or a timeout calls for.
    async fn close(&self, key: Key, open: Open, closing: Closing) {
        let c = &self.inner.config;
        let mut suspended = None;
        if let Some(mode) = super::modes::of(open.mode) {
            match mode.close(&c.client, &key, c.call_timeout).await {
                Ok(ks) => suspended = ks,
                Err(error) => {
                    // Still open: the next tick tries again (and re-reads Flux's answer).
                    tracing::warn!(kustomization = %key, %error, "closing the gate failed; retried at the next tick");
                    let mut open = open;
                    open.deadline = Instant::now();
                    self.gates().entry(key).or_insert(GateState::Open(open));
                    return;
                }
            }
        }
        self.close_written(key, open, closing, suspended).await;
    }

    /// The rest of [`Observer::close`] once the gate is closed on the cluster: `suspended` is
    /// the Kustomization its suspend write returned (its spec schedules a retry), `None` when
    /// nothing was written here.
    async fn close_written(
        &self,
        key: Key,
        open: Open,
        closing: Closing,
        suspended: Option<Kustomization>,
    ) {
        let c = &self.inner.config;
        let generation = suspended.as_ref().and_then(|ks| ks.metadata.generation);
        let schedule = suspended.map(|ks| (ks.spec.retry_interval, ks.spec.interval));
        let flux = closing.flux(&open, c.handoff_timeout);
        let retry = match (schedule, generation) {
            (Some((retry_interval, interval)), Some(generation)) if closing.retries() => {
                let delay =
                    retry_delay(retry_interval.as_deref(), interval.as_deref(), open.attempt);
                Some((delay, generation))
            }
            _ => None,
        };
        tracing::info!(kustomization = %key, revision = %open.revision, flux = flux.outcome.as_str(),
            attempt = open.attempt, retry_in = ?retry.map(|(d, _)| d), "gate closed");
        self.update(&key, &open.revision, &open.started_at, |record| {
            if let Some(h) = &mut record.handoff {
                if let Some(action) = super::modes::of(open.mode).and_then(|m| m.closed_action()) {
                    h.action = action;
                    h.resuspended_at = Some(now());
                }
                if let Some(last) = h.attempts.last_mut() {
                    last.outcome = flux.outcome;
                    last.message = flux.message.clone();
                }
                h.retry_at = retry.map(|(delay, _)| later(delay));
            }
            if matches!(flux.outcome, FluxOutcome::Timeout | FluxOutcome::Raced) {
                record.warnings.push(format!(
                    "hand-off: {}",
                    flux.message.clone().unwrap_or_default()
                ));
            }
            record.flux = Some(flux.clone());
        })
        .await;
        if let Some((delay, generation)) = retry {
            let reopen = Reopen {
                revision: open.revision.clone(),
                started_at: open.started_at.clone(),
                at: Instant::now() + delay,
                generation,
                attempts: open.attempt,
            };
            self.settle(key, reopen);
        }
    }

    /// Opens the gate again for a revision Flux failed or did not answer, if it is still the
    /// one to apply: same spec (the generation the close left), not held, the source still
    /// publishing it, Flux not having applied it. No new converge: the revision and the spec
    /// are the ones converged.
    async fn reopen(&self, key: Key, reopen: Reopen) {
        let c = &self.inner.config;
        let ks = match self.read(&key).await {
            Ok(ks) => ks,
            Err(error) => {
                tracing::warn!(kustomization = %key, %error, "reading the Kustomization to re-open its gate; retried at the next tick");
                self.requeue(key, reopen);
                return;
            }
        };
        let gating = ks.gating(c.default_gate);
        let applied = ks
            .status
            .as_ref()
            .and_then(|s| s.last_applied_revision.as_deref())
            == Some(reopen.revision.as_str());
        let why_not = state::why_not_reopen(ReopenCheck {
            reopens: super::modes::of(gating.mode).is_some_and(|m| m.reopens()),
            held: gating.hold.is_some(),
            same_generation: ks.metadata.generation == Some(reopen.generation),
            suspended: ks.spec.suspend,
            applied,
        });
        let why_not = match why_not {
            Some(why) => Some(why),
            None => match objects::get_source_within(
                &c.client,
                &ks,
                c.allow_cross_namespace,
                c.call_timeout,
            )
            .await
            {
                Ok(source) => {
                    let publishes = source.status.artifact.map(|a| a.revision);
                    (publishes.as_deref() != Some(reopen.revision.as_str()))
                        .then_some("the source moved on")
                }
                Err(error) => {
                    tracing::warn!(kustomization = %key, %error, "reading the source to re-open the gate; retried at the next tick");
                    self.requeue(key, reopen);
                    return;
                }
            },
        };
        if let Some(why) = why_not {
            tracing::info!(kustomization = %key, revision = %reopen.revision, why, "not re-opening the gate");
            self.update(&key, &reopen.revision, &reopen.started_at, |record| {
                if let Some(h) = &mut record.handoff {
                    h.retry_at = None;
                }
                // Flux's own retry applied it while the gate was still open (before the close
                // that followed its failure took effect): the record says so, not the failure.
                if applied {
                    record.flux = Some(FluxResult {
                        message: Some(
                            "Flux applied it on its own retry before the gate closed".to_string(),
                        ),
                        ..FluxResult::applied(Some(reopen.revision.clone()))
                    });
                }
            })
            .await;
            return;
        }
        let attempted_before = ks
            .status
            .as_ref()
            .and_then(|s| s.last_attempted_revision.clone());
        let written = match handoff::set_suspend(
            &c.client,
            &key.namespace,
            &key.name,
            false,
            c.call_timeout,
        )
        .await
        {
            Ok(ks) => ks,
            Err(error) => {
                tracing::warn!(kustomization = %key, %error, "re-opening the gate failed; retried at the next tick");
                self.requeue(key, reopen);
                return;
            }
        };
        let attempt = reopen.attempts + 1;
        let open = Open {
            mode: gating.mode,
            revision: reopen.revision.clone(),
            started_at: reopen.started_at.clone(),
            since: Since::Generation(written.metadata.generation.unwrap_or(0)),
            attempted_before,
            deadline: Instant::now() + c.handoff_timeout,
            attempt,
        };
        tracing::info!(kustomization = %key, revision = %open.revision, attempt, "gate re-opened on Flux's retry schedule");
        let at = now();
        self.update(&key, &reopen.revision, &reopen.started_at, |record| {
            if let Some(h) = &mut record.handoff {
                h.action = HandoffAction::Unsuspended;
                h.retry_at = None;
                h.attempts.push(HandoffAttempt {
                    at: at.clone(),
                    outcome: FluxOutcome::Pending,
                    message: None,
                });
            }
            record.flux = Some(FluxResult {
                outcome: FluxOutcome::Pending,
                applied_revision: None,
                message: Some(format!("gate re-opened (attempt {attempt})")),
                attempted_revision: None,
            });
        })
        .await;
        self.opened(key, open);
    }

    /// A re-open that could not be decided: tried again at the next tick, unless something
    /// newer took the key.
    fn requeue(&self, key: Key, reopen: Reopen) {
        self.settle(key, reopen);
    }

    /// Schedules `reopen` unless something newer (a hand-off, a hold) took the key meanwhile
    /// ([`state::on_closed`]).
    fn settle(&self, key: Key, reopen: Reopen) {
        let mut gates = self.gates();
        let current = gates.remove(&key);
        gates.insert(key, state::on_closed(current, reopen));
    }

    /// Changes the record of `revision` started at `started_at` and persists it.
    async fn update(
        &self,
        key: &Key,
        revision: &str,
        started_at: &str,
        change: impl FnOnce(&mut RevisionRecord),
    ) {
        let results = &self.inner.config.results;
        let Some(mut record) = results
            .history(&key.namespace, &key.name)
            .into_iter()
            .find(|r| r.revision == revision && r.started_at == started_at)
        else {
            tracing::debug!(kustomization = %key, %revision, "the record has left the history");
            return;
        };
        change(&mut record);
        if let Err(error) = results.put(&key.namespace, &key.name, record).await {
            tracing::warn!(kustomization = %key, %revision, %error, "could not persist the hand-off's record");
        }
    }
}
