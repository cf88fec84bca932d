//! The pure decision for one StatefulSet: `Plan` or `Refusal` (DESIGN.md §2).
//!
//! Interface shared by `converge` and the `plan` command; the body is issue #2's.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use serde::Serialize;

use crate::quantity::Quantity;

/// What converging one StatefulSet takes. Serialises to the `plan -o json` contract.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub namespace: String,
    pub name: String,
    /// Whether the StatefulSet must be orphan-deleted and re-applied (a template grew).
    pub recreate: bool,
    pub grown: Vec<TemplateGrowth>,
    /// Claims to grow, in claim-name order.
    pub resize: Vec<ClaimResize>,
    /// Claims that should grow but cannot yet (not Bound); reported, not refused.
    pub deferred: Vec<DeferredClaim>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TemplateGrowth {
    pub template: String,
    pub from: Quantity,
    pub to: Quantity,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimResize {
    pub claim: String,
    pub template: String,
    pub storage_class: String,
    pub from: Quantity,
    pub to: Quantity,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeferredClaim {
    pub claim: String,
    pub reason: String,
}

/// Stable refusal codes (DESIGN.md §2, §5).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalCode {
    Shrink,
    NotExpandable,
    TemplateChanged,
    OtherImmutable,
    /// The server-side dry run refused the object for a reason that is not immutability.
    Rejected,
}

/// Why a StatefulSet will not be converged. Nothing has been written when one exists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{namespace}/{name}: {code}: {message}")]
pub struct Refusal {
    pub namespace: String,
    pub name: String,
    pub code: RefusalCode,
    pub message: String,
}

impl RefusalCode {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::Shrink => "shrink",
            RefusalCode::NotExpandable => "not-expandable",
            RefusalCode::TemplateChanged => "template-changed",
            RefusalCode::OtherImmutable => "other-immutable",
            RefusalCode::Rejected => "rejected",
        }
    }
}

impl std::fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Decides what converging `desired` over `live` takes.
///
/// `claims` are the claims of the StatefulSet's namespace (others are ignored), `classes`
/// all StorageClasses. `live == None` gives the empty plan.
pub fn decide(
    desired: &StatefulSet,
    live: Option<&StatefulSet>,
    claims: &[PersistentVolumeClaim],
    classes: &[StorageClass],
) -> Result<Plan, Refusal> {
    let _ = (desired, live, claims, classes);
    todo!("issue #2")
}
