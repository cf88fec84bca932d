//! The fields of Flux's objects the converger reads, and reading them from a cluster.
//!
//! Only what rendering needs is typed; every other field is ignored (not an error), so a
//! newer Flux with more fields still reads. A 404 is ambiguous in Kubernetes: the object may
//! be missing, or its whole CRD (Flux not installed, or a kind this Flux lacks, such as
//! ExternalArtifact before 2.7). [`get_source`] and [`get_kustomization`] tell them apart
//! because the fix differs (create the object vs install the CRD).
//!
//! - [`kustomization`], [`sources`], [`status`]: the typed fields; [`upstream`]: what an
//!   ExternalArtifact publishes from.
//! - [`read`]: the reads from a cluster; [`error`]: why one failed.

pub mod error;
pub mod kustomization;
pub mod lean;
pub mod read;
pub mod sources;
pub mod status;
pub mod upstream;

pub use error::ObjectsError;
pub use kustomization::*;
pub use read::{
    DEFAULT_CALL_TIMEOUT, get_kustomization, get_kustomization_within, get_namespaced, get_source,
    get_source_within, read_source, read_source_within, source_reference,
};
pub use sources::*;
pub use status::{Artifact, Condition, SourceStatus};
pub use upstream::{UpstreamError, upstream_reference};

#[cfg(test)]
mod tests;
