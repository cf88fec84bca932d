//! `converge --wait-for-volumes`: after the converge, follow the claims it grew (or recovered,
//! or moved to another VolumeAttributesClass) until every one is `grown` (and `modified`), one
//! line per state change, through the same watches and the same classification as the service
//! (`cluster::claims`, `volume::follow`). Exit 0 when all grew, 4 when one is `infeasible` (its
//! size or its class move: its end, git must change), 5 at the deadline.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;

use flux_converger::cluster::claims::{self, Update};
use flux_converger::converge::{ClaimAction, Report};
use flux_converger::volume::follow::Tracker;
use flux_converger::volume::{ModifyState, Volume, VolumeState};

use super::Exit;

/// The claims of one StatefulSet to follow.
pub struct Target {
    pub namespace: String,
    pub name: String,
    pub selector: Option<String>,
    pub volumes: Vec<Volume>,
}

impl Target {
    /// The claims `report` grew or recovered, with the selector of `desired`; `None` when
    /// there are none.
    pub fn of(desired: &StatefulSet, report: &Report) -> Option<Self> {
        let grown: Vec<&str> = report
            .claims
            .iter()
            .filter(|c| {
                matches!(
                    c.action,
                    ClaimAction::Resized | ClaimAction::Recovered | ClaimAction::Modified
                )
            })
            .map(|c| c.claim.as_str())
            .collect();
        let volumes: Vec<Volume> = report
            .volumes
            .iter()
            .filter(|v| grown.contains(&v.claim.as_str()))
            .cloned()
            .collect();
        (!volumes.is_empty()).then(|| Target {
            namespace: report.namespace.clone(),
            name: report.name.clone(),
            selector: claims::claim_selector(desired),
            volumes,
        })
    }
}

/// How the wait ended, and each target's claims as they stand then.
pub struct Waited {
    pub exit: Exit,
    pub volumes: Vec<Vec<Volume>>,
}

fn line(target: &Target, v: &Volume) -> String {
    let sizes = match (&v.requested, &v.capacity) {
        (Some(r), Some(c)) => format!(" ({r} requested, {c} held)"),
        (Some(r), None) => format!(" ({r} requested)"),
        _ => String::new(),
    };
    let message = v
        .message
        .as_deref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    let class = v
        .attributes
        .as_ref()
        .map(|a| {
            let said = a
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            format!("; VolumeAttributesClass {}: {}{said}", a.class, a.state)
        })
        .unwrap_or_default();
    format!(
        "StatefulSet {}/{}: claim {}: {}{sizes}{message}{class}",
        target.namespace, target.name, v.claim, v.state
    )
}

/// Follows `targets` until each claim is at an end state or `deadline` passes; `print` gets
/// one line per claim when the follow starts and per state change.
pub async fn wait(
    client: kube::Client,
    targets: &[Target],
    deadline: Duration,
    resize_timeout: Duration,
    mut print: impl FnMut(String),
) -> Waited {
    let now = jiff::Timestamp::now();
    let mut trackers: Vec<Tracker> = targets
        .iter()
        .map(|t| {
            let mut tracker = Tracker::new(resize_timeout);
            for v in &t.volumes {
                print(line(t, v));
                tracker.follow(v.clone(), now);
            }
            tracker
        })
        .collect();
    let streams = targets.iter().enumerate().map(|(i, t)| {
        claims::watch(client.clone(), &t.namespace, t.selector.as_deref())
            .map(move |u| (i, u))
            .boxed()
    });
    let mut updates = futures::stream::select_all(streams);
    let until = tokio::time::Instant::now() + deadline;
    // As the service's follower: an infeasible claim's `VolumeResizeFailed` Event (the driver's
    // words) is waited for a little once everything else is done.
    let mut linger: Option<tokio::time::Instant> = None;
    let exit = loop {
        if trackers.iter().all(Tracker::done) {
            if !trackers.iter().any(Tracker::awaits_failure_event) {
                break outcome(&trackers, Exit::Done);
            }
            let at = *linger.get_or_insert_with(|| tokio::time::Instant::now() + EVENT_GRACE);
            if tokio::time::Instant::now() >= at {
                break outcome(&trackers, Exit::Done);
            }
        }
        let next_stall = trackers
            .iter()
            .filter_map(Tracker::next_deadline)
            .min()
            .map(|at| {
                let left = at.duration_since(jiff::Timestamp::now());
                tokio::time::Instant::now() + Duration::try_from(left).unwrap_or(Duration::ZERO)
            })
            .unwrap_or(until)
            .min(linger.unwrap_or(until));
        tokio::select! {
            update = updates.next() => {
                let Some((i, update)) = update else {
                    break outcome(&trackers, Exit::VolumesTimedOut);
                };
                let now = jiff::Timestamp::now();
                let change = match update {
                    Update::Claim(c) => trackers[i].claim(*c, now),
                    Update::Event(claim, e) => trackers[i].event(&claim, e, now),
                    Update::Gone(claim) => {
                        if trackers[i].follows(&claim) {
                            print(format!(
                                "StatefulSet {}/{}: claim {claim}: deleted, no longer followed",
                                targets[i].namespace, targets[i].name
                            ));
                        }
                        trackers[i].gone(&claim);
                        None
                    }
                    Update::Trouble(why) => {
                        tracing::warn!(error = %why, "following the claims; retrying");
                        None
                    }
                };
                if let Some(change) = change {
                    print(line(&targets[i], &change.volume));
                }
            }
            () = tokio::time::sleep_until(next_stall.min(until)) => {
                if tokio::time::Instant::now() >= until {
                    break outcome(&trackers, Exit::VolumesTimedOut);
                }
                if linger.is_some_and(|at| tokio::time::Instant::now() >= at) {
                    break outcome(&trackers, Exit::Done);
                }
                let now = jiff::Timestamp::now();
                for (i, tracker) in trackers.iter_mut().enumerate() {
                    for change in tracker.tick(now) {
                        print(line(&targets[i], &change.volume));
                    }
                }
            }
        }
    };
    Waited {
        exit,
        volumes: trackers.iter().map(Tracker::volumes).collect(),
    }
}

/// 4 when any claim is `infeasible`, else `otherwise` (0 when all grew, 5 at the deadline).
fn outcome(trackers: &[Tracker], otherwise: Exit) -> Exit {
    let infeasible = trackers.iter().flat_map(Tracker::volumes).any(|v| {
        v.state == VolumeState::Infeasible
            || v.attributes
                .as_ref()
                .is_some_and(|a| a.state == ModifyState::Infeasible)
    });
    if infeasible {
        Exit::VolumeInfeasible
    } else {
        otherwise
    }
}

/// How long the wait lingers for an infeasible claim's `VolumeResizeFailed` Event.
const EVENT_GRACE: Duration = Duration::from_secs(10);
