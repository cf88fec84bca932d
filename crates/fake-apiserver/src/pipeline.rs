//! The write pipeline every verb goes through, in the real server's order: decode checks,
//! admission, defaults, validation, preconditions, status subresource rule, managedFields,
//! generation, no-op detection, then the store (or nothing, on a dry run).
//!
//! A write hands back what it committed (`commit`); the caller runs the controllers on it.

use serde_json::{Value, json};

use super::admission;
use super::apply;
use super::commit::{Change, Commit, WriteResult, Written};
use super::crd_schema;
use super::errors::{ApiError, Cause};
use super::request::Target;
use super::resources::{self, ResourceType};
use super::semantics;
use super::store::{Key, State, now, obj_name, obj_namespace};
use super::version::KubeVersion;

pub fn with_type(rt: &ResourceType, mut obj: Value) -> Value {
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(rt.api_version()));
        m.insert("kind".into(), json!(rt.kind));
    }
    obj
}

/// How the write was made, for `managedFields`.
pub enum Managed {
    /// An Update operation by this manager.
    Update(String),
    /// Already computed (server-side apply).
    Done,
}

pub struct WriteOpts {
    pub dry_run: bool,
    pub managed: Managed,
    pub subresource: Option<String>,
    /// PUT semantics for a missing `resourceVersion` on custom resources.
    pub require_rv: bool,
}

pub fn check_identity(t: &Target, name: Option<&str>, obj: &Value) -> Result<(), ApiError> {
    if t.rt.namespaced
        && let (Some(path_ns), Some(body_ns)) = (t.namespace.as_deref(), obj_namespace(obj))
        && path_ns != body_ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if let Some(name) = name {
        let body_name = obj_name(obj);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(&format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
    }
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && kind != t.rt.kind
    {
        return Err(ApiError::bad_request(&format!(
            "the kind of the object ({kind}) does not match the kind served at this path ({})",
            t.rt.kind
        )));
    }
    Ok(())
}

fn random_suffix(state: &mut State) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let uid = state.new_uid().replace('-', "");
    uid.bytes()
        .take(5)
        .map(|b| ALPHABET[b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Creates an object through the full pipeline (admission, defaults, validation).
pub fn create_object(
    state: &mut State,
    rt: &ResourceType,
    namespace: Option<&str>,
    mut obj: Value,
    opts: &WriteOpts,
) -> WriteResult {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request is not an object",
        ));
    }
    semantics::check_shape(rt, &obj)?;
    obj = with_type(rt, obj);
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    if rt.namespaced {
        obj["metadata"]["namespace"] = json!(namespace.unwrap_or("default"));
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    if obj_name(&obj).is_empty()
        && let Some(prefix) = obj
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .map(str::to_string)
    {
        let suffix = random_suffix(state);
        obj["metadata"]["name"] = json!(format!("{prefix}{suffix}"));
    }
    let name = obj_name(&obj).to_string();
    if let Some(meta) = obj["metadata"].as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
        ] {
            meta.remove(k);
        }
        if matches!(opts.managed, Managed::Update(_)) {
            meta.remove("managedFields");
        }
    }
    if rt.status_subresource
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
        if let Some(s) = semantics::initial_status(rt) {
            m.insert("status".into(), s);
        }
    }
    admission::namespace_lifecycle(state, rt, namespace, &name)?;
    semantics::admit_create(state, rt, &mut obj);
    semantics::default(rt, &mut obj, state.version);
    semantics::drop_disabled(rt, &mut obj, None, state.attributes_classes());
    crd_schema::admit(rt, &mut obj, state.version)?;
    semantics::validate_create(rt, &obj, state.version)?;
    // Validating admission runs after validation and before the store looks for an existing
    // object: a dry-run create of an existing object is denied, not answered 409.
    admission::admit_create(state, rt, &obj)?;
    let key = Key::new(rt, namespace, &name);
    if state.get(&key).is_some() {
        return Err(ApiError::already_exists(rt, &name));
    }
    obj["metadata"]["uid"] = json!(state.new_uid());
    obj["metadata"]["creationTimestamp"] = json!(now());
    if rt.has_generation {
        obj["metadata"]["generation"] = json!(1);
    }
    if let Managed::Update(manager) = &opts.managed {
        apply::record_update(None, &mut obj, manager, None, &rt.api_version(), &now());
    }
    if opts.dry_run {
        return Ok(Written::answer(201, obj));
    }
    let stored = state.insert(*rt, obj);
    let change = if *rt == resources::NAMESPACE {
        Change::NamespaceCreated(stored.clone())
    } else {
        Change::Stored
    };
    Ok(Written::committed(
        201,
        stored,
        Commit::new(rt, namespace, change),
    ))
}

/// What bumps `generation`: everything but `metadata` and `status`; for a custom resource
/// without a status subresource everything but `metadata` (the apiextensions strategy's
/// `copyNonMetadata`: its `status` is a plain field, and writing it moves the generation).
fn spec_part(rt: &ResourceType, obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        for k in ["metadata", "status", "apiVersion", "kind"] {
            if k == "status" && rt.custom && !rt.status_subresource {
                continue;
            }
            m.remove(k);
        }
    }
    o
}

fn comparable(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        meta.remove("resourceVersion");
    }
    o
}

/// Updates an object through the full pipeline: resourceVersion precondition, status rule,
/// defaults, validation, admission, generation, no-op detection.
pub fn update_object(
    state: &mut State,
    rt: &ResourceType,
    old: &Value,
    candidate: Value,
    opts: &WriteOpts,
) -> WriteResult {
    if !candidate.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request is not an object",
        ));
    }
    let name = obj_name(old).to_string();
    let old_rv = old
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    match candidate
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        Some(rv) if rv != old_rv => return Err(ApiError::conflict_modified(rt, &name)),
        Some(_) => {}
        None if opts.require_rv && rt.custom => {
            // This one check names the resource by its plural (`kustomizations.<group>`).
            return Err(ApiError::invalid_kind(
                &rt.qualified_plural(),
                rt.group,
                rt.plural,
                &name,
                &[errors_invalid_rv(state.version)],
            ));
        }
        None => {}
    }
    semantics::check_shape(rt, &candidate)?;
    let mut new = with_type(rt, candidate);
    if !new["metadata"].is_object() {
        new["metadata"] = json!({});
    }
    for k in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old["metadata"].get(k) {
            Some(v) => new["metadata"][k] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(k);
                }
            }
        }
    }
    // A deleting object may lose finalizers but gain none (ValidateObjectMetaUpdate).
    if old["metadata"].get("deletionTimestamp").is_some() {
        let names = |o: &Value| -> Vec<String> {
            o.pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let before = names(old);
        let added: Vec<String> = names(&new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            let listed: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
            let mut e = ApiError::invalid(
                rt,
                &name,
                &[Cause::forbidden(
                    "metadata.finalizers",
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        listed.join(", ")
                    ),
                )],
            );
            // Built-in types run ValidateObjectMetaUpdate twice: the cause is listed twice
            // (the message, deduplicated, once).
            if !rt.custom
                && let Some(causes) = e.body["details"]["causes"].as_array_mut()
                && let Some(first) = causes.first().cloned()
            {
                causes.push(first);
            }
            return Err(e);
        }
    }
    let on_status = opts.subresource.as_deref() == Some("status");
    if rt.status_subresource {
        if on_status {
            let status = new.get("status").cloned();
            let managed = new["metadata"].get("managedFields").cloned();
            new = old.clone();
            match status {
                Some(s) => new["status"] = s,
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            if let Some(mf) = managed {
                new["metadata"]["managedFields"] = mf;
            }
        } else {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
    }
    crd_schema::admit(rt, &mut new, state.version)?;
    if on_status {
        semantics::status_update(rt, &mut new, old, state.version, state.attributes_classes())?;
    } else {
        semantics::default(rt, &mut new, state.version);
        let classes = state.attributes_classes();
        semantics::drop_disabled(rt, &mut new, Some(old), classes);
        semantics::validate_update(
            rt,
            &new,
            old,
            state.version,
            state.claim_template_updates,
            classes,
        )?;
        semantics::admit_update(state, rt, &new, old)?;
    }
    if let Managed::Update(manager) = &opts.managed {
        apply::record_update(
            Some(old),
            &mut new,
            manager,
            opts.subresource.as_deref(),
            &rt.api_version(),
            &now(),
        );
    }
    if rt.has_generation && spec_part(rt, &new) != spec_part(rt, old) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        new["metadata"]["generation"] = json!(generation + 1);
    }
    new["metadata"]["resourceVersion"] = json!(old_rv);
    if comparable(&new) == comparable(old) {
        // Nothing changed: no write, same resourceVersion, no event.
        return Ok(Written::answer(200, with_type(rt, old.clone())));
    }
    if opts.dry_run {
        return Ok(Written::answer(200, new));
    }
    let deleting = new["metadata"].get("deletionTimestamp").is_some();
    let no_finalizers = new["metadata"]["finalizers"]
        .as_array()
        .is_none_or(|f| f.is_empty());
    let key = Key::of(rt, &new);
    if deleting && no_finalizers {
        state.objects.insert(key.clone(), new);
        let gone = state.remove(*rt, &key).unwrap_or_default();
        let commit = Commit::new(rt, obj_namespace(&gone), Change::Finalized);
        return Ok(Written::committed(200, gone, commit));
    }
    let namespace = obj_namespace(&new).map(str::to_string);
    let stored = state.replace(*rt, new);
    let commit = Commit::stored(rt, namespace.as_deref());
    Ok(Written::committed(200, stored, commit))
}

/// An update without a resourceVersion where one is required. The value prints as Go's `%#v`
/// of a uint64 (`0x0`) until 1.36, which prints `0`.
fn errors_invalid_rv(version: KubeVersion) -> Cause {
    let zero = if version >= KubeVersion::V1_36 {
        "0"
    } else {
        "0x0"
    };
    Cause::invalid(
        "metadata.resourceVersion",
        zero,
        "must be specified for an update",
    )
}
