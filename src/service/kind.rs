//! One kind of gated object as the lane runs it: the trait every kind implements, so that a
//! new kind (Argo CD's Application, a test's stand-in) is one implementation and the lane, the
//! queue, `/status` and the records never name a kind.
//!
//! The lane ([`super::lane`]) owns what every kind shares: one queue keyed by [`Key`] (whose
//! kind routes it back here; each kind is given it when it is made, to push into), the workers, the resync, the pauses while this replica does not
//! lead, the drain at shutdown, the hook limit and the composition of `/status`. A kind says
//! what its objects are (its watches and what they push), when one is due, what a run of one
//! does (through the shared [`super::step::ConvergeStep`]), how its controller's answer is read
//! (inside its run), and what `/status` says of it.

use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::flux::event::Event;
use crate::http::backend::NotReady;
use crate::model::body::encode;
use crate::model::{GateOutcome, Key, Kind, RevisionRecord, StatusDetail, StatusRow, Trigger};
use crate::records::results::Results;

/// Whether a key the queue hands out runs now.
#[derive(Clone, Debug, PartialEq)]
pub enum Take {
    /// Run it; `due` says why (logged).
    Run { due: &'static str },
    /// Not due any more (a webhook for a revision already finished, a follow-up made moot by
    /// the run before it): completed at once with this outcome.
    Skip(GateOutcome),
}

/// Which objects of a kind a webhook event names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Route {
    /// The objects, sorted.
    pub keys: Vec<Key>,
    /// The event is the tool reporting the wedge this service exists for: run now, whatever
    /// the backoff of an earlier failure says.
    pub wedged: bool,
}

/// What the lane needs of one kind of gated object.
pub trait GatedKind: Send + Sync + 'static {
    /// Which kind: its spec names it in routes, records, metrics and Events.
    fn kind(&self) -> Kind;

    /// Its objects' revision histories (in ConfigMaps of its own).
    fn results(&self) -> &Results;

    /// The tasks that keep this kind's view of the cluster current (its watches), each pushing
    /// into the lane's queue (given to the kind when it is made) the keys that became due; run
    /// until the service stops.
    fn watches(&self, client: &kube::Client) -> Vec<BoxFuture<'static, ()>>;

    /// Other tasks of the service's life (a tick that closes hand-offs past their timeout).
    fn tasks(&self) -> Vec<BoxFuture<'static, ()>> {
        Vec::new()
    }

    /// The watches that have not listed everything once yet, by resource (`/readyz`).
    fn unsynced(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// What else keeps it from being ready, once its watches are synced and its records read
    /// (a Kustomization in the `artifact` gate without a storage to publish to).
    fn ready(&self) -> Result<(), NotReady> {
        Ok(())
    }

    /// When this replica takes the lead, once its records are read and before anything is
    /// queued: take over what the last leader left open (hand-offs waiting for an answer).
    fn lead(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Queues into the lane's queue the objects due now with `trigger` (the resync, the start
    /// of a leadership), doing at a resync what else is due then (forgetting the records of
    /// objects that are gone); returns how many it queued.
    fn queue_due(&self, trigger: Trigger) -> BoxFuture<'_, usize>;

    /// Whether `key`, handed out by the queue, runs now.
    fn take(&self, key: &Key) -> Take {
        let _ = key;
        Take::Run { due: "queued" }
    }

    /// One run of `key`, as its object is now: decide, converge, hand back, record.
    fn run<'a>(&'a self, key: &'a Key, trigger: Trigger) -> BoxFuture<'a, GateOutcome>;

    /// The object's own wait before a failed run is retried (its controller's retry
    /// interval); `None`: the queue's doubling backoff.
    fn retry_interval(&self, key: &Key) -> Option<Duration> {
        let _ = key;
        None
    }

    /// After a run of `key` ended with `outcome` (`retry_in`: the wait before its retry, when
    /// it failed): what is due now besides (a failed revision whose source has moved on).
    fn finished(&self, key: &Key, outcome: &GateOutcome, retry_in: Option<Duration>) -> Vec<Key> {
        let _ = (key, outcome, retry_in);
        Vec::new()
    }

    /// The objects of this kind a notification event (already authenticated) names.
    fn hook(&self, event: &Event) -> Route {
        let _ = event;
        Route::default()
    }

    /// Whether `key` is one of its objects that opts in (a wake-up that names it directly).
    fn handles(&self, key: &Key) -> bool;

    /// Its `/status` rows (of `namespace`, or all), sorted by namespace then name.
    fn rows(&self, namespace: Option<&str>) -> Vec<StatusRow>;

    /// One handled object with its history; `None` when it is not handled.
    fn detail(&self, namespace: &str, name: &str) -> Option<StatusDetail>;

    /// [`GatedKind::rows`] as one encoded JSON array. Default: encodes on every call; a kind
    /// with thousands of objects keeps its rows encoded.
    fn rows_json(&self, namespace: Option<&str>) -> Result<Bytes, serde_json::Error> {
        let rows = self
            .rows(namespace)
            .iter()
            .map(encode)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Bytes::from(crate::model::body::array(
            rows.iter().map(|r| &r[..]),
        )))
    }

    /// [`GatedKind::detail`] encoded. Default: encodes on every call.
    fn detail_json(&self, namespace: &str, name: &str) -> Option<Result<Bytes, serde_json::Error>> {
        self.detail(namespace, name).map(|d| encode(&d))
    }

    /// The newest record of a handled object (the dashboard's rows); `None` when not handled.
    fn last_record(&self, namespace: &str, name: &str) -> Option<RevisionRecord>;

    /// A number that moves whenever anything its rows or records say may have changed (the
    /// dashboard renders a page once per change).
    fn version(&self) -> u64;
}

/// Queues every key of `keys` (the opted-in objects of a kind its watch holds) with
/// `trigger`; says so once when this replica starts leading. What a reactive kind's
/// [`GatedKind::queue_due`] does: its run decides whether there is anything to do.
pub fn queue_all(
    queue: &crate::service::queue::Queue<Key>,
    kind: Kind,
    keys: Vec<Key>,
    trigger: Trigger,
) -> usize {
    let queued = keys.len();
    for key in keys {
        queue.push(key, trigger);
    }
    if trigger == Trigger::Startup {
        tracing::info!(%kind, queued, "leading: queued");
    }
    queued
}
