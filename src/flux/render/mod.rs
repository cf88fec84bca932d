//! Rendering a revision as kustomize-controller does: generator, spec overlay, kustomize build
//! confined to the artifact root, then the per-object post-build steps.
//!
//! The tree under the artifact root is modified in place (the kustomization file is written),
//! so callers pass a scratch copy: an unpacked artifact, or [`copy_tree`] of a local directory.
//!
//! - [`pipeline`]: [`render`] from end to end; [`prepare`] the tree it builds, whose
//!   [`reachable`] references [`confine`] checks; [`generator`], [`overlay`], [`build`] (in
//!   its [`sandbox`]), [`postbuild`]: the steps; [`resolve`]: a Kustomization's source to a render.
//! - [`rendered`], [`error`]: what a render gives; [`stream`], [`tree`]: YAML streams, local trees.

pub mod build;
pub mod confine;
pub mod error;
pub mod generator;
pub mod overlay;
pub mod pipeline;
pub mod postbuild;
pub mod prepare;
pub mod reachable;
pub mod rendered;
pub mod resolve;
pub mod sandbox;
pub mod stream;
pub mod tree;

pub use build::{
    DEFAULT_KUSTOMIZE, DEFAULT_MAX_RENDER_BYTES, DEFAULT_RENDER_TIMEOUT, KustomizeCommand,
};
pub use error::RenderError;
pub use pipeline::{RenderRequest, render};
pub use postbuild::Owner;
pub use prepare::{prepare, prepare_with};
pub use rendered::{Rendered, RenderedStatefulSet};
pub use stream::{parse_stream, to_yaml_stream};
pub use tree::{copy_tree, copy_tree_within};
