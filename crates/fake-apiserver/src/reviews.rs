//! The review APIs a client asks about itself: `SelfSubjectReview` (who am I) and
//! `SelfSubjectAccessReview` (may I), answered from the same identity resolution and RBAC
//! evaluation as every request (`authz`), so a component's start-up access check sees exactly
//! what its requests will meet; and the two a server asks about its own callers, as
//! controller-runtime's authenticated metrics do: `TokenReview` (who holds this bearer token,
//! from the tokens a test made known with `FakeApiServer::add_token`) and
//! `SubjectAccessReview` (may this user, with these groups, do that), evaluated by the same
//! RBAC. None is stored. Creating one is authorized like any request:
//! a fresh fake grants it to every authenticated user through `system:basic-user`, as a real
//! cluster's bootstrap policy does ([`basic_user`]).

use serde_json::{Value, json};

use super::authz;
use super::errors::{ApiError, Cause, VerbResult};
use super::identity::{Identity, RbacRequest};
use super::request::Target;
use super::resources::ResourceType;
use super::store::State;

const fn review(group: &'static str, kind: &'static str, plural: &'static str) -> ResourceType {
    ResourceType {
        group,
        version: "v1",
        kind,
        plural,
        singular: "",
        short_names: &[],
        namespaced: false,
        status_subresource: false,
        has_generation: false,
        returns_deleted_object: false,
        custom: false,
    }
}

pub const SELF_SUBJECT_REVIEW: ResourceType = review(
    "authentication.k8s.io",
    "SelfSubjectReview",
    "selfsubjectreviews",
);
pub const SELF_SUBJECT_ACCESS_REVIEW: ResourceType = review(
    "authorization.k8s.io",
    "SelfSubjectAccessReview",
    "selfsubjectaccessreviews",
);

pub const SELF_SUBJECT_RULES_REVIEW: ResourceType = review(
    "authorization.k8s.io",
    "SelfSubjectRulesReview",
    "selfsubjectrulesreviews",
);

pub const TOKEN_REVIEW: ResourceType =
    review("authentication.k8s.io", "TokenReview", "tokenreviews");
pub const SUBJECT_ACCESS_REVIEW: ResourceType = review(
    "authorization.k8s.io",
    "SubjectAccessReview",
    "subjectaccessreviews",
);

/// The review types served (create only), for routing and discovery.
pub const ALL: &[ResourceType] = &[
    SELF_SUBJECT_REVIEW,
    SELF_SUBJECT_ACCESS_REVIEW,
    SELF_SUBJECT_RULES_REVIEW,
    TOKEN_REVIEW,
    SUBJECT_ACCESS_REVIEW,
];

/// The audience the real server's service-account tokens carry by default.
const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// What the real token authenticators answer to a token none of them knows (the union of
/// their errors; the JWT one reads it first).
const INVALID_TOKEN: &str =
    "[invalid bearer token, go-jose/go-jose: compact JWS format must have three parts]";

/// The collection path of a review type, the only path it is served at.
pub fn route(path: &str) -> Option<Target> {
    ALL.iter()
        .find(|rt| path.trim_end_matches('/') == format!("/apis/{}/v1/{}", rt.group, rt.plural))
        .map(|rt| Target {
            rt: *rt,
            namespace: None,
            name: None,
            subresource: None,
        })
}

/// The real server's bootstrap `system:basic-user` ClusterRole and its binding to every
/// authenticated user: what lets anyone ask who they are and what they may do.
pub fn basic_user() -> [Value; 2] {
    let meta = |name: &str| {
        json!({"name": name,
               "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
               "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}})
    };
    [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": meta("system:basic-user"),
            "rules": [
                {"apiGroups": ["authorization.k8s.io"],
                 "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                 "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"],
                 "verbs": ["create"]},
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": meta("system:basic-user"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:basic-user"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": "system:authenticated"}],
        }),
    ]
}

/// Answers an (already authorized) `POST` of a review as the requester.
pub fn answer(state: &State, parts: &http::request::Parts, t: &Target, body: &Value) -> VerbResult {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request is not an object",
        ));
    }
    if t.rt == TOKEN_REVIEW {
        return token_review(state, body);
    }
    let mut who = authz::requester(state, parts);
    if t.rt == SELF_SUBJECT_RULES_REVIEW {
        return rules_review(state, &who, body);
    }
    if t.rt == SUBJECT_ACCESS_REVIEW {
        // The subject is the spec's user and groups, as given: nothing is added to them.
        let spec = &body["spec"];
        let user = spec["user"].as_str().unwrap_or_default().to_string();
        let groups: Vec<String> = spec["groups"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|g| g.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if user.is_empty() && groups.is_empty() {
            return Err(ApiError::invalid_kind(
                "SubjectAccessReview.authorization.k8s.io",
                t.rt.group,
                t.rt.kind,
                "",
                &[Cause::invalid(
                    "spec.user",
                    "\"\"",
                    "at least one of user or group must be specified",
                )],
            ));
        }
        who = Identity { user, groups };
    }
    if t.rt == SELF_SUBJECT_REVIEW {
        return Ok((
            201,
            json!({
                "kind": "SelfSubjectReview",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": super::store::now()},
                "status": {"userInfo": {"username": who.user, "groups": who.groups}},
            }),
        ));
    }
    let spec = &body["spec"];
    let resource = spec.get("resourceAttributes").filter(|v| v.is_object());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    let cause = match (resource, non_resource) {
        (Some(_), Some(_)) => Some(Cause::invalid(
            "spec.nonResourceAttributes",
            "\"object\"",
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => Some(Cause::invalid(
            "spec.resourceAttributes",
            "\"null\"",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => None,
    };
    if let Some(cause) = cause {
        return Err(ApiError::invalid_kind(
            &format!("{}.{}", t.rt.kind, t.rt.group),
            t.rt.group,
            t.rt.kind,
            "",
            &[cause],
        ));
    }
    // Non-resource URLs are not modelled: only `system:masters` may reach them here.
    let reason = match resource {
        Some(attrs) => {
            let field = |k: &str| {
                attrs[k]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
            };
            let asked = RbacRequest {
                verb: field("verb").unwrap_or_default(),
                api_group: field("group").unwrap_or_default(),
                resource: field("resource").unwrap_or_default(),
                subresource: field("subresource"),
                // An empty namespace asks for all namespaces: only cluster-wide grants count.
                namespace: field("namespace"),
                name: field("name"),
                user: who.user.clone(),
                groups: who.groups.clone(),
                dry_run: false,
                allowed: false,
            };
            authz::allowed_by(state, &who, &asked)
        }
        None => who.is_master().then(String::new),
    };
    let mut status = json!({"allowed": reason.is_some()});
    if let Some(reason) = reason.filter(|r| !r.is_empty()) {
        status["reason"] = json!(reason);
    }
    let mut metadata = body["metadata"].clone();
    if !metadata.is_object() {
        metadata = json!({});
    }
    metadata["creationTimestamp"] = Value::Null;
    Ok((
        201,
        json!({
            "kind": t.rt.kind,
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": metadata,
            "spec": spec,
            "status": status,
        }),
    ))
}

/// A SelfSubjectRulesReview, as `selfsubjectrulesreview.REST.Create` answers it: 400
/// `no namespace on request` without `spec.namespace`; else only a `status` (the spec is not
/// echoed: the real handler builds a new object) with the requester's RBAC rules in that
/// namespace (`authz::rules_for`: every ClusterRoleBinding's, then the namespace's
/// RoleBindings', a rule with resources listed under `resourceRules`, one with
/// non-resource URLs under `nonResourceRules`), `incomplete: false`, and `evaluationError`
/// naming a binding whose role is missing. `system:masters` is no rule resolver on a real
/// server either: its members see their RBAC rules only.
fn rules_review(state: &State, who: &Identity, body: &Value) -> VerbResult {
    let namespace = body["spec"]["namespace"].as_str().unwrap_or_default();
    if namespace.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    let (rules, errors) = authz::rules_for(state, who, namespace);
    let list = |rule: &Value, key: &str| {
        rule.get(key)
            .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
            .cloned()
    };
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in &rules {
        if list(rule, "resources").is_some() {
            let mut r = serde_json::Map::new();
            r.insert(
                "verbs".into(),
                rule.get("verbs").cloned().unwrap_or(json!([])),
            );
            for key in ["apiGroups", "resources", "resourceNames"] {
                if let Some(v) = list(rule, key) {
                    r.insert(key.into(), v);
                }
            }
            resource_rules.push(Value::Object(r));
        }
        if let Some(urls) = list(rule, "nonResourceURLs") {
            non_resource_rules.push(json!({
                "verbs": rule.get("verbs").cloned().unwrap_or(json!([])),
                "nonResourceURLs": urls,
            }));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    let mut seen = std::collections::HashSet::new();
    let errors: Vec<String> = errors
        .into_iter()
        .filter(|e| seen.insert(e.clone()))
        .collect();
    if !errors.is_empty() {
        // utilerrors.NewAggregate's text: duplicates once, one error as is, several `[a, b]`.
        status["evaluationError"] = json!(if errors.len() == 1 {
            errors[0].clone()
        } else {
            format!("[{}]", errors.join(", "))
        });
    }
    Ok((
        201,
        json!({
            "kind": "SelfSubjectRulesReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": {},
            "status": status,
        }),
    ))
}

/// A TokenReview: the spec as sent (the token included, as the real server echoes it), the
/// status from the known tokens. An unknown token is `authenticated` omitted (false),
/// `user: {}` and the authenticators' error, still 201.
fn token_review(state: &State, body: &Value) -> VerbResult {
    let token = body["spec"]["token"].as_str().unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let status = match state.tokens.iter().find(|(t, _)| t == token) {
        Some((_, known)) => json!({
            "authenticated": true,
            "user": {
                "username": known.identity.user,
                "uid": known.uid,
                "groups": known.identity.groups,
                "extra": known.extra,
            },
            "audiences": [API_AUDIENCE],
        }),
        None => json!({"user": {}, "error": INVALID_TOKEN}),
    };
    let mut metadata = body["metadata"].clone();
    if !metadata.is_object() {
        metadata = json!({});
    }
    metadata["creationTimestamp"] = Value::Null;
    Ok((
        201,
        json!({
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": metadata,
            "spec": body["spec"],
            "status": status,
        }),
    ))
}
