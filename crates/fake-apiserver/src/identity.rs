//! Who a request is made as, and the records of access the store keeps: an `Identity` (user and
//! groups), each authorization decision (`RbacRequest`, what a shipped ClusterRole is proven
//! against) and the bearer tokens a TokenReview knows (`TokenUser`). Plain data: RBAC's
//! evaluation over them is `authz`, the review APIs are `reviews`.

use serde_json::Value;

/// The user every request is made as when nothing else is said (the kubeconfig admin).
pub const ADMIN_USER: &str = "kubernetes-admin";
const MASTERS: &str = "system:masters";
const AUTHENTICATED: &str = "system:authenticated";
pub const SA_PREFIX: &str = "system:serviceaccount:";

/// A user and their groups, as the authenticator (or impersonation) leaves them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
}

impl Identity {
    pub fn admin() -> Self {
        Identity {
            user: ADMIN_USER.into(),
            groups: vec![MASTERS.into(), AUTHENTICATED.into()],
        }
    }

    /// A user by name; a `system:serviceaccount:<ns>:<name>` gets the service-account groups
    /// unless groups are given (the impersonation filter's fixed mapping).
    pub fn named(user: &str, groups: Vec<String>) -> Self {
        let mut groups = groups;
        if groups.is_empty()
            && let Some((ns, _)) = service_account(user)
        {
            groups = vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
            ];
        }
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.into());
        }
        Identity {
            user: user.to_string(),
            groups,
        }
    }

    /// A member of `system:masters`: allowed everything, before RBAC is asked.
    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }
}

/// `system:serviceaccount:<ns>:<name>` → `(ns, name)`.
pub fn service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix(SA_PREFIX)?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

/// One authorization decision: the RBAC attributes of a request and who made it. The log of
/// these is what a shipped ClusterRole/Role is proven against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbacRequest {
    /// get, list, watch, create, update, patch, delete, deletecollection, impersonate.
    pub verb: String,
    /// `""` for the core group.
    pub api_group: String,
    /// The plural (`statefulsets`), or `serviceaccounts`/`users`/`groups` for impersonate.
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The user the request was made as (after impersonation).
    pub user: String,
    pub groups: Vec<String>,
    pub dry_run: bool,
    /// What RBAC answered (members of `system:masters` are always allowed).
    pub allowed: bool,
}

impl RbacRequest {
    /// `statefulsets/scale`, as RBAC rules name a subresource.
    pub fn resource_path(&self) -> String {
        match &self.subresource {
            Some(s) => format!("{}/{s}", self.resource),
            None => self.resource.clone(),
        }
    }
}

/// Whom a known bearer token authenticates (see `FakeApiServer::add_token`).
#[derive(Debug, Clone)]
pub struct TokenUser {
    pub identity: Identity,
    pub uid: String,
    /// `status.user.extra` (a bound service-account token's credential id).
    pub extra: Value,
}
