//! `--status-auth=kubernetes`: who may read the results. `/status`, `/status/{ns}/{name}`, the
//! dashboard `/` and `/kustomizations/{ns}/{name}` then need `Authorization: Bearer <token>`;
//! the token is checked with a TokenReview and each Kustomization is shown only to a caller a
//! SubjectAccessReview lets `get` it (`kustomize.toolkit.fluxcd.io` `kustomizations`), as
//! controller-runtime's authenticated metrics (`filters.WithAuthenticationAndAuthorization`)
//! ask the API server about `/metrics`. So a tenant who may read its own Kustomizations reads
//! their results and nobody else's.
//!
//! - no token, or one the TokenReview does not authenticate → 401;
//! - `/status/{ns}/{name}` (and its page) for a Kustomization the caller may not get → 403,
//!   whether it is handled or not (a 404 would say which names exist);
//! - the lists show the rows the caller may get. One question per scope, widest first: may it
//!   get kustomizations cluster-wide (every row), else in each namespace of the rows (every row
//!   of that namespace), else each remaining row by name. RBAC never allows less in a narrower
//!   scope, so the answer is the per-row answer in one or a few calls.
//!
//! Answers are kept [`REVIEW_TTL`] (a dashboard refreshes every 10 s; each tab must not cost a
//! review per row per refresh), keyed by a digest of the token, never the token, in maps of at
//! most [`MAX_CACHED`] entries. A review the API server does not answer is a 503, never kept.
//! The HTTP side sees only the [`Reviewer`] trait; the service asks with its `kube::Client`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use futures::future::BoxFuture;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::AppState;
use super::backend::Backend;
use super::error::ApiError;
use crate::flux::event::Event;
use crate::model::{Key, Kind, RevisionRecord, StatusDetail, StatusRow};

/// How long a TokenReview's or a SubjectAccessReview's answer is used again.
pub const REVIEW_TTL: Duration = Duration::from_secs(10);

/// Entries in each answer map; at the bound the expired go, then (still full) all of them.
pub const MAX_CACHED: usize = 4096;

/// Reviews in flight at once for one list.
const CONCURRENT_REVIEWS: usize = 8;

/// The API group and resource a caller must be allowed to `get` for a Kustomization's results.
pub const GROUP: &str = "kustomize.toolkit.fluxcd.io";
pub const RESOURCE: &str = "kustomizations";

/// What a caller is asked about: `get` on this resource, as the gated object's own RBAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Resource {
    pub group: &'static str,
    pub resource: &'static str,
}

/// A Kustomization's results: `get kustomizations.kustomize.toolkit.fluxcd.io`.
pub const KUSTOMIZATIONS: Resource = Resource {
    group: GROUP,
    resource: RESOURCE,
};
/// A HelmRelease's results: `get helmreleases.helm.toolkit.fluxcd.io`.
pub const HELMRELEASES: Resource = Resource {
    group: "helm.toolkit.fluxcd.io",
    resource: "helmreleases",
};

impl Resource {
    /// The resource a caller must be allowed to `get` for the results of a gated object of
    /// `kind`: the object itself, as its kind's own RBAC says.
    pub fn of(kind: Kind) -> Resource {
        Resource {
            group: kind.spec().group,
            resource: kind.spec().plural,
        }
    }
}

/// The identity a TokenReview found, passed on as is to the SubjectAccessReviews.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    pub username: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("{review}: {message}")]
    Failed {
        review: &'static str,
        message: String,
    },
}

/// The two questions asked of the API server.
pub trait Reviewer: Send + Sync + 'static {
    /// A TokenReview of `token`: the caller, or `None` when it is not authenticated.
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Caller>, ReviewError>>;
    /// A SubjectAccessReview: may `caller` `get` `resource` in `namespace` (`None`: all
    /// namespaces) named `name` (`None`: any)?
    fn may_get<'a>(
        &'a self,
        caller: &'a Caller,
        resource: Resource,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, ReviewError>>;
}

/// A map of answers kept for a while, bounded.
struct Kept<K, V> {
    ttl: Duration,
    map: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash, V: Clone> Kept<K, V> {
    fn new(ttl: Duration) -> Self {
        Kept {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &K, now: Instant) -> Option<V> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key)
            .filter(|(_, at)| now.saturating_duration_since(*at) < self.ttl)
            .map(|(v, _)| v.clone())
    }

    fn put(&self, key: K, value: V, now: Instant) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_CACHED {
            let ttl = self.ttl;
            map.retain(|_, (_, at)| now.saturating_duration_since(*at) < ttl);
            if map.len() >= MAX_CACHED {
                map.clear();
            }
        }
        map.insert(key, (value, now));
    }

    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A Kustomization's namespace and name.
type Row = (String, String);

/// The digest a token is known by in the maps.
type TokenKey = [u8; 32];

/// The reviewer and its kept answers, shared by every request of a router.
pub struct StatusAuth {
    reviewer: Arc<dyn Reviewer>,
    callers: Kept<TokenKey, Option<Arc<Caller>>>,
    access: Kept<(TokenKey, Resource, Option<String>, Option<String>), bool>,
}

/// Why a request is not let through: its answer.
enum Refusal {
    Unauthorized(&'static str),
    Unavailable(String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Unauthorized(why) => {
                let mut response = ApiError::new(StatusCode::UNAUTHORIZED, why).into_response();
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"flux-converger\""),
                );
                response
            }
            Refusal::Unavailable(why) => {
                tracing::warn!(error = %why, "status authorization: a review failed");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("cannot check the caller with the API server: {why}"),
                )
                .into_response()
            }
        }
    }
}

impl StatusAuth {
    pub fn new(reviewer: Arc<dyn Reviewer>) -> Self {
        Self::with_ttl(reviewer, REVIEW_TTL)
    }

    pub fn with_ttl(reviewer: Arc<dyn Reviewer>, ttl: Duration) -> Self {
        StatusAuth {
            reviewer,
            callers: Kept::new(ttl),
            access: Kept::new(ttl),
        }
    }

    /// Answers kept now (tokens, access decisions): for the bound's test.
    pub fn kept(&self) -> (usize, usize) {
        (self.callers.len(), self.access.len())
    }

    async fn caller(&self, headers: &HeaderMap) -> Result<(TokenKey, Arc<Caller>), Refusal> {
        let token = bearer_token(headers).map_err(Refusal::Unauthorized)?;
        let key: TokenKey = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        let caller = match self.callers.get(&key, now) {
            Some(caller) => caller,
            None => {
                let caller = self
                    .reviewer
                    .authenticate(token)
                    .await
                    .map_err(|e| Refusal::Unavailable(e.to_string()))?
                    .map(Arc::new);
                self.callers.put(key, caller.clone(), now);
                caller
            }
        };
        caller
            .map(|caller| (key, caller))
            .ok_or(Refusal::Unauthorized("the bearer token is not valid"))
    }

    async fn may_get(
        &self,
        key: &TokenKey,
        caller: &Caller,
        resource: Resource,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Result<bool, Refusal> {
        let entry = (
            *key,
            resource,
            namespace.map(String::from),
            name.map(String::from),
        );
        let now = Instant::now();
        if let Some(allowed) = self.access.get(&entry, now) {
            return Ok(allowed);
        }
        let allowed = self
            .reviewer
            .may_get(caller, resource, namespace, name)
            .await
            .map_err(|e| Refusal::Unavailable(e.to_string()))?;
        self.access.put(entry, allowed, now);
        Ok(allowed)
    }

    /// The rows of `rows` the caller may get (see the module's comment for the order asked).
    async fn visible(
        &self,
        key: &TokenKey,
        caller: &Caller,
        resource: Resource,
        rows: Vec<(String, String)>,
    ) -> Result<HashSet<(String, String)>, Refusal> {
        if rows.is_empty() || self.may_get(key, caller, resource, None, None).await? {
            return Ok(rows.into_iter().collect());
        }
        let namespaces: BTreeSet<String> = rows.iter().map(|(ns, _)| ns.clone()).collect();
        let open: Vec<(String, Result<bool, Refusal>)> = futures::stream::iter(namespaces)
            .map(|ns: String| async move {
                let allowed = self.may_get(key, caller, resource, Some(&ns), None).await;
                (ns, allowed)
            })
            .buffer_unordered(CONCURRENT_REVIEWS)
            .collect()
            .await;
        let mut open_namespaces = HashSet::new();
        for (ns, allowed) in open {
            if allowed? {
                open_namespaces.insert(ns);
            }
        }
        let (visible, rest): (Vec<Row>, Vec<Row>) = rows
            .into_iter()
            .partition(|(ns, _)| open_namespaces.contains(ns));
        let mut visible: HashSet<(String, String)> = visible.into_iter().collect();
        let named: Vec<((String, String), Result<bool, Refusal>)> = futures::stream::iter(rest)
            .map(|(ns, name): (String, String)| async move {
                let allowed = self
                    .may_get(key, caller, resource, Some(&ns), Some(&name))
                    .await;
                ((ns, name), allowed)
            })
            .buffer_unordered(CONCURRENT_REVIEWS)
            .collect()
            .await;
        for (row, allowed) in named {
            if allowed? {
                visible.insert(row);
            }
        }
        Ok(visible)
    }
}

/// `Authorization: Bearer <token>` (scheme case-insensitive).
fn bearer_token(headers: &HeaderMap) -> Result<&str, &'static str> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or("a bearer token is required (Authorization: Bearer <token>)")?
        .to_str()
        .map_err(|_| "the Authorization header is not text")?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or("the Authorization header is not Bearer <token>")?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err("the Authorization header is not Bearer <token>");
    }
    Ok(token)
}

/// What the guards share: the kept answers and the whole backend (to list the rows).
#[derive(Clone)]
pub(super) struct Guard {
    pub auth: Arc<StatusAuth>,
    pub backend: Arc<dyn Backend>,
}

/// The backend as the caller may see it, put into the request by [`list_guard`].
#[derive(Clone)]
pub(super) struct Viewed(Arc<dyn Backend>);

/// The app state with the backend the caller may see: the handlers of guarded routes take
/// this instead of `State<AppState>`, so without `--status-auth` they see all of it.
pub(super) struct Seen(pub AppState);

impl FromRequestParts<AppState> for Seen {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let mut state = state.clone();
        if let Some(Viewed(backend)) = parts.extensions.get::<Viewed>() {
            state.backend = backend.clone();
        }
        Ok(Seen(state))
    }
}

/// `/` and `/status`: an authenticated caller, shown the rows of every kind it may get.
pub(super) async fn list_guard(
    State(guard): State<Guard>,
    mut request: Request,
    next: Next,
) -> Response {
    let (key, caller) = match guard.auth.caller(request.headers()).await {
        Ok(found) => found,
        Err(refusal) => return refusal.into_response(),
    };
    let mut visible = HashMap::new();
    for kind in guard.backend.kinds() {
        let rows = guard
            .backend
            .rows(kind, None)
            .into_iter()
            .map(|s| (s.namespace, s.name))
            .collect();
        match guard
            .auth
            .visible(&key, &caller, Resource::of(kind), rows)
            .await
        {
            Ok(seen) => visible.insert(kind, seen),
            Err(refusal) => return refusal.into_response(),
        };
    }
    tracing::debug!(user = %caller.username,
        rows = visible.values().map(HashSet::len).sum::<usize>(), "status read");
    request.extensions_mut().insert(Viewed(Arc::new(Filtered {
        inner: guard.backend.clone(),
        visible,
    })));
    next.run(request).await
}

/// `/status/{ns}/{name}`: an authenticated caller that may get that Kustomization.
pub(super) async fn one_guard(
    State(guard): State<Guard>,
    Path((namespace, name)): Path<(String, String)>,
    request: Request,
    next: Next,
) -> Response {
    one_of(guard, KUSTOMIZATIONS, &namespace, &name, request, next).await
}

/// `/status/{plural}/{ns}/{name}` and `/{plural}/{ns}/{name}`: a caller that may get that
/// object of that kind. A plural of no gated kind is let through to its 404, once the caller
/// is known.
pub(super) async fn kind_one_guard(
    State(guard): State<Guard>,
    Path((plural, namespace, name)): Path<(String, String, String)>,
    request: Request,
    next: Next,
) -> Response {
    match guard.backend.kind_of(&plural) {
        Some(kind) => one_of(guard, Resource::of(kind), &namespace, &name, request, next).await,
        None => match guard.auth.caller(request.headers()).await {
            Ok(_) => next.run(request).await,
            Err(refusal) => refusal.into_response(),
        },
    }
}

async fn one_of(
    guard: Guard,
    resource: Resource,
    namespace: &str,
    name: &str,
    request: Request,
    next: Next,
) -> Response {
    let (key, caller) = match guard.auth.caller(request.headers()).await {
        Ok(found) => found,
        Err(refusal) => return refusal.into_response(),
    };
    match guard
        .auth
        .may_get(&key, &caller, resource, Some(namespace), Some(name))
        .await
    {
        Ok(true) => next.run(request).await,
        Ok(false) => ApiError::new(
            StatusCode::FORBIDDEN,
            forbidden(&caller.username, resource, namespace, name),
        )
        .into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

/// The API server's wording of the same refusal.
fn forbidden(user: &str, resource: Resource, namespace: &str, name: &str) -> String {
    let Resource { group, resource } = resource;
    format!(
        "{resource}.{group} {name:?} is forbidden: User {user:?} cannot get resource \
         {resource:?} in API group {group:?} in the namespace {namespace:?}"
    )
}

/// The backend with only the rows one caller may see.
struct Filtered {
    inner: Arc<dyn Backend>,
    /// By kind, the objects the caller may get.
    visible: HashMap<Kind, HashSet<(String, String)>>,
}

impl Filtered {
    fn shows(&self, kind: Kind, namespace: &str, name: &str) -> bool {
        // A borrowed lookup would need a pair of &str keys; the sets are small.
        self.visible
            .get(&kind)
            .is_some_and(|v| v.contains(&(namespace.to_string(), name.to_string())))
    }
}

impl Backend for Filtered {
    fn hook(&self, event: &Event) -> Vec<String> {
        self.inner.hook(event)
    }

    fn wake(&self, key: Key) -> bool {
        self.inner.wake(key)
    }

    fn kinds(&self) -> Vec<Kind> {
        self.inner.kinds()
    }

    fn rows(&self, kind: Kind, namespace: Option<&str>) -> Vec<StatusRow> {
        let mut rows = self.inner.rows(kind, namespace);
        rows.retain(|s| self.shows(kind, &s.namespace, &s.name));
        rows
    }

    fn detail(&self, kind: Kind, namespace: &str, name: &str) -> Option<StatusDetail> {
        if !self.shows(kind, namespace, name) {
            return None;
        }
        self.inner.detail(kind, namespace, name)
    }

    fn ready(&self) -> Result<(), super::backend::NotReady> {
        self.inner.ready()
    }

    // `version` stays `None`: pages differ by caller, so none is kept for the next one.

    fn last_record(&self, kind: Kind, namespace: &str, name: &str) -> Option<RevisionRecord> {
        if !self.shows(kind, namespace, name) {
            return None;
        }
        self.inner.last_record(kind, namespace, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A reviewer from a table: tokens to users, and the (user, namespace, name) grants.
    #[derive(Default)]
    struct Table {
        tokens: HashMap<&'static str, &'static str>,
        /// (user, namespace or "" for all, name or "" for any).
        grants: Vec<(&'static str, &'static str, &'static str)>,
        /// The resource the grants are on (default: Kustomizations).
        resource: Option<Resource>,
        asked: AtomicUsize,
    }

    impl Reviewer for Table {
        fn authenticate<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Option<Caller>, ReviewError>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            let caller = self.tokens.get(token).map(|user| Caller {
                username: user.to_string(),
                ..Caller::default()
            });
            Box::pin(async move { Ok(caller) })
        }

        fn may_get<'a>(
            &'a self,
            caller: &'a Caller,
            resource: Resource,
            namespace: Option<&'a str>,
            name: Option<&'a str>,
        ) -> BoxFuture<'a, Result<bool, ReviewError>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            let (ns, nm) = (namespace.unwrap_or(""), name.unwrap_or(""));
            let on = self.resource.unwrap_or(KUSTOMIZATIONS) == resource;
            let allowed = on
                && self.grants.iter().any(|(user, gns, gname)| {
                    *user == caller.username
                        && (gns.is_empty() || *gns == ns)
                        && (gname.is_empty() || *gname == nm)
                });
            Box::pin(async move { Ok(allowed) })
        }
    }

    fn rows() -> Vec<(String, String)> {
        [("a", "x"), ("a", "y"), ("b", "x"), ("c", "z")]
            .map(|(ns, n)| (ns.to_string(), n.to_string()))
            .to_vec()
    }

    #[tokio::test]
    async fn visible_rows_and_questions_by_table() {
        // (case, grants of "u", rows visible, reviews asked at most)
        type Case = (
            &'static str,
            Vec<(&'static str, &'static str, &'static str)>,
            Vec<(&'static str, &'static str)>,
            usize,
        );
        let cases: Vec<Case> = vec![
            (
                "cluster-wide: one question",
                vec![("u", "", "")],
                vec![("a", "x"), ("a", "y"), ("b", "x"), ("c", "z")],
                1,
            ),
            (
                "one namespace",
                vec![("u", "a", "")],
                vec![("a", "x"), ("a", "y")],
                1 + 3 + 2,
            ),
            (
                "by name",
                vec![("u", "b", "x"), ("u", "c", "z")],
                vec![("b", "x"), ("c", "z")],
                1 + 3 + 4,
            ),
            ("nothing", vec![("other", "", "")], vec![], 1 + 3 + 4),
        ];
        for (case, grants, want, most) in cases {
            let table = Arc::new(Table {
                grants,
                ..Table::default()
            });
            let auth = StatusAuth::new(table.clone());
            let caller = Caller {
                username: "u".into(),
                ..Caller::default()
            };
            let key = [0; 32];
            let Ok(got) = auth.visible(&key, &caller, KUSTOMIZATIONS, rows()).await else {
                panic!("{case}: refused");
            };
            let want: HashSet<(String, String)> = want
                .into_iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
            assert_eq!(got, want, "{case}");
            let asked = table.asked.load(Ordering::SeqCst);
            assert!(asked <= most, "{case}: {asked} reviews");
            // Asked again within the TTL: every answer is kept.
            let _ = auth.visible(&key, &caller, KUSTOMIZATIONS, rows()).await;
            assert_eq!(table.asked.load(Ordering::SeqCst), asked, "{case}: kept");
        }
    }

    /// A grant on Kustomizations shows no HelmRelease, and one on HelmReleases no
    /// Kustomization: each kind's rows are reviewed against its own resource.
    #[tokio::test]
    async fn each_kind_is_reviewed_against_its_own_resource() {
        let caller = Caller {
            username: "u".into(),
            ..Caller::default()
        };
        for (granted, asked, shown) in [
            (KUSTOMIZATIONS, KUSTOMIZATIONS, 4),
            (KUSTOMIZATIONS, HELMRELEASES, 0),
            (HELMRELEASES, HELMRELEASES, 4),
            (HELMRELEASES, KUSTOMIZATIONS, 0),
        ] {
            let table = Arc::new(Table {
                grants: vec![("u", "", "")],
                resource: Some(granted),
                ..Table::default()
            });
            let auth = StatusAuth::new(table);
            let Ok(got) = auth.visible(&[0; 32], &caller, asked, rows()).await else {
                panic!("refused");
            };
            assert_eq!(got.len(), shown, "granted {granted:?}, asked {asked:?}");
        }
        let message = forbidden("u", HELMRELEASES, "demo", "web");
        assert_eq!(
            message,
            "helmreleases.helm.toolkit.fluxcd.io \"web\" is forbidden: User \"u\" cannot get resource \"helmreleases\" in API group \"helm.toolkit.fluxcd.io\" in the namespace \"demo\""
        );
    }

    #[tokio::test]
    async fn tokens_are_reviewed_once_per_ttl_and_the_maps_stay_bounded() {
        let table = Arc::new(Table {
            tokens: HashMap::from([("good", "u")]),
            ..Table::default()
        });
        let auth = StatusAuth::new(table.clone());
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer good"),
        );
        for _ in 0..3 {
            assert!(auth.caller(&headers).await.is_ok());
        }
        assert_eq!(table.asked.load(Ordering::SeqCst), 1);
        for i in 0..(MAX_CACHED * 2) {
            let value = HeaderValue::from_str(&format!("Bearer bad{i}")).unwrap();
            headers.insert(header::AUTHORIZATION, value);
            assert!(matches!(
                auth.caller(&headers).await,
                Err(Refusal::Unauthorized(_))
            ));
        }
        assert!(auth.kept().0 <= MAX_CACHED, "{:?}", auth.kept());
    }

    #[test]
    fn bearer_token_table() {
        let cases: &[(&str, Option<&str>, Result<&str, &str>)] = &[
            ("bearer", Some("Bearer abc"), Ok("abc")),
            ("scheme case", Some("bearer abc"), Ok("abc")),
            ("missing", None, Err("required")),
            ("basic", Some("Basic abc"), Err("not Bearer")),
            ("empty", Some("Bearer "), Err("not Bearer")),
        ];
        for (case, value, want) in cases {
            let mut headers = HeaderMap::new();
            if let Some(v) = value {
                headers.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            }
            match (bearer_token(&headers), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{case}"),
                (Err(got), Err(words)) => assert!(got.contains(words), "{case}: {got}"),
                (got, want) => panic!("{case}: {got:?} vs {want:?}"),
            }
        }
    }
}
