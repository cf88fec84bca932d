//! The resource types the fake serves: one table drives routing, discovery, error wording and
//! the per-type storage rules (status subresource, generation, what DELETE answers).

use super::version::AttributesClasses;

/// One served resource type, as the real API server registers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResourceType {
    /// API group; `""` is the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub namespaced: bool,
    /// Writes to the main resource ignore `status`; `/status` writes ignore everything else.
    pub status_subresource: bool,
    /// `metadata.generation` is kept (and bumped on spec changes).
    pub has_generation: bool,
    /// DELETE answers the deleted object (pods, claims, custom resources) instead of a
    /// `Status` with `status: Success` (the registry's `ReturnDeletedObject`).
    pub returns_deleted_object: bool,
    /// Served from a CustomResourceDefinition (list items keep `apiVersion`/`kind`; updates
    /// need a `resourceVersion`).
    pub custom: bool,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `statefulsets.apps`, `persistentvolumeclaims`: how NotFound/AlreadyExists/Conflict
    /// name the resource.
    pub fn qualified_plural(&self) -> String {
        qualify(self.plural, self.group)
    }

    /// `StatefulSet.apps`, `PersistentVolumeClaim`: how Invalid and precondition errors name it.
    pub fn qualified_kind(&self) -> String {
        qualify(self.kind, self.group)
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The path prefix of a collection, without namespace: `/apis/apps/v1` or `/api/v1`.
    pub fn group_version_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

fn qualify(name: &str, group: &str) -> String {
    if group.is_empty() {
        name.to_string()
    } else {
        format!("{name}.{group}")
    }
}

const fn builtin(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    short_names: &'static [&'static str],
    namespaced: bool,
) -> ResourceType {
    ResourceType {
        group,
        version,
        kind,
        plural,
        singular,
        short_names,
        namespaced,
        status_subresource: false,
        has_generation: false,
        returns_deleted_object: false,
        custom: false,
    }
}

const fn flux(
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    short_names: &'static [&'static str],
) -> ResourceType {
    ResourceType {
        group,
        version: "v1",
        kind,
        plural,
        singular,
        short_names,
        namespaced: true,
        status_subresource: true,
        has_generation: true,
        // A custom resource deleted at once answers a `Status` (kind = the plural), like the
        // built-ins; one held by finalizers answers the object.
        returns_deleted_object: false,
        custom: true,
    }
}

pub const NAMESPACE: ResourceType = ResourceType {
    status_subresource: true,
    ..builtin(
        "",
        "v1",
        "Namespace",
        "namespaces",
        "namespace",
        &["ns"],
        false,
    )
};
pub const PVC: ResourceType = ResourceType {
    status_subresource: true,
    returns_deleted_object: true,
    ..builtin(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        &["pvc"],
        true,
    )
};
pub const POD: ResourceType = ResourceType {
    status_subresource: true,
    returns_deleted_object: true,
    ..builtin("", "v1", "Pod", "pods", "pod", &["po"], true)
};
pub const CONFIGMAP: ResourceType = builtin(
    "",
    "v1",
    "ConfigMap",
    "configmaps",
    "configmap",
    &["cm"],
    true,
);
pub const SECRET: ResourceType = builtin("", "v1", "Secret", "secrets", "secret", &[], true);
pub const EVENT: ResourceType = builtin("", "v1", "Event", "events", "event", &["ev"], true);
pub const EVENT_V1: ResourceType = builtin(
    "events.k8s.io",
    "v1",
    "Event",
    "events",
    "event",
    &["ev"],
    true,
);
pub const STATEFULSET: ResourceType = ResourceType {
    status_subresource: true,
    has_generation: true,
    ..builtin(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        "statefulset",
        &["sts"],
        true,
    )
};
pub const CONTROLLER_REVISION: ResourceType = builtin(
    "apps",
    "v1",
    "ControllerRevision",
    "controllerrevisions",
    "controllerrevision",
    &[],
    true,
);
pub const STORAGE_CLASS: ResourceType = builtin(
    "storage.k8s.io",
    "v1",
    "StorageClass",
    "storageclasses",
    "storageclass",
    &["sc"],
    false,
);
/// VolumeAttributesClass (KEP-3751), cluster-scoped: `storage.k8s.io/v1` from 1.34. Served
/// only where the version says so ([`served`]).
pub const VOLUME_ATTRIBUTES_CLASS: ResourceType = builtin(
    "storage.k8s.io",
    "v1",
    "VolumeAttributesClass",
    "volumeattributesclasses",
    "volumeattributesclass",
    &["vac"],
    false,
);
/// The beta of 1.31 to 1.33, `storage.k8s.io/v1beta1`: one storage with [`VOLUME_ATTRIBUTES_CLASS`].
pub const VOLUME_ATTRIBUTES_CLASS_BETA: ResourceType = ResourceType {
    version: "v1beta1",
    ..VOLUME_ATTRIBUTES_CLASS
};
/// `policy/v1` PodDisruptionBudget: what the eviction subresource checks.
pub const POD_DISRUPTION_BUDGET: ResourceType = ResourceType {
    status_subresource: true,
    has_generation: true,
    ..builtin(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        &["pdb"],
        true,
    )
};
pub const LEASE: ResourceType = builtin(
    "coordination.k8s.io",
    "v1",
    "Lease",
    "leases",
    "lease",
    &[],
    true,
);
pub const KUSTOMIZATION: ResourceType = flux(
    "kustomize.toolkit.fluxcd.io",
    "Kustomization",
    "kustomizations",
    "kustomization",
    &["ks"],
);
/// helm-controller's HelmRelease, served as `v2` (Flux 2.3+).
pub const HELM_RELEASE: ResourceType = ResourceType {
    version: "v2",
    ..flux(
        "helm.toolkit.fluxcd.io",
        "HelmRelease",
        "helmreleases",
        "helmrelease",
        &["hr"],
    )
};
pub const GIT_REPOSITORY: ResourceType = flux(
    "source.toolkit.fluxcd.io",
    "GitRepository",
    "gitrepositories",
    "gitrepository",
    &["gitrepo"],
);
pub const OCI_REPOSITORY: ResourceType = flux(
    "source.toolkit.fluxcd.io",
    "OCIRepository",
    "ocirepositories",
    "ocirepository",
    &["ocirepo"],
);
pub const BUCKET: ResourceType = flux(
    "source.toolkit.fluxcd.io",
    "Bucket",
    "buckets",
    "bucket",
    &[],
);
pub const EXTERNAL_ARTIFACT: ResourceType = flux(
    "source.toolkit.fluxcd.io",
    "ExternalArtifact",
    "externalartifacts",
    "externalartifact",
    &[],
);

/// Argo CD's Application: a custom resource without a status subresource (`subresources: {}`),
/// so `operation` and `status` change by plain writes and `generation` moves with them.
pub const APPLICATION: ResourceType = ResourceType {
    version: "v1alpha1",
    namespaced: true,
    status_subresource: false,
    ..flux(
        "argoproj.io",
        "Application",
        "applications",
        "application",
        &["app", "apps"],
    )
};
/// Argo CD's AppProject, likewise without a status subresource.
pub const APP_PROJECT: ResourceType = ResourceType {
    version: "v1alpha1",
    status_subresource: false,
    ..flux(
        "argoproj.io",
        "AppProject",
        "appprojects",
        "appproject",
        &["appproj", "appprojs"],
    )
};

pub const SERVICE_ACCOUNT: ResourceType = builtin(
    "",
    "v1",
    "ServiceAccount",
    "serviceaccounts",
    "serviceaccount",
    &["sa"],
    true,
);
pub const PERSISTENT_VOLUME: ResourceType = ResourceType {
    status_subresource: true,
    returns_deleted_object: true,
    ..builtin(
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        "persistentvolume",
        &["pv"],
        false,
    )
};
pub const DEPLOYMENT: ResourceType = ResourceType {
    status_subresource: true,
    has_generation: true,
    ..builtin(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        "deployment",
        &["deploy"],
        true,
    )
};
const RBAC: &str = "rbac.authorization.k8s.io";
pub const ROLE: ResourceType = builtin(RBAC, "v1", "Role", "roles", "role", &[], true);
pub const ROLE_BINDING: ResourceType = builtin(
    RBAC,
    "v1",
    "RoleBinding",
    "rolebindings",
    "rolebinding",
    &[],
    true,
);
pub const CLUSTER_ROLE: ResourceType = builtin(
    RBAC,
    "v1",
    "ClusterRole",
    "clusterroles",
    "clusterrole",
    &[],
    false,
);
pub const CLUSTER_ROLE_BINDING: ResourceType = builtin(
    RBAC,
    "v1",
    "ClusterRoleBinding",
    "clusterrolebindings",
    "clusterrolebinding",
    &[],
    false,
);

pub const ALL: &[ResourceType] = &[
    NAMESPACE,
    PVC,
    POD,
    CONFIGMAP,
    SECRET,
    EVENT,
    EVENT_V1,
    STATEFULSET,
    CONTROLLER_REVISION,
    STORAGE_CLASS,
    VOLUME_ATTRIBUTES_CLASS,
    VOLUME_ATTRIBUTES_CLASS_BETA,
    POD_DISRUPTION_BUDGET,
    LEASE,
    KUSTOMIZATION,
    HELM_RELEASE,
    GIT_REPOSITORY,
    OCI_REPOSITORY,
    BUCKET,
    EXTERNAL_ARTIFACT,
    APPLICATION,
    APP_PROJECT,
    SERVICE_ACCOUNT,
    PERSISTENT_VOLUME,
    DEPLOYMENT,
    ROLE,
    ROLE_BINDING,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
];

/// Whether a server whose VolumeAttributesClass support is `classes` serves `rt`: every type
/// but the two versions of VolumeAttributesClass always; those as the version says.
pub fn served(rt: &ResourceType, classes: AttributesClasses) -> bool {
    if *rt == VOLUME_ATTRIBUTES_CLASS {
        classes == AttributesClasses::Ga
    } else if *rt == VOLUME_ATTRIBUTES_CLASS_BETA {
        classes == AttributesClasses::Beta
    } else {
        true
    }
}

/// The type served at `group/version` under `plural`.
pub fn by_path(group: &str, version: &str, plural: &str) -> Option<ResourceType> {
    ALL.iter()
        .copied()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The type of an object by its `apiVersion` and `kind`.
pub fn by_kind(api_version: &str, kind: &str) -> Option<ResourceType> {
    let (group, version) = split_api_version(api_version);
    ALL.iter()
        .copied()
        .find(|r| r.group == group && r.version == version && r.kind == kind)
}

pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}
