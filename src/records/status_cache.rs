//! `GET /status` and `GET /status/{ns}/{name}` kept encoded. Building the list means one record
//! summary per handled Kustomization (~18 µs each: 18 ms for 1,000 rows), which changes only
//! when a record, a gate or a source revision does, which is rare next to how often a dashboard
//! or a script polls. So each row is encoded once and kept with what it was built from (the
//! history's version, the gate, the source revision); the whole list body is kept with the
//! generations of the index and the records, and rebuilt from the rows (re-encoding only the
//! rows that changed) when either moves. A detail is the history the results already keep
//! encoded, with a small header encoded around it. The bytes are the ones `serde_json` gives
//! the contract's structs, so the JSON is unchanged.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, RwLock};

use bytes::Bytes;
use serde_json::value::RawValue;

use super::Records;
use crate::model::Key;
use crate::model::body::{array, encode};
use crate::model::{GateMode, StatusDetail, StatusRow};

/// What `/status` lists besides the records: the handled objects, each with its gate, its
/// source's revision and its hold, and a generation that moves whenever any of them does. The
/// service's index implements it; the cache never needs more of it.
pub trait Handled {
    /// Moves whenever a handled object, its gate, its source revision or its hold changes.
    fn generation(&self) -> u64;
    /// Every handled object, sorted by namespace then name.
    fn handled_keys(&self) -> Vec<Key>;
    /// The gate, source revision and hold of `key`; `None` when it is not handled.
    fn handled_row(&self, key: &Key) -> Option<HandledRow>;
}

/// One handled object's gate, source revision and hold.
pub type HandledRow = (GateMode, Option<String>, Option<String>);

/// What a row or a detail was encoded from; equal means the bytes are still right.
#[derive(Clone, PartialEq, Eq)]
struct Basis {
    version: Option<u64>,
    gate: GateMode,
    source_revision: Option<String>,
    hold: Option<String>,
}

struct Encoded {
    basis: Basis,
    json: Bytes,
}

struct List {
    /// The index's and the records' generations the list was built at.
    generations: (u64, u64),
    /// Sorted by namespace then name, with `rows[i]` the encoded summary of `keys[i]`.
    keys: Vec<Key>,
    rows: Vec<Bytes>,
    /// The whole body (every namespace).
    all: Bytes,
}

#[derive(Default)]
struct State {
    list: Option<List>,
    rows: HashMap<Key, Encoded>,
}

/// The encoded `/status` bodies of one service. Records that do not track their generation
/// ([`Records::generation`] is `None`) are encoded on every request instead.
#[derive(Default)]
pub struct StatusCache {
    state: Mutex<State>,
}

fn read<I: Handled>(index: &RwLock<I>) -> std::sync::RwLockReadGuard<'_, I> {
    index.read().unwrap_or_else(|e| e.into_inner())
}

/// Each handled Kustomization with its gate, source revision and hold, sorted.
fn handled(index: &impl Handled) -> Vec<(Key, GateMode, Option<String>, Option<String>)> {
    index
        .handled_keys()
        .into_iter()
        .filter_map(|key| {
            let (gate, revision, hold) = index.handled_row(&key)?;
            Some((key, gate, revision, hold))
        })
        .collect()
}

fn summary_row(
    records: &dyn Records,
    key: &Key,
    gate: GateMode,
    source_revision: Option<String>,
    hold: Option<String>,
) -> Result<Bytes, serde_json::Error> {
    encode(&StatusRow {
        kind: crate::model::Kind::KUSTOMIZATION,
        waiting: None,
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        gate,
        source_revision,
        last: records.last(&key.namespace, &key.name).map(|r| r.summary()),
        hold,
    })
}

/// The rows of one namespace (all when `None`) of a sorted key list.
fn namespace_range(keys: &[Key], namespace: Option<&str>) -> std::ops::Range<usize> {
    match namespace {
        None => 0..keys.len(),
        Some(ns) => {
            let start = keys.partition_point(|k| k.namespace.as_str() < ns);
            let end = keys.partition_point(|k| k.namespace.as_str() <= ns);
            start..end
        }
    }
}

impl StatusCache {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rows of `GET /status` as one JSON array: every handled Kustomization (or those of
    /// `namespace`), sorted.
    pub fn rows<I: Handled>(
        &self,
        index: &RwLock<I>,
        records: &dyn Records,
        namespace: Option<&str>,
    ) -> Result<Bytes, serde_json::Error> {
        // Read before anything it guards: a change after this read makes the result stale
        // under a generation that is already old, so it is rebuilt at the next request.
        let Some(records_generation) = records.generation() else {
            let all = handled(&*read(index));
            let rows = all
                .into_iter()
                .filter(|(k, _, _, _)| namespace.is_none_or(|ns| k.namespace == ns))
                .map(|(key, gate, revision, hold)| summary_row(records, &key, gate, revision, hold))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Bytes::from(array(rows.iter().map(|r| &r[..]))));
        };
        // Held while rebuilding: concurrent requests wait for one rebuild instead of each
        // doing it.
        let mut state = self.state();
        let index_generation = read(index).generation();
        let generations = (index_generation, records_generation);
        if state
            .list
            .as_ref()
            .is_none_or(|l| l.generations != generations)
        {
            let (all, generation) = {
                let index = read(index);
                (handled(&*index), index.generation())
            };
            let mut keys = Vec::with_capacity(all.len());
            let mut rows = Vec::with_capacity(all.len());
            for (key, gate, source_revision, hold) in all {
                let basis = Basis {
                    version: records.version(&key.namespace, &key.name),
                    gate,
                    source_revision,
                    hold,
                };
                let row = match state.rows.get(&key) {
                    Some(e) if e.basis == basis => e.json.clone(),
                    _ => {
                        let json = summary_row(
                            records,
                            &key,
                            gate,
                            basis.source_revision.clone(),
                            basis.hold.clone(),
                        )?;
                        state.rows.insert(
                            key.clone(),
                            Encoded {
                                basis,
                                json: json.clone(),
                            },
                        );
                        json
                    }
                };
                keys.push(key);
                rows.push(row);
            }
            // Forget what is no longer handled.
            state.rows.retain(|k, _| keys.binary_search(k).is_ok());
            let body = Bytes::from(array(rows.iter().map(|r| &r[..])));
            state.list = Some(List {
                generations: (generation, records_generation),
                keys,
                rows,
                all: body,
            });
        }
        let Some(list) = &state.list else {
            return Ok(Bytes::from(array(std::iter::empty())));
        };
        let range = namespace_range(&list.keys, namespace);
        if range.len() == list.keys.len() {
            return Ok(list.all.clone());
        }
        Ok(Bytes::from(array(list.rows[range].iter().map(|r| &r[..]))))
    }

    /// The `GET /status/{ns}/{name}` body; `None` when the Kustomization is not handled.
    /// Not kept: the history is already held encoded ([`Records::history_json`]), so a
    /// detail is a small header encoded around those bytes, and keeping every detail asked
    /// for would hold each history twice (~15 kB per Kustomization).
    pub fn detail<I: Handled>(
        &self,
        index: &RwLock<I>,
        records: &dyn Records,
        namespace: &str,
        name: &str,
    ) -> Option<Result<Bytes, serde_json::Error>> {
        let key = Key::kustomization(namespace, name);
        let (gate, source_revision, hold) = read(index).handled_row(&key)?;
        let history = records.history_json(namespace, name);
        let revisions: &RawValue = match &history {
            Some(json) => json,
            None => match serde_json::from_str(EMPTY) {
                Ok(empty) => empty,
                Err(e) => return Some(Err(e)),
            },
        };
        Some(encode(&StatusDetail {
            kind: crate::model::Kind::KUSTOMIZATION,
            waiting: None,
            namespace: key.namespace,
            name: key.name,
            gate,
            source_revision,
            hold,
            revisions,
        }))
    }
}

/// The history of a Kustomization without records.
const EMPTY: &str = "[]";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RevisionRecord;
    use crate::records::results::Results;
    use serde_json::json;

    /// The same records without generations: every answer encoded afresh (the reference).
    struct Untracked(Results);
    impl Records for Untracked {
        fn last(&self, namespace: &str, name: &str) -> Option<RevisionRecord> {
            self.0.last(namespace, name)
        }
        fn history(&self, namespace: &str, name: &str) -> Vec<RevisionRecord> {
            self.0.history(namespace, name)
        }
        fn is_loaded(&self) -> bool {
            true
        }
    }
    impl Records for Tracked {
        fn last(&self, namespace: &str, name: &str) -> Option<RevisionRecord> {
            self.0.last(namespace, name)
        }
        fn history(&self, namespace: &str, name: &str) -> Vec<RevisionRecord> {
            self.0.history(namespace, name)
        }
        fn is_loaded(&self) -> bool {
            true
        }
        fn generation(&self) -> Option<u64> {
            Some(self.0.generation())
        }
        fn version(&self, namespace: &str, name: &str) -> Option<u64> {
            self.0.version(namespace, name)
        }
    }
    struct Tracked(Results);

    /// The index's side: handled objects and a generation moved by every change.
    #[derive(Default)]
    struct Index {
        generation: u64,
        rows: std::collections::BTreeMap<Key, HandledRow>,
    }
    impl Index {
        fn set(&mut self, ns: &str, name: &str, row: Option<HandledRow>) {
            self.generation += 1;
            match row {
                Some(row) => self.rows.insert(Key::kustomization(ns, name), row),
                None => self.rows.remove(&Key::kustomization(ns, name)),
            };
        }
    }
    impl Handled for Index {
        fn generation(&self) -> u64 {
            self.generation
        }
        fn handled_keys(&self) -> Vec<Key> {
            self.rows.keys().cloned().collect()
        }
        fn handled_row(&self, key: &Key) -> Option<HandledRow> {
            self.rows.get(key).cloned()
        }
    }

    fn record(revision: &str) -> RevisionRecord {
        serde_json::from_value(json!({
            "revision": revision, "trigger": "webhook", "startedAt": "2026-11-30T08:00:00Z",
            "state": "converged", "statefulsets": [{"namespace": "apps", "name": "db",
                "outcome": "converged", "templates": [], "claims": []}]
        }))
        .unwrap()
    }

    /// Every answer of the cache equals a fresh encoding, after each kind of change.
    #[tokio::test]
    async fn cached_bodies_follow_every_change_and_equal_a_fresh_encoding() {
        let index = RwLock::new(Index::default());
        let results = Results::memory();
        let (tracked, untracked) = (Tracked(results.clone()), Untracked(results.clone()));
        let cache = StatusCache::default();
        let keys = [("a", "one"), ("a", "two"), ("b", "one")];
        let check = |step: &str| {
            for namespace in [None, Some("a"), Some("b"), Some("c")] {
                let cached = cache.rows(&index, &tracked, namespace).unwrap();
                let fresh = StatusCache::default()
                    .rows(&index, &untracked, namespace)
                    .unwrap();
                assert_eq!(cached, fresh, "{step}: list of {namespace:?}");
            }
            for (ns, name) in keys {
                let cached = cache.detail(&index, &tracked, ns, name).map(Result::unwrap);
                let fresh = StatusCache::default()
                    .detail(&index, &untracked, ns, name)
                    .map(Result::unwrap);
                assert_eq!(cached, fresh, "{step}: {ns}/{name}");
            }
        };
        check("empty");
        for (ns, name) in keys {
            let row = (GateMode::Suspend, None, None);
            index.write().unwrap().set(ns, name, Some(row));
        }
        check("handled, no records");
        for (ns, name) in keys {
            results.put(ns, name, record("main@sha1:1")).await.unwrap();
        }
        check("records");
        results
            .put("a", "two", record("main@sha1:2"))
            .await
            .unwrap();
        check("one record added");
        for name in ["one", "two"] {
            let row = (GateMode::Suspend, Some("main@sha1:3".into()), None);
            index.write().unwrap().set("a", name, Some(row));
        }
        check("a source revision");
        let row = (GateMode::Reconcile, Some("main@sha1:3".into()), None);
        index.write().unwrap().set("a", "one", Some(row));
        check("a gate changed");
        let row = (
            GateMode::Reconcile,
            Some("main@sha1:3".into()),
            Some("maintenance".into()),
        );
        index.write().unwrap().set("a", "one", Some(row));
        check("held");
        index.write().unwrap().set("b", "one", None);
        check("no longer handled");
        assert!(cache.detail(&index, &tracked, "b", "one").is_none());
        index.write().unwrap().set("a", "two", None);
        check("deleted");
    }

    #[test]
    fn namespace_range_by_table() {
        let keys = [
            Key::kustomization("a", "x"),
            Key::kustomization("b", "x"),
            Key::kustomization("b", "y"),
            Key::kustomization("c", "x"),
        ];
        for (namespace, expected) in [
            (None, 0..4),
            (Some("a"), 0..1),
            (Some("b"), 1..3),
            (Some("c"), 3..4),
            (Some("0"), 0..0),
            (Some("bb"), 3..3),
            (Some("d"), 4..4),
        ] {
            assert_eq!(namespace_range(&keys, namespace), expected, "{namespace:?}");
        }
    }
}
