//! ControllerRevisions: one per distinct pod template, named `<set>-<hash>`; orphans with the
//! selector's labels are adopted, so a re-created set finds its old revision.

use serde_json::{Value, json};

use super::{HASH_LABEL, adopt, controller_uid, create, owner_ref};
use crate::query::LabelSelector;
use crate::resources;
use crate::store::{Key, State, obj_name, obj_uid};

fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// `rand.SafeEncodeString`: no vowels, no confusable characters.
fn safe_encode(s: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHABET[b as usize % ALPHABET.len()] as char)
        .collect()
}

fn revision_hash(template: &Value) -> String {
    safe_encode(&fnv32a(template.to_string().as_bytes()).to_string())
}

fn template_of_revision(cr: &Value) -> Option<&Value> {
    cr.pointer("/data/spec/template")
}

fn strip_patch_directive(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(m) = t.as_object_mut() {
        m.remove("$patch");
    }
    t
}

/// The update revision's name, adopting or creating the ControllerRevision as needed.
pub fn ensure_revision(state: &mut State, set: &Value, selector: &LabelSelector) -> String {
    let ns = set["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let name = obj_name(set).to_string();
    let uid = obj_uid(set).to_string();
    let template = set["spec"]["template"].clone();
    let revisions: Vec<Value> = state
        .list(&resources::CONTROLLER_REVISION, Some(&ns))
        .into_iter()
        .filter(|cr| selector.matches(cr))
        .collect();
    let mut mine = Vec::new();
    for cr in revisions {
        match controller_uid(&cr) {
            Some(owner) if owner == uid => mine.push(cr),
            Some(_) => {}
            None => {
                adopt(state, resources::CONTROLLER_REVISION, cr.clone(), set);
                mine.push(cr);
            }
        }
    }
    if let Some(cr) = mine
        .iter()
        .find(|cr| template_of_revision(cr).map(strip_patch_directive).as_ref() == Some(&template))
    {
        return obj_name(cr).to_string();
    }
    let next_revision = mine
        .iter()
        .filter_map(|cr| cr["revision"].as_i64())
        .max()
        .unwrap_or(0)
        + 1;
    let seeded_hash = if mine.is_empty() {
        let hashes: Vec<String> = state
            .list(&resources::POD, Some(&ns))
            .iter()
            .filter(|p| selector.matches(p))
            .filter_map(|p| {
                p.pointer(&format!("/metadata/labels/{HASH_LABEL}"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect();
        match hashes.first() {
            Some(h) if hashes.iter().all(|x| x == h) => Some(h.clone()),
            _ => None,
        }
    } else {
        None
    };
    let cr_name = seeded_hash.unwrap_or_else(|| format!("{name}-{}", revision_hash(&template)));
    let hash = cr_name
        .strip_prefix(&format!("{name}-"))
        .unwrap_or(&cr_name)
        .to_string();
    let mut labels = set
        .pointer("/spec/selector/matchLabels")
        .cloned()
        .unwrap_or(json!({}));
    labels["controller.kubernetes.io/hash"] = json!(hash);
    let mut data_template = template.clone();
    data_template["$patch"] = json!("replace");
    let key = Key::new(&resources::CONTROLLER_REVISION, Some(&ns), &cr_name);
    if state.get(&key).is_none() {
        create(
            state,
            resources::CONTROLLER_REVISION,
            json!({
                "apiVersion": "apps/v1",
                "kind": "ControllerRevision",
                "metadata": {
                    "name": cr_name,
                    "namespace": ns,
                    "labels": labels,
                    "ownerReferences": [owner_ref(set)],
                },
                "data": {"spec": {"template": data_template}},
                "revision": next_revision,
            }),
        );
    }
    cr_name
}
