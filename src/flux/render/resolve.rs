//! From a Kustomization in the cluster to its rendered objects: read the Kustomization and its
//! source, fetch the source's artifact (re-reading the source once if the artifact was
//! garbage-collected meanwhile), collect the post-build variables, render.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};

use super::build::KustomizeCommand;
use super::error::RenderError;
use super::pipeline::{RenderRequest, render};
use super::postbuild::Owner;
use super::rendered::Rendered;
use crate::cluster::with_deadline;
use crate::flux::artifact::{ArtifactError, Fetcher, UnpackedArtifact};
use crate::flux::objects::{
    self, Kustomization, ObjectsError, Source, SourceKind, SubstituteReference,
};
use crate::flux::substitute::{
    SubstituteError, VarSource, VarSourceKind, Variables, collect_variables,
};

/// A revision resolved and rendered.
#[derive(Debug)]
pub struct Resolved {
    pub kustomization: Kustomization,
    pub source: Source,
    /// The artifact revision rendered (e.g. `main@sha1:<hex>`).
    pub revision: String,
    pub rendered: Rendered,
    /// The values substituted from Secrets (`substituteFrom` kind Secret), also registered in
    /// [`crate::redact::registry`] under the Kustomization: no text that leaves may carry them.
    pub redactor: crate::redact::Redactor,
}

/// Why a Kustomization already read could not be rendered, with the source when it was read
/// on the way ([`Resolver::resolve_read`]): a caller recording the failure has the revision
/// it is about without reading the objects again.
#[derive(Debug)]
pub struct Unresolved {
    pub error: ResolveError,
    pub source: Option<Source>,
}

impl From<ObjectsError> for Unresolved {
    fn from(error: ObjectsError) -> Self {
        ResolveError::from(error).into()
    }
}

impl From<ResolveError> for Unresolved {
    fn from(error: ResolveError) -> Self {
        Unresolved {
            error,
            source: None,
        }
    }
}

/// Why resolving failed. Each names the object at fault.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Objects(#[from] ObjectsError),
    #[error("source {source_name}: {error}")]
    Artifact {
        source_name: String,
        error: ArtifactError,
    },
    #[error("Kustomization {kustomization}: {error}")]
    Render {
        kustomization: String,
        error: RenderError,
    },
    #[error("Kustomization {kustomization}: {message}")]
    Variables {
        kustomization: String,
        message: String,
        bad_input: bool,
    },
}

impl ResolveError {
    pub fn is_bad_input(&self) -> bool {
        match self {
            Self::Objects(e) => e.is_bad_input(),
            Self::Artifact { error, .. } => error.is_bad_input(),
            Self::Render { error, .. } => error.is_bad_input(),
            Self::Variables { bad_input, .. } => *bad_input,
        }
    }
}

/// Resolves and renders Kustomizations of one cluster.
#[derive(Clone)]
pub struct Resolver {
    pub client: Client,
    pub fetcher: Fetcher,
    pub kustomize: KustomizeCommand,
    pub strict: bool,
    /// kustomize-controller's `--no-cross-namespace-refs` inverted (Flux's default: allowed).
    pub allow_cross_namespace: bool,
}

impl Resolver {
    /// Reads `namespace/name` and renders the revision its source currently publishes; each
    /// cluster read is bounded by [`objects::DEFAULT_CALL_TIMEOUT`].
    pub async fn resolve(&self, namespace: &str, name: &str) -> Result<Resolved, ResolveError> {
        self.resolve_within(namespace, name, objects::DEFAULT_CALL_TIMEOUT)
            .await
    }

    /// As [`Resolver::resolve`], each cluster read (the Kustomization, its source,
    /// `substituteFrom`) bounded by `call_timeout`: the same per-call deadline as the
    /// converge's (`cluster::with_deadline`), so a server that stops answering fails the
    /// resolve naming the object instead of hanging it.
    pub async fn resolve_within(
        &self,
        namespace: &str,
        name: &str,
        call_timeout: Duration,
    ) -> Result<Resolved, ResolveError> {
        self.resolve_from_within(namespace, name, None, call_timeout)
            .await
    }

    /// As [`Resolver::resolve_within`], rendering the artifact of `upstream` (kind, namespace,
    /// name) instead of the Kustomization's own source when given: the `artifact` gate renders
    /// a Kustomization fed by an ExternalArtifact from the upstream that ExternalArtifact
    /// names, since the ExternalArtifact itself only ever holds what was converged already.
    pub async fn resolve_from_within(
        &self,
        namespace: &str,
        name: &str,
        upstream: Option<&(SourceKind, String, String)>,
        call_timeout: Duration,
    ) -> Result<Resolved, ResolveError> {
        let kustomization =
            objects::get_kustomization_within(&self.client, namespace, name, call_timeout).await?;
        self.resolve_read(kustomization, upstream, call_timeout)
            .await
            .map_err(|u| u.error)
    }

    /// As [`Resolver::resolve_from_within`], for a Kustomization the caller has read already
    /// (the service's gate reads it once per attempt): its source is read once, and given
    /// back with the error when the render fails after it.
    pub async fn resolve_read(
        &self,
        kustomization: Kustomization,
        upstream: Option<&(SourceKind, String, String)>,
        call_timeout: Duration,
    ) -> Result<Resolved, Unresolved> {
        let namespace = kustomization.metadata.namespace.clone().unwrap_or_default();
        let name = kustomization.metadata.name.clone().unwrap_or_default();
        let (namespace, name) = (namespace.as_str(), name.as_str());
        let (source, artifact) = self.fetch(&kustomization, upstream, call_timeout).await?;
        let with_source = |error: ResolveError| Unresolved {
            error,
            source: Some(source.clone()),
        };
        let revision = source
            .status
            .artifact
            .as_ref()
            .map(|a| a.revision.clone())
            .unwrap_or_default();
        let shown = format!("{namespace}/{name}");
        let (variables, redactor) = self
            .variables(&kustomization, namespace, call_timeout)
            .await
            .map_err(with_source)?;
        // Before the render: its errors (and every text after it) may quote these values.
        crate::redact::registry().set(namespace, name, redactor.clone());
        let owner = Owner {
            name,
            namespace,
            spec: &kustomization.spec,
        };
        let rendered = render(&RenderRequest {
            root: artifact.root(),
            owner,
            variables: &variables,
            strict: self.strict,
            kustomize: &self.kustomize,
        })
        .await
        .map_err(|error| {
            with_source(ResolveError::Render {
                kustomization: shown,
                error,
            })
        })?;
        tracing::info!(kustomization = %format!("{namespace}/{name}"), revision = %revision,
            objects = rendered.objects.len(), statefulsets = rendered.statefulsets.len(), "revision rendered");
        Ok(Resolved {
            kustomization,
            source,
            revision,
            rendered,
            redactor,
        })
    }

    /// Fetches the source's artifact; on 404 (superseded and garbage-collected) re-reads the
    /// source once and fetches what it publishes now. A failure after the source was read
    /// gives it back.
    async fn fetch(
        &self,
        kustomization: &Kustomization,
        upstream: Option<&(SourceKind, String, String)>,
        call_timeout: Duration,
    ) -> Result<(Source, UnpackedArtifact), Unresolved> {
        let mut source = match upstream {
            Some((kind, ns, name)) => {
                objects::read_source_within(&self.client, *kind, ns, name, call_timeout).await?
            }
            None => {
                objects::get_source_within(
                    &self.client,
                    kustomization,
                    self.allow_cross_namespace,
                    call_timeout,
                )
                .await?
            }
        };
        let mut retried = false;
        loop {
            let artifact = match source.artifact() {
                Ok(artifact) => artifact.clone(),
                Err(e) => {
                    return Err(Unresolved {
                        error: e.into(),
                        source: Some(source),
                    });
                }
            };
            let digest = artifact.digest.clone().unwrap_or_default();
            match self.fetcher.fetch(&artifact.url, &digest).await {
                Ok(unpacked) => return Ok((source, unpacked)),
                Err(ArtifactError::NotFound { url }) if !retried => {
                    tracing::info!(url = %url, source = %source.display_name(), revision = %artifact.revision,
                        "artifact gone, re-reading the source");
                    retried = true;
                    source = objects::read_source_within(
                        &self.client,
                        source.kind,
                        &source.namespace,
                        &source.name,
                        call_timeout,
                    )
                    .await?;
                }
                Err(error) => {
                    return Err(Unresolved {
                        error: ResolveError::Artifact {
                            source_name: source.display_name(),
                            error,
                        },
                        source: Some(source),
                    });
                }
            }
        }
    }

    /// Reads the `substituteFrom` ConfigMaps/Secrets (in the Kustomization's namespace) and
    /// merges them with `substitute`, in Flux's order; with the redactor of the Secrets' values.
    async fn variables(
        &self,
        kustomization: &Kustomization,
        namespace: &str,
        call_timeout: Duration,
    ) -> Result<(Variables, crate::redact::Redactor), ResolveError> {
        let shown = format!(
            "{namespace}/{}",
            kustomization.metadata.name.as_deref().unwrap_or_default()
        );
        let Some(post_build) = &kustomization.spec.post_build else {
            return Ok((Variables::new(), crate::redact::Redactor::default()));
        };
        let mut sources = Vec::new();
        for reference in &post_build.substitute_from {
            let source = fetch_reference(&self.client, namespace, reference, call_timeout)
                .await
                .map_err(|(message, bad_input)| ResolveError::Variables {
                    kustomization: shown.clone(),
                    message,
                    bad_input,
                })?;
            sources.push(source);
        }
        let redactor = secret_values(&sources);
        let variables = collect_variables(&sources, Some(&post_build.substitute)).map_err(|e| {
            ResolveError::Variables {
                kustomization: shown,
                message: e.to_string(),
                bad_input: true,
            }
        })?;
        Ok((variables, redactor))
    }
}

/// The values of the `substituteFrom` Secrets, as substitution sees them (newlines removed),
/// and as stored: every one, even one a later source overrides (it is a secret all the same).
pub fn secret_values(sources: &[VarSource]) -> crate::redact::Redactor {
    crate::redact::Redactor::new(
        sources
            .iter()
            .filter(|s| s.kind == VarSourceKind::Secret)
            .flat_map(|s| s.data.iter().flatten())
            .flat_map(|(_, v)| [v.replace('\n', ""), v.clone()]),
    )
}

/// Reads one `substituteFrom` entry (`data: None` when absent; [`collect_variables`] decides
/// whether that is allowed). Errors carry whether they are bad input.
pub async fn fetch_reference(
    client: &Client,
    namespace: &str,
    reference: &SubstituteReference,
    deadline: Duration,
) -> Result<VarSource, (String, bool)> {
    let what = format!(
        "substituteFrom {}/{namespace}/{}",
        reference.kind, reference.name
    );
    let kind: VarSourceKind = reference
        .kind
        .parse()
        .map_err(|e: SubstituteError| (e.to_string(), true))?;
    let failed = |e: crate::cluster::CallError| (e.to_string(), false);
    Ok(match kind {
        VarSourceKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            let found = with_deadline(deadline, "reading", &what, api.get_opt(&reference.name))
                .await
                .map_err(failed)?;
            VarSource::from_config_map(&reference.name, reference.optional, found.as_ref())
        }
        VarSourceKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            let found = with_deadline(deadline, "reading", &what, api.get_opt(&reference.name))
                .await
                .map_err(failed)?;
            VarSource::from_secret(&reference.name, reference.optional, found.as_ref())
        }
    })
}
