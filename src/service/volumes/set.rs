//! One followed StatefulSet: its claims' watch and the claim Events' watch, fed to a
//! `volume::follow::Tracker` until every claim is at an end state (then both watches close),
//! each change handed to the follower. A timer, not a request, says when a claim is `stalled`.
//! When the StatefulSet opted in to `restart-for-resize` and one of its claims waits for a
//! restart, its restarter (`restart`) watches it and its pods beside them.

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use tokio_util::sync::CancellationToken;

use super::restart::{Follow, Restarter};
use super::{VolumeFollower, asked_at};
use crate::cluster::claims::{self, Update};
use crate::cluster::with_deadline;
use crate::model::{Key, Kind, Volume};
use crate::volume::follow::Tracker;

/// The follow of one StatefulSet's claims for one gated object's record.
pub(super) struct FollowSet {
    pub(super) follower: VolumeFollower,
    pub(super) kind: Kind,
    pub(super) key: Key,
    pub(super) generation: u64,
    /// `namespace/name`.
    pub(super) statefulset: String,
    pub(super) volumes: Vec<Volume>,
    pub(super) cancel: CancellationToken,
}

impl FollowSet {
    /// The StatefulSet's namespace and name.
    pub(super) fn names(&self) -> (&str, &str) {
        self.statefulset
            .split_once('/')
            .unwrap_or(("", self.statefulset.as_str()))
    }

    /// What this follow's restarter works for.
    fn follow(&self) -> Follow<'_> {
        Follow {
            follower: &self.follower,
            kind: self.kind,
            key: &self.key,
            generation: self.generation,
            statefulset: &self.statefulset,
        }
    }

    pub(super) async fn run(self) {
        let config = &self.follower.inner.config;
        let (namespace, name) = self.names();
        let (selector, opted_in) = tokio::select! {
            () = self.cancel.cancelled() => return,
            read = self.selector(namespace, name) => read,
        };
        let mut tracker = Tracker::new(config.resize_timeout);
        for v in &self.volumes {
            tracker.follow(v.clone(), asked_at(v, config.resize_timeout));
        }
        let mut updates =
            claims::watch(config.client.clone(), namespace, selector.as_deref()).boxed();
        // Restarts: only for a StatefulSet that opted in, and only from the first claim that
        // waits for one (no watch of pods before, none ever without the annotation).
        let mut restarter: Option<Restarter> = None;
        let mut restarts: super::restart::Updates = futures::stream::pending().boxed();
        // Once every claim is at an end state the follow ends, but for an infeasible one whose
        // `VolumeResizeFailed` Event (the driver's words) has not arrived yet: a little longer.
        let mut linger: Option<tokio::time::Instant> = None;
        loop {
            if tracker.done() {
                if !tracker.awaits_failure_event() {
                    break;
                }
                let until =
                    *linger.get_or_insert_with(|| tokio::time::Instant::now() + EVENT_GRACE);
                if tokio::time::Instant::now() >= until {
                    break;
                }
            }
            let wake = tracker
                .next_deadline()
                .map(|at| {
                    let left = at.duration_since(jiff::Timestamp::now());
                    tokio::time::Instant::now()
                        + std::time::Duration::try_from(left).unwrap_or_default()
                })
                .unwrap_or_else(|| tokio::time::Instant::now() + ONE_DAY)
                .min(linger.unwrap_or_else(|| tokio::time::Instant::now() + ONE_DAY))
                .min(
                    restarter
                        .as_ref()
                        .and_then(Restarter::retry_at)
                        .unwrap_or_else(|| tokio::time::Instant::now() + ONE_DAY),
                );
            let changes = tokio::select! {
                () = self.cancel.cancelled() => return,
                update = updates.next() => {
                    let Some(update) = update else { return };
                    let now = jiff::Timestamp::now();
                    match update {
                        Update::Claim(c) => tracker.claim(*c, now).into_iter().collect(),
                        Update::Event(claim, e) => tracker.event(&claim, e, now).into_iter().collect(),
                        Update::Gone(claim) => {
                            tracker.gone(&claim);
                            Vec::new()
                        }
                        Update::Trouble(why) => {
                            tracing::warn!(statefulset = %self.statefulset, error = %why,
                                "following the claims' expansion; retrying");
                            Vec::new()
                        }
                    }
                }
                update = restarts.next() => {
                    if let (Some(r), Some(update)) = (restarter.as_mut(), update) {
                        r.update(&self.follow(), update);
                    }
                    Vec::new()
                }
                () = tokio::time::sleep_until(wake) => tracker.tick(jiff::Timestamp::now()),
            };
            for change in changes {
                self.follower
                    .changed(
                        self.kind,
                        &self.key,
                        self.generation,
                        &self.statefulset,
                        tracker.volumes(),
                        &change,
                    )
                    .await;
            }
            if opted_in && restarter.is_none() && Restarter::needed(&tracker) {
                let (r, updates) = Restarter::start(&self.follow(), selector.as_deref());
                restarter = Some(r);
                restarts = updates;
            }
            if let Some(r) = restarter.as_mut() {
                let follow = self.follow();
                tokio::select! {
                    () = self.cancel.cancelled() => return,
                    () = r.step(&follow, &mut tracker) => {}
                }
            }
        }
        tracing::debug!(statefulset = %self.statefulset, "every followed claim at an end state");
    }

    /// The claims' selector: the StatefulSet's `matchLabels`, from the service's watch of
    /// StatefulSets where it holds the object (no request), else read once; and whether it
    /// opted in to `restart-for-resize`.
    async fn selector(&self, namespace: &str, name: &str) -> (Option<String>, bool) {
        let config = &self.follower.inner.config;
        let read = |sts: &StatefulSet| {
            (
                claims::claim_selector(sts),
                crate::volume::restart::opted_in(sts.metadata.annotations.as_ref()),
            )
        };
        if let Some(sts) = config
            .statefulsets
            .as_ref()
            .and_then(|w| w.get(namespace, name))
        {
            return read(&sts);
        }
        let api: Api<StatefulSet> = Api::namespaced(config.client.clone(), namespace);
        match with_deadline(
            config.call_timeout,
            "get",
            &format!("StatefulSet {namespace}/{name}"),
            api.get_opt(name),
        )
        .await
        {
            Ok(Some(sts)) => read(&sts),
            Ok(None) => (None, false),
            Err(e) => {
                tracing::warn!(statefulset = %self.statefulset, error = %e,
                    "cannot read the StatefulSet's selector: following its claims by name in the whole namespace");
                (None, false)
            }
        }
    }
}

/// How long a follow with no claim due to stall sleeps between looks at the clock.
const ONE_DAY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// How long a follow that is done waits for the `VolumeResizeFailed` Event of an infeasible
/// claim (the resizer records it right after the status).
const EVENT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);
