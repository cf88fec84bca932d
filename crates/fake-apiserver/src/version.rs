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
}

/// How the simulated garbage collector (and the other finalizer-removing controllers) behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcMode {
    /// Finish deletions this long after they start (the real GC took ~0.15 s).
    After(Duration),
    /// Never remove a finalizer: deletions stay pending until the mode changes.
    Stuck,
}
