//! Reading Flux objects: unknown fields, defaults, references by table.

use super::read::HasSourceStatus;
use super::*;

#[test]
fn kustomization_reads_with_unknown_fields_and_defaults() {
    let ks: Kustomization = serde_json::from_value(serde_json::json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": "flux-system"},
        "spec": {
            "interval": "10m",
            "sourceRef": {"kind": "GitRepository", "name": "repo"},
            "path": "./apps",
            "prune": true,
            "wait": true,
            "postBuild": {"substitute": {"SIZE": "2Gi"},
                          "substituteFrom": [{"kind": "ConfigMap", "name": "vars", "optional": true}]},
            "commonMetadata": {"labels": {"team": "a"}},
            "futureField": {"x": 1}
        },
        "status": {"lastAppliedRevision": "main@sha1:abc",
                   "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded"}],
                   "inventory": {"entries": []}}
    }))
    .unwrap();
    assert_eq!(ks.spec.path.as_deref(), Some("./apps"));
    assert_eq!(ks.spec.source_ref.kind, "GitRepository");
    assert!(ks.spec.prune);
    assert!(!ks.spec.suspend);
    let pb = ks.spec.post_build.as_ref().unwrap();
    assert_eq!(pb.substitute["SIZE"], "2Gi");
    assert!(pb.substitute_from[0].optional);
    let status = ks.status.unwrap();
    assert_eq!(
        status.last_applied_revision.as_deref(),
        Some("main@sha1:abc")
    );
    assert_eq!(status.conditions[0].type_, "Ready");
}

#[test]
fn source_without_artifact_names_itself_and_its_ready_message() {
    let s = Source {
        kind: SourceKind::GitRepository,
        namespace: "flux-system".into(),
        name: "repo".into(),
        generation: Some(1),
        status: SourceStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "False".into(),
                message: Some("auth failed".into()),
                ..Default::default()
            }],
            ..Default::default()
        },
    };
    let e = s.artifact().unwrap_err().to_string();
    assert_eq!(
        e,
        "source GitRepository/flux-system/repo is not ready: it has no artifact (Ready=False: auth failed)"
    );
}

#[test]
fn source_references_by_table() {
    let ks = |kind: &str, namespace: Option<&str>| Kustomization {
        metadata: kube::core::ObjectMeta {
            name: Some("apps".into()),
            namespace: Some("team".into()),
            ..Default::default()
        },
        spec: KustomizationSpec {
            source_ref: CrossNamespaceSourceReference {
                kind: kind.into(),
                name: "repo".into(),
                namespace: namespace.map(Into::into),
                ..Default::default()
            },
            ..Default::default()
        },
        status: None,
    };
    let ok = |k: SourceKind, ns: &str| Ok((k, ns.to_string(), "repo".to_string()));
    for (kind, namespace, allow, expected) in [
        ("GitRepository", None, false, ok(SourceKind::GitRepository, "team")),
        ("OCIRepository", Some("team"), false, ok(SourceKind::OCIRepository, "team")),
        ("Bucket", Some(""), false, ok(SourceKind::Bucket, "team")),
        ("GitRepository", Some("flux-system"), true, ok(SourceKind::GitRepository, "flux-system")),
        ("GitRepository", Some("flux-system"), false, Err(
            "Kustomization team/apps: can't access 'GitRepository/flux-system/repo', cross-namespace references have been blocked".to_string())),
        ("HelmChart", None, true, Err(
            "Kustomization team/apps: unsupported spec.sourceRef.kind \"HelmChart\" (expected GitRepository, OCIRepository, Bucket or ExternalArtifact)".to_string())),
    ] {
        let got = source_reference(&ks(kind, namespace), allow).map_err(|e| e.to_string());
        assert_eq!(got, expected, "{kind} {namespace:?} {allow}");
    }
}

#[test]
fn upstream_references_by_table() {
    let ea = |reference: Option<serde_json::Value>| -> ExternalArtifact {
        let mut v = serde_json::json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "ExternalArtifact",
            "metadata": {"name": "apps", "namespace": "team"}, "spec": {}
        });
        if let Some(r) = reference {
            v["spec"]["sourceRef"] = r;
        }
        serde_json::from_value(v).unwrap()
    };
    let ok = |k: SourceKind, ns: &str| Ok((k, ns.to_string(), "repo".to_string()));
    for (reference, allow, expected) in [
        (Some(serde_json::json!({"kind": "GitRepository", "name": "repo"})), false, ok(SourceKind::GitRepository, "team")),
        (Some(serde_json::json!({"kind": "OCIRepository", "name": "repo", "namespace": "team"})), false, ok(SourceKind::OCIRepository, "team")),
        (Some(serde_json::json!({"kind": "Bucket", "name": "repo", "namespace": "flux-system"})), true, ok(SourceKind::Bucket, "flux-system")),
        (Some(serde_json::json!({"kind": "GitRepository", "name": "repo", "namespace": "flux-system"})), false, Err(
            "ExternalArtifact team/apps: can't access 'GitRepository/flux-system/repo', cross-namespace references have been blocked".to_string())),
        (Some(serde_json::json!({"kind": "ExternalArtifact", "name": "repo"})), true, Err(
            "ExternalArtifact team/apps: unsupported spec.sourceRef.kind \"ExternalArtifact\" (the artifact gate publishes from a GitRepository, OCIRepository or Bucket)".to_string())),
        (Some(serde_json::json!({"kind": "HelmChart", "name": "repo"})), true, Err(
            "ExternalArtifact team/apps: unsupported spec.sourceRef.kind \"HelmChart\" (the artifact gate publishes from a GitRepository, OCIRepository or Bucket)".to_string())),
        (None, true, Err(
            "ExternalArtifact team/apps has no spec.sourceRef: the artifact gate publishes the converged revisions of the GitRepository, OCIRepository or Bucket it names".to_string())),
    ] {
        let shown = format!("{reference:?} {allow}");
        let got = upstream_reference(&ea(reference), allow).map_err(|e| e.to_string());
        assert_eq!(got, expected, "{shown}");
    }
}

#[test]
fn source_kinds_parse_exactly() {
    for (text, kind) in [
        ("GitRepository", Some(SourceKind::GitRepository)),
        ("OCIRepository", Some(SourceKind::OCIRepository)),
        ("Bucket", Some(SourceKind::Bucket)),
        ("ExternalArtifact", Some(SourceKind::ExternalArtifact)),
        ("HelmRepository", None),
        ("gitrepository", None),
    ] {
        assert_eq!(SourceKind::parse(text), kind, "{text}");
    }
}

#[test]
fn source_status_reads_artifact() {
    let repo: GitRepository = serde_json::from_value(serde_json::json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "r", "namespace": "n", "generation": 3},
        "spec": {"url": "https://example.com/r", "interval": "1m", "ref": {"branch": "main"}},
        "status": {"artifact": {"url": "http://sc/gitrepository/n/r/abc.tar.gz",
            "revision": "main@sha1:abc", "digest": "sha256:00", "path": "gitrepository/n/r/abc.tar.gz",
            "size": 10, "lastUpdateTime": "2026-11-29T00:00:00Z"}}
    }))
    .unwrap();
    let (generation, status) = repo.into_parts();
    assert_eq!(generation, Some(3));
    let a = status.artifact.unwrap();
    assert_eq!(a.revision, "main@sha1:abc");
    assert_eq!(a.size, Some(10));
}
