//! The decision on a template's VolumeAttributesClass (issue #38), by table: every case built
//! from the captured objects (`tests/fixtures/v1.32`), changed in one place, and decided with
//! what is known of the server's classes (`decide::AttributeClasses`): a move to another class
//! is carried (each claim of another class patched once Bound, the StatefulSet re-created), a
//! removal, a class that does not exist and a server without the API are refused, a claim
//! already of the declared class is left alone.

use std::collections::BTreeSet;

use flux_converger::decide::{
    AttributeClasses, ClaimModify, KnownStates, Plan, Refusal, RefusalCode, UNBOUND_CLASS_RULE,
    decide_in,
};
use flux_converger::manifest::parse_documents;
use serde_json::{Value, json};

fn fixture(path: &str) -> Vec<Value> {
    let full = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    parse_documents(&full, &text)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|d| d.object)
        .collect()
}

fn one(path: &str) -> Value {
    fixture(path).remove(0)
}

const TEMPLATE: &str = "/spec/volumeClaimTemplates/0/spec";

fn with(mut v: Value, pointer: &str, key: &str, value: Value) -> Value {
    let target = v.pointer_mut(pointer).expect("pointer");
    if value.is_null() {
        target.as_object_mut().unwrap().remove(key);
    } else {
        target[key] = value;
    }
    v
}

/// The live `web` (v1.32 capture) at 1Gi, its template in `class`.
fn live(class: Option<&str>) -> Value {
    with(
        one("v1.32/live-statefulset.yaml"),
        TEMPLATE,
        "volumeAttributesClassName",
        class.map_or(Value::Null, |c| json!(c)),
    )
}

/// What git declares: the live object as applied, its template in `class` at `size`.
fn desired(class: Option<&str>, size: &str) -> Value {
    let d = live(class);
    let mut d = with(
        d,
        &format!("{TEMPLATE}/resources/requests"),
        "storage",
        json!(size),
    );
    d.as_object_mut().unwrap().remove("status");
    d
}

/// A Bound claim of `web` at 1Gi, of `class`.
fn bound(ordinal: u32, class: Option<&str>) -> Value {
    let c = one("v1.32/pvc-bound.yaml");
    let c = with(c, "/metadata", "name", json!(format!("data-web-{ordinal}")));
    with(
        c,
        "/spec",
        "volumeAttributesClassName",
        class.map_or(Value::Null, |c| json!(c)),
    )
}

fn pending(ordinal: u32, class: Option<&str>) -> Value {
    let c = one("v1.32/pvc-pending.yaml");
    let c = with(c, "/metadata", "name", json!(format!("data-web-{ordinal}")));
    with(
        c,
        "/spec",
        "volumeAttributesClassName",
        class.map_or(Value::Null, |c| json!(c)),
    )
}

fn served(names: &[&str]) -> AttributeClasses {
    AttributeClasses::Served {
        api_version: "storage.k8s.io/v1".into(),
        names: names.iter().map(|n| n.to_string()).collect(),
    }
}

fn decide(
    desired: &Value,
    live: &Value,
    claims: &[Value],
    known: &AttributeClasses,
) -> Result<Plan, Refusal> {
    let desired = serde_json::from_value(desired.clone()).unwrap();
    let live = serde_json::from_value(live.clone()).unwrap();
    let claims: Vec<_> = claims
        .iter()
        .map(|c| serde_json::from_value(c.clone()).unwrap())
        .collect();
    let classes: Vec<_> = fixture("v1.28/storageclasses.yaml")
        .into_iter()
        .map(|c| serde_json::from_value(c).unwrap())
        .collect();
    decide_in(
        &desired,
        Some(&live),
        &claims,
        &classes,
        &KnownStates::new(),
        known,
    )
}

fn moved(ordinal: u32, from: Option<&str>, to: &str) -> ClaimModify {
    ClaimModify {
        claim: format!("data-web-{ordinal}"),
        template: "data".into(),
        from: from.map(str::to_string),
        to: to.into(),
    }
}

enum Expect {
    /// recreate, change classes (in order), claims moved, claims grown, deferred.
    Plan {
        recreate: bool,
        changes: Vec<&'static str>,
        modify: Vec<ClaimModify>,
        resize: Vec<&'static str>,
        deferred: Vec<&'static str>,
    },
    Refused(RefusalCode, Vec<&'static str>),
}

/// A case: its name, desired, live, claims, what is known of the classes, what is expected.
type Case = (
    &'static str,
    Value,
    Value,
    Vec<Value>,
    AttributeClasses,
    Expect,
);

#[test]
fn the_class_decision_by_table() {
    use RefusalCode::*;
    let silver3 = || (0..3).map(|i| bound(i, Some("silver"))).collect::<Vec<_>>();
    let gold = served(&["gold", "silver"]);
    let cases: Vec<Case> = vec![
        (
            "unchanged: nothing",
            desired(Some("silver"), "1Gi"),
            live(Some("silver")),
            silver3(),
            gold.clone(),
            Expect::Plan {
                recreate: false,
                changes: vec![],
                modify: vec![],
                resize: vec![],
                deferred: vec![],
            },
        ),
        (
            "silver to gold: carried, every claim moved",
            desired(Some("gold"), "1Gi"),
            live(Some("silver")),
            silver3(),
            gold.clone(),
            Expect::Plan {
                recreate: true,
                changes: vec!["volume-attributes-class"],
                modify: (0..3).map(|i| moved(i, Some("silver"), "gold")).collect(),
                resize: vec![],
                deferred: vec![],
            },
        ),
        (
            "no class to gold: carried, claims moved from none",
            desired(Some("gold"), "1Gi"),
            live(None),
            (0..2).map(|i| bound(i, None)).collect(),
            gold.clone(),
            Expect::Plan {
                recreate: true,
                changes: vec!["volume-attributes-class"],
                modify: (0..2).map(|i| moved(i, None, "gold")).collect(),
                resize: vec![],
                deferred: vec![],
            },
        ),
        (
            "grown and moved: both, in one plan",
            desired(Some("gold"), "2Gi"),
            live(Some("silver")),
            silver3(),
            gold.clone(),
            Expect::Plan {
                recreate: true,
                changes: vec!["volume-attributes-class", "storage-grown"],
                modify: (0..3).map(|i| moved(i, Some("silver"), "gold")).collect(),
                resize: vec!["data-web-0", "data-web-1", "data-web-2"],
                deferred: vec![],
            },
        ),
        (
            "a claim someone moved already is left alone; a scaled-away ordinal is moved too",
            desired(Some("gold"), "1Gi"),
            live(Some("silver")),
            vec![
                bound(0, Some("gold")),
                bound(1, Some("silver")),
                bound(7, Some("silver")),
            ],
            gold.clone(),
            Expect::Plan {
                recreate: true,
                changes: vec!["volume-attributes-class"],
                modify: vec![
                    moved(1, Some("silver"), "gold"),
                    moved(7, Some("silver"), "gold"),
                ],
                resize: vec![],
                deferred: vec![],
            },
        ),
        (
            "a claim of a third class is moved as well",
            desired(Some("gold"), "1Gi"),
            live(Some("silver")),
            vec![bound(0, Some("bronze"))],
            gold.clone(),
            Expect::Plan {
                recreate: true,
                changes: vec!["volume-attributes-class"],
                modify: vec![moved(0, Some("bronze"), "gold")],
                resize: vec![],
                deferred: vec![],
            },
        ),
        (
            "claims lagging behind a template already moved: moved, not re-created",
            desired(Some("gold"), "1Gi"),
            live(Some("gold")),
            vec![bound(0, Some("gold")), bound(1, Some("silver"))],
            gold.clone(),
            Expect::Plan {
                recreate: false,
                changes: vec![],
                modify: vec![moved(1, Some("silver"), "gold")],
                resize: vec![],
                deferred: vec![],
            },
        ),
        (
            "an unbound claim waits until it binds",
            desired(Some("gold"), "1Gi"),
            live(Some("silver")),
            vec![bound(0, Some("silver")), pending(1, Some("silver"))],
            gold.clone(),
            Expect::Plan {
                recreate: true,
                changes: vec!["volume-attributes-class"],
                modify: vec![moved(0, Some("silver"), "gold")],
                resize: vec![],
                deferred: vec!["data-web-1"],
            },
        ),
        (
            "no class declared: claims keep theirs",
            desired(None, "1Gi"),
            live(None),
            silver3(),
            gold.clone(),
            Expect::Plan {
                recreate: false,
                changes: vec![],
                modify: vec![],
                resize: vec![],
                deferred: vec![],
            },
        ),
        (
            "removed: refused",
            desired(None, "1Gi"),
            live(Some("silver")),
            silver3(),
            gold.clone(),
            Expect::Refused(
                VolumeAttributesClassRemoved,
                vec![
                    "template \"data\"",
                    "(live \"silver\", desired <unset>)",
                    "never lets a claim's VolumeAttributesClass go back to none",
                ],
            ),
        ),
        (
            "an empty class is no class: removed",
            desired(Some(""), "1Gi"),
            live(Some("silver")),
            silver3(),
            gold.clone(),
            Expect::Refused(VolumeAttributesClassRemoved, vec!["live \"silver\""]),
        ),
        (
            "a class that does not exist: refused",
            desired(Some("platinum"), "1Gi"),
            live(Some("silver")),
            silver3(),
            gold.clone(),
            Expect::Refused(
                VolumeAttributesClassMissing,
                vec![
                    "the VolumeAttributesClass \"platinum\", which does not exist",
                    "storage.k8s.io/v1",
                    "nothing was written",
                ],
            ),
        ),
        (
            "lagging claims to a class that does not exist: refused too",
            desired(Some("gold"), "1Gi"),
            live(Some("gold")),
            vec![bound(0, Some("silver"))],
            served(&["silver"]),
            Expect::Refused(VolumeAttributesClassMissing, vec!["claim \"data-web-0\""]),
        ),
        (
            "a server without the API: refused",
            desired(Some("gold"), "1Gi"),
            live(Some("silver")),
            silver3(),
            AttributeClasses::Unsupported,
            Expect::Refused(
                VolumeAttributesClassUnsupported,
                vec![
                    "serves no VolumeAttributesClass API",
                    "storage.k8s.io/v1 from Kubernetes 1.34",
                    "v1beta1",
                ],
            ),
        ),
        (
            "another template field changed: its own refusal first",
            with(
                desired(Some("gold"), "1Gi"),
                TEMPLATE,
                "storageClassName",
                json!("fast"),
            ),
            live(Some("silver")),
            silver3(),
            AttributeClasses::Unsupported,
            Expect::Refused(StorageClassChanged, vec!["storageClassName"]),
        ),
    ];
    let mut failures = Vec::new();
    for (name, d, l, claims, known, expect) in &cases {
        let got = decide(d, l, claims, known);
        let ok = match (expect, &got) {
            (
                Expect::Plan {
                    recreate,
                    changes,
                    modify,
                    resize,
                    deferred,
                },
                Ok(p),
            ) => {
                let c: Vec<&str> = p.changes.iter().map(|c| c.class.as_str()).collect();
                let r: Vec<&str> = p.resize.iter().map(|r| r.claim.as_str()).collect();
                let dd: Vec<&str> = p.deferred.iter().map(|d| d.claim.as_str()).collect();
                p.recreate == *recreate
                    && c == *changes
                    && p.modify == *modify
                    && r == *resize
                    && dd == *deferred
            }
            (Expect::Refused(code, words), Err(r)) => {
                r.code == *code && words.iter().all(|w| r.message.contains(w))
            }
            _ => false,
        };
        if !ok {
            failures.push(format!("{name}: got {got:#?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn unchecked_the_plan_names_the_classes_to_check() {
    let plan = decide(
        &desired(Some("gold"), "1Gi"),
        &live(Some("silver")),
        &[bound(0, Some("silver")), pending(1, Some("silver"))],
        &AttributeClasses::Unchecked,
    )
    .unwrap();
    assert_eq!(plan.attribute_classes, BTreeSet::from(["gold".to_string()]));
    // Nothing moves: nothing to check.
    let plan = decide(
        &desired(Some("silver"), "2Gi"),
        &live(Some("silver")),
        &[bound(0, Some("silver"))],
        &AttributeClasses::Unchecked,
    )
    .unwrap();
    assert!(plan.attribute_classes.is_empty());
}

#[test]
fn the_change_and_the_deferral_say_what_the_server_says() {
    let plan = decide(
        &desired(Some("gold"), "1Gi"),
        &live(Some("silver")),
        &[pending(1, Some("silver"))],
        &served(&["gold"]),
    )
    .unwrap();
    let change = &plan.changes[0];
    assert_eq!(
        change.field,
        "spec.volumeClaimTemplates[data].spec.volumeAttributesClassName"
    );
    assert_eq!(
        (change.live.as_str(), change.declared.as_str()),
        ("\"silver\"", "\"gold\"")
    );
    let reason = &plan.deferred[0].reason;
    assert!(reason.contains(UNBOUND_CLASS_RULE), "{reason}");
    assert!(
        reason.contains("move from \"silver\" to the VolumeAttributesClass \"gold\""),
        "{reason}"
    );
    // The rule as the captured 422 of a 1.32 server states it.
    let body = std::fs::read_to_string(format!(
        "{}/tests/fixtures/v1.32/error-pvc-unbound-immutable.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    assert!(body.contains(UNBOUND_CLASS_RULE));
    // The plan's JSON carries the moves.
    let json = serde_json::to_value(&plan).unwrap();
    assert!(json.get("modify").is_none(), "none Bound: {json}");
    let plan = decide(
        &desired(Some("gold"), "1Gi"),
        &live(Some("silver")),
        &[bound(0, Some("silver"))],
        &served(&["gold"]),
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(&plan).unwrap()["modify"],
        json!([{"claim": "data-web-0", "template": "data", "from": "silver", "to": "gold"}])
    );
}
