//! The application-controller stand-in driven through each failure shape: the Application
//! status it leaves is the one docs/argocd.md quotes (and `argocd::act` converges on), the
//! re-create written as `argocd::recreate` says is taken over by the next sync, and the
//! hand-back's operation is run and answered with its nonce.

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use flux_converger::argocd::act::{self, Act, IMMUTABLE_ERROR, Memory, Named, Shape};
use flux_converger::argocd::application::Application;
use flux_converger::argocd::operation::{self, HandBack};
use flux_converger::argocd::recreate::{self, Operation};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use test_support::argocd_standin::{
    ArgoCdController, ArgoCdOptions, Repo, StateWritten, statefulset,
};

const REV_A: &str = "1c9d7e5f3a1b0c2d4e6f8a9b7c5d3e1f0a2b4c6d";
const REV_B: &str = "8e1f0c5b2d7a4f6e9c3b1a0d5e7f9a2c4b6d8e0f";
const WAIT: Duration = Duration::from_secs(20);

fn world() -> FakeApiServer {
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::new();
    for ns in ["argocd", "apps"] {
        fake.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    fake.seed_yaml(
        &std::fs::read_to_string(fake_apiserver::fixture_path("v1.28/storageclasses.yaml"))
            .unwrap(),
    );
    fake
}

fn config_map() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "db-config"},
           "data": {"mode": "primary"}})
}

fn publish(repo: &Repo, revision: &str, size: &str) {
    repo.publish(
        "argocd",
        "db",
        revision,
        "apps",
        &[config_map(), statefulset("apps", "db", size)],
    );
}

async fn create_application(fake: &FakeApiServer, annotations: Value, sync_policy: Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        fake.client(),
        "argocd",
        &test_support::argocd_standin::application_resource(),
    );
    let mut annotations = annotations;
    annotations["flux-converger.io/gate"] = json!("reconcile");
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "db", "namespace": "argocd", "annotations": annotations},
        "spec": {"project": "default",
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "apps"},
                 "source": {"repoURL": "https://git.example.com/team/deploy.git", "path": "db", "targetRevision": "main"},
                 "syncPolicy": sync_policy}}))
    .unwrap();
    api.create(&PostParams::default(), &app).await.unwrap();
}

fn apps(fake: &FakeApiServer) -> Api<Application> {
    Api::namespaced(fake.client(), "argocd")
}

async fn wait_app(
    fake: &FakeApiServer,
    what: &str,
    pred: impl Fn(&Application) -> bool,
) -> Application {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let app = apps(fake).get("db").await.unwrap();
        if pred(&app) {
            return app;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waiting for {what}: {app:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn synced_at(app: &Application, revision: &str) -> bool {
    app.sync_status() == "Synced" && app.sync_revision().revision == revision
}

fn completed(app: &Application) -> bool {
    !app.operation_requested() && app.operation_state().is_some_and(|s| s.completed())
}

fn managers(sts: &StatefulSet) -> Vec<(String, String)> {
    sts.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn sts_api(fake: &FakeApiServer) -> Api<StatefulSet> {
    Api::namespaced(fake.client(), "apps")
}

/// What the converge's write phase does to the StatefulSet, reduced to its Argo CD part:
/// orphan-delete it, then re-create the target as `argocd::recreate` says.
async fn recreate_from(fake: &FakeApiServer, repo: &Repo, revision: &str, sync_options: &[String]) {
    let target = repo
        .at("argocd", "db", revision)
        .unwrap()
        .objects
        .into_iter()
        .find(|o| o["kind"] == "StatefulSet")
        .unwrap();
    let api = sts_api(fake);
    api.delete("db", &DeleteParams::orphan()).await.unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while api.get_opt("db").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the orphan delete did not end"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = recreate::recreate(sync_options, &target);
    let dynamic: Api<DynamicObject> = Api::namespaced_with(
        fake.client(),
        "apps",
        &ApiResource::erase::<StatefulSet>(&()),
    );
    match r.operation {
        Operation::Apply => {
            dynamic
                .patch(
                    "db",
                    &PatchParams::apply(r.field_manager).force(),
                    &Patch::Apply(&r.object),
                )
                .await
                .unwrap();
        }
        Operation::Update => {
            let params = PostParams {
                field_manager: Some(r.field_manager.to_owned()),
                ..Default::default()
            };
            dynamic
                .create(&params, &serde_json::from_value(r.object).unwrap())
                .await
                .unwrap();
        }
    }
}

/// Writes the hand-back's operation on the Application as read; a 409 (the controller wrote its
/// status since the read: the resourceVersion precondition held) reads it again, as the lane
/// would on its next run.
async fn hand_back(fake: &FakeApiServer, nonce: &str) {
    for _ in 0..50 {
        let app = apps(fake).get("db").await.unwrap();
        let patch = operation::hand_back(&app, &app.sync_revision(), nonce).unwrap();
        match apps(fake)
            .patch("db", &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("the hand-back: {e}"),
        }
    }
    panic!("the hand-back conflicted 50 times");
}

fn kitchen_retry(message: &str, attempt: i64) -> bool {
    // `<msg>. Retrying attempt #N at 3:04PM.`
    let marker = format!(". Retrying attempt #{attempt} at ");
    message.find(&marker).is_some_and(|i| {
        let time = &message[i + marker.len()..];
        time.ends_with("M.")
            && (time.ends_with("AM.") || time.ends_with("PM."))
            && time.contains(':')
    })
}

#[tokio::test]
async fn client_side_apply_fails_retries_and_stops_then_takes_the_re_create_over() {
    let fake = world();
    let repo = Repo::default();
    publish(&repo, REV_A, "1Gi");
    create_application(
        &fake,
        json!({}),
        json!({"automated": {"prune": true, "selfHeal": true},
               "retry": {"limit": 2, "backoff": {"duration": "5s", "factor": 2, "maxDuration": "3m"}}}),
    )
    .await;
    let controller = ArgoCdController::start(fake.client(), repo.clone(), ArgoCdOptions::default());
    wait_app(&fake, "the first sync", |a| {
        completed(a) && synced_at(a, REV_A)
    })
    .await;
    let live = sts_api(&fake).get("db").await.unwrap();
    assert!(managers(&live).contains(&("argocd-controller".into(), "Update".into())));
    assert!(
        live.metadata.annotations.as_ref().unwrap()["kubectl.kubernetes.io/last-applied-configuration"]
            .contains("\"storage\":\"1Gi\"")
    );

    publish(&repo, REV_B, "2Gi");
    let app = wait_app(&fake, "the failed sync", |a| {
        completed(a) && a.operation_state().is_some_and(|s| s.phase == "Failed")
    })
    .await;
    let state = app.operation_state().unwrap();
    assert!(
        state.message.starts_with(
            "one or more objects failed to apply, reason: error when patching \"/dev/shm/"
        ),
        "{}",
        state.message
    );
    assert!(state.message.contains(
        "\": StatefulSet.apps \"db\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than"
    ));
    assert!(
        state.message.ends_with(" (retried 2 times)."),
        "{}",
        state.message
    );
    assert_eq!(state.retry_count, 2);
    let result = state.sync_result.as_ref().unwrap();
    assert_eq!(result.revision, REV_B);
    let failed = result
        .resources
        .iter()
        .find(|r| r.kind == "StatefulSet")
        .unwrap();
    assert_eq!(
        (
            failed.group.as_str(),
            failed.version.as_str(),
            failed.namespace.as_str(),
            failed.name.as_str()
        ),
        ("apps", "v1", "apps", "db")
    );
    assert_eq!(
        (
            failed.status.as_str(),
            failed.hook_phase.as_str(),
            failed.sync_phase.as_str()
        ),
        ("SyncFailed", "Failed", "Sync")
    );
    assert!(
        failed
            .message
            .starts_with("error when patching \"/dev/shm/")
    );
    assert!(failed.message.contains(IMMUTABLE_ERROR));
    let other = result
        .resources
        .iter()
        .find(|r| r.kind == "ConfigMap")
        .unwrap();
    assert_eq!(other.status, "Synced");
    let sync_error = app
        .conditions()
        .iter()
        .find(|c| c.type_ == "SyncError")
        .unwrap();
    assert_eq!(
        sync_error.message,
        format!("Failed last sync attempt to [{REV_B}]: {}", state.message)
    );
    // The states in between, in Argo CD's words.
    let states: Vec<StateWritten> = controller.states();
    let messages: Vec<&str> = states.iter().map(|s| s.message.as_str()).collect();
    for attempt in [1, 2] {
        assert!(
            states.iter().any(|s| s.phase == "Running"
                && s.retry_count == attempt
                && kitchen_retry(&s.message, attempt)),
            "{messages:#?}"
        );
        assert!(
            messages.contains(&format!("Retrying operation. Attempt #{attempt}").as_str()),
            "{messages:#?}"
        );
    }
    // Nothing in flight, retries used up, the revision compared is the one that failed: act.
    let decided = act::when_to_act(&app, &act::gating(&app), &Memory::default());
    let Act::Converge(failure) = decided else {
        panic!("{decided:?}")
    };
    assert_eq!(failure.shape, Shape::SyncFailed);
    assert_eq!(failure.revision.revision, REV_B);
    assert_eq!(
        failure.statefulsets,
        vec![Named {
            namespace: Some("apps".into()),
            name: "db".into()
        }]
    );
    // Auto-sync does not try the failed revision again by itself.
    let before = controller.states().len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(controller.states().len(), before);

    // The re-create (Update by argocd-controller, kubectl's annotation), then the hand-back.
    recreate_from(&fake, &repo, REV_B, &[]).await;
    hand_back(&fake, "nonce-csa").await;
    let app = wait_app(&fake, "the hand-back's sync", |a| {
        operation::handed_back(a, "nonce-csa").is_some()
    })
    .await;
    assert_eq!(
        operation::handed_back(&app, "nonce-csa"),
        Some(HandBack::Applied {
            revision: flux_converger::argocd::application::Revision {
                revision: REV_B.into(),
                revisions: vec![]
            }
        })
    );
    let state = app.operation_state().unwrap();
    assert_eq!(
        state.operation.initiated_by.as_ref().unwrap().username,
        "flux-converger"
    );
    assert_eq!(state.operation.retry.as_ref().map(|r| r.limit), Some(2));
    assert!(app.conditions().iter().all(|c| c.type_ != "SyncError"));
    wait_app(&fake, "Synced", |a| synced_at(a, REV_B)).await;
    let live = sts_api(&fake).get("db").await.unwrap();
    assert_eq!(
        managers(&live),
        vec![("argocd-controller".into(), "Update".into())]
    );
}

#[tokio::test]
async fn server_side_apply_fails_with_the_bare_error_after_the_default_retries() {
    let fake = world();
    let repo = Repo::default();
    publish(&repo, REV_A, "1Gi");
    create_application(
        &fake,
        json!({}),
        json!({"automated": {"selfHeal": true}, "syncOptions": ["ServerSideApply=true"]}),
    )
    .await;
    let controller = ArgoCdController::start(
        fake.client(),
        repo.clone(),
        ArgoCdOptions {
            retry_backoff: Duration::from_millis(20),
            ..Default::default()
        },
    );
    wait_app(&fake, "the first sync", |a| {
        completed(a) && synced_at(a, REV_A)
    })
    .await;
    let live = sts_api(&fake).get("db").await.unwrap();
    assert_eq!(
        managers(&live),
        vec![("argocd-controller".into(), "Apply".into())]
    );

    publish(&repo, REV_B, "2Gi");
    let app = wait_app(&fake, "the failed sync", |a| {
        completed(a) && a.operation_state().is_some_and(|s| s.phase == "Failed")
    })
    .await;
    let state = app.operation_state().unwrap();
    assert!(
        state.message.starts_with(
            "one or more objects failed to apply, reason: StatefulSet.apps \"db\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than"
        ),
        "{}",
        state.message
    );
    assert!(
        state.message.ends_with(" (retried 5 times)."),
        "{}",
        state.message
    );
    assert_eq!(state.operation.retry.as_ref().map(|r| r.limit), Some(5));
    let failed = state
        .sync_result
        .as_ref()
        .unwrap()
        .resources
        .iter()
        .find(|r| r.kind == "StatefulSet")
        .unwrap();
    assert!(
        failed
            .message
            .starts_with("StatefulSet.apps \"db\" is invalid: spec: Forbidden: ")
    );
    assert_eq!(failed.status, "SyncFailed");
    assert_eq!(
        controller.states().iter().filter(|s| s.completed).count(),
        2
    );
    assert!(matches!(
        act::when_to_act(&app, &act::gating(&app), &Memory::default()),
        Act::Converge(_)
    ));

    // Re-created by a forced server-side apply as argocd-controller: the next sync's apply
    // owns every field again, no conflict.
    let options = vec!["ServerSideApply=true".to_string()];
    recreate_from(&fake, &repo, REV_B, &options).await;
    hand_back(&fake, "nonce-ssa").await;
    let app = wait_app(&fake, "the hand-back's sync", |a| {
        operation::handed_back(a, "nonce-ssa").is_some()
    })
    .await;
    assert!(matches!(
        operation::handed_back(&app, "nonce-ssa"),
        Some(HandBack::Applied { .. })
    ));
    assert_eq!(
        app.operation_state()
            .unwrap()
            .operation
            .sync
            .as_ref()
            .unwrap()
            .sync_options,
        options
    );
    let live = sts_api(&fake).get("db").await.unwrap();
    assert_eq!(
        managers(&live),
        vec![("argocd-controller".into(), "Apply".into())]
    );
}

#[tokio::test]
async fn server_side_diff_stops_at_the_comparison_and_an_explicit_sync_errors() {
    let fake = world();
    let repo = Repo::default();
    publish(&repo, REV_A, "1Gi");
    create_application(
        &fake,
        json!({"argocd.argoproj.io/compare-options": "ServerSideDiff=true"}),
        json!({"automated": {"selfHeal": true}, "syncOptions": ["ServerSideApply=true"]}),
    )
    .await;
    let controller = ArgoCdController::start(fake.client(), repo.clone(), ArgoCdOptions::default());
    wait_app(&fake, "the first sync", |a| {
        completed(a) && synced_at(a, REV_A)
    })
    .await;
    let syncs = controller.states().len();

    publish(&repo, REV_B, "2Gi");
    let app = wait_app(&fake, "the comparison error", |a| {
        a.conditions().iter().any(|c| c.type_ == "ComparisonError")
    })
    .await;
    let condition = app
        .conditions()
        .iter()
        .find(|c| c.type_ == "ComparisonError")
        .unwrap();
    assert!(
        condition.message.starts_with(
            "Failed to compare desired state to live state: failed to calculate diff: error calculating server side diff: serverSideDiff error: error running server side apply in dryrun mode for resource StatefulSet/db: StatefulSet.apps \"db\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than"
        ),
        "{}",
        condition.message
    );
    assert_eq!(app.sync_status(), "Unknown");
    assert_eq!(app.sync_revision().revision, REV_B);
    assert!(app.resources().iter().all(|r| r.status == "Unknown"));
    // No sync starts: auto-sync skips an Unknown status.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(controller.states().len(), syncs);
    let app = apps(&fake).get("db").await.unwrap();
    assert!(!app.operation_requested());
    let Act::Converge(failure) = act::when_to_act(&app, &act::gating(&app), &Memory::default())
    else {
        panic!("not converged")
    };
    assert_eq!(failure.shape, Shape::ComparisonError);
    assert_eq!(
        failure.statefulsets,
        vec![Named {
            namespace: Some("apps".into()),
            name: "db".into()
        }]
    );

    // An explicit sync without a converge: Error, the condition quoted, nothing applied.
    hand_back(&fake, "nonce-early").await;
    let app = wait_app(&fake, "the explicit sync", |a| {
        operation::handed_back(a, "nonce-early").is_some()
    })
    .await;
    let state = app.operation_state().unwrap();
    assert_eq!(state.phase, "Error");
    assert_eq!(
        state.message,
        format!("ComparisonError: {}", condition.message)
    );
    assert!(state.sync_result.as_ref().unwrap().resources.is_empty());
    assert!(matches!(
        operation::handed_back(&app, "nonce-early"),
        Some(HandBack::Failed {
            immutable: true,
            ..
        })
    ));
    assert_eq!(
        sts_api(&fake)
            .get("db")
            .await
            .unwrap()
            .spec
            .unwrap()
            .volume_claim_templates
            .unwrap()[0]
            .spec
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"]
            .0,
        "1Gi"
    );

    // After the re-create the comparison passes and the hand-back syncs.
    recreate_from(&fake, &repo, REV_B, &["ServerSideApply=true".to_string()]).await;
    wait_app(&fake, "the comparison to clear", |a| {
        a.conditions().iter().all(|c| c.type_ != "ComparisonError")
    })
    .await;
    hand_back(&fake, "nonce-late").await;
    let app = wait_app(&fake, "the hand-back's sync", |a| {
        operation::handed_back(a, "nonce-late").is_some()
    })
    .await;
    assert!(matches!(
        operation::handed_back(&app, "nonce-late"),
        Some(HandBack::Applied { .. })
    ));
    wait_app(&fake, "Synced", |a| synced_at(a, REV_B)).await;
}
