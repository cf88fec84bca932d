//! The results' ConfigMap codec: one ConfigMap per gated object in the service's namespace,
//! named after its kind, namespace and name (a digest when that is too long), labelled with
//! its kind's record label, its `data.records` the history as JSON. Pure; the store
//! ([`super::results`]) reads and writes through it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use sha2::{Digest, Sha256};

use crate::journal::RECORD_LABEL;
use crate::model::{Kind, RevisionRecord};

/// Value of [`RECORD_LABEL`] on a Kustomization's results ConfigMaps (each kind has its own,
/// [`crate::model::KindSpec::record`], so objects of two kinds that share a name keep separate
/// histories).
pub const RESULTS_RECORD: &str = "results";

/// A results ConfigMap that does not hold what the codec writes.
#[derive(Debug, thiserror::Error)]
#[error("results record {object} is unreadable: {message}")]
pub struct Corrupt {
    pub object: String,
    pub message: String,
}

/// The record label's value and the ConfigMap name prefix of one kind's results.
pub fn scope(kind: Kind) -> (&'static str, &'static str) {
    (kind.spec().record, kind.spec().record_prefix)
}
/// The longest name of a Kubernetes object.
const MAX_NAME: usize = 253;

/// The ConfigMap name of the results of Kustomization `namespace/name`; names too long for
/// the readable form fall back to a digest (a namespace has no dots, so no collisions).
pub fn results_configmap_name(namespace: &str, name: &str) -> String {
    results_configmap_name_of(Kind::KUSTOMIZATION, namespace, name)
}

/// [`results_configmap_name`] of a gated object of any kind.
pub fn results_configmap_name_of(kind: Kind, namespace: &str, name: &str) -> String {
    let prefix = scope(kind).1;
    let readable = format!("{prefix}.{namespace}.{name}");
    if readable.len() <= MAX_NAME {
        return readable;
    }
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    format!("{prefix}.{}", &hex::encode(digest)[..40])
}

/// The ConfigMap (in `namespace`) holding the records of Kustomization `ks_namespace/ks_name`.
pub fn to_configmap(
    namespace: &str,
    ks_namespace: &str,
    ks_name: &str,
    records: &[RevisionRecord],
    resource_version: Option<String>,
) -> Result<ConfigMap, Corrupt> {
    let json = serde_json::to_string(records).map_err(|e| Corrupt {
        object: format!(
            "ConfigMap {namespace}/{}",
            results_configmap_name(ks_namespace, ks_name)
        ),
        message: e.to_string(),
    })?;
    Ok(configmap(
        Kind::KUSTOMIZATION,
        namespace,
        ks_namespace,
        ks_name,
        json,
        resource_version,
    ))
}

/// [`to_configmap`] of records already encoded.
pub fn configmap(
    kind: Kind,
    namespace: &str,
    ks_namespace: &str,
    ks_name: &str,
    records_json: String,
    resource_version: Option<String>,
) -> ConfigMap {
    let name = results_configmap_name_of(kind, ks_namespace, ks_name);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                RECORD_LABEL.to_string(),
                scope(kind).0.to_string(),
            )])),
            resource_version,
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            ("namespace".to_string(), ks_namespace.to_string()),
            ("name".to_string(), ks_name.to_string()),
            ("records".to_string(), records_json),
        ])),
        ..ConfigMap::default()
    }
}

/// `(namespace, name, records)` of a results ConfigMap.
pub fn from_configmap(cm: &ConfigMap) -> Result<(String, String, Vec<RevisionRecord>), Corrupt> {
    let object = format!(
        "ConfigMap {}/{}",
        cm.metadata.namespace.as_deref().unwrap_or_default(),
        cm.metadata.name.as_deref().unwrap_or_default()
    );
    let corrupt = |message: String| Corrupt {
        object: object.clone(),
        message,
    };
    let data = cm.data.as_ref().ok_or_else(|| corrupt("no data".into()))?;
    let field = |key: &str| {
        data.get(key)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| corrupt(format!("data.{key} is missing")))
    };
    let namespace = field("namespace")?.clone();
    let name = field("name")?.clone();
    let records: Vec<RevisionRecord> = serde_json::from_str(field("records")?)
        .map_err(|e| corrupt(format!("data.records: {e}")))?;
    Ok((namespace, name, records))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::history::tests::record;

    #[test]
    fn configmap_round_trip_and_names() {
        let records = vec![record("main@sha1:1", "t1"), record("main@sha1:0", "t0")];
        let cm = to_configmap("flux-system", "apps", "web", &records, Some("7".into())).unwrap();
        assert_eq!(
            cm.metadata.name.as_deref(),
            Some("flux-converger-results.apps.web")
        );
        assert_eq!(
            cm.metadata.labels.as_ref().unwrap()[RECORD_LABEL],
            RESULTS_RECORD
        );
        let (ns, name, back) = from_configmap(&cm).unwrap();
        assert_eq!((ns.as_str(), name.as_str()), ("apps", "web"));
        assert_eq!(back, records);
        let long = "n".repeat(250);
        let hashed = results_configmap_name("apps", &long);
        assert!(
            hashed.len() <= MAX_NAME
                && hashed.starts_with(Kind::KUSTOMIZATION.spec().record_prefix)
        );
        assert_ne!(hashed, results_configmap_name("apps2", &long));
        let mut broken = cm.clone();
        broken
            .data
            .as_mut()
            .unwrap()
            .insert("records".into(), "{".into());
        let e = from_configmap(&broken).unwrap_err().to_string();
        assert!(
            e.contains("flux-converger-results.apps.web") && e.contains("data.records"),
            "{e}"
        );
    }
}
