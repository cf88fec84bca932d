//! The Kustomization: the spec fields that shape the render, its status, and the labels
//! kustomize-controller puts on what it applies.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::status::Condition;

/// Label kustomize-controller puts on every object it applies: the Kustomization's name.
pub const OWNER_NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
/// Label kustomize-controller puts on every object it applies: the Kustomization's namespace.
pub const OWNER_NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";

/// `kustomize.toolkit.fluxcd.io/v1` Kustomization: the spec fields that shape the render.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "kustomize.toolkit.fluxcd.io",
    version = "v1",
    kind = "Kustomization",
    plural = "kustomizations",
    namespaced,
    status = "KustomizationStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase", default)]
pub struct KustomizationSpec {
    pub source_ref: CrossNamespaceSourceReference,
    /// Path inside the artifact; Flux defaults to the artifact root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name_suffix: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<Patch>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<String>,
    pub ignore_missing_components: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub common_metadata: Option<CommonMetadata>,
    /// Present (even empty) means kustomize-controller runs the post-build step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_build: Option<PostBuild>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    pub suspend: bool,
    pub prune: bool,
    /// How often Flux reconciles (a Go duration, e.g. `10m`): its retry schedule when
    /// `retry_interval` is not set (the suspend gate re-opens on it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// How soon Flux retries a failed reconcile (a Go duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_interval: Option<String>,
    /// Flux re-creates what it cannot patch (a StatefulSet, pods and all): never combined
    /// with the `reconcile` or `suspend` gate (the gate warns).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

/// `spec.sourceRef`; an empty namespace means the Kustomization's own.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct CrossNamespaceSourceReference {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub kind: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// One entry of `spec.patches`: a strategic-merge or JSON6902 patch and its target.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Patch {
    pub patch: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<Selector>,
}

/// kustomize's patch target selector, as Flux spells it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Selector {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<String>,
}

/// One entry of `spec.images`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Image {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_tag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// `spec.commonMetadata`: put on the top-level metadata of every rendered object.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct CommonMetadata {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// `spec.postBuild`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct PostBuild {
    pub substitute: BTreeMap<String, String>,
    pub substitute_from: Vec<SubstituteReference>,
    /// `Always` substitutes even when no variable is defined (so strict mode still checks references).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub substitute_strategy: Option<String>,
}

/// One entry of `postBuild.substituteFrom`: a ConfigMap or Secret in the Kustomization's namespace.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct SubstituteReference {
    pub kind: String,
    pub name: String,
    pub optional: bool,
}

/// `status` of a Kustomization.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct KustomizationStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    pub conditions: Vec<Condition>,
}

impl KustomizationSpec {
    /// How long kustomize-controller waits before it retries a failed reconcile:
    /// `spec.retryInterval`, else `spec.interval` (its `GetRetryInterval`); `None` when neither
    /// reads as a positive duration.
    pub fn retry_after(&self) -> Option<Duration> {
        let parse = |text: Option<&str>| text.and_then(parse_go_duration).filter(|d| !d.is_zero());
        parse(self.retry_interval.as_deref()).or_else(|| parse(self.interval.as_deref()))
    }
}

/// A Go `time.Duration` string as Flux's CRDs carry them (`1m30s`, `10m0s`, `500ms`, `1h`).
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    Duration::try_from_secs_f64(total).ok()
}
