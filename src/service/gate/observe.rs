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
//! Every decision is taken under one lock from the event itself; the writes it needs run in a
//! task of their own, so a slow API call never stalls a watch.

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
use crate::service::gate::state::{GateState, Open, Reopen};

/// The longest wait between two openings for the same revision, unless Flux's own interval is
/// longer (then that).
pub const RETRY_CAP: Duration = Duration::from_secs(3600);
/// The retry schedule when the Kustomization states none Flux would accept (Flux's default
/// interval is required in the CRD; this only guards a value that does not parse).
const DEFAULT_RETRY: Duration = Duration::from_secs(600);

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

/// Why a gate closes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Closing {
    /// Flux answered (applied, failed, raced).
    Answer(FluxResult),
    /// `--handoff-timeout` passed without an answer.
    Timeout,
    /// The source moved on to another revision (or lost its artifact) while open.
    SourceMoved(Option<String>),
    /// The hold annotation was set (or `spec.suspend` in reconcile mode).
    Held(String),
}

impl Closing {
    /// Whether the same converged revision is opened again later (suspend mode only: in
    /// reconcile mode Flux keeps retrying on its own).
    fn retries(&self) -> bool {
        match self {
            Closing::Answer(f) => f.outcome == FluxOutcome::Failed,
            Closing::Timeout => true,
            Closing::SourceMoved(_) | Closing::Held(_) => false,
        }
    }

    /// What the record shows as Flux's answer.
    fn flux(&self, open: &Open, timeout: Duration) -> FluxResult {
        let pending = |message: String| FluxResult {
            outcome: FluxOutcome::Pending,
            applied_revision: None,
            message: Some(message),
            attempted_revision: None,
        };
        match self {
            Closing::Answer(f) => f.clone(),
            Closing::Timeout => FluxResult {
                outcome: FluxOutcome::Timeout,
                applied_revision: None,
                message: Some(format!(
                    "Flux did not apply {} within {}",
                    open.revision,
                    humantime::format_duration(timeout)
                )),
                attempted_revision: None,
            },
            Closing::SourceMoved(to) => pending(format!(
                "the source moved on to {} before Flux answered: gate closed, the new revision is converged first",
                to.as_deref().unwrap_or("no artifact")
            )),
            Closing::Held(reason) => pending(format!("held ({reason}): gate closed")),
        }
    }
}

/// Takes `key`'s gate out of `gates` if it is open in suspend mode for a revision other than
/// `revision` (the one the source publishes now, `None` for no artifact): the gate a move of
/// the source closes.
fn take_moved(
    gates: &mut HashMap<Key, GateState>,
    key: &Key,
    revision: Option<&str>,
) -> Option<Open> {
    let moved = matches!(gates.get(key), Some(GateState::Open(open))
        if super::modes::of(open.mode).is_some_and(|m| m.closes_when_the_source_moves())
            && Some(open.revision.as_str()) != revision);
    if !moved {
        return None;
    }
    match gates.remove(key) {
        Some(GateState::Open(open)) => Some(open),
        _ => None,
    }
}

/// The wait before opening the gate again after `attempts` openings Flux failed or did not
/// answer: Flux's `retryInterval`, else its `interval`, doubled for each further attempt, at
/// most [`RETRY_CAP`] (or the base when that is longer). Pure, so the schedule is table-tested.
pub fn retry_delay(
    retry_interval: Option<&str>,
    interval: Option<&str>,
    attempts: u32,
) -> Duration {
    let parse = |text: Option<&str>| text.and_then(parse_go_duration).filter(|d| !d.is_zero());
    let base = parse(retry_interval)
        .or_else(|| parse(interval))
        .unwrap_or(DEFAULT_RETRY);
    let cap = RETRY_CAP.max(base);
    let doublings = attempts.saturating_sub(1).min(20);
    base.saturating_mul(1u32 << doublings).min(cap)
}

/// Flux's durations (`1m30s`): read where the Kustomization's fields are
/// ([`crate::flux::objects::parse_go_duration`]).
pub use crate::flux::objects::parse_go_duration;

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
        let held = {
            let mut gates = self.gates();
            match gates.get(&key) {
                Some(GateState::Held { reason }) => Some(reason.clone()),
                _ => {
                    gates.insert(key.clone(), GateState::Open(open.clone()));
                    None
                }
            }
        };
        if let Some(reason) = held {
            self.spawn_close(key, open, Closing::Held(reason));
        }
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
        let mut gates = self.gates();
        let state = gates.get(&key).cloned();
        match (state, gating.hold) {
            (_, _) if gating.mode == GateMode::Off => {
                gates.remove(&key);
            }
            (Some(GateState::Open(open)), Some(reason)) => {
                gates.insert(
                    key.clone(),
                    GateState::Held {
                        reason: reason.clone(),
                    },
                );
                drop(gates);
                tracing::info!(kustomization = %key, %reason, "held: closing the open gate");
                self.spawn_close(key, open, Closing::Held(reason));
            }
            (_, Some(reason)) => {
                gates.insert(key, GateState::Held { reason });
            }
            (Some(GateState::Held { .. }), None) => {
                // Resumed: the index makes whatever is due run at once.
                gates.remove(&key);
            }
            (Some(GateState::Open(open)), None) => {
                let answer = handoff::flux_verdict(
                    ks.status.as_ref(),
                    &open.revision,
                    &open.since,
                    open.attempted_before.as_deref(),
                );
                if let Some(answer) = answer {
                    gates.remove(&key);
                    drop(gates);
                    self.spawn_close(key, open, Closing::Answer(answer));
                }
            }
            (Some(GateState::Closed { .. }) | None, None) => {}
        }
    }

    /// A source event: `keys` read a source that now publishes `revision`. An open gate for
    /// another revision closes at once, and a re-open waiting for one is dropped (the new
    /// revision is converged first; the caller queues it after this returns).
    pub fn source_moved(&self, keys: &[Key], revision: Option<&str>) {
        let mut closing = Vec::new();
        {
            let mut gates = self.gates();
            for key in keys {
                if let Some(open) = take_moved(&mut gates, key, revision) {
                    closing.push((key.clone(), open));
                } else if matches!(gates.get(key), Some(GateState::Closed { reopen: Some(reopen) })
                        if Some(reopen.revision.as_str()) != revision)
                {
                    gates.remove(key);
                }
            }
        }
        for (key, open) in closing {
            tracing::info!(kustomization = %key, revision = %open.revision,
                to = revision.unwrap_or("no artifact"), "the source moved on while the gate was open: closing it");
            self.spawn_close(key, open, Closing::SourceMoved(revision.map(String::from)));
        }
    }

    /// A run is converging `revision` while the gate is still open for another (suspend
    /// mode): the source moved on between that hand-off's record and its registration
    /// ([`Observer::opened`]), so [`Observer::source_moved`] did not find it open. The run has
    /// suspended the Kustomization already (it does before every converge); this closes the
    /// older gate and records why on its record, before the new revision's record is written.
    pub async fn superseded(&self, key: &Key, revision: &str) {
        let open = take_moved(&mut self.gates(), key, Some(revision));
        if let Some(open) = open {
            tracing::info!(kustomization = %key, revision = %open.revision, to = revision,
                "the source moved on while the gate was open: closing it");
            let closing = Closing::SourceMoved(Some(revision.to_string()));
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
            gates.retain(|key, state| match state {
                GateState::Open(open) if open.deadline <= now => {
                    expired.push((key.clone(), open.clone()));
                    false
                }
                GateState::Closed {
                    reopen: Some(reopen),
                } if reopen.at <= now => {
                    due.push((key.clone(), reopen.clone()));
                    false
                }
                _ => true,
            });
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

    fn spawn_close(&self, key: Key, open: Open, closing: Closing) {
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
            // Only when nothing newer took the key meanwhile (a hand-off, a hold).
            self.gates().entry(key).or_insert(GateState::Closed {
                reopen: Some(Reopen {
                    revision: open.revision.clone(),
                    started_at: open.started_at.clone(),
                    at: Instant::now() + delay,
                    generation,
                    attempts: open.attempt,
                }),
            });
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
        let why_not = if !super::modes::of(gating.mode).is_some_and(|m| m.reopens()) {
            Some("the gate is no longer suspend")
        } else if gating.hold.is_some() {
            Some("held")
        } else if ks.metadata.generation != Some(reopen.generation) || !ks.spec.suspend {
            Some("the spec changed since: the revision is converged again first")
        } else if applied {
            Some("Flux applied it meanwhile")
        } else {
            None
        };
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
        self.gates().entry(key).or_insert(GateState::Closed {
            reopen: Some(reopen),
        });
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

#[cfg(test)]
mod tests;
