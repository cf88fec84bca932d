//! `GET /status` and `GET /status/{namespace}/{name}`: the results as JSON, read-only.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::ApiError;
use crate::service::record::{KustomizationDetail, KustomizationSummary};

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

#[derive(Serialize)]
pub(super) struct StatusList {
    kustomizations: Vec<KustomizationSummary>,
}

pub(super) async fn list(
    State(state): State<AppState>,
    Query(query): Query<NamespaceQuery>,
) -> Json<StatusList> {
    let mut kustomizations = state.backend.kustomizations(query.namespace());
    // The order is part of the API; do not rely on every backend to keep it.
    kustomizations.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    if let Some(namespace) = query.namespace() {
        kustomizations.retain(|k| k.namespace == namespace);
    }
    Json(StatusList { kustomizations })
}

pub(super) async fn one(
    State(state): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<KustomizationDetail>, ApiError> {
    state
        .backend
        .kustomization(&namespace, &name)
        .map(Json)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("Kustomization {namespace}/{name} is not handled by flux-converger"),
            )
        })
}
