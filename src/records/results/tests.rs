//! The results store's own tests: the kept histories, memory, shards, watch events.

use super::*;
use crate::journal::RECORD_LABEL;
use crate::model::{StatefulSetEntry, StatefulSetOutcome};
use crate::records::history::tests::record;

/// A loaded history is kept as the bytes its ConfigMap holds, and answers the same records;
/// its one parsed record keeps no spare room (held for the life of the process).
#[test]
fn kept_histories_answer_what_was_loaded() {
    let records: Vec<RevisionRecord> = (0..20)
        .map(|i| RevisionRecord {
            statefulsets: vec![StatefulSetEntry {
                volumes: Default::default(),
                namespace: "apps".into(),
                name: format!("db-{i}"),
                outcome: StatefulSetOutcome::Converged,
                old_uid: None,
                new_uid: None,
                templates: Vec::new(),
                changes: Vec::new(),
                claims: Vec::new(),
                deferred: Vec::new(),
                refusal: None,
                error: None,
            }],
            ..record(&format!("main@sha1:{i}"), "t")
        })
        .collect();
    let cm = to_configmap("flux-system", "apps", "web", &records, None).unwrap();
    let (_, _, loaded) = from_configmap(&cm).unwrap();
    let kept = History::encode(&loaded);
    assert_eq!(kept.records(), records);
    assert_eq!(kept.json.get(), cm.data.as_ref().unwrap()["records"]);
    let last = kept.last.expect("the newest record is kept parsed");
    assert_eq!(last, records[0]);
    // The one parsed record holds no spare room (a clone, not serde's grown Vec).
    assert_eq!(last.statefulsets.capacity(), last.statefulsets.len());
}

#[tokio::test]
async fn memory_results_keep_history_and_unfinished() {
    let results = Results::memory();
    assert!(results.is_loaded());
    results.put("a", "x", record("r1", "t1")).await.unwrap();
    let mut done = record("r0", "t0");
    done.state = RevisionState::Converged;
    results.put("a", "y", done).await.unwrap();
    assert_eq!(results.unfinished(), [("a".to_string(), "x".to_string())]);
    assert_eq!(results.last("a", "y").unwrap().revision, "r0");
    assert!(results.history("b", "z").is_empty());
}

/// Which records a replica reads: its shard's by label, or (unsharded) the unlabelled ones
/// every earlier version wrote.
#[test]
fn shard_selection_by_table() {
    use crate::journal::SHARD_LABEL;
    let a = Shard::Named("flux-converger-3d8dfb26".into());
    let b = Shard::Named("flux-converger-51051576".into());
    let labels = |shard: Option<&str>| {
        let mut l = BTreeMap::from([(RECORD_LABEL.to_string(), RESULTS_RECORD.to_string())]);
        if let Some(shard) = shard {
            l.insert(SHARD_LABEL.to_string(), shard.to_string());
        }
        l
    };
    let cases: &[(&Shard, Option<&str>, bool)] = &[
        (&Shard::Unsharded, None, true),
        (&Shard::Unsharded, Some("flux-converger-3d8dfb26"), false),
        (&a, None, false),
        (&a, Some("flux-converger-3d8dfb26"), true),
        (&a, Some("flux-converger-51051576"), false),
        (&b, Some("flux-converger-51051576"), true),
    ];
    for (shard, label, owns) in cases {
        assert_eq!(
            shard.owns(Some(&labels(*label))),
            *owns,
            "{shard:?} {label:?}"
        );
    }
    assert!(Shard::Unsharded.owns(None));
    assert!(!a.owns(None));
    assert_eq!(
        Shard::Unsharded.selector(RESULTS_RECORD),
        "flux-converger.io/record=results,!flux-converger.io/shard"
    );
    assert_eq!(
        a.selector(RESULTS_RECORD),
        "flux-converger.io/record=results,flux-converger.io/shard=flux-converger-3d8dfb26"
    );
    assert_eq!(Shard::Unsharded.label(), None);
    assert_eq!(
        a.label(),
        Some((
            SHARD_LABEL.to_string(),
            "flux-converger-3d8dfb26".to_string()
        ))
    );
}

fn cm(name: &str, revisions: &[&str], rv: &str) -> ConfigMap {
    let records: Vec<_> = revisions.iter().map(|r| record(r, r)).collect();
    to_configmap("flux-system", "apps", name, &records, Some(rv.into())).unwrap()
}

fn revisions(results: &Results, name: &str) -> Vec<String> {
    results
        .history("apps", name)
        .into_iter()
        .map(|r| r.revision)
        .collect()
}

/// Notes a write of this process (what `put` does once the server took it).
fn wrote(results: &Results, name: &str, revisions: &[&str], rv: &str) {
    let mut entries = results.entries();
    let entry = entries
        .entry(("apps".to_string(), name.to_string()))
        .or_default();
    let records: Vec<_> = revisions.iter().map(|r| record(r, r)).collect();
    entry.history = History::encode(&records);
    entry.resource_version = Some(rv.into());
    entry.pending.push(rv.into());
}

/// What the watch's events do to the histories, in the order the server sends them: the
/// leader's own echoes never put an older history back, another writer's changes are
/// taken, deletes forget, a relist replaces.
#[test]
fn watch_events_by_table() {
    enum Step {
        /// A write of ours the server answered with this resourceVersion.
        Wrote(&'static [&'static str], &'static str),
        Apply(&'static [&'static str], &'static str),
        Delete,
        Relist(&'static [(&'static [&'static str], &'static str)]),
    }
    use Step::*;
    /// (what, the events in order, the history after them: `None` when forgotten)
    type Case<'a> = (&'a str, &'a [Step], Option<&'a [&'a str]>);
    let cases: &[Case] = &[
        (
            "another writer's record is taken",
            &[Apply(&["r1"], "5")],
            Some(&["r1"]),
        ),
        (
            "a newer one replaces it",
            &[Apply(&["r1"], "5"), Apply(&["r2", "r1"], "6")],
            Some(&["r2", "r1"]),
        ),
        (
            "our echo after a newer write of ours keeps the newer",
            &[
                Wrote(&["running"], "5"),
                Wrote(&["converged"], "6"),
                Apply(&["running"], "5"),
            ],
            Some(&["converged"]),
        ),
        (
            "a write older than our unechoed one is not applied",
            &[Wrote(&["mine"], "7"), Apply(&["theirs"], "6")],
            Some(&["mine"]),
        ),
        (
            "once every write of ours is echoed, others' are taken again",
            &[
                Wrote(&["mine"], "7"),
                Apply(&["mine"], "7"),
                Apply(&["theirs", "mine"], "8"),
            ],
            Some(&["theirs", "mine"]),
        ),
        ("a delete forgets", &[Apply(&["r1"], "5"), Delete], None),
        (
            "a delete older than our unechoed write is not applied",
            &[Apply(&["r1"], "5"), Wrote(&["r2"], "9"), Delete],
            Some(&["r2"]),
        ),
        (
            "a relist replaces",
            &[Apply(&["r1"], "5"), Relist(&[(&["r3"], "11")])],
            Some(&["r3"]),
        ),
        (
            "a relist without it forgets it",
            &[Apply(&["r1"], "5"), Relist(&[])],
            None,
        ),
        (
            "a relist holding our own write keeps ours",
            &[Wrote(&["mine"], "7"), Relist(&[(&["mine"], "7")])],
            Some(&["mine"]),
        ),
    ];
    for (what, steps, want) in cases {
        let results = Results::memory();
        for step in *steps {
            match step {
                Wrote(revs, rv) => wrote(&results, "web", revs, rv),
                Apply(revs, rv) => results.apply(&cm("web", revs, rv)),
                Delete => results.deleted(&cm("web", &[], "0")),
                Relist(items) => {
                    let mut listed = Listed::default();
                    for (revs, rv) in items.iter() {
                        listed.add(&Shard::Unsharded, &cm("web", revs, rv));
                    }
                    results.replace_all(listed)
                }
            }
        }
        let got = revisions(&results, "web");
        match want {
            Some(want) => assert_eq!(got, *want, "{what}"),
            None => assert!(
                !results.keys().contains(&("apps".into(), "web".into())),
                "{what}: {got:?}"
            ),
        }
    }
}

/// An event changes the generation (so `/status` re-encodes), an echo of ours does not.
#[test]
fn only_a_change_moves_the_generation() {
    let results = Results::memory();
    wrote(&results, "web", &["r1"], "5");
    let before = results.generation();
    results.apply(&cm("web", &["r1"], "5"));
    assert_eq!(results.generation(), before, "our own echo");
    results.apply(&cm("web", &["r2", "r1"], "6"));
    assert!(results.generation() > before, "another writer's change");
}
