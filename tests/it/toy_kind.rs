//! A third kind of gated object, gated through the service's one lane by implementing
//! `GatedKind` alone (issue #37): a ConfigMap labelled `toy.example.com/gated: "true"` whose
//! `data.statefulset` declares a StatefulSet. Nothing of the lane, the queue, `/status` or the
//! records knows of it: its spec names its routes, its `/status` field and its records, its
//! implementation (below, in the test) says what a run does, through the shared converge step.
//! The service converges the declared StatefulSet (claims grown, re-created, pods kept) and
//! shows it in `GET /status` under `configMaps`, at `GET /status/configmaps/{ns}/{name}`, on
//! the dashboard, with its records in ConfigMaps of its own.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_apiserver::{FakeApiServer, KubeVersion};
use flux_converger::cluster::{Cluster as _, KubeCluster};
use flux_converger::flux::render::RenderedStatefulSet;
use flux_converger::gated::Desired;
use flux_converger::http::{AppState, HookAuth, metrics_router, router};
use flux_converger::model::{
    GateMode, GateOutcome, Key, Kind, KindSpec, RevisionRecord, RevisionState, StatusDetail,
    StatusRow, Trigger,
};
use flux_converger::records::metrics;
use flux_converger::records::results::{Results, Shard};
use flux_converger::service::kind::GatedKind;
use flux_converger::service::queue::Queue;
use flux_converger::service::step::{ConvergeStep, StepConfig};
use flux_converger::service::{GateOutcome as _Outcome, Parts, Resume, Runner, Tuning, start_with};
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

const NS: &str = "toys";
const SERVICE_NS: &str = "flux-system";
const LABEL: &str = "toy.example.com/gated";
const T: Duration = Duration::from_secs(5);

/// The toy kind: everything the service says of it comes from here.
static TOY: KindSpec = KindSpec {
    name: "ConfigMap",
    group: "",
    version: "v1",
    plural: "configmaps",
    status_field: "configMaps",
    controller: "toy-controller",
    record: "configmap-results",
    record_prefix: "flux-converger-configmap-results",
};

fn toy() -> Kind {
    Kind::new(&TOY)
}

/// The toy kind's implementation of the trait, and nothing else.
struct Toys {
    client: kube::Client,
    queue: Queue<Key>,
    step: ConvergeStep,
    results: Results,
    /// The gated ConfigMaps the watch holds.
    seen: Arc<Mutex<BTreeMap<Key, ConfigMap>>>,
    synced: Arc<std::sync::atomic::AtomicBool>,
}

impl Toys {
    fn row(&self, key: &Key) -> StatusRow {
        StatusRow {
            kind: toy(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            gate: GateMode::Reconcile,
            source_revision: None,
            last: self
                .results
                .last(&key.namespace, &key.name)
                .map(|r| r.summary()),
            hold: None,
            waiting: None,
        }
    }

    async fn converge(&self, key: &Key, trigger: Trigger) -> GateOutcome {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &key.namespace);
        let Ok(Some(cm)) = api.get_opt(&key.name).await else {
            return GateOutcome::NotHandled;
        };
        let revision = cm.metadata.resource_version.clone().unwrap_or_default();
        let declared = cm
            .data
            .as_ref()
            .and_then(|d| d.get("statefulset"))
            .and_then(|s| serde_json::from_str::<Value>(s).ok());
        let Some(object) = declared else {
            return GateOutcome::Failed {
                message: "data.statefulset is not a StatefulSet".into(),
            };
        };
        let rendered = vec![RenderedStatefulSet {
            namespace: key.namespace.clone(),
            name: object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            object,
        }];
        let entries = self
            .step
            .converge_all(Desired {
                owner: key,
                revision: &revision,
                statefulsets: &rendered,
                user: None,
            })
            .await;
        let mut record = RevisionRecord::new(
            revision,
            trigger,
            jiff::Timestamp::now().to_string(),
            RevisionState::of_statefulsets(&entries),
            GateMode::Reconcile,
            cm.metadata.generation,
        );
        record.statefulsets = entries;
        record.finished_at = Some(jiff::Timestamp::now().to_string());
        let state = record.state;
        if let Err(e) = self.results.put(&key.namespace, &key.name, record).await {
            return GateOutcome::Failed {
                message: e.to_string(),
            };
        }
        GateOutcome::Done(state)
    }
}

impl GatedKind for Toys {
    fn kind(&self) -> Kind {
        toy()
    }

    fn results(&self) -> &Results {
        &self.results
    }

    fn watches(&self, client: &kube::Client) -> Vec<BoxFuture<'static, ()>> {
        let api: Api<ConfigMap> = Api::all(client.clone());
        let (queue, seen, synced) = (self.queue.clone(), self.seen.clone(), self.synced.clone());
        vec![Box::pin(async move {
            let mut stream = watcher(
                api,
                watcher::Config::default().labels(&format!("{LABEL}=true")),
            )
            .default_backoff()
            .boxed();
            while let Ok(Some(event)) = stream.try_next().await {
                match event {
                    watcher::Event::Apply(cm) | watcher::Event::InitApply(cm) => {
                        let key = Key::new(
                            toy(),
                            cm.metadata.namespace.clone().unwrap_or_default(),
                            cm.metadata.name.clone().unwrap_or_default(),
                        );
                        seen.lock().unwrap().insert(key.clone(), cm);
                        queue.push(key, Trigger::Watch);
                    }
                    watcher::Event::Delete(cm) => {
                        seen.lock().unwrap().remove(&Key::new(
                            toy(),
                            cm.metadata.namespace.clone().unwrap_or_default(),
                            cm.metadata.name.clone().unwrap_or_default(),
                        ));
                    }
                    watcher::Event::InitDone => {
                        synced.store(true, std::sync::atomic::Ordering::SeqCst)
                    }
                    watcher::Event::Init => {}
                }
            }
        })]
    }

    fn unsynced(&self) -> Vec<&'static str> {
        if self.synced.load(std::sync::atomic::Ordering::SeqCst) {
            Vec::new()
        } else {
            vec!["configmaps"]
        }
    }

    fn queue_due(&self, trigger: Trigger) -> BoxFuture<'_, usize> {
        Box::pin(async move {
            let keys: Vec<Key> = self.seen.lock().unwrap().keys().cloned().collect();
            for key in &keys {
                self.queue.push(key.clone(), trigger);
            }
            keys.len()
        })
    }

    fn run<'a>(&'a self, key: &'a Key, trigger: Trigger) -> BoxFuture<'a, GateOutcome> {
        Box::pin(self.converge(key, trigger))
    }

    fn handles(&self, key: &Key) -> bool {
        self.seen.lock().unwrap().contains_key(key)
    }

    fn rows(&self, namespace: Option<&str>) -> Vec<StatusRow> {
        let keys: Vec<Key> = self.seen.lock().unwrap().keys().cloned().collect();
        keys.iter()
            .filter(|k| namespace.is_none_or(|ns| k.namespace == ns))
            .map(|k| self.row(k))
            .collect()
    }

    fn detail(&self, namespace: &str, name: &str) -> Option<StatusDetail> {
        let key = Key::new(toy(), namespace, name);
        if !self.handles(&key) {
            return None;
        }
        let row = self.row(&key);
        Some(StatusDetail {
            kind: toy(),
            namespace: row.namespace,
            name: row.name,
            gate: row.gate,
            source_revision: None,
            hold: None,
            waiting: None,
            revisions: self.results.history(namespace, name),
        })
    }

    fn last_record(&self, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.results.last(namespace, name)
    }

    fn version(&self) -> u64 {
        self.results.generation() + self.seen.lock().unwrap().len() as u64
    }
}

/// No Kustomization in this world: its runner is never asked.
struct NoKustomizations;
impl Runner for NoKustomizations {
    fn run<'a>(&'a self, _: &'a str, _: &'a str, _: Trigger) -> BoxFuture<'a, _Outcome> {
        Box::pin(async { GateOutcome::NotHandled })
    }
}

struct NoResume;
impl Resume for NoResume {
    fn resume_all(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

fn statefulset(size: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {
            "serviceName": "db", "replicas": 2,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                         "spec": {"containers": [{"name": "db", "image": "postgres",
                                  "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                         "resources": {"requests": {"storage": size}}}}],
        }
    })
}

async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_kind_is_gated_through_the_lane_by_implementing_the_trait_alone() {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    for ns in [NS, SERVICE_NS] {
        fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    fake.seed_yaml(
        &std::fs::read_to_string(fake_apiserver::fixture_path("v1.28/storageclasses.yaml"))
            .unwrap(),
    );
    fake.enable_statefulset_controller();
    fake.set_pods_ready(true);
    let live: StatefulSet = serde_json::from_value(statefulset("1Gi")).unwrap();
    KubeCluster::new(fake.client(), T)
        .apply(&live)
        .await
        .unwrap();
    let claims = ["data-db-0", "data-db-1"];
    until(|| {
        claims.iter().all(|c| {
            fake.get("v1", "PersistentVolumeClaim", Some(NS), c)
                .is_some()
        })
    })
    .await;
    for c in claims {
        fake.set_pvc_phase(NS, c, "Bound");
    }
    let pods_before: Vec<String> = ["db-0", "db-1"]
        .iter()
        .map(|p| fake.get("v1", "Pod", Some(NS), p).unwrap()["metadata"]["uid"].to_string())
        .collect();
    let sts_uid =
        fake.get("apps/v1", "StatefulSet", Some(NS), "db").unwrap()["metadata"]["uid"].clone();

    let client = fake.client();
    let config = test_support::service::config(SERVICE_NS).build();
    let tuning = Tuning {
        lease: flux_converger::service::leadership::LeaseSettings::new("toy"),
        backoff: Default::default(),
        shutdown_grace: Duration::from_secs(5),
        restart_retry: Duration::from_secs(10),
    };
    let (registry, metrics) = metrics::registry();
    let queue = Queue::new(tuning.backoff, metrics.queue_depth.clone());
    let toys = Arc::new(Toys {
        client: client.clone(),
        queue: queue.clone(),
        step: ConvergeStep::new(StepConfig {
            client: client.clone(),
            namespace: SERVICE_NS.into(),
            shard: Shard::Unsharded,
            call_timeout: T,
            metrics: metrics.clone(),
            fence: None,
        }),
        results: Results::of_kind(
            client.clone(),
            SERVICE_NS.into(),
            T,
            Shard::Unsharded,
            toy(),
        ),
        seen: Arc::default(),
        synced: Arc::default(),
    });
    let app_metrics = metrics.clone();
    let parts = Parts {
        runner: Arc::new(NoKustomizations),
        results: Results::new(client.clone(), SERVICE_NS.into(), T),
        queue,
        kinds: vec![toys.clone()],
        resume: Arc::new(NoResume),
        app: Box::new(move |backend| {
            router(AppState {
                backend,
                metrics: app_metrics,
                auth: HookAuth {
                    hmac_key: None,
                    token: None,
                },
            })
        }),
        metrics_app: metrics_router(Arc::new(registry)),
        metrics,
        fence: Default::default(),
        storage: None,
        volumes: None,
    };
    let running = start_with(config, client.clone(), tuning, parts)
        .await
        .expect("the service starts");

    // The toy object declares the grown StatefulSet: the lane runs it.
    fake.seed(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "db", "namespace": NS, "labels": {LABEL: "true"}},
        "data": {"statefulset": statefulset("2Gi").to_string()},
    }));
    until(|| toys.results.last(NS, "db").is_some()).await;
    let record = toys.results.last(NS, "db").unwrap();
    assert_eq!(record.state, RevisionState::Converged, "{record:#?}");

    // Converged by the shared step: claims grown, re-created, pods kept and adopted.
    let sts = fake.get("apps/v1", "StatefulSet", Some(NS), "db").unwrap();
    assert_ne!(sts["metadata"]["uid"], sts_uid, "not re-created");
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    for c in claims {
        let claim = fake
            .get("v1", "PersistentVolumeClaim", Some(NS), c)
            .unwrap();
        assert_eq!(
            claim["spec"]["resources"]["requests"]["storage"], "2Gi",
            "{c}"
        );
    }
    let pods_after: Vec<String> = ["db-0", "db-1"]
        .iter()
        .map(|p| fake.get("v1", "Pod", Some(NS), p).unwrap()["metadata"]["uid"].to_string())
        .collect();
    assert_eq!(pods_before, pods_after, "a pod was replaced");

    // Its records are ConfigMaps of its own kind (written after the record is in memory).
    let records = || -> Vec<Value> {
        fake.list("v1", "ConfigMap", Some(SERVICE_NS))
            .into_iter()
            .filter(|cm| {
                cm["metadata"]["labels"]["flux-converger.io/record"] == "configmap-results"
            })
            .collect()
    };
    until(|| !records().is_empty()).await;
    let records = records();
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(
        records[0]["metadata"]["name"],
        format!("flux-converger-configmap-results.{NS}.db")
    );

    // `/status` lists it under its kind's field, and serves its detail at its plural.
    let http = reqwest::Client::new();
    let base = format!("http://{}", running.addr);
    let status: Value = serde_json::from_str(
        &http
            .get(format!("{base}/status"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    let rows = status["configMaps"].as_array().expect("a configMaps field");
    assert_eq!(rows.len(), 1, "{status}");
    assert_eq!(rows[0]["kind"], "ConfigMap");
    assert_eq!(rows[0]["last"]["state"], "converged");
    assert_eq!(status["kustomizations"], json!([]));
    let detail = http
        .get(format!("{base}/status/configmaps/{NS}/db"))
        .send()
        .await
        .unwrap();
    assert_eq!(detail.status(), 200);
    let detail: Value = serde_json::from_str(&detail.text().await.unwrap()).unwrap();
    assert_eq!(detail["revisions"][0]["state"], "converged");
    let page = http
        .get(format!("{base}/configmaps/{NS}/db"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let overview = http.get(format!("{base}/")).send().await.unwrap();
    assert!(
        overview
            .text()
            .await
            .unwrap()
            .contains("/configmaps/toys/db"),
        "the dashboard's overview links the toy object"
    );
    running.shutdown().await;
}
