//! Every row of the "When to act", over the three failure shapes Argo CD writes
//! (tests/fixtures/argocd/), changed one field at a time.

use serde_json::{Value, json};

use super::*;
use crate::gated::gating::{GATE_ANNOTATION, HOLD_ANNOTATION};

const CSA: &str =
    include_str!("../../../tests/fixtures/argocd/application-failed-client-side-apply.yaml");
const SSA: &str =
    include_str!("../../../tests/fixtures/argocd/application-failed-server-side-apply.yaml");
const SSD: &str = include_str!("../../../tests/fixtures/argocd/application-comparison-error.yaml");

const SHA: &str = "8e1f0c5b2d7a4f6e9c3b1a0d5e7f9a2c4b6d8e0f";
const NEWER: &str = "f00dfeedf00dfeedf00dfeedf00dfeedf00dfeed";

fn fixture(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("the fixture parses")
}

fn app(value: &Value) -> Application {
    serde_json::from_value(value.clone()).expect("an Application")
}

fn decide(value: &Value, memory: &Memory) -> Act {
    let a = app(value);
    when_to_act(&a, &gating(&a), memory)
}

fn rev(sha: &str) -> Revision {
    Revision {
        revision: sha.into(),
        revisions: vec![],
    }
}

fn db() -> Vec<Named> {
    vec![Named {
        namespace: Some("apps".into()),
        name: "db".into(),
    }]
}

fn converge(shape: Shape, message_of: &Value) -> Act {
    Act::Converge(Failure {
        shape,
        revision: rev(SHA),
        statefulsets: db(),
        message: match shape {
            Shape::SyncFailed => &message_of["status"]["operationState"]["message"],
            Shape::ComparisonError => &message_of["status"]["conditions"][0]["message"],
        }
        .as_str()
        .unwrap()
        .to_owned(),
    })
}

type Edit = fn(&mut Value);

#[test]
fn each_failure_shape_converges_as_written() {
    for (name, text, shape) in [
        ("client-side apply", CSA, Shape::SyncFailed),
        ("server-side apply", SSA, Shape::SyncFailed),
        ("server-side diff", SSD, Shape::ComparisonError),
    ] {
        let v = fixture(text);
        assert_eq!(
            decide(&v, &Memory::default()),
            converge(shape, &v),
            "{name}"
        );
    }
}

#[test]
fn when_to_act_by_table() {
    let csa = fixture(CSA);
    let rows: Vec<(&str, Edit, Act)> = vec![
        (
            "not opted in",
            |v| v["metadata"]["annotations"] = json!({}),
            Act::Wait(Why::NotOptedIn),
        ),
        (
            "opted out",
            |v| v["metadata"]["annotations"][GATE_ANNOTATION] = json!("off"),
            Act::Wait(Why::NotOptedIn),
        ),
        (
            "another gate value",
            |v| v["metadata"]["annotations"][GATE_ANNOTATION] = json!("suspend"),
            Act::Wait(Why::InvalidGate(
                "annotation flux-converger.io/gate: \"suspend\" is not one of reconcile, off".into(),
            )),
        ),
        (
            "held",
            |v| v["metadata"]["annotations"][HOLD_ANNOTATION] = json!("migrating"),
            Act::Wait(Why::Held("migrating".into())),
        ),
        (
            "another cluster by server",
            |v| v["spec"]["destination"]["server"] = json!("https://prod.example.com:6443"),
            Act::Wait(Why::OtherDestination {
                server: "https://prod.example.com:6443".into(),
                name: String::new(),
            }),
        ),
        (
            "another cluster by name",
            |v| v["spec"]["destination"] = json!({"name": "prod", "namespace": "apps"}),
            Act::Wait(Why::OtherDestination {
                server: String::new(),
                name: "prod".into(),
            }),
        ),
        (
            "the in-cluster one by name",
            |v| v["spec"]["destination"] = json!({"name": "in-cluster", "namespace": "apps"}),
            Act::Converge(Failure {
                shape: Shape::SyncFailed,
                revision: rev(SHA),
                statefulsets: db(),
                message: String::new(),
            }),
        ),
        (
            "the in-cluster server with a trailing slash is another server",
            |v| v["spec"]["destination"]["server"] = json!("https://kubernetes.default.svc/"),
            Act::Wait(Why::OtherDestination {
                server: "https://kubernetes.default.svc/".into(),
                name: String::new(),
            }),
        ),
        (
            "both server and name",
            |v| v["spec"]["destination"]["name"] = json!("in-cluster"),
            Act::Wait(Why::AmbiguousDestination),
        ),
        (
            "an operation requested",
            |v| v["operation"] = json!({"sync": {"revision": SHA}, "initiatedBy": {"username": "admin"}}),
            Act::Wait(Why::OperationInFlight),
        ),
        (
            "a sync running",
            |v| {
                v["operation"] = json!({"sync": {"revision": SHA}});
                v["status"]["operationState"]["phase"] = json!("Running");
                v["status"]["operationState"]
                    .as_object_mut()
                    .unwrap()
                    .remove("finishedAt");
            },
            Act::Wait(Why::OperationInFlight),
        ),
        (
            "terminating, .operation already cleared",
            |v| v["status"]["operationState"]["phase"] = json!("Terminating"),
            Act::Wait(Why::Running {
                phase: "Terminating".into(),
            }),
        ),
        (
            "retries left: Running with finishedAt",
            |v| {
                v["operation"] = json!({"sync": {"revision": SHA}, "retry": {"limit": 2}});
                v["status"]["operationState"]["phase"] = json!("Running");
                v["status"]["operationState"]["retryCount"] = json!(1);
                v["status"]["operationState"]["message"] = json!("one or more objects failed to apply, reason: x. Retrying attempt #1 at 3:04PM.");
            },
            Act::Wait(Why::RetriesLeft {
                retry_count: 1,
                message: "one or more objects failed to apply, reason: x. Retrying attempt #1 at 3:04PM.".into(),
            }),
        ),
        (
            "a refresh not done yet",
            |v| v["metadata"]["annotations"]["argocd.argoproj.io/refresh"] = json!("normal"),
            Act::Wait(Why::RefreshPending {
                value: "normal".into(),
            }),
        ),
        (
            "a different failure",
            |v| {
                let state = &mut v["status"]["operationState"];
                state["message"] = json!("one or more objects failed to apply, reason: Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].image: Required value");
                state["syncResult"]["resources"][1]["message"] = json!("Deployment.apps \"web\" is invalid");
            },
            Act::Wait(Why::OtherFailure {
                phase: "Failed".into(),
                message: "one or more objects failed to apply, reason: Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].image: Required value".into(),
            }),
        ),
        (
            "the phase Error with the text only in the message (an explicit sync under SSD)",
            |v| {
                let state = &mut v["status"]["operationState"];
                state["phase"] = json!("Error");
                state["message"] = json!("ComparisonError: Failed to compare desired state to live state: failed to calculate diff: error calculating server side diff: serverSideDiff error: error running server side apply in dryrun mode for resource StatefulSet/db: StatefulSet.apps \"db\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas' are forbidden");
                state["syncResult"] = json!({"revision": SHA});
            },
            Act::Converge(Failure {
                shape: Shape::SyncFailed,
                revision: rev(SHA),
                statefulsets: db(),
                message: String::new(),
            }),
        ),
        (
            "the last sync succeeded",
            |v| {
                v["status"]["operationState"]["phase"] = json!("Succeeded");
                v["status"]["operationState"]["message"] = json!("successfully synced (all tasks run)");
            },
            Act::Wait(Why::Succeeded),
        ),
        (
            "no operation ever",
            |v| {
                v["status"].as_object_mut().unwrap().remove("operationState");
            },
            Act::Wait(Why::NothingFailed),
        ),
        (
            "Synced again (fixed by hand)",
            |v| v["status"]["sync"]["status"] = json!("Synced"),
            Act::Wait(Why::AlreadySynced),
        ),
        (
            "the revision moved: ask a refresh",
            |v| v["status"]["sync"]["revision"] = json!(NEWER),
            Act::Refresh {
                failed: rev(SHA),
                compared: rev(NEWER),
            },
        ),
    ];
    for (name, edit, expected) in rows {
        let mut v = csa.clone();
        edit(&mut v);
        let got = decide(&v, &Memory::default());
        // The message is the one Argo CD wrote, whatever the row: compare the rest.
        let got = match (got, &expected) {
            (Act::Converge(mut f), Act::Converge(e)) if e.message.is_empty() => {
                f.message = String::new();
                Act::Converge(f)
            }
            (got, _) => got,
        };
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn a_refresh_is_asked_once_per_revision_pair() {
    let mut v = fixture(CSA);
    v["status"]["sync"]["revision"] = json!(NEWER);
    let asked = Memory {
        refresh_asked: Some((rev(SHA), rev(NEWER))),
        ..Default::default()
    };
    assert_eq!(
        decide(&v, &asked),
        Act::Wait(Why::RevisionMoved {
            failed: rev(SHA),
            compared: rev(NEWER),
        })
    );
    // Another pair asks again.
    let other = Memory {
        refresh_asked: Some((rev(SHA), rev("0000"))),
        ..Default::default()
    };
    assert!(matches!(decide(&v, &other), Act::Refresh { .. }));
}

#[test]
fn a_second_identical_failure_waits_for_a_new_revision_or_spec() {
    for text in [CSA, SSA, SSD] {
        let v = fixture(text);
        let same = Memory {
            failed_handback: Some(Fingerprint::of(&app(&v))),
            ..Default::default()
        };
        assert_eq!(
            decide(&v, &same),
            Act::Wait(Why::SameFailure { revision: rev(SHA) })
        );
        // The generation moves with every status write: no signal.
        let mut status_written = v.clone();
        status_written["metadata"]["generation"] = json!(99);
        status_written["status"]["reconciledAt"] = json!("2026-08-22T12:00:00Z");
        assert!(matches!(
            decide(&status_written, &same),
            Act::Wait(Why::SameFailure { .. })
        ));
        // A changed spec retries.
        let mut spec_changed = v.clone();
        spec_changed["spec"]["source"]["path"] = json!("db-v2");
        assert!(matches!(decide(&spec_changed, &same), Act::Converge(_)));
    }
    // A new revision that fails the same way under server-side diff retries.
    let mut v = fixture(SSD);
    let same = Memory {
        failed_handback: Some(Fingerprint::of(&app(&v))),
        ..Default::default()
    };
    v["status"]["sync"]["revision"] = json!(NEWER);
    assert!(matches!(decide(&v, &same), Act::Converge(f) if f.revision == rev(NEWER)));
}

/// After a hand-back Argo CD applied, its comparison may still carry the ComparisonError from
/// before the re-create until it refreshes: that is no new failure. A new revision or spec is.
#[test]
fn a_stale_comparison_error_after_an_applied_hand_back_waits() {
    let v = fixture(SSD);
    let applied = Memory {
        applied_handback: Some(Fingerprint::of(&app(&v))),
        ..Default::default()
    };
    assert_eq!(
        decide(&v, &applied),
        Act::Wait(Why::AppliedNotCompared { revision: rev(SHA) })
    );
    let mut newer = v.clone();
    newer["status"]["sync"]["revision"] = json!(NEWER);
    assert!(matches!(decide(&newer, &applied), Act::Converge(f) if f.revision == rev(NEWER)));
    let mut spec_changed = v.clone();
    spec_changed["spec"]["source"]["path"] = json!("db-v2");
    assert!(matches!(decide(&spec_changed, &applied), Act::Converge(_)));
    // A sync that failed on the field (client-side or server-side apply) is news either way.
    for text in [CSA, SSA] {
        let v = fixture(text);
        let applied = Memory {
            applied_handback: Some(Fingerprint::of(&app(&v))),
            ..Default::default()
        };
        assert!(matches!(decide(&v, &applied), Act::Converge(_)), "{text}");
    }
}

#[test]
fn server_side_diff_by_table() {
    let ssd = fixture(SSD);
    let rows: Vec<(&str, Edit, Act)> = vec![
        (
            "another comparison error",
            |v| {
                v["status"]["conditions"][0]["message"] =
                    json!("Failed to compare desired state to live state: failed to load target state: rpc error");
            },
            Act::Wait(Why::OtherComparisonError {
                message: "Failed to compare desired state to live state: failed to load target state: rpc error".into(),
            }),
        ),
        (
            "the cached variant of the message",
            |v| {
                v["status"]["conditions"][0]["message"] = json!("Failed to compare desired state to live state: failed to calculate diff from cache: error calculating server side diff: serverSideDiff error: error running server side apply in dryrun mode for resource StatefulSet/db: StatefulSet.apps \"db\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas' are forbidden");
            },
            Act::Converge(Failure {
                shape: Shape::ComparisonError,
                revision: rev(SHA),
                statefulsets: db(),
                message: String::new(),
            }),
        ),
        (
            "the StatefulSet is in two namespaces",
            |v| {
                v["status"]["resources"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"group": "apps", "version": "v1", "kind": "StatefulSet", "namespace": "apps-b", "name": "db", "status": "Unknown"}));
            },
            Act::Converge(Failure {
                shape: Shape::ComparisonError,
                revision: rev(SHA),
                statefulsets: vec![
                    Named { namespace: Some("apps".into()), name: "db".into() },
                    Named { namespace: Some("apps-b".into()), name: "db".into() },
                ],
                message: String::new(),
            }),
        ),
        (
            "not in status.resources: no namespace",
            |v| v["status"]["resources"] = json!([]),
            Act::Converge(Failure {
                shape: Shape::ComparisonError,
                revision: rev(SHA),
                statefulsets: vec![Named { namespace: None, name: "db".into() }],
                message: String::new(),
            }),
        ),
        (
            "no revision compared",
            |v| {
                v["status"]["sync"] = json!({"status": "Unknown"});
            },
            Act::Wait(Why::NoRevision),
        ),
        (
            "a sync in flight beside the condition",
            |v| v["operation"] = json!({"sync": {}}),
            Act::Wait(Why::OperationInFlight),
        ),
    ];
    for (name, edit, expected) in rows {
        let mut v = ssd.clone();
        edit(&mut v);
        let got = match (decide(&v, &Memory::default()), &expected) {
            (Act::Converge(mut f), Act::Converge(e)) if e.message.is_empty() => {
                f.message = String::new();
                Act::Converge(f)
            }
            (got, _) => got,
        };
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn names_are_read_anywhere_in_a_message() {
    for (message, names) in [
        (
            "error when patching \"/dev/shm/1\": StatefulSet.apps \"db\" is invalid: spec: Forbidden",
            vec!["db"],
        ),
        (
            "a, reason: StatefulSet.apps \"a\" is invalid: x,StatefulSet.apps \"b\" is invalid: y",
            vec!["a", "b"],
        ),
        (
            "error running server side apply in dryrun mode for resource StatefulSet/web-0: StatefulSet.apps \"web-0\" is invalid",
            vec!["web-0"],
        ),
        ("StatefulSet.apps \"db\" not found", vec![]),
        ("nothing here", vec![]),
    ] {
        assert_eq!(
            names_in(message).into_iter().collect::<Vec<_>>(),
            names,
            "{message}"
        );
    }
}

#[test]
fn every_reason_reads_as_a_sentence() {
    for why in [
        Why::NotOptedIn,
        Why::OtherDestination {
            server: "https://x".into(),
            name: String::new(),
        },
        Why::RetriesLeft {
            retry_count: 1,
            message: "m".into(),
        },
        Why::RevisionMoved {
            failed: rev("a"),
            compared: rev("b"),
        },
        Why::SameFailure { revision: rev("a") },
        Why::AppliedNotCompared { revision: rev("a") },
    ] {
        let text = why.to_string();
        assert!(!text.is_empty() && !text.ends_with('.'), "{text}");
    }
    assert!(
        Why::OtherDestination {
            server: String::new(),
            name: "prod".into()
        }
        .to_string()
        .contains("name \"prod\"")
    );
}
