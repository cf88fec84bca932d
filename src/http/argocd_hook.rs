//! `POST /hook/argocd`: Argo CD's notifications (a `webhook` service, docs/argocd.md) waking the
//! service up when an Application's sync stopped on the StatefulSet immutable-field error.
//!
//! The body names the Application (`{"kind": "Application", "namespace": ..., "name": ...,
//! "uid": ...}`, what the documented template sends) and is only a wake-up: the Application is
//! queued if it is handled and re-read by its run, so nothing in the body is trusted beyond the
//! name. The bearer token (`--argocd-hook-token-file`) is checked first, in constant time, then
//! the body is read under the same cap and in the same bounded lanes as `/hook`'s. Served only
//! with that token: notifications are unsigned, so there is no open variant.

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::AppState;
use super::error::ApiError;
use super::hook::{BodyLanes, bearer_matches, read_body};
use crate::model::{Key, Kind};

/// The token `/hook/argocd` requires (`--argocd-hook-token-file`).
#[derive(Clone)]
pub struct ArgoCdHookToken(pub Arc<str>);

/// The body Argo CD's notification template posts.
#[derive(Debug, Deserialize)]
struct Wake {
    #[serde(default)]
    kind: Option<String>,
    namespace: String,
    name: String,
}

pub(super) async fn wake(
    State(state): State<AppState>,
    Extension(lanes): Extension<Arc<BodyLanes>>,
    Extension(token): Extension<ArgoCdHookToken>,
    request: Request,
) -> Response {
    let response = match accept(&state, &lanes, &token, request).await {
        Ok(queued) => (StatusCode::ACCEPTED, Json(json!({ "queued": queued }))).into_response(),
        Err(err) => {
            tracing::warn!(code = err.status.as_u16(), reason = %err.message, "Argo CD webhook refused");
            err.into_response()
        }
    };
    state.metrics.hook(response.status().as_u16());
    response
}

async fn accept(
    state: &AppState,
    lanes: &BodyLanes,
    token: &ArgoCdHookToken,
    request: Request,
) -> Result<Vec<String>, ApiError> {
    bearer_matches(request.headers(), &token.0)
        .map_err(|why| ApiError::new(StatusCode::UNAUTHORIZED, why))?;
    let (parts, body) = request.into_parts();
    let (body, _lane) = read_body(lanes, &parts.headers, body).await?;
    let wake: Wake = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the body is not an Application's name: {e}"),
        )
    })?;
    if wake
        .kind
        .as_deref()
        .is_some_and(|k| k != Kind::APPLICATION.as_str())
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "the body names a {:?}, not an Application",
                wake.kind.unwrap_or_default()
            ),
        ));
    }
    if wake.namespace.is_empty() || wake.name.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "the body names no Application (namespace and name)",
        ));
    }
    let key = Key::new(Kind::APPLICATION, wake.namespace, wake.name);
    let handled = state.backend.wake(key.clone());
    tracing::info!(application = %key, handled, "Argo CD webhook accepted");
    Ok(if handled {
        vec![key.qualified()]
    } else {
        Vec::new()
    })
}
