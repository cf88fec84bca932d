//! The HTTP side of `serve`, on two ports (docs/http-api.md, docs/dashboard.md): [`router`]
//! (`--listen`: `/hook`, `/status`, the dashboard, `/healthz`, `/readyz`) and [`metrics_router`]
//! (`--metrics-addr`: `/metrics`, `/healthz`). The metrics port is the one Flux's
//! `allow-scraping` NetworkPolicy opens to every namespace, so it serves nothing else. Handlers
//! see only the [`Backend`] trait, never a `kube::Client`, so every route is tested with a
//! stand-in backend.

pub mod backend;
mod error;
pub mod hook;
mod probes;
pub(crate) mod status;
mod ui;
pub mod view;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::routing::{get, post};
use axum::{Extension, Router};
use prometheus_client::registry::Registry;
use tower_http::set_header::SetResponseHeaderLayer;

pub use backend::Backend;

use crate::service::metrics::Metrics;

/// How `/hook` authenticates notification-controller. Both may be set; then both are required.
#[derive(Clone, Default)]
pub struct HookAuth {
    /// `--hmac-key-file`: raw bytes, not trimmed (notification-controller signs with the Secret's
    /// `token` key as stored, trailing newline included).
    pub hmac_key: Option<Vec<u8>>,
    /// `--hook-token-file`: the `Authorization: Bearer` token.
    pub token: Option<String>,
}

impl HookAuth {
    /// Neither a key nor a token: anyone who reaches the port may post.
    pub fn is_open(&self) -> bool {
        self.hmac_key.is_none() && self.token.is_none()
    }
}

impl std::fmt::Debug for HookAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookAuth")
            .field("hmac_key", &self.hmac_key.as_ref().map(|_| "<redacted>"))
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[derive(Clone)]
pub struct AppState {
    pub backend: Arc<dyn Backend>,
    pub metrics: Metrics,
    pub auth: HookAuth,
}

/// The page may load only its own script, stylesheet and same-origin fetches: a value that
/// slipped past escaping still could not run or phone home.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Every endpoint of `--listen`.
pub fn router(state: AppState) -> Router {
    // The dashboard's encoded pages, shared by every clone of this router.
    let pages = Arc::new(ui::Pages::default());
    let router = Router::new()
        .route("/", get(ui::dashboard).layer(Extension(pages)))
        .route("/kustomizations/{namespace}/{name}", get(ui::kustomization))
        .route("/assets/dashboard.js", get(ui::script))
        .route("/assets/dashboard.css", get(ui::style))
        .route(
            "/hook",
            post(hook::hook).layer(DefaultBodyLimit::max(hook::BODY_LIMIT)),
        )
        .route("/status", get(status::list))
        .route("/status/{namespace}/{name}", get(status::one))
        .route("/healthz", get(probes::healthz))
        .route("/readyz", get(probes::readyz))
        .fallback(not_found)
        .with_state(state);
    hardened(router)
}

/// The metrics port: `/metrics` and `/healthz` (a liveness probe may use either port), nothing
/// that reads the results or takes a request body.
pub fn metrics_router(registry: Arc<Registry>) -> Router {
    let router = Router::new()
        .route("/metrics", get(probes::metrics))
        .route("/healthz", get(probes::healthz))
        .fallback(not_found)
        .with_state(registry);
    hardened(router)
}

async fn not_found() -> error::ApiError {
    error::ApiError::new(StatusCode::NOT_FOUND, "no such endpoint")
}

/// The headers every answer carries, on both ports.
fn hardened(router: Router) -> Router {
    router
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            HeaderName::from_static("x-frame-options"),
            HeaderValue::from_static("DENY"),
        ))
}
