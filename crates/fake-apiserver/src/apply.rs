//! Server-side apply and `metadata.managedFields`.
//!
//! Simplified against the real structured-merge-diff, at the depth this project needs:
//! - Field ownership is a set of leaf paths per manager (and operation). Maps are descended;
//!   every list is atomic (owned and replaced as a whole, as `volumeClaimTemplates` is in the
//!   real server; the real server merges `containers` by name, the fake replaces the list).
//!   Seeded objects' `managedFields` (FieldsV1) are read back the same way: `k:`/`v:`/`i:`
//!   entries collapse onto their list.
//! - Apply merges the applied object over the live one: the applied fields win; fields the same
//!   manager applied before and now omits are removed unless another manager also owns them.
//! - A conflict is a field the applied object sets to a value different from the live one while
//!   another manager owns it; `force` moves ownership instead of failing.
//! - Update operations (create, PUT, merge/JSON/strategic patch) give their manager the leaf
//!   paths whose value they changed and take those away from the other managers.
//! - `managedFields` never make a write by themselves: an apply that changes no value is a
//!   no-op (same resourceVersion), as the fixtures show for an identical apply.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::errors::ApiError;

pub type FieldPath = Vec<String>;

/// Metadata fields that are identity or server-owned, never field-managed.
const UNMANAGED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

fn collect_leaves(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                prefix.push(k.clone());
                collect_leaves(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// The leaf paths an object sets (identity, `apiVersion`/`kind` and, when `status` is a
/// subresource, `status` excluded).
pub fn owned_paths(obj: &Value, skip_status: bool) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    let Some(m) = obj.as_object() else {
        return out;
    };
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "status" if skip_status => {}
            "metadata" => {
                if let Some(meta) = v.as_object() {
                    for (mk, mv) in meta {
                        if UNMANAGED_METADATA.contains(&mk.as_str()) {
                            continue;
                        }
                        let mut prefix = vec!["metadata".to_string(), mk.clone()];
                        collect_leaves(mv, &mut prefix, &mut out);
                    }
                }
            }
            _ => {
                let mut prefix = vec![k.clone()];
                collect_leaves(v, &mut prefix, &mut out);
            }
        }
    }
    out
}

pub fn get_path<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, seg| cur.get(seg.as_str()))
}

fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parents {
        match cur.get_mut(seg.as_str()) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

/// Maps merge recursively; anything else (scalars, lists, null) replaces.
pub fn deep_merge(doc: &mut Value, over: &Value) {
    match (doc, over) {
        (Value::Object(d), Value::Object(o)) => {
            for (k, v) in o {
                match d.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        deep_merge(existing, v)
                    }
                    _ => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (doc, over) => *doc = over.clone(),
    }
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// One `managedFields` entry with its FieldsV1 read as leaf paths.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: Option<String>,
    pub paths: BTreeSet<FieldPath>,
    /// The FieldsV1 as read: written back verbatim while `paths` still says the same, so an
    /// entry nobody touched keeps its list keys (`k:{"name":"app"}`) like on the real server.
    pub raw: Option<Value>,
}

fn parse_fields(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    let Some(m) = v.as_object() else {
        out.insert(prefix.clone());
        return;
    };
    let mut descended = false;
    for (k, child) in m {
        if let Some(field) = k.strip_prefix("f:") {
            descended = true;
            prefix.push(field.to_string());
            parse_fields(child, prefix, out);
            prefix.pop();
        } else if k.starts_with("k:") || k.starts_with("v:") || k.starts_with("i:") {
            // A list entry: lists are atomic here, so the list itself is the leaf.
            out.insert(prefix.clone());
            return;
        }
    }
    if !descended && !prefix.is_empty() {
        out.insert(prefix.clone());
    }
}

fn render_fields(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut cur = &mut root;
        for seg in path {
            let entry = cur
                .entry(format!("f:{seg}"))
                .or_insert_with(|| Value::Object(Map::new()));
            match entry {
                Value::Object(m) => cur = m,
                _ => unreachable!("render_fields only inserts objects"),
            }
        }
    }
    Value::Object(root)
}

fn unchanged_raw(e: &ManagedEntry) -> Option<Value> {
    let raw = e.raw.as_ref()?;
    let mut paths = BTreeSet::new();
    parse_fields(raw, &mut Vec::new(), &mut paths);
    (paths == e.paths).then(|| raw.clone())
}

pub fn read_managed(obj: &Value) -> Vec<ManagedEntry> {
    let Some(entries) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    entries
        .iter()
        .map(|e| {
            let mut paths = BTreeSet::new();
            parse_fields(&e["fieldsV1"], &mut Vec::new(), &mut paths);
            ManagedEntry {
                manager: e["manager"].as_str().unwrap_or_default().to_string(),
                operation: e["operation"].as_str().unwrap_or("Update").to_string(),
                api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
                time: e["time"].as_str().unwrap_or_default().to_string(),
                subresource: e["subresource"].as_str().map(str::to_string),
                paths,
                raw: Some(e["fieldsV1"].clone()),
            }
        })
        .collect()
}

/// Writes the entries back, dropping the fields the object no longer has (a field removed by
/// anyone is owned by no one, so a later apply of it by another manager does not conflict)
/// and the entries that own nothing any more.
pub fn write_managed(obj: &mut Value, entries: &[ManagedEntry]) {
    let entries: Vec<ManagedEntry> = entries
        .iter()
        .cloned()
        .map(|mut e| {
            e.paths.retain(|p| get_path(obj, p).is_some());
            e
        })
        .collect();
    let rendered: Vec<Value> = entries
        .iter()
        .filter(|e| !e.paths.is_empty())
        .map(|e| {
            let mut m = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": unchanged_raw(e).unwrap_or_else(|| render_fields(&e.paths)),
            });
            if let Some(s) = &e.subresource {
                m["subresource"] = json!(s);
            }
            m
        })
        .collect();
    if rendered.is_empty() {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    } else if let Some(o) = obj.as_object_mut() {
        let meta = o.entry("metadata").or_insert_with(|| json!({}));
        if meta.is_null() {
            *meta = json!({});
        }
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("managedFields".into(), Value::Array(rendered));
        }
    }
}

fn strip_identity(applied: &Value, skip_status: bool) -> Value {
    let mut a = applied.clone();
    if let Some(m) = a.as_object_mut() {
        if skip_status {
            m.remove("status");
        }
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in UNMANAGED_METADATA {
                if *k != "name" && *k != "namespace" {
                    meta.remove(*k);
                }
            }
        }
    }
    a
}

/// Server-side apply of `applied` by `manager` over `live` (or over nothing: a create).
/// Returns the merged object with its new `managedFields`; defaults, validation and the
/// status rule are the caller's.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    skip_status: bool,
    time: &str,
) -> Result<Value, ApiError> {
    let mut result = live.cloned().unwrap_or_else(|| json!({}));
    let mut entries = live.map(read_managed).unwrap_or_default();
    let new_paths = owned_paths(applied, skip_status);
    let is_main = |e: &ManagedEntry| e.subresource.is_none();
    let mine = |e: &ManagedEntry| e.manager == manager && e.operation == "Apply" && is_main(e);

    // Conflicts: another manager owns a field this apply sets to a different value.
    let mut conflicts = Vec::new();
    for e in entries.iter_mut().filter(|e| !mine(e) && is_main(e)) {
        let mut taken = Vec::new();
        for p in &new_paths {
            for q in e.paths.iter().filter(|q| overlaps(p, q)) {
                let longer = if q.len() > p.len() { q } else { p };
                let differs = live.and_then(|l| get_path(l, longer)) != get_path(applied, longer);
                if differs {
                    taken.push(q.clone());
                    conflicts.push((e.manager.clone(), format!(".{}", q.join("."))));
                }
            }
        }
        if force {
            for q in taken {
                e.paths.remove(&q);
            }
        }
    }
    if !force && !conflicts.is_empty() {
        conflicts.sort();
        conflicts.dedup();
        return Err(ApiError::apply_conflicts(api_version, &conflicts));
    }

    // Fields this manager applied before and now omits go, unless someone else owns them.
    let previous: BTreeSet<FieldPath> = entries
        .iter()
        .filter(|e| mine(e))
        .flat_map(|e| e.paths.iter().cloned())
        .collect();
    for p in previous.difference(&new_paths) {
        let shared = entries
            .iter()
            .filter(|e| !mine(e))
            .any(|e| e.paths.iter().any(|q| overlaps(p, q)));
        let still_applied = new_paths.iter().any(|q| overlaps(p, q));
        if !shared && !still_applied {
            remove_path(&mut result, p);
        }
    }

    deep_merge(&mut result, &strip_identity(applied, skip_status));

    match entries.iter_mut().find(|e| mine(e)) {
        Some(e) => {
            e.paths = new_paths;
            e.time = time.to_string();
            e.api_version = api_version.to_string();
        }
        None => entries.push(ManagedEntry {
            manager: manager.to_string(),
            operation: "Apply".to_string(),
            api_version: api_version.to_string(),
            time: time.to_string(),
            subresource: None,
            paths: new_paths,
            raw: None,
        }),
    }
    write_managed(&mut result, &entries);
    Ok(result)
}

/// Records an Update operation: `manager` now owns every leaf whose value changed between
/// `old` and `new` (all leaves on create); other managers lose those leaves.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    time: &str,
) {
    let mut entries = old.map(read_managed).unwrap_or_default();
    let on_status = subresource == Some("status");
    let candidate: BTreeSet<FieldPath> = owned_paths(new, false)
        .into_iter()
        .filter(|p| (p.first().map(String::as_str) == Some("status")) == on_status)
        .collect();
    let changed: BTreeSet<FieldPath> = candidate
        .into_iter()
        .filter(|p| old.and_then(|o| get_path(o, p)) != get_path(new, p))
        .collect();
    if changed.is_empty() {
        write_managed(new, &entries);
        return;
    }
    for e in entries.iter_mut().filter(|e| e.manager != manager) {
        e.paths
            .retain(|q| !changed.iter().any(|p| overlaps(p, q) && p.len() <= q.len()));
    }
    let sub = subresource.map(str::to_string);
    match entries
        .iter_mut()
        .find(|e| e.manager == manager && e.operation == "Update" && e.subresource == sub)
    {
        Some(e) => {
            e.paths.extend(changed);
            e.time = time.to_string();
        }
        None => entries.push(ManagedEntry {
            manager: manager.to_string(),
            operation: "Update".to_string(),
            api_version: api_version.to_string(),
            time: time.to_string(),
            subresource: sub,
            paths: changed,
            raw: None,
        }),
    }
    write_managed(new, &entries);
}
