//! `GET /status`, `GET /status/{namespace}/{name}` and `GET /status/helmreleases/{namespace}/{name}`:
//! the results as JSON, read-only. The
//! bodies come encoded from the backend (the service keeps them, see
//! `records::status_cache`, encoded by `model::body`), so a poll costs a copy, not an encoding.

use axum::extract::{Path, Query};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;

use super::auth::Seen;
use super::error::ApiError;

#[derive(Debug, Default, Deserialize)]
pub(super) struct NamespaceQuery {
    #[serde(default)]
    pub namespace: Option<String>,
}

impl NamespaceQuery {
    /// `?namespace=` with nothing after it means every namespace, as a cleared form field does.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref().filter(|ns| !ns.is_empty())
    }
}

fn json(body: Result<Bytes, serde_json::Error>) -> Response {
    match body {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the status: {e}"),
        )
        .into_response(),
    }
}

pub(super) async fn list(Seen(state): Seen, Query(query): Query<NamespaceQuery>) -> Response {
    json(state.backend.status_json(query.namespace()))
}

pub(super) async fn helm_release(
    Seen(state): Seen,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    match state.backend.helm_release(&namespace, &name) {
        Some(detail) => json(crate::model::body::encode(&detail)),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            format!("HelmRelease {namespace}/{name} is not handled by flux-converger"),
        )
        .into_response(),
    }
}

pub(super) async fn one(
    Seen(state): Seen,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    match state.backend.kustomization_json(&namespace, &name) {
        Some(body) => json(body),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            format!("Kustomization {namespace}/{name} is not handled by flux-converger"),
        )
        .into_response(),
    }
}
