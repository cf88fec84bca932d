//! Every replica serves every published artifact: a watch of ExternalArtifacts tells the
//! storage what the cluster says is published ([`Storage::expect`]), and the storage fetches
//! what it lacks, from the upstream source when it still publishes that digest, else from the
//! published URL (another replica). The leader sees its own publishes come back (a no-op); a
//! follower, or a replica restarted on an empty volume, fills its storage from it.
//!
//! Only ExternalArtifacts whose `status.artifact.url` is this storage's URL for its path are
//! followed: others belong to another producer (source-watcher, a second converger).

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::Value;

use super::{Expected, Storage};

/// How often published artifacts that could not be fetched are tried again.
pub const RETRY_LOST: Duration = Duration::from_secs(60);

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "source.toolkit.fluxcd.io".into(),
        version: "v1".into(),
        api_version: "source.toolkit.fluxcd.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// What an ExternalArtifact's status says this storage publishes, if anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Followed {
    pub namespace: String,
    pub name: String,
    pub path: String,
    pub digest: String,
    pub size: u64,
    pub url: String,
    /// `spec.sourceRef`: kind, namespace, name of the upstream.
    pub upstream: Option<(String, String, String)>,
}

/// Reads `obj` (an ExternalArtifact) as far as the storage needs it; `None` unless its
/// artifact is served at `storage.url_of(path)`.
pub fn followed(storage: &Storage, obj: &DynamicObject) -> Option<Followed> {
    let namespace = obj.metadata.namespace.clone()?;
    let name = obj.metadata.name.clone()?;
    let artifact = obj.data.get("status")?.get("artifact")?;
    let text = |v: &Value, field: &str| v.get(field).and_then(Value::as_str).map(str::to_string);
    let path = text(artifact, "path")?;
    let url = text(artifact, "url")?;
    if url != storage.url_of(&path) {
        return None;
    }
    let digest = text(artifact, "digest")?;
    let size = artifact
        .get("size")
        .and_then(Value::as_u64)
        .unwrap_or_default();
    let upstream = obj
        .data
        .get("spec")
        .and_then(|s| s.get("sourceRef"))
        .and_then(|r| {
            let kind = text(r, "kind")?;
            let name = text(r, "name")?;
            let ns = text(r, "namespace").unwrap_or_else(|| namespace.clone());
            Some((kind, ns, name))
        });
    Some(Followed {
        namespace,
        name,
        path,
        digest,
        size,
        url,
        upstream,
    })
}

/// The upstream's artifact URL, when it still publishes `digest`.
async fn upstream_url(client: &Client, followed: &Followed) -> Option<String> {
    let (kind, namespace, name) = followed.upstream.as_ref()?;
    let plural = crate::flux::objects::SourceKind::parse(kind)?.plural();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource(kind, plural));
    let source = tokio::time::timeout(Duration::from_secs(15), api.get(name))
        .await
        .ok()?
        .ok()?;
    let artifact = source.data.get("status")?.get("artifact")?;
    let digest = artifact.get("digest")?.as_str()?;
    if digest != followed.digest {
        return None;
    }
    artifact.get("url")?.as_str().map(str::to_string)
}

/// What to keep for `followed`, with where to fetch it from: the upstream first (while it
/// still publishes the digest), then the published URL (a peer).
async fn expected_of(client: &Client, followed: &Followed) -> Expected {
    let mut urls = Vec::new();
    if let Some(url) = upstream_url(client, followed).await {
        urls.push(url);
    }
    urls.push(followed.url.clone());
    Expected {
        path: followed.path.clone(),
        digest: followed.digest.clone(),
        size: followed.size,
        urls,
    }
}

fn external_artifacts(client: Client) -> Api<DynamicObject> {
    Api::all_with(client, &resource("ExternalArtifact", "externalartifacts"))
}

/// Gives `storage` a lookup of one ExternalArtifact by name, for a request that misses.
pub fn set_lookup(storage: &Arc<Storage>, client: Client) {
    let weak = Arc::downgrade(storage);
    storage.set_lookup(Arc::new(move |namespace: String, name: String| {
        let (weak, client) = (weak.clone(), client.clone());
        Box::pin(async move {
            let storage = weak.upgrade()?;
            let api: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                &namespace,
                &resource("ExternalArtifact", "externalartifacts"),
            );
            let obj = tokio::time::timeout(Duration::from_secs(15), api.get(&name))
                .await
                .ok()?
                .ok()?;
            let followed = followed(&storage, &obj)?;
            Some(expected_of(&client, &followed).await)
        })
    }));
}

async fn keep(storage: Arc<Storage>, client: Client, followed: Followed) {
    let expected = expected_of(&client, &followed).await;
    if let Err(error) = storage
        .expect(&followed.namespace, &followed.name, expected)
        .await
    {
        tracing::warn!(artifact = %format!("{}/{}", followed.namespace, followed.name),
            path = %followed.path, %error, "cannot keep a published artifact; tried again later");
    }
}

/// Garbage-collects the published artifacts every [`super::Retention::sweep_interval`]
/// (besides the collection at each publish), forever.
pub async fn sweep(storage: Arc<Storage>) {
    let mut ticker = tokio::time::interval(storage.retention().sweep_interval());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        if let Err(error) = storage.collect_garbage().await {
            tracing::warn!(%error, "garbage collection of artifacts failed; tried again later");
        }
    }
}

/// Restores what the volume lost, then follows the ExternalArtifacts forever (every replica,
/// leader or not), trying lost artifacts again every [`RETRY_LOST`] and collecting the
/// garbage ([`sweep`]).
pub async fn follow(storage: Arc<Storage>, client: Client) {
    set_lookup(&storage, client.clone());
    storage.restore().await;
    let gc = sweep(storage.clone());
    let retry = {
        let storage = storage.clone();
        async move {
            let mut ticker = tokio::time::interval(RETRY_LOST);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                storage.restore().await;
            }
        }
    };
    let api = external_artifacts(client.clone());
    let watch = async move {
        // The keeps and removals it starts are its own: dropping the follow (the service's
        // shutdown) aborts them, and finished ones are reaped at each event.
        let mut tasks = tokio::task::JoinSet::new();
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut absent_logged = false;
        loop {
            while tasks.try_join_next().is_some() {}
            match stream.try_next().await {
                Ok(Some(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj))) => {
                    if let Some(followed) = followed(&storage, &obj) {
                        tasks.spawn(keep(storage.clone(), client.clone(), followed));
                    }
                }
                // Gone: its artifacts go too, as source-controller's do with their object.
                // (One deleted while no replica watched stays until it is collected by hand.)
                Ok(Some(watcher::Event::Delete(obj))) => {
                    if let Some(gone) = followed(&storage, &obj) {
                        let storage = storage.clone();
                        tasks.spawn(async move {
                            let artifact = format!("{}/{}", gone.namespace, gone.name);
                            match storage.forget(&gone.namespace, &gone.name).await {
                                Ok(paths) if !paths.is_empty() => tracing::info!(%artifact,
                                    count = paths.len(), "garbage collected artifacts for deleted resource"),
                                Ok(_) => {}
                                Err(error) => tracing::warn!(%artifact, %error,
                                    "cannot remove the artifacts of a deleted ExternalArtifact"),
                            }
                        });
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                    if status.code == 404 =>
                {
                    if !absent_logged {
                        tracing::info!("ExternalArtifact CRD not installed; nothing to follow yet");
                        absent_logged = true;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "watching ExternalArtifacts; retrying");
                }
            }
        }
    };
    tokio::select! {
        _ = retry => {}
        _ = watch => {}
        _ = gc => {}
    }
}
