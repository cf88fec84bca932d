//! A stand-in `Backend` holding seeded records, for the HTTP tests and the browser test
//! (`test_support::http_standin`). It answers like the service's backend: sorted summaries, histories
//! newest first, `hook` mapping an event's object to the Kustomizations that follow it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use flux_converger::flux::event::Event;
use flux_converger::http::Backend;
use flux_converger::model::*;

/// A branch name git accepts (no spaces, `~^:?*[\`), built to break out of text and attributes.
pub const HOSTILE_BRANCH: &str = r#"feat/"><b>pwned</b><script>alert(1)</script>'&x"#;

pub fn hostile_revision() -> String {
    format!("{HOSTILE_BRANCH}@sha1:0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a")
}

pub struct StandIn {
    /// Every kind's objects with their histories, by kind, namespace and name.
    details: BTreeMap<(Kind, String, String), StatusDetail>,
    /// `Kind/namespace/name` of an event's object → the Kustomizations it queues.
    follows: BTreeMap<String, Vec<String>>,
    pub events: Mutex<Vec<Event>>,
    pub not_ready: Option<String>,
}

impl Default for StandIn {
    fn default() -> Self {
        Self::new()
    }
}

impl StandIn {
    pub fn new() -> Self {
        StandIn {
            details: BTreeMap::new(),
            follows: BTreeMap::new(),
            events: Mutex::new(Vec::new()),
            not_ready: None,
        }
    }

    /// Adds a Kustomization with its history (newest first) that follows `GitRepository/ns/source`.
    pub fn with(
        mut self,
        namespace: &str,
        name: &str,
        gate: GateMode,
        source_revision: Option<&str>,
        revisions: Vec<RevisionRecord>,
    ) -> Self {
        self.details.insert(
            (Kind::KUSTOMIZATION, namespace.to_string(), name.to_string()),
            StatusDetail {
                kind: Kind::KUSTOMIZATION,
                waiting: None,
                namespace: namespace.to_string(),
                name: name.to_string(),
                gate,
                source_revision: source_revision.map(str::to_string),
                hold: None,
                revisions,
            },
        );
        self.follows
            .entry(format!("GitRepository/{namespace}/source"))
            .or_default()
            .push(format!("{namespace}/{name}"));
        self.follows
            .entry(format!("Kustomization/{namespace}/{name}"))
            .or_default()
            .push(format!("{namespace}/{name}"));
        self
    }

    /// Adds a HelmRelease (gate `reconcile`, no source) with its history, newest first.
    pub fn with_helm_release(
        mut self,
        namespace: &str,
        name: &str,
        revisions: Vec<RevisionRecord>,
    ) -> Self {
        self.details.insert(
            (Kind::HELM_RELEASE, namespace.to_string(), name.to_string()),
            StatusDetail {
                kind: Kind::HELM_RELEASE,
                waiting: None,
                namespace: namespace.to_string(),
                name: name.to_string(),
                gate: GateMode::Reconcile,
                source_revision: None,
                hold: None,
                revisions,
            },
        );
        self
    }

    fn key(kind: Kind, namespace: &str, name: &str) -> (Kind, String, String) {
        (kind, namespace.to_string(), name.to_string())
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

impl Backend for StandIn {
    fn hook(&self, event: &Event) -> Vec<String> {
        if let Ok(mut events) = self.events.lock() {
            events.push(event.clone());
        }
        let object = &event.involved_object;
        let mut queued = self
            .follows
            .get(&format!(
                "{}/{}/{}",
                object.kind, object.namespace, object.name
            ))
            .cloned()
            .unwrap_or_default();
        queued.sort();
        queued
    }

    fn rows(&self, kind: Kind, namespace: Option<&str>) -> Vec<StatusRow> {
        self.details
            .values()
            .filter(|d| d.kind == kind && namespace.is_none_or(|ns| d.namespace == ns))
            .map(|d| StatusRow {
                kind: d.kind,
                waiting: None,
                namespace: d.namespace.clone(),
                name: d.name.clone(),
                gate: d.gate,
                source_revision: d.source_revision.clone(),
                last: d.revisions.first().map(RevisionRecord::summary),
                hold: d.hold.clone(),
            })
            .collect()
    }

    fn detail(&self, kind: Kind, namespace: &str, name: &str) -> Option<StatusDetail> {
        self.details.get(&Self::key(kind, namespace, name)).cloned()
    }

    /// As the service's backend does (`Results::last`): the newest record alone, not a copy of
    /// the whole history.
    fn last_record(&self, kind: Kind, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.details
            .get(&Self::key(kind, namespace, name))
            .and_then(|d| d.revisions.first().cloned())
    }

    fn ready(&self) -> Result<(), flux_converger::http::backend::NotReady> {
        match &self.not_ready {
            Some(why) => Err(flux_converger::http::backend::NotReady::Other(why.clone())),
            None => Ok(()),
        }
    }
}

pub fn record(
    revision: &str,
    state: RevisionState,
    started: &str,
    finished: Option<&str>,
) -> RevisionRecord {
    RevisionRecord {
        volumes: Default::default(),
        revision: revision.to_string(),
        digest: Some(format!("sha256:{}", "ab".repeat(32))),
        trigger: Trigger::Webhook,
        started_at: started.to_string(),
        finished_at: finished.map(str::to_string),
        state,
        statefulsets: Vec::new(),
        handoff: None,
        flux: None,
        warnings: Vec::new(),
        error: None,
        generation: None,
        gate: None,
        attempts: 1,
    }
}

pub fn set(namespace: &str, name: &str, outcome: StatefulSetOutcome) -> StatefulSetEntry {
    StatefulSetEntry {
        volumes: Default::default(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        outcome,
        old_uid: None,
        new_uid: None,
        templates: Vec::new(),
        changes: Vec::new(),
        claims: Vec::new(),
        deferred: Vec::new(),
        refusal: None,
        error: None,
    }
}

fn grown(namespace: &str, name: &str, replicas: usize, from: &str, to: &str) -> StatefulSetEntry {
    StatefulSetEntry {
        old_uid: Some(format!("6f1c2a9e-0000-4000-8000-{:012}", name.len())),
        new_uid: Some(format!("b83d77f0-1111-4111-8111-{:012}", name.len())),
        templates: vec![TemplateChange {
            template: "data".into(),
            from: from.into(),
            to: to.into(),
        }],
        claims: (0..replicas)
            .map(|i| ClaimChange {
                claim: format!("data-{name}-{i}"),
                from: from.into(),
                to: to.into(),
            })
            .collect(),
        ..set(namespace, name, StatefulSetOutcome::Converged)
    }
}

fn applied(revision: &str) -> FluxResult {
    FluxResult {
        outcome: FluxOutcome::Applied,
        applied_revision: Some(revision.to_string()),
        message: Some(format!("Applied revision: {revision}")),
        attempted_revision: None,
    }
}

fn handoff(at: &str) -> Handoff {
    Handoff {
        mode: GateMode::Suspend,
        at: at.to_string(),
        action: flux_converger::model::HandoffAction::Unsuspended,
        requested_at: None,
        resuspended_at: Some(at.replace(":02Z", ":40Z")),
        attempts: Vec::new(),
        retry_at: None,
    }
}

pub const SHRINK_MESSAGE: &str = "template data of apps/db: 10Gi is smaller than the live 20Gi (claim data-db-0); volumes never shrink";

/// The seeded service: every state, a hostile branch name, a refusal, a failure with a hint,
/// a deferred claim, a history with a recreation.
pub fn seeded() -> StandIn {
    let web_new = "main@sha1:9f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b";
    let web_old = "main@sha1:1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d";
    let web_older = "main@sha1:aa2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c40";
    let mut web = record(
        web_new,
        RevisionState::Converged,
        "2026-11-30T07:58:00Z",
        Some("2026-11-30T07:58:02Z"),
    );
    web.statefulsets = vec![
        grown("apps", "web", 3, "1Gi", "2Gi"),
        set("apps", "redis", StatefulSetOutcome::Unchanged),
    ];
    web.handoff = Some(handoff("2026-11-30T07:58:02Z"));
    web.flux = Some(applied(web_new));
    let mut web_superseded = record(
        web_old,
        RevisionState::Superseded,
        "2026-11-30T07:40:00Z",
        Some("2026-11-30T07:40:01Z"),
    );
    web_superseded.trigger = Trigger::Resync;
    let mut web_first = record(
        web_older,
        RevisionState::Converged,
        "2026-11-29T10:00:00Z",
        Some("2026-11-29T10:00:04Z"),
    );
    web_first.trigger = Trigger::Startup;
    web_first.statefulsets = vec![set("apps", "web", StatefulSetOutcome::Unchanged)];
    web_first.handoff = Some(handoff("2026-11-29T10:00:02Z"));
    web_first.flux = Some(applied(web_older));

    let hostile = hostile_revision();
    let mut db = record(
        &hostile,
        RevisionState::Refused,
        "2026-11-30T07:50:00Z",
        Some("2026-11-30T07:50:01Z"),
    );
    db.statefulsets = vec![StatefulSetEntry {
        refusal: Some(RefusalEntry {
            code: flux_converger::model::RefusalCode::Shrink,
            message: SHRINK_MESSAGE.into(),
        }),
        ..set("apps", "db", StatefulSetOutcome::Refused)
    }];

    let kafka_rev = "main@sha1:5e6f708192a3b4c5d6e7f8091a2b3c4d1a2b3c4d";
    let mut kafka = record(
        kafka_rev,
        RevisionState::Failed,
        "2026-11-30T07:55:00Z",
        Some("2026-11-30T07:55:31Z"),
    );
    kafka.statefulsets = vec![StatefulSetEntry {
        error: Some(StepError {
            step: "grow".into(),
            message: "PersistentVolumeClaim \"data-kafka-2\" is invalid: spec.resources.requests.storage: Forbidden: field can not be less than previous value".into(),
            hint: Some("kubectl -n data patch pvc data-kafka-2 -p '{\"spec\":{\"resources\":{\"requests\":{\"storage\":\"50Gi\"}}}}'".into()),
        }),
        ..grown("data", "kafka", 3, "20Gi", "50Gi")
    }];

    let cache_rev =
        "v1.4.2@sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
    let cache = record(
        cache_rev,
        RevisionState::Running,
        "2026-11-30T08:00:00Z",
        None,
    );

    let search_rev = "main@sha1:c4d1a2b3c5e6f708192a3b4c5d6e7f8091a2b3c4";
    let mut search = record(
        search_rev,
        RevisionState::Converged,
        "2026-11-30T06:00:00Z",
        Some("2026-11-30T06:00:05Z"),
    );
    search.statefulsets = vec![StatefulSetEntry {
        deferred: vec![DeferredClaim {
            claim: "data-search-4".into(),
            reason: "Pending: the API server only grows Bound claims".into(),
        }],
        ..grown("team-b", "search", 4, "5Gi", "8Gi")
    }];
    search.warnings =
        vec!["claim team-b/data-search-4 is Pending: grown at the next resync once Bound".into()];
    search.handoff = Some(Handoff {
        mode: GateMode::Reconcile,
        at: "2026-11-30T06:00:05Z".into(),
        action: flux_converger::model::HandoffAction::ReconcileRequested,
        requested_at: Some("2026-11-30T06:00:05.123456789Z".into()),
        resuspended_at: None,
        attempts: Vec::new(),
        retry_at: None,
    });
    search.flux = Some(FluxResult {
        outcome: FluxOutcome::Failed,
        applied_revision: Some("main@sha1:0000000000000000000000000000000000000000".into()),
        message: Some("HealthCheckFailed: timeout waiting for: [StatefulSet/team-b/search status: 'InProgress']".into()),
        attempted_revision: None,
    });

    StandIn::new()
        .with(
            "apps",
            "web",
            GateMode::Suspend,
            Some(web_new),
            vec![web, web_superseded, web_first],
        )
        .with("apps", "db", GateMode::Suspend, Some(&hostile), vec![db])
        .with(
            "data",
            "kafka",
            GateMode::Reconcile,
            Some(kafka_rev),
            vec![kafka],
        )
        .with(
            "data",
            "cache",
            GateMode::Suspend,
            Some(cache_rev),
            vec![cache],
        )
        .with(
            "flux-system",
            "infra",
            GateMode::Reconcile,
            Some("main@sha1:ffffffffffffffffffffffffffffffffffffffff"),
            Vec::new(),
        )
        .with(
            "team-b",
            "search",
            GateMode::Reconcile,
            Some("main@sha1:d00d1a2b3c5e6f708192a3b4c5d6e7f8091a2b3c"),
            vec![search],
        )
}

/// `kustomizations` × `revisions` records, for the scale measurement.
pub fn scaled(kustomizations: usize, revisions: usize) -> StandIn {
    let states = [
        RevisionState::Converged,
        RevisionState::Converged,
        RevisionState::Converged,
        RevisionState::Refused,
        RevisionState::Failed,
        RevisionState::Superseded,
        RevisionState::Running,
    ];
    let mut standin = StandIn::new();
    for k in 0..kustomizations {
        let namespace = format!("team-{:02}", k % 40);
        let name = format!("app-{k:04}");
        let history = (0..revisions)
            .map(|r| {
                let revision = format!("main@sha1:{:040x}", k * 1000 + r);
                let state = states[(k + r) % states.len()];
                let mut rec = record(
                    &revision,
                    state,
                    "2026-11-30T07:00:00Z",
                    Some("2026-11-30T07:00:03Z"),
                );
                rec.statefulsets = vec![grown(&namespace, &name, 3, "1Gi", "2Gi")];
                if state == RevisionState::Refused {
                    rec.statefulsets[0].refusal = Some(RefusalEntry {
                        code: flux_converger::model::RefusalCode::NotExpandable,
                        message: "StorageClass standard does not allow volume expansion".into(),
                    });
                }
                rec
            })
            .collect();
        let source = format!("main@sha1:{:040x}", k * 1000);
        standin = standin.with(&namespace, &name, GateMode::Suspend, Some(&source), history);
    }
    standin
}

/// A stand-in that tracks its version as the service's backend does (it moves with every
/// change of the data) and counts the list requests, so a test sees the dashboard built once
/// per change and not once per request.
pub struct Versioned {
    inner: RwLock<StandIn>,
    version: AtomicU64,
    /// Calls of `kustomizations`: one per page built.
    pub lists: AtomicUsize,
}

impl Versioned {
    pub fn new(inner: StandIn) -> Self {
        Versioned {
            inner: RwLock::new(inner),
            version: AtomicU64::new(1),
            lists: AtomicUsize::new(0),
        }
    }

    /// Replaces the data and moves the version, as a new record does in the service.
    pub fn replace(&self, inner: StandIn) {
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = inner;
        self.version.fetch_add(1, Ordering::SeqCst);
    }

    pub fn lists(&self) -> usize {
        self.lists.load(Ordering::SeqCst)
    }

    fn inner(&self) -> std::sync::RwLockReadGuard<'_, StandIn> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl Backend for Versioned {
    fn hook(&self, event: &Event) -> Vec<String> {
        self.inner().hook(event)
    }
    fn rows(&self, kind: Kind, namespace: Option<&str>) -> Vec<StatusRow> {
        if kind == Kind::KUSTOMIZATION {
            self.lists.fetch_add(1, Ordering::SeqCst);
        }
        self.inner().rows(kind, namespace)
    }
    fn detail(&self, kind: Kind, namespace: &str, name: &str) -> Option<StatusDetail> {
        self.inner().detail(kind, namespace, name)
    }
    fn last_record(&self, kind: Kind, namespace: &str, name: &str) -> Option<RevisionRecord> {
        self.inner().last_record(kind, namespace, name)
    }
    fn ready(&self) -> Result<(), flux_converger::http::backend::NotReady> {
        self.inner().ready()
    }
    fn version(&self) -> Option<u64> {
        Some(self.version.load(Ordering::SeqCst))
    }
}
