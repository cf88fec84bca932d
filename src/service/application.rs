//! The third kind of gated object: Argo CD's Application, as the lane runs it (issue #39,
//! docs/argocd.md). A watch on Applications in each of `--argocd-namespaces` (with
//! `--watch-label-selector`, as the other kinds') queues an opted-in one
//! (`flux-converger.io/gate: reconcile`) on every change (its status is what a run reads: Argo
//! CD's stopped sync, and later its answer to the hand-back, arrive as changes) and forgets one
//! that is gone or opted out; the resync, a new leader and `POST /hook/argocd` (a wake-up naming
//! it, `Lane::wake`) queue it too; a run ([`run`]) decides the rest. Without Argo CD's CRD (or
//! without the opt-in component's RBAC) the watch says so once and keeps retrying.
//!
//! The lane is part of the service only with `--argocd-server` ([`ArgoCdConfig`]): without Argo
//! CD's API server no desired StatefulSet can be read.

pub mod run;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::argocd::act;
use crate::argocd::application::Application;
use crate::argocd::project::AppProject;
use crate::gated::Gated;
use crate::model::{
    GateMode, GateOutcome, Key, Kind, RevisionRecord, StatusDetail, StatusRow, Trigger,
};
use crate::records::results::Results;
/// The Argo CD lane's flags live with the others (`service::config`).
pub use crate::service::config::{ArgoCdConfig, DEFAULT_ARGOCD_NAMESPACE as DEFAULT_NAMESPACE};
use crate::service::kind::{GatedKind, queue_all};
use crate::service::queue::Queue;
pub use run::{AppConfig, AppGate};

/// The client of Argo CD's API server the flags name (`--argocd-server`, `--argocd-token-file`,
/// `--argocd-ca-file`; calls bounded by `--timeout`, answers by `--max-unpacked-size`).
pub fn api(
    argo: &ArgoCdConfig,
    config: &crate::service::config::Config,
) -> Result<crate::argocd::api::ArgoCdApi, crate::service::error::ServiceError> {
    crate::argocd::api::ArgoCdApi::new(&crate::argocd::api::ApiOptions {
        server: argo.server.clone(),
        token_file: argo.token_file.clone(),
        ca_file: argo.ca_file.clone(),
        timeout: config.call_timeout,
        max_body: config.fetch.unpack.max_bytes,
    })
    .map_err(|e| crate::service::error::ServiceError::Setup(e.to_string()))
}

/// The Applications kind as the service runs it, on the lane's `queue`.
pub fn build(
    argo: &ArgoCdConfig,
    config: AppConfig,
    step: crate::service::step::ConvergeStep,
    queue: Queue<Key>,
    label_selector: Option<String>,
) -> std::sync::Arc<Applications> {
    std::sync::Arc::new(Applications::new(
        AppGate::new(config, step),
        queue,
        &argo.namespaces,
        label_selector,
    ))
}

/// Whether an Application asks for the gate (its annotation says `reconcile`).
fn opted_in(app: &Application) -> bool {
    act::gating(app).mode() == Ok(GateMode::Reconcile)
}

/// Applications as a gated kind: their runs, and the watches' copies of them.
pub struct Applications {
    gate: AppGate,
    /// The lane's queue.
    queue: Queue<Key>,
    /// One watch's copy per namespace of `--argocd-namespaces`.
    stores: Vec<Store<Application>>,
    /// The watches' writers, taken by [`GatedKind::watches`].
    writers: std::sync::Mutex<Vec<(String, reflector::store::Writer<Application>)>>,
    /// `--watch-label-selector`.
    label_selector: Option<String>,
    /// Argo CD's own namespace, where its AppProjects are watched.
    argocd_namespace: String,
}

impl Applications {
    /// Applications watched in `namespaces` (the first is Argo CD's own, where its AppProjects
    /// are).
    pub fn new(
        gate: AppGate,
        queue: Queue<Key>,
        namespaces: &[String],
        label_selector: Option<String>,
    ) -> Self {
        let argocd_namespace = namespaces
            .first()
            .cloned()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        let mut stores = Vec::new();
        let mut writers = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for namespace in namespaces.iter().filter(|n| seen.insert(n.as_str())) {
            let (store, writer) = reflector::store();
            stores.push(store);
            writers.push((namespace.clone(), writer));
        }
        Applications {
            gate,
            queue,
            stores,
            writers: std::sync::Mutex::new(writers),
            label_selector,
            argocd_namespace,
        }
    }

    /// The runs (tests drive them directly).
    pub fn gate(&self) -> &AppGate {
        &self.gate
    }

    fn all(&self) -> impl Iterator<Item = std::sync::Arc<Application>> + '_ {
        self.stores.iter().flat_map(|s| s.state())
    }

    fn get(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<Application>> {
        let at = reflector::ObjectRef::new(name).within(namespace);
        self.stores
            .iter()
            .find_map(|s| s.get(&at))
            .filter(|app| opted_in(app))
    }

    fn row(&self, app: &Application) -> StatusRow {
        let key = app.key();
        StatusRow {
            kind: Kind::APPLICATION,
            gate: GateMode::Reconcile,
            source_revision: None,
            hold: act::gating(app).hold,
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

/// Watches the Applications of `namespace` until dropped into a store (through `writer`),
/// queueing an opted-in one on every change and forgetting one that is gone or opted out.
async fn watch(
    gate: AppGate,
    writer: reflector::store::Writer<Application>,
    client: Client,
    namespace: String,
    label_selector: Option<String>,
    queue: Queue<Key>,
) {
    let api: Api<Application> = Api::namespaced(client, &namespace);
    let mut config = watcher::Config::default();
    if let Some(selector) = &label_selector {
        config = config.labels(selector);
    }
    // The store keeps every Application: without its managedFields, which nothing reads.
    let stream =
        watcher(api, config).modify(|app| kube::ResourceExt::managed_fields_mut(app).clear());
    let mut stream = reflector(writer, stream).default_backoff().boxed();
    let mut absent_logged = false;
    loop {
        match stream.try_next().await {
            Ok(Some(watcher::Event::Apply(app) | watcher::Event::InitApply(app))) => {
                if opted_in(&app) {
                    queue.push(app.key(), Trigger::Watch);
                } else {
                    gate.forget(&app.key());
                }
            }
            Ok(Some(watcher::Event::Delete(app))) => gate.forget(&app.key()),
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                if status.code == 404 || status.code == 403 =>
            {
                if !absent_logged {
                    tracing::info!(%namespace, code = status.code,
                        "Applications cannot be listed (Argo CD's CRD not installed, or the manifests/argocd component not applied); retrying");
                    absent_logged = true;
                }
            }
            Err(error) => {
                tracing::warn!(%namespace, %error, "watching Applications; retrying")
            }
        }
    }
}

/// Watches the AppProjects of Argo CD's namespace: when one changes (after the first list),
/// its handled Applications are run again, past a refusal of the same revision and spec (its
/// destinations or service accounts may be what the refusal was about).
async fn watch_projects(
    gate: AppGate,
    client: Client,
    namespace: String,
    stores: Vec<Store<Application>>,
    queue: Queue<Key>,
) {
    let api: Api<AppProject> = Api::namespaced(client, &namespace);
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut absent_logged = false;
    loop {
        match stream.try_next().await {
            Ok(Some(watcher::Event::Apply(project) | watcher::Event::Delete(project))) => {
                let name = project.metadata.name.unwrap_or_default();
                for app in stores.iter().flat_map(|s| s.state()) {
                    if opted_in(&app) && app.project() == name {
                        let key = app.key();
                        gate.recheck(&key);
                        queue.push(key, Trigger::Watch);
                    }
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                if status.code == 404 || status.code == 403 =>
            {
                if !absent_logged {
                    tracing::info!(%namespace, code = status.code,
                        "AppProjects cannot be listed (Argo CD's CRD not installed, or the manifests/argocd component not applied); retrying");
                    absent_logged = true;
                }
            }
            Err(error) => {
                tracing::warn!(%namespace, %error, "watching AppProjects; retrying")
            }
        }
    }
}

impl GatedKind for Applications {
    fn kind(&self) -> Kind {
        Kind::APPLICATION
    }

    fn results(&self) -> &Results {
        self.gate.results()
    }

    fn watches(&self, client: &kube::Client) -> Vec<BoxFuture<'static, ()>> {
        let writers = std::mem::take(&mut *self.writers.lock().unwrap_or_else(|e| e.into_inner()));
        if writers.is_empty() {
            return Vec::new();
        }
        let mut tasks: Vec<BoxFuture<'static, ()>> = writers
            .into_iter()
            .map(|(namespace, writer)| -> BoxFuture<'static, ()> {
                Box::pin(watch(
                    self.gate.clone(),
                    writer,
                    client.clone(),
                    namespace,
                    self.label_selector.clone(),
                    self.queue.clone(),
                ))
            })
            .collect();
        tasks.push(Box::pin(watch_projects(
            self.gate.clone(),
            client.clone(),
            self.argocd_namespace.clone(),
            self.stores.clone(),
            self.queue.clone(),
        )));
        tasks
    }

    fn queue_due(&self, trigger: Trigger) -> BoxFuture<'_, usize> {
        let keys: Vec<Key> = self
            .all()
            .filter(|app| opted_in(app))
            .map(|app| app.key())
            .collect();
        Box::pin(async move { queue_all(&self.queue, Kind::APPLICATION, keys, trigger) })
    }

    fn run<'a>(&'a self, key: &'a Key, trigger: Trigger) -> BoxFuture<'a, GateOutcome> {
        Box::pin(self.gate.run(&key.namespace, &key.name, trigger))
    }

    /// Argo CD's notifications name the Application (`POST /hook/argocd`, [`crate::service::lane::Lane::wake`]);
    /// Flux's events never do.
    fn handles(&self, key: &Key) -> bool {
        key.kind == Kind::APPLICATION && self.get(&key.namespace, &key.name).is_some()
    }

    fn rows(&self, namespace: Option<&str>) -> Vec<StatusRow> {
        let mut rows: Vec<StatusRow> = self
            .all()
            .filter(|app| opted_in(app))
            .filter(|app| namespace.is_none_or(|ns| app.metadata.namespace.as_deref() == Some(ns)))
            .map(|app| self.row(&app))
            .collect();
        rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        rows
    }

    fn detail(&self, namespace: &str, name: &str) -> Option<StatusDetail> {
        let app = self.get(namespace, name)?;
        let key = app.key();
        Some(StatusDetail {
            kind: Kind::APPLICATION,
            gate: GateMode::Reconcile,
            source_revision: None,
            hold: act::gating(&app).hold,
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

    fn version(&self) -> u64 {
        self.gate.results().generation() + self.gate.waiting_version()
    }
}
