//! The service's fence over the converge: no write once it closes, and the orphan delete's
//! window held until the re-apply returned.

use std::sync::atomic::Ordering;

use super::*;

/// Lets `allowed` checks through, then refuses every one after (a Lease lost mid-run).
#[derive(Debug)]
struct LosesLeaseAfter {
    allowed: usize,
    checks: std::sync::atomic::AtomicUsize,
}

impl fence::Fence for LosesLeaseAfter {
    fn check(&self) -> Result<(), fence::Fenced> {
        let n = self.checks.fetch_add(1, Ordering::SeqCst);
        if n < self.allowed {
            Ok(())
        } else {
            Err(fence::Fenced::HeldBy {
                lease: "converger".into(),
                holder: "replica-b".into(),
            })
        }
    }
}

#[tokio::test]
async fn a_fenced_replica_writes_nothing_after_the_fence_closes_and_the_next_run_finishes() {
    let want = reference().await;
    // 0: refused before the claim patches; 1: refused before the intent and the orphan delete.
    for (allowed, step, wrote) in [(0, Step::Grow, 0), (1, Step::Orphan, 4)] {
        let w = world();
        let fence: fence::SharedFence = std::sync::Arc::new(LosesLeaseAfter {
            allowed,
            checks: Default::default(),
        });
        let o = Options {
            fence: Some(fence),
            ..opts()
        };
        let e = converge(&w, &w, &desired(), &o)
            .await
            .expect_err("the fence must stop the converge");
        assert!(
            matches!(&e, ConvergeError::Fenced { step: s, .. } if *s == step),
            "{e}"
        );
        assert!(e.to_string().contains("replica-b"), "{e}");
        assert_eq!(w.lock().writes, wrote, "fence allowed {allowed}: {e}");
        assert!(
            w.sts("default", "web").is_some(),
            "never deleted when fenced"
        );
        // Whoever holds the Lease now finishes the work.
        converge(&w, &w, &desired(), &opts()).await.unwrap();
        assert_eq!(w.snapshot().await, want);
    }
}

/// Writes `window:open` / `window:close` into the world's log, so the tests see where the
/// window lies among the writes.
struct WindowSpy(World);

impl std::fmt::Debug for WindowSpy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WindowSpy")
    }
}

struct Closes(World);

impl Drop for Closes {
    fn drop(&mut self) {
        self.0.lock().log.push("window:close".into());
    }
}

impl fence::Fence for WindowSpy {
    fn check(&self) -> Result<(), fence::Fenced> {
        Ok(())
    }
    fn open_window(&self) -> Result<fence::Window, fence::Fenced> {
        self.0.lock().log.push("window:open".into());
        Ok(fence::Window::held(Closes(self.0.clone())))
    }
}

fn windows_and_statefulset_writes(w: &World) -> Vec<String> {
    w.lock()
        .log
        .iter()
        .filter(|l| l.starts_with("window:") || l.contains("StatefulSet"))
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_window_is_held_from_before_the_orphan_delete_until_the_reapply_returned() {
    let w = world();
    let o = Options {
        fence: Some(std::sync::Arc::new(WindowSpy(w.clone()))),
        ..opts()
    };
    converge(&w, &w, &desired(), &o).await.unwrap();
    assert_eq!(
        windows_and_statefulset_writes(&w),
        [
            "window:open",
            "write:delete StatefulSet default/web",
            "write:apply StatefulSet default/web",
            "window:close",
        ]
    );

    // A resume's re-apply of an absent object is a window too, and a failed re-apply
    // closes it as well (the service then stops waiting for it).
    let w = world();
    w.lock().fault = Some((6, Fault::Fail));
    converge(&w, &w, &desired(), &opts()).await.unwrap_err();
    w.lock().log.clear();
    // The writes are counted across runs: 7 so far, the resume's re-apply is the 8th.
    w.lock().fault = Some((7, Fault::Fail));
    let o = Options {
        fence: Some(std::sync::Arc::new(WindowSpy(w.clone()))),
        ..opts()
    };
    let r = resume_all(all_as(&w), &w, &rendering(o)).await.unwrap();
    assert!(r.results[0].2.is_err());
    assert_eq!(
        windows_and_statefulset_writes(&w),
        [
            "window:open",
            "write:apply StatefulSet default/web",
            "window:close"
        ]
    );
}
