//! The artifact server Flux fetches from (`--storage-addr`): `GET` and `HEAD` of
//! `/<path>` for every artifact the published index holds, nothing else.
//!
//! A blob is verified before it is served (hashed once after this process wrote it, or at its
//! first use after a start); one that fails is deleted and the path answers 404. Headers as
//! source-controller's file server sends them for a tarball: `Content-Type:
//! application/x-gzip` (Go's content sniffing of gzip, which its file server falls back to
//! for `.tar.gz`), `Content-Length`, and an `ETag` of the digest (`If-None-Match` → 304).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::Storage;
use crate::flux::artifact::PEER_HEADER;

/// What a tarball is served as.
pub const CONTENT_TYPE: &str = "application/x-gzip";

/// The router of the artifact server.
pub fn router(storage: Arc<Storage>) -> axum::Router {
    axum::Router::new().fallback(serve).with_state(storage)
}

async fn serve(
    State(storage): State<Arc<Storage>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, HeaderValue::from_static("GET, HEAD"))],
        )
            .into_response();
    }
    let path = uri.path().trim_start_matches('/');
    let from_peer = headers.contains_key(PEER_HEADER);
    let Some((lease, digest)) = storage.open_path(path, from_peer).await else {
        tracing::debug!(path, from_peer, "artifact not found");
        return StatusCode::NOT_FOUND.into_response();
    };
    let etag = format!("\"{digest}\"");
    let etag_value = HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"\""));
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|tag| tag.trim() == etag || tag.trim() == "*")
        })
    {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag_value)]).into_response();
    }
    let size = lease.size;
    let common = [
        (header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE)),
        (header::CONTENT_LENGTH, HeaderValue::from(size)),
        (header::ETAG, etag_value),
    ];
    if method == Method::HEAD {
        return (StatusCode::OK, common).into_response();
    }
    // Opened under the lease: an eviction after this may remove the name, not the open file.
    let file = match tokio::fs::File::open(&lease.path).await {
        Ok(file) => file,
        Err(error) => {
            tracing::warn!(path, %error, "cannot open a stored artifact");
            return StatusCode::NOT_FOUND.into_response();
        }
    };
    drop(lease);
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
    tracing::debug!(path, bytes = size, "serving artifact");
    (StatusCode::OK, common, body).into_response()
}

/// Serves [`router`] on `listener` under the same edge limits as the service's other ports
/// (`http::edge`) until `shutdown` resolves. A slow reader of a large artifact holds one
/// connection of `limits.max_connections` while it reads, never more memory than a buffer.
pub async fn run(
    listener: tokio::net::TcpListener,
    storage: Arc<Storage>,
    limits: crate::http::edge::EdgeLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::http::edge::serve(listener, router(storage), limits, shutdown).await
}
