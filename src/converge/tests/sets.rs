//! A set all or nothing: every StatefulSet prepared before the first write, and one refused,
//! denied or failed holding the others.

use super::*;

/// `web` as `db`: the same templates, under another name (no claims of its own).
fn renamed(mut s: StatefulSet, name: &str) -> StatefulSet {
    s.metadata.name = Some(name.into());
    s
}

#[tokio::test]
async fn every_statefulset_of_a_set_is_preflighted_before_the_first_write_with_the_object_reapplied()
 {
    let w = world();
    w.seed_sts(renamed(live(&[("data", "1Gi"), ("logs", "1Gi")]), "db"));
    let set = [desired(), renamed(desired(), "db")];
    let results = converge_all(&w, &w, &set, &opts()).await;
    for r in &results {
        assert_eq!(r.as_ref().unwrap().outcome, Outcome::Converged, "{r:?}");
    }
    let log = w.lock().log.clone();
    let first_write = log.iter().position(|l| l.starts_with("write:")).unwrap();
    for name in ["web", "db"] {
        let preflight = log
            .iter()
            .position(|l| *l == format!("read:dry-run create default/{name}"))
            .unwrap_or_else(|| panic!("no pre-flight of {name}: {log:#?}"));
        assert!(preflight < first_write, "{log:#?}");
    }
    // Exactly the object the re-apply sends.
    let sent = w.lock().preflighted.clone();
    assert_eq!(sent, vec![clean_desired(&set[0]), clean_desired(&set[1])]);
}

#[tokio::test]
async fn a_failed_write_phase_holds_the_statefulsets_not_yet_started() {
    let w = world();
    let db_uid = w.seed_sts(renamed(live(&[("data", "1Gi"), ("logs", "1Gi")]), "db"));
    w.lock().fault = Some((0, Fault::Fail)); // web's first claim grow
    let set = [desired(), renamed(desired(), "db")];
    let mut results = converge_all(&w, &w, &set, &opts()).await.into_iter();
    let web = results.next().unwrap().unwrap_err();
    assert_eq!(web.step(), Some(Step::Grow), "{web}");
    let db = results.next().unwrap().unwrap();
    assert_eq!(db.outcome, Outcome::Held);
    assert_eq!(
        db.held_by.as_deref(),
        Some("not written: StatefulSet default/web of the same revision failed")
    );
    assert_eq!(w.writes().len(), 1, "{:?}", w.writes());
    assert_eq!(w.sts("default", "db").unwrap().metadata.uid, Some(db_uid));
}

#[tokio::test]
async fn a_preflight_refused_or_denied_writes_nothing() {
    for (code, reason, message, refused) in [
        (
            400,
            "BadRequest",
            "admission webhook \"deny.example.com\" denied the request: no",
            true,
        ),
        (
            403,
            "Forbidden",
            "statefulsets.apps is forbidden: User \"jane\" cannot create resource \"statefulsets\" in API group \"apps\" in the namespace \"default\"",
            false,
        ),
    ] {
        let w = world();
        let before = w.snapshot().await;
        w.lock().create_error = Some(CallError::api(
            "dry-run create of",
            "StatefulSet default/web",
            code,
            reason,
            message,
        ));
        let got = converge(&w, &w, &desired(), &opts()).await;
        if refused {
            let r = got.unwrap();
            assert_eq!(r.outcome, Outcome::Refused);
            assert_eq!(r.refusal.unwrap().code, RefusalCode::CreateRefused);
            assert!(r.claims.is_empty(), "no claim reads as grown");
        } else {
            let e = got.unwrap_err();
            assert_eq!(e.step(), Some(Step::Preflight), "{e}");
            assert_eq!(e.written(), Written::Nothing);
        }
        assert!(w.writes().is_empty(), "{:?}", w.writes());
        assert_eq!(w.snapshot().await, before);
    }
}
