//! The pure decision for one StatefulSet: `Plan` or `Refusal` (docs/converge.md).
//!
//! Interface shared by `converge` and the `plan` command.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::quantity::Quantity;
use crate::volume::{self, VolumeState};

/// What converging one StatefulSet takes. Serialises to the `plan -o json` contract.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub namespace: String,
    pub name: String,
    /// Whether the StatefulSet must be orphan-deleted and re-applied: an immutable field
    /// changed in a way the re-create carries (`changes`). A server that takes the change in
    /// place (the proof's dry run says so) is not re-created after all.
    pub recreate: bool,
    /// Each immutable change the re-create carries, in spec order; empty when nothing but
    /// claims must grow.
    pub changes: Vec<Change>,
    pub grown: Vec<TemplateGrowth>,
    /// Claims to grow, in claim-name order.
    pub resize: Vec<ClaimResize>,
    /// Claims that should grow but cannot yet (not Bound); reported, not refused.
    pub deferred: Vec<DeferredClaim>,
    /// Claims whose failed expansion is recovered from: their request is lowered to the size
    /// git declares again, above their capacity, before the re-create (docs/converge.md,
    /// *Recovering from a failed expansion*). Absent from the JSON when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recover: Vec<ClaimRecovery>,
}

/// The kinds of immutable change a re-create carries (the `plan -o json` `changes[].class`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeClass {
    /// A template's storage request grew.
    StorageGrown,
    PodManagementPolicy,
    /// Immutable before Kubernetes 1.33 only: re-created only where the server refuses it.
    RevisionHistoryLimit,
    /// A template's `metadata.labels` or `metadata.annotations`.
    ClaimMetadata,
    TemplateAdded,
}

impl ChangeClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeClass::StorageGrown => "storage-grown",
            ChangeClass::PodManagementPolicy => "pod-management-policy",
            ChangeClass::RevisionHistoryLimit => "revision-history-limit",
            ChangeClass::ClaimMetadata => "claim-metadata",
            ChangeClass::TemplateAdded => "template-added",
        }
    }
}

impl std::fmt::Display for ChangeClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One immutable change the re-create carries: the field, both values (JSON, `<unset>` when
/// absent), and what it means for the pods and claims when that is not obvious.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub class: ChangeClass,
    pub field: String,
    pub live: String,
    pub declared: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
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

/// One claim whose failed expansion a recovery undoes: its request goes from `from` (what the
/// failed expansion asked for) down to `to` (what git declares now), which is above
/// `capacity`, as the API server requires since Kubernetes 1.32.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRecovery {
    pub claim: String,
    pub template: String,
    pub capacity: Quantity,
    pub from: Quantity,
    pub to: Quantity,
    /// How its last expansion ended: `infeasible` or `error`.
    pub state: VolumeState,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeferredClaim {
    pub claim: String,
    pub reason: String,
}

/// Stable refusal codes (docs/converge.md, docs/cli.md): the one enum the converge, the
/// records (`model::RefusalEntry`), `/status` and the metrics use; `Display` and serde give
/// the wire string.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalCode {
    Shrink,
    NotExpandable,
    /// Orphaned pods would not be adopted by the re-created object, and its new pods would
    /// collide with them.
    SelectorChanged,
    /// The pods keep their old DNS subdomain until each is re-created.
    ServiceNameChanged,
    StorageClassChanged,
    AccessModesChanged,
    VolumeModeChanged,
    /// Removing a volume from the pods is a data-path change a person makes by hand.
    TemplateRemoved,
    /// An immutable field no other code names (decided here, or found by the proof).
    OtherImmutable,
    /// The server-side dry run refused the object for a reason that is not immutability.
    Rejected,
    /// The pre-flight dry-run create was refused (admission, create-only validation): the
    /// re-create after the orphan delete would fail, so nothing is written.
    CreateRefused,
    /// A recovery from a failed expansion needs the API server to lower a claim's request
    /// (Kubernetes 1.32+, RecoverVolumeExpansionFailure), and it refused: nothing is written.
    RecoveryUnsupported,
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
            RefusalCode::SelectorChanged => "selector-changed",
            RefusalCode::ServiceNameChanged => "service-name-changed",
            RefusalCode::StorageClassChanged => "storage-class-changed",
            RefusalCode::AccessModesChanged => "access-modes-changed",
            RefusalCode::VolumeModeChanged => "volume-mode-changed",
            RefusalCode::TemplateRemoved => "template-removed",
            RefusalCode::OtherImmutable => "other-immutable",
            RefusalCode::Rejected => "rejected",
            RefusalCode::CreateRefused => "create-refused",
            RefusalCode::RecoveryUnsupported => "recovery-unsupported",
        }
    }
}

/// Compares with the wire spelling (`shrink`, ...), as the JSON of a record reads.
impl PartialEq<&str> for RefusalCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The spec fields the API server lets an update change (its 422 message lists them, see the
/// fixture `error-statefulset-update-forbidden.json`). `volumeClaimTemplates` is immutable too,
/// but is compared on its own so its refusals can be precise.
pub const MUTABLE_SPEC_FIELDS: [&str; 6] = [
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

/// The API server's rule for claims that are not Bound (fixture `error-pvc-unbound-immutable.json`).
pub const UNBOUND_RULE: &str =
    "spec is immutable after creation except resources.requests for bound claims";

const FORBIDDEN: &str = "the API server forbids updates to statefulset spec for fields other than \
     'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' \
     and 'minReadySeconds'";

/// The legacy annotation a claim may carry instead of `spec.storageClassName`.
const LEGACY_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// Decides what converging `desired` over `live` takes.
///
/// `claims` are the claims of the StatefulSet's namespace (others are ignored; a claim without
/// namespace counts as in it), `classes` all StorageClasses. `live == None` gives the empty plan.
///
/// Checks run in a fixed order and the first failure is returned: the selector, the service
/// name, any other immutable spec field, the templates' names (a removal is refused, an
/// addition carried), then per template its other fields and shrink, then claims. What a
/// re-create carries safely (the pod management policy, the revision history limit, template
/// labels and annotations, added templates, storage growth) is listed in `Plan::changes`: the
/// orphaned pods keep their labels, so the re-created object adopts them whatever of these
/// changed. A storage request
/// that is missing or not a quantity (the server would never accept it) is refused as
/// `rejected`; `manifest::Objects::from_documents` reports it as bad input before this runs.
pub fn decide(
    desired: &StatefulSet,
    live: Option<&StatefulSet>,
    claims: &[PersistentVolumeClaim],
    classes: &[StorageClass],
) -> Result<Plan, Refusal> {
    decide_with(desired, live, claims, classes, &BTreeMap::new())
}

/// How each claim's last expansion ended, as known besides its status (the service's records,
/// which also read the resize Events of servers before 1.32), by claim name.
pub type KnownStates = BTreeMap<String, VolumeState>;

/// [`decide`], with what is `known` of the claims' last expansions. A template declared
/// smaller than live is a recovery instead of `shrink` when every claim whose request is above
/// the declared size failed to grow (`infeasible` or `error`: from `known`, else from its
/// status) and has a capacity below the declared size: those claims are listed in
/// [`Plan::recover`], to be lowered to the declared size before the re-create.
pub fn decide_with(
    desired: &StatefulSet,
    live: Option<&StatefulSet>,
    claims: &[PersistentVolumeClaim],
    classes: &[StorageClass],
    known: &KnownStates,
) -> Result<Plan, Refusal> {
    let name = desired.metadata.name.clone().unwrap_or_default();
    let namespace = [desired, live.unwrap_or(desired)]
        .iter()
        .find_map(|s| s.metadata.namespace.clone().filter(|ns| !ns.is_empty()))
        .unwrap_or_else(|| "default".to_owned());
    let refuse = |code: RefusalCode, message: String| Refusal {
        namespace: namespace.clone(),
        name: name.clone(),
        code,
        message,
    };
    let mut plan = Plan {
        namespace: namespace.clone(),
        name: name.clone(),
        recreate: false,
        changes: Vec::new(),
        grown: Vec::new(),
        resize: Vec::new(),
        deferred: Vec::new(),
        recover: Vec::new(),
    };
    let Some(live) = live else {
        return Ok(plan);
    };

    for (field, code, why) in [
        (
            "selector",
            RefusalCode::SelectorChanged,
            "the pods orphaned by the re-create would not be adopted by the new selector and its \
             new pods would collide with them by name: revert spec.selector in git (a new \
             selector needs a new StatefulSet, migrated by hand)",
        ),
        (
            "serviceName",
            RefusalCode::ServiceNameChanged,
            "re-created pods would keep their old DNS subdomain until each is deleted: revert \
             spec.serviceName in git, or change it by hand (orphan-delete, apply, then delete \
             the pods one at a time)",
        ),
    ] {
        let spec_of = |s: &StatefulSet| immutable_spec(s).get(field).cloned();
        if let Some(d) = first_difference(
            &format!("spec.{field}"),
            spec_of(live).as_ref(),
            spec_of(desired).as_ref(),
        ) {
            return Err(refuse(code, format!("{}; {why}", d.describe())));
        }
    }
    if let Some(d) = first_difference(
        "spec",
        Some(&other_immutable_spec(live)),
        Some(&other_immutable_spec(desired)),
    ) {
        return Err(refuse(
            RefusalCode::OtherImmutable,
            format!(
                "{}; {FORBIDDEN}, and a re-create cannot carry this field safely: revert it in \
                 git, or re-create the StatefulSet by hand",
                d.describe()
            ),
        ));
    }
    for (field, class, note) in [
        (
            "podManagementPolicy",
            ChangeClass::PodManagementPolicy,
            None,
        ),
        (
            "revisionHistoryLimit",
            ChangeClass::RevisionHistoryLimit,
            Some(
                "Kubernetes 1.33 and later change it in place; older servers need the re-create"
                    .to_owned(),
            ),
        ),
    ] {
        let spec_of = |s: &StatefulSet| immutable_spec(s).get(field).cloned();
        if let Some(d) = first_difference(
            &format!("spec.{field}"),
            spec_of(live).as_ref(),
            spec_of(desired).as_ref(),
        ) {
            plan.changes.push(d.change(class, note));
        }
    }

    let desired_templates = templates(desired);
    let live_templates = templates(live);
    check_template_names(&desired_templates, &live_templates)
        .map_err(|(code, m)| refuse(code, m))?;

    // Target size per template kept, in template order.
    let mut targets: Vec<(&str, Quantity)> = Vec::with_capacity(desired_templates.len());
    for d in &desired_templates {
        let template = template_name(d);
        let to = template_storage(d).map_err(|m| {
            refuse(
                RefusalCode::Rejected,
                format!("desired template {template:?}: {m}"),
            )
        })?;
        let Some(l) = live_templates.iter().find(|l| template_name(l) == template) else {
            plan.changes.push(Change {
                class: ChangeClass::TemplateAdded,
                field: format!("spec.volumeClaimTemplates[{template}]"),
                live: UNSET.to_owned(),
                declared: to.to_string(),
                note: Some(format!(
                    "the pods roll if the pod template changed to mount it; the StatefulSet \
                     controller creates each claim {template}-{name}-N as it re-creates pod N"
                )),
            });
            continue;
        };
        let (live_fields, live_meta) = split_template(l);
        let (desired_fields, desired_meta) = split_template(d);
        if let Some(diff) = first_difference("", Some(&live_fields), Some(&desired_fields)) {
            let (code, what) = template_refusal(&diff.path);
            return Err(refuse(
                code,
                format!("template {template:?}: {}; {what}", diff.describe()),
            ));
        }
        if let Some(diff) = first_difference("metadata", Some(&live_meta), Some(&desired_meta)) {
            plan.changes.push(Change {
                field: format!("spec.volumeClaimTemplates[{template}].{}", diff.path),
                note: Some(
                    "existing claims keep their old labels and annotations (the StatefulSet \
                     controller never relabels claims); only claims created from now on carry \
                     the new ones"
                        .to_owned(),
                ),
                ..diff.change(ChangeClass::ClaimMetadata, None)
            });
        }
        let from = template_storage(l).map_err(|m| {
            refuse(
                RefusalCode::Rejected,
                format!("live template {template:?}: {m}"),
            )
        })?;
        if to < from {
            let in_namespace = claims.iter().filter(|c| {
                c.metadata
                    .namespace
                    .as_deref()
                    .is_none_or(|ns| ns == namespace)
            });
            match recovery(template, &name, &to, in_namespace, known) {
                Recovery::Recover(recovered) => {
                    plan.recover.extend(recovered);
                    targets.push((template, to));
                    continue;
                }
                Recovery::Shrink(why) => {
                    let why = why
                        .map(|w| format!("; not a recovery from a failed expansion: {w}"))
                        .unwrap_or_default();
                    return Err(refuse(
                        RefusalCode::Shrink,
                        format!(
                            "template {template:?}: spec.resources.requests.storage would shrink \
                             from {from} (live) to {to} (desired); volumes are never shrunk: \
                             revert the size in git{why}"
                        ),
                    ));
                }
            }
        }
        if to > from {
            plan.changes.push(Change {
                class: ChangeClass::StorageGrown,
                field: format!(
                    "spec.volumeClaimTemplates[{template}].spec.resources.requests.storage"
                ),
                live: from.to_string(),
                declared: to.to_string(),
                note: None,
            });
            plan.grown.push(TemplateGrowth {
                template: template.to_owned(),
                from,
                to: to.clone(),
            });
        }
        targets.push((template, to));
    }

    for claim in claims {
        if claim
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|ns| ns != namespace)
        {
            continue;
        }
        let Some(claim_name) = claim.metadata.name.as_deref() else {
            continue;
        };
        let Some((template, to)) = targets
            .iter()
            .find(|(t, _)| is_claim_of(claim_name, t, &name))
        else {
            continue;
        };
        let from = claim_storage(claim)
            .map_err(|m| refuse(RefusalCode::Rejected, format!("claim {claim_name:?}: {m}")))?;
        if from >= *to {
            continue;
        }
        let phase = claim
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("");
        if phase != "Bound" {
            let state = if phase.is_empty() {
                "has no phase".to_owned()
            } else {
                format!("is {phase}")
            };
            plan.deferred.push(DeferredClaim {
                claim: claim_name.to_owned(),
                reason: format!(
                    "claim {state}, not Bound, so it cannot grow from {from} to {to} yet: \
                     the API server answers {UNBOUND_RULE:?}"
                ),
            });
            continue;
        }
        let storage_class = expandable_class(claim, classes).map_err(|why| {
            refuse(
                RefusalCode::NotExpandable,
                format!(
                    "claim {claim_name:?} (template {template:?}) must grow from {from} to {to} \
                     but {why}; only claims of a StorageClass with allowVolumeExpansion: true can grow"
                ),
            )
        })?;
        plan.resize.push(ClaimResize {
            claim: claim_name.to_owned(),
            template: (*template).to_owned(),
            storage_class,
            from,
            to: to.clone(),
        });
    }
    // A recovery re-creates too: the live template declares the failed size, which Flux's
    // apply cannot change in place.
    plan.recreate = !plan.changes.is_empty() || !plan.recover.is_empty();
    plan.resize.sort_by(|a, b| a.claim.cmp(&b.claim));
    plan.deferred.sort_by(|a, b| a.claim.cmp(&b.claim));
    Ok(plan)
}

/// What a template declared below its live size is.
enum Recovery {
    /// A recovery: these claims are lowered to the declared size.
    Recover(Vec<ClaimRecovery>),
    /// A shrink, refused; with why it is not a recovery when one of its claims failed to grow
    /// (otherwise the refusal reads as it always has).
    Shrink(Option<String>),
}

/// How the claim's last expansion ended: what its status says when that is `grown` (the
/// capacity is the truth), else a failure `known` from elsewhere, else its status.
fn last_expansion(claim: &PersistentVolumeClaim, known: &KnownStates) -> VolumeState {
    let own = volume::classify(claim, &[], None).state;
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    match known.get(name) {
        Some(state) if state.is_failed() && own != VolumeState::Grown => *state,
        _ => own,
    }
}

/// Whether declaring `template` at `to` (below its live size) recovers from failed expansions:
/// every claim of the template whose request is above `to` must be Bound, have failed to grow
/// (`infeasible` or `error`) and hold less than `to`.
fn recovery<'a>(
    template: &str,
    statefulset: &str,
    to: &Quantity,
    claims: impl Iterator<Item = &'a PersistentVolumeClaim>,
    known: &KnownStates,
) -> Recovery {
    let mut recovered = Vec::new();
    let mut not = Vec::new();
    let mut any_failed = false;
    for claim in claims {
        let Some(name) = claim.metadata.name.as_deref() else {
            continue;
        };
        if !is_claim_of(name, template, statefulset) {
            continue;
        }
        let Ok(from) = claim_storage(claim) else {
            continue;
        };
        if from == *to && known.get(name) == Some(&VolumeState::Recovered) {
            // Lowered by this recovery already (a converge stopped before its re-create):
            // part of it, nothing left to lower.
            any_failed = true;
            recovered.push(ClaimRecovery {
                claim: name.to_owned(),
                template: template.to_owned(),
                capacity: volume::capacity(claim).unwrap_or_else(|| from.clone()),
                from: from.clone(),
                to: to.clone(),
                state: VolumeState::Recovered,
            });
            continue;
        }
        if from <= *to {
            continue;
        }
        let state = last_expansion(claim, known);
        any_failed |= state.is_failed();
        let capacity = volume::capacity(claim);
        match (&capacity, state.is_failed()) {
            (_, false) => not.push(format!(
                "claim {name:?} asks for {from} and its expansion has not failed (it is {state})"
            )),
            (None, true) => not.push(format!("claim {name:?} has no capacity (not Bound)")),
            (Some(c), true) if c >= to => not.push(format!(
                "the declared {to} is not above claim {name:?}'s capacity {c}, and a request \
                 may not be lowered to its capacity or below"
            )),
            (Some(c), true) => recovered.push(ClaimRecovery {
                claim: name.to_owned(),
                template: template.to_owned(),
                capacity: c.clone(),
                from,
                to: to.clone(),
                state,
            }),
        }
    }
    if !any_failed {
        return Recovery::Shrink(None);
    }
    if !not.is_empty() {
        return Recovery::Shrink(Some(not.join("; ")));
    }
    recovered.sort_by(|a, b| a.claim.cmp(&b.claim));
    Recovery::Recover(recovered)
}

/// Whether `live` declares, for every volumeClaimTemplate of `desired`, the same storage
/// request (by value). Tells "someone re-created it at the desired size" (our work is done by
/// them) from "someone replaced it with something else" (not converged) after a uid mismatch.
pub fn declares_desired_sizes(live: &StatefulSet, desired: &StatefulSet) -> bool {
    let live_templates = templates(live);
    templates(desired).iter().all(|d| {
        let name = template_name(d);
        live_templates
            .iter()
            .find(|l| template_name(l) == name)
            .is_some_and(|l| match (template_storage(d), template_storage(l)) {
                (Ok(want), Ok(have)) => want == have,
                _ => false,
            })
    })
}

/// Whether `claim` is `<template>-<statefulset>-<ordinal>` with a digits-only ordinal, the
/// name the StatefulSet controller gives the claims it creates.
pub fn is_claim_of(claim: &str, template: &str, statefulset: &str) -> bool {
    claim
        .strip_prefix(template)
        .and_then(|r| r.strip_prefix('-'))
        .and_then(|r| r.strip_prefix(statefulset))
        .and_then(|r| r.strip_prefix('-'))
        .is_some_and(|ordinal| !ordinal.is_empty() && ordinal.bytes().all(|b| b.is_ascii_digit()))
}

/// The class a claim belongs to: `spec.storageClassName`, else the legacy annotation.
pub fn claim_class(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .or_else(|| {
            claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(LEGACY_CLASS_ANNOTATION))
                .map(String::as_str)
        })
}

fn expandable_class(
    claim: &PersistentVolumeClaim,
    classes: &[StorageClass],
) -> Result<String, String> {
    let class = match claim_class(claim) {
        None | Some("") => return Err("it has no storage class".to_owned()),
        Some(c) => c,
    };
    match classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(class))
    {
        None => Err(format!("its storage class {class:?} does not exist")),
        Some(c) if c.allow_volume_expansion != Some(true) => Err(format!(
            "its storage class {class:?} does not set allowVolumeExpansion: true"
        )),
        Some(_) => Ok(class.to_owned()),
    }
}

fn templates(sts: &StatefulSet) -> Vec<&PersistentVolumeClaim> {
    sts.spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.as_deref())
        .unwrap_or_default()
        .iter()
        .collect()
}

fn template_name(t: &PersistentVolumeClaim) -> &str {
    t.metadata.name.as_deref().unwrap_or("")
}

fn requested_storage(
    spec: Option<&k8s_openapi::api::core::v1::PersistentVolumeClaimSpec>,
) -> Result<Quantity, String> {
    let raw = spec
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .ok_or_else(|| "spec.resources.requests.storage is missing".to_owned())?;
    Quantity::try_from(raw).map_err(|e| format!("spec.resources.requests.storage: {e}"))
}

fn template_storage(t: &PersistentVolumeClaim) -> Result<Quantity, String> {
    requested_storage(t.spec.as_ref())
}

/// A claim's current size is what it requests: `status.capacity` lags while a resize is in flight,
/// and patching a request that already asks for the target would be a no-op.
fn claim_storage(c: &PersistentVolumeClaim) -> Result<Quantity, String> {
    requested_storage(c.spec.as_ref())
}

/// Templates kept must keep their names and order; added ones are carried, removed (or
/// renamed) ones refused.
fn check_template_names(
    desired: &[&PersistentVolumeClaim],
    live: &[&PersistentVolumeClaim],
) -> Result<(), (RefusalCode, String)> {
    let d: Vec<&str> = desired.iter().map(|t| template_name(t)).collect();
    let l: Vec<&str> = live.iter().map(|t| template_name(t)).collect();
    let added: Vec<&str> = d.iter().copied().filter(|n| !l.contains(n)).collect();
    let removed: Vec<&str> = l.iter().copied().filter(|n| !d.contains(n)).collect();
    const BY_HAND: &str = "removing a volume from the pods is a data-path change made by hand: \
        keep the template in git, or move the data off its claims, then `kubectl delete \
        statefulset --cascade=orphan`, apply the new object and delete the old claims yourself";
    match (added.as_slice(), removed.as_slice()) {
        (_, []) => {}
        ([a], [r]) => {
            return Err((
                RefusalCode::TemplateRemoved,
                format!(
                    "template {r:?} renamed to {a:?} (live {l:?}, desired {d:?}): the pods would \
                     lose the volume {r:?}; {BY_HAND}"
                ),
            ));
        }
        (_, [r, ..]) => {
            return Err((
                RefusalCode::TemplateRemoved,
                format!("template {r:?} removed (live {l:?}, desired {d:?}); {BY_HAND}"),
            ));
        }
    }
    let kept: Vec<&str> = d.iter().copied().filter(|n| l.contains(n)).collect();
    if kept != l {
        return Err((
            RefusalCode::OtherImmutable,
            format!(
                "templates reordered (live {l:?}, desired {d:?}); volumeClaimTemplates are \
                 immutable and a reorder is not carried: restore the live order in git"
            ),
        ));
    }
    Ok(())
}

/// The code and the advice for a template field that differs (`path` inside the template).
fn template_refusal(path: &str) -> (RefusalCode, &'static str) {
    let is = |field: &str| {
        path == field
            || path.starts_with(&format!("{field}."))
            || path.starts_with(&format!("{field}["))
    };
    if is("spec.storageClassName") {
        (
            RefusalCode::StorageClassChanged,
            "existing claims cannot change class: revert it in git; moving the data to another \
             class is a migration (new claims, copy, switch) made by hand",
        )
    } else if is("spec.accessModes") {
        (
            RefusalCode::AccessModesChanged,
            "existing claims cannot change access modes: revert them in git; other modes need new \
             claims, a migration made by hand",
        )
    } else if is("spec.volumeMode") {
        (
            RefusalCode::VolumeModeChanged,
            "existing volumes cannot change between Filesystem and Block: revert it in git; \
             another mode needs new volumes, a migration made by hand",
        )
    } else {
        (
            RefusalCode::OtherImmutable,
            "only a growth of spec.resources.requests.storage, the labels and the annotations of \
             a template can be converged: revert this field in git",
        )
    }
}

/// Printed for a value that is absent.
const UNSET: &str = "<unset>";

/// The spec fields an update may not change, with the server's defaults applied, so a desired
/// object that leaves a field to its default equals the live object that shows it.
fn immutable_spec(sts: &StatefulSet) -> Value {
    let mut spec = sts
        .spec
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_else(|| Value::Object(Map::new()));
    if let Value::Object(m) = &mut spec {
        for f in MUTABLE_SPEC_FIELDS.iter().chain(&["volumeClaimTemplates"]) {
            m.remove(*f);
        }
        default_field(m, "podManagementPolicy", Value::from("OrderedReady"));
        default_field(m, "revisionHistoryLimit", Value::from(10));
        if m.get("serviceName").is_some_and(|v| v == "") {
            m.remove("serviceName");
        }
    }
    strip_empty(&mut spec);
    spec
}

/// [`immutable_spec`] without the fields that have a refusal code of their own (`selector`,
/// `serviceName`) and those a re-create carries (`podManagementPolicy`,
/// `revisionHistoryLimit`).
fn other_immutable_spec(sts: &StatefulSet) -> Value {
    let mut spec = immutable_spec(sts);
    if let Value::Object(m) = &mut spec {
        for f in [
            "selector",
            "serviceName",
            "podManagementPolicy",
            "revisionHistoryLimit",
        ] {
            m.remove(f);
        }
    }
    spec
}

/// A normalised template split into everything but its labels and annotations (must not
/// change), and those (carried by a re-create).
fn split_template(t: &PersistentVolumeClaim) -> (Value, Value) {
    let mut fields = normalised_template(t);
    let mut meta = Map::new();
    if let Some(Value::Object(m)) = fields.get_mut("metadata") {
        for key in ["labels", "annotations"] {
            if let Some(v) = m.remove(key) {
                meta.insert(key.to_owned(), v);
            }
        }
    }
    strip_empty(&mut fields);
    (fields, Value::Object(meta))
}

/// A volumeClaimTemplate without what the server adds (`apiVersion`, `kind`, `status`,
/// `metadata.creationTimestamp`, `volumeMode: Filesystem`, the mirrored data source) and
/// without the storage request, which is compared by value on its own.
fn normalised_template(t: &PersistentVolumeClaim) -> Value {
    let mut v = serde_json::to_value(t).unwrap_or_else(|_| Value::Object(Map::new()));
    if let Value::Object(m) = &mut v {
        for f in ["apiVersion", "kind", "status"] {
            m.remove(f);
        }
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            meta.remove("creationTimestamp");
        }
        if let Some(Value::Object(spec)) = m.get_mut("spec") {
            default_field(spec, "volumeMode", Value::from("Filesystem"));
            mirror_data_source(spec);
            if let Some(Value::Object(requests)) = spec
                .get_mut("resources")
                .and_then(|r| r.get_mut("requests"))
            {
                requests.remove("storage");
            }
        }
    }
    strip_empty(&mut v);
    v
}

fn default_field(m: &mut Map<String, Value>, key: &str, default: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_owned(), default);
    }
}

/// The API server fills `dataSourceRef` from `dataSource` and back (for a ref without
/// namespace); doing the same on both sides makes either spelling compare equal.
fn mirror_data_source(spec: &mut Map<String, Value>) {
    let source = spec.get("dataSource").filter(|v| !v.is_null()).cloned();
    let reference = spec.get("dataSourceRef").filter(|v| !v.is_null()).cloned();
    match (source, reference) {
        (Some(s), None) => {
            spec.insert("dataSourceRef".into(), s);
        }
        (None, Some(r)) if r.get("namespace").is_none_or(|n| n.is_null() || n == "") => {
            let mut s = r;
            if let Value::Object(o) = &mut s {
                o.remove("namespace");
            }
            spec.insert("dataSource".into(), s);
        }
        _ => {}
    }
}

/// Removes nulls, empty maps and empty lists: the API server treats them as absent.
fn strip_empty(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.values_mut().for_each(strip_empty);
            m.retain(|_, v| !is_empty(v));
        }
        Value::Array(items) => items.iter_mut().for_each(strip_empty),
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

struct Difference {
    path: String,
    live: Option<Value>,
    desired: Option<Value>,
}

fn show(v: &Option<Value>) -> String {
    match v {
        None => UNSET.to_owned(),
        Some(v) => v.to_string(),
    }
}

impl Difference {
    fn change(&self, class: ChangeClass, note: Option<String>) -> Change {
        Change {
            class,
            field: self.path.clone(),
            live: show(&self.live),
            declared: show(&self.desired),
            note,
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} differs: live {}, desired {}",
            self.path,
            show(&self.live),
            show(&self.desired)
        )
    }
}

/// The first field (in key order) where `live` and `desired` differ; quantities under
/// `resources.requests`/`resources.limits` compare by value.
fn first_difference(
    path: &str,
    live: Option<&Value>,
    desired: Option<&Value>,
) -> Option<Difference> {
    let child = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    let empty = Map::new();
    let map_or_absent = |v: Option<&Value>| matches!(v, None | Some(Value::Object(_)));
    match (live, desired) {
        // An absent map on one side: descend anyway, so the message names the leaf.
        (Some(Value::Object(_)), _) | (_, Some(Value::Object(_)))
            if map_or_absent(live) && map_or_absent(desired) =>
        {
            let l = live.and_then(Value::as_object).unwrap_or(&empty);
            let d = desired.and_then(Value::as_object).unwrap_or(&empty);
            let mut keys: Vec<&String> = l.keys().chain(d.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .find_map(|k| first_difference(&child(k), l.get(k), d.get(k)))
        }
        (Some(Value::Array(l)), Some(Value::Array(d))) if l.len() == d.len() => l
            .iter()
            .zip(d)
            .enumerate()
            .find_map(|(i, (l, d))| first_difference(&format!("{path}[{i}]"), Some(l), Some(d))),
        (l, d) if l == d => None,
        (Some(Value::String(l)), Some(Value::String(d)))
            if is_quantity_path(path)
                && matches!((Quantity::parse(l), Quantity::parse(d)), (Ok(a), Ok(b)) if a == b) =>
        {
            None
        }
        (l, d) => Some(Difference {
            path: path.to_owned(),
            live: l.cloned(),
            desired: d.cloned(),
        }),
    }
}

fn is_quantity_path(path: &str) -> bool {
    let mut parts = path.rsplit('.');
    let _key = parts.next();
    matches!(
        (parts.next(), parts.next()),
        (Some("requests" | "limits"), Some("resources"))
    )
}
