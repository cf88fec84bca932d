//! The HTTP edge of `flux-converger serve` as a process, against the fake API server: every
//! port closes a connection that does not send its request head in time (slowloris) and
//! answers 408 to a request whose body stalls; a port at `--http-max-connections` accepts the
//! next connection once one closes; 100 concurrent 3 MiB webhook posts with a wrong signature
//! and 200 slowloris sockets leave the process within 100 MB and `/healthz` answering; and
//! `--status-auth=kubernetes` guards the results with TokenReview and SubjectAccessReview.
//!
//! The settings come from their environment variables (`FLUX_CONVERGER_HTTP_*`,
//! `FLUX_CONVERGER_STATUS_AUTH`), so a binary without them still starts and the tests fail on
//! its behaviour. Every wait is bounded by [`GUARD`], far past what the behaviour needs: a
//! hang fails the test instead of the run; no timing is asserted. `HTTP_EDGE_SERVE_BINARY`
//! runs another build instead of this tree's (hack/http-abuse.sh measures one with it).

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fake_apiserver::FakeApiServer;
use flux_converger::flux::event::{SignatureAlgorithm, sign};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_flux-converger");
const KEY: &[u8] = b"edge-hmac-key\n";
/// How long any one behaviour may take before the test gives up on it.
const GUARD: Duration = Duration::from_secs(90);

struct Serve {
    child: tokio::process::Child,
    addr: SocketAddr,
    metrics_addr: SocketAddr,
    storage_addr: Option<SocketAddr>,
    _dir: tempfile::TempDir,
    _served: fake_apiserver::Served,
}

impl Serve {
    async fn start(fake: &FakeApiServer, args: &[&str], env: &[(&str, &str)]) -> Serve {
        let served = fake.serve().await;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("hmac");
        std::fs::write(&key, KEY).unwrap();
        let storage = dir.path().join("storage");
        std::fs::create_dir(&storage).unwrap();
        let bin = std::env::var("HTTP_EDGE_SERVE_BINARY").unwrap_or_else(|_| BIN.to_string());
        let mut command = tokio::process::Command::new(bin);
        command
            .args([
                "serve",
                "--kubeconfig",
                served.kubeconfig.to_str().unwrap(),
                "-n",
                "flux-system",
                "--listen",
                "127.0.0.1:0",
                "--metrics-addr",
                "127.0.0.1:0",
                "--storage-addr",
                "127.0.0.1:0",
                "--storage-path",
                storage.to_str().unwrap(),
                "--hmac-key-file",
                key.to_str().unwrap(),
                "--log-format",
                "json",
            ])
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, _) in std::env::vars() {
            if k.starts_with("FLUX_CONVERGER_") {
                command.env_remove(k);
            }
        }
        command.envs(env.iter().copied());
        let mut child = command.spawn().expect("spawn serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut storage_addr = None;
        let mut seen = Vec::new();
        let serving = tokio::time::timeout(GUARD, async {
            loop {
                let Some(line) = lines.next_line().await.expect("read stderr") else {
                    panic!("serve stopped before serving: {seen:#?}");
                };
                let Ok(entry) = serde_json::from_str::<Value>(&line) else {
                    seen.push(line);
                    continue;
                };
                if entry["message"] == "serving artifacts" {
                    storage_addr = entry["storage_addr"].as_str().and_then(|a| a.parse().ok());
                }
                if entry["message"] == "serving" {
                    return entry;
                }
                seen.push(line);
            }
        })
        .await
        .expect("serve starts");
        // Keep reading, so the pipe never fills.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let addr = |key: &str| -> SocketAddr {
            serving[key]
                .as_str()
                .and_then(|a| a.parse().ok())
                .expect(key)
        };
        Serve {
            addr: addr("addr"),
            metrics_addr: addr("metrics_addr"),
            storage_addr,
            child,
            _dir: dir,
            _served: served,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("serve runs")
    }

    /// `VmHWM` (the peak resident set) and `VmRSS` of the process, in bytes.
    fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map(|kb| kb * 1024)
                .unwrap_or_else(|| panic!("{name} in {status}"))
        };
        (field("VmHWM:"), field("VmRSS:"))
    }
}

/// A socket that sends the start of a request head and then one more byte every 500 ms,
/// never finishing it. Returns once the server has closed it (a read sees EOF or a reset).
async fn slowloris(addr: SocketAddr) -> Result<(), String> {
    let mut socket = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    socket
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut buf = [0u8; 64];
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            read = socket.read(&mut buf) => match read {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => return Err(format!("answered: {:?}", String::from_utf8_lossy(&buf))),
            },
            _ = tick.tick() => {
                // The server may have closed it already; the read says so.
                let _ = socket.write_all(b"a").await;
            }
        }
    }
}

/// `GET path` on a new connection: the status code and the body.
async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new().get(format!("http://{addr}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = tokio::time::timeout(GUARD, request.send())
        .await
        .unwrap_or_else(|_| panic!("GET {path} answered"))
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let code = response.status().as_u16();
    (code, response.text().await.unwrap_or_default())
}

/// Every port closes a connection that has not sent its request head within
/// `--http-header-read-timeout` (here 2 s): the socket reads EOF while it is still sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_socket_is_closed_by_every_port() {
    let fake = FakeApiServer::new();
    let serve = Serve::start(
        &fake,
        &[],
        &[("FLUX_CONVERGER_HTTP_HEADER_READ_TIMEOUT", "2s")],
    )
    .await;
    let storage = serve.storage_addr.expect("the artifact server listens");
    for (port, addr) in [
        ("--listen", serve.addr),
        ("--metrics-addr", serve.metrics_addr),
        ("--storage-addr", storage),
    ] {
        let closed = tokio::time::timeout(GUARD, slowloris(addr)).await;
        match closed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{port}: {e}"),
            Err(_) => panic!("{port}: a slowloris socket is still open after {GUARD:?}"),
        }
    }
}

/// A request whose body stops arriving is answered 408 once `--http-request-timeout` (here
/// 1 s) has passed, and the process answers other requests meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_answered_408() {
    let fake = FakeApiServer::new();
    let serve = Serve::start(&fake, &[], &[("FLUX_CONVERGER_HTTP_REQUEST_TIMEOUT", "1s")]).await;
    let mut socket = TcpStream::connect(serve.addr).await.unwrap();
    socket
        .write_all(
            b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              X-Signature: sha256=00\r\nContent-Length: 1000\r\n\r\n{\"involved",
        )
        .await
        .unwrap();
    assert_eq!(get(serve.addr, "/healthz", None).await.0, 200);
    let mut answer = Vec::new();
    let read = tokio::time::timeout(GUARD, socket.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "no answer to a stalled body within {GUARD:?}");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

/// At `--http-max-connections` (here 2) a third connection is not served while the two are
/// held, and is once one of them closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_at_its_connection_limit_serves_the_next_once_one_closes() {
    let fake = FakeApiServer::new();
    let serve = Serve::start(
        &fake,
        &[],
        &[
            ("FLUX_CONVERGER_HTTP_MAX_CONNECTIONS", "2"),
            ("FLUX_CONVERGER_HTTP_HEADER_READ_TIMEOUT", "120s"),
        ],
    )
    .await;
    let held_a = TcpStream::connect(serve.addr).await.unwrap();
    let held_b = TcpStream::connect(serve.addr).await.unwrap();
    let addr = serve.addr;
    let mut third = tokio::spawn(async move { get(addr, "/healthz", None).await });
    // Not served while both are held (a short look: a wrong pass here is possible, a wrong
    // failure is not).
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut third)
            .await
            .is_err(),
        "a third connection was served past the limit"
    );
    drop(held_a);
    let (code, _) = tokio::time::timeout(GUARD, third)
        .await
        .expect("served once a connection closed")
        .unwrap();
    assert_eq!(code, 200);
    drop(held_b);
}

/// 200 slowloris sockets and 100 concurrent 3 MiB posts to `/hook` with a wrong signature:
/// every post is refused 401, `/healthz` answers while they run, each slowloris socket is
/// closed by the server, and the process's peak resident set stays within 100 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_flood_and_slowloris_sockets_keep_the_process_small_and_healthy() {
    const SLOW: usize = 200;
    const POSTS: usize = 100;
    const BODY: usize = 3 * 1024 * 1024;
    const BUDGET: u64 = 100 * 1000 * 1000;
    let fake = FakeApiServer::new();
    let serve = Serve::start(
        &fake,
        &[],
        &[("FLUX_CONVERGER_HTTP_HEADER_READ_TIMEOUT", "5s")],
    )
    .await;
    let (before, _) = serve.memory();
    let addr = serve.addr;
    let slow: Vec<_> = (0..SLOW)
        .map(|_| tokio::spawn(tokio::time::timeout(GUARD, slowloris(addr))))
        .collect();
    // A body of the largest size allowed, padded JSON, signed with another key.
    let mut body = br#"{"involvedObject":{"kind":"GitRepository","namespace":"flux-system","name":"repo"},"message":""#.to_vec();
    body.resize(BODY - 2, b'x');
    body.extend_from_slice(b"\"}");
    let signature = sign(SignatureAlgorithm::Sha256, b"not-the-key", &body);
    let body = bytes::Bytes::from(body);
    let http = reqwest::Client::new();
    let posts: Vec<_> = (0..POSTS)
        .map(|_| {
            let request = http
                .post(format!("http://{addr}/hook"))
                .header("Content-Type", "application/json")
                .header("X-Signature", signature.clone())
                .body(body.clone());
            tokio::spawn(async move {
                let response = tokio::time::timeout(GUARD, request.send()).await;
                match response {
                    Ok(Ok(r)) => Ok(r.status().as_u16()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("no answer".into()),
                }
            })
        })
        .collect();
    // While they run: /healthz every 100 ms, each on a new connection.
    let (done, mut stop) = tokio::sync::oneshot::channel::<()>();
    let probe = tokio::spawn(async move {
        let mut latencies = Vec::new();
        loop {
            let asked = Instant::now();
            let (code, _) = get(addr, "/healthz", None).await;
            latencies.push((code, asked.elapsed()));
            tokio::select! {
                _ = &mut stop => return latencies,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    });
    let mut refused = Vec::new();
    for post in posts {
        refused.push(post.await.unwrap());
    }
    let _ = done.send(());
    let latencies = probe.await.unwrap();
    assert!(refused.iter().all(|r| *r == Ok(401)), "{refused:?}");
    assert!(
        latencies.iter().all(|(code, _)| *code == 200),
        "{latencies:?}"
    );
    let latency = latencies.iter().map(|(_, l)| *l).max().unwrap_or_default();
    let (code, _) = get(addr, "/healthz", None).await;
    assert_eq!(code, 200);
    let (peak, now) = serve.memory();
    eprintln!(
        "serve RSS: {} MB at start, peak {} MB, {} MB after; /healthz under load: {} answers, slowest {latency:?}",
        before / 1_000_000,
        peak / 1_000_000,
        now / 1_000_000,
        latencies.len()
    );
    for socket in slow {
        match socket.await.unwrap() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("slowloris: {e}"),
            Err(_) => panic!("a slowloris socket is still open after {GUARD:?}"),
        }
    }
    assert!(
        peak <= BUDGET,
        "peak RSS {} MB over {} MB",
        peak / 1_000_000,
        BUDGET / 1_000_000
    );
}

fn kustomization(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {"flux-converger.io/gate": "suspend"}},
        "spec": {"interval": "10m", "path": "./apps", "prune": true, "suspend": true,
                 "sourceRef": {"kind": "GitRepository", "name": "repo"}}
    })
}

/// The `namespace/name` rows of a `/status` body.
fn rows(body: &str) -> Vec<String> {
    let value: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    value["kustomizations"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|k| {
            format!(
                "{}/{}",
                k["namespace"].as_str().unwrap(),
                k["name"].as_str().unwrap()
            )
        })
        .collect()
}

const READ_KUSTOMIZATIONS: &str = "read-kustomizations";

/// A ClusterRole to get Kustomizations, bound to `user` in `namespace` (a RoleBinding), or for
/// the names given only.
fn grant_get(fake: &FakeApiServer, namespace: &str, user: &str, names: &[&str]) {
    let mut rule = json!({"apiGroups": ["kustomize.toolkit.fluxcd.io"],
                          "resources": ["kustomizations"], "verbs": ["get", "list"]});
    if !names.is_empty() {
        rule["resourceNames"] = json!(names);
    }
    fake.grant(namespace, user, json!([rule]));
}

/// `--status-auth=kubernetes`, over real HTTP against the fake's TokenReview and
/// SubjectAccessReview: no token or an unknown one is 401 on `/status`, its detail and the
/// dashboard; a caller sees the rows its RBAC lets it get (a namespace, one name, all of them
/// through a group), is refused 403 on another's detail, and the probes stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_auth_kubernetes_shows_each_caller_what_it_may_get() {
    let fake = FakeApiServer::new();
    for (ns, name) in [
        ("team-a", "web"),
        ("team-a", "db"),
        ("team-b", "web"),
        ("team-b", "cache"),
    ] {
        fake.seed(kustomization(ns, name));
    }
    fake.add_token("alice-token", "alice", &[]);
    fake.add_token("bob-token", "system:serviceaccount:team-b:reader", &[]);
    fake.add_token("ops-token", "olga", &["ops"]);
    fake.add_token("nobody-token", "nobody", &[]);
    grant_get(&fake, "team-a", "alice", &[]);
    grant_get(
        &fake,
        "team-b",
        "system:serviceaccount:team-b:reader",
        &["cache"],
    );
    fake.seed(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": READ_KUSTOMIZATIONS},
        "rules": [{"apiGroups": ["kustomize.toolkit.fluxcd.io"],
                   "resources": ["kustomizations"], "verbs": ["get"]}],
    }));
    fake.seed(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": READ_KUSTOMIZATIONS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": READ_KUSTOMIZATIONS},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ops"}],
    }));
    let serve = Serve::start(&fake, &[], &[("FLUX_CONVERGER_STATUS_AUTH", "kubernetes")]).await;
    let addr = serve.addr;
    // Every row is known to the service (ops sees them all) before anything is compared.
    let all = ["team-a/db", "team-a/web", "team-b/cache", "team-b/web"];
    tokio::time::timeout(GUARD, async {
        loop {
            let (code, body) = get(addr, "/status", Some("ops-token")).await;
            if code == 200 && rows(&body) == all {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("ops sees every row");

    for path in [
        "/status",
        "/status/team-a/web",
        "/",
        "/kustomizations/team-a/web",
    ] {
        let (code, body) = get(addr, path, None).await;
        assert_eq!(code, 401, "{path} without a token: {body}");
        assert!(body.contains("bearer token"), "{path}: {body}");
        let (code, body) = get(addr, path, Some("forged-token")).await;
        assert_eq!(code, 401, "{path} with an unknown token: {body}");
    }

    let (_, body) = get(addr, "/status", Some("alice-token")).await;
    assert_eq!(rows(&body), ["team-a/db", "team-a/web"]);
    let (_, body) = get(addr, "/status?namespace=team-b", Some("alice-token")).await;
    assert_eq!(rows(&body), Vec::<String>::new());
    let (_, body) = get(addr, "/status", Some("bob-token")).await;
    assert_eq!(rows(&body), ["team-b/cache"]);
    let (_, body) = get(addr, "/status", Some("nobody-token")).await;
    assert_eq!(rows(&body), Vec::<String>::new());

    assert_eq!(
        get(addr, "/status/team-a/web", Some("alice-token")).await.0,
        200
    );
    let (code, body) = get(addr, "/status/team-b/web", Some("alice-token")).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("User \\\"alice\\\" cannot get resource"),
        "{body}"
    );
    assert_eq!(
        get(addr, "/status/team-b/web", Some("bob-token")).await.0,
        403
    );
    assert_eq!(
        get(addr, "/kustomizations/team-b/web", Some("bob-token"))
            .await
            .0,
        403
    );
    assert_eq!(
        get(addr, "/kustomizations/team-b/cache", Some("bob-token"))
            .await
            .0,
        200
    );
    // Not handled, and not allowed: 403, not 404 (no name is confirmed to exist).
    assert_eq!(
        get(addr, "/status/team-b/ghost", Some("alice-token"))
            .await
            .0,
        403
    );
    assert_eq!(
        get(addr, "/status/team-a/ghost", Some("alice-token"))
            .await
            .0,
        404
    );

    let (code, page) = get(addr, "/", Some("bob-token")).await;
    assert_eq!(code, 200);
    assert!(page.contains("cache"), "bob's row is on the page");
    assert!(!page.contains("team-a"), "alice's namespace is not: {page}");

    // Health and readiness need no token; /hook keeps its own HMAC (401 for the signature).
    assert_eq!(get(addr, "/healthz", None).await.0, 200);
    assert_ne!(get(addr, "/readyz", None).await.0, 401);
    assert_eq!(get(serve.metrics_addr, "/healthz", None).await.0, 200);

    // Each token was reviewed once, and each question answered from the kept answers after.
    let token_reviews = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/tokenreviews"))
        .count();
    assert!(
        token_reviews <= 8,
        "{token_reviews} TokenReviews for 5 tokens"
    );
}

/// Without `--status-auth` the results stay open to whoever reaches the port, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_status_auth_the_results_need_no_token() {
    let fake = FakeApiServer::new();
    fake.seed(kustomization("team-a", "web"));
    let serve = Serve::start(&fake, &[], &[]).await;
    let (code, _) = get(serve.addr, "/status", None).await;
    assert_eq!(code, 200);
    assert!(
        !fake
            .requests()
            .iter()
            .any(|r| r.path.ends_with("/tokenreviews")),
        "no review asked"
    );
}
