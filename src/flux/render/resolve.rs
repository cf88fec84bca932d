//! From a Kustomization in the cluster to its rendered objects: read the Kustomization and its
//! source, fetch the source's artifact (re-reading the source once if the artifact was
//! garbage-collected meanwhile), collect the post-build variables, render.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};

use super::{KustomizeCommand, Owner, RenderError, RenderRequest, Rendered};
use crate::flux::artifact::{ArtifactError, Fetcher, UnpackedArtifact};
use crate::flux::objects::{self, Kustomization, ObjectsError, Source, SubstituteReference};
use crate::flux::substitute::Variables;

/// A revision resolved and rendered.
#[derive(Debug)]
pub struct Resolved {
    pub kustomization: Kustomization,
    pub source: Source,
    /// The artifact revision rendered (e.g. `main@sha1:<hex>`).
    pub revision: String,
    pub rendered: Rendered,
}

/// Why resolving failed. Each names the object at fault.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Objects(#[from] ObjectsError),
    #[error("source {source_name}: {error}")]
    Artifact {
        source_name: String,
        #[source]
        error: ArtifactError,
    },
    #[error("Kustomization {kustomization}: {error}")]
    Render {
        kustomization: String,
        #[source]
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
}

impl Resolver {
    /// Reads `namespace/name` and renders the revision its source currently publishes.
    pub async fn resolve(&self, namespace: &str, name: &str) -> Result<Resolved, ResolveError> {
        let kustomization = objects::get_kustomization(&self.client, namespace, name).await?;
        let (source, artifact) = self.fetch(&kustomization).await?;
        let revision = source
            .status
            .artifact
            .as_ref()
            .map(|a| a.revision.clone())
            .unwrap_or_default();
        let shown = format!("{namespace}/{name}");
        let variables = self.variables(&kustomization, namespace).await?;
        let owner = Owner {
            name,
            namespace,
            spec: &kustomization.spec,
        };
        let rendered = super::render(&RenderRequest {
            root: artifact.root(),
            owner,
            variables: &variables,
            strict: self.strict,
            kustomize: &self.kustomize,
        })
        .await
        .map_err(|error| ResolveError::Render {
            kustomization: shown,
            error,
        })?;
        tracing::info!(kustomization = %format!("{namespace}/{name}"), revision = %revision,
            objects = rendered.objects.len(), statefulsets = rendered.statefulsets.len(), "revision rendered");
        Ok(Resolved {
            kustomization,
            source,
            revision,
            rendered,
        })
    }

    /// Fetches the source's artifact; on 404 (superseded and garbage-collected) re-reads the
    /// source once and fetches what it publishes now.
    async fn fetch(
        &self,
        kustomization: &Kustomization,
    ) -> Result<(Source, UnpackedArtifact), ResolveError> {
        let mut source = objects::get_source(&self.client, kustomization).await?;
        let mut retried = false;
        loop {
            let artifact = source.artifact()?.clone();
            let digest = artifact.digest.clone().unwrap_or_default();
            match self.fetcher.fetch(&artifact.url, &digest).await {
                Ok(unpacked) => return Ok((source, unpacked)),
                Err(ArtifactError::NotFound { url }) if !retried => {
                    tracing::info!(url = %url, source = %source.display_name(), revision = %artifact.revision,
                        "artifact gone, re-reading the source");
                    retried = true;
                    source = objects::read_source(
                        &self.client,
                        source.kind,
                        &source.namespace,
                        &source.name,
                    )
                    .await?;
                }
                Err(error) => {
                    return Err(ResolveError::Artifact {
                        source_name: source.display_name(),
                        error,
                    });
                }
            }
        }
    }

    /// Reads the `substituteFrom` ConfigMaps/Secrets (in the Kustomization's namespace) and
    /// combines them with `substitute`.
    async fn variables(
        &self,
        kustomization: &Kustomization,
        namespace: &str,
    ) -> Result<Variables, ResolveError> {
        let shown = format!(
            "{namespace}/{}",
            kustomization.metadata.name.as_deref().unwrap_or_default()
        );
        let Some(post_build) = &kustomization.spec.post_build else {
            return Ok(Variables::new());
        };
        let mut fetched = Vec::new();
        for reference in &post_build.substitute_from {
            let data = fetch_reference(&self.client, namespace, reference)
                .await
                .map_err(|(message, bad_input)| ResolveError::Variables {
                    kustomization: shown.clone(),
                    message,
                    bad_input,
                })?;
            fetched.push((reference.clone(), data));
        }
        combine_variables(&fetched, &post_build.substitute).map_err(|message| {
            ResolveError::Variables {
                kustomization: shown,
                message,
                bad_input: true,
            }
        })
    }
}

/// Reads one `substituteFrom` entry: `Ok(None)` when it is absent and optional.
/// Errors carry whether they are bad input.
pub async fn fetch_reference(
    client: &Client,
    namespace: &str,
    reference: &SubstituteReference,
) -> Result<Option<BTreeMap<String, String>>, (String, bool)> {
    let what = format!(
        "substituteFrom {}/{namespace}/{}",
        reference.kind, reference.name
    );
    let data = match reference.kind.as_str() {
        "ConfigMap" => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            api.get_opt(&reference.name)
                .await
                .map_err(|e| (format!("reading {what}: {e}"), false))?
                .map(|cm| cm.data.unwrap_or_default())
        }
        "Secret" => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            match api
                .get_opt(&reference.name)
                .await
                .map_err(|e| (format!("reading {what}: {e}"), false))?
            {
                None => None,
                Some(secret) => {
                    let mut out = BTreeMap::new();
                    for (k, v) in secret.data.unwrap_or_default() {
                        let text = String::from_utf8(v.0)
                            .map_err(|_| (format!("{what}: key {k:?} is not UTF-8 text"), true))?;
                        out.insert(k, text);
                    }
                    Some(out)
                }
            }
        }
        other => {
            return Err((
                format!("{what}: unsupported kind {other:?} (expected ConfigMap or Secret)"),
                true,
            ));
        }
    };
    match data {
        Some(d) => Ok(Some(d)),
        None if reference.optional => {
            tracing::debug!(reference = %what, "optional substituteFrom not found, skipped");
            Ok(None)
        }
        None => Err((format!("{what} not found"), true)),
    }
}

/// Combines fetched `substituteFrom` data (in order, later wins) and `substitute` (wins over
/// all), as kustomize-controller does: newlines removed from values, names checked.
pub fn combine_variables(
    fetched: &[(SubstituteReference, Option<BTreeMap<String, String>>)],
    substitute: &BTreeMap<String, String>,
) -> Result<Variables, String> {
    let mut vars = Variables::new();
    let layers = fetched
        .iter()
        .filter_map(|(_, d)| d.as_ref())
        .chain(std::iter::once(substitute));
    for layer in layers {
        for (k, v) in layer {
            if !valid_variable_name(k) {
                return Err(format!(
                    "'{k}' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'"
                ));
            }
            vars.insert(k.clone(), v.replace('\n', ""));
        }
    }
    Ok(vars)
}

fn valid_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str) -> SubstituteReference {
        SubstituteReference {
            kind: "ConfigMap".into(),
            name: name.into(),
            optional: false,
        }
    }

    #[test]
    fn later_sources_win_and_substitute_wins_over_all() {
        let a: BTreeMap<_, _> = [
            ("SIZE".to_string(), "1Gi".to_string()),
            ("A".into(), "a".into()),
        ]
        .into();
        let b: BTreeMap<_, _> = [("SIZE".to_string(), "2Gi\n".to_string())].into();
        let fetched = vec![
            (reference("a"), Some(a)),
            (reference("gone"), None),
            (reference("b"), Some(b)),
        ];
        let vars = combine_variables(&fetched, &BTreeMap::new()).unwrap();
        assert_eq!(vars["SIZE"], "2Gi");
        assert_eq!(vars["A"], "a");
        let inline: BTreeMap<_, _> = [("SIZE".to_string(), "3Gi".to_string())].into();
        assert_eq!(combine_variables(&fetched, &inline).unwrap()["SIZE"], "3Gi");
    }

    #[test]
    fn variable_names_by_table() {
        for (name, ok) in [
            ("SIZE", true),
            ("_x1", true),
            ("a_B_9", true),
            ("9a", false),
            ("a-b", false),
            ("", false),
            ("a.b", false),
        ] {
            assert_eq!(valid_variable_name(name), ok, "{name}");
        }
        let bad: BTreeMap<_, _> = [("a-b".to_string(), "x".to_string())].into();
        let e = combine_variables(&[], &bad).unwrap_err();
        assert!(e.contains("'a-b' var name is invalid"), "{e}");
    }
}
