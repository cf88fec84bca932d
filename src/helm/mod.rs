//! HelmRelease StatefulSets (issue #29): what Helm recorded and when the converger may act.
//!
//! A HelmRelease whose upgrade failed on the StatefulSet immutable-field error is converged from
//! Helm's own newest release record, with no Helm binary and no chart rendering: Helm stores the
//! release it tried to apply, post-rendered manifest included, before it applies anything.
//!
//! - [`base64`]: Go's standard base64, as Helm's storage driver writes and reads it.
//! - [`release`]: the release Secrets: decode (capped), check, encode (tests and fixtures).
//! - [`manifest`]: the record's objects with Helm's ownership metadata.
//! - [`helmrelease`]: the HelmRelease fields read, release name and namespaces.
//! - [`act`]: the pure "when to act" decision.
//!
//! All pure; the cluster side (`render --helm-release`) is in the CLI.

pub mod act;
pub mod base64;
pub mod helmrelease;
pub mod manifest;
pub mod release;
