//! The kinds of object the service gates. Each is a GitOps tool's object whose controller would
//! apply StatefulSets the API server refuses; the kind names it in `/status`, Events, metrics,
//! records and routes.
//!
//! A kind is a value, not a closed enum: everything the service says of a kind is in its
//! [`KindSpec`], so a new kind (Argo CD's Application, a test's stand-in) is one more spec and
//! one `service::kind::GatedKind` implementation, and no match over kinds has to learn it.

use serde::{Serialize, Serializer};

/// What names one kind of gated object wherever the service speaks of it.
#[derive(Debug)]
pub struct KindSpec {
    /// The Kubernetes kind, as `kind:` spells it: `/status` rows, Events, the metrics' `kind`
    /// label.
    pub name: &'static str,
    /// Its API group and version (`kustomize.toolkit.fluxcd.io`, `v1`).
    pub group: &'static str,
    pub version: &'static str,
    /// Its resource: `/status/{plural}/{ns}/{name}`, the dashboard's `/{plural}/{ns}/{name}`,
    /// the `get` reviewed for `--status-auth=kubernetes`.
    pub plural: &'static str,
    /// The field of `GET /status` that lists its rows.
    pub status_field: &'static str,
    /// Its controller, as the tool names it (the field manager of its applies, the reporter of
    /// its events).
    pub controller: &'static str,
    /// The `flux-converger.io/record` label of its results ConfigMaps.
    pub record: &'static str,
    /// The name prefix of its results ConfigMaps.
    pub record_prefix: &'static str,
}

/// A kind of gated object. Compared, hashed and ordered by its name.
#[derive(Clone, Copy)]
pub struct Kind(&'static KindSpec);

static KUSTOMIZATION: KindSpec = KindSpec {
    name: "Kustomization",
    group: "kustomize.toolkit.fluxcd.io",
    version: "v1",
    plural: "kustomizations",
    status_field: "kustomizations",
    controller: "kustomize-controller",
    record: "results",
    record_prefix: "flux-converger-results",
};

static HELM_RELEASE: KindSpec = KindSpec {
    name: "HelmRelease",
    group: "helm.toolkit.fluxcd.io",
    version: "v2",
    plural: "helmreleases",
    status_field: "helmReleases",
    controller: "helm-controller",
    record: "helmrelease-results",
    record_prefix: "flux-converger-helmrelease-results",
};

/// Argo CD's field manager in every apply mode is `argocd-controller` (ARGOCD.md §2); Argo CD's
/// own Events are reported by `argocd-application-controller`, but the service's Events on an
/// Application are its own (`records::events::REPORTING_CONTROLLER`), as on every kind.
static APPLICATION: KindSpec = KindSpec {
    name: "Application",
    group: "argoproj.io",
    version: "v1alpha1",
    plural: "applications",
    status_field: "applications",
    controller: "argocd-controller",
    record: "application-results",
    record_prefix: "flux-converger-application-results",
};

impl Kind {
    /// `kustomize.toolkit.fluxcd.io/v1` Kustomization: rendered from its source's artifact.
    pub const KUSTOMIZATION: Kind = Kind(&KUSTOMIZATION);
    /// `helm.toolkit.fluxcd.io/v2` HelmRelease: read from Helm's newest release record.
    pub const HELM_RELEASE: Kind = Kind(&HELM_RELEASE);
    /// `argoproj.io/v1alpha1` Application: its desired StatefulSets from Argo CD's API server.
    pub const APPLICATION: Kind = Kind(&APPLICATION);

    /// A kind from its spec (a kind the crate does not define: a test's stand-in).
    pub const fn new(spec: &'static KindSpec) -> Kind {
        Kind(spec)
    }

    pub fn spec(self) -> &'static KindSpec {
        self.0
    }

    /// The Kubernetes kind, as `kind:` spells it (and `Display` prints it).
    pub fn as_str(self) -> &'static str {
        self.0.name
    }

    /// Its controller, as its tool names it (the field manager and the events' reporter).
    pub fn controller(self) -> &'static str {
        self.0.controller
    }

    /// Its resource plural (routes, reviews).
    pub fn plural(self) -> &'static str {
        self.0.plural
    }
}

impl PartialEq for Kind {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Kind {}

impl std::hash::Hash for Kind {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name.hash(state);
    }
}

impl PartialOrd for Kind {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kind {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.name.cmp(other.0.name)
    }
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_spelled_as_their_tools_spell_them() {
        for (kind, text, controller, plural, field) in [
            (
                Kind::KUSTOMIZATION,
                "Kustomization",
                "kustomize-controller",
                "kustomizations",
                "kustomizations",
            ),
            (
                Kind::HELM_RELEASE,
                "HelmRelease",
                "helm-controller",
                "helmreleases",
                "helmReleases",
            ),
            (
                Kind::APPLICATION,
                "Application",
                "argocd-controller",
                "applications",
                "applications",
            ),
        ] {
            assert_eq!(kind.to_string(), text);
            assert_eq!(serde_json::to_value(kind).unwrap(), text);
            assert_eq!(kind.controller(), controller);
            assert_eq!(kind.plural(), plural);
            assert_eq!(kind.spec().status_field, field);
        }
        assert_ne!(Kind::KUSTOMIZATION, Kind::HELM_RELEASE);
        assert!(Kind::HELM_RELEASE < Kind::KUSTOMIZATION);
        assert_ne!(Kind::APPLICATION, Kind::HELM_RELEASE);
    }
}
