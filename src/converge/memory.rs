//! An in-memory cluster and journal sharing one request log and one write counter, so the
//! converge logic (and the fault at every write) is tested without an API server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::cluster::{CallError, CallErrorKind};
use crate::cluster::{Cluster, DeleteOutcome, WaitOutcome};
use crate::journal::{Intent, Journal, JournalError, MemoryJournal};

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The write fails with a 500; nothing changes.
    Fail,
    /// The write happens, the answer is lost (the caller sees a connection error).
    DropAfterWrite,
}

#[derive(Default)]
pub struct State {
    pub statefulsets: BTreeMap<(String, String), StatefulSet>,
    pub claims: Vec<PersistentVolumeClaim>,
    pub classes: Vec<StorageClass>,
    /// Every call, `write:` prefixed for writes.
    pub log: Vec<String>,
    pub writes: usize,
    pub fault: Option<(usize, Fault)>,
    /// Orphan finalizer never removed.
    pub gc_stuck: bool,
    /// Every dry run answers with this error.
    pub dry_run_error: Option<CallError>,
    /// Every dry-run create (the pre-flight) answers with this error instead of the
    /// server's 409 AlreadyExists (or 201 when absent).
    pub create_error: Option<CallError>,
    /// Every object the pre-flight sent.
    pub preflighted: Vec<StatefulSet>,
    /// What the server says of its VolumeAttributesClasses.
    pub attribute_classes: crate::decide::AttributeClasses,
    next_uid: u64,
}

#[derive(Clone, Default)]
pub struct World {
    pub state: Arc<Mutex<State>>,
    pub journal: Arc<MemoryJournal>,
}

fn sts_key(s: &StatefulSet) -> (String, String) {
    (
        s.metadata.namespace.clone().unwrap_or_default(),
        s.metadata.name.clone().unwrap_or_default(),
    )
}

fn status(code: u16, reason: &str, message: &str, call: &str, object: &str) -> CallError {
    CallError::api(call, object, code, reason, message)
}

/// Templates as the server compares them: without server output and defaults.
fn normalised_templates(s: &StatefulSet) -> serde_json::Value {
    let mut ts = s
        .spec
        .as_ref()
        .and_then(|sp| sp.volume_claim_templates.clone())
        .unwrap_or_default();
    for t in &mut ts {
        t.status = None;
        t.metadata.creation_timestamp = None;
        if let Some(spec) = t.spec.as_mut() {
            spec.volume_mode.get_or_insert_with(|| "Filesystem".into());
        }
    }
    serde_json::to_value(ts).unwrap_or_default()
}

/// The server's immutability check, reduced to what the tests use.
fn immutable_changed(live: &StatefulSet, new: &StatefulSet) -> bool {
    let (Some(l), Some(n)) = (live.spec.as_ref(), new.spec.as_ref()) else {
        return false;
    };
    l.selector != n.selector
        || l.service_name != n.service_name
        || l.pod_management_policy.as_deref().unwrap_or("OrderedReady")
            != n.pod_management_policy.as_deref().unwrap_or("OrderedReady")
        || normalised_templates(live) != normalised_templates(new)
}

const IMMUTABLE: &str = "StatefulSet.apps \"x\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

impl World {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Counts a write; `Err` when the fault plan fails it before it happens.
    fn write(&self, what: &str, object: &str) -> Result<Option<Fault>, CallError> {
        let mut s = self.lock();
        s.log.push(format!("write:{what} {object}"));
        let index = s.writes;
        s.writes += 1;
        match s.fault {
            Some((k, Fault::Fail)) if k == index => Err(status(
                500,
                "InternalError",
                "injected failure",
                what,
                object,
            )),
            Some((k, f)) if k == index => Ok(Some(f)),
            _ => Ok(None),
        }
    }

    fn after_write(fault: Option<Fault>, what: &str, object: &str) -> Result<(), CallError> {
        match fault {
            Some(Fault::DropAfterWrite) => Err(CallError::new(
                what,
                object,
                CallErrorKind::Connection {
                    message: "connection reset (injected after the write)".into(),
                },
            )),
            _ => Ok(()),
        }
    }

    fn read(&self, what: &str) {
        self.lock().log.push(format!("read:{what}"));
    }

    pub fn writes(&self) -> Vec<String> {
        self.lock()
            .log
            .iter()
            .filter(|l| l.starts_with("write:"))
            .cloned()
            .collect()
    }

    pub fn seed_sts(&self, mut s: StatefulSet) -> String {
        let mut st = self.lock();
        st.next_uid += 1;
        let uid = format!("uid-{}", st.next_uid);
        s.metadata.uid = Some(uid.clone());
        s.metadata.resource_version = Some(st.next_uid.to_string());
        st.statefulsets.insert(sts_key(&s), s);
        uid
    }

    pub fn sts(&self, ns: &str, name: &str) -> Option<StatefulSet> {
        self.lock()
            .statefulsets
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// The parts of the world a converge is about: StatefulSet spec (uid aside), claim sizes
    /// and uids, unfinished intents.
    pub async fn snapshot(&self) -> serde_json::Value {
        let intents = self.journal.list().await.unwrap_or_default().intents.len();
        let s = self.lock();
        let stss: Vec<serde_json::Value> = s
            .statefulsets
            .values()
            .map(|x| {
                serde_json::json!({
                    "name": x.metadata.name, "terminating": x.metadata.deletion_timestamp.is_some(),
                    "spec": x.spec,
                })
            })
            .collect();
        let claims: Vec<serde_json::Value> = s
            .claims
            .iter()
            .map(|c| serde_json::json!({"name": c.metadata.name, "uid": c.metadata.uid, "spec": c.spec}))
            .collect();
        serde_json::json!({"statefulsets": stss, "claims": claims, "intents": intents})
    }
}

impl Cluster for World {
    async fn get_statefulset(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StatefulSet>, CallError> {
        self.read(&format!("get {namespace}/{name}"));
        Ok(self.sts(namespace, name))
    }

    async fn list_claims(&self, namespace: &str) -> Result<Vec<PersistentVolumeClaim>, CallError> {
        self.read("list claims");
        Ok(self
            .lock()
            .claims
            .iter()
            .filter(|c| c.metadata.namespace.as_deref() == Some(namespace))
            .cloned()
            .collect())
    }

    async fn list_storage_classes(&self) -> Result<Vec<StorageClass>, CallError> {
        self.read("list classes");
        Ok(self.lock().classes.clone())
    }

    async fn dry_run_apply(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        self.read("dry-run");
        let s = self.lock();
        if let Some(e) = s.dry_run_error.clone() {
            return Err(e);
        }
        match s.statefulsets.get(&sts_key(object)) {
            Some(live) if immutable_changed(live, object) => {
                Err(status(422, "Invalid", IMMUTABLE, "dry run", "StatefulSet"))
            }
            _ => Ok(object.clone()),
        }
    }

    async fn dry_run_create(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        let (ns, name) = sts_key(object);
        self.read(&format!("dry-run create {ns}/{name}"));
        let mut s = self.lock();
        s.preflighted.push(object.clone());
        if let Some(e) = s.create_error.clone() {
            return Err(e);
        }
        match s.statefulsets.get(&(ns, name.clone())) {
            Some(_) => Err(status(
                409,
                "AlreadyExists",
                &format!("statefulsets.apps \"{name}\" already exists"),
                "dry-run create of",
                "StatefulSet",
            )),
            None => Ok(object.clone()),
        }
    }

    async fn get_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>, CallError> {
        self.read(&format!("get claim {name}"));
        Ok(self
            .lock()
            .claims
            .iter()
            .find(|c| {
                c.metadata.namespace.as_deref() == Some(namespace)
                    && c.metadata.name.as_deref() == Some(name)
            })
            .cloned())
    }

    async fn attribute_classes(
        &self,
        _names: &std::collections::BTreeSet<String>,
    ) -> Result<crate::decide::AttributeClasses, CallError> {
        self.read("discover attribute classes");
        Ok(self.lock().attribute_classes.clone())
    }

    async fn patch_claim(
        &self,
        namespace: &str,
        claim: &str,
        patch: &crate::cluster::ClaimPatch,
        resource_version: &str,
    ) -> Result<(), CallError> {
        let object = format!("PersistentVolumeClaim {namespace}/{claim}");
        let fault = self.write("resize", &object)?;
        {
            let mut s = self.lock();
            s.next_uid += 1;
            let next_version = s.next_uid.to_string();
            let Some(c) = s.claims.iter_mut().find(|c| {
                c.metadata.namespace.as_deref() == Some(namespace)
                    && c.metadata.name.as_deref() == Some(claim)
            }) else {
                return Err(status(404, "NotFound", "not found", "resize", &object));
            };
            let current = c.metadata.resource_version.as_deref().unwrap_or_default();
            if !resource_version.is_empty() && resource_version != current {
                return Err(status(
                    409,
                    "Conflict",
                    "the object has been modified; please apply your changes to the latest version and try again",
                    "resize",
                    &object,
                ));
            }
            c.metadata.resource_version = Some(next_version);
            let spec = c.spec.get_or_insert_with(Default::default);
            if let Some(storage) = &patch.storage {
                let requests = spec
                    .resources
                    .get_or_insert_with(Default::default)
                    .requests
                    .get_or_insert_with(Default::default);
                requests.insert("storage".into(), K8sQuantity(storage.clone()));
            }
            if let Some(class) = &patch.attributes_class {
                spec.volume_attributes_class_name = Some(class.clone());
            }
        }
        Self::after_write(fault, "resize", &object)
    }

    /// Answers as a 1.32 server: the claim exists at the version given. Not a write.
    async fn resize_claim_dry_run(
        &self,
        namespace: &str,
        claim: &str,
        _storage: &str,
        resource_version: &str,
    ) -> Result<(), CallError> {
        let object = format!("PersistentVolumeClaim {namespace}/{claim}");
        let s = self.lock();
        let Some(c) = s.claims.iter().find(|c| {
            c.metadata.namespace.as_deref() == Some(namespace)
                && c.metadata.name.as_deref() == Some(claim)
        }) else {
            return Err(status(
                404,
                "NotFound",
                "not found",
                "dry-run resize",
                &object,
            ));
        };
        let current = c.metadata.resource_version.as_deref().unwrap_or_default();
        if !resource_version.is_empty() && resource_version != current {
            return Err(status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
                "dry-run resize",
                &object,
            ));
        }
        Ok(())
    }

    async fn orphan_delete(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<DeleteOutcome, CallError> {
        let object = format!("StatefulSet {namespace}/{name}");
        let fault = self.write("delete", &object)?;
        let outcome = {
            let mut s = self.lock();
            let key = (namespace.to_string(), name.to_string());
            match s.statefulsets.get_mut(&key) {
                None => DeleteOutcome::Absent,
                Some(live) if live.metadata.uid.as_deref() != Some(uid) => {
                    DeleteOutcome::UidMismatch {
                        message: "the UID in the precondition does not match".into(),
                    }
                }
                Some(live) => {
                    live.metadata.deletion_timestamp =
                        Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
                    live.metadata.finalizers = Some(vec!["orphan".into()]);
                    DeleteOutcome::Deleting {
                        resource_version: live.metadata.resource_version.clone(),
                    }
                }
            }
        };
        Self::after_write(fault, "delete", &object)?;
        Ok(outcome)
    }

    async fn wait_gone(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        _from: Option<&str>,
        timeout: Duration,
    ) -> Result<WaitOutcome, CallError> {
        self.read("watch");
        let mut s = self.lock();
        let key = (namespace.to_string(), name.to_string());
        match s.statefulsets.get(&key) {
            None => Ok(WaitOutcome::Gone),
            Some(live) if live.metadata.uid.as_deref() != Some(uid) => Ok(WaitOutcome::Replaced {
                uid: live.metadata.uid.clone().unwrap_or_default(),
            }),
            Some(live) if live.metadata.deletion_timestamp.is_none() || s.gc_stuck => {
                Err(CallError::new(
                    "wait for the deletion of",
                    format!("StatefulSet {namespace}/{name}"),
                    CallErrorKind::Timeout {
                        after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                    },
                ))
            }
            Some(_) => {
                s.statefulsets.remove(&key);
                Ok(WaitOutcome::Gone)
            }
        }
    }

    async fn apply(&self, object: &StatefulSet) -> Result<StatefulSet, CallError> {
        let (ns, name) = sts_key(object);
        let what = format!("StatefulSet {ns}/{name}");
        let fault = self.write("apply", &what)?;
        let applied = {
            let mut s = self.lock();
            match s.statefulsets.get(&(ns.clone(), name.clone())).cloned() {
                Some(live) if immutable_changed(&live, object) => {
                    return Err(status(422, "Invalid", IMMUTABLE, "apply", &what));
                }
                Some(mut live) => {
                    live.spec = object.spec.clone();
                    s.statefulsets.insert((ns, name), live.clone());
                    live
                }
                None => {
                    drop(s);
                    let uid = self.seed_sts(object.clone());
                    let mut created = object.clone();
                    created.metadata.uid = Some(uid);
                    created
                }
            }
        };
        Self::after_write(fault, "apply", &what)?;
        Ok(applied)
    }
}

impl Journal for World {
    async fn record(&self, intent: &Intent) -> Result<(), JournalError> {
        let object = format!("intent {}/{}", intent.namespace, intent.name);
        let fault = self.write("record", &object)?;
        self.journal.record(intent).await?;
        Ok(Self::after_write(fault, "record", &object)?)
    }

    async fn load(&self, namespace: &str, name: &str) -> Result<Option<Intent>, JournalError> {
        self.read("journal load");
        self.journal.load(namespace, name).await
    }

    async fn list(&self) -> Result<crate::journal::Listing, JournalError> {
        self.read("journal list");
        self.journal.list().await
    }

    async fn clear(&self, namespace: &str, name: &str) -> Result<(), JournalError> {
        let object = format!("intent {namespace}/{name}");
        let fault = self.write("clear", &object)?;
        self.journal.clear(namespace, name).await?;
        Ok(Self::after_write(fault, "clear", &object)?)
    }
}
