//! The walk through the revisions: publish, announce, let the converger and Flux do their
//! jobs, then check what each was supposed to do against the cluster and `/status`.

use std::time::Duration;

use flux_converger::service::record::{
    FluxOutcome, GateMode, RevisionRecord, RevisionState, StatefulSetEntry, StatefulSetOutcome,
    Trigger,
};

use crate::cluster::{self, App};
use crate::flux_standin::{GitSource, Published, post_event};
use crate::progress::Progress;
use crate::scenario::{
    APP_NS, Expect, FLUX_NS, HISTORY, HMAC_KEY, KUSTOMIZATION, REPLICAS, Revision, STATEFULSET,
    TEMPLATE, claims, tree,
};
use crate::status::ServiceApi;
use crate::support::{FakeApiServer, Method};

pub struct World {
    pub fake: FakeApiServer,
    pub source: GitSource,
    pub service: ServiceApi,
    pub gate: GateMode,
    pub timeout: Duration,
}

pub async fn walk(w: &World, p: &mut Progress) {
    let mut before = App::default();
    for (i, revision) in HISTORY.iter().enumerate() {
        p.section(&format!("revision {}: {}", i + 1, revision.message));
        let mark = w.fake.requests().last().map_or(0, |r| r.id);
        let Some((published, record)) = publish_and_wait(w, p, revision).await else {
            return;
        };
        describe(p, &record);
        before = match revision.expect {
            Expect::Applied => applied(w, p, &published, &record).await,
            Expect::Grown => grown(w, p, &published, &record, &before).await,
            Expect::Refused => refused(w, p, &published, &record, &before, mark).await,
        };
    }
    p.section("never deleted");
    let deletes: Vec<String> = w
        .fake
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

/// Publishes `revision`, posts notification-controller's hook, waits for the service's record.
async fn publish_and_wait(
    w: &World,
    p: &mut Progress,
    revision: &Revision,
) -> Option<(Published, RevisionRecord)> {
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
            p.check(
                (200..300).contains(&d.status)
                    && d.body.contains(&format!("{FLUX_NS}/{KUSTOMIZATION}")),
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
    match w
        .service
        .finished(FLUX_NS, KUSTOMIZATION, &published.revision, w.timeout)
        .await
    {
        Ok(record) => Some((published, record)),
        Err(e) => {
            p.fail("the converger finished the revision (GET /status)", e);
            None
        }
    }
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

async fn flux_applied(w: &World, p: &mut Progress, published: &Published, record: &RevisionRecord) {
    p.check(
        record.flux.as_ref().is_some_and(|f| {
            f.outcome == FluxOutcome::Applied
                && f.applied_revision.as_deref() == Some(published.revision.as_str())
        }),
        "the converger saw Flux apply the revision",
        || format!("{:?}", record.flux),
    );
    let flux = cluster::until(
        w.timeout,
        || cluster::flux(&w.fake),
        |f| {
            f.applied == published.revision
                && f.ready == "True"
                && (w.gate != GateMode::Suspend || f.suspended)
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
    if w.gate == GateMode::Suspend {
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
    published: &Published,
    record: &RevisionRecord,
) -> App {
    p.check(
        record.state == RevisionState::Converged,
        "the converger had nothing to grow and handed the revision to Flux",
        || format!("state {}", record.state.as_str()),
    );
    flux_applied(w, p, published, record).await;
    let settled = cluster::until(
        w.timeout,
        || cluster::app(&w.fake),
        |a| {
            a.template.as_deref() == Some("1Gi")
                && a.pods.len() == REPLICAS
                && a.pods.values().all(|pod| pod.phase == "Running")
                && a.claims.len() == REPLICAS
                && a.claims.values().all(|c| c.phase == "Bound")
        },
    )
    .await;
    let ok = settled.is_ok();
    let app = settled.unwrap_or_else(|a| a);
    p.check(
        ok && app.appliers == ["kustomize-controller"],
        &format!(
            "StatefulSet {APP_NS}/{STATEFULSET} created by kustomize-controller (uid {}), {REPLICAS} pods Running, {REPLICAS} claims Bound at 1Gi",
            short(app.statefulset_uid.as_deref().unwrap_or_default())
        ),
        || format!("{app:?}"),
    );
    for (name, pod) in &app.pods {
        p.detail(&format!("pod {name} uid {}", short(&pod.uid)));
    }
    app
}

async fn grown(
    w: &World,
    p: &mut Progress,
    published: &Published,
    record: &RevisionRecord,
    before: &App,
) -> App {
    p.check(
        record.state == RevisionState::Converged,
        "the converger converged the revision",
        || format!("state {}: {:?}", record.state.as_str(), record.error),
    );
    let entry = record
        .statefulsets
        .iter()
        .find(|e| e.namespace == APP_NS && e.name == STATEFULSET);
    let decided = entry.is_some_and(|e| {
        e.outcome == StatefulSetOutcome::Converged
            && e.templates
                .iter()
                .any(|t| t.template == TEMPLATE && t.to == "2Gi")
    });
    p.check(
        decided,
        "it decided: only the data template grew, 1Gi → 2Gi",
        || format!("{entry:?}"),
    );
    let mut recorded: Vec<String> = entry
        .map(|e| e.claims.iter().map(|c| c.claim.clone()).collect())
        .unwrap_or_default();
    recorded.sort();
    p.check(
        recorded == claims(),
        &format!("it grew the claims {}", claims().join(", ")),
        || format!("recorded {recorded:?}"),
    );
    let settled = cluster::until(
        w.timeout,
        || cluster::app(&w.fake),
        |a| {
            a.claims
                .values()
                .all(|c| c.request == "2Gi" && c.capacity == "2Gi")
                && a.template.as_deref() == Some("2Gi")
        },
    )
    .await;
    let ok = settled.is_ok();
    let app = settled.unwrap_or_else(|a| a);
    p.check(
        ok,
        "claims requests are 2Gi (and the resizer brought their capacity to 2Gi)",
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
    let recreated = !new_uid.is_empty()
        && before.statefulset_uid.as_deref() != Some(new_uid.as_str())
        && entry.is_some_and(|e| {
            e.old_uid == before.statefulset_uid && e.new_uid.as_deref() == Some(new_uid.as_str())
        });
    p.check(
        recreated,
        &format!(
            "StatefulSet re-created: uid {} → {}, template at 2Gi",
            short(before.statefulset_uid.as_deref().unwrap_or_default()),
            short(&new_uid)
        ),
        || {
            format!(
                "live uid {new_uid}, record {:?}",
                entry.map(|e| (&e.old_uid, &e.new_uid))
            )
        },
    );
    let kept = app.pods.len() == REPLICAS
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
    flux_applied(w, p, published, record).await;
    app
}

async fn refused(
    w: &World,
    p: &mut Progress,
    published: &Published,
    record: &RevisionRecord,
    before: &App,
    mark: u64,
) -> App {
    let entry = record
        .statefulsets
        .iter()
        .find(|e| e.namespace == APP_NS && e.name == STATEFULSET);
    let refusal = entry.and_then(|e| e.refusal.as_ref());
    p.check(
        record.state == RevisionState::Refused && refusal.is_some_and(|r| r.code == "shrink"),
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
        "it did not hand the revision to Flux",
        || format!("{:?}", record.handoff),
    );
    let f = cluster::flux(&w.fake);
    match w.gate {
        GateMode::Suspend => {
            p.check(
                f.suspended && f.attempted != published.revision && f.applied != published.revision,
                "Flux never attempted it: the Kustomization stays suspended at the last good revision",
                || format!("{f:?}"),
            );
        }
        _ => {
            // Not gated: Flux tries the revision on its own, and the API server refuses it.
            let tried = cluster::until(
                w.timeout,
                || cluster::flux(&w.fake),
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
        "no write reached the StatefulSet, its claims or its pods since the revision was published",
        || writes.join(", "),
    );
    let app = cluster::app(&w.fake);
    p.check(
        app == *before,
        "nothing was written: same StatefulSet, same pods, claims still 2Gi",
        || format!("before {before:?}, after {app:?}"),
    );
    app
}
