//! The artifact storage over real HTTP: what the `artifact` gate publishes is served with
//! GET and HEAD as source-controller serves artifacts, verified before it is served, kept
//! across a restart, refetched onto an empty volume, and a digest many renders ask for at once
//! is downloaded once.

use test_support::flux_archive;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::StatusCode;
use flux_archive::{ArtifactServer, flux_artifact, sha256};
use flux_converger::flux::artifact::{Digest, FetchOptions, PEER_HEADER};
use flux_converger::storage::host::{ArtifactHost, ArtifactKey};
use flux_converger::storage::{Expected, Storage, StorageConfig};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n";

/// A storage on `dir` served on 127.0.0.1:0, its URLs naming the bound address.
struct Served {
    storage: Arc<Storage>,
    addr: SocketAddr,
    stop: CancellationToken,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(dir: &std::path::Path) -> Served {
    serve_bounded(dir, 1 << 30).await
}

async fn serve_bounded(dir: &std::path::Path, max_cache_bytes: u64) -> Served {
    flux_converger::tls::install_crypto_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = StorageConfig {
        path: Some(dir.to_path_buf()),
        addr,
        adv_addr: addr.to_string(),
        max_cache_bytes,
        ..StorageConfig::default()
    };
    let storage = Storage::open(&config, FetchOptions::default()).unwrap();
    let stop = CancellationToken::new();
    let server = storage.clone();
    let until = stop.clone().cancelled_owned();
    tokio::spawn(async move {
        flux_converger::storage::server::run(listener, server, Default::default(), until)
            .await
            .unwrap();
    });
    Served {
        storage,
        addr,
        stop,
    }
}

fn key(name: &str) -> ArtifactKey {
    ArtifactKey {
        namespace: "apps".into(),
        name: name.into(),
    }
}

fn revision(n: usize) -> Vec<u8> {
    flux_artifact(&[("cm.yaml", CM), ("rev.txt", &format!("revision {n}"))])
}

async fn get(url: &str) -> reqwest::Response {
    reqwest::Client::new().get(url).send().await.unwrap()
}

#[tokio::test]
async fn a_published_artifact_is_served_with_get_and_head() {
    let upstream = ArtifactServer::start().await;
    let data = revision(1);
    let upstream_url = upstream.put("gitrepository/apps/repo/1.tar.gz", data.clone());
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path()).await;
    let published = served
        .storage
        .publish(&key("db"), &upstream_url, &sha256(&data))
        .await
        .unwrap();
    let hex = Digest::parse(&sha256(&data)).unwrap().hex;
    assert_eq!(
        published.path,
        format!("externalartifact/apps/db/{hex}.tar.gz")
    );
    assert_eq!(
        published.url,
        format!("http://{}/{}", served.addr, published.path)
    );
    assert_eq!(published.digest, sha256(&data));
    assert_eq!(published.size, data.len() as i64);

    let response = get(&published.url).await;
    assert_eq!(response.status(), StatusCode::OK);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "application/x-gzip");
    assert_eq!(headers["content-length"], data.len().to_string().as_str());
    let etag = format!("\"{}\"", sha256(&data));
    assert_eq!(headers["etag"], etag.as_str());
    assert_eq!(response.bytes().await.unwrap().as_ref(), data.as_slice());

    let client = reqwest::Client::new();
    let head = client.head(&published.url).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(
        head.headers()["content-length"],
        data.len().to_string().as_str()
    );
    assert_eq!(head.headers()["etag"], etag.as_str());
    assert!(head.bytes().await.unwrap().is_empty());

    let unchanged = client
        .get(&published.url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(unchanged.status(), StatusCode::NOT_MODIFIED);

    for path in [
        "externalartifact/apps/db/0000.tar.gz",
        "",
        "blobs/sha256/whatever",
        "published.json",
        "../published.json",
    ] {
        let response = get(&format!("http://{}/{path}", served.addr)).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path:?}");
    }
    let post = client.post(&published.url).send().await.unwrap();
    assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
    // The upstream was asked once, by the publish.
    assert_eq!(upstream.requests().len(), 1);
}

/// The blob files on disk (one per stored artifact).
fn blobs_on_disk(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("blobs/sha256")).unwrap().count()
}

/// Publishes revisions `1..=n` of `db`, returning each one's published URL.
async fn publish_revisions(served: &Served, upstream: &ArtifactServer, n: usize) -> Vec<String> {
    let mut urls = Vec::new();
    for n in 1..=n {
        let data = revision(n);
        let url = upstream.put(&format!("r/{n}.tar.gz"), data.clone());
        let published = served
            .storage
            .publish(&key("db"), &url, &sha256(&data))
            .await
            .unwrap();
        urls.push(published.url);
    }
    urls
}

async fn statuses(urls: &[String]) -> Vec<StatusCode> {
    futures::future::join_all(urls.iter().map(|u| get(u)))
        .await
        .iter()
        .map(|r| r.status())
        .collect()
}

/// source-controller's garbage collection with its defaults (`--artifact-retention-records`
/// 2, `--artifact-retention-ttl` 1m): before each publish the ExternalArtifact's artifacts are
/// collected down to 2 with the current one kept, so 5 revisions leave 3 on disk (not 5 under a
/// roomy cache), the current one served, the collected ones 404 and gone from the index.
#[tokio::test]
async fn five_revisions_leave_at_most_three_artifacts_on_disk() {
    let upstream = ArtifactServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A roomy cache: only the garbage collection removes published artifacts.
    let served = serve(dir.path()).await;
    let urls = publish_revisions(&served, &upstream, 5).await;
    assert!(
        blobs_on_disk(dir.path()) <= 3,
        "{} artifacts on disk",
        blobs_on_disk(dir.path())
    );
    let got = statuses(&urls).await;
    assert_eq!(got[4], StatusCode::OK, "the current one is served");
    assert_eq!(
        got[..2],
        [StatusCode::NOT_FOUND, StatusCode::NOT_FOUND],
        "{got:?}"
    );
    let index = std::fs::read_to_string(dir.path().join("published.json")).unwrap();
    for gone in &urls[..2] {
        let path = gone.split_once(&served.addr.to_string()).unwrap().1;
        assert!(!index.contains(path.trim_start_matches('/')), "{index}");
    }
}

/// Past `--artifact-retention-ttl` the collection that runs without a new revision removes
/// every artifact but the current one: at most 2 stay (here 1), the current one served.
#[tokio::test]
async fn past_the_ttl_only_the_current_artifact_stays() {
    flux_converger::tls::install_crypto_provider();
    let upstream = ArtifactServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let ttl = std::time::Duration::from_millis(1500);
    let config = StorageConfig {
        path: Some(dir.path().to_path_buf()),
        addr,
        adv_addr: addr.to_string(),
        retention: flux_converger::storage::Retention { records: 2, ttl },
        ..StorageConfig::default()
    };
    let storage = Storage::open(&config, FetchOptions::default()).unwrap();
    let stop = CancellationToken::new();
    let server = storage.clone();
    let until = stop.clone().cancelled_owned();
    tokio::spawn(async move {
        flux_converger::storage::server::run(listener, server, Default::default(), until)
            .await
            .unwrap();
    });
    let served = Served {
        storage,
        addr,
        stop,
    };
    let urls = publish_revisions(&served, &upstream, 5).await;
    assert!(blobs_on_disk(dir.path()) <= 3);
    tokio::time::sleep(ttl + std::time::Duration::from_millis(200)).await;
    let removed = served.storage.collect_garbage().await.unwrap();
    assert!(!removed.is_empty());
    assert!(
        blobs_on_disk(dir.path()) <= 2,
        "{} artifacts on disk",
        blobs_on_disk(dir.path())
    );
    let got = statuses(&urls).await;
    assert_eq!(got[4], StatusCode::OK, "the current one is never collected");
    assert!(
        got[..4].iter().all(|s| *s == StatusCode::NOT_FOUND),
        "{got:?}"
    );
    // Nothing more to collect: the current one stays however old.
    assert!(served.storage.collect_garbage().await.unwrap().is_empty());
    assert_eq!(blobs_on_disk(dir.path()), 1);
}

#[tokio::test]
async fn a_restart_serves_what_was_published_without_the_upstream() {
    let upstream = ArtifactServer::start().await;
    let data = revision(1);
    let url = upstream.put("r/1.tar.gz", data.clone());
    let dir = tempfile::tempdir().unwrap();
    let published = {
        let served = serve(dir.path()).await;
        served
            .storage
            .publish(&key("db"), &url, &sha256(&data))
            .await
            .unwrap()
    };
    upstream.state.files.lock().unwrap().clear();
    let served = serve(dir.path()).await;
    served.storage.restore().await;
    assert!(!served.storage.lost(&key("db")));
    let path_url = format!("http://{}/{}", served.addr, published.path);
    let response = get(&path_url).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.bytes().await.unwrap().as_ref(), data.as_slice());
    assert_eq!(upstream.requests().len(), 1, "only the publish downloaded");
}

/// A blob changed on disk is re-hashed before its first serve after a start: a peer asking
/// gets 404 (and the blob is gone); Flux asking gets it refetched from the upstream.
#[tokio::test]
async fn a_corrupt_blob_is_deleted_and_refused() {
    let upstream = ArtifactServer::start().await;
    let data = revision(1);
    let url = upstream.put("r/1.tar.gz", data.clone());
    let dir = tempfile::tempdir().unwrap();
    let published = {
        let served = serve(dir.path()).await;
        served
            .storage
            .publish(&key("db"), &url, &sha256(&data))
            .await
            .unwrap()
    };
    let hex = Digest::parse(&sha256(&data)).unwrap().hex;
    let blob = dir.path().join("blobs/sha256").join(&hex);
    std::fs::write(&blob, b"not the published bytes").unwrap();
    let served = serve(dir.path()).await;
    let path_url = format!("http://{}/{}", served.addr, published.path);
    let from_peer = reqwest::Client::new()
        .get(&path_url)
        .header(PEER_HEADER, "1")
        .send()
        .await
        .unwrap();
    assert_eq!(from_peer.status(), StatusCode::NOT_FOUND);
    assert!(!blob.exists(), "the corrupt blob is deleted");
    assert_eq!(upstream.requests().len(), 1);

    let response = get(&path_url).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.bytes().await.unwrap().as_ref(), data.as_slice());
    assert_eq!(upstream.requests().len(), 2, "refetched from the upstream");
}

/// A replica on an empty volume (a reschedule, or a follower) is told what the cluster says
/// is published and fetches it: from the upstream while it still has the digest, else from
/// a peer replica; when neither has it, the artifact is lost.
#[tokio::test]
async fn an_empty_volume_is_refilled_from_the_upstream_or_a_peer_or_is_lost() {
    let upstream = ArtifactServer::start().await;
    let data = revision(1);
    let upstream_url = upstream.put("r/1.tar.gz", data.clone());
    let leader_dir = tempfile::tempdir().unwrap();
    let leader = serve(leader_dir.path()).await;
    let published = leader
        .storage
        .publish(&key("db"), &upstream_url, &sha256(&data))
        .await
        .unwrap();
    let expected = |urls: Vec<String>| Expected {
        path: published.path.clone(),
        digest: published.digest.clone(),
        size: published.size as u64,
        urls,
    };

    // From the upstream.
    let a_dir = tempfile::tempdir().unwrap();
    let a = serve(a_dir.path()).await;
    a.storage
        .expect("apps", "db", expected(vec![upstream_url.clone()]))
        .await
        .unwrap();
    let response = get(&format!("http://{}/{}", a.addr, published.path)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.bytes().await.unwrap().as_ref(), data.as_slice());
    assert_eq!(upstream.requests().len(), 2);

    // The upstream moved on: from the peer that serves it.
    upstream.state.files.lock().unwrap().clear();
    let b_dir = tempfile::tempdir().unwrap();
    let b = serve(b_dir.path()).await;
    b.storage
        .expect(
            "apps",
            "db",
            expected(vec![upstream_url.clone(), published.url.clone()]),
        )
        .await
        .unwrap();
    assert!(!b.storage.lost(&key("db")));
    let response = get(&format!("http://{}/{}", b.addr, published.path)).await;
    assert_eq!(response.bytes().await.unwrap().as_ref(), data.as_slice());

    // Nobody has it: lost, and the path is not served.
    let c_dir = tempfile::tempdir().unwrap();
    let c = serve(c_dir.path()).await;
    let error = c
        .storage
        .expect("apps", "db", expected(vec![upstream_url.clone()]))
        .await
        .unwrap_err();
    assert!(error.contains("404"), "{error}");
    assert!(c.storage.lost(&key("db")));
    let response = reqwest::Client::new()
        .get(format!("http://{}/{}", c.addr, published.path))
        .header(PEER_HEADER, "1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);

    // The leader says so on the ExternalArtifact: Ready=False ArtifactLost, the published
    // artifact kept (Flux keeps applying what it has), written once.
    flux_converger::tls::install_crypto_provider();
    let fake = fake_apiserver::FakeApiServer::new();
    fake.seed(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "ExternalArtifact",
        "metadata": {"name": "db", "namespace": "apps"},
        "spec": {"sourceRef": {"kind": "GitRepository", "name": "repo"}},
        "status": {
            "artifact": {"url": published.url, "path": published.path, "digest": published.digest,
                         "revision": "main@sha1:1", "size": published.size,
                         "lastUpdateTime": "2026-11-30T00:00:00Z"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                            "message": "stored artifact for converged revision 'main@sha1:1'",
                            "lastTransitionTime": "2026-11-30T00:00:00Z"}]
        }
    }));
    let client = fake.client();
    let report = || {
        flux_converger::service::gate::publish::report_lost(
            &client,
            &c.storage,
            std::time::Duration::from_secs(5),
        )
    };
    report().await;
    let ea = fake
        .get(
            "source.toolkit.fluxcd.io/v1",
            "ExternalArtifact",
            Some("apps"),
            "db",
        )
        .unwrap();
    let ready = &ea["status"]["conditions"][0];
    assert_eq!(
        (&ready["type"], &ready["status"], &ready["reason"]),
        (&json!("Ready"), &json!("False"), &json!("ArtifactLost")),
        "{ea:#}"
    );
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("apps/db is lost"),
        "{ready}"
    );
    assert_eq!(ea["status"]["artifact"]["revision"], "main@sha1:1");
    let writes = fake.requests().len();
    report().await;
    assert_eq!(
        fake.requests()
            .iter()
            .skip(writes)
            .filter(|r| r.method != fake_apiserver::Method::GET)
            .count(),
        0,
        "said once"
    );

    // A path that is not this storage's layout for the key is refused.
    let mut foreign = expected(vec![upstream_url]);
    foreign.path = "gitrepository/apps/db/x.tar.gz".into();
    assert!(c.storage.expect("apps", "db", foreign).await.is_err());
}

/// An upstream that holds every response until told, counting requests.
struct HeldUpstream {
    url: String,
    hits: Arc<AtomicUsize>,
    release: Arc<tokio::sync::Semaphore>,
}

async fn held_upstream(data: Vec<u8>) -> HeldUpstream {
    let hits = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (h, r) = (hits.clone(), release.clone());
    let app = axum::Router::new().route(
        "/a.tar.gz",
        axum::routing::get(move || {
            let (hits, release, data) = (h.clone(), r.clone(), data.clone());
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                let _permit = release.acquire().await.unwrap();
                data
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    HeldUpstream {
        url: format!("http://{addr}/a.tar.gz"),
        hits,
        release,
    }
}

/// Five renders of one revision at once: one download, every render unpacks the same tree;
/// later renders take it from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_fetches_of_one_digest_download_once() {
    let data = flux_artifact(&[("apps/cm.yaml", CM)]);
    let digest = sha256(&data);
    let upstream = held_upstream(data.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path()).await;
    let fetcher = served.storage.fetcher();
    let store = fetcher.store().unwrap().clone();
    let parsed = Digest::parse(&digest).unwrap();

    let fetches: Vec<_> = (0..5)
        .map(|_| {
            let (fetcher, url, digest) = (fetcher.clone(), upstream.url.clone(), digest.clone());
            tokio::spawn(async move { fetcher.fetch(&url, &digest).await })
        })
        .collect();
    // Every fetch joins the one download before the upstream answers.
    while store.waiting(&parsed) < 5 {
        tokio::task::yield_now().await;
    }
    upstream.release.add_permits(100);
    for fetch in fetches {
        let unpacked = fetch.await.unwrap().unwrap();
        assert_eq!(
            std::fs::read_to_string(unpacked.root().join("apps/cm.yaml")).unwrap(),
            CM
        );
    }
    assert_eq!(upstream.hits.load(Ordering::SeqCst), 1);
    for _ in 0..5 {
        fetcher.fetch(&upstream.url, &digest).await.unwrap();
    }
    assert_eq!(upstream.hits.load(Ordering::SeqCst), 1);
    assert_eq!(store.downloads(), (1, data.len() as u64));
}

/// A failing download is one attempt shared by every waiter: the upstream sees one request
/// per wave, and the next wave (the queue's retry) downloads again.
#[tokio::test]
async fn a_failed_download_is_shared_and_not_cached() {
    let upstream = ArtifactServer::start().await;
    let data = revision(1);
    let url = upstream.put("r/1.tar.gz", data.clone());
    upstream.fail_first("r/1.tar.gz", &[503]);
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path()).await;
    let fetcher = served.storage.fetcher();
    let error = fetcher.fetch(&url, &sha256(&data)).await.unwrap_err();
    assert!(!error.is_bad_input(), "{error}");
    assert_eq!(upstream.requests().len(), 1);
    fetcher.fetch(&url, &sha256(&data)).await.unwrap();
    assert_eq!(upstream.requests().len(), 2);
    let wrong = sha256(b"other bytes");
    let error = fetcher.fetch(&url, &wrong).await.unwrap_err();
    assert!(error.is_bad_input(), "{error}");
    assert!(
        !dir.path()
            .join("blobs/sha256")
            .join(Digest::parse(&wrong).unwrap().hex)
            .exists()
    );
}

fn git_repository(name: &str, url: &str, digest: &str) -> serde_json::Value {
    json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": name, "namespace": "apps"},
        "spec": {"interval": "1m", "url": "https://example.com/repo.git", "ref": {"branch": "main"}},
        "status": {"artifact": {"url": url, "digest": digest, "revision": "main@sha1:0123abcd",
            "path": "gitrepository/apps/repo/1.tar.gz", "size": 1,
            "lastUpdateTime": "2026-11-29T00:00:00Z"}}
    })
}

fn external_artifact(
    name: &str,
    source: &str,
    url: &str,
    path: &str,
    digest: &str,
) -> serde_json::Value {
    json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "ExternalArtifact",
        "metadata": {"name": name, "namespace": "apps"},
        "spec": {"sourceRef": {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": source}},
        "status": {"artifact": {"url": url, "digest": digest, "revision": "main@sha1:0123abcd",
            "path": path, "size": 1, "lastUpdateTime": "2026-11-29T00:00:00Z"}}
    })
}

/// A follower (or a replica restarted on an empty volume) watches the ExternalArtifacts and
/// fetches what they say this storage publishes, from the upstream source that still has the
/// digest; an ExternalArtifact another producer serves is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_fetches_what_the_external_artifacts_publish() {
    let upstream = ArtifactServer::start().await;
    let data = revision(7);
    let digest = sha256(&data);
    let upstream_url = upstream.put("gitrepository/apps/repo/7.tar.gz", data.clone());
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path()).await;
    let hex = Digest::parse(&digest).unwrap().hex;
    let path = format!("externalartifact/apps/db/{hex}.tar.gz");
    let fake = fake_apiserver::FakeApiServer::new();
    fake.seed(git_repository("repo", &upstream_url, &digest));
    fake.seed(external_artifact(
        "db",
        "repo",
        &served.storage.url_of(&path),
        &path,
        &digest,
    ));
    let other = format!("externalartifact/apps/other/{hex}.tar.gz");
    fake.seed(external_artifact(
        "other",
        "repo",
        &format!("http://source-watcher.flux-system.svc/{other}"),
        &other,
        &digest,
    ));
    let follow = tokio::spawn(flux_converger::storage::follow::follow(
        served.storage.clone(),
        fake.client(),
    ));
    let url = format!("http://{}/{path}", served.addr);
    // Asked as a peer would: served only once the follower has fetched it.
    loop {
        let response = reqwest::Client::new()
            .get(&url)
            .header(PEER_HEADER, "1")
            .send()
            .await
            .unwrap();
        if response.status() == StatusCode::OK {
            assert_eq!(response.bytes().await.unwrap().as_ref(), data.as_slice());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        upstream.requests(),
        vec!["gitrepository/apps/repo/7.tar.gz".to_string()]
    );
    assert!(!served.storage.lost(&key("db")));
    let other_url = format!("http://{}/{other}", served.addr);
    assert_eq!(get(&other_url).await.status(), StatusCode::NOT_FOUND);
    // The ExternalArtifact deleted: its artifacts leave the index and the disk, as
    // source-controller's do with their object.
    fake.remove(
        "source.toolkit.fluxcd.io/v1",
        "ExternalArtifact",
        Some("apps"),
        "db",
    )
    .expect("the ExternalArtifact");
    for _ in 0..500 {
        if blobs_on_disk(dir.path()) == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(blobs_on_disk(dir.path()), 0);
    assert_eq!(get(&url).await.status(), StatusCode::NOT_FOUND);
    follow.abort();
}

/// A request from Flux that misses before the watch has caught up (a replica just started):
/// the ExternalArtifact the path names is read, and its artifact fetched before the answer.
/// A peer's request never makes a replica fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_looks_the_external_artifact_up() {
    let upstream = ArtifactServer::start().await;
    let data = revision(8);
    let digest = sha256(&data);
    let upstream_url = upstream.put("gitrepository/apps/repo/8.tar.gz", data.clone());
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path()).await;
    let hex = Digest::parse(&digest).unwrap().hex;
    let path = format!("externalartifact/apps/db/{hex}.tar.gz");
    let fake = fake_apiserver::FakeApiServer::new();
    fake.seed(git_repository("repo", &upstream_url, &digest));
    fake.seed(external_artifact(
        "db",
        "repo",
        &served.storage.url_of(&path),
        &path,
        &digest,
    ));
    flux_converger::storage::follow::set_lookup(&served.storage, fake.client());
    let url = format!("http://{}/{path}", served.addr);
    let from_peer = reqwest::Client::new()
        .get(&url)
        .header(PEER_HEADER, "1")
        .send()
        .await
        .unwrap();
    assert_eq!(from_peer.status(), StatusCode::NOT_FOUND);
    assert!(upstream.requests().is_empty());
    let response = get(&url).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.bytes().await.unwrap().as_ref(), data.as_slice());
    let unknown = format!(
        "http://{}/externalartifact/apps/nope/{hex}.tar.gz",
        served.addr
    );
    assert_eq!(get(&unknown).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(upstream.requests().len(), 1);
}

fn service_config(storage: StorageConfig) -> flux_converger::service::Config {
    test_support::service::config("flux-system")
        .hook_token(Some("t0ken".into()))
        .allow_unauthenticated_hooks(false)
        .hook_min_interval(std::time::Duration::from_secs(10))
        .workers(1)
        .handoff_timeout(std::time::Duration::from_secs(60))
        .storage(storage)
        .build()
}

fn storage_at(path: Option<std::path::PathBuf>) -> StorageConfig {
    StorageConfig {
        path,
        addr: "127.0.0.1:0".parse().unwrap(),
        adv_addr: "converger.flux-system.svc".into(),
        max_cache_bytes: 1 << 20,
        ..StorageConfig::default()
    }
}

/// A storage path that does not exist is created (parents too) and used, as source-controller
/// creates its own: the artifact port is bound and renders go through its store. One that
/// cannot be created fails the start naming `--storage-path`; no path, no artifact port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_creates_its_storage_path_and_refuses_one_it_cannot() {
    flux_converger::tls::install_crypto_provider();
    let fake = fake_apiserver::FakeApiServer::new();
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("new/nested/storage");
    let with = flux_converger::service::start(
        service_config(storage_at(Some(nested.clone()))),
        fake.client(),
    )
    .await
    .unwrap();
    let addr = with.storage_addr.expect("the artifact port is bound");
    let response = get(&format!("http://{addr}/externalartifact/apps/db/x.tar.gz")).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(nested.join("blobs/sha256").is_dir());
    with.shutdown().await;

    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let under_a_file = file.join("storage");
    match flux_converger::service::start(
        service_config(storage_at(Some(under_a_file.clone()))),
        fake.client(),
    )
    .await
    {
        Ok(running) => {
            running.shutdown().await;
            panic!("started on a storage path under a file");
        }
        Err(error) => {
            let text = error.to_string();
            assert!(text.contains("--storage-path"), "{text}");
            assert!(text.contains(under_a_file.to_str().unwrap()), "{text}");
        }
    }

    let without = flux_converger::service::start(service_config(storage_at(None)), fake.client())
        .await
        .unwrap();
    assert_eq!(without.storage_addr, None);
    without.shutdown().await;
}

/// `GET /readyz`: status and body.
async fn readyz(addr: SocketAddr) -> (u16, String) {
    let response = get(&format!("http://{addr}/readyz")).await;
    let code = response.status().as_u16();
    (code, response.text().await.unwrap_or_default())
}

/// Polls `/readyz` (at most 20 s) until `done` says so; the last answer.
async fn readyz_until(addr: SocketAddr, done: impl Fn(u16, &str) -> bool) -> (u16, String) {
    let mut last = (0, String::new());
    for _ in 0..1000 {
        last = readyz(addr).await;
        if done(last.0, &last.1) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    last
}

/// No storage because the default directory cannot be created: ready while no Kustomization
/// uses the `artifact` gate; once one does, `/readyz` is 503 naming the directory and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_says_the_storage_is_missing_while_the_artifact_gate_is_used() {
    flux_converger::tls::install_crypto_provider();
    let fake = fake_apiserver::FakeApiServer::new();
    let why = "the default --storage-path /nowhere/data does not exist and cannot be created \
               (creating /nowhere/data: Read-only file system (os error 30))";
    let storage = StorageConfig {
        unavailable: Some(why.into()),
        ..storage_at(None)
    };
    let running = flux_converger::service::start(service_config(storage), fake.client())
        .await
        .unwrap();
    let (code, body) = readyz_until(running.addr, |code, _| code == 200).await;
    assert_eq!(code, 200, "{body}");
    fake.seed(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": "flux-system",
                     "annotations": {"flux-converger.io/gate": "artifact"}},
        "spec": {"interval": "10m", "path": "./apps", "prune": true,
                 "sourceRef": {"kind": "ExternalArtifact", "name": "apps"}},
    }));
    let (code, body) = readyz_until(running.addr, |code, _| code == 503).await;
    assert_eq!(code, 503, "{body}");
    for word in ["no artifact storage", "/nowhere/data", "artifact gate"] {
        assert!(body.contains(word), "{word:?} missing from {body}");
    }
    running.shutdown().await;
}
