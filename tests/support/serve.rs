//! The two ways in: a tower service handed to `kube::Client::new` (no socket), and an HTTP/1
//! listener on loopback with a kubeconfig file, for the binary and kubectl. Both run the same
//! handler; a dropped-connection fault is a service error, which hyper turns into a closed
//! connection and the in-process client into a transport error.

use std::net::SocketAddr;
use std::path::PathBuf;

use bytes::Bytes;
use http::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::FakeApiServer;
use super::handlers::{self, ConnectionDropped};

async fn collect<B>(body: B) -> Result<Bytes, ConnectionDropped>
where
    B: axum::body::HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    axum::body::to_bytes(axum::body::Body::new(body), usize::MAX)
        .await
        .map_err(|_| ConnectionDropped)
}

pub fn in_process_client(fake: FakeApiServer) -> kube::Client {
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let fake = fake.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = collect(body).await?;
            handlers::handle(fake, parts, bytes).await
        }
    });
    kube::Client::new(service, "default")
}

/// A served fake: the listener and the kubeconfig live as long as this value.
pub struct Served {
    pub addr: SocketAddr,
    pub kubeconfig: PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    _dir: tempfile::TempDir,
    task: JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn kubeconfig_yaml(url: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: {url}
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

/// Accepts connections until the returned task is aborted (aborting drops every connection).
pub fn spawn_listener(fake: FakeApiServer, listener: TcpListener) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let fake = fake.clone();
            connections.spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let fake = fake.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let bytes = collect(body).await?;
                            handlers::handle(fake, parts, bytes).await
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
            // Reap finished connections so the set does not grow without bound.
            while connections.try_join_next().is_some() {}
        }
    })
}

pub async fn serve(fake: FakeApiServer, listen: &str) -> std::io::Result<Served> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let url = format!("http://{addr}");
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, kubeconfig_yaml(&url, "default"))?;
    let task = spawn_listener(fake, listener);
    Ok(Served {
        addr,
        kubeconfig,
        url,
        _dir: dir,
        task,
    })
}
