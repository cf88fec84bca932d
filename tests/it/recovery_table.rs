//! The recovery decision (issue #40, part 3): a template declared below its live size after a
//! failed expansion is converged as a recovery, not refused as `shrink`, exactly when every
//! claim asking for more than the declared size failed to grow and holds less than it. Pure:
//! the claims' capacities and states are the input (their status, and what else is known of
//! their last expansion), built from the v1.32 objects a real server returned.

use flux_converger::decide::{KnownStates, Plan, Refusal, RefusalCode, decide_with};
use flux_converger::manifest::parse_documents;
use flux_converger::volume::VolumeState;
use serde_json::{Value, json};

fn one(path: &str) -> Value {
    let full = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    parse_documents(&full, &text)
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0)
        .object
}

const STORAGE: &str = "/spec/volumeClaimTemplates/0/spec/resources/requests/storage";

fn sts(path: &str, size: &str) -> Value {
    let mut v = one(path);
    *v.pointer_mut(STORAGE).unwrap() = json!(size);
    v
}

/// A Bound claim of `web`'s template `data` asking for `request`, holding `capacity`, with
/// `status` merged into its status (the resizer's signals).
fn claim(ordinal: u32, request: &str, capacity: &str, status: Value) -> Value {
    let mut c = one("v1.32/pvc-bound.yaml");
    c["metadata"]["name"] = json!(format!("data-web-{ordinal}"));
    c["spec"]["resources"]["requests"]["storage"] = json!(request);
    c["status"]["capacity"]["storage"] = json!(capacity);
    if let Value::Object(extra) = status {
        c["status"].as_object_mut().unwrap().extend(extra);
    }
    c
}

fn infeasible() -> Value {
    json!({"allocatedResourceStatuses": {"storage": "ControllerResizeInfeasible"},
           "allocatedResources": {"storage": "10Gi"},
           "conditions": [{"type": "ControllerResizeError", "status": "True", "message": "size exceeds the volume type's maximum"}]})
}

fn error() -> Value {
    json!({"allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"},
           "conditions": [{"type": "ControllerResizeError", "status": "True", "message": "quota exceeded"}]})
}

fn resizing() -> Value {
    json!({"conditions": [{"type": "Resizing", "status": "True"}]})
}

fn none() -> Value {
    json!({})
}

/// One case: why, the declared size, the claims, what is known of them, what to expect.
type Case = (
    &'static str,
    &'static str,
    Vec<Value>,
    Vec<(&'static str, VolumeState)>,
    Expect,
);

enum Expect {
    /// Recovered claims `(claim, from, to, capacity, state)`, and claims grown.
    Recover(
        Vec<(
            &'static str,
            &'static str,
            &'static str,
            &'static str,
            VolumeState,
        )>,
        Vec<&'static str>,
    ),
    /// `shrink`, its message containing each of these (and `not a recovery` exactly when given).
    Shrink(Vec<&'static str>, bool),
    /// A plan with nothing to recover.
    NoRecovery,
}

fn decide(
    desired: &str,
    claims: Vec<Value>,
    known: &[(&str, VolumeState)],
) -> Result<Plan, Refusal> {
    let desired =
        serde_json::from_value(sts("v1.28/desired-statefulset-1Gi.yaml", desired)).unwrap();
    let live = serde_json::from_value(sts("v1.32/live-statefulset.yaml", "10Gi")).unwrap();
    let claims: Vec<_> = claims
        .into_iter()
        .map(|c| serde_json::from_value(c).unwrap())
        .collect();
    let classes: Vec<_> = parse_documents(
        "classes",
        &std::fs::read_to_string(format!(
            "{}/tests/fixtures/v1.28/storageclasses.yaml",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap()
    .into_iter()
    .map(|d| serde_json::from_value(d.object).unwrap())
    .collect();
    let known: KnownStates = known.iter().map(|(c, s)| (c.to_string(), *s)).collect();
    decide_with(&desired, Some(&live), &claims, &classes, &known)
}

#[test]
fn recovery_or_shrink_by_table() {
    use VolumeState::{Error, Grown, Infeasible};
    let cases: Vec<Case> = vec![
        (
            "an infeasible expansion, git back above the capacity",
            "5Gi",
            vec![claim(0, "10Gi", "1Gi", infeasible())],
            vec![],
            Expect::Recover(
                vec![("data-web-0", "10Gi", "5Gi", "1Gi", Infeasible)],
                vec![],
            ),
        ),
        (
            "an expansion in error, git back above the capacity",
            "2Gi",
            vec![claim(0, "10Gi", "1Gi", error())],
            vec![],
            Expect::Recover(vec![("data-web-0", "10Gi", "2Gi", "1Gi", Error)], vec![]),
        ),
        (
            "an error known from the records (a server before 1.32: only the Events said it)",
            "5Gi",
            vec![claim(0, "10Gi", "1Gi", resizing())],
            vec![("data-web-0", Error)],
            Expect::Recover(vec![("data-web-0", "10Gi", "5Gi", "1Gi", Error)], vec![]),
        ),
        (
            "every failed claim lowered; a claim never grown is grown to the declared size",
            "5Gi",
            vec![
                claim(0, "10Gi", "1Gi", infeasible()),
                claim(1, "10Gi", "2Gi", error()),
                claim(2, "1Gi", "1Gi", none()),
            ],
            vec![],
            Expect::Recover(
                vec![
                    ("data-web-0", "10Gi", "5Gi", "1Gi", Infeasible),
                    ("data-web-1", "10Gi", "5Gi", "2Gi", Error),
                ],
                vec!["data-web-2"],
            ),
        ),
        (
            "declared at the capacity: the server would refuse the lower request",
            "1Gi",
            vec![claim(0, "10Gi", "1Gi", infeasible())],
            vec![],
            Expect::Shrink(vec!["not above claim \"data-web-0\"'s capacity 1Gi"], true),
        ),
        (
            "declared below the capacity",
            "512Mi",
            vec![claim(0, "10Gi", "1Gi", infeasible())],
            vec![],
            Expect::Shrink(vec!["512Mi", "capacity 1Gi"], true),
        ),
        (
            "declared at or below one failed claim's capacity",
            "2Gi",
            vec![
                claim(0, "10Gi", "1Gi", infeasible()),
                claim(1, "10Gi", "3Gi", infeasible()),
            ],
            vec![],
            Expect::Shrink(vec!["data-web-1", "capacity 3Gi"], true),
        ),
        (
            "one claim still resizing: its expansion has not failed",
            "5Gi",
            vec![
                claim(0, "10Gi", "1Gi", infeasible()),
                claim(1, "10Gi", "1Gi", resizing()),
            ],
            vec![],
            Expect::Shrink(
                vec![
                    "claim \"data-web-1\" asks for 10Gi and its expansion has not failed (it is resizing)",
                ],
                true,
            ),
        ),
        (
            "no failed expansion at all: the shrink reads as it always has",
            "5Gi",
            vec![claim(0, "10Gi", "1Gi", resizing())],
            vec![],
            Expect::Shrink(
                vec![
                    "would shrink from 10Gi (live) to 5Gi (desired)",
                    "revert the size in git",
                ],
                false,
            ),
        ),
        (
            "a grown claim: the capacity is the truth, whatever the records say",
            "5Gi",
            vec![claim(0, "10Gi", "10Gi", none())],
            vec![("data-web-0", Infeasible)],
            Expect::Shrink(vec!["would shrink"], false),
        ),
        (
            "a known state that is not a failure does not make one",
            "5Gi",
            vec![claim(0, "10Gi", "1Gi", none())],
            vec![("data-web-0", Grown)],
            Expect::Shrink(vec!["would shrink"], false),
        ),
        (
            "a claim this recovery lowered already (a converge stopped before its re-create)",
            "5Gi",
            vec![
                claim(0, "5Gi", "1Gi", infeasible()),
                claim(1, "10Gi", "1Gi", infeasible()),
            ],
            vec![("data-web-0", VolumeState::Recovered)],
            Expect::Recover(
                vec![
                    ("data-web-0", "5Gi", "5Gi", "1Gi", VolumeState::Recovered),
                    ("data-web-1", "10Gi", "5Gi", "1Gi", Infeasible),
                ],
                vec![],
            ),
        ),
        (
            "every claim lowered already: still a recovery, only the re-create is left",
            "5Gi",
            vec![claim(0, "5Gi", "1Gi", none())],
            vec![("data-web-0", VolumeState::Recovered)],
            Expect::Recover(
                vec![("data-web-0", "5Gi", "5Gi", "1Gi", VolumeState::Recovered)],
                vec![],
            ),
        ),
        (
            "git unchanged: a failed claim is nothing to recover",
            "10Gi",
            vec![claim(0, "10Gi", "1Gi", infeasible())],
            vec![],
            Expect::NoRecovery,
        ),
    ];
    for (why, desired, claims, known, expect) in cases {
        let got = decide(desired, claims, &known);
        match (expect, got) {
            (Expect::Recover(recovered, grown), Ok(plan)) => {
                let got: Vec<_> = plan
                    .recover
                    .iter()
                    .map(|r| {
                        (
                            r.claim.as_str(),
                            r.from.as_str(),
                            r.to.as_str(),
                            r.capacity.as_str(),
                            r.state,
                        )
                    })
                    .collect();
                assert_eq!(got, recovered, "{why}");
                assert!(r_templates_are_data(&plan), "{why}");
                let resized: Vec<_> = plan.resize.iter().map(|r| r.claim.as_str()).collect();
                assert_eq!(resized, grown, "{why}");
                assert!(
                    plan.recreate,
                    "{why}: a recovery re-creates with the declared template"
                );
                assert!(plan.grown.is_empty(), "{why}: no template grows");
            }
            (Expect::Shrink(words, recovery_said), Err(refusal)) => {
                assert_eq!(refusal.code, RefusalCode::Shrink, "{why}");
                for w in words {
                    assert!(
                        refusal.message.contains(w),
                        "{why}: {:?} lacks {w:?}",
                        refusal.message
                    );
                }
                assert_eq!(
                    refusal
                        .message
                        .contains("not a recovery from a failed expansion"),
                    recovery_said,
                    "{why}: {}",
                    refusal.message
                );
            }
            (Expect::NoRecovery, Ok(plan)) => {
                assert!(plan.recover.is_empty() && !plan.recreate, "{why}: {plan:?}");
            }
            (_, got) => panic!("{why}: unexpected {got:?}"),
        }
    }
}

fn r_templates_are_data(plan: &Plan) -> bool {
    plan.recover.iter().all(|r| r.template == "data")
}

#[test]
fn a_recovery_shows_in_the_plan_json_and_nothing_else_changes_shape() {
    let plan = decide("5Gi", vec![claim(0, "10Gi", "1Gi", infeasible())], &[]).unwrap();
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(
        json["recover"],
        json!([{"claim": "data-web-0", "template": "data", "capacity": "1Gi", "from": "10Gi",
                "to": "5Gi", "state": "infeasible"}])
    );
    assert_eq!(json["recreate"], json!(true));
    let plain = decide("10Gi", vec![claim(0, "10Gi", "10Gi", none())], &[]).unwrap();
    assert!(
        serde_json::to_value(&plain)
            .unwrap()
            .get("recover")
            .is_none()
    );
    assert_eq!(
        RefusalCode::RecoveryUnsupported.as_str(),
        "recovery-unsupported"
    );
    assert_eq!(
        serde_json::to_value(RefusalCode::RecoveryUnsupported).unwrap(),
        "recovery-unsupported"
    );
}

/// `plan -o commands` lowers each failed claim, only from the request planned on, before the
/// orphan delete and the re-apply of the declared template.
#[test]
fn the_manual_script_lowers_the_failed_claims_before_the_re_create() {
    let desired = serde_json::from_value(sts("v1.28/desired-statefulset-1Gi.yaml", "5Gi")).unwrap();
    let result = decide("5Gi", vec![claim(0, "10Gi", "1Gi", infeasible())], &[]);
    let script = flux_converger::commands::script(
        &[flux_converger::commands::Planned {
            desired: &desired,
            live_uid: Some("u-1"),
            result: &result,
        }],
        std::time::Duration::from_secs(60),
    )
    .unwrap();
    let lower = script
        .find(r#"kubectl patch pvc data-web-0 -n default --type json -p '[{"op":"test","path":"/spec/resources/requests/storage","value":"10Gi"},{"op":"replace","path":"/spec/resources/requests/storage","value":"5Gi"}]'"#)
        .unwrap_or_else(|| panic!("{script}"));
    let delete = script.find("kubectl delete --raw").unwrap();
    let apply = script.find("kubectl apply --server-side").unwrap();
    assert!(lower < delete && delete < apply, "{script}");
}
