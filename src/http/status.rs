//! `GET /status`, `GET /status/{namespace}/{name}` (a Kustomization) and
//! `GET /status/{plural}/{namespace}/{name}` (any gated kind: `helmreleases`, ...): the results
//! as JSON, read-only. The
//! bodies come encoded from the backend (the service keeps them, see
//! `records::status_cache`, encoded by `model::body`), so a poll costs a copy, not an encoding.

use axum::extract::{Path, Query};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;

use super::auth::Seen;
use super::error::ApiError;
use crate::model::Kind;

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

pub(super) async fn one(
    Seen(state): Seen,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    detail(&state, Kind::KUSTOMIZATION, &namespace, &name)
}

pub(super) async fn of_kind(
    Seen(state): Seen,
    Path((plural, namespace, name)): Path<(String, String, String)>,
) -> Response {
    match state.backend.kind_of(&plural) {
        Some(kind) => detail(&state, kind, &namespace, &name),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            format!("{plural:?} is not a kind flux-converger gates"),
        )
        .into_response(),
    }
}

fn detail(state: &super::AppState, kind: Kind, namespace: &str, name: &str) -> Response {
    match state.backend.detail_json(kind, namespace, name) {
        Some(body) => json(body),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            format!("{kind} {namespace}/{name} is not handled by flux-converger"),
        )
        .into_response(),
    }
}
