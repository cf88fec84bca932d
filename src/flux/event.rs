//! The event notification-controller posts to a `generic` / `generic-hmac` Provider, and its
//! signature check. Pure: no I/O, so the webhook's parsing and authentication are table-tested.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The object an event is about (`involvedObject`, a core/v1 ObjectReference).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvolvedObject {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub resource_version: Option<String>,
}

/// fluxcd/pkg `runtime/events.Event`, as the webhook receives it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub involved_object: InvolvedObject,
    #[serde(default)]
    pub severity: String,
    #[serde(default)]
    pub timestamp: Option<String>,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub reason: String,
    /// API-group prefix already stripped by notification-controller (`revision`, ...).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub reporting_controller: String,
    #[serde(default)]
    pub reporting_instance: Option<String>,
}
