//! The HTTP side of `serve`, on two ports (docs/http-api.md, docs/dashboard.md): [`router`]
//! (`--listen`: `/hook`, `/status`, the dashboard, `/healthz`, `/readyz`) and [`metrics_router`]
//! (`--metrics-addr`: `/metrics`, `/healthz`). The metrics port is the one Flux's
//! `allow-scraping` NetworkPolicy opens to every namespace, so it serves nothing else. Handlers
//! see only the [`Backend`] trait, never a `kube::Client`, so every route is tested with a
//! stand-in backend.

pub mod argocd_hook;
pub mod auth;
pub mod backend;
pub mod edge;
mod error;
pub mod hook;
pub mod listen;
mod probes;
pub mod reviewer;
pub(crate) mod status;
mod ui;
pub mod view;

use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::routing::{get, post};
use axum::{Extension, Router};
use prometheus_client::registry::Registry;
use tower_http::set_header::SetResponseHeaderLayer;

pub use backend::Backend;

use crate::records::metrics::Metrics;

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

/// Who may read `/status` and the dashboard (`--status-auth`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StatusAuthMode {
    /// Whoever reaches `--listen` (the default, as before).
    #[default]
    None,
    /// A bearer token the API server authenticates (TokenReview), and only the Kustomizations
    /// it may `get` (SubjectAccessReview): [`auth`].
    Kubernetes,
}

/// The HTTP settings of `serve` (its `--http-*` and `--status-auth` flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HttpConfig {
    /// The limits of every listener.
    pub edge: edge::EdgeLimits,
    pub status_auth: StatusAuthMode,
}

/// What [`router_with`] adds to [`router`].
#[derive(Clone, Default)]
pub struct RouterOptions {
    /// `--status-auth=kubernetes`: the reviews `/status` and the dashboard are guarded by.
    pub status_auth: Option<Arc<auth::StatusAuth>>,
    /// `--argocd-hook-token-file`'s token: `POST /hook/argocd` is served, requiring it.
    pub argocd_hook_token: Option<String>,
}

/// Every endpoint of `--listen`, open to whoever reaches it (no `--status-auth`).
pub fn router(state: AppState) -> Router {
    router_with(state, RouterOptions::default())
}

/// Every endpoint of `--listen`. With a status auth, the results (`/status...`, `/`,
/// `/kustomizations/...`) need a caller the API server knows and shows it only what it may
/// get; the probes, the assets and `/hook` (its own HMAC or token) stay as they are.
pub fn router_with(state: AppState, options: RouterOptions) -> Router {
    // The dashboard's encoded pages, shared by every clone of this router.
    let pages = Arc::new(ui::Pages::default());
    // The lanes webhook bodies are read in, shared likewise.
    let lanes = Arc::new(hook::BodyLanes::default());
    let open = Router::new()
        .route("/assets/dashboard.js", get(ui::script))
        .route("/assets/dashboard.css", get(ui::style))
        // The handler reads the body itself, under `hook::BODY_LIMIT`.
        .route("/hook", post(hook::hook))
        .route("/healthz", get(probes::healthz))
        .route("/readyz", get(probes::readyz));
    // Argo CD's notifications, only with their token (they are unsigned).
    let open = match options.argocd_hook_token {
        Some(token) => open.route(
            "/hook/argocd",
            post(argocd_hook::wake).layer(Extension(argocd_hook::ArgoCdHookToken(token.into()))),
        ),
        None => open,
    }
    .layer(Extension(lanes));
    let mut lists = Router::new()
        .route("/", get(ui::dashboard).layer(Extension(pages)))
        .route("/status", get(status::list));
    let mut one = Router::new().route("/status/{namespace}/{name}", get(status::one));
    // Any gated kind by its resource (`kustomizations`, `helmreleases`, ...): its page and,
    // but for a Kustomization's (above), its JSON.
    let mut kind_one = Router::new()
        .route("/status/{plural}/{namespace}/{name}", get(status::of_kind))
        .route("/{plural}/{namespace}/{name}", get(ui::detail));
    if let Some(status_auth) = options.status_auth {
        let guard = auth::Guard {
            auth: status_auth,
            backend: state.backend.clone(),
        };
        lists = lists.route_layer(axum::middleware::from_fn_with_state(
            guard.clone(),
            auth::list_guard,
        ));
        one = one.route_layer(axum::middleware::from_fn_with_state(
            guard.clone(),
            auth::one_guard,
        ));
        kind_one = kind_one.route_layer(axum::middleware::from_fn_with_state(
            guard,
            auth::kind_one_guard,
        ));
    }
    let router = open
        .merge(lists)
        .merge(one)
        .merge(kind_one)
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
