//! The Argo CD walk (docs/argocd.md): the same wedge for an Argo CD Application. Argo CD's
//! application-controller and its API server's managed-resources endpoint are the test
//! stand-ins (`test_support::argocd_standin`), as Flux's controllers are: the controller
//! compares, auto-syncs and applies with client-side apply as `argocd-controller`, retrying a
//! failed sync once; the API server answers what Argo CD applies, over HTTPS with a CA made at
//! start, for a bearer token.
//!
//! The Application `argocd/db` (opted in with `flux-converger.io/gate: reconcile`, auto-sync with
//! self-heal, `retry: {limit: 1}`) deploys the StatefulSet `default/db`. Its git goes through
//! three revisions: applied by Argo CD as it is; grown, on which Argo CD's sync stops on the
//! immutable-field error once its retry is used up, and the converger converges (claims grown,
//! pods kept) and hands the Application back with a sync operation carrying its nonce, which
//! Argo CD runs; shrunk, which stops Argo CD the same way and which the converger refuses,
//! handing nothing back. Each step is checked against the cluster and
//! `/status/applications/argocd/db`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use flux_converger::argocd::application::Application;
use flux_converger::model::{FluxOutcome, RevisionRecord, RevisionState, Trigger, VolumeState};
use flux_converger::service::application::ArgoCdConfig;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::cluster::{self, App};
use crate::progress::Progress;
use crate::scenario::{APP_NS, Workload, claims};
use crate::status::ServiceApi;
use crate::volumes::Resizer;
use fake_apiserver::FakeApiServer;
use test_support::argocd_standin::{
    ARGOCD_MANAGER, ArgoCdController, ArgoCdOptions, ArgoCdServer, IMMUTABLE, Repo,
    application_resource, statefulset,
};

/// Argo CD's namespace: its Applications, its AppProjects, `argocd-cm`.
pub const ARGO_NS: &str = "argocd";
/// The Application, and the StatefulSet it deploys.
pub const APP: &str = "db";
/// `db`, in `default`, deployed by the Application `argocd/db` (not by a Kustomization).
const DB: Workload = Workload {
    statefulset: APP,
    replicas: 2,
    kustomization: APP,
    path: APP,
};
/// The token Argo CD's API server stand-in takes (`--argocd-token-file`'s content).
const TOKEN: &str = "demo-argocd-token";
/// The bearer token of `POST /hook/argocd` (`--argocd-hook-token-file`'s content).
const HOOK_TOKEN: &str = "demo-argocd-hook-token";

/// What a revision of `db`'s git should lead to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Argo CD syncs it as it is; the converger waits.
    Synced,
    /// Argo CD stops; the converger converges and hands back; Argo CD syncs.
    Converged,
    /// Argo CD stops; the converger refuses (a shrink) and hands nothing back.
    Refused,
}

struct Revision {
    /// A git commit, as Argo CD names a revision.
    sha: &'static str,
    message: &'static str,
    size: &'static str,
    expect: Expect,
}

const HISTORY: [Revision; 3] = [
    Revision {
        sha: "5d1c0a2e9f8b7a6c5d4e3f2a1b0c9d8e7f6a5b4c",
        message: "db: 2 replicas with a 1Gi data volume",
        size: "1Gi",
        expect: Expect::Synced,
    },
    Revision {
        sha: "a7e3c9f1b5d2e8a4c6f0b3d9e1a5c7f2b4d6e8a0",
        message: "db: grow the data volume to 2Gi",
        size: "2Gi",
        expect: Expect::Converged,
    },
    Revision {
        sha: "0c4f8a2d6e1b5c9f3a7d0e4b8c2f6a1d5e9b3c7f",
        message: "db: shrink the data volume back to 1Gi",
        size: "1Gi",
        expect: Expect::Refused,
    },
];

/// Argo CD's stand-ins and what the service's `--argocd-*` flags name.
pub struct Argo {
    repo: Repo,
    server: ArgoCdServer,
    /// Runs while held.
    _controller: ArgoCdController,
    /// Holds the token file.
    _dir: tempfile::TempDir,
    /// `--argocd-server`, `--argocd-token-file`, `--argocd-ca-file`, `--argocd-namespaces`,
    /// `--argocd-hook-token-file`.
    pub config: ArgoCdConfig,
}

/// Argo CD in the demo's cluster, before the service starts: its namespace and `default`
/// AppProject (as Argo CD's install creates them), the API server stand-in, the Application
/// (no revision in its git yet) and the application-controller stand-in.
pub async fn start(fake: &FakeApiServer, client: &kube::Client) -> anyhow::Result<Argo> {
    fake.seed(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": ARGO_NS, "labels": {"kubernetes.io/metadata.name": ARGO_NS}}}));
    fake.seed(
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": {"name": "default", "namespace": ARGO_NS},
        "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                 "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}}),
    );
    let repo = Repo::default();
    let server = ArgoCdServer::start_with(TOKEN, repo.clone())
        .await
        .context("Argo CD's API server stand-in")?;
    let dir = tempfile::tempdir().context("a directory for the tokens")?;
    let token_file: PathBuf = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).context("writing the Argo CD token file")?;
    let config = ArgoCdConfig {
        namespaces: vec![ARGO_NS.to_string()],
        server: server.url.clone(),
        token_file,
        ca_file: Some(server.ca_file.clone()),
        hook_token: Some(HOOK_TOKEN.to_string()),
    };
    let apps: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ARGO_NS, &application_resource());
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": APP, "namespace": ARGO_NS,
                     "annotations": {"flux-converger.io/gate": "reconcile"}},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://git.example.com/team/deploy.git", "path": "db",
                            "targetRevision": "main"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": APP_NS},
                 "syncPolicy": {"automated": {"prune": true, "selfHeal": true},
                                "retry": {"limit": 1}}}}))
    .context("the Application")?;
    apps.create(&PostParams::default(), &app)
        .await
        .with_context(|| format!("creating Application {ARGO_NS}/{APP}"))?;
    let controller =
        ArgoCdController::start(client.clone(), repo.clone(), ArgoCdOptions::default());
    Ok(Argo {
        repo,
        server,
        _controller: controller,
        _dir: dir,
        config,
    })
}

impl Argo {
    /// One line for the setup's listing.
    pub fn describe(&self, p: &Progress) {
        p.did(&format!(
            "Argo CD stand-ins: the API server (managed-resources over HTTPS on {}, a CA made at start, a bearer token) and the application-controller (auto-sync, client-side apply as {ARGOCD_MANAGER}, retries)",
            self.server.url
        ));
        p.did(&format!(
            "Application {ARGO_NS}/{APP} (flux-converger.io/gate: reconcile; destination in-cluster, namespace {APP_NS}; auto-sync with self-heal, retry limit 1)"
        ));
    }
}

pub struct World<'a> {
    pub fake: &'a FakeApiServer,
    pub argo: &'a Argo,
    pub service: &'a ServiceApi,
    pub resizer: &'a Resizer,
    pub timeout: Duration,
}

fn detail_path() -> String {
    format!("/status/applications/{ARGO_NS}/{APP}")
}

fn application(fake: &FakeApiServer) -> Option<Application> {
    let app = fake.get("argoproj.io/v1alpha1", "Application", Some(ARGO_NS), APP)?;
    serde_json::from_value(app).ok()
}

/// Polls the Application in the API server's store until `pred` holds.
async fn app_until(
    w: &World<'_>,
    pred: impl Fn(&Application) -> bool,
) -> Result<Application, String> {
    let deadline = Instant::now() + w.timeout;
    loop {
        let app = application(w.fake);
        match app {
            Some(a) if pred(&a) => return Ok(a),
            _ if Instant::now() >= deadline => {
                return Err(format!("after {:?}: {app:?}", w.timeout));
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn synced_at(app: &Application, sha: &str) -> bool {
    !app.operation_requested()
        && app.operation_state().is_some_and(|s| s.completed())
        && app.sync_status() == "Synced"
        && app.sync_revision().revision == sha
}

/// Argo CD's sync of `sha` stopped on the immutable-field error: failed, retries used up,
/// `.operation` cleared.
fn stopped_at(app: &Application, sha: &str) -> bool {
    !app.operation_requested()
        && app.operation_state().is_some_and(|s| {
            s.phase == "Failed" && s.message.contains(IMMUTABLE) && s.revision().revision == sha
        })
}

pub async fn walk(w: &World<'_>, p: &mut Progress) {
    let mut before = App::default();
    for (i, revision) in HISTORY.iter().enumerate() {
        p.section(&format!(
            "Argo CD, revision {}: {} ({})",
            i + 1,
            revision.message,
            &revision.sha[..8]
        ));
        let mark = w.fake.requests().last().map_or(0, |r| r.id);
        let mut sts = statefulset(APP_NS, APP, revision.size);
        sts["spec"]["replicas"] = json!(DB.replicas);
        w.argo
            .repo
            .publish(ARGO_NS, APP, revision.sha, APP_NS, &[sts]);
        p.did(&format!(
            "git of Application {ARGO_NS}/{APP} at {}: StatefulSet {APP_NS}/{APP} with {} replicas, data volume {}",
            revision.sha,
            DB.replicas,
            revision.size
        ));
        let ok = match revision.expect {
            Expect::Synced => synced(w, p, revision).await,
            Expect::Converged => converged(w, p, revision, &before).await,
            Expect::Refused => refused(w, p, revision, &before, mark).await,
        };
        if !ok {
            return;
        }
        before = cluster::app(w.fake, &DB);
    }
}

/// Argo CD applies the first revision; the converger, watching, has nothing to do and says why.
async fn synced(w: &World<'_>, p: &mut Progress, revision: &Revision) -> bool {
    let app = app_until(w, |a| synced_at(a, revision.sha)).await;
    if !p.check(
        app.is_ok(),
        "Argo CD's auto-sync applied it: the Application is Synced, its sync Succeeded",
        || app.clone().err().unwrap_or_default(),
    ) {
        return false;
    }
    let deadline = Instant::now() + w.timeout;
    let ready = loop {
        let now = cluster::app(w.fake, &DB);
        if now.pods.len() == DB.replicas && now.claims.values().all(|c| c.phase == "Bound") {
            break Ok(now);
        }
        if Instant::now() >= deadline {
            break Err(format!("{now:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    p.check(
        ready.as_ref().is_ok_and(|a| a.claims.len() == DB.replicas),
        &format!(
            "the StatefulSet controller made {} pods and {} claims at {}, bound",
            DB.replicas, DB.replicas, revision.size
        ),
        || ready.clone().err().unwrap_or_default(),
    );
    let waiting = waiting_until(w, |why| why.contains("sync succeeded")).await;
    p.check(
        waiting.is_ok(),
        &format!(
            "the converger watches it and writes nothing: /status says \"{}\"",
            waiting.as_deref().unwrap_or_default()
        ),
        || waiting.clone().err().unwrap_or_default(),
    )
}

/// `waiting` of the Application's detail, once it satisfies `pred`.
async fn waiting_until(w: &World<'_>, pred: impl Fn(&str) -> bool) -> Result<String, String> {
    let deadline = Instant::now() + w.timeout;
    let mut last = Value::Null;
    while Instant::now() < deadline {
        let detail = w.service.detail(&detail_path()).await?;
        if let Some(why) = detail["waiting"].as_str()
            && pred(why)
        {
            return Ok(why.to_string());
        }
        last = detail;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("after {:?}: {last}", w.timeout))
}

/// Argo CD stops on the grown StatefulSet; the converger converges and hands back; Argo CD
/// syncs the revision with the converger's operation.
async fn converged(w: &World<'_>, p: &mut Progress, revision: &Revision, before: &App) -> bool {
    if !argo_stopped(w, p, revision).await {
        return false;
    }
    wake(w, p).await;
    let record = w
        .service
        .record_until_at(&detail_path(), revision.sha, w.timeout, |r| {
            r.state != RevisionState::Running
                && (r.state != RevisionState::Converged
                    || r.flux
                        .as_ref()
                        .is_some_and(|f| f.outcome != FluxOutcome::Pending))
        })
        .await;
    let Ok(record) = record else {
        p.fail(
            "the converger recorded the revision and Argo CD's answer (GET /status/applications/...)",
            record.err().unwrap_or_default(),
        );
        return false;
    };
    describe(p, &record);
    p.check(
        record.state == RevisionState::Converged,
        "converged",
        || format!("{record:?}"),
    );
    let now = cluster::app(w.fake, &DB);
    let grown: Vec<String> = now
        .claims
        .iter()
        .filter(|(name, c)| {
            c.request == revision.size && before.claims.get(*name).is_some_and(|b| b.uid == c.uid)
        })
        .map(|(name, _)| name.clone())
        .collect();
    p.check(
        grown.len() == DB.replicas,
        &format!(
            "claims {} grown to {} in place (same uids)",
            claims(&DB).join(", "),
            revision.size
        ),
        || format!("{:?}", now.claims),
    );
    p.check(
        now.statefulset_uid.is_some()
            && now.statefulset_uid != before.statefulset_uid
            && now.template.as_deref() == Some(revision.size),
        &format!(
            "StatefulSet {APP_NS}/{APP} re-created with the {} template",
            revision.size
        ),
        || {
            format!(
                "uid {:?} → {:?}",
                before.statefulset_uid, now.statefulset_uid
            )
        },
    );
    let pods_kept = now.pods.len() == DB.replicas
        && now
            .pods
            .iter()
            .all(|(name, pod)| before.pods.get(name).is_some_and(|b| b.uid == pod.uid));
    p.check(
        pods_kept,
        "the same pods, adopted by the new StatefulSet: nothing restarted",
        || format!("before {:?}, now {:?}", before.pods, now.pods),
    );
    let managers = managers(w.fake);
    p.check(
        managers == [(ARGOCD_MANAGER.to_string(), "Update".to_string())],
        &format!(
            "re-created as Argo CD writes it: field manager {ARGOCD_MANAGER}, operation Update (client-side apply), tracking annotation kept"
        ),
        || format!("{managers:?}"),
    );
    let nonce = record.handoff.as_ref().and_then(|h| h.requested_at.clone());
    let app = app_until(w, |a| synced_at(a, revision.sha)).await;
    let by_us = app
        .as_ref()
        .ok()
        .and_then(|a| a.operation_state())
        .map(|s| {
            (
                s.phase.clone(),
                s.operation
                    .initiated_by
                    .as_ref()
                    .map(|i| i.username.clone()),
                s.info("flux-converger").map(str::to_string),
            )
        });
    p.check(
        nonce.is_some()
            && by_us
                == Some((
                    "Succeeded".to_string(),
                    Some("flux-converger".to_string()),
                    nonce.clone(),
                )),
        &format!(
            "handed back: a sync operation initiated by flux-converger with nonce {}; Argo CD's sync Succeeded, the Application is Synced at {}",
            nonce.as_deref().unwrap_or("?"),
            &revision.sha[..8]
        ),
        || format!("{by_us:?}, record handoff {:?}", record.handoff),
    );
    p.check(
        record
            .flux
            .as_ref()
            .is_some_and(|f| f.outcome == FluxOutcome::Applied),
        "the record: Argo CD's answer `applied`",
        || format!("{:?}", record.flux),
    );
    let events = events(w.fake, "Converged");
    p.check(
        events > 0,
        &format!("a Converged Event on Application {ARGO_NS}/{APP}"),
        || "none".to_string(),
    );
    // The volumes grow (the resizer), and the converger follows them.
    for claim in claims(&DB) {
        if let Err(e) = w.resizer.finish(APP_NS, &claim).await {
            p.fail("the resizer grew the claim", e.to_string());
        }
    }
    let volumes = w
        .service
        .record_until_at(&detail_path(), revision.sha, w.timeout, |r| {
            let v: Vec<_> = r.statefulsets.iter().flat_map(|e| &e.volumes).collect();
            v.len() == DB.replicas && v.iter().all(|v| v.state == VolumeState::Grown)
        })
        .await;
    p.check(
        volumes.is_ok(),
        &format!(
            "the volumes grew to {}: the record says every claim `grown`",
            revision.size
        ),
        || volumes.clone().err().unwrap_or_default(),
    )
}

/// Argo CD's sync stops on the immutable-field error once its retry is used up.
async fn argo_stopped(w: &World<'_>, p: &mut Progress, revision: &Revision) -> bool {
    let app = app_until(w, |a| stopped_at(a, revision.sha)).await;
    let message = app
        .as_ref()
        .ok()
        .and_then(|a| a.operation_state())
        .map(|s| s.message.clone())
        .unwrap_or_default();
    let ok = p.check(
        app.is_ok(),
        "Argo CD's auto-sync failed on the StatefulSet and its retry too: the operation ended Failed",
        || app.clone().err().unwrap_or_default(),
    );
    if ok {
        p.detail(&message);
        p.detail(
            "without the converger it stays so: Argo CD never auto-syncs a failed revision again",
        );
    }
    ok
}

/// Argo CD's notifications post the wake-up (the body the shipped template renders) to
/// `/hook/argocd` with the hook token.
async fn wake(w: &World<'_>, p: &mut Progress) {
    let uid = w
        .fake
        .get("argoproj.io/v1alpha1", "Application", Some(ARGO_NS), APP)
        .and_then(|a| a["metadata"]["uid"].as_str().map(String::from))
        .unwrap_or_default();
    let body = json!({"kind": "Application", "namespace": ARGO_NS, "name": APP, "uid": uid});
    let answer = async {
        let r = reqwest::Client::new()
            .post(w.service.url("/hook/argocd"))
            .bearer_auth(HOOK_TOKEN)
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let code = r.status().as_u16();
        Ok::<_, String>((code, r.text().await.unwrap_or_default()))
    }
    .await;
    p.check(
        matches!(&answer, Ok((202, b)) if b.contains(&format!("Application/{ARGO_NS}/{APP}"))),
        &format!(
            "Argo CD's notifications (trigger on-sts-immutable) woke the converger: POST /hook/argocd answered {}",
            answer
                .as_ref()
                .map(|(c, b)| format!("{c} {}", b.trim()))
                .unwrap_or_default()
        ),
        || format!("{answer:?}"),
    );
}

/// Argo CD stops on the shrunk StatefulSet; the converger refuses it and hands nothing back.
async fn refused(
    w: &World<'_>,
    p: &mut Progress,
    revision: &Revision,
    before: &App,
    mark: u64,
) -> bool {
    if !argo_stopped(w, p, revision).await {
        return false;
    }
    let record = w
        .service
        .record_until_at(&detail_path(), revision.sha, w.timeout, |r| {
            r.state != RevisionState::Running
        })
        .await;
    let Ok(record) = record else {
        p.fail(
            "the converger recorded the revision (GET /status/applications/...)",
            record.err().unwrap_or_default(),
        );
        return false;
    };
    describe(p, &record);
    let code = record
        .statefulsets
        .iter()
        .find_map(|e| e.refusal.as_ref())
        .map(|r| r.code.as_str().to_string());
    p.check(
        record.state == RevisionState::Refused && code.as_deref() == Some("shrink"),
        "refused (shrink), before any write",
        || format!("{record:?}"),
    );
    let app = application(w.fake);
    p.check(
        record.handoff.is_none() && app.as_ref().is_some_and(|a| !a.operation_requested()),
        "not handed back: no sync operation written, the Application stays OutOfSync",
        || format!("{:?}", record.handoff),
    );
    let writes = wrote_to_workload(w.fake, mark);
    p.check(
        writes.is_empty(),
        "no write reached the StatefulSet, its claims or its pods since the revision was published (Argo CD's own attempts were refused)",
        || writes.join(", "),
    );
    let now = cluster::app(w.fake, &DB);
    p.check(
        now.statefulset_uid == before.statefulset_uid && now.pods == before.pods,
        "the StatefulSet and its pods are as they were",
        || format!("{now:?}"),
    );
    true
}

/// What the converger decided, as `/status/applications/...` reports it.
fn describe(p: &Progress, record: &RevisionRecord) {
    p.did(&format!(
        "the converger's record: {} (trigger: {})",
        record.state.as_str(),
        serde_json::to_value(record.trigger)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    ));
    if record.state != RevisionState::Refused && record.trigger != Trigger::Webhook {
        p.detail("(its watch saw Argo CD stop before the notification arrived: the wake-up is only a hint)");
    }
    for e in &record.statefulsets {
        let mut line = format!(
            "StatefulSet {}/{}: {}",
            e.namespace,
            e.name,
            serde_json::to_value(e.outcome)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        );
        for c in &e.claims {
            line.push_str(&format!("; claim {} {} → {}", c.claim, c.from, c.to));
        }
        if let Some(r) = &e.refusal {
            line.push_str(&format!("; refused ({}): {}", r.code, r.message));
        }
        p.detail(&line);
    }
    for warning in &record.warnings {
        p.detail(warning);
    }
}

/// `(manager, operation)` of the StatefulSet's spec and metadata.
fn managers(fake: &FakeApiServer) -> Vec<(String, String)> {
    fake.get("apps/v1", "StatefulSet", Some(APP_NS), APP)
        .and_then(|s| s["metadata"]["managedFields"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|m| m["subresource"] != "status")
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or_default().to_string(),
                m["operation"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Successful writes since `mark` to `db`, its claims or its pods.
fn wrote_to_workload(fake: &FakeApiServer, mark: u64) -> Vec<String> {
    let sts = format!("/statefulsets/{APP}");
    let claims = format!("/persistentvolumeclaims/data-{APP}-");
    let pods = format!("/pods/{APP}-");
    fake.writes()
        .into_iter()
        .filter(|r| r.id > mark && r.code.is_some_and(|c| (200..300).contains(&c)))
        .filter(|r| r.path.ends_with(&sts) || r.path.contains(&claims) || r.path.contains(&pods))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// How many times the service reported `reason` on the Application (events.k8s.io).
fn events(fake: &FakeApiServer, reason: &str) -> u64 {
    fake.list("events.k8s.io/v1", "Event", Some(ARGO_NS))
        .iter()
        .filter(|e| {
            e["regarding"]["kind"] == "Application"
                && e["regarding"]["name"] == APP
                && e["reason"] == reason
        })
        .map(|e| e["series"]["count"].as_u64().unwrap_or(1))
        .sum()
}
