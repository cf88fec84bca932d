//! The desired object as the converge takes it: who it names, and without the server-owned
//! fields an exported file carries.

use k8s_openapi::api::apps::v1::StatefulSet;

use super::error::ConvergeError;

/// `(namespace, name)` of a desired object; both must be set (the caller defaults the namespace).
pub(super) fn identity(desired: &StatefulSet) -> Result<(String, String), ConvergeError> {
    let name = desired.metadata.name.clone().filter(|n| !n.is_empty());
    let namespace = desired.metadata.namespace.clone().filter(|n| !n.is_empty());
    match (namespace, name) {
        (Some(ns), Some(n)) => Ok((ns, n)),
        (_, None) => Err(ConvergeError::Invalid {
            what: "StatefulSet".into(),
            message: "metadata.name is missing".into(),
        }),
        (None, Some(n)) => Err(ConvergeError::Invalid {
            what: format!("StatefulSet {n}"),
            message: "metadata.namespace is missing".into(),
        }),
    }
}

/// The desired object as it is sent: server-owned fields (`status`, uid, resourceVersion,
/// managedFields, timestamps) removed, so a desired file exported from a cluster still applies.
/// `plan -o commands` re-applies with it too, so the manual procedure sends the same object.
pub fn clean_desired(desired: &StatefulSet) -> StatefulSet {
    let mut d = desired.clone();
    d.status = None;
    let m = &mut d.metadata;
    m.uid = None;
    m.resource_version = None;
    m.managed_fields = None;
    m.creation_timestamp = None;
    m.deletion_timestamp = None;
    m.deletion_grace_period_seconds = None;
    m.generation = None;
    d
}
