//! Handing a converged revision to Flux and watching what Flux does with it.
//!
//! `suspend`: the Kustomization is kept suspended between revisions; unsuspending it makes
//! kustomize-controller reconcile at once, and it is suspended again once Flux applied the
//! revision (or failed it, or the wait timed out). `reconcile`: the annotation
//! `reconcile.fluxcd.io/requestedAt` is set, as `flux reconcile kustomization` does. Both are
//! merge patches with field manager `flux-converger`, written with the service's identity.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};

use crate::cluster::{CallError, FIELD_MANAGER, with_deadline};
use crate::flux::objects::{Kustomization, KustomizationStatus};
use crate::model::{FluxOutcome, FluxResult};

/// Flux's reconcile request annotation.
pub const REQUESTED_AT_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";

/// Since when a Flux failure counts as Flux's answer to the hand-off (an earlier failure of
/// the same revision, from before the converge, does not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Since {
    /// Suspend mode: the generation the unsuspend produced.
    Generation(i64),
    /// Reconcile mode: the `requestedAt` token written.
    Token(String),
}

/// Flux's answer for `revision`, if it has given one: applied when `lastAppliedRevision` is the
/// revision; failed when `Ready=False` for an attempt of the revision made after the hand-off;
/// raced when Flux finished an attempt of another revision than both this one and the one it
/// had attempted before the hand-off (`attempted_before`).
pub fn flux_verdict(
    status: Option<&KustomizationStatus>,
    revision: &str,
    since: &Since,
    attempted_before: Option<&str>,
) -> Option<FluxResult> {
    let status = status?;
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    if status.last_applied_revision.as_deref() == Some(revision) {
        return Some(FluxResult {
            outcome: FluxOutcome::Applied,
            applied_revision: status.last_applied_revision.clone(),
            message: ready.and_then(|c| c.message.clone()),
            attempted_revision: None,
        });
    }
    let ready = ready?;
    let after = match since {
        Since::Generation(g) => {
            status
                .observed_generation
                .unwrap_or(0)
                .max(ready.observed_generation.unwrap_or(0))
                >= *g
        }
        Since::Token(t) => status.last_handled_reconcile_at.as_deref() == Some(t.as_str()),
    };
    let attempted = status.last_attempted_revision.as_deref();
    if attempted == Some(revision) {
        return (ready.status == "False" && after).then(|| FluxResult {
            outcome: FluxOutcome::Failed,
            applied_revision: status.last_applied_revision.clone(),
            message: ready.message.clone(),
            attempted_revision: None,
        });
    }
    // Another revision: only a finished attempt (Ready decided) of a revision other than the
    // one attempted before the hand-off counts, since Flux writes `lastAttemptedRevision` with
    // its verdict, and a status still showing the attempt from before is no answer at all.
    let other = attempted.filter(|a| !a.is_empty())?;
    let finished = ready.status == "True" || ready.status == "False";
    (finished && attempted != attempted_before).then(|| FluxResult {
        outcome: FluxOutcome::Raced,
        applied_revision: status.last_applied_revision.clone(),
        message: Some(format!(
            "Flux attempted {other} instead of the converged {revision}: {}",
            ready.message.as_deref().unwrap_or_default()
        )),
        attempted_revision: Some(other.to_string()),
    })
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

fn api(client: &kube::Client, namespace: &str) -> Api<Kustomization> {
    Api::namespaced(client.clone(), namespace)
}

/// Sets `spec.suspend`; returns the Kustomization as written (its new generation).
pub async fn set_suspend(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    suspend: bool,
    call_timeout: Duration,
) -> Result<Kustomization, CallError> {
    let patch = serde_json::json!({"spec": {"suspend": suspend}});
    with_deadline(
        call_timeout,
        if suspend {
            "merge patch of spec.suspend=true of"
        } else {
            "merge patch of spec.suspend=false of"
        },
        &format!("Kustomization {namespace}/{name}"),
        api(client, namespace).patch(name, &params(), &Patch::Merge(&patch)),
    )
    .await
}

/// Sets `reconcile.fluxcd.io/requestedAt` to `token`.
pub async fn request_reconcile(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    token: &str,
    call_timeout: Duration,
) -> Result<Kustomization, CallError> {
    let patch = serde_json::json!({"metadata": {"annotations": {REQUESTED_AT_ANNOTATION: token}}});
    with_deadline(
        call_timeout,
        "merge patch of the reconcile.fluxcd.io/requestedAt annotation of",
        &format!("Kustomization {namespace}/{name}"),
        api(client, namespace).patch(name, &params(), &Patch::Merge(&patch)),
    )
    .await
}

/// Whether Flux's status says it applied `revision` already.
pub fn applied_already(kustomization: &Kustomization, revision: &str) -> bool {
    kustomization
        .status
        .as_ref()
        .and_then(|s| s.last_applied_revision.as_deref())
        == Some(revision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flux::objects::Condition;

    fn status(
        applied: Option<&str>,
        attempted: Option<&str>,
        ready: &str,
        generation: i64,
        handled: Option<&str>,
    ) -> KustomizationStatus {
        KustomizationStatus {
            observed_generation: Some(generation),
            last_applied_revision: applied.map(Into::into),
            last_attempted_revision: attempted.map(Into::into),
            last_handled_reconcile_at: handled.map(Into::into),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: ready.into(),
                message: Some("msg".into()),
                ..Default::default()
            }],
        }
    }

    #[test]
    fn flux_verdict_by_table() {
        let r = "main@sha1:2";
        let g = Since::Generation(5);
        let t = Since::Token("tok".into());
        let cases = [
            // Applied, whatever the mode.
            (
                status(Some(r), Some(r), "True", 5, None),
                &g,
                Some(FluxOutcome::Applied),
            ),
            (
                status(Some(r), Some(r), "True", 1, None),
                &t,
                Some(FluxOutcome::Applied),
            ),
            // Still on the old revision.
            (
                status(Some("main@sha1:1"), Some("main@sha1:1"), "True", 5, None),
                &g,
                None,
            ),
            // Failed after the unsuspend.
            (
                status(Some("main@sha1:1"), Some(r), "False", 5, None),
                &g,
                Some(FluxOutcome::Failed),
            ),
            // A failure of the revision from before the hand-off does not count.
            (
                status(Some("main@sha1:1"), Some(r), "False", 4, None),
                &g,
                None,
            ),
            (
                status(Some("main@sha1:1"), Some(r), "False", 9, Some("old")),
                &t,
                None,
            ),
            (
                status(Some("main@sha1:1"), Some(r), "False", 9, Some("tok")),
                &t,
                Some(FluxOutcome::Failed),
            ),
            // Reconciling (Unknown) is no answer.
            (
                status(Some("main@sha1:1"), Some(r), "Unknown", 9, Some("tok")),
                &t,
                None,
            ),
            // Flux attempted a newer revision after the unsuspend: raced.
            (
                status(Some("main@sha1:1"), Some("main@sha1:3"), "False", 5, None),
                &g,
                Some(FluxOutcome::Raced),
            ),
            // ... and applied it: raced too (it is not the converged revision).
            (
                status(Some("main@sha1:3"), Some("main@sha1:3"), "True", 5, None),
                &g,
                Some(FluxOutcome::Raced),
            ),
            // The attempt from before the hand-off is no answer.
            (
                status(Some("main@sha1:1"), Some("main@sha1:1"), "False", 4, None),
                &g,
                None,
            ),
            // Still reconciling after the hand-off: no answer yet.
            (
                status(Some("main@sha1:1"), Some("main@sha1:1"), "Unknown", 5, None),
                &g,
                None,
            ),
            // Reconcile mode: Flux attempted another revision on its own (token not handled).
            (
                status(
                    Some("main@sha1:1"),
                    Some("main@sha1:3"),
                    "False",
                    9,
                    Some("old"),
                ),
                &t,
                Some(FluxOutcome::Raced),
            ),
        ];
        for (i, (s, since, expected)) in cases.into_iter().enumerate() {
            let got = flux_verdict(Some(&s), r, since, Some("main@sha1:1")).map(|f| f.outcome);
            assert_eq!(got, expected, "case {i}");
        }
        assert_eq!(flux_verdict(None, r, &g, None), None);
        let raced = flux_verdict(
            Some(&status(
                Some("main@sha1:1"),
                Some("main@sha1:3"),
                "False",
                5,
                None,
            )),
            r,
            &g,
            Some("main@sha1:1"),
        )
        .unwrap();
        assert_eq!(raced.attempted_revision.as_deref(), Some("main@sha1:3"));
    }
}
