//! The watches a claim is followed by while it grows (issue #40): the claims of one
//! StatefulSet (its namespace, its selector's `matchLabels`, which the StatefulSet controller
//! puts on every claim it creates) and the core/v1 Events about claims in that namespace (what
//! the external-resizer records; before 1.32 they are the only word of a failure). Watches,
//! never polling: while nothing is followed nothing is open, and while something is, the server
//! pushes each change.
//!
//! The updates are raw; `volume::follow::Tracker` turns them into states.

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::volume::ResizeEvent;

/// What the watches delivered.
#[derive(Clone, Debug)]
pub enum Update {
    /// A claim as it is now (listed, added or modified).
    Claim(Box<PersistentVolumeClaim>),
    /// A claim deleted.
    Gone(String),
    /// An Event about the claim named.
    Event(String, ResizeEvent),
    /// A watch failed (it retries with backoff): why, for the log.
    Trouble(String),
}

/// The label selector of the claims of `sts`: its `spec.selector.matchLabels`, as
/// `k=v,k2=v2` (`None` without any: then every claim of the namespace, by name).
pub fn claim_selector(sts: &StatefulSet) -> Option<String> {
    let labels = sts.spec.as_ref()?.selector.match_labels.as_ref()?;
    if labels.is_empty() {
        return None;
    }
    Some(
        labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// The field selector of the Events about claims.
pub const CLAIM_EVENTS: &str = "involvedObject.kind=PersistentVolumeClaim";

/// The Event as the classification reads it: its reason, message and newest time.
pub fn resize_event(event: &Event) -> Option<(String, ResizeEvent)> {
    let claim = event.involved_object.name.clone()?;
    let at = event
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))?;
    Some((
        claim,
        ResizeEvent {
            reason: event.reason.clone().unwrap_or_default(),
            message: event.message.clone().unwrap_or_default(),
            at,
        },
    ))
}

/// Watches the claims of `namespace` matching `selector` and the Events about claims there,
/// until dropped. Each watch lists first (every claim and Event as they are), then follows;
/// a failure is reported and retried with kube's default backoff.
pub fn watch(
    client: Client,
    namespace: &str,
    selector: Option<&str>,
) -> impl Stream<Item = Update> + Send + 'static {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let mut config = watcher::Config::default();
    if let Some(selector) = selector {
        config = config.labels(selector);
    }
    let claim_updates = watcher(claims, config).default_backoff().flat_map(|event| {
        futures::stream::iter(match event {
            Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => {
                vec![Update::Claim(Box::new(c))]
            }
            Ok(watcher::Event::Delete(c)) => {
                vec![Update::Gone(c.metadata.name.unwrap_or_default())]
            }
            Ok(_) => vec![],
            Err(e) => vec![Update::Trouble(format!("watching claims: {e}"))],
        })
    });
    let events: Api<Event> = Api::namespaced(client, namespace);
    let event_updates = watcher(events, watcher::Config::default().fields(CLAIM_EVENTS))
        .default_backoff()
        .flat_map(|event| {
            futures::stream::iter(match event {
                Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => resize_event(&e)
                    .map(|(claim, e)| Update::Event(claim, e))
                    .into_iter()
                    .collect(),
                Ok(_) => vec![],
                Err(e) => vec![Update::Trouble(format!("watching claim Events: {e}"))],
            })
        });
    futures::stream::select(claim_updates, event_updates)
}
