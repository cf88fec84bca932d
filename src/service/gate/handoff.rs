//! Handing a converged revision to Flux and watching what Flux does with it.
//!
//! `suspend`: the Kustomization is kept suspended between revisions; unsuspending it makes
//! kustomize-controller reconcile at once, and it is suspended again once Flux applied the
//! revision (or failed it, or the wait timed out). `reconcile`: the annotation
//! `reconcile.fluxcd.io/requestedAt` is set, as `flux reconcile kustomization` does. Both are
//! merge patches with field manager `flux-converger`, written with the service's identity.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::await_condition;

use crate::cluster::{CallError, FIELD_MANAGER, with_deadline};
use crate::flux::objects::{Kustomization, KustomizationStatus};
use crate::service::record::{FluxOutcome, FluxResult, GateMode};

/// The annotation choosing a Kustomization's gate mode.
pub const GATE_ANNOTATION: &str = "flux-converger.io/gate";
/// Flux's reconcile request annotation.
pub const REQUESTED_AT_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";

/// The gate mode of `kustomization`: its annotation, else `default`. An unknown value is an
/// error naming it (handled as `off`, so a typo never gates a Kustomization by surprise).
pub fn gate_mode(kustomization: &Kustomization, default: GateMode) -> Result<GateMode, String> {
    let value = kustomization
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(GATE_ANNOTATION));
    match value {
        None => Ok(default),
        Some(v) => GateMode::parse(v.trim()).ok_or_else(|| {
            format!("annotation {GATE_ANNOTATION}: {v:?} is not one of suspend, reconcile, artifact, off")
        }),
    }
}

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
/// revision; failed when `Ready=False` for an attempt of the revision made after the hand-off.
pub fn flux_verdict(
    status: Option<&KustomizationStatus>,
    revision: &str,
    since: &Since,
) -> Option<FluxResult> {
    let status = status?;
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    if status.last_applied_revision.as_deref() == Some(revision) {
        return Some(FluxResult {
            outcome: FluxOutcome::Applied,
            applied_revision: status.last_applied_revision.clone(),
            message: ready.and_then(|c| c.message.clone()),
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
    (ready.status == "False"
        && status.last_attempted_revision.as_deref() == Some(revision)
        && after)
        .then(|| FluxResult {
            outcome: FluxOutcome::Failed,
            applied_revision: status.last_applied_revision.clone(),
            message: ready.message.clone(),
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

/// Waits (a watch) for Flux's answer for `revision`, at most `timeout`: applied, failed,
/// `timeout`, or `pending` when the watch itself failed (the message says why).
pub async fn observe(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    revision: &str,
    since: &Since,
    timeout: Duration,
) -> FluxResult {
    let condition = |ks: Option<&Kustomization>| {
        ks.and_then(|k| flux_verdict(k.status.as_ref(), revision, since))
            .is_some()
    };
    match tokio::time::timeout(
        timeout,
        await_condition(api(client, namespace), name, condition),
    )
    .await
    {
        Ok(Ok(Some(ks))) => {
            flux_verdict(ks.status.as_ref(), revision, since).unwrap_or(FluxResult {
                outcome: FluxOutcome::Pending,
                applied_revision: None,
                message: None,
            })
        }
        Ok(Ok(None)) => FluxResult {
            outcome: FluxOutcome::Pending,
            applied_revision: None,
            message: Some("the Kustomization was deleted while waiting for Flux".into()),
        },
        Ok(Err(e)) => FluxResult {
            outcome: FluxOutcome::Pending,
            applied_revision: None,
            message: Some(format!("watching the Kustomization failed: {e}")),
        },
        Err(_) => FluxResult {
            outcome: FluxOutcome::Timeout,
            applied_revision: None,
            message: Some(format!(
                "Flux did not apply {revision} within {}",
                humantime::format_duration(timeout)
            )),
        },
    }
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
        ];
        for (i, (s, since, expected)) in cases.into_iter().enumerate() {
            let got = flux_verdict(Some(&s), r, since).map(|f| f.outcome);
            assert_eq!(got, expected, "case {i}");
        }
        assert_eq!(flux_verdict(None, r, &g), None);
    }

    #[test]
    fn gate_mode_by_table() {
        let ks = |annotation: Option<&str>| {
            let mut k = Kustomization::new("apps", Default::default());
            if let Some(a) = annotation {
                k.metadata.annotations =
                    Some([(GATE_ANNOTATION.to_string(), a.to_string())].into());
            }
            k
        };
        for (annotation, default, expected) in [
            (None, GateMode::Suspend, Ok(GateMode::Suspend)),
            (Some("reconcile"), GateMode::Suspend, Ok(GateMode::Reconcile)),
            (Some("off"), GateMode::Reconcile, Ok(GateMode::Off)),
            (Some(" suspend "), GateMode::Off, Ok(GateMode::Suspend)),
            (Some("yes"), GateMode::Suspend, Err(
                "annotation flux-converger.io/gate: \"yes\" is not one of suspend, reconcile, artifact, off".to_string())),
        ] {
            assert_eq!(gate_mode(&ks(annotation), default), expected, "{annotation:?}");
        }
    }
}
