//! `flux-converger render --release-secret FILE | --helm-release [NS/]NAME`: the objects of a Helm
//! release's newest record, as the converger would re-create them (Helm's ownership metadata
//! added, StatefulSets in the release namespace), ready for `plan -f -` or `converge -f -`.
//!
//! Offline, the file is what `kubectl get secret -o yaml` prints (one Secret, several, or a
//! `List`); from the cluster, the HelmRelease names the release and its storage namespace, and
//! the Secrets `owner=helm,name=<release>` there are Helm's records. Either way only the newest
//! record (the highest version) is decoded, under `--max-unpacked-size`; nothing is written.

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use flux_converger::cluster::with_deadline;
use flux_converger::helm::act::{Act, when_to_act};
use flux_converger::helm::helmrelease::HelmRelease;
use flux_converger::helm::release::{self, NAME_LABEL, OWNER_LABEL, ReleaseRecord};
use flux_converger::helm::{self as helm};
use flux_converger::manifest::read_documents;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;

use crate::cmd::{Exit, KubeArgs, bad_input};

/// Each API call's deadline.
const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// Which release to read.
pub enum Input<'a> {
    /// A file of release Secrets.
    ReleaseSecret(&'a Path),
    /// `[NS/]NAME` of a HelmRelease in the cluster.
    HelmRelease(&'a str),
}

/// Prints the newest record's objects (or only its StatefulSets) as a YAML stream.
pub async fn run(
    input: Input<'_>,
    statefulsets: bool,
    max_decoded_bytes: u64,
    kube: &KubeArgs,
) -> anyhow::Result<Exit> {
    let (record, release_namespace, source) = match input {
        Input::ReleaseSecret(path) => offline(path, max_decoded_bytes, kube)?,
        Input::HelmRelease(reference) => cluster(reference, max_decoded_bytes, kube).await?,
    };
    let objects = if statefulsets {
        helm::manifest::statefulsets(&record, &release_namespace, &source)
    } else {
        helm::manifest::objects(&record, &release_namespace, &source)
    }
    .map_err(bad_input)?;
    let text = flux_converger::flux::render::to_yaml_stream(objects.iter())?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .context("writing the render to stdout")?;
    stdout.flush().context("writing the render to stdout")?;
    Ok(Exit::Done)
}

/// The newest record in the file, its release namespace (the record's, else `-n`) and how
/// errors name it.
fn offline(
    path: &Path,
    max_decoded_bytes: u64,
    kube: &KubeArgs,
) -> anyhow::Result<(ReleaseRecord, String, String)> {
    let shown = path.display().to_string();
    let docs = read_documents(&shown).map_err(bad_input)?;
    let mut secrets = Vec::new();
    for doc in docs {
        if doc.object.get("kind").and_then(Value::as_str) != Some("Secret") {
            continue;
        }
        let secret: Secret = serde_json::from_value(doc.object).map_err(|e| {
            bad_input(anyhow::anyhow!(
                "{shown} document {}: invalid Secret: {e}",
                doc.index
            ))
        })?;
        secrets.push(secret);
    }
    let releases: std::collections::BTreeSet<&str> = secrets
        .iter()
        .filter_map(|s| release::parse_secret_name(s.metadata.name.as_deref()?))
        .map(|(name, _)| name)
        .collect();
    if releases.len() > 1 {
        return Err(bad_input(anyhow::anyhow!(
            "{shown}: holds the records of releases {releases:?}: give the records of one release"
        )));
    }
    // No Secret named like a record: decoding the first says what is wrong with it.
    let secret = release::newest(&secrets, None)
        .or(secrets.first())
        .ok_or_else(|| bad_input(anyhow::anyhow!("{shown}: no Secret in the file")))?;
    let record = release::decode_secret(secret, max_decoded_bytes)
        .map_err(|e| bad_input(anyhow::anyhow!("{shown}: {e}")))?;
    let namespace = if record.namespace.is_empty() {
        kube.offline_namespace()
    } else {
        record.namespace.clone()
    };
    let source = format!("{shown}: Secret {}", release::describe_secret(secret));
    Ok((record, namespace, source))
}

/// The HelmRelease, then the newest of its release's records in the storage namespace.
async fn cluster(
    reference: &str,
    max_decoded_bytes: u64,
    kube: &KubeArgs,
) -> anyhow::Result<(ReleaseRecord, String, String)> {
    let (client, namespace, name) =
        super::cluster_reference("--helm-release", reference, kube).await?;
    let shown = format!("HelmRelease {namespace}/{name}");
    let hr: HelmRelease = with_deadline(
        CALL_DEADLINE,
        "get",
        &shown,
        Api::<HelmRelease>::namespaced(client.clone(), &namespace).get(name),
    )
    .await?;
    let release = hr.release_name();
    let storage = hr.storage_namespace().to_owned();
    let selector = format!("{}={},{NAME_LABEL}={release}", OWNER_LABEL.0, OWNER_LABEL.1);
    let listed = with_deadline(
        CALL_DEADLINE,
        "list",
        &format!("Secrets {selector} in namespace {storage}"),
        Api::<Secret>::namespaced(client, &storage).list(&ListParams::default().labels(&selector)),
    )
    .await?;
    let secret = release::newest(&listed.items, Some(&release)).ok_or_else(|| {
        anyhow::anyhow!(
            "{shown}: no release record of release {release:?} in namespace {storage} (Secrets {selector})"
        )
    })?;
    let record = release::decode_secret(secret, max_decoded_bytes)
        .map_err(|e| bad_input(anyhow::anyhow!("{shown}: {e}")))?;
    // What the service would decide, for the operator (stderr; stdout stays the render).
    match when_to_act(&hr, Some(&record.summary())) {
        Act::Converge { version } => tracing::info!(
            helmrelease = %format!("{namespace}/{name}"),
            "release record v{version} is a failed upgrade helm-controller gave up on: the service would converge it"
        ),
        Act::Wait(why) => tracing::info!(
            helmrelease = %format!("{namespace}/{name}"),
            "the service would not act now: {why}"
        ),
    }
    let source = format!("{shown}: Secret {}", release::describe_secret(secret));
    Ok((record, hr.release_namespace().to_owned(), source))
}
