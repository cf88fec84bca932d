//! The first kind of gated object: the Kustomization, as the lane runs it. Its watches keep the
//! index of handled Kustomizations and the revisions their sources publish ([`index`],
//! [`watch`]); a Kustomization is due when its source publishes a revision not yet finished, its
//! spec changed, or a run was left unfinished or deferred; one run is one revision through its
//! gate ([`gate`]: resolve and render, converge, hand off in one of the three modes, observe
//! Flux's verdict). `/status` keeps its rows encoded ([`crate::records::status_cache`]): there
//! may be thousands.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;

use super::gate::Gate;
use super::gate::observe::Observer;
use super::index::{self, Index};
use super::kind::{GatedKind, Route, Take};
use super::watch::{Feed, Readiness};
use crate::flux::event::Event;
use crate::http::backend::NotReady;
use crate::model::{
    GateMode, GateOutcome, Key, Kind, RevisionRecord, StatusDetail, StatusRow, Trigger,
};
use crate::records::Records;
use crate::records::results::Results;
use crate::records::status_cache::StatusCache;

/// How often the observer closes gates past `--handoff-timeout` and re-opens the ones Flux's
/// retry schedule makes due.
const OBSERVE_TICK: Duration = Duration::from_secs(1);

/// One revision of one Kustomization: render → converge → hand off → observe ([`Gate`]; a
/// test's stand-in).
pub trait Runner: Send + Sync + 'static {
    fn run<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        trigger: Trigger,
    ) -> BoxFuture<'a, GateOutcome>;

    /// What follows the hand-offs of its runs from the watches (`None`: a runner that hands
    /// nothing off and waits for nothing).
    fn observer(&self) -> Option<Observer> {
        None
    }
}

impl Runner for Gate {
    fn run<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        trigger: Trigger,
    ) -> BoxFuture<'a, GateOutcome> {
        Box::pin(Gate::run(self, namespace, name, trigger))
    }

    fn observer(&self) -> Option<Observer> {
        Some(Gate::observer(self))
    }
}

/// Kustomizations as a gated kind.
pub struct Kustomizations {
    runner: Arc<dyn Runner>,
    feed: Feed,
    results: Results,
    /// `--watch-label-selector`.
    label_selector: Option<String>,
    /// The encoded `/status` rows and details.
    status: StatusCache,
    /// The spec each run was taken with: noted in the index when the run finishes, so only a
    /// later change of the spec makes it due again.
    taken: Mutex<HashMap<Key, u64>>,
    /// Why there is no artifact storage though one was meant to be there: not ready while a
    /// handled Kustomization uses the `artifact` gate, which cannot publish without it.
    storage_unavailable: Option<String>,
}

impl Kustomizations {
    /// `feed`: the index, readiness and queue the watches share (the lane's queue);
    /// `results`: the records `runner` writes.
    pub fn new(
        runner: Arc<dyn Runner>,
        results: Results,
        feed: Feed,
        label_selector: Option<String>,
        storage_unavailable: Option<String>,
    ) -> Self {
        Kustomizations {
            results,
            runner,
            feed,
            label_selector,
            status: StatusCache::default(),
            taken: Mutex::default(),
            storage_unavailable,
        }
    }

    pub fn index(&self) -> &Arc<RwLock<Index>> {
        &self.feed.index
    }

    pub fn readiness(&self) -> &Readiness {
        &self.feed.readiness
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.feed.index.read().unwrap_or_else(|e| e.into_inner())
    }

    fn observer(&self) -> Option<&Observer> {
        self.feed.observer.as_ref()
    }
}

impl GatedKind for Kustomizations {
    fn kind(&self) -> Kind {
        Kind::KUSTOMIZATION
    }

    fn results(&self) -> &Results {
        &self.results
    }

    fn watches(&self, client: &kube::Client) -> Vec<BoxFuture<'static, ()>> {
        let mut watches: Vec<BoxFuture<'static, ()>> = vec![Box::pin(
            self.feed
                .clone()
                .watch_kustomizations(client.clone(), self.label_selector.clone()),
        )];
        // With a label selector the shard watches only its sources' namespaces.
        watches.push(Box::pin(
            self.feed
                .clone()
                .watch_source_kinds(client.clone(), self.label_selector.is_some()),
        ));
        watches
    }

    fn tasks(&self) -> Vec<BoxFuture<'static, ()>> {
        self.observer()
            .map(|o| -> BoxFuture<'static, ()> { Box::pin(o.clone().run_ticks(OBSERVE_TICK)) })
            .into_iter()
            .collect()
    }

    fn unsynced(&self) -> Vec<&'static str> {
        self.feed.readiness.unsynced()
    }

    fn ready(&self) -> Result<(), NotReady> {
        if let Some(why) = &self.storage_unavailable {
            let index = self.read();
            let artifact = index
                .handled_keys(None)
                .iter()
                .filter(|key| index.handled(key) == Some(GateMode::Artifact))
                .count();
            if artifact > 0 {
                return Err(NotReady::NoStorage {
                    why: why.clone(),
                    count: artifact,
                });
            }
        }
        Ok(())
    }

    /// The gates the last leader left open (a hand-off waiting for Flux's answer) are taken
    /// over by this replica's observer.
    fn lead(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let Some(observer) = self.observer() else {
                return;
            };
            let open = self
                .results
                .keys()
                .into_iter()
                .filter_map(|(namespace, name)| {
                    let last = self.results.last(&namespace, &name)?;
                    index::gate_open(&last).then_some((Key::kustomization(namespace, name), last))
                })
                .collect();
            observer.recover(open).await;
        })
    }

    fn queue_due(&self, trigger: Trigger) -> BoxFuture<'_, usize> {
        Box::pin(async move {
            let due = self.feed.queue_due(trigger);
            if trigger == Trigger::Resync {
                // A delete the watch missed (a relist, a restart) is found here.
                let gone = self.read().gone(Records::keys(&self.results));
                if !gone.is_empty() {
                    self.feed.clone().forget_gone(gone).await;
                }
            }
            // One line per resync or start, however many are due; at debug when nothing is.
            let waiting = self.feed.queue.waiting();
            if due.total() > 0 || trigger == Trigger::Startup {
                tracing::info!(
                    kind = %Kind::KUSTOMIZATION,
                    trigger = ?trigger,
                    due = due.total(),
                    never_run = due.never_run,
                    new_revision = due.new_revision,
                    unfinished = due.unfinished,
                    deferred = due.deferred,
                    spec_changed = due.spec_changed,
                    ready_new = waiting.new,
                    ready_retry = waiting.retry,
                    backing_off = waiting.backing_off,
                    running = self.feed.queue.running(),
                    "queued what is due"
                );
            } else {
                tracing::debug!(due = 0, trigger = ?trigger, "queued what is due");
            }
            due.total()
        })
    }

    /// Runs only if still due: a webhook for a revision already finished, a refused revision,
    /// a follow-up made moot by the run before it are skipped, what the last record says
    /// standing.
    fn take(&self, key: &Key) -> Take {
        let last = self.results.last(&key.namespace, &key.name);
        let (due, spec) = {
            let index = self.read();
            (
                index.due(key, last.as_ref()),
                index.entry(key).map(|e| e.spec_digest),
            )
        };
        let Some(due) = due else {
            return Take::Skip(
                last.map_or(GateOutcome::NotHandled, |r| GateOutcome::Done(r.state)),
            );
        };
        if let Some(spec) = spec {
            self.taken
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone(), spec);
        }
        Take::Run { due: due.as_str() }
    }

    fn run<'a>(&'a self, key: &'a Key, trigger: Trigger) -> BoxFuture<'a, GateOutcome> {
        self.runner.run(&key.namespace, &key.name, trigger)
    }

    fn finished(&self, key: &Key, outcome: &GateOutcome, retry_in: Option<Duration>) -> Vec<Key> {
        let spec = self
            .taken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        if matches!(outcome, GateOutcome::Done(_) | GateOutcome::Deferred)
            && let Some(spec) = spec
        {
            self.feed
                .index
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .note_finished(key, spec);
        }
        if retry_in.is_none() {
            return Vec::new();
        }
        // The source moved on while the failed run ran: the new revision is new work, and
        // need not wait for the old one's backoff.
        let failed = self
            .results
            .last(&key.namespace, &key.name)
            .map(|r| r.revision);
        let now = self.read().source_revision(key).map(String::from);
        if now.is_some() && failed.is_some() && now != failed {
            vec![key.clone()]
        } else {
            Vec::new()
        }
    }

    fn hook(&self, event: &Event) -> Route {
        let route = self.read().route(event);
        Route {
            keys: route.keys,
            wedged: route.wedged,
        }
    }

    fn handles(&self, key: &Key) -> bool {
        key.kind == Kind::KUSTOMIZATION && self.read().handled(key).is_some()
    }

    fn rows(&self, namespace: Option<&str>) -> Vec<StatusRow> {
        let index = self.read();
        index
            .handled_keys(namespace)
            .into_iter()
            .filter_map(|key| {
                let gate = index.handled(&key)?;
                Some(StatusRow {
                    kind: Kind::KUSTOMIZATION,
                    waiting: None,
                    gate,
                    hold: index.hold(&key).map(String::from),
                    source_revision: index.source_revision(&key).map(String::from),
                    last: self
                        .results
                        .last(&key.namespace, &key.name)
                        .map(|r| r.summary()),
                    namespace: key.namespace,
                    name: key.name,
                })
            })
            .collect()
    }

    fn detail(&self, namespace: &str, name: &str) -> Option<StatusDetail> {
        let key = Key::kustomization(namespace, name);
        let (gate, source_revision, hold) = {
            let index = self.read();
            let gate = index.handled(&key)?;
            (
                gate,
                index.source_revision(&key).map(String::from),
                index.hold(&key).map(String::from),
            )
        };
        Some(StatusDetail {
            kind: Kind::KUSTOMIZATION,
            waiting: None,
            namespace: key.namespace,
            name: key.name,
            gate,
            source_revision,
            hold,
            revisions: self.results.history(namespace, name),
        })
    }

    fn rows_json(&self, namespace: Option<&str>) -> Result<Bytes, serde_json::Error> {
        self.status.rows(&self.feed.index, &self.results, namespace)
    }

    fn detail_json(&self, namespace: &str, name: &str) -> Option<Result<Bytes, serde_json::Error>> {
        self.status
            .detail(&self.feed.index, &self.results, namespace, name)
    }

    fn last_record(&self, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.read().handled(&Key::kustomization(namespace, name))?;
        self.results.last(namespace, name)
    }

    /// Both generations only grow, so their sum changes whenever either does.
    fn version(&self) -> u64 {
        self.results
            .generation()
            .wrapping_add(self.read().generation())
    }

    /// The Kustomization's `retryInterval`, else its `interval`: what kustomize-controller
    /// waits before trying a failed one again.
    fn retry_interval(&self, key: &Key) -> Option<Duration> {
        self.read().entry(key).and_then(|e| e.retry)
    }
}
