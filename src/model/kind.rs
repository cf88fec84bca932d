//! The kinds of object the service gates. Each is a Flux object whose controller would apply
//! StatefulSets the API server refuses; the kind names it in `/status`, Events and metrics.

use serde::{Deserialize, Serialize};

/// A kind of gated object (`kind` in `/status` rows, the `kind` label of the metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// `kustomize.toolkit.fluxcd.io/v1` Kustomization: rendered from its source's artifact.
    Kustomization,
    /// `helm.toolkit.fluxcd.io/v2` HelmRelease: read from Helm's newest release record.
    HelmRelease,
}

impl Kind {
    /// The Kubernetes kind, as `kind:` spells it (and `Display` prints it).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Kustomization => "Kustomization",
            Kind::HelmRelease => "HelmRelease",
        }
    }

    /// The resource's plural, as the API (and the dashboard's paths, `/kustomizations/...`,
    /// `/helmreleases/...`) spell it.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Kustomization => "kustomizations",
            Kind::HelmRelease => "helmreleases",
        }
    }

    /// Its controller, as Flux names it (the field manager and the events' reporter).
    pub fn controller(self) -> &'static str {
        match self {
            Kind::Kustomization => "kustomize-controller",
            Kind::HelmRelease => "helm-controller",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_spelled_as_kubernetes_spells_them() {
        for (kind, text, controller) in [
            (Kind::Kustomization, "Kustomization", "kustomize-controller"),
            (Kind::HelmRelease, "HelmRelease", "helm-controller"),
        ] {
            assert_eq!(kind.to_string(), text);
            assert_eq!(serde_json::to_value(kind).unwrap(), text);
            assert_eq!(kind.controller(), controller);
        }
    }
}
