//! The second kind of gated object: the HelmRelease, as the lane runs it. A watch on
//! HelmReleases (with `--watch-label-selector`, as the Kustomizations') queues an opted-in one
//! (`flux-converger.io/gate: reconcile`) on every change (its status is what a run reads:
//! helm-controller's answer arrives as a change) and forgets one that is gone or opted out;
//! the resync and a new leader queue every opted-in one; a run ([`run`]) decides the rest.
//! Without helm-controller's CRD the watch logs it once and keeps retrying, as for a missing
//! source CRD.

pub mod run;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::flux::event::Event;
use crate::gated::Gated;
use crate::helm::helmrelease::HelmRelease;
use crate::model::{
    GateMode, GateOutcome, Key, Kind, RevisionRecord, StatusDetail, StatusRow, Trigger,
};
use crate::records::results::Results;
use crate::service::kind::{GatedKind, Route, queue_all};
use crate::service::queue::Queue;
pub use run::{HelmConfig, HelmGate};

/// Whether a HelmRelease asks for the gate (its annotation says `reconcile`).
fn opted_in(hr: &HelmRelease) -> bool {
    hr.gating(GateMode::Off).mode() == Ok(GateMode::Reconcile)
}

/// HelmReleases as a gated kind: their runs, and the watch's copy of them.
pub struct HelmReleases {
    gate: HelmGate,
    /// The lane's queue.
    queue: Queue<Key>,
    store: Store<HelmRelease>,
    writer: std::sync::Mutex<Option<reflector::store::Writer<HelmRelease>>>,
    /// `--watch-label-selector`.
    label_selector: Option<String>,
    /// Bumped by every event of the watch: with the records' generation, what the dashboard's
    /// kept pages compare ([`GatedKind::version`]).
    events: Arc<AtomicU64>,
}

impl HelmReleases {
    pub fn new(gate: HelmGate, queue: Queue<Key>, label_selector: Option<String>) -> Self {
        let (store, writer) = reflector::store();
        HelmReleases {
            gate,
            queue,
            store,
            writer: std::sync::Mutex::new(Some(writer)),
            label_selector,
            events: Default::default(),
        }
    }

    /// The runs (tests drive them directly).
    pub fn gate(&self) -> &HelmGate {
        &self.gate
    }

    fn opted_in_keys(&self) -> Vec<Key> {
        self.store
            .state()
            .iter()
            .filter(|hr| opted_in(hr))
            .map(|hr| hr.key())
            .collect()
    }

    fn get(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<HelmRelease>> {
        self.store
            .get(&reflector::ObjectRef::new(name).within(namespace))
            .filter(|hr| opted_in(hr))
    }

    fn row(&self, hr: &HelmRelease) -> StatusRow {
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
    }
}

/// Watches HelmReleases until dropped into `store` (through `writer`), queueing an opted-in
/// one on every change and forgetting one that is gone or opted out.
async fn watch(
    gate: HelmGate,
    writer: reflector::store::Writer<HelmRelease>,
    client: Client,
    label_selector: Option<String>,
    queue: Queue<Key>,
    events: Arc<AtomicU64>,
) {
    let api: Api<HelmRelease> = Api::all(client);
    let mut config = watcher::Config::default();
    if let Some(selector) = &label_selector {
        config = config.labels(selector);
    }
    // The store keeps every HelmRelease: without its managedFields, which nothing reads.
    let stream =
        watcher(api, config).modify(|hr| kube::ResourceExt::managed_fields_mut(hr).clear());
    let mut stream = reflector(writer, stream).default_backoff().boxed();
    let mut absent_logged = false;
    loop {
        let next = stream.try_next().await;
        if matches!(next, Ok(Some(_))) {
            events.fetch_add(1, Ordering::AcqRel);
        }
        match next {
            Ok(Some(watcher::Event::Apply(hr) | watcher::Event::InitApply(hr))) => {
                if opted_in(&hr) {
                    queue.push(hr.key(), Trigger::Watch);
                } else {
                    gate.forget(&hr.key());
                }
            }
            Ok(Some(watcher::Event::Delete(hr))) => gate.forget(&hr.key()),
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

impl GatedKind for HelmReleases {
    fn kind(&self) -> Kind {
        Kind::HELM_RELEASE
    }

    fn results(&self) -> &Results {
        self.gate.results()
    }

    fn watches(&self, client: &kube::Client) -> Vec<BoxFuture<'static, ()>> {
        let Some(writer) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return Vec::new();
        };
        vec![Box::pin(watch(
            self.gate.clone(),
            writer,
            client.clone(),
            self.label_selector.clone(),
            self.queue.clone(),
            self.events.clone(),
        ))]
    }

    fn queue_due(&self, trigger: Trigger) -> BoxFuture<'_, usize> {
        let keys = self.opted_in_keys();
        Box::pin(async move { queue_all(&self.queue, Kind::HELM_RELEASE, keys, trigger) })
    }

    fn run<'a>(&'a self, key: &'a Key, trigger: Trigger) -> BoxFuture<'a, GateOutcome> {
        Box::pin(self.gate.run(&key.namespace, &key.name, trigger))
    }

    /// helm-controller's events name the HelmRelease: an opted-in one runs (the run decides
    /// whether there is anything to do).
    fn hook(&self, event: &Event) -> Route {
        let object = &event.involved_object;
        if object.kind != Kind::HELM_RELEASE.as_str() {
            return Route::default();
        }
        let key = Key::helm_release(&object.namespace, &object.name);
        if !self.handles(&key) {
            return Route::default();
        }
        Route {
            keys: vec![key],
            wedged: false,
        }
    }

    fn handles(&self, key: &Key) -> bool {
        key.kind == Kind::HELM_RELEASE && self.get(&key.namespace, &key.name).is_some()
    }

    fn rows(&self, namespace: Option<&str>) -> Vec<StatusRow> {
        let mut rows: Vec<StatusRow> = self
            .store
            .state()
            .iter()
            .filter(|hr| opted_in(hr))
            .filter(|hr| namespace.is_none_or(|ns| hr.metadata.namespace.as_deref() == Some(ns)))
            .map(|hr| self.row(hr))
            .collect();
        rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        rows
    }

    fn detail(&self, namespace: &str, name: &str) -> Option<StatusDetail> {
        let hr = self.get(namespace, name)?;
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

    fn last_record(&self, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.get(namespace, name)?;
        self.gate.results().last(namespace, name)
    }

    /// Changes whenever a HelmRelease or its records may have changed what `/status` and the
    /// dashboard show.
    fn version(&self) -> u64 {
        let events = self.events.load(Ordering::Acquire);
        self.gate.results().generation().wrapping_add(events)
    }

    fn retry_interval(&self, _key: &Key) -> Option<Duration> {
        None
    }
}
