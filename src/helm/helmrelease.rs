//! The fields of helm-controller's HelmRelease (`helm.toolkit.fluxcd.io/v2`) the converger reads.
//!
//! As for the Kustomization (`flux::objects`), only what is read is typed and every other field is
//! ignored, so a newer helm-controller with more fields still reads. Names and defaults are
//! helm-controller's `api/v2`: `GetReleaseName`, `GetReleaseNamespace`, `GetStorageNamespace`,
//! and `internal/release.ShortenName`, which every Helm action applies to the release name.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// The annotation `flux reconcile` sets to ask for a reconcile (`meta.ReconcileRequestAnnotation`).
pub const RECONCILE_REQUEST_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";
/// The annotation `flux reconcile --force` sets beside it (`meta.ForceRequestAnnotation`).
pub const FORCE_REQUEST_ANNOTATION: &str = "reconcile.fluxcd.io/forceAt";

/// `spec`: what decides where the release lives and as whom it is applied.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "helm.toolkit.fluxcd.io",
    version = "v2",
    kind = "HelmRelease",
    plural = "helmreleases",
    namespaced,
    status = "HelmReleaseStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase", default)]
pub struct HelmReleaseSpec {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<Upgrade>,
}

/// `spec.upgrade`: how helm-controller retries or remediates a failed upgrade.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Upgrade {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediation: Option<UpgradeRemediation>,
}

/// `spec.upgrade.strategy`: `RemediateOnFailure` or `RetryOnFailure`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Strategy {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_interval: Option<String>,
}

/// `spec.upgrade.remediation`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct UpgradeRemediation {
    /// Retries before giving up; `0` by default, negative is unlimited.
    pub retries: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediate_last_failure: Option<bool>,
    /// `rollback` (default) or `uninstall`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
}

impl UpgradeRemediation {
    /// `MustRemediateLastFailure`: unset means "only when retries are configured".
    pub fn must_remediate_last_failure(&self) -> bool {
        self.remediate_last_failure.unwrap_or(self.retries > 0)
    }

    /// `RetriesExhausted`: `retries >= 0 && upgradeFailures > retries`.
    pub fn retries_exhausted(&self, upgrade_failures: i64) -> bool {
        self.retries >= 0 && upgrade_failures > self.retries
    }
}

/// `status`, as helm-controller writes it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct HelmReleaseStatus {
    #[serde(skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub last_attempted_generation: i64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helm_chart: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_namespace: Option<String>,
    /// Newest first, as helm-controller sorts it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Snapshot>,
    /// `install` or `upgrade`: which remediation settings are active.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempted_release_action: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempted_release_action_duration: Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    pub failures: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub install_failures: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub upgrade_failures: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempted_config_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_handled_force_at: Option<String>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// A `metav1.Condition`, every field optional so a partial status still reads.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    pub reason: String,
    pub message: String,
}

/// One entry of `status.history` (`v2.Snapshot`): a release record helm-controller observed.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Snapshot {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub digest: String,
    pub name: String,
    pub namespace: String,
    pub version: i64,
    pub status: String,
    /// `install`, `upgrade`, `rollback`, `uninstall`, `uninstall-remediation`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    pub chart_name: String,
    pub chart_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_version: Option<String>,
    pub config_digest: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_deployed: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_deployed: Option<String>,
    #[serde(flatten)]
    pub rest: BTreeMap<String, serde_json::Value>,
}

/// Helm's limit on a release name, which `ShortenName` keeps to.
pub const MAX_RELEASE_NAME: usize = 53;

/// helm-controller's `release.ShortenName`: a name over 53 characters becomes its first 40,
/// a hyphen and the first 12 hex digits of its SHA-256.
pub fn shorten_name(name: &str) -> String {
    if name.len() <= MAX_RELEASE_NAME {
        return name.to_owned();
    }
    const HASH: usize = 12;
    let sum = hex::encode(sha2::Sha256::digest(name.as_bytes()));
    // Go slices bytes; a release name is ASCII (DNS-1123), so the cut is a char boundary. Should
    // it not be, the cut moves back to one rather than panic.
    let mut cut = MAX_RELEASE_NAME - (HASH + 1);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{}", &name[..cut], &sum[..HASH])
}

impl HelmRelease {
    fn own_namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("")
    }

    fn own_name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    /// The Helm release name every action uses: `ShortenName(GetReleaseName())`, where
    /// `GetReleaseName` is `spec.releaseName`, else `[targetNamespace-]name`.
    pub fn release_name(&self) -> String {
        let name = match (
            non_empty(&self.spec.release_name),
            non_empty(&self.spec.target_namespace),
        ) {
            (Some(release), _) => release.to_owned(),
            (None, Some(target)) => format!("{target}-{}", self.own_name()),
            (None, None) => self.own_name().to_owned(),
        };
        shorten_name(&name)
    }

    /// Where the release's objects go: `spec.targetNamespace`, else the HelmRelease's namespace.
    pub fn release_namespace(&self) -> &str {
        non_empty(&self.spec.target_namespace).unwrap_or(self.own_namespace())
    }

    /// Where the release records are: `spec.storageNamespace`, else the HelmRelease's namespace.
    pub fn storage_namespace(&self) -> &str {
        non_empty(&self.spec.storage_namespace).unwrap_or(self.own_namespace())
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    /// The newest entry of `status.history` (helm-controller's `Snapshots.Latest`).
    pub fn latest_snapshot(&self) -> Option<&Snapshot> {
        self.status
            .as_ref()?
            .history
            .iter()
            .max_by_key(|s| s.version)
    }
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_names_are_shortened_as_helm_controller_does() {
        // helm-controller's internal/release/name_test.go.
        for (name, expected) in [
            ("release-name", "release-name"),
            (
                "release-name-with-very-long-name-which-is-longer-than-53-characters",
                "release-name-with-very-long-name-which-i-788ca0d0d7b0",
            ),
            (
                "another-release-name-with-very-long-name-which-is-longer-than-53-characters",
                "another-release-name-with-very-long-name-7e72150d5a36",
            ),
            ("", ""),
        ] {
            let got = shorten_name(name);
            assert_eq!(got, expected);
            assert!(got.len() <= MAX_RELEASE_NAME);
        }
    }

    fn hr(spec: serde_json::Value) -> HelmRelease {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn names_and_namespaces_by_table() {
        let long = "a-very-long-target-namespace-name-for-this-test";
        for (spec, release, target, storage) in [
            (serde_json::json!({}), "web", "apps", "apps"),
            (
                serde_json::json!({"targetNamespace": "demo"}),
                "demo-web",
                "demo",
                "apps",
            ),
            (
                serde_json::json!({"targetNamespace": "demo", "releaseName": "db", "storageNamespace": "helm"}),
                "db",
                "demo",
                "helm",
            ),
            (
                serde_json::json!({"targetNamespace": "", "releaseName": "", "storageNamespace": ""}),
                "web",
                "apps",
                "apps",
            ),
        ] {
            let h = hr(spec.clone());
            assert_eq!(h.release_name(), release, "{spec}");
            assert_eq!(h.release_namespace(), target, "{spec}");
            assert_eq!(h.storage_namespace(), storage, "{spec}");
        }
        // `[targetNamespace-]name` over 53 characters is shortened like any release name.
        let h = hr(serde_json::json!({"targetNamespace": format!("{long}-xyz")}));
        assert_eq!(h.release_name(), shorten_name(&format!("{long}-xyz-web")));
        assert_eq!(h.release_name().len(), MAX_RELEASE_NAME);
        assert!(
            h.release_name()
                .starts_with("a-very-long-target-namespace-name-for-th-")
        );
    }

    #[test]
    fn remediation_defaults_are_helm_controllers() {
        let none = UpgradeRemediation::default();
        assert!(!none.must_remediate_last_failure());
        assert!(!none.retries_exhausted(0));
        assert!(none.retries_exhausted(1));
        let three = UpgradeRemediation {
            retries: 3,
            ..Default::default()
        };
        assert!(three.must_remediate_last_failure());
        assert!(!three.retries_exhausted(3));
        assert!(three.retries_exhausted(4));
        let unlimited = UpgradeRemediation {
            retries: -1,
            ..Default::default()
        };
        assert!(!unlimited.retries_exhausted(1000));
    }
}
