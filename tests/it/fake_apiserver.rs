//! The fake API server's own tests: each fixture behaviour, through a real `kube::Client`, with
//! the fixture's exact status bodies. If the fake drifts from the captured server, these fail.

use std::time::Duration;

use fake_apiserver::*;
use futures::{StreamExt, TryStreamExt};
use kube::Api;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
    WatchEvent, WatchParams,
};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

fn fixture(rel: &str) -> String {
    let path = format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

fn fixture_json(rel: &str) -> Value {
    serde_json::from_str(&fixture(rel)).expect("fixture JSON parses")
}

fn fixture_yaml(rel: &str) -> Value {
    serde_saphyr::from_str(&fixture(rel)).expect("fixture YAML parses")
}

/// One raw request through the client: (status code, JSON body).
async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http::Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let resp = client
        .send(req.body(kube::client::Body::from(bytes)).unwrap())
        .await
        .expect("the fake answers");
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), usize::MAX)
        .await
        .unwrap();
    let v = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)))
    };
    (code, v)
}

const STS: &str = "/apis/apps/v1/namespaces/default/statefulsets";
const PVCS: &str = "/api/v1/namespaces/default/persistentvolumeclaims";

fn sts_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "StatefulSet"));
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn pvc_api(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "PersistentVolumeClaim"));
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn apply_params() -> PatchParams {
    PatchParams::apply("kustomize-controller").force()
}

fn meta<'a>(obj: &'a Value, field: &str) -> &'a Value {
    &obj["metadata"][field]
}

// ---------------------------------------------------------------- StatefulSet immutability

#[tokio::test]
async fn grown_template_is_forbidden_by_every_route_with_the_exact_status() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let client = fake.client();
    let want = fixture_json("v1.28/error-statefulset-update-forbidden.json");
    let desired = fixture_yaml("v1.28/desired-statefulset-2Gi.yaml");

    for query in ["", "&dryRun=All"] {
        let (code, body) = raw(
            &client,
            "PATCH",
            &format!("{STS}/web?fieldManager=kustomize-controller&force=true{query}"),
            Some("application/apply-patch+yaml"),
            Some(desired.clone()),
        )
        .await;
        assert_eq!((code, &body), (422, &want), "apply{query}");
    }
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{STS}/web"),
        Some("application/json-patch+json"),
        Some(json!([{"op": "replace", "path": "/spec/volumeClaimTemplates/0/spec/resources/requests/storage", "value": "2Gi"}])),
    )
    .await;
    assert_eq!((code, &body), (422, &want), "json patch");
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{STS}/web?dryRun=All"),
        Some("application/merge-patch+json"),
        Some(json!({"spec": {"serviceName": "other"}})),
    )
    .await;
    assert_eq!((code, &body), (422, &want), "serviceName merge patch");
    let mut live = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    live["spec"]["podManagementPolicy"] = json!("OrderedReady");
    let (code, body) = raw(
        &client,
        "PUT",
        &format!("{STS}/web"),
        Some("application/json"),
        Some(live),
    )
    .await;
    assert_eq!((code, &body), (422, &want), "replace");

    // Nothing was written.
    let after = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    assert_eq!(meta(&after, "resourceVersion"), "229");
    assert_eq!(meta(&after, "generation"), 1);
}

#[tokio::test]
async fn identical_apply_changes_neither_generation_nor_resource_version() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let api = sts_api(&fake.client(), "default");
    let desired: DynamicObject =
        serde_json::from_value(fixture_yaml("v1.28/desired-statefulset-1Gi.yaml")).unwrap();
    let out = api
        .patch("web", &apply_params(), &Patch::Apply(&desired))
        .await
        .unwrap();
    assert_eq!(out.metadata.resource_version.as_deref(), Some("229"));
    assert_eq!(out.metadata.generation, Some(1));
    let live = fixture_yaml("v1.28/live-statefulset.yaml");
    let stored = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    assert_eq!(
        stored["spec"], live["spec"],
        "defaults match the real server's"
    );
}

#[tokio::test]
async fn mutable_change_bumps_generation_and_keeps_status() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let client = fake.client();
    let mut desired = fixture_yaml("v1.28/desired-statefulset-1Gi.yaml");
    desired["spec"]["replicas"] = json!(5);
    desired["spec"]["template"]["spec"]["containers"][0]["image"] = json!("busybox:1.36");
    desired["status"] = json!({"replicas": 99});
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{STS}/web?fieldManager=kustomize-controller&force=true"),
        Some("application/apply-patch+yaml"),
        Some(desired),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(meta(&body, "generation"), 2);
    assert_ne!(meta(&body, "resourceVersion"), "229");
    assert_eq!(body["spec"]["replicas"], 5);
    assert_eq!(
        body["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(body["status"]["replicas"], 3, "status is a subresource");

    // Status writes go through /status and leave generation alone.
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{STS}/web/status"),
        Some("application/merge-patch+json"),
        Some(json!({"status": {"readyReplicas": 2}, "spec": {"replicas": 1}})),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"]["readyReplicas"], 2);
    assert_eq!(body["spec"]["replicas"], 5);
    assert_eq!(meta(&body, "generation"), 2);
}

#[tokio::test]
async fn proof_dry_run_with_live_templates_passes_and_other_immutable_fields_fail() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let client = fake.client();
    let live = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    let mut proof = fixture_yaml("v1.28/desired-statefulset-2Gi.yaml");
    proof["spec"]["volumeClaimTemplates"] = live["spec"]["volumeClaimTemplates"].clone();
    proof["spec"]["replicas"] = json!(4);
    let path = format!("{STS}/web?fieldManager=kustomize-controller&force=true&dryRun=All");
    let (code, body) = raw(
        &client,
        "PATCH",
        &path,
        Some("application/apply-patch+yaml"),
        Some(proof.clone()),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["spec"]["replicas"], 4);
    assert_eq!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .unwrap()["spec"]["replicas"],
        3,
        "a dry run writes nothing"
    );
    proof["spec"]["podManagementPolicy"] = json!("OrderedReady");
    let (code, body) = raw(
        &client,
        "PATCH",
        &path,
        Some("application/apply-patch+yaml"),
        Some(proof),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body,
        fixture_json("v1.28/error-statefulset-update-forbidden.json")
    );
}

#[tokio::test]
async fn on_delete_over_rolling_update_is_invalid_for_another_reason() {
    let fake = FakeApiServer::new();
    let mut live = fixture_yaml("v1.28/live-statefulset.yaml");
    live["metadata"]["name"] = json!("db");
    fake.seed(live);
    let mut desired = fixture_yaml("v1.28/desired-statefulset-1Gi.yaml");
    desired["metadata"]["name"] = json!("db");
    desired["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    let (code, body) = raw(
        &fake.client(),
        "PATCH",
        &format!("{STS}/db?fieldManager=kustomize-controller&force=true&dryRun=All"),
        Some("application/apply-patch+yaml"),
        Some(desired),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body,
        fixture_json("v1.28/error-statefulset-dryrun-invalid-other.json")
    );
}

#[tokio::test]
async fn selector_change_adds_a_second_cause() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let mut desired = fixture_yaml("v1.28/desired-statefulset-1Gi.yaml");
    desired["spec"]["selector"] = json!({"matchLabels": {"app": "other"}});
    let (code, body) = raw(
        &fake.client(),
        "PATCH",
        &format!("{STS}/web?fieldManager=kustomize-controller&force=true"),
        Some("application/apply-patch+yaml"),
        Some(desired),
    )
    .await;
    assert_eq!(code, 422);
    let causes = body["details"]["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 2, "{body}");
    assert_eq!(causes[0]["field"], "spec.template.metadata.labels");
    assert_eq!(causes[1]["field"], "spec");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("StatefulSet.apps \"web\" is invalid: [")
    );
}

// ---------------------------------------------------------------- PersistentVolumeClaims

fn seed_claims(fake: &FakeApiServer, version: &str) {
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    fake.seed_yaml(&fixture(&format!("{version}/pvc-pending.yaml")));
}

fn bound_claim(version: &str, name: &str, class: Option<&str>) -> Value {
    let mut pvc = fixture_yaml(&format!("{version}/pvc-bound.yaml"));
    pvc["metadata"]["name"] = json!(name);
    pvc["metadata"]["uid"] = json!(format!("uid-{name}"));
    match class {
        Some(c) => pvc["spec"]["storageClassName"] = json!(c),
        None => {
            pvc["spec"]
                .as_object_mut()
                .unwrap()
                .remove("storageClassName");
        }
    }
    pvc
}

fn grow(size: &str) -> Value {
    json!({"spec": {"resources": {"requests": {"storage": size}}}})
}

#[tokio::test]
async fn growing_an_unbound_claim_is_immutable_with_the_exact_diff() {
    for (version, kube) in [("v1.28", KubeVersion::V1_28), ("v1.32", KubeVersion::V1_32)] {
        let fake = FakeApiServer::with_version(kube);
        seed_claims(&fake, version);
        let (code, body) = raw(
            &fake.client(),
            "PATCH",
            &format!("{PVCS}/data-web-0"),
            Some("application/merge-patch+json"),
            Some(grow("2Gi")),
        )
        .await;
        assert_eq!(code, 422, "{version}");
        let want = fixture_json(&format!("{version}/error-pvc-unbound-immutable.json"));
        assert_eq!(
            body["message"].as_str().unwrap(),
            want["message"].as_str().unwrap(),
            "{version}"
        );
        assert_eq!(body, want, "{version}");
    }
}

#[tokio::test]
async fn growing_a_bound_claim_needs_an_expandable_class() {
    for (version, kube) in [("v1.28", KubeVersion::V1_28), ("v1.32", KubeVersion::V1_32)] {
        let fake = FakeApiServer::with_version(kube);
        seed_claims(&fake, version);
        fake.seed(bound_claim(version, "claim-fixed", Some("fixed")));
        fake.seed(bound_claim(version, "claim-none", None));
        fake.seed(bound_claim(version, "claim-gone", Some("deleted-class")));
        fake.seed(bound_claim(version, "claim-ok", Some("expandable")));
        let client = fake.client();
        let want = fixture_json(&format!("{version}/error-pvc-not-expandable.json"));
        for query in ["", "?dryRun=All"] {
            let (code, body) = raw(
                &client,
                "PATCH",
                &format!("{PVCS}/claim-fixed{query}"),
                Some("application/merge-patch+json"),
                Some(grow("2Gi")),
            )
            .await;
            assert_eq!((code, &body), (403, &want), "{version}{query}");
        }
        for name in ["claim-none", "claim-gone"] {
            let (code, body) = raw(
                &client,
                "PATCH",
                &format!("{PVCS}/{name}"),
                Some("application/merge-patch+json"),
                Some(grow("2Gi")),
            )
            .await;
            assert_eq!(code, 403, "{name}");
            assert_eq!(
                body["message"],
                want["message"]
                    .as_str()
                    .unwrap()
                    .replace("claim-fixed", name)
            );
        }
        let pvcs = pvc_api(&client);
        let dry = pvcs
            .patch(
                "claim-ok",
                &PatchParams::default().dry_run(),
                &Patch::Merge(grow("2Gi")),
            )
            .await
            .unwrap();
        assert_eq!(dry.data["spec"]["resources"]["requests"]["storage"], "2Gi");
        let stored = fake
            .get("v1", "PersistentVolumeClaim", Some("default"), "claim-ok")
            .unwrap();
        assert_eq!(stored["spec"]["resources"]["requests"]["storage"], "1Gi");
        let grown = pvcs
            .patch(
                "claim-ok",
                &PatchParams::default(),
                &Patch::Merge(grow("2048Mi")),
            )
            .await
            .unwrap();
        assert_eq!(
            grown.data["spec"]["resources"]["requests"]["storage"], "2Gi",
            "canonical"
        );
        assert_eq!(
            grown.data["status"]["capacity"]["storage"], "1Gi",
            "no resizer ran"
        );
    }
}

#[tokio::test]
async fn shrinking_a_claim_follows_the_version_rule() {
    let fake = FakeApiServer::new();
    seed_claims(&fake, "v1.28");
    fake.seed(fixture_yaml("v1.28/pvc-bound.yaml"));
    let (code, body) = raw(
        &fake.client(),
        "PATCH",
        &format!("{PVCS}/data-web-0"),
        Some("application/merge-patch+json"),
        Some(grow("512Mi")),
    )
    .await;
    assert_eq!(
        (code, body),
        (422, fixture_json("v1.28/error-pvc-shrink.json"))
    );

    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    seed_claims(&fake, "v1.32");
    let mut pvc = fixture_yaml("v1.32/pvc-bound.yaml");
    pvc["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
    fake.seed(pvc);
    let client = fake.client();
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{PVCS}/data-web-0"),
        Some("application/merge-patch+json"),
        Some(grow("1Gi")),
    )
    .await;
    assert_eq!(
        (code, body),
        (
            422,
            fixture_json("v1.32/error-pvc-shrink-below-capacity.json")
        )
    );
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{PVCS}/data-web-0"),
        Some("application/merge-patch+json"),
        Some(grow("1536Mi")),
    )
    .await;
    assert_eq!(
        code, 200,
        "1.32 allows a decrease above status.capacity: {body}"
    );
}

// ---------------------------------------------------------------- errors

#[tokio::test]
async fn not_found_and_unknown_paths() {
    let fake = FakeApiServer::new();
    let client = fake.client();
    let (code, body) = raw(&client, "GET", &format!("{STS}/nope"), None, None).await;
    assert_eq!(
        (code, body),
        (404, fixture_json("v1.28/error-not-found.json"))
    );
    let (code, body) = raw(
        &client,
        "GET",
        "/apis/example.com/v1/namespaces/default/widgets",
        None,
        None,
    )
    .await;
    // Outside the built-in group/versions the real server's mux answers in plain text.
    assert_eq!((code, body), (404, json!("404 page not found\n")));
    let (code, body) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/widgets",
        None,
        None,
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(
        body["message"],
        "the server could not find the requested resource"
    );
    let err = sts_api(&client, "default").get("nope").await.unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (404, "NotFound")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn delete_with_a_wrong_uid_precondition_conflicts() {
    let fake = FakeApiServer::new();
    let mut live = fixture_yaml("v1.28/live-statefulset.yaml");
    live["metadata"]["uid"] = json!("8bad4553-3f89-467c-9b61-791dab420034");
    fake.seed(live);
    let (code, body) = raw(
        &fake.client(),
        "DELETE",
        &format!("{STS}/web"),
        Some("application/json"),
        Some(json!({"propagationPolicy": "Orphan", "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})),
    )
    .await;
    assert_eq!(
        (code, body),
        (
            409,
            fixture_json("v1.28/error-delete-precondition-uid.json")
        )
    );
    assert!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .is_some()
    );
}

#[tokio::test]
async fn stale_update_conflicts() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let api = sts_api(&fake.client(), "default");
    let mut obj = api.get("web").await.unwrap();
    obj.metadata.resource_version = Some("1".into());
    match api
        .replace("web", &PostParams::default(), &obj)
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert_eq!(
                s.message,
                "Operation cannot be fulfilled on statefulsets.apps \"web\": the object has been modified; please apply your changes to the latest version and try again"
            );
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------- orphan deletion and GC

/// The StatefulSet of `delete-orphan-response.json` before its deletion.
fn db_before_delete() -> Value {
    let mut db = fixture_json("v1.28/delete-orphan-response.json");
    let m = db["metadata"].as_object_mut().unwrap();
    for k in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "finalizers",
    ] {
        m.remove(k);
    }
    m.insert("generation".into(), json!(1));
    m.insert("resourceVersion".into(), json!("453"));
    db
}

#[tokio::test]
async fn orphan_delete_answers_like_the_real_server_then_gc_removes_it() {
    let fake = FakeApiServer::new();
    fake.seed(db_before_delete());
    let client = fake.client();
    let api = sts_api(&client, "fx");
    let watch = api
        .watch(&WatchParams::default().fields("metadata.name=db"), "453")
        .await
        .unwrap();
    let (code, body) = raw(
        &client,
        "DELETE",
        "/apis/apps/v1/namespaces/fx/statefulsets/db",
        Some("application/json"),
        Some(json!({"propagationPolicy": "Orphan", "preconditions": {"uid": "392a6bba-cad0-43b9-992b-f3d2ceaf40cb"}})),
    )
    .await;
    assert_eq!(code, 200);
    let mut want = fixture_json("v1.28/delete-orphan-response.json");
    want["metadata"]["deletionTimestamp"] = body["metadata"]["deletionTimestamp"].clone();
    want["metadata"]["resourceVersion"] = body["metadata"]["resourceVersion"].clone();
    assert_eq!(body, want);

    let events: Vec<(String, Value)> = watch
        .take(2)
        .map(|e| match e.unwrap() {
            WatchEvent::Modified(o) => ("MODIFIED".to_string(), serde_json::to_value(o).unwrap()),
            WatchEvent::Deleted(o) => ("DELETED".to_string(), serde_json::to_value(o).unwrap()),
            other => panic!("{other:?}"),
        })
        .collect()
        .await;
    assert_eq!(events[0].0, "MODIFIED");
    assert_eq!(events[0].1, body);
    assert_eq!(events[1].0, "DELETED");
    assert_eq!(events[1].1["metadata"]["finalizers"], json!(["orphan"]));
    assert!(
        fake.get("apps/v1", "StatefulSet", Some("fx"), "db")
            .is_none()
    );
}

fn pod_of(set: &Value, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": set["metadata"]["namespace"], "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": set["metadata"]["name"],
                "uid": set["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    })
}

#[tokio::test]
async fn orphaning_keeps_dependents_and_strips_their_owner_reference() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let live = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    fake.seed(fixture_yaml("v1.28/pod-web-0.yaml"));
    fake.seed(pod_of(&live, "web-1"));
    fake.set_orphan_gc(GcMode::Stuck);
    let api = sts_api(&fake.client(), "default");
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        preconditions: Some(Preconditions {
            uid: Some("529384b8-cf92-4028-81ea-97763f7e3d7b".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let out = api.delete("web", &dp).await.unwrap();
    let deleting = out.left().expect("the object, not a Status");
    assert_eq!(
        deleting.metadata.finalizers,
        Some(vec!["orphan".to_string()])
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .is_some(),
        "stuck"
    );

    fake.set_orphan_gc(GcMode::After(Duration::from_millis(10)));
    fake.gc_settled().await;
    assert!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .is_none()
    );
    let pod = fake.get("v1", "Pod", Some("default"), "web-0").unwrap();
    assert_eq!(
        pod["metadata"]["uid"],
        "e541e29e-9956-4cb6-ac0c-31ea371631c7"
    );
    assert!(pod["metadata"].get("ownerReferences").is_none(), "{pod}");
    assert!(
        fake.get("v1", "Pod", Some("default"), "web-1").unwrap()["metadata"]
            .get("ownerReferences")
            .is_none()
    );
}

#[tokio::test]
async fn background_delete_removes_dependents() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let live = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    fake.seed(pod_of(&live, "web-0"));
    fake.set_orphan_gc(GcMode::After(Duration::from_millis(10)));
    let out = sts_api(&fake.client(), "default")
        .delete("web", &DeleteParams::background())
        .await
        .unwrap();
    let status = out.right().expect("StatefulSet deletion answers a Status");
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
    assert!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .is_none()
    );
    fake.gc_settled().await;
    assert!(fake.get("v1", "Pod", Some("default"), "web-0").is_none());
}

// ---------------------------------------------------------------- list, watch

#[tokio::test]
async fn list_filters_by_label_and_field_selectors() {
    let fake = FakeApiServer::new();
    for (name, app) in [("a", "x"), ("b", "y"), ("c", "z")] {
        fake.seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": app}}}));
    }
    let client = fake.client();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::default_namespaced(client.clone());
    let names = |l: kube::api::ObjectList<k8s_openapi::api::core::v1::ConfigMap>| {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app=y"))
                .await
                .unwrap()
        ),
        ["b"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app in (x,z)"))
                .await
                .unwrap()
        ),
        ["a", "c"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app!=x"))
                .await
                .unwrap()
        ),
        ["b", "c"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name=c"))
                .await
                .unwrap()
        ),
        ["c"]
    );
    let all: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::all(client);
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        3
    );
}

#[tokio::test]
async fn watch_resumes_from_a_version_and_ends_at_its_timeout() {
    let fake = FakeApiServer::new();
    let client = fake.client();
    let cms: Api<DynamicObject> = Api::default_namespaced_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
    );
    let cm = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
    };
    let first = cms
        .create(&PostParams::default(), &cm("one"))
        .await
        .unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    cms.create(&PostParams::default(), &cm("two"))
        .await
        .unwrap();
    cms.patch(
        "one",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "w"}})),
    )
    .await
    .unwrap();
    cms.delete("two", &DeleteParams::default()).await.unwrap();
    let events: Vec<String> = cms
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .map_ok(|e| match e {
            WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.unwrap()),
            WatchEvent::Modified(o) => format!("MODIFIED {}", o.metadata.name.unwrap()),
            WatchEvent::Deleted(o) => format!("DELETED {}", o.metadata.name.unwrap()),
            other => format!("{other:?}"),
        })
        .try_collect()
        .await
        .unwrap();
    assert_eq!(events, ["ADDED two", "MODIFIED one", "DELETED two"]);
    let only_one: Vec<_> = cms
        .watch(
            &WatchParams::default()
                .fields("metadata.name=one")
                .timeout(1),
            &rv,
        )
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(only_one.len(), 1);
}

// ---------------------------------------------------------------- faults and the request log

#[tokio::test]
async fn faults_and_request_log() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let api = sts_api(&fake.client(), "default");
    fake.add_fault(FaultRule {
        method: Some(Method::GET),
        path_contains: "/statefulsets/web".into(),
        nth: 1,
        action: Fault::Status {
            code: 500,
            reason: "InternalError".into(),
            message: "boom".into(),
        },
    });
    api.get("web").await.unwrap();
    match api.get("web").await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!((s.code, s.message.as_str()), (500, "boom")),
        other => panic!("{other:?}"),
    }
    api.get("web").await.unwrap();

    fake.add_fault(FaultRule {
        method: Some(Method::PATCH),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: Fault::Drop,
    });
    let patch = Patch::Merge(json!({"spec": {"replicas": 4}}));
    let r = api.patch("web", &PatchParams::default(), &patch).await;
    assert!(r.is_err(), "{r:?} {:?}", fake.requests());
    assert_eq!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .unwrap()["spec"]["replicas"],
        3
    );

    fake.add_fault(FaultRule {
        method: Some(Method::PATCH),
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: Fault::DropAfterWrite,
    });
    assert!(
        api.patch("web", &PatchParams::default(), &patch)
            .await
            .is_err()
    );
    assert_eq!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .unwrap()["spec"]["replicas"],
        4
    );

    fake.clear_requests();
    api.patch("web", &PatchParams::apply("flux-converger").dry_run(), &Patch::Apply(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"}, "spec": {"replicas": 4}
    }))).await.unwrap();
    let log = fake.requests();
    assert!(fake.writes().is_empty(), "a dry run is no write");
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].method, Method::PATCH);
    assert_eq!(
        log[0].path,
        "/apis/apps/v1/namespaces/default/statefulsets/web"
    );
    assert_eq!(log[0].field_manager.as_deref(), Some("flux-converger"));
    assert!(log[0].dry_run && !log[0].is_write() && log[0].is_apply());
    assert_eq!(log[0].code, Some(200));
    let dp = DeleteParams {
        dry_run: true,
        ..DeleteParams::orphan()
    };
    api.delete("web", &dp).await.unwrap();
    assert!(fake.requests()[1].dry_run, "dryRun in a DELETE body counts");
    assert!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .is_some()
    );
}

// ---------------------------------------------------------------- Flux custom resources

#[tokio::test]
async fn flux_custom_resources_have_status_and_generation_and_need_a_resource_version() {
    let fake = FakeApiServer::new();
    fake.seed(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": "flux-system"},
        "spec": {"interval": "10m", "path": "./apps", "prune": true, "suspend": true,
            "sourceRef": {"kind": "GitRepository", "name": "flux-system"}},
        "status": {"lastAppliedRevision": "main@sha1:aaaa"},
    }));
    fake.seed(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "flux-system", "namespace": "flux-system"},
        "spec": {"interval": "1m", "url": "https://example.com/repo"},
        "status": {"artifact": {"revision": "main@sha1:bbbb", "digest": "sha256:cc"}},
    }));
    let client = fake.client();
    let ks = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations/apps";
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{ks}?fieldManager=flux-converger"),
        Some("application/merge-patch+json"),
        Some(json!({"spec": {"suspend": false}, "status": {"lastAppliedRevision": "x"}})),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["metadata"]["generation"], 2);
    assert_eq!(body["status"]["lastAppliedRevision"], "main@sha1:aaaa");
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{ks}?fieldManager=flux-converger"),
        Some("application/merge-patch+json"),
        Some(json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "now"}}})),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        body["metadata"]["generation"], 2,
        "metadata does not bump generation"
    );
    let (code, _) = raw(
        &client,
        "PATCH",
        ks,
        Some("application/strategic-merge-patch+json"),
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 415, "custom resources take no strategic merge patch");
    let mut unconditional = body.clone();
    unconditional["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let (code, body) = raw(
        &client,
        "PUT",
        ks,
        Some("application/json"),
        Some(unconditional),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let (code, body) = raw(
        &client,
        "GET",
        "/apis/source.toolkit.fluxcd.io/v1/namespaces/flux-system/gitrepositories",
        None,
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        body["items"][0]["kind"], "GitRepository",
        "custom resource lists keep the type"
    );
    assert_eq!(
        body["items"][0]["status"]["artifact"]["revision"],
        "main@sha1:bbbb"
    );
    for path in ["ocirepositories", "buckets", "externalartifacts"] {
        let (code, _) = raw(
            &client,
            "GET",
            &format!("/apis/source.toolkit.fluxcd.io/v1/namespaces/flux-system/{path}"),
            None,
            None,
        )
        .await;
        assert_eq!(code, 200, "{path}");
    }
}

// ---------------------------------------------------------------- StatefulSet controller

fn uids(fake: &FakeApiServer, kind: &str, api_version: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = fake
        .list(api_version, kind, Some("default"))
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o["metadata"]["uid"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn controller_creates_claims_pods_and_a_revision_like_the_fixtures() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    fake.enable_statefulset_controller();
    let api = sts_api(&fake.client(), "default");
    let desired: DynamicObject =
        serde_json::from_value(fixture_yaml("v1.28/desired-statefulset-1Gi.yaml")).unwrap();
    let created = api
        .patch("web", &apply_params(), &Patch::Apply(&desired))
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();

    let pods = fake.list("v1", "Pod", Some("default"));
    assert_eq!(pods.len(), 3);
    let pod = fake.get("v1", "Pod", Some("default"), "web-0").unwrap();
    let want = fixture_yaml("v1.28/pod-web-0.yaml");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], uid.as_str());
    assert_eq!(
        pod["metadata"]["generateName"],
        want["metadata"]["generateName"]
    );
    let hash = pod["metadata"]["labels"]["controller-revision-hash"]
        .as_str()
        .unwrap();
    assert!(hash.starts_with("web-"));
    let mut labels = want["metadata"]["labels"].clone();
    labels["controller-revision-hash"] = json!(hash);
    assert_eq!(pod["metadata"]["labels"], labels);
    // Same spec as the real pod, but for the random token volume name.
    let token = |p: &Value| {
        p["spec"]["volumes"][1]["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let spec = pod["spec"].to_string().replace(&token(&pod), "TOKEN");
    let want_spec = want["spec"].to_string().replace(&token(&want), "TOKEN");
    assert_eq!(
        serde_json::from_str::<Value>(&spec).unwrap(),
        serde_json::from_str::<Value>(&want_spec).unwrap()
    );
    assert_eq!(pod["status"], want["status"]);

    let claim = fake
        .get("v1", "PersistentVolumeClaim", Some("default"), "data-web-0")
        .unwrap();
    let want = fixture_yaml("v1.28/pvc-pending.yaml");
    for field in ["labels", "annotations", "finalizers"] {
        assert_eq!(claim["metadata"][field], want["metadata"][field], "{field}");
    }
    assert_eq!(claim["spec"], want["spec"]);
    assert_eq!(claim["status"], want["status"]);
    assert!(
        claim["metadata"].get("ownerReferences").is_none(),
        "retention policy Retain"
    );

    let revisions = fake.list("apps/v1", "ControllerRevision", Some("default"));
    assert_eq!(revisions.len(), 1);
    assert_eq!(revisions[0]["metadata"]["name"], hash);
    let set = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    assert_eq!(set["status"]["replicas"], 3);
    assert_eq!(set["status"]["updateRevision"], hash);
    assert_eq!(set["status"]["currentRevision"], hash);
    assert_eq!(set["status"]["observedGeneration"], 1);
}

#[tokio::test]
async fn converge_by_hand_keeps_pods_claims_and_revision() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    fake.enable_statefulset_controller();
    fake.set_orphan_gc(GcMode::After(Duration::from_millis(20)));
    let client = fake.client();
    let api = sts_api(&client, "default");
    let small: DynamicObject =
        serde_json::from_value(fixture_yaml("v1.28/desired-statefulset-1Gi.yaml")).unwrap();
    let grown: DynamicObject =
        serde_json::from_value(fixture_yaml("v1.28/desired-statefulset-2Gi.yaml")).unwrap();
    let first = api
        .patch("web", &apply_params(), &Patch::Apply(&small))
        .await
        .unwrap();
    for i in 0..3 {
        fake.set_pvc_phase("default", &format!("data-web-{i}"), "Bound");
    }
    let pods_before = uids(&fake, "Pod", "v1");
    let claims_before = uids(&fake, "PersistentVolumeClaim", "v1");
    let revisions_before = uids(&fake, "ControllerRevision", "apps/v1");

    // Applying the grown set is refused; grow the claims, orphan, re-apply.
    assert!(
        api.patch("web", &apply_params(), &Patch::Apply(&grown))
            .await
            .is_err()
    );
    for i in 0..3 {
        pvc_api(&client)
            .patch(
                &format!("data-web-{i}"),
                &PatchParams::default(),
                &Patch::Merge(grow("2Gi")),
            )
            .await
            .unwrap();
    }
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        preconditions: Some(Preconditions {
            uid: first.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    api.delete("web", &dp).await.unwrap();
    let gone = api
        .watch(
            &WatchParams::default()
                .fields("metadata.name=web")
                .timeout(5),
            "0",
        )
        .await
        .unwrap()
        .try_filter(|e| futures::future::ready(matches!(e, WatchEvent::Deleted(_))))
        .boxed()
        .next()
        .await;
    assert!(gone.is_some(), "the garbage collector deletes the set");
    for pod in fake.list("v1", "Pod", Some("default")) {
        assert!(
            pod["metadata"].get("ownerReferences").is_none(),
            "orphaned: {pod}"
        );
    }
    let second = api
        .patch("web", &apply_params(), &Patch::Apply(&grown))
        .await
        .unwrap();
    assert_ne!(second.metadata.uid, first.metadata.uid);

    assert_eq!(uids(&fake, "Pod", "v1"), pods_before, "no pod restarted");
    assert_eq!(
        uids(&fake, "PersistentVolumeClaim", "v1"),
        claims_before,
        "no claim recreated"
    );
    assert_eq!(
        uids(&fake, "ControllerRevision", "apps/v1"),
        revisions_before,
        "revision adopted"
    );
    for pod in fake.list("v1", "Pod", Some("default")) {
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["uid"],
            json!(second.metadata.uid),
            "adopted"
        );
    }
    let claim = fake
        .get("v1", "PersistentVolumeClaim", Some("default"), "data-web-0")
        .unwrap();
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "2Gi");
    assert_eq!(
        second.data["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );

    // A new replica gets a claim from the grown template.
    api.patch("web", &apply_params(), &Patch::Apply(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
        "spec": grown.data["spec"].clone().as_object().map(|s| { let mut s = s.clone(); s.insert("replicas".into(), json!(4)); s }).unwrap(),
    }))).await.unwrap();
    let claim = fake
        .get("v1", "PersistentVolumeClaim", Some("default"), "data-web-3")
        .unwrap();
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "2Gi");
}

#[tokio::test]
async fn watch_of_an_orphan_delete_with_the_controller_matches_the_fixture_sequence() {
    let fake = FakeApiServer::new();
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fx"}}));
    fake.enable_statefulset_controller();
    let mut db = db_before_delete();
    db["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let api = sts_api(&fake.client(), "fx");
    let obj: DynamicObject = serde_json::from_value(db).unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    let rv = fake
        .get("apps/v1", "StatefulSet", Some("fx"), "db")
        .unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let watch = api
        .watch(
            &WatchParams::default().fields("metadata.name=db").timeout(2),
            &rv,
        )
        .await
        .unwrap();
    api.delete(
        "db",
        &DeleteParams {
            preconditions: Some(Preconditions {
                uid: created.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::orphan()
        },
    )
    .await
    .unwrap();
    let events: Vec<WatchEvent<DynamicObject>> = watch.try_collect().await.unwrap();
    let seq: Vec<(&str, Value)> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Modified(o) => ("MODIFIED", serde_json::to_value(o).unwrap()),
            WatchEvent::Deleted(o) => ("DELETED", serde_json::to_value(o).unwrap()),
            other => panic!("{other:?}"),
        })
        .collect();
    let kinds: Vec<&str> = seq.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, ["MODIFIED", "MODIFIED", "DELETED"]);
    let want: Vec<Value> = fixture("v1.28/watch-orphan-delete.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["object"].clone())
        .collect();
    for ((_, got), want) in seq.iter().zip(&want) {
        for field in ["generation", "finalizers", "deletionGracePeriodSeconds"] {
            assert_eq!(got["metadata"][field], want["metadata"][field], "{field}");
        }
        assert_eq!(
            got["status"]["observedGeneration"],
            want["status"]["observedGeneration"]
        );
    }
    let rvs: Vec<u64> = seq
        .iter()
        .map(|(_, o)| {
            o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{rvs:?}");
    assert_eq!(
        rvs[2] - rvs[1],
        4,
        "2 pods and 1 revision orphaned in between, as in the fixture"
    );
}

// ---------------------------------------------------------------- on a socket, with kubectl

async fn kubeconfig_client(served: &Served) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&served.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn kubectl(served: &Served, cache: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&served.kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .output()
        .expect("kubectl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn served_on_a_socket_with_a_kubeconfig() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let served = fake.serve().await;
    let client = kubeconfig_client(&served).await;
    assert_eq!(client.default_namespace(), "default");
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "28")
    );
    let api = sts_api(&client, "default");
    assert_eq!(
        api.get("web")
            .await
            .unwrap()
            .metadata
            .resource_version
            .as_deref(),
        Some("229")
    );
    let err = api
        .patch(
            "web",
            &apply_params(),
            &Patch::Apply(fixture_yaml("v1.28/desired-statefulset-2Gi.yaml")),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!(s.code, 422),
        other => panic!("{other:?}"),
    }

    fake.add_fault(FaultRule {
        method: None,
        path_contains: "/statefulsets/web".into(),
        nth: 0,
        action: Fault::Drop,
    });
    assert!(api.get("web").await.is_err(), "dropped connection");
    assert!(api.get("web").await.is_ok(), "next connection works");
    drop(served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_the_fake_like_a_cluster() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    fake.enable_statefulset_controller();
    let served = fake.serve().await;
    let cache = tempfile::tempdir().unwrap();
    let dir = format!("{}/tests/fixtures/v1.28", env!("CARGO_MANIFEST_DIR"));
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kubectl(&served, cache.path(), &args)
    };
    let (ok, out) = run(vec![
        "apply".into(),
        "--server-side".into(),
        "-f".into(),
        format!("{dir}/desired-statefulset-1Gi.yaml"),
    ]);
    assert!(ok, "{out}");
    assert!(
        out.contains("statefulset.apps/web serverside-applied"),
        "{out}"
    );
    let (ok, out) = run(vec!["get".into(), "statefulsets".into(), "-A".into()]);
    assert!(ok, "{out}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAMESPACE", "NAME", "READY", "AGE"], "{out}");
    assert_eq!(lines[1][..3], ["default", "web", "0/3"], "{out}");
    let (ok, out) = run(vec!["get".into(), "pvc".into()]);
    assert!(
        ok && out.contains("STORAGECLASS") && out.contains("data-web-2"),
        "{out}"
    );
    let (ok, out) = run(vec![
        "apply".into(),
        "--server-side".into(),
        "-f".into(),
        format!("{dir}/desired-statefulset-2Gi.yaml"),
    ]);
    assert!(!ok);
    assert!(
        out.contains("spec: Forbidden: updates to statefulset spec for fields other than"),
        "{out}"
    );
    fake.set_pvc_phase("default", "data-web-0", "Bound");
    let (ok, out) = run(vec![
        "patch".into(),
        "pvc".into(),
        "data-web-0".into(),
        "-p".into(),
        r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#.into(),
    ]);
    assert!(ok, "{out}");
    let (ok, out) = run(vec![
        "patch".into(),
        "pvc".into(),
        "data-web-1".into(),
        "-p".into(),
        r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#.into(),
    ]);
    assert!(
        !ok && out.contains("spec is immutable after creation"),
        "{out}"
    );
    let pod_uid =
        fake.get("v1", "Pod", Some("default"), "web-0").unwrap()["metadata"]["uid"].clone();
    let (ok, out) = run(vec![
        "delete".into(),
        "statefulset".into(),
        "web".into(),
        "--cascade=orphan".into(),
    ]);
    assert!(ok, "{out}");
    assert!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .is_none(),
        "kubectl waits for the finalizer"
    );
    let (ok, out) = run(vec![
        "apply".into(),
        "--server-side".into(),
        "-f".into(),
        format!("{dir}/desired-statefulset-2Gi.yaml"),
    ]);
    assert!(ok, "{out}");
    assert_eq!(
        fake.get("v1", "Pod", Some("default"), "web-0").unwrap()["metadata"]["uid"],
        pod_uid
    );
    let managers: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.is_write())
        .filter_map(|r| r.field_manager.clone())
        .collect();
    assert!(
        managers
            .iter()
            .all(|m| m == "kubectl" || m == "kubectl-patch"),
        "{managers:?}"
    );
}

// ---------------------------------------------------------------- more verbs and rules

#[tokio::test]
async fn kube_runtime_waits_for_a_deletion() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let api = sts_api(&fake.client(), "default");
    let uid = "529384b8-cf92-4028-81ea-97763f7e3d7b";
    api.delete("web", &DeleteParams::orphan()).await.unwrap();
    assert!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .is_some(),
        "finalizer first"
    );
    let gone = kube::runtime::wait::await_condition(
        api,
        "web",
        kube::runtime::conditions::is_deleted(uid),
    )
    .await;
    assert!(matches!(gone, Ok(None)), "{gone:?}");
}

#[tokio::test]
async fn apply_without_force_reports_conflicts_and_removes_dropped_fields() {
    let fake = FakeApiServer::new();
    let client = fake.client();
    let cm = |manager: &str, data: Value, force: bool| {
        let client = client.clone();
        let manager = manager.to_string();
        async move {
            let mut q = format!("fieldManager={manager}");
            if force {
                q.push_str("&force=true");
            }
            raw(
                &client,
                "PATCH",
                &format!("/api/v1/namespaces/default/configmaps/cm?{q}"),
                Some("application/apply-patch+yaml"),
                Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data})),
            )
            .await
        }
    };
    let (code, _) = cm("a", json!({"x": "1", "y": "1"}), false).await;
    assert_eq!(code, 201);
    let (code, body) = cm("b", json!({"x": "2"}), false).await;
    assert_eq!(code, 409);
    assert_eq!(body["reason"], "Conflict");
    assert_eq!(
        body["message"],
        "Apply failed with 1 conflict: conflict with \"a\" using v1: .data.x"
    );
    let (code, _) = cm("b", json!({"x": "1", "z": "3"}), false).await;
    assert_eq!(code, 200, "same value: shared ownership, no conflict");
    let (code, body) = cm("b", json!({"x": "2"}), true).await;
    assert_eq!(code, 200);
    assert_eq!(
        body["data"],
        json!({"x": "2", "y": "1"}),
        "z was b's and is dropped"
    );
    let (code, body) = cm("a", json!({"y": "1"}), false).await;
    assert_eq!(code, 200);
    assert_eq!(body["data"], json!({"x": "2", "y": "1"}), "x is b's now");
    let (code, body) = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/cm",
        Some("application/apply-patch+yaml"),
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
}

#[tokio::test]
async fn create_dry_run_generate_name_and_already_exists() {
    let fake = FakeApiServer::new();
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::default_namespaced(fake.client());
    let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
    cm.metadata.generate_name = Some("journal-".into());
    let dry = api
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm,
        )
        .await
        .unwrap();
    assert!(dry.metadata.name.unwrap().starts_with("journal-"));
    assert!(fake.list("v1", "ConfigMap", None).is_empty());
    let made = api.create(&PostParams::default(), &cm).await.unwrap();
    let name = made.metadata.name.clone().unwrap();
    assert_eq!(name.len(), "journal-".len() + 5);
    assert!(made.metadata.uid.is_some() && made.metadata.creation_timestamp.is_some());
    let mut again = k8s_openapi::api::core::v1::ConfigMap::default();
    again.metadata.name = Some(name.clone());
    match api
        .create(&PostParams::default(), &again)
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));
            assert_eq!(s.message, format!("configmaps \"{name}\" already exists"));
        }
        other => panic!("{other:?}"),
    }
    let out = api.delete(&name, &DeleteParams::default()).await.unwrap();
    assert!(out.is_right(), "ConfigMap deletion answers a Status");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::default_namespaced(fake.client());
    let mut pod = k8s_openapi::api::core::v1::Pod::default();
    pod.metadata.name = Some("p".into());
    pods.create(&PostParams::default(), &pod).await.unwrap();
    assert!(
        pods.delete("p", &DeleteParams::default())
            .await
            .unwrap()
            .is_left(),
        "pods answer the object"
    );
}

#[tokio::test]
async fn foreground_delete_waits_for_dependents() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let live = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    fake.seed(pod_of(&live, "web-0"));
    fake.set_orphan_gc(GcMode::Stuck);
    let out = sts_api(&fake.client(), "default")
        .delete("web", &DeleteParams::foreground())
        .await
        .unwrap();
    let obj = out.left().unwrap();
    assert_eq!(
        obj.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_string()])
    );
    assert!(fake.get("v1", "Pod", Some("default"), "web-0").is_some());
    fake.set_orphan_gc(GcMode::After(Duration::from_millis(5)));
    fake.gc_settled().await;
    assert!(fake.get("v1", "Pod", Some("default"), "web-0").is_none());
    assert!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .is_none()
    );
}

#[tokio::test]
async fn delay_fault_and_impersonation_are_visible() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    fake.add_fault(FaultRule {
        method: None,
        path_contains: "storageclasses".into(),
        nth: 0,
        action: Fault::Delay(Duration::from_millis(50)),
    });
    let client = fake.client();
    let started = tokio::time::Instant::now();
    let (code, body) = raw(
        &client,
        "GET",
        "/apis/storage.k8s.io/v1/storageclasses",
        None,
        None,
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(code, 200);
    assert_eq!(body["items"].as_array().unwrap().len(), 2);
    let req = http::Request::builder()
        .uri("/api/v1/namespaces/default/configmaps")
        .header(
            "Impersonate-User",
            "system:serviceaccount:flux-system:kustomize-controller",
        )
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    client.send(req).await.unwrap();
    let log = fake.requests();
    assert_eq!(
        log.last().unwrap().impersonate_user.as_deref(),
        Some("system:serviceaccount:flux-system:kustomize-controller")
    );
}

#[tokio::test]
async fn discovery_answers_what_kubectl_asks() {
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    let client = fake.client();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, "v1.32.6");
    let groups = client.list_api_groups().await.unwrap();
    let names: Vec<&str> = groups.groups.iter().map(|g| g.name.as_str()).collect();
    for g in [
        "apps",
        "storage.k8s.io",
        "kustomize.toolkit.fluxcd.io",
        "source.toolkit.fluxcd.io",
        "coordination.k8s.io",
        "events.k8s.io",
    ] {
        assert!(names.contains(&g), "{g}");
    }
    let core = client.list_core_api_resources("v1").await.unwrap();
    assert!(
        core.resources
            .iter()
            .any(|r| r.name == "persistentvolumeclaims/status")
    );
    let apps = client.list_api_group_resources("apps/v1").await.unwrap();
    let sts = apps
        .resources
        .iter()
        .find(|r| r.name == "statefulsets")
        .unwrap();
    assert_eq!(sts.short_names.as_deref(), Some(&["sts".to_string()][..]));
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    assert!(discovery.has_group("source.toolkit.fluxcd.io"));
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "default",
            "flux-system",
            "kube-node-lease",
            "kube-public",
            "kube-system"
        ]
    );
    let mut ns = k8s_openapi::api::core::v1::Namespace::default();
    ns.metadata.name = Some("tenant".into());
    let made = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(
        made.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
        "tenant"
    );
    assert_eq!(made.status.unwrap().phase.as_deref(), Some("Active"));
}

#[tokio::test]
async fn apply_of_a_fetched_object_is_refused_like_the_real_server() {
    let fake = FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/live-statefulset.yaml"));
    let client = fake.client();
    let path = format!("{STS}/web?fieldManager=kustomize-controller&force=true");
    let live = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    let (code, body) = raw(
        &client,
        "PATCH",
        &path,
        Some("application/apply-patch+yaml"),
        Some(live.clone()),
    )
    .await;
    assert_eq!(
        (code, body["message"].as_str()),
        (400, Some("metadata.managedFields must be nil"))
    );
    let mut stale = fixture_yaml("v1.28/desired-statefulset-1Gi.yaml");
    stale["metadata"]["resourceVersion"] = json!("1");
    let (code, body) = raw(
        &client,
        "PATCH",
        &path,
        Some("application/apply-patch+yaml"),
        Some(stale),
    )
    .await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["reason"], "Conflict");
}

#[tokio::test]
async fn retention_policy_delete_owns_claims_across_recreation() {
    let fake = FakeApiServer::new();
    fake.enable_statefulset_controller();
    fake.set_orphan_gc(GcMode::After(Duration::from_millis(5)));
    let api = sts_api(&fake.client(), "default");
    let mut desired = fixture_yaml("v1.28/desired-statefulset-1Gi.yaml");
    desired["spec"]["replicas"] = json!(1);
    desired["spec"]["persistentVolumeClaimRetentionPolicy"] = json!({"whenDeleted": "Delete"});
    let first = api
        .patch("web", &apply_params(), &Patch::Apply(&desired))
        .await
        .unwrap();
    let claim_owner = |fake: &FakeApiServer| {
        fake.get("v1", "PersistentVolumeClaim", Some("default"), "data-web-0")
            .unwrap()["metadata"]["ownerReferences"][0]["uid"]
            .clone()
    };
    assert_eq!(claim_owner(&fake), json!(first.metadata.uid));
    assert_eq!(
        first.data["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"],
        "Retain"
    );
    api.delete("web", &DeleteParams::orphan()).await.unwrap();
    fake.gc_settled().await;
    assert_eq!(claim_owner(&fake), Value::Null, "orphaned");
    let second = api
        .patch("web", &apply_params(), &Patch::Apply(&desired))
        .await
        .unwrap();
    assert_eq!(claim_owner(&fake), json!(second.metadata.uid), "re-owned");
    api.delete("web", &DeleteParams::background())
        .await
        .unwrap();
    fake.gc_settled().await;
    assert!(
        fake.list("v1", "PersistentVolumeClaim", None).is_empty(),
        "deleted with the set"
    );
    assert!(fake.list("v1", "Pod", None).is_empty());
}

#[tokio::test]
async fn a_watch_from_before_a_compaction_is_expired() {
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/live-statefulset.yaml");
    let api = sts_api(&fake.client(), "default");
    let old = "229";
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    fake.compact();
    let events: Vec<_> = api
        .watch(&WatchParams::default().timeout(1), old)
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(events.len(), 1);
    match &events[0] {
        Ok(WatchEvent::Error(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.starts_with("too old resource version: 229 ("),
                "{}",
                e.message
            );
        }
        other => panic!("{other:?}"),
    }
    // kube-runtime's watcher relists and carries on.
    let stream = kube::runtime::watcher(api.clone(), kube::runtime::watcher::Config::default());
    let first = kube::runtime::WatchStreamExt::applied_objects(stream)
        .boxed()
        .next()
        .await;
    assert_eq!(
        first.unwrap().unwrap().metadata.name.as_deref(),
        Some("web")
    );
}

#[tokio::test]
async fn undecodable_bodies_are_bad_requests_not_panics() {
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/live-statefulset.yaml");
    let client = fake.client();
    for patch in [
        json!({"spec": "nope"}),
        json!({"spec": {"updateStrategy": "OnDelete"}}),
        json!({"spec": {"volumeClaimTemplates": [{"spec": 1}]}}),
        json!({"metadata": []}),
        json!({"metadata": {"labels": "app"}}),
        json!({"spec": {"template": {"metadata": {"labels": ["app"]}}}}),
    ] {
        let (code, body) = raw(
            &client,
            "PATCH",
            &format!("{STS}/web"),
            Some("application/merge-patch+json"),
            Some(patch.clone()),
        )
        .await;
        assert_eq!(code, 400, "{patch} -> {body}");
        assert_eq!(body["reason"], "BadRequest");
    }
    let (code, _) = raw(&client, "POST", PVCS, Some("application/json"),
        Some(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "x"}, "spec": {"resources": "big"}}))).await;
    assert_eq!(code, 400);
    let (code, _) = raw(&client, "GET", &format!("{STS}/web"), None, None).await;
    assert_eq!(code, 200, "still serving");
}

#[tokio::test]
async fn ordered_ready_waits_for_each_pod() {
    let fake = FakeApiServer::new();
    fake.enable_statefulset_controller();
    let api = sts_api(&fake.client(), "default");
    let mut desired = fixture_yaml("v1.28/desired-statefulset-1Gi.yaml");
    desired["spec"]
        .as_object_mut()
        .unwrap()
        .remove("podManagementPolicy");
    let out = api
        .patch("web", &apply_params(), &Patch::Apply(&desired))
        .await
        .unwrap();
    assert_eq!(out.data["spec"]["podManagementPolicy"], "OrderedReady");
    let names = |fake: &FakeApiServer| {
        uids(fake, "Pod", "v1")
            .into_iter()
            .map(|(n, _)| n)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(&fake),
        ["web-0"],
        "a Pending pod blocks the next ordinal"
    );
    assert_eq!(fake.list("v1", "PersistentVolumeClaim", None).len(), 1);
    fake.set_pods_ready(true);
    assert_eq!(names(&fake), ["web-0", "web-1", "web-2"]);
    let set = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    assert_eq!(set["status"]["readyReplicas"], 3);
    assert_eq!(set["status"]["availableReplicas"], 3);
}

#[tokio::test]
async fn deleted_claims_are_recreated_at_the_template_size_once_no_scheduled_pod_uses_them() {
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/storageclasses.yaml");
    fake.enable_statefulset_controller();
    fake.set_orphan_gc(GcMode::After(Duration::from_millis(5)));
    let client = fake.client();
    let api = sts_api(&client, "default");
    let mut desired = fixture_yaml("v1.28/desired-statefulset-2Gi.yaml");
    desired["spec"]["replicas"] = json!(2);
    api.patch("web", &apply_params(), &Patch::Apply(&desired))
        .await
        .unwrap();
    let claim_uid = |fake: &FakeApiServer, name: &str| {
        fake.get("v1", "PersistentVolumeClaim", Some("default"), name)
            .unwrap()["metadata"]["uid"]
            .clone()
    };
    let pod_uid = |fake: &FakeApiServer, name: &str| {
        fake.get("v1", "Pod", Some("default"), name).unwrap()["metadata"]["uid"].clone()
    };
    let pvcs = pvc_api(&client);

    // No nodes: a Pending pod holds nothing, the claim goes and comes back at once.
    let (claim0, pod0) = (claim_uid(&fake, "data-web-0"), pod_uid(&fake, "web-0"));
    pvcs.delete("data-web-0", &DeleteParams::default())
        .await
        .unwrap();
    fake.gc_settled().await;
    assert_ne!(claim_uid(&fake, "data-web-0"), claim0, "recreated");
    assert_eq!(pod_uid(&fake, "web-0"), pod0);
    let claim = fake
        .get("v1", "PersistentVolumeClaim", Some("default"), "data-web-0")
        .unwrap();
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "2Gi");

    // With nodes: the claim waits for its running pod; deleting the pod lets both come back.
    fake.set_pods_ready(true);
    let claim1 = claim_uid(&fake, "data-web-1");
    pvcs.delete("data-web-1", &DeleteParams::default())
        .await
        .unwrap();
    fake.gc_settled().await;
    assert_eq!(
        claim_uid(&fake, "data-web-1"),
        claim1,
        "protected by the running web-1"
    );
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::default_namespaced(client.clone());
    let pod1 = pod_uid(&fake, "web-1");
    pods.delete("web-1", &DeleteParams::default())
        .await
        .unwrap();
    fake.gc_settled().await;
    assert_ne!(claim_uid(&fake, "data-web-1"), claim1);
    assert_ne!(pod_uid(&fake, "web-1"), pod1);
    let pod = fake.get("v1", "Pod", Some("default"), "web-1").unwrap();
    assert_eq!(
        pod["status"]["phase"], "Running",
        "started once its new claim exists"
    );
}

// ---------------------------------------------------------------- pure pieces, by table

#[test]
fn quantities_are_stored_in_canonical_form_and_compared_by_value() {
    use fake_apiserver::semantics::quantity::{canonical_str, cmp_str};
    use std::cmp::Ordering::*;
    for (input, want) in [
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("1.5Gi", "1536Mi"),
        ("1000M", "1G"),
        ("2G", "2G"),
        ("500m", "500m"),
        ("0.5", "500m"),
        ("100", "100"),
        ("1536", "1536"),
        ("2048", "2048"),
        ("2048Ki", "2Mi"),
        ("0", "0"),
        ("1e3", "1e3"),
        ("1000e3", "1e6"),
        // Out of the fake's range: kept as written, never a panic in the handler.
        ("1e-100", "1e-100"),
    ] {
        assert_eq!(canonical_str(input), want, "{input}");
    }
    for (a, b, want) in [
        ("1Gi", "1024Mi", Equal),
        ("1G", "1Gi", Less),
        ("2Gi", "2000Mi", Greater),
        ("1.5Gi", "1536Mi", Equal),
        ("100m", "0.1", Equal),
        ("999999999999999999999999999999999999", "1", Greater),
    ] {
        assert_eq!(cmp_str(a, b), want, "{a} vs {b}");
    }
}

#[test]
fn label_selectors_parse_like_the_real_server() {
    use fake_apiserver::query::LabelSelector;
    let obj = json!({"metadata": {"labels": {"app": "web", "tier": "db"}}});
    for (selector, matches) in [
        ("app=web", true),
        ("app==web", true),
        ("app!=web", false),
        ("app in (web, api)", true),
        ("app notin (web)", false),
        ("tier,app=web", true),
        ("!tier", false),
        ("missing", false),
        ("!missing", true),
        ("app=web,tier in (cache)", false),
    ] {
        assert_eq!(
            LabelSelector::parse(selector).unwrap().matches(&obj),
            matches,
            "{selector}"
        );
    }
    assert!(LabelSelector::parse("app in web").is_err());
}

#[test]
fn ages_print_like_kubectl() {
    use fake_apiserver::table::human_age;
    for (seconds, want) in [
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (9 * 3600, "9h"),
        (50 * 3600, "2d2h"),
        (30 * 86400, "30d"),
    ] {
        assert_eq!(human_age(seconds), want, "{seconds}");
    }
}

#[test]
fn the_claim_diff_elides_identical_fields_like_go_cmp() {
    // Keys align across a run of one-line records, diff lines included; an ellipsis or a
    // multi-line record ends the run (go-cmp's textList.alignLens).
    use fake_apiserver::semantics::pvc_diff::spec_diff;
    let old = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "expandable", "volumeMode": "Filesystem"});
    let mut new = old.clone();
    new["storageClassName"] = json!("fixed");
    let diff = spec_diff(&old, &new, KubeVersion::V1_28);
    assert_eq!(
        diff,
        "  core.PersistentVolumeClaimSpec{\n  \t... // 2 identical fields\n  \tResources:        {Requests: {s\"storage\": {i: resource.int64Amount{value: 1073741824}, s: \"1Gi\", Format: \"BinarySI\"}}},\n  \tVolumeName:       \"\",\n- \tStorageClassName: &\"expandable\",\n+ \tStorageClassName: &\"fixed\",\n  \tVolumeMode:       &\"Filesystem\",\n  \tDataSource:       nil,\n  \tDataSourceRef:    nil,\n  }\n"
    );
}

#[tokio::test]
async fn kubectl_style_watches_get_one_row_tables() {
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/live-statefulset.yaml");
    let req = http::Request::builder()
        .uri(format!("{STS}?watch=1&timeoutSeconds=1"))
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    let resp = fake.client().send(req).await.unwrap();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), usize::MAX)
        .await
        .unwrap();
    let event: Value =
        serde_json::from_slice(bytes.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["kind"], "Table");
    assert_eq!(event["object"]["rows"][0]["cells"][0], "web");
    assert_eq!(event["object"]["rows"][0]["cells"][1], "0/3");
}

#[tokio::test]
async fn label_filtered_watches_see_objects_enter_and_leave() {
    let fake = FakeApiServer::new();
    let client = fake.client();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::default_namespaced(client);
    let rv = fake.resource_version().to_string();
    let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
    cm.metadata.name = Some("j".into());
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let label = |v: &str| Patch::Merge(json!({"metadata": {"labels": {"role": v}}}));
    cms.patch("j", &PatchParams::default(), &label("intent"))
        .await
        .unwrap();
    cms.patch("j", &PatchParams::default(), &label("result"))
        .await
        .unwrap();
    let events: Vec<String> = cms
        .watch(
            &WatchParams::default().labels("role=intent").timeout(1),
            &rv,
        )
        .await
        .unwrap()
        .map_ok(|e| match e {
            WatchEvent::Added(_) => "ADDED".to_string(),
            WatchEvent::Modified(_) => "MODIFIED".to_string(),
            WatchEvent::Deleted(_) => "DELETED".to_string(),
            other => format!("{other:?}"),
        })
        .try_collect()
        .await
        .unwrap();
    assert_eq!(events, ["ADDED", "DELETED"]);
}

#[tokio::test]
async fn v1_32_refuses_the_grown_template_with_its_fixture_and_accepts_the_proof_without_template_meta()
 {
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    fake.seed_fixture("v1.32/live-statefulset.yaml");
    let client = fake.client();
    let path = format!("{STS}/web?fieldManager=kustomize-controller&force=true&dryRun=All");
    let grown = fixture_yaml("v1.28/desired-statefulset-2Gi.yaml");
    let (code, body) = raw(
        &client,
        "PATCH",
        &path,
        Some("application/apply-patch+yaml"),
        Some(grown.clone()),
    )
    .await;
    assert_eq!(
        (code, body),
        (
            422,
            fixture_json("v1.32/error-statefulset-update-forbidden.json")
        )
    );
    // The proof object: live templates put back without their status/apiVersion/kind.
    let live = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    let mut templates = live["spec"]["volumeClaimTemplates"].clone();
    for t in templates.as_array_mut().unwrap() {
        let t = t.as_object_mut().unwrap();
        for k in ["status", "apiVersion", "kind"] {
            t.remove(k);
        }
    }
    let mut proof = grown;
    proof["spec"]["volumeClaimTemplates"] = templates;
    proof["spec"]["template"]["spec"]["containers"][0]["image"] = json!("busybox:1.37");
    proof["spec"]["persistentVolumeClaimRetentionPolicy"] = json!({"whenScaled": "Delete"});
    let (code, body) = raw(
        &client,
        "PATCH",
        &path,
        Some("application/apply-patch+yaml"),
        Some(proof),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        meta(&body, "generation"),
        2,
        "the dry run shows the would-be generation"
    );
    assert_eq!(
        meta(
            &fake
                .get("apps/v1", "StatefulSet", Some("default"), "web")
                .unwrap(),
            "generation"
        ),
        1
    );
}

#[tokio::test]
async fn a_deleting_object_takes_no_new_finalizers_and_goes_when_the_last_is_removed() {
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/live-statefulset.yaml");
    fake.set_orphan_gc(GcMode::Stuck);
    let client = fake.client();
    let api = sts_api(&client, "default");
    api.delete("web", &DeleteParams::orphan()).await.unwrap();
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{STS}/web"),
        Some("application/merge-patch+json"),
        Some(json!({"metadata": {"finalizers": ["orphan", "example.com/hold"]}})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "StatefulSet.apps \"web\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/hold\"}"
    );
    // Removing the last finalizer by hand deletes the object (what the GC would do).
    let (code, _) = raw(
        &client,
        "PATCH",
        &format!("{STS}/web"),
        Some("application/merge-patch+json"),
        Some(json!({"metadata": {"finalizers": null}})),
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        fake.get("apps/v1", "StatefulSet", Some("default"), "web")
            .is_none()
    );
}

/// Timestamps and resourceVersions differ from run to run; everything else must not.
fn normalise(mut obj: Value) -> Value {
    let m = &mut obj["metadata"];
    m["resourceVersion"] = json!("RV");
    if m.get("deletionTimestamp").is_some() {
        m["deletionTimestamp"] = json!("T");
    }
    if let Some(entries) = m["managedFields"].as_array_mut() {
        for e in entries {
            e["time"] = json!("T");
        }
    }
    obj
}

#[tokio::test]
async fn orphan_delete_watch_events_equal_the_fixture_with_the_controller_running() {
    let fake = FakeApiServer::new();
    let db = db_before_delete();
    for i in 0..2 {
        let mut pod = pod_of(&db, &format!("db-{i}"));
        pod["metadata"]["labels"] =
            json!({"app": "db", "controller-revision-hash": "db-6665d4cfc"});
        fake.seed(pod);
    }
    fake.seed(db);
    fake.enable_statefulset_controller();
    let stored = fake
        .get("apps/v1", "StatefulSet", Some("fx"), "db")
        .unwrap();
    assert_eq!(
        stored["status"],
        fixture_json("v1.28/delete-orphan-response.json")["status"]
    );
    let rv = stored["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let client = fake.client();
    let api = sts_api(&client, "fx");
    let watch = api
        .watch(
            &WatchParams::default().fields("metadata.name=db").timeout(2),
            &rv,
        )
        .await
        .unwrap();
    api.delete("db", &DeleteParams::orphan()).await.unwrap();
    let got: Vec<Value> = watch
        .map_ok(|e| match e {
            WatchEvent::Modified(o) => json!({"type": "MODIFIED", "object": o}),
            WatchEvent::Deleted(o) => json!({"type": "DELETED", "object": o}),
            other => json!({"type": format!("{other:?}")}),
        })
        .try_collect()
        .await
        .unwrap();
    let want: Vec<Value> = fixture("v1.28/watch-orphan-delete.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g["type"], w["type"]);
        assert_eq!(
            normalise(g["object"].clone()),
            normalise(w["object"].clone())
        );
    }
    for pod in fake.list("v1", "Pod", Some("fx")) {
        assert!(pod["metadata"].get("ownerReferences").is_none());
    }
}

#[tokio::test]
async fn secrets_take_string_data_into_data() {
    let fake = FakeApiServer::new();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::default_namespaced(fake.client());
    let mut s = k8s_openapi::api::core::v1::Secret::default();
    s.metadata.name = Some("vars".into());
    s.string_data = Some(
        [
            ("a".to_string(), "x".to_string()),
            ("b".to_string(), "hello!".to_string()),
        ]
        .into(),
    );
    let made = secrets.create(&PostParams::default(), &s).await.unwrap();
    assert!(made.string_data.is_none());
    assert_eq!(made.type_.as_deref(), Some("Opaque"));
    let data = made.data.unwrap();
    assert_eq!(data["a"].0, b"x");
    assert_eq!(data["b"].0, b"hello!");
    let stored = fake.get("v1", "Secret", Some("default"), "vars").unwrap();
    assert_eq!(stored["data"], json!({"a": "eA==", "b": "aGVsbG8h"}));
}

#[tokio::test]
async fn events_are_validated_like_the_real_server() {
    let fake = FakeApiServer::new();
    let client = fake.client();
    let path = "/apis/events.k8s.io/v1/namespaces/default/events";
    let good = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "web.1", "namespace": "default"},
        "eventTime": "2026-11-29T17:00:00.000000Z",
        "reportingController": "flux-converger", "reportingInstance": "flux-converger-0",
        "action": "Converge", "reason": "Converged", "type": "Normal",
        "regarding": {"kind": "StatefulSet", "namespace": "default", "name": "web", "apiVersion": "apps/v1"},
        "note": "grew 3 claims",
    });
    let (code, body) = raw(
        &client,
        "POST",
        path,
        Some("application/json"),
        Some(good.clone()),
    )
    .await;
    assert_eq!(code, 201, "{body}");

    let mut long = good.clone();
    long["metadata"]["name"] = json!("web.2");
    long["note"] = json!("x".repeat(1025));
    long["type"] = json!("Info");
    let (code, body) = raw(&client, "POST", path, Some("application/json"), Some(long)).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Event \"web.2\" is invalid: [message: Invalid value: \"\": can have at most 1024 characters, type: Invalid value: \"\": has invalid value: Info]"
    );

    // core/v1 without eventTime: only the namespaces must agree.
    let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "web.3"},
        "involvedObject": {"kind": "StatefulSet", "namespace": "other", "name": "web"},
        "reason": "Converged", "message": "ok", "type": "Normal"});
    let (code, body) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/events",
        Some("application/json"),
        Some(core),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Event \"web.3\" is invalid: involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"
    );
}

#[tokio::test]
async fn kube_runtime_recorder_events_pass_validation_and_become_series() {
    use kube::runtime::events::{Event, EventType, Recorder};
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/live-statefulset.yaml");
    let client = fake.client();
    let recorder = Recorder::new(client.clone(), "flux-converger".into());
    let sts: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::default_namespaced(client);
    let reference = kube::Resource::object_ref(&sts.get("web").await.unwrap(), &());
    let event = Event {
        type_: EventType::Normal,
        reason: "Converged".into(),
        note: Some("grew 3 claims".into()),
        action: "Converge".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    let events = fake.list("events.k8s.io/v1", "Event", Some("default"));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["series"]["count"], 2);
    assert_eq!(events[0]["regarding"]["name"], "web");
}

#[tokio::test]
async fn config_maps_and_annotations_have_the_real_size_limits() {
    let fake = FakeApiServer::new();
    let client = fake.client();
    let path = "/api/v1/namespaces/default/configmaps";
    // Values count, keys do not: 1 MiB of value fits, one byte more does not.
    let (code, _) = raw(&client, "POST", path, Some("application/json"),
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fits"}, "data": {"intent": "x".repeat(1024 * 1024)}}))).await;
    assert_eq!(code, 201);
    let big = "x".repeat(1024 * 1024 + 1);
    let (code, body) = raw(&client, "POST", path, Some("application/json"),
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j"}, "data": {"intent": big}}))).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "ConfigMap \"j\" is invalid: []: Too long: may not be more than 1048576 bytes"
    );
    let (code, _) = raw(&client, "POST", path, Some("application/json"),
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j"}, "data": {"intent": "x".repeat(1000 * 1024)}}))).await;
    assert_eq!(code, 201);
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{path}/j"),
        Some("application/merge-patch+json"),
        Some(json!({"metadata": {"annotations": {"a": "y".repeat(300 * 1024)}}})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["details"]["causes"][0]["field"],
        "metadata.annotations"
    );
}

#[tokio::test]
async fn label_values_and_keys_are_validated() {
    let fake = FakeApiServer::new();
    let client = fake.client();
    let path = "/api/v1/namespaces/default/configmaps";
    let cm = |labels: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j", "labels": labels}});
    let (code, body) = raw(
        &client,
        "POST",
        path,
        Some("application/json"),
        Some(cm(json!({"revision": "main@sha1:abc"}))),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "ConfigMap \"j\" is invalid: metadata.labels: Invalid value: \"main@sha1:abc\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    );
    let (code, body) = raw(
        &client,
        "POST",
        path,
        Some("application/json"),
        Some(cm(json!({"x": "a".repeat(64)}))),
    )
    .await;
    assert_eq!(code, 422);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with("must be no more than 63 characters"),
        "{body}"
    );
    let (code, body) = raw(
        &client,
        "POST",
        path,
        Some("application/json"),
        Some(cm(json!({"Flux/Name": "ok"}))),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let (code, body) = raw(&client, "POST", path, Some("application/json"),
        Some(cm(json!({"kustomize.toolkit.fluxcd.io/name": "apps", "flux-converger.io/record": "intent", "empty": ""})))).await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn config_map_keys_are_validated() {
    let fake = FakeApiServer::new();
    let (code, body) = raw(&fake.client(), "POST", "/api/v1/namespaces/default/configmaps", Some("application/json"),
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j"}, "data": {"default/web": "x", "ok.key_1": "y"}}))).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "ConfigMap \"j\" is invalid: data[default/web]: Invalid value: \"default/web\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
    );
}

#[tokio::test]
async fn tests_can_play_other_controllers() {
    let fake = FakeApiServer::new();
    fake.seed(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": "flux-system"},
        "spec": {"interval": "10m", "path": "./apps", "prune": true,
            "sourceRef": {"kind": "GitRepository", "name": "flux-system"}},
    }));
    let ks: Api<DynamicObject> = Api::namespaced_with(
        fake.client(),
        "flux-system",
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "kustomize.toolkit.fluxcd.io",
            "v1",
            "Kustomization",
        )),
    );
    let before = ks
        .get("apps")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let watch = ks
        .watch(&WatchParams::default().timeout(1), &before)
        .await
        .unwrap();
    let stored = fake
        .modify(
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some("flux-system"),
            "apps",
            |o| {
                o["status"] = json!({"lastAppliedRevision": "main@sha1:1111"});
            },
        )
        .unwrap();
    assert_ne!(stored["metadata"]["resourceVersion"], json!(before));
    assert!(
        fake.remove(
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some("flux-system"),
            "apps"
        )
        .is_some()
    );
    let kinds: Vec<String> = watch
        .map_ok(|e| match e {
            WatchEvent::Modified(o) => {
                format!("MODIFIED {}", o.data["status"]["lastAppliedRevision"])
            }
            WatchEvent::Deleted(_) => "DELETED".into(),
            other => format!("{other:?}"),
        })
        .try_collect()
        .await
        .unwrap();
    assert_eq!(kinds, ["MODIFIED \"main@sha1:1111\"", "DELETED"]);
    assert_eq!(
        fake.requests().len(),
        2,
        "the get and the watch; helpers are not requests"
    );
}

// ---------------------------------------------------------------- robustness

fn arbitrary_json() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        "[a-z0-9./@:-]{0,6}".prop_map(Value::from),
        prop_oneof![Just("1Gi"), Just("512Mi"), Just("OnDelete"), Just("Bound")]
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        let keys = prop_oneof![
            Just("spec"),
            Just("metadata"),
            Just("status"),
            Just("labels"),
            Just("resources"),
            Just("requests"),
            Just("storage"),
            Just("template"),
            Just("updateStrategy"),
            Just("volumeClaimTemplates"),
            Just("containers"),
            Just("finalizers"),
            Just("name"),
            Just("replicas"),
            Just("selector"),
            Just("matchLabels"),
            Just("rollingUpdate"),
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::btree_map(keys.prop_map(str::to_string), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Whatever a client sends, the fake answers (an object or a Status), never panics, and
    /// keeps serving.
    #[test]
    fn arbitrary_patches_get_an_answer(patch in arbitrary_json(), target in 0usize..3, kind in 0usize..7) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let fake = FakeApiServer::new();
            fake.seed_fixture("v1.28/storageclasses.yaml");
            fake.seed_fixture("v1.28/live-statefulset.yaml");
            fake.seed_fixture("v1.28/pvc-bound.yaml");
            fake.enable_statefulset_controller();
            let client = fake.client();
            let path = [format!("{STS}/web"), format!("{PVCS}/data-web-0"), format!("{STS}/web/status")][target].clone();
            let (method, ct, query) = [
                ("PATCH", "application/merge-patch+json", ""),
                ("PATCH", "application/strategic-merge-patch+json", ""),
                ("PATCH", "application/apply-patch+yaml", "?fieldManager=t&force=true"),
                ("PATCH", "application/json-patch+json", ""),
                ("PUT", "application/json", ""),
                ("DELETE", "application/json", ""),
                ("POST", "application/json", ""),
            ][kind];
            // A create goes to the collection (for /status, to the name: a 405).
            let path = if method == "POST" { path.rsplit_once('/').unwrap().0.to_string() } else { path };
            let (code, body) = raw(&client, method, &format!("{path}{query}"), Some(ct), Some(patch)).await;
            // The one 500 is the real one: an apply with fields its type does not declare.
            let undeclared = code == 500
                && body["message"].as_str().is_some_and(|m| m.contains("field not declared in schema"));
            assert!(code == 200 || code == 201 || (400..500).contains(&code) || undeclared, "{code} {body}");
            if code >= 400 {
                assert_eq!(body["kind"], "Status", "{body}");
            }
            let (code, _) = raw(&client, "GET", &format!("{STS}/web"), None, None).await;
            assert!(code == 200 || code == 404);
            let (code, _) = raw(&client, "GET", PVCS, None, None).await;
            assert_eq!(code, 200, "still serving");
        });
    }
}

#[tokio::test]
async fn field_selectors_follow_the_kinds_field_labels() {
    let fake = FakeApiServer::new();
    fake.seed(json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1", "namespace": "default"},
        "involvedObject": {"kind": "StatefulSet", "name": "web", "namespace": "default"}, "reason": "Converged",
        "source": {"component": "flux-converger"}}));
    fake.seed(json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e2", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": "default"}, "reason": "Scheduled"}));
    let client = fake.client();
    let events = "/api/v1/namespaces/default/events";
    let (code, body) = raw(
        &client,
        "GET",
        &format!(
            "{events}?fieldSelector=involvedObject.kind%3DStatefulSet,involvedObject.name%3Dweb"
        ),
        None,
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(body["items"].as_array().unwrap().len(), 1);
    let (_, body) = raw(
        &client,
        "GET",
        &format!("{events}?fieldSelector=source%3Dflux-converger"),
        None,
        None,
    )
    .await;
    assert_eq!(body["items"][0]["metadata"]["name"], "e1");
    let (code, body) = raw(
        &client,
        "GET",
        &format!("{STS}?fieldSelector=spec.serviceName%3Dweb"),
        None,
        None,
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        body["message"],
        "field label not supported: spec.serviceName"
    );
}

#[tokio::test]
async fn statefulsets_scale_through_the_scale_subresource() {
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/live-statefulset.yaml");
    let client = fake.client();
    let (code, scale) = raw(&client, "GET", &format!("{STS}/web/scale"), None, None).await;
    assert_eq!(code, 200);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=web");
    let (code, scale) = raw(
        &client,
        "PATCH",
        &format!("{STS}/web/scale"),
        Some("application/merge-patch+json"),
        Some(json!({"spec": {"replicas": 5}})),
    )
    .await;
    assert_eq!(code, 200, "{scale}");
    assert_eq!(scale["spec"]["replicas"], 5);
    let set = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .unwrap();
    assert_eq!(set["spec"]["replicas"], 5);
    assert_eq!(set["metadata"]["generation"], 2);
    let (code, _) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/persistentvolumeclaims/x/scale",
        None,
        None,
    )
    .await;
    assert_eq!(code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_converge_many_sets_without_deadlock() {
    let fake = FakeApiServer::new();
    fake.seed_fixture("v1.28/storageclasses.yaml");
    fake.enable_statefulset_controller();
    fake.set_orphan_gc(GcMode::After(Duration::from_millis(1)));
    let served = fake.serve().await;
    let socket = kubeconfig_client(&served).await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let client = if i % 2 == 0 { fake.client() } else { socket.clone() };
            tokio::spawn(async move {
                let api = sts_api(&client, "default");
                let mut desired = fixture_yaml("v1.28/desired-statefulset-1Gi.yaml");
                let name = format!("s{i}");
                desired["metadata"]["name"] = json!(name);
                desired["spec"]["replicas"] = json!(2);
                let made = api.patch(&name, &apply_params(), &Patch::Apply(&desired)).await.unwrap();
                let dp = DeleteParams {
                    preconditions: Some(Preconditions { uid: made.metadata.uid.clone(), resource_version: None }),
                    ..DeleteParams::orphan()
                };
                api.delete(&name, &dp).await.unwrap();
                kube::runtime::wait::await_condition(
                    api.clone(),
                    &name,
                    kube::runtime::conditions::is_deleted(made.metadata.uid.as_deref().unwrap()),
                )
                .await
                .unwrap();
                desired["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
                api.patch(&name, &apply_params(), &Patch::Apply(&desired)).await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        fake.list("apps/v1", "StatefulSet", Some("default")).len(),
        16
    );
    let pods = fake.list("v1", "Pod", Some("default"));
    assert_eq!(pods.len(), 32);
    assert!(
        pods.iter()
            .all(|p| p["metadata"]["ownerReferences"][0]["controller"] == true),
        "all adopted"
    );
}

// ---------------------------------------------------------------------------------------
// Conformance with a real v1.32.6 (tests/fixtures/conformance/real-v1.32.6.json): RBAC and
// impersonation, namespaces, paging.

/// `raw`, with extra headers (impersonation).
async fn raw_with(
    client: &kube::Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    content_type: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let resp = client
        .send(req.body(kube::client::Body::from(bytes)).unwrap())
        .await
        .expect("the fake answers");
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), usize::MAX)
        .await
        .unwrap();
    let v =
        serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)));
    (code, v)
}

/// The real answer of step `name` in the recorded replay.
fn recorded(name: &str) -> Value {
    let all = fixture_json("conformance/real-v1.32.6.json");
    all.as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no recorded step {name}"))["body"]
        .clone()
}

/// The recorded namespace is `fd32d`: the same name here lets bodies compare verbatim.
const REC_NS: &str = "fd32d";
const SA: &str = "system:serviceaccount:fd32d:fd-sa";

fn rec_namespace(fake: &FakeApiServer) {
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": REC_NS}}));
}

fn sts_body(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "serviceName": name, "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "app", "image": "pause"}]}},
        },
    })
}

fn forbidden_part(body: &Value) -> Value {
    json!({"code": body["code"], "reason": body["reason"], "message": body["message"], "details": body["details"]})
}

#[tokio::test]
async fn impersonated_requests_without_rbac_get_the_real_403_naming_the_user() {
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    rec_namespace(&fake);
    let client = fake.client();
    let imp = [("Impersonate-User", SA)];
    let cms = format!("/api/v1/namespaces/{REC_NS}/configmaps");
    let (code, body) = raw_with(&client, "GET", &cms, &imp, None, None).await;
    assert_eq!(code, 403);
    let real = recorded("08.imp.list-configmaps");
    assert_eq!(forbidden_part(&body), forbidden_part(&real));

    let sts = format!(
        "/apis/apps/v1/namespaces/{REC_NS}/statefulsets/imp?fieldManager=kustomize-controller&force=true"
    );
    let (code, body) = raw_with(
        &client,
        "PATCH",
        &sts,
        &imp,
        Some("application/apply-patch+yaml"),
        Some(sts_body("imp")),
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        forbidden_part(&body),
        forbidden_part(&recorded("08.imp.ssa-statefulset"))
    );
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(REC_NS), "imp")
            .is_none(),
        "refused before any write"
    );

    let group = [
        ("Impersonate-User", "fd-user"),
        ("Impersonate-Group", "fd-group"),
    ];
    let (code, body) = raw_with(&client, "GET", &cms, &group, None, None).await;
    assert_eq!(code, 403);
    assert_eq!(
        forbidden_part(&body),
        forbidden_part(&recorded("08.imp.group-impersonation"))
    );

    // Without impersonation the admin is never refused.
    let (code, _) = raw(&client, "GET", &cms, None, None).await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn self_subject_review_names_the_impersonated_service_account() {
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    let client = fake.client();
    let (code, body) = raw_with(
        &client,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &[("Impersonate-User", SA)],
        Some("application/json"),
        Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(body["status"], recorded("08.selfsubjectreview")["status"]);
}

fn rbac(kind: &str, ns: Option<&str>, name: &str, rest: Value) -> Value {
    let mut o = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name}});
    if let Some(ns) = ns {
        o["metadata"]["namespace"] = json!(ns);
    }
    for (k, v) in rest.as_object().unwrap() {
        o[k] = v.clone();
    }
    o
}

#[tokio::test]
async fn rbac_rules_are_matched_by_verb_group_resource_subresource_and_name() {
    let fake = FakeApiServer::new();
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t1"}}));
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t2"}}));
    let deployer = "system:serviceaccount:t1:deployer";
    // A Role in t1 for statefulsets (named web only for patch) and their scale subresource.
    fake.seed(rbac("Role", Some("t1"), "sts", json!({"rules": [
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list"]},
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "resourceNames": ["web"], "verbs": ["patch"]},
        {"apiGroups": ["apps"], "resources": ["statefulsets/scale"], "verbs": ["*"]},
    ]})));
    fake.seed(rbac(
        "RoleBinding",
        Some("t1"),
        "sts",
        json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sts"},
            "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": "t1"}],
        }),
    ));
    // A ClusterRole bound cluster-wide to the service-account group: configmaps everywhere.
    fake.seed(rbac(
        "ClusterRole",
        None,
        "cm-reader",
        json!({"rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
        ]}),
    ));
    fake.seed(rbac("ClusterRoleBinding", None, "cm-reader", json!({
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cm-reader"},
        "subjects": [{"kind": "Group", "name": "system:serviceaccounts:t1"}],
    })));
    let client = fake.client();
    let (code, _) = raw(
        &client,
        "PATCH",
        "/apis/apps/v1/namespaces/t1/statefulsets/web?fieldManager=m&force=true",
        Some("application/apply-patch+yaml"),
        Some(sts_body("web")),
    )
    .await;
    assert_eq!(code, 201);
    let imp = [("Impersonate-User", deployer)];
    let ssa = Some("application/apply-patch+yaml");
    type Case<'a> = (&'a str, String, Option<&'a str>, Option<Value>, u16);
    let cases: Vec<Case> = vec![
        (
            "GET",
            "/apis/apps/v1/namespaces/t1/statefulsets/web".into(),
            None,
            None,
            200,
        ),
        (
            "GET",
            "/apis/apps/v1/namespaces/t1/statefulsets".into(),
            None,
            None,
            200,
        ),
        (
            "GET",
            "/apis/apps/v1/namespaces/t2/statefulsets".into(),
            None,
            None,
            403,
        ),
        ("GET", "/apis/apps/v1/statefulsets".into(), None, None, 403),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/t1/statefulsets/web?fieldManager=m&force=true".into(),
            ssa,
            Some(sts_body("web")),
            200,
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/t1/statefulsets/db?fieldManager=m&force=true".into(),
            ssa,
            Some(sts_body("db")),
            403,
        ),
        (
            "DELETE",
            "/apis/apps/v1/namespaces/t1/statefulsets/web".into(),
            None,
            None,
            403,
        ),
        (
            "GET",
            "/apis/apps/v1/namespaces/t1/statefulsets/web/scale".into(),
            None,
            None,
            200,
        ),
        (
            "GET",
            "/api/v1/namespaces/t2/configmaps".into(),
            None,
            None,
            200,
        ),
        (
            "POST",
            "/api/v1/namespaces/t2/configmaps".into(),
            Some("application/json"),
            Some(json!({"metadata": {"name": "x"}})),
            403,
        ),
        (
            "GET",
            "/api/v1/namespaces/t1/secrets".into(),
            None,
            None,
            403,
        ),
    ];
    for (method, path, ct, body, want) in cases {
        let (code, answer) = raw_with(&client, method, &path, &imp, ct, body).await;
        assert_eq!(code, want, "{method} {path}: {answer}");
    }
    let (_, denied) = raw_with(
        &client,
        "DELETE",
        "/apis/apps/v1/namespaces/t1/statefulsets/web",
        &imp,
        None,
        None,
    )
    .await;
    assert_eq!(
        denied["message"],
        "statefulsets.apps \"web\" is forbidden: User \"system:serviceaccount:t1:deployer\" cannot delete resource \"statefulsets\" in API group \"apps\" in the namespace \"t1\""
    );
    let (_, cluster) = raw_with(
        &client,
        "GET",
        "/apis/apps/v1/statefulsets",
        &imp,
        None,
        None,
    )
    .await;
    assert_eq!(
        cluster["message"],
        "statefulsets.apps is forbidden: User \"system:serviceaccount:t1:deployer\" cannot list resource \"statefulsets\" in API group \"apps\" at the cluster scope"
    );
}

#[tokio::test]
async fn the_rbac_log_records_every_request_with_its_attributes_and_impersonation() {
    let fake = FakeApiServer::new();
    fake.grant(
        "default",
        "system:serviceaccount:default:app",
        json!([
            {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get"]},
        ]),
    );
    let client = fake.client();
    raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=0",
        None,
        None,
    )
    .await;
    raw(
        &client,
        "DELETE",
        "/api/v1/namespaces/default/configmaps?dryRun=All",
        None,
        None,
    )
    .await;
    raw_with(
        &client,
        "GET",
        "/apis/apps/v1/namespaces/default/statefulsets/web",
        &[("Impersonate-User", "system:serviceaccount:default:app")],
        None,
        None,
    )
    .await;
    let seen: Vec<String> = fake
        .rbac_requests()
        .iter()
        .map(|r| {
            format!(
                "{} {:?} {} {}/{} as {} dryRun={} allowed={}",
                r.verb,
                r.api_group,
                r.resource_path(),
                r.namespace.as_deref().unwrap_or("-"),
                r.name.as_deref().unwrap_or("-"),
                r.user,
                r.dry_run,
                r.allowed
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            "watch \"\" configmaps default/- as kubernetes-admin dryRun=false allowed=true",
            "deletecollection \"\" configmaps default/- as kubernetes-admin dryRun=true allowed=true",
            "impersonate \"\" serviceaccounts default/app as kubernetes-admin dryRun=false allowed=true",
            "get \"apps\" statefulsets default/web as system:serviceaccount:default:app dryRun=false allowed=true",
        ]
    );
}

#[tokio::test]
async fn a_default_identity_runs_under_its_cluster_role_alone_and_must_be_allowed_to_impersonate() {
    let fake = FakeApiServer::new();
    let me = "system:serviceaccount:flux-system:flux-converger";
    fake.seed(rbac("ClusterRole", None, "converger", json!({"rules": [
        {"apiGroups": ["kustomize.toolkit.fluxcd.io"], "resources": ["kustomizations"], "verbs": ["get", "list", "watch"]},
    ]})));
    fake.seed(rbac("ClusterRoleBinding", None, "converger", json!({
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "converger"},
        "subjects": [{"kind": "ServiceAccount", "name": "flux-converger", "namespace": "flux-system"}],
    })));
    fake.authorize_default_as(me);
    let client = fake.client();
    let ks = "/apis/kustomize.toolkit.fluxcd.io/v1/kustomizations";
    assert_eq!(raw(&client, "GET", ks, None, None).await.0, 200);
    assert_eq!(
        raw(
            &client,
            "GET",
            "/api/v1/namespaces/default/configmaps",
            None,
            None
        )
        .await
        .0,
        403
    );
    let imp = [("Impersonate-User", "system:serviceaccount:t1:deployer")];
    let (code, body) = raw_with(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &imp,
        None,
        None,
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        "serviceaccounts \"deployer\" is forbidden: User \"system:serviceaccount:flux-system:flux-converger\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"t1\""
    );
    fake.authorize_default_as_admin();
    assert_eq!(
        raw(
            &client,
            "GET",
            "/api/v1/namespaces/default/configmaps",
            None,
            None
        )
        .await
        .0,
        200
    );
}

#[tokio::test]
async fn writes_into_a_missing_or_terminating_namespace_are_refused_like_the_real_server() {
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    let client = fake.client();
    let missing = format!("{REC_NS}-missing");
    let (code, body) = raw(
        &client,
        "POST",
        &format!("/api/v1/namespaces/{missing}/configmaps"),
        Some("application/json"),
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})),
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(
        forbidden_part(&body),
        forbidden_part(&recorded("10.missing-ns.create-cm"))
    );
    let (code, body) = raw(&client, "PATCH",
        &format!("/apis/apps/v1/namespaces/{missing}/statefulsets/web?fieldManager=kustomize-controller&force=true&dryRun=All"),
        Some("application/apply-patch+yaml"), Some(sts_body("web"))).await;
    assert_eq!(code, 404, "dry runs too: {body}");

    // A namespace with a held object: deleting it answers Terminating, creates are refused,
    // and the namespace goes once the object's finalizer does.
    let (code, _) = raw(
        &client,
        "POST",
        "/api/v1/namespaces",
        Some("application/json"),
        Some(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": REC_NS}})),
    )
    .await;
    assert_eq!(code, 201);
    assert!(
        fake.get("v1", "ServiceAccount", Some(REC_NS), "default")
            .is_some(),
        "the default service account"
    );
    let cms = format!("/api/v1/namespaces/{REC_NS}/configmaps");
    raw(
        &client,
        "POST",
        &cms,
        Some("application/json"),
        Some(json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})),
    )
    .await;
    let (code, ns) = raw(
        &client,
        "DELETE",
        &format!("/api/v1/namespaces/{REC_NS}"),
        None,
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(ns["kind"], "Namespace");
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert!(ns["metadata"]["deletionTimestamp"].is_string());
    let (code, body) = raw(
        &client,
        "POST",
        &cms,
        Some("application/json"),
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late"}})),
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        forbidden_part(&body),
        forbidden_part(&recorded("11.ns.create-in-terminating"))
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        fake.get("v1", "Namespace", None, REC_NS).is_some(),
        "held by the ConfigMap's finalizer"
    );
    assert!(
        fake.get("v1", "ServiceAccount", Some(REC_NS), "default")
            .is_none(),
        "the rest is deleted"
    );
    let (code, _) = raw(
        &client,
        "PATCH",
        &format!("{cms}/held"),
        Some("application/merge-patch+json"),
        Some(json!({"metadata": {"finalizers": null}})),
    )
    .await;
    assert_eq!(code, 200);
    // The controller may need a few passes; bounded by attempts, not by time.
    for _ in 0..1500 {
        if fake.get("v1", "Namespace", None, REC_NS).is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(fake.get("v1", "Namespace", None, REC_NS).is_none());
}

#[tokio::test]
async fn lists_page_with_limit_and_continue_and_a_bad_token_is_the_real_400() {
    let fake = FakeApiServer::new();
    for i in 0..5 {
        fake.seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("page-{i}"), "namespace": "default", "labels": {"page": "yes"}}}));
    }
    let client = fake.client();
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
    );
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().labels("page=yes").limit(2);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.unwrap();
        pages += 1;
        names.extend(page.items.iter().map(|o| o.metadata.name.clone().unwrap()));
        match page.metadata.continue_ {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names, ["page-0", "page-1", "page-2", "page-3", "page-4"]);
    // Without a selector the real server counts what is left.
    let (_, first) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps?limit=1",
        None,
        None,
    )
    .await;
    assert_eq!(first["metadata"]["remainingItemCount"], 4);
    let (code, body) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps?limit=1&continue=not-a-token",
        None,
        None,
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(body, recorded("09.page.bad-continue"));
}

fn ks_body(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
           "metadata": {"name": name, "labels": {"app": "fd"}}, "spec": spec})
}

fn status_part(body: &Value) -> Value {
    json!({"code": body["code"], "reason": body["reason"], "message": body["message"], "details": body["details"]})
}

#[tokio::test]
async fn flux_crds_validate_required_fields_and_enums_prune_unknown_fields_and_default() {
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    rec_namespace(&fake);
    let client = fake.client();
    let ks = format!("/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/{REC_NS}/kustomizations");
    let good = json!({"interval": "10m", "path": "./apps", "prune": true,
                      "sourceRef": {"kind": "GitRepository", "name": "repo"}});
    let (code, made) = raw(
        &client,
        "POST",
        &ks,
        Some("application/json"),
        Some(ks_body("ks1", good.clone())),
    )
    .await;
    assert_eq!(code, 201);
    let real = recorded("05.ks.create");
    assert_eq!(made["spec"], real["spec"], "defaults from the schema");
    assert_eq!(made["status"], real["status"]);

    let (code, body) = raw(
        &client,
        "POST",
        &ks,
        Some("application/json"),
        Some(ks_body("ks-bad", json!({"interval": "10m"}))),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status_part(&body),
        status_part(&recorded("05.ks.create-missing-required"))
    );

    let mut unknown = good.clone();
    unknown["notAField"] = json!("x");
    let (code, body) = raw(
        &client,
        "POST",
        &ks,
        Some("application/json"),
        Some(ks_body("ks-unknown", unknown)),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(
        body["spec"],
        recorded("05.ks.create-unknown-field")["spec"],
        "pruned"
    );

    // The status subresource is validated too: what a stand-in kustomize-controller writes.
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{ks}/ks1/status"),
        Some("application/merge-patch+json"),
        Some(json!({"status": {"conditions": [{"type": "Ready", "status": "Maybe"}]}})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status_part(&body),
        status_part(&recorded("05.ks.status-merge-invalid-condition"))
    );
    let cond = json!({"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded",
                      "message": "Applied revision: main@sha1:abc", "lastTransitionTime": "2024-01-01T00:00:00Z"});
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{ks}/ks1/status"),
        Some("application/merge-patch+json"),
        Some(json!({"status": {"lastAppliedRevision": "main@sha1:abc", "conditions": [cond]}})),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"]["lastAppliedRevision"], "main@sha1:abc");

    let gr = format!("/apis/source.toolkit.fluxcd.io/v1/namespaces/{REC_NS}/gitrepositories");
    let (code, made) = raw(&client, "POST", &gr, Some("application/json"), Some(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "metadata": {"name": "repo"},
        "spec": {"interval": "1m", "url": "https://example.com/repo.git"}}))).await;
    assert_eq!(code, 201);
    assert_eq!(made["spec"], recorded("05.gr.create")["spec"]);
    let artifact = json!({"path": "gitrepository/x/repo/abc.tar.gz", "url": "http://source/abc.tar.gz",
        "revision": "main@sha1:abc", "digest": format!("sha256:{}", "0".repeat(64)),
        "lastUpdateTime": "2024-01-01T00:00:00Z", "size": 10});
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{gr}/repo/status"),
        Some("application/merge-patch+json"),
        Some(json!({"status": {"artifact": artifact}})),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let mut status = body["status"].clone();
    status["artifact"]["lastUpdateTime"] = json!("<ts>");
    assert_eq!(status, recorded("05.gr.status-artifact")["status"]);
    let (code, body) = raw(&client, "PATCH", &format!("{gr}/repo/status"), Some("application/json-patch+json"),
        Some(json!([{"op": "replace", "path": "/status/artifact", "value": {"revision": "main@sha1:xyz"}}]))).await;
    assert_eq!(code, 422);
    assert_eq!(
        status_part(&body),
        status_part(&recorded("05.gr.status-artifact-missing-required"))
    );

    // A custom resource deleted at once answers a Status, as the built-ins do.
    let (code, body) = raw(&client, "DELETE", &format!("{ks}/ks-unknown"), None, None).await;
    assert_eq!(code, 200);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["details"]["kind"], "kustomizations");
}

#[tokio::test]
async fn lease_micro_times_decode_only_with_six_fractional_digits() {
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    rec_namespace(&fake);
    let client = fake.client();
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{REC_NS}/leases");
    let lease = |name: &str, t: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, "acquireTime": t, "renewTime": t, "leaseTransitions": 0}})
    };
    let (code, _) = raw(
        &client,
        "POST",
        &leases,
        Some("application/json"),
        Some(lease("converger", "2026-11-30T07:44:15.123456Z")),
    )
    .await;
    assert_eq!(code, 201);
    let (code, body) = raw(
        &client,
        "POST",
        &leases,
        Some("application/json"),
        Some(lease("bad-time", "2024-01-01T00:00:00Z")),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(body, recorded("06.lease.bad-microtime"));
    let (code, _) = raw(
        &client,
        "PATCH",
        &format!("{leases}/converger"),
        Some("application/strategic-merge-patch+json"),
        Some(json!({"spec": {"renewTime": "2026-11-30T07:44:16Z"}})),
    )
    .await;
    assert_eq!(code, 400, "patches decode the result the same way");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_lease_manager_acquires_renews_releases_and_hands_over_on_the_fake() {
    use kube_lease_manager::LeaseManagerBuilder;
    let fake = FakeApiServer::new();
    let client = fake.client();
    let a = LeaseManagerBuilder::new(client.clone(), "flux-converger")
        .with_namespace("flux-system")
        .with_identity("pod-a")
        .with_duration(15)
        .with_grace(2)
        .build()
        .await
        .unwrap();
    assert!(a.changed().await.unwrap(), "pod-a takes the free lease");
    let lease = fake
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("flux-system"),
            "flux-converger",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "pod-a");
    let renew = lease["spec"]["renewTime"].as_str().unwrap();
    assert_eq!(renew.len(), "2026-11-30T07:44:15.123456Z".len(), "{renew}");
    a.release().await.unwrap();
    let lease = fake
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("flux-system"),
            "flux-converger",
        )
        .unwrap();
    assert!(lease["spec"].get("holderIdentity").is_none(), "{lease}");
    let b = LeaseManagerBuilder::new(client, "flux-converger")
        .with_namespace("flux-system")
        .with_identity("pod-b")
        .with_duration(15)
        .with_grace(2)
        .build()
        .await
        .unwrap();
    assert!(b.changed().await.unwrap(), "pod-b takes the released lease");
    let lease = fake
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("flux-system"),
            "flux-converger",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "pod-b");
    assert_eq!(lease["spec"]["leaseTransitions"], 2);
}

#[test]
fn micro_times_parse_only_with_six_fractional_digits() {
    use fake_apiserver::semantics::microtime::parse_error;
    let table = [
        ("2026-11-30T07:44:15.123456Z", None),
        ("2026-11-30T07:44:15.123456+01:00", None),
        (
            "2024-01-01T00:00:00Z",
            Some(r#"cannot parse "Z" as ".000000""#),
        ),
        (
            "2024-01-01T00:00:00.123Z",
            Some(r#"cannot parse ".123Z" as ".000000""#),
        ),
        ("2024-01-01", Some(r#"cannot parse "" as "T""#)),
        (
            "2024-01-01T00:00:00.123456",
            Some(r#"cannot parse "" as "Z07:00""#),
        ),
        ("2024-01-01T00:00:00.123456Zx", Some(r#"extra text: "x""#)),
    ];
    for (value, want) in table {
        let got = parse_error(value);
        match want {
            None => assert_eq!(got, None, "{value}"),
            Some(tail) => assert!(
                got.as_deref().is_some_and(|g| g.ends_with(tail)),
                "{value}: {got:?}"
            ),
        }
    }
}

#[tokio::test]
async fn apply_with_an_undeclared_field_is_the_real_500_dry_runs_and_creates_included() {
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    rec_namespace(&fake);
    let client = fake.client();
    let sts = format!("/apis/apps/v1/namespaces/{REC_NS}/statefulsets");
    let ssa = Some("application/apply-patch+yaml");
    let q = "fieldManager=kustomize-controller&force=true";
    let (code, _) = raw(
        &client,
        "PATCH",
        &format!("{sts}/web?{q}"),
        ssa,
        Some(sts_body("web")),
    )
    .await;
    assert_eq!(code, 201);
    let mut bogus = sts_body("web");
    bogus["spec"]["bogusField"] = json!(1);
    let mut tpl = sts_body("web");
    tpl["spec"]["template"]["spec"]["containers"][0]["bogus"] = json!(1);
    let mut absent = bogus.clone();
    absent["metadata"]["name"] = json!("web-new");
    let cases = [
        ("web", "", bogus.clone(), "01.sts.ssa-unknown-field"),
        (
            "web",
            "&dryRun=All",
            bogus,
            "01.sts.ssa-unknown-field-dryrun",
        ),
        (
            "web",
            "&dryRun=All",
            tpl,
            "01.sts.ssa-unknown-template-field-dryrun",
        ),
        (
            "web-new",
            "&dryRun=All",
            absent,
            "01.sts.ssa-create-unknown-field-dryrun",
        ),
    ];
    for (name, dry, body, step) in cases {
        let (code, answer) = raw(
            &client,
            "PATCH",
            &format!("{sts}/{name}?{q}{dry}"),
            ssa,
            Some(body),
        )
        .await;
        assert_eq!(code, 500, "{step}");
        assert_eq!(answer, recorded(step), "{step}");
    }
    let web = fake
        .get("apps/v1", "StatefulSet", Some(REC_NS), "web")
        .unwrap();
    assert_eq!(web["metadata"]["generation"], 1, "nothing written");
    assert!(
        fake.get("apps/v1", "StatefulSet", Some(REC_NS), "web-new")
            .is_none()
    );
}

#[tokio::test]
async fn a_volume_pre_bound_by_claim_ref_binds_its_claim_and_the_resize_rules_follow() {
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    rec_namespace(&fake);
    let client = fake.client();
    for (name, expand) in [("fd32d-exp", true), ("fd32d-noexp", false)] {
        let mut sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name}, "provisioner": "fake.example.com"});
        if expand {
            sc["allowVolumeExpansion"] = json!(true);
        }
        let (code, made) = raw(
            &client,
            "POST",
            "/apis/storage.k8s.io/v1/storageclasses",
            Some("application/json"),
            Some(sc),
        )
        .await;
        assert_eq!(code, 201);
        assert_eq!(
            (&made["reclaimPolicy"], &made["volumeBindingMode"]),
            (&json!("Delete"), &json!("Immediate"))
        );
    }
    let pvcs = format!("/api/v1/namespaces/{REC_NS}/persistentvolumeclaims");
    for (cls, cname) in [("fd32d-noexp", "bound-noexp"), ("fd32d-exp", "bound-exp")] {
        let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": format!("{REC_NS}-{cname}")},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                     "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": format!("/var/lib/replay/{REC_NS}-{cname}")},
                     "claimRef": {"namespace": REC_NS, "name": cname}}});
        let (code, made) = raw(
            &client,
            "POST",
            "/api/v1/persistentvolumes",
            Some("application/json"),
            Some(pv),
        )
        .await;
        assert_eq!(code, 201);
        let real = recorded(&format!("02.pv.create-{cname}"));
        assert_eq!(made["spec"], real["spec"]);
        assert_eq!(
            made["metadata"]["finalizers"],
            real["metadata"]["finalizers"]
        );
        let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": cname},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": cls, "resources": {"requests": {"storage": "1Gi"}}}});
        let (code, _) = raw(&client, "POST", &pvcs, Some("application/json"), Some(pvc)).await;
        assert_eq!(code, 201);
        let claim = fake
            .get("v1", "PersistentVolumeClaim", Some(REC_NS), cname)
            .unwrap();
        assert_eq!(
            claim["status"],
            json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}})
        );
        assert_eq!(claim["spec"]["volumeName"], format!("{REC_NS}-{cname}"));
        let volume = fake
            .get("v1", "PersistentVolume", None, &format!("{REC_NS}-{cname}"))
            .unwrap();
        assert_eq!(volume["status"]["phase"], "Bound");
        assert_eq!(volume["spec"]["claimRef"]["uid"], claim["metadata"]["uid"]);
    }
    let merge = Some("application/merge-patch+json");
    let size = |s: &str| json!({"spec": {"resources": {"requests": {"storage": s}}}});
    let steps = [
        ("bound-noexp", "2Gi", 403, "02.pvc.grow-bound-noexp"),
        ("bound-noexp", "500Mi", 422, "02.pvc.shrink-bound-noexp"),
        ("bound-exp", "2Gi", 200, "02.pvc.grow-bound-exp"),
        (
            "bound-exp",
            "1536Mi",
            200,
            "02.pvc.shrink-bound-exp-above-capacity",
        ),
        (
            "bound-exp",
            "1Gi",
            422,
            "02.pvc.shrink-bound-exp-to-capacity",
        ),
    ];
    for (claim, to, want, step) in steps {
        let (code, body) = raw(
            &client,
            "PATCH",
            &format!("{pvcs}/{claim}"),
            merge,
            Some(size(to)),
        )
        .await;
        assert_eq!(code, want, "{step}: {body}");
        let real = recorded(step);
        if want == 200 {
            assert_eq!(
                body["spec"]["resources"], real["spec"]["resources"],
                "{step}"
            );
        } else {
            assert_eq!(status_part(&body), status_part(&real), "{step}");
        }
    }
}

// ---------------------------------------------------------------- StatefulSets on 1.36

/// `tests/fixtures/v1.36/error-statefulset-update-mount-not-found.json`, replayed: a 1.36 server
/// refuses an update whose pod template mounts a volume no template or pod volume names (one
/// `FieldValueNotFound` cause, byte for byte), and with the template added answers only the
/// immutable-field Forbidden, whose mutable fields name `revisionHistoryLimit`; a 1.32 server
/// takes the first request (200) and answers the second with its own message.
#[tokio::test]
async fn a_1_36_server_validates_the_pod_templates_mounts_on_update() {
    let recorded = fixture_json("v1.36/error-statefulset-update-mount-not-found.json");
    let steps = &recorded["steps"];
    let first = &steps["mount-of-absent-template-update-dryrun"];
    let second = &steps["added-template-update-dryrun"];
    for version in [KubeVersion::V1_32, KubeVersion::V1_36] {
        let fake = FakeApiServer::with_version(version);
        fake.seed(json!({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": "vct-fixture"}}));
        let client = fake.client();
        let path = "/apis/apps/v1/namespaces/vct-fixture/statefulsets/web";
        // The live object: the first request's, without the mount of `logs`.
        let mut live = first["request"]["body"].clone();
        live["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
            .as_array_mut()
            .unwrap()
            .truncate(1);
        let (code, _) = raw(
            &client,
            "PATCH",
            &format!("{path}?fieldManager=kustomize-controller"),
            Some("application/apply-patch+yaml"),
            Some(live),
        )
        .await;
        assert_eq!(code, 201, "{version:?}");
        for (name, step) in [("mount of nothing", first), ("template added", second)] {
            let request = &step["request"];
            let (code, body) = raw(
                &client,
                request["method"].as_str().unwrap(),
                &format!("{path}?{}", request["query"].as_str().unwrap()),
                request["contentType"].as_str(),
                Some(request["body"].clone()),
            )
            .await;
            match (version, name) {
                (KubeVersion::V1_36, _) => {
                    assert_eq!(code, 422, "{version:?} {name}: {body}");
                    assert_eq!(body, step["body"], "{version:?} {name}");
                }
                (_, "mount of nothing") => assert_eq!(code, 200, "{version:?} {name}: {body}"),
                _ => {
                    assert_eq!(code, 422, "{version:?} {name}: {body}");
                    assert_eq!(
                        body["details"]["causes"][0]["message"],
                        json!(format!(
                            "Forbidden: {}",
                            fake_apiserver::semantics::statefulset::FORBIDDEN_UPDATE
                        )),
                        "{version:?} {name}"
                    );
                }
            }
        }
        assert_eq!(
            fake.get("apps/v1", "StatefulSet", Some("vct-fixture"), "web")
                .unwrap()["metadata"]["generation"],
            1,
            "{version:?}: a dry run wrote"
        );
    }
}
