//! The wire: every kube client of the process is built by `wire::kube_client`, whose sockets
//! set `TCP_NODELAY`, and a converge over TLS (the fake API server's `serve_tls`, as a real
//! API server serves) sends the requests docs/converge.md counts, no more.

use test_support::web;

use std::time::Duration;

use fake_apiserver::{FakeApiServer, RequestRecord};
use flux_converger::cluster::KubeCluster;
use flux_converger::converge::{Options, Outcome, converge};
use flux_converger::journal::ConfigMapJournal;
use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::Value;

const CLAIMS: usize = 3;

fn statefulset(size: &str) -> Value {
    web::statefulset(CLAIMS, size, web::applied_by_apps())
}

/// `web` with 3 Bound 1Gi claims, created through the server as Flux would.
async fn world() -> FakeApiServer {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/storageclasses.yaml");
    fake.enable_statefulset_controller();
    {
        use flux_converger::cluster::Cluster as _;
        let live: StatefulSet = serde_json::from_value(statefulset("1Gi")).unwrap();
        KubeCluster::new(fake.client(), Duration::from_secs(5))
            .apply(&live)
            .await
            .unwrap();
    }
    let names: Vec<String> = (0..CLAIMS).map(|i| format!("data-web-{i}")).collect();
    fake.bind_when_made(names.iter().map(|n| ("default", n.as_str())))
        .await
        .unwrap();
    fake.clear_requests();
    fake
}

async fn config_of(kubeconfig: &std::path::Path) -> kube::Config {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap()
}

fn opts() -> Options {
    Options {
        dry_run: false,
        wait_timeout: Duration::from_secs(10),
        revision: None,
        fence: None,
        act_as: None,
        in_place: Default::default(),
        ..Options::default()
    }
}

/// The log without a reflector's own StorageClass requests, one line per request.
fn lines(log: &[RequestRecord]) -> Vec<String> {
    log.iter()
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connector_sets_nodelay_over_tls_and_over_plain_http() {
    use hyper_rustls::MaybeHttpsStream;
    use tower::ServiceExt as _;
    let fake = world().await;
    for tls in [true, false] {
        let served = if tls {
            fake.serve_tls().await
        } else {
            fake.serve().await
        };
        let config = config_of(&served.kubeconfig).await;
        let stream = flux_converger::wire::connector(&config)
            .unwrap()
            .oneshot(served.url.parse().unwrap())
            .await
            .unwrap();
        let nodelay = match &stream {
            MaybeHttpsStream::Https(s) => {
                assert!(tls, "an https stream for {}", served.url);
                s.inner().get_ref().0.inner().inner().nodelay().unwrap()
            }
            MaybeHttpsStream::Http(s) => {
                assert!(!tls, "a plain stream for {}", served.url);
                s.inner().nodelay().unwrap()
            }
        };
        assert!(nodelay, "TCP_NODELAY on {}", served.url);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_converge_over_tls_costs_n_plus_12_requests() {
    let fake = world().await;
    let served = fake.serve_tls().await;
    let client = flux_converger::wire::kube_client(config_of(&served.kubeconfig).await).unwrap();
    let cluster = KubeCluster::new(client.clone(), Duration::from_secs(10));
    let journal = ConfigMapJournal::new(client, "default", Duration::from_secs(10));
    let desired: StatefulSet = serde_json::from_value(statefulset("2Gi")).unwrap();
    let report = converge(&cluster, &journal, &desired, &opts())
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Converged, "{report:?}");
    let log = fake.requests();
    // Journal load, get, claim list, StorageClass list, the proof, the dry run as it is, the
    // pre-flight, N claim patches, record, orphan delete, watch, re-apply, clear.
    assert_eq!(log.len(), CLAIMS + 12, "{:#?}", lines(&log));
    let patches = log
        .iter()
        .filter(|r| r.method == http::Method::PATCH && r.path.contains("persistentvolumeclaims"))
        .count();
    assert_eq!(patches, CLAIMS, "{:#?}", lines(&log));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_converges_over_tls_in_n_plus_12_requests() {
    let fake = world().await;
    let served = fake.serve_tls().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("web.yaml");
    std::fs::write(&file, statefulset("2Gi").to_string()).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_flux-converger"))
        .arg("--kubeconfig")
        .arg(&served.kubeconfig)
        .args(["converge", "--desired"])
        .arg(&file)
        .output()
        .await
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("converged"), "{text}");
    let log = fake.requests();
    // The command first lists the intents an earlier run left (once per journal namespace),
    // then converges without loading the StatefulSet's intent again (the list just found
    // none): N+12, the library's converge and that list. It does not look for the intent
    // ConfigMaps of earlier versions unless asked (`--migrate-intents`).
    assert_eq!(log.len(), CLAIMS + 12, "{:#?}", lines(&log));
    assert!(
        !log.iter().any(|r| r.path.contains("/configmaps")),
        "{:#?}",
        lines(&log)
    );
    assert!(log[0].path.ends_with("/secrets"), "{:#?}", lines(&log));
    assert!(log[0].query.contains("labelSelector"), "{:#?}", lines(&log));
    let intent_gets = log
        .iter()
        .filter(|r| r.method == "GET" && r.path.contains("/secrets/"))
        .count();
    assert_eq!(intent_gets, 0, "{:#?}", lines(&log));
}

/// `converge --migrate-intents` moves the intent ConfigMaps an earlier version left into
/// Secrets (one list, then a create and a delete per ConfigMap) and says so; alone, it needs no
/// file and converges nothing; with a file it moves them before it resumes and converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converge_migrate_intents_moves_legacy_configmaps_only_when_asked() {
    let fake = world().await;
    let legacy = |name: &str| {
        let mut desired: StatefulSet = serde_json::from_value(statefulset("2Gi")).unwrap();
        desired.metadata.name = Some(name.into());
        let intent = flux_converger::journal::Intent {
            namespace: "default".into(),
            name: name.into(),
            uid: "00000000-0000-0000-0000-000000000000".into(),
            desired,
            plan: serde_json::json!({"recreate": true}),
            recorded_at: "2026-11-29T17:00:00Z".into(),
            revision: None,
            deleting: false,
            act_as: None,
            kustomization: None,
        };
        let mut cm = serde_json::to_value(
            flux_converger::journal::intent_to_configmap("default", &intent).unwrap(),
        )
        .unwrap();
        cm["apiVersion"] = serde_json::json!("v1");
        cm["kind"] = serde_json::json!("ConfigMap");
        fake.seed(cm);
    };
    legacy("gone");
    let served = fake.serve().await;
    let run = |args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_flux-converger"));
        command
            .arg("--kubeconfig")
            .arg(&served.kubeconfig)
            .args(args);
        command.output().unwrap()
    };
    let configmaps = || fake.list("v1", "ConfigMap", Some("default")).len();
    let secrets = || fake.list("v1", "Secret", Some("default")).len();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("web.yaml");
    std::fs::write(&file, statefulset("1Gi").to_string()).unwrap();
    // Without the flag, a converge leaves them alone (and sends no request about them).
    fake.clear_requests();
    let out = run(&["converge", "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!((configmaps(), secrets()), (1, 0));
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.path.contains("/configmaps"))
    );
    // Alone: moved, said, nothing else done.
    fake.clear_requests();
    let out = run(&["converge", "--migrate-intents", "-n", "default"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let name = flux_converger::journal::intent_configmap_name("default", "gone");
    assert_eq!(
        stdout,
        format!("moved legacy intent ConfigMap default/{name} into a Secret of the same name\n")
    );
    assert_eq!((configmaps(), secrets()), (0, 1));
    let methods: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(methods.len(), 3, "{methods:#?}");
    // With a file: moved first, then resumed and converged as always.
    legacy("other");
    let out = run(&[
        "converge",
        "--migrate-intents",
        "-f",
        file.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["dryRun"], false, "{summary}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("moved legacy intent ConfigMap"),
        "{out:?}"
    );
    assert_eq!(configmaps(), 0);
}

/// The request trace an operator turns on (docs/operating.md): one JSON line per request at
/// `debug` with the verb, method, path, status and duration, inside the StatefulSet's span,
/// and exactly as many lines as the server saw requests (N+12 for `converge -f`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_trace_counts_a_converge_line_by_line() {
    let fake = world().await;
    let served = fake.serve_tls().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("web.yaml");
    std::fs::write(&file, statefulset("2Gi").to_string()).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_flux-converger"))
        .arg("--kubeconfig")
        .arg(&served.kubeconfig)
        .args([
            "--log-level",
            "info,flux_converger::wire=debug",
            "--log-format",
            "json",
            "converge",
            "-f",
        ])
        .arg(&file)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let traced: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "flux_converger::wire" && l["message"] == "request")
        .collect();
    let log = fake.requests();
    assert_eq!(log.len(), CLAIMS + 12, "{:#?}", lines(&log));
    assert_eq!(traced.len(), log.len(), "{stderr}");
    for (line, seen) in traced.iter().zip(&log) {
        assert_eq!(line["level"], "DEBUG", "{line}");
        assert_eq!(line["method"], seen.method.as_str(), "{line}");
        let path = line["path"].as_str().unwrap_or_default();
        assert!(path.starts_with(&seen.path), "{line} vs {}", seen.path);
        assert!(line["status"].as_u64().is_some(), "{line}");
        assert!(line["elapsed_us"].as_u64().is_some(), "{line}");
        assert!(line["verb"].as_str().is_some(), "{line}");
    }
    let verbs: Vec<&str> = traced.iter().filter_map(|l| l["verb"].as_str()).collect();
    // docs/converge.md's N+12: the intents listed, the StatefulSet, the claims, the
    // StorageClasses, the proof (two dry-run patches) and the pre-flight (a dry-run create),
    // N claim patches, the intent recorded, the orphan delete, the watch until it is gone,
    // the re-apply, the intent cleared.
    let mut expected = vec!["list", "get", "list", "list", "patch", "patch", "create"];
    expected.extend(std::iter::repeat_n("patch", CLAIMS));
    expected.extend(["patch", "delete", "watch", "patch", "delete"]);
    assert_eq!(verbs, expected, "{:#?}", lines(&log));
    // Every request after the start's intent list is the StatefulSet's converge.
    for line in &traced[1..] {
        assert_eq!(line["span"]["statefulset"], "default/web", "{line}");
    }
}

/// The service's converge with warm caches: StorageClasses from its reflector, the intent
/// load answered by its watch of the intents, the StatefulSet decided on from its watch
/// (confirmed by the proof's answer) and its orphan delete seen complete there, the server's
/// "forbidden in place" remembered from an earlier converge. N+7: claim list, the proof, the
/// pre-flight, N claim patches, record, orphan delete, re-apply, clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_converge_with_warm_caches_costs_n_plus_7_requests() {
    use flux_converger::journal::Journal as _;
    use flux_converger::journal::watched::{IntentCache, WatchedJournal};
    use futures::StreamExt as _;
    use k8s_openapi::api::storage::v1::StorageClass;
    use kube::runtime::{WatchStreamExt as _, reflector, watcher};
    let fake = world().await;
    let served = fake.serve_tls().await;
    let client = flux_converger::wire::kube_client(config_of(&served.kubeconfig).await).unwrap();
    let (classes, writer) = reflector::store();
    let api: kube::Api<StorageClass> = kube::Api::all(client.clone());
    let reflect = tokio::spawn(
        reflector(writer, watcher(api, watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    classes.wait_until_ready().await.unwrap();
    let (intents, watch) = IntentCache::watch(client.clone(), "default");
    let watching = tokio::spawn(watch);
    let (statefulsets, watch_statefulsets) = flux_converger::cluster::WatchedStatefulSets::watch(
        client.clone(),
        flux_converger::flux::objects::OWNER_NAME_LABEL,
    );
    let watching_statefulsets = tokio::spawn(watch_statefulsets);
    let cluster = KubeCluster::new(client.clone(), Duration::from_secs(10))
        .with_storage_classes(classes)
        .with_statefulsets(statefulsets.clone());
    let journal = WatchedJournal::new(
        ConfigMapJournal::new(client, "default", Duration::from_secs(10)),
        Some(intents),
    );
    let options = opts();
    let first: StatefulSet = serde_json::from_value(statefulset("2Gi")).unwrap();
    let report = converge(&cluster, &journal, &first, &options)
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Converged, "{report:?}");
    // Observed, not timed: the watch has shown the first converge's record and its clear
    // once a load no longer reads the server.
    let intent_reads = |fake: &FakeApiServer| {
        fake.requests()
            .iter()
            .filter(|r| r.method == http::Method::GET && r.path.contains("/secrets/"))
            .count()
    };
    // And the StatefulSet watch holds the re-created object.
    let mut settled = false;
    for _ in 0..500 {
        let before = intent_reads(&fake);
        assert!(journal.load("default", "web").await.unwrap().is_none());
        let watched = statefulsets.get("default", "web");
        if intent_reads(&fake) == before
            && watched.is_some_and(|w| w.metadata.uid == report.new_uid)
        {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(settled, "the intent watch never settled");

    fake.clear_requests();
    let second: StatefulSet = serde_json::from_value(statefulset("3Gi")).unwrap();
    let report = converge(&cluster, &journal, &second, &options)
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Converged, "{report:?}");
    assert!(report.recreated, "{report:?}");
    reflect.abort();
    watching.abort();
    watching_statefulsets.abort();
    // The caches' own watches are not the converge's requests; the converge's wait for its
    // delete would be a watch of the namespace's StatefulSets, and there is none.
    let log: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| {
            !(r.watch
                && (r.path.contains("/storageclasses")
                    || r.path.contains("/secrets")
                    || r.path == "/apis/apps/v1/statefulsets"))
        })
        .collect();
    assert_eq!(log.len(), CLAIMS + 7, "{:#?}", lines(&log));
    let reads = log
        .iter()
        .filter(|r| r.method == http::Method::GET && r.path.contains("/statefulsets"))
        .count();
    assert_eq!(reads, 0, "{:#?}", lines(&log));
}
