//! The converge step every kind's run uses: every StatefulSet of one revision of a gated object
//! under its tenant identity, all or nothing, and the record entry (with metrics and, on
//! failure, the commands an operator runs by hand) of each result. A struct of its own, with
//! the caches, journal and fence every converge shares, so that each kind's run holds one and
//! embeds no other kind's run; and the hand-over of a converged record to the claim follower.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::Store;

use crate::cluster::tenant::{self, TenantCluster};
use crate::cluster::{WatchedStatefulSets, WritesAs};
use crate::commands;
use crate::converge::fence::SharedFence;
use crate::converge::prove::InPlaceMemory;
use crate::converge::{self, ConvergeError};
use crate::flux::objects;
use crate::flux::render::RenderedStatefulSet;
use crate::gated::{Desired, Gated};
use crate::journal::watched::{IntentCache, WatchedJournal};
use crate::journal::{SecretJournal, Shard};
use crate::model::{GateOutcome, Key, Kind, RevisionRecord, RevisionState, StatefulSetEntry};
use crate::records::entry;
use crate::records::events::{EventSink, EventTarget, RevisionEvent};
use crate::records::metrics::Metrics;
use crate::records::results::Results;
use crate::service::volumes::VolumeFollower;
use crate::volume::VolumeState;

/// What every converge of the service shares.
pub struct StepConfig {
    /// The service's own (fenced) identity: the tenant's client impersonates through it.
    pub client: kube::Client,
    /// Where the intents are kept (`--namespace`).
    pub namespace: String,
    /// This replica's shard: its intents carry the shard's label, so only it resumes them.
    pub shard: Shard,
    pub call_timeout: Duration,
    pub metrics: Metrics,
    /// Asked by every converge right before its claim patches and its orphan delete: the
    /// service's Lease (`None`: nothing fences, e.g. a single replica without election).
    pub fence: Option<SharedFence>,
}

/// The converge step. Cheap to clone.
#[derive(Clone)]
pub struct ConvergeStep {
    config: Arc<StepConfig>,
    /// The service's StorageClass cache; `None` lists them on every converge.
    storage_classes: Option<Store<StorageClass>>,
    statefulsets: Option<WatchedStatefulSets>,
    /// The server's "forbidden in place" answers, shared by every run (one dry run fewer per
    /// re-create once the server has said it).
    in_place: InPlaceMemory,
    /// The service's watch of its intents; `None` reads each converge's intent from the server.
    intents: Option<IntentCache>,
    /// `--helm-field-manager`: what a Helm release's StatefulSets are re-created with.
    helm_field_manager: String,
    /// The claim follower every converged revision of every kind is handed to (and what a
    /// converge asks about the claims' last expansions); `None`: nothing is followed.
    volumes: Option<VolumeFollower>,
}

impl ConvergeStep {
    pub fn new(config: StepConfig) -> Self {
        ConvergeStep {
            config: Arc::new(config),
            storage_classes: None,
            statefulsets: None,
            in_place: InPlaceMemory::default(),
            intents: None,
            helm_field_manager: crate::helm::manifest::DEFAULT_FIELD_MANAGER.to_string(),
            volumes: None,
        }
    }

    /// Converges read StorageClasses from `store` (the service's reflector) instead of
    /// listing them each time: one request fewer per converge, and with many gated objects
    /// the cluster-wide list is not repeated per revision.
    pub fn with_storage_classes(mut self, store: Store<StorageClass>) -> Self {
        self.storage_classes = Some(store);
        self
    }

    /// The service's watch of the StatefulSets its gated objects apply: converges decide on
    /// its copy (confirmed by the proof's answer) and see their orphan delete complete in it.
    pub fn with_statefulsets(mut self, watched: WatchedStatefulSets) -> Self {
        self.statefulsets = Some(watched);
        self
    }

    /// The service's watch of its intents (in `--namespace`): a converge's load of its intent
    /// is answered from it where it can be (`journal::watched`).
    pub fn with_intents(mut self, intents: IntentCache) -> Self {
        self.intents = Some(intents);
        self
    }

    /// The field manager of Helm releases' StatefulSets (`--helm-field-manager`).
    pub fn with_helm_field_manager(mut self, manager: &str) -> Self {
        self.helm_field_manager = manager.to_string();
        self
    }

    /// The claim follower (`service::volumes`): converged revisions of every kind are handed
    /// to it ([`ConvergeStep::follow_volumes`]).
    pub fn with_volumes(mut self, follower: VolumeFollower) -> Self {
        self.volumes = Some(follower);
        self
    }

    /// Hands the record of `key` just saved in `results` to the claim follower, when it
    /// converged: its followed claims are then followed to their end state, their Events
    /// published on `target`. Every kind's run calls it once its record is final.
    pub fn follow_volumes(
        &self,
        key: &Key,
        results: &Results,
        record: &RevisionRecord,
        target: EventTarget,
    ) {
        let Some(follower) = &self.volumes else {
            return;
        };
        if record.state != RevisionState::Converged {
            return;
        }
        // What is kept (merged with the follower's own writes), not the copy the run held.
        let kept = results
            .history(&key.namespace, &key.name)
            .into_iter()
            .find(|r| r.revision == record.revision && r.started_at == record.started_at)
            .unwrap_or_else(|| record.clone());
        follower.follow(key.kind, key, &kept, target, true);
    }

    /// Persists `record` in `results`; a failure is logged (the in-memory history still shows
    /// it, and the next write of the history carries it).
    pub async fn save(&self, results: &Results, key: &Key, record: &RevisionRecord) {
        if let Err(error) = results.put(&key.namespace, &key.name, record.clone()).await {
            tracing::warn!(kind = %key.kind, object = %key, revision = %record.revision, %error,
                "could not persist the record");
        }
    }

    /// How a run of a reactive kind (a HelmRelease, an Application) ends: `record` finished
    /// now, saved, its claims handed to the follower, counted, and `event` (its revision's, as
    /// that kind words it) published on `object`.
    pub async fn finish<G: Gated>(
        &self,
        results: &Results,
        events: &EventSink,
        object: &G,
        record: &mut RevisionRecord,
        event: impl FnOnce(&RevisionRecord) -> Option<RevisionEvent>,
    ) -> GateOutcome {
        let key = object.key();
        record.finished_at = Some(jiff::Timestamp::now().to_string());
        self.save(results, &key, record).await;
        self.follow_volumes(&key, results, record, EventTarget::of(object));
        self.config
            .metrics
            .revision(key.kind, record.state.as_str());
        if let Some(event) = event(record) {
            events.publish(object, &event).await;
        }
        tracing::info!(kind = %key.kind, object = %key, revision = %record.revision,
            state = record.state.as_str(), "revision finished");
        GateOutcome::Done(record.state)
    }

    /// What the follower knows of the claims' last expansions for `key` (empty without a
    /// follower).
    pub fn known_states(&self, key: &Key) -> BTreeMap<String, VolumeState> {
        self.volumes
            .as_ref()
            .map(|f| f.known_states(key.kind, key))
            .unwrap_or_default()
    }

    /// Converges the StatefulSets of a gated object's revision, in namespace/name order, all
    /// under its tenant identity and all or nothing (`converge::converge_all`): every one is
    /// decided, proven and pre-flighted before any is written, so a refusal (or a failure)
    /// of one leaves the others untouched (`held`) instead of applying half a revision that
    /// is then never handed off.
    pub async fn converge_all(&self, wanted: Desired<'_>) -> Vec<StatefulSetEntry> {
        self.converge_all_as(wanted, WritesAs::new()).await
    }

    /// [`ConvergeStep::converge_all`], with the StatefulSets `writes` names proven and
    /// re-created as it says (an Argo CD Application's: `argocd-controller`, by create or by
    /// server-side apply) instead of by their metadata's controller.
    pub async fn converge_all_as(
        &self,
        wanted: Desired<'_>,
        writes: WritesAs,
    ) -> Vec<StatefulSetEntry> {
        let c = &self.config;
        let user = wanted.user.map(str::to_string);
        let tenant_client = match &user {
            None => Ok(c.client.clone()),
            Some(user) => tenant::impersonating(&c.client, user),
        };
        let mut sorted: Vec<&RenderedStatefulSet> = wanted.statefulsets.iter().collect();
        sorted.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let tenant_client = match tenant_client {
            Ok(client) => client,
            Err(e) => {
                return sorted
                    .iter()
                    .map(|s| entry::failed(&s.namespace, &s.name, "impersonate", e.to_string()))
                    .collect();
            }
        };
        // A StatefulSet of the render that does not decode fails the revision before any
        // write: the others are held, as for any failure before writing.
        let mut desired = Vec::with_capacity(sorted.len());
        for rendered in &sorted {
            let (ns, name) = (rendered.namespace.as_str(), rendered.name.as_str());
            match serde_json::from_value::<StatefulSet>(rendered.object.clone()) {
                Ok(mut d) => {
                    d.metadata.namespace = Some(ns.to_string());
                    desired.push(d);
                }
                Err(e) => {
                    let why =
                        format!("not written: StatefulSet {ns}/{name} of the same revision failed");
                    return sorted
                        .iter()
                        .map(|s| {
                            if std::ptr::eq(*s, *rendered) {
                                entry::failed(
                                    ns,
                                    name,
                                    "render",
                                    format!("StatefulSet {ns}/{name}: {e}"),
                                )
                            } else {
                                entry::held(&s.namespace, &s.name, why.clone())
                            }
                        })
                        .collect();
                }
            }
        }
        let mut cluster = TenantCluster::new(tenant_client, c.client.clone(), c.call_timeout)
            .with_helm_field_manager(&self.helm_field_manager);
        if !writes.is_empty() {
            cluster = cluster.with_writes_as(writes);
        }
        if let Some(store) = &self.storage_classes {
            cluster = cluster.with_storage_classes(store.clone());
        }
        if let Some(watched) = &self.statefulsets {
            cluster = cluster.with_statefulsets(watched.clone());
        }
        // Recorded with the shard's label, so only this shard resumes it after a crash.
        let journal = WatchedJournal::new(
            SecretJournal::new(c.client.clone(), c.namespace.clone(), c.call_timeout)
                .scoped(c.shard.clone()),
            self.intents.clone(),
        );
        let options = converge::Options {
            fence: c.fence.clone(),
            revision: Some(wanted.revision.to_string()),
            act_as: user.clone(),
            in_place: self.in_place.clone(),
            // The object the intent came from, whose identity a resume checks: `ns/name` of a
            // Kustomization, `Kind/ns/name` of another kind (`HelmRelease/...`, `Application/...`).
            kustomization: Some(if wanted.owner.kind == Kind::KUSTOMIZATION {
                wanted.owner.to_string()
            } else {
                wanted.owner.qualified()
            }),
            // How the claims' last expansions ended as the follower saw them (Events of
            // servers before 1.32 included): what decides a recovery besides their status.
            known_states: Arc::new(self.known_states(wanted.owner)),
            ..converge::Options::default()
        };
        let results = converge::converge_all(&cluster, &journal, &desired, &options).await;
        let mut entries = Vec::with_capacity(results.len());
        for (d, result) in desired.iter().zip(results) {
            entries.push(
                self.entry_of(&cluster, d, result, user.as_deref(), wanted.owner.kind)
                    .await,
            );
        }
        entries
    }

    /// The record entry of one StatefulSet's converge result, counted in the metrics; a
    /// failure's message names the missing permission under a tenant.
    async fn entry_of(
        &self,
        cluster: &TenantCluster,
        desired: &StatefulSet,
        result: Result<converge::Report, ConvergeError>,
        user: Option<&str>,
        kind: Kind,
    ) -> StatefulSetEntry {
        let c = &self.config;
        let ns = desired.metadata.namespace.as_deref().unwrap_or_default();
        let name = desired.metadata.name.as_deref().unwrap_or_default();
        match result {
            Ok(report) => {
                let e = entry::from_report(&report);
                c.metrics.claims_grown(kind, e.claims.len() as u64);
                if report.recreated {
                    c.metrics.recreated(kind);
                }
                if let Some(r) = &e.refusal {
                    c.metrics.refusal(kind, r.code.as_str());
                }
                for s in &report.steps {
                    c.metrics.step(kind, s.step.as_str(), s.millis / 1000.0);
                }
                tracing::info!(statefulset = %name, namespace = %ns, outcome = ?e.outcome, "converged");
                e
            }
            Err(error) => {
                let message = match (&error, user) {
                    (ConvergeError::Call { cause, .. }, Some(user))
                        if cause.code() == Some(403) =>
                    {
                        tenant::forbidden_message(user, cause)
                    }
                    (
                        ConvergeError::Access {
                            step,
                            code: 403,
                            message,
                            ..
                        },
                        Some(user),
                    ) => {
                        let call = if *step == converge::Step::Preflight {
                            "dry-run create of"
                        } else {
                            "server-side apply dry run of"
                        };
                        let cause = crate::cluster::CallError::api(
                            call,
                            format!("StatefulSet {ns}/{name}"),
                            403,
                            "Forbidden",
                            message,
                        );
                        tenant::forbidden_message(user, &cause)
                    }
                    _ => error.to_string(),
                };
                tracing::warn!(statefulset = %name, namespace = %ns, error = %message, "converge failed");
                let hint = self.hint(cluster, desired).await;
                entry::from_error(ns, name, &error, message, hint)
            }
        }
    }

    /// What an operator runs by hand to finish: the commands that render the revision again
    /// and plan (or, for a StatefulSet left deleted, converge) it, naming the Kustomization
    /// from the owner labels the render put on `desired`. Never the rendered object itself:
    /// it may carry values substituted from Secrets ([`commands::manual_hint`]). `None` when
    /// the cluster cannot even be read or the object names no Kustomization.
    async fn hint(&self, cluster: &TenantCluster, desired: &StatefulSet) -> Option<String> {
        use crate::cluster::Cluster as _;
        let ns = desired.metadata.namespace.clone().unwrap_or_default();
        let name = desired.metadata.name.clone().unwrap_or_default();
        let labels = desired.metadata.labels.as_ref()?;
        let ks_namespace = labels.get(objects::OWNER_NAMESPACE_LABEL)?;
        let ks_name = labels.get(objects::OWNER_NAME_LABEL)?;
        let live = cluster.get_statefulset(&ns, &name).await.ok()?;
        Some(commands::manual_hint(&commands::ManualHint {
            namespace: ks_namespace,
            name: ks_name,
            journal_namespace: &self.config.namespace,
            absent: live.is_none(),
        }))
    }
}
