//! The journal of intents: what a converge set out to do, written before its first write.
//!
//! A converge deletes a StatefulSet and creates it again. If the process dies in between,
//! the only copy of the desired object may be in this process's memory; the journal keeps it
//! in the cluster so the next run (or the next process) finishes the work. One record per
//! StatefulSet: a converge only starts after the previous intent for it is resumed.
//!
//! [`SecretJournal`] keeps each intent in a labelled Secret of type [`INTENT_SECRET_TYPE`] (so
//! intents can be listed on start): the desired object may carry values substituted from Secrets
//! (`postBuild.substituteFrom`), and a Secret value belongs in a Secret only. Intents that earlier
//! versions wrote as ConfigMaps are moved on start ([`SecretJournal::migrate_legacy`]).
//! [`MemoryJournal`] is for tests and dry runs.

pub mod watched;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cluster::{CallError, FIELD_MANAGER, with_deadline};

/// Label on every record the converger writes; its value says the kind of record.
pub const RECORD_LABEL: &str = "flux-converger.io/record";
/// Value of [`RECORD_LABEL`] on intents.
pub const INTENT_RECORD: &str = "intent";
/// The `type` of the Secrets holding intents: tells them from any other Secret of the namespace,
/// as `kubernetes.io/tls` or `helm.sh/release.v1` do.
pub const INTENT_SECRET_TYPE: &str = "flux-converger.io/intent";
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
    /// The Kustomization (`namespace/name`) whose revision the converge applied, when the
    /// recorder knows it (the service does); `HelmRelease/namespace/name` for a HelmRelease's. The service resumes an intent at start only if
    /// that Kustomization would act as [`Intent::act_as`] now (docs/converge.md, the journal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomization: Option<String>,
}

/// The [`Intent::act_as`] value for the recorder's own identity (no impersonation).
pub const OWN_IDENTITY: &str = "-";

/// A record with the intent label that does not read as an intent (hand-edited, written by
/// another version): reported by name and skipped, so it wedges nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unreadable {
    /// `Secret namespace/name`.
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

/// An intent that reads but is not what it says (docs/converge.md, the journal): its key, its
/// recorded StatefulSet and its desired object disagree, its identity is not the one its
/// Kustomization would use now, or what it would do cannot be checked. Never resumed: left in
/// the journal, logged, named in `/status` (`refusedIntents`) and counted
/// (`flux_converger_intents_refused`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusedIntent {
    /// `Secret namespace/name` of the record.
    pub object: String,
    /// The StatefulSet the intent records (`intent.namespace`, `intent.name`).
    pub namespace: String,
    pub name: String,
    /// The recorded identity (`None`: the record does not say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub act_as: Option<String>,
    /// Why it is not resumed.
    pub reason: String,
}

/// Why an intent does not say what it is: its record's name is not the one its StatefulSet's
/// intent is kept under, or its desired object is another StatefulSet. Pure: what a writer of
/// the journal namespace could forge is checked before anything is done with it.
pub fn inconsistency(record: &str, intent: &Intent) -> Option<String> {
    let key = intent_record_name(&intent.namespace, &intent.name);
    if record != key {
        return Some(format!(
            "the record is named {record:?} but the intent of StatefulSet {}/{} is kept as {key:?}",
            intent.namespace, intent.name
        ));
    }
    let (ns, name) = (
        intent
            .desired
            .metadata
            .namespace
            .as_deref()
            .unwrap_or_default(),
        intent.desired.metadata.name.as_deref().unwrap_or_default(),
    );
    if ns != intent.namespace || name != intent.name {
        return Some(format!(
            "the intent of StatefulSet {}/{} holds the desired object of StatefulSet {ns}/{name}",
            intent.namespace, intent.name
        ));
    }
    None
}

/// Every intent of a journal, and the records that could not be read or are not what they say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Listing {
    pub intents: Vec<Intent>,
    pub unreadable: Vec<Unreadable>,
    /// Intents whose record name or desired object disagree with what they record.
    pub refused: Vec<RefusedIntent>,
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
            ..Listing::default()
        })
    }

    async fn clear(&self, namespace: &str, name: &str) -> Result<(), JournalError> {
        self.with(|m| m.remove(&(namespace.to_string(), name.to_string())));
        Ok(())
    }
}

/// Intents as Secrets of type [`INTENT_SECRET_TYPE`] in one namespace (the converger's own,
/// usually `flux-system`; the command's `--journal-namespace`).
#[derive(Clone)]
pub struct SecretJournal {
    client: kube::Client,
    namespace: String,
    call_timeout: Duration,
    /// `None`: every intent (the `converge` command, run by an operator, finishes whatever it
    /// finds); a shard: only that shard's are listed, and the ones recorded carry its label.
    shard: Option<Shard>,
}

const MAX_NAME: usize = 253;
const NAME_PREFIX: &str = "flux-converger-intent";

/// The name of the record (Secret; ConfigMap in earlier versions) of the intent for
/// `namespace/name`.
///
/// A namespace is a DNS label (no dots), so `<prefix>.<namespace>.<name>` cannot collide and
/// stays readable; names too long for that fall back to a digest.
pub fn intent_record_name(namespace: &str, name: &str) -> String {
    let readable = format!("{NAME_PREFIX}.{namespace}.{name}");
    if readable.len() <= MAX_NAME {
        return readable;
    }
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    format!("{NAME_PREFIX}.{}", &hex::encode(digest)[..40])
}

/// The earlier name of [`intent_record_name`].
pub fn intent_configmap_name(namespace: &str, name: &str) -> String {
    intent_record_name(namespace, name)
}

/// The journal's earlier name, when intents were ConfigMaps.
pub type ConfigMapJournal = SecretJournal;

/// What [`SecretJournal::migrate_legacy`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Migrated {
    /// Records moved: `ConfigMap ns/name`, each now a Secret of the same name.
    pub moved: Vec<String>,
}

impl SecretJournal {
    pub fn new(client: kube::Client, namespace: impl Into<String>, call_timeout: Duration) -> Self {
        SecretJournal {
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

    fn api(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn object(&self, secret: &str) -> String {
        format!("Secret {}/{secret}", self.namespace)
    }

    fn selector(&self) -> String {
        match &self.shard {
            None => format!("{RECORD_LABEL}={INTENT_RECORD}"),
            Some(shard) => shard.selector(INTENT_RECORD),
        }
    }

    /// Moves the intents earlier versions wrote as ConfigMaps (this journal's selector: a shard
    /// moves its own) into Secrets of the same name, labels and data, then deletes each
    /// ConfigMap, so no value substituted from a Secret stays in a ConfigMap. Run on start,
    /// before the intents are listed. The data is moved as it is, read or not: the Secret is
    /// then read (and checked, or reported unreadable) as any other. Idempotent: a Secret that
    /// already exists under that name (a crash between the create and the delete, or a newer
    /// record) wins, and only the ConfigMap is deleted.
    pub async fn migrate_legacy(&self) -> Result<Migrated, JournalError> {
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = ListParams::default().labels(&self.selector());
        let list = with_deadline(
            self.call_timeout,
            "list legacy intents in",
            &format!("ConfigMaps of namespace {}", self.namespace),
            configmaps.list(&params),
        )
        .await?;
        let mut migrated = Migrated::default();
        for cm in &list.items {
            let Some(name) = cm.metadata.name.clone() else {
                continue;
            };
            let cm_object = format!("ConfigMap {}/{name}", self.namespace);
            let secret = legacy_to_secret(&self.namespace, cm);
            let created = with_deadline(
                self.call_timeout,
                "move legacy intent into",
                &self.object(&name),
                self.api().create(&PostParams::default(), &secret),
            )
            .await;
            match created {
                Ok(_) => {}
                // A Secret of that name exists: it is the one to keep.
                Err(e) if e.code() == Some(409) => {}
                Err(e) => return Err(e.into()),
            }
            let deleted = with_deadline(
                self.call_timeout,
                "delete legacy intent",
                &cm_object,
                configmaps.delete(&name, &DeleteParams::default()),
            )
            .await;
            match deleted {
                Ok(_) => {}
                Err(e) if e.code() == Some(404) => {}
                Err(e) => return Err(e.into()),
            }
            tracing::info!(record = %cm_object, "moved a legacy intent ConfigMap into a Secret");
            migrated.moved.push(cm_object);
        }
        Ok(migrated)
    }
}

/// The Secret a legacy intent ConfigMap becomes: same name, labels (the record and shard labels
/// among them) and data; `binaryData` kept too, so nothing of the record is lost.
pub fn legacy_to_secret(namespace: &str, cm: &ConfigMap) -> Secret {
    let mut data: BTreeMap<String, ByteString> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
        .collect();
    for (k, v) in cm.binary_data.iter().flatten() {
        data.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Secret {
        metadata: ObjectMeta {
            name: cm.metadata.name.clone(),
            namespace: Some(namespace.to_string()),
            labels: cm.metadata.labels.clone(),
            annotations: cm.metadata.annotations.clone(),
            ..ObjectMeta::default()
        },
        type_: Some(INTENT_SECRET_TYPE.to_string()),
        data: Some(data),
        ..Secret::default()
    }
}

fn corrupt(object: &str, field: &str, message: impl ToString) -> JournalError {
    JournalError::Corrupt {
        object: object.to_string(),
        field: field.to_string(),
        message: message.to_string(),
    }
}

/// The data keys of the record of `intent` (docs/converge.md, the journal).
fn intent_data(object: &str, intent: &Intent) -> Result<BTreeMap<String, String>, JournalError> {
    let desired =
        serde_json::to_string(&intent.desired).map_err(|e| corrupt(object, "desired", e))?;
    let plan = serde_json::to_string(&intent.plan).map_err(|e| corrupt(object, "plan", e))?;
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
    if let Some(kustomization) = &intent.kustomization {
        data.insert("kustomization".to_string(), kustomization.clone());
    }
    Ok(data)
}

fn record_meta(namespace: &str, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_string()),
        labels: Some(BTreeMap::from([
            (RECORD_LABEL.to_string(), INTENT_RECORD.to_string()),
            (
                "app.kubernetes.io/managed-by".to_string(),
                "flux-converger".to_string(),
            ),
        ])),
        ..ObjectMeta::default()
    }
}

/// The Secret holding `intent` (pure, so the format is tested without a server).
pub fn intent_to_secret(namespace: &str, intent: &Intent) -> Result<Secret, JournalError> {
    let name = intent_record_name(&intent.namespace, &intent.name);
    let data = intent_data(&format!("Secret {namespace}/{name}"), intent)?;
    Ok(Secret {
        metadata: record_meta(namespace, name),
        type_: Some(INTENT_SECRET_TYPE.to_string()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Secret::default()
    })
}

/// The ConfigMap an earlier version held `intent` in (tests write legacy records with it).
pub fn intent_to_configmap(namespace: &str, intent: &Intent) -> Result<ConfigMap, JournalError> {
    let name = intent_record_name(&intent.namespace, &intent.name);
    let data = intent_data(&format!("ConfigMap {namespace}/{name}"), intent)?;
    Ok(ConfigMap {
        metadata: record_meta(namespace, name),
        data: Some(data),
        ..ConfigMap::default()
    })
}

/// Reads an intent back from its Secret; every missing or unreadable key is named, and so is
/// a Secret of another type.
pub fn intent_from_secret(secret: &Secret) -> Result<Intent, JournalError> {
    let object = format!(
        "Secret {}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    );
    let kind = secret.type_.as_deref().unwrap_or_default();
    if kind != INTENT_SECRET_TYPE {
        return Err(corrupt(
            &object,
            "type",
            format!("{kind:?} is not {INTENT_SECRET_TYPE:?}"),
        ));
    }
    let mut data = BTreeMap::new();
    for (k, v) in secret.data.iter().flatten() {
        let text = String::from_utf8(v.0.clone()).map_err(|e| corrupt(&object, k, e))?;
        data.insert(k.clone(), text);
    }
    intent_from_data(&object, &data)
}

/// Reads an intent back from an earlier version's ConfigMap.
pub fn intent_from_configmap(cm: &ConfigMap) -> Result<Intent, JournalError> {
    let object = format!(
        "ConfigMap {}/{}",
        cm.metadata.namespace.as_deref().unwrap_or_default(),
        cm.metadata.name.as_deref().unwrap_or_default()
    );
    let empty = BTreeMap::new();
    intent_from_data(&object, cm.data.as_ref().unwrap_or(&empty))
}

fn intent_from_data(object: &str, data: &BTreeMap<String, String>) -> Result<Intent, JournalError> {
    let object = object.to_string();
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
        kustomization: data.get("kustomization").cloned().filter(|k| !k.is_empty()),
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

impl Journal for SecretJournal {
    async fn record(&self, intent: &Intent) -> Result<(), JournalError> {
        let mut secret = intent_to_secret(&self.namespace, intent)?;
        if let Some((key, value)) = self.shard.as_ref().and_then(Shard::label) {
            secret
                .metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(key, value);
        }
        let cm_name = secret.metadata.name.clone().unwrap_or_default();
        // Server-side apply: recording the same intent twice (a retry after a lost answer) is a no-op.
        let params = PatchParams::apply(FIELD_MANAGER).force();
        with_deadline(
            self.call_timeout,
            "record intent in",
            &self.object(&cm_name),
            self.api().patch(&cm_name, &params, &Patch::Apply(&secret)),
        )
        .await?;
        Ok(())
    }

    async fn load(&self, namespace: &str, name: &str) -> Result<Option<Intent>, JournalError> {
        let cm_name = intent_record_name(namespace, name);
        let found = with_deadline(
            self.call_timeout,
            "read intent from",
            &self.object(&cm_name),
            self.api().get_opt(&cm_name),
        )
        .await?;
        found.as_ref().map(intent_from_secret).transpose()
    }

    async fn list(&self) -> Result<Listing, JournalError> {
        let params = ListParams::default().labels(&self.selector());
        let list = with_deadline(
            self.call_timeout,
            "list intents in",
            &format!("Secrets of namespace {}", self.namespace),
            self.api().list(&params),
        )
        .await?;
        let mut listing = Listing::default();
        for secret in &list.items {
            let record = secret.metadata.name.clone().unwrap_or_default();
            match intent_from_secret(secret) {
                Ok(intent) => match inconsistency(&record, &intent) {
                    None => listing.intents.push(intent),
                    Some(reason) => listing.refused.push(RefusedIntent {
                        object: self.object(&record),
                        namespace: intent.namespace,
                        name: intent.name,
                        act_as: intent.act_as,
                        reason,
                    }),
                },
                Err(e) => match Unreadable::of(&e) {
                    Some(unreadable) => listing.unreadable.push(unreadable),
                    None => return Err(e),
                },
            }
        }
        Ok(listing)
    }

    async fn clear(&self, namespace: &str, name: &str) -> Result<(), JournalError> {
        let cm_name = intent_record_name(namespace, name);
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
            kustomization: Some("flux-system/apps".into()),
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
    fn secret_round_trip_keeps_every_field_in_a_typed_secret() {
        let i = intent("default", "web");
        let secret = intent_to_secret("flux-system", &i).unwrap();
        assert_eq!(secret.type_.as_deref(), Some(INTENT_SECRET_TYPE));
        assert_eq!(secret.metadata.namespace.as_deref(), Some("flux-system"));
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("flux-converger-intent.default.web")
        );
        assert_eq!(intent_from_secret(&secret).unwrap(), i);
        // Base64 on the wire, as every Secret's data.
        let wire = serde_json::to_value(&secret).unwrap();
        assert_eq!(wire["data"]["name"], "d2Vi");
        let mut other = secret.clone();
        other.type_ = Some("Opaque".into());
        let e = intent_from_secret(&other).unwrap_err().to_string();
        assert!(e.contains("type") && e.contains("Opaque"), "{e}");
        // A legacy ConfigMap moves into the same Secret.
        let cm = intent_to_configmap("flux-system", &i).unwrap();
        assert_eq!(
            intent_from_secret(&legacy_to_secret("flux-system", &cm)).unwrap(),
            i
        );
    }

    #[test]
    fn an_intent_is_what_it_says_only_if_key_statefulset_and_desired_agree_by_table() {
        let ok = intent("team", "web");
        let mut elsewhere = ok.clone();
        elsewhere.desired.metadata.namespace = Some("kube-system".into());
        let mut renamed = ok.clone();
        renamed.desired.metadata.name = Some("db".into());
        for (record, intent, words) in [
            ("flux-converger-intent.team.web", &ok, None),
            ("flux-converger-intent.team.db", &ok, Some("is kept as")),
            (
                "flux-converger-intent.team.web",
                &elsewhere,
                Some("kube-system/web"),
            ),
            ("flux-converger-intent.team.web", &renamed, Some("team/db")),
        ] {
            let got = inconsistency(record, intent);
            assert_eq!(got.is_some(), words.is_some(), "{record}: {got:?}");
            if let (Some(message), Some(words)) = (got, words) {
                assert!(message.contains(words), "{message}");
            }
        }
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
