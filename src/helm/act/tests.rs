//! Every row of the "When to act", over the HelmRelease status helm-controller writes
//! after an upgrade failed on the StatefulSet immutable-field error with retries exhausted
//! (tests/fixtures/helm/helmrelease-stalled.yaml), changed one field at a time.

use serde_json::{Value, json};

use super::*;
use crate::helm::release::ReleaseInfo;

const STALLED: &str = include_str!("../../../tests/fixtures/helm/helmrelease-stalled.yaml");

fn stalled() -> Value {
    serde_saphyr::from_str(STALLED).expect("the fixture parses")
}

fn hr(value: Value) -> HelmRelease {
    serde_json::from_value(value).expect("a HelmRelease")
}

/// The newest record after the failed upgrade: v2 `failed`, written by upgrade's `failRelease`.
fn failed_upgrade() -> ReleaseInfo {
    ReleaseInfo {
        name: "web".into(),
        namespace: "demo".into(),
        version: 2,
        status: Status::Failed,
        description: "Upgrade \"web\" failed: server-side apply failed for object demo/web apps/v1, Kind=StatefulSet: StatefulSet.apps \"web\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".into(),
        apply_method: "ssa".into(),
        chart_name: "web".into(),
        chart_version: "0.2.0".into(),
    }
}

fn condition_index(v: &Value, type_: &str) -> usize {
    v["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

fn remove_condition(v: &mut Value, type_: &str) {
    let i = condition_index(v, type_);
    v["status"]["conditions"].as_array_mut().unwrap().remove(i);
}

fn set_condition(v: &mut Value, type_: &str, status: &str, reason: &str, message: &str) {
    let c = json!({"type": type_, "status": status, "reason": reason, "message": message,
        "observedGeneration": 2, "lastTransitionTime": "2026-12-01T10:31:00Z"});
    match v["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c["type"] == type_)
    {
        Some(i) => v["status"]["conditions"][i] = c,
        None => v["status"]["conditions"].as_array_mut().unwrap().push(c),
    }
}

type Edit = fn(&mut Value, &mut Option<ReleaseInfo>);

#[test]
fn when_to_act_by_table() {
    let rows: Vec<(&str, Edit, Act)> = vec![
        (
            "immutable failure, retries exceeded, v2 failed upgrade",
            |_, _| {},
            Act::Converge { version: 2 },
        ),
        (
            "suspended",
            |v, _| v["spec"]["suspend"] = json!(true),
            Act::Wait(Why::Suspended),
        ),
        (
            "a newer generation helm-controller has not seen",
            |v, _| v["metadata"]["generation"] = json!(3),
            Act::Wait(Why::NotObserved {
                generation: 3,
                observed: 2,
            }),
        ),
        (
            "Reconciling=True (a retry, or an action running)",
            |v, _| {
                set_condition(
                    v,
                    "Reconciling",
                    "True",
                    "ProgressingWithRetry",
                    "retrying after 5m0s",
                )
            },
            Act::Wait(Why::Reconciling {
                message: "retrying after 5m0s".into(),
            }),
        ),
        (
            "Reconciling=False does not hold",
            |v, _| set_condition(v, "Reconciling", "False", "Succeeded", ""),
            Act::Converge { version: 2 },
        ),
        (
            "an outstanding reconcile request",
            |v, _| {
                v["metadata"]["annotations"][RECONCILE_REQUEST_ANNOTATION] = json!("1764585100");
                v["status"]["lastHandledReconcileAt"] = json!("1764584000");
            },
            Act::Wait(Why::ReconcileRequested {
                requested: "1764585100".into(),
            }),
        ),
        (
            "a handled reconcile request",
            |v, _| {
                v["metadata"]["annotations"][RECONCILE_REQUEST_ANNOTATION] = json!("1764585100");
                v["status"]["lastHandledReconcileAt"] = json!("1764585100");
            },
            Act::Converge { version: 2 },
        ),
        (
            "an outstanding force request",
            |v, _| {
                v["metadata"]["annotations"][FORCE_REQUEST_ANNOTATION] = json!("t2");
                v["metadata"]["annotations"][RECONCILE_REQUEST_ANNOTATION] = json!("t2");
                v["status"]["lastHandledReconcileAt"] = json!("t2");
                v["status"]["lastHandledForceAt"] = json!("t1");
            },
            Act::Wait(Why::ForceRequested {
                requested: "t2".into(),
            }),
        ),
        (
            "a handled force request",
            |v, _| {
                v["metadata"]["annotations"][FORCE_REQUEST_ANNOTATION] = json!("t2");
                v["status"]["lastHandledForceAt"] = json!("t2");
            },
            Act::Converge { version: 2 },
        ),
        (
            "the storage namespace changed, not yet moved",
            |v, _| v["spec"]["storageNamespace"] = json!("helm"),
            Act::Wait(Why::StorageMoving {
                from: "demo".into(),
                to: "helm".into(),
            }),
        ),
        (
            "no Ready condition",
            |v, _| remove_condition(v, "Ready"),
            Act::Wait(Why::NoReadyCondition),
        ),
        (
            "Ready=True",
            |v, _| {
                set_condition(
                    v,
                    "Ready",
                    "True",
                    "UpgradeSucceeded",
                    "Helm upgrade succeeded",
                )
            },
            Act::Wait(Why::Ready),
        ),
        (
            "Ready=Unknown, an upgrade running",
            |v, _| {
                set_condition(
                    v,
                    "Ready",
                    "Unknown",
                    "Progressing",
                    "Running 'upgrade' action with timeout of 5m0s",
                )
            },
            Act::Wait(Why::ReadyUnknown {
                reason: "Progressing".into(),
            }),
        ),
        (
            "a different failure: the chart artifact",
            |v, _| set_condition(v, "Ready", "False", "ArtifactFailed", "no artifact"),
            Act::Wait(Why::OtherFailure {
                reason: "ArtifactFailed".into(),
            }),
        ),
        (
            "a different failure: the install",
            |v, _| {
                set_condition(
                    v,
                    "Ready",
                    "False",
                    "InstallFailed",
                    "Helm install failed for release demo/web with chart web@0.2.0: Forbidden: updates to statefulset spec",
                )
            },
            Act::Wait(Why::OtherFailure {
                reason: "InstallFailed".into(),
            }),
        ),
        (
            "an upgrade failure that is not the immutable-field error",
            |v, _| {
                set_condition(
                    v,
                    "Ready",
                    "False",
                    "UpgradeFailed",
                    "Helm upgrade failed for release demo/web with chart web@0.2.0: context deadline exceeded",
                )
            },
            Act::Wait(Why::NotImmutableError),
        ),
        (
            "not stalled yet, but retries exhausted and nothing to remediate",
            |v, _| remove_condition(v, "Stalled"),
            Act::Converge { version: 2 },
        ),
        (
            "not stalled: retries remain",
            |v, _| {
                remove_condition(v, "Stalled");
                v["spec"]["upgrade"] = json!({"remediation": {"retries": 3}});
            },
            Act::Wait(Why::RetriesRemain {
                failures: 1,
                retries: 3,
            }),
        ),
        (
            "not stalled: unlimited retries",
            |v, _| {
                remove_condition(v, "Stalled");
                v["spec"]["upgrade"] = json!({"remediation": {"retries": -1}});
            },
            Act::Wait(Why::RetriesRemain {
                failures: 1,
                retries: -1,
            }),
        ),
        (
            "remediation in progress: the last failure is remediated",
            |v, _| {
                remove_condition(v, "Stalled");
                v["spec"]["upgrade"] = json!({"remediation": {"remediateLastFailure": true}});
            },
            Act::Wait(Why::RemediationPending),
        ),
        (
            "retries exhausted, uninstall remediation configured but not for the last failure",
            |v, _| {
                remove_condition(v, "Stalled");
                v["spec"]["upgrade"] =
                    json!({"remediation": {"retries": 0, "strategy": "uninstall"}});
            },
            Act::Converge { version: 2 },
        ),
        (
            "RetryOnFailure: helm-controller retries by itself",
            |v, _| v["spec"]["upgrade"] = json!({"strategy": {"name": "RetryOnFailure"}}),
            Act::Wait(Why::RetryStrategy),
        ),
        (
            "stalled for another reason",
            |v, _| {
                set_condition(
                    v,
                    "Stalled",
                    "True",
                    "MissingRollbackTarget",
                    "Failed to perform remediation",
                )
            },
            Act::Wait(Why::StalledOther {
                reason: "MissingRollbackTarget".into(),
            }),
        ),
        (
            "no release record",
            |_, r| *r = None,
            Act::Wait(Why::NoRecord),
        ),
        (
            "a pending record: another Helm action holds the release",
            |v, r| {
                let r = r.as_mut().unwrap();
                r.version = 3;
                r.status = Status::PendingUpgrade;
                r.description = "Preparing upgrade".into();
                v["status"]["history"][0]["version"] = json!(3);
            },
            Act::Wait(Why::RecordPending {
                version: 3,
                status: Status::PendingUpgrade,
            }),
        ),
        (
            "the newest record is deployed",
            |_, r| r.as_mut().unwrap().status = Status::Deployed,
            Act::Wait(Why::RecordNotFailed {
                version: 2,
                status: Status::Deployed,
            }),
        ),
        (
            "the newest record is not the one helm-controller observed",
            |_, r| r.as_mut().unwrap().version = 3,
            Act::Wait(Why::RecordNotInHistory {
                version: 3,
                history: Some(2),
            }),
        ),
        (
            "no history at all",
            |v, _| v["status"]["history"] = json!([]),
            Act::Wait(Why::RecordNotInHistory {
                version: 2,
                history: None,
            }),
        ),
        (
            "a failed install, not an upgrade",
            |v, r| {
                r.as_mut().unwrap().description = "Release \"web\" failed: boom".into();
                v["status"]["history"][0]["action"] = json!("install");
            },
            Act::Wait(Why::RecordNotUpgrade { version: 2 }),
        ),
        (
            "a custom description: the snapshot's action says upgrade",
            |_, r| r.as_mut().unwrap().description = "my words".into(),
            Act::Converge { version: 2 },
        ),
        (
            "the record of another release",
            |_, r| r.as_mut().unwrap().name = "other".into(),
            Act::Wait(Why::RecordOfAnotherRelease {
                name: "other".into(),
            }),
        ),
    ];
    for (row, edit, expected) in rows {
        let mut value = stalled();
        let mut record = Some(failed_upgrade());
        edit(&mut value, &mut record);
        let got = when_to_act(&hr(value), record.as_ref());
        assert_eq!(got, expected, "{row}");
        if let Act::Wait(why) = got {
            assert!(!why.to_string().is_empty(), "{row}");
        }
    }
}

#[test]
fn reasons_read_as_sentences() {
    for (why, text) in [
        (Why::Suspended, "the HelmRelease is suspended"),
        (
            Why::NotImmutableError,
            "the upgrade failed, but not on the StatefulSet immutable-field error (\"Forbidden: updates to statefulset spec\")",
        ),
        (
            Why::RecordPending {
                version: 3,
                status: Status::PendingRollback,
            },
            "release record v3 is pending-rollback: another Helm action holds the release",
        ),
        (
            Why::ReconcileRequested {
                requested: "now".into(),
            },
            "a reconcile request (reconcile.fluxcd.io/requestedAt: now) is not handled yet",
        ),
    ] {
        assert_eq!(why.to_string(), text);
    }
}

#[test]
fn a_retry_waits_for_a_new_generation_or_version_by_table() {
    for (generation, version, newest, allowed) in [
        (Some(3), Some("v3"), (Some(3), 3), false),
        (Some(3), Some("v3"), (Some(4), 3), true),
        (Some(3), Some("v3"), (Some(3), 4), true),
        (Some(3), None, (Some(3), 3), true),
    ] {
        assert_eq!(
            retry_allowed(generation, version, newest.0, newest.1),
            allowed,
            "{generation:?} {version:?} {newest:?}"
        );
    }
}
