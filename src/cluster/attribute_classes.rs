//! Whether the server serves VolumeAttributesClass, in which version, and which classes exist:
//! read before a claim is moved to a class (a class that does not exist, or a server without
//! the API, is a refusal before any write). Read as the service (cluster-scoped, like
//! StorageClasses).

use std::collections::BTreeSet;

use kube::api::Api;

use super::{CallError, KubeCluster, with_deadline};
use crate::decide::AttributeClasses;

/// The group VolumeAttributesClass is served in, and its versions, the stable one first: GA
/// in `v1` from 1.34, beta in `v1beta1` from 1.31 (off by default), alpha before.
pub const ATTRIBUTE_CLASS_GROUP: &str = "storage.k8s.io";
const ATTRIBUTE_CLASS_VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha1"];
const ATTRIBUTE_CLASS_PLURAL: &str = "volumeattributesclasses";

impl KubeCluster {
    /// The version of `storage.k8s.io` that serves VolumeAttributesClass, if any.
    async fn attribute_class_version(&self) -> Result<Option<String>, CallError> {
        let groups = with_deadline(
            self.call_timeout,
            "discover",
            "the API groups",
            self.client.list_api_groups(),
        )
        .await?;
        let Some(group) = groups
            .groups
            .into_iter()
            .find(|g| g.name == ATTRIBUTE_CLASS_GROUP)
        else {
            return Ok(None);
        };
        for version in ATTRIBUTE_CLASS_VERSIONS {
            if !group.versions.iter().any(|v| v.version == version) {
                continue;
            }
            let group_version = format!("{ATTRIBUTE_CLASS_GROUP}/{version}");
            let listed = with_deadline(
                self.call_timeout,
                "discover",
                &format!("the resources of {group_version}"),
                self.client.list_api_group_resources(&group_version),
            )
            .await;
            match listed {
                Ok(list)
                    if list
                        .resources
                        .iter()
                        .any(|r| r.name == ATTRIBUTE_CLASS_PLURAL) =>
                {
                    return Ok(Some(group_version));
                }
                Ok(_) => {}
                Err(e) if e.code() == Some(404) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// [`super::Cluster::attribute_classes`]: discovery, then a get of each class of `names`.
    pub(super) async fn served_attribute_classes(
        &self,
        names: &BTreeSet<String>,
    ) -> Result<AttributeClasses, CallError> {
        let Some(api_version) = self.attribute_class_version().await? else {
            return Ok(AttributeClasses::Unsupported);
        };
        let (group, version) = api_version.split_once('/').unwrap_or(("", ""));
        let resource = kube::core::ApiResource {
            group: group.to_string(),
            version: version.to_string(),
            api_version: api_version.clone(),
            kind: "VolumeAttributesClass".to_string(),
            plural: ATTRIBUTE_CLASS_PLURAL.to_string(),
        };
        let api: Api<kube::core::DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let mut existing = BTreeSet::new();
        for name in names {
            let found = with_deadline(
                self.call_timeout,
                "get",
                &format!("VolumeAttributesClass {name}"),
                api.get_opt(name),
            )
            .await?;
            if found.is_some() {
                existing.insert(name.clone());
            }
        }
        Ok(AttributeClasses::Served {
            api_version,
            names: existing,
        })
    }
}
