//! The HelmReleases' lane through the service: a watch on HelmReleases (with
//! `--watch-label-selector`, as the Kustomizations'), a resync, a queue of their own (a
//! HelmRelease and a Kustomization may share a name) and the workers that run
//! [`super::HelmGate::run`]. Only HelmReleases that opt in (`flux-converger.io/gate:
//! reconcile`) are queued; the run decides the rest. Without helm-controller's CRD the watch
//! logs it once and keeps retrying, as for a missing source CRD.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::HelmGate;
use crate::gated::Gated;
use crate::helm::helmrelease::HelmRelease;
use crate::model::{GateMode, GateOutcome, Key, Kind, StatusDetail, StatusRow, Trigger};
use crate::service::leadership::windows::RunWindows;
use crate::service::queue::Queue;

/// Whether a HelmRelease asks for the gate (its annotation says `reconcile`).
fn opted_in(hr: &HelmRelease) -> bool {
    hr.gating(GateMode::Off).mode() == Ok(GateMode::Reconcile)
}

/// The lane: what the watch, the resync and the workers share.
#[derive(Clone)]
pub struct Lane {
    pub gate: HelmGate,
    pub queue: Queue<Key>,
    store: Store<HelmRelease>,
    writer: std::sync::Arc<std::sync::Mutex<Option<reflector::store::Writer<HelmRelease>>>>,
}

impl Lane {
    pub fn new(gate: HelmGate, queue: Queue<Key>) -> Self {
        let (store, writer) = reflector::store();
        Lane {
            gate,
            queue,
            store,
            writer: std::sync::Arc::new(std::sync::Mutex::new(Some(writer))),
        }
    }

    /// Queues every opted-in HelmRelease the watch holds (`trigger`: the resync, a start).
    pub fn queue_all(&self, trigger: Trigger) -> usize {
        let keys: Vec<Key> = self
            .store
            .state()
            .iter()
            .filter(|hr| opted_in(hr))
            .map(|hr| hr.key())
            .collect();
        for key in &keys {
            self.queue.push(key.clone(), trigger);
        }
        keys.len()
    }

    /// Whether the watch holds `key` and it opts in.
    pub fn is_opted_in(&self, key: &Key) -> bool {
        self.store
            .get(&reflector::ObjectRef::new(&key.name).within(&key.namespace))
            .is_some_and(|hr| opted_in(&hr))
    }

    /// The opted-in HelmReleases the watch holds (of `namespace`, or all), sorted, as
    /// `/status` lists them: their hold, newest record and why nothing is done now.
    pub fn summaries(&self, namespace: Option<&str>) -> Vec<StatusRow> {
        let mut rows: Vec<StatusRow> = self
            .store
            .state()
            .iter()
            .filter(|hr| opted_in(hr))
            .filter(|hr| namespace.is_none_or(|ns| hr.metadata.namespace.as_deref() == Some(ns)))
            .map(|hr| {
                let key = hr.key();
                StatusRow {
                    kind: Kind::HELM_RELEASE,
                    gate: GateMode::Reconcile,
                    source_revision: None,
                    hold: hr.gating(GateMode::Off).hold,
                    last: self
                        .gate
                        .results()
                        .last(&key.namespace, &key.name)
                        .map(|r| r.summary()),
                    waiting: self.gate.waiting(&key),
                    namespace: key.namespace,
                    name: key.name,
                }
            })
            .collect();
        rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        rows
    }

    /// One opted-in HelmRelease with its history, newest first; `None` when not handled.
    pub fn detail(&self, namespace: &str, name: &str) -> Option<StatusDetail> {
        let hr = self
            .store
            .get(&reflector::ObjectRef::new(name).within(namespace))
            .filter(|hr| opted_in(hr))?;
        let key = hr.key();
        Some(StatusDetail {
            kind: Kind::HELM_RELEASE,
            gate: GateMode::Reconcile,
            source_revision: None,
            hold: hr.gating(GateMode::Off).hold,
            waiting: self.gate.waiting(&key),
            revisions: self.gate.results().history(namespace, name),
            namespace: key.namespace,
            name: key.name,
        })
    }

    /// Watches HelmReleases until dropped: an opted-in one is queued on every change (its
    /// status is what the run reads: helm-controller's answer arrives as a change), one that
    /// is gone or opted out is forgotten.
    pub async fn watch(self, client: Client, label_selector: Option<String>) {
        let Some(writer) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        let api: Api<HelmRelease> = Api::all(client);
        let mut config = watcher::Config::default();
        if let Some(selector) = &label_selector {
            config = config.labels(selector);
        }
        let mut stream = reflector(writer, watcher(api, config))
            .default_backoff()
            .boxed();
        let mut absent_logged = false;
        loop {
            match stream.try_next().await {
                Ok(Some(watcher::Event::Apply(hr) | watcher::Event::InitApply(hr))) => {
                    if opted_in(&hr) {
                        self.queue.push(hr.key(), Trigger::Watch);
                    } else {
                        self.gate.forget(&hr.key());
                    }
                }
                Ok(Some(watcher::Event::Delete(hr))) => self.gate.forget(&hr.key()),
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                    if status.code == 404 =>
                {
                    if !absent_logged {
                        tracing::info!("HelmRelease CRD not installed; no HelmRelease to gate yet");
                        absent_logged = true;
                    }
                }
                Err(error) => tracing::warn!(%error, "watching HelmReleases; retrying"),
            }
        }
    }

    /// Queues every opted-in HelmRelease every `period`: a lost event or a hand-back that
    /// helm-controller never answers (its timeout) is seen at the latest then.
    pub async fn resync(self, period: Duration) {
        let mut ticker = tokio::time::interval(period);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            self.queue_all(Trigger::Resync);
        }
    }

    /// The workers: at most `workers` HelmReleases at once, one run per HelmRelease. `cut`:
    /// the shutdown grace has passed; a run is dropped as soon as it holds no window.
    pub async fn work(self, workers: usize, cut: CancellationToken) {
        self.queue
            .ready()
            .for_each_concurrent(workers, |(key, trigger)| {
                let (lane, cut) = (self.clone(), cut.clone());
                async move {
                    let windows = RunWindows::default();
                    let outcome = tokio::select! {
                        biased;
                        outcome = windows.scope(lane.gate.run(&key.namespace, &key.name, trigger))
                            .instrument(tracing::info_span!("run", helmrelease = %key)) => outcome,
                        () = async {
                            cut.cancelled().await;
                            windows.none_open().await;
                        } => GateOutcome::Failed { message: "stopped by the shutdown".into() },
                    };
                    let retry_in = lane.queue.complete(&key, &outcome);
                    if let GateOutcome::Failed { message } = &outcome {
                        tracing::warn!(helmrelease = %key, error = %message,
                            retry_in = ?retry_in.unwrap_or_default(), "failed; retrying with backoff");
                    }
                }
            })
            .await;
    }
}
