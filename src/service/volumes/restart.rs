//! Restarting the pods of a followed StatefulSet whose claims are `filesystem-pending`, when it
//! opted in (`flux-converger.io/restart-for-resize: "true"`, issue #38): the watches of the
//! StatefulSet and its pods (`cluster::pods`), opened only once one of its claims waits for a
//! restart, fed to the pure decision (`volume::restart::next`), and what it decides carried
//! out: each restart recorded in the claims' `restart` (the record is the journal: written, and
//! confirmed written, before the eviction is sent), then the Eviction, then the claims marked
//! `restarted`, each with its Event on the gated object.
//!
//! A 429 (a PodDisruptionBudget allows no disruption now) is waited out and retried, with a
//! backoff from `restart_retry` up to [`MAX_RETRY`]; nothing works around it. Every write goes
//! through the follower's client, fenced by the Lease: a replica that lost it sends nothing,
//! and the next leader finishes what the record says (`volume::restart`, *decided*).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;

use super::VolumeFollower;
use crate::cluster::is_uid_mismatch;
use crate::cluster::pods::{self, Update};
use crate::model::{Key, Kind};
use crate::records::volume_event;
use crate::volume::Restart;
use crate::volume::follow::{Change, Tracker};
use crate::volume::restart::{Next, next};

/// The longest wait between two attempts at an eviction a budget (or a failure) held back.
pub const MAX_RETRY: Duration = Duration::from_secs(300);

/// The follow a restarter works for: the follower, and which follow of which object's record
/// (its task's generation), for which StatefulSet (`namespace/name`).
pub(super) struct Follow<'a> {
    pub(super) follower: &'a VolumeFollower,
    pub(super) kind: Kind,
    pub(super) key: &'a Key,
    pub(super) generation: u64,
    pub(super) statefulset: &'a str,
}

impl Follow<'_> {
    fn names(&self) -> (&str, &str) {
        self.statefulset
            .split_once('/')
            .unwrap_or(("", self.statefulset))
    }

    /// A claim's `change`, with the claims as `tracker` has them: whether the record holds it.
    async fn changed(&self, tracker: &Tracker, change: &Change) -> bool {
        self.follower
            .changed(
                self.kind,
                self.key,
                self.generation,
                self.statefulset,
                tracker.volumes(),
                change,
            )
            .await
    }

    async fn publish(&self, event: impl FnOnce(&str) -> crate::records::events::RevisionEvent) {
        self.follower
            .publish(self.kind, self.key, self.generation, event)
            .await;
    }
}

/// The restarts of one followed StatefulSet's pods.
pub(super) struct Restarter {
    /// The pods' label selector (the StatefulSet's `matchLabels`).
    selector: Option<String>,
    set: Option<StatefulSet>,
    set_listed: bool,
    pods: BTreeMap<String, Pod>,
    pods_listed: bool,
    /// When the next attempt at a held-back eviction is due, and the wait after it.
    retry_at: Option<tokio::time::Instant>,
    backoff: Duration,
    /// Pods whose hold by a budget was announced (one Event per hold).
    blocked: BTreeSet<String>,
    /// The last reason to wait, logged once per change.
    waiting: Option<String>,
}

/// The updates of a restarter's watches.
pub(super) type Updates = BoxStream<'static, Update>;

impl Restarter {
    /// A restarter of `follow`'s StatefulSet, and its watches.
    pub(super) fn start(follow: &Follow<'_>, selector: Option<&str>) -> (Self, Updates) {
        let config = &follow.follower.inner.config;
        let (namespace, name) = follow.names();
        let updates = pods::watch(config.client.clone(), namespace, name, selector).boxed();
        let restarter = Restarter {
            selector: selector.map(str::to_string),
            set: None,
            set_listed: false,
            pods: BTreeMap::new(),
            pods_listed: false,
            retry_at: None,
            backoff: config.restart_retry,
            blocked: BTreeSet::new(),
            waiting: None,
        };
        (restarter, updates)
    }

    /// Whether a restart must be looked at for `tracker`'s claims: one of them waits for a
    /// restart, or one is being restarted.
    pub(super) fn needed(tracker: &Tracker) -> bool {
        tracker.volumes().iter().any(|v| {
            v.state == crate::volume::VolumeState::FilesystemPending || v.restart.is_some()
        })
    }

    /// Takes what a watch delivered.
    pub(super) fn update(&mut self, follow: &Follow<'_>, update: Update) {
        match update {
            Update::Set(s) => self.set = Some(*s),
            Update::SetGone => self.set = None,
            Update::Pod(p) => {
                let name = p.metadata.name.clone().unwrap_or_default();
                self.pods.insert(name, *p);
            }
            Update::PodGone(name) => {
                self.pods.remove(&name);
            }
            Update::Listed { pods } => {
                if pods {
                    self.pods_listed = true;
                } else {
                    self.set_listed = true;
                }
            }
            Update::Trouble(why) => {
                tracing::warn!(statefulset = %follow.statefulset, error = %why,
                    "watching for the restart of pods; retrying");
            }
        }
    }

    /// When a held-back eviction is tried again.
    pub(super) fn retry_at(&self) -> Option<tokio::time::Instant> {
        self.retry_at
    }

    /// Whether the eviction of `pod` under `uid`, decided on the watched copies, still holds
    /// against the StatefulSet and its pods as the server has them now (the watches may lag a
    /// rolling update or a pod gone unready): read once, decided again. The copies are replaced
    /// with what was read.
    async fn confirmed(
        &mut self,
        follow: &Follow<'_>,
        tracker: &Tracker,
        pod: &str,
        uid: &str,
    ) -> bool {
        let config = &follow.follower.inner.config;
        let (namespace, name) = follow.names();
        let read = pods::read(
            &config.client,
            namespace,
            name,
            self.selector.as_deref(),
            config.call_timeout,
        )
        .await;
        let (set, listed) = match read {
            Ok(Some(found)) => found,
            Ok(None) => {
                self.set = None;
                return false;
            }
            Err(e) => {
                tracing::warn!(statefulset = %follow.statefulset, error = %e,
                    "could not read the StatefulSet and its pods before an eviction; retrying");
                return false;
            }
        };
        let view = pods::set_view(&set, &listed);
        self.set = Some(set);
        self.pods = listed
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
            .collect();
        match next(name, &view, &tracker.volumes()) {
            Next::Evict { pod: p, uid: u, .. } if p == pod && u == uid => true,
            other => {
                tracing::info!(statefulset = %follow.statefulset, pod, next = ?other,
                    "the StatefulSet changed since it was watched: not evicting now");
                false
            }
        }
    }

    /// Takes the next step, if the watches have listed and nothing holds it: records and
    /// sends an eviction, or marks the claims of a pod already evicted `restarted`.
    pub(super) async fn step(&mut self, follow: &Follow<'_>, tracker: &mut Tracker) {
        if !self.set_listed || !self.pods_listed {
            return;
        }
        let (namespace, name) = follow.names();
        let view = match &self.set {
            Some(set) => pods::set_view(set, self.pods.values()),
            // Gone: nothing of it is restarted.
            None => return,
        };
        match next(name, &view, &tracker.volumes()) {
            Next::Idle => self.waiting = None,
            Next::Wait(why) => {
                if self.waiting.as_deref() != Some(why.as_str()) {
                    tracing::info!(statefulset = %follow.statefulset, reason = %why,
                        "restart-for-resize waits");
                    self.waiting = Some(why);
                }
            }
            Next::Evicted { pod, claims } => {
                tracing::info!(statefulset = %follow.statefulset, pod = %pod,
                    "the pod recorded for a restart is already gone or replaced: it was evicted");
                self.evicted(follow, tracker, &pod, &claims, None).await;
            }
            Next::Evict { pod, uid, claims } => {
                self.waiting = None;
                if self
                    .retry_at
                    .is_some_and(|at| tokio::time::Instant::now() < at)
                {
                    return;
                }
                if !self.confirmed(follow, tracker, &pod, &uid).await {
                    let wait = follow.follower.inner.config.restart_retry;
                    self.retry_at = Some(tokio::time::Instant::now() + wait);
                    return;
                }
                let decided = Restart {
                    pod: pod.clone(),
                    uid: uid.clone(),
                    evicted_at: None,
                };
                let message = format!(
                    "restarting pod {pod} (flux-converger.io/restart-for-resize) so the node \
                     grows the file system when it mounts the claim again"
                );
                // The journal first: the claims say which pod (by uid) is being restarted
                // before the eviction is sent, and it is sent only once that is recorded.
                let now = jiff::Timestamp::now();
                let changes: Vec<Change> = claims
                    .iter()
                    .filter_map(|c| {
                        tracker.set_restart(c, Some(decided.clone()), Some(message.clone()), now)
                    })
                    .collect();
                for change in &changes {
                    if !follow.changed(tracker, change).await {
                        tracing::warn!(statefulset = %follow.statefulset, pod = %pod,
                            "the restart is not recorded: not evicting");
                        self.held(follow.follower.inner.config.restart_retry);
                        return;
                    }
                }
                let config = &follow.follower.inner.config;
                tracing::info!(statefulset = %follow.statefulset, pod = %pod, uid = %uid,
                    claims = %claims.join(","), "evicting the pod to finish the file system resize");
                let answer =
                    pods::evict(&config.client, namespace, &pod, &uid, config.call_timeout).await;
                match answer {
                    Ok(()) => {
                        self.evicted(follow, tracker, &pod, &claims, Some(&uid))
                            .await
                    }
                    // Its successor, or nothing, holds the name: it was evicted already.
                    Err(e) if e.code() == Some(404) || is_uid_mismatch(&e) => {
                        tracing::info!(statefulset = %follow.statefulset, pod = %pod,
                            answer = %e, "the pod was replaced or is gone: it was evicted");
                        self.evicted(follow, tracker, &pod, &claims, None).await;
                    }
                    Err(e) if e.code() == Some(429) => {
                        let why = e.server_text();
                        tracing::info!(statefulset = %follow.statefulset, pod = %pod,
                            answer = %why, "a PodDisruptionBudget holds the eviction back: waiting");
                        let message = format!(
                            "restarting pod {pod} (flux-converger.io/restart-for-resize) waits: \
                             the API server answered 429: {why}; retried"
                        );
                        let now = jiff::Timestamp::now();
                        for c in &claims {
                            if let Some(change) = tracker.set_restart(
                                c,
                                Some(decided.clone()),
                                Some(message.clone()),
                                now,
                            ) {
                                follow.changed(tracker, &change).await;
                            }
                        }
                        if self.blocked.insert(pod.clone()) {
                            let (statefulset, claims) =
                                (follow.statefulset.to_string(), claims.clone());
                            follow
                                .publish(move |revision| {
                                    volume_event::restart_event(
                                        revision,
                                        &statefulset,
                                        &pod,
                                        &claims,
                                        Some(&why),
                                    )
                                })
                                .await;
                        }
                        let wait = self.backoff;
                        self.held(wait);
                    }
                    Err(e) => {
                        tracing::warn!(statefulset = %follow.statefulset, pod = %pod, error = %e,
                            "could not evict the pod; retrying");
                        let wait = self.backoff;
                        self.held(wait);
                    }
                }
            }
        }
    }

    /// Waits `wait` before the next attempt, and longer after it.
    fn held(&mut self, wait: Duration) {
        self.retry_at = Some(tokio::time::Instant::now() + wait);
        self.backoff = (wait * 2).min(MAX_RETRY);
    }

    /// `pod` was evicted (`uid`: by this call): its claims are `restarted` from now, with the
    /// Event saying so.
    async fn evicted(
        &mut self,
        follow: &Follow<'_>,
        tracker: &mut Tracker,
        pod: &str,
        claims: &[String],
        uid: Option<&str>,
    ) {
        let now = jiff::Timestamp::now();
        let recorded = tracker
            .volumes()
            .iter()
            .filter(|v| claims.contains(&v.claim))
            .find_map(|v| v.restart.clone());
        let restart = Restart {
            pod: pod.to_string(),
            uid: uid
                .map(str::to_string)
                .or(recorded.map(|r| r.uid))
                .unwrap_or_default(),
            evicted_at: Some(now.to_string()),
        };
        let message = format!(
            "pod {pod} evicted (flux-converger.io/restart-for-resize): the node grows the file \
             system when its successor mounts the claim"
        );
        for c in claims {
            if let Some(change) =
                tracker.set_restart(c, Some(restart.clone()), Some(message.clone()), now)
            {
                follow.changed(tracker, &change).await;
            }
        }
        self.blocked.remove(pod);
        self.retry_at = None;
        self.backoff = follow.follower.inner.config.restart_retry;
        let (statefulset, claims, pod) = (
            follow.statefulset.to_string(),
            claims.to_vec(),
            pod.to_string(),
        );
        follow
            .publish(move |revision| {
                volume_event::restart_event(revision, &statefulset, &pod, &claims, None)
            })
            .await;
    }
}
