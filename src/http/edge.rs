//! Every listener of `serve` (`--listen`, `--metrics-addr`, `--storage-addr`) is served here,
//! with the same limits, so that nobody who can open a socket to a port can hold the process's
//! memory or its sockets (docs/http-api.md, "Limits at the edge"):
//!
//! - at most [`EdgeLimits::max_connections`] connections at once per port: the next one waits
//!   in the kernel's accept queue until one closes (a tokio semaphore permit per accepted
//!   socket, the pattern hyper-util's examples use);
//! - a connection that has not sent a whole request head within
//!   [`EdgeLimits::header_read_timeout`] is closed (hyper's `header_read_timeout`). hyper starts
//!   that timer whenever it waits for a head, so an idle keep-alive connection is closed after
//!   the same time: it is the idle timeout too;
//! - a request head larger than [`MAX_HEADER_BYTES`] is answered 431 and the connection closed;
//! - a request whose answer is not ready within [`EdgeLimits::request_timeout`] (reading its
//!   body included) is answered 408 (tower-http's `TimeoutLayer`), and a body that sends
//!   nothing for that long fails its read (`RequestBodyTimeoutLayer`).
//!
//! HTTP/1.1 only, as before (`axum::serve` without its `http2` feature): notification-controller,
//! the kubelet's probes, Prometheus and source-controller's clients all speak it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};

/// The largest request head (request line and headers) read: Go's `http.Server` allows 1 MiB
/// by default; nothing this service is sent needs more than a few kB.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// How long a stopping server waits for the requests it is answering.
const DRAIN: Duration = Duration::from_secs(5);

/// The limits of one listener (`--http-*` flags, docs/service.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeLimits {
    /// A connection that has not sent a whole request head within this is closed; an idle
    /// keep-alive connection too. controller-runtime's servers use 32 s; a slowloris socket
    /// must be gone within 30 s.
    pub header_read_timeout: Duration,
    /// The longest a request may take until its answer starts, reading its body included
    /// (408 past it).
    pub request_timeout: Duration,
    /// Connections served at once on this port; further ones wait to be accepted.
    pub max_connections: usize,
}

impl Default for EdgeLimits {
    fn default() -> Self {
        EdgeLimits {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

/// `router` with the per-request limits: the answer within the request timeout (408), and
/// no body frame awaited longer than it.
pub fn limited(router: Router, limits: &EdgeLimits) -> Router {
    router
        .layer(RequestBodyTimeoutLayer::new(limits.request_timeout))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
}

/// Serves `router` on `listener` under `limits` until `shutdown` resolves, then stops
/// accepting, lets the requests being answered finish (at most [`DRAIN`]) and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: EdgeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = limited(router, &limits);
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEADER_BYTES)
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    // Each connection's task belongs to this server: reaped as they end, and any still open
    // past the drain aborted before it returns, so no connection outlives the listener.
    let mut connections = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        // The permit first: at the limit, the next connection stays in the accept queue.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_failed(&error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        connections.spawn(async move {
            if let Err(error) = connection.await {
                trace_closed(peer, &error);
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!(drain = ?DRAIN, "connections still open at shutdown: closed");
    }
    connections.shutdown().await;
    Ok(())
}

/// A connection that ended with an error (a timeout, a reset, a malformed request): the
/// client's doing, so at debug level only.
fn trace_closed(peer: SocketAddr, error: &hyper::Error) {
    if error.is_timeout() {
        tracing::debug!(%peer, "closed a connection that sent no request head in time");
    } else {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
}

/// `accept` fails for the connection (reset before it was taken) or for the process (out of
/// file descriptors): the latter would spin, so it waits a moment, as `axum::serve` does.
async fn accept_failed(error: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::warn!(%error, "accepting a connection failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
