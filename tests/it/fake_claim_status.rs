//! The fake's claim status, as the external-resizer writes it and a real server keeps it
//! (issue #40): the `persistentvolumeclaims/status` subresource, its validation
//! (`ValidatePersistentVolumeClaimStatusUpdate`) and what servers before 1.32 drop
//! (`DropDisabledFieldsFromStatus` without `RecoverVolumeExpansionFailure`), and the rule that
//! lets a Bound claim's request come down to anything still above its capacity from 1.32 on
//! (the real answers: `tests/fixtures/v1.32/error-pvc-shrink-below-capacity.json`, the
//! conformance steps `02.pvc.shrink-bound-exp-*`).

use fake_apiserver::{FakeApiServer, KubeVersion};
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Value, json};
use test_support::resizer::{FS_PENDING_MESSAGE, Resizer};

const PVCS: &str = "/api/v1/namespaces/default/persistentvolumeclaims";

fn fixture(rel: &str) -> String {
    let path = format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

/// A fake of `version` with the captured classes and the captured Bound claim `data-web-0`,
/// asking for `request` (its capacity 1Gi, as bound).
fn fake_with_claim(version: KubeVersion, request: &str) -> FakeApiServer {
    let fake = FakeApiServer::with_version(version);
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    let dir = if version == KubeVersion::V1_28 {
        "v1.28"
    } else {
        "v1.32"
    };
    let mut pvc: Value =
        serde_saphyr::from_str(&fixture(&format!("{dir}/pvc-bound.yaml"))).unwrap();
    pvc["spec"]["resources"]["requests"]["storage"] = json!(request);
    fake.seed(pvc);
    fake
}

async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Value,
) -> (u16, Value) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .unwrap();
    let resp = client.send(req).await.expect("the fake answers");
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), usize::MAX)
        .await
        .unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn claim(fake: &FakeApiServer) -> Value {
    fake.get("v1", "PersistentVolumeClaim", Some("default"), "data-web-0")
        .unwrap()
}

async fn status_patch(fake: &FakeApiServer, body: Value) -> (u16, Value) {
    raw(
        &fake.client(),
        "PATCH",
        &format!("{PVCS}/data-web-0/status"),
        "application/merge-patch+json",
        body,
    )
    .await
}

#[tokio::test]
async fn the_resizer_drives_a_claim_through_its_status_subresource() {
    let fake = fake_with_claim(KubeVersion::V1_32, "2Gi");
    let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");

    resizer.start("default", "data-web-0").await.unwrap();
    let c = claim(&fake);
    assert_eq!(
        c["status"]["allocatedResourceStatuses"],
        json!({"storage": "ControllerResizeInProgress"})
    );
    assert_eq!(c["status"]["allocatedResources"], json!({"storage": "2Gi"}));
    assert_eq!(c["status"]["conditions"][0]["type"], "Resizing");
    assert_eq!(c["status"]["capacity"], json!({"storage": "1Gi"}));
    assert_eq!(c["spec"]["resources"]["requests"]["storage"], "2Gi");

    resizer.needs_node("default", "data-web-0").await.unwrap();
    let c = claim(&fake);
    assert_eq!(
        c["status"]["allocatedResourceStatuses"],
        json!({"storage": "NodeResizePending"})
    );
    assert_eq!(c["status"]["conditions"][0]["message"], FS_PENDING_MESSAGE);

    resizer.finish("default", "data-web-0").await.unwrap();
    let c = claim(&fake);
    assert_eq!(c["status"]["capacity"], json!({"storage": "2Gi"}));
    // Emptied maps and lists are not kept (`omitempty`), as the real server reads them back.
    assert!(
        c["status"].get("allocatedResourceStatuses").is_none(),
        "{c}"
    );
    assert!(c["status"].get("conditions").is_none(), "{c}");

    // Each step is an Event on the claim, readable by the claim's name as on a real server.
    let ar = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    };
    let events: Api<DynamicObject> = Api::namespaced_with(fake.client(), "default", &ar);
    let listed = events
        .list(
            &ListParams::default()
                .fields("involvedObject.kind=PersistentVolumeClaim,involvedObject.name=data-web-0"),
        )
        .await
        .unwrap();
    // A list is in name order (the names are generated), as etcd's keys are.
    let mut reasons: Vec<String> = listed
        .items
        .iter()
        .map(|e| e.data["reason"].as_str().unwrap_or_default().to_string())
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "FileSystemResizeRequired",
            "Resizing",
            "VolumeResizeSuccessful"
        ]
    );
}

#[tokio::test]
async fn a_status_write_changes_only_the_status_and_a_spec_write_never_the_status() {
    let fake = fake_with_claim(KubeVersion::V1_32, "2Gi");
    let (code, body) = status_patch(
        &fake,
        json!({"spec": {"resources": {"requests": {"storage": "9Gi"}}},
               "status": {"capacity": {"storage": "2048Mi"}}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let c = claim(&fake);
    assert_eq!(c["spec"]["resources"]["requests"]["storage"], "2Gi");
    assert_eq!(
        c["status"]["capacity"]["storage"], "2Gi",
        "stored canonical"
    );

    let (code, body) = raw(
        &fake.client(),
        "PATCH",
        &format!("{PVCS}/data-web-0"),
        "application/merge-patch+json",
        json!({"status": {"capacity": {"storage": "5Gi"}, "allocatedResourceStatuses": {"storage": "ControllerResizeInfeasible"}}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let c = claim(&fake);
    assert_eq!(c["status"]["capacity"]["storage"], "2Gi");
    assert!(c["status"].get("allocatedResourceStatuses").is_none());
}

#[tokio::test]
async fn the_status_is_validated_as_the_real_server_validates_it() {
    let fake = fake_with_claim(KubeVersion::V1_32, "2Gi");
    let before = claim(&fake);
    let (code, body) = status_patch(
        &fake,
        json!({"status": {"allocatedResourceStatuses": {"storage": "Resizing"}}}),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "PersistentVolumeClaim \"data-web-0\" is invalid: status.allocatedResourceStatus: Unsupported value: storage: \
         supported values: \"ControllerResizeInProgress\", \"ControllerResizeInfeasible\", \"NodeResizeInProgress\", \
         \"NodeResizeInfeasible\", \"NodeResizePending\""
    );
    assert_eq!(
        body["details"]["causes"][0]["reason"],
        "FieldValueNotSupported"
    );
    assert_eq!(
        body["details"]["causes"][0]["field"],
        "status.allocatedResourceStatus"
    );

    let (code, body) = status_patch(
        &fake,
        json!({"status": {"allocatedResourceStatuses": {"cpu": "ControllerResizeInProgress"}}}),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "PersistentVolumeClaim \"data-web-0\" is invalid: status.allocatedResourceStatus: Unsupported value: \"cpu\": supported values: \"storage\""
    );
    let (code, _) = status_patch(
        &fake,
        json!({"status": {"allocatedResourceStatuses": {"example.com/iops": "NodeResizePending"}}}),
    )
    .await;
    assert_eq!(code, 200, "a prefixed resource is the driver's own");
    assert_ne!(
        claim(&fake)["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
}

#[tokio::test]
async fn before_1_32_the_resize_statuses_are_dropped_and_the_conditions_kept() {
    let fake = fake_with_claim(KubeVersion::V1_28, "2Gi");
    let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");
    resizer.start("default", "data-web-0").await.unwrap();
    resizer
        .infeasible("default", "data-web-0", "volume too large")
        .await
        .unwrap();
    let c = claim(&fake);
    assert!(
        c["status"].get("allocatedResourceStatuses").is_none(),
        "{c}"
    );
    assert!(c["status"].get("allocatedResources").is_none(), "{c}");
    assert_eq!(
        c["status"]["conditions"][0]["type"],
        "ControllerResizeError"
    );
    // Not validated either: RecoverVolumeExpansionFailure is off, the field does not exist.
    let (code, body) = status_patch(
        &fake,
        json!({"status": {"allocatedResourceStatuses": {"storage": "Whatever"}}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(
        claim(&fake)["status"]
            .get("allocatedResourceStatuses")
            .is_none()
    );
}

/// The recovery's rule, dry run first as the converge asks it: from 1.32 a request comes down
/// to anything above the capacity, never to it; 1.28 forbids any decrease. A dry run answers
/// the same and writes nothing.
#[tokio::test]
async fn a_request_comes_down_only_above_the_capacity_and_only_from_1_32() {
    let lower = |size: &str| json!({"spec": {"resources": {"requests": {"storage": size}}}});
    for (version, size, code, message) in [
        (KubeVersion::V1_32, "5Gi", 200, None),
        (KubeVersion::V1_32, "1025Mi", 200, None),
        (
            KubeVersion::V1_32,
            "1Gi",
            422,
            Some("field can not be less than status.capacity"),
        ),
        (
            KubeVersion::V1_32,
            "512Mi",
            422,
            Some("field can not be less than status.capacity"),
        ),
        (
            KubeVersion::V1_28,
            "5Gi",
            422,
            Some("field can not be less than previous value"),
        ),
    ] {
        let fake = fake_with_claim(version, "10Gi");
        for dry_run in [true, false] {
            let path = if dry_run {
                format!("{PVCS}/data-web-0?dryRun=All")
            } else {
                format!("{PVCS}/data-web-0")
            };
            let before = claim(&fake);
            let (got, body) = raw(
                &fake.client(),
                "PATCH",
                &path,
                "application/merge-patch+json",
                lower(size),
            )
            .await;
            assert_eq!(got, code, "{version:?} {size} dry run {dry_run}: {body}");
            if let Some(m) = message {
                assert_eq!(
                    body["message"],
                    format!(
                        "PersistentVolumeClaim \"data-web-0\" is invalid: spec.resources.requests.storage: Forbidden: {m}"
                    )
                );
            }
            let after = claim(&fake);
            if dry_run || code != 200 {
                assert_eq!(before, after, "{version:?} {size}: nothing written");
            } else {
                assert_eq!(after["spec"]["resources"]["requests"]["storage"], size);
            }
        }
    }
}
