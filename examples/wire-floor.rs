//! The floor a converge is measured against (`hack/converge-wire.sh`): the same HTTP requests
//! a `converge` of one StatefulSet sends, in the same order and with bodies of the same kind,
//! from a minimal client: one keep-alive TLS connection (`TCP_NODELAY`, as Go sets it) for
//! every request, and one more for the watch, no kube stack, no journal logic, no decision.
//!
//! ```sh
//! cargo run --release --example wire-floor -- --kubeconfig KC --desired desired.yaml
//! ```
//! The sequence (for N claims, all in the namespace of the StatefulSet, which is also the
//! journal's, as for the command): intent list, StatefulSet get, claim list,
//! StorageClass list, the proof (dry-run apply with the live claim templates), the dry run of
//! the desired object as it is, the pre-flight (dry-run create), N claim patches (with their
//! `resourceVersion`), the intent record (apply), the orphan delete (uid precondition), the
//! watch until the uid is gone, the re-apply, the intent delete. It exits 1 if an answer is not
//! the one a converge expects, so a floor is never measured on a run that did less.
//!
//! With `--service`, the service's sequence with warm caches instead (see `Args::service`),
//! the floor `SERVICE=1 hack/converge-wire.sh` measures `examples/service-converge.rs` against.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail, ensure};
use bytes::Bytes;
use clap::Parser;
use futures::StreamExt as _;
use http::{Method, Request, StatusCode};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    about = "A converge's requests from a minimal client (the floor of hack/converge-wire.sh)"
)]
struct Args {
    /// Kubeconfig of the server (its current context's cluster: server and certificate-authority).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The desired StatefulSet (YAML, one document), as given to `converge --desired`.
    #[arg(long)]
    desired: PathBuf,
    /// The service's sequence with warm caches (N+7: claim list, proof, pre-flight, N claim
    /// patches, record, orphan delete, re-apply, clear) on a warm connection, the deletion
    /// read from a watch opened beforehand as the service's is; prints the milliseconds from
    /// the first request to the last answer.
    #[arg(long)]
    service: bool,
}

const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";
const JSON: &str = "application/json";

/// One HTTP/1 connection, kept alive.
struct Connection {
    send: SendRequest<String>,
    host: String,
}

impl Connection {
    async fn open(server: &http::Uri, tls: &tokio_rustls::TlsConnector) -> anyhow::Result<Self> {
        let host = server
            .host()
            .context("server URL without a host")?
            .to_owned();
        let port = server.port_u16().unwrap_or(443);
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from(host.clone())?;
        let stream = tls.connect(name, tcp).await?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Connection {
            send,
            host: format!("{host}:{port}"),
        })
    }

    async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: Option<(&str, String)>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let response = self.start(method, path, body).await?;
        let status = response.status();
        let bytes = axum::body::to_bytes(axum::body::Body::new(response.into_body()), usize::MAX)
            .await
            .context("reading the answer")?;
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, value))
    }

    async fn start(
        &mut self,
        method: Method,
        path: &str,
        body: Option<(&str, String)>,
    ) -> anyhow::Result<http::Response<hyper::body::Incoming>> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, &self.host)
            .header(http::header::ACCEPT, JSON)
            .header(http::header::USER_AGENT, "wire-floor");
        let body = match body {
            Some((content_type, text)) => {
                request = request.header(http::header::CONTENT_TYPE, content_type);
                text
            }
            None => String::new(),
        };
        self.send.ready().await?;
        Ok(self.send.send_request(request.body(body)?).await?)
    }
}

/// The watch events completed by `chunk` (one JSON object per line; a line may span chunks,
/// its start waits in `buffer`).
fn events(buffer: &mut Vec<u8>, chunk: &[u8]) -> Vec<Value> {
    buffer.extend_from_slice(chunk);
    let mut events = Vec::new();
    while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = buffer.drain(..=end).collect();
        events.push(serde_json::from_slice(&line).unwrap_or(Value::Null));
    }
    events
}

fn expect(what: &str, got: StatusCode, want: &[u16]) -> anyhow::Result<()> {
    ensure!(
        want.contains(&got.as_u16()),
        "{what}: answered {got}, expected {want:?}"
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    flux_converger::tls::install_crypto_provider();
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)?;
    let cluster = kubeconfig
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .context("kubeconfig without a cluster")?;
    let server: http::Uri = cluster
        .server
        .as_deref()
        .context("cluster without a server")?
        .parse()?;
    ensure!(
        server.scheme_str() == Some("https"),
        "the floor is measured over TLS"
    );
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(
        cluster
            .certificate_authority
            .as_deref()
            .context("cluster without a certificate-authority file")?,
    )?;
    use rustls::pki_types::pem::PemObject as _;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert?)?;
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config));

    let desired: Value = serde_saphyr::from_str(&std::fs::read_to_string(&args.desired)?)?;
    if args.service {
        return service_floor(&server, &tls, &desired).await;
    }
    let Paths {
        ns,
        name,
        sts: sts_path,
        ..
    } = paths(&desired)?;

    let mut c = Connection::open(&server, &tls).await?;
    let (s, _) = c
        .call(
            Method::GET,
            &format!(
                "/api/v1/namespaces/{ns}/configmaps?labelSelector=flux-converger.io%2Frecord%3Dintent"
            ),
            None,
        )
        .await?;
    expect("intent list", s, &[200])?;
    let (s, live) = c.call(Method::GET, &sts_path, None).await?;
    expect("StatefulSet get", s, &[200])?;
    let uid = live["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (s, claims) = c
        .call(
            Method::GET,
            &format!("/api/v1/namespaces/{ns}/persistentvolumeclaims?limit=500"),
            None,
        )
        .await?;
    expect("claim list", s, &[200])?;
    let (s, _) = c
        .call(Method::GET, "/apis/storage.k8s.io/v1/storageclasses", None)
        .await?;
    expect("StorageClass list", s, &[200])?;

    prove(&mut c, &desired, &live, true).await?;
    grow_and_record(&mut c, &desired, &claims, &uid).await?;
    let delete = json!({"propagationPolicy": "Orphan", "preconditions": {"uid": uid}});
    let (s, deleting) = c
        .call(Method::DELETE, &sts_path, Some((JSON, delete.to_string())))
        .await?;
    expect("orphan delete", s, &[200])?;
    let version = deleting["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    // The watch on its own connection, as a converge's watch takes one.
    let mut w = Connection::open(&server, &tls).await?;
    let watch = w
        .start(
            Method::GET,
            &format!(
                "/apis/apps/v1/namespaces/{ns}/statefulsets?watch=true&timeoutSeconds=30&fieldSelector=metadata.name%3D{name}&resourceVersion={version}"
            ),
            None,
        )
        .await?;
    expect("watch", watch.status(), &[200])?;
    let mut stream = axum::body::Body::new(watch.into_body()).into_data_stream();
    let mut buffer = Vec::<u8>::new();
    let mut gone = false;
    'events: while let Some(chunk) = stream.next().await {
        let chunk: Bytes = chunk?;
        for event in events(&mut buffer, &chunk) {
            if event["type"] == "DELETED" && event["object"]["metadata"]["uid"] == uid.as_str() {
                gone = true;
                break 'events;
            }
        }
    }
    if !gone {
        bail!("the watch ended before the StatefulSet was gone");
    }
    drop(stream);

    reapply_and_clear(&mut c, &desired).await
}

/// Where a converge writes for `desired`: its StatefulSet and its intent ConfigMap.
struct Paths {
    ns: String,
    name: String,
    sts: String,
    cm_name: String,
    cm: String,
}

const SSA: &str = "fieldManager=kustomize-controller&force=true";

fn paths(desired: &Value) -> anyhow::Result<Paths> {
    let ns = desired["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let name = desired["metadata"]["name"]
        .as_str()
        .context("desired without a name")?
        .to_owned();
    let cm_name = flux_converger::journal::intent_configmap_name(&ns, &name);
    Ok(Paths {
        sts: format!("/apis/apps/v1/namespaces/{ns}/statefulsets/{name}"),
        cm: format!("/api/v1/namespaces/{ns}/configmaps/{cm_name}"),
        ns,
        name,
        cm_name,
    })
}

/// The N claim patches (each with its `resourceVersion`), then the intent record.
async fn grow_and_record(
    c: &mut Connection,
    desired: &Value,
    claims: &Value,
    uid: &str,
) -> anyhow::Result<()> {
    let Paths {
        ns,
        name,
        cm_name,
        cm: cm_path,
        ..
    } = paths(desired)?;
    let size =
        desired["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
            .clone();
    let prefix = format!("data-{name}-");
    let mut grown = 0;
    for claim in claims["items"].as_array().into_iter().flatten() {
        let claim_name = claim["metadata"]["name"].as_str().unwrap_or_default();
        if !claim_name.starts_with(&prefix) {
            continue;
        }
        let patch = json!({
            "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
            "spec": {"resources": {"requests": {"storage": size}}},
        });
        let (s, _) = c
            .call(
                Method::PATCH,
                &format!(
                    "/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim_name}?fieldManager=flux-converger"
                ),
                Some((MERGE, patch.to_string())),
            )
            .await?;
        expect("claim patch", s, &[200])?;
        grown += 1;
    }
    ensure!(grown > 0, "no claim of {name} to grow");

    let intent = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": cm_name, "namespace": ns,
                     "labels": {"flux-converger.io/record": "intent"}},
        "data": {"namespace": ns, "name": name, "uid": uid, "deleting": "true",
                 "desired": desired.to_string(), "actAs": "-",
                 "recordedAt": "2026-01-01T00:00:00Z"},
    });
    let (s, _) = c
        .call(
            Method::PATCH,
            &format!("{cm_path}?fieldManager=flux-converger&force=true"),
            Some((APPLY, intent.to_string())),
        )
        .await?;
    expect("intent record", s, &[200, 201])?;
    Ok(())
}

/// The re-apply, then the intent delete.
async fn reapply_and_clear(c: &mut Connection, desired: &Value) -> anyhow::Result<()> {
    let Paths {
        sts: sts_path,
        cm: cm_path,
        ..
    } = paths(desired)?;
    let ssa = SSA;
    let (s, _) = c
        .call(
            Method::PATCH,
            &format!("{sts_path}?{ssa}"),
            Some((APPLY, desired.to_string())),
        )
        .await?;
    expect("re-apply", s, &[201])?;
    let (s, _) = c.call(Method::DELETE, &cm_path, None).await?;
    expect("intent delete", s, &[200])?;
    Ok(())
}

/// The proof (dry-run apply with the live claim templates), the dry run of the desired object
/// as it is (`as_it_is`: the service skips it once the server has forbidden the change), the
/// pre-flight (dry-run create).
async fn prove(
    c: &mut Connection,
    desired: &Value,
    live: &Value,
    as_it_is: bool,
) -> anyhow::Result<()> {
    let Paths {
        ns, sts: sts_path, ..
    } = paths(desired)?;
    let ssa = SSA;
    let mut proof = desired.clone();
    proof["spec"]["volumeClaimTemplates"] = live["spec"]["volumeClaimTemplates"].clone();
    let (s, _) = c
        .call(
            Method::PATCH,
            &format!("{sts_path}?dryRun=All&{ssa}"),
            Some((APPLY, proof.to_string())),
        )
        .await?;
    expect("proof", s, &[200])?;
    if as_it_is {
        let (s, _) = c
            .call(
                Method::PATCH,
                &format!("{sts_path}?dryRun=All&{ssa}"),
                Some((APPLY, desired.to_string())),
            )
            .await?;
        expect("dry run as it is", s, &[422])?;
    }
    let (s, _) = c
        .call(
            Method::POST,
            &format!(
                "/apis/apps/v1/namespaces/{ns}/statefulsets?dryRun=All&fieldManager=kustomize-controller"
            ),
            Some((JSON, desired.to_string())),
        )
        .await?;
    expect("pre-flight", s, &[409])?;

    Ok(())
}

/// The service's N+7 (see `Args::service`), timed from the first request to the last answer.
async fn service_floor(
    server: &http::Uri,
    tls: &tokio_rustls::TlsConnector,
    desired: &Value,
) -> anyhow::Result<()> {
    let Paths {
        ns,
        name,
        sts: sts_path,
        ..
    } = paths(desired)?;
    // The watch the service keeps open, on its own connection, read by a task.
    let mut w = Connection::open(server, tls).await?;
    let watch = w
        .start(
            Method::GET,
            "/apis/apps/v1/statefulsets?watch=true&labelSelector=kustomize.toolkit.fluxcd.io%2Fname",
            None,
        )
        .await?;
    expect("watch", watch.status(), &[200])?;
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel::<Value>();
    tokio::spawn(async move {
        let _connection = w;
        let mut stream = axum::body::Body::new(watch.into_body()).into_data_stream();
        let mut buffer = Vec::<u8>::new();
        while let Some(Ok(chunk)) = stream.next().await {
            for event in events(&mut buffer, &chunk) {
                if sent.send(event).is_err() {
                    return;
                }
            }
        }
    });
    let ours = |event: &Value| {
        event["object"]["metadata"]["name"] == name.as_str()
            && event["object"]["metadata"]["namespace"] == ns.as_str()
    };
    // The live object, as the service's watch holds it before the converge.
    let live = loop {
        let event = received.recv().await.context("the watch ended")?;
        if ours(&event) {
            break event["object"].clone();
        }
    };
    let uid = live["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut c = Connection::open(server, tls).await?;
    let (s, _) = c
        .call(Method::GET, "/apis/storage.k8s.io/v1/storageclasses", None)
        .await?;
    expect("warm-up", s, &[200])?;

    let started = std::time::Instant::now();
    let (s, claims) = c
        .call(
            Method::GET,
            &format!("/api/v1/namespaces/{ns}/persistentvolumeclaims?limit=500"),
            None,
        )
        .await?;
    expect("claim list", s, &[200])?;
    prove(&mut c, desired, &live, false).await?;
    grow_and_record(&mut c, desired, &claims, &uid).await?;
    let delete = json!({"propagationPolicy": "Orphan", "preconditions": {"uid": uid}});
    let (s, _) = c
        .call(Method::DELETE, &sts_path, Some((JSON, delete.to_string())))
        .await?;
    expect("orphan delete", s, &[200])?;
    loop {
        let event = received
            .recv()
            .await
            .context("the watch ended before the StatefulSet was gone")?;
        if ours(&event)
            && event["type"] == "DELETED"
            && event["object"]["metadata"]["uid"] == uid.as_str()
        {
            break;
        }
    }
    reapply_and_clear(&mut c, desired).await?;
    println!("{:.3}", started.elapsed().as_secs_f64() * 1000.0);
    Ok(())
}
