use super::*;

#[test]
fn go_durations_by_table() {
    for (text, expected) in [
        ("10m", Some(600.0)),
        ("10m0s", Some(600.0)),
        ("1m30s", Some(90.0)),
        ("1h", Some(3600.0)),
        ("500ms", Some(0.5)),
        ("1.5s", Some(1.5)),
        ("0", Some(0.0)),
        ("", None),
        ("ten minutes", None),
        ("10", None),
        ("5d", None),
    ] {
        assert_eq!(
            parse_go_duration(text).map(|d| d.as_secs_f64()),
            expected,
            "{text:?}"
        );
    }
}

#[test]
fn retry_schedule_by_table() {
    let s = Duration::from_secs;
    for (retry, interval, attempts, expected) in [
        // retryInterval first, doubling per attempt.
        (Some("1m"), Some("10m"), 1, s(60)),
        (Some("1m"), Some("10m"), 2, s(120)),
        (Some("1m"), Some("10m"), 3, s(240)),
        // Capped at an hour...
        (Some("1m"), Some("10m"), 10, s(3600)),
        // ... unless Flux's own interval is longer.
        (None, Some("2h"), 3, s(7200)),
        // interval when no retryInterval.
        (None, Some("5m"), 1, s(300)),
        (Some("bogus"), Some("5m"), 1, s(300)),
        (Some("0s"), Some("5m"), 1, s(300)),
        (None, None, 1, DEFAULT_RETRY),
        (Some("1s"), None, 40, s(3600)),
    ] {
        assert_eq!(
            retry_delay(retry, interval, attempts),
            expected,
            "{retry:?} {interval:?} {attempts}"
        );
    }
}

#[test]
fn closing_what_the_record_shows() {
    let open = Open {
        mode: GateMode::Suspend,
        revision: "main@sha1:2".into(),
        started_at: "t".into(),
        since: Since::Generation(3),
        attempted_before: None,
        deadline: Instant::now(),
        attempt: 1,
    };
    let t = Duration::from_secs(600);
    let timeout = Closing::Timeout.flux(&open, t);
    assert_eq!(timeout.outcome, FluxOutcome::Timeout);
    assert_eq!(
        timeout.message.as_deref(),
        Some("Flux did not apply main@sha1:2 within 10m")
    );
    let moved = Closing::SourceMoved(Some("main@sha1:3".into())).flux(&open, t);
    assert_eq!(moved.outcome, FluxOutcome::Pending);
    assert!(moved.message.unwrap().contains("moved on to main@sha1:3"));
    let held = Closing::Held("db migration".into()).flux(&open, t);
    assert_eq!(
        held.message.as_deref(),
        Some("held (db migration): gate closed")
    );
    for (closing, retries) in [
        (Closing::Timeout, true),
        (Closing::SourceMoved(None), false),
        (Closing::Held("x".into()), false),
        (
            Closing::Answer(FluxResult {
                outcome: FluxOutcome::Failed,
                applied_revision: None,
                message: None,
                attempted_revision: None,
            }),
            true,
        ),
        (
            Closing::Answer(FluxResult {
                outcome: FluxOutcome::Raced,
                applied_revision: None,
                message: None,
                attempted_revision: Some("main@sha1:3".into()),
            }),
            false,
        ),
    ] {
        assert_eq!(closing.retries(), retries, "{closing:?}");
    }
}

fn open(mode: GateMode, revision: &str, deadline: Instant) -> Open {
    Open {
        mode,
        revision: revision.into(),
        started_at: "2026-12-05T10:00:00Z".into(),
        since: Since::Generation(3),
        attempted_before: None,
        deadline,
        attempt: 1,
    }
}

fn reopen(revision: &str, at: Instant) -> Reopen {
    Reopen {
        revision: revision.into(),
        started_at: "2026-12-05T10:00:00Z".into(),
        at,
        generation: 4,
        attempts: 1,
    }
}

fn answer(outcome: FluxOutcome) -> FluxResult {
    FluxResult {
        outcome,
        applied_revision: None,
        message: None,
        attempted_revision: None,
    }
}

fn held(reason: &str) -> GateState {
    GateState::Held {
        reason: reason.into(),
    }
}

/// (state, off, hold, Flux's answer, expected step).
type ObjectCase = (
    Option<GateState>,
    bool,
    Option<&'static str>,
    Option<FluxResult>,
    Step,
);

#[test]
fn a_kustomization_event_by_table() {
    let now = Instant::now();
    let o = open(GateMode::Suspend, "main@sha1:2", now);
    let closed = GateState::Closed {
        reopen: Some(reopen("main@sha1:2", now)),
    };
    let applied = Some(answer(FluxOutcome::Applied));
    // (state, off, hold, Flux's answer) -> (next state, close)
    let cases: Vec<ObjectCase> = vec![
        // The gate turned off forgets whatever was tracked, even an open gate.
        (
            Some(GateState::Open(o.clone())),
            true,
            None,
            applied.clone(),
            Step::stay(None),
        ),
        (Some(held("x")), true, Some("x"), None, Step::stay(None)),
        // A hold closes an open gate and is kept.
        (
            Some(GateState::Open(o.clone())),
            false,
            Some("db migration"),
            applied.clone(),
            Step::closing(
                Some(held("db migration")),
                o.clone(),
                Closing::Held("db migration".into()),
            ),
        ),
        // A hold on anything else is only kept (a new reason replaces the old).
        (None, false, Some("x"), None, Step::to(held("x"))),
        (
            Some(closed.clone()),
            false,
            Some("x"),
            None,
            Step::to(held("x")),
        ),
        (
            Some(held("old")),
            false,
            Some("new"),
            None,
            Step::to(held("new")),
        ),
        // The hold removed: untracked, the index runs what is due.
        (Some(held("x")), false, None, None, Step::stay(None)),
        // Flux's answer closes an open gate; no answer leaves it open.
        (
            Some(GateState::Open(o.clone())),
            false,
            None,
            applied.clone(),
            Step::closing(
                None,
                o.clone(),
                Closing::Answer(answer(FluxOutcome::Applied)),
            ),
        ),
        (
            Some(GateState::Open(o.clone())),
            false,
            None,
            None,
            Step::to(GateState::Open(o.clone())),
        ),
        // A closed gate waiting to re-open, or none: unchanged, an answer is not read.
        (
            Some(closed.clone()),
            false,
            None,
            applied.clone(),
            Step::to(closed.clone()),
        ),
        (None, false, None, applied.clone(), Step::stay(None)),
    ];
    for (state, off, hold, flux, expected) in cases {
        let got = on_object(state.clone(), off, hold.map(String::from), |_| flux.clone());
        assert_eq!(
            got, expected,
            "{state:?} off={off} hold={hold:?} answer={flux:?}"
        );
    }
}

#[test]
fn a_hand_off_by_table() {
    let now = Instant::now();
    let o = open(GateMode::Suspend, "main@sha1:3", now);
    let older = open(GateMode::Suspend, "main@sha1:2", now);
    for (state, expected) in [
        (None, Step::to(GateState::Open(o.clone()))),
        (
            Some(GateState::Open(older.clone())),
            Step::to(GateState::Open(o.clone())),
        ),
        (
            Some(GateState::Closed {
                reopen: Some(reopen("main@sha1:2", now)),
            }),
            Step::to(GateState::Open(o.clone())),
        ),
        // A hold set during the converge wins: the new opening closes at once.
        (
            Some(held("x")),
            Step::closing(Some(held("x")), o.clone(), Closing::Held("x".into())),
        ),
    ] {
        assert_eq!(on_opened(state.clone(), o.clone()), expected, "{state:?}");
    }
}

#[test]
fn a_source_event_by_table() {
    let now = Instant::now();
    let suspend = open(GateMode::Suspend, "main@sha1:2", now);
    let reconcile = open(GateMode::Reconcile, "main@sha1:2", now);
    let waiting = GateState::Closed {
        reopen: Some(reopen("main@sha1:2", now)),
    };
    for (state, revision, expected) in [
        // Suspend mode: another revision (or none) closes the open gate.
        (
            Some(GateState::Open(suspend.clone())),
            Some("main@sha1:3"),
            Step::closing(
                None,
                suspend.clone(),
                Closing::SourceMoved(Some("main@sha1:3".into())),
            ),
        ),
        (
            Some(GateState::Open(suspend.clone())),
            None,
            Step::closing(None, suspend.clone(), Closing::SourceMoved(None)),
        ),
        // The same revision: nothing moved.
        (
            Some(GateState::Open(suspend.clone())),
            Some("main@sha1:2"),
            Step::to(GateState::Open(suspend.clone())),
        ),
        // Reconcile mode: Flux follows its source itself; the gate stays.
        (
            Some(GateState::Open(reconcile.clone())),
            Some("main@sha1:3"),
            Step::to(GateState::Open(reconcile.clone())),
        ),
        // A re-open of an older revision is dropped; of the same one kept.
        (Some(waiting.clone()), Some("main@sha1:3"), Step::stay(None)),
        (
            Some(waiting.clone()),
            Some("main@sha1:2"),
            Step::to(waiting.clone()),
        ),
        (Some(held("x")), Some("main@sha1:3"), Step::to(held("x"))),
        (None, Some("main@sha1:3"), Step::stay(None)),
    ] {
        assert_eq!(
            on_source(state.clone(), revision, |mode| mode == GateMode::Suspend),
            expected,
            "{state:?} {revision:?}"
        );
    }
}

#[test]
fn a_tick_by_table() {
    let now = Instant::now();
    let past = now - Duration::from_secs(1);
    let later = now + Duration::from_secs(60);
    let expired = open(GateMode::Suspend, "main@sha1:2", past);
    let running = open(GateMode::Suspend, "main@sha1:2", later);
    let due = reopen("main@sha1:2", now);
    let waiting = reopen("main@sha1:2", later);
    for (state, expected) in [
        (
            GateState::Open(expired.clone()),
            (None, Some(Due::Expired(expired.clone()))),
        ),
        (
            GateState::Open(running.clone()),
            (Some(GateState::Open(running.clone())), None),
        ),
        (
            GateState::Closed {
                reopen: Some(due.clone()),
            },
            (None, Some(Due::Reopen(due.clone()))),
        ),
        (
            GateState::Closed {
                reopen: Some(waiting.clone()),
            },
            (
                Some(GateState::Closed {
                    reopen: Some(waiting.clone()),
                }),
                None,
            ),
        ),
        (held("x"), (Some(held("x")), None)),
    ] {
        assert_eq!(on_tick(state.clone(), now), expected, "{state:?}");
    }
}

#[test]
fn a_close_schedules_its_reopen_only_where_nothing_newer_stands() {
    let now = Instant::now();
    let r = reopen("main@sha1:2", now);
    assert_eq!(
        on_closed(None, r.clone()),
        GateState::Closed {
            reopen: Some(r.clone())
        }
    );
    let newer = GateState::Open(open(GateMode::Suspend, "main@sha1:3", now));
    assert_eq!(on_closed(Some(newer.clone()), r.clone()), newer);
    assert_eq!(on_closed(Some(held("x")), r), held("x"));
}

#[test]
fn why_a_due_reopen_does_not_happen_by_table() {
    let go = ReopenCheck {
        reopens: true,
        held: false,
        same_generation: true,
        suspended: true,
        applied: false,
    };
    let spec = Some("the spec changed since: the revision is converged again first");
    for (check, expected) in [
        (go, None),
        (
            ReopenCheck {
                reopens: false,
                held: true,
                ..go
            },
            Some("the gate is no longer suspend"),
        ),
        (
            ReopenCheck {
                held: true,
                applied: true,
                ..go
            },
            Some("held"),
        ),
        (
            ReopenCheck {
                same_generation: false,
                ..go
            },
            spec,
        ),
        (
            ReopenCheck {
                suspended: false,
                ..go
            },
            spec,
        ),
        (
            ReopenCheck {
                applied: true,
                ..go
            },
            Some("Flux applied it meanwhile"),
        ),
    ] {
        assert_eq!(why_not_reopen(check), expected, "{check:?}");
    }
}
