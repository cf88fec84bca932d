//! Exact Kubernetes resource quantities (issue #2: to be implemented).

/// A resource quantity: compared by exact value, displayed as spelled in its source.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Quantity {
    raw: String,
}

impl Quantity {
    /// The spelling the quantity was parsed from.
    pub fn as_str(&self) -> &str {
        &self.raw
    }
}
