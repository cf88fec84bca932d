//! The walk through the revisions: publish, announce, let the converger and Flux do their
//! jobs, then check what each was supposed to do against the cluster and `/status`. Each
//! revision goes through both Kustomizations at once (`apps` behind `--gate`, `cache` behind
//! the artifact gate); the checks then read them one after the other.

use std::time::Duration;

use flux_converger::model::{
    FluxOutcome, GateMode, RevisionRecord, RevisionState, StatefulSetEntry, StatefulSetOutcome,
    Trigger, Volume, VolumeState,
};

use crate::cluster::{self, App};
use crate::progress::Progress;
use crate::scenario::{
    APP_NS, CACHE, DRIVER_MAX, EXTERNAL_ARTIFACT, Expect, FLUX_NS, HISTORY, HMAC_KEY, Revision,
    SOURCE, TEMPLATE, WEB, Workload, claims, tree,
};
use crate::status::ServiceApi;
use crate::volumes::Resizer;
use fake_apiserver::{FakeApiServer, Method, RequestRecord};
use test_support::flux_standin::flux_archive::sha256;
use test_support::flux_standin::{
    GitSource, KUSTOMIZE_MANAGER, KustomizeController, Published, post_event,
};

pub struct World {
    pub fake: FakeApiServer,
    pub source: GitSource,
    pub service: ServiceApi,
    /// The gate of `apps` (`--gate`); `cache` is always behind the artifact gate.
    pub gate: GateMode,
    pub timeout: Duration,
    /// The kustomize-controller stand-in, whose log says what Flux attempted.
    pub flux: KustomizeController,
    /// The CSI resizer, driven step by step by the walk.
    pub resizer: Resizer,
}

/// One Kustomization the walk follows: the StatefulSet it deploys and its gate.
#[derive(Clone, Copy)]
struct Target {
    w: Workload,
    gate: GateMode,
}

impl Target {
    fn kustomization(&self) -> &'static str {
        self.w.kustomization
    }

    fn statefulset(&self) -> &'static str {
        self.w.statefulset
    }
}

pub async fn walk(w: &World, p: &mut Progress) {
    let targets = [
        Target {
            w: WEB,
            gate: w.gate,
        },
        Target {
            w: CACHE,
            gate: GateMode::Artifact,
        },
    ];
    let mut before = [App::default(), App::default()];
    for (i, revision) in HISTORY.iter().enumerate() {
        p.section(&format!("revision {}: {}", i + 1, revision.message));
        let mark = w.fake.requests().last().map_or(0, |r| r.id);
        let previous = w.source.history().last().cloned();
        let Some(published) = publish(w, p, revision).await else {
            return;
        };
        for (t, before) in targets.iter().zip(before.iter_mut()) {
            p.sub(&heading(t));
            let record = match w
                .service
                .finished(FLUX_NS, t.kustomization(), &published.revision, w.timeout)
                .await
            {
                Ok(record) => record,
                Err(e) => {
                    p.fail(
                        &format!(
                            "the converger finished the revision of {FLUX_NS}/{} (GET /status)",
                            t.kustomization()
                        ),
                        e,
                    );
                    return;
                }
            };
            describe(p, &record);
            *before = match revision.expect {
                Expect::Applied => applied(w, p, t, &published, &record, mark).await,
                // Each of these leaves the cluster as the resizer left it: what the next
                // revision compares with.
                Expect::Grown => {
                    grown(w, p, t, &published, &record, before, mark, revision.size).await;
                    grow_in_steps(w, p, t, &published, revision.size).await;
                    cluster::app(&w.fake, &t.w)
                }
                Expect::Infeasible => {
                    grown(w, p, t, &published, &record, before, mark, revision.size).await;
                    refused_by_the_driver(w, p, t, &published, revision.size).await;
                    cluster::app(&w.fake, &t.w)
                }
                Expect::Recovered => {
                    recovered(w, p, t, &published, &record, before, mark, revision.size).await;
                    grow_in_steps(w, p, t, &published, revision.size).await;
                    cluster::app(&w.fake, &t.w)
                }
                Expect::Refused => {
                    refused(w, p, t, &published, previous.as_ref(), &record, before).await
                }
            };
        }
        if revision.expect == Expect::Refused {
            let writes: Vec<String> = w
                .fake
                .writes()
                .into_iter()
                .filter(|r| r.id > mark)
                .filter(|r| {
                    ["/statefulsets", "/persistentvolumeclaims", "/pods"]
                        .iter()
                        .any(|k| r.path.contains(k))
                })
                .map(|r| format!("{} {}", r.method, r.path))
                .collect();
            p.check(
                writes.is_empty(),
                "no write reached a StatefulSet, a claim or a pod since the revision was published",
                || writes.join(", "),
            );
        }
    }
}

/// After every walk: no pod and no claim was ever deleted.
pub fn never_deleted(fake: &FakeApiServer, p: &mut Progress) {
    p.section("never deleted");
    let deletes: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.method == Method::DELETE && !r.dry_run)
        .filter(|r| r.path.contains("/pods") || r.path.contains("/persistentvolumeclaims"))
        .map(|r| r.path.clone())
        .collect();
    p.check(
        deletes.is_empty(),
        "no pod and no claim was ever deleted (every DELETE the API server received)",
        || deletes.join(", "),
    );
}

fn heading(t: &Target) -> String {
    match t.gate {
        GateMode::Artifact => format!(
            "artifact gate: Kustomization {FLUX_NS}/{} reads ExternalArtifact {FLUX_NS}/{EXTERNAL_ARTIFACT} (upstream GitRepository {FLUX_NS}/{SOURCE}), StatefulSet {APP_NS}/{}",
            t.kustomization(),
            t.statefulset()
        ),
        gate => format!(
            "{gate} gate: Kustomization {FLUX_NS}/{} reads GitRepository {FLUX_NS}/{SOURCE}, StatefulSet {APP_NS}/{}",
            t.kustomization(),
            t.statefulset()
        ),
    }
}

/// Publishes `revision` and posts notification-controller's hook.
async fn publish(w: &World, p: &mut Progress, revision: &Revision) -> Option<Published> {
    let files = tree(revision.size);
    let files: Vec<(&str, &str)> = files.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let published = match w.source.publish(revision.message, &files).await {
        Ok(p) => p,
        Err(e) => {
            p.fail("source-controller published the revision", e.to_string());
            return None;
        }
    };
    p.did(&format!(
        "source-controller published {} ({} bytes, {})",
        published.revision, published.size, published.digest
    ));
    let event = match w.source.new_artifact_event(&published).await {
        Ok(e) => e,
        Err(e) => {
            p.fail("notification-controller built the event", e.to_string());
            return None;
        }
    };
    match post_event(&w.service.url("/hook"), HMAC_KEY, &event).await {
        Ok(d) => {
            let queued = |ks: &str| d.body.contains(&format!("{FLUX_NS}/{ks}"));
            p.check(
                // The hook queues what reads the GitRepository: `apps`, and `cache` through
                // its ExternalArtifact's upstream.
                (200..300).contains(&d.status)
                    && queued(WEB.kustomization)
                    && queued(CACHE.kustomization),
                &format!(
                    "notification-controller's signed NewArtifact hook was accepted: {} {}",
                    d.status,
                    d.body.trim()
                ),
                || format!("answered {} {}", d.status, d.body),
            );
        }
        Err(e) => p.fail("notification-controller posted the hook", e.to_string()),
    }
    Some(published)
}

/// What the converger decided, as `/status` reports it.
fn describe(p: &Progress, record: &RevisionRecord) {
    p.did(&format!(
        "the converger's record: {} (trigger: {})",
        record.state.as_str(),
        spelled(&record.trigger)
    ));
    if record.trigger != Trigger::Webhook {
        p.detail(
            "(its watch saw the new artifact before the hook arrived: the hook is only a hint)",
        );
    }
    for e in &record.statefulsets {
        for line in entry_lines(e) {
            p.detail(&line);
        }
    }
    if let Some(h) = &record.handoff {
        p.detail(&format!(
            "handed off to Flux: {} ({} gate)",
            h.action, h.mode
        ));
    }
    if let Some(f) = &record.flux {
        p.detail(&format!(
            "Flux: {}{}",
            spelled(&f.outcome),
            f.message
                .as_deref()
                .map(|m| format!(" — {m}"))
                .unwrap_or_default()
        ));
    }
    if let Some(e) = &record.error {
        p.detail(&format!("error at {}: {}", e.step, e.message));
    }
}

fn entry_lines(e: &StatefulSetEntry) -> Vec<String> {
    let mut line = format!(
        "StatefulSet {}/{}: {}",
        e.namespace,
        e.name,
        spelled(&e.outcome)
    );
    for t in &e.templates {
        line.push_str(&format!("; template {} {} → {}", t.template, t.from, t.to));
    }
    if let (Some(old), Some(new)) = (&e.old_uid, &e.new_uid)
        && old != new
    {
        line.push_str(&format!(
            "; re-created (uid {} → {})",
            short(old),
            short(new)
        ));
    }
    if let Some(r) = &e.refusal {
        line.push_str(&format!("; refused ({}): {}", r.code, r.message));
    }
    if let Some(err) = &e.error {
        line.push_str(&format!("; failed at {}: {}", err.step, err.message));
    }
    let mut lines = vec![line];
    for c in &e.claims {
        lines.push(format!("  claim {} {} → {}", c.claim, c.from, c.to));
    }
    lines
}

/// An enum as `/status` spells it (`converged`, `webhook`, ...).
fn spelled<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::from("?"),
    }
}

fn short(uid: &str) -> &str {
    &uid[..uid.len().min(8)]
}

/// `main@sha1:0123abcd`: a revision short enough for a line.
fn short_rev(revision: &str) -> String {
    match revision.split_once(':') {
        Some((head, hex)) => format!("{head}:{}", &hex[..hex.len().min(8)]),
        None => revision.to_string(),
    }
}

/// Writes (not dry runs) since `mark` to `t`'s StatefulSet or its claims, by `who`
/// (`Some(manager)`: that field manager only; `None`: anyone but kustomize-controller).
fn workload_writes(w: &World, t: &Target, mark: u64, who: Option<&str>) -> Vec<RequestRecord> {
    let sts = format!("/statefulsets/{}", t.statefulset());
    let claims = format!("/persistentvolumeclaims/{TEMPLATE}-{}-", t.statefulset());
    w.fake
        .writes()
        .into_iter()
        .filter(|r| r.id > mark && (r.path.ends_with(&sts) || r.path.contains(&claims)))
        .filter(|r| match who {
            Some(manager) => r.field_manager.as_deref() == Some(manager),
            None => r.field_manager.as_deref() != Some(KUSTOMIZE_MANAGER),
        })
        .collect()
}

/// The converged revision goes to Flux: the gate's hand-off, then Flux applying it.
async fn handed_off(
    w: &World,
    p: &mut Progress,
    t: &Target,
    published: &Published,
    record: &RevisionRecord,
    mark: u64,
) {
    if t.gate != GateMode::Artifact {
        flux_applied(w, p, t, published).await;
        return;
    }
    artifact_published(w, p, t, published, record, mark).await;
    flux_applied(w, p, t, published).await;
    // Flux can only ever apply what was published: it read the artifact after the publish.
    let at = |s: &str| s.parse::<jiff::Timestamp>().ok();
    let published_at = record.handoff.as_ref().and_then(|h| at(&h.at));
    let attempts: Vec<_> = w
        .flux
        .reconciled()
        .into_iter()
        .filter(|r| r.name == t.kustomization() && r.revision == published.revision)
        .collect();
    p.check(
        published_at.is_some()
            && !attempts.is_empty()
            && attempts.iter().all(|r| at(&r.at) >= published_at),
        &format!(
            "kustomize-controller read the revision only after the publish ({} attempt(s), the first at {})",
            attempts.len(),
            attempts.first().map(|r| r.at.as_str()).unwrap_or_default()
        ),
        || format!("published at {published_at:?}, attempts {attempts:?}"),
    );
}

/// The artifact gate's publish, as the ExternalArtifact, the artifact server and the request
/// log show it. The id of the publishing status write, if there was one.
async fn artifact_published(
    w: &World,
    p: &mut Progress,
    t: &Target,
    published: &Published,
    record: &RevisionRecord,
    mark: u64,
) {
    let handoff = record.handoff.as_ref();
    p.check(
        handoff.is_some_and(|h| h.mode == GateMode::Artifact && h.action == flux_converger::model::HandoffAction::Published),
        &format!(
            "the converger's record says converged, then published (handoff: artifact, published at {})",
            handoff.map(|h| h.at.as_str()).unwrap_or_default()
        ),
        || format!("{handoff:?}"),
    );
    let seen = cluster::until(
        w.timeout,
        || cluster::external_artifact(&w.fake, EXTERNAL_ARTIFACT),
        |a| a.revision == published.revision && a.ready == "True",
    )
    .await;
    let ok = seen.is_ok();
    let a = seen.unwrap_or_else(|a| a);
    p.check(
        ok && a.digest == published.digest
            && a.size == Some(published.size)
            && a.reason == "Succeeded"
            && a.message == format!("stored artifact for converged revision '{}'", published.revision),
        &format!(
            "ExternalArtifact {FLUX_NS}/{EXTERNAL_ARTIFACT} publishes it: status.artifact.revision {}, the upstream's digest, Ready=True {} \"{}\"",
            short_rev(&a.revision),
            a.reason,
            a.message
        ),
        || format!("{a:?}"),
    );
    let served = fetch(&a.url).await;
    p.check(
        matches!(&served, Ok(bytes) if sha256(bytes) == published.digest),
        &format!(
            "the converger's artifact server serves the same bytes: GET {} → {} bytes, {}",
            a.url,
            served.as_ref().map_or(0, Vec::len),
            served.as_ref().map(|b| sha256(b)).unwrap_or_default()
        ),
        || match &served {
            Ok(bytes) => format!(
                "{} bytes, {} (expected {})",
                bytes.len(),
                sha256(bytes),
                published.digest
            ),
            Err(e) => e.clone(),
        },
    );
    // The request log: the publish (the last status write of the ExternalArtifact) came after
    // every write of the converge.
    let status_path = format!("/externalartifacts/{EXTERNAL_ARTIFACT}/status");
    let publish_id = w
        .fake
        .writes()
        .into_iter()
        .filter(|r| r.id > mark && r.path.ends_with(&status_path))
        .map(|r| r.id)
        .next_back();
    let converge = workload_writes(w, t, mark, None);
    let last = converge.last().map(|r| r.id);
    p.check(
        publish_id.is_some() && last < publish_id,
        &match last {
            Some(last) => format!(
                "published after the converge: the ExternalArtifact's status write (request #{}) came after the converger grew the claims and orphan-deleted StatefulSet {APP_NS}/{} ({} writes, last #{last})",
                publish_id.unwrap_or_default(),
                t.statefulset(),
                converge.len()
            ),
            None => format!(
                "published (request #{}) with nothing to converge first",
                publish_id.unwrap_or_default()
            ),
        },
        || format!("publish request {publish_id:?}, converge writes {converge:?}"),
    );
}

async fn fetch(url: &str) -> Result<Vec<u8>, String> {
    let r = reqwest::get(url).await.map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!("GET {url}: {}", r.status()));
    }
    Ok(r.bytes().await.map_err(|e| e.to_string())?.to_vec())
}

async fn flux_applied(w: &World, p: &mut Progress, t: &Target, published: &Published) {
    // Flux's verdict is added to the record when the converger sees it.
    let seen = w
        .service
        .record_until(
            FLUX_NS,
            t.kustomization(),
            &published.revision,
            w.timeout,
            |r| {
                r.flux
                    .as_ref()
                    .is_some_and(|f| f.outcome != FluxOutcome::Pending)
            },
        )
        .await;
    let flux = seen.as_ref().ok().and_then(|r| r.flux.clone());
    p.check(
        flux.as_ref().is_some_and(|f| {
            f.outcome == FluxOutcome::Applied
                && f.applied_revision.as_deref() == Some(published.revision.as_str())
        }),
        "the converger saw Flux apply the revision",
        || match &seen {
            Ok(r) => format!("{:?}", r.flux),
            Err(e) => e.clone(),
        },
    );
    let flux = cluster::until(
        w.timeout,
        || cluster::flux(&w.fake, t.kustomization()),
        |f| {
            f.applied == published.revision
                && f.ready == "True"
                && (t.gate != GateMode::Suspend || f.suspended)
        },
    )
    .await;
    let ok = flux.is_ok();
    let f = flux.unwrap_or_else(|f| f);
    p.check(
        ok,
        &format!(
            "Flux applied it: Ready={} {} \"{}\"",
            f.ready, f.reason, f.message
        ),
        || {
            format!(
                "lastAppliedRevision {:?}, Ready {} {}: {}",
                f.applied, f.ready, f.reason, f.message
            )
        },
    );
    if t.gate == GateMode::Suspend {
        p.check(
            f.suspended,
            "the Kustomization is suspended again (strict gate)",
            || "spec.suspend is false".into(),
        );
    }
}

async fn applied(
    w: &World,
    p: &mut Progress,
    t: &Target,
    published: &Published,
    record: &RevisionRecord,
    mark: u64,
) -> App {
    p.check(
        record.state == RevisionState::Converged,
        if t.gate == GateMode::Artifact {
            "the converger had nothing to grow: the revision is converged"
        } else {
            "the converger had nothing to grow and handed the revision to Flux"
        },
        || format!("state {}", record.state.as_str()),
    );
    handed_off(w, p, t, published, record, mark).await;
    let replicas = t.w.replicas;
    let settled = cluster::until(
        w.timeout,
        || cluster::app(&w.fake, &t.w),
        |a| {
            a.template.as_deref() == Some("1Gi")
                && a.pods.len() == replicas
                && a.pods.values().all(|pod| pod.phase == "Running")
                && a.claims.len() == replicas
                && a.claims.values().all(|c| c.phase == "Bound")
        },
    )
    .await;
    let ok = settled.is_ok();
    let app = settled.unwrap_or_else(|a| a);
    p.check(
        ok && app.appliers == [KUSTOMIZE_MANAGER],
        &format!(
            "StatefulSet {APP_NS}/{} created by kustomize-controller (uid {}), {replicas} pods Running, {replicas} claims Bound at 1Gi",
            t.statefulset(),
            short(app.statefulset_uid.as_deref().unwrap_or_default())
        ),
        || format!("{app:?}"),
    );
    for (name, pod) in &app.pods {
        p.detail(&format!("pod {name} uid {}", short(&pod.uid)));
    }
    app
}

#[allow(clippy::too_many_arguments)]
async fn grown(
    w: &World,
    p: &mut Progress,
    t: &Target,
    published: &Published,
    record: &RevisionRecord,
    before: &App,
    mark: u64,
    size: &str,
) -> App {
    p.check(
        record.state == RevisionState::Converged,
        "the converger converged the revision",
        || format!("state {}: {:?}", record.state.as_str(), record.error),
    );
    let entry = record
        .statefulsets
        .iter()
        .find(|e| e.namespace == APP_NS && e.name == t.statefulset());
    let grew = entry.and_then(|e| e.templates.iter().find(|t| t.template == TEMPLATE));
    let decided = entry.is_some_and(|e| e.outcome == StatefulSetOutcome::Converged)
        && grew.is_some_and(|g| g.to == size);
    p.check(
        decided,
        &format!(
            "it decided: only the data template grew, {} → {size}",
            grew.map(|g| g.from.as_str()).unwrap_or("?")
        ),
        || format!("{entry:?}"),
    );
    let mut recorded: Vec<String> = entry
        .map(|e| e.claims.iter().map(|c| c.claim.clone()).collect())
        .unwrap_or_default();
    recorded.sort();
    p.check(
        recorded == claims(&t.w),
        &format!("it grew the claims {}", claims(&t.w).join(", ")),
        || format!("recorded {recorded:?}"),
    );
    let app = recreated_with(w, p, t, before, size, "raised").await;
    handed_off(w, p, t, published, record, mark).await;
    app
}

/// The cluster after a converge that re-created `t`'s StatefulSet with its template at `size`
/// and `how` (raised, lowered) its claims' requests to it: the same claims, the same pods.
async fn recreated_with(
    w: &World,
    p: &mut Progress,
    t: &Target,
    before: &App,
    size: &str,
    how: &str,
) -> App {
    let settled = cluster::until(
        w.timeout,
        || cluster::app(&w.fake, &t.w),
        |a| a.claims.values().all(|c| c.request == size) && a.template.as_deref() == Some(size),
    )
    .await;
    let ok = settled.is_ok();
    let app = settled.unwrap_or_else(|a| a);
    let held: Vec<String> = app.claims.values().map(|c| c.capacity.clone()).collect();
    p.check(
        ok,
        &format!(
            "the claims' requests {how} to {size} (the volumes still hold {}: the driver grows them next)",
            held.first().map(String::as_str).unwrap_or("?")
        ),
        || format!("{:?}", app.claims),
    );
    let same_claims = app.claims.len() == before.claims.len()
        && app
            .claims
            .iter()
            .all(|(n, c)| before.claims.get(n).is_some_and(|b| b.uid == c.uid));
    p.check(
        same_claims,
        "the same claims (same uids): none was re-created",
        || format!("before {:?}, after {:?}", before.claims, app.claims),
    );
    let new_uid = app.statefulset_uid.clone().unwrap_or_default();
    let recreated =
        !new_uid.is_empty() && before.statefulset_uid.as_deref() != Some(new_uid.as_str());
    p.check(
        recreated,
        &format!(
            "StatefulSet re-created: uid {} → {}, template at {size}",
            short(before.statefulset_uid.as_deref().unwrap_or_default()),
            short(&new_uid)
        ),
        || format!("live uid {new_uid}, before {:?}", before.statefulset_uid),
    );
    let kept = app.pods.len() == t.w.replicas
        && app.pods.iter().all(|(name, pod)| {
            before.pods.get(name).is_some_and(|b| b.uid == pod.uid)
                && pod.owner_uid.as_deref() == Some(new_uid.as_str())
                && pod.phase == "Running"
        });
    p.check(
        kept,
        "its pods were kept: same uids, Running, adopted by the new StatefulSet (nothing restarted)",
        || format!("before {:?}, after {:?}", before.pods, app.pods),
    );
    app
}

/// The followed claims of `t` in the record of `published`, once `pred` holds for each.
async fn volumes_until(
    w: &World,
    t: &Target,
    published: &Published,
    pred: impl Fn(&Volume) -> bool,
) -> Result<Vec<Volume>, String> {
    let volumes = |r: &RevisionRecord| -> Vec<Volume> {
        r.statefulsets
            .iter()
            .find(|e| e.namespace == APP_NS && e.name == t.statefulset())
            .map(|e| e.volumes.clone())
            .unwrap_or_default()
    };
    w.service
        .record_until(
            FLUX_NS,
            t.kustomization(),
            &published.revision,
            w.timeout,
            |r| {
                let v = volumes(r);
                v.len() == t.w.replicas && v.iter().all(&pred)
            },
        )
        .await
        .map(|r| volumes(&r))
}

fn listed(volumes: &[Volume]) -> String {
    volumes
        .iter()
        .map(|v| {
            format!(
                "{} {} ({} → {})",
                v.claim,
                v.state,
                v.capacity.as_deref().unwrap_or("?"),
                v.requested.as_deref().unwrap_or("?")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Event on `t`'s Kustomization with `reason` (events.k8s.io, as the service records it)
/// and how often it happened: a repeat of the same reason on the same object is counted in the
/// first Event's `series` (kube's recorder aggregates them, as client-go's does), so the note
/// is the first occurrence's.
fn occurrences(w: &World, t: &Target, reason: &str) -> (u64, Option<(String, String)>) {
    let found: Vec<serde_json::Value> = w
        .fake
        .list("events.k8s.io/v1", "Event", Some(FLUX_NS))
        .into_iter()
        .filter(|e| e["regarding"]["name"] == t.kustomization() && e["reason"] == reason)
        .collect();
    let count = found
        .iter()
        .map(|e| e["series"]["count"].as_u64().unwrap_or(1))
        .sum();
    let first = found.first().map(|e| {
        (
            e["type"].as_str().unwrap_or_default().to_string(),
            e["note"].as_str().unwrap_or_default().to_string(),
        )
    });
    (count, first)
}

/// Waits for one more occurrence of the Event `reason` on `t`'s Kustomization than `before`.
async fn event(
    w: &World,
    p: &mut Progress,
    t: &Target,
    published: &Published,
    reason: &str,
    before: u64,
    text: &str,
) {
    let seen = cluster::until(
        w.timeout,
        || occurrences(w, t, reason),
        |(count, _)| *count > before,
    )
    .await;
    let ok = seen.is_ok();
    let (count, first) = seen.unwrap_or_else(|e| e);
    p.check(
        ok,
        &format!(
            "{text}: Event {reason} ({}) on Kustomization {FLUX_NS}/{}{}",
            first.as_ref().map(|e| e.0.as_str()).unwrap_or("?"),
            t.kustomization(),
            if count > 1 {
                format!(" (its series counts {count})")
            } else {
                String::new()
            }
        ),
        || format!("{count} occurrence(s), {first:?}"),
    );
    if let Some((_, note)) = first.filter(|(_, n)| n.contains(&published.revision)) {
        p.detail(&note);
    }
}

/// The driver grows `t`'s claims in steps; the converger follows each (watches of the claims
/// and their Events) and says so in the record, until every claim holds `size`.
async fn grow_in_steps(w: &World, p: &mut Progress, t: &Target, published: &Published, size: &str) {
    let waiting = volumes_until(w, t, published, |v| {
        matches!(v.state, VolumeState::Requested | VolumeState::Recovered)
    })
    .await;
    p.check(
        waiting.is_ok(),
        &format!(
            "the converger follows the claims until they grow: {}",
            waiting.as_deref().map(listed).unwrap_or_default()
        ),
        || waiting.clone().err().unwrap_or_default(),
    );
    let (grown_before, _) = occurrences(w, t, "VolumesGrown");
    for claim in claims(&t.w) {
        if let Err(e) = w.resizer.start(APP_NS, &claim).await {
            p.fail("the resizer started", e.to_string());
        }
    }
    let resizing = volumes_until(w, t, published, |v| v.state == VolumeState::Resizing).await;
    p.check(
        resizing.is_ok(),
        &format!(
            "the resizer started (ControllerResizeInProgress): the record says {}",
            resizing.as_deref().map(listed).unwrap_or_default()
        ),
        || resizing.clone().err().unwrap_or_default(),
    );
    for claim in claims(&t.w) {
        if let Err(e) = w.resizer.finish(APP_NS, &claim).await {
            p.fail("the resizer finished", e.to_string());
        }
    }
    let grown = volumes_until(w, t, published, |v| {
        v.state == VolumeState::Grown && v.capacity.as_deref() == Some(size)
    })
    .await;
    p.check(
        grown.is_ok(),
        &format!(
            "the volumes grew: the record says {}",
            grown.as_deref().map(listed).unwrap_or_default()
        ),
        || grown.clone().err().unwrap_or_default(),
    );
    event(
        w,
        p,
        t,
        published,
        "VolumesGrown",
        grown_before,
        "every claim of the revision grew",
    )
    .await;
}

/// The driver refuses `size` for good: each claim `infeasible`, as loudly as a refusal.
async fn refused_by_the_driver(
    w: &World,
    p: &mut Progress,
    t: &Target,
    published: &Published,
    size: &str,
) {
    let (infeasible_before, _) = occurrences(w, t, "VolumeResizeInfeasible");
    for claim in claims(&t.w) {
        let why = format!("{size} is more than the volume type's maximum of {DRIVER_MAX}");
        let refused = async {
            w.resizer.start(APP_NS, &claim).await?;
            w.resizer.infeasible(APP_NS, &claim, &why).await
        };
        if let Err(e) = refused.await {
            p.fail("the resizer answered", e.to_string());
        }
    }
    let infeasible = volumes_until(w, t, published, |v| {
        v.state == VolumeState::Infeasible
            && v.message.as_deref().is_some_and(|m| m.contains(DRIVER_MAX))
    })
    .await;
    p.check(
        infeasible.is_ok(),
        &format!(
            "the driver refused {size} for good: the record says {}",
            infeasible.as_deref().map(listed).unwrap_or_default()
        ),
        || infeasible.clone().err().unwrap_or_default(),
    );
    if let Some(v) = infeasible.as_ref().ok().and_then(|v| v.first()) {
        p.detail(v.message.as_deref().unwrap_or_default());
    }
    event(
        w,
        p,
        t,
        published,
        "VolumeResizeInfeasible",
        infeasible_before,
        "said as loudly as a refusal",
    )
    .await;
    p.detail("the revision stays converged and applied by Flux: only the volumes have not grown; git must change");
}

/// A size declared back down after a failed expansion: converged as a recovery.
#[allow(clippy::too_many_arguments)]
async fn recovered(
    w: &World,
    p: &mut Progress,
    t: &Target,
    published: &Published,
    record: &RevisionRecord,
    before: &App,
    mark: u64,
    size: &str,
) -> App {
    p.check(
        record.state == RevisionState::Converged,
        "the converger converged the revision as a recovery (a size declared back down is not refused as a shrink here)",
        || format!("state {}: {:?}", record.state.as_str(), record.statefulsets),
    );
    let entry = record
        .statefulsets
        .iter()
        .find(|e| e.namespace == APP_NS && e.name == t.statefulset());
    let volumes = entry.map(|e| e.volumes.clone()).unwrap_or_default();
    p.check(
        volumes.len() == t.w.replicas
            && volumes
                .iter()
                .all(|v| v.state == VolumeState::Recovered && v.requested.as_deref() == Some(size)),
        &format!("its claims are recovered: {}", listed(&volumes)),
        || format!("{entry:?}"),
    );
    if let Some(v) = volumes.first() {
        p.detail(v.message.as_deref().unwrap_or_default());
    }
    let app = recreated_with(w, p, t, before, size, "lowered").await;
    event(
        w,
        p,
        t,
        published,
        "VolumeResizeRecovered",
        0,
        "the recovery is announced",
    )
    .await;
    handed_off(w, p, t, published, record, mark).await;
    app
}

async fn refused(
    w: &World,
    p: &mut Progress,
    t: &Target,
    published: &Published,
    previous: Option<&Published>,
    record: &RevisionRecord,
    before: &App,
) -> App {
    let entry = record
        .statefulsets
        .iter()
        .find(|e| e.namespace == APP_NS && e.name == t.statefulset());
    let refusal = entry.and_then(|e| e.refusal.as_ref());
    p.check(
        record.state == RevisionState::Refused
            && refusal.is_some_and(|r| r.code == flux_converger::model::RefusalCode::Shrink),
        &format!(
            "the converger refused it: {}",
            refusal
                .map(|r| format!("({}) {}", r.code, r.message))
                .unwrap_or_default()
        ),
        || format!("state {}, {entry:?}", record.state.as_str()),
    );
    p.check(
        record.handoff.is_none(),
        if t.gate == GateMode::Artifact {
            "it did not publish the revision (no hand-off in the record)"
        } else {
            "it did not hand the revision to Flux"
        },
        || format!("{:?}", record.handoff),
    );
    let f = cluster::flux(&w.fake, t.kustomization());
    match t.gate {
        GateMode::Suspend => {
            p.check(
                f.suspended && f.attempted != published.revision && f.applied != published.revision,
                "Flux never attempted it: the Kustomization stays suspended at the last good revision",
                || format!("{f:?}"),
            );
        }
        GateMode::Artifact => not_published(w, p, t, published, previous).await,
        _ => {
            // Not gated: Flux tries the revision on its own, and the API server refuses it.
            let tried = cluster::until(
                w.timeout,
                || cluster::flux(&w.fake, t.kustomization()),
                |f| f.attempted == published.revision && f.ready == "False",
            )
            .await;
            let ok = tried.is_ok();
            let f = tried.unwrap_or_else(|f| f);
            p.check(
                ok && f.applied != published.revision,
                &format!(
                    "Flux tried it on its own and the API server refused it: {}",
                    f.message
                ),
                || format!("{f:?}"),
            );
        }
    }
    let app = cluster::app(&w.fake, &t.w);
    p.check(
        app == *before,
        &format!(
            "nothing was written: same StatefulSet {APP_NS}/{}, same pods, claims still 2Gi",
            t.statefulset()
        ),
        || format!("before {before:?}, after {app:?}"),
    );
    app
}

/// The artifact gate on a refused revision: the ExternalArtifact keeps the last converged
/// revision and says why in `Ready=False`; Flux never sees the refused one.
async fn not_published(
    w: &World,
    p: &mut Progress,
    t: &Target,
    published: &Published,
    previous: Option<&Published>,
) {
    let Some(previous) = previous else {
        p.fail(
            "the ExternalArtifact keeps the previous revision",
            "no previous revision".into(),
        );
        return;
    };
    let named = format!("StatefulSet {APP_NS}/{} refused (shrink)", t.statefulset());
    let seen = cluster::until(
        w.timeout,
        || cluster::external_artifact(&w.fake, EXTERNAL_ARTIFACT),
        |a| a.ready == "False",
    )
    .await;
    let ok = seen.is_ok();
    let a = seen.unwrap_or_else(|a| a);
    p.check(
        ok && a.revision == previous.revision
            && a.digest == previous.digest
            && a.reason == "ConvergeRefused"
            && a.message.contains(&published.revision)
            && a.message.contains(&named),
        &format!(
            "not published: ExternalArtifact {FLUX_NS}/{EXTERNAL_ARTIFACT} keeps {} (the last converged revision) in status.artifact, Ready=False {} \"{}\"",
            short_rev(&a.revision),
            a.reason,
            a.message
        ),
        || format!("{a:?}"),
    );
    let served = fetch(&a.url).await;
    p.check(
        matches!(&served, Ok(bytes) if sha256(bytes) == previous.digest),
        &format!(
            "Flux's fetch still gets {}'s bytes from the converger's artifact server",
            short_rev(&previous.revision)
        ),
        || match &served {
            Ok(bytes) => format!("{} (expected {})", sha256(bytes), previous.digest),
            Err(e) => e.clone(),
        },
    );
    let f = cluster::flux(&w.fake, t.kustomization());
    let attempts: Vec<String> = w
        .flux
        .reconciled()
        .into_iter()
        .filter(|r| r.name == t.kustomization() && r.revision == published.revision)
        .map(|r| format!("{r:?}"))
        .collect();
    p.check(
        f.attempted == previous.revision
            && f.applied == previous.revision
            && f.ready == "True"
            && attempts.is_empty(),
        &format!(
            "Flux never attempted it: Kustomization {FLUX_NS}/{} stays at {} (lastAttemptedRevision and lastAppliedRevision, Ready=True), no attempt in kustomize-controller's log",
            t.kustomization(),
            short_rev(&f.attempted)
        ),
        || format!("{f:?}, attempts {attempts:?}"),
    );
}
