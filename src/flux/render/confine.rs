//! Keeping the build inside the artifact root.
//!
//! kustomize-controller builds on a filesystem that refuses any path outside the artifact
//! root. An external kustomize with load restrictions off has no such guard, so before the
//! build every path the tree can make kustomize read (`spec.path`, `spec.components`, and the
//! file references of every kustomization file below the root) is checked lexically. That is
//! sound because the unpacked tree holds no symlinks (the untar skips them, and `--path` is
//! copied the same way), so a path's lexical form is where it leads.
//!
//! - [`paths`]: a path joined inside the root, and what kustomize fetches instead of reading.
//! - [`kustomization`], [`plugins`]: the references of a kustomization file and of a plugin
//!   config, read by [`fields`] as kustomize decodes them ([`charts`] for helm), found as a
//!   [`reference`].

pub mod charts;
pub mod fields;
pub mod kustomization;
pub mod paths;
pub mod plugins;
pub mod reference;

pub use kustomization::{plain_resources, references};
pub use paths::{file_url_path, is_fetched, is_http, is_local_relative, is_remote, join_within};
pub use plugins::{BUILTIN_PLUGIN_API_VERSION, BUILTIN_PLUGIN_KINDS, plugin_references};
pub use reference::{Reference, Unchecked, Use};

#[cfg(test)]
mod tests;
