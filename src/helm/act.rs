//! When the converger may act on a HelmRelease: only once helm-controller has given up on the
//! upgrade it could not make (the StatefulSet immutable-field error) and nothing else is in
//! flight. Pure: the HelmRelease and the newest release record in, the verdict out; every
//! "not now" carries why, for `/status`.
//!
//! What helm-controller writes, from its `internal/reconcile`: a failed upgrade marks
//! `Released=False` and, summarised, `Ready=False`, both with reason `UpgradeFailed` and message
//! `Helm upgrade failed for release <ns>/<name> with chart <chart>@<version>: <Helm's error>`,
//! and counts `status.upgradeFailures`. With its remediation retries used up (by default none are
//! configured) and no last-failure remediation, it marks `Stalled=True` reason `RetriesExceeded`
//! (`Failed to upgrade after N attempt(s)`), deletes `Reconciling` and stops until something
//! changes. While it still retries or remediates (a rollback, an uninstall), `Reconciling` is
//! True or a remediation is due: acting then would race it.

use super::helmrelease::{FORCE_REQUEST_ANNOTATION, HelmRelease, RECONCILE_REQUEST_ANNOTATION};
use super::release::{Action, ReleaseInfo, Status};

/// The text of the API server's refusal that wedges the upgrade: the same from client-side
/// apply (`cannot patch "web" with kind StatefulSet: ...`) and server-side apply
/// (`server-side apply failed for object ...`).
pub const IMMUTABLE_ERROR: &str = "Forbidden: updates to statefulset spec";
/// helm-controller's reason for a failed upgrade (`v2.UpgradeFailedReason`).
pub const UPGRADE_FAILED: &str = "UpgradeFailed";
/// The reason of `Stalled=True` once retries are used up.
pub const RETRIES_EXCEEDED: &str = "RetriesExceeded";

/// The verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Act {
    /// Converge the StatefulSets of this record version, then hand back to helm-controller.
    Converge { version: i64 },
    /// Do nothing now, for this reason.
    Wait(Why),
}

/// Why the converger does not act (yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    Suspended,
    /// helm-controller has not reconciled the current generation yet.
    NotObserved {
        generation: i64,
        observed: i64,
    },
    /// `Reconciling=True`: helm-controller is working on it (or retrying after an interval).
    Reconciling {
        message: String,
    },
    /// `reconcile.fluxcd.io/requestedAt` not handled yet.
    ReconcileRequested {
        requested: String,
    },
    /// `reconcile.fluxcd.io/forceAt` not handled yet.
    ForceRequested {
        requested: String,
    },
    /// `spec.storageNamespace` changed and helm-controller has not moved the release yet.
    StorageMoving {
        from: String,
        to: String,
    },
    NoReadyCondition,
    Ready,
    ReadyUnknown {
        reason: String,
    },
    /// `Ready=False` for a reason other than a failed upgrade.
    OtherFailure {
        reason: String,
    },
    /// A failed upgrade, but not on the StatefulSet immutable-field error.
    NotImmutableError,
    /// helm-controller will retry the upgrade (`spec.upgrade.strategy: RetryOnFailure`).
    RetryStrategy,
    /// Retries remain: helm-controller will remediate and try again.
    RetriesRemain {
        failures: i64,
        retries: i64,
    },
    /// The last failure will be remediated (`remediateLastFailure`): a rollback or uninstall.
    RemediationPending,
    /// `Stalled=True` for another reason than used-up retries (e.g. `MissingRollbackTarget`).
    StalledOther {
        reason: String,
    },
    NoRecord,
    /// The newest record is another release's.
    RecordOfAnotherRelease {
        name: String,
    },
    /// Another Helm action holds the release.
    RecordPending {
        version: i64,
        status: Status,
    },
    RecordNotFailed {
        version: i64,
        status: Status,
    },
    RecordNotUpgrade {
        version: i64,
    },
    /// The newest record is not the one helm-controller last observed (`status.history`):
    /// something else ran Helm since.
    RecordNotInHistory {
        version: i64,
        history: Option<i64>,
    },
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Suspended => write!(f, "the HelmRelease is suspended"),
            Self::NotObserved {
                generation,
                observed,
            } => write!(
                f,
                "helm-controller has not reconciled generation {generation} yet (observed {observed})"
            ),
            Self::Reconciling { message } => {
                write!(
                    f,
                    "helm-controller is reconciling it (Reconciling=True: {message})"
                )
            }
            Self::ReconcileRequested { requested } => write!(
                f,
                "a reconcile request ({RECONCILE_REQUEST_ANNOTATION}: {requested}) is not handled yet"
            ),
            Self::ForceRequested { requested } => write!(
                f,
                "a force request ({FORCE_REQUEST_ANNOTATION}: {requested}) is not handled yet"
            ),
            Self::StorageMoving { from, to } => write!(
                f,
                "the release storage moves from namespace {from} to {to}: helm-controller has not moved it yet"
            ),
            Self::NoReadyCondition => write!(f, "no Ready condition yet"),
            Self::Ready => write!(f, "Ready=True: nothing to converge"),
            Self::ReadyUnknown { reason } => {
                write!(
                    f,
                    "Ready=Unknown ({reason}): helm-controller is working on it"
                )
            }
            Self::OtherFailure { reason } => write!(
                f,
                "Ready=False for reason {reason}, not {UPGRADE_FAILED}: not a failure a converge fixes"
            ),
            Self::NotImmutableError => write!(
                f,
                "the upgrade failed, but not on the StatefulSet immutable-field error ({IMMUTABLE_ERROR:?})"
            ),
            Self::RetryStrategy => write!(
                f,
                "spec.upgrade.strategy is RetryOnFailure: helm-controller retries the upgrade itself"
            ),
            Self::RetriesRemain { failures, retries } => write!(
                f,
                "{failures} failed upgrade(s) of {retries} retries: helm-controller will remediate and retry"
            ),
            Self::RemediationPending => write!(
                f,
                "helm-controller will remediate the last failure (spec.upgrade.remediation.remediateLastFailure)"
            ),
            Self::StalledOther { reason } => write!(
                f,
                "Stalled=True for reason {reason}, not {RETRIES_EXCEEDED}"
            ),
            Self::NoRecord => write!(f, "no release record found"),
            Self::RecordOfAnotherRelease { name } => {
                write!(f, "the newest record belongs to release {name:?}")
            }
            Self::RecordPending { version, status } => write!(
                f,
                "release record v{version} is {status}: another Helm action holds the release"
            ),
            Self::RecordNotFailed { version, status } => {
                write!(f, "release record v{version} is {status}, not failed")
            }
            Self::RecordNotUpgrade { version } => {
                write!(f, "release record v{version} is not a failed upgrade")
            }
            Self::RecordNotInHistory { version, history } => match history {
                Some(h) => write!(
                    f,
                    "release record v{version} is not the one helm-controller last observed (v{h}): Helm ran outside it"
                ),
                None => write!(
                    f,
                    "release record v{version} is not in the HelmRelease's status.history"
                ),
            },
        }
    }
}

/// The decision, in the order a person would check: the HelmRelease itself, then what
/// helm-controller said, then the record.
pub fn when_to_act(hr: &HelmRelease, newest: Option<&ReleaseInfo>) -> Act {
    match check(hr, newest) {
        Ok(version) => Act::Converge { version },
        Err(why) => Act::Wait(why),
    }
}

fn check(hr: &HelmRelease, newest: Option<&ReleaseInfo>) -> Result<i64, Why> {
    if hr.spec.suspend {
        return Err(Why::Suspended);
    }
    let default_status = Default::default();
    let status = hr.status.as_ref().unwrap_or(&default_status);
    let generation = hr.metadata.generation.unwrap_or(0);
    if status.observed_generation < generation {
        return Err(Why::NotObserved {
            generation,
            observed: status.observed_generation,
        });
    }
    if let Some(c) = hr.condition("Reconciling")
        && c.status == "True"
    {
        return Err(Why::Reconciling {
            message: c.message.clone(),
        });
    }
    outstanding(
        hr.annotation(RECONCILE_REQUEST_ANNOTATION),
        status.last_handled_reconcile_at.as_deref(),
    )
    .map_or(Ok(()), |requested| {
        Err(Why::ReconcileRequested { requested })
    })?;
    outstanding(
        hr.annotation(FORCE_REQUEST_ANNOTATION),
        status.last_handled_force_at.as_deref(),
    )
    .map_or(Ok(()), |requested| Err(Why::ForceRequested { requested }))?;
    if let Some(from) = status.storage_namespace.as_deref()
        && !from.is_empty()
        && from != hr.storage_namespace()
    {
        return Err(Why::StorageMoving {
            from: from.to_owned(),
            to: hr.storage_namespace().to_owned(),
        });
    }

    let ready = hr.condition("Ready").ok_or(Why::NoReadyCondition)?;
    match ready.status.as_str() {
        "True" => return Err(Why::Ready),
        "False" => {}
        _ => {
            return Err(Why::ReadyUnknown {
                reason: ready.reason.clone(),
            });
        }
    }
    if ready.reason != UPGRADE_FAILED {
        return Err(Why::OtherFailure {
            reason: ready.reason.clone(),
        });
    }
    if !ready.message.contains(IMMUTABLE_ERROR) {
        return Err(Why::NotImmutableError);
    }
    gave_up(hr, status)?;

    let record = newest.ok_or(Why::NoRecord)?;
    let release = hr.release_name();
    if record.name != release {
        return Err(Why::RecordOfAnotherRelease {
            name: record.name.clone(),
        });
    }
    if record.status.is_pending() {
        return Err(Why::RecordPending {
            version: record.version,
            status: record.status.clone(),
        });
    }
    if record.status != Status::Failed {
        return Err(Why::RecordNotFailed {
            version: record.version,
            status: record.status.clone(),
        });
    }
    let latest = hr.latest_snapshot();
    if latest.is_none_or(|s| s.version != record.version || s.name != record.name) {
        return Err(Why::RecordNotInHistory {
            version: record.version,
            history: latest.map(|s| s.version),
        });
    }
    let snapshot_says_upgrade = latest.and_then(|s| s.action.as_deref()) == Some("upgrade");
    if record.action() != Some(Action::Upgrade) && !snapshot_says_upgrade {
        return Err(Why::RecordNotUpgrade {
            version: record.version,
        });
    }
    Ok(record.version)
}

/// The request value when it is set and differs from the handled one.
fn outstanding(requested: Option<&str>, handled: Option<&str>) -> Option<String> {
    let requested = requested.filter(|r| !r.is_empty())?;
    (Some(requested) != handled).then(|| requested.to_owned())
}

/// Whether helm-controller has stopped on this failure: `Stalled=True` with `RetriesExceeded`,
/// or (it may not have written Stalled yet) its remediation for upgrades used up with nothing
/// left to remediate, as `actionForState` decides before it stalls.
fn gave_up(hr: &HelmRelease, status: &super::helmrelease::HelmReleaseStatus) -> Result<(), Why> {
    let upgrade = hr.spec.upgrade.clone().unwrap_or_default();
    if upgrade
        .strategy
        .as_ref()
        .is_some_and(|s| s.name == "RetryOnFailure")
    {
        return Err(Why::RetryStrategy);
    }
    if let Some(stalled) = hr.condition("Stalled")
        && stalled.status == "True"
    {
        return if stalled.reason == RETRIES_EXCEEDED {
            Ok(())
        } else {
            Err(Why::StalledOther {
                reason: stalled.reason.clone(),
            })
        };
    }
    let remediation = upgrade.remediation.unwrap_or_default();
    if !remediation.retries_exhausted(status.upgrade_failures) {
        return Err(Why::RetriesRemain {
            failures: status.upgrade_failures,
            retries: remediation.retries,
        });
    }
    if remediation.must_remediate_last_failure() {
        return Err(Why::RemediationPending);
    }
    Ok(())
}

/// What became of a hand-back (`requestedAt` and `forceAt` set to `token`): `None` while
/// helm-controller has not handled it (`status.lastHandledForceAt` is another value) or is
/// still at it (`Reconciling=True`, `Ready=Unknown`); else its answer, naming the release record
/// (`v<N>`) the upgrade wrote: `Applied` for `Ready=True`, `Failed` (with its message) for
/// `Ready=False`.
pub fn handed_back(
    hr: &HelmRelease,
    token: &str,
    newest: Option<&ReleaseInfo>,
) -> Option<HandBack> {
    let status = hr.status.as_ref()?;
    if status.last_handled_force_at.as_deref() != Some(token) {
        return None;
    }
    if hr
        .condition("Reconciling")
        .is_some_and(|c| c.status == "True")
    {
        return None;
    }
    let ready = hr.condition("Ready")?;
    let version = newest.map(|r| format!("v{}", r.version));
    match ready.status.as_str() {
        "True" => Some(HandBack::Applied { version }),
        "False" => Some(HandBack::Failed {
            version,
            message: ready.message.clone(),
            immutable: ready.reason == UPGRADE_FAILED && ready.message.contains(IMMUTABLE_ERROR),
        }),
        _ => None,
    }
}

/// helm-controller's answer to a hand-back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandBack {
    /// The upgrade went through (`Ready=True`): `version` is the record it wrote.
    Applied { version: Option<String> },
    /// It failed again; `immutable`: on the same StatefulSet error.
    Failed {
        version: Option<String>,
        message: String,
        immutable: bool,
    },
}

/// Whether a converge whose hand-back helm-controller's upgrade failed on the same
/// immutable-field error may run again: only once the HelmRelease's generation or the newest
/// release record's version differs from what that failure left (`failed_generation`, and
/// `failed_version`: the record the retried upgrade wrote). Anything else would converge, hand
/// back and fail in a loop.
pub fn retry_allowed(
    failed_generation: Option<i64>,
    failed_version: Option<&str>,
    generation: Option<i64>,
    newest_version: i64,
) -> bool {
    failed_generation != generation || failed_version != Some(format!("v{newest_version}").as_str())
}

#[cfg(test)]
mod tests;
