//! The records' volumes under two writers: the run that made a record and the claim follower.

use super::*;
use crate::model::{
    FluxOutcome, FluxResult, GateMode, StatefulSetEntry, StatefulSetOutcome, Trigger, Volume,
    VolumeState, VolumeSummary,
};

fn volume(state: VolumeState, since: &str) -> Volume {
    Volume {
        claim: "data-db-0".into(),
        requested: Some("2Gi".into()),
        capacity: Some("1Gi".into()),
        state,
        message: None,
        since: since.into(),
        attributes: None,
        restart: None,
    }
}

fn record(volumes: Vec<Volume>) -> RevisionRecord {
    let mut r = RevisionRecord::new(
        "main@sha1:1",
        Trigger::Watch,
        "2026-12-01T10:00:00Z",
        RevisionState::Converged,
        GateMode::Suspend,
        Some(1),
    );
    r.statefulsets = vec![StatefulSetEntry {
        namespace: "apps".into(),
        name: "db".into(),
        outcome: StatefulSetOutcome::Converged,
        old_uid: None,
        new_uid: None,
        templates: Vec::new(),
        changes: Vec::new(),
        claims: Vec::new(),
        deferred: Vec::new(),
        refusal: None,
        error: None,
        volumes,
    }];
    r
}

#[tokio::test]
async fn a_stale_copy_of_a_record_does_not_take_back_the_followers_news() {
    let results = Results::memory();
    let first = record(vec![volume(VolumeState::Requested, "2026-12-01T10:00:01Z")]);
    results.put("apps", "db", first.clone()).await.unwrap();
    assert_eq!(
        results.last("apps", "db").unwrap().volumes,
        Some(VolumeSummary {
            requested: 1,
            ..VolumeSummary::default()
        })
    );

    // The follower: the claim is resizing now.
    let resizing = vec![volume(VolumeState::Resizing, "2026-12-01T10:00:05Z")];
    let changed = results
        .set_volumes(
            "apps",
            "db",
            &first.revision,
            &first.started_at,
            ("apps", "db"),
            &resizing,
        )
        .await
        .unwrap();
    assert!(changed);
    // The same again changes nothing and writes nothing.
    assert!(
        !results
            .set_volumes(
                "apps",
                "db",
                &first.revision,
                &first.started_at,
                ("apps", "db"),
                &resizing
            )
            .await
            .unwrap()
    );

    // The run writes Flux's answer on the copy it read before: the answer lands, the
    // volumes stay as the follower left them.
    let mut answered = first.clone();
    answered.flux = Some(FluxResult {
        outcome: FluxOutcome::Applied,
        applied_revision: Some("main@sha1:1".into()),
        message: None,
        attempted_revision: None,
    });
    results.put("apps", "db", answered).await.unwrap();
    let last = results.last("apps", "db").unwrap();
    assert_eq!(last.flux.as_ref().unwrap().outcome, FluxOutcome::Applied);
    assert_eq!(last.statefulsets[0].volumes, resizing);
    assert_eq!(
        last.volumes,
        Some(VolumeSummary {
            resizing: 1,
            ..VolumeSummary::default()
        })
    );
    let json = serde_json::to_value(last.summary()).unwrap();
    assert_eq!(
        json["volumes"],
        serde_json::json!({"grown": 0, "resizing": 1, "filesystemPending": 0, "infeasible": 0,
                           "error": 0, "stalled": 0, "requested": 0})
    );

    // No such record: nothing written.
    assert!(
        !results
            .set_volumes(
                "apps",
                "db",
                "other",
                &first.started_at,
                ("apps", "db"),
                &resizing
            )
            .await
            .unwrap()
    );
}

#[test]
fn a_record_without_followed_claims_has_no_volumes_in_its_json() {
    let r = record(Vec::new());
    let json = serde_json::to_value(&r).unwrap();
    assert!(json.get("volumes").is_none());
    assert!(json["statefulsets"][0].get("volumes").is_none());
}
