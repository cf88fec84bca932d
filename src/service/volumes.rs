//! The claim follower (issue #40): after a revision converged, whatever the gated kind, every
//! claim it grew or recovered and every claim of its StatefulSets asking for more than it holds
//! is followed to its end state, and what each claim's expansion does is said where the
//! revision's outcome is said: the record (`volumes` per StatefulSet entry and the revision's
//! summary, one write per change), Events on the gated object, the metrics.
//!
//! One component for every kind, keyed by the gated object's kind and [`Key`]: a lane hands it
//! the record it finished and the object's [`EventTarget`] ([`VolumeFollower::follow`]); the
//! follower knows nothing else of the lane. A newer converged record of the same object
//! replaces what was followed for it.
//!
//! Watches, never polling (`cluster::claims`): one watch of each followed StatefulSet's claims
//! (its namespace and its selector) and one of the claim Events in that namespace, open only
//! while one of its claims is not at an end state. With nothing growing, the follower sends no
//! request at all. Only the leader follows: a replica that loses the Lease stops, and the new
//! leader resumes from the records ([`VolumeFollower::resume`]).

mod restart;
mod set;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::WatchedStatefulSets;
use crate::model::{Key, Kind, RevisionRecord, RevisionState, Volume, VolumeState};
use crate::records::events::{EventSink, EventTarget};
use crate::records::metrics::Metrics;
use crate::records::results::Results;
use crate::records::volume_event;

/// What the follower is built with.
pub struct FollowerConfig {
    /// The service's own identity: claims and Events are read with it.
    pub client: kube::Client,
    /// Each kind's records (the follower writes its volumes into them).
    pub results: Vec<(Kind, Results)>,
    pub events: EventSink,
    pub metrics: Metrics,
    /// `--resize-timeout`.
    pub resize_timeout: Duration,
    /// `--timeout`: the read of a StatefulSet's selector.
    pub call_timeout: Duration,
    /// The service's watch of Flux's StatefulSets: a selector read from it costs no request.
    pub statefulsets: Option<WatchedStatefulSets>,
    /// The first wait before an eviction a PodDisruptionBudget (or a failure) held back is
    /// tried again (`restart-for-resize`); it doubles up to five minutes.
    pub restart_retry: Duration,
}

/// Cheap to clone: every clone is the one follower.
#[derive(Clone)]
pub struct VolumeFollower {
    inner: Arc<Inner>,
}

struct Inner {
    config: FollowerConfig,
    tasks: TaskTracker,
    /// Cancelled when this replica stops following (it lost the Lease, or shuts down).
    stopped: Mutex<CancellationToken>,
    followed: Mutex<HashMap<(Kind, Key), Followed>>,
    generation: AtomicU64,
}

/// What is followed for one gated object: the claims of its newest converged record.
struct Followed {
    /// Tells this follow from a later one of the same object (whose tasks replaced it).
    generation: u64,
    revision: String,
    started_at: String,
    target: EventTarget,
    /// Each StatefulSet's claims as last written, by `namespace/name`.
    sets: BTreeMap<String, Vec<Volume>>,
    /// When each claim's request was made, for `volume_resize_seconds`.
    requested_at: BTreeMap<String, jiff::Timestamp>,
    /// `VolumesGrown` was published for this record.
    grown_announced: bool,
    /// `(claim, since)` of the recoveries announced for this record.
    recovered_announced: BTreeSet<(String, String)>,
    cancel: CancellationToken,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn set_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// When a claim as recorded was asked for: its `since`, or for one already `stalled`, the
/// timeout before that (so a resumed follow does not count the wait from zero again).
fn asked_at(v: &Volume, timeout: Duration) -> jiff::Timestamp {
    let since = v
        .since
        .parse::<jiff::Timestamp>()
        .unwrap_or_else(|_| jiff::Timestamp::now());
    if v.state == VolumeState::Stalled
        && let Ok(limit) = jiff::SignedDuration::try_from(timeout)
    {
        return since.checked_sub(limit).unwrap_or(since);
    }
    since
}

impl VolumeFollower {
    pub fn new(config: FollowerConfig) -> Self {
        VolumeFollower {
            inner: Arc::new(Inner {
                config,
                tasks: TaskTracker::new(),
                stopped: Mutex::new(CancellationToken::new()),
                followed: Mutex::default(),
                generation: AtomicU64::new(0),
            }),
        }
    }

    /// The follower's tasks, for shutdown to wait for (after [`VolumeFollower::stop`]).
    pub fn tasks(&self) -> &TaskTracker {
        &self.inner.tasks
    }

    /// Follows the claims of `record`, the newest converged record of `key` (of `kind`),
    /// whose Events go on `target`, in place of what was followed for `key` before. `fresh`:
    /// the record was just written by a run (its recoveries are announced); a follow resumed
    /// from the records announces nothing again.
    pub fn follow(
        &self,
        kind: Kind,
        key: &Key,
        record: &RevisionRecord,
        target: EventTarget,
        fresh: bool,
    ) {
        let sets: BTreeMap<String, Vec<Volume>> = record
            .statefulsets
            .iter()
            .filter(|e| !e.volumes.is_empty())
            .map(|e| (set_key(&e.namespace, &e.name), e.volumes.clone()))
            .collect();
        let timeout = self.inner.config.resize_timeout;
        let generation = self.inner.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let stopped = lock(&self.inner.stopped).clone();
        let (announce, grown_event, to_follow) = {
            let mut followed = lock(&self.inner.followed);
            let previous = followed.remove(&(kind, key.clone()));
            if let Some(p) = &previous {
                p.cancel.cancel();
            }
            if sets.is_empty() || record.state != RevisionState::Converged {
                drop(followed);
                self.count(kind);
                return;
            }
            let same = previous
                .as_ref()
                .filter(|p| p.revision == record.revision && p.started_at == record.started_at);
            let mut entry = Followed {
                generation,
                revision: record.revision.clone(),
                started_at: record.started_at.clone(),
                target: target.clone(),
                requested_at: sets
                    .values()
                    .flatten()
                    .map(|v| (v.claim.clone(), asked_at(v, timeout)))
                    .collect(),
                sets: sets.clone(),
                // A revision that only moved claims to another VolumeAttributesClass grew
                // nothing: no `VolumesGrown` for it.
                grown_announced: same.is_some_and(|p| p.grown_announced)
                    || sets
                        .values()
                        .flatten()
                        .all(|v| v.state == VolumeState::Grown && v.attributes.is_some()),
                recovered_announced: same
                    .map(|p| p.recovered_announced.clone())
                    .unwrap_or_default(),
                cancel: stopped.child_token(),
            };
            let mut announce = Vec::new();
            for (s, volumes) in &sets {
                for v in volumes.iter().filter(|v| v.state == VolumeState::Recovered) {
                    if fresh
                        && entry
                            .recovered_announced
                            .insert((v.claim.clone(), v.since.clone()))
                        && let Some(e) = volume_event::change_event(&record.revision, s, v)
                    {
                        announce.push(e);
                    }
                }
            }
            let all: Vec<(String, Vec<Volume>)> = sets.clone().into_iter().collect();
            let grown_event = if fresh && !entry.grown_announced {
                volume_event::grown_event(&record.revision, &all)
            } else {
                None
            };
            entry.grown_announced |= grown_event.is_some();
            let to_follow: Vec<(String, Vec<Volume>)> = all
                .into_iter()
                .filter(|(_, vs)| vs.iter().any(|v| !v.is_end()))
                .collect();
            let cancel = entry.cancel.clone();
            followed.insert((kind, key.clone()), entry);
            (announce, grown_event, (to_follow, cancel))
        };
        self.count(kind);
        let (to_follow, cancel) = to_follow;
        tracing::info!(kind = %kind, object = %key, revision = %record.revision,
            statefulsets = to_follow.len(), "following the claims' expansion");
        for (statefulset, volumes) in to_follow {
            let task = set::FollowSet {
                follower: self.clone(),
                kind,
                key: key.clone(),
                generation,
                statefulset,
                volumes,
                cancel: cancel.clone(),
            };
            self.inner.tasks.spawn(task.run());
        }
        let events = announce.into_iter().chain(grown_event);
        let sink = self.inner.config.events.clone();
        let events: Vec<_> = events.collect();
        if !events.is_empty() {
            self.inner.tasks.spawn(async move {
                for e in events {
                    sink.publish_to(&target, &e).await;
                }
            });
        }
    }

    /// Stops following `key` (the gated object is gone, or no longer gated).
    pub fn forget(&self, kind: Kind, key: &Key) {
        if let Some(f) = lock(&self.inner.followed).remove(&(kind, key.clone())) {
            f.cancel.cancel();
        }
        self.count(kind);
    }

    /// Stops every follow (this replica lost the Lease, or shuts down): the next leader
    /// resumes from the records.
    pub fn stop(&self) {
        let mut stopped = lock(&self.inner.stopped);
        stopped.cancel();
        *stopped = CancellationToken::new();
        drop(stopped);
        lock(&self.inner.followed).clear();
        for (kind, _) in &self.inner.config.results {
            self.count(*kind);
        }
    }

    /// Resumes, from the records, the follow of every gated object whose newest converged
    /// record has claims not at an end state (this replica took the Lease).
    pub fn resume(&self) {
        for (kind, results) in &self.inner.config.results {
            for (namespace, name) in results.keys() {
                let key = Key::new(*kind, namespace, name);
                let newest = results
                    .history(&key.namespace, &key.name)
                    .into_iter()
                    .find(|r| r.state == RevisionState::Converged && r.volumes.is_some());
                if let Some(record) = newest.filter(|r| {
                    r.statefulsets
                        .iter()
                        .flat_map(|e| &e.volumes)
                        .any(|v| !v.is_end())
                }) {
                    self.follow(*kind, &key, &record, EventTarget::named(*kind, &key), false);
                }
            }
        }
    }

    /// How the claims of `key`'s newest followed record last stood, by `namespace/claim`: what
    /// a converge decides a recovery on besides the claims' status (`converge::Options`).
    pub fn known_states(&self, kind: Kind, key: &Key) -> BTreeMap<String, VolumeState> {
        let from = |sets: &BTreeMap<String, Vec<Volume>>| -> BTreeMap<String, VolumeState> {
            sets.iter()
                .flat_map(|(s, vs)| {
                    let namespace = s.split('/').next().unwrap_or_default().to_string();
                    vs.iter()
                        .map(move |v| (format!("{namespace}/{}", v.claim), v.state))
                })
                .collect()
        };
        if let Some(f) = lock(&self.inner.followed).get(&(kind, key.clone())) {
            return from(&f.sets);
        }
        let Some((_, results)) = self.inner.config.results.iter().find(|(k, _)| *k == kind) else {
            return BTreeMap::new();
        };
        results
            .history(&key.namespace, &key.name)
            .into_iter()
            .find(|r| r.volumes.is_some())
            .map(|r| {
                from(
                    &r.statefulsets
                        .iter()
                        .map(|e| (set_key(&e.namespace, &e.name), e.volumes.clone()))
                        .collect(),
                )
            })
            .unwrap_or_default()
    }

    /// A followed claim of `statefulset` changed (its task's generation): the record, the
    /// Events and the metrics say so. `volumes` are that StatefulSet's claims as they stand now.
    /// Whether the record holds the change now (what a restart's journal waits for).
    async fn changed(
        &self,
        kind: Kind,
        key: &Key,
        generation: u64,
        statefulset: &str,
        volumes: Vec<Volume>,
        change: &crate::volume::follow::Change,
    ) -> bool {
        let changed = &change.volume;
        let now = jiff::Timestamp::now();
        let (revision, started_at, target, grown, asked) = {
            let mut followed = lock(&self.inner.followed);
            let Some(f) = followed
                .get_mut(&(kind, key.clone()))
                .filter(|f| f.generation == generation)
            else {
                return false;
            };
            f.sets.insert(statefulset.to_string(), volumes.clone());
            let all: Vec<(String, Vec<Volume>)> =
                f.sets.iter().map(|(s, v)| (s.clone(), v.clone())).collect();
            let grown = if f.grown_announced {
                None
            } else {
                volume_event::grown_event(&f.revision, &all)
            };
            f.grown_announced |= grown.is_some();
            (
                f.revision.clone(),
                f.started_at.clone(),
                f.target.clone(),
                grown,
                f.requested_at.get(&changed.claim).copied(),
            )
        };
        self.count(kind);
        if changed.state == VolumeState::Grown
            && let Some(asked) = asked
        {
            let seconds = now.duration_since(asked).as_secs_f64().max(0.0);
            self.inner.config.metrics.volume_resized(kind, seconds);
        }
        tracing::info!(kind = %kind, object = %key, revision = %revision, statefulset,
            claim = %changed.claim, state = %changed.state,
            message = changed.message.as_deref().unwrap_or_default(),
            volume_attributes_class = changed.attributes.as_ref().map(|a| a.state.as_str()).unwrap_or_default(),
            "claim expansion");
        let (namespace, name) = statefulset.split_once('/').unwrap_or(("", statefulset));
        let mut recorded = false;
        if let Some((_, results)) = self.inner.config.results.iter().find(|(k, _)| *k == kind) {
            match results
                .set_volumes(
                    &key.namespace,
                    &key.name,
                    &revision,
                    &started_at,
                    (namespace, name),
                    &volumes,
                )
                .await
            {
                Ok(_) => recorded = true,
                Err(e) => {
                    tracing::warn!(kind = %kind, object = %key, revision = %revision, error = %e,
                        "could not record the claims' expansion");
                }
            }
        }
        let sink = &self.inner.config.events;
        // Once per state entered: the driver's words changing within it are recorded only.
        if change.previous != changed.state
            && let Some(e) = volume_event::change_event(&revision, statefulset, changed)
        {
            sink.publish_to(&target, &e).await;
        }
        if change.previous_attributes != changed.attributes.as_ref().map(|a| a.state)
            && let Some(e) = volume_event::modify_event(&revision, statefulset, changed)
        {
            sink.publish_to(&target, &e).await;
        }
        if let Some(e) = grown {
            sink.publish_to(&target, &e).await;
        }
        recorded
    }

    /// Publishes `event` (a restart's) on the gated object followed under `generation`.
    async fn publish(
        &self,
        kind: Kind,
        key: &Key,
        generation: u64,
        event: impl FnOnce(&str) -> crate::records::events::RevisionEvent,
    ) {
        let found = lock(&self.inner.followed)
            .get(&(kind, key.clone()))
            .filter(|f| f.generation == generation)
            .map(|f| (f.revision.clone(), f.target.clone()));
        if let Some((revision, target)) = found {
            self.inner
                .config
                .events
                .publish_to(&target, &event(&revision))
                .await;
        }
    }

    /// Sets `flux_converger_claims{kind}` from what is followed now.
    fn count(&self, kind: Kind) {
        let mut counts: BTreeMap<VolumeState, i64> = BTreeMap::new();
        let mut moves: BTreeMap<crate::volume::ModifyState, i64> = BTreeMap::new();
        for ((k, _), f) in lock(&self.inner.followed).iter() {
            if *k != kind {
                continue;
            }
            for v in f.sets.values().flatten() {
                *counts.entry(v.state).or_default() += 1;
                if let Some(a) = &v.attributes {
                    *moves.entry(a.state).or_default() += 1;
                }
            }
        }
        self.inner.config.metrics.claims(kind, &counts, &moves);
    }
}
