//! The fake API server authorises as the real one where the shipped RBAC depends on it: an
//! apply that creates is a `create`, and SelfSubjectAccessReview answers from the same rules.
//! Bodies are compared with the real server's recorded answers
//! (tests/fixtures/conformance/real-v1.32.6.json), in the recorded namespace and account.

use serde_json::{Value, json};

use fake_apiserver::FakeApiServer;

const NS: &str = "fd32d";
const SA: &str = "system:serviceaccount:fd32d:fd-sa";
const SSA: &str = "application/apply-patch+yaml";

/// The real answer of step `name` in the recorded replay: (code, body).
fn recorded(name: &str) -> (u16, Value) {
    let path = fake_apiserver::fixture_path("conformance/real-v1.32.6.json");
    let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let step = all
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no recorded step {name}"))
        .clone();
    (step["code"].as_u64().unwrap() as u16, step["body"].clone())
}

async fn call(
    client: &kube::Client,
    method: &str,
    path: &str,
    impersonate: Option<&str>,
    content_type: &str,
    body: Value,
) -> (u16, Value) {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type);
    if let Some(user) = impersonate {
        req = req.header("Impersonate-User", user);
    }
    let resp = client
        .send(
            req.body(kube::client::Body::from(body.to_string().into_bytes()))
                .unwrap(),
        )
        .await
        .expect("the fake answers");
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), usize::MAX)
        .await
        .unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn statefulset(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": name, "labels": {"app": "web"}},
           "spec": {"replicas": replicas, "serviceName": "web",
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}}})
}

fn only_status_fields(body: &Value) -> Value {
    let mut out = json!({});
    for k in ["kind", "status", "reason", "message", "code", "details"] {
        out[k] = body[k].clone();
    }
    out
}

/// An account that may `get` and `patch` StatefulSets, not `create` them (the recorded setup).
fn world() -> FakeApiServer {
    let fake = FakeApiServer::new();
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    fake.grant(
        NS,
        SA,
        json!([{"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "patch"]}]),
    );
    fake
}

#[tokio::test]
async fn an_apply_that_creates_is_authorised_as_create_and_one_that_updates_as_patch() {
    let fake = world();
    let client = fake.client();
    let path = |name: &str, dry: bool| {
        format!(
            "/apis/apps/v1/namespaces/{NS}/statefulsets/{name}?fieldManager=kustomize-controller&force=true{}",
            if dry { "&dryRun=All" } else { "" }
        )
    };
    for (step, dry) in [
        ("08.imp.ssa-create-needs-create-verb", false),
        ("08.imp.ssa-create-dry-run-needs-create-verb", true),
    ] {
        let (code, body) = call(
            &client,
            "PATCH",
            &path("imp-new", dry),
            Some(SA),
            SSA,
            statefulset("imp-new", 1),
        )
        .await;
        let (real_code, real_body) = recorded(step);
        assert_eq!(code, real_code, "{step}: {body}");
        assert_eq!(
            only_status_fields(&body),
            only_status_fields(&real_body),
            "{step}"
        );
    }
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(NS), "imp-new")
            .is_none()
    );
    // Created by the admin, the same apply as the account is an update: `patch` is enough.
    let (code, _) = call(
        &client,
        "PATCH",
        &path("imp-old", false),
        None,
        SSA,
        statefulset("imp-old", 1),
    )
    .await;
    assert_eq!(code, 201);
    fake.clear_rbac_requests();
    let (code, body) = call(
        &client,
        "PATCH",
        &path("imp-old", false),
        Some(SA),
        SSA,
        statefulset("imp-old", 2),
    )
    .await;
    assert_eq!(
        code,
        recorded("08.imp.ssa-update-needs-patch-verb").0,
        "{body}"
    );
    assert_eq!(body["spec"]["replicas"], 2);
    let asked: Vec<String> = fake
        .rbac_requests()
        .iter()
        .filter(|r| r.user == SA)
        .map(|r| r.verb.clone())
        .collect();
    assert_eq!(asked, ["patch"], "an update asks no create");
    // The create decision is logged after the patch one, so a shipped role is proven on both.
    fake.clear_rbac_requests();
    call(
        &client,
        "PATCH",
        &path("imp-new", true),
        Some(SA),
        SSA,
        statefulset("imp-new", 1),
    )
    .await;
    let asked: Vec<(String, bool, bool)> = fake
        .rbac_requests()
        .iter()
        .filter(|r| r.user == SA)
        .map(|r| (r.verb.clone(), r.dry_run, r.allowed))
        .collect();
    assert_eq!(
        asked,
        [("patch".into(), true, true), ("create".into(), true, false)]
    );
}

fn review(attrs: Value) -> Value {
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
           "spec": {"resourceAttributes": attrs}})
}

const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

#[tokio::test]
async fn self_subject_access_review_answers_from_the_same_rbac_for_the_impersonated_account() {
    let fake = world();
    let client = fake.client();
    let ask = |attrs: Value| {
        let client = client.clone();
        async move {
            call(
                &client,
                "POST",
                SSAR,
                Some(SA),
                "application/json",
                review(attrs),
            )
            .await
        }
    };
    let (code, body) =
        ask(json!({"namespace": NS, "verb": "patch", "group": "apps", "resource": "statefulsets"}))
            .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["kind"], "SelfSubjectAccessReview");
    assert_eq!(body["metadata"]["creationTimestamp"], Value::Null);
    assert_eq!(body["spec"]["resourceAttributes"]["verb"], "patch");
    assert_eq!(
        body["status"],
        json!({"allowed": true,
               "reason": format!("RBAC: allowed by RoleBinding \"grant-0/{NS}\" of Role \"grant-0\" to ServiceAccount \"fd-sa/{NS}\"")})
    );
    // What the account cannot do: no reason, not `denied` (RBAC only ever has no opinion).
    for attrs in [
        json!({"namespace": NS, "verb": "create", "group": "apps", "resource": "statefulsets"}),
        json!({"namespace": "default", "verb": "patch", "group": "apps", "resource": "statefulsets"}),
        // All namespaces: a RoleBinding in one does not count.
        json!({"verb": "patch", "group": "apps", "resource": "statefulsets"}),
        json!({"namespace": NS, "verb": "patch", "group": "apps", "resource": "statefulsets", "subresource": "scale"}),
    ] {
        let (code, body) = ask(attrs.clone()).await;
        assert_eq!(code, 201);
        assert_eq!(body["status"], json!({"allowed": false}), "{attrs}");
    }
    // Without impersonation: the kubeconfig admin, allowed by system:masters before RBAC.
    let (_, body) = call(
        &client,
        "POST",
        SSAR,
        None,
        "application/json",
        review(json!({"verb": "delete", "resource": "nodes"})),
    )
    .await;
    assert_eq!(body["status"], json!({"allowed": true}));
    // Asking is itself a request: `create selfsubjectaccessreviews`, allowed to every
    // authenticated user by system:basic-user.
    let log = fake.rbac_requests();
    let asked = log
        .iter()
        .find(|r| r.user == SA && r.resource == "selfsubjectaccessreviews")
        .expect("the review was authorised");
    assert_eq!(
        (asked.verb.as_str(), asked.api_group.as_str(), asked.allowed),
        ("create", "authorization.k8s.io", true)
    );
    // Exactly one of resourceAttributes and nonResourceAttributes.
    let (code, body) = call(
        &client,
        "POST",
        SSAR,
        Some(SA),
        "application/json",
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}}),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    // Served in discovery, create only.
    let (code, list) = call(
        &client,
        "GET",
        "/apis/authorization.k8s.io/v1",
        None,
        "application/json",
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        list["resources"],
        json!([{"name": "selfsubjectaccessreviews", "singularName": "", "namespaced": false,
                "kind": "SelfSubjectAccessReview", "verbs": ["create"]},
               {"name": "selfsubjectrulesreviews", "singularName": "", "namespaced": false,
                "kind": "SelfSubjectRulesReview", "verbs": ["create"]},
               {"name": "subjectaccessreviews", "singularName": "", "namespaced": false,
                "kind": "SubjectAccessReview", "verbs": ["create"]}])
    );
}

/// A TokenReview answers who holds a known token (a service account with its groups, uid and
/// bound-token extra, the API audience), an unknown one unauthenticated with the
/// authenticators' error, both 201 with the spec echoed; a SubjectAccessReview answers for the
/// user and groups given, from the same RBAC, and needs one of them (422).
/// SelfSubjectRulesReview as `selfsubjectrulesreview.REST.Create` answers it over RBAC's rule
/// resolution (kubernetes pkg/registry/authorization/selfsubjectrulesreview, the RBAC
/// authorizer's `RulesFor`): the ClusterRoleBindings' rules, then those of the namespace's
/// RoleBindings, each rule listing resources under `resourceRules` and one listing URLs under
/// `nonResourceRules`; only `status` in the answer (the spec is not echoed); 400 without a
/// namespace; a binding to a missing role named in `evaluationError`; `system:masters` is no
/// rule resolver, so the admin sees its RBAC rules alone.
#[tokio::test]
async fn self_subject_rules_review_lists_rbac_rules_as_the_real_server() {
    const SSRR: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
    let fake = world();
    fake.seed(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                     "metadata": {"name": "reader"},
                     "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
                                "resourceNames": ["settings"]},
                               {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]}),
    );
    for (name, role) in [("reader", "reader"), ("dangling", "no-such-role")] {
        fake.seed(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                         "metadata": {"name": name},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                         "subjects": [{"kind": "ServiceAccount", "name": "fd-sa", "namespace": NS}]}));
    }
    let client = fake.client();
    let ask = |namespace: Option<&str>, who: Option<&str>| {
        let client = client.clone();
        let mut body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {}});
        if let Some(ns) = namespace {
            body["spec"]["namespace"] = json!(ns);
        }
        let who = who.map(String::from);
        async move {
            call(
                &client,
                "POST",
                SSRR,
                who.as_deref(),
                "application/json",
                body,
            )
            .await
        }
    };
    let basic_user = json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]});
    let self_review = json!({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
                             "resources": ["selfsubjectreviews"]});
    // The order of the rules is the resolver's (the informer caches' on a real server): not
    // defined, so compared as a set.
    let sorted = |rules: &Value| {
        let mut rules: Vec<String> = rules
            .as_array()
            .unwrap()
            .iter()
            .map(Value::to_string)
            .collect();
        rules.sort();
        rules
    };
    let (code, mut body) = ask(Some(NS), Some(SA)).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        sorted(&body["status"]["resourceRules"]),
        sorted(&json!([
            basic_user, self_review,
            {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["settings"]},
            {"verbs": ["get", "patch"], "apiGroups": ["apps"], "resources": ["statefulsets"]},
        ]))
    );
    body["status"]["resourceRules"] = json!([]);
    assert_eq!(
        body,
        json!({
            "kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": null}, "spec": {},
            "status": {
                "resourceRules": [],
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
                "incomplete": false,
                "evaluationError": "clusterrole.rbac.authorization.k8s.io \"no-such-role\" not found",
            },
        })
    );
    // Another namespace: the RoleBinding of NS does not count there.
    let (_, body) = ask(Some("default"), Some(SA)).await;
    let rules = body["status"]["resourceRules"].as_array().unwrap();
    assert_eq!(rules.len(), 3, "{body}");
    assert!(
        !rules.iter().any(|r| r["apiGroups"] == json!(["apps"])),
        "{body}"
    );
    // The admin: its RBAC rules only (system:basic-user's), not everything it may do.
    let (_, body) = ask(Some(NS), None).await;
    assert_eq!(
        sorted(&body["status"]["resourceRules"]),
        sorted(&json!([basic_user, self_review])),
        "{body}"
    );
    assert_eq!(body["status"]["incomplete"], false);
    // No namespace: the real 400.
    let (code, body) = ask(None, Some(SA)).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["reason"], "BadRequest");
    assert_eq!(body["message"], "no namespace on request");
}

#[tokio::test]
async fn token_and_subject_access_reviews_answer_as_the_real_server() {
    let fake = FakeApiServer::new();
    fake.add_token("t0ken", "system:serviceaccount:apps:reader", &[]);
    fake.grant(
        "apps",
        "system:serviceaccount:apps:reader",
        json!([{"apiGroups": ["kustomize.toolkit.fluxcd.io"], "resources": ["kustomizations"],
                "verbs": ["get"]}]),
    );
    let client = fake.client();
    let review = |token: &str| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
               "spec": {"token": token}})
    };
    let path = "/apis/authentication.k8s.io/v1/tokenreviews";
    let (code, known) = call(
        &client,
        "POST",
        path,
        None,
        "application/json",
        review("t0ken"),
    )
    .await;
    assert_eq!(code, 201, "{known}");
    assert_eq!(known["spec"]["token"], "t0ken");
    let status = &known["status"];
    assert_eq!(status["authenticated"], true);
    assert_eq!(
        status["user"]["username"],
        "system:serviceaccount:apps:reader"
    );
    assert_eq!(
        status["user"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:apps",
            "system:authenticated"
        ])
    );
    assert!(
        status["user"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert!(status["user"]["extra"]["authentication.kubernetes.io/credential-id"].is_array());
    assert_eq!(
        status["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    let (code, unknown) = call(&client, "POST", path, None, "application/json", review("x")).await;
    assert_eq!(code, 201);
    assert_eq!(unknown["status"]["user"], json!({}));
    assert!(
        unknown["status"].get("authenticated").is_none(),
        "{unknown}"
    );
    assert!(
        unknown["status"]["error"]
            .as_str()
            .unwrap()
            .starts_with("[invalid bearer token")
    );
    let (code, _) = call(&client, "POST", path, None, "application/json", review("")).await;
    assert_eq!(code, 400);

    let sar = |user: &str, groups: Value, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": user, "groups": groups, "resourceAttributes": {
                   "verb": "get", "group": "kustomize.toolkit.fluxcd.io",
                   "resource": "kustomizations", "namespace": ns, "name": "web"}}})
    };
    let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let reader = "system:serviceaccount:apps:reader";
    for (case, body, allowed) in [
        ("granted in apps", sar(reader, json!([]), "apps"), true),
        (
            "not in another namespace",
            sar(reader, json!([]), "other"),
            false,
        ),
        (
            "masters, as given",
            sar("x", json!(["system:masters"]), "other"),
            true,
        ),
    ] {
        let (code, answer) = call(&client, "POST", path, None, "application/json", body).await;
        assert_eq!(code, 201, "{case}: {answer}");
        assert_eq!(answer["kind"], "SubjectAccessReview", "{case}");
        assert_eq!(answer["status"]["allowed"], allowed, "{case}: {answer}");
    }
    let (code, answer) = call(
        &client,
        "POST",
        path,
        None,
        "application/json",
        sar("", json!([]), "apps"),
    )
    .await;
    assert_eq!(code, 422, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("at least one of user or group")
    );
}

#[tokio::test]
async fn without_system_basic_user_nobody_but_the_admin_may_ask() {
    let fake = world();
    fake.remove(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        None,
        "system:basic-user",
    );
    let (code, body) = call(
        &fake.client(),
        "POST",
        SSAR,
        Some(SA),
        "application/json",
        review(
            json!({"namespace": NS, "verb": "get", "group": "apps", "resource": "statefulsets"}),
        ),
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "selfsubjectaccessreviews.authorization.k8s.io is forbidden: User \"{SA}\" cannot create resource \"selfsubjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope"
        )
    );
}
