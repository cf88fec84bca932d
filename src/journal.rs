//! The journal of intents: what a converge set out to do, written before its first write.
//!
//! A converge deletes a StatefulSet and creates it again. If the process dies in between,
//! the only copy of the desired object may be in this process's memory; the journal keeps it
//! in the cluster so the next run (or the next process) finishes the work. One record per
//! StatefulSet: a converge only starts after the previous intent for it is resumed.
//!
//! [`ConfigMapJournal`] keeps each intent in a labelled ConfigMap (so intents can be listed
//! on start); [`MemoryJournal`] is for tests and dry runs.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cluster::{CallError, FIELD_MANAGER, with_deadline};

/// Label on every record ConfigMap the converger writes; its value says the kind of record.
pub const RECORD_LABEL: &str = "flux-converger.io/record";
/// Value of [`RECORD_LABEL`] on intents.
pub const INTENT_RECORD: &str = "intent";
/// Label on the records (results, intents) of a sharded replica: its Lease's name. Shards
/// share one namespace, and each must read, resume and delete only its own records.
pub const SHARD_LABEL: &str = "flux-converger.io/shard";

/// Whose records a replica reads and writes. Flux shards its controllers by label selector, one
/// Deployment (and Lease) per shard; the converger does the same, and each shard keeps to the
/// records labelled [`SHARD_LABEL`]`=<its Lease>`. An unsharded install keeps to unlabelled
/// records, which is what every earlier version wrote, so an upgrade keeps its history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Shard {
    /// No `--watch-label-selector`: the one install, its records unlabelled.
    #[default]
    Unsharded,
    /// The shard leading with this Lease (`--leader-election-id`).
    Named(String),
}

impl Shard {
    /// The label selector of this shard's records of kind `record` (a [`RECORD_LABEL`] value):
    /// the shard's label, or its absence when unsharded.
    pub fn selector(&self, record: &str) -> String {
        match self {
            Shard::Unsharded => format!("{RECORD_LABEL}={record},!{SHARD_LABEL}"),
            Shard::Named(name) => format!("{RECORD_LABEL}={record},{SHARD_LABEL}={name}"),
        }
    }

    /// The label this shard's records carry (none when unsharded).
    pub fn label(&self) -> Option<(String, String)> {
        match self {
            Shard::Unsharded => None,
            Shard::Named(name) => Some((SHARD_LABEL.to_string(), name.clone())),
        }
    }

    /// Whether a record with these labels is this shard's.
    pub fn owns(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let value = labels.and_then(|l| l.get(SHARD_LABEL));
        match self {
            Shard::Unsharded => value.is_none(),
            Shard::Named(name) => value == Some(name),
        }
    }
}

/// What a converge of one StatefulSet set out to do (docs/converge.md, the journal).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Intent {
    pub namespace: String,
    pub name: String,
    /// The uid of the live StatefulSet the intent will delete: tells "still ours" from
    /// "someone re-created it".
    pub uid: String,
    /// The object to apply once the old one is gone.
    pub desired: StatefulSet,
    /// The plan as decided, for people reading the journal (resume decides again).
    pub plan: serde_json::Value,
    /// RFC 3339 time of recording.
    pub recorded_at: String,
    /// The source revision the desired object was rendered from, when the caller knows it
    /// (the service does): a resume names what it finishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Set when the intent is recorded, right before the orphan delete is sent (the claims
    /// are grown by then). On resume, a StatefulSet that is absent was deleted by that delete
    /// and is re-applied. `false` in intents of earlier versions, which recorded before the
    /// claims grew: an absent StatefulSet may then have been deleted by someone else (Flux's
    /// prune, an operator) before any delete of ours, so it is not brought back.
    #[serde(default)]
    pub deleting: bool,
    /// Who the converge that recorded it wrote as: the impersonated user
    /// (`system:serviceaccount:NS:SA`), or `-` for the recorder's own identity. `None` in
    /// records of earlier versions (unknown): the service then does not resume it, since
    /// finishing a tenant's work with the service's own rights would be more than the tenant
    /// may do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub act_as: Option<String>,
}

/// The [`Intent::act_as`] value for the recorder's own identity (no impersonation).
pub const OWN_IDENTITY: &str = "-";

/// A record with the intent label that does not read as an intent (hand-edited, written by
/// another version): reported by name and skipped, so it wedges nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unreadable {
    /// `ConfigMap namespace/name`.
    pub object: String,
    pub message: String,
}

impl Unreadable {
    /// The record a [`JournalError::Corrupt`] is about, and why (its words without the name);
    /// `None` for any other error (a failed call is no verdict on the record).
    pub fn of(error: &JournalError) -> Option<Self> {
        match error {
            JournalError::Corrupt {
                object,
                field,
                message,
            } => Some(Unreadable {
                object: object.clone(),
                message: format!("unreadable ({field}): {message}"),
            }),
            JournalError::Call(_) => None,
        }
    }
}

/// Every intent of a journal, and the records that could not be read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Listing {
    pub intents: Vec<Intent>,
    pub unreadable: Vec<Unreadable>,
}

/// Why the journal could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    // Not a `source`: the message carries it, and `{:#}` would print it twice.
    #[error("journal: {0}")]
    Call(CallError),
    #[error("journal record {object} is unreadable ({field}): {message}")]
    Corrupt {
        object: String,
        field: String,
        message: String,
    },
}

impl From<CallError> for JournalError {
    fn from(e: CallError) -> Self {
        JournalError::Call(e)
    }
}

/// Where intents are kept. Every method is one round trip at most, and idempotent.
pub trait Journal: Send + Sync {
    /// Records (or replaces) the intent for `intent.namespace/intent.name`.
    fn record(&self, intent: &Intent) -> impl Future<Output = Result<(), JournalError>> + Send;
    /// The unfinished intent for one StatefulSet, if any.
    fn load(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Intent>, JournalError>> + Send;
    /// Every unfinished intent (resumed on start); records that do not parse are returned
    /// apart, by name, and do not fail the listing.
    fn list(&self) -> impl Future<Output = Result<Listing, JournalError>> + Send;
    /// Forgets the intent for one StatefulSet; clearing an absent intent is not an error.
    fn clear(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), JournalError>> + Send;
}

/// Intents in process memory: for tests, and for callers that accept losing them with the process.
#[derive(Default, Debug)]
pub struct MemoryJournal {
    intents: Mutex<BTreeMap<(String, String), Intent>>,
}

impl MemoryJournal {
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<(String, String), Intent>) -> T) -> T {
        // A panic while holding the lock leaves the map itself consistent: keep using it.
        let mut guard = match self.intents.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }
}

impl Journal for MemoryJournal {
    async fn record(&self, intent: &Intent) -> Result<(), JournalError> {
        self.with(|m| {
            m.insert(
                (intent.namespace.clone(), intent.name.clone()),
                intent.clone(),
            )
        });
        Ok(())
    }

    async fn load(&self, namespace: &str, name: &str) -> Result<Option<Intent>, JournalError> {
        Ok(self.with(|m| m.get(&(namespace.to_string(), name.to_string())).cloned()))
    }

    async fn list(&self) -> Result<Listing, JournalError> {
        Ok(Listing {
            intents: self.with(|m| m.values().cloned().collect()),
            unreadable: Vec::new(),
        })
    }

    async fn clear(&self, namespace: &str, name: &str) -> Result<(), JournalError> {
        self.with(|m| m.remove(&(namespace.to_string(), name.to_string())));
        Ok(())
    }
}

/// Intents as ConfigMaps in one namespace (the converger's own, usually `flux-system`).
#[derive(Clone)]
pub struct ConfigMapJournal {
    client: kube::Client,
    namespace: String,
    call_timeout: Duration,
    /// `None`: every intent (the `converge` command, run by an operator, finishes whatever it
    /// finds); a shard: only that shard's are listed, and the ones recorded carry its label.
    shard: Option<Shard>,
}

const MAX_NAME: usize = 253;
const NAME_PREFIX: &str = "flux-converger-intent";

/// The ConfigMap name of the intent for `namespace/name`.
///
/// A namespace is a DNS label (no dots), so `<prefix>.<namespace>.<name>` cannot collide and
/// stays readable; names too long for that fall back to a digest.
pub fn intent_configmap_name(namespace: &str, name: &str) -> String {
    let readable = format!("{NAME_PREFIX}.{namespace}.{name}");
    if readable.len() <= MAX_NAME {
        return readable;
    }
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    format!("{NAME_PREFIX}.{}", &hex::encode(digest)[..40])
}

impl ConfigMapJournal {
    pub fn new(client: kube::Client, namespace: impl Into<String>, call_timeout: Duration) -> Self {
        ConfigMapJournal {
            client,
            namespace: namespace.into(),
            call_timeout,
            shard: None,
        }
    }

    /// Kept to `shard`'s intents: a replica resumes only what its own shard left unfinished,
    /// never another shard's (whose leader is alive and may be finishing it). `load` and
    /// `clear` still go by name: a StatefulSet's intent is finished by whoever converges it next.
    pub fn scoped(mut self, shard: Shard) -> Self {
        self.shard = Some(shard);
        self
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn object(&self, cm: &str) -> String {
        format!("ConfigMap {}/{cm}", self.namespace)
    }
}

fn corrupt(object: &str, field: &str, message: impl ToString) -> JournalError {
    JournalError::Corrupt {
        object: object.to_string(),
        field: field.to_string(),
        message: message.to_string(),
    }
}

/// The ConfigMap holding `intent` (pure, so the format is tested without a server).
pub fn intent_to_configmap(namespace: &str, intent: &Intent) -> Result<ConfigMap, JournalError> {
    let cm_name = intent_configmap_name(&intent.namespace, &intent.name);
    let object = format!("ConfigMap {namespace}/{cm_name}");
    let desired =
        serde_json::to_string(&intent.desired).map_err(|e| corrupt(&object, "desired", e))?;
    let plan = serde_json::to_string(&intent.plan).map_err(|e| corrupt(&object, "plan", e))?;
    let mut data = BTreeMap::from([
        ("namespace".to_string(), intent.namespace.clone()),
        ("name".to_string(), intent.name.clone()),
        ("uid".to_string(), intent.uid.clone()),
        ("desired".to_string(), desired),
        ("plan".to_string(), plan),
        ("recordedAt".to_string(), intent.recorded_at.clone()),
        ("deleting".to_string(), intent.deleting.to_string()),
    ]);
    if let Some(revision) = &intent.revision {
        data.insert("revision".to_string(), revision.clone());
    }
    if let Some(act_as) = &intent.act_as {
        data.insert("actAs".to_string(), act_as.clone());
    }
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(cm_name),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([
                (RECORD_LABEL.to_string(), INTENT_RECORD.to_string()),
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "flux-converger".to_string(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    })
}

/// Reads an intent back from its ConfigMap; every missing or unreadable key is named.
pub fn intent_from_configmap(cm: &ConfigMap) -> Result<Intent, JournalError> {
    let object = format!(
        "ConfigMap {}/{}",
        cm.metadata.namespace.as_deref().unwrap_or_default(),
        cm.metadata.name.as_deref().unwrap_or_default()
    );
    let empty = BTreeMap::new();
    let data = cm.data.as_ref().unwrap_or(&empty);
    let get = |key: &str| {
        data.get(key)
            .cloned()
            .ok_or_else(|| corrupt(&object, key, "missing"))
    };
    let desired: StatefulSet =
        serde_json::from_str(&get("desired")?).map_err(|e| corrupt(&object, "desired", e))?;
    let plan = serde_json::from_str(&get("plan")?).map_err(|e| corrupt(&object, "plan", e))?;
    Ok(Intent {
        namespace: get("namespace")?,
        name: get("name")?,
        uid: get("uid")?,
        desired,
        plan,
        recorded_at: data.get("recordedAt").cloned().unwrap_or_default(),
        revision: data.get("revision").cloned(),
        act_as: data.get("actAs").cloned().filter(|a| !a.is_empty()),
        // Absent in records of earlier versions: they did not say, so not "deleting".
        deleting: match data.get("deleting").map(String::as_str) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(corrupt(
                    &object,
                    "deleting",
                    format!("{other:?} is not true or false"),
                ));
            }
        },
    })
}

impl Journal for ConfigMapJournal {
    async fn record(&self, intent: &Intent) -> Result<(), JournalError> {
        let mut cm = intent_to_configmap(&self.namespace, intent)?;
        if let Some((key, value)) = self.shard.as_ref().and_then(Shard::label) {
            cm.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(key, value);
        }
        let cm_name = cm.metadata.name.clone().unwrap_or_default();
        // Server-side apply: recording the same intent twice (a retry after a lost answer) is a no-op.
        let params = PatchParams::apply(FIELD_MANAGER).force();
        with_deadline(
            self.call_timeout,
            "record intent in",
            &self.object(&cm_name),
            self.api().patch(&cm_name, &params, &Patch::Apply(&cm)),
        )
        .await?;
        Ok(())
    }

    async fn load(&self, namespace: &str, name: &str) -> Result<Option<Intent>, JournalError> {
        let cm_name = intent_configmap_name(namespace, name);
        let found = with_deadline(
            self.call_timeout,
            "read intent from",
            &self.object(&cm_name),
            self.api().get_opt(&cm_name),
        )
        .await?;
        found.as_ref().map(intent_from_configmap).transpose()
    }

    async fn list(&self) -> Result<Listing, JournalError> {
        let selector = match &self.shard {
            None => format!("{RECORD_LABEL}={INTENT_RECORD}"),
            Some(shard) => shard.selector(INTENT_RECORD),
        };
        let params = ListParams::default().labels(&selector);
        let list = with_deadline(
            self.call_timeout,
            "list intents in",
            &format!("ConfigMaps of namespace {}", self.namespace),
            self.api().list(&params),
        )
        .await?;
        let mut listing = Listing::default();
        for cm in &list.items {
            match intent_from_configmap(cm) {
                Ok(intent) => listing.intents.push(intent),
                Err(e) => match Unreadable::of(&e) {
                    Some(unreadable) => listing.unreadable.push(unreadable),
                    None => return Err(e),
                },
            }
        }
        Ok(listing)
    }

    async fn clear(&self, namespace: &str, name: &str) -> Result<(), JournalError> {
        let cm_name = intent_configmap_name(namespace, name);
        let result = with_deadline(
            self.call_timeout,
            "clear intent in",
            &self.object(&cm_name),
            self.api().delete(&cm_name, &DeleteParams::default()),
        )
        .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some(404) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(namespace: &str, name: &str) -> Intent {
        let desired: StatefulSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "serviceName": "x",
                     "template": {"metadata": {"labels": {"app": "x"}}}}
        }))
        .unwrap();
        Intent {
            namespace: namespace.into(),
            name: name.into(),
            uid: "u-1".into(),
            desired,
            plan: serde_json::json!({"recreate": true}),
            recorded_at: "2026-11-29T17:00:00Z".into(),
            revision: Some("main@sha1:0123abcd".into()),
            deleting: true,
            act_as: Some("system:serviceaccount:default:deployer".into()),
        }
    }

    #[test]
    fn names_are_readable_unambiguous_and_bounded() {
        let cases = [
            ("default", "web", "flux-converger-intent.default.web"),
            ("a-b", "c", "flux-converger-intent.a-b.c"),
            ("a", "b-c", "flux-converger-intent.a.b-c"),
            ("a", "b.c", "flux-converger-intent.a.b.c"),
        ];
        for (ns, name, want) in cases {
            assert_eq!(intent_configmap_name(ns, name), want, "{ns}/{name}");
        }
        let long = "x".repeat(240);
        let hashed = intent_configmap_name("ns", &long);
        assert!(hashed.len() <= MAX_NAME, "{hashed}");
        assert_ne!(hashed, intent_configmap_name("ns2", &long));
    }

    #[test]
    fn configmap_round_trip_keeps_every_field() {
        let i = intent("default", "web");
        let cm = intent_to_configmap("flux-system", &i).unwrap();
        assert_eq!(cm.metadata.namespace.as_deref(), Some("flux-system"));
        assert_eq!(
            cm.metadata
                .labels
                .as_ref()
                .unwrap()
                .get(RECORD_LABEL)
                .map(String::as_str),
            Some(INTENT_RECORD)
        );
        assert_eq!(intent_from_configmap(&cm).unwrap(), i);
    }

    #[test]
    fn unreadable_records_name_the_configmap_and_key() {
        let mut cm = intent_to_configmap("flux-system", &intent("default", "web")).unwrap();
        cm.data
            .as_mut()
            .unwrap()
            .insert("desired".into(), "{not json".into());
        let e = intent_from_configmap(&cm).unwrap_err().to_string();
        assert!(
            e.contains("flux-converger-intent.default.web") && e.contains("desired"),
            "{e}"
        );
        cm.data.as_mut().unwrap().remove("uid");
        cm.data
            .as_mut()
            .unwrap()
            .insert("desired".into(), "{}".into());
        let e = intent_from_configmap(&cm).unwrap_err().to_string();
        assert!(e.contains("uid") && e.contains("missing"), "{e}");
    }

    #[test]
    fn records_of_earlier_versions_still_parse_as_not_deleting() {
        let mut cm = intent_to_configmap("flux-system", &intent("default", "web")).unwrap();
        let data = cm.data.as_mut().unwrap();
        data.remove("revision");
        data.remove("deleting");
        data.remove("actAs");
        let old = intent_from_configmap(&cm).unwrap();
        assert_eq!(old.revision, None);
        assert!(!old.deleting);
        assert_eq!(
            old.act_as, None,
            "an earlier version's record: identity unknown"
        );
        cm.data
            .as_mut()
            .unwrap()
            .insert("deleting".into(), "yes".into());
        let e = intent_from_configmap(&cm).unwrap_err().to_string();
        assert!(e.contains("deleting") && e.contains("yes"), "{e}");
    }

    #[tokio::test]
    async fn memory_journal_records_loads_lists_and_clears() {
        let j = MemoryJournal::new();
        j.record(&intent("a", "x")).await.unwrap();
        j.record(&intent("b", "y")).await.unwrap();
        assert_eq!(j.load("a", "x").await.unwrap(), Some(intent("a", "x")));
        assert_eq!(j.list().await.unwrap().intents.len(), 2);
        j.clear("a", "x").await.unwrap();
        j.clear("a", "x").await.unwrap();
        assert_eq!(j.load("a", "x").await.unwrap(), None);
        assert_eq!(j.list().await.unwrap().intents, vec![intent("b", "y")]);
    }
}
