//! What the HTTP side needs from the service, and nothing more: the handlers never see a
//! `kube::Client`, the gate or the queue, so every route is tested with a stand-in backend.
//! Every kind of gated object is asked for the same way, by its [`Kind`]: the routes, the
//! `/status` body and the dashboard name no kind of their own.

use bytes::Bytes;

use crate::flux::event::Event;
use crate::model::body::{array, encode, object};
use crate::model::{Key, Kind, RevisionRecord, StatusDetail, StatusRow};

/// Why a replica is not ready (`/readyz` answers 503 with it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The access check has not answered yet.
    #[error("access not checked yet")]
    AccessNotChecked,
    /// The service lacks permissions it needs (by name).
    #[error("missing permissions: {}", .0.join(", "))]
    MissingPermissions(Vec<String>),
    /// Watches that have not listed everything once (by resource).
    #[error("caches not synced: {}", .0.join(", "))]
    NotSynced(Vec<&'static str>),
    /// A kind's records have not been read yet.
    #[error("results not read yet")]
    ResultsNotRead,
    /// The access check answered before the Kustomizations were listed, so it may lack
    /// `impersonate`.
    #[error("access not checked for the Kustomizations' service accounts yet")]
    AccessNotFinal,
    /// Kustomizations use the `artifact` gate and there is no storage to publish to.
    #[error("no artifact storage ({why}) and {count} Kustomization(s) use the artifact gate")]
    NoStorage { why: String, count: usize },
    /// Any other reason a backend gives (a test's stand-in).
    #[error("{0}")]
    Other(String),
}

pub trait Backend: Send + Sync + 'static {
    /// Queues the handled objects this (already authenticated, parsed) event names and returns
    /// them (`namespace/name` of a Kustomization, `Kind/namespace/name` of another kind),
    /// sorted. Never blocks on cluster I/O.
    fn hook(&self, event: &Event) -> Vec<String>;
    /// Queues the handled object a wake-up names by itself (it is re-read by its run);
    /// whether it is handled. Default: none is.
    fn wake(&self, key: Key) -> bool {
        let _ = key;
        false
    }
    /// The kinds the service gates, in the order `GET /status` lists them. Default: the
    /// Kustomizations and the HelmReleases.
    fn kinds(&self) -> Vec<Kind> {
        vec![Kind::KUSTOMIZATION, Kind::HELM_RELEASE]
    }
    /// Every handled object of `kind` (optionally of one namespace), sorted by namespace then
    /// name.
    fn rows(&self, kind: Kind, namespace: Option<&str>) -> Vec<StatusRow>;
    /// One handled object of `kind` with its history; `None` when it is not handled.
    fn detail(&self, kind: Kind, namespace: &str, name: &str) -> Option<StatusDetail>;
    /// `Ok` once the caches are synced and the results are readable; otherwise why not.
    fn ready(&self) -> Result<(), NotReady>;
    /// A number that changes whenever anything [`Backend::rows`] or [`Backend::last_record`]
    /// answer may have changed (a record, a gate, a source revision, the handled set), so the
    /// dashboard renders a page once per change instead of once per request. Read it before
    /// the data it guards: a change after the read leaves a page built under an already old
    /// number, rebuilt at the next request. `None` (the default): not tracked, every request
    /// renders afresh (the answers stay correct, only slower).
    fn version(&self) -> Option<u64> {
        None
    }
    /// The newest record with its StatefulSets: the dashboard's rows show a refusal's code,
    /// which only the StatefulSet entries carry. Default: from the detail; a backend holding the
    /// results answers without copying the whole history.
    fn last_record(&self, kind: Kind, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.detail(kind, namespace, name)
            .and_then(|detail| detail.revisions.into_iter().next())
    }
    /// [`Backend::rows`] as one encoded JSON array. Default: encodes on every call; the
    /// service keeps its rows encoded.
    fn rows_json(&self, kind: Kind, namespace: Option<&str>) -> Result<Bytes, serde_json::Error> {
        let mut rows = self.rows(kind, namespace);
        // The order is part of the API; do not rely on every backend to keep it.
        rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        rows.retain(|r| namespace.is_none_or(|ns| r.namespace == ns));
        let rows = rows.iter().map(encode).collect::<Result<Vec<_>, _>>()?;
        Ok(Bytes::from(array(rows.iter().map(|r| &r[..]))))
    }
    /// The `GET /status/{ns}/{name}` (a Kustomization) or `GET /status/{plural}/{ns}/{name}`
    /// body; `None` when not handled. Default: encodes [`Backend::detail`] on every call.
    fn detail_json(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Option<Result<Bytes, serde_json::Error>> {
        self.detail(kind, namespace, name).map(|d| encode(&d))
    }
    /// What `GET /status` says after the kinds' rows, as `(field, encoded value)`: the intents
    /// the resume left in the journal (`refusedIntents`). Default: nothing.
    fn status_extra(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<(&'static str, Vec<u8>)>, serde_json::Error> {
        let _ = namespace;
        Ok(Vec::new())
    }
    /// The `GET /status` body: each kind's rows under its field (`kustomizations`,
    /// `helmReleases`, ...), in [`Backend::kinds`] order, then [`Backend::status_extra`].
    fn status_json(&self, namespace: Option<&str>) -> Result<Bytes, serde_json::Error> {
        let mut fields: Vec<(&'static str, Bytes)> = Vec::new();
        for kind in self.kinds() {
            fields.push((kind.spec().status_field, self.rows_json(kind, namespace)?));
        }
        for (name, value) in self.status_extra(namespace)? {
            fields.push((name, Bytes::from(value)));
        }
        Ok(object(fields.iter().map(|(n, v)| (*n, &v[..]))))
    }
    /// Every handled object of every kind (optionally of one namespace): the dashboard's rows,
    /// told apart by their `kind`.
    fn gated(&self, namespace: Option<&str>) -> Vec<StatusRow> {
        self.kinds()
            .into_iter()
            .flat_map(|kind| self.rows(kind, namespace))
            .collect()
    }
    /// The kind whose resource is `plural` (`/status/{plural}/...`, `/{plural}/...`).
    fn kind_of(&self, plural: &str) -> Option<Kind> {
        self.kinds().into_iter().find(|k| k.plural() == plural)
    }
}
