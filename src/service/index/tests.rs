//! Table tests of the index: gate modes, routing, and what is due given the last record.

use serde_json::json;

use super::*;
use crate::flux::event::InvolvedObject;
use crate::model::{StatefulSetEntry, Trigger};

fn ks(
    ns: &str,
    name: &str,
    gate: Option<&str>,
    source: (&str, &str, Option<&str>),
) -> Kustomization {
    let mut value = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"namespace": ns, "name": name},
        "spec": {"sourceRef": {"kind": source.0, "name": source.1}, "path": "./apps", "prune": true}
    });
    if let Some(g) = gate {
        value["metadata"]["annotations"] = json!({ GATE_ANNOTATION: g });
    }
    if let Some(sns) = source.2 {
        value["spec"]["sourceRef"]["namespace"] = json!(sns);
    }
    serde_json::from_value(value).expect("valid Kustomization")
}

fn git(ns: &str, name: &str) -> SourceKey {
    SourceKey {
        kind: SourceKind::GitRepository,
        namespace: ns.into(),
        name: name.into(),
    }
}

fn record(revision: &str, state: RevisionState) -> RevisionRecord {
    RevisionRecord {
        volumes: Default::default(),
        revision: revision.into(),
        digest: None,
        trigger: Trigger::Resync,
        started_at: "2026-01-01T00:00:00Z".into(),
        finished_at: None,
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

fn event(kind: &str, ns: &str, name: &str, message: &str) -> Event {
    Event {
        involved_object: InvolvedObject {
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        },
        message: message.into(),
        ..Default::default()
    }
}

#[test]
fn gate_mode_from_annotation_and_default() {
    // (annotation, default, expected gate, invalid kept)
    let table: &[(Option<&str>, GateMode, GateMode, bool)] = &[
        (None, GateMode::Off, GateMode::Off, false),
        (None, GateMode::Suspend, GateMode::Suspend, false),
        (None, GateMode::Reconcile, GateMode::Reconcile, false),
        (Some("suspend"), GateMode::Off, GateMode::Suspend, false),
        (Some("reconcile"), GateMode::Off, GateMode::Reconcile, false),
        (Some("off"), GateMode::Suspend, GateMode::Off, false),
        (
            Some(" reconcile "),
            GateMode::Off,
            GateMode::Reconcile,
            false,
        ),
        (Some("Suspend"), GateMode::Reconcile, GateMode::Off, true),
        (Some(""), GateMode::Reconcile, GateMode::Off, true),
    ];
    for (annotation, default, expected, invalid) in table {
        let mut index = Index::new(*default);
        let (key, applied) = index
            .apply_kustomization(&ks(
                "apps",
                "web",
                *annotation,
                ("GitRepository", "repo", None),
            ))
            .expect("named");
        let entry = index.entry(&key).expect("indexed");
        assert_eq!(
            entry.gate, *expected,
            "{annotation:?} with default {default}"
        );
        assert_eq!(entry.invalid_gate.is_some(), *invalid, "{annotation:?}");
        assert_eq!(applied.handled, *expected != GateMode::Off);
        assert_eq!(index.handled(&key).is_some(), *expected != GateMode::Off);
    }
}

#[test]
fn source_ref_namespace_defaults_to_the_kustomizations() {
    let mut index = Index::new(GateMode::Suspend);
    index.apply_kustomization(&ks("apps", "a", None, ("GitRepository", "repo", None)));
    index.apply_kustomization(&ks(
        "apps",
        "b",
        None,
        ("GitRepository", "repo", Some("flux-system")),
    ));
    index.apply_kustomization(&ks("apps", "c", None, ("OCIRepository", "repo", None)));
    index.apply_kustomization(&ks("apps", "d", None, ("HelmChart", "repo", None)));
    assert_eq!(
        index.apply_source(git("apps", "repo"), Some("main@sha1:1".into())),
        vec![Key::kustomization("apps", "a")]
    );
    assert_eq!(
        index.apply_source(git("flux-system", "repo"), Some("main@sha1:2".into())),
        vec![Key::kustomization("apps", "b")]
    );
    assert_eq!(
        index.source_revision(&Key::kustomization("apps", "a")),
        Some("main@sha1:1")
    );
    assert_eq!(
        index.source_revision(&Key::kustomization("apps", "b")),
        Some("main@sha1:2")
    );
    assert_eq!(
        index.source_revision(&Key::kustomization("apps", "c")),
        None
    );
    assert_eq!(
        index
            .entry(&Key::kustomization("apps", "d"))
            .and_then(|e| e.source.clone()),
        None
    );
}

#[test]
fn source_revision_change_names_only_handled_readers() {
    let mut index = Index::new(GateMode::Off);
    index.apply_kustomization(&ks(
        "apps",
        "on",
        Some("suspend"),
        ("GitRepository", "repo", None),
    ));
    index.apply_kustomization(&ks(
        "apps",
        "off",
        Some("off"),
        ("GitRepository", "repo", None),
    ));
    index.apply_kustomization(&ks(
        "apps",
        "default",
        None,
        ("GitRepository", "repo", None),
    ));
    let first = index.apply_source(git("apps", "repo"), Some("r1".into()));
    assert_eq!(first, vec![Key::kustomization("apps", "on")]);
    // Same revision again (a status update of another field): nothing is due.
    assert!(
        index
            .apply_source(git("apps", "repo"), Some("r1".into()))
            .is_empty()
    );
    assert_eq!(
        index.apply_source(git("apps", "repo"), Some("r2".into())),
        vec![Key::kustomization("apps", "on")]
    );
}

#[test]
fn moving_a_source_ref_unlinks_the_old_source() {
    let mut index = Index::new(GateMode::Reconcile);
    index.apply_kustomization(&ks("apps", "web", None, ("GitRepository", "old", None)));
    index.apply_kustomization(&ks("apps", "web", None, ("GitRepository", "new", None)));
    assert!(
        index
            .apply_source(git("apps", "old"), Some("r1".into()))
            .is_empty()
    );
    assert_eq!(
        index.apply_source(git("apps", "new"), Some("r1".into())),
        vec![Key::kustomization("apps", "web")]
    );
    index.delete_kustomization(&Key::kustomization("apps", "web"));
    assert!(
        index
            .apply_source(git("apps", "new"), Some("r2".into()))
            .is_empty()
    );
    assert_eq!(index.handled_count(), 0);
}

#[test]
fn events_route_to_handled_kustomizations() {
    let mut index = Index::new(GateMode::Off);
    index.apply_kustomization(&ks(
        "apps",
        "a",
        Some("suspend"),
        ("GitRepository", "repo", None),
    ));
    index.apply_kustomization(&ks(
        "apps",
        "b",
        Some("reconcile"),
        ("GitRepository", "repo", None),
    ));
    index.apply_kustomization(&ks(
        "apps",
        "c",
        Some("off"),
        ("GitRepository", "repo", None),
    ));
    index.apply_kustomization(&ks("apps", "d", Some("suspend"), ("Bucket", "repo", None)));
    let wedge = "StatefulSet/apps/web dry-run failed (Invalid): StatefulSet.apps \"web\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas' are forbidden";
    let a = Key::kustomization("apps", "a");
    let b = Key::kustomization("apps", "b");
    let d = Key::kustomization("apps", "d");
    // (event, keys, wedged)
    let table: Vec<(Event, Vec<Key>, bool)> = vec![
        (
            event("GitRepository", "apps", "repo", "stored artifact"),
            vec![a.clone(), b.clone()],
            false,
        ),
        (
            event("Bucket", "apps", "repo", "stored artifact"),
            vec![d.clone()],
            false,
        ),
        (event("OCIRepository", "apps", "repo", ""), vec![], false),
        (event("GitRepository", "other", "repo", ""), vec![], false),
        (
            event("Kustomization", "apps", "a", "Reconciliation finished"),
            vec![a.clone()],
            false,
        ),
        (
            event("Kustomization", "apps", "a", wedge),
            vec![a.clone()],
            true,
        ),
        (event("Kustomization", "apps", "c", wedge), vec![], true),
        (event("Kustomization", "apps", "unknown", ""), vec![], false),
        (event("HelmRelease", "apps", "a", wedge), vec![], false),
    ];
    for (event, keys, wedged) in table {
        let route = index.route(&event);
        assert_eq!(route.keys, keys, "{:?}", event.involved_object);
        assert_eq!(route.wedged, wedged, "{:?}", event.involved_object);
    }
}

#[test]
fn due_given_the_last_record() {
    let mut deferred = record("r1", RevisionState::Converged);
    deferred.statefulsets.push(StatefulSetEntry {
        volumes: Default::default(),
        namespace: "apps".into(),
        name: "web".into(),
        outcome: StatefulSetOutcome::Deferred,
        old_uid: None,
        new_uid: None,
        templates: Vec::new(),
        changes: Vec::new(),
        claims: Vec::new(),
        deferred: Vec::new(),
        refusal: None,
        error: None,
    });
    // (source revision, last record, due)
    let table: Vec<(Option<&str>, Option<RevisionRecord>, Option<Due>)> = vec![
        (None, None, None),
        (Some("r1"), None, Some(Due::NeverRun)),
        (
            Some("r2"),
            Some(record("r1", RevisionState::Converged)),
            Some(Due::NewRevision),
        ),
        (
            Some("r2"),
            Some(record("r1", RevisionState::Refused)),
            Some(Due::NewRevision),
        ),
        (
            Some("r1"),
            Some(record("r1", RevisionState::Converged)),
            None,
        ),
        (Some("r1"), Some(record("r1", RevisionState::Refused)), None),
        (
            Some("r1"),
            Some(record("r1", RevisionState::Running)),
            Some(Due::Unfinished),
        ),
        (
            Some("r1"),
            Some(record("r1", RevisionState::Failed)),
            Some(Due::Unfinished),
        ),
        (Some("r1"), Some(deferred), Some(Due::Deferred)),
        // A refusal that could not name its revision: not due for a revision, only for a spec.
        (Some("r1"), Some(record("", RevisionState::Refused)), None),
        (
            Some("r1"),
            Some(record("", RevisionState::Failed)),
            Some(Due::NewRevision),
        ),
    ];
    for (revision, last, due) in table {
        let mut index = Index::new(GateMode::Suspend);
        let (key, _) = index
            .apply_kustomization(&ks("apps", "web", None, ("GitRepository", "repo", None)))
            .expect("named");
        index.apply_source(git("apps", "repo"), revision.map(String::from));
        assert_eq!(index.due(&key, last.as_ref()), due, "{revision:?} {last:?}");
    }
}

#[test]
fn not_handled_is_never_due() {
    let mut index = Index::new(GateMode::Off);
    let (key, _) = index
        .apply_kustomization(&ks("apps", "web", None, ("GitRepository", "repo", None)))
        .expect("named");
    index.apply_source(git("apps", "repo"), Some("r1".into()));
    assert_eq!(index.due(&key, None), None);
    assert!(index.due_keys(|_| None).is_empty());
}

#[test]
fn a_spec_change_makes_a_finished_revision_due_but_suspend_does_not() {
    let mut index = Index::new(GateMode::Suspend);
    let base = ks("apps", "web", None, ("GitRepository", "repo", None));
    let (key, applied) = index.apply_kustomization(&base).expect("named");
    assert!(applied.changed);
    index.apply_source(git("apps", "repo"), Some("r1".into()));
    let spec = index.entry(&key).expect("indexed").spec_digest;
    index.note_finished(&key, spec);
    let refused = record("r1", RevisionState::Refused);
    assert_eq!(index.due(&key, Some(&refused)), None);

    // The suspend gate flips spec.suspend itself: not a change.
    let mut suspended = base.clone();
    suspended.spec.suspend = true;
    let (_, applied) = index.apply_kustomization(&suspended).expect("named");
    assert!(!applied.changed);
    assert_eq!(index.due(&key, Some(&refused)), None);

    // A new patch is: the refused revision may converge now.
    let mut patched = suspended.clone();
    patched.spec.name_prefix = Some("v2-".into());
    let (_, applied) = index.apply_kustomization(&patched).expect("named");
    assert!(applied.changed);
    assert_eq!(index.due(&key, Some(&refused)), Some(Due::SpecChanged));

    // A relist keeps what this process knows about finished runs.
    index.reset_kustomizations([&patched]);
    assert_eq!(index.due(&key, Some(&refused)), Some(Due::SpecChanged));
    let spec = index.entry(&key).expect("indexed").spec_digest;
    index.note_finished(&key, spec);
    index.reset_kustomizations([&patched]);
    assert_eq!(index.due(&key, Some(&refused)), None);
}

#[test]
fn handled_keys_are_sorted_and_filter_by_namespace() {
    let mut index = Index::new(GateMode::Reconcile);
    for (ns, name) in [
        ("b", "x"),
        ("a", "z"),
        ("a", "y"),
        ("ab", "w"),
        ("c", "off"),
    ] {
        let gate = (name == "off").then_some("off");
        index.apply_kustomization(&ks(ns, name, gate, ("GitRepository", "repo", None)));
    }
    let names = |keys: Vec<Key>| keys.iter().map(Key::to_string).collect::<Vec<_>>();
    assert_eq!(
        names(index.handled_keys(None)),
        ["a/y", "a/z", "ab/w", "b/x"]
    );
    assert_eq!(names(index.handled_keys(Some("a"))), ["a/y", "a/z"]);
    assert_eq!(names(index.handled_keys(Some("c"))), Vec::<String>::new());
    assert_eq!(index.handled_count(), 4);
}

#[test]
fn relisting_sources_drops_the_vanished_ones_of_that_kind_only() {
    let mut index = Index::new(GateMode::Reconcile);
    index.apply_kustomization(&ks("apps", "g", None, ("GitRepository", "repo", None)));
    index.apply_kustomization(&ks("apps", "b", None, ("Bucket", "repo", None)));
    index.apply_source(git("apps", "repo"), Some("r1".into()));
    let bucket = SourceKey {
        kind: SourceKind::Bucket,
        namespace: "apps".into(),
        name: "repo".into(),
    };
    index.apply_source(bucket.clone(), Some("sha256:1".into()));
    index.reset_sources(SourceKind::GitRepository, []);
    assert_eq!(
        index.source_revision(&Key::kustomization("apps", "g")),
        None
    );
    assert_eq!(
        index.source_revision(&Key::kustomization("apps", "b")),
        Some("sha256:1")
    );
}

#[test]
fn after_a_restart_a_refusal_is_retried_only_at_a_new_generation() {
    let mut refused = record("r1", RevisionState::Refused);
    refused.generation = Some(3);
    // (Kustomization generation now, record's generation, due)
    let table: &[(Option<i64>, Option<i64>, Option<Due>)] = &[
        (Some(3), Some(3), None),
        (Some(4), Some(3), Some(Due::SpecChanged)),
        (Some(4), None, None),
        (None, Some(3), None),
    ];
    for (now, then, due) in table {
        let mut index = Index::new(GateMode::Suspend);
        let mut object = ks("apps", "web", None, ("GitRepository", "repo", None));
        object.metadata.generation = *now;
        let (key, _) = index.apply_kustomization(&object).expect("named");
        index.apply_source(git("apps", "repo"), Some("r1".into()));
        let mut last = refused.clone();
        last.generation = *then;
        assert_eq!(
            index.due(&key, Some(&last)),
            *due,
            "now {now:?}, then {then:?}"
        );
        // A converged record is not compared by generation: the suspend gate moves it.
        last.state = RevisionState::Converged;
        assert_eq!(index.due(&key, Some(&last)), None);
    }
}

#[test]
fn a_held_kustomization_is_never_due_and_its_release_is_a_change() {
    let mut index = Index::new(GateMode::Suspend);
    index.apply_source(git("flux-system", "repo"), Some("main@sha1:2".into()));
    let key = Key::kustomization("flux-system", "apps");
    let mut held = ks("flux-system", "apps", None, ("GitRepository", "repo", None));
    held.metadata.annotations = Some(
        [(
            crate::gated::gating::HOLD_ANNOTATION.to_string(),
            "db migration".to_string(),
        )]
        .into(),
    );
    let free = ks("flux-system", "apps", None, ("GitRepository", "repo", None));
    index.apply_kustomization(&free);
    let old = record("main@sha1:1", RevisionState::Converged);
    for (object, last, hold, due, changed) in [
        (&held, None, Some("db migration"), None, true),
        (&held, Some(&old), Some("db migration"), None, false),
        (&free, Some(&old), None, Some(Due::NewRevision), true),
        (&free, None, None, Some(Due::NeverRun), false),
    ] {
        let (_, applied) = index.apply_kustomization(object).unwrap();
        assert_eq!(applied.changed, changed, "{hold:?}");
        assert_eq!(index.hold(&key), hold);
        assert_eq!(index.due(&key, last), due, "{hold:?}");
        // A hook does not queue it while held.
        let routed = index
            .route(&event(
                "GitRepository",
                "flux-system",
                "repo",
                "new revision",
            ))
            .keys;
        assert_eq!(routed.is_empty(), hold.is_some(), "{hold:?}");
    }
    // A reconcile-mode Kustomization a person suspended is held too.
    let mut suspended = ks(
        "flux-system",
        "apps",
        Some("reconcile"),
        ("GitRepository", "repo", None),
    );
    suspended.spec.suspend = true;
    index.apply_kustomization(&suspended);
    assert_eq!(
        index.hold(&key),
        Some(crate::gated::gating::SUSPENDED_IN_FLUX)
    );
    assert_eq!(index.due(&key, None), None);
}

#[test]
fn a_deferred_recheck_waits_while_the_gate_is_open() {
    let mut index = Index::new(GateMode::Suspend);
    index.apply_source(git("flux-system", "repo"), Some("main@sha1:2".into()));
    index.apply_kustomization(&ks(
        "flux-system",
        "apps",
        None,
        ("GitRepository", "repo", None),
    ));
    let key = Key::kustomization("flux-system", "apps");
    let mut last = record("main@sha1:2", RevisionState::Converged);
    last.statefulsets.push(StatefulSetEntry {
        volumes: Default::default(),
        namespace: "apps".into(),
        name: "web".into(),
        outcome: StatefulSetOutcome::Deferred,
        old_uid: None,
        new_uid: None,
        templates: Vec::new(),
        changes: Vec::new(),
        claims: Vec::new(),
        deferred: Vec::new(),
        refusal: None,
        error: None,
    });
    last.handoff = Some(crate::model::Handoff {
        mode: GateMode::Suspend,
        at: "t".into(),
        action: crate::model::HandoffAction::Unsuspended,
        requested_at: None,
        resuspended_at: None,
        attempts: Vec::new(),
        retry_at: None,
    });
    for (outcome, due) in [
        (crate::model::FluxOutcome::Pending, None),
        (crate::model::FluxOutcome::Applied, Some(Due::Deferred)),
    ] {
        last.flux = Some(crate::model::FluxResult {
            outcome,
            applied_revision: None,
            message: None,
            attempted_revision: None,
        });
        assert_eq!(index.due(&key, Some(&last)), due, "{outcome:?}");
    }
}

#[test]
fn artifact_mode_is_due_on_the_upstream_its_external_artifact_names() {
    let ea = SourceKey {
        kind: SourceKind::ExternalArtifact,
        namespace: "flux-system".into(),
        name: "apps".into(),
    };
    let repo = git("flux-system", "repo");
    let mut index = Index::new(GateMode::Off);
    let gated = Key::kustomization("flux-system", "gated");
    let plain = Key::kustomization("flux-system", "plain");
    index.apply_kustomization(&ks(
        "flux-system",
        "gated",
        Some("artifact"),
        ("ExternalArtifact", "apps", None),
    ));
    // A suspend-mode reader of the same ExternalArtifact is due on the ExternalArtifact itself.
    index.apply_kustomization(&ks(
        "flux-system",
        "plain",
        Some("suspend"),
        ("ExternalArtifact", "apps", None),
    ));
    // The upstream not known yet: no revision, so not due.
    assert_eq!(
        index.apply_source(repo.clone(), Some("main@sha1:1".into())),
        Vec::<Key>::new()
    );
    assert_eq!(index.source_revision(&gated), None);
    assert_eq!(index.due(&gated, None), None);
    // The link makes the artifact-mode reader due on the upstream's revision.
    assert_eq!(
        index.apply_upstream(ea.clone(), Some(repo.clone())),
        vec![gated.clone()]
    );
    assert_eq!(
        index.apply_upstream(ea.clone(), Some(repo.clone())),
        Vec::<Key>::new()
    );
    assert_eq!(index.source_revision(&gated), Some("main@sha1:1"));
    assert_eq!(index.due(&gated, None), Some(Due::NeverRun));
    // What the service publishes into the ExternalArtifact concerns only the plain reader.
    assert_eq!(
        index.apply_source(ea.clone(), Some("main@sha1:1".into())),
        vec![plain.clone()]
    );
    assert_eq!(index.source_revision(&plain), Some("main@sha1:1"));
    // A new upstream revision concerns only the artifact-mode reader, and makes it due even
    // though the ExternalArtifact still publishes the old one.
    assert_eq!(
        index.apply_source(repo.clone(), Some("main@sha1:2".into())),
        vec![gated.clone()]
    );
    let converged_1 = record("main@sha1:1", RevisionState::Converged);
    assert_eq!(
        index.due(&gated, Some(&converged_1)),
        Some(Due::NewRevision)
    );
    let refused_2 = record("main@sha1:2", RevisionState::Refused);
    index.note_finished(&gated, index.entry(&gated).unwrap().spec_digest);
    assert_eq!(
        index.due(&gated, Some(&refused_2)),
        None,
        "a refusal of the upstream's revision is not due again"
    );
    // Unlinked (the ExternalArtifact's sourceRef removed or deleted): no revision again.
    assert_eq!(index.apply_upstream(ea.clone(), None), vec![gated.clone()]);
    assert_eq!(index.source_revision(&gated), None);
    index.apply_upstream(ea.clone(), Some(repo.clone()));
    index.delete_source(&ea);
    assert_eq!(index.source_revision(&gated), None);
}

#[test]
fn a_hook_for_an_upstream_routes_to_the_artifact_mode_readers_of_its_external_artifacts() {
    let ea = SourceKey {
        kind: SourceKind::ExternalArtifact,
        namespace: "flux-system".into(),
        name: "apps".into(),
    };
    let repo = git("flux-system", "repo");
    let mut index = Index::new(GateMode::Off);
    index.apply_kustomization(&ks(
        "flux-system",
        "gated",
        Some("artifact"),
        ("ExternalArtifact", "apps", None),
    ));
    index.apply_kustomization(&ks(
        "flux-system",
        "plain",
        Some("suspend"),
        ("ExternalArtifact", "apps", None),
    ));
    index.apply_kustomization(&ks(
        "flux-system",
        "direct",
        Some("suspend"),
        ("GitRepository", "repo", None),
    ));
    index.apply_upstream(ea, Some(repo));
    let gated = Key::kustomization("flux-system", "gated");
    let plain = Key::kustomization("flux-system", "plain");
    let direct = Key::kustomization("flux-system", "direct");
    for (kind, name, want) in [
        // A new commit concerns the readers of the repository, through an ExternalArtifact
        // in artifact mode too.
        ("GitRepository", "repo", vec![direct.clone(), gated.clone()]),
        // What the service publishes into the ExternalArtifact is news only for its plain reader.
        ("ExternalArtifact", "apps", vec![plain.clone()]),
        ("GitRepository", "other", vec![]),
    ] {
        let route = index.route(&event(kind, "flux-system", name, "new revision"));
        assert_eq!(route.keys, want, "{kind}/{name}");
    }
}

#[test]
fn relists_apply_as_they_arrive_and_remove_only_what_their_own_watch_did_not_list() {
    let mut index = Index::new(GateMode::Reconcile);
    index.apply_kustomization(&ks("apps", "a", None, ("GitRepository", "repo-a", None)));
    index.apply_kustomization(&ks("apps", "gone", None, ("GitRepository", "repo-b", None)));
    index.apply_source(git("apps", "repo-a"), Some("main@sha1:1".into()));
    index.apply_source(git("apps", "repo-b"), Some("main@sha1:1".into()));
    let oci = |name: &str| SourceKey::new(SourceKind::OCIRepository, "apps", name);
    index.apply_source(oci("chart"), Some("v1@sha256:1".into()));
    // The Kustomizations' relist and two source watches' relists interleave, as the watches
    // run at once; each applies what it lists as it arrives.
    let ks_relist = index.begin_relist();
    let git_relist = index.begin_source_relist();
    let oci_relist = index.begin_source_relist();
    assert_ne!(git_relist, oci_relist);
    index.apply_kustomization(&ks("apps", "a", None, ("GitRepository", "repo-a", None)));
    index.apply_listed_source(
        git("apps", "repo-a"),
        Some("main@sha1:2".into()),
        git_relist,
    );
    // Applied at once: the new revision is there before the list ends.
    assert_eq!(
        index.source_revision(&Key::kustomization("apps", "a")),
        Some("main@sha1:2")
    );
    index.end_source_relist(SourceKind::GitRepository, None, git_relist);
    index.end_kustomization_relist(ks_relist);
    // The OCI watch listed nothing yet: its source stays until its own relist ends.
    assert_eq!(
        index.handled_keys(None),
        vec![Key::kustomization("apps", "a")]
    );
    assert!(index.entry(&Key::kustomization("apps", "gone")).is_none());
    assert!(index.revisions.contains_key(&oci("chart")));
    assert!(!index.revisions.contains_key(&git("apps", "repo-b")));
    index.end_source_relist(SourceKind::OCIRepository, Some("apps"), oci_relist);
    assert!(!index.revisions.contains_key(&oci("chart")));
    // Readers are kept sorted and once each; a source's names are held once.
    index.apply_kustomization(&ks("apps", "b", None, ("GitRepository", "repo-a", None)));
    index.apply_kustomization(&ks("apps", "b", None, ("GitRepository", "repo-a", None)));
    assert_eq!(
        index.by_source[&git("apps", "repo-a")],
        vec![
            Key::kustomization("apps", "a"),
            Key::kustomization("apps", "b")
        ]
    );
    let (held, _) = index
        .revisions
        .get_key_value(&git("apps", "repo-a"))
        .unwrap();
    let entry = index.entry(&Key::kustomization("apps", "b")).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &held.name,
        &entry.source.as_ref().unwrap().name
    ));
}

#[test]
fn an_entry_keeps_the_kustomizations_retry_schedule() {
    let mut index = Index::new(GateMode::Reconcile);
    let mut with = ks("apps", "a", None, ("GitRepository", "repo", None));
    with.spec.interval = Some("10m".into());
    with.spec.retry_interval = Some("2m30s".into());
    let mut only_interval = ks("apps", "b", None, ("GitRepository", "repo", None));
    only_interval.spec.interval = Some("1h".into());
    let mut neither = ks("apps", "c", None, ("GitRepository", "repo", None));
    neither.spec.interval = Some("soon".into());
    for k in [&with, &only_interval, &neither] {
        index.apply_kustomization(k);
    }
    let retry = |name: &str| {
        index
            .entry(&Key::kustomization("apps", name))
            .unwrap()
            .retry
    };
    assert_eq!(retry("a"), Some(std::time::Duration::from_secs(150)));
    assert_eq!(retry("b"), Some(std::time::Duration::from_secs(3600)));
    assert_eq!(retry("c"), None);
}
