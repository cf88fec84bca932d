//! The dashboard: `GET /` (one row per handled Kustomization) and
//! `GET /kustomizations/{namespace}/{name}` (its history), rendered by askama templates compiled
//! into the binary, plus the page's own script and stylesheet (`/assets/*`). Clusters are often
//! offline, so nothing is fetched from elsewhere; every value is escaped by the templates.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use jiff::{Timestamp, Unit};
use serde::Deserialize;

use super::AppState;
use super::view::{Badge, RevisionView, Row, STATE_KEYS, state_badge};
use crate::service::record::GateMode;

/// How often the page refreshes its rows in place (assets/dashboard.js).
pub const REFRESH_SECONDS: u32 = 10;

#[derive(Debug, Default, Deserialize)]
pub(super) struct DashboardQuery {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    state: Option<String>,
}

/// One state of the summary bar and the state filter.
struct Chip {
    key: &'static str,
    label: &'static str,
    count: usize,
    selected: bool,
    href: String,
}

#[derive(Template)]
#[template(path = "dashboard.html")]
struct DashboardPage {
    title: String,
    generated_at: String,
    refresh_seconds: u32,
    chips: Vec<Chip>,
    /// Every namespace with a handled Kustomization, and whether it is the filter.
    namespaces: Vec<(String, bool)>,
    rows: Vec<Row>,
    total: usize,
}

#[derive(Template)]
#[template(path = "kustomization.html")]
struct DetailPage {
    title: String,
    generated_at: String,
    refresh_seconds: u32,
    namespace: String,
    name: String,
    gate: GateMode,
    source_revision: Option<String>,
    json_href: String,
    revisions: Vec<RevisionView>,
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    title: String,
    generated_at: String,
    message: String,
}

fn now() -> Timestamp {
    Timestamp::now()
}

fn stamp(now: Timestamp) -> String {
    now.round(Unit::Second).unwrap_or(now).to_string()
}

fn html(status: StatusCode, rendered: Result<String, askama::Error>) -> Response {
    match rendered {
        Ok(body) => (status, [(header::CACHE_CONTROL, "no-store")], Html(body)).into_response(),
        Err(err) => {
            tracing::error!(error = %err, "dashboard template failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page could not be rendered\n",
            )
                .into_response()
        }
    }
}

pub(super) async fn dashboard(
    State(state): State<AppState>,
    Query(query): Query<DashboardQuery>,
) -> Response {
    // A thousand rows take milliseconds to build and render: off the async workers, so the
    // webhook and the probes answer at once while a dashboard renders.
    let rendered =
        tokio::task::spawn_blocking(move || dashboard_page(&state, &query, now()).render()).await;
    match rendered {
        Ok(rendered) => html(StatusCode::OK, rendered),
        Err(err) => {
            tracing::error!(error = %err, "dashboard render task failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page could not be rendered\n",
            )
                .into_response()
        }
    }
}

fn dashboard_page(state: &AppState, query: &DashboardQuery, now: Timestamp) -> DashboardPage {
    let mut summaries = state.backend.kustomizations(None);
    summaries.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut namespaces: Vec<String> = summaries.iter().map(|s| s.namespace.clone()).collect();
    namespaces.dedup();
    let namespace = query.namespace.as_deref().filter(|ns| !ns.is_empty());
    // Only a namespace that exists goes back into links, so the hrefs hold DNS labels alone.
    let known_namespace = namespace.filter(|ns| namespaces.iter().any(|known| known == ns));
    let wanted_state = query
        .state
        .as_deref()
        .and_then(|s| STATE_KEYS.iter().find(|key| **key == s).copied());

    let in_namespace: Vec<Row> = summaries
        .iter()
        .filter(|s| namespace.is_none_or(|ns| s.namespace == ns))
        .map(|s| {
            let last = if s.last.is_some() {
                state.backend.last_record(&s.namespace, &s.name)
            } else {
                None
            };
            Row::new(s, last.as_ref(), now)
        })
        .collect();
    let chips = STATE_KEYS
        .iter()
        .map(|key| {
            let badge = badge_of(key);
            let mut href = String::from("/?");
            if let Some(ns) = known_namespace {
                href.push_str("namespace=");
                href.push_str(ns);
                href.push('&');
            }
            href.push_str("state=");
            href.push_str(key);
            Chip {
                key: badge.key,
                label: badge.label,
                count: in_namespace
                    .iter()
                    .filter(|row| row.badge.key == *key)
                    .count(),
                selected: wanted_state == Some(*key),
                href,
            }
        })
        .collect();
    let total = summaries.len();
    let rows = in_namespace
        .into_iter()
        .filter(|row| wanted_state.is_none_or(|key| row.badge.key == key))
        .collect();
    DashboardPage {
        title: "Kustomizations".to_string(),
        generated_at: stamp(now),
        refresh_seconds: REFRESH_SECONDS,
        chips,
        namespaces: namespaces
            .into_iter()
            .map(|ns| {
                let selected = namespace == Some(ns.as_str());
                (ns, selected)
            })
            .collect(),
        rows,
        total,
    }
}

fn badge_of(key: &str) -> Badge {
    use crate::service::record::RevisionState as S;
    let state = match key {
        "converged" => Some(S::Converged),
        "refused" => Some(S::Refused),
        "failed" => Some(S::Failed),
        "running" => Some(S::Running),
        "superseded" => Some(S::Superseded),
        _ => None,
    };
    state_badge(state)
}

pub(super) async fn kustomization(
    State(state): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let now = now();
    let Some(detail) = state.backend.kustomization(&namespace, &name) else {
        let page = ErrorPage {
            title: "Not handled".to_string(),
            generated_at: stamp(now),
            message: format!(
                "Kustomization {namespace}/{name} is not handled by flux-converger (no such Kustomization, \
                 or its flux-converger.io/gate annotation is off)."
            ),
        };
        return html(StatusCode::NOT_FOUND, page.render());
    };
    let page = DetailPage {
        title: format!("{}/{}", detail.namespace, detail.name),
        generated_at: stamp(now),
        refresh_seconds: REFRESH_SECONDS,
        json_href: format!("/status/{}/{}", detail.namespace, detail.name),
        revisions: detail
            .revisions
            .iter()
            .map(|r| RevisionView::new(r, now))
            .collect(),
        namespace: detail.namespace,
        name: detail.name,
        gate: detail.gate,
        source_revision: detail.source_revision,
    };
    html(StatusCode::OK, page.render())
}

const SCRIPT: &str = include_str!("../../assets/dashboard.js");
const STYLE: &str = include_str!("../../assets/dashboard.css");

pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub(super) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// Revalidated on every load: an upgraded binary's page must not run a cached old script.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
