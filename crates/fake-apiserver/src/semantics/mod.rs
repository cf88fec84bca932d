//! Per-type rules of the real server: defaults, validation and admission. The handlers call
//! these in the real order: defaults, validation (422), then admission (403).

pub mod event;
pub mod microtime;
pub mod pod;
pub mod pvc;
pub mod pvc_diff;
pub mod pvc_json_diff;
pub mod quantity;
pub mod statefulset;

use serde_json::{Value, json};

use super::errors::{ApiError, Cause};
use super::resources::{self, ResourceType};
use super::store::{Key, State, obj_name};
use super::version::{AttributesClasses, KubeVersion};

pub fn set_default(obj: &mut Value, key: &str, value: Value) {
    if let Some(m) = obj.as_object_mut() {
        m.entry(key.to_string()).or_insert(value);
    }
}

/// Stores quantities in canonical form, as the real server re-serialises them.
pub fn canonicalize_map(m: &mut Value) {
    if let Some(m) = m.as_object_mut() {
        for v in m.values_mut() {
            if let Some(s) = v.as_str() {
                *v = json!(quantity::canonical_str(s));
            }
        }
    }
}

pub fn canonicalize_resources(resources: Option<&mut Value>) {
    if let Some(r) = resources {
        for part in ["requests", "limits"] {
            if let Some(m) = r.get_mut(part) {
                canonicalize_map(m);
            }
        }
    }
}

/// Drops what Go's semantic equality cannot see: null, zero values and empty collections
/// (nil and empty are equal there; omitted zero values never reach the wire).
fn strip_zero(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Bool(false) => None,
        Value::Number(n) if n.as_f64() == Some(0.0) => None,
        Value::String(s) if s.is_empty() => None,
        Value::Object(m) => {
            let kept: serde_json::Map<String, Value> = m
                .iter()
                .filter_map(|(k, v)| strip_zero(v).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        Value::Array(a) if a.is_empty() => None,
        Value::Array(a) => Some(Value::Array(
            a.iter()
                .map(|x| strip_zero(x).unwrap_or(Value::Null))
                .collect(),
        )),
        other => Some(other.clone()),
    }
}

/// `apiequality.Semantic.DeepEqual` over JSON (quantities are canonical by then).
pub fn semantic_eq(a: &Value, b: &Value) -> bool {
    strip_zero(a) == strip_zero(b)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The JSON pointers (with `*` for every list element) that must hold objects for the typed
/// decoding of the real server to succeed, and that the defaults write into.
fn object_paths(rt: &ResourceType) -> &'static [&'static str] {
    if *rt == resources::STATEFULSET {
        &[
            "/spec/selector",
            "/spec/selector/matchLabels",
            "/spec/template",
            "/spec/template/metadata",
            "/spec/template/metadata/labels",
            "/spec/template/metadata/annotations",
            "/spec/template/spec",
            "/spec/template/spec/containers/*",
            "/spec/template/spec/containers/*/resources",
            "/spec/template/spec/initContainers/*",
            "/spec/template/spec/volumes/*",
            "/spec/updateStrategy",
            "/spec/updateStrategy/rollingUpdate",
            "/spec/persistentVolumeClaimRetentionPolicy",
            "/spec/volumeClaimTemplates/*",
            "/spec/volumeClaimTemplates/*/metadata",
            "/spec/volumeClaimTemplates/*/metadata/labels",
            "/spec/volumeClaimTemplates/*/metadata/annotations",
            "/spec/volumeClaimTemplates/*/spec",
            "/spec/volumeClaimTemplates/*/spec/resources",
            "/spec/volumeClaimTemplates/*/status",
        ]
    } else if *rt == resources::PVC {
        &[
            "/spec/resources",
            "/spec/resources/requests",
            "/status/capacity",
        ]
    } else if *rt == resources::POD {
        &[
            "/spec/containers/*",
            "/spec/containers/*/resources",
            "/spec/initContainers/*",
            "/spec/volumes/*",
        ]
    } else {
        &[]
    }
}

fn check_objects(v: &Value, segs: &[&str], path: &str, bad: &mut Option<(String, &'static str)>) {
    if bad.is_some() {
        return;
    }
    let Some((first, rest)) = segs.split_first() else {
        if !(v.is_object() || v.is_null()) {
            *bad = Some((path.to_string(), json_type(v)));
        }
        return;
    };
    if *first == "*" {
        if let Some(items) = v.as_array() {
            for (i, item) in items.iter().enumerate() {
                check_objects(item, rest, &format!("{path}[{i}]"), bad);
            }
        }
    } else if let Some(child) = v.get(*first) {
        check_objects(child, rest, &format!("{path}.{first}"), bad);
    }
}

/// Rejects bodies the real server could not decode into its types (400), before any default
/// or rule looks at them.
pub fn check_shape(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let mut bad = None;
    for top in ["metadata", "spec", "status"] {
        if let Some(v) = obj.get(top)
            && !(v.is_object() || v.is_null())
        {
            bad = Some((top.to_string(), json_type(v)));
        }
    }
    for pointer in ["/metadata/labels", "/metadata/annotations"]
        .iter()
        .chain(object_paths(rt))
    {
        let segs: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
        check_objects(obj, &segs, "", &mut bad);
    }
    for list in [
        "/spec/volumeClaimTemplates",
        "/spec/template/spec/containers",
        "/spec/containers",
    ] {
        if let Some(v) = obj.pointer(list)
            && !(v.is_array() || v.is_null())
        {
            bad = Some((list.trim_start_matches('/').replace('/', "."), json_type(v)));
        }
    }
    if bad.is_none() {
        microtime::check(rt, obj)?;
    }
    match bad {
        None => Ok(()),
        Some((field, found)) => Err(ApiError::bad_request(&format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: json: cannot unmarshal {found} into Go struct field {kind}.{field} of type object",
            kind = rt.kind,
            version = rt.version,
            field = field.trim_start_matches('.'),
        ))),
    }
}

pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `type: Opaque` by default; `stringData` is write-only: merged into `data` (base64).
fn secret_default(obj: &mut Value) {
    set_default(obj, "type", json!("Opaque"));
    let Some(string_data) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else {
        return;
    };
    if let Some(entries) = string_data.as_object() {
        set_default(obj, "data", json!({}));
        for (k, v) in entries {
            obj["data"][k] = json!(base64(v.as_str().unwrap_or_default().as_bytes()));
        }
    }
}

/// Server defaults for a type, applied on create and on every update before validation.
pub fn default(rt: &ResourceType, obj: &mut Value, version: KubeVersion) {
    if *rt == resources::STATEFULSET {
        statefulset::default(obj, version);
    } else if *rt == resources::PVC {
        pvc::default(obj);
    } else if *rt == resources::POD {
        pod::default_pod(obj);
    } else if *rt == resources::SECRET {
        secret_default(obj);
    } else if *rt == resources::EVENT {
        // What a core/v1 Event reads back with when the writer left the newer fields out.
        set_default(obj, "reportingComponent", json!(""));
        set_default(obj, "reportingInstance", json!(""));
        set_default(obj, "eventTime", Value::Null);
    } else if *rt == resources::STORAGE_CLASS {
        set_default(obj, "reclaimPolicy", json!("Delete"));
        set_default(obj, "volumeBindingMode", json!("Immediate"));
    } else if *rt == resources::PERSISTENT_VOLUME {
        set_default(obj, "spec", json!({}));
        set_default(&mut obj["spec"], "volumeMode", json!("Filesystem"));
        set_default(
            &mut obj["spec"],
            "persistentVolumeReclaimPolicy",
            json!("Retain"),
        );
        if let Some(host_path) = obj.pointer_mut("/spec/hostPath") {
            set_default(host_path, "type", json!(""));
        }
    } else if *rt == resources::NAMESPACE {
        // `NamespaceDefaultLabelName` and the lifecycle finalizer of every namespace.
        let name = obj_name(obj).to_string();
        set_default(obj, "spec", json!({}));
        set_default(&mut obj["spec"], "finalizers", json!(["kubernetes"]));
        set_default(&mut obj["metadata"], "labels", json!({}));
        if let Some(labels) = obj["metadata"]["labels"].as_object_mut() {
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
    }
}

fn invalid(rt: &ResourceType, obj: &Value, causes: Vec<Cause>) -> Result<(), ApiError> {
    if causes.is_empty() {
        Ok(())
    } else if *rt == resources::EVENT_V1 {
        // events.k8s.io events are validated as the internal core Event: no group in the name.
        Err(ApiError::invalid_kind(
            "Event",
            "",
            "Event",
            obj_name(obj),
            &causes,
        ))
    } else {
        Err(ApiError::invalid(rt, obj_name(obj), &causes))
    }
}

/// `MaxSecretSize`: ConfigMaps and Secrets hold at most 1 MiB of data.
const MAX_DATA_SIZE: usize = 1024 * 1024;
/// `TotalAnnotationSizeLimitB`.
const MAX_ANNOTATIONS_SIZE: usize = 256 * 1024;

/// Keys and values of the given string maps, in bytes.
fn map_size(obj: &Value, keys: &[&str]) -> usize {
    keys.iter()
        .filter_map(|k| obj.pointer(k).and_then(Value::as_object))
        .flat_map(|m| m.iter())
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum()
}

/// Bytes a base64 string decodes to.
fn decoded_len(b64: &str) -> usize {
    let b64 = b64.trim_end_matches('=');
    b64.len() * 3 / 4
}

/// What `ValidateConfigMap`/`ValidateSecret` add up against `MaxSecretSize`: the values only
/// (keys are free), binary ones decoded.
fn data_size(rt: &ResourceType, obj: &Value) -> usize {
    let values = |pointer: &str| -> Vec<&str> {
        obj.pointer(pointer)
            .and_then(Value::as_object)
            .map(|m| m.values().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    };
    let text: usize = if *rt == resources::CONFIGMAP {
        values("/data").iter().map(|v| v.len()).sum()
    } else {
        values("/data").iter().map(|v| decoded_len(v)).sum()
    };
    let binary: usize = values("/binaryData").iter().map(|v| decoded_len(v)).sum();
    text + binary
}

/// The size limits of ConfigMaps/Secrets (whole object, reported at `[]`) and annotations.
fn size_causes(rt: &ResourceType, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if map_size(obj, &["/metadata/annotations"]) > MAX_ANNOTATIONS_SIZE {
        causes.push(Cause::too_long(
            "metadata.annotations",
            MAX_ANNOTATIONS_SIZE,
        ));
    }
    if (*rt == resources::CONFIGMAP || *rt == resources::SECRET)
        && data_size(rt, obj) > MAX_DATA_SIZE
    {
        causes.push(Cause::too_long("[]", MAX_DATA_SIZE));
    }
    causes
}

const LABEL_VALUE_FORMAT: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const NAME_PART_FORMAT: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, non-empty.
fn is_name_part(s: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
    !s.is_empty()
        && s.chars().all(ok)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// `IsQualifiedName` (`prefix/name`), the errors in the real order.
fn qualified_name_errors(key: &str) -> Vec<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let mut errs = Vec::new();
    if let Some(p) = prefix {
        if p.is_empty() {
            errs.push("prefix part must be non-empty".to_string());
        } else if !is_dns_subdomain(p) {
            errs.push(format!("prefix part {}", DNS_SUBDOMAIN_FORMAT));
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else {
        if name.len() > 63 {
            errs.push("name part must be no more than 63 characters".to_string());
        }
        if !is_name_part(name) {
            errs.push(NAME_PART_FORMAT.to_string());
        }
    }
    errs
}

/// Label keys and values, annotation keys (`ValidateLabels`, `ValidateAnnotations`).
fn label_causes(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            for e in qualified_name_errors(k) {
                causes.push(Cause::invalid("metadata.labels", &format!("{k:?}"), &e));
            }
            let v = v.as_str().unwrap_or_default();
            if v.len() > 63 {
                causes.push(Cause::invalid(
                    "metadata.labels",
                    &format!("{v:?}"),
                    "must be no more than 63 characters",
                ));
            }
            if !v.is_empty() && !is_name_part(v) {
                causes.push(Cause::invalid(
                    "metadata.labels",
                    &format!("{v:?}"),
                    LABEL_VALUE_FORMAT,
                ));
            }
        }
    }
    if let Some(annotations) = obj
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        for k in annotations.keys() {
            for e in qualified_name_errors(&k.to_lowercase()) {
                causes.push(Cause::invalid(
                    "metadata.annotations",
                    &format!("{k:?}"),
                    &e,
                ));
            }
        }
    }
    causes
}

const CONFIG_KEY_FORMAT: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/// `IsConfigMapKey` for the keys of ConfigMap/Secret `data` and `binaryData`.
fn config_key_causes(rt: &ResourceType, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if *rt != resources::CONFIGMAP && *rt != resources::SECRET {
        return causes;
    }
    for part in ["data", "binaryData"] {
        let Some(m) = obj.get(part).and_then(Value::as_object) else {
            continue;
        };
        for key in m.keys() {
            let field = format!("{part}[{key}]");
            let value = format!("{key:?}");
            if key.len() > 253 {
                causes.push(Cause::invalid(
                    &field,
                    &value,
                    "must be no more than 253 characters",
                ));
            }
            if key.is_empty()
                || !key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
            {
                causes.push(Cause::invalid(&field, &value, CONFIG_KEY_FORMAT));
            }
            if key == "." {
                causes.push(Cause::invalid(&field, &value, "must not be '.'"));
            } else if key == ".." {
                causes.push(Cause::invalid(&field, &value, "must not be '..'"));
            } else if key.starts_with("..") {
                causes.push(Cause::invalid(&field, &value, "must not start with '..'"));
            }
        }
    }
    causes
}

const DNS_SUBDOMAIN_FORMAT: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn metadata_causes(obj: &Value) -> Vec<Cause> {
    let name = obj_name(obj);
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push(Cause::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else if !is_dns_subdomain(name) {
        causes.push(Cause::invalid(
            "metadata.name",
            &format!("{name:?}"),
            DNS_SUBDOMAIN_FORMAT,
        ));
    }
    causes
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

pub fn validate_create(
    rt: &ResourceType,
    obj: &Value,
    version: KubeVersion,
) -> Result<(), ApiError> {
    let mut causes = metadata_causes(obj);
    causes.extend(label_causes(obj));
    causes.extend(config_key_causes(rt, obj));
    causes.extend(size_causes(rt, obj));
    if *rt == resources::STATEFULSET {
        causes.extend(statefulset::validate_create(obj, version));
    } else if *rt == resources::VOLUME_ATTRIBUTES_CLASS
        || *rt == resources::VOLUME_ATTRIBUTES_CLASS_BETA
    {
        // `ValidateVolumeAttributesClass`: a driver must be named (`validateProvisioner`).
        if obj
            .get("driverName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(Cause::required("driverName", ""));
        }
    } else if *rt == resources::EVENT || *rt == resources::EVENT_V1 {
        causes.extend(event::validate_create(obj, *rt == resources::EVENT_V1));
    }
    invalid(rt, obj, causes)
}

/// What a server drops from an object it is given because its version or gates do not know
/// the field (`DropDisabledFields`): `old` is the stored object on an update.
pub fn drop_disabled(
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
    classes: AttributesClasses,
) {
    if *rt == resources::PVC {
        pvc::drop_disabled(obj, old, classes);
    }
}

pub fn validate_update(
    rt: &ResourceType,
    new: &Value,
    old: &Value,
    version: KubeVersion,
    claim_template_updates: bool,
    classes: AttributesClasses,
) -> Result<(), ApiError> {
    let mut causes = if *rt == resources::STATEFULSET {
        statefulset::validate_update(new, old, version, claim_template_updates)
    } else if *rt == resources::PVC {
        pvc::validate_update(new, old, version, classes)
    } else if *rt == resources::VOLUME_ATTRIBUTES_CLASS
        || *rt == resources::VOLUME_ATTRIBUTES_CLASS_BETA
    {
        attributes_class_update_causes(new, old)
    } else {
        Vec::new()
    };
    causes.extend(label_causes(new));
    causes.extend(config_key_causes(rt, new));
    causes.extend(size_causes(rt, new));
    invalid(rt, new, causes)
}

/// `ValidateVolumeAttributesClassUpdate`: a class is immutable, its driver and its parameters.
fn attributes_class_update_causes(new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if new.get("driverName") != old.get("driverName") {
        causes.push(Cause::forbidden(
            "driverName",
            "updates to driverName are forbidden.",
        ));
    }
    if !semantic_eq(
        new.get("parameters").unwrap_or(&Value::Null),
        old.get("parameters").unwrap_or(&Value::Null),
    ) {
        causes.push(Cause::forbidden(
            "parameters",
            "updates to parameters are forbidden.",
        ));
    }
    causes
}

/// A write of the `status` subresource: the type's status strategy (what it drops) and
/// status validation (422).
pub fn status_update(
    rt: &ResourceType,
    new: &mut Value,
    old: &Value,
    version: KubeVersion,
    classes: AttributesClasses,
) -> Result<(), ApiError> {
    let causes = if *rt == resources::PVC {
        pvc::status_update(new, old, version, classes)
    } else {
        Vec::new()
    };
    invalid(rt, new, causes)
}

/// Mutating admission on create (runs before validation, as in the real server).
pub fn admit_create(state: &State, rt: &ResourceType, obj: &mut Value) {
    if *rt == resources::PVC {
        let default_class = state
            .list(&resources::STORAGE_CLASS, None)
            .into_iter()
            .find(|c| {
                c.pointer("/metadata/annotations/storageclass.kubernetes.io~1is-default-class")
                    .and_then(Value::as_str)
                    == Some("true")
            })
            .map(|c| obj_name(&c).to_string());
        pvc::admit_create(obj, default_class);
    } else if *rt == resources::PERSISTENT_VOLUME {
        // The PV-protection admission plugin (the controller removes it on deletion).
        set_default(&mut obj["metadata"], "finalizers", json!([]));
        if let Some(f) = obj["metadata"]["finalizers"].as_array_mut()
            && !f.iter().any(|x| x == "kubernetes.io/pv-protection")
        {
            f.push(json!("kubernetes.io/pv-protection"));
        }
    }
}

/// Validating admission on update (runs after validation).
pub fn admit_update(
    state: &State,
    rt: &ResourceType,
    new: &Value,
    old: &Value,
) -> Result<(), ApiError> {
    if *rt == resources::PVC {
        let class = new
            .pointer("/spec/storageClassName")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .and_then(|c| state.get(&Key::new(&resources::STORAGE_CLASS, None, c)));
        pvc::admit_update(new, old, class)
            .map_err(|why| ApiError::forbidden(rt, obj_name(new), &why))?;
    }
    Ok(())
}

/// A fresh object's status: what `PrepareForCreate` leaves of it.
pub fn initial_status(rt: &ResourceType) -> Option<Value> {
    if *rt == resources::STATEFULSET {
        Some(json!({"replicas": 0, "availableReplicas": 0}))
    } else if *rt == resources::PVC {
        Some(json!({"phase": "Pending"}))
    } else if *rt == resources::POD {
        Some(json!({"phase": "Pending", "qosClass": "BestEffort"}))
    } else if *rt == resources::NAMESPACE {
        Some(json!({"phase": "Active"}))
    } else if *rt == resources::PERSISTENT_VOLUME {
        Some(json!({"phase": "Pending", "lastPhaseTransitionTime": super::store::now()}))
    } else {
        None
    }
}
