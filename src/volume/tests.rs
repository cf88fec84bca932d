//! The table and its precedence, claim by claim.

use serde_json::{Value, json};

use super::*;

fn claim(
    phase: &str,
    request: &str,
    capacity: Option<&str>,
    status: Value,
) -> PersistentVolumeClaim {
    let mut s = json!({"phase": phase});
    if let Some(c) = capacity {
        s["capacity"] = json!({"storage": c});
    }
    if let (Value::Object(into), Value::Object(from)) = (&mut s, status) {
        into.extend(from);
    }
    serde_json::from_value(json!({
        "metadata": {"name": "data-db-0", "namespace": "team"},
        "spec": {"resources": {"requests": {"storage": request}}},
        "status": s,
    }))
    .unwrap()
}

fn allocated(state: &str) -> Value {
    json!({"allocatedResourceStatuses": {"storage": state}, "allocatedResources": {"storage": "2Gi"}})
}

fn conditions(list: &[(&str, &str)]) -> Value {
    let items: Vec<Value> = list
        .iter()
        .map(|(t, m)| json!({"type": t, "status": "True", "message": m}))
        .collect();
    json!({"conditions": items})
}

fn both(a: Value, b: Value) -> Value {
    let mut a = a;
    if let (Value::Object(into), Value::Object(from)) = (&mut a, b) {
        into.extend(from);
    }
    a
}

fn at(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

fn event(reason: &str, message: &str, when: &str) -> ResizeEvent {
    ResizeEvent {
        reason: reason.into(),
        message: message.into(),
        at: at(when),
    }
}

#[test]
fn each_signal_of_the_table_gives_its_state() {
    use VolumeState::*;
    let none = json!({});
    for (why, claim, state) in [
        (
            "capacity reached",
            claim("Bound", "2Gi", Some("2Gi"), none.clone()),
            Grown,
        ),
        (
            "capacity above (1Gi = 1024Mi)",
            claim("Bound", "1Gi", Some("1024Mi"), none.clone()),
            Grown,
        ),
        (
            "capacity beyond the request",
            claim("Bound", "2Gi", Some("3Gi"), allocated("NodeResizePending")),
            Grown,
        ),
        (
            "nothing yet",
            claim("Bound", "2Gi", Some("1Gi"), none.clone()),
            Requested,
        ),
        (
            "ControllerResizeInProgress",
            claim(
                "Bound",
                "2Gi",
                Some("1Gi"),
                allocated("ControllerResizeInProgress"),
            ),
            Resizing,
        ),
        (
            "NodeResizeInProgress",
            claim(
                "Bound",
                "2Gi",
                Some("1Gi"),
                allocated("NodeResizeInProgress"),
            ),
            Resizing,
        ),
        (
            "condition Resizing",
            claim("Bound", "2Gi", Some("1Gi"), conditions(&[("Resizing", "")])),
            Resizing,
        ),
        (
            "NodeResizePending",
            claim("Bound", "2Gi", Some("1Gi"), allocated("NodeResizePending")),
            FilesystemPending,
        ),
        (
            "condition FileSystemResizePending",
            claim(
                "Bound",
                "2Gi",
                Some("1Gi"),
                conditions(&[(
                    "FileSystemResizePending",
                    "Waiting for user to (re-)start a pod to finish file system resize of volume on node.",
                )]),
            ),
            FilesystemPending,
        ),
        (
            "ControllerResizeInfeasible",
            claim(
                "Bound",
                "2Gi",
                Some("1Gi"),
                allocated("ControllerResizeInfeasible"),
            ),
            Infeasible,
        ),
        (
            "NodeResizeInfeasible",
            claim(
                "Bound",
                "2Gi",
                Some("1Gi"),
                allocated("NodeResizeInfeasible"),
            ),
            Infeasible,
        ),
        (
            "condition ControllerResizeError",
            claim(
                "Bound",
                "2Gi",
                Some("1Gi"),
                conditions(&[("ControllerResizeError", "quota exceeded")]),
            ),
            Error,
        ),
        (
            "condition NodeResizeError",
            claim(
                "Bound",
                "2Gi",
                Some("1Gi"),
                conditions(&[("NodeResizeError", "resize2fs failed")]),
            ),
            Error,
        ),
        (
            "Pending",
            claim("Pending", "2Gi", None, none.clone()),
            Deferred,
        ),
        (
            "Lost",
            claim("Lost", "2Gi", Some("1Gi"), none.clone()),
            Deferred,
        ),
    ] {
        assert_eq!(classify(&claim, &[], None).state, state, "{why}");
    }
}

#[test]
fn several_signals_at_once_the_first_in_precedence_wins() {
    use VolumeState::*;
    for (why, status, state) in [
        (
            "Resizing beside FileSystemResizePending",
            conditions(&[("Resizing", ""), ("FileSystemResizePending", "")]),
            FilesystemPending,
        ),
        (
            "ControllerResizeInProgress beside ControllerResizeError",
            both(
                allocated("ControllerResizeInProgress"),
                conditions(&[("ControllerResizeError", "409 Conflict")]),
            ),
            Error,
        ),
        (
            "ControllerResizeInfeasible beside ControllerResizeError",
            both(
                allocated("ControllerResizeInfeasible"),
                conditions(&[("ControllerResizeError", "too big")]),
            ),
            Infeasible,
        ),
        (
            "NodeResizePending beside NodeResizeError",
            both(
                allocated("NodeResizePending"),
                conditions(&[("NodeResizeError", "fs busy")]),
            ),
            Error,
        ),
        (
            "NodeResizePending beside Resizing",
            both(
                allocated("NodeResizePending"),
                conditions(&[("Resizing", "")]),
            ),
            FilesystemPending,
        ),
        (
            "a condition that is not True does not count",
            json!({"conditions": [{"type": "ControllerResizeError", "status": "False"}]}),
            Requested,
        ),
    ] {
        let c = claim("Bound", "2Gi", Some("1Gi"), status);
        assert_eq!(classify(&c, &[], None).state, state, "{why}");
    }
    // Grown beats every other signal: the capacity is what counts.
    let c = claim(
        "Bound",
        "2Gi",
        Some("2Gi"),
        both(
            allocated("ControllerResizeInfeasible"),
            conditions(&[("ControllerResizeError", "x")]),
        ),
    );
    assert_eq!(classify(&c, &[], None).state, Grown);
}

#[test]
fn before_1_32_the_conditions_and_the_newest_event_since_the_request_decide() {
    use VolumeState::*;
    let since = Some(at("2026-12-01T10:00:00Z"));
    let failed = event(
        "VolumeResizeFailed",
        "rpc error: code = ResourceExhausted desc = quota",
        "2026-12-01T10:01:00Z",
    );
    let resizing = event(
        "Resizing",
        "External resizer is resizing volume pvc-1",
        "2026-12-01T10:00:30Z",
    );
    let later_resizing = event(
        "Resizing",
        "External resizer is resizing volume pvc-1",
        "2026-12-01T10:02:00Z",
    );
    let fs = event(
        "FileSystemResizeRequired",
        "Require file system resize of volume on node",
        "2026-12-01T10:03:00Z",
    );
    let old_failure = event(
        "VolumeResizeFailed",
        "an earlier expansion",
        "2026-12-01T09:00:00Z",
    );
    let unrelated = event("ProvisioningSucceeded", "whatever", "2026-12-01T10:05:00Z");
    let resizing_condition = conditions(&[("Resizing", "")]);
    for (why, status, events, state) in [
        (
            "a failure Event while Resizing",
            resizing_condition.clone(),
            vec![resizing.clone(), failed.clone()],
            Error,
        ),
        (
            "a retry after the failure",
            resizing_condition.clone(),
            vec![failed.clone(), later_resizing.clone()],
            Resizing,
        ),
        (
            "FileSystemResizeRequired last",
            json!({}),
            vec![resizing.clone(), fs.clone()],
            FilesystemPending,
        ),
        (
            "ExternalExpanding only",
            json!({}),
            vec![event(
                "ExternalExpanding",
                "waiting for an external controller",
                "2026-12-01T10:00:01Z",
            )],
            Resizing,
        ),
        (
            "a failure from before the request does not count",
            json!({}),
            vec![old_failure.clone()],
            Requested,
        ),
        (
            "unrelated events do not count",
            json!({}),
            vec![unrelated.clone()],
            Requested,
        ),
        // With allocatedResourceStatuses the status speaks: an Event only adds to a message.
        (
            "1.32: the status wins over an old failure Event",
            allocated("ControllerResizeInProgress"),
            vec![failed.clone()],
            Resizing,
        ),
    ] {
        let c = claim("Bound", "2Gi", Some("1Gi"), status);
        assert_eq!(classify(&c, &events, since).state, state, "{why}");
    }
}

#[test]
fn messages_quote_the_driver() {
    let c = claim(
        "Bound",
        "2Gi",
        Some("1Gi"),
        both(
            allocated("ControllerResizeInfeasible"),
            conditions(&[(
                "ControllerResizeError",
                "volume size 2Gi exceeds\n  the maximum of 1Gi",
            )]),
        ),
    );
    let failed = event(
        "VolumeResizeFailed",
        "resize volume \"pvc-1\" by resizer \"ebs.csi.aws.com\" failed: too big",
        "2026-12-01T10:01:00Z",
    );
    let o = classify(&c, &[failed], None);
    assert_eq!(o.state, VolumeState::Infeasible);
    assert_eq!(
        o.message.as_deref(),
        Some(
            "ControllerResizeInfeasible (ControllerResizeError: volume size 2Gi exceeds the maximum of 1Gi); \
             newest VolumeResizeFailed Event: resize volume \"pvc-1\" by resizer \"ebs.csi.aws.com\" failed: too big: \
             the driver will not grow this volume to the request; declare a size above the capacity in git to recover"
        )
    );
    assert_eq!(o.requested.as_deref(), Some("2Gi"));
    assert_eq!(o.capacity.as_deref(), Some("1Gi"));

    let c = claim(
        "Bound",
        "2Gi",
        Some("1Gi"),
        conditions(&[(
            "FileSystemResizePending",
            "Waiting for user to (re-)start a pod to finish file system resize of volume on node.",
        )]),
    );
    assert_eq!(
        classify(&c, &[], None).message.as_deref(),
        Some(
            "the volume grew; the node grows the file system when a pod next mounts the claim \
             (restart the pod using it): FileSystemResizePending: Waiting for user to (re-)start a pod \
             to finish file system resize of volume on node."
        )
    );

    let c = claim(
        "Bound",
        "2Gi",
        Some("1Gi"),
        conditions(&[("ControllerResizeError", "quota exceeded")]),
    );
    assert_eq!(
        classify(&c, &[], None).message.as_deref(),
        Some("ControllerResizeError: quota exceeded; the driver retries")
    );
    assert_eq!(
        classify(&claim("Bound", "2Gi", Some("2Gi"), json!({})), &[], None).message,
        None
    );
}

#[test]
fn past_the_timeout_a_claim_not_at_an_end_state_is_stalled() {
    use VolumeState::*;
    let asked = at("2026-12-01T10:00:00Z");
    let timeout = std::time::Duration::from_secs(30 * 60);
    for (state, minutes, expected) in [
        (Resizing, 29, Resizing),
        (Resizing, 30, Stalled),
        (Requested, 31, Stalled),
        (Error, 45, Stalled),
        (FilesystemPending, 60, Stalled),
        (Grown, 60, Grown),
        (Infeasible, 60, Infeasible),
        (Deferred, 60, Deferred),
    ] {
        let o = Observed {
            state,
            message: Some("m".into()),
            requested: Some("2Gi".into()),
            capacity: Some("1Gi".into()),
        };
        let now = asked + jiff::SignedDuration::from_mins(minutes);
        let got = past_timeout(o, asked, now, timeout);
        assert_eq!(got.state, expected, "{state} after {minutes}m");
        if expected == Stalled {
            assert_eq!(
                got.message.as_deref(),
                Some(format!("still {state} after 30m (--resize-timeout): m").as_str())
            );
        }
    }
}

#[test]
fn states_are_spelled_as_the_records_spell_them() {
    for s in VolumeState::ALL {
        assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        assert_eq!(
            serde_json::from_value::<VolumeState>(json!(s.as_str())).unwrap(),
            s
        );
    }
    assert_eq!(
        VolumeState::FilesystemPending.as_str(),
        "filesystem-pending"
    );
    assert!(VolumeState::Grown.is_end() && VolumeState::Infeasible.is_end());
    assert!(!VolumeState::Stalled.is_end() && !VolumeState::Error.is_end());
    assert!(VolumeState::Error.is_failed() && VolumeState::Infeasible.is_failed());
}

#[test]
fn a_claim_to_follow_asks_for_more_than_it_holds() {
    assert!(is_growing(&claim("Bound", "2Gi", Some("1Gi"), json!({}))));
    assert!(!is_growing(&claim("Bound", "2Gi", Some("2Gi"), json!({}))));
    assert!(!is_growing(&claim("Pending", "2Gi", None, json!({}))));
}

#[test]
fn signals_about_another_request_are_not_this_one_s() {
    // A recovery lowered the request to 5Gi: the resizer has not taken it up yet, and what the
    // status says (allocatedResources 10Gi, infeasible) is about the failed 10Gi.
    let stale = json!({"allocatedResources": {"storage": "10Gi"},
                       "allocatedResourceStatuses": {"storage": "ControllerResizeInfeasible"},
                       "conditions": [{"type": "ControllerResizeError", "status": "True", "message": "too big"}]});
    let c = claim("Bound", "5Gi", Some("1Gi"), stale);
    assert_eq!(classify(&c, &[], None).state, VolumeState::Requested);
    // Once it works on 5Gi, its words count again.
    let taken = json!({"allocatedResources": {"storage": "5120Mi"},
                       "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"}});
    let c = claim("Bound", "5Gi", Some("1Gi"), taken);
    assert_eq!(classify(&c, &[], None).state, VolumeState::Resizing);
}

/// A case of the class move's table: name, status, Events, the state and words expected.
type ModifyCase = (
    &'static str,
    Value,
    Vec<ResizeEvent>,
    ModifyState,
    Option<&'static str>,
);

/// The class move's table (`classify_attributes`), as the external-resizer's modify path
/// writes the claim's status: the class applied, `Infeasible`, `Pending`, `InProgress` (with a
/// `ModifyVolumeError` retried), and a status about another class.
#[test]
fn a_class_move_reads_the_modify_status() {
    let modify = |status: &str, target: &str| json!({"modifyVolumeStatus": {"status": status, "targetVolumeAttributesClassName": target}});
    let failed = event(
        reason::VOLUME_MODIFY_FAILED,
        "rpc error: code = InvalidArgument desc = iops too high",
        "2026-12-01T10:00:05Z",
    );
    let cases: Vec<ModifyCase> = vec![
        (
            "applied",
            json!({"currentVolumeAttributesClassName": "gold"}),
            vec![],
            ModifyState::Modified,
            None,
        ),
        (
            "applied even with a stale modify status",
            both(
                json!({"currentVolumeAttributesClassName": "gold"}),
                modify("Infeasible", "gold"),
            ),
            vec![],
            ModifyState::Modified,
            None,
        ),
        (
            "infeasible, the condition's and the Event's words",
            both(
                modify("Infeasible", "gold"),
                conditions(&[(
                    condition::MODIFY_VOLUME_ERROR,
                    "ModifyVolume failed with error: rpc error: code = InvalidArgument desc = iops too high. Waiting for retry.",
                )]),
            ),
            vec![failed.clone()],
            ModifyState::Infeasible,
            Some("Infeasible (ModifyVolumeError: ModifyVolume failed with error"),
        ),
        (
            "pending: the class is not there",
            modify("Pending", "gold"),
            vec![event(
                reason::VOLUME_MODIFY_FAILED,
                "VAC \"gold\" does not exist.",
                "2026-12-01T10:00:05Z",
            )],
            ModifyState::Modifying,
            Some("newest VolumeModifyFailed Event: VAC \"gold\" does not exist."),
        ),
        (
            "in progress",
            both(
                modify("InProgress", "gold"),
                conditions(&[(
                    condition::MODIFYING_VOLUME,
                    "ModifyVolume operation in progress.",
                )]),
            ),
            vec![],
            ModifyState::Modifying,
            Some("ModifyVolume operation in progress."),
        ),
        (
            "an error the driver retries",
            both(
                modify("InProgress", "gold"),
                conditions(&[(condition::MODIFY_VOLUME_ERROR, "throttled")]),
            ),
            vec![],
            ModifyState::Modifying,
            Some("ModifyVolumeError: throttled; the driver retries"),
        ),
        (
            "a status about another class is not this move's",
            both(
                json!({"currentVolumeAttributesClassName": "silver"}),
                modify("Infeasible", "platinum"),
            ),
            vec![],
            ModifyState::Modifying,
            None,
        ),
        (
            "an Event from before the move is not this move's",
            json!({}),
            vec![event(
                reason::VOLUME_MODIFY_FAILED,
                "old",
                "2026-12-01T09:00:00Z",
            )],
            ModifyState::Modifying,
            None,
        ),
    ];
    for (name, status, events, state, words) in cases {
        let c = claim("Bound", "1Gi", Some("1Gi"), status);
        let (got, message, _) =
            classify_attributes(&c, "gold", &events, Some(at("2026-12-01T10:00:00Z")));
        assert_eq!(got, state, "{name}");
        match words {
            Some(w) => assert!(
                message.as_deref().is_some_and(|m| m.contains(w)),
                "{name}: {message:?}"
            ),
            None => assert_eq!(message, None, "{name}"),
        }
    }
    assert_eq!(ModifyState::Infeasible.as_str(), "infeasible");
    assert!(ModifyState::Modified.is_end() && !ModifyState::Modifying.is_end());
}
