//! The rules a history of revision records follows, pure: where a new record goes (a run's
//! final record replaces its `running` one; a failed attempt folds into the failed record of
//! the same revision right behind it), how many are kept, and how a history is made to fit
//! the 1 MiB a ConfigMap holds. The store ([`super::results`]) applies them; the codec
//! ([`super::codec`]) writes what they produce.

use crate::model::{RevisionRecord, RevisionState};

/// Revisions kept per Kustomization.
pub const HISTORY: usize = 20;
/// Bytes of record JSON one ConfigMap may carry: the API server's limit is 1 MiB for the whole
/// object, and the metadata (labels, managedFields) needs room too.
pub const BUDGET: usize = 900 * 1024;
/// A text field is first cut to this many bytes; [`fit`] cuts further when that is not enough.
pub const FIRST_CAP: usize = 8 * 1024;
/// Below this, [`fit`] drops old records instead of cutting messages further.
const LAST_CAP: usize = 512;

/// Puts `record` into `records` (newest first): replaces the record with the same revision and
/// start time (keeping the larger attempt count), else goes in front. Then a failed record
/// right behind a failed record of the same revision and generation ([`is_repeat`]) is folded
/// into it: one record whose `attempts` adds both, with the newer error and times. Keeps at
/// most [`HISTORY`].
///
/// Why fold: a Kustomization failing on every retry (an unreachable artifact) would otherwise
/// push its whole history out with identical records, one per backoff.
pub fn insert(records: &mut Vec<RevisionRecord>, mut record: RevisionRecord) {
    let at = match records
        .iter()
        .position(|r| r.revision == record.revision && r.started_at == record.started_at)
    {
        Some(i) => {
            record.attempts = record.attempts.max(records[i].attempts);
            keep_newer_volumes(&mut record, &records[i]);
            records[i] = record;
            i
        }
        None => {
            record.volumes = crate::model::VolumeSummary::of(&record.statefulsets);
            records.insert(0, record);
            0
        }
    };
    if records
        .get(at + 1)
        .is_some_and(|older| is_repeat(&records[at], older))
    {
        let older = records.remove(at + 1);
        records[at].attempts = records[at].attempts.saturating_add(older.attempts);
    }
    records.truncate(HISTORY);
}

/// The record's volumes after a write of it: per claim, the newer of what `record` says and
/// what `stored` (the same record as kept) says, by `since`. Two writers keep the record: the
/// run that made it (the hand-off, Flux's answer, a re-check) and the claim follower (each
/// claim's state change); whichever writes a copy it read before the other's write does not
/// take the other's news back. Then the revision's summary is recomputed from them.
fn keep_newer_volumes(record: &mut RevisionRecord, stored: &RevisionRecord) {
    // The newest of a claim's changes: its state's, its class move's; then one that records
    // a restart over one that does not (the restart is written before its eviction).
    let since = |v: &crate::model::Volume| {
        let at = |s: &str| s.parse::<jiff::Timestamp>().ok();
        let newest = at(&v.since).max(v.attributes.as_ref().and_then(|a| at(&a.since)));
        (newest, v.restart.is_some())
    };
    for entry in &mut record.statefulsets {
        let Some(kept) = stored
            .statefulsets
            .iter()
            .find(|e| e.namespace == entry.namespace && e.name == entry.name)
        else {
            continue;
        };
        for volume in &mut entry.volumes {
            if let Some(old) = kept.volumes.iter().find(|v| v.claim == volume.claim)
                && since(old) > since(volume)
            {
                *volume = old.clone();
            }
        }
    }
    record.volumes = crate::model::VolumeSummary::of(&record.statefulsets);
}

/// Whether `newer` is one more failed attempt at what `older` failed: both failed, on the same
/// revision at the same generation (a new spec is a new attempt at something else).
pub fn is_repeat(newer: &RevisionRecord, older: &RevisionRecord) -> bool {
    newer.state == RevisionState::Failed
        && older.state == RevisionState::Failed
        && newer.revision == older.revision
        && newer.generation == older.generation
}

/// Whether `newer` is the same failure as `older` once more ([`is_repeat`], failing the same
/// way: the same error and the same StatefulSet entries). Not news: it only counts as one
/// more attempt (`Results::note`).
pub fn is_same_failure(newer: &RevisionRecord, older: &RevisionRecord) -> bool {
    is_repeat(newer, older)
        && newer.error == older.error
        && newer.statefulsets == older.statefulsets
}

/// Cuts `text` to at most `max` bytes (on a character boundary), saying how much was cut.
pub fn truncate_text(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let cut = text.len();
    let mut end = max.saturating_sub(40).min(text.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("… [truncated, {cut} bytes]"));
}

/// Every free-text field of a record, cut to `max` bytes.
fn cap_record(record: &mut RevisionRecord, max: usize) {
    let cap = |t: &mut String| truncate_text(t, max);
    for w in &mut record.warnings {
        cap(w);
    }
    if let Some(e) = &mut record.error {
        cap(&mut e.message);
        if let Some(h) = &mut e.hint {
            cap(h);
        }
    }
    if let Some(f) = &mut record.flux
        && let Some(m) = &mut f.message
    {
        cap(m);
    }
    for s in &mut record.statefulsets {
        if let Some(r) = &mut s.refusal {
            cap(&mut r.message);
        }
        if let Some(e) = &mut s.error {
            cap(&mut e.message);
            if let Some(h) = &mut e.hint {
                cap(h);
            }
        }
        for d in &mut s.deferred {
            cap(&mut d.reason);
        }
    }
}

fn size(records: &[RevisionRecord]) -> usize {
    serde_json::to_vec(records)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}

/// Makes `records` (newest first) fit in `budget` bytes of JSON: every text field cut to
/// [`FIRST_CAP`], then cut further (down to a floor), then the oldest records dropped, and as a
/// last resort the newest record's StatefulSet entries cut (saying so in its warnings).
pub fn fit(mut records: Vec<RevisionRecord>, budget: usize) -> Vec<RevisionRecord> {
    records.truncate(HISTORY);
    let mut max = FIRST_CAP;
    loop {
        for r in &mut records {
            cap_record(r, max);
        }
        if size(&records) <= budget || max <= LAST_CAP {
            break;
        }
        max /= 2;
    }
    while records.len() > 1 && size(&records) > budget {
        records.pop();
    }
    if let Some(newest) = records.first_mut() {
        let total = newest.statefulsets.len();
        while size(std::slice::from_ref(newest)) > budget && !newest.statefulsets.is_empty() {
            newest.statefulsets.truncate(newest.statefulsets.len() / 2);
        }
        if newest.statefulsets.len() < total {
            newest.warnings.push(format!(
                "{} of {total} StatefulSet entries left out so the record fits in its ConfigMap",
                total - newest.statefulsets.len()
            ));
        }
    }
    records
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{StatefulSetEntry, StatefulSetOutcome, StepError, Trigger};

    /// A `running` record of `revision` started at `started`.
    pub(crate) fn record(revision: &str, started: &str) -> RevisionRecord {
        RevisionRecord {
            volumes: Default::default(),
            revision: revision.into(),
            digest: None,
            trigger: Trigger::Webhook,
            started_at: started.into(),
            finished_at: None,
            state: RevisionState::Running,
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

    #[test]
    fn insert_replaces_same_run_and_keeps_newest_first() {
        let mut records = Vec::new();
        for i in 0..25 {
            insert(&mut records, record(&format!("r{i}"), &format!("t{i}")));
        }
        assert_eq!(records.len(), HISTORY);
        assert_eq!(records[0].revision, "r24");
        assert_eq!(records[HISTORY - 1].revision, "r5");
        let mut done = record("r24", "t24");
        done.state = RevisionState::Converged;
        insert(&mut records, done);
        assert_eq!(records.len(), HISTORY);
        assert_eq!(records[0].state, RevisionState::Converged);
        // Same revision, another run: a new record.
        insert(&mut records, record("r24", "t25"));
        assert_eq!(records[0].started_at, "t25");
        assert_eq!(records[1].started_at, "t24");
    }

    fn failed(revision: &str, started: &str, generation: i64, error: &str) -> RevisionRecord {
        let mut r = record(revision, started);
        r.state = RevisionState::Failed;
        r.generation = Some(generation);
        r.error = Some(StepError::new("resolve", error));
        r
    }

    fn running(revision: &str, started: &str, generation: i64) -> RevisionRecord {
        let mut r = record(revision, started);
        r.generation = Some(generation);
        r
    }

    #[test]
    fn failed_attempts_of_one_revision_fold_into_one_record_by_table() {
        // (case, records put in order, expected (revision, started, state, attempts, error))
        type Want = (
            &'static str,
            &'static str,
            RevisionState,
            u32,
            Option<&'static str>,
        );
        let f = RevisionState::Failed;
        let cases: Vec<(&str, Vec<RevisionRecord>, Vec<Want>)> = vec![
            (
                "a run writes running, then failed; the next attempt folds into it",
                vec![
                    running("r1", "t1", 1),
                    failed("r1", "t1", 1, "e1"),
                    running("r1", "t2", 1),
                    failed("r1", "t2", 1, "e2"),
                    running("r1", "t3", 1),
                    failed("r1", "t3", 1, "e3"),
                ],
                vec![("r1", "t3", f, 3, Some("e3"))],
            ),
            (
                "a failure before the running record (resolve) folds too",
                vec![failed("r1", "t1", 1, "e1"), failed("r1", "t2", 1, "e2")],
                vec![("r1", "t2", f, 2, Some("e2"))],
            ),
            (
                "while the next attempt runs, the folded record stays behind it",
                vec![
                    failed("r1", "t1", 1, "e1"),
                    failed("r1", "t2", 1, "e2"),
                    running("r1", "t3", 1),
                ],
                vec![
                    ("r1", "t3", RevisionState::Running, 1, None),
                    ("r1", "t2", f, 2, Some("e2")),
                ],
            ),
            (
                "the final record written twice keeps its count",
                vec![
                    failed("r1", "t1", 1, "e1"),
                    failed("r1", "t2", 1, "e2"),
                    failed("r1", "t2", 1, "e2"),
                ],
                vec![("r1", "t2", f, 2, Some("e2"))],
            ),
            (
                "another revision is another record",
                vec![failed("r1", "t1", 1, "e1"), failed("r2", "t2", 1, "e2")],
                vec![
                    ("r2", "t2", f, 1, Some("e2")),
                    ("r1", "t1", f, 1, Some("e1")),
                ],
            ),
            (
                "a new generation is another record",
                vec![failed("r1", "t1", 1, "e1"), failed("r1", "t2", 2, "e2")],
                vec![
                    ("r1", "t2", f, 1, Some("e2")),
                    ("r1", "t1", f, 1, Some("e1")),
                ],
            ),
            (
                "a success between failures ends the run of failures",
                vec![
                    failed("r1", "t1", 1, "e1"),
                    {
                        let mut r = running("r1", "t2", 1);
                        r.state = RevisionState::Converged;
                        r
                    },
                    failed("r1", "t3", 1, "e3"),
                ],
                vec![
                    ("r1", "t3", f, 1, Some("e3")),
                    ("r1", "t2", RevisionState::Converged, 1, None),
                    ("r1", "t1", f, 1, Some("e1")),
                ],
            ),
        ];
        for (case, puts, want) in cases {
            let mut records = Vec::new();
            for r in puts {
                insert(&mut records, r);
            }
            let got: Vec<(&str, &str, RevisionState, u32, Option<&str>)> = records
                .iter()
                .map(|r| {
                    let error = r.error.as_ref().map(|e| e.message.as_str());
                    (
                        r.revision.as_str(),
                        r.started_at.as_str(),
                        r.state,
                        r.attempts,
                        error,
                    )
                })
                .collect();
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn attempts_is_absent_from_the_json_unless_repeated() {
        let mut r = failed("r1", "t1", 1, "e1");
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("attempts").is_none(), "{json}");
        let back: RevisionRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back.attempts, 1);
        r.attempts = 4;
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["attempts"], 4);
    }

    #[test]
    fn truncate_text_by_table() {
        for (text, max, expected) in [
            ("short", 100, "short".to_string()),
            ("", 0, String::new()),
            (
                &"x".repeat(100) as &str,
                50,
                format!("{}… [truncated, 100 bytes]", "x".repeat(10)),
            ),
            // Never splits a character: 'é' is two bytes.
            (
                &"é".repeat(30) as &str,
                45,
                format!("{}… [truncated, 60 bytes]", "é".repeat(2)),
            ),
        ] {
            let mut t = text.to_string();
            truncate_text(&mut t, max);
            assert_eq!(t, expected, "{text:?} {max}");
        }
    }

    fn big_record(revision: &str, message_len: usize, statefulsets: usize) -> RevisionRecord {
        let mut r = record(revision, revision);
        r.error = Some(StepError {
            step: "resolve".into(),
            message: "m".repeat(message_len),
            hint: Some("h".repeat(message_len)),
        });
        r.statefulsets = (0..statefulsets)
            .map(|i| StatefulSetEntry {
                volumes: Default::default(),
                namespace: "ns".into(),
                name: format!("sts-{i}"),
                outcome: StatefulSetOutcome::Failed,
                old_uid: None,
                new_uid: None,
                templates: Vec::new(),
                changes: Vec::new(),
                claims: Vec::new(),
                deferred: Vec::new(),
                refusal: None,
                error: Some(StepError {
                    step: "grow".into(),
                    message: "e".repeat(message_len),
                    hint: None,
                }),
            })
            .collect();
        r
    }

    #[test]
    fn fit_by_table() {
        // (records, budget, expected count, newest's error message at most this long, sts kept)
        type Case = (Vec<RevisionRecord>, usize, usize, usize, Option<usize>);
        let cases: Vec<Case> = vec![
            // Small records: untouched.
            (vec![record("a", "1"), record("b", "0")], BUDGET, 2, 0, None),
            // A 1 MB message is cut to the first cap, and then fits.
            (
                vec![big_record("a", 1 << 20, 0)],
                BUDGET,
                1,
                FIRST_CAP,
                None,
            ),
            // Many big records: messages cut further before history is dropped.
            (
                (0..20)
                    .map(|i| big_record(&format!("r{i}"), 100_000, 3))
                    .collect(),
                BUDGET,
                20,
                FIRST_CAP,
                Some(3),
            ),
            // A tiny budget: only the newest stays.
            (
                (0..5)
                    .map(|i| big_record(&format!("r{i}"), 10_000, 0))
                    .collect(),
                2_000,
                1,
                LAST_CAP,
                None,
            ),
            // Even one record is too big with all its StatefulSets: entries are cut.
            (
                vec![big_record("a", 10_000, 2_000)],
                50_000,
                1,
                LAST_CAP,
                Some(0),
            ),
        ];
        for (i, (records, budget, count, max_message, sts)) in cases.into_iter().enumerate() {
            let fitted = fit(records, budget);
            assert_eq!(fitted.len(), count, "case {i}");
            assert!(
                size(&fitted) <= budget,
                "case {i}: {} > {budget}",
                size(&fitted)
            );
            if let Some(e) = &fitted[0].error {
                assert!(
                    e.message.len() <= max_message,
                    "case {i}: {}",
                    e.message.len()
                );
                assert!(e.message.contains("truncated"), "case {i}");
            }
            if let Some(kept) = sts {
                let got = fitted[0].statefulsets.len();
                if kept == 0 {
                    assert!(got < 2_000, "case {i}");
                    assert!(
                        fitted[0].warnings.iter().any(|w| w.contains("left out")),
                        "case {i}"
                    );
                } else {
                    assert_eq!(got, kept, "case {i}");
                }
            }
        }
    }
}
