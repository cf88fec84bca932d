//! The key every record, queue entry, hook limit and index row of a gated object is filed
//! under: its kind, namespace and name, so two objects of different kinds that share a
//! namespace and name never share anything.

use super::Kind;

/// A gated object, by kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Key {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A Kustomization's key.
    pub fn kustomization(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Key::new(Kind::KUSTOMIZATION, namespace, name)
    }

    /// A HelmRelease's key.
    pub fn helm_release(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Key::new(Kind::HELM_RELEASE, namespace, name)
    }

    /// `Kind/namespace/name`: how the journal's intents and the hook's answer name an owner
    /// of another kind than Kustomization.
    pub fn qualified(&self) -> String {
        format!("{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// `namespace/name` (the kind is logged as a field of its own, or is the context's).
impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
