//! StatefulSet: defaults (`SetDefaults_StatefulSet`, as `live-statefulset.yaml` shows them),
//! spec validation and the update rule of `ValidateStatefulSetUpdate`, as the emulated version
//! has them.

use serde_json::{Value, json};

use super::super::errors::Cause;
use super::super::version::KubeVersion;
use super::pod::default_template;
use super::{canonicalize_resources, semantic_eq, set_default};

/// The update rule's message until 1.33.
pub const FORBIDDEN_UPDATE: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

/// The update rule's message from 1.33 on, when `revisionHistoryLimit` became mutable
/// (`real-v1.36.2.json`, `01.sts.ssa-grow-vct`).
pub const FORBIDDEN_UPDATE_1_33: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

/// The update rule's message on `version`.
pub fn forbidden_update(version: KubeVersion) -> &'static str {
    if version >= KubeVersion::V1_36 {
        FORBIDDEN_UPDATE_1_33
    } else {
        FORBIDDEN_UPDATE
    }
}

/// The spec fields an update may change on `version`.
fn mutable(version: KubeVersion) -> &'static [&'static str] {
    if version >= KubeVersion::V1_36 {
        &[
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "revisionHistoryLimit",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
        ]
    } else {
        &[
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
        ]
    }
}

/// What `NameIsDNSLabel` says of a value that is not a DNS label (1.36's serviceName check,
/// `real-v1.36.2.json`, `08.preflight.dry-run-create-invalid`).
const DNS_LABEL_FORMAT: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// A claim template as the server stores it: an embedded object with its type meta,
/// `creationTimestamp: null` (before 1.36, which omits the zero time), `volumeMode: Filesystem`
/// and `status.phase: Pending`.
fn default_claim_template(t: &mut Value, version: KubeVersion) {
    if !t.is_object() {
        return;
    }
    set_default(t, "apiVersion", json!("v1"));
    set_default(t, "kind", json!("PersistentVolumeClaim"));
    set_default(t, "metadata", json!({}));
    if version < KubeVersion::V1_36 {
        set_default(&mut t["metadata"], "creationTimestamp", Value::Null);
    }
    set_default(t, "spec", json!({}));
    set_default(&mut t["spec"], "volumeMode", json!("Filesystem"));
    // 1.28's PersistentVolumeClaimSpec has no `volumeAttributesClassName` (1.29): the decoder
    // drops it.
    if version == KubeVersion::V1_28
        && let Some(spec) = t["spec"].as_object_mut()
    {
        spec.remove("volumeAttributesClassName");
    }
    if let Some(r) = t["spec"].get_mut("resources") {
        canonicalize_resources(Some(r));
    }
    set_default(t, "status", json!({}));
    set_default(&mut t["status"], "phase", json!("Pending"));
}

pub fn default(obj: &mut Value, version: KubeVersion) {
    set_default(obj, "spec", json!({}));
    let spec = &mut obj["spec"];
    set_default(spec, "replicas", json!(1));
    set_default(spec, "podManagementPolicy", json!("OrderedReady"));
    set_default(spec, "updateStrategy", json!({}));
    let strategy = &mut spec["updateStrategy"];
    set_default(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        set_default(strategy, "rollingUpdate", json!({}));
        set_default(&mut strategy["rollingUpdate"], "partition", json!(0));
    }
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "persistentVolumeClaimRetentionPolicy", json!({}));
    let policy = &mut spec["persistentVolumeClaimRetentionPolicy"];
    set_default(policy, "whenDeleted", json!("Retain"));
    set_default(policy, "whenScaled", json!("Retain"));
    if let Some(t) = spec.get_mut("template") {
        default_template(t, version);
    }
    if let Some(ts) = spec
        .get_mut("volumeClaimTemplates")
        .and_then(Value::as_array_mut)
    {
        ts.iter_mut()
            .for_each(|t| default_claim_template(t, version));
    }
}

/// Go's `%#v` of a `map[string]string` (keys sorted, as fmt prints maps).
fn go_string_map(m: &Value) -> String {
    let mut pairs: Vec<(String, String)> = m
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k:?}:{v:?}")).collect();
    format!("map[string]string{{{}}}", inner.join(", "))
}

/// `ValidateStatefulSetSpec`, for the rules a test can reach.
pub fn validate_spec(obj: &Value, version: KubeVersion) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    let policy = spec["podManagementPolicy"].as_str().unwrap_or_default();
    if policy != "OrderedReady" && policy != "Parallel" {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {policy:?}: supported values: \"OrderedReady\", \"Parallel\""
            ),
            field: "spec.podManagementPolicy".into(),
        });
    }
    let strategy = &spec["updateStrategy"];
    match strategy["type"].as_str().unwrap_or_default() {
        "OnDelete" => {
            if let Some(ru) = strategy.get("rollingUpdate").filter(|v| !v.is_null()) {
                let partition = ru["partition"].as_i64().unwrap_or(0);
                let max_unavailable = if ru.get("maxUnavailable").is_some_and(|v| !v.is_null()) {
                    "(*intstr.IntOrString)(0xc000a1b2c0)".to_string()
                } else {
                    "(*intstr.IntOrString)(nil)".to_string()
                };
                causes.push(Cause::invalid(
                    "spec.updateStrategy.rollingUpdate",
                    &format!(
                        "apps.RollingUpdateStatefulSetStrategy{{Partition:{partition}, MaxUnavailable:{max_unavailable}}}"
                    ),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(p) = strategy
                .pointer("/rollingUpdate/partition")
                .and_then(Value::as_i64)
                && p < 0
            {
                causes.push(Cause::invalid(
                    "spec.updateStrategy.rollingUpdate.partition",
                    &p.to_string(),
                    "must be greater than or equal to 0",
                ));
            }
        }
        other => causes.push(Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {other:?}: supported values: \"OnDelete\", \"RollingUpdate\""
            ),
            field: "spec.updateStrategy.type".into(),
        }),
    }
    if let Some(r) = spec["replicas"].as_i64()
        && r < 0
    {
        causes.push(Cause::invalid(
            "spec.replicas",
            &r.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    if version >= KubeVersion::V1_36 {
        causes.extend(service_name_causes(spec));
    }
    let selector = &spec["selector"];
    let empty_selector = selector.is_null()
        || (selector["matchLabels"]
            .as_object()
            .is_none_or(|m| m.is_empty())
            && selector["matchExpressions"]
                .as_array()
                .is_none_or(|a| a.is_empty()));
    if empty_selector {
        causes.push(Cause::required("spec.selector", ""));
    } else {
        let selector = super::super::query::LabelSelector::from_object(selector);
        let template_labels = spec
            .pointer("/template/metadata/labels")
            .cloned()
            .unwrap_or(json!({}));
        if !selector.matches(&json!({"metadata": {"labels": template_labels}})) {
            causes.push(Cause::invalid(
                "spec.template.metadata.labels",
                &go_string_map(&template_labels),
                "`selector` does not match template `labels`",
            ));
        }
    }
    if version >= KubeVersion::V1_36 {
        causes.extend(mount_causes(spec));
    }
    causes
}

/// 1.36: a non-empty `serviceName` must be a DNS label.
fn service_name_causes(spec: &Value) -> Vec<Cause> {
    let Some(name) = spec["serviceName"].as_str().filter(|n| !n.is_empty()) else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    if name.len() > 63 {
        causes.push(Cause::invalid(
            "spec.serviceName",
            &format!("{name:?}"),
            "must be no more than 63 characters",
        ));
    }
    let label = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !label {
        causes.push(Cause::invalid(
            "spec.serviceName",
            &format!("{name:?}"),
            DNS_LABEL_FORMAT,
        ));
    }
    causes
}

/// 1.36 validates the pod template as a pod's, with a volume for each claim template (as the
/// controller adds to every pod it makes): a mount or device naming neither a pod volume nor a
/// claim template is `Not found` (`tests/fixtures/v1.36/error-statefulset-update-mount-not-found.json`).
/// Only this rule of the pod validation is emulated: it is the one the converger's proof meets.
fn mount_causes(spec: &Value) -> Vec<Cause> {
    let names = |v: Option<&Value>, pointer: &str| -> Vec<String> {
        v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|x| x.pointer(pointer).and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    };
    let mut known = names(spec.pointer("/template/spec/volumes"), "/name");
    known.extend(names(spec.get("volumeClaimTemplates"), "/metadata/name"));
    let mut causes = Vec::new();
    for list in ["containers", "initContainers"] {
        let containers = spec
            .pointer(&format!("/template/spec/{list}"))
            .and_then(Value::as_array);
        for (i, c) in containers.into_iter().flatten().enumerate() {
            for field in ["volumeMounts", "volumeDevices"] {
                for (j, name) in names(c.get(field), "/name").iter().enumerate() {
                    if !known.contains(name) {
                        causes.push(Cause {
                            reason: "FieldValueNotFound",
                            message: format!("Not found: {name:?}"),
                            field: format!("spec.template.spec.{list}[{i}].{field}[{j}].name"),
                        });
                    }
                }
            }
        }
    }
    causes
}

pub fn validate_create(obj: &Value, version: KubeVersion) -> Vec<Cause> {
    validate_spec(obj, version)
}

/// The template fields KEP-4650's `StatefulSetUpdateVolumeClaimTemplate` gate lets an update
/// change (as JSON pointers inside a template).
const GATED_TEMPLATE_FIELDS: &[&str] = &[
    "/metadata/labels",
    "/metadata/annotations",
    "/spec/resources/requests/storage",
    "/spec/volumeAttributesClassName",
];

/// Spec validation, then the immutability rule (after defaults, by semantic equality);
/// `claim_template_updates`: the KEP-4650 gate is on.
pub fn validate_update(
    new: &Value,
    old: &Value,
    version: KubeVersion,
    claim_template_updates: bool,
) -> Vec<Cause> {
    let mut causes = validate_spec(new, version);
    let strip = |spec: &Value| {
        let mut s = spec.clone();
        if let Some(m) = s.as_object_mut() {
            for f in mutable(version) {
                m.remove(*f);
            }
        }
        if claim_template_updates {
            for t in s
                .get_mut("volumeClaimTemplates")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                for field in GATED_TEMPLATE_FIELDS {
                    let (parent, key) = field.rsplit_once('/').unwrap_or(("", field));
                    if let Some(m) = t.pointer_mut(parent).and_then(Value::as_object_mut) {
                        m.remove(key);
                    }
                }
            }
        }
        s
    };
    if !semantic_eq(&strip(&new["spec"]), &strip(&old["spec"])) {
        causes.push(Cause::forbidden("spec", forbidden_update(version)));
    }
    causes
}
