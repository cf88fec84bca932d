//! Requests per converge and wall time of a converge of a 3-replica StatefulSet against the
//! fake kube-apiserver (in-process client), for the compass. The request counts are printed
//! once; criterion measures the converge alone (setup untimed).

use test_support::web;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use fake_apiserver::FakeApiServer;
use flux_converger::cluster::KubeCluster;
use flux_converger::converge::{Options, Outcome, converge};
use flux_converger::journal::ConfigMapJournal;
use http::Method;
use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::{Value, json};

fn statefulset(size: &str) -> Value {
    web::statefulset(3, size, json!({}))
}

async fn world() -> FakeApiServer {
    let fake = FakeApiServer::new();
    fake.seed_yaml(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/v1.28/storageclasses.yaml"
        ))
        .expect("fixture"),
    );
    fake.enable_statefulset_controller();
    {
        use flux_converger::cluster::Cluster as _;
        let live: StatefulSet = serde_json::from_value(statefulset("1Gi")).expect("live");
        KubeCluster::new(fake.client(), Duration::from_secs(5))
            .apply(&live)
            .await
            .expect("create");
    }
    for _ in 0..500 {
        if (0..3).all(|i| {
            fake.get(
                "v1",
                "PersistentVolumeClaim",
                Some("default"),
                &format!("data-web-{i}"),
            )
            .is_some()
        }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for i in 0..3 {
        fake.set_pvc_phase("default", &format!("data-web-{i}"), "Bound");
    }
    fake.clear_requests();
    fake
}

/// StorageClasses from a reflector, as the service keeps them; `None` lists them per converge.
type ClassCache =
    Option<kube::runtime::reflector::Store<k8s_openapi::api::storage::v1::StorageClass>>;

/// A reflector over StorageClasses, ready, and the task feeding it.
async fn class_cache(fake: &FakeApiServer) -> (ClassCache, tokio::task::JoinHandle<()>) {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, reflector, watcher};
    let (store, writer) = reflector::store();
    let api = kube::Api::all(fake.client());
    let task = tokio::spawn(
        reflector(writer, watcher(api, watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    store.wait_until_ready().await.expect("reflector ready");
    (Some(store), task)
}

async fn one(fake: &FakeApiServer, classes: ClassCache) -> Duration {
    let client = fake.client();
    let mut cluster = KubeCluster::new(client.clone(), Duration::from_secs(10));
    if let Some(store) = classes {
        cluster = cluster.with_storage_classes(store);
    }
    let journal = ConfigMapJournal::new(client, "flux-system", Duration::from_secs(10));
    let desired: StatefulSet = serde_json::from_value(statefulset("2Gi")).expect("desired");
    let options = Options {
        dry_run: false,
        wait_timeout: Duration::from_secs(10),
        revision: None,
        fence: None,
        act_as: None,
        in_place: Default::default(),
        ..Options::default()
    };
    let t = Instant::now();
    let report = converge(&cluster, &journal, &desired, &options)
        .await
        .expect("converge");
    let took = t.elapsed();
    assert_eq!(report.outcome, Outcome::Converged);
    took
}

fn bench(c: &mut Criterion) {
    flux_converger::tls::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    rt.block_on(async {
      for cached in [false, true] {
        let fake = world().await;
        let (classes, task) = if cached {
            class_cache(&fake).await
        } else {
            (None, tokio::spawn(async {}))
        };
        fake.clear_requests();
        let took = one(&fake, classes).await;
        task.abort();
        let log: Vec<_> = fake.requests().into_iter().filter(|r| !(r.watch && r.path.contains("storageclasses"))).collect();
        let reads = log.iter().filter(|r| r.method == Method::GET && !r.watch).count();
        let watches = log.iter().filter(|r| r.watch).count();
        let writes = log.iter().filter(|r| r.is_write()).count();
        let dry = log.iter().filter(|r| r.dry_run).count();
        eprintln!(
            "StorageClasses {}: converge of a 3-replica StatefulSet (3 claims to grow): {} requests = {reads} reads + {dry} dry run + {writes} writes + {watches} watch; claims to grow + {} beyond the reads; one run took {took:?}",
            if cached { "from the service's cache" } else { "listed" },
            log.len(),
            log.len() - reads - 3
        );
        for r in &log {
            eprintln!("  {} {}{}{}", r.method, r.path, if r.query.is_empty() { "" } else { "?" }, r.query);
        }
      }
    });

    c.bench_function("converge 3 replicas (fake apiserver)", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let fake = world().await;
                    total += one(&fake, None).await;
                }
                total
            })
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
