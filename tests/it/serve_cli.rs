//! `flux-converger serve` as a process: who may post to `/hook` and which ports it serves are
//! decided from the flags before any client is built (exit 2), and an open webhook is said out
//! loud, once, at start.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_flux-converger");

/// The binary with a hermetic environment: no kubeconfig unless given, no inherited log filter
/// or `FLUX_CONVERGER_*` flags.
fn command(args: &[&str], env: &[(&str, &str)]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(BIN);
    command
        .args(args)
        .env("KUBECONFIG", "/nonexistent/flux-converger-test-kubeconfig")
        .env_remove("RUST_LOG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, _) in std::env::vars() {
        if k.starts_with("FLUX_CONVERGER_") {
            command.env_remove(k);
        }
    }
    command.envs(env.iter().copied());
    command
}

async fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = command(args, env).output().await.expect("run the binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Exit 2 and every word in the message; no client was built (the kubeconfig points nowhere,
/// and the message is not about it).
#[tokio::test]
async fn bad_hook_auth_and_port_flags_exit_2_before_any_client() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let token = token.to_str().unwrap();
    // (case, arguments, environment, words the message must hold)
    type Case<'a> = (
        &'a str,
        &'a [&'a str],
        &'a [(&'a str, &'a str)],
        &'a [&'a str],
    );
    let cases: &[Case] = &[
        (
            "neither key nor token",
            &["serve"],
            &[],
            &[
                "--hmac-key-file",
                "--hook-token-file",
                "--allow-unauthenticated-hooks",
            ],
        ),
        (
            "an explicit false is no opt-in",
            &["serve"],
            &[("FLUX_CONVERGER_ALLOW_UNAUTHENTICATED_HOOKS", "false")],
            &["--hmac-key-file", "--hook-token-file"],
        ),
        (
            "the metrics port on the listen port",
            &["serve", "--hook-token-file", token, "--listen", ":8080"],
            &[],
            &["--listen", "--metrics-addr", "same port 8080"],
        ),
        (
            "the same port from the environment",
            &["serve", "--hook-token-file", token],
            &[
                ("FLUX_CONVERGER_LISTEN", "127.0.0.1:9555"),
                ("FLUX_CONVERGER_METRICS_ADDR", ":9555"),
            ],
            &["same port 9555"],
        ),
        (
            "not an address",
            &[
                "serve",
                "--hook-token-file",
                token,
                "--metrics-addr",
                "8080",
            ],
            &[],
            &["--metrics-addr", "expected :PORT or HOST:PORT"],
        ),
    ];
    for (case, args, env, words) in cases {
        let (code, stderr) = run(args, env).await;
        assert_eq!(code, 2, "{case}: {stderr}");
        for word in *words {
            assert!(
                stderr.contains(word),
                "{case}: {word:?} missing from {stderr}"
            );
        }
        assert!(!stderr.contains("kubeconfig"), "{case}: {stderr}");
    }
}

/// With the opt-in (here from its env var) `serve` starts, says once at WARN that `/hook`
/// accepts unauthenticated requests, answers an unsigned hook on `--listen` and `/metrics`
/// on `--metrics-addr` only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_hook_is_served_only_on_purpose_and_said_out_loud() {
    flux_converger::tls::install_crypto_provider();
    let fake = fake_apiserver::FakeApiServer::new();
    let served = fake.serve().await;
    let kubeconfig = served.kubeconfig.to_str().unwrap().to_string();
    let storage = tempfile::tempdir().unwrap();
    let mut child = command(
        &[
            "serve",
            "--kubeconfig",
            &kubeconfig,
            "-n",
            "flux-system",
            "--listen",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
            // Not the default `/data`, which `serve` creates (as root, here on the test host).
            "--storage-path",
            storage.path().to_str().unwrap(),
            "--storage-addr",
            "127.0.0.1:0",
        ],
        &[("FLUX_CONVERGER_ALLOW_UNAUTHENTICATED_HOOKS", "true")],
    )
    .spawn()
    .expect("spawn serve");
    // `--log-format json` flattens each event: `level`, `message` and the fields at the top.
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut before = Vec::new();
    let serving = loop {
        let Some(line) = lines.next_line().await.expect("read stderr") else {
            panic!("serve stopped before serving: {before:#?}");
        };
        let Ok(entry) = serde_json::from_str::<Value>(&line) else {
            before.push(Value::String(line));
            continue;
        };
        if entry["message"] == "serving" {
            break entry;
        }
        before.push(entry);
    };
    let open_warnings: Vec<&Value> = before
        .iter()
        .filter(|e| {
            e["level"] == "WARN"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("/hook accepts unauthenticated requests"))
        })
        .collect();
    assert_eq!(open_warnings.len(), 1, "{before:#?}");

    let addr = serving["addr"].as_str().expect("addr");
    let metrics_addr = serving["metrics_addr"].as_str().expect("metrics_addr");
    let http = reqwest::Client::new();
    let hook = http
        .post(format!("http://{addr}/hook"))
        .header("Content-Type", "application/json")
        .body(r#"{"involvedObject":{"kind":"GitRepository","namespace":"flux-system","name":"repo"},"severity":"info","message":"stored artifact","reason":"NewArtifact"}"#)
        .send()
        .await
        .expect("POST /hook");
    assert_eq!(hook.status().as_u16(), 202);
    let get = |url: String| {
        let http = http.clone();
        async move { http.get(url).send().await.expect("GET").status().as_u16() }
    };
    assert_eq!(get(format!("http://{metrics_addr}/metrics")).await, 200);
    assert_eq!(get(format!("http://{addr}/metrics")).await, 404);

    child.start_kill().expect("stop serve");
    let _ = child.wait().await;
}

/// Runs `serve` on the fake API server with `extra` flags until it logs "serving": the log
/// lines before it (JSON), or why it stopped (exit code, stderr).
async fn serve_until_serving(extra: &[&str]) -> Result<(Vec<Value>, Value), (i32, String)> {
    flux_converger::tls::install_crypto_provider();
    let fake = fake_apiserver::FakeApiServer::new();
    let served = fake.serve().await;
    let kubeconfig = served.kubeconfig.to_str().unwrap().to_string();
    let mut args = vec![
        "serve",
        "--kubeconfig",
        &kubeconfig,
        "-n",
        "flux-system",
        "--listen",
        "127.0.0.1:0",
        "--metrics-addr",
        "127.0.0.1:0",
        "--storage-addr",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ];
    args.extend_from_slice(extra);
    let mut child = command(
        &args,
        &[("FLUX_CONVERGER_ALLOW_UNAUTHENTICATED_HOOKS", "true")],
    )
    .spawn()
    .expect("spawn serve");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut before = Vec::new();
    let mut text = String::new();
    let outcome = loop {
        let Ok(Some(line)) = lines.next_line().await else {
            let status = child.wait().await.expect("serve exits");
            break Err((status.code().unwrap_or(-1), text));
        };
        text.push_str(&line);
        text.push('\n');
        let Ok(entry) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if entry["message"] == "serving" {
            break Ok((before, entry));
        }
        before.push(entry);
    };
    let _ = child.start_kill();
    let _ = child.wait().await;
    outcome
}

/// A `--storage-path` that does not exist is created with its parents and served, as
/// source-controller creates its storage path at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_path_that_does_not_exist_is_created_and_used() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("new/nested/storage");
    let (before, _) = serve_until_serving(&["--storage-path", nested.to_str().unwrap()])
        .await
        .unwrap_or_else(|(code, stderr)| panic!("serve exited {code}: {stderr}"));
    assert!(nested.join("blobs/sha256").is_dir(), "{before:#?}");
    assert!(
        before.iter().any(|e| e["message"] == "serving artifacts"),
        "{before:#?}"
    );
}

/// A `--storage-path` (flag or env) that cannot be created or written is exit 2 naming the
/// flag, the path and the error, before any client is built.
#[tokio::test]
async fn a_storage_path_that_cannot_be_created_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let under_a_file = file.join("storage");
    let under_a_file = under_a_file.to_str().unwrap();
    // (flags, environment, the path the message names)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (&["--storage-path", under_a_file], &[], under_a_file),
        (
            &[],
            &[("FLUX_CONVERGER_STORAGE_PATH", under_a_file)],
            under_a_file,
        ),
        (
            &["--storage-path", "/proc/flux-converger/storage"],
            &[],
            "/proc/flux-converger/storage",
        ),
    ];
    for (flags, env, path) in cases {
        let mut args = vec!["serve", "--allow-unauthenticated-hooks"];
        args.extend_from_slice(flags);
        let (code, stderr) = run(&args, env).await;
        assert_eq!(code, 2, "{flags:?} {env:?}: {stderr}");
        for word in ["--storage-path", path, "os error"] {
            assert!(stderr.contains(word), "{word:?} missing from {stderr}");
        }
        assert!(!stderr.contains("kubeconfig"), "{stderr}");
    }
}
