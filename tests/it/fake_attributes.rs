//! The fake's VolumeAttributesClass, as each emulated server serves it (issue #38): none on 1.28
//! (the claim has no such field), none by default on 1.32 (the feature gate is beta and off,
//! `storage.k8s.io/v1beta1` disabled like every beta API), `v1beta1` on a 1.32 started with the
//! gate and the runtime-config, `v1` on 1.36 (GA in 1.34, locked on in 1.36;
//! `pkg/features/kube_features.go`); the class's own validation; and a claim's class change as
//! `ValidatePersistentVolumeClaimUpdate` and `DropDisabledFields` rule it (Bound only; never
//! back to nil once applied; dropped or forbidden with the gate off).

use fake_apiserver::{AttributesClasses, FakeApiServer, KubeVersion};
use serde_json::{Value, json};

const PVCS: &str = "/api/v1/namespaces/default/persistentvolumeclaims";

fn fixture(rel: &str) -> String {
    let path = format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

/// The answer's code and body (JSON, or the text of a plain answer as a string).
async fn raw(
    fake: &FakeApiServer,
    method: &str,
    path: &str,
    ct: &str,
    body: Value,
) -> (u16, Value) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", ct)
        .body(kube::client::Body::from(if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        }))
        .unwrap();
    let resp = fake.client().send(req).await.expect("the fake answers");
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), usize::MAX)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (code, body)
}

async fn get(fake: &FakeApiServer, path: &str) -> (u16, Value) {
    raw(fake, "GET", path, "application/json", Value::Null).await
}

fn class(api_version: &str, name: &str) -> Value {
    json!({"apiVersion": api_version, "kind": "VolumeAttributesClass",
           "metadata": {"name": name}, "driverName": "ebs.csi.aws.com",
           "parameters": {"iops": "6000", "throughput": "500"}})
}

/// A fake of `version` (`gate`: the 1.32 gate on) with the captured Bound claim `data-web-0`
/// (class `silver` when `with_class`).
fn fake_with_claim(version: KubeVersion, gate: bool, with_class: bool) -> FakeApiServer {
    let fake = FakeApiServer::with_version(version);
    if gate {
        fake.enable_volume_attributes_class();
    }
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    let mut pvc: Value = serde_saphyr::from_str(&fixture("v1.32/pvc-bound.yaml")).unwrap();
    if with_class {
        pvc["spec"]["volumeAttributesClassName"] = json!("silver");
    }
    fake.seed(pvc);
    fake
}

fn claim(fake: &FakeApiServer) -> Value {
    fake.get("v1", "PersistentVolumeClaim", Some("default"), "data-web-0")
        .unwrap()
}

async fn set_class(fake: &FakeApiServer, class: Value) -> (u16, Value) {
    raw(
        fake,
        "PATCH",
        &format!("{PVCS}/data-web-0"),
        "application/merge-patch+json",
        json!({"spec": {"volumeAttributesClassName": class}}),
    )
    .await
}

fn resources(list: &Value) -> Vec<String> {
    list["resources"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|x| x["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn each_version_serves_the_class_as_its_real_server_does() {
    for (version, gate, expected, served) in [
        (KubeVersion::V1_28, false, AttributesClasses::Absent, None),
        (KubeVersion::V1_32, false, AttributesClasses::Disabled, None),
        (
            KubeVersion::V1_32,
            true,
            AttributesClasses::Beta,
            Some("v1beta1"),
        ),
        (KubeVersion::V1_36, false, AttributesClasses::Ga, Some("v1")),
    ] {
        let fake = FakeApiServer::with_version(version);
        if gate {
            fake.enable_volume_attributes_class();
        }
        assert_eq!(fake.attributes_classes(), expected, "{version:?}");
        let (_, groups) = get(&fake, "/apis").await;
        let storage = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "storage.k8s.io")
            .unwrap()
            .clone();
        let versions: Vec<&str> = storage["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_str().unwrap())
            .collect();
        assert_eq!(storage["preferredVersion"]["version"], "v1", "{version:?}");
        let (_, v1) = get(&fake, "/apis/storage.k8s.io/v1").await;
        assert_eq!(
            resources(&v1).contains(&"volumeattributesclasses".to_string()),
            served == Some("v1"),
            "{version:?}: {v1}"
        );
        let (code, beta) = get(&fake, "/apis/storage.k8s.io/v1beta1").await;
        if served == Some("v1beta1") {
            assert_eq!(versions, ["v1", "v1beta1"], "{version:?}");
            assert_eq!(code, 200);
            assert_eq!(resources(&beta), ["volumeattributesclasses"]);
        } else {
            assert_eq!(versions, ["v1"], "{version:?}");
            // A group version the server does not serve falls through to the mux.
            assert_eq!(code, 404, "{version:?}");
            assert_eq!(beta, json!("404 page not found\n"), "{version:?}");
        }
        // The resource itself: served at its version, a JSON 404 in a served group version
        // that does not have it.
        let (code, body) = get(&fake, "/apis/storage.k8s.io/v1/volumeattributesclasses").await;
        if served == Some("v1") {
            assert_eq!(code, 200, "{body}");
        } else {
            assert_eq!(code, 404, "{version:?}");
            assert_eq!(
                body["message"],
                "the server could not find the requested resource"
            );
        }
    }
}

#[tokio::test]
async fn a_class_is_validated_and_immutable() {
    let fake = FakeApiServer::with_version(KubeVersion::V1_36);
    let path = "/apis/storage.k8s.io/v1/volumeattributesclasses";
    let mut no_driver = class("storage.k8s.io/v1", "gold");
    no_driver.as_object_mut().unwrap().remove("driverName");
    let (code, body) = raw(&fake, "POST", path, "application/json", no_driver).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "VolumeAttributesClass.storage.k8s.io \"gold\" is invalid: driverName: Required value"
    );
    let (code, body) = raw(
        &fake,
        "POST",
        path,
        "application/json",
        class("storage.k8s.io/v1", "gold"),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = raw(
        &fake,
        "PATCH",
        &format!("{path}/gold"),
        "application/merge-patch+json",
        json!({"parameters": {"iops": "9000"}}),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "VolumeAttributesClass.storage.k8s.io \"gold\" is invalid: parameters: Forbidden: updates to parameters are forbidden."
    );
    let (code, _) = get(&fake, &format!("{path}/gold")).await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn a_bound_claim_moves_to_another_class_where_the_feature_is_on() {
    for (version, gate) in [(KubeVersion::V1_32, true), (KubeVersion::V1_36, false)] {
        let fake = fake_with_claim(version, gate, true);
        let (code, body) = set_class(&fake, json!("gold")).await;
        assert_eq!(code, 200, "{version:?}: {body}");
        assert_eq!(claim(&fake)["spec"]["volumeAttributesClassName"], "gold");
    }
}

#[tokio::test]
async fn an_unbound_claim_keeps_its_class() {
    let fake = fake_with_claim(KubeVersion::V1_36, false, true);
    fake.modify(
        "v1",
        "PersistentVolumeClaim",
        Some("default"),
        "data-web-0",
        |c| {
            c["status"] = json!({"phase": "Pending"});
        },
    );
    let (code, body) = set_class(&fake, json!("gold")).await;
    assert_eq!(code, 422, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "PersistentVolumeClaim \"data-web-0\" is invalid: spec: Forbidden: spec is immutable \
             after creation except resources.requests and volumeAttributesClassName for bound claims"
        ),
        "{message}"
    );
    assert!(message.contains("VolumeAttributesClassName"), "{message}");
}

#[tokio::test]
async fn a_class_once_set_never_goes_back_to_none() {
    // The beta: never, from a non-nil value.
    let fake = fake_with_claim(KubeVersion::V1_32, true, true);
    let (code, body) = set_class(&fake, Value::Null).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "PersistentVolumeClaim \"data-web-0\" is invalid: spec.volumeAttributesClassName: Forbidden: update from non-nil value to nil is forbidden"
    );
    let (code, body) = set_class(&fake, json!("")).await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with("update from non-nil value to an empty string is forbidden"),
        "{body}"
    );
    // GA: only once the driver applied one.
    let fake = fake_with_claim(KubeVersion::V1_36, false, true);
    let (code, body) = set_class(&fake, Value::Null).await;
    assert_eq!(code, 200, "not applied yet: {body}");
    let (code, _) = set_class(&fake, json!("silver")).await;
    assert_eq!(code, 200);
    let (code, body) = raw(
        &fake,
        "PATCH",
        &format!("{PVCS}/data-web-0/status"),
        "application/merge-patch+json",
        json!({"status": {"currentVolumeAttributesClassName": "silver"}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = set_class(&fake, Value::Null).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "PersistentVolumeClaim \"data-web-0\" is invalid: spec.volumeAttributesClassName: Forbidden: update to nil is forbidden when status.currentVolumeAttributesClassName is not nil"
    );
}

#[tokio::test]
async fn without_the_feature_a_class_is_dropped_or_forbidden() {
    // 1.28 has no such field; 1.32 without the gate drops a class the claim did not have.
    for version in [KubeVersion::V1_28, KubeVersion::V1_32] {
        let fake = fake_with_claim(version, false, false);
        let before = claim(&fake)["metadata"]["resourceVersion"].clone();
        let (code, body) = set_class(&fake, json!("gold")).await;
        assert_eq!(code, 200, "{version:?}: {body}");
        let after = claim(&fake);
        assert!(
            after["spec"].get("volumeAttributesClassName").is_none(),
            "{version:?}: {after}"
        );
        assert_eq!(after["metadata"]["resourceVersion"], before, "no write");
    }
    // A claim that had one (the gate was on once) may not change it.
    let fake = fake_with_claim(KubeVersion::V1_32, false, true);
    let (code, body) = set_class(&fake, json!("gold")).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "PersistentVolumeClaim \"data-web-0\" is invalid: spec.volumeAttributesClassName: Forbidden: update is forbidden when the VolumeAttributesClass feature gate is disabled"
    );
    // Its status keeps no modify fields either (`DropDisabledFieldsFromStatus`).
    let fake = fake_with_claim(KubeVersion::V1_32, false, false);
    let (code, body) = raw(
        &fake,
        "PATCH",
        &format!("{PVCS}/data-web-0/status"),
        "application/merge-patch+json",
        json!({"status": {"currentVolumeAttributesClassName": "gold",
                          "modifyVolumeStatus": {"targetVolumeAttributesClassName": "gold", "status": "InProgress"}}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let status = &claim(&fake)["status"];
    assert!(
        status.get("currentVolumeAttributesClassName").is_none(),
        "{status}"
    );
    assert!(status.get("modifyVolumeStatus").is_none(), "{status}");
}

#[tokio::test]
async fn the_resizer_stand_in_plays_the_modify_path_through_the_status() {
    let fake = fake_with_claim(KubeVersion::V1_36, false, true);
    let (code, _) = set_class(&fake, json!("gold")).await;
    assert_eq!(code, 200);
    let resizer = test_support::resizer::Resizer::new(fake.client(), "ebs.csi.aws.com");
    resizer.modify_start("default", "data-web-0").await.unwrap();
    let c = claim(&fake);
    assert_eq!(
        c["status"]["modifyVolumeStatus"],
        json!({"targetVolumeAttributesClassName": "gold", "status": "InProgress"})
    );
    assert_eq!(c["status"]["conditions"][0]["type"], "ModifyingVolume");
    resizer
        .modify_finish("default", "data-web-0")
        .await
        .unwrap();
    let c = claim(&fake);
    assert_eq!(c["status"]["currentVolumeAttributesClassName"], "gold");
    assert!(c["status"].get("modifyVolumeStatus").is_none(), "{c}");
    assert!(c["status"].get("conditions").is_none(), "{c}");
    let reasons: Vec<String> = fake
        .list("v1", "Event", Some("default"))
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(reasons.contains(&"VolumeModify".to_string()), "{reasons:?}");
    assert!(
        reasons.contains(&"VolumeModifySuccessful".to_string()),
        "{reasons:?}"
    );
}
