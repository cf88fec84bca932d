//! Kubernetes RBAC, evaluated over the fake API server's authorization log
//! (`FakeApiServer::rbac_requests`): which of the converger's requests the shipped
//! ClusterRole/Role would refuse, and which of their grants nothing sends.
//!
//! Used by the RBAC tests and by any test that runs the converger against the fake
//! (`use test_support::rbac_check;`):
//! `rbac_check::install(&fake)` seeds the shipped RBAC and makes the fake enforce it on every
//! request the converger makes as itself (a missing verb is the real 403), and
//! `rbac_check::assert_allowed(&fake.rbac_requests())` names any refused request. Flux's
//! stand-ins in the same fake run as [`FLUX_USER`] through [`flux_client`], so what they do is
//! neither refused by nor counted against the converger's roles.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use fake_apiserver::FakeApiServer;
use fake_apiserver::authz::RbacRequest;

/// The identity the install runs as (manifests/deployment.yaml).
pub const NAMESPACE: &str = "flux-system";
pub const SERVICE_ACCOUNT: &str = "flux-converger";
pub const USER: &str = "system:serviceaccount:flux-system:flux-converger";

/// One authorisation decision the API server makes for a request, as RBAC sees it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    pub verb: String,
    pub group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    /// `None` for cluster-scoped resources.
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {}/{}", self.verb, group, self.resource)?;
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}")?,
            None => write!(f, " (cluster)")?,
        }
        if let Some(n) = &self.name {
            write!(f, " name={n}")?;
        }
        Ok(())
    }
}

impl From<&RbacRequest> for Access {
    fn from(r: &RbacRequest) -> Self {
        Access {
            verb: r.verb.clone(),
            group: r.api_group.clone(),
            resource: r.resource_path(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }
    }
}

/// What `user` was asked to authorise (impersonation checks included, as the caller's).
pub fn accesses_of(log: &[RbacRequest], user: &str) -> Vec<Access> {
    log.iter()
        .filter(|r| r.user == user)
        .map(Access::from)
        .collect()
}

/// What the converger's own identity was asked to authorise (not the impersonation that
/// [`flux_client`] rides on: that is the test's Flux, not the converger).
pub fn converger_accesses(log: &[RbacRequest]) -> Vec<Access> {
    accesses_of(log, USER)
        .into_iter()
        .filter(|a| !is_flux_impersonation(a))
        .collect()
}

/// Flux's controllers as the tests play them (crates/test-support/src/flux_standin.rs): a service account
/// the converger never impersonates, bound to everything, as Flux's cluster-reconciler is.
pub const FLUX_NAMESPACE: &str = "flux-system";
pub const FLUX_SERVICE_ACCOUNT: &str = "flux-standin";
pub const FLUX_USER: &str = "system:serviceaccount:flux-system:flux-standin";

fn is_flux_impersonation(a: &Access) -> bool {
    a.verb == "impersonate"
        && a.resource == "serviceaccounts"
        && a.namespace.as_deref() == Some(FLUX_NAMESPACE)
        && a.name.as_deref() == Some(FLUX_SERVICE_ACCOUNT)
}

/// A client for Flux's stand-ins once [`install`] made every plain request the converger's:
/// the fake knows callers only by impersonation, so this one impersonates [`FLUX_USER`]
/// (allowed through the converger's own `impersonate` grant, which the check then ignores for
/// this one account) and [`install`] binds that account to everything.
pub fn flux_client(fake: &FakeApiServer) -> kube::Client {
    let inner = fake.client();
    let user = http::HeaderValue::from_static(FLUX_USER);
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        let user = user.clone();
        async move {
            request.headers_mut().insert("Impersonate-User", user);
            inner.send(request).await
        }
    });
    kube::Client::new(service, "default")
}

/// One verb on one resource granted by one rule of a role; `namespace` is `None` for a
/// ClusterRole bound cluster-wide.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub role: String,
    pub namespace: Option<String>,
    pub group: String,
    pub resource: String,
    pub verb: String,
    pub resource_names: Vec<String>,
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(
            f,
            "{}: {} {}/{}",
            self.role, self.verb, group, self.resource
        )?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if !self.resource_names.is_empty() {
            write!(f, " names={:?}", self.resource_names)?;
        }
        Ok(())
    }
}

impl Grant {
    /// RBAC's rule match (wildcards included, although the install has none).
    pub fn allows(&self, a: &Access) -> bool {
        let any = |granted: &str, asked: &str| granted == "*" || granted == asked;
        let scoped = match &self.namespace {
            None => true,
            Some(ns) => a.namespace.as_deref() == Some(ns.as_str()),
        };
        let named = self.resource_names.is_empty()
            || (a.verb != "create"
                && a.name
                    .as_ref()
                    .is_some_and(|n| self.resource_names.contains(n)));
        scoped
            && named
            && any(&self.verb, &a.verb)
            && any(&self.group, &a.group)
            && (any(&self.resource, &a.resource)
                || (self.resource.ends_with("/*")
                    && a.resource.split('/').next() == self.resource.split('/').next()))
    }

    /// The grant's (group, resource, verb), the key of the service's pending list.
    pub fn key(&self) -> (&str, &str, &str) {
        (&self.group, &self.resource, &self.verb)
    }
}

/// Every grant of the roles bound to `namespace/service_account` in a rendered install.
pub fn grants_of(objects: &[Value], namespace: &str, service_account: &str) -> Vec<Grant> {
    let bound = |o: &Value| {
        o["subjects"].as_array().into_iter().flatten().any(|s| {
            s["kind"] == "ServiceAccount"
                && s["name"] == service_account
                && s["namespace"] == namespace
        })
    };
    let role = |kind: &str, name: &str, ns: Option<&str>| {
        objects.iter().find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"] == name
                && o["metadata"]["namespace"].as_str() == ns
        })
    };
    let mut out = Vec::new();
    for b in objects.iter().filter(|o| bound(o)) {
        let role_kind = b["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = b["roleRef"]["name"].as_str().unwrap_or_default();
        let (scope, found) = match (b["kind"].as_str(), role_kind) {
            (Some("ClusterRoleBinding"), "ClusterRole") => {
                (None, role("ClusterRole", role_name, None))
            }
            (Some("RoleBinding"), "ClusterRole") => (
                b["metadata"]["namespace"].as_str(),
                role("ClusterRole", role_name, None),
            ),
            (Some("RoleBinding"), "Role") => {
                let ns = b["metadata"]["namespace"].as_str();
                (ns, role("Role", role_name, ns))
            }
            _ => continue,
        };
        let found =
            found.unwrap_or_else(|| panic!("{role_kind}/{role_name} bound but not shipped"));
        for rule in found["rules"].as_array().into_iter().flatten() {
            let strs = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            for group in strs("apiGroups") {
                for resource in strs("resources") {
                    for verb in strs("verbs") {
                        out.push(Grant {
                            role: format!("{role_kind}/{role_name}"),
                            namespace: scope.map(str::to_string),
                            group: group.clone(),
                            resource: resource.clone(),
                            verb,
                            resource_names: strs("resourceNames"),
                        });
                    }
                }
            }
        }
    }
    out
}

/// The install as `kubectl apply -k manifests/` creates it.
pub fn installed_objects() -> Vec<Value> {
    // The install with its opt-in components for HelmReleases (reading release Secrets) and for
    // Argo CD Applications, as an operator adds them: the flows here send what all grant. kustomize takes only relative
    // paths, so the overlay is written next to manifests/.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let overlay = tempfile::Builder::new()
        .prefix(".rbac-install-")
        .tempdir_in(&root)
        .expect("a directory for the overlay");
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        "resources:\n  - ../manifests\ncomponents:\n  - ../manifests/helm-release-reader\n  - ../manifests/argocd\n",
    )
    .expect("write the overlay");
    let dir = overlay.path();
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    flux_converger::flux::render::parse_stream(&String::from_utf8_lossy(&out.stdout))
        .expect("the install parses")
}

/// Every grant of the shipped roles to the converger's service account.
pub fn installed_grants() -> Vec<Grant> {
    grants_of(&installed_objects(), NAMESPACE, SERVICE_ACCOUNT)
}

/// Seeds the shipped RBAC into `fake` and makes every request without impersonation act as the
/// converger's service account, authorised by it: from here on a verb the install lacks is the
/// API server's 403, and `fake.rbac_requests()` holds what to prove the install against.
pub fn install(fake: &FakeApiServer) {
    for o in installed_objects() {
        if o["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("rbac.authorization.k8s.io/"))
        {
            fake.seed(o);
        }
    }
    fake.seed(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "flux-standin"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}));
    fake.seed(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "flux-standin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "flux-standin"},
        "subjects": [{"kind": "ServiceAccount", "name": FLUX_SERVICE_ACCOUNT, "namespace": FLUX_NAMESPACE}]}));
    fake.authorize_default_as(USER);
    fake.clear_rbac_requests();
}

/// The accesses no grant allows.
pub fn denied(grants: &[Grant], accesses: &[Access]) -> Vec<Access> {
    let set: BTreeSet<Access> = accesses
        .iter()
        .filter(|a| !grants.iter().any(|g| g.allows(a)))
        .cloned()
        .collect();
    set.into_iter().collect()
}

/// The grants no access used.
pub fn unused(grants: &[Grant], accesses: &[Access]) -> Vec<Grant> {
    grants
        .iter()
        .filter(|g| !accesses.iter().any(|a| g.allows(a)))
        .cloned()
        .collect()
}

/// Fails at once, listing them, when the fake refused any request so far: a service retries a
/// refused watch or write forever, so a test waiting on it would hang instead of failing.
pub fn assert_none_refused(log: &[RbacRequest]) {
    let refused: Vec<String> = log
        .iter()
        .filter(|r| !r.allowed)
        .map(|r| format!("{} {}", r.user, Access::from(r)))
        .collect();
    assert!(
        refused.is_empty(),
        "refused by the fake's RBAC:\n  {}",
        refused.join("\n  ")
    );
}

/// Fails, listing them, when the install would refuse any of the converger's requests in `log`.
pub fn assert_allowed(log: &[RbacRequest]) {
    let denied = denied(&installed_grants(), &converger_accesses(log));
    assert!(
        denied.is_empty(),
        "the shipped RBAC (manifests/) refuses:\n  {}",
        denied
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}
