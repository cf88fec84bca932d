//! What the HTTP side needs from the service, and nothing more: the handlers never see a
//! `kube::Client`, the gate or the queue, so every route is tested with a stand-in backend.

use bytes::Bytes;

use crate::flux::event::Event;
use crate::model::body::{append_field, array, encode, list_body};
use crate::model::{RevisionRecord, StatusDetail, StatusRow};

pub trait Backend: Send + Sync + 'static {
    /// Queues the handled Kustomizations this (already authenticated, parsed) event names and
    /// returns them as `namespace/name`, sorted. Never blocks on cluster I/O.
    fn hook(&self, event: &Event) -> Vec<String>;
    /// Every handled Kustomization (optionally of one namespace), sorted by namespace then name.
    fn kustomizations(&self, namespace: Option<&str>) -> Vec<StatusRow>;
    /// One handled Kustomization with its history; `None` when it is not handled.
    fn kustomization(&self, namespace: &str, name: &str) -> Option<StatusDetail>;
    /// `Ok` once the caches are synced and the results are readable; otherwise why not.
    fn ready(&self) -> Result<(), String>;
    /// A number that changes whenever anything [`Backend::kustomizations`] or
    /// [`Backend::last_record`] answer may have changed (a record, a gate, a source revision,
    /// the handled set), so the dashboard renders a page once per change instead of once per
    /// request. Read it before the data it guards: a change after the read leaves a page built
    /// under an already old number, rebuilt at the next request. `None` (the default): not
    /// tracked, every request renders afresh (the answers stay correct, only slower).
    fn version(&self) -> Option<u64> {
        None
    }
    /// The newest record with its StatefulSets: the dashboard's rows show a refusal's code, which
    /// only the StatefulSet entries carry. Added by the http branch with a default, so existing
    /// backends keep compiling; a backend holding the results should answer it without copying
    /// the whole history (`Results::last`).
    fn last_record(&self, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.kustomization(namespace, name)
            .and_then(|detail| detail.revisions.into_iter().next())
    }
    /// The `GET /status` body (see [`Backend::kustomizations`]). Added by the perf branch with
    /// a default that encodes on every call; the service answers it from its cache instead.
    fn status_json(&self, namespace: Option<&str>) -> Result<Bytes, serde_json::Error> {
        let mut kustomizations = self.kustomizations(namespace);
        // The order is part of the API; do not rely on every backend to keep it.
        kustomizations.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        if let Some(namespace) = namespace {
            kustomizations.retain(|k| k.namespace == namespace);
        }
        let rows = kustomizations
            .iter()
            .map(encode)
            .collect::<Result<Vec<_>, _>>()?;
        let body = list_body(rows.iter().map(|r| &r[..]));
        Ok(append_field(
            body,
            "helmReleases",
            &helm_releases_array(self, namespace)?,
        ))
    }
    /// Every handled HelmRelease (optionally of one namespace), sorted: `/status`'s
    /// `helmReleases`, rows in the Kustomizations' shape. Default: none.
    fn helm_releases(&self, _namespace: Option<&str>) -> Vec<StatusRow> {
        Vec::new()
    }
    /// One handled HelmRelease with its history (`GET /status/helmreleases/{ns}/{name}`);
    /// `None` when it is not handled. Default: none.
    fn helm_release(&self, _namespace: &str, _name: &str) -> Option<StatusDetail> {
        None
    }
    /// The `GET /status/{ns}/{name}` body; `None` when not handled. Default: encodes
    /// [`Backend::kustomization`] on every call.
    fn kustomization_json(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Result<Bytes, serde_json::Error>> {
        self.kustomization(namespace, name)
            .map(|detail| encode(&detail))
    }
}

/// `helmReleases` of `/status`: [`Backend::helm_releases`], sorted, encoded.
pub fn helm_releases_array<B: Backend + ?Sized>(
    backend: &B,
    namespace: Option<&str>,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut rows = backend.helm_releases(namespace);
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    rows.retain(|r| namespace.is_none_or(|ns| r.namespace == ns));
    let rows = rows.iter().map(encode).collect::<Result<Vec<_>, _>>()?;
    Ok(array(rows.iter().map(|r| &r[..])))
}
