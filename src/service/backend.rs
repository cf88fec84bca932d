//! The service as the HTTP side sees it ([`Backend`]): the webhook routes through the index
//! into the queue, `/status` reads the index and the records, `/readyz` the access check, the
//! watches and the records. Nothing here waits on the cluster, so every request answers from memory.

use std::sync::{Arc, RwLock};

use crate::flux::event::Event;
use crate::http::backend::Backend;
use crate::model::Key;
use crate::model::body::append_field;
use crate::model::{GateMode, RevisionRecord, StatusDetail, StatusRow, Trigger};
use crate::records::Records;
use crate::records::status_cache::StatusCache;
use crate::service::hook_limit::HookLimit;
use crate::service::index::Index;
use crate::service::queue::Queue;
use crate::service::watch::Readiness;

/// The [`Backend`] of a running service.
#[derive(Clone)]
pub struct ServiceBackend {
    pub index: Arc<RwLock<Index>>,
    pub queue: Queue<Key>,
    pub records: Arc<dyn Records>,
    pub readiness: Readiness,
    /// The encoded `/status` bodies.
    pub status: Arc<StatusCache>,
    /// `--hook-min-interval`, per Kustomization.
    pub hook_limit: Arc<HookLimit<Key>>,
    /// The resume on start: which intents it left in the journal (`/status` `refusedIntents`).
    pub resume: Option<Arc<dyn crate::service::Resume>>,
    /// Why there is no artifact storage though one was meant to be there
    /// (`StorageConfig::unavailable`): not ready while a handled Kustomization uses the
    /// `artifact` gate, which cannot publish without it.
    pub storage_unavailable: Option<String>,
    /// The HelmReleases' lane (`/status` `helmReleases`, `/status/helmreleases/...`).
    pub helm: Option<crate::service::helm::lane::Lane>,
}

impl ServiceBackend {
    fn index(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl Backend for ServiceBackend {
    fn hook(&self, event: &Event) -> Vec<String> {
        let object = &event.involved_object;
        // helm-controller's events name the HelmRelease: its lane runs it (the run decides
        // whether there is anything to do; only opted-in ones are queued).
        if object.kind == "HelmRelease"
            && let Some(lane) = &self.helm
        {
            let key = Key::helm_release(&object.namespace, &object.name);
            if !lane.is_opted_in(&key) {
                return Vec::new();
            }
            if self.hook_limit.admit(&key) {
                tracing::info!(helmrelease = %key, reason = %event.reason, "queued by webhook");
                lane.queue.push_now(key.clone(), Trigger::Webhook);
            }
            return vec![format!("HelmRelease/{key}")];
        }
        let route = self.index().route(event);
        let mut queued = Vec::with_capacity(route.keys.len());
        for key in route.keys {
            // Answered the same either way: the caller learns nothing about timing.
            queued.push(key.to_string());
            if !self.hook_limit.admit(&key) {
                tracing::debug!(kustomization = %key, wedged = route.wedged,
                    "webhook inside --hook-min-interval: nothing queued (the watches and the resync are not limited)");
                continue;
            }
            tracing::info!(kustomization = %key, kind = %object.kind, object = %format!("{}/{}", object.namespace, object.name),
                reason = %event.reason, wedged = route.wedged, "queued by webhook");
            // New work, and a hook runs now even on backoff: the limiter above is what
            // keeps a replayed or forged hook from turning into a retry storm.
            self.queue.push_now(key, Trigger::Webhook);
        }
        queued.sort();
        queued
    }

    fn kustomizations(&self, namespace: Option<&str>) -> Vec<StatusRow> {
        let index = self.index();
        index
            .handled_keys(namespace)
            .into_iter()
            .filter_map(|key| {
                let gate = index.handled(&key)?;
                Some(StatusRow {
                    kind: crate::model::Kind::KUSTOMIZATION,
                    waiting: None,
                    gate,
                    hold: index.hold(&key).map(String::from),
                    source_revision: index.source_revision(&key).map(String::from),
                    last: self
                        .records
                        .last(&key.namespace, &key.name)
                        .map(|r| r.summary()),
                    namespace: key.namespace,
                    name: key.name,
                })
            })
            .collect()
    }

    fn kustomization(&self, namespace: &str, name: &str) -> Option<StatusDetail> {
        let key = Key::kustomization(namespace, name);
        let (gate, source_revision, hold) = {
            let index = self.index();
            let gate = index.handled(&key)?;
            (
                gate,
                index.source_revision(&key).map(String::from),
                index.hold(&key).map(String::from),
            )
        };
        Some(StatusDetail {
            kind: crate::model::Kind::KUSTOMIZATION,
            waiting: None,
            namespace: key.namespace,
            name: key.name,
            gate,
            source_revision,
            hold,
            revisions: self.records.history(namespace, name),
        })
    }

    fn helm_releases(&self, namespace: Option<&str>) -> Vec<StatusRow> {
        self.helm
            .as_ref()
            .map(|lane| lane.summaries(namespace))
            .unwrap_or_default()
    }

    fn helm_release(&self, namespace: &str, name: &str) -> Option<StatusDetail> {
        self.helm.as_ref()?.detail(namespace, name)
    }

    fn status_json(&self, namespace: Option<&str>) -> Result<bytes::Bytes, serde_json::Error> {
        let body = self
            .status
            .list(&self.index, self.records.as_ref(), namespace)?;
        // HelmReleases are few and change with their own watch: encoded per request, after
        // the cached Kustomizations.
        let body = append_field(
            body,
            "helmReleases",
            &crate::http::backend::helm_releases_array(self, namespace)?,
        );
        let refused: Vec<_> = self
            .resume
            .as_ref()
            .map(|r| r.refused())
            .unwrap_or_default()
            .into_iter()
            .filter(|r| namespace.is_none_or(|ns| r.namespace == ns))
            .collect();
        with_refused_intents(body, &refused)
    }

    fn kustomization_json(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Result<bytes::Bytes, serde_json::Error>> {
        self.status
            .detail(&self.index, self.records.as_ref(), namespace, name)
    }

    fn last_record(&self, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.index().handled(&Key::kustomization(namespace, name))?;
        self.records.last(namespace, name)
    }

    /// Both generations only grow, so their sum changes whenever either does.
    fn version(&self) -> Option<u64> {
        let records = self.records.generation()?;
        Some(records.wrapping_add(self.index().generation()))
    }

    fn ready(&self) -> Result<(), String> {
        // First: a missing permission is often why a cache never syncs.
        let access_final = self.readiness.access()?;
        let unsynced = self.readiness.unsynced();
        if !unsynced.is_empty() {
            return Err(format!("caches not synced: {}", unsynced.join(", ")));
        }
        if !self.records.is_loaded() {
            return Err("results not read yet".to_string());
        }
        // Last: an answer given before the Kustomizations were listed may lack `impersonate`.
        if !access_final {
            return Err(
                "access not checked for the Kustomizations' service accounts yet".to_string(),
            );
        }
        if let Some(why) = &self.storage_unavailable {
            let index = self.index();
            let artifact = index
                .handled_keys(None)
                .iter()
                .filter(|key| index.handled(key) == Some(GateMode::Artifact))
                .count();
            if artifact > 0 {
                return Err(format!(
                    "no artifact storage ({why}) and {artifact} Kustomization(s) use the artifact gate"
                ));
            }
        }
        Ok(())
    }
}

/// The `/status` body with `"refusedIntents":[...]` after the Kustomizations when the resume
/// left any intent in the journal (docs/converge.md, the journal); the cached body as it is
/// otherwise.
fn with_refused_intents(
    body: bytes::Bytes,
    refused: &[crate::journal::RefusedIntent],
) -> Result<bytes::Bytes, serde_json::Error> {
    if refused.is_empty() {
        return Ok(body);
    }
    Ok(append_field(
        body,
        "refusedIntents",
        &serde_json::to_vec(refused)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::RefusedIntent;

    #[test]
    fn status_names_the_refused_intents_after_the_kustomizations_by_table() {
        let refused = RefusedIntent {
            object: "Secret flux-system/flux-converger-intent.team.web".into(),
            namespace: "team".into(),
            name: "web".into(),
            act_as: Some("-".into()),
            reason: "never resumes as the service".into(),
        };
        let body = bytes::Bytes::from_static(b"{\"kustomizations\":[]}");
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
            let out = with_refused_intents(body.clone(), &refused).unwrap();
            let got: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(got, want);
        }
    }
}
