//! The two ways in: a tower service handed to `kube::Client::new` (no socket), and an HTTP/1
//! listener on loopback with a kubeconfig file, for the binary and kubectl, in plain HTTP or,
//! like a real API server, over TLS (`serve_tls`: a self-signed certificate for `localhost`
//! and `127.0.0.1` made at start, written into the kubeconfig as its certificate authority).
//! Both run the same handler; a dropped-connection fault is a service error, which hyper turns
//! into a closed connection and the in-process client into a transport error. Accepted sockets
//! set `TCP_NODELAY`, as Go's net package does on every connection of a real API server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use super::handlers::{self, ConnectionDropped};
use super::store::Store;

async fn collect<B>(body: B) -> Result<Bytes, ConnectionDropped>
where
    B: axum::body::HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    axum::body::to_bytes(axum::body::Body::new(body), usize::MAX)
        .await
        .map_err(|_| ConnectionDropped)
}

pub fn in_process_client(store: Store) -> kube::Client {
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let store = store.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = collect(body).await?;
            handlers::handle(store, parts, bytes).await
        }
    });
    kube::Client::new(service, "default")
}

/// A served store: the listener and the kubeconfig live as long as this value.
pub struct Served {
    pub addr: SocketAddr,
    pub kubeconfig: PathBuf,
    /// `http://127.0.0.1:PORT`, or `https://127.0.0.1:PORT` over TLS.
    pub url: String,
    /// The server certificate (PEM) over TLS, which the kubeconfig names as its authority.
    pub ca_pem: Option<String>,
    _dir: tempfile::TempDir,
    task: JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn kubeconfig_yaml(url: &str, namespace: &str) -> String {
    kubeconfig_yaml_with_ca(url, namespace, None)
}

/// A kubeconfig for `url`, trusting the certificate at `ca_file` when given.
pub fn kubeconfig_yaml_with_ca(url: &str, namespace: &str, ca_file: Option<&str>) -> String {
    let ca = ca_file
        .map(|f| format!("\n    certificate-authority: {f}"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: {url}{ca}
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
    namespace: {namespace}
current-context: fake
users:
- name: fake
  user: {{}}
preferences: {{}}
"
    )
}

/// Accepts connections until the returned task is aborted (aborting drops every connection),
/// over TLS when `tls` is given.
pub fn spawn_listener_with(
    store: Store,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let store = store.clone();
            let tls = tls.clone();
            connections.spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let store = store.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let bytes = collect(body).await?;
                            handlers::handle(store, parts, bytes).await
                        }
                    });
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    None => {
                        let _ = http.serve_connection(TokioIo::new(stream), service).await;
                    }
                    Some(tls) => {
                        // A failed handshake is the client's to report; the server moves on.
                        if let Ok(stream) = tls.accept(stream).await {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                }
            });
            // Reap finished connections so the set does not grow without bound.
            while connections.try_join_next().is_some() {}
        }
    })
}

pub async fn serve(store: Store, listen: &str) -> std::io::Result<Served> {
    serve_with(store, listen, false).await
}

/// [`serve`] over TLS (`tls`) or plain HTTP.
pub async fn serve_with(store: Store, listen: &str, tls: bool) -> std::io::Result<Served> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    let (url, acceptor, ca_pem) = if tls {
        let (acceptor, ca_pem) = self_signed()?;
        let ca_file = dir.path().join("ca.crt");
        std::fs::write(&ca_file, &ca_pem)?;
        let url = format!("https://{addr}");
        let ca = ca_file.to_string_lossy().into_owned();
        std::fs::write(
            &kubeconfig,
            kubeconfig_yaml_with_ca(&url, "default", Some(&ca)),
        )?;
        (url, Some(acceptor), Some(ca_pem))
    } else {
        let url = format!("http://{addr}");
        std::fs::write(&kubeconfig, kubeconfig_yaml(&url, "default"))?;
        (url, None, None)
    };
    let task = spawn_listener_with(store, listener, acceptor);
    Ok(Served {
        addr,
        kubeconfig,
        url,
        ca_pem,
        _dir: dir,
        task,
    })
}

/// A TLS acceptor with a fresh self-signed certificate for `localhost` and `127.0.0.1` (on
/// ring, the client's provider), and that certificate in PEM for the client to trust.
fn self_signed() -> std::io::Result<(TlsAcceptor, String)> {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .map_err(std::io::Error::other)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .map_err(std::io::Error::other)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((TlsAcceptor::from(Arc::new(config)), certified.cert.pem()))
}
