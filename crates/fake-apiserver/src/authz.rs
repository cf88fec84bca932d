//! Who a request is made as (impersonation headers, or the fake's default identity) and whether
//! RBAC lets them do it, evaluated over the Roles, ClusterRoles and bindings stored in the fake,
//! as the real server's impersonation filter and RBAC authorizer do.
//!
//! Without impersonation and without `authorize_default_as`, requests are made as a member of
//! `system:masters` (the kubeconfig admin): allowed, but still logged, so a test can prove a
//! ClusterRole against everything a component did (`FakeApiServer::rbac_requests`).
//!
//! Every refusal is the real 403, naming the user and the RBAC attributes:
//! `statefulsets.apps "web" is forbidden: User "system:serviceaccount:t1:deployer" cannot patch
//! resource "statefulsets" in API group "apps" in the namespace "t1"`.

use http::Method;
use serde_json::{Value, json};

use super::errors::ApiError;
use super::identity::SA_PREFIX;
pub use super::identity::{ADMIN_USER, Identity, RbacRequest, service_account};
use super::query::Query;
use super::request::{Target, is_dry_run};
use super::resources;
use super::store::State;

/// The verb the authorization filter sees for an HTTP method on a target. A server-side apply
/// of a missing object is asked a second time, as `create`, by the patch handler
/// ([`authorize_create_on_apply`]).
pub fn verb(method: &Method, t: &Target, query: &Query) -> &'static str {
    match (method, t.name.is_some()) {
        (&Method::GET, true) | (&Method::HEAD, true) => "get",
        (&Method::GET, false) if query.flag("watch") => "watch",
        (&Method::GET, false) | (&Method::HEAD, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "unknown",
    }
}

/// The identity the caller asks to act as, if any (`Impersonate-User`, `Impersonate-Group`).
fn impersonated(parts: &http::request::Parts) -> Option<Identity> {
    let user = parts
        .headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())?;
    let groups: Vec<String> = parts
        .headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    Some(Identity::named(user, groups))
}

fn forbidden(attrs: &RbacRequest) -> ApiError {
    let mut message = format!(
        "User {:?} cannot {} resource {:?} in API group {:?}",
        attrs.user,
        attrs.verb,
        attrs.resource_path(),
        attrs.api_group
    );
    match &attrs.namespace {
        Some(ns) => message.push_str(&format!(" in the namespace {ns:?}")),
        None => message.push_str(" at the cluster scope"),
    }
    let qualified = if attrs.api_group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.api_group)
    };
    let name = attrs.name.clone().unwrap_or_default();
    let full = if name.is_empty() {
        format!("{qualified} is forbidden: {message}")
    } else {
        format!("{qualified} {name:?} is forbidden: {message}")
    };
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !attrs.api_group.is_empty() {
        details.insert("group".into(), json!(attrs.api_group));
    }
    details.insert("kind".into(), json!(attrs.resource));
    ApiError {
        code: 403,
        body: json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": full,
            "reason": "Forbidden",
            "details": Value::Object(details),
            "code": 403,
        }),
    }
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn subject_matches(subject: &Value, who: &Identity, binding_ns: Option<&str>) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str().unwrap_or_default() {
        "User" => name == who.user,
        "Group" => who.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or(binding_ns)
                .unwrap_or_default();
            who.user == format!("{SA_PREFIX}{ns}:{name}")
        }
        _ => false,
    }
}

fn rule_allows(rule: &Value, a: &RbacRequest) -> bool {
    let has = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
    let verbs = strings(rule, "verbs");
    let groups = strings(rule, "apiGroups");
    let resources = strings(rule, "resources");
    let names = strings(rule, "resourceNames");
    let resource_ok = resources.iter().any(|r| {
        r == "*"
            || *r == a.resource_path()
            || a.subresource
                .as_ref()
                .is_some_and(|s| *r == format!("*/{s}"))
    });
    has(&verbs, &a.verb)
        && has(&groups, &a.api_group)
        && resource_ok
        && (names.is_empty() || a.name.as_ref().is_some_and(|n| names.contains(n)))
}

fn rules_of(state: &State, role_ref: &Value, binding_ns: Option<&str>) -> Vec<Value> {
    let name = role_ref["name"].as_str().unwrap_or_default();
    let role = match role_ref["kind"].as_str().unwrap_or_default() {
        "ClusterRole" => state
            .list(&resources::CLUSTER_ROLE, None)
            .into_iter()
            .find(|r| r["metadata"]["name"] == json!(name)),
        "Role" => binding_ns.and_then(|ns| {
            state
                .list(&resources::ROLE, Some(ns))
                .into_iter()
                .find(|r| r["metadata"]["name"] == json!(name))
        }),
        _ => None,
    };
    role.and_then(|r| r.get("rules").and_then(Value::as_array).cloned())
        .unwrap_or_default()
}

/// RBAC's rule resolution (`DefaultRuleResolver.VisitRulesFor`): the rules of every
/// ClusterRoleBinding whose subjects include `who`, in list order, then those of the
/// RoleBindings of `namespace`; and, for each binding whose role does not exist, the error the
/// real resolver reports (`clusterrole.rbac.authorization.k8s.io "x" not found`). What a
/// SelfSubjectRulesReview answers.
pub fn rules_for(state: &State, who: &Identity, namespace: &str) -> (Vec<Value>, Vec<String>) {
    let mut bindings: Vec<(Value, Option<String>)> = state
        .list(&resources::CLUSTER_ROLE_BINDING, None)
        .into_iter()
        .map(|b| (b, None))
        .collect();
    bindings.extend(
        state
            .list(&resources::ROLE_BINDING, Some(namespace))
            .into_iter()
            .map(|b| (b, Some(namespace.to_string()))),
    );
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    for (binding, ns) in &bindings {
        let Some(subjects) = binding.get("subjects").and_then(Value::as_array) else {
            continue;
        };
        if !subjects
            .iter()
            .any(|s| subject_matches(s, who, ns.as_deref()))
        {
            continue;
        }
        let role_ref = &binding["roleRef"];
        let kind = role_ref["kind"].as_str().unwrap_or_default();
        let name = role_ref["name"].as_str().unwrap_or_default();
        let exists = match kind {
            "ClusterRole" => state
                .list(&resources::CLUSTER_ROLE, None)
                .iter()
                .any(|r| r["metadata"]["name"] == json!(name)),
            "Role" => ns.as_deref().is_some_and(|ns| {
                state
                    .list(&resources::ROLE, Some(ns))
                    .iter()
                    .any(|r| r["metadata"]["name"] == json!(name))
            }),
            _ => false,
        };
        if !exists {
            errors.push(format!(
                "{}.rbac.authorization.k8s.io {name:?} not found",
                kind.to_lowercase()
            ));
            continue;
        }
        rules.extend(rules_of(state, role_ref, ns.as_deref()));
    }
    (rules, errors)
}

/// RBAC's decision: a ClusterRoleBinding grants everywhere, a RoleBinding only in its namespace.
pub fn allowed(state: &State, who: &Identity, a: &RbacRequest) -> bool {
    allowed_by(state, who, a).is_some()
}

/// How RBAC's answer reads in a SubjectAccessReview: `None` when nothing allows the request,
/// else the real authorizer's reason, `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole
/// "r" to ServiceAccount "sa/ns"` (empty for `system:masters`, which the real server lets
/// through before RBAC is asked).
pub fn allowed_by(state: &State, who: &Identity, a: &RbacRequest) -> Option<String> {
    if who.is_master() {
        return Some(String::new());
    }
    let mut bindings: Vec<(Value, Option<String>)> = state
        .list(&resources::CLUSTER_ROLE_BINDING, None)
        .into_iter()
        .map(|b| (b, None))
        .collect();
    if let Some(ns) = &a.namespace {
        bindings.extend(
            state
                .list(&resources::ROLE_BINDING, Some(ns))
                .into_iter()
                .map(|b| (b, Some(ns.clone()))),
        );
    }
    bindings.iter().find_map(|(b, ns)| {
        let subjects = b.get("subjects").and_then(Value::as_array)?;
        let subject = subjects
            .iter()
            .find(|s| subject_matches(s, who, ns.as_deref()))?;
        rules_of(state, &b["roleRef"], ns.as_deref())
            .iter()
            .any(|r| rule_allows(r, a))
            .then(|| describe(b, subject, ns.as_deref()))
    })
}

fn describe(binding: &Value, subject: &Value, binding_ns: Option<&str>) -> String {
    let name = binding["metadata"]["name"].as_str().unwrap_or_default();
    let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
    let role = binding["roleRef"]["name"].as_str().unwrap_or_default();
    let kind = subject["kind"].as_str().unwrap_or_default();
    let subject_name = subject["name"].as_str().unwrap_or_default();
    let subject = if kind == "ServiceAccount" {
        let ns = subject["namespace"]
            .as_str()
            .filter(|s| !s.is_empty())
            .or(binding_ns)
            .unwrap_or_default();
        format!("{kind} {:?}", format!("{subject_name}/{ns}"))
    } else {
        format!("{kind} {subject_name:?}")
    };
    match binding_ns {
        None => format!(
            "RBAC: allowed by ClusterRoleBinding {name:?} of {role_kind} {role:?} to {subject}"
        ),
        Some(ns) => format!(
            "RBAC: allowed by RoleBinding {:?} of {role_kind} {role:?} to {subject}",
            format!("{name}/{ns}")
        ),
    }
}

/// Who sent the request before any impersonation: the fake's default identity, else the admin.
fn caller(state: &State) -> Identity {
    match &state.default_user {
        Some(user) => Identity::named(user, Vec::new()),
        None => Identity::admin(),
    }
}

/// Who the request acts as: the impersonated identity, else the caller. Only meaningful once
/// [`authorize`] let the request through (the impersonation itself is authorized there).
pub fn requester(state: &State, parts: &http::request::Parts) -> Identity {
    impersonated(parts).unwrap_or_else(|| caller(state))
}

/// The second decision of a server-side apply that finds no object: the real patch handler
/// authorizes it as a `create` of that name (after the filter authorized the `patch`), dry
/// run or not, so an account allowed to patch but not to create cannot bring an object into
/// existence by applying it. Logged like any decision; `Err` is the real 403.
pub fn authorize_create_on_apply(
    state: &mut State,
    parts: &http::request::Parts,
    t: &Target,
    query: &Query,
) -> Result<(), ApiError> {
    let who = requester(state, parts);
    let a = RbacRequest {
        verb: "create".into(),
        api_group: t.rt.group.into(),
        resource: t.rt.plural.into(),
        subresource: t.subresource.clone(),
        namespace: t.namespace.clone(),
        name: t.name.clone(),
        user: who.user.clone(),
        groups: who.groups.clone(),
        dry_run: query.dry_run(),
        allowed: false,
    };
    let ok = allowed(state, &who, &a);
    state.rbac_log.push(RbacRequest { allowed: ok, ..a });
    if ok {
        Ok(())
    } else {
        Err(forbidden(state.rbac_log.last().expect("just pushed")))
    }
}

/// Resolves who the request is made as and authorizes it (impersonation first, as the real
/// filter chain does), logging every decision. `Err` is the real 403.
pub fn authorize(
    state: &mut State,
    parts: &http::request::Parts,
    t: &Target,
    query: &Query,
    body: &Value,
) -> Result<(), ApiError> {
    let caller = caller(state);
    let dry_run = is_dry_run(&parts.method, query, body);
    let who = match impersonated(parts) {
        None => caller,
        Some(target) => {
            let mut checks = Vec::new();
            match service_account(&target.user) {
                Some((ns, name)) => checks.push(("serviceaccounts", Some(ns), name.to_string())),
                None => checks.push(("users", None, target.user.clone())),
            }
            let explicit_groups = parts.headers.get_all("impersonate-group");
            for g in explicit_groups.iter().filter_map(|v| v.to_str().ok()) {
                checks.push(("groups", None, g.to_string()));
            }
            for (resource, ns, name) in checks {
                let a = RbacRequest {
                    verb: "impersonate".into(),
                    api_group: String::new(),
                    resource: resource.into(),
                    subresource: None,
                    namespace: ns.map(str::to_string),
                    name: Some(name),
                    user: caller.user.clone(),
                    groups: caller.groups.clone(),
                    dry_run,
                    allowed: false,
                };
                let ok = allowed(state, &caller, &a);
                state.rbac_log.push(RbacRequest { allowed: ok, ..a });
                if !ok {
                    return Err(forbidden(state.rbac_log.last().expect("just pushed")));
                }
            }
            target
        }
    };
    let a = RbacRequest {
        verb: verb(&parts.method, t, query).into(),
        api_group: t.rt.group.into(),
        resource: t.rt.plural.into(),
        subresource: t.subresource.clone(),
        namespace: t.namespace.clone(),
        name: t.name.clone(),
        user: who.user.clone(),
        groups: who.groups.clone(),
        dry_run,
        allowed: false,
    };
    let ok = allowed(state, &who, &a);
    state.rbac_log.push(RbacRequest { allowed: ok, ..a });
    if ok {
        Ok(())
    } else {
        Err(forbidden(state.rbac_log.last().expect("just pushed")))
    }
}
