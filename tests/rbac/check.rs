//! Kubernetes RBAC, evaluated over the fake API server's request log: which of the converger's
//! requests the shipped ClusterRole/Role would refuse, and which of their grants nothing sends.
//!
//! Included by `tests/rbac.rs` and by any test that runs the converger against the
//! fake (`#[path = "rbac/check.rs"] mod rbac_check;`, next to `mod support;`):
//! `rbac_check::assert_allowed(&fake.requests())` fails on a request the install would refuse.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::RequestRecord;

/// The identity the install runs as (manifests/deployment.yaml).
pub const NAMESPACE: &str = "flux-system";
pub const SERVICE_ACCOUNT: &str = "flux-converger";

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

/// Who a request is authorised as: the converger itself, or a service account it impersonates
/// (whose own RBAC decides it, after the converger's `impersonate` is checked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor {
    Converger,
    Impersonated(String),
}

/// The RBAC attributes of one logged request; `None` for non-resource URLs (discovery,
/// `/version`), which every authenticated identity may read (`system:discovery`).
pub fn access_of(r: &RequestRecord) -> Option<Access> {
    let segs: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    let rest = match segs.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (group, rest) = rest;
    let (namespace, resource, name, sub) = match rest {
        [] => return None,
        ["namespaces", ns, resource, tail @ ..] => {
            (Some(*ns), *resource, tail.first(), tail.get(1))
        }
        ["namespaces", tail @ ..] => (None, "namespaces", tail.first(), tail.get(1)),
        [resource, tail @ ..] => (None, *resource, tail.first(), tail.get(1)),
    };
    let verb = match (r.method.as_str(), name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) if r.watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        (other, _) => other,
    };
    Some(Access {
        verb: verb.to_string(),
        group: group.to_string(),
        resource: match sub {
            Some(s) => format!("{resource}/{s}"),
            None => resource.to_string(),
        },
        namespace: namespace.map(str::to_string),
        name: name.map(|n| n.to_string()),
    })
}

/// What the converger's own identity is asked to do for `requests`: each request it makes as
/// itself, and an `impersonate serviceaccounts` for each one made as a tenant's account.
pub fn converger_accesses(requests: &[RequestRecord]) -> Vec<Access> {
    let mut out = Vec::new();
    for r in requests {
        let Some(access) = access_of(r) else { continue };
        match actor(r) {
            Actor::Converger => out.push(access),
            Actor::Impersonated(user) => out.push(impersonation(&user)),
        }
    }
    out
}

/// What tenants' service accounts are asked to do (requests made through impersonation).
pub fn impersonated_accesses(requests: &[RequestRecord]) -> Vec<(String, Access)> {
    requests
        .iter()
        .filter_map(|r| match actor(r) {
            Actor::Impersonated(user) => Some((user, access_of(r)?)),
            Actor::Converger => None,
        })
        .collect()
}

fn actor(r: &RequestRecord) -> Actor {
    match &r.impersonate_user {
        Some(u) => Actor::Impersonated(u.clone()),
        None => Actor::Converger,
    }
}

/// The authorisation check the API server makes before acting as `user`.
fn impersonation(user: &str) -> Access {
    match user
        .strip_prefix("system:serviceaccount:")
        .and_then(|s| s.split_once(':'))
    {
        Some((ns, name)) => Access {
            verb: "impersonate".into(),
            group: String::new(),
            resource: "serviceaccounts".into(),
            namespace: Some(ns.into()),
            name: Some(name.into()),
        },
        None => Access {
            verb: "impersonate".into(),
            group: String::new(),
            resource: "users".into(),
            namespace: None,
            name: Some(user.into()),
        },
    }
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
pub fn installed_grants() -> Vec<Grant> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let objects = flux_converger::flux::render::parse_stream(&String::from_utf8_lossy(&out.stdout))
        .expect("the install parses");
    grants_of(&objects, NAMESPACE, SERVICE_ACCOUNT)
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

/// Fails, listing them, when the install would refuse any request of `requests`.
pub fn assert_allowed(requests: &[RequestRecord]) {
    let denied = denied(&installed_grants(), &converger_accesses(requests));
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
