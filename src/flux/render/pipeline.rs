//! One render from end to end: prepare (off the runtime), kustomize build, then the per-object
//! post-build steps kustomize-controller runs.

use std::path::Path;

use super::build::KustomizeCommand;
use super::error::RenderError;
use super::generator;
use super::postbuild::{self, Owner};
use super::prepare::prepare_with;
use super::rendered::Rendered;
use crate::flux::substitute::Variables;

/// What a render needs besides the tree.
#[derive(Clone, Debug)]
pub struct RenderRequest<'a> {
    /// The artifact root (a scratch copy: it is modified).
    pub root: &'a Path,
    pub owner: Owner<'a>,
    /// Already collected from `substituteFrom` and `substitute`.
    pub variables: &'a Variables,
    /// Strict post-build substitution (Flux's default).
    pub strict: bool,
    pub kustomize: &'a KustomizeCommand,
}

/// Renders the tree under `request.root` for the Kustomization `request.owner`.
pub async fn render(request: &RenderRequest<'_>) -> Result<Rendered, RenderError> {
    let root = request.root.to_path_buf();
    let spec = request.owner.spec.clone();
    let no_remote_bases = request.kustomize.no_remote_bases;
    let dir = tokio::task::spawn_blocking(move || prepare_with(&root, &spec, no_remote_bases))
        .await
        .map_err(|e| RenderError::Io {
            context: "preparing the kustomization".into(),
            error: std::io::Error::other(e.to_string()),
        })??;
    let shown = generator::display_relative(request.root, &dir);
    let text = request
        .kustomize
        .build_within(request.root, &dir, &shown)
        .await?;
    let objects =
        postbuild::substitute_built(&text, &request.owner, request.variables, request.strict)?;
    let objects = postbuild::post_build(objects, &request.owner)?;
    let statefulsets = postbuild::statefulsets(&objects)?;
    tracing::debug!(
        kustomization = %format!("{}/{}", request.owner.namespace, request.owner.name),
        objects = objects.len(),
        statefulsets = statefulsets.len(),
        "rendered"
    );
    Ok(Rendered {
        objects,
        statefulsets,
    })
}
