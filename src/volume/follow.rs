//! Following a set of claims to their end state, from what a watch delivers (each claim as it
//! changes, each Event about one) and the clock: which claim changed state, and when the next
//! claim is due to be called `stalled`. Pure: the caller feeds it (`cluster::claims` watches,
//! the service's follower and the `converge --wait-for-volumes` loop both do) and says what time
//! it is.
//!
//! A claim's state is reported again only when it changes (its state, or the driver's words
//! within it): one record write per change, not per event. A claim `requested` or `recovered`
//! stays so until a signal says more: a recovery lowers the request while the status still
//! speaks of the failed one, and that is the resizer not having caught up yet, not news.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::{Observed, ResizeEvent, Volume, VolumeState, classify, past_timeout};

/// How many Events are kept per claim: the newest decide, and a driver retrying writes many.
const EVENTS_KEPT: usize = 16;

struct Tracked {
    /// When the request this follow is about was made (the converge's patch, or the first
    /// sight of it): Events before it are about something else, and the timeout counts from it.
    requested_at: jiff::Timestamp,
    claim: Option<PersistentVolumeClaim>,
    events: Vec<ResizeEvent>,
    current: Volume,
}

/// A claim whose state changed, with the state it left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub volume: Volume,
    pub previous: VolumeState,
}

/// The claims followed, by name.
pub struct Tracker {
    timeout: Duration,
    claims: BTreeMap<String, Tracked>,
}

fn parse(at: &str) -> Option<jiff::Timestamp> {
    at.parse().ok()
}

impl Tracker {
    /// Claims not at an end state `timeout` after their request are `stalled`.
    pub fn new(timeout: Duration) -> Self {
        Tracker {
            timeout,
            claims: BTreeMap::new(),
        }
    }

    /// Follows `volume` (as a converge or a record left it), asked for at `requested_at`.
    pub fn follow(&mut self, volume: Volume, requested_at: jiff::Timestamp) {
        self.claims.insert(
            volume.claim.clone(),
            Tracked {
                requested_at,
                claim: None,
                events: Vec::new(),
                current: volume,
            },
        );
    }

    /// Whether `claim` is followed.
    pub fn follows(&self, claim: &str) -> bool {
        self.claims.contains_key(claim)
    }

    /// The claims followed, by name.
    pub fn names(&self) -> Vec<String> {
        self.claims.keys().cloned().collect()
    }

    /// Every followed claim as it stands.
    pub fn volumes(&self) -> Vec<Volume> {
        self.claims.values().map(|t| t.current.clone()).collect()
    }

    /// Whether every followed claim is at an end state (`grown`, `infeasible`).
    pub fn done(&self) -> bool {
        self.claims.values().all(|t| t.current.state.is_end())
    }

    /// Whether a claim is `infeasible` without the driver's `VolumeResizeFailed` Event seen
    /// yet: the resizer writes the status first and the Event right after, and the Event's
    /// words belong in the claim's message, so a follow that is otherwise done waits a little
    /// for it.
    pub fn awaits_failure_event(&self) -> bool {
        self.claims.values().any(|t| {
            t.current.state == VolumeState::Infeasible
                && !t
                    .events
                    .iter()
                    .any(|e| e.reason == super::reason::VOLUME_RESIZE_FAILED)
        })
    }

    /// The claim as the watch delivers it now.
    pub fn claim(&mut self, claim: PersistentVolumeClaim, now: jiff::Timestamp) -> Option<Change> {
        let name = claim.metadata.name.clone()?;
        let tracked = self.claims.get_mut(&name)?;
        tracked.claim = Some(claim);
        Self::observe(tracked, self.timeout, now)
    }

    /// An Event about `claim` (created, or updated: a repeat keeps its newest time).
    pub fn event(
        &mut self,
        claim: &str,
        event: ResizeEvent,
        now: jiff::Timestamp,
    ) -> Option<Change> {
        let tracked = self.claims.get_mut(claim)?;
        tracked.events.push(event);
        tracked.events.sort_by_key(|e| e.at);
        let extra = tracked.events.len().saturating_sub(EVENTS_KEPT);
        tracked.events.drain(..extra);
        Self::observe(tracked, self.timeout, now)
    }

    /// A claim gone (deleted by someone): no longer followed.
    pub fn gone(&mut self, claim: &str) {
        self.claims.remove(claim);
    }

    /// The clock moved to `now`: the claims that became `stalled`.
    pub fn tick(&mut self, now: jiff::Timestamp) -> Vec<Change> {
        let timeout = self.timeout;
        self.claims
            .values_mut()
            .filter_map(|t| Self::observe(t, timeout, now))
            .collect()
    }

    /// When the next followed claim becomes `stalled` if nothing else happens (`None`: none
    /// will), for the caller to wake up then.
    pub fn next_deadline(&self) -> Option<jiff::Timestamp> {
        let limit = jiff::SignedDuration::try_from(self.timeout).ok()?;
        self.claims
            .values()
            .filter(|t| {
                !t.current.state.is_end()
                    && !matches!(
                        t.current.state,
                        VolumeState::Stalled | VolumeState::Deferred
                    )
            })
            .filter_map(|t| t.requested_at.checked_add(limit).ok())
            .min()
    }

    fn observe(tracked: &mut Tracked, timeout: Duration, now: jiff::Timestamp) -> Option<Change> {
        let observed = match &tracked.claim {
            Some(claim) => classify(claim, &tracked.events, Some(tracked.requested_at)),
            // Not seen yet: what it was, aged by the clock.
            None if tracked.current.state == VolumeState::Stalled => return None,
            None => Observed {
                state: tracked.current.state,
                message: tracked.current.message.clone(),
                requested: tracked.current.requested.clone(),
                capacity: tracked.current.capacity.clone(),
            },
        };
        let observed = past_timeout(observed, tracked.requested_at, now, timeout);
        let current = &tracked.current;
        let waiting = matches!(
            current.state,
            VolumeState::Requested | VolumeState::Recovered
        );
        if observed.state == VolumeState::Requested && waiting {
            // Nothing new: keep `recovered` and its words, update the sizes silently.
            tracked.current.requested = observed.requested.or(tracked.current.requested.take());
            tracked.current.capacity = observed.capacity.or(tracked.current.capacity.take());
            return None;
        }
        if observed.state == current.state && observed.message == current.message {
            tracked.current.requested = observed.requested.or(tracked.current.requested.take());
            tracked.current.capacity = observed.capacity.or(tracked.current.capacity.take());
            return None;
        }
        let previous = current.state;
        let since = if observed.state == previous {
            parse(&current.since).unwrap_or(now)
        } else {
            now
        };
        let claim = current.claim.clone();
        tracked.current = Volume::observed(&claim, observed, since);
        Some(Change {
            volume: tracked.current.clone(),
            previous,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    fn pvc(request: &str, capacity: &str, status: Value) -> PersistentVolumeClaim {
        let mut s = json!({"phase": "Bound", "capacity": {"storage": capacity}});
        if let (Value::Object(into), Value::Object(from)) = (&mut s, status) {
            into.extend(from);
        }
        serde_json::from_value(json!({
            "metadata": {"name": "data-db-0"},
            "spec": {"resources": {"requests": {"storage": request}}},
            "status": s,
        }))
        .unwrap()
    }

    fn start(state: VolumeState) -> Volume {
        Volume {
            claim: "data-db-0".into(),
            requested: Some("2Gi".into()),
            capacity: Some("1Gi".into()),
            state,
            message: None,
            since: "2026-12-01T10:00:00Z".into(),
        }
    }

    /// A claim growing in steps reports each state once, then nothing more is due.
    #[test]
    fn each_state_change_is_reported_once() {
        let t0 = at("2026-12-01T10:00:00Z");
        let mut tracker = Tracker::new(Duration::from_secs(1800));
        tracker.follow(start(VolumeState::Requested), t0);
        let later = |s| t0 + jiff::SignedDuration::from_secs(s);
        assert_eq!(tracker.claim(pvc("2Gi", "1Gi", json!({})), later(1)), None);
        let resizing = json!({"allocatedResources": {"storage": "2Gi"},
                              "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"}});
        let c = tracker
            .claim(pvc("2Gi", "1Gi", resizing.clone()), later(2))
            .unwrap();
        assert_eq!(
            (c.previous, c.volume.state),
            (VolumeState::Requested, VolumeState::Resizing)
        );
        assert_eq!(c.volume.since, later(2).to_string());
        // The same status again (another field changed): no change.
        assert_eq!(tracker.claim(pvc("2Gi", "1Gi", resizing), later(3)), None);
        assert_eq!(tracker.next_deadline(), Some(later(1800)));
        let c = tracker
            .claim(pvc("2Gi", "2Gi", json!({})), later(4))
            .unwrap();
        assert_eq!(
            (c.previous, c.volume.state),
            (VolumeState::Resizing, VolumeState::Grown)
        );
        assert_eq!(c.volume.capacity.as_deref(), Some("2Gi"));
        assert!(tracker.done());
        assert_eq!(tracker.next_deadline(), None);
        assert!(tracker.tick(later(99_999)).is_empty());
    }

    #[test]
    fn past_the_timeout_the_tick_reports_stalled_once() {
        let t0 = at("2026-12-01T10:00:00Z");
        let mut tracker = Tracker::new(Duration::from_secs(60));
        tracker.follow(start(VolumeState::Requested), t0);
        let later = |s| t0 + jiff::SignedDuration::from_secs(s);
        assert!(tracker.tick(later(59)).is_empty());
        let changes = tracker.tick(later(60));
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].volume.state, VolumeState::Stalled);
        assert!(tracker.tick(later(61)).is_empty());
        assert_eq!(tracker.next_deadline(), None);
        assert!(!tracker.done(), "stalled is still followed");
        // It grows after all.
        let c = tracker
            .claim(pvc("2Gi", "2Gi", json!({})), later(70))
            .unwrap();
        assert_eq!(
            (c.previous, c.volume.state),
            (VolumeState::Stalled, VolumeState::Grown)
        );
    }

    #[test]
    fn a_recovered_claim_stays_recovered_until_the_resizer_takes_up_the_new_request() {
        let t0 = at("2026-12-01T10:00:00Z");
        let mut tracker = Tracker::new(Duration::from_secs(1800));
        let mut v = start(VolumeState::Recovered);
        v.message = Some("request lowered to 2Gi".into());
        tracker.follow(v, t0);
        let stale = json!({"allocatedResources": {"storage": "10Gi"},
                           "allocatedResourceStatuses": {"storage": "ControllerResizeInfeasible"}});
        assert_eq!(tracker.claim(pvc("2Gi", "1Gi", stale), t0), None);
        assert_eq!(tracker.volumes()[0].state, VolumeState::Recovered);
        let taken = json!({"allocatedResources": {"storage": "2Gi"},
                           "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"}});
        let c = tracker.claim(pvc("2Gi", "1Gi", taken), t0).unwrap();
        assert_eq!(
            (c.previous, c.volume.state),
            (VolumeState::Recovered, VolumeState::Resizing)
        );
    }

    #[test]
    fn an_event_adds_the_driver_s_words_and_unknown_claims_are_ignored() {
        let t0 = at("2026-12-01T10:00:00Z");
        let mut tracker = Tracker::new(Duration::from_secs(1800));
        tracker.follow(start(VolumeState::Requested), t0);
        let infeasible = json!({"allocatedResources": {"storage": "2Gi"},
                                "allocatedResourceStatuses": {"storage": "ControllerResizeInfeasible"}});
        let c = tracker.claim(pvc("2Gi", "1Gi", infeasible), t0).unwrap();
        assert_eq!(c.volume.state, VolumeState::Infeasible);
        let event = ResizeEvent {
            reason: "VolumeResizeFailed".into(),
            message: "too big".into(),
            at: t0,
        };
        let c = tracker.event("data-db-0", event.clone(), t0).unwrap();
        assert_eq!(c.previous, VolumeState::Infeasible);
        assert!(
            c.volume
                .message
                .unwrap()
                .contains("newest VolumeResizeFailed Event: too big")
        );
        assert_eq!(tracker.event("data-other-0", event, t0), None);
        tracker.gone("data-db-0");
        assert!(tracker.names().is_empty());
    }
}
