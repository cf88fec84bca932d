//! The object store: one global `resourceVersion` counter like etcd's revision, every write
//! recorded as a watch event (kept forever, so a watch can resume from any version), and the
//! open watches fed under the same lock as the write, so no event can slip between a list and
//! the watch that follows it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::faults::{CreateDenial, FaultRule, RequestRecord};
use super::identity::{RbacRequest, TokenUser};
use super::query::Selectors;
use super::resources::{self, ResourceType};
use super::version::{AttributesClasses, GcMode, KubeVersion};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub group: String,
    pub plural: String,
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(rt: &ResourceType, namespace: Option<&str>, name: &str) -> Self {
        Key {
            group: rt.group.to_string(),
            plural: rt.plural.to_string(),
            namespace: if rt.namespaced {
                namespace.unwrap_or("default").to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }

    pub fn of(rt: &ResourceType, obj: &Value) -> Self {
        Key::new(rt, obj_namespace(obj), obj_name(obj))
    }
}

pub fn obj_name(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub fn obj_namespace(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/namespace").and_then(Value::as_str)
}

pub fn obj_uid(obj: &Value) -> &str {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[derive(Debug, Clone)]
pub struct Event {
    pub rt: ResourceType,
    pub rv: u64,
    /// `{"type": ..., "object": ...}` as an unfiltered watch sees it.
    pub wire: Value,
    /// The object before a MODIFIED event.
    pub previous: Option<Value>,
}

impl Event {
    /// The event a filtered watch sees: an object that starts (stops) matching the watch's
    /// selectors arrives as ADDED (DELETED), like the real server's filtered watches.
    pub fn seen_by(&self, wants: impl Fn(&Value) -> bool) -> Option<Value> {
        let object = &self.wire["object"];
        let kind = match (self.wire["type"].as_str(), &self.previous) {
            (Some("MODIFIED"), Some(prev)) => match (wants(prev), wants(object)) {
                (true, true) => "MODIFIED",
                (true, false) => "DELETED",
                (false, true) => "ADDED",
                (false, false) => return None,
            },
            (Some(kind), _) if wants(object) => kind,
            _ => return None,
        };
        Some(json!({"type": kind, "object": object}))
    }
}

pub struct Watcher {
    pub rt: ResourceType,
    pub namespace: Option<String>,
    pub selectors: Selectors,
    pub tx: mpsc::UnboundedSender<Value>,
}

impl Watcher {
    pub fn wants(&self, rt: &ResourceType, obj: &Value) -> bool {
        self.rt == *rt
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| obj_namespace(obj) == Some(ns))
            && self.selectors.matches(obj)
    }
}

/// An object whose finalizers the simulated controllers still have to process.
#[derive(Debug, Clone)]
pub struct Pending {
    pub rt: ResourceType,
    pub key: Key,
    pub uid: String,
}

/// The store one fake serves: its `State` behind one lock, shared by the requests, the test
/// driving the fake and the controllers' timers. Every request and every controller pass holds
/// the lock throughout, so each is atomic like an etcd transaction.
#[derive(Clone)]
pub struct Store {
    state: Arc<Mutex<State>>,
}

impl Store {
    pub fn new(version: KubeVersion) -> Self {
        Store {
            state: Arc::new(Mutex::new(State::new(version))),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not hide the state from the others.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct State {
    pub version: KubeVersion,
    pub rv: u64,
    pub uid_counter: u64,
    pub objects: BTreeMap<Key, Value>,
    pub history: Vec<Event>,
    pub watchers: Vec<Watcher>,
    pub requests: Vec<RequestRecord>,
    pub faults: Vec<(FaultRule, usize)>,
    pub gc: GcMode,
    /// Deletions waiting for a stuck garbage collector.
    pub gc_pending: Vec<Pending>,
    pub sts_controller: bool,
    /// Collector passes scheduled and not yet run.
    pub gc_inflight: usize,
    /// Watches from before this version answer 410 Expired (see `FakeApiServer::compact`).
    pub compacted_rv: u64,
    /// Pods start Running and Ready (a cluster with nodes) instead of Pending.
    pub pods_ready: bool,
    /// Deleting claims whose `pvc-protection` waits for the pods that mount them.
    pub pvc_waiting: Vec<Pending>,
    pub request_seq: u64,
    /// Who requests without impersonation are made as (`None`: the admin, never refused).
    pub default_user: Option<String>,
    /// Every authorization decision, in order (see `authz`).
    pub rbac_log: Vec<RbacRequest>,
    /// The bearer tokens a TokenReview authenticates, and as whom (see `reviews`).
    pub tokens: Vec<(String, TokenUser)>,
    /// Validating admission on CREATE a test installed (see `admission`).
    pub create_denials: Vec<CreateDenial>,
    /// KEP-4650's `StatefulSetUpdateVolumeClaimTemplate` gate is on (see
    /// `FakeApiServer::enable_claim_template_updates`).
    pub claim_template_updates: bool,
    /// The server was started with the `VolumeAttributesClass` gate and its beta API on (see
    /// `FakeApiServer::enable_volume_attributes_class`); only 1.32 reads it.
    pub attributes_class_gate: bool,
}

impl State {
    pub fn new(version: KubeVersion) -> Self {
        State {
            version,
            // The real server starts well above 1; tests must never assume small numbers.
            rv: 100,
            uid_counter: 0,
            objects: BTreeMap::new(),
            history: Vec::new(),
            watchers: Vec::new(),
            requests: Vec::new(),
            faults: Vec::new(),
            gc: GcMode::After(std::time::Duration::from_millis(150)),
            gc_pending: Vec::new(),
            sts_controller: false,
            gc_inflight: 0,
            compacted_rv: 0,
            pods_ready: false,
            pvc_waiting: Vec::new(),
            request_seq: 0,
            default_user: None,
            rbac_log: Vec::new(),
            tokens: Vec::new(),
            create_denials: Vec::new(),
            claim_template_updates: false,
            attributes_class_gate: false,
        }
    }

    /// How this server serves VolumeAttributesClass ([`KubeVersion::attributes_classes`]).
    pub fn attributes_classes(&self) -> AttributesClasses {
        self.version.attributes_classes(self.attributes_class_gate)
    }

    /// Whether this server serves `rt` at all (its version, its gates).
    pub fn serves(&self, rt: &ResourceType) -> bool {
        resources::served(rt, self.attributes_classes())
    }

    pub fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// A fresh uid in the real server's format (random-looking, unique per process).
    pub fn new_uid(&mut self) -> String {
        self.uid_counter += 1;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let mut x = (seed as u64) ^ self.uid_counter.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut next = || {
            // splitmix64
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let a = next();
        let b = next();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0x0fff,
            ((b >> 48) & 0x3fff) | 0x8000,
            b & 0xffff_ffff_ffff
        )
    }

    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    pub fn list(&self, rt: &ResourceType, namespace: Option<&str>) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|(k, _)| {
                k.group == rt.group
                    && k.plural == rt.plural
                    && namespace.is_none_or(|ns| !rt.namespaced || k.namespace == ns)
            })
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Every object in `namespace` with an ownerReference to `owner_uid`.
    pub fn dependents(&self, namespace: &str, owner_uid: &str) -> Vec<(ResourceType, Key)> {
        self.objects
            .iter()
            .filter(|(k, _)| k.namespace == namespace)
            .filter(|(_, v)| {
                v.pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == owner_uid))
            })
            .filter_map(|(k, _)| {
                resources::ALL
                    .iter()
                    .find(|r| r.group == k.group && r.plural == k.plural)
                    .map(|rt| (*rt, k.clone()))
            })
            .collect()
    }

    fn emit(
        &mut self,
        rt: ResourceType,
        kind: &str,
        object: &Value,
        rv: u64,
        previous: Option<Value>,
    ) {
        let event = Event {
            rt,
            rv,
            wire: json!({"type": kind, "object": object}),
            previous,
        };
        self.watchers
            .retain(|w| match event.seen_by(|o| w.wants(&rt, o)) {
                Some(wire) => w.tx.send(wire).is_ok(),
                None => !w.tx.is_closed(),
            });
        self.history.push(event);
    }

    /// Stores a new object (ADDED), assigning the next resourceVersion.
    pub fn insert(&mut self, rt: ResourceType, mut obj: Value) -> Value {
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.objects.insert(Key::of(&rt, &obj), obj.clone());
        self.emit(rt, "ADDED", &obj, rv, None);
        obj
    }

    /// Replaces a stored object (MODIFIED), assigning the next resourceVersion.
    pub fn replace(&mut self, rt: ResourceType, mut obj: Value) -> Value {
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let previous = self.objects.insert(Key::of(&rt, &obj), obj.clone());
        self.emit(rt, "MODIFIED", &obj, rv, previous);
        obj
    }

    /// Stores a seeded object verbatim. A given resourceVersion is kept (later writes still get
    /// newer ones); a missing one is assigned.
    pub fn seed(&mut self, rt: ResourceType, mut obj: Value) {
        let kind = if self.objects.contains_key(&Key::of(&rt, &obj)) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        let given = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<u64>().ok());
        let rv = match given {
            Some(rv) => {
                self.rv = self.rv.max(rv);
                self.rv
            }
            None => {
                let rv = self.next_rv();
                obj["metadata"]["resourceVersion"] = json!(rv.to_string());
                rv
            }
        };
        let previous = self.objects.insert(Key::of(&rt, &obj), obj.clone());
        self.emit(rt, kind, &obj, rv, previous);
    }

    /// Removes an object (DELETED). The event carries its last state at a new
    /// resourceVersion, as `watch-orphan-delete.jsonl` shows.
    pub fn remove(&mut self, rt: ResourceType, key: &Key) -> Option<Value> {
        let mut obj = self.objects.remove(key)?;
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.emit(rt, "DELETED", &obj, rv, None);
        Some(obj)
    }
}

/// Now, as the API server writes timestamps (RFC 3339, whole seconds, UTC).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
