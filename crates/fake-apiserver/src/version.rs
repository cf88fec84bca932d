//! Which server is emulated (`KubeVersion`) and how its simulated garbage collector behaves
//! (`GcMode`): plain settings every layer reads, from the per-type rules that differ between
//! versions to the controllers that finish deletions.

use std::time::Duration;

/// The Kubernetes version whose behaviour is emulated: each one a server the fixtures and the
/// conformance recordings were captured from (`tests/fixtures/v1.*`, `tests/fixtures/conformance`).
/// Ordered, so a rule that started in a version reads `version >= KubeVersion::V1_32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum KubeVersion {
    V1_28,
    V1_32,
    /// 1.36: the StatefulSet's pod template is validated (its mounts against the pod volumes and
    /// the claim templates) on create and update, `revisionHistoryLimit` is mutable (1.33),
    /// `serviceName` must be a DNS label, and several messages read otherwise.
    V1_36,
}

impl KubeVersion {
    /// Every emulated version, oldest first.
    pub const ALL: [KubeVersion; 3] = [KubeVersion::V1_28, KubeVersion::V1_32, KubeVersion::V1_36];

    pub fn minor(&self) -> u32 {
        match self {
            KubeVersion::V1_28 => 28,
            KubeVersion::V1_32 => 32,
            KubeVersion::V1_36 => 36,
        }
    }

    /// The version whose minor is `minor`, if it is emulated.
    pub fn of_minor(minor: u32) -> Option<KubeVersion> {
        Self::ALL.into_iter().find(|v| v.minor() == minor)
    }

    pub fn git_version(&self) -> &'static str {
        match self {
            KubeVersion::V1_28 => "v1.28.0",
            KubeVersion::V1_32 => "v1.32.6",
            KubeVersion::V1_36 => "v1.36.2",
        }
    }

    /// How this version serves VolumeAttributesClass (KEP-3751), `switched_on` saying whether
    /// the server was started with the `VolumeAttributesClass` feature gate and
    /// `--runtime-config=storage.k8s.io/v1beta1=true` (`FakeApiServer::enable_volume_attributes_class`).
    /// The gate (`pkg/features/kube_features.go`): alpha and off in 1.29, beta and still off by
    /// default in 1.31, GA and on in 1.34, locked on in 1.36; the beta API is in
    /// `storage.k8s.io/v1beta1`, a group version disabled by default like every beta API since
    /// 1.24 (`betaAPIGroupVersionsDisabledByDefault`). 1.28 predates the field itself.
    pub fn attributes_classes(&self, switched_on: bool) -> AttributesClasses {
        match self {
            KubeVersion::V1_28 => AttributesClasses::Absent,
            KubeVersion::V1_32 if switched_on => AttributesClasses::Beta,
            KubeVersion::V1_32 => AttributesClasses::Disabled,
            KubeVersion::V1_36 => AttributesClasses::Ga,
        }
    }
}

/// Whether and how the emulated server serves VolumeAttributesClass and lets a claim's
/// `spec.volumeAttributesClassName` change ([`KubeVersion::attributes_classes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttributesClasses {
    /// Before 1.29: the claim has no such field (the decoder drops it), no API.
    Absent,
    /// The gate off (1.29 to 1.33 by default): the field exists, but a claim that did not
    /// have a class does not get one (`DropDisabledFields`), an existing one may not change,
    /// and no VolumeAttributesClass API is served.
    Disabled,
    /// The beta switched on (1.31 to 1.33): `storage.k8s.io/v1beta1`; a Bound claim's class
    /// may change, not to nil or `""` once set.
    Beta,
    /// GA (1.34 and later): `storage.k8s.io/v1`; a Bound claim's class may change, to nil or
    /// `""` only while `status.currentVolumeAttributesClassName` is unset.
    Ga,
}

impl AttributesClasses {
    /// The feature gate is on: the class of a Bound claim may change.
    pub fn enabled(self) -> bool {
        matches!(self, AttributesClasses::Beta | AttributesClasses::Ga)
    }
}

/// How the simulated garbage collector (and the other finalizer-removing controllers) behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcMode {
    /// Finish deletions this long after they start (the real GC took ~0.15 s).
    After(Duration),
    /// Never remove a finalizer: deletions stay pending until the mode changes.
    Stuck,
}
