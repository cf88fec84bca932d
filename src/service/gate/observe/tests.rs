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
