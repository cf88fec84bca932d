//! Stand-ins for the three Flux controllers the converger lives next to, for the service's
//! end-to-end tests, the demo and the queue-fairness example.
//!
//! They talk to the API server only through a `kube::Client` (the in-repo fake, in process or
//! served), so what they write goes through the same admission, status subresource and watch
//! paths as what the real controllers write:
//! - [`GitSource`] plays source-controller: a revision history of file trees, each published
//!   as a tar.gz in Flux's layout on a local artifact server, then announced in the
//!   GitRepository's `status.artifact` and `Ready` condition.
//! - [`KustomizeController`] plays kustomize-controller: reconciles a Kustomization when it is
//!   unsuspended, its spec changed, its source (a GitRepository or an ExternalArtifact, as
//!   with `--feature-gates=ExternalArtifact=true`) moved or `reconcile.fluxcd.io/requestedAt`
//!   changed; fetches the source's `status.artifact.url` and verifies its digest; renders with the crate's own `flux::render`, dry-runs then server-side applies
//!   each stage as `kustomize-controller`, and reports in `status` with Flux's wording.
//! - [`post_event`] plays notification-controller's `generic-hmac` provider.
//!
//! What they leave out: health checks, pruning and inventory, impersonation of
//! `spec.serviceAccountName`, `dependsOn`, intervals other than the retry of a failed revision.

pub use crate::flux_archive;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flux_converger::flux::event::{Event, InvolvedObject};
use flux_converger::flux::render::resolve::{ResolveError, Resolver};
use futures::StreamExt;
use hmac::{Hmac, Mac};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use sha1::Digest as _;

pub use flux_archive::ArtifactServer;

/// The field manager kustomize-controller applies with.
pub const KUSTOMIZE_MANAGER: &str = "kustomize-controller";
/// The field manager source-controller writes its status with.
pub const SOURCE_MANAGER: &str = "source-controller";
pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

#[derive(Debug, thiserror::Error)]
pub enum StandinError {
    #[error("{action}: {error}")]
    Kube {
        action: String,
        #[source]
        error: kube::Error,
    },
    #[error("posting the event to {url}: {error}")]
    Http {
        url: String,
        #[source]
        error: reqwest::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> StandinError {
    let action = action.into();
    move |error| StandinError::Kube { action, error }
}

/// RFC 3339 with seconds, as Flux writes times.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn flux_api(kind: &str, plural: &str, group: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural)
}

pub fn kustomization_resource() -> ApiResource {
    flux_api(
        "Kustomization",
        "kustomizations",
        "kustomize.toolkit.fluxcd.io",
    )
}

pub fn git_repository_resource() -> ApiResource {
    flux_api(
        "GitRepository",
        "gitrepositories",
        "source.toolkit.fluxcd.io",
    )
}

pub fn external_artifact_resource() -> ApiResource {
    flux_api(
        "ExternalArtifact",
        "externalartifacts",
        "source.toolkit.fluxcd.io",
    )
}

/// The source kinds a Kustomization may reference, by kind.
fn source_resource(kind: &str) -> Option<ApiResource> {
    let plural = match kind {
        "GitRepository" => "gitrepositories",
        "OCIRepository" => "ocirepositories",
        "Bucket" => "buckets",
        "ExternalArtifact" => "externalartifacts",
        _ => return None,
    };
    Some(flux_api(kind, plural, "source.toolkit.fluxcd.io"))
}

fn condition(kind: &str, status: &str, reason: &str, message: &str, generation: i64) -> Value {
    json!({
        "type": kind, "status": status, "reason": reason, "message": message,
        "observedGeneration": generation, "lastTransitionTime": now_rfc3339(),
    })
}

// ---------------------------------------------------------------- source-controller

/// One published revision of a [`GitSource`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// 1 for the first publish.
    pub number: usize,
    /// `main@sha1:<40 hex>`.
    pub revision: String,
    /// The commit's 40 hex digits.
    pub commit: String,
    pub message: String,
    /// `sha256:<hex>` of the archive.
    pub digest: String,
    pub url: String,
    /// `gitrepository/<ns>/<name>/<commit>.tar.gz`.
    pub path: String,
    pub size: u64,
}

/// source-controller for one GitRepository, whose "git history" is the trees given to
/// [`GitSource::publish`]. Old artifacts stay served (no garbage collection), so a test can
/// fetch a superseded revision on purpose.
pub struct GitSource {
    pub client: kube::Client,
    pub server: ArtifactServer,
    pub namespace: String,
    pub name: String,
    pub branch: String,
    history: Mutex<Vec<Published>>,
}

impl GitSource {
    /// Creates (server-side applies) the GitRepository `namespace/name`, with no artifact yet,
    /// served from `server`.
    pub async fn create(
        client: kube::Client,
        server: ArtifactServer,
        namespace: &str,
        name: &str,
    ) -> Result<Self, StandinError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &git_repository_resource());
        let object = json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"interval": "1m", "url": format!("https://git.example.com/{namespace}/{name}.git"),
                     "ref": {"branch": "main"}},
        });
        api.patch(
            name,
            &PatchParams::apply("flux").force(),
            &Patch::Apply(&object),
        )
        .await
        .map_err(kube_err(format!(
            "creating GitRepository {namespace}/{name}"
        )))?;
        Ok(Self {
            client,
            server,
            namespace: namespace.to_string(),
            name: name.to_string(),
            branch: "main".to_string(),
            history: Mutex::new(Vec::new()),
        })
    }

    /// Commits `files` (path → content) with `message`, stores the artifact and announces it in
    /// the GitRepository's status, as source-controller does after a fetch.
    pub async fn publish(
        &self,
        message: &str,
        files: &[(&str, &str)],
    ) -> Result<Published, StandinError> {
        let archive = flux_archive::flux_artifact(files);
        let digest = flux_archive::sha256(&archive);
        let (number, parent) = {
            let history = self.history.lock().unwrap_or_else(|e| e.into_inner());
            (
                history.len() + 1,
                history.last().map(|p| p.commit.clone()).unwrap_or_default(),
            )
        };
        let commit = commit_id(&parent, &digest, message);
        let path = format!(
            "gitrepository/{}/{}/{commit}.tar.gz",
            self.namespace, self.name
        );
        let size = archive.len() as u64;
        let url = self.server.put(&path, archive);
        let published = Published {
            number,
            revision: format!("{}@sha1:{commit}", self.branch),
            commit,
            message: message.to_string(),
            digest,
            url,
            path,
            size,
        };
        self.announce(&published).await?;
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(published.clone());
        Ok(published)
    }

    async fn announce(&self, p: &Published) -> Result<(), StandinError> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &git_repository_resource(),
        );
        let current = api.get(&self.name).await.map_err(kube_err(format!(
            "reading GitRepository {}/{}",
            self.namespace, self.name
        )))?;
        let generation = current.metadata.generation.unwrap_or(1);
        let stored = format!("stored artifact for revision '{}'", p.revision);
        let status = json!({"status": {
            "observedGeneration": generation,
            "artifact": {
                "url": p.url, "revision": p.revision, "digest": p.digest, "path": p.path,
                "size": p.size, "lastUpdateTime": now_rfc3339(),
            },
            "conditions": [
                condition("Ready", "True", "Succeeded", &stored, generation),
                condition("ArtifactInStorage", "True", "Succeeded", &stored, generation),
            ],
        }});
        api.patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(kube_err(format!(
                "publishing {} in GitRepository {}/{}",
                p.revision, self.namespace, self.name
            )))?;
        Ok(())
    }

    pub fn history(&self) -> Vec<Published> {
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The `NewArtifact` event source-controller emits for `published`.
    pub async fn new_artifact_event(&self, published: &Published) -> Result<Event, StandinError> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &git_repository_resource(),
        );
        let current = api.get(&self.name).await.map_err(kube_err(format!(
            "reading GitRepository {}/{}",
            self.namespace, self.name
        )))?;
        Ok(new_artifact_event(
            &InvolvedObject {
                kind: "GitRepository".into(),
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                uid: current.metadata.uid.clone(),
                api_version: Some("source.toolkit.fluxcd.io/v1".into()),
                resource_version: current.metadata.resource_version.clone(),
            },
            &published.revision,
            &published.message,
        ))
    }
}

/// A commit id: sha1 over the parent, the tree (the archive's digest) and the message, so
/// the same tree committed twice gets two revisions, as in git.
pub fn commit_id(parent: &str, tree_digest: &str, message: &str) -> String {
    let mut h = sha1::Sha1::new();
    h.update(format!("tree {tree_digest}\nparent {parent}\n\n{message}\n").as_bytes());
    hex::encode(h.finalize())
}

// ---------------------------------------------------------------- notification-controller

/// source-controller's `NewArtifact` event for a Git revision, as the webhook receives it
/// (metadata keys already stripped of their API group; no digest: Flux never forwards it).
pub fn new_artifact_event(object: &InvolvedObject, revision: &str, commit_message: &str) -> Event {
    let commit = revision.rsplit(':').next().unwrap_or(revision);
    Event {
        involved_object: object.clone(),
        severity: "info".into(),
        timestamp: Some(now_rfc3339()),
        message: format!(
            "stored artifact for commit '{}'",
            commit_message.lines().next().unwrap_or_default()
        ),
        reason: "NewArtifact".into(),
        metadata: BTreeMap::from([("revision".to_string(), revision.to_string())]),
        reporting_controller: "source-controller".into(),
        reporting_instance: Some(format!(
            "source-controller-{}",
            &commit[..commit.len().min(10)]
        )),
    }
}

/// `sha256=<lowercase hex HMAC-SHA256(key, body)>`, the `X-Signature` of `generic-hmac`.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes keys of any size");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// What the receiving end answered.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub status: u16,
    pub body: String,
    /// Attempts made (retries on connection errors, 429 and 5xx, as notification-controller).
    pub attempts: u32,
}

/// Posts `event` as notification-controller's `generic-hmac` provider does: JSON body,
/// `Gotk-Component`, `X-Signature` over the exact bytes sent; up to 4 retries on connection
/// errors, 429 and 5xx with a short backoff.
pub async fn post_event(
    url: &str,
    hmac_key: &[u8],
    event: &Event,
) -> Result<Delivery, StandinError> {
    flux_converger::tls::install_crypto_provider();
    let body = serde_json::to_vec(event).map_err(|e| StandinError::Invalid(e.to_string()))?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .map_err(|error| StandinError::Http {
            url: url.to_string(),
            error,
        })?;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let sent = client
            .post(url)
            .header("Content-Type", "application/json")
            .header("Gotk-Component", event.reporting_controller.as_str())
            .header("User-Agent", "Go-http-client/1.1")
            .header("X-Signature", signature(hmac_key, &body))
            .body(body.clone())
            .send()
            .await;
        let retry = match &sent {
            Ok(r) => r.status().is_server_error() || r.status().as_u16() == 429,
            Err(e) => e.is_connect(),
        };
        if retry && attempts <= 4 {
            tokio::time::sleep(Duration::from_millis(100 * u64::from(attempts))).await;
            continue;
        }
        let response = sent.map_err(|error| StandinError::Http {
            url: url.to_string(),
            error,
        })?;
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        return Ok(Delivery {
            status,
            body,
            attempts,
        });
    }
}

// ---------------------------------------------------------------- kustomize-controller

/// Why the stand-in reconciles a Kustomization now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// `reconcile.fluxcd.io/requestedAt` differs from `status.lastHandledReconcileAt`.
    Requested,
    /// `metadata.generation` is ahead of `status.observedGeneration` (e.g. unsuspended).
    SpecChanged,
    /// The source publishes a revision not yet attempted.
    NewRevision,
    /// The last attempt failed and the retry interval has passed.
    Retry,
}

/// Whether kustomize-controller would reconcile `ks` now (pure: the object, the revision its
/// source publishes, whether the retry interval has passed since the last attempt).
pub fn should_reconcile(ks: &Value, source_revision: Option<&str>, retry_due: bool) -> Option<Why> {
    if ks.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let revision = source_revision?;
    let status = |field: &str| {
        ks.pointer(&format!("/status/{field}"))
            .and_then(Value::as_str)
    };
    let requested = ks
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(REQUESTED_AT))
        .and_then(Value::as_str);
    if requested.is_some() && requested != status("lastHandledReconcileAt") {
        return Some(Why::Requested);
    }
    let generation = ks.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = ks
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    if generation.is_some() && generation != observed {
        return Some(Why::SpecChanged);
    }
    if status("lastAttemptedRevision") != Some(revision) {
        return Some(Why::NewRevision);
    }
    if status("lastAppliedRevision") != Some(revision) && retry_due {
        return Some(Why::Retry);
    }
    None
}

/// kustomize-controller's stage of an object: cluster definitions first, then classes, then
/// the rest (each stage is dry-run entirely before any of it is applied).
pub fn stage_of(object: &Value) -> u8 {
    let kind = object["kind"].as_str().unwrap_or_default();
    match kind {
        "CustomResourceDefinition" | "Namespace" | "ClusterRole" | "ClusterRoleBinding" => 0,
        k if k.ends_with("Class") => 1,
        _ => 2,
    }
}

/// Flux's name for an object in messages: `Kind/namespace/name`, or `Kind/name`.
pub fn object_name(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) if !ns.is_empty() => format!("{kind}/{ns}/{name}"),
        _ => format!("{kind}/{name}"),
    }
}

/// One reconcile the stand-in finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconciled {
    pub namespace: String,
    pub name: String,
    pub revision: String,
    pub why: Why,
    /// `Ok` with the objects applied, or Flux's failure message.
    pub result: Result<Vec<String>, String>,
    /// RFC 3339 time the artifact was read (the attempt's start).
    pub at: String,
}

/// How the kustomize-controller stand-in departs from answering at once and applying.
#[derive(Clone, Default)]
pub struct Behaviour {
    /// How long after it decides to reconcile (e.g. on seeing the unsuspend) it reads the
    /// Kustomization again and then the artifact: kustomize-controller's queue latency, the
    /// window in which a gate must not let another revision through.
    pub read_delay: Duration,
    /// The next attempts to fail (with a `dependsOn`-style message), then apply again.
    pub fail_next: Arc<std::sync::atomic::AtomicUsize>,
}

/// The message of an attempt [`Behaviour::fail_next`] fails, as Flux words a dependency.
pub const DEPENDENCY_NOT_READY: &str = "dependency 'flux-system/infra' is not ready";

pub struct KustomizeOptions {
    /// Renders a Kustomization (the crate's `flux::render::resolve`).
    pub resolver: Resolver,
    /// Watch one namespace's Kustomizations, or all.
    pub namespace: Option<String>,
    /// A failed revision is attempted again after this long (Flux's `retryInterval`).
    pub retry_interval: Duration,
}

/// A running kustomize-controller stand-in; stopped when dropped.
pub struct KustomizeController {
    log: Arc<Log>,
    passes: Arc<Passes>,
    behaviour: Behaviour,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KustomizeController {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KustomizeController {
    pub fn start(client: kube::Client, options: KustomizeOptions) -> Self {
        Self::start_with(client, options, Behaviour::default())
    }

    /// [`KustomizeController::start`] with a [`Behaviour`].
    pub fn start_with(
        client: kube::Client,
        options: KustomizeOptions,
        behaviour: Behaviour,
    ) -> Self {
        let log = Arc::new(Log::default());
        let passes = Arc::new(Passes::default());
        let task = tokio::spawn(run(
            client,
            options,
            log.clone(),
            passes.clone(),
            behaviour.clone(),
        ));
        Self {
            log,
            passes,
            behaviour,
            task,
        }
    }

    /// Fails the next `n` attempts (Ready=False, [`DEPENDENCY_NOT_READY`]).
    pub fn fail_next(&self, n: usize) {
        self.behaviour
            .fail_next
            .store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// Every reconcile so far, oldest first: each applied (or failed) and its final status
    /// written or being written, so a test that has seen the status finds it here.
    pub fn reconciled(&self) -> Vec<Reconciled> {
        self.log.all()
    }

    /// Waits until a pass that started after this call has finished: every change made before
    /// the call has then been seen, and no pass that listed the Kustomizations earlier is
    /// still reconciling. A change must wake it (any write to a Kustomization or a source
    /// does), else this waits for the next retry pass.
    pub async fn settle(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        let mark = self.passes.started.load(SeqCst);
        while self.passes.finished.load(SeqCst) <= mark {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits (polling the log) until a reconcile matching `pred` has finished, its final
    /// status written (a test may read it next), or `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&Reconciled) -> bool,
    ) -> Option<Reconciled> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.log.finished().into_iter().find(|r| pred(r)) {
                return Some(r);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The stand-in's record of its reconciles. An attempt enters it before its final status is
/// written, so a test that sees the status finds the attempt ([`Log::all`]), and is marked
/// finished once the status is written, so a test that waited for the attempt
/// ([`Log::finished`]) then reads its status.
#[derive(Default)]
struct Log(Mutex<Vec<(Reconciled, bool)>>);

impl Log {
    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<(Reconciled, bool)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Logs an attempt about to write its final status; its place in the log.
    fn begin(&self, attempt: Reconciled) -> usize {
        let mut entries = self.entries();
        entries.push((attempt, false));
        entries.len() - 1
    }

    fn status_written(&self, at: usize) {
        if let Some(entry) = self.entries().get_mut(at) {
            entry.1 = true;
        }
    }

    fn all(&self) -> Vec<Reconciled> {
        self.entries().iter().map(|(r, _)| r.clone()).collect()
    }

    fn finished(&self) -> Vec<Reconciled> {
        self.entries()
            .iter()
            .filter(|(_, written)| *written)
            .map(|(r, _)| r.clone())
            .collect()
    }
}

/// The loop's passes, numbered from 1: the last one started and the last one finished.
#[derive(Default)]
struct Passes {
    started: std::sync::atomic::AtomicU64,
    finished: std::sync::atomic::AtomicU64,
}

async fn run(
    client: kube::Client,
    options: KustomizeOptions,
    log: Arc<Log>,
    passes: Arc<Passes>,
    behaviour: Behaviour,
) {
    let ks_api: Api<DynamicObject> = match &options.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &kustomization_resource()),
        None => Api::all_with(client.clone(), &kustomization_resource()),
    };
    let git_api: Api<DynamicObject> = Api::all_with(client.clone(), &git_repository_resource());
    let artifact_api: Api<DynamicObject> =
        Api::all_with(client.clone(), &external_artifact_resource());
    // Any change to a Kustomization, a GitRepository or an ExternalArtifact wakes the loop;
    // what to do is decided from a fresh list, so coalesced or missed events cost nothing.
    // A Kustomization fed by an ExternalArtifact reconciles when the ExternalArtifact's
    // `status.artifact.revision` changes (kustomize-controller with
    // `--feature-gates=ExternalArtifact=true`), fetching `status.artifact.url` and checking
    // its digest as for any source (the crate's resolver does both).
    let changes = futures::stream::select(
        futures::stream::select(
            watcher(ks_api.clone(), watcher::Config::default())
                .default_backoff()
                .map(|_| ()),
            watcher(git_api, watcher::Config::default())
                .default_backoff()
                .map(|_| ()),
        ),
        watcher(artifact_api, watcher::Config::default())
            .default_backoff()
            .map(|_| ()),
    );
    let mut changes = std::pin::pin!(changes);
    let mut attempted: HashMap<(String, String), Instant> = HashMap::new();
    let mut pass = 0u64;
    loop {
        pass += 1;
        passes
            .started
            .store(pass, std::sync::atomic::Ordering::SeqCst);
        if let Err(error) =
            reconcile_all(&client, &ks_api, &options, &log, &mut attempted, &behaviour).await
        {
            tracing::debug!(%error, pass, "kustomize-controller stand-in: listing failed");
        }
        passes
            .finished
            .store(pass, std::sync::atomic::Ordering::SeqCst);
        tokio::select! {
            next = changes.next() => if next.is_none() { return },
            _ = tokio::time::sleep(options.retry_interval) => {}
        }
    }
}

async fn reconcile_all(
    client: &kube::Client,
    ks_api: &Api<DynamicObject>,
    options: &KustomizeOptions,
    log: &Log,
    attempted: &mut HashMap<(String, String), Instant>,
    behaviour: &Behaviour,
) -> Result<(), StandinError> {
    let list = ks_api
        .list(&Default::default())
        .await
        .map_err(kube_err("listing Kustomizations"))?;
    for ks in list.items {
        let ks = serde_json::to_value(&ks).map_err(|e| StandinError::Invalid(e.to_string()))?;
        let namespace = ks
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let name = ks
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let key = (namespace.clone(), name.clone());
        let source_revision = source_revision(client, &ks, &namespace).await;
        let retry_due = attempted
            .get(&key)
            .is_none_or(|at| at.elapsed() >= options.retry_interval);
        let Some(mut why) = should_reconcile(&ks, source_revision.as_deref(), retry_due) else {
            continue;
        };
        let mut ks = ks;
        if !behaviour.read_delay.is_zero() {
            // Dequeued later: the object is read again, and only then the artifact.
            tokio::time::sleep(behaviour.read_delay).await;
            let Ok(Some(fresh)) = ks_api.get_opt(&name).await else {
                continue;
            };
            ks = serde_json::to_value(&fresh).map_err(|e| StandinError::Invalid(e.to_string()))?;
            let source_revision = self::source_revision(client, &ks, &namespace).await;
            match should_reconcile(&ks, source_revision.as_deref(), retry_due) {
                Some(now) => why = now,
                None => continue,
            }
        }
        attempted.insert(key, Instant::now());
        let fail = behaviour
            .fail_next
            .fetch_update(
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
                |n| n.checked_sub(1),
            )
            .is_ok();
        if let Err(error) = reconcile(client, &options.resolver, &ks, why, fail, log).await {
            tracing::warn!(kustomization = %format!("{namespace}/{name}"), %error,
                "kustomize-controller stand-in could not write the status");
        }
    }
    Ok(())
}

/// The revision `ks`'s source publishes, if it has an artifact.
async fn source_revision(client: &kube::Client, ks: &Value, namespace: &str) -> Option<String> {
    let kind = ks.pointer("/spec/sourceRef/kind")?.as_str()?;
    let name = ks.pointer("/spec/sourceRef/name")?.as_str()?;
    let ns = ks
        .pointer("/spec/sourceRef/namespace")
        .and_then(Value::as_str)
        .unwrap_or(namespace);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &source_resource(kind)?);
    let source = api.get_opt(name).await.ok()??;
    source
        .data
        .pointer("/status/artifact/revision")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// One reconcile: progressing status, render, apply stage by stage, the attempt logged, final
/// status. The attempt enters the log before its status is written, so a test that sees the
/// status (`lastAppliedRevision`, `Ready`) finds the attempt in [`KustomizeController::reconciled`].
async fn reconcile(
    client: &kube::Client,
    resolver: &Resolver,
    ks: &Value,
    why: Why,
    fail: bool,
    log: &Log,
) -> Result<(), StandinError> {
    let namespace = ks
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = ks
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let generation = ks
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let requested = ks
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(REQUESTED_AT))
        .cloned();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &kustomization_resource());
    let progressing = json!({"status": {"conditions": [
        condition("Reconciling", "True", "Progressing", "Reconciliation in progress", generation),
        condition("Ready", "Unknown", "Progressing", "Reconciliation in progress", generation),
    ]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&progressing))
        .await
        .map_err(kube_err(format!(
            "status of Kustomization {namespace}/{name}"
        )))?;

    let at = jiff::Timestamp::now().to_string();
    let (revision, result) = match resolver.resolve(namespace, name).await {
        Ok(resolved) if fail => (
            resolved.revision,
            Err(("DependencyNotReady", DEPENDENCY_NOT_READY.to_string())),
        ),
        Ok(resolved) => {
            let applied = apply_all(client, &resolved.rendered.objects).await;
            (resolved.revision, applied)
        }
        Err(error) => {
            let revision = ks
                .pointer("/status/lastAttemptedRevision")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let reason = match &error {
                ResolveError::Artifact { .. } | ResolveError::Objects(_) => "ArtifactFailed",
                _ => "BuildFailed",
            };
            (revision, Err((reason, error.to_string())))
        }
    };

    let mut status = json!({
        "observedGeneration": generation,
        "lastAttemptedRevision": revision,
    });
    if let Some(at) = &requested {
        status["lastHandledReconcileAt"] = at.clone();
    }
    let outcome = match &result {
        Ok(applied) => {
            status["lastAppliedRevision"] = json!(revision);
            status["conditions"] = json!([condition(
                "Ready",
                "True",
                "ReconciliationSucceeded",
                &format!("Applied revision: {revision}"),
                generation
            ),]);
            Ok(applied.clone())
        }
        Err((reason, message)) => {
            status["conditions"] =
                json!([condition("Ready", "False", reason, message, generation),]);
            Err(message.clone())
        }
    };
    tracing::info!(kustomization = %format!("{namespace}/{name}"), revision = %revision,
        ok = outcome.is_ok(), "kustomize-controller stand-in reconciled");
    let logged = log.begin(Reconciled {
        namespace: namespace.to_string(),
        name: name.to_string(),
        revision,
        why,
        result: outcome,
        at,
    });
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": status})),
    )
    .await
    .map_err(kube_err(format!(
        "status of Kustomization {namespace}/{name}"
    )))?;
    log.status_written(logged);
    Ok(())
}

/// Applies `objects` as kustomize-controller does: stage by stage, each stage dry-run whole
/// before any of it is written. `Err` carries the Ready reason and Flux's message.
async fn apply_all(
    client: &kube::Client,
    objects: &[Value],
) -> Result<Vec<String>, (&'static str, String)> {
    let mut resources: HashMap<(String, String), ApiResource> = HashMap::new();
    let mut applied = Vec::new();
    for stage in 0..=2u8 {
        let objects: Vec<&Value> = objects.iter().filter(|o| stage_of(o) == stage).collect();
        let mut apis = Vec::new();
        for object in &objects {
            let api = api_for(client, &mut resources, object)
                .await
                .map_err(|m| ("ReconciliationFailed", m))?;
            apis.push(api);
        }
        for dry_run in [true, false] {
            for (object, api) in objects.iter().zip(&apis) {
                let mut params = PatchParams::apply(KUSTOMIZE_MANAGER).force();
                params.dry_run = dry_run;
                let name = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if let Err(error) = api.patch(name, &params, &Patch::Apply(object)).await {
                    let (reason, message) = match &error {
                        kube::Error::Api(s) => (s.reason.clone(), s.message.clone()),
                        other => ("InternalError".to_string(), other.to_string()),
                    };
                    let verb = if dry_run {
                        "dry-run failed"
                    } else {
                        "apply failed"
                    };
                    return Err((
                        "ReconciliationFailed",
                        format!("{} {verb} ({reason}): {message}", object_name(object)),
                    ));
                }
                if !dry_run {
                    applied.push(object_name(object));
                }
            }
        }
    }
    Ok(applied)
}

/// The API of `object`'s kind (discovered once per kind), in its namespace if it has one.
async fn api_for(
    client: &kube::Client,
    cache: &mut HashMap<(String, String), ApiResource>,
    object: &Value,
) -> Result<Api<DynamicObject>, String> {
    let api_version = object["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    let key = (api_version.clone(), kind.clone());
    if !cache.contains_key(&key) {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let (resource, _) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| {
                format!(
                    "{} no matches for kind \"{kind}\" in version \"{api_version}\": {e}",
                    object_name(object)
                )
            })?;
        cache.insert(key.clone(), resource);
    }
    let resource = &cache[&key];
    Ok(
        match object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        {
            Some(ns) if !ns.is_empty() => Api::namespaced_with(client.clone(), ns, resource),
            _ => Api::all_with(client.clone(), resource),
        },
    )
}

/// A Kustomization object for `path` of the GitRepository `source` in `namespace`, with the
/// converger's gate annotation (`suspend`, `reconcile`) when given.
pub fn kustomization(
    namespace: &str,
    name: &str,
    source: &str,
    path: &str,
    gate: Option<&str>,
    suspend: bool,
) -> Value {
    let mut ks = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"interval": "10m", "path": path, "prune": true, "suspend": suspend,
                 "sourceRef": {"kind": "GitRepository", "name": source}},
    });
    if let Some(gate) = gate {
        ks["metadata"]["annotations"] = json!({"flux-converger.io/gate": gate});
    }
    ks
}

/// Creates `object` (a Kustomization from [`kustomization`]) as `flux` would (`kubectl apply`).
pub async fn create_kustomization(
    client: &kube::Client,
    object: &Value,
) -> Result<(), StandinError> {
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &kustomization_resource());
    let object: DynamicObject =
        serde_json::from_value(object.clone()).map_err(|e| StandinError::Invalid(e.to_string()))?;
    api.create(&PostParams::default(), &object)
        .await
        .map_err(kube_err(format!(
            "creating Kustomization {namespace}/{name}"
        )))?;
    Ok(())
}

/// The StatefulSet the service tests publish: `web`, 2 replicas, one `data` template of
/// `size` in the expandable class.
pub fn web_statefulset(size: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
  namespace: default
spec:
  serviceName: web
  replicas: 2
  podManagementPolicy: Parallel
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: app
        image: busybox
        volumeMounts: [{{name: data, mountPath: /data}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: expandable
      resources: {{requests: {{storage: {size}}}}}
"
    )
}
