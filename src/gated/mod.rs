//! A gated object: a Flux object whose controller applies StatefulSets, and whose StatefulSets
//! the service converges before that controller applies them again. What every kind shares is
//! here, behind one trait, so the run, the index, the identity and the Events never name a
//! kind: how its gate annotations read ([`gating`]), as whom its writes are made, and how an
//! Event names it. What differs per kind is beside it: what the StatefulSets are rendered
//! from (a Kustomization's source artifact, `flux::render`; a HelmRelease's newest release
//! record, `helm::release`), how the object is handed back to its controller (the gate's
//! modes; `helm::act`), and what status says it is done.
//!
//! [`Kustomization`] is the first implementation, [`HelmRelease`] the second.

pub mod gating;

use crate::flux::objects::Kustomization;
use crate::flux::render::RenderedStatefulSet;
use crate::flux::render::resolve::Resolved;
use crate::helm::helmrelease::HelmRelease;
use crate::model::{GateMode, Key, Kind};
use gating::Gating;

/// What one run converges, whatever the kind: one revision's StatefulSets of one gated
/// object, under the identity its controller would use. A Kustomization's come from its
/// render, a HelmRelease's from its newest release record.
#[derive(Clone, Copy, Debug)]
pub struct Desired<'a> {
    /// The gated object (its key names its kind).
    pub owner: &'a Key,
    /// What is converged: the source's revision, or the release's version.
    pub revision: &'a str,
    pub statefulsets: &'a [RenderedStatefulSet],
    /// [`Gated::user`]: `None` acts as the service itself.
    pub user: Option<&'a str>,
}

impl<'a> Desired<'a> {
    /// What a resolved Kustomization revision converges: its render's StatefulSets, as the
    /// identity kustomize-controller would apply them with (`user`).
    pub fn of_render(resolved: &'a Resolved, owner: &'a Key, user: Option<&'a str>) -> Self {
        Desired {
            owner,
            revision: &resolved.revision,
            statefulsets: &resolved.rendered.statefulsets,
            user,
        }
    }
}

/// `system:serviceaccount:NS:SA`, the user a service account authenticates as.
pub fn service_account_user(namespace: &str, service_account: &str) -> String {
    format!("system:serviceaccount:{namespace}:{service_account}")
}

/// What the service reads of any gated object.
pub trait Gated: kube::Resource<DynamicType = ()> + Send + Sync {
    /// Which kind it is.
    const KIND: Kind;
    /// The gate modes its annotation may name (the others are refused as unknown values).
    const MODES: &'static [&'static str];

    /// `spec.suspend`: a person's (reconcile mode) or the gate's own (suspend mode).
    fn suspended(&self) -> bool;

    /// `spec.serviceAccountName`: whom its controller impersonates for its writes.
    fn service_account_name(&self) -> Option<&str>;

    /// The mode of an object without the gate annotation, given `--default-gate`.
    fn default_mode(default_gate: GateMode) -> GateMode;

    /// `namespace/name` as the model keys it.
    fn key(&self) -> Key {
        let meta = self.meta();
        Key::new(
            Self::KIND,
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    /// What its annotations (and `spec.suspend`) ask of the gate.
    fn gating(&self, default_gate: GateMode) -> Gating {
        Gating::parse_among(
            self.meta().annotations.as_ref(),
            self.suspended(),
            Self::default_mode(default_gate),
            Self::MODES,
        )
    }

    /// The identity its converges act as: `spec.serviceAccountName`, else
    /// `--default-service-account` (its controller's flag), impersonated; `None` for the
    /// service's own identity (neither is set). The gate's converges and the resume's check
    /// agree because both ask this.
    fn user(&self, default_service_account: Option<&str>) -> Option<String> {
        let namespace = self.meta().namespace.as_deref().unwrap_or_default();
        self.service_account_name()
            .or(default_service_account)
            .filter(|s| !s.is_empty())
            .map(|sa| service_account_user(namespace, sa))
    }
}

impl Gated for Kustomization {
    const KIND: Kind = Kind::KUSTOMIZATION;
    const MODES: &'static [&'static str] = GateMode::VALUES;

    fn suspended(&self) -> bool {
        self.spec.suspend
    }

    fn service_account_name(&self) -> Option<&str> {
        self.spec.service_account_name.as_deref()
    }

    fn default_mode(default_gate: GateMode) -> GateMode {
        default_gate
    }
}

/// A HelmRelease is gated only when it opts in (`flux-converger.io/gate: reconcile`): the
/// converge follows helm-controller's failed upgrade and hands back as `flux reconcile
/// --force` does, so only the reconcile mode applies and `--default-gate` does not.
impl Gated for HelmRelease {
    const KIND: Kind = Kind::HELM_RELEASE;
    const MODES: &'static [&'static str] = &["reconcile", "off"];

    fn suspended(&self) -> bool {
        self.spec.suspend
    }

    fn service_account_name(&self) -> Option<&str> {
        self.spec.service_account_name.as_deref()
    }

    fn default_mode(_default_gate: GateMode) -> GateMode {
        GateMode::Off
    }
}

#[cfg(test)]
mod tests {
    use super::gating::{GATE_ANNOTATION, HOLD_ANNOTATION, SUSPENDED_IN_FLUX};
    use super::*;
    use serde_json::json;

    fn meta(annotations: &[(&str, &str)]) -> serde_json::Value {
        let annotations: serde_json::Map<_, _> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        json!({"namespace": "team", "name": "db", "annotations": annotations})
    }

    fn kustomization(
        annotations: &[(&str, &str)],
        suspend: bool,
        sa: Option<&str>,
    ) -> Kustomization {
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": meta(annotations),
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "repo"}, "path": "./",
                     "prune": true, "suspend": suspend, "serviceAccountName": sa}
        }))
        .unwrap()
    }

    fn helmrelease(annotations: &[(&str, &str)], suspend: bool, sa: Option<&str>) -> HelmRelease {
        serde_json::from_value(json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": meta(annotations),
            "spec": {"suspend": suspend, "serviceAccountName": sa}
        }))
        .unwrap()
    }

    /// The same annotations read per kind: every mode and the default for a Kustomization,
    /// only an explicit `reconcile` for a HelmRelease.
    #[test]
    fn gating_per_kind_by_table() {
        let d = GateMode::Suspend;
        let unknown = |v: &str| Err(v.to_string());
        for (annotations, suspend, ks, hr) in [
            (vec![], false, Ok(GateMode::Suspend), Ok(GateMode::Off)),
            (
                vec![(GATE_ANNOTATION, "reconcile")],
                false,
                Ok(GateMode::Reconcile),
                Ok(GateMode::Reconcile),
            ),
            (
                vec![(GATE_ANNOTATION, "off")],
                false,
                Ok(GateMode::Off),
                Ok(GateMode::Off),
            ),
            (
                vec![(GATE_ANNOTATION, "suspend")],
                false,
                Ok(GateMode::Suspend),
                unknown("reconcile, off"),
            ),
            (
                vec![(GATE_ANNOTATION, "artifact")],
                false,
                Ok(GateMode::Artifact),
                unknown("reconcile, off"),
            ),
            (
                vec![(GATE_ANNOTATION, "yes")],
                false,
                unknown("suspend, reconcile, artifact, off"),
                unknown("reconcile, off"),
            ),
        ] {
            let k = kustomization(&annotations, suspend, None).gating(d);
            let h = helmrelease(&annotations, suspend, None).gating(d);
            for (kind, gating, expected) in [("Kustomization", k, ks), ("HelmRelease", h, hr)] {
                match (gating.mode(), expected) {
                    (Ok(mode), Ok(want)) => assert_eq!(mode, want, "{kind} {annotations:?}"),
                    (Err(message), Err(values)) => assert!(
                        message.ends_with(&format!("is not one of {values}")),
                        "{kind} {annotations:?}: {message}"
                    ),
                    (got, want) => panic!("{kind} {annotations:?}: {got:?}, expected {want:?}"),
                }
            }
        }
    }

    #[test]
    fn a_suspended_or_held_helmrelease_is_held() {
        let opted = [(GATE_ANNOTATION, "reconcile")];
        let suspended = helmrelease(&opted, true, None).gating(GateMode::Off);
        assert_eq!(suspended.hold.as_deref(), Some(SUSPENDED_IN_FLUX));
        let held = helmrelease(&[opted[0], (HOLD_ANNOTATION, "migrating")], false, None)
            .gating(GateMode::Off);
        assert_eq!(held.hold.as_deref(), Some("migrating"));
    }

    #[test]
    fn identity_by_table() {
        for (sa, default, expected) in [
            (
                Some("deployer"),
                Some("fallback"),
                Some("system:serviceaccount:team:deployer"),
            ),
            (
                None,
                Some("fallback"),
                Some("system:serviceaccount:team:fallback"),
            ),
            (Some(""), None, None),
            (None, None, None),
        ] {
            assert_eq!(
                kustomization(&[], false, sa).user(default).as_deref(),
                expected
            );
            assert_eq!(
                helmrelease(&[], false, sa).user(default).as_deref(),
                expected
            );
        }
        assert_eq!(
            helmrelease(&[], false, None).key(),
            Key::helm_release("team", "db")
        );
        assert_eq!(<HelmRelease as Gated>::KIND.as_str(), "HelmRelease");
    }
}
