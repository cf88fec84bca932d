//! The service as the HTTP side sees it ([`Backend`]): the webhook routes through the lane into
//! the queue, `/status` reads each kind's rows and records, `/readyz` the access check, the
//! watches and the records. Nothing here waits on the cluster, so every request answers from
//! memory.

use std::sync::Arc;

use bytes::Bytes;

use crate::flux::event::Event;
use crate::http::backend::{Backend, NotReady};
use crate::model::{Key, Kind, RevisionRecord, StatusDetail, StatusRow};
use crate::service::lane::Lane;
use crate::service::watch::Readiness;

/// The [`Backend`] of a running service.
#[derive(Clone)]
pub struct ServiceBackend {
    pub lane: Lane,
    /// The access check's answer (`/readyz`).
    pub readiness: Readiness,
    /// The resume on start: which intents it left in the journal (`/status` `refusedIntents`).
    pub resume: Option<Arc<dyn crate::service::resume::Resume>>,
}

impl Backend for ServiceBackend {
    fn hook(&self, event: &Event) -> Vec<String> {
        self.lane.hook(event)
    }

    fn wake(&self, key: Key) -> bool {
        self.lane.wake(key)
    }

    fn kinds(&self) -> Vec<Kind> {
        self.lane.kinds().iter().map(|k| k.kind()).collect()
    }

    fn rows(&self, kind: Kind, namespace: Option<&str>) -> Vec<StatusRow> {
        self.lane
            .kind(kind)
            .map(|k| k.rows(namespace))
            .unwrap_or_default()
    }

    fn detail(&self, kind: Kind, namespace: &str, name: &str) -> Option<StatusDetail> {
        self.lane.kind(kind)?.detail(namespace, name)
    }

    fn rows_json(&self, kind: Kind, namespace: Option<&str>) -> Result<Bytes, serde_json::Error> {
        match self.lane.kind(kind) {
            Some(k) => k.rows_json(namespace),
            None => Ok(Bytes::from_static(b"[]")),
        }
    }

    fn detail_json(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Option<Result<Bytes, serde_json::Error>> {
        self.lane.kind(kind)?.detail_json(namespace, name)
    }

    fn last_record(&self, kind: Kind, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.lane.kind(kind)?.last_record(namespace, name)
    }

    fn status_extra(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<(&'static str, Vec<u8>)>, serde_json::Error> {
        let refused: Vec<_> = self
            .resume
            .as_ref()
            .map(|r| r.refused())
            .unwrap_or_default()
            .into_iter()
            .filter(|r| namespace.is_none_or(|ns| r.namespace == ns))
            .collect();
        refused_intents(&refused)
    }

    /// Every kind's version only grows, so their sum changes whenever one does.
    fn version(&self) -> Option<u64> {
        Some(
            self.lane
                .kinds()
                .iter()
                .fold(0u64, |sum, k| sum.wrapping_add(k.version())),
        )
    }

    fn ready(&self) -> Result<(), NotReady> {
        // First: a missing permission is often why a cache never syncs.
        let access_final = self.readiness.access()?;
        let unsynced = self.lane.unsynced();
        if !unsynced.is_empty() {
            return Err(NotReady::NotSynced(unsynced));
        }
        if self.lane.kinds().iter().any(|k| !k.results().is_loaded()) {
            return Err(NotReady::ResultsNotRead);
        }
        // Last: an answer given before the Kustomizations were listed may lack `impersonate`.
        if !access_final {
            return Err(NotReady::AccessNotFinal);
        }
        for kind in self.lane.kinds() {
            kind.ready()?;
        }
        Ok(())
    }
}

/// `"refusedIntents":[...]` after the kinds' rows when the resume left any intent in the
/// journal (docs/converge.md, the journal); nothing otherwise.
fn refused_intents(
    refused: &[crate::journal::RefusedIntent],
) -> Result<Vec<(&'static str, Vec<u8>)>, serde_json::Error> {
    if refused.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![("refusedIntents", serde_json::to_vec(refused)?)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::RefusedIntent;
    use crate::model::body::object;

    #[test]
    fn status_names_the_refused_intents_after_the_kustomizations_by_table() {
        let refused = RefusedIntent {
            object: "Secret flux-system/flux-converger-intent.team.web".into(),
            namespace: "team".into(),
            name: "web".into(),
            act_as: Some("-".into()),
            reason: "never resumes as the service".into(),
        };
        for (refused, want) in [
            (vec![], serde_json::json!({"kustomizations": []})),
            (
                vec![refused],
                serde_json::json!({"kustomizations": [], "refusedIntents": [{
                    "object": "Secret flux-system/flux-converger-intent.team.web",
                    "namespace": "team", "name": "web", "actAs": "-",
                    "reason": "never resumes as the service"}]}),
            ),
        ] {
            let mut fields: Vec<(&str, Vec<u8>)> = vec![("kustomizations", b"[]".to_vec())];
            fields.extend(refused_intents(&refused).unwrap());
            let out = object(fields.iter().map(|(n, v)| (*n, &v[..])));
            let got: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(got, want);
        }
    }
}
