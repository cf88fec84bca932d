use super::*;
use crate::model::RefusalCode;
use crate::model::{RefusalEntry, Trigger};

fn record(state: RevisionState) -> RevisionRecord {
    RevisionRecord {
        volumes: Default::default(),
        revision: "main@sha1:abc".into(),
        digest: None,
        trigger: Trigger::Webhook,
        started_at: "2026-11-30T08:00:00Z".into(),
        finished_at: Some("2026-11-30T08:00:03Z".into()),
        state,
        statefulsets: Vec::new(),
        handoff: None,
        flux: None,
        warnings: Vec::new(),
        error: None,
        generation: None,
        gate: None,
        attempts: 1,
    }
}

fn set(name: &str, outcome: StatefulSetOutcome) -> StatefulSetEntry {
    StatefulSetEntry {
        volumes: Default::default(),
        namespace: "apps".into(),
        name: name.into(),
        outcome,
        old_uid: None,
        new_uid: None,
        templates: Vec::new(),
        changes: Vec::new(),
        claims: Vec::new(),
        deferred: Vec::new(),
        refusal: None,
        error: None,
    }
}

fn refused(name: &str, code: RefusalCode) -> StatefulSetEntry {
    StatefulSetEntry {
        refusal: Some(RefusalEntry {
            code,
            message: format!("{name} refused"),
        }),
        ..set(name, StatefulSetOutcome::Refused)
    }
}

fn failed(name: &str, step: &str) -> StatefulSetEntry {
    StatefulSetEntry {
        error: Some(StepError {
            step: step.into(),
            message: format!("{name} failed"),
            hint: None,
        }),
        ..set(name, StatefulSetOutcome::Failed)
    }
}

#[test]
fn problem_table() {
    let run_error = StepError::new("resolve", "no artifact");
    type Want = Option<(
        &'static str,
        &'static str,
        Option<&'static str>,
        &'static str,
        usize,
    )>;
    let cases: Vec<(&str, RevisionRecord, Want)> = vec![
        ("converged", record(RevisionState::Converged), None),
        ("running", record(RevisionState::Running), None),
        ("superseded", record(RevisionState::Superseded), None),
        (
            "refused, first of two",
            RevisionRecord {
                statefulsets: vec![
                    set("ok", StatefulSetOutcome::Converged),
                    refused("db", RefusalCode::Shrink),
                    refused("cache", RefusalCode::NotExpandable),
                ],
                ..record(RevisionState::Refused)
            },
            Some(("refused", "shrink", Some("apps/db"), "db refused", 1)),
        ),
        (
            "refused without entries",
            record(RevisionState::Refused),
            None,
        ),
        (
            "failed in a StatefulSet",
            RevisionRecord {
                statefulsets: vec![failed("db", "grow")],
                ..record(RevisionState::Failed)
            },
            Some(("failed", "step grow", Some("apps/db"), "db failed", 0)),
        ),
        (
            "failed after one held: the failed one is shown",
            RevisionRecord {
                statefulsets: vec![failed("a-db", "held"), failed("b-cache", "preflight")]
                    .into_iter()
                    .enumerate()
                    .map(|(i, mut e)| {
                        if i == 0 {
                            e.outcome = StatefulSetOutcome::Held;
                        }
                        e
                    })
                    .collect(),
                ..record(RevisionState::Failed)
            },
            Some((
                "failed",
                "step preflight",
                Some("apps/b-cache"),
                "b-cache failed",
                0,
            )),
        ),
        (
            "failed before the StatefulSets",
            RevisionRecord {
                error: Some(run_error.clone()),
                statefulsets: vec![failed("db", "orphan")],
                ..record(RevisionState::Failed)
            },
            Some(("failed", "step resolve", None, "no artifact", 1)),
        ),
    ];
    for (case, record, want) in cases {
        let got = problem(&record);
        let got = got.as_ref().map(|p| {
            (
                p.kind,
                p.code.as_str(),
                p.subject.as_deref(),
                p.message.as_str(),
                p.more,
            )
        });
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn ago_table() {
    let now: Timestamp = "2026-11-30T08:00:00Z".parse().expect("timestamp");
    let cases = [
        ("2026-11-30T08:00:00Z", Some("just now")),
        ("2026-11-30T08:00:10Z", Some("just now")),
        ("2026-11-30T07:59:18Z", Some("42s ago")),
        ("2026-11-30T07:55:00Z", Some("5m ago")),
        ("2026-11-30T05:00:00Z", Some("3h ago")),
        ("2026-11-28T08:00:00Z", Some("2d ago")),
        ("2026-11-30T09:00:00+01:00", Some("just now")),
        ("yesterday", None),
    ];
    for (at, want) in cases {
        assert_eq!(ago(at, now).as_deref(), want, "{at}");
    }
}

#[test]
fn took_table() {
    let cases = [
        (
            "2026-11-30T08:00:00Z",
            "2026-11-30T08:00:00.250Z",
            Some("250ms"),
        ),
        ("2026-11-30T08:00:00Z", "2026-11-30T08:00:03Z", Some("3s")),
        (
            "2026-11-30T08:00:00Z",
            "2026-11-30T08:03:04.2Z",
            Some("3m 5s"),
        ),
        ("2026-11-30T08:00:00Z", "later", None),
    ];
    for (started, finished, want) in cases {
        assert_eq!(took(started, finished).as_deref(), want, "{finished}");
    }
}

#[test]
fn row_is_behind_when_the_source_moved_on() {
    let summary = StatusRow {
        kind: crate::model::Kind::KUSTOMIZATION,
        waiting: None,
        namespace: "apps".into(),
        name: "web".into(),
        gate: GateMode::Suspend,
        source_revision: Some("main@sha1:def".into()),
        last: None,
        hold: None,
    };
    let last = record(RevisionState::Converged);
    let row = Row::new(&summary, Some(&last));
    assert!(row.behind);
    assert_eq!(row.badge.key, "converged");
    assert_eq!(row.at.as_deref(), Some("2026-11-30T08:00:03Z"));
    assert_eq!(row.href(), "/kustomizations/apps/web");
    let never = Row::new(&summary, None);
    assert!(!never.behind);
    assert_eq!(never.badge.key, "none");
}

#[test]
fn page_numbers_table() {
    let cases: [(usize, usize, &[Option<usize>]); 7] = [
        (1, 0, &[]),
        (1, 1, &[Some(1)]),
        (2, 5, &[Some(1), Some(2), Some(3), Some(4), Some(5)]),
        (1, 8, &[Some(1), Some(2), Some(3), None, Some(8)]),
        (
            5,
            10,
            &[
                Some(1),
                None,
                Some(3),
                Some(4),
                Some(5),
                Some(6),
                Some(7),
                None,
                Some(10),
            ],
        ),
        (10, 10, &[Some(1), None, Some(8), Some(9), Some(10)]),
        (
            4,
            7,
            &[
                Some(1),
                Some(2),
                Some(3),
                Some(4),
                Some(5),
                Some(6),
                Some(7),
            ],
        ),
    ];
    for (current, last, want) in cases {
        assert_eq!(page_numbers(current, last), want, "{current} of {last}");
    }
}

#[test]
fn summary_state_key_table() {
    let summary = |last: Option<serde_json::Value>| StatusRow {
        kind: crate::model::Kind::KUSTOMIZATION,
        waiting: None,
        namespace: "apps".into(),
        name: "web".into(),
        gate: GateMode::Suspend,
        source_revision: None,
        last,
        hold: None,
    };
    for (state, want) in [
        (RevisionState::Converged, "converged"),
        (RevisionState::Refused, "refused"),
        (RevisionState::Failed, "failed"),
        (RevisionState::Running, "running"),
        (RevisionState::Superseded, "superseded"),
    ] {
        let last = record(state).summary();
        assert_eq!(summary_state_key(&summary(Some(last))), want);
        // The same key the row's badge gets from the whole record.
        assert_eq!(state_badge(Some(state)).key, want);
    }
    assert_eq!(summary_state_key(&summary(None)), "none");
    assert_eq!(
        summary_state_key(&summary(Some(serde_json::json!({"state": "retired"})))),
        "none"
    );
}

#[test]
fn a_held_statefulset_has_its_own_badge() {
    let held = outcome_badge(StatefulSetOutcome::Held);
    assert_eq!(held.label, "held");
    assert_eq!(held.key, "superseded");
}

#[test]
fn every_refusal_code_has_its_own_advice() {
    let codes = [
        "shrink",
        "not-expandable",
        "selector-changed",
        "service-name-changed",
        "storage-class-changed",
        "template-removed",
        "other-immutable",
        "rejected",
        "create-refused",
        "volume-attributes-class-removed",
        "volume-attributes-class-missing",
        "volume-attributes-class-unsupported",
    ];
    let fallback = advice("something-new");
    for code in codes {
        assert_ne!(advice(code), fallback, "{code}");
    }
}

#[test]
fn set_view_shows_recreation_only_when_the_uid_changed() {
    let mut entry = set("db", StatefulSetOutcome::Converged);
    entry.old_uid = Some("u1".into());
    entry.new_uid = Some("u2".into());
    assert_eq!(
        SetView::of(&entry).recreated,
        Some(("u1".into(), "u2".into()))
    );
    entry.new_uid = Some("u1".into());
    assert_eq!(SetView::of(&entry).recreated, None);
}
