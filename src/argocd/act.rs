//! When the converger may act on an Argo CD Application: only once Argo CD has stopped on the
//! StatefulSet immutable-field error and nothing is in flight. Pure: the Application, its gate
//! annotations and what the records remember in, the verdict out; every "not now" carries why,
//! for `/status`.
//!
//! What the application-controller writes (Argo CD 3.6, docs/argocd.md):
//! - a sync whose apply of a StatefulSet is refused ends `operationState.phase: Failed` with a
//!   `syncResult.resources[]` entry `{kind: StatefulSet, status: SyncFailed, message}` and the
//!   operation message `one or more objects failed to apply, reason: <message>`, in both apply
//!   modes (client-side apply's message carries kubectl's `error when patching "<file>": `
//!   prefix, server-side apply's is the bare API error), so the immutable-field text is matched
//!   as a substring, never as a prefix;
//! - while retries remain the phase stays `Running` with `finishedAt` set and the message
//!   `<msg>. Retrying attempt #N at <time>.`; the phase becomes `Failed` or `Error` only when the
//!   retries are used up (or the operation was terminated), and the controller then clears
//!   `.operation`. So "retries exhausted" is read as: `.operation` absent and the phase
//!   `Failed`/`Error`;
//! - under server-side diff no sync starts: a `ComparisonError` condition quotes the dry run's
//!   refusal (`... for resource StatefulSet/<name>: ...`, no namespace: `status.resources[]`
//!   has it); an explicit sync then ends `Error` with `ComparisonError: <that message>`.

use std::collections::BTreeSet;

use super::application::{
    Application, IN_CLUSTER_NAME, IN_CLUSTER_SERVER, REFRESH_ANNOTATION, Revision,
};
use crate::gated::Gated;
use crate::gated::gating::Gating;
use crate::model::{GateMode, Kind};

/// The text of the API server's refusal that stops the sync, in every apply mode and in the
/// server-side diff's dry run (derived from Argo CD's code, not observed: matched anywhere in a
/// message).
pub const IMMUTABLE_ERROR: &str = "updates to statefulset spec for fields other than";

/// The gate modes an Application's annotation may name: it only ever opts in.
pub const MODES: &[&str] = &["reconcile", "off"];

/// What an Application's annotations ask of the gate: `flux-converger.io/gate: reconcile` opts
/// in, any other mode is refused as an unknown value, `flux-converger.io/hold` holds it, and
/// `--default-gate` does not apply (an Application has no `spec.suspend`).
pub fn gating(app: &Application) -> Gating {
    app.gating(GateMode::Off)
}

/// An Application is gated only when it opts in (`flux-converger.io/gate: reconcile`), as a
/// HelmRelease is: the converge follows Argo CD's stopped sync and hands back with a sync, so
/// only the reconcile mode applies and `--default-gate` does not. It has no `spec.suspend`, and
/// its identity is not a field of its own ([`super::project::identity`]): `service_account_name`
/// is `None`, and the lane never asks [`Gated::user`] of it.
impl Gated for Application {
    const KIND: Kind = Kind::APPLICATION;
    const MODES: &'static [&'static str] = MODES;

    fn suspended(&self) -> bool {
        false
    }

    fn service_account_name(&self) -> Option<&str> {
        None
    }

    fn default_mode(_default_gate: GateMode) -> GateMode {
        GateMode::Off
    }
}

/// How the failure was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A sync ended `Failed`/`Error` on the StatefulSet (client-side or server-side apply, or an
    /// explicit sync under server-side diff).
    SyncFailed,
    /// A `ComparisonError` condition: server-side diff, no sync ever started.
    ComparisonError,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Shape::SyncFailed => "sync failed",
            Shape::ComparisonError => "ComparisonError",
        })
    }
}

/// A StatefulSet the failure names; the namespace is `None` when neither the sync result nor
/// `status.resources[]` says it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Named {
    pub namespace: Option<String>,
    pub name: String,
}

/// What Argo CD stopped on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub shape: Shape,
    /// `status.sync.revision(s)`: the revision that failed, the one the managed resources'
    /// `targetState` is of.
    pub revision: Revision,
    /// The StatefulSets the failure names.
    pub statefulsets: Vec<Named>,
    /// The operation message or the condition, as Argo CD wrote it.
    pub message: String,
}

/// The verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Act {
    /// Read the desired StatefulSets, converge them, then hand back.
    Converge(Failure),
    /// `status.sync.revision` is not the revision that failed: ask Argo CD for a refresh
    /// (`argocd.argoproj.io/refresh: normal`), then wait.
    Refresh {
        failed: Revision,
        compared: Revision,
    },
    /// Do nothing now, for this reason.
    Wait(Why),
}

/// What the records remember about an Application, as far as the decision needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Our last hand-back failed again on the same error, with the Application then so.
    pub failed_handback: Option<Fingerprint>,
    /// The refresh last asked for, for this failed revision while this one was compared.
    pub refresh_asked: Option<(Revision, Revision)>,
    /// Our last hand-back was answered `applied`, with the Application then so: a
    /// ComparisonError that still names the immutable field is the comparison from before the
    /// re-create, not refreshed yet (Argo CD refreshes after its sync, and at least every
    /// `timeout.reconciliation`).
    pub applied_handback: Option<Fingerprint>,
}

/// What identifies an Application's attempt: the revision compared and the spec. The CRD has no
/// status subresource, so `metadata.generation` moves with every status write and is no signal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    pub revision: Revision,
    pub spec_digest: String,
}

impl Fingerprint {
    pub fn of(app: &Application) -> Self {
        Fingerprint {
            revision: app.sync_revision(),
            spec_digest: app.spec_digest(),
        }
    }
}

/// Why the converger does not act (yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// No `flux-converger.io/gate: reconcile`.
    NotOptedIn,
    /// The gate annotation names something else (the message says what it may be).
    InvalidGate(String),
    /// `flux-converger.io/hold`, with its reason.
    Held(String),
    /// Both `spec.destination.server` and `.name` are set (Argo CD refuses such a spec).
    AmbiguousDestination,
    /// Not the cluster the service runs in.
    OtherDestination { server: String, name: String },
    /// `.operation` is set: a sync is requested or running.
    OperationInFlight,
    /// The operation is `Running` or `Terminating`.
    Running { phase: String },
    /// A failed attempt waits for its retry (`Running` with `finishedAt`).
    RetriesLeft { retry_count: i64, message: String },
    /// `argocd.argoproj.io/refresh` is set: Argo CD has not refreshed yet.
    RefreshPending { value: String },
    /// No sync failed and no comparison error.
    NothingFailed,
    /// The last sync succeeded.
    Succeeded,
    /// A sync failed on something else.
    OtherFailure { phase: String, message: String },
    /// A comparison error on something else.
    OtherComparisonError { message: String },
    /// The failed StatefulSet is in sync now (someone fixed it by hand).
    AlreadySynced,
    /// The revision moved since the failure and the refresh asked for did not bring it back.
    RevisionMoved {
        failed: Revision,
        compared: Revision,
    },
    /// No revision compared yet.
    NoRevision,
    /// Our hand-back failed on the same error and neither the revision nor the spec changed.
    SameFailure { revision: Revision },
    /// Our hand-back of this revision and spec was applied; the ComparisonError is from
    /// before it.
    AppliedNotCompared { revision: Revision },
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotOptedIn => write!(
                f,
                "not opted in (annotation flux-converger.io/gate: reconcile)"
            ),
            Self::InvalidGate(message) => f.write_str(message),
            Self::Held(reason) => write!(f, "held: {reason}"),
            Self::AmbiguousDestination => write!(
                f,
                "spec.destination sets both server and name: Argo CD refuses such a destination"
            ),
            Self::OtherDestination { server, name } => {
                let target = if server.is_empty() {
                    format!("name {name:?}")
                } else {
                    format!("server {server:?}")
                };
                write!(
                    f,
                    "the destination ({target}) is not the cluster the service runs in (server {IN_CLUSTER_SERVER} or name {IN_CLUSTER_NAME})"
                )
            }
            Self::OperationInFlight => write!(f, "an operation is in flight (.operation is set)"),
            Self::Running { phase } => write!(f, "the operation is {phase}"),
            Self::RetriesLeft {
                retry_count,
                message,
            } => write!(
                f,
                "Argo CD retries the sync (retry {retry_count}): {message}"
            ),
            Self::RefreshPending { value } => write!(
                f,
                "a refresh ({REFRESH_ANNOTATION}: {value}) is not done yet"
            ),
            Self::NothingFailed => write!(f, "no failed sync and no comparison error"),
            Self::Succeeded => write!(f, "the last sync succeeded"),
            Self::OtherFailure { phase, message } => write!(
                f,
                "the sync ended {phase}, not on the StatefulSet immutable-field error: {message}"
            ),
            Self::OtherComparisonError { message } => write!(
                f,
                "a ComparisonError, not on the StatefulSet immutable-field error: {message}"
            ),
            Self::AlreadySynced => write!(f, "the sync failed, but the Application is Synced now"),
            Self::RevisionMoved { failed, compared } => write!(
                f,
                "the sync failed at revision {failed}, Argo CD compares {compared} now: its next sync decides"
            ),
            Self::NoRevision => write!(f, "Argo CD has not compared a revision yet"),
            Self::AppliedNotCompared { revision } => write!(
                f,
                "Argo CD applied the hand-back of revision {revision}; its ComparisonError is from before the re-create: waiting for its next comparison"
            ),
            Self::SameFailure { revision } => write!(
                f,
                "the hand-back failed on the same error at revision {revision}: waiting for a new revision or a changed spec"
            ),
        }
    }
}

/// The decision, in the order a person would check: the gate, the destination, what is in
/// flight, what failed, the revision, the memory.
pub fn when_to_act(app: &Application, gating: &Gating, memory: &Memory) -> Act {
    match check(app, gating, memory) {
        Ok(failure) => Act::Converge(failure),
        Err(Stop::Wait(why)) => Act::Wait(why),
        Err(Stop::Refresh { failed, compared }) => Act::Refresh { failed, compared },
    }
}

enum Stop {
    Wait(Why),
    Refresh {
        failed: Revision,
        compared: Revision,
    },
}

impl From<Why> for Stop {
    fn from(why: Why) -> Self {
        Stop::Wait(why)
    }
}

fn check(app: &Application, gating: &Gating, memory: &Memory) -> Result<Failure, Stop> {
    match gating.mode() {
        Err(message) => return Err(Why::InvalidGate(message).into()),
        Ok(GateMode::Reconcile) => {}
        Ok(_) => return Err(Why::NotOptedIn.into()),
    }
    if let Some(reason) = &gating.hold {
        return Err(Why::Held(reason.clone()).into());
    }
    in_cluster(app)?;

    let state = app.operation_state();
    if let Some(state) = state.filter(|s| s.retry_pending()) {
        return Err(Why::RetriesLeft {
            retry_count: state.retry_count,
            message: state.message.clone(),
        }
        .into());
    }
    if app.operation_requested() {
        return Err(Why::OperationInFlight.into());
    }
    if let Some(state) = state.filter(|s| matches!(s.phase.as_str(), "Running" | "Terminating")) {
        return Err(Why::Running {
            phase: state.phase.clone(),
        }
        .into());
    }
    if let Some(value) = app.annotation(REFRESH_ANNOTATION) {
        return Err(Why::RefreshPending {
            value: value.to_owned(),
        }
        .into());
    }

    let failed_sync = state.filter(|s| matches!(s.phase.as_str(), "Failed" | "Error"));
    let immutable_sync = failed_sync.filter(|s| {
        s.message.contains(IMMUTABLE_ERROR)
            || s.sync_result
                .iter()
                .flat_map(|r| &r.resources)
                .any(|r| is_statefulset(&r.group, &r.kind) && r.message.contains(IMMUTABLE_ERROR))
    });
    let comparison = app
        .conditions()
        .iter()
        .find(|c| c.type_ == "ComparisonError" && c.message.contains(IMMUTABLE_ERROR));
    let compared = app.sync_revision();

    let failure = if let Some(state) = immutable_sync {
        if app.sync_status() == "Synced" {
            return Err(Why::AlreadySynced.into());
        }
        let mut named: BTreeSet<Named> = state
            .sync_result
            .iter()
            .flat_map(|r| &r.resources)
            .filter(|r| {
                is_statefulset(&r.group, &r.kind)
                    && r.status == "SyncFailed"
                    && r.message.contains(IMMUTABLE_ERROR)
            })
            .map(|r| Named {
                namespace: Some(r.namespace.clone()).filter(|n| !n.is_empty()),
                name: r.name.clone(),
            })
            .collect();
        if named.is_empty() {
            named = names_in(&state.message)
                .into_iter()
                .flat_map(|name| locate(app, name))
                .collect();
        }
        let failed = state.revision();
        if !failed.is_empty() && failed != compared {
            if memory.refresh_asked.as_ref() == Some(&(failed.clone(), compared.clone())) {
                return Err(Why::RevisionMoved { failed, compared }.into());
            }
            return Err(Stop::Refresh { failed, compared });
        }
        Failure {
            shape: Shape::SyncFailed,
            revision: compared.clone(),
            statefulsets: named.into_iter().collect(),
            message: state.message.clone(),
        }
    } else if let Some(condition) = comparison {
        if memory
            .applied_handback
            .as_ref()
            .is_some_and(|f| *f == Fingerprint::of(app))
        {
            return Err(Why::AppliedNotCompared { revision: compared }.into());
        }
        Failure {
            shape: Shape::ComparisonError,
            revision: compared.clone(),
            statefulsets: names_in(&condition.message)
                .into_iter()
                .flat_map(|name| locate(app, name))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            message: condition.message.clone(),
        }
    } else if let Some(state) = failed_sync {
        return Err(Why::OtherFailure {
            phase: state.phase.clone(),
            message: state.message.clone(),
        }
        .into());
    } else if let Some(c) = app
        .conditions()
        .iter()
        .find(|c| c.type_ == "ComparisonError")
    {
        return Err(Why::OtherComparisonError {
            message: c.message.clone(),
        }
        .into());
    } else if state.is_some_and(|s| s.phase == "Succeeded") {
        return Err(Why::Succeeded.into());
    } else {
        return Err(Why::NothingFailed.into());
    };

    if failure.revision.is_empty() {
        return Err(Why::NoRevision.into());
    }
    if memory
        .failed_handback
        .as_ref()
        .is_some_and(|f| *f == Fingerprint::of(app))
    {
        return Err(Why::SameFailure {
            revision: failure.revision,
        }
        .into());
    }
    Ok(failure)
}

/// Whether the destination is the cluster Argo CD (and so the service) runs in.
fn in_cluster(app: &Application) -> Result<(), Why> {
    let d = &app.spec.destination;
    match (d.server.as_str(), d.name.as_str()) {
        (server, name) if !server.is_empty() && !name.is_empty() => Err(Why::AmbiguousDestination),
        (IN_CLUSTER_SERVER, "") | ("", IN_CLUSTER_NAME) => Ok(()),
        (server, name) => Err(Why::OtherDestination {
            server: server.to_owned(),
            name: name.to_owned(),
        }),
    }
}

fn is_statefulset(group: &str, kind: &str) -> bool {
    kind == "StatefulSet" && (group == "apps" || group.is_empty())
}

/// The StatefulSet names a message quotes: the API error's `StatefulSet.apps "<name>" is
/// invalid` and the server-side diff's `for resource StatefulSet/<name>:`.
pub fn names_in(message: &str) -> BTreeSet<&str> {
    let mut names = BTreeSet::new();
    for (i, _) in message.match_indices("StatefulSet.apps \"") {
        let rest = &message[i + "StatefulSet.apps \"".len()..];
        if let Some(end) = rest.find('"')
            && rest[end..].starts_with("\" is invalid")
        {
            names.insert(&rest[..end]);
        }
    }
    for (i, _) in message.match_indices("for resource StatefulSet/") {
        let rest = &message[i + "for resource StatefulSet/".len()..];
        if let Some(end) = rest.find(':') {
            names.insert(&rest[..end]);
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// The StatefulSets of `status.resources[]` with that name: the namespace(s) a message without
/// one means; one without a namespace when none is listed.
fn locate(app: &Application, name: &str) -> Vec<Named> {
    let found: Vec<Named> = app
        .resources()
        .iter()
        .filter(|r| is_statefulset(&r.group, &r.kind) && r.name == name)
        .map(|r| Named {
            namespace: Some(r.namespace.clone()).filter(|n| !n.is_empty()),
            name: name.to_owned(),
        })
        .collect();
    if found.is_empty() {
        vec![Named {
            namespace: None,
            name: name.to_owned(),
        }]
    } else {
        found
    }
}

#[cfg(test)]
mod tests;
