//! The converge logic over the in-memory cluster: the procedure, refusals, and a fault at
//! every write followed by a re-run.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::json;

use super::memory::{Fault, World};
use super::*;
use crate::cluster::CallError;
use crate::decide::RefusalCode;
use crate::journal::{Intent, Journal};

mod fenced;
mod sets;

fn template(name: &str, size: &str) -> serde_json::Value {
    json!({"metadata": {"name": name}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
        "resources": {"requests": {"storage": size}}}})
}

fn statefulset(templates: &[(&str, &str)]) -> StatefulSet {
    let vcts: Vec<_> = templates.iter().map(|(n, s)| template(n, s)).collect();
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "serviceName": "web", "replicas": 3, "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "app", "image": "busybox"}]}},
            "volumeClaimTemplates": vcts,
        }
    }))
    .unwrap()
}

/// Live form: the server's defaults on each template.
fn live(templates: &[(&str, &str)]) -> StatefulSet {
    let mut s = statefulset(templates);
    for t in s
        .spec
        .as_mut()
        .unwrap()
        .volume_claim_templates
        .as_mut()
        .unwrap()
    {
        t.spec.as_mut().unwrap().volume_mode = Some("Filesystem".into());
        t.status = Some(Default::default());
        t.status.as_mut().unwrap().phase = Some("Pending".into());
    }
    s
}

fn claim(name: &str, size: &str, phase: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("claim-{name}"),
                     "labels": {"app": "web"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                 "volumeMode": "Filesystem", "resources": {"requests": {"storage": size}},
                 "volumeName": format!("pv-{name}")},
        "status": {"phase": phase, "capacity": {"storage": size}}
    }))
    .unwrap()
}

/// web: templates data (1Gi → 2Gi) and logs (1Gi, unchanged); ordinals 0-2, a scaled-away
/// ordinal 4, an already larger claim 3, a Pending claim 5 and a claim of another StatefulSet.
fn world() -> World {
    let w = World::default();
    w.seed_sts(live(&[("data", "1Gi"), ("logs", "1Gi")]));
    {
        let mut s = w.lock();
        s.claims = vec![
            claim("data-web-0", "1Gi", "Bound"),
            claim("data-web-1", "1Gi", "Bound"),
            claim("data-web-2", "1Gi", "Bound"),
            claim("data-web-3", "5Gi", "Bound"),
            claim("data-web-4", "1Gi", "Bound"),
            claim("data-web-5", "1Gi", "Pending"),
            claim("logs-web-0", "1Gi", "Bound"),
            claim("logs-web-1", "1Gi", "Bound"),
            claim("logs-web-2", "1Gi", "Bound"),
            claim("data-db-0", "1Gi", "Bound"),
        ];
        s.classes = vec![
            serde_json::from_value(json!({"metadata": {"name": "expandable"},
                "provisioner": "example.com/fake", "allowVolumeExpansion": true}))
            .unwrap(),
        ];
    }
    w
}

fn desired() -> StatefulSet {
    statefulset(&[("data", "2Gi"), ("logs", "1Gi")])
}

/// The index of the orphan delete among the writes of the reference run (4 grows, the
/// intent, then the delete).
const DELETE: usize = 5;

fn opts() -> Options {
    Options {
        dry_run: false,
        wait_timeout: Duration::from_millis(50),
        revision: None,
        fence: None,
        act_as: None,
        in_place: Default::default(),
        kustomization: None,
        resume_as_operator: false,
        renders: None,
        known_states: Default::default(),
    }
}

/// `options` with a render that has default/web (the command's file, say).
fn rendering(options: Options) -> Options {
    Options {
        renders: Some(std::sync::Arc::new(
            [("default".to_string(), "web".to_string())].into(),
        )),
        ..options
    }
}

/// The cluster for every intent: the world itself.
fn all_as<'a>(
    w: &'a World,
) -> impl Fn(&Intent) -> std::future::Ready<Result<&'a World, String>> + 'a {
    move |_: &Intent| std::future::ready(Ok(w))
}

fn size(w: &World, claim: &str) -> String {
    let s = w.lock();
    let c = s
        .claims
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(claim))
        .unwrap();
    c.spec
        .as_ref()
        .unwrap()
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap()["storage"]
        .0
        .clone()
}

fn template_size(s: &StatefulSet, template: &str) -> String {
    let t = s
        .spec
        .as_ref()
        .unwrap()
        .volume_claim_templates
        .as_ref()
        .unwrap();
    let t = t
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(template))
        .unwrap();
    t.spec
        .as_ref()
        .unwrap()
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap()["storage"]
        .0
        .clone()
}

#[tokio::test]
async fn happy_path_grows_every_smaller_bound_claim_then_recreates() {
    let w = world();
    let old_uid = w.sts("default", "web").unwrap().metadata.uid.unwrap();
    let report = converge(&w, &w, &desired(), &opts()).await.unwrap();

    assert_eq!(report.outcome, Outcome::Converged);
    assert!(report.recreated);
    assert_eq!(report.old_uid.as_deref(), Some(old_uid.as_str()));
    let new_uid = w.sts("default", "web").unwrap().metadata.uid.unwrap();
    assert_ne!(new_uid, old_uid);
    assert_eq!(report.new_uid.as_deref(), Some(new_uid.as_str()));
    assert_eq!(
        template_size(&w.sts("default", "web").unwrap(), "data"),
        "2Gi"
    );

    for (c, want) in [
        ("data-web-0", "2Gi"),
        ("data-web-1", "2Gi"),
        ("data-web-2", "2Gi"),
        ("data-web-3", "5Gi"),
        ("data-web-4", "2Gi"),
        ("data-web-5", "1Gi"),
        ("logs-web-0", "1Gi"),
        ("data-db-0", "1Gi"),
    ] {
        assert_eq!(size(&w, c), want, "{c}");
    }
    let actions: Vec<(&str, ClaimAction)> = report
        .claims
        .iter()
        .map(|c| (c.claim.as_str(), c.action))
        .collect();
    assert_eq!(
        actions,
        vec![
            ("data-web-0", ClaimAction::Resized),
            ("data-web-1", ClaimAction::Resized),
            ("data-web-2", ClaimAction::Resized),
            ("data-web-3", ClaimAction::Skipped),
            ("data-web-4", ClaimAction::Resized),
            ("data-web-5", ClaimAction::Deferred),
            ("logs-web-0", ClaimAction::Skipped),
            ("logs-web-1", ClaimAction::Skipped),
            ("logs-web-2", ClaimAction::Skipped),
        ]
    );
    assert_eq!(
        w.writes(),
        vec![
            "write:resize PersistentVolumeClaim default/data-web-0",
            "write:resize PersistentVolumeClaim default/data-web-1",
            "write:resize PersistentVolumeClaim default/data-web-2",
            "write:resize PersistentVolumeClaim default/data-web-4",
            "write:record intent default/web",
            "write:delete StatefulSet default/web",
            "write:apply StatefulSet default/web",
            "write:clear intent default/web",
        ]
    );
    assert!(w.journal.list().await.unwrap().intents.is_empty());
    let steps: Vec<Step> = report.steps.iter().map(|s| s.step).collect();
    for s in [
        Step::Read,
        Step::Decide,
        Step::Prove,
        Step::Record,
        Step::Grow,
        Step::Orphan,
        Step::Wait,
        Step::Reapply,
        Step::Clear,
    ] {
        assert!(steps.contains(&s), "{s} missing from {steps:?}");
    }
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["outcome"], "converged");
    assert_eq!(json["claims"][0]["action"], "resized");
    assert!(
        report.to_text().contains("data-web-0: resized 1Gi -> 2Gi"),
        "{}",
        report.to_text()
    );

    // A second run has nothing to do and writes nothing.
    let before = w.writes().len();
    let again = converge(&w, &w, &desired(), &opts()).await.unwrap();
    assert_eq!(again.outcome, Outcome::Unchanged);
    assert_eq!(w.writes().len(), before);
}

#[tokio::test]
async fn nothing_to_do_and_absent_write_nothing() {
    let w = world();
    let same = statefulset(&[("data", "1Gi"), ("logs", "1Gi")]);
    // data-web-5 is Pending (deferred) but no Bound claim is smaller: nothing to do.
    let r = converge(&w, &w, &same, &opts()).await.unwrap();
    assert_eq!(r.outcome, Outcome::Unchanged, "{r:?}");
    let mut other = desired();
    other.metadata.name = Some("absent".into());
    let r = converge(&w, &w, &other, &opts()).await.unwrap();
    assert_eq!(r.outcome, Outcome::Absent);
    assert!(w.writes().is_empty(), "{:?}", w.writes());
}

#[tokio::test]
async fn template_equal_but_claims_smaller_grows_without_recreating() {
    let w = World::default();
    w.seed_sts(live(&[("data", "2Gi"), ("logs", "1Gi")]));
    {
        let src = world();
        let mut s = w.lock();
        s.claims = src.lock().claims.clone();
        s.classes = src.lock().classes.clone();
    }
    let uid = w.sts("default", "web").unwrap().metadata.uid;
    let r = converge(&w, &w, &desired(), &opts()).await.unwrap();
    assert_eq!(r.outcome, Outcome::Converged);
    assert!(!r.recreated);
    assert_eq!(w.sts("default", "web").unwrap().metadata.uid, uid);
    assert_eq!(size(&w, "data-web-0"), "2Gi");
    assert!(
        !w.writes()
            .iter()
            .any(|l| l.contains("delete") || l.contains("apply"))
    );
    assert!(w.journal.list().await.unwrap().intents.is_empty());
    // Nothing is re-created, so no pre-flight: it costs nothing beyond the re-created ones.
    assert!(w.lock().preflighted.is_empty(), "{:?}", w.lock().log);
}

#[tokio::test]
async fn every_refusal_writes_nothing() {
    // shrink, not expandable, template removed, serviceName, selector: decided; rejected: proven.
    let shrink = statefulset(&[("data", "512Mi"), ("logs", "1Gi")]);
    let renamed = statefulset(&[("data", "2Gi"), ("cache", "1Gi")]);
    let mut service = desired();
    service.spec.as_mut().unwrap().service_name = Some("other".into());
    let mut selector = desired();
    selector.spec.as_mut().unwrap().selector.match_labels =
        Some([("app".to_string(), "other".to_string())].into());

    let cases: Vec<(&str, StatefulSet, Option<CallError>, RefusalCode)> = vec![
        ("shrink", shrink, None, RefusalCode::Shrink),
        (
            "template renamed",
            renamed,
            None,
            RefusalCode::TemplateRemoved,
        ),
        (
            "serviceName",
            service,
            None,
            RefusalCode::ServiceNameChanged,
        ),
        ("selector", selector, None, RefusalCode::SelectorChanged),
        (
            "rejected",
            desired(),
            Some(CallError::api(
                "dry run",
                "StatefulSet default/web",
                422,
                "Invalid",
                "spec.updateStrategy.rollingUpdate: Invalid value: only allowed for updateStrategy 'RollingUpdate'",
            )),
            RefusalCode::Rejected,
        ),
    ];
    for (what, desired, dry_run_error, code) in cases {
        let w = world();
        w.lock().dry_run_error = dry_run_error;
        let r = converge(&w, &w, &desired, &opts()).await.unwrap();
        assert_eq!(r.outcome, Outcome::Refused, "{what}: {r:?}");
        assert_eq!(r.refusal().map(|r| r.code), Some(code), "{what}");
        assert!(w.writes().is_empty(), "{what}: {:?}", w.writes());
    }

    let w = world();
    w.lock().classes.clear();
    let r = converge(&w, &w, &desired(), &opts()).await.unwrap();
    assert_eq!(
        r.refusal().map(|r| r.code),
        Some(RefusalCode::NotExpandable)
    );
    assert!(w.writes().is_empty());
}

#[tokio::test]
async fn a_dry_run_that_cannot_be_answered_is_an_error_not_a_refusal() {
    let w = world();
    w.lock().dry_run_error = Some(CallError::api(
        "server-side apply dry run of",
        "StatefulSet default/web",
        503,
        "ServiceUnavailable",
        "etcd is down",
    ));
    let e = converge(&w, &w, &desired(), &opts()).await.unwrap_err();
    assert_eq!(e.step(), Some(Step::Prove));
    let msg = e.to_string();
    for want in [
        "prove",
        "default/web",
        "etcd is down",
        "nothing was written",
        "again",
    ] {
        assert!(msg.contains(want), "{want:?} not in {msg}");
    }
    assert!(w.writes().is_empty());
}

#[tokio::test]
async fn dry_run_proves_and_writes_nothing() {
    let w = world();
    let o = Options {
        dry_run: true,
        ..opts()
    };
    let r = converge(&w, &w, &desired(), &o).await.unwrap();
    assert_eq!(r.outcome, Outcome::Proven);
    assert!(
        r.claims
            .iter()
            .any(|c| c.action == ClaimAction::WouldResize)
    );
    assert!(w.writes().is_empty());
    assert_eq!(size(&w, "data-web-0"), "1Gi");
    assert!(r.resumed.is_none());

    // With an unfinished intent, a dry run says so and still writes nothing.
    w.lock().fault = Some((DELETE, Fault::Fail));
    converge(&w, &w, &desired(), &opts()).await.unwrap_err();
    w.lock().fault = None;
    let before = w.writes().len();
    let r = converge(&w, &w, &desired(), &o).await.unwrap();
    assert_eq!(r.resumed.map(|r| r.action), Some(ResumeAction::Pending));
    assert_eq!(w.writes().len(), before);
    assert_eq!(w.journal.list().await.unwrap().intents.len(), 1);
}

/// The reference: an uninterrupted converge.
async fn reference() -> serde_json::Value {
    let w = world();
    converge(&w, &w, &desired(), &opts()).await.unwrap();
    w.snapshot().await
}

#[tokio::test]
async fn a_fault_at_any_write_is_finished_by_the_next_run() {
    let want = reference().await;
    let writes = {
        let w = world();
        converge(&w, &w, &desired(), &opts()).await.unwrap();
        w.lock().writes
    };
    assert_eq!(writes, 8);
    for fault in [Fault::Fail, Fault::DropAfterWrite] {
        for k in 0..writes {
            let w = world();
            w.lock().fault = Some((k, fault));
            let first = converge(&w, &w, &desired(), &opts()).await;
            let e = first.expect_err("the fault must surface");
            assert!(e.to_string().contains("again"), "{fault:?} at {k}: {e}");
            // Never a StatefulSet gone with no intent to bring it back.
            let gone = w.sts("default", "web").is_none();
            let intents = w.journal.list().await.unwrap().intents.len();
            assert!(
                !gone || intents == 1,
                "{fault:?} at {k}: deleted without an intent"
            );
            w.lock().fault = None;
            let second = converge(&w, &w, &desired(), &opts()).await;
            assert!(second.is_ok(), "{fault:?} at {k}: {second:?}");
            assert_eq!(w.snapshot().await, want, "{fault:?} at write {k}");
        }
    }
}

#[tokio::test]
async fn crash_between_delete_and_reapply_reapplies_from_the_journal() {
    let w = world();
    // Fail the apply (write 6): the process "dies" with the StatefulSet deleted.
    w.lock().fault = Some((6, Fault::Fail));
    let e = converge(&w, &w, &desired(), &opts()).await.unwrap_err();
    assert_eq!(e.step(), Some(Step::Reapply));
    assert!(w.sts("default", "web").is_none());
    w.lock().fault = None;
    // A new process: only the journal survives. Even an unrelated desired resumes first.
    let r = resume_all(all_as(&w), &w, &rendering(opts()))
        .await
        .unwrap();
    assert_eq!(r.results.len(), 1);
    assert!(r.unreadable.is_empty());
    let (ns, name, resumed) = r.results.into_iter().next().unwrap();
    assert_eq!((ns.as_str(), name.as_str()), ("default", "web"));
    assert_eq!(resumed.unwrap().action, ResumeAction::Reapplied);
    assert_eq!(
        template_size(&w.sts("default", "web").unwrap(), "data"),
        "2Gi"
    );
    assert!(w.journal.list().await.unwrap().intents.is_empty());
}

#[tokio::test]
async fn an_intent_for_a_statefulset_recreated_by_someone_else_deletes_nothing() {
    let w = world();
    // Crash right after recording the intent.
    w.lock().fault = Some((DELETE, Fault::Fail));
    converge(&w, &w, &desired(), &opts()).await.unwrap_err();
    w.lock().fault = None;
    // Someone re-creates the StatefulSet (new uid) with the grown template.
    w.lock().statefulsets.clear();
    w.seed_sts(live(&[("data", "2Gi"), ("logs", "1Gi")]));
    let before = w.writes().len();
    let r = converge(&w, &w, &desired(), &opts()).await.unwrap();
    assert_eq!(
        r.resumed.as_ref().map(|r| r.action),
        Some(ResumeAction::AlreadyRecreated)
    );
    let new_writes = &w.writes()[before..];
    assert!(
        !new_writes.iter().any(|l| l.contains("delete")),
        "{new_writes:?}"
    );
    assert!(w.journal.list().await.unwrap().intents.is_empty());
}

#[tokio::test]
async fn a_stuck_orphan_finalizer_times_out_naming_the_statefulset_and_a_later_run_completes() {
    let w = world();
    w.lock().gc_stuck = true;
    let e = converge(&w, &w, &desired(), &opts()).await.unwrap_err();
    assert_eq!(e.step(), Some(Step::Wait));
    let msg = e.to_string();
    assert!(
        msg.contains("StatefulSet default/web") && msg.contains("again"),
        "{msg}"
    );
    assert!(
        w.sts("default", "web")
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    w.lock().gc_stuck = false;
    let r = converge(&w, &w, &desired(), &opts()).await.unwrap();
    let resumed = r.resumed.unwrap();
    assert_eq!(resumed.action, ResumeAction::Continued);
    assert!(resumed.report.unwrap().recreated);
    assert_eq!(r.outcome, Outcome::Unchanged);
    assert_eq!(w.snapshot().await, reference().await);
}

#[tokio::test]
async fn a_desired_object_without_namespace_is_bad_input() {
    let w = world();
    let mut d = desired();
    d.metadata.namespace = None;
    let e = converge(&w, &w, &d, &opts()).await.unwrap_err();
    assert!(matches!(e, ConvergeError::Invalid { .. }), "{e}");
}

#[tokio::test]
async fn an_intent_that_is_now_refused_is_dropped_without_deleting_anything() {
    let w = world();
    w.lock().fault = Some((DELETE, Fault::Fail));
    converge(&w, &w, &desired(), &opts()).await.unwrap_err();
    w.lock().fault = None;
    assert_eq!(w.journal.list().await.unwrap().intents.len(), 1);
    // Meanwhile the server refuses the recorded object: it can no longer be carried out.
    w.lock().dry_run_error = Some(CallError::api(
        "dry run",
        "StatefulSet default/web",
        422,
        "Invalid",
        "spec.updateStrategy.rollingUpdate: Invalid value: only allowed for updateStrategy 'RollingUpdate'",
    ));
    let before = w.writes().len();
    let r = converge(&w, &w, &desired(), &opts()).await.unwrap();
    assert_eq!(
        r.resumed.as_ref().map(|r| r.action),
        Some(ResumeAction::Abandoned)
    );
    assert_eq!(r.refusal().map(|r| r.code), Some(RefusalCode::Rejected));
    // The intent said `deleting`, but the StatefulSet is there with the recorded uid: the
    // delete was never sent, and the journal says so first (item 5 of issue 27).
    assert_eq!(
        w.writes()[before..],
        [
            "write:record intent default/web",
            "write:clear intent default/web"
        ]
    );
    assert!(w.sts("default", "web").is_some());
    assert!(w.journal.list().await.unwrap().intents.is_empty());
}

#[tokio::test]
async fn a_statefulset_someone_else_is_deleting_is_left_alone() {
    let w = world();
    {
        let mut s = w.lock();
        let sts = s.statefulsets.values_mut().next().unwrap();
        sts.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
    }
    let e = converge(&w, &w, &desired(), &opts()).await.unwrap_err();
    assert!(matches!(e, ConvergeError::Terminating { .. }), "{e}");
    assert!(e.to_string().contains("default/web"), "{e}");
    assert!(w.writes().is_empty());
}
