//! `flux-converger render`: print the objects kustomize-controller would apply for a revision.
//!
//! Cluster mode reads the Kustomization, its source and its `substituteFrom` objects through the
//! current kube context. Offline mode takes the tree (`--path`) or the artifact (`--artifact`),
//! the Kustomization object (`--kustomization-file`) and the variables its `substituteFrom`
//! would bring (`--vars`).
//!
//! For a HelmRelease, `--helm-release` (cluster) and `--release-secret` (offline) print the
//! objects of Helm's newest release record instead ([`helm`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use flux_converger::flux::artifact::{self, FetchOptions, Fetcher};
use flux_converger::flux::objects::Kustomization;
use flux_converger::flux::render::resolve::Resolver;
use flux_converger::flux::render::{self, KustomizeCommand, Owner, RenderRequest, Rendered};
use flux_converger::flux::substitute::{VarSource, VarSourceKind, collect_variables};
use flux_converger::manifest::read_documents;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use super::artifact_limits::ArtifactLimitArgs;
use super::{Exit, KubeArgs, bad_input};

mod helm;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["kustomization", "path", "artifact", "helm_release", "release_secret"])))]
pub struct Args {
    /// The Kustomization to render from the cluster, as NAMESPACE/NAME, or NAME in `-n`
    /// (default: the context's namespace).
    #[arg(long, value_name = "[NS/]NAME")]
    kustomization: Option<String>,
    /// Offline: the artifact root as a local directory.
    #[arg(long, value_name = "DIR", requires = "kustomization_file")]
    path: Option<PathBuf>,
    /// Offline: the artifact as a local .tar.gz (Flux's archive layout).
    #[arg(
        long,
        value_name = "FILE.tar.gz",
        requires = "kustomization_file",
        conflicts_with = "path"
    )]
    artifact: Option<PathBuf>,
    /// Offline: the Kustomization object (YAML) whose spec shapes the render.
    #[arg(long, value_name = "FILE", conflicts_with = "kustomization")]
    kustomization_file: Option<PathBuf>,
    /// Offline: variables its substituteFrom would bring: a YAML mapping NAME: value, or ConfigMap/Secret objects.
    #[arg(long, value_name = "FILE", conflicts_with = "kustomization")]
    vars: Option<PathBuf>,
    /// A HelmRelease's newest Helm release record, from the cluster, as NAMESPACE/NAME, or NAME
    /// in `-n`: its objects with Helm's ownership metadata.
    #[arg(long, value_name = "[NS/]NAME", conflicts_with_all = ["kustomization_file", "vars"])]
    helm_release: Option<String>,
    /// Offline: Helm release Secrets as `kubectl get secret -o yaml` prints them; the newest
    /// record's objects with Helm's ownership metadata.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["kustomization_file", "vars"])]
    release_secret: Option<PathBuf>,
    /// Print only the StatefulSets.
    #[arg(long)]
    statefulsets: bool,
    /// The kustomize build command; the directory is appended.
    #[arg(long, value_name = "CMD", env = "FLUX_CONVERGER_KUSTOMIZE", default_value = render::DEFAULT_KUSTOMIZE)]
    kustomize: String,
    /// Strict post-build substitution (Flux's default): an unset variable without default fails.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    strict_substitution: bool,
    /// Refuse a sourceRef in another namespace, like kustomize-controller's flag of that name
    /// (bare, `=true` or `=false`, as pflag takes it).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    no_cross_namespace_refs: bool,
    /// Retries of an artifact download on connection errors and 5xx (`serve` makes one
    /// attempt and retries through its queue).
    #[arg(long, value_name = "N", default_value_t = 4)]
    fetch_retries: u32,
    #[command(flatten)]
    build: super::build_limits::BuildLimitArgs,
    // Last: its help heading covers only its own flags.
    #[command(flatten)]
    limits: ArtifactLimitArgs,
}

pub async fn run(args: Args, kube: KubeArgs) -> anyhow::Result<Exit> {
    let helm = match (&args.release_secret, &args.helm_release) {
        (Some(file), _) => Some(helm::Input::ReleaseSecret(file)),
        (None, Some(reference)) => Some(helm::Input::HelmRelease(reference)),
        (None, None) => None,
    };
    if let Some(input) = helm {
        let max = args.limits.max_unpacked_size;
        return helm::run(input, args.statefulsets, max, &kube).await;
    }
    let kustomize = KustomizeCommand::parse(&args.kustomize).map_err(bad_input)?;
    let kustomize = args
        .build
        .apply(kustomize, args.limits.max_unpacked_size)
        .map_err(|e| bad_input(anyhow::anyhow!(e)))?;
    let options = FetchOptions {
        retries: args.fetch_retries,
        ..args.limits.fetch_options()
    }
    .with_env_host_override();
    let rendered = match &args.kustomization {
        Some(reference) => render_cluster(reference, &args, &kube, kustomize, options).await?,
        None => render_offline(&args, &kube, &kustomize, options).await?,
    };
    let text = if args.statefulsets {
        render::to_yaml_stream(rendered.statefulsets.iter().map(|s| &s.object))
    } else {
        render::to_yaml_stream(&rendered.objects)
    }?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .context("writing the render to stdout")?;
    stdout.flush().context("writing the render to stdout")?;
    Ok(Exit::Done)
}

/// The client, namespace and name `flag`'s `[NS/]NAME` names: without `NS/`, in `-n` or the
/// context's namespace; `NS/` and a different `-n` is bad input (checked before any client).
async fn cluster_reference<'a>(
    flag: &str,
    reference: &'a str,
    kube: &KubeArgs,
) -> anyhow::Result<(kube::Client, String, &'a str)> {
    let (namespace, name) = split_reference(reference).ok_or_else(|| {
        bad_input(anyhow::anyhow!(
            "{flag} {reference:?}: expected NAMESPACE/NAME or NAME"
        ))
    })?;
    if let (Some(ns), Some(given)) = (namespace, kube.namespace.as_deref())
        && ns != given
    {
        return Err(bad_input(anyhow::anyhow!(
            "{flag} {reference:?} names namespace {ns:?}, but --namespace is {given:?}"
        )));
    }
    let client = kube.client().await?;
    let namespace = namespace
        .or(kube.namespace.as_deref())
        .unwrap_or(client.default_namespace())
        .to_owned();
    Ok((client, namespace, name))
}

/// `NS/NAME` or `NAME`: the namespace part, if any, and the name; `None` when malformed.
fn split_reference(reference: &str) -> Option<(Option<&str>, &str)> {
    match reference.split_once('/') {
        None if !reference.is_empty() => Some((None, reference)),
        Some((ns, n)) if !ns.is_empty() && !n.is_empty() && !n.contains('/') => Some((Some(ns), n)),
        _ => None,
    }
}

async fn render_cluster(
    reference: &str,
    args: &Args,
    kube: &KubeArgs,
    kustomize: KustomizeCommand,
    options: FetchOptions,
) -> anyhow::Result<Rendered> {
    let (client, namespace, name) = cluster_reference("--kustomization", reference, kube).await?;
    let resolver = Resolver {
        client,
        fetcher: Fetcher::new(options)?,
        kustomize,
        strict: args.strict_substitution,
        allow_cross_namespace: !args.no_cross_namespace_refs,
    };
    match resolver.resolve(&namespace, name).await {
        Ok(resolved) => Ok(resolved.rendered),
        Err(e) if e.is_bad_input() => Err(bad_input(e)),
        Err(e) => Err(e.into()),
    }
}

async fn render_offline(
    args: &Args,
    kube: &KubeArgs,
    kustomize: &KustomizeCommand,
    options: FetchOptions,
) -> anyhow::Result<Rendered> {
    let file = args.kustomization_file.as_ref().ok_or_else(|| {
        bad_input(anyhow::anyhow!(
            "--kustomization-file is required with --path or --artifact"
        ))
    })?;
    let kustomization = read_kustomization(file).map_err(bad_input)?;
    let namespace = kustomization
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| kube.offline_namespace());
    let name = kustomization.metadata.name.clone().unwrap_or_default();
    let fetched = match &args.vars {
        Some(path) => read_vars(path).map_err(bad_input)?,
        None => Vec::new(),
    };
    let inline = kustomization
        .spec
        .post_build
        .as_ref()
        .map(|p| p.substitute.clone())
        .unwrap_or_default();
    // Its errors on stderr are masked of the Secrets' values, as the service's texts are.
    flux_converger::redact::registry().set(
        &namespace,
        &name,
        flux_converger::flux::render::resolve::secret_values(&fetched),
    );
    let variables = collect_variables(&fetched, Some(&inline))
        .map_err(|e| bad_input(anyhow::anyhow!("Kustomization {namespace}/{name}: {e}")))?;

    // Keep the scratch tree alive until the render is done.
    let scratch = if let Some(archive) = &args.artifact {
        let unpacked = artifact::unpack_file(archive, options.unpack.clone())
            .await
            .map_err(|e| {
                if e.is_bad_input() {
                    bad_input(e)
                } else {
                    e.into()
                }
            })?;
        Scratch::Artifact(unpacked)
    } else {
        let source = args
            .path
            .as_ref()
            .ok_or_else(|| bad_input(anyhow::anyhow!("--path or --artifact is required")))?;
        if !source.is_dir() {
            return Err(bad_input(anyhow::anyhow!(
                "--path {}: not a directory",
                source.display()
            )));
        }
        let dir = tempfile::Builder::new()
            .prefix("flux-converger-render-")
            .tempdir()
            .context("creating a temporary directory")?;
        render::copy_tree_within(source, dir.path(), &options.unpack).map_err(|e| {
            if e.is_bad_input() {
                bad_input(e)
            } else {
                e.into()
            }
        })?;
        Scratch::Dir(dir)
    };
    let owner = Owner {
        name: &name,
        namespace: &namespace,
        spec: &kustomization.spec,
    };
    render::render(&RenderRequest {
        root: scratch.root(),
        owner,
        variables: &variables,
        strict: args.strict_substitution,
        kustomize,
    })
    .await
    .map_err(|e| {
        let wrapped = anyhow::Error::new(e).context(format!("Kustomization {namespace}/{name}"));
        if wrapped
            .downcast_ref::<render::RenderError>()
            .is_some_and(|e| e.is_bad_input())
        {
            bad_input(wrapped)
        } else {
            wrapped
        }
    })
}

/// Holds whichever temporary root the offline render uses; dropping it removes the tree.
enum Scratch {
    Artifact(artifact::UnpackedArtifact),
    Dir(tempfile::TempDir),
}

impl Scratch {
    fn root(&self) -> &Path {
        match self {
            Self::Artifact(a) => a.root(),
            Self::Dir(d) => d.path(),
        }
    }
}

fn read_kustomization(path: &Path) -> anyhow::Result<Kustomization> {
    let shown = path.display().to_string();
    let doc = read_documents(&shown)?
        .into_iter()
        .find(|d| {
            d.object.get("kind").and_then(|k| k.as_str()) == Some("Kustomization")
                && d.object
                    .get("apiVersion")
                    .and_then(|v| v.as_str())
                    .is_some_and(|v| v.starts_with("kustomize.toolkit.fluxcd.io/"))
        })
        .ok_or_else(|| {
            anyhow::anyhow!("{shown}: no kustomize.toolkit.fluxcd.io Kustomization in the file")
        })?;
    serde_json::from_value(doc.object)
        .map_err(|e| anyhow::anyhow!("{shown} document {}: invalid Kustomization: {e}", doc.index))
}

/// `--vars`: what the Kustomization's `substituteFrom` would bring, in order: ConfigMap and
/// Secret objects, or a plain mapping `NAME: value` (counted as one ConfigMap named after the file).
fn read_vars(path: &Path) -> anyhow::Result<Vec<VarSource>> {
    let shown = path.display().to_string();
    let docs = read_documents(&shown)?;
    let mut out = Vec::new();
    for doc in docs {
        let at = format!("{shown} document {}", doc.index);
        let source = match doc.object.get("kind").and_then(|k| k.as_str()) {
            Some("ConfigMap") => {
                let cm: ConfigMap = serde_json::from_value(doc.object)
                    .with_context(|| format!("{at}: invalid ConfigMap"))?;
                VarSource::from_config_map(
                    &cm.metadata.name.clone().unwrap_or_default(),
                    false,
                    Some(&cm),
                )
            }
            Some("Secret") => {
                let secret: Secret = serde_json::from_value(doc.object)
                    .with_context(|| format!("{at}: invalid Secret"))?;
                VarSource::from_secret(
                    &secret.metadata.name.clone().unwrap_or_default(),
                    false,
                    Some(&secret),
                )
            }
            _ => VarSource {
                kind: VarSourceKind::ConfigMap,
                name: shown.clone(),
                optional: false,
                data: Some(scalars(&doc.object, &at)?),
            },
        };
        out.push(source);
    }
    Ok(out)
}

fn scalars(value: &serde_json::Value, at: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let map = value
        .as_object()
        .ok_or_else(|| anyhow::anyhow!("{at}: expected a mapping of NAME: value"))?;
    let mut out = BTreeMap::new();
    for (k, v) in map {
        let text = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Bool(b) => b.to_string(),
            _ => anyhow::bail!("{at}: value of {k:?} is not a scalar"),
        };
        out.insert(k.clone(), text);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::split_reference;

    #[test]
    fn kustomization_references_by_table() {
        for (text, expected) in [
            ("flux-system/apps", Some((Some("flux-system"), "apps"))),
            ("apps", Some((None, "apps"))),
            ("", None),
            ("/apps", None),
            ("ns/", None),
            ("a/b/c", None),
        ] {
            assert_eq!(split_reference(text), expected, "{text:?}");
        }
    }
}
