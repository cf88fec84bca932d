//! The dashboard: `GET /` (one row per handled Kustomization, 200 to a page) and
//! `GET /kustomizations/{namespace}/{name}` (its history), rendered by askama templates compiled
//! into the binary, plus the page's own script and stylesheet (`/assets/*`). Clusters are often
//! offline, so nothing is fetched from elsewhere; every value is escaped by the templates.
//!
//! `/` is rendered once per change, not once per request: every open tab polls it, and a page
//! of 1,000 rows took ~16 ms of CPU and 1.2 MB to answer. Each page (filters and page number)
//! is kept encoded with the [`Backend::version`] it was built at and a strong `ETag` (a digest
//! of its bytes), answered with `Cache-Control: no-cache`; a request naming that `ETag` in
//! `If-None-Match` gets `304 Not Modified` and no body. A backend that does not track a
//! version gets a fresh render each time (still with the `ETag`, so the 304 saves the
//! transfer).
//!
//! [`Backend::version`]: super::Backend::version

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use askama::Template;
use axum::Extension;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use bytes::Bytes;
use jiff::{Timestamp, Unit};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::AppState;
use super::auth::Seen;
use super::view::{
    Badge, RevisionView, Row, STATE_KEYS, page_numbers, state_badge, summary_state_key,
};
use crate::model::GateMode;

/// How often the page refreshes its rows in place (assets/dashboard.js).
pub const REFRESH_SECONDS: u32 = 10;

/// Rows on one page of `/`: a browser lays out a few hundred table rows at once without a
/// stall, and a page of them is ~160 kB of HTML.
pub const PAGE_ROWS: usize = 200;

/// Pages kept encoded at once (each filter × page number asked for since the last change);
/// the least recently used goes first. At most ~180 kB each, and two keys of one page (asked
/// past the last, and the last) share its bytes.
const KEPT_PAGES: usize = 32;

/// What the page's `data-etag` holds before its digest is written into it: as long as the
/// digest's hex, so the digest is stamped in place.
const ETAG_SLOT: &str = "0000000000000000";
const ETAG_ATTRIBUTE: &[u8] = b"data-etag=\"";

#[derive(Debug, Default, Deserialize)]
pub(super) struct DashboardQuery {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    state: Option<String>,
    /// 1-based. Text, so `?page=x` shows page 1 instead of a 400.
    #[serde(default)]
    page: Option<String>,
}

/// One page of `/` as asked for, normalised: the key of the kept pages.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Wanted {
    namespace: Option<String>,
    state: Option<&'static str>,
    page: usize,
}

impl Wanted {
    fn of(query: &DashboardQuery) -> Self {
        Wanted {
            namespace: query
                .namespace
                .as_deref()
                .filter(|ns| !ns.is_empty())
                .map(String::from),
            state: query
                .state
                .as_deref()
                .and_then(|s| STATE_KEYS.iter().find(|key| **key == s).copied()),
            page: query
                .page
                .as_deref()
                .and_then(|p| p.trim().parse::<usize>().ok())
                .filter(|p| *p > 0)
                .unwrap_or(1),
        }
    }
}

/// `/?namespace=..&state=..&page=..` with only what is set. `namespace` is one the service
/// handles (a DNS label) and `state` one of [`STATE_KEYS`], so nothing needs encoding.
fn list_href(namespace: Option<&str>, state: Option<&str>, page: usize) -> String {
    let mut params = Vec::new();
    if let Some(ns) = namespace {
        params.push(format!("namespace={ns}"));
    }
    if let Some(state) = state {
        params.push(format!("state={state}"));
    }
    if page > 1 {
        params.push(format!("page={page}"));
    }
    if params.is_empty() {
        "/".to_string()
    } else {
        format!("/?{}", params.join("&"))
    }
}

/// One state of the summary bar and the state filter.
struct Chip {
    key: &'static str,
    label: &'static str,
    count: usize,
    selected: bool,
    href: String,
}

/// A link of the page bar; `number: None` is a gap.
struct PageLink {
    number: Option<usize>,
    href: String,
    current: bool,
}

#[derive(Template)]
#[template(path = "dashboard.html")]
struct DashboardPage {
    title: String,
    refresh_seconds: u32,
    etag_slot: &'static str,
    chips: Vec<Chip>,
    /// Every namespace with a handled Kustomization, and whether it is the filter.
    namespaces: Vec<(String, bool)>,
    rows: Vec<Row>,
    /// Rows matching the filters, on every page.
    matching: usize,
    /// 1-based positions of this page's first and last row among `matching`.
    first_row: usize,
    last_row: usize,
    /// Every handled Kustomization.
    total: usize,
    page_count: usize,
    pages: Vec<PageLink>,
    previous_href: Option<String>,
    next_href: Option<String>,
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
        Err(err) => render_failed(&err),
    }
}

fn render_failed(err: &dyn std::fmt::Display) -> Response {
    tracing::error!(error = %err, "dashboard template failed");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "the page could not be rendered\n",
    )
        .into_response()
}

/// One encoded page of `/`.
#[derive(Clone)]
struct Encoded {
    /// The quoted `ETag`.
    etag: HeaderValue,
    body: Bytes,
}

struct Kept {
    /// The [`Backend::version`](super::Backend::version) it was built at.
    version: u64,
    page: Encoded,
    /// When it was last answered, in [`Pages::clock`] ticks (least recently used goes first).
    used: u64,
}

#[derive(Default)]
struct KeptPages {
    pages: HashMap<Wanted, Kept>,
    clock: u64,
}

/// The encoded pages of `/` of one router (shared by its clones).
#[derive(Default)]
pub(super) struct Pages {
    kept: Mutex<KeptPages>,
    /// Held while a page is built: the tabs that poll just after a change wait for one
    /// build instead of each rendering the same page.
    building: tokio::sync::Mutex<()>,
}

impl Pages {
    fn kept(&self) -> MutexGuard<'_, KeptPages> {
        // Only whole entries are inserted: a panicked holder left nothing half-written.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, wanted: &Wanted, version: u64) -> Option<Encoded> {
        let mut kept = self.kept();
        kept.clock += 1;
        let clock = kept.clock;
        let entry = kept.pages.get_mut(wanted)?;
        if entry.version != version {
            return None;
        }
        entry.used = clock;
        Some(entry.page.clone())
    }

    fn put(&self, wanted: Wanted, version: u64, page: Encoded) {
        let mut kept = self.kept();
        kept.clock += 1;
        let used = kept.clock;
        // Pages of an older version are never answered again.
        kept.pages.retain(|_, k| k.version == version);
        while kept.pages.len() >= KEPT_PAGES {
            let Some(oldest) = kept
                .pages
                .iter()
                .min_by_key(|(_, k)| k.used)
                .map(|(w, _)| w.clone())
            else {
                break;
            };
            kept.pages.remove(&oldest);
        }
        kept.pages.insert(
            wanted,
            Kept {
                version,
                page,
                used,
            },
        );
    }
}

/// Whether `If-None-Match` names `etag` (or is `*`). Weak tags match too, as RFC 9110 has a
/// GET compare them.
fn not_modified(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    let Ok(etag) = etag.to_str() else {
        return false;
    };
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

fn answer(page: Encoded, headers: &HeaderMap) -> Response {
    let status = if not_modified(headers, &page.etag) {
        StatusCode::NOT_MODIFIED
    } else {
        StatusCode::OK
    };
    let common = [
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (header::ETAG, page.etag),
    ];
    if status == StatusCode::NOT_MODIFIED {
        return (status, common).into_response();
    }
    (
        status,
        common,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        page.body,
    )
        .into_response()
}

/// Writes the digest of `body` (rendered with [`ETAG_SLOT`] in its `data-etag`) into that
/// attribute and returns it as the quoted `ETag`: the page carries its own tag, so its script
/// can revalidate from the first refresh on.
fn stamp_etag(body: &mut [u8]) -> Option<HeaderValue> {
    let digest = Sha256::digest(&*body);
    let tag = hex::encode(&digest[..ETAG_SLOT.len() / 2]);
    let at = body
        .windows(ETAG_ATTRIBUTE.len())
        .position(|w| w == ETAG_ATTRIBUTE)?
        + ETAG_ATTRIBUTE.len();
    let slot = body.get_mut(at..at + ETAG_SLOT.len())?;
    if slot != ETAG_SLOT.as_bytes() {
        return None;
    }
    slot.copy_from_slice(tag.as_bytes());
    HeaderValue::from_str(&format!("\"{tag}\"")).ok()
}

/// Renders one page of `/`; also returns the page number it shows (a page past the last
/// shows the last).
fn build(state: &AppState, wanted: &Wanted) -> Result<(Encoded, usize), String> {
    let (page, shown) = dashboard_page(state, wanted);
    let mut body = page.render().map_err(|e| e.to_string())?.into_bytes();
    let etag = stamp_etag(&mut body).ok_or("the page has no data-etag slot")?;
    Ok((
        Encoded {
            etag,
            body: Bytes::from(body),
        },
        shown,
    ))
}

pub(super) async fn dashboard(
    Seen(state): Seen,
    Extension(pages): Extension<Arc<Pages>>,
    Query(query): Query<DashboardQuery>,
    headers: HeaderMap,
) -> Response {
    let wanted = Wanted::of(&query);
    if let Some(version) = state.backend.version()
        && let Some(page) = pages.get(&wanted, version)
    {
        return answer(page, &headers);
    }
    let _building = pages.building.lock().await;
    // Read before the data it guards (see `Backend::version`).
    let version = state.backend.version();
    if let Some(version) = version
        && let Some(page) = pages.get(&wanted, version)
    {
        return answer(page, &headers);
    }
    // A thousand rows take milliseconds to build and render: off the async workers, so the
    // webhook and the probes answer at once while a page renders.
    let built = {
        let wanted = wanted.clone();
        tokio::task::spawn_blocking(move || build(&state, &wanted)).await
    };
    match built {
        Ok(Ok((page, shown))) => {
            if let Some(version) = version {
                // Kept under the page it shows too: the same bytes, shared. Whatever was
                // asked for is kept (the kept pages are bounded), so no request renders at
                // every poll.
                if shown != wanted.page {
                    let shown = Wanted {
                        page: shown,
                        ..wanted.clone()
                    };
                    pages.put(shown, version, page.clone());
                }
                pages.put(wanted, version, page.clone());
            }
            answer(page, &headers)
        }
        Ok(Err(err)) => render_failed(&err),
        Err(err) => render_failed(&err),
    }
}

fn dashboard_page(state: &AppState, wanted: &Wanted) -> (DashboardPage, usize) {
    // Every kind the service gates, one row each, told apart by the row's kind.
    let mut summaries = state.backend.gated(None);
    summaries.sort_by(|a, b| {
        (&a.namespace, &a.name, a.kind.as_str()).cmp(&(&b.namespace, &b.name, b.kind.as_str()))
    });
    let mut namespaces: Vec<String> = summaries.iter().map(|s| s.namespace.clone()).collect();
    namespaces.dedup();
    let namespace = wanted.namespace.as_deref();
    // Only a namespace that exists goes back into links, so the hrefs hold DNS labels alone.
    let known_namespace = namespace.filter(|ns| namespaces.iter().any(|known| known == ns));
    let wanted_state = wanted.state;

    // The state of each row from its summary: only the rows of this page copy their record.
    let in_namespace: Vec<(&'static str, &_)> = summaries
        .iter()
        .filter(|s| namespace.is_none_or(|ns| s.namespace == ns))
        .map(|s| (summary_state_key(s), s))
        .collect();
    let chips = STATE_KEYS
        .iter()
        .map(|key| {
            let badge = badge_of(key);
            Chip {
                key: badge.key,
                label: badge.label,
                count: in_namespace.iter().filter(|(k, _)| k == key).count(),
                selected: wanted_state == Some(*key),
                href: list_href(known_namespace, Some(key), 1),
            }
        })
        .collect();
    let matching: Vec<_> = in_namespace
        .into_iter()
        .filter(|(key, _)| wanted_state.is_none_or(|w| *key == w))
        .map(|(_, s)| s)
        .collect();
    let page_count = matching.len().div_ceil(PAGE_ROWS).max(1);
    let page = wanted.page.min(page_count);
    let skip = (page - 1) * PAGE_ROWS;
    let rows: Vec<Row> = matching
        .iter()
        .skip(skip)
        .take(PAGE_ROWS)
        .map(|s| {
            let last = if s.last.is_some() {
                state.backend.last_record(s.kind, &s.namespace, &s.name)
            } else {
                None
            };
            Row::new(s, last.as_ref())
        })
        .collect();
    let href = |page: usize| list_href(known_namespace, wanted_state, page);
    let pages = if page_count > 1 {
        page_numbers(page, page_count)
            .into_iter()
            .map(|number| PageLink {
                number,
                href: number.map(href).unwrap_or_default(),
                current: number == Some(page),
            })
            .collect()
    } else {
        Vec::new()
    };
    let dashboard = DashboardPage {
        title: "Kustomizations".to_string(),
        refresh_seconds: REFRESH_SECONDS,
        etag_slot: ETAG_SLOT,
        chips,
        namespaces: namespaces
            .into_iter()
            .map(|ns| {
                let selected = namespace == Some(ns.as_str());
                (ns, selected)
            })
            .collect(),
        first_row: if rows.is_empty() { 0 } else { skip + 1 },
        last_row: skip + rows.len(),
        rows,
        matching: matching.len(),
        total: summaries.len(),
        previous_href: (page > 1).then(|| href(page - 1)),
        next_href: (page < page_count).then(|| href(page + 1)),
        page_count,
        pages,
    };
    (dashboard, page)
}

fn badge_of(key: &str) -> Badge {
    use crate::model::RevisionState as S;
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

/// `/{plural}/{ns}/{name}`: one gated object's history, whatever its kind
/// (`/kustomizations/...`, `/helmreleases/...`).
pub(super) async fn detail(
    Seen(state): Seen,
    Path((plural, namespace, name)): Path<(String, String, String)>,
) -> Response {
    let Some(kind) = state.backend.kind_of(&plural) else {
        // No kind of that name: the same answer as any path nothing is served at.
        return super::error::ApiError::new(StatusCode::NOT_FOUND, "no such endpoint")
            .into_response();
    };
    let detail = state.backend.detail(kind, &namespace, &name);
    let json_href = if kind == crate::model::Kind::KUSTOMIZATION {
        format!("/status/{namespace}/{name}")
    } else {
        format!("/status/{plural}/{namespace}/{name}")
    };
    detail_page(detail, kind.as_str(), &namespace, &name, json_href)
}

fn detail_page(
    detail: Option<crate::model::StatusDetail>,
    kind: &str,
    namespace: &str,
    name: &str,
    json_href: String,
) -> Response {
    let now = now();
    let Some(detail) = detail else {
        let page = ErrorPage {
            title: "Not handled".to_string(),
            generated_at: stamp(now),
            message: format!(
                "{kind} {namespace}/{name} is not handled by flux-converger (no such {kind}, \
                 or its flux-converger.io/gate annotation is off)."
            ),
        };
        return html(StatusCode::NOT_FOUND, page.render());
    };
    let page = DetailPage {
        title: format!("{}/{}", detail.namespace, detail.name),
        generated_at: stamp(now),
        refresh_seconds: REFRESH_SECONDS,
        json_href,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn query(namespace: Option<&str>, state: Option<&str>, page: Option<&str>) -> DashboardQuery {
        DashboardQuery {
            namespace: namespace.map(String::from),
            state: state.map(String::from),
            page: page.map(String::from),
        }
    }

    #[test]
    fn wanted_is_normalised_by_table() {
        let cases = [
            ((None, None, None), (None, None, 1)),
            ((Some(""), Some(""), Some("")), (None, None, 1)),
            (
                (Some("apps"), Some("refused"), Some("3")),
                (Some("apps"), Some("refused"), 3),
            ),
            ((None, Some("<b>"), Some("0")), (None, None, 1)),
            ((None, Some("none"), Some("-2")), (None, Some("none"), 1)),
            ((None, None, Some(" 7 ")), (None, None, 7)),
            (
                (None, None, Some("99999999999999999999999")),
                (None, None, 1),
            ),
        ];
        for ((ns, state, page), (want_ns, want_state, want_page)) in cases {
            let wanted = Wanted::of(&query(ns, state, page));
            assert_eq!(
                wanted,
                Wanted {
                    namespace: want_ns.map(String::from),
                    state: want_state,
                    page: want_page
                },
                "{ns:?} {state:?} {page:?}"
            );
        }
    }

    #[test]
    fn list_href_by_table() {
        let cases = [
            ((None, None, 1), "/"),
            ((None, None, 2), "/?page=2"),
            ((Some("apps"), None, 1), "/?namespace=apps"),
            ((None, Some("failed"), 1), "/?state=failed"),
            (
                (Some("apps"), Some("failed"), 4),
                "/?namespace=apps&state=failed&page=4",
            ),
        ];
        for ((ns, state, page), want) in cases {
            assert_eq!(list_href(ns, state, page), want);
        }
    }

    #[test]
    fn not_modified_by_table() {
        let etag = HeaderValue::from_static("\"0123456789abcdef\"");
        let cases: [(&[&str], bool); 8] = [
            (&[], false),
            (&["\"0123456789abcdef\""], true),
            (&["W/\"0123456789abcdef\""], true),
            (&["\"ffff\", \"0123456789abcdef\""], true),
            (&["\"ffff\"", "\"0123456789abcdef\""], true),
            (&["*"], true),
            (&["\"ffff\""], false),
            (&["0123456789abcdef"], false),
        ];
        for (values, want) in cases {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append(
                    header::IF_NONE_MATCH,
                    HeaderValue::from_str(value).expect("a header value"),
                );
            }
            assert_eq!(not_modified(&headers, &etag), want, "{values:?}");
        }
    }

    #[test]
    fn stamp_etag_writes_the_digest_into_the_slot() {
        let page = |text: &str| format!("<main data-etag=\"{ETAG_SLOT}\">{text}</main>");
        let mut one = page("one").into_bytes();
        let mut same = page("one").into_bytes();
        let mut two = page("two").into_bytes();
        let tag = stamp_etag(&mut one).expect("a slot");
        assert_eq!(
            stamp_etag(&mut same),
            Some(tag.clone()),
            "same bytes, same tag"
        );
        assert_ne!(
            stamp_etag(&mut two),
            Some(tag.clone()),
            "other bytes, other tag"
        );
        let text = String::from_utf8(one).expect("utf-8");
        let quoted = tag.to_str().expect("ascii");
        assert_eq!(
            text,
            format!("<main data-etag={quoted}>one</main>"),
            "the page carries its tag"
        );
        assert_eq!(stamp_etag(&mut b"<main>no slot</main>".to_vec()), None);
        assert_eq!(
            stamp_etag(&mut b"<main data-etag=\"short\">".to_vec()),
            None
        );
    }

    fn encoded(tag: &str) -> Encoded {
        Encoded {
            etag: HeaderValue::from_str(tag).expect("a header value"),
            body: Bytes::from(tag.to_string()),
        }
    }

    fn wanted(page: usize) -> Wanted {
        Wanted {
            namespace: None,
            state: None,
            page,
        }
    }

    #[test]
    fn pages_answer_only_their_version_and_drop_the_least_recently_used() {
        let pages = Pages::default();
        pages.put(wanted(1), 7, encoded("a"));
        assert_eq!(
            pages.get(&wanted(1), 7).map(|p| p.body),
            Some(Bytes::from("a"))
        );
        assert!(pages.get(&wanted(1), 8).is_none(), "another version");
        assert!(pages.get(&wanted(2), 7).is_none(), "another page");

        // A new version drops every page of the old one.
        pages.put(wanted(2), 8, encoded("b"));
        assert!(pages.get(&wanted(1), 7).is_none());
        assert_eq!(pages.kept().pages.len(), 1);

        for page in 3..2 + KEPT_PAGES {
            pages.put(wanted(page), 8, encoded("c"));
        }
        assert_eq!(pages.kept().pages.len(), KEPT_PAGES);
        // Page 2 is used again, so page 3 is now the least recently used.
        assert!(pages.get(&wanted(2), 8).is_some());
        pages.put(wanted(1000), 8, encoded("d"));
        assert_eq!(pages.kept().pages.len(), KEPT_PAGES);
        assert!(pages.get(&wanted(2), 8).is_some());
        assert!(pages.get(&wanted(3), 8).is_none());
        assert!(pages.get(&wanted(1000), 8).is_some());
    }
}
