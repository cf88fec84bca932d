//! The fake's `pods/eviction` subresource and PodDisruptionBudgets (issue #38), as kube-apiserver
//! serves them (`pkg/registry/core/pod/storage/eviction.go`) and the disruption controller keeps
//! a budget's status: a 201 `Status` `Success` and the pod deleted (the StatefulSet controller
//! makes its successor); the real 429 `Cannot evict pod as it would violate the pod's disruption
//! budget.` with its `DisruptionBudget` cause, and nothing written; the uid precondition's 409;
//! an unready pod evicted while the budget is met; the Eviction's own checks.

use std::time::Duration;

use fake_apiserver::{FakeApiServer, KubeVersion};
use serde_json::{Value, json};

const NS: &str = "default";

async fn raw(fake: &FakeApiServer, method: &str, path: &str, body: Value) -> (u16, Value) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .unwrap();
    let resp = fake.client().send(req).await.expect("the fake answers");
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), usize::MAX)
        .await
        .unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// `db`, three pods Running and Ready (the StatefulSet controller on, nodes to run them).
pub async fn cluster(version: KubeVersion) -> FakeApiServer {
    let fake = FakeApiServer::with_version(version);
    fake.enable_statefulset_controller();
    fake.set_pods_ready(true);
    fake.seed(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {"serviceName": "db", "replicas": 3, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "db", "image": "postgres:16"}]}}},
    }));
    for _ in 0..3000 {
        if (0..3).all(|i| pod(&fake, i).is_some_and(|p| ready(&p))) {
            return fake;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the pods never ran");
}

pub fn pod(fake: &FakeApiServer, ordinal: usize) -> Option<Value> {
    fake.get("v1", "Pod", Some(NS), &format!("db-{ordinal}"))
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().unwrap().to_string()
}

/// A budget over `db`'s pods keeping `min_available`.
pub async fn budget(fake: &FakeApiServer, min_available: i64) {
    let (code, body) = raw(
        fake,
        "POST",
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "db"},
               "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "db"}}}}),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

fn eviction(name: &str, uid: Option<&str>) -> Value {
    let mut e = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": name, "namespace": NS}});
    if let Some(uid) = uid {
        e["deleteOptions"] = json!({"preconditions": {"uid": uid}});
    }
    e
}

async fn evict(fake: &FakeApiServer, name: &str, uid: Option<&str>) -> (u16, Value) {
    raw(
        fake,
        "POST",
        &format!("/api/v1/namespaces/default/pods/{name}/eviction"),
        eviction(name, uid),
    )
    .await
}

fn pdb(fake: &FakeApiServer) -> Value {
    fake.get("policy/v1", "PodDisruptionBudget", Some(NS), "db")
        .unwrap()
}

#[tokio::test]
async fn an_eviction_without_a_budget_deletes_the_pod_and_its_successor_comes() {
    let fake = cluster(KubeVersion::V1_36).await;
    let before = uid(&pod(&fake, 2).unwrap());
    fake.clear_requests();
    let (code, body) = evict(&fake, "db-2", Some(&before)).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
    );
    let after = pod(&fake, 2).expect("the StatefulSet controller made its successor");
    assert_ne!(uid(&after), before);
    assert!(ready(&after));
    // The RBAC attributes of the request: create on pods/eviction.
    let asked = fake.rbac_requests();
    assert!(
        asked
            .iter()
            .any(|r| r.verb == "create" && r.resource_path() == "pods/eviction"),
        "{asked:?}"
    );
}

#[tokio::test]
async fn a_budget_allowing_no_disruption_answers_the_real_429_and_writes_nothing() {
    let fake = cluster(KubeVersion::V1_36).await;
    budget(&fake, 3).await;
    let status = &pdb(&fake)["status"];
    assert_eq!(status["disruptionsAllowed"], 0, "{status}");
    assert_eq!(status["currentHealthy"], 3);
    assert_eq!(status["desiredHealthy"], 3);
    assert_eq!(status["expectedPods"], 3);
    let before = uid(&pod(&fake, 1).unwrap());
    let rv = fake.resource_version();
    let (code, body) = evict(&fake, "db-1", Some(&before)).await;
    assert_eq!(code, 429, "{body}");
    assert_eq!(
        body,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "reason": "TooManyRequests",
            "details": {"causes": [{"reason": "DisruptionBudget",
                                    "message": "The disruption budget db needs 3 healthy pods and has 3 currently"}]},
            "code": 429,
        })
    );
    assert_eq!(fake.resource_version(), rv, "nothing written");
    assert_eq!(uid(&pod(&fake, 1).unwrap()), before);
}

#[tokio::test]
async fn a_budget_with_room_spends_one_disruption_and_recovers_with_the_successor() {
    let fake = cluster(KubeVersion::V1_36).await;
    budget(&fake, 2).await;
    assert_eq!(pdb(&fake)["status"]["disruptionsAllowed"], 1);
    let (code, body) = evict(&fake, "db-0", None).await;
    assert_eq!(code, 201, "{body}");
    // The successor is Ready at once here: the budget is whole again, and the evicted pod's
    // `disruptedPods` entry went with it.
    let status = &pdb(&fake)["status"];
    assert_eq!(status["disruptionsAllowed"], 1, "{status}");
    assert!(status.get("disruptedPods").is_none(), "{status}");
    // A pod that is not Ready (no node would start it again): the budget now has no room for
    // a healthy one, but the unready one may go, the budget being met without it.
    fake.set_pods_ready(false);
    fake.modify("v1", "Pod", Some(NS), "db-1", |p| {
        p["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
    });
    let status = &pdb(&fake)["status"];
    assert_eq!(status["disruptionsAllowed"], 0, "{status}");
    assert_eq!(status["currentHealthy"], 2, "{status}");
    let (code, _) = evict(&fake, "db-2", None).await;
    assert_eq!(code, 429);
    let (code, body) = evict(&fake, "db-1", None).await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn an_eviction_names_its_pod_and_its_preconditions_hold() {
    let fake = cluster(KubeVersion::V1_32).await;
    let (code, body) = raw(
        &fake,
        "POST",
        "/api/v1/namespaces/default/pods/db-0/eviction",
        eviction("db-1", None),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        body["message"],
        "name in URL does not match name in Eviction object"
    );
    let (code, body) = evict(&fake, "db-9", None).await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["message"], "pods \"db-9\" not found");
    let (code, body) = evict(&fake, "db-0", Some("not-its-uid")).await;
    assert_eq!(code, 409, "{body}");
    let current = uid(&pod(&fake, 0).unwrap());
    assert_eq!(
        body["message"],
        format!(
            "Operation cannot be fulfilled on Pod \"db-0\": the UID in the precondition \
             (not-its-uid) does not match the UID in record ({current}). The object might have \
             been deleted and then recreated"
        )
    );
    // GET is not a verb of the subresource.
    let (code, _) = raw(
        &fake,
        "GET",
        "/api/v1/namespaces/default/pods/db-0/eviction",
        Value::Null,
    )
    .await;
    assert_eq!(code, 405);
}
