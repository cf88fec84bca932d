//! `/healthz`, `/readyz`, `/metrics`: what the kubelet and Prometheus ask.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::registry::Registry;

use super::AppState;
use crate::records::metrics;

/// Alive as long as the process answers: a restart would not mend anything this could check.
pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready once the backend's caches are synced and its results readable, so a Service sends the
/// dashboard and the webhook only to a replica that can answer them.
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    match state.backend.ready() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

pub(super) async fn metrics(State(registry): State<Arc<Registry>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics::encode(&registry),
    )
        .into_response()
}
