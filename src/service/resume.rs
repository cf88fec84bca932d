//! The journal's side of a start: the intents a previous process left unfinished, finished
//! by the next leader before it runs anything else.

use std::time::Duration;

use futures::future::BoxFuture;

use super::Resume;
use crate::records::results::Shard;

/// Finishes the intents a previous process left in the journal (`converge::resume_all`):
/// no crash leaves a StatefulSet deleted, and this is where the next leader makes sure of it.
/// Each intent is finished as the identity it was recorded under (the tenant, impersonated),
/// and only if that is the identity its Kustomization uses now, never with the service's own
/// rights for a tenant's work: whoever can write a labelled Secret in the service's namespace
/// must not get a StatefulSet re-applied with more. First the intents earlier versions wrote
/// as ConfigMaps are moved into Secrets. An absent StatefulSet is not re-created here (no
/// render is at hand to say its Kustomization still has it): its Kustomization's next converge
/// does that.
pub struct JournalResume {
    pub client: kube::Client,
    /// The journal's namespace (`--namespace`).
    pub namespace: String,
    pub call_timeout: Duration,
    pub wait_timeout: Duration,
    /// Asked before each write of a resume (this replica's Lease, and the shutdown's windows).
    pub fence: Option<crate::converge::fence::SharedFence>,
    /// Only this shard's intents are resumed: another shard's leader may be finishing its own.
    pub shard: Shard,
    /// `--default-service-account`: the identity a Kustomization without
    /// `spec.serviceAccountName` acts as, which an intent's `actAs` must match.
    pub default_service_account: Option<String>,
    /// Where the refused intents are kept for `/status` (`None`: only logged).
    pub intents: Option<crate::journal::watched::IntentCache>,
    /// `flux_converger_intents_refused`, set after each resume.
    pub refused_gauge: Option<prometheus_client::metrics::gauge::Gauge>,
}

impl Resume for JournalResume {
    fn resume_all(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let journal = crate::journal::SecretJournal::new(
                self.client.clone(),
                self.namespace.clone(),
                self.call_timeout,
            )
            .scoped(self.shard.clone());
            // Before the listing: an intent an earlier version wrote as a ConfigMap is listed
            // (and resumed) as a Secret, and no substituted value stays in a ConfigMap.
            if let Err(error) = journal.migrate_legacy().await {
                tracing::warn!(%error, "moving legacy intent ConfigMaps into Secrets; retried at the next start");
            }
            let options = crate::converge::Options {
                wait_timeout: self.wait_timeout,
                fence: self.fence.clone(),
                ..Default::default()
            };
            let cluster_for = |intent: &crate::journal::Intent| {
                let intent = intent.clone();
                async move {
                    crate::cluster::tenant::cluster_for_intent(
                        &self.client,
                        &intent,
                        self.default_service_account.as_deref(),
                        self.call_timeout,
                    )
                    .await
                }
            };
            match crate::converge::resume_all(cluster_for, &journal, &options).await {
                Ok(resumed) => {
                    for unreadable in resumed.unreadable {
                        tracing::warn!(record = %unreadable.object, message = %unreadable.message,
                            "skipping an unreadable intent record (fix or delete it by hand)");
                    }
                    for kept in &resumed.not_resumed {
                        tracing::warn!(statefulset = %format!("{}/{}", kept.namespace, kept.name),
                            record = %kept.object,
                            act_as = kept.act_as.as_deref().unwrap_or_default(), reason = %kept.reason,
                            "not resuming an unfinished converge: kept in the journal (finish it with `flux-converger converge` as an operator)");
                    }
                    if let Some(gauge) = &self.refused_gauge {
                        gauge.set(resumed.not_resumed.len() as i64);
                    }
                    if let Some(cache) = &self.intents {
                        cache.set_refused(resumed.not_resumed);
                    }
                    for (namespace, name, result) in resumed.results {
                        let statefulset = format!("{namespace}/{name}");
                        match result {
                            Ok(report) => {
                                tracing::info!(%statefulset, action = ?report.action, "resumed an unfinished converge")
                            }
                            Err(error) => {
                                tracing::warn!(%statefulset, %error, "resuming an unfinished converge failed; retried at the next start")
                            }
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "listing unfinished converges"),
            }
        })
    }

    fn refused(&self) -> Vec<crate::journal::RefusedIntent> {
        self.intents
            .as_ref()
            .map(crate::journal::watched::IntentCache::refused)
            .unwrap_or_default()
    }
}
