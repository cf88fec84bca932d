//! The queue's rules, exercised through its `Stream` with no cluster. Nothing here asserts a
//! wall-clock bound: "not ready" is shown by a backoff of an hour or by another key being
//! handed out first.

use std::time::Duration;

use futures::{FutureExt, StreamExt};
use prometheus_client::metrics::gauge::Gauge;

use super::*;

fn queue(base: Duration) -> (Queue<&'static str>, Gauge) {
    let gauge = Gauge::default();
    let policy = BackoffPolicy {
        base,
        max: base * 8,
        jitter: 0.0,
    };
    (Queue::new(policy, gauge.clone()), gauge)
}

const HOUR: Duration = Duration::from_secs(3600);

fn done() -> GateOutcome {
    GateOutcome::Done(crate::model::RevisionState::Converged)
}

fn failed() -> GateOutcome {
    GateOutcome::Failed {
        message: "artifact download failed".into(),
    }
}

#[tokio::test]
async fn a_newer_trigger_replaces_a_waiting_one_and_never_demotes_its_lane() {
    let (q, gauge) = queue(HOUR);
    let mut ready = q.ready();
    q.push("apps/a", Trigger::Resync);
    q.push("apps/a", Trigger::Startup);
    // A webhook moves a up to the new lane; a resync after it does not move it back.
    q.push("apps/b", Trigger::Resync);
    q.push("apps/b", Trigger::Webhook);
    q.push("apps/b", Trigger::Resync);
    assert_eq!(q.depth(), 2);
    assert_eq!(gauge.get(), 2);
    assert_eq!(q.lane(&"apps/b"), Some(Lane::New));
    assert_eq!(
        q.waiting(),
        Waiting {
            new: 1,
            retry: 1,
            backing_off: 0,
            follow_ups: 0
        }
    );
    // b names the newer trigger but keeps the webhook's lane.
    assert_eq!(ready.next().await, Some(("apps/b", Trigger::Resync)));
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Startup)));
    assert_eq!(q.depth(), 0);
    assert_eq!(gauge.get(), 0);
    assert_eq!(q.running(), 2);
}

#[tokio::test]
async fn one_run_per_key_and_triggers_during_a_run_make_one_follow_up() {
    let (q, gauge) = queue(HOUR);
    let mut ready = q.ready();
    q.push("apps/a", Trigger::Startup);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Startup)));
    q.push("apps/a", Trigger::Webhook);
    q.push("apps/a", Trigger::Resync);
    assert_eq!(
        q.depth(),
        1,
        "two triggers during the run coalesce into one follow-up"
    );
    assert_eq!(gauge.get(), 1);
    q.push("apps/b", Trigger::Webhook);
    // a is running: b is handed out, not a second run of a.
    assert_eq!(ready.next().await, Some(("apps/b", Trigger::Webhook)));
    q.complete(&"apps/b", &done());
    q.complete(&"apps/a", &done());
    // The follow-up names the newer trigger, in the webhook's lane.
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Resync)));
    assert_eq!(q.waiting(), Waiting::default());
    q.complete(&"apps/a", &done());
    assert_eq!(q.depth(), 0);
    assert_eq!(q.running(), 0);
}

#[tokio::test]
async fn a_failure_waits_out_its_backoff_unless_something_changed() {
    let (q, _) = queue(HOUR);
    let mut ready = q.ready();
    q.push("apps/a", Trigger::Webhook);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Webhook)));
    q.complete(&"apps/a", &failed());
    assert_eq!(q.failures(&"apps/a"), 1);
    assert_eq!(q.depth(), 1, "the retry waits in the queue");
    // A resync does not cut the backoff short: b, pushed later, runs first.
    q.push("apps/a", Trigger::Resync);
    q.push("apps/b", Trigger::Resync);
    assert_eq!(ready.next().await, Some(("apps/b", Trigger::Resync)));
    // A change (new revision, wedge event) does.
    q.push_now("apps/a", Trigger::Webhook);
    assert_eq!(q.failures(&"apps/a"), 0);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Webhook)));
    q.complete(&"apps/a", &failed());
    q.complete(&"apps/b", &done());
    assert_eq!(q.failures(&"apps/a"), 1);
    assert_eq!(q.failures(&"apps/b"), 0);
}

#[tokio::test]
async fn failures_accumulate_and_a_success_forgets_them() {
    let (q, _) = queue(Duration::from_millis(5));
    let mut ready = q.ready();
    q.push("apps/a", Trigger::Startup);
    for failures in 1..=3 {
        assert_eq!(ready.next().await, Some(("apps/a", Trigger::Startup)));
        q.complete(&"apps/a", &failed());
        assert_eq!(q.failures(&"apps/a"), failures);
    }
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Startup)));
    q.complete(&"apps/a", &done());
    assert_eq!(q.failures(&"apps/a"), 0);
    assert_eq!(q.depth(), 0);
}

#[tokio::test]
async fn a_trigger_during_a_failing_run_waits_out_the_backoff() {
    let (q, _) = queue(HOUR);
    let mut ready = q.ready();
    q.push("apps/a", Trigger::Resync);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Resync)));
    // Most likely about the revision that is failing right now.
    q.push_now("apps/a", Trigger::Webhook);
    q.complete(&"apps/a", &failed());
    assert_eq!(q.failures(&"apps/a"), 1);
    q.push("apps/b", Trigger::Resync);
    assert_eq!(ready.next().await, Some(("apps/b", Trigger::Resync)));
    // What is pushed after the failure, knowing something changed, does not wait.
    q.push_now("apps/a", Trigger::Webhook);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Webhook)));
}

#[tokio::test]
async fn deferred_is_not_requeued_by_the_queue() {
    let (q, _) = queue(HOUR);
    let mut ready = q.ready();
    q.push("apps/a", Trigger::Resync);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Resync)));
    q.complete(&"apps/a", &GateOutcome::Deferred);
    assert_eq!(q.depth(), 0);
    assert_eq!(q.failures(&"apps/a"), 0);
}

#[tokio::test]
async fn paused_holds_keys_until_resumed() {
    let (q, _) = queue(HOUR);
    let mut ready = q.ready();
    q.pause(true);
    q.push("apps/a", Trigger::Webhook);
    for _ in 0..3 {
        tokio::task::yield_now().await;
        assert_eq!(ready.next().now_or_never(), None);
    }
    assert_eq!(q.depth(), 1);
    q.pause(false);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Webhook)));
}

#[tokio::test]
async fn close_ends_the_stream_and_refuses_pushes() {
    let (q, _) = queue(HOUR);
    let mut ready = q.ready();
    q.push("apps/a", Trigger::Webhook);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Webhook)));
    q.close();
    assert_eq!(ready.next().await, None);
    q.push("apps/b", Trigger::Webhook);
    assert_eq!(q.depth(), 0);
    // The run handed out before the close still completes.
    q.complete(&"apps/a", &done());
    assert_eq!(q.running(), 0);
}

#[tokio::test]
async fn workers_run_at_most_n_keys_at_once() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (q, _) = queue(HOUR);
    let keys = ["a", "b", "c", "d", "e", "f", "g", "h"];
    for key in keys {
        q.push(key, Trigger::Startup);
    }
    let now = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let worker = {
        let (q, now, peak, finished) = (q.clone(), now.clone(), peak.clone(), finished.clone());
        q.clone().ready().for_each_concurrent(2, move |(key, _)| {
            let (q, now, peak, finished) = (q.clone(), now.clone(), peak.clone(), finished.clone());
            async move {
                let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(running, Ordering::SeqCst);
                tokio::task::yield_now().await;
                now.fetch_sub(1, Ordering::SeqCst);
                q.complete(&key, &done());
                if finished.fetch_add(1, Ordering::SeqCst) + 1 == keys.len() {
                    q.close();
                }
            }
        })
    };
    worker.await;
    assert_eq!(finished.load(Ordering::SeqCst), keys.len());
    assert!(peak.load(Ordering::SeqCst) <= 2);
}

#[test]
fn backoff_is_the_keys_own_schedule_else_doubling_with_flux_jitter() {
    let policy = BackoffPolicy {
        base: Duration::from_secs(2),
        max: Duration::from_secs(60),
        jitter: 0.1,
    };
    let min = |m: u64| Some(Duration::from_secs(60 * m));
    // (failures, the key's interval, sample, expected seconds)
    let table = [
        // No schedule of its own: doubling from the base up to the cap, ±10 %.
        (1, None, 0.5, 2.0),
        (2, None, 0.5, 4.0),
        (3, None, 0.5, 8.0),
        (5, None, 0.5, 32.0),
        (6, None, 0.5, 60.0),
        (40, None, 0.5, 60.0),
        (0, None, 0.5, 2.0),
        (1, None, 0.0, 1.8),
        (40, None, 1.0, 66.0),
        // kustomize-controller's schedule: retryInterval, else interval, however many
        // failures, past the cap of the fallback, jittered as Flux jitters (±10 %).
        (1, min(10), 0.5, 600.0),
        (7, min(10), 0.5, 600.0),
        (1, min(10), 0.0, 540.0),
        (1, min(10), 1.0, 660.0),
        (3, min(120), 0.25, 6840.0),
        // Never below the base, and a zero interval is no schedule.
        (1, Some(Duration::from_millis(100)), 0.5, 2.0),
        (2, Some(Duration::ZERO), 0.5, 4.0),
    ];
    for (failures, interval, sample, expected) in table {
        let got = policy.delay(failures, interval, sample).as_secs_f64();
        assert!(
            (got - expected).abs() < 1e-6,
            "{failures} failures, {interval:?}, sample {sample}: {got} != {expected}"
        );
    }
}

#[tokio::test]
async fn a_failure_waits_its_own_interval_and_a_repeat_is_not_news() {
    let (q, _) = queue(Duration::from_millis(1));
    let mut ready = q.ready();
    q.push("apps/a", Trigger::Startup);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Startup)));
    let first = q.complete_after(&"apps/a", &failed(), Some(HOUR));
    assert!(!first.repeated, "a first failure is news");
    let wait = first.retry_in.unwrap();
    assert!(
        wait >= HOUR.mul_f64(0.9) && wait <= HOUR.mul_f64(1.1),
        "{wait:?}"
    );
    // The key waits its hour (not the 1 ms base): b, pushed later, runs first.
    q.push("apps/b", Trigger::Resync);
    assert_eq!(ready.next().await, Some(("apps/b", Trigger::Resync)));
    q.complete(&"apps/b", &done());
    // A key with no schedule of its own retries after the base: the same failure again is a
    // repeat (one log line per change), another message is news.
    q.push("apps/c", Trigger::Startup);
    assert_eq!(ready.next().await, Some(("apps/c", Trigger::Startup)));
    assert!(!q.complete_after(&"apps/c", &failed(), None).repeated);
    assert_eq!(ready.next().await, Some(("apps/c", Trigger::Startup)));
    assert!(q.complete_after(&"apps/c", &failed(), None).repeated);
    assert_eq!(ready.next().await, Some(("apps/c", Trigger::Startup)));
    let other = GateOutcome::Failed {
        message: "connection refused".into(),
    };
    assert!(!q.complete_after(&"apps/c", &other, None).repeated);
    assert_eq!(q.failures(&"apps/c"), 3);
    // A push_now forgets the backoff: what fails next is news again.
    q.push_now("apps/a", Trigger::Webhook);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Webhook)));
    assert!(!q.complete_after(&"apps/a", &failed(), Some(HOUR)).repeated);
}

#[test]
fn lanes_and_what_follows_a_run_by_table() {
    for (trigger, lane) in [
        (Trigger::Webhook, Lane::New),
        (Trigger::Watch, Lane::New),
        (Trigger::Resync, Lane::Retry),
        (Trigger::Startup, Lane::Retry),
    ] {
        assert_eq!(Lane::of(trigger), lane, "{trigger:?}");
    }
    assert!(Lane::New < Lane::Retry, "the new lane is served first");
    use crate::model::RevisionState;
    for (outcome, after) in [
        (GateOutcome::Done(RevisionState::Converged), After::Forget),
        (GateOutcome::Done(RevisionState::Refused), After::Forget),
        (GateOutcome::Done(RevisionState::Superseded), After::Forget),
        (GateOutcome::Deferred, After::Forget),
        (GateOutcome::NotHandled, After::Forget),
        (failed(), After::Retry),
    ] {
        assert_eq!(After::of(&outcome), after, "{outcome:?}");
    }
}

#[tokio::test]
async fn new_work_is_handed_out_before_retries_by_table() {
    use Trigger::*;
    // (case, pushes in order, keys in the order they are handed out)
    type Case = (
        &'static str,
        &'static [(&'static str, Trigger)],
        &'static [&'static str],
    );
    let cases: [Case; 6] = [
        (
            "first in, first out within a lane",
            &[("a", Resync), ("b", Resync), ("c", Startup)],
            &["a", "b", "c"],
        ),
        (
            "a webhook and a watch event overtake the resync and the start",
            &[("a", Resync), ("b", Startup), ("c", Webhook), ("d", Watch)],
            &["c", "d", "a", "b"],
        ),
        (
            "a key moved up joins the end of the new lane",
            &[("a", Webhook), ("b", Resync), ("c", Resync), ("c", Watch)],
            &["a", "c", "b"],
        ),
        (
            "a resync does not demote a webhook",
            &[("a", Webhook), ("b", Watch), ("a", Resync)],
            &["a", "b"],
        ),
        (
            "pushing again keeps the place in the lane",
            &[("a", Resync), ("b", Resync), ("a", Resync)],
            &["a", "b"],
        ),
        (
            "new work in the order it came",
            &[("a", Watch), ("b", Webhook), ("c", Watch)],
            &["a", "b", "c"],
        ),
    ];
    for (case, pushes, order) in cases {
        let (q, _) = queue(HOUR);
        let mut ready = q.ready();
        for (key, trigger) in pushes {
            q.push(*key, *trigger);
        }
        let mut got = Vec::new();
        for _ in 0..order.len() {
            let (key, _) = ready.next().await.expect("a key");
            got.push(key);
        }
        assert_eq!(got, order, "{case}");
        assert_eq!(q.depth(), 0, "{case}");
    }
}

/// The head-of-line case of issue 18: many keys failing, their retries due, and one healthy
/// key's webhook. The webhook's key is handed out next, ahead of every retry.
#[tokio::test]
async fn a_webhook_overtakes_every_retry_that_is_due() {
    let (q, _) = queue(Duration::from_millis(1));
    let mut ready = q.ready();
    let failing: Vec<String> = (0..50).map(|i| format!("apps/failing-{i}")).collect();
    let failing: Vec<&'static str> = failing
        .into_iter()
        .map(|k| &*Box::leak(k.into_boxed_str()))
        .collect();
    for key in &failing {
        q.push(*key, Trigger::Startup);
    }
    for _ in &failing {
        let (key, _) = ready.next().await.expect("a key");
        q.complete(&key, &failed());
    }
    assert_eq!(q.waiting().backing_off, failing.len());
    // Every backoff (1 ms) ends; the first retry handed out moves them all to the retry lane.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (first, trigger) = ready.next().await.expect("a retry");
    assert_eq!(trigger, Trigger::Startup, "a retry keeps its trigger");
    assert_eq!(
        q.waiting(),
        Waiting {
            new: 0,
            retry: failing.len() - 1,
            backing_off: 0,
            follow_ups: 0
        }
    );
    q.push_now("apps/healthy", Trigger::Webhook);
    assert_eq!(
        ready.next().await,
        Some(("apps/healthy", Trigger::Webhook)),
        "ahead of {} retries",
        failing.len() - 1
    );
    // A failed webhook run retries in the retry lane, behind the others.
    q.complete(&"apps/healthy", &failed());
    q.complete(&first, &done());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut rest = Vec::new();
    for _ in 0..failing.len() {
        rest.push(ready.next().await.expect("a retry").0);
    }
    assert_eq!(rest.last(), Some(&"apps/healthy"));
}

#[tokio::test]
async fn a_webhook_for_a_key_on_backoff_runs_it_now_a_resync_does_not() {
    let (q, _) = queue(HOUR);
    let mut ready = q.ready();
    q.push("apps/a", Trigger::Resync);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Resync)));
    assert_eq!(q.complete(&"apps/a", &failed()), Some(HOUR));
    q.push("apps/a", Trigger::Resync);
    assert_eq!(q.waiting().backing_off, 1);
    assert_eq!(q.lane(&"apps/a"), Some(Lane::Retry));
    // What the webhook route does (after its per-key limiter admitted the hook).
    q.push_now("apps/a", Trigger::Webhook);
    assert_eq!(q.lane(&"apps/a"), Some(Lane::New));
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Webhook)));
    assert_eq!(q.failures(&"apps/a"), 0);
    assert_eq!(q.complete(&"apps/a", &done()), None);
}
