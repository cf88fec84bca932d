//! A fake kube-apiserver for flux-converger's tests: a real `kube::Client` talks to it over
//! HTTP semantics (in process, or on a socket with a kubeconfig for the binary and kubectl),
//! and it answers like the v1.28 (or v1.32) server captured in `tests/fixtures/` where this
//! project depends on it: StatefulSet immutability, claim resize rules, orphan deletion with a
//! simulated garbage collector, server-side apply, watches, dry runs. `tests/it/fake_apiserver.rs`
//! proves each fixture behaviour against it.
//!
//! ```text
//! use fake_apiserver::*;
//!
//! #[tokio::test]
//! async fn grows_then_recreates() {
//!     let fake = FakeApiServer::new();                      // v1.28; with_version(KubeVersion::V1_32)
//!     fake.seed_fixture("v1.28/storageclasses.yaml");        // or seed(json!(..)) / seed_yaml(..)
//!     fake.seed_fixture("v1.28/live-statefulset.yaml");
//!     fake.enable_statefulset_controller();                 // claims, pods, revisions, adoption
//!     fake.set_pvc_phase("default", "data-web-0", "Bound");
//!     let client = fake.client();                           // in process, inside a Tokio runtime
//!     // ... run the code under test ...
//!     fake.gc_settled().await;                              // orphan/background deletions done
//!     assert!(fake.requests().iter().all(|r| !r.is_write())); // or count, filter by manager
//!     let sts = fake.get("apps/v1", "StatefulSet", Some("default"), "web");
//! }
//! ```
//! For the binary: `let served = fake.serve().await;` then run it with
//! `KUBECONFIG=served.kubeconfig` (plain HTTP on 127.0.0.1, no credentials). Faults:
//! `fake.add_fault(FaultRule { method: Some(Method::DELETE), path_contains: "/statefulsets/web".into(),
//! nth: 0, action: Fault::DropAfterWrite })`. GC timing: `set_orphan_gc(GcMode::Stuck)` /
//! `GcMode::After(..)` (default 150 ms, as measured on the real one). Playing other actors:
//! `modify` (Flux writing a status, a resizer), `remove`, `set_pvc_phase`, `set_pvc_capacity`,
//! `set_pods_ready`, `compact` (watches from before get 410 Expired). Observing: `requests`,
//! `writes`, each record with its answer's `code`.
//!
//! Conformance with a real v1.32.6 (`hack/conformance.sh`, `docs/fake-apiserver.md`):
//! impersonation authorized against the stored RBAC objects (`authz`; `rbac_requests`,
//! `authorize_default_as`, `grant`), namespaces as a precondition and a lifecycle
//! (`admission`, `controllers::namespaces`), paging (`paging`), Flux's CRD schemas
//! (`crd_schema`), the typed apply check (`typed`), PersistentVolumes bound by `claimRef`
//! (`controllers::binder`), `MicroTime`s.
//!
//! What it does not do (each difference left is listed with its reason in
//! `docs/fake-apiserver.md`): authentication (any client is the admin unless it impersonates
//! or `authorize_default_as` is set), admission beyond the plugins named in `semantics`,
//! protobuf, `scale` on anything but StatefulSets, watch bookmarks, `fieldValidation`, CRD
//! patterns and CEL rules.
//!
//! # Layout
//!
//! Layered as a real server is, each layer naming only itself and the ones below
//! (`hack/module-cycles crates/fake-apiserver/src`; `docs/fake-apiserver.md`, "Layout"):
//! types (`version`, `errors`, `resources`, `query`, `request`, `identity`, `faults`) → the
//! store (`store`) → per-resource rules (`semantics`, `crd_schema`, `typed`, `patch`, `table`,
//! `admission`) → request and authz (`authz`, `reviews`) → the write pipeline (`pipeline`,
//! `writes`, `deletion`, `apply`, `scale`, each write handing back its `commit`) → the
//! controllers run after each commit (`controllers`) → HTTP (`handlers`, `verbs`, `watch`,
//! `paging`, `discovery`, `response`, `serve`) and this file, the face ([`FakeApiServer`]).

// The layers, lowest first (docs/fake-apiserver.md, "Layout"; `hack/module-cycles` checks that
// every import points down). 1. Types: the plain data everything names.
mod errors;
mod faults;
mod identity;
pub mod query;
mod request;
mod resources;
mod version;
// 2. The store: the objects, their versions and watch events, behind one lock.
mod store;
// 3. Per-resource rules: defaults, validation, admission, schemas, patch and table formats.
mod admission;
mod crd_schema;
mod patch;
pub mod semantics;
pub mod table;
mod typed;
// 4. Request and authz: who a request is made as, RBAC, the review APIs.
pub mod authz;
mod reviews;
// 5. The write pipeline: each write, dry run or not, hands back what it committed.
mod apply;
mod commit;
mod deletion;
mod eviction;
mod pipeline;
mod scale;
mod writes;
// 6. The controllers, run after each commit by whoever asked for the write.
mod controllers;
// 7. HTTP: routing, the verbs, watches, discovery, the listeners; and this file, the face.
mod discovery;
mod handlers;
mod paging;
mod response;
mod serve;
mod verbs;
mod watch;

use std::sync::MutexGuard;
use std::time::Duration;

use serde_json::{Value, json};

pub use authz::RbacRequest;
pub use errors::ApiError;
pub use eviction::{DISRUPTION_BUDGET_CAUSE, VIOLATES_BUDGET};
pub use faults::{Fault, FaultRule, RequestRecord};
pub use http::Method;
pub use serve::Served;
pub use version::{AttributesClasses, GcMode, KubeVersion};

use commit::{Change, Commit};
use controllers::statefulset;
use store::{Key, State, Store};

/// `tests/fixtures/<rel>` of the repository (the fixtures are shared with flux-converger's own
/// tests and `hack/conformance.sh`, so they stay at the root).
pub fn fixture_path(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn obj_namespace_owned(obj: &Value) -> Option<String> {
    store::obj_namespace(obj).map(str::to_string)
}

#[derive(Clone)]
pub struct FakeApiServer {
    store: Store,
}

impl Default for FakeApiServer {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeApiServer {
    /// Emulates kube-apiserver v1.28.
    pub fn new() -> Self {
        Self::with_version(KubeVersion::V1_28)
    }

    pub fn with_version(version: KubeVersion) -> Self {
        // The ring provider the client (and the binary under test) use; a second install is
        // refused, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let fake = FakeApiServer {
            store: Store::new(version),
        };
        // The namespaces of a fresh cluster, and Flux's (the fake serves Flux's CRDs: it is a
        // cluster with Flux installed).
        for ns in [
            "default",
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "flux-system",
        ] {
            fake.seed(json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }));
        }
        for o in reviews::basic_user() {
            fake.seed(o);
        }
        fake
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.store.lock()
    }

    pub fn version(&self) -> KubeVersion {
        self.lock().version
    }

    /// A client over an in-process tower service (no socket); default namespace `default`.
    pub fn client(&self) -> kube::Client {
        serve::in_process_client(self.store.clone())
    }

    /// Serves on `127.0.0.1:0` and writes a kubeconfig for it; both live until the `Served`
    /// is dropped.
    pub async fn serve(&self) -> Served {
        serve::serve(self.store.clone(), "127.0.0.1:0")
            .await
            .expect("the fake API server binds a loopback port")
    }

    /// Serves on a given address (`127.0.0.1:8080`, or port 0 for any).
    pub async fn serve_on(&self, listen: &str) -> std::io::Result<Served> {
        serve::serve(self.store.clone(), listen).await
    }

    /// Serves over TLS on loopback, as a real API server does: a self-signed certificate,
    /// trusted by the kubeconfig written beside it.
    pub async fn serve_tls(&self) -> Served {
        serve::serve_with(self.store.clone(), "127.0.0.1:0", true)
            .await
            .expect("the fake API server binds a loopback port over TLS")
    }

    /// [`FakeApiServer::serve_on`], over TLS when `tls`.
    pub async fn serve_on_with(&self, listen: &str, tls: bool) -> std::io::Result<Served> {
        serve::serve_with(self.store.clone(), listen, tls).await
    }

    /// Stores an object as-is (uid, resourceVersion, creationTimestamp and generation filled
    /// when missing); not logged as a request, but watchers see it ADDED (or MODIFIED).
    pub fn seed(&self, mut obj: Value) {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let rt = resources::by_kind(&api_version, &kind)
            .unwrap_or_else(|| panic!("the fake does not serve {api_version} {kind}"));
        let mut state = self.lock();
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let meta = &mut obj["metadata"];
        if rt.namespaced && meta.get("namespace").is_none() {
            meta["namespace"] = json!("default");
        }
        if !rt.namespaced
            && let Some(m) = meta.as_object_mut()
        {
            m.remove("namespace");
        }
        if meta.get("uid").is_none() {
            meta["uid"] = json!(state.new_uid());
        }
        if meta.get("creationTimestamp").is_none() {
            meta["creationTimestamp"] = json!(store::now());
        }
        if rt.has_generation && meta.get("generation").is_none() {
            meta["generation"] = json!(1);
        }
        // Custom resources are read back with their schema's defaults, seeded or not.
        crd_schema::default_only(&rt, &mut obj);
        let namespace = obj_namespace_owned(&obj);
        if let Some(ns) = namespace.as_deref() {
            controllers::namespaces::ensure_for_seed(&mut state, ns);
        }
        let change = if rt == resources::NAMESPACE {
            Change::NamespaceCreated(obj.clone())
        } else {
            Change::Stored
        };
        state.seed(rt, obj);
        let commit = Commit::new(&rt, namespace.as_deref(), change);
        controllers::after_commit(&self.store, &mut state, Some(commit));
    }

    /// Seeds a fixture file by its path under `tests/fixtures/` (`"v1.28/live-statefulset.yaml"`).
    pub fn seed_fixture(&self, rel: &str) {
        let yaml = std::fs::read_to_string(fixture_path(rel))
            .unwrap_or_else(|e| panic!("fixture {rel}: {e}"));
        self.seed_yaml(&yaml);
    }

    /// Waits until the simulated garbage collector has nothing scheduled (deletions parked by
    /// `GcMode::Stuck` do not count).
    pub async fn gc_settled(&self) {
        while self.lock().gc_inflight > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Seeds every document of a multi-document YAML (a fixture file, for instance).
    pub fn seed_yaml(&self, yaml: &str) {
        let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("test YAML parses");
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            self.seed(doc);
        }
    }

    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let rt = resources::by_kind(api_version, kind)?;
        self.lock().get(&Key::new(&rt, namespace, name)).cloned()
    }

    /// Changes a stored object in place, as another controller would (Flux writing a
    /// Kustomization's status, a resizer growing `status.capacity`): a new resourceVersion and a
    /// MODIFIED event, no validation, not logged. Returns the stored result, `None` if absent.
    pub fn modify(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        let rt = resources::by_kind(api_version, kind)?;
        let mut state = self.lock();
        let mut obj = state.get(&Key::new(&rt, namespace, name))?.clone();
        change(&mut obj);
        let stored = state.replace(rt, obj);
        let ns = obj_namespace_owned(&stored);
        let commit = Commit::stored(&rt, ns.as_deref());
        controllers::after_commit(&self.store, &mut state, Some(commit));
        Some(stored)
    }

    /// Deletes a stored object at once (no finalizers, no garbage collection), as if it had
    /// gone behind the client's back. Returns its last state.
    pub fn remove(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let rt = resources::by_kind(api_version, kind)?;
        let mut state = self.lock();
        let gone = state.remove(rt, &Key::new(&rt, namespace, name))?;
        let commit = Commit::stored(&rt, namespace);
        controllers::after_commit(&self.store, &mut state, Some(commit));
        Some(gone)
    }

    /// Stored objects of a kind, in one namespace or (`None`) all.
    pub fn list(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        match resources::by_kind(api_version, kind) {
            Some(rt) => self.lock().list(&rt, namespace),
            None => Vec::new(),
        }
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.lock().requests.clone()
    }

    /// The requests that changed (or would have changed, but for a fault) stored state:
    /// POST/PUT/PATCH/DELETE without dry run.
    pub fn writes(&self) -> Vec<RequestRecord> {
        self.requests()
            .into_iter()
            .filter(RequestRecord::is_write)
            .collect()
    }

    pub fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    /// Every authorization decision so far, in order: the RBAC attributes of each resource
    /// request (verb, group, resource, subresource, namespace, name), who it was made as, and
    /// RBAC's answer; impersonation adds an `impersonate` entry made by the caller. What a
    /// shipped ClusterRole/Role is proven against.
    pub fn rbac_requests(&self) -> Vec<RbacRequest> {
        self.lock().rbac_log.clone()
    }

    pub fn clear_rbac_requests(&self) {
        self.lock().rbac_log.clear();
    }

    /// Makes requests without impersonation act as `user` (e.g.
    /// `system:serviceaccount:flux-system:flux-converger`), authorized by the RBAC objects
    /// stored in the fake, so a component can be run under its shipped ClusterRole alone.
    /// Seeding (`seed`, `modify`, ...) is never authorized.
    pub fn authorize_default_as(&self, user: &str) {
        self.lock().default_user = Some(user.to_string());
    }

    /// Installs a validating admission webhook `webhook` that denies every create of `kind`
    /// (dry runs and the create of a server-side apply of a missing object included, updates
    /// never) with `message`, answered `code` (400 when `None`), as
    /// `admission webhook "<webhook>" denied the request: <message>`.
    pub fn deny_creates(&self, kind: &str, webhook: &str, message: &str, code: Option<u16>) {
        self.lock().create_denials.push(faults::CreateDenial {
            kind: kind.to_string(),
            webhook: webhook.to_string(),
            message: message.to_string(),
            code: code.unwrap_or(400),
        });
    }

    /// Removes every denial [`deny_creates`](Self::deny_creates) installed.
    pub fn allow_creates(&self) {
        self.lock().create_denials.clear();
    }

    /// Seeds a Role named `grant-<n>` with `rules` and a RoleBinding of it to `user` (a
    /// `system:serviceaccount:<ns>:<name>`, else a User) in `namespace`: the shortest way for a
    /// test to let an impersonated service account do something.
    pub fn grant(&self, namespace: &str, user: &str, rules: Value) {
        let n = self
            .list("rbac.authorization.k8s.io/v1", "Role", Some(namespace))
            .len();
        let name = format!("grant-{n}");
        let subject = match identity::service_account(user) {
            Some((ns, sa)) => json!({"kind": "ServiceAccount", "name": sa, "namespace": ns}),
            None => json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}),
        };
        self.seed(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace},
            "rules": rules,
        }));
        self.seed(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject],
        }));
    }

    /// Makes `token` a bearer token the API server knows: a TokenReview of it authenticates
    /// `user` (a `system:serviceaccount:<ns>:<name>` gets the service-account groups and a
    /// bound token's `extra`, as the real token authenticator answers) with `groups` and
    /// `system:authenticated`. Every other token is answered unauthenticated.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        let identity =
            identity::Identity::named(user, groups.iter().map(|g| g.to_string()).collect());
        let mut state = self.lock();
        let uid = state.new_uid();
        let credential = state.new_uid();
        let extra = match identity::service_account(user) {
            Some(_) => json!({
                "authentication.kubernetes.io/credential-id": [format!("JTI={credential}")],
            }),
            None => json!({}),
        };
        state.tokens.push((
            token.to_string(),
            identity::TokenUser {
                identity,
                uid,
                extra,
            },
        ));
    }

    /// Back to the default: requests without impersonation are the admin's, never refused.
    pub fn authorize_default_as_admin(&self) {
        self.lock().default_user = None;
    }

    pub fn add_fault(&self, rule: FaultRule) {
        self.lock().faults.push((rule, 0));
    }

    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Switching from `Stuck` to `After` finishes the deletions that were left pending.
    pub fn set_orphan_gc(&self, mode: GcMode) {
        let mut state = self.lock();
        state.gc = mode;
        if let GcMode::After(_) = mode {
            let pending = std::mem::take(&mut state.gc_pending);
            for p in pending {
                controllers::gc::schedule(&self.store, &mut state, p);
            }
        }
    }

    /// Emulates a server with KEP-4650's `StatefulSetUpdateVolumeClaimTemplate` feature gate:
    /// an update may change the labels, annotations, storage request and
    /// `volumeAttributesClassName` of an existing volumeClaimTemplate (the server then takes
    /// such a change in place and, with the default `OnClaimDelete`, leaves existing claims as
    /// they are); every other template change is still forbidden.
    pub fn enable_claim_template_updates(&self) {
        self.lock().claim_template_updates = true;
    }

    /// Emulates a 1.32 server started with `--feature-gates=VolumeAttributesClass=true` and
    /// `--runtime-config=storage.k8s.io/v1beta1=true`: VolumeAttributesClass served as
    /// `storage.k8s.io/v1beta1`, a Bound claim's class mutable. 1.36 has it on (locked, `v1`)
    /// and 1.28 predates it: nothing changes for those.
    pub fn enable_volume_attributes_class(&self) {
        self.lock().attributes_class_gate = true;
    }

    /// How this server serves VolumeAttributesClass (its version and gate).
    pub fn attributes_classes(&self) -> AttributesClasses {
        self.lock().attributes_classes()
    }

    /// Turns on the minimal StatefulSet controller (claims, pods, ControllerRevisions,
    /// adoption of orphans, status) and reconciles what is already stored.
    pub fn enable_statefulset_controller(&self) {
        let mut state = self.lock();
        state.sts_controller = true;
        controllers::after_write(&self.store, &mut state, &resources::STATEFULSET, None);
    }

    /// Makes pods scheduled, Running and Ready (existing ones now, new ones at creation) once
    /// their claims exist and are not terminating, as on a cluster with nodes; `false` lets new
    /// pods stay Pending and unscheduled (the default, like the fixtures).
    pub fn set_pods_ready(&self, ready: bool) {
        let mut state = self.lock();
        state.pods_ready = ready;
        if ready {
            for (i, mut pod) in state.list(&resources::POD, None).into_iter().enumerate() {
                if !statefulset::is_ready(&pod) && statefulset::claims_usable(&state, &pod) {
                    statefulset::start_pod(&mut pod, i);
                    state.replace(resources::POD, pod);
                }
            }
        }
        let commit = Commit::stored(&resources::POD, None);
        controllers::after_commit(&self.store, &mut state, Some(commit));
    }

    /// Sets `status.phase` of a claim (and, for `Bound`, the binding details and
    /// `status.capacity` = the request, as the volume binder does).
    pub fn set_pvc_phase(&self, namespace: &str, name: &str, phase: &str) {
        let mut state = self.lock();
        let key = Key::new(&resources::PVC, Some(namespace), name);
        let Some(mut pvc) = state.get(&key).cloned() else {
            panic!("set_pvc_phase: no claim {namespace}/{name}");
        };
        pvc["status"]["phase"] = json!(phase);
        if phase == "Bound" {
            let request = pvc
                .pointer("/spec/resources/requests/storage")
                .cloned()
                .unwrap_or(json!("0"));
            let modes = pvc
                .pointer("/spec/accessModes")
                .cloned()
                .unwrap_or(json!([]));
            pvc["status"]["accessModes"] = modes;
            pvc["status"]["capacity"] = json!({"storage": request});
            if pvc["spec"]["volumeName"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
            {
                pvc["spec"]["volumeName"] = json!(format!("pv-{name}"));
            }
            let annotations = &mut pvc["metadata"]["annotations"];
            if !annotations.is_object() {
                *annotations = json!({});
            }
            annotations["pv.kubernetes.io/bind-completed"] = json!("yes");
            annotations["pv.kubernetes.io/bound-by-controller"] = json!("yes");
        }
        state.replace(resources::PVC, pvc);
    }

    /// Waits (up to 10 s) for the StatefulSet controller to make each claim `namespace/name`,
    /// then marks it Bound, so a converge can grow it at once. `Err` names a claim never made.
    pub async fn bind_when_made<'a>(
        &self,
        claims: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(), String> {
        for (ns, name) in claims {
            let mut made = false;
            for _ in 0..1000 {
                if self
                    .get("v1", "PersistentVolumeClaim", Some(ns), name)
                    .is_some()
                {
                    made = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if !made {
                return Err(format!("{ns}/{name}"));
            }
            self.set_pvc_phase(ns, name, "Bound");
        }
        Ok(())
    }

    /// Sets a claim's `status.capacity.storage` behind every client's back (no event): a
    /// test's setup only. A resizer at work is played through the API, as the real one writes
    /// (`test_support::resizer::Resizer`: the `status` subresource and Events).
    pub fn set_pvc_capacity(&self, namespace: &str, name: &str, capacity: &str) {
        let mut state = self.lock();
        let key = Key::new(&resources::PVC, Some(namespace), name);
        let Some(mut pvc) = state.get(&key).cloned() else {
            panic!("set_pvc_capacity: no claim {namespace}/{name}");
        };
        pvc["status"]["capacity"] = json!({"storage": capacity});
        state.replace(resources::PVC, pvc);
    }

    /// Forgets the event history, like an etcd compaction: a watch from an older
    /// resourceVersion gets a 410 Expired ERROR event and must list again.
    pub fn compact(&self) {
        let mut state = self.lock();
        state.compacted_rv = state.rv;
        state.history.clear();
    }

    /// The current resourceVersion (of the last write).
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }
}
