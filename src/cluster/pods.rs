//! What restarting a StatefulSet's pods for a file system resize reads and sends (issue #38,
//! opted in per StatefulSet with `flux-converger.io/restart-for-resize: "true"`): a watch of
//! the StatefulSet (its annotation, replicas and revisions) and of its pods (by its namespace
//! and selector), open only while one of its claims waits for a restart, and the one write
//! ever made about a pod: a `policy/v1` Eviction (`create` on `pods/eviction`), which the API
//! server admits only within the pod's PodDisruptionBudget and carries out itself. Nothing else
//! about a pod is ever written.

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use super::{CallError, with_deadline};
use crate::volume::restart::{PodView, SetView, opted_in};

/// What the watches delivered.
#[derive(Clone, Debug)]
pub enum Update {
    /// The StatefulSet as it is now.
    Set(Box<StatefulSet>),
    /// The StatefulSet deleted.
    SetGone,
    /// A pod as it is now (listed, added or modified).
    Pod(Box<Pod>),
    /// A pod deleted (its name).
    PodGone(String),
    /// A watch listed everything there was (`true`: the pods' watch).
    Listed { pods: bool },
    /// A watch failed (it retries with backoff): why, for the log.
    Trouble(String),
}

/// The field selector of one StatefulSet by name.
fn by_name(name: &str) -> String {
    format!("metadata.name={name}")
}

/// Watches StatefulSet `namespace/name` and its pods (`selector`, its `matchLabels`; every pod
/// of the namespace without one), until dropped. Each lists first, then follows; a failure is
/// reported and retried with kube's default backoff.
pub fn watch(
    client: Client,
    namespace: &str,
    name: &str,
    selector: Option<&str>,
) -> impl Stream<Item = Update> + Send + 'static {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let set_updates = watcher(sets, watcher::Config::default().fields(&by_name(name)))
        .default_backoff()
        .flat_map(|event| {
            futures::stream::iter(match event {
                Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                    vec![Update::Set(Box::new(s))]
                }
                Ok(watcher::Event::Delete(_)) => vec![Update::SetGone],
                Ok(watcher::Event::InitDone) => vec![Update::Listed { pods: false }],
                Ok(watcher::Event::Init) => vec![],
                Err(e) => vec![Update::Trouble(format!("watching the StatefulSet: {e}"))],
            })
        });
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let mut config = watcher::Config::default();
    if let Some(selector) = selector {
        config = config.labels(selector);
    }
    let pod_updates = watcher(pods, config).default_backoff().flat_map(|event| {
        futures::stream::iter(match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                vec![Update::Pod(Box::new(p))]
            }
            Ok(watcher::Event::Delete(p)) => {
                vec![Update::PodGone(p.metadata.name.unwrap_or_default())]
            }
            Ok(watcher::Event::InitDone) => vec![Update::Listed { pods: true }],
            Ok(watcher::Event::Init) => vec![],
            Err(e) => vec![Update::Trouble(format!("watching the pods: {e}"))],
        })
    });
    futures::stream::select(set_updates, pod_updates)
}

/// Running with its `Ready` condition `True` (`podutil.IsPodReady`).
pub fn is_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod as the restart decides on it.
pub fn pod_view(pod: &Pod) -> PodView {
    PodView {
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        ready: is_ready(pod),
        deleting: pod.metadata.deletion_timestamp.is_some(),
    }
}

/// The StatefulSet and its pods as the restart decides on them.
pub fn set_view<'a>(set: &StatefulSet, pods: impl IntoIterator<Item = &'a Pod>) -> SetView {
    let spec = set.spec.as_ref();
    let status = set.status.as_ref();
    SetView {
        opted_in: opted_in(set.metadata.annotations.as_ref()),
        replicas: i64::from(spec.and_then(|s| s.replicas).unwrap_or(1)),
        start: i64::from(
            spec.and_then(|s| s.ordinals.as_ref())
                .and_then(|o| o.start)
                .unwrap_or(0),
        ),
        current_revision: status.and_then(|s| s.current_revision.clone()),
        update_revision: status.and_then(|s| s.update_revision.clone()),
        pods: pods.into_iter().map(pod_view).collect(),
    }
}

/// The StatefulSet `namespace/name` and its pods (`selector`) as the server has them now: what an
/// eviction decided on watched copies is confirmed against right before it is sent. `None`
/// when the StatefulSet is gone.
pub async fn read(
    client: &Client,
    namespace: &str,
    name: &str,
    selector: Option<&str>,
    deadline: std::time::Duration,
) -> Result<Option<(StatefulSet, Vec<Pod>)>, CallError> {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let Some(set) = with_deadline(
        deadline,
        "get",
        &super::sts_object(namespace, name),
        sets.get_opt(name),
    )
    .await?
    else {
        return Ok(None);
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut params = kube::api::ListParams::default();
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    let listed = with_deadline(
        deadline,
        "list",
        &format!("Pods of StatefulSet {namespace}/{name}"),
        pods.list(&params),
    )
    .await?;
    Ok(Some((set, listed.items)))
}

/// POSTs a `policy/v1` Eviction of pod `namespace/name`, only if the pod is still the one
/// under `uid` (`deleteOptions.preconditions.uid`): a 409 otherwise (its successor is never
/// evicted in its place), a 429 while a PodDisruptionBudget allows no disruption (to be
/// retried, never worked around), 404 when it is gone.
pub async fn evict(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
    deadline: std::time::Duration,
) -> Result<(), CallError> {
    let body = serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": {"preconditions": {"uid": uid}},
    });
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(body.to_string().into_bytes())
    .map_err(|e| {
        CallError::new(
            "create eviction of",
            format!("Pod {namespace}/{name}"),
            super::CallErrorKind::Other {
                message: e.to_string(),
            },
        )
    })?;
    with_deadline(
        deadline,
        "create eviction of",
        &format!("Pod {namespace}/{name}"),
        client.request::<serde_json::Value>(request),
    )
    .await
    .map(|_| ())
}
