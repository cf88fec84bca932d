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

#[tokio::test]
async fn a_newer_trigger_replaces_a_waiting_one() {
    let (q, gauge) = queue(HOUR);
    let mut ready = q.ready();
    q.push("apps/a", Trigger::Webhook);
    q.push("apps/a", Trigger::Resync);
    q.push("apps/b", Trigger::Startup);
    assert_eq!(q.depth(), 2);
    assert_eq!(gauge.get(), 2);
    let mut got = vec![ready.next().await, ready.next().await];
    got.sort_by_key(|item| item.map(|(key, _)| key));
    assert_eq!(
        got,
        vec![
            Some(("apps/a", Trigger::Resync)),
            Some(("apps/b", Trigger::Startup))
        ]
    );
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
    q.complete(&"apps/b", Completion::Done);
    q.complete(&"apps/a", Completion::Done);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Resync)));
    q.complete(&"apps/a", Completion::Done);
    assert_eq!(q.depth(), 0);
    assert_eq!(q.running(), 0);
}

#[tokio::test]
async fn a_failure_waits_out_its_backoff_unless_something_changed() {
    let (q, _) = queue(HOUR);
    let mut ready = q.ready();
    q.push("apps/a", Trigger::Webhook);
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Webhook)));
    q.complete(&"apps/a", Completion::Retry);
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
    q.complete(&"apps/a", Completion::Retry);
    q.complete(&"apps/b", Completion::Done);
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
        q.complete(&"apps/a", Completion::Retry);
        assert_eq!(q.failures(&"apps/a"), failures);
    }
    assert_eq!(ready.next().await, Some(("apps/a", Trigger::Startup)));
    q.complete(&"apps/a", Completion::Done);
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
    q.complete(&"apps/a", Completion::Retry);
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
    q.complete(&"apps/a", Completion::Deferred);
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
    q.complete(&"apps/a", Completion::Done);
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
    let done = Arc::new(AtomicUsize::new(0));
    let worker = {
        let (q, now, peak, done) = (q.clone(), now.clone(), peak.clone(), done.clone());
        q.clone().ready().for_each_concurrent(2, move |(key, _)| {
            let (q, now, peak, done) = (q.clone(), now.clone(), peak.clone(), done.clone());
            async move {
                let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(running, Ordering::SeqCst);
                tokio::task::yield_now().await;
                now.fetch_sub(1, Ordering::SeqCst);
                q.complete(&key, Completion::Done);
                if done.fetch_add(1, Ordering::SeqCst) + 1 == keys.len() {
                    q.close();
                }
            }
        })
    };
    worker.await;
    assert_eq!(done.load(Ordering::SeqCst), keys.len());
    assert!(peak.load(Ordering::SeqCst) <= 2);
}

#[test]
fn backoff_doubles_up_to_the_cap_with_bounded_jitter() {
    let policy = BackoffPolicy {
        base: Duration::from_secs(2),
        max: Duration::from_secs(60),
        jitter: 0.5,
    };
    // (failures, sample, expected)
    let table = [
        (1, 0.0, 2.0),
        (2, 0.0, 4.0),
        (3, 0.0, 8.0),
        (5, 0.0, 32.0),
        (6, 0.0, 60.0),
        (40, 0.0, 60.0),
        (1, 1.0, 3.0),
        (3, 0.5, 10.0),
        (40, 1.0, 90.0),
        (0, 0.0, 2.0),
    ];
    for (failures, sample, expected) in table {
        let got = policy.delay(failures, sample).as_secs_f64();
        assert!(
            (got - expected).abs() < 1e-9,
            "{failures} failures, sample {sample}: {got} != {expected}"
        );
    }
}
