//! Stand-ins for Argo CD, for the tests of the third gated kind (and, later, the demo):
//!
//! - [`ArgoCdServer`] plays the API server's one endpoint the converger calls,
//!   `GET /api/v1/applications/{name}/managed-resources`, over HTTPS with a test CA made at start,
//!   checking the bearer token and answering Argo CD's error bodies;
//! - [`ArgoCdController`] plays the application-controller for the Applications of one
//!   namespace: compares (`status.sync`, `status.resources`, under server-side diff the
//!   `ComparisonError` condition), starts auto-syncs, and runs an `operation` by applying each
//!   target object through the API server with field manager `argocd-controller` as Argo CD
//!   does in the operation's apply mode, writing `status.operationState` `Running` → `Failed` /
//!   `Error` / `Succeeded`, with its retries (`Retrying attempt #N at <time>.`, `Retrying
//!   operation. Attempt #N`, `(retried N times).`) and the messages docs/argocd.md quotes.
//!
//! Both read the same [`Repo`]: what "git" renders for each Application, revision by revision;
//! the targets carry the namespace and the tracking annotation Argo CD adds.
//!
//! What they leave out: hooks and waves (one wave, every object applied even when one fails),
//! pruning, health, sync windows, AppProject checks, impersonation, kubectl's three-way merge
//! (a client-side apply of an existing object sends the whole target as a strategic merge
//! patch with the new last-applied annotation), the `liveState` of managed resources (`"null"`),
//! Events, and the real backoff (a fixed [`ArgoCdOptions::retry_backoff`]). A client-side diff is
//! "every field of the target equals the live one's"; a server-side diff compares the dry run's
//! answer the same way.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_converger::argocd::recreate::with_last_applied;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

/// The field manager Argo CD applies objects with.
pub const ARGOCD_MANAGER: &str = "argocd-controller";
/// The manager the application-controller's own writes to Applications carry.
pub const CONTROLLER_MANAGER: &str = "argocd-application-controller";
/// The immutable-field text every failure shape quotes.
pub const IMMUTABLE: &str = "updates to statefulset spec for fields other than";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn application_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
        "applications",
    )
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

// ------------------------------------------------------------------------------------ repo

/// One revision an Application renders to.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    pub revision: String,
    /// The targets: namespace set, tracking annotation added.
    pub objects: Vec<Value>,
}

/// Each Application's (`namespace`, `name`) revisions, oldest first.
type History = BTreeMap<(String, String), Vec<Rendered>>;

/// What "git" renders for each Application, revision by revision.
#[derive(Clone, Default)]
pub struct Repo(Arc<Mutex<History>>);

impl Repo {
    /// Publishes `objects` at `revision` for the Application `app_namespace/app`, whose
    /// destination namespace is `destination` (the namespace of objects without one).
    pub fn publish(
        &self,
        app_namespace: &str,
        app: &str,
        revision: &str,
        destination: &str,
        objects: &[Value],
    ) {
        let targets = objects
            .iter()
            .map(|o| {
                let namespace = o
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(destination)
                    .to_owned();
                tracked(o, app, &namespace)
            })
            .collect();
        lock(&self.0)
            .entry((app_namespace.to_owned(), app.to_owned()))
            .or_default()
            .push(Rendered {
                revision: revision.to_owned(),
                objects: targets,
            });
    }

    /// The newest revision.
    pub fn head(&self, app_namespace: &str, app: &str) -> Option<Rendered> {
        lock(&self.0)
            .get(&(app_namespace.to_owned(), app.to_owned()))?
            .last()
            .cloned()
    }

    /// A given revision.
    pub fn at(&self, app_namespace: &str, app: &str, revision: &str) -> Option<Rendered> {
        lock(&self.0)
            .get(&(app_namespace.to_owned(), app.to_owned()))?
            .iter()
            .rev()
            .find(|r| r.revision == revision)
            .cloned()
    }
}

/// `object` in `namespace`, with Argo CD's tracking annotation for Application `app`
/// (`<app>:<group>/<kind>:<namespace>/<name>`); an object already tracked keeps its value.
pub fn tracked(object: &Value, app: &str, namespace: &str) -> Value {
    let mut o = object.clone();
    let group = split_api_version(o["apiVersion"].as_str().unwrap_or_default())
        .0
        .to_owned();
    let kind = o["kind"].as_str().unwrap_or_default().to_owned();
    let name = o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    o["metadata"]["namespace"] = json!(namespace);
    if !o["metadata"]["annotations"].is_object() {
        o["metadata"]["annotations"] = json!({});
    }
    let annotations = &mut o["metadata"]["annotations"];
    if annotations.get("argocd.argoproj.io/tracking-id").is_none() {
        annotations["argocd.argoproj.io/tracking-id"] =
            json!(format!("{app}:{group}/{kind}:{namespace}/{name}"));
    }
    o
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

/// A StatefulSet `name` in `namespace` whose claims request `size` (class `expandable`).
pub fn statefulset(namespace: &str, name: &str, size: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "serviceName": name, "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "app", "image": "busybox",
                                  "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                         "resources": {"requests": {"storage": size}}}}],
        },
    })
}

// ------------------------------------------------------------------------------ API server

/// A request the API server stand-in saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub path_and_query: String,
    pub authorized: bool,
}

struct ServerState {
    token: String,
    repo: Repo,
    seen: Mutex<Vec<Seen>>,
    /// Raw bodies answered instead of the repo's targets, by Application.
    answers: Mutex<HashMap<(String, String), String>>,
}

/// Argo CD's API server's managed-resources endpoint, over HTTPS; stopped when dropped.
pub struct ArgoCdServer {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The test CA's certificate (PEM), what `--argocd-ca-file` names.
    pub ca_file: PathBuf,
    pub repo: Repo,
    state: Arc<ServerState>,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ArgoCdServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ArgoCdServer {
    /// Serves on a loopback port, accepting `token` only, with its own [`Repo`].
    pub async fn start(token: &str) -> std::io::Result<Self> {
        Self::start_with(token, Repo::default()).await
    }

    /// Serves the targets of `repo` (the controller stand-in's).
    pub async fn start_with(token: &str, repo: Repo) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let dir = tempfile::tempdir()?;
        let (acceptor, ca_pem) = test_ca()?;
        let ca_file = dir.path().join("argocd-ca.crt");
        std::fs::write(&ca_file, ca_pem)?;
        let state = Arc::new(ServerState {
            token: token.to_owned(),
            repo: repo.clone(),
            seen: Mutex::new(Vec::new()),
            answers: Mutex::new(HashMap::new()),
        });
        let router = axum::Router::new()
            .route(
                "/api/v1/applications/{name}/managed-resources",
                axum::routing::get(managed_resources),
            )
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let router = router.clone();
                connections.spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(router);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(ArgoCdServer {
            url: format!("https://{addr}"),
            ca_file,
            repo,
            state,
            _dir: dir,
            task,
        })
    }

    /// Serves `targets` (already tracked, namespaced) as the Application's current ones.
    pub fn set_targets(&self, app_namespace: &str, app: &str, targets: Vec<Value>) {
        lock(&self.repo.0)
            .entry((app_namespace.to_owned(), app.to_owned()))
            .or_default()
            .push(Rendered {
                revision: "0".repeat(40),
                objects: targets,
            });
    }

    /// Answers `body` as is (a malformed answer) for the Application's managed resources.
    pub fn set_answer(&self, app_namespace: &str, app: &str, body: &str) {
        lock(&self.state.answers)
            .insert((app_namespace.to_owned(), app.to_owned()), body.to_owned());
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<Seen> {
        lock(&self.state.seen).clone()
    }
}

/// A CA made for this server, and a certificate for `127.0.0.1`/`localhost` it signed: the
/// acceptor, and the CA's PEM.
fn test_ca() -> std::io::Result<(tokio_rustls::TlsAcceptor, String)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    fn io(e: impl std::error::Error + Send + Sync + 'static) -> std::io::Error {
        std::io::Error::other(e)
    }
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(io)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "argocd stand-in test CA");
    let ca_key = KeyPair::generate().map_err(io)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(io)?;
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).map_err(io)?;
    leaf.use_authority_key_identifier_extension = true;
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_key = KeyPair::generate().map_err(io)?;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).map_err(io)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io)?
        .with_no_client_auth()
        .with_single_cert(vec![leaf_cert.der().clone()], key)
        .map_err(io)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        ca_cert.pem(),
    ))
}

fn grpc_error(status: http::StatusCode, code: u8, message: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        json!({"error": message, "code": code, "message": message}).to_string(),
    )
        .into_response()
}

async fn managed_resources(
    axum::extract::State(state): axum::extract::State<Arc<ServerState>>,
    axum::extract::Path(name): axum::extract::Path<String>,
    axum::extract::Query(query): axum::extract::Query<HashMap<String, String>>,
    headers: http::HeaderMap,
    uri: http::Uri,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let expected = format!("Bearer {}", state.token);
    let authorized = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(expected.as_str());
    lock(&state.seen).push(Seen {
        path_and_query: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        authorized,
    });
    if !authorized {
        // What Argo CD answers a token it cannot verify (codes.Unauthenticated).
        return grpc_error(
            http::StatusCode::UNAUTHORIZED,
            16,
            "invalid session: token signature is invalid",
        );
    }
    let app_namespace = query
        .get("appNamespace")
        .filter(|n| !n.is_empty())
        .cloned()
        .unwrap_or_else(|| "argocd".to_owned());
    if let Some(body) = lock(&state.answers)
        .get(&(app_namespace.clone(), name.clone()))
        .cloned()
    {
        return ([(http::header::CONTENT_TYPE, "application/json")], body).into_response();
    }
    let Some(rendered) = state.repo.head(&app_namespace, &name) else {
        // Argo CD does not tell a missing Application from a forbidden one.
        return grpc_error(http::StatusCode::FORBIDDEN, 7, "permission denied");
    };
    let items: Vec<Value> = rendered
        .objects
        .iter()
        .map(|o| {
            let (group, version) = split_api_version(o["apiVersion"].as_str().unwrap_or_default());
            json!({"group": group, "version": version, "kind": o["kind"],
                   "namespace": o["metadata"]["namespace"], "name": o["metadata"]["name"],
                   "targetState": o.to_string(), "liveState": "null",
                   "normalizedLiveState": "null", "predictedLiveState": "null",
                   "resourceVersion": "", "modified": true})
        })
        .collect();
    (
        [(http::header::CONTENT_TYPE, "application/json")],
        json!({"items": items}).to_string(),
    )
        .into_response()
}

// ---------------------------------------------------------------------- application-controller

/// How the controller stand-in runs.
#[derive(Clone, Debug)]
pub struct ArgoCdOptions {
    /// The namespace whose Applications it reconciles.
    pub namespace: String,
    /// The wait before each retry of a failed sync (Argo CD's backoff, shortened).
    pub retry_backoff: Duration,
    /// How often it looks again without a change (retries come due on this tick).
    pub tick: Duration,
}

impl Default for ArgoCdOptions {
    fn default() -> Self {
        ArgoCdOptions {
            namespace: "argocd".into(),
            retry_backoff: Duration::from_millis(50),
            tick: Duration::from_millis(25),
        }
    }
}

/// One `status.operationState` the controller wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct StateWritten {
    pub app: String,
    pub phase: String,
    pub message: String,
    pub retry_count: i64,
    /// `.operation` cleared with it (the operation completed).
    pub completed: bool,
}

/// A running application-controller stand-in; stopped when dropped.
pub struct ArgoCdController {
    log: Arc<Mutex<Vec<StateWritten>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ArgoCdController {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ArgoCdController {
    pub fn start(client: kube::Client, repo: Repo, options: ArgoCdOptions) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(run(client, repo, options, log.clone()));
        ArgoCdController { log, task }
    }

    /// Every operation state written so far, oldest first (with one being written: a test
    /// that has seen it on the Application finds it here).
    pub fn states(&self) -> Vec<StateWritten> {
        lock(&self.log).clone()
    }
}

async fn run(
    client: kube::Client,
    repo: Repo,
    options: ArgoCdOptions,
    log: Arc<Mutex<Vec<StateWritten>>>,
) {
    let apps: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &options.namespace, &application_resource());
    let changes = watcher(apps.clone(), watcher::Config::default())
        .default_backoff()
        .map(|_| ());
    let mut changes = std::pin::pin!(changes);
    let mut controller = Controller {
        client,
        apps,
        repo,
        options,
        log,
        resources: HashMap::new(),
        files: 0,
    };
    loop {
        if let Ok(list) = controller.apps.list(&Default::default()).await {
            for app in list.items {
                let Ok(app) = serde_json::to_value(&app) else {
                    continue;
                };
                if let Err(error) = controller.reconcile(&app).await {
                    tracing::debug!(%error, "application-controller stand-in");
                }
            }
        }
        tokio::select! {
            next = changes.next() => if next.is_none() { return },
            _ = tokio::time::sleep(controller.options.tick) => {}
        }
    }
}

struct Controller {
    client: kube::Client,
    apps: Api<DynamicObject>,
    repo: Repo,
    options: ArgoCdOptions,
    log: Arc<Mutex<Vec<StateWritten>>>,
    resources: HashMap<(String, String), ApiResource>,
    /// kubectl's temporary file names (`/dev/shm/<n>`).
    files: u64,
}

/// A comparison's result.
struct Compared {
    status: &'static str,
    resources: Vec<Value>,
    error: Option<String>,
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn server_side_diff(app: &Value) -> bool {
    str_at(
        app,
        "/metadata/annotations/argocd.argoproj.io~1compare-options",
    )
    .split(',')
    .any(|o| o.trim() == "ServerSideDiff=true")
}

/// Every field of `want` is in `have` with the same value (lists element by element).
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| contains(hv, v))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(a, b)| contains(a, b))
        }
        (h, w) => h == w,
    }
}

fn comparable(object: &Value) -> Value {
    let mut o = json!({"spec": object.get("spec").cloned().unwrap_or(Value::Null),
                       "data": object.get("data").cloned().unwrap_or(Value::Null),
                       "labels": object.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
                       "annotations": object.pointer("/metadata/annotations").cloned().unwrap_or(json!({}))});
    if let Some(a) = o["annotations"].as_object_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    if o["data"].is_null() {
        o.as_object_mut().map(|m| m.remove("data"));
    }
    if o["spec"].is_null() {
        o.as_object_mut().map(|m| m.remove("spec"));
    }
    o
}

fn object_key(o: &Value) -> (String, String, String, String) {
    let (group, _) = split_api_version(str_at(o, "/apiVersion"));
    (
        group.to_owned(),
        str_at(o, "/kind").to_owned(),
        str_at(o, "/metadata/namespace").to_owned(),
        str_at(o, "/metadata/name").to_owned(),
    )
}

fn resource_entry(o: &Value, status: &str) -> Value {
    let (group, version) = split_api_version(str_at(o, "/apiVersion"));
    let mut e = json!({"version": version, "kind": o["kind"], "namespace": o["metadata"]["namespace"],
                       "name": o["metadata"]["name"], "status": status});
    if !group.is_empty() {
        e["group"] = json!(group);
    }
    e
}

impl Controller {
    async fn api_for(&mut self, object: &Value) -> Result<Api<DynamicObject>, String> {
        let api_version = str_at(object, "/apiVersion").to_owned();
        let kind = str_at(object, "/kind").to_owned();
        let key = (api_version.clone(), kind.clone());
        if !self.resources.contains_key(&key) {
            let (group, version) = split_api_version(&api_version);
            let (resource, _) = kube::discovery::pinned_kind(
                &self.client,
                &GroupVersionKind::gvk(group, version, &kind),
            )
            .await
            .map_err(|e| e.to_string())?;
            self.resources.insert(key.clone(), resource);
        }
        Ok(Api::namespaced_with(
            self.client.clone(),
            str_at(object, "/metadata/namespace"),
            &self.resources[&key],
        ))
    }

    async fn reconcile(&mut self, app: &Value) -> Result<(), String> {
        let namespace = str_at(app, "/metadata/namespace").to_owned();
        let name = str_at(app, "/metadata/name").to_owned();
        let Some(head) = self.repo.head(&namespace, &name) else {
            return Ok(());
        };
        if app.get("operation").is_some_and(|o| !o.is_null()) {
            return self.operate(app, &head).await;
        }
        let compared = self.compare(app, &head).await;
        self.write_comparison(app, &head, &compared).await?;
        // Auto-sync: an OutOfSync application, unless this revision's sync already failed (then
        // only a new revision or an explicit operation syncs).
        let automated = app
            .pointer("/spec/syncPolicy/automated")
            .is_some_and(|a| a.is_object() && a["enabled"] != json!(false));
        let state = app.pointer("/status/operationState");
        let attempted = state.is_some_and(|s| {
            str_at(s, "/operation/sync/revision") == head.revision
                && str_at(s, "/phase") != "Succeeded"
        });
        if automated && compared.status == "OutOfSync" && !attempted {
            let retry = app
                .pointer("/spec/syncPolicy/retry")
                .cloned()
                .unwrap_or(json!({"limit": 5}));
            let mut sync = json!({"revision": head.revision, "prune": app.pointer("/spec/syncPolicy/automated/prune").cloned().unwrap_or(json!(false))});
            if let Some(options) = app.pointer("/spec/syncPolicy/syncOptions") {
                sync["syncOptions"] = options.clone();
            }
            let patch = json!({"metadata": {"resourceVersion": app["metadata"]["resourceVersion"]},
                "operation": {"sync": sync, "initiatedBy": {"automated": true}, "retry": retry}});
            self.apps
                .patch(&name, &self.params(), &Patch::Merge(&patch))
                .await
                .map_err(|e| format!("starting the auto-sync of {name}: {e}"))?;
        }
        Ok(())
    }

    fn params(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(CONTROLLER_MANAGER.to_owned()),
            ..Default::default()
        }
    }

    /// The live state against the targets; under server-side diff, each existing object's
    /// server-side apply dry run, stopping at the first refusal.
    async fn compare(&mut self, app: &Value, head: &Rendered) -> Compared {
        let ssd = server_side_diff(app);
        let mut statuses = Vec::new();
        for target in &head.objects {
            let api = match self.api_for(target).await {
                Ok(api) => api,
                Err(e) => {
                    return Compared {
                        status: "Unknown",
                        resources: vec![],
                        error: Some(e),
                    };
                }
            };
            let name = str_at(target, "/metadata/name");
            let live = api.get_opt(name).await.ok().flatten();
            let Some(live) = live.and_then(|l| serde_json::to_value(l).ok()) else {
                statuses.push("OutOfSync");
                continue;
            };
            let compared_to = if ssd {
                let mut params = PatchParams::apply(ARGOCD_MANAGER).force();
                params.dry_run = true;
                match api.patch(name, &params, &Patch::Apply(target)).await {
                    Ok(predicted) => serde_json::to_value(predicted).unwrap_or(Value::Null),
                    Err(e) => {
                        let message = match &e {
                            kube::Error::Api(s) => s.message.clone(),
                            other => other.to_string(),
                        };
                        let error = format!(
                            "Failed to compare desired state to live state: failed to calculate diff: error calculating server side diff: serverSideDiff error: error running server side apply in dryrun mode for resource {}/{}: {message}",
                            str_at(target, "/kind"),
                            name
                        );
                        return Compared {
                            status: "Unknown",
                            resources: head
                                .objects
                                .iter()
                                .map(|o| resource_entry(o, "Unknown"))
                                .collect(),
                            error: Some(error),
                        };
                    }
                }
            } else {
                target.clone()
            };
            let synced = contains(&comparable(&live), &comparable(&compared_to));
            statuses.push(if synced { "Synced" } else { "OutOfSync" });
        }
        Compared {
            status: if statuses.iter().all(|s| *s == "Synced") {
                "Synced"
            } else {
                "OutOfSync"
            },
            resources: head
                .objects
                .iter()
                .zip(&statuses)
                .map(|(o, s)| resource_entry(o, s))
                .collect(),
            error: None,
        }
    }

    /// Writes `status.sync`, `status.resources` and the `ComparisonError` condition when they
    /// changed, and removes a handled refresh annotation.
    async fn write_comparison(
        &mut self,
        app: &Value,
        head: &Rendered,
        compared: &Compared,
    ) -> Result<(), String> {
        let name = str_at(app, "/metadata/name");
        let status = app.get("status").cloned().unwrap_or(json!({}));
        let mut conditions: Vec<Value> = status["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c["type"] != "ComparisonError")
            .collect();
        if let Some(error) = &compared.error {
            let kept = status["conditions"]
                .as_array()
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c["type"] == "ComparisonError" && c["message"] == json!(error))
                })
                .cloned();
            conditions.push(kept.unwrap_or_else(|| {
                json!({"type": "ComparisonError", "message": error, "lastTransitionTime": now()})
            }));
        }
        let sync = json!({"status": compared.status, "revision": head.revision});
        let refresh = app
            .pointer("/metadata/annotations/argocd.argoproj.io~1refresh")
            .is_some();
        let unchanged = status["sync"]["status"] == sync["status"]
            && status["sync"]["revision"] == sync["revision"]
            && status["resources"] == json!(compared.resources)
            && status["conditions"].as_array().cloned().unwrap_or_default() == conditions;
        if unchanged && !refresh {
            return Ok(());
        }
        let mut patch = json!({"status": {"sync": sync, "resources": compared.resources,
            "conditions": if conditions.is_empty() { Value::Null } else { json!(conditions) },
            "reconciledAt": now()}});
        if refresh {
            patch["metadata"] = json!({"annotations": {"argocd.argoproj.io/refresh": null}});
        }
        self.apps
            .patch(name, &self.params(), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("status of {name}: {e}"))?;
        Ok(())
    }

    /// Runs (or resumes) the operation, as `processRequestedAppOperation` does.
    async fn operate(&mut self, app: &Value, head: &Rendered) -> Result<(), String> {
        let name = str_at(app, "/metadata/name").to_owned();
        let operation = app["operation"].clone();
        let previous = app.pointer("/status/operationState").cloned();
        let in_progress = previous
            .as_ref()
            .is_some_and(|s| !matches!(str_at(s, "/phase"), "Failed" | "Error" | "Succeeded"));
        let mut state = if in_progress {
            let mut state = previous.unwrap_or_default();
            if str_at(&state, "/phase") == "Running" && state.get("finishedAt").is_some() {
                // A failed attempt waiting for its retry.
                let waited = jiff::Timestamp::now()
                    .since(
                        str_at(&state, "/finishedAt")
                            .parse::<jiff::Timestamp>()
                            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
                    )
                    .ok()
                    .and_then(|span| span.total(jiff::Unit::Millisecond).ok())
                    .unwrap_or(0.0);
                if waited < self.options.retry_backoff.as_millis() as f64 {
                    return Ok(());
                }
                let count = state["retryCount"].as_i64().unwrap_or(0);
                state["message"] = json!(format!("Retrying operation. Attempt #{count}"));
                let m = state.as_object_mut().ok_or("operationState")?;
                m.remove("finishedAt");
                m.remove("syncResult");
                self.write_state(&name, &state, false, None).await?;
            }
            state
        } else {
            let state = json!({"operation": operation, "phase": "Running", "startedAt": now()});
            self.write_state(&name, &state, false, None).await?;
            state
        };

        let revision = match str_at(&operation, "/sync/revision") {
            "" => head.revision.clone(),
            r => r.to_owned(),
        };
        let rendered = self
            .repo
            .at(str_at(app, "/metadata/namespace"), &name, &revision)
            .unwrap_or_else(|| head.clone());
        let options: Vec<String> = operation
            .pointer("/sync/syncOptions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|o| o.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();

        // Under server-side diff a comparison error fails the operation before any apply.
        let comparison = if server_side_diff(app) {
            self.compare(app, &rendered).await.error
        } else {
            None
        };
        let (mut phase, mut message, results) = match comparison {
            Some(error) => (
                "Error".to_owned(),
                format!("ComparisonError: {error}"),
                vec![],
            ),
            None => {
                let mut results = Vec::new();
                let mut failed = Vec::new();
                for target in &rendered.objects {
                    let (ok, text) = self.apply(target, &options).await;
                    let mut entry =
                        resource_entry(target, if ok { "Synced" } else { "SyncFailed" });
                    entry["message"] = json!(text);
                    entry["hookPhase"] = json!(if ok { "Running" } else { "Failed" });
                    entry["syncPhase"] = json!("Sync");
                    if entry.get("group").is_none() {
                        entry["group"] = json!("");
                    }
                    if !ok {
                        failed.push(text);
                    }
                    results.push(entry);
                }
                if failed.is_empty() {
                    (
                        "Succeeded".to_owned(),
                        "successfully synced (all tasks run)".to_owned(),
                        results,
                    )
                } else {
                    (
                        "Failed".to_owned(),
                        format!(
                            "one or more objects failed to apply, reason: {}",
                            failed.join(",")
                        ),
                        results,
                    )
                }
            }
        };
        state["syncResult"] = json!({"resources": results, "revision": rendered.revision});
        let retry_count = state["retryCount"].as_i64().unwrap_or(0);
        let limit = operation
            .pointer("/retry/limit")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let mut completed = true;
        if phase != "Succeeded" {
            if retry_count < limit || limit < 0 {
                let at = jiff::Timestamp::now()
                    .checked_add(
                        jiff::SignedDuration::try_from(self.options.retry_backoff)
                            .unwrap_or_default(),
                    )
                    .unwrap_or_else(|_| jiff::Timestamp::now())
                    .to_zoned(jiff::tz::TimeZone::UTC);
                phase = "Running".to_owned();
                state["retryCount"] = json!(retry_count + 1);
                message = format!(
                    "{message}. Retrying attempt #{} at {}.",
                    retry_count + 1,
                    at.strftime("%-I:%M%p")
                );
                completed = false;
            } else if retry_count > 0 {
                message = format!("{message} (retried {retry_count} times).");
            }
        }
        state["phase"] = json!(phase);
        state["message"] = json!(message);
        state["finishedAt"] = json!(now());
        let sync_error = (completed
            && phase != "Succeeded"
            && operation.pointer("/initiatedBy/automated") == Some(&json!(true)))
        .then(|| {
            format!(
                "Failed last sync attempt to [{}]: {message}",
                rendered.revision
            )
        });
        self.write_state(&name, &state, completed, sync_error.as_deref())
            .await
    }

    /// Writes the operation state as `setOperationState` does: a JSON patch replacing
    /// `/status/operationState`, and `/operation` set to null once completed. A completed
    /// automated failure leaves the `SyncError` condition; a success clears it.
    async fn write_state(
        &mut self,
        name: &str,
        state: &Value,
        completed: bool,
        sync_error: Option<&str>,
    ) -> Result<(), String> {
        let current = self
            .apps
            .get(name)
            .await
            .map_err(|e| format!("reading {name}: {e}"))?;
        let current = serde_json::to_value(current).map_err(|e| e.to_string())?;
        let mut ops = vec![];
        if current.get("status").is_none_or(Value::is_null) {
            ops.push(json!({"op": "add", "path": "/status", "value": {}}));
        }
        ops.push(json!({"op": "add", "path": "/status/operationState", "value": state}));
        if completed {
            ops.push(json!({"op": "add", "path": "/operation", "value": null}));
            let mut conditions: Vec<Value> = current
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|c| c["type"] != "SyncError")
                .collect();
            if let Some(message) = sync_error {
                conditions.push(
                    json!({"type": "SyncError", "message": message, "lastTransitionTime": now()}),
                );
            }
            ops.push(json!({"op": "add", "path": "/status/conditions", "value": conditions}));
        }
        let patch: json_patch::Patch =
            serde_json::from_value(json!(ops)).map_err(|e| e.to_string())?;
        // Logged before the write is visible, so a test that sees the state on the
        // Application finds it in `states()`; taken back if the write fails.
        let written = StateWritten {
            app: name.to_owned(),
            phase: str_at(state, "/phase").to_owned(),
            message: str_at(state, "/message").to_owned(),
            retry_count: state["retryCount"].as_i64().unwrap_or(0),
            completed,
        };
        lock(&self.log).push(written.clone());
        let answer = self
            .apps
            .patch(name, &self.params(), &Patch::<()>::Json(patch))
            .await;
        if let Err(e) = answer {
            let mut log = lock(&self.log);
            if let Some(at) = log.iter().rposition(|w| *w == written) {
                log.remove(at);
            }
            return Err(format!("operation state of {name}: {e}"));
        }
        Ok(())
    }

    /// Applies one target as Argo CD would in its mode: `(ok, message)` as the sync result
    /// records it.
    async fn apply(&mut self, target: &Value, options: &[String]) -> (bool, String) {
        let api = match self.api_for(target).await {
            Ok(api) => api,
            Err(e) => return (false, e),
        };
        let name = str_at(target, "/metadata/name").to_owned();
        let group = object_key(target).0;
        let kind = str_at(target, "/kind").to_lowercase();
        let shown = if group.is_empty() {
            format!("{kind}/{name}")
        } else {
            format!("{kind}.{group}/{name}")
        };
        let csv = str_at(
            target,
            "/metadata/annotations/argocd.argoproj.io~1sync-options",
        );
        let object_options: Vec<&str> = csv.split(',').map(str::trim).collect();
        let server_side = !object_options.contains(&"ServerSideApply=false")
            && (options.iter().any(|o| o == "ServerSideApply=true")
                || object_options.contains(&"ServerSideApply=true"));
        let api_message = |e: kube::Error| match e {
            kube::Error::Api(s) => s.message,
            other => other.to_string(),
        };
        if server_side {
            let params = PatchParams::apply(ARGOCD_MANAGER).force();
            return match api.patch(&name, &params, &Patch::Apply(target)).await {
                Ok(_) => (true, format!("{shown} serverside-applied")),
                Err(e) => (false, api_message(e)),
            };
        }
        // Client-side apply: kubectl, through a temporary file.
        self.files += 1;
        let file = format!("/dev/shm/{}", 1_284_611_951 + self.files);
        let body = with_last_applied(target);
        match api.get_opt(&name).await {
            Ok(None) => {
                let params = PostParams {
                    field_manager: Some(ARGOCD_MANAGER.to_owned()),
                    ..Default::default()
                };
                match serde_json::from_value::<DynamicObject>(body) {
                    Ok(object) => match api.create(&params, &object).await {
                        Ok(_) => (true, format!("{shown} created")),
                        Err(e) => (
                            false,
                            format!("error when creating \"{file}\": {}", api_message(e)),
                        ),
                    },
                    Err(e) => (false, e.to_string()),
                }
            }
            Ok(Some(_)) => {
                let params = PatchParams {
                    field_manager: Some(ARGOCD_MANAGER.to_owned()),
                    ..Default::default()
                };
                match api.patch(&name, &params, &Patch::Strategic(&body)).await {
                    Ok(_) => (true, format!("{shown} configured")),
                    Err(e) => (
                        false,
                        format!("error when patching \"{file}\": {}", api_message(e)),
                    ),
                }
            }
            Err(e) => (false, api_message(e)),
        }
    }
}
