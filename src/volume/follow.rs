//! Following a set of claims to their end state, from what a watch delivers (each claim as it
//! changes, each Event about one) and the clock: which claim changed state, and when the next
//! claim is due to be called `stalled`. Pure: the caller feeds it (`cluster::claims` watches,
//! the service's follower and the `converge --wait-for-volumes` loop both do) and says what time
//! it is.
//!
//! A claim's state is reported again only when it changes (its state, or the driver's words
//! within it, or its move to another VolumeAttributesClass): one record write per change, not
//! per event. A claim `requested` or `recovered` stays so until a signal says more: a recovery
//! lowers the request while the status still speaks of the failed one, and that is the
//! resizer not having caught up yet, not news. Likewise a claim whose pod is being restarted
//! for it (its `restart`, set by [`Tracker::set_restart`]) stays as the restart left it while
//! its status still says `filesystem-pending`: the kubelet has not grown it yet.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::{
    ModifyState, Observed, ResizeEvent, Restart, Volume, VolumeState, classify,
    classify_attributes, past_timeout,
};

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

/// A claim whose state changed, with the state it left (and the state its class move left).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub volume: Volume,
    pub previous: VolumeState,
    pub previous_attributes: Option<ModifyState>,
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

    /// Whether every followed claim is at an end state (`grown`, `infeasible`; its class move
    /// `modified` or `infeasible`).
    pub fn done(&self) -> bool {
        self.claims.values().all(|t| t.current.is_end())
    }

    /// Whether a claim is `infeasible` without the driver's `VolumeResizeFailed` Event seen
    /// yet: the resizer writes the status first and the Event right after, and the Event's
    /// words belong in the claim's message, so a follow that is otherwise done waits a little
    /// for it.
    pub fn awaits_failure_event(&self) -> bool {
        let seen = |t: &Tracked, reason: &str| t.events.iter().any(|e| e.reason == reason);
        self.claims.values().any(|t| {
            (t.current.state == VolumeState::Infeasible
                && !seen(t, super::reason::VOLUME_RESIZE_FAILED))
                || (t
                    .current
                    .attributes
                    .as_ref()
                    .is_some_and(|a| a.state == ModifyState::Infeasible)
                    && !seen(t, super::reason::VOLUME_MODIFY_FAILED))
        })
    }

    /// The restart of `claim`'s pod decided (`restart` without `evicted_at`: recorded before
    /// the eviction is sent, or held back by a PodDisruptionBudget), done (with `evicted_at`:
    /// the claim is `restarted` from `now`), or dropped (`None`), with what to say of it. A
    /// change to report, unless nothing changed.
    pub fn set_restart(
        &mut self,
        claim: &str,
        restart: Option<Restart>,
        message: Option<String>,
        now: jiff::Timestamp,
    ) -> Option<Change> {
        let tracked = self.claims.get_mut(claim)?;
        let current = &tracked.current;
        let state = match &restart {
            Some(r) if r.evicted_at.is_some() => VolumeState::Restarted,
            Some(_) => VolumeState::FilesystemPending,
            None => current.state,
        };
        if current.restart == restart && current.state == state && current.message == message {
            return None;
        }
        let previous = current.state;
        let since = if state == previous {
            current.since.clone()
        } else {
            now.to_string()
        };
        tracked.current = Volume {
            state,
            message,
            since,
            restart,
            ..current.clone()
        };
        Some(Change {
            volume: tracked.current.clone(),
            previous,
            previous_attributes: tracked.current.attributes.as_ref().map(|a| a.state),
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
        let attributes = match (&tracked.claim, &tracked.current.attributes) {
            (Some(claim), Some(a)) => Some(classify_attributes(
                claim,
                &a.class,
                &tracked.events,
                Some(tracked.requested_at),
            )),
            _ => None,
        };
        let current = &tracked.current;
        let waiting = matches!(
            current.state,
            VolumeState::Requested | VolumeState::Recovered
        );
        // While its pod restarts, the claim's status still says what it said before.
        let restarting = current.restart.is_some() || current.state == VolumeState::Restarted;
        let size_same = (observed.state == VolumeState::Requested && waiting)
            || (observed.state == VolumeState::FilesystemPending && restarting)
            || (observed.state == current.state && observed.message == current.message);
        let attributes_same = match (&attributes, &current.attributes) {
            (Some((state, message, _)), Some(a)) => a.state == *state && a.message == *message,
            _ => true,
        };
        // Nothing new: keep `recovered`, a restart and their words; update the sizes and the
        // class the volume has silently.
        let requested = observed.requested.clone().or(current.requested.clone());
        let capacity = observed.capacity.clone().or(current.capacity.clone());
        if size_same && attributes_same {
            tracked.current.requested = requested;
            tracked.current.capacity = capacity;
            if let (Some(a), Some((_, _, class))) = (&mut tracked.current.attributes, attributes) {
                a.current = class.or(a.current.take());
            }
            return None;
        }
        let previous = current.state;
        let previous_attributes = current.attributes.as_ref().map(|a| a.state);
        let mut next = if size_same {
            Volume {
                requested,
                capacity,
                ..current.clone()
            }
        } else {
            let since = if observed.state == previous {
                parse(&current.since).unwrap_or(now)
            } else {
                now
            };
            Volume {
                attributes: current.attributes.clone(),
                ..Volume::observed(&current.claim, observed, since)
            }
        };
        if let (Some(a), Some((state, message, class))) = (&mut next.attributes, attributes) {
            if a.state != state {
                a.since = now.to_string();
            }
            a.state = state;
            a.message = message;
            a.current = class.or(a.current.take());
        }
        tracked.current = next;
        Some(Change {
            volume: tracked.current.clone(),
            previous,
            previous_attributes,
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
            attributes: None,
            restart: None,
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

    fn moving(state: VolumeState) -> Volume {
        Volume {
            attributes: Some(crate::volume::Attributes::asked(
                "gold",
                Some("silver".into()),
                at("2026-12-01T10:00:00Z"),
            )),
            ..start(state)
        }
    }

    fn with_class(mut c: PersistentVolumeClaim, status: Value) -> PersistentVolumeClaim {
        let mut s = serde_json::to_value(c.status.take()).unwrap();
        if let (Value::Object(into), Value::Object(from)) = (&mut s, status) {
            into.extend(from);
        }
        c.status = serde_json::from_value(s).unwrap();
        c
    }

    /// A claim only moved to another class: its size is grown, its move followed to its end,
    /// each change reported once with the move's previous state.
    #[test]
    fn a_class_move_is_followed_beside_the_size() {
        let t0 = at("2026-12-01T10:00:00Z");
        let mut tracker = Tracker::new(Duration::from_secs(60));
        tracker.follow(moving(VolumeState::Grown), t0);
        assert!(!tracker.done(), "the move is not at its end");
        let grown = pvc("2Gi", "2Gi", json!({}));
        assert_eq!(tracker.claim(grown.clone(), t0), None);
        let progress = with_class(
            grown.clone(),
            json!({"modifyVolumeStatus": {"status": "InProgress", "targetVolumeAttributesClassName": "gold"}}),
        );
        let c = tracker.claim(progress, t0).unwrap();
        assert_eq!(c.previous_attributes, Some(ModifyState::Modifying));
        assert_eq!(c.volume.state, VolumeState::Grown);
        let done = with_class(grown, json!({"currentVolumeAttributesClassName": "gold"}));
        let c = tracker.claim(done, t0).unwrap();
        let a = c.volume.attributes.unwrap();
        assert_eq!(
            (a.state, a.current.as_deref()),
            (ModifyState::Modified, Some("gold"))
        );
        assert!(tracker.done());
        // A move is never `stalled`: the timeout is the size's.
        assert!(
            tracker
                .tick(t0 + jiff::SignedDuration::from_secs(3600))
                .is_empty()
        );
    }

    /// A claim whose pod is restarted stays as the restart left it while its status still
    /// says `filesystem-pending`, and is `grown` once the kubelet grew it.
    #[test]
    fn a_restart_holds_the_claim_until_it_grows() {
        let t0 = at("2026-12-01T10:00:00Z");
        let mut tracker = Tracker::new(Duration::from_secs(1800));
        tracker.follow(start(VolumeState::FilesystemPending), t0);
        let pending = pvc(
            "2Gi",
            "1Gi",
            json!({"allocatedResources": {"storage": "2Gi"},
                   "allocatedResourceStatuses": {"storage": "NodeResizePending"}}),
        );
        let restart = crate::volume::Restart {
            pod: "db-0".into(),
            uid: "u0".into(),
            evicted_at: None,
        };
        let c = tracker
            .set_restart(
                "data-db-0",
                Some(restart.clone()),
                Some("restarting".into()),
                t0,
            )
            .unwrap();
        assert_eq!(c.volume.state, VolumeState::FilesystemPending);
        assert_eq!(c.volume.restart.as_ref(), Some(&restart));
        // The same again: nothing to write.
        assert_eq!(
            tracker.set_restart(
                "data-db-0",
                Some(restart.clone()),
                Some("restarting".into()),
                t0
            ),
            None
        );
        // The claim's own status says nothing new.
        assert_eq!(tracker.claim(pending.clone(), t0), None);
        let evicted = crate::volume::Restart {
            evicted_at: Some(t0.to_string()),
            ..restart
        };
        let c = tracker
            .set_restart("data-db-0", Some(evicted), Some("evicted".into()), t0)
            .unwrap();
        assert_eq!(
            (c.previous, c.volume.state),
            (VolumeState::FilesystemPending, VolumeState::Restarted)
        );
        assert_eq!(tracker.claim(pending, t0), None);
        let c = tracker.claim(pvc("2Gi", "2Gi", json!({})), t0).unwrap();
        assert_eq!(
            (c.previous, c.volume.state),
            (VolumeState::Restarted, VolumeState::Grown)
        );
        assert_eq!(c.volume.restart, None);
        assert!(tracker.done());
    }
}
