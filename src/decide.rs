//! The pure decision for one StatefulSet: `Plan` or `Refusal` (docs/converge.md).
//!
//! Interface shared by `converge` and the `plan` command.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use serde::{Deserialize, Serialize};

use crate::quantity::Quantity;
use crate::volume::VolumeState;

mod compare;
mod recovery;

use compare::{UNSET, first_difference, immutable_spec, other_immutable_spec, split_template};
use recovery::{Recovery, recovery};

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
    /// Claims whose `spec.volumeAttributesClassName` is patched to the class their template
    /// declares (issue #38: the VolumeAttributesClass a template moved to), in claim-name
    /// order. Absent from the JSON when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub modify: Vec<ClaimModify>,
    /// The VolumeAttributesClasses this plan moves templates or claims (deferred ones too) to:
    /// what must exist, on a server serving the API, before anything is written (checked
    /// when the decision is given [`AttributeClasses`]). Not part of the JSON.
    #[serde(skip)]
    pub attribute_classes: std::collections::BTreeSet<String>,
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
    /// A template's `spec.volumeAttributesClassName` moved to another class (or got one).
    VolumeAttributesClass,
}

impl ChangeClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeClass::StorageGrown => "storage-grown",
            ChangeClass::PodManagementPolicy => "pod-management-policy",
            ChangeClass::RevisionHistoryLimit => "revision-history-limit",
            ChangeClass::ClaimMetadata => "claim-metadata",
            ChangeClass::TemplateAdded => "template-added",
            ChangeClass::VolumeAttributesClass => "volume-attributes-class",
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

/// One claim moved to the VolumeAttributesClass its template declares: `from` is its class as
/// read (`None`: it has none), `to` the declared one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClaimModify {
    pub claim: String,
    pub template: String,
    pub from: Option<String>,
    pub to: String,
}

/// What is known of the server's VolumeAttributesClasses when deciding: a class a template
/// moves to must exist, on a server that serves the API, before anything is written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AttributeClasses {
    /// Not looked up: the decision does not check the declared classes (a decision made again
    /// on one claim re-read after a conflict, by a run that checked them before writing).
    #[default]
    Unchecked,
    /// The server serves no VolumeAttributesClass API (discovery: neither
    /// `storage.k8s.io/v1`, from 1.34, nor `v1beta1`, 1.31 to 1.33 with the feature gate).
    Unsupported,
    /// The API is served at `api_version`; `names` are the classes that exist (of those asked
    /// about, or all of them).
    Served {
        api_version: String,
        names: std::collections::BTreeSet<String>,
    },
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
    /// A template's `volumeAttributesClassName` removed (set → unset): the API server never
    /// lets a claim's class go back to none once the driver applied one.
    VolumeAttributesClassRemoved,
    /// The VolumeAttributesClass a template moves to does not exist.
    VolumeAttributesClassMissing,
    /// The API server serves no VolumeAttributesClass API: a claim's class cannot change.
    VolumeAttributesClassUnsupported,
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
            RefusalCode::VolumeAttributesClassRemoved => "volume-attributes-class-removed",
            RefusalCode::VolumeAttributesClassMissing => "volume-attributes-class-missing",
            RefusalCode::VolumeAttributesClassUnsupported => "volume-attributes-class-unsupported",
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

/// The same rule on servers that know VolumeAttributesClass (1.29 and later, fixture
/// `v1.32/error-pvc-unbound-immutable.json`): a claim's class changes only once it is Bound.
pub const UNBOUND_CLASS_RULE: &str = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

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

/// What a claim's `spec.volumeAttributesClassName` says, `""` read as none.
pub fn claim_attributes_class(claim: &PersistentVolumeClaim) -> Option<&str> {
    spec_attributes_class(claim.spec.as_ref())
}

fn spec_attributes_class(
    spec: Option<&k8s_openapi::api::core::v1::PersistentVolumeClaimSpec>,
) -> Option<&str> {
    spec.and_then(|s| s.volume_attributes_class_name.as_deref())
        .filter(|c| !c.is_empty())
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
    decide_in(
        desired,
        live,
        claims,
        classes,
        known,
        &AttributeClasses::Unchecked,
    )
}

/// [`decide_with`], with what is known of the server's VolumeAttributesClasses: a template
/// whose `volumeAttributesClassName` moves to another class is carried (each claim of it that
/// has another class is patched, once Bound), unless the class is removed
/// (`volume-attributes-class-removed`), the server serves no such API
/// (`volume-attributes-class-unsupported`) or the class does not exist
/// (`volume-attributes-class-missing`). A claim already of the declared class is left alone.
pub fn decide_in(
    desired: &StatefulSet,
    live: Option<&StatefulSet>,
    claims: &[PersistentVolumeClaim],
    classes: &[StorageClass],
    known: &KnownStates,
    attribute_classes: &AttributeClasses,
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
        modify: Vec::new(),
        attribute_classes: std::collections::BTreeSet::new(),
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

    // Target size and class per template kept, in template order.
    let mut targets: Vec<(&str, Quantity, Option<&str>)> =
        Vec::with_capacity(desired_templates.len());
    // The classes templates move to, which must exist before anything is written.
    let mut moved_to: Vec<(String, String)> = Vec::new();
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
        let (live_class, declared_class) = (
            spec_attributes_class(l.spec.as_ref()),
            spec_attributes_class(d.spec.as_ref()),
        );
        match (live_class, declared_class) {
            (Some(from), None) => {
                return Err(refuse(
                    RefusalCode::VolumeAttributesClassRemoved,
                    format!(
                        "template {template:?}: spec.volumeAttributesClassName would be removed \
                         (live {from:?}, desired {UNSET}); the API server never lets a claim's \
                         VolumeAttributesClass go back to none once the driver applied one: \
                         keep a class in git (moving to another class is carried)"
                    ),
                ));
            }
            (from, Some(to)) if from != Some(to) => {
                plan.changes.push(Change {
                    class: ChangeClass::VolumeAttributesClass,
                    field: format!(
                        "spec.volumeClaimTemplates[{template}].spec.volumeAttributesClassName"
                    ),
                    live: from.map_or_else(|| UNSET.to_owned(), |c| format!("{c:?}")),
                    declared: format!("{to:?}"),
                    note: Some(format!(
                        "each existing claim {template}-{name}-N of another class is patched to \
                         {to:?} once Bound (the driver then modifies its volume in place); \
                         claims created from now on get it from the template"
                    )),
                });
                moved_to.push((to.to_owned(), format!("template {template:?}")));
            }
            _ => {}
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
                    targets.push((template, to, declared_class));
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
        targets.push((template, to, declared_class));
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
        let Some((template, to, declared_class)) = targets
            .iter()
            .find(|(t, _, _)| is_claim_of(claim_name, t, &name))
        else {
            continue;
        };
        let from = claim_storage(claim)
            .map_err(|m| refuse(RefusalCode::Rejected, format!("claim {claim_name:?}: {m}")))?;
        let grows = from < *to;
        let class_from = claim_attributes_class(claim);
        // A class is only ever moved to, never taken away from a claim.
        let moves = declared_class.filter(|to| class_from != Some(*to));
        if !grows && moves.is_none() {
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
            let (what, rule) = match (grows, moves) {
                (_, None) => (format!("grow from {from} to {to}"), UNBOUND_RULE),
                (false, Some(c)) => (
                    format!(
                        "move from {} to the VolumeAttributesClass {c:?}",
                        class_from.map_or_else(|| "no class".to_owned(), |f| format!("{f:?}"))
                    ),
                    UNBOUND_CLASS_RULE,
                ),
                (_, Some(c)) => (
                    format!("grow from {from} to {to} and move to the VolumeAttributesClass {c:?}"),
                    UNBOUND_CLASS_RULE,
                ),
            };
            if let Some(c) = moves {
                moved_to.push((c.to_owned(), format!("claim {claim_name:?}")));
            }
            plan.deferred.push(DeferredClaim {
                claim: claim_name.to_owned(),
                reason: format!(
                    "claim {state}, not Bound, so it cannot {what} yet: the API server answers \
                     {rule:?}"
                ),
            });
            continue;
        }
        if let Some(c) = moves {
            moved_to.push((c.to_owned(), format!("claim {claim_name:?}")));
            plan.modify.push(ClaimModify {
                claim: claim_name.to_owned(),
                template: (*template).to_owned(),
                from: class_from.map(str::to_owned),
                to: c.to_owned(),
            });
        }
        if !grows {
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
    if let Some((code, message)) = check_attribute_classes(&moved_to, attribute_classes) {
        return Err(refuse(code, message));
    }
    plan.attribute_classes = moved_to.into_iter().map(|(class, _)| class).collect();
    // A recovery re-creates too: the live template declares the failed size, which Flux's
    // apply cannot change in place.
    plan.recreate = !plan.changes.is_empty() || !plan.recover.is_empty();
    plan.resize.sort_by(|a, b| a.claim.cmp(&b.claim));
    plan.deferred.sort_by(|a, b| a.claim.cmp(&b.claim));
    plan.modify.sort_by(|a, b| a.claim.cmp(&b.claim));
    Ok(plan)
}

/// Whether every VolumeAttributesClass moved to (`(class, by whom)`) can be moved to: the server
/// serves the API and the class exists. `None` when it can, or when nothing is known.
fn check_attribute_classes(
    moved_to: &[(String, String)],
    known: &AttributeClasses,
) -> Option<(RefusalCode, String)> {
    let (class, by) = moved_to.first()?;
    match known {
        AttributeClasses::Unchecked => None,
        AttributeClasses::Unsupported => Some((
            RefusalCode::VolumeAttributesClassUnsupported,
            format!(
                "{by} moves to the VolumeAttributesClass {class:?}, but the API server serves \
                 no VolumeAttributesClass API (storage.k8s.io/v1 from Kubernetes 1.34; \
                 storage.k8s.io/v1beta1 in 1.31 to 1.33 only with the VolumeAttributesClass \
                 feature gate and --runtime-config=storage.k8s.io/v1beta1=true), so no claim's \
                 class can change on it: nothing was written; revert volumeAttributesClassName \
                 in git, or turn the feature on in the control plane"
            ),
        )),
        AttributeClasses::Served { api_version, names } => moved_to
            .iter()
            .find(|(class, _)| !names.contains(class))
            .map(|(class, by)| {
                (
                    RefusalCode::VolumeAttributesClassMissing,
                    format!(
                        "{by} moves to the VolumeAttributesClass {class:?}, which does not exist \
                         ({api_version}, cluster-scoped): a claim patched to it would wait \
                         (modifyVolumeStatus Pending) and new claims would not provision: \
                         nothing was written; create the class first, or declare an existing \
                         one in git"
                    ),
                )
            }),
    }
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
