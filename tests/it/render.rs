//! Rendering revisions like kustomize-controller: real tar.gz artifacts in Flux's layout, served
//! by a local stand-in for source-controller, rendered with the real `kubectl kustomize`, and
//! compared with expected YAML; plus every bad input, through the library and the CLI.

use test_support::flux_archive;

use std::path::{Path, PathBuf};
use std::process::Command;

use flux_archive::{ArtifactServer, files_under, flux_artifact, sha256};
use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::objects::Kustomization;
use flux_converger::flux::render::{
    self, KustomizeCommand, Owner, RenderError, RenderRequest, Rendered,
};
use flux_converger::flux::substitute::{Variables, collect_variables};
use serde_json::Value;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/render")
        .join(rel)
}

fn kustomization(rel: &str) -> Kustomization {
    let text = std::fs::read_to_string(data(rel)).unwrap();
    let value: Value = serde_saphyr::from_str(&text).unwrap();
    serde_json::from_value(value).unwrap()
}

fn expected(rel: &str) -> Vec<Value> {
    render::parse_stream(&std::fs::read_to_string(data(rel)).unwrap()).unwrap()
}

fn artifact_of(dir: &str) -> Vec<u8> {
    let files = files_under(&data(dir));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    flux_artifact(&refs)
}

/// Serves `archive` like source-controller, fetches and verifies it, renders it for `ks`.
async fn fetch_and_render(
    archive: Vec<u8>,
    ks: &Kustomization,
    variables: &Variables,
) -> Result<Rendered, RenderError> {
    flux_converger::tls::install_crypto_provider();
    let server = ArtifactServer::start().await;
    let url = server.put("gitrepository/flux-system/repo/sha.tar.gz", archive.clone());
    let fetcher = Fetcher::new(FetchOptions::default()).unwrap();
    let unpacked = fetcher.fetch(&url, &sha256(&archive)).await.unwrap();
    let owner = Owner {
        name: ks.metadata.name.as_deref().unwrap(),
        namespace: ks.metadata.namespace.as_deref().unwrap(),
        spec: &ks.spec,
    };
    render::render(&RenderRequest {
        root: unpacked.root(),
        owner,
        variables,
        strict: true,
        kustomize: &KustomizeCommand::default(),
    })
    .await
}

#[tokio::test]
async fn plain_directory_renders_like_flux_generator() {
    let ks = kustomization("plain.ks.yaml");
    let rendered = fetch_and_render(artifact_of("plain"), &ks, &Variables::new())
        .await
        .unwrap();
    assert_eq!(rendered.objects, expected("plain.expected.yaml"));
    let sts: Vec<(&str, &str)> = rendered
        .statefulsets
        .iter()
        .map(|s| (s.namespace.as_str(), s.name.as_str()))
        .collect();
    assert_eq!(sts, [("prod", "db")]);
}

#[tokio::test]
async fn overlay_with_patches_components_images_prefix_and_common_metadata() {
    let ks = kustomization("overlay.ks.yaml");
    let rendered = fetch_and_render(artifact_of("overlay"), &ks, &Variables::new())
        .await
        .unwrap();
    assert_eq!(rendered.objects, expected("overlay.expected.yaml"));
    assert_eq!(rendered.statefulsets.len(), 1);
    let sts = &rendered.statefulsets[0];
    assert_eq!(
        (sts.namespace.as_str(), sts.name.as_str()),
        ("db-prod", "team-db-v1")
    );
    assert_eq!(
        sts.object
            .pointer("/spec/volumeClaimTemplates/0/spec/resources/requests/storage"),
        Some(&Value::from("10Gi"))
    );
}

#[tokio::test]
async fn target_namespace_overrides_every_namespaced_object() {
    let mut ks = kustomization("plain.ks.yaml");
    ks.spec.target_namespace = Some("elsewhere".into());
    let rendered = fetch_and_render(artifact_of("plain"), &ks, &Variables::new())
        .await
        .unwrap();
    for o in &rendered.objects {
        if o["kind"] != "Namespace" {
            assert_eq!(o["metadata"]["namespace"], "elsewhere", "{o}");
        }
    }
    assert_eq!(rendered.statefulsets[0].namespace, "elsewhere");
}

#[tokio::test]
async fn statefulset_without_namespace_is_refused() {
    let mut ks = kustomization("plain.ks.yaml");
    ks.spec.target_namespace = None;
    let e = fetch_and_render(artifact_of("plain"), &ks, &Variables::new())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("StatefulSet/db namespace not specified"),
        "{e}"
    );
}

fn tiny_ks(path: &str) -> Kustomization {
    let mut ks = kustomization("plain.ks.yaml");
    ks.spec.path = Some(path.into());
    ks
}

#[tokio::test]
async fn bad_trees_are_refused_naming_the_file_by_table() {
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n";
    // (what, artifact files, spec.path, what the error must say)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str, Vec<&'a str>);
    let cases: Vec<Case> = vec![
        (
            "missing spec.path",
            vec![("apps/a.yaml", cm)],
            "./nope",
            vec!["kustomization path not found: \"./nope\""],
        ),
        (
            "spec.path escaping",
            vec![("apps/a.yaml", cm)],
            "../../etc",
            vec!["spec.path \"../../etc\" escapes the artifact root"],
        ),
        (
            "unparsable YAML",
            vec![("apps/a.yaml", cm), ("apps/sub/broken.yaml", "a: [\n")],
            "./apps",
            vec!["failed to decode Kubernetes YAML from ./apps/sub/broken.yaml"],
        ),
        (
            "resource escaping the root",
            vec![(
                "apps/kustomization.yaml",
                "resources:\n- ../../../etc/passwd\n",
            )],
            "./apps",
            vec![
                "./apps/kustomization.yaml: resources \"../../../etc/passwd\" escapes the artifact root",
            ],
        ),
        (
            "kustomize failure",
            vec![("apps/kustomization.yaml", "resources:\n- missing.yaml\n")],
            "./apps",
            vec!["kustomize build failed for ./apps", "missing.yaml"],
        ),
        (
            "object without a name",
            vec![(
                "apps/a.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels: {a: b}\n",
            )],
            "./apps",
            vec!["kustomize build failed"],
        ),
    ];
    for (what, files, path, needles) in cases {
        let e = fetch_and_render(flux_artifact(&files), &tiny_ks(path), &Variables::new())
            .await
            .unwrap_err();
        assert!(e.is_bad_input(), "{what}: {e}");
        let text = e.to_string();
        for needle in needles {
            assert!(text.contains(needle), "{what}: {text}");
        }
    }
}

#[tokio::test]
async fn kustomize_stderr_is_quoted() {
    let files = [("apps/kustomization.yaml", "resources:\n- missing.yaml\n")];
    let e = fetch_and_render(flux_artifact(&files), &tiny_ks("./apps"), &Variables::new())
        .await
        .unwrap_err();
    let RenderError::KustomizeFailed { stderr, .. } = &e else {
        panic!("expected a kustomize failure, got {e}")
    };
    assert!(stderr.contains("missing.yaml"), "{stderr}");
    assert!(
        stderr.contains("accumulating resources"),
        "kustomize's own words: {stderr}"
    );
}

#[tokio::test]
async fn a_missing_kustomize_binary_is_a_failure_not_bad_input() {
    let ks = tiny_ks("./apps");
    let archive = flux_artifact(&[(
        "apps/a.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
    )]);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), archive).unwrap();
    let unpacked = flux_converger::flux::artifact::unpack_file(file.path(), Default::default())
        .await
        .unwrap();
    let e = render::render(&RenderRequest {
        root: unpacked.root(),
        owner: Owner {
            name: "a",
            namespace: "b",
            spec: &ks.spec,
        },
        variables: &Variables::new(),
        strict: true,
        kustomize: &KustomizeCommand::parse("/nonexistent/kustomize build").unwrap(),
    })
    .await
    .unwrap_err();
    assert!(matches!(e, RenderError::KustomizeSpawn { .. }), "{e}");
    assert!(!e.is_bad_input());
}

#[test]
fn invalid_variable_names_are_refused() {
    let bad: std::collections::BTreeMap<_, _> = [("DB-SIZE".to_string(), "1Gi".to_string())].into();
    let e = collect_variables(&[], Some(&bad)).unwrap_err().to_string();
    assert!(e.contains("'DB-SIZE' var name is invalid"), "{e}");
}

// ---- the CLI, offline ----

fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flux-converger"))
        .arg("render")
        .args(args)
        .env_remove("SOURCE_CONTROLLER_LOCALHOST")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn cli_renders_a_directory_and_an_artifact_identically() {
    let ks = data("overlay.ks.yaml");
    let (code, from_dir, err) = cli(&[
        "--path",
        path_str(&data("overlay")),
        "--kustomization-file",
        path_str(&ks),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        render::parse_stream(&from_dir).unwrap(),
        expected("overlay.expected.yaml")
    );

    let archive = tempfile::Builder::new()
        .suffix(".tar.gz")
        .tempfile()
        .unwrap();
    std::fs::write(archive.path(), artifact_of("overlay")).unwrap();
    let (code, from_artifact, err) = cli(&[
        "--artifact",
        path_str(archive.path()),
        "--kustomization-file",
        path_str(&ks),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(from_artifact, from_dir);
    // The offline --path render works on a copy: the user's tree is untouched.
    assert!(!data("overlay/kustomization.yaml").exists());
    let prod = std::fs::read_to_string(data("overlay/overlays/prod/kustomization.yaml")).unwrap();
    assert!(!prod.contains("db-prod"), "{prod}");
}

#[test]
fn cli_statefulsets_only() {
    let (code, out, err) = cli(&[
        "--path",
        path_str(&data("plain")),
        "--kustomization-file",
        path_str(&data("plain.ks.yaml")),
        "--statefulsets",
    ]);
    assert_eq!(code, 0, "{err}");
    let objects = render::parse_stream(&out).unwrap();
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0]["kind"], "StatefulSet");
    assert_eq!(objects[0]["metadata"]["namespace"], "prod");
}

#[test]
fn cli_bad_input_exits_2_naming_the_problem() {
    let plain = data("plain");
    let ks = data("plain.ks.yaml");
    let missing_path_ks = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        missing_path_ks.path(),
        std::fs::read_to_string(&ks)
            .unwrap()
            .replace("./apps", "./does-not-exist"),
    )
    .unwrap();
    let bad_vars = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad_vars.path(), "DB-SIZE: 1Gi\n").unwrap();
    let not_a_kustomization = plain.join("apps/namespace.yaml");
    let not_tar = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(not_tar.path(), "plain text").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "--path",
                path_str(&plain),
                "--kustomization-file",
                path_str(missing_path_ks.path()),
            ],
            "kustomization path not found: \"./does-not-exist\"",
        ),
        (
            vec![
                "--path",
                path_str(&plain),
                "--kustomization-file",
                path_str(&ks),
                "--vars",
                path_str(bad_vars.path()),
            ],
            "'DB-SIZE' var name is invalid",
        ),
        (
            vec![
                "--artifact",
                path_str(not_tar.path()),
                "--kustomization-file",
                path_str(&ks),
            ],
            "not a valid tar.gz",
        ),
        (
            vec![
                "--path",
                path_str(&plain),
                "--kustomization-file",
                path_str(&not_a_kustomization),
            ],
            "no kustomize.toolkit.fluxcd.io Kustomization in the file",
        ),
        (
            vec!["--kustomization", "ns/name/extra"],
            "expected NAMESPACE/NAME or NAME",
        ),
        (
            vec!["--kustomization", "a/b", "-n", "c"],
            "names namespace \"a\", but --namespace is \"c\"",
        ),
        (vec!["--path", path_str(&plain)], "--kustomization-file"),
        (vec![], "required"),
    ];
    for (args, needle) in cases {
        let (code, out, err) = cli(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: nothing on stdout on error");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn cli_kustomize_failure_quotes_stderr_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("apps")).unwrap();
    std::fs::write(
        dir.path().join("apps/kustomization.yaml"),
        "resources:\n- nothere.yaml\n",
    )
    .unwrap();
    let (code, _, err) = cli(&[
        "--path",
        path_str(dir.path()),
        "--kustomization-file",
        path_str(&data("plain.ks.yaml")),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("kustomize build failed for ./apps"), "{err}");
    assert!(err.contains("nothere.yaml"), "{err}");
}

// ---- post-build substitution ----

fn db_sizes(size: &str) -> flux_converger::flux::substitute::VarSource {
    flux_converger::flux::substitute::VarSource {
        kind: flux_converger::flux::substitute::VarSourceKind::ConfigMap,
        name: "db-sizes".into(),
        optional: false,
        data: Some(
            [
                ("DB_SIZE".to_string(), size.to_string()),
                ("REPLICAS".into(), "2".into()),
            ]
            .into(),
        ),
    }
}

fn absent_optional_secret() -> flux_converger::flux::substitute::VarSource {
    flux_converger::flux::substitute::VarSource {
        kind: flux_converger::flux::substitute::VarSourceKind::Secret,
        name: "optional-overrides".into(),
        optional: true,
        data: None,
    }
}

#[tokio::test]
async fn sizes_from_substitute_from_and_substitute() {
    let ks = kustomization("vars.ks.yaml");
    let inline = ks.spec.post_build.as_ref().unwrap().substitute.clone();
    let vars =
        collect_variables(&[db_sizes("5Gi"), absent_optional_secret()], Some(&inline)).unwrap();
    let rendered = fetch_and_render(artifact_of("vars"), &ks, &vars)
        .await
        .unwrap();
    assert_eq!(rendered.objects, expected("vars.expected.yaml"));
    let sts = &rendered.statefulsets[0].object;
    assert_eq!(
        sts.pointer("/spec/volumeClaimTemplates/0/spec/resources/requests/storage"),
        Some(&Value::from("5Gi"))
    );
    // `substitute` wins over `substituteFrom`, and `${REPLICAS:=1}` unquoted becomes a number.
    assert_eq!(sts.pointer("/spec/replicas"), Some(&Value::from(3)));
}

#[tokio::test]
async fn strict_mode_refuses_an_undefined_size_naming_object_and_variable() {
    let ks = kustomization("vars.ks.yaml");
    let inline = ks.spec.post_build.as_ref().unwrap().substitute.clone();
    let vars = collect_variables(&[], Some(&inline)).unwrap();
    let e = fetch_and_render(artifact_of("vars"), &ks, &vars)
        .await
        .unwrap_err();
    assert!(e.is_bad_input());
    assert_eq!(
        e.to_string(),
        "post build failed for 'StatefulSet/db/db': envsubst error: variable substitution failed: variable not set (strict mode): \"DB_SIZE\""
    );
}

#[tokio::test]
async fn missing_required_substitute_from_is_refused() {
    let missing = flux_converger::flux::substitute::VarSource {
        data: None,
        ..db_sizes("1Gi")
    };
    let e = collect_variables(&[missing], None).unwrap_err().to_string();
    assert_eq!(
        e,
        "substitute from 'ConfigMap/db-sizes' error: configmaps \"db-sizes\" not found"
    );
}

#[test]
fn cli_vars_file_fills_sizes_and_strict_can_be_turned_off() {
    let (dir, ks, values) = (data("vars"), data("vars.ks.yaml"), data("vars.values.yaml"));
    let args = [
        "--path",
        path_str(&dir),
        "--kustomization-file",
        path_str(&ks),
    ];
    let mut with_vars = args.to_vec();
    with_vars.extend(["--vars", path_str(&values)]);
    let (code, out, err) = cli(&with_vars);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        render::parse_stream(&out).unwrap(),
        expected("vars.expected.yaml")
    );

    let (code, out, err) = cli(&args);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("variable not set (strict mode): \"DB_SIZE\""),
        "{err}"
    );
    assert!(err.contains("StatefulSet/db/db"), "{err}");
    assert_eq!(err.matches("DB_SIZE").count(), 1, "said once: {err}");

    let mut lenient = args.to_vec();
    lenient.extend(["--strict-substitution=false", "--statefulsets"]);
    let (code, out, err) = cli(&lenient);
    assert_eq!(code, 0, "{err}");
    let sts = render::parse_stream(&out).unwrap();
    assert_eq!(
        sts[0].pointer("/spec/volumeClaimTemplates/0/spec/resources/requests/storage"),
        Some(&Value::Null),
        "non-strict: unset reads as empty, as in Flux"
    );
}

// ---- the cluster: Kustomization, source and substituteFrom in the fake API server ----

use fake_apiserver::FakeApiServer;
use flux_converger::flux::objects::ObjectsError;
use flux_converger::flux::render::resolve::{ResolveError, Resolver};
use serde_json::json;

const ARTIFACT_PATH: &str = "gitrepository/flux-system/repo/0123abcd.tar.gz";

fn git_repository(url: &str, digest: &str, revision: &str) -> Value {
    json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "repo", "namespace": "flux-system"},
        "spec": {"interval": "1m", "url": "https://example.com/repo.git", "ref": {"branch": "main"}},
        "status": {
            "artifact": {"url": url, "digest": digest, "revision": revision,
                         "path": ARTIFACT_PATH, "size": 1, "lastUpdateTime": "2026-11-29T00:00:00Z"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                            "message": "stored artifact", "lastTransitionTime": "2026-11-29T00:00:00Z"}]
        }
    })
}

fn db_sizes_config_map(size: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "db-sizes", "namespace": "flux-system"},
           "data": {"DB_SIZE": size, "REPLICAS": "2"}})
}

/// A fake cluster holding the `vars` Kustomization, its GitRepository (artifact served locally)
/// and the ConfigMap its sizes come from.
async fn cluster() -> (FakeApiServer, ArtifactServer, String) {
    flux_converger::tls::install_crypto_provider();
    let server = ArtifactServer::start().await;
    let archive = artifact_of("vars");
    let url = server.put(ARTIFACT_PATH, archive.clone());
    let fake = FakeApiServer::new();
    fake.seed_yaml(&std::fs::read_to_string(data("vars.ks.yaml")).unwrap());
    fake.seed(git_repository(
        &url,
        &sha256(&archive),
        "main@sha1:0123abcd",
    ));
    fake.seed(db_sizes_config_map("5Gi"));
    (fake, server, url)
}

fn resolver(fake: &FakeApiServer) -> Resolver {
    Resolver {
        client: fake.client(),
        fetcher: Fetcher::new(FetchOptions::default()).unwrap(),
        kustomize: KustomizeCommand::default(),
        strict: true,
        allow_cross_namespace: true,
    }
}

#[tokio::test]
async fn cluster_render_takes_sizes_from_a_config_map() {
    let (fake, _server, _) = cluster().await;
    let resolved = resolver(&fake).resolve("flux-system", "db").await.unwrap();
    assert_eq!(resolved.revision, "main@sha1:0123abcd");
    assert_eq!(
        resolved.source.display_name(),
        "GitRepository/flux-system/repo"
    );
    assert_eq!(resolved.rendered.objects, expected("vars.expected.yaml"));
    let sts = &resolved.rendered.statefulsets[0];
    assert_eq!((sts.namespace.as_str(), sts.name.as_str()), ("db", "db"));
    // A new size in the ConfigMap is the size rendered next time.
    fake.seed(db_sizes_config_map("8Gi"));
    let resolved = resolver(&fake).resolve("flux-system", "db").await.unwrap();
    assert_eq!(
        resolved.rendered.statefulsets[0]
            .object
            .pointer("/spec/volumeClaimTemplates/0/spec/resources/requests/storage"),
        Some(&Value::from("8Gi"))
    );
    assert!(
        fake.requests().iter().all(|r| !r.is_write()),
        "render only reads"
    );
}

#[tokio::test]
async fn superseded_artifact_is_fetched_again_after_rereading_the_source() {
    let (fake, server, url) = cluster().await;
    // The source still advertises an artifact that was garbage-collected; when it is asked
    // for, source-controller has meanwhile published the next revision.
    let archive = artifact_of("vars");
    let gone = server.url("gitrepository/flux-system/repo/old.tar.gz");
    fake.seed(git_repository(&gone, &sha256(&archive), "main@sha1:old"));
    let (fake2, digest) = (fake.clone(), sha256(&archive));
    *server.state.on_missing.lock().unwrap() = Some(Box::new(move |_| {
        fake2.seed(git_repository(&url, &digest, "main@sha1:0123abcd"));
    }));
    let resolved = resolver(&fake).resolve("flux-system", "db").await.unwrap();
    assert_eq!(resolved.revision, "main@sha1:0123abcd");
    assert_eq!(
        server.requests(),
        ["gitrepository/flux-system/repo/old.tar.gz", ARTIFACT_PATH]
    );
}

#[tokio::test]
async fn a_cluster_read_without_an_answer_ends_at_the_call_deadline() {
    let (fake, _server, _) = cluster().await;
    fake.add_fault(fake_apiserver::FaultRule {
        method: Some(http::Method::GET),
        path_contains: "/kustomizations/db".into(),
        nth: 0,
        action: fake_apiserver::Fault::Delay(std::time::Duration::from_secs(30)),
    });
    let e = resolver(&fake)
        .resolve_within("flux-system", "db", std::time::Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(!e.is_bad_input(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("Kustomization flux-system/db") && text.contains("200 ms"),
        "{text}"
    );
}

#[tokio::test]
async fn artifact_gone_twice_is_reported() {
    let (fake, server, _) = cluster().await;
    let gone = server.url("gitrepository/flux-system/repo/old.tar.gz");
    fake.seed(git_repository(&gone, &sha256(b""), "main@sha1:old"));
    let e = resolver(&fake)
        .resolve("flux-system", "db")
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("GitRepository/flux-system/repo"),
        "{e}"
    );
    assert!(e.to_string().contains("not found (404)"), "{e}");
    assert_eq!(server.requests().len(), 2, "one re-read, not more");
}

#[tokio::test]
async fn cluster_bad_inputs_name_the_object_by_table() {
    type Setup = Box<dyn Fn(&FakeApiServer, &ArtifactServer)>;
    let cases: Vec<(&str, &str, Setup, &str)> = vec![
        (
            "missing Kustomization",
            "nope",
            Box::new(|_, _| {}),
            "Kustomization flux-system/nope not found",
        ),
        (
            "missing source",
            "db",
            Box::new(|f, _| {
                let mut ks: Value =
                    serde_saphyr::from_str(&std::fs::read_to_string(data("vars.ks.yaml")).unwrap())
                        .unwrap();
                ks["spec"]["sourceRef"]["name"] = json!("other");
                f.seed(ks);
            }),
            "GitRepository flux-system/other not found",
        ),
        (
            "source without artifact",
            "db",
            Box::new(|f, _| {
                let mut repo = git_repository("", "", "");
                repo["status"] = json!({"conditions": [{"type": "Ready", "status": "False",
                "reason": "GitOperationFailed", "message": "authentication required"}]});
                f.seed(repo);
            }),
            "source GitRepository/flux-system/repo is not ready: it has no artifact (Ready=False: authentication required)",
        ),
        (
            "digest mismatch",
            "db",
            Box::new(|f, s| {
                let url = s.url(ARTIFACT_PATH);
                f.seed(git_repository(
                    &url,
                    &sha256(b"another revision"),
                    "main@sha1:0123abcd",
                ));
            }),
            "source GitRepository/flux-system/repo: artifact http://",
        ),
        (
            "missing substituteFrom ConfigMap",
            "db",
            Box::new(|f, _| {
                let mut ks: Value =
                    serde_saphyr::from_str(&std::fs::read_to_string(data("vars.ks.yaml")).unwrap())
                        .unwrap();
                ks["spec"]["postBuild"]["substituteFrom"][0]["name"] = json!("absent");
                f.seed(ks);
            }),
            "substitute from 'ConfigMap/absent' error: configmaps \"absent\" not found",
        ),
        (
            "unsupported source kind",
            "db",
            Box::new(|f, _| {
                let mut ks: Value =
                    serde_saphyr::from_str(&std::fs::read_to_string(data("vars.ks.yaml")).unwrap())
                        .unwrap();
                ks["spec"]["sourceRef"]["kind"] = json!("HelmRepository");
                f.seed(ks);
            }),
            "unsupported spec.sourceRef.kind \"HelmRepository\"",
        ),
        (
            "undefined variable",
            "db",
            Box::new(|f, _| {
                f.seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "db-sizes", "namespace": "flux-system"}, "data": {"OTHER": "x"}}));
            }),
            "variable not set (strict mode): \"DB_SIZE\"",
        ),
    ];
    for (what, name, setup, needle) in cases {
        let (fake, server, _) = cluster().await;
        setup(&fake, &server);
        let e = resolver(&fake)
            .resolve("flux-system", name)
            .await
            .unwrap_err();
        assert!(e.is_bad_input(), "{what}: {e}");
        assert!(e.to_string().contains(needle), "{what}: {e}");
    }
}

#[tokio::test]
async fn a_missing_crd_is_told_apart_from_a_missing_object() {
    let (fake, _server, _) = cluster().await;
    let mut ks: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(data("vars.ks.yaml")).unwrap()).unwrap();
    ks["spec"]["sourceRef"]["kind"] = json!("OCIRepository");
    fake.seed(ks);
    // Without the CRD the server answers 404 without details, and discovery 404s too.
    let not_served = |nth| fake_apiserver::FaultRule {
        method: None,
        path_contains: "/apis/source.toolkit.fluxcd.io/v1".into(),
        nth,
        action: fake_apiserver::Fault::Status {
            code: 404,
            reason: "NotFound".into(),
            message: "the server could not find the requested resource".into(),
        },
    };
    fake.add_fault(not_served(0));
    fake.add_fault(not_served(1));
    let e = resolver(&fake)
        .resolve("flux-system", "db")
        .await
        .unwrap_err();
    assert!(
        matches!(e, ResolveError::Objects(ObjectsError::CrdMissing { .. })),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("the CRD ocirepositories.source.toolkit.fluxcd.io is not installed"),
        "{e}"
    );
    // With the CRD served, the same missing object is just missing.
    let e = resolver(&fake)
        .resolve("flux-system", "db")
        .await
        .unwrap_err();
    assert!(
        matches!(e, ResolveError::Objects(ObjectsError::NotFound { .. })),
        "{e}"
    );
    assert_eq!(e.to_string(), "OCIRepository flux-system/repo not found");
}

#[tokio::test]
async fn cli_renders_from_the_cluster_through_source_controller_localhost() {
    let (fake, server, _) = cluster().await;
    let archive = artifact_of("vars");
    let in_cluster =
        format!("http://source-controller.flux-system.svc.cluster.local./{ARTIFACT_PATH}");
    fake.seed(git_repository(
        &in_cluster,
        &sha256(&archive),
        "main@sha1:0123abcd",
    ));
    let served = fake.serve().await;
    // The fake and the artifact server run on this test's runtime: wait for the binary
    // asynchronously so they keep answering.
    let run = async |args: &[&str]| {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_flux-converger"))
            .arg("render")
            .args(args)
            .env("KUBECONFIG", &served.kubeconfig)
            .env("SOURCE_CONTROLLER_LOCALHOST", server.addr.to_string())
            .output()
            .await
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(&["--kustomization", "flux-system/db", "--statefulsets"]).await;
    assert_eq!(code, 0, "{err}");
    let sts = render::parse_stream(&out).unwrap();
    assert_eq!(sts.len(), 1);
    assert_eq!(
        sts[0].pointer("/spec/volumeClaimTemplates/0/spec/resources/requests/storage"),
        Some(&Value::from("5Gi"))
    );
    assert_eq!(server.requests(), [ARTIFACT_PATH]);
    // kubectl's spelling: NAME with -n, the kubeconfig named by flag (here also in $KUBECONFIG).
    let kubeconfig = served.kubeconfig.display().to_string();
    let (code, by_name, err) = run(&[
        "--kubeconfig",
        &kubeconfig,
        "-n",
        "flux-system",
        "--kustomization",
        "db",
        "--statefulsets",
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(by_name, out);

    let (code, out, err) = run(&["--kustomization", "flux-system/absent"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("Kustomization flux-system/absent not found"),
        "{err}"
    );
}

#[tokio::test]
async fn cross_namespace_source_refs_can_be_blocked() {
    let (fake, _server, _) = cluster().await;
    let mut ks: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(data("vars.ks.yaml")).unwrap()).unwrap();
    ks["spec"]["sourceRef"]["namespace"] = json!("shared");
    fake.seed(ks);
    let blocked = Resolver {
        allow_cross_namespace: false,
        ..resolver(&fake)
    };
    let e = blocked.resolve("flux-system", "db").await.unwrap_err();
    assert!(e.is_bad_input());
    assert_eq!(
        e.to_string(),
        "Kustomization flux-system/db: can't access 'GitRepository/shared/repo', cross-namespace references have been blocked"
    );
    // Allowed (Flux's default), the reference is followed into the other namespace.
    let e = resolver(&fake)
        .resolve("flux-system", "db")
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "GitRepository shared/repo not found");
}

/// A tree `apps/` of one small ConfigMap and `big.yaml`, a ConfigMap padded to `big` bytes.
fn tree_with_a_big_file(big: usize) -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let small = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: small\n";
    let mut padded = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\n");
    while padded.len() < big {
        padded.push_str("# padding\n");
    }
    padded.truncate(big);
    std::fs::create_dir_all(dir.path().join("apps")).unwrap();
    std::fs::write(dir.path().join("apps/a.yaml"), small).unwrap();
    std::fs::write(dir.path().join("apps/big.yaml"), &padded).unwrap();
    let archive = flux_artifact(&[("apps/a.yaml", small), ("apps/big.yaml", &padded)]);
    (dir, archive)
}

#[test]
fn cli_caps_files_and_trees_before_reading_them() {
    let ks = data("plain.ks.yaml");
    let (dir, archive) = tree_with_a_big_file(2048);
    let archive_file = tempfile::Builder::new()
        .suffix(".tar.gz")
        .tempfile()
        .unwrap();
    std::fs::write(archive_file.path(), archive).unwrap();
    let sources = [
        ("--path", path_str(dir.path())),
        ("--artifact", path_str(archive_file.path())),
    ];
    for (flag, source) in sources {
        let base = [flag, source, "--kustomization-file", path_str(&ks)];
        // Under the default caps both objects render.
        let (code, out, err) = cli(&base);
        assert_eq!(code, 0, "{flag}: {err}");
        assert_eq!(render::parse_stream(&out).unwrap().len(), 2, "{flag}");
        for (cap, needle) in [
            (
                ["--max-file-size", "1Ki"],
                "maximum file size of 1024 bytes",
            ),
            (["--max-unpacked-size", "2Ki"], "2048 bytes"),
        ] {
            let (code, out, err) = cli(&[&base[..], &cap[..]].concat());
            assert_eq!(code, 2, "{flag} {cap:?}: {err}");
            assert!(out.is_empty(), "{flag} {cap:?}: {out}");
            assert!(err.contains("big.yaml"), "{flag} {cap:?}: {err}");
            assert!(err.contains(needle), "{flag} {cap:?}: {err}");
        }
        let (code, _, err) = cli(&[&base[..], &["--max-file-size", "lots"][..]].concat());
        assert_eq!(code, 2, "{flag}: {err}");
    }
}

/// A bundle past the YAML crate's default budget for documents (1,024) and depth (64), as
/// large CRD bundles are: Flux renders it, so the converger must. (The node budget, costly to
/// exceed in a debug build, is covered by the generator's unit test.)
#[test]
fn cli_renders_a_large_crd_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for i in 0..1_100 {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  k: v\n"
        ));
    }
    text.push_str("---\napiVersion: example.com/v1\nkind: Deep\nmetadata:\n  name: deep\nspec:\n");
    for depth in 0..100 {
        text.push_str(&format!("{}n{depth}:\n", "  ".repeat(depth + 1)));
    }
    text.push_str(&format!("{}leaf: true\n", "  ".repeat(101)));
    assert!(serde_saphyr::from_multiple::<Value>(&text).is_err());
    std::fs::create_dir_all(dir.path().join("apps")).unwrap();
    std::fs::write(dir.path().join("apps/bundle.yaml"), &text).unwrap();
    let (code, out, err) = cli(&[
        "--path",
        path_str(dir.path()),
        "--kustomization-file",
        path_str(&data("plain.ks.yaml")),
    ]);
    assert_eq!(code, 0, "{err}");
    let objects = render::parse_stream(&out).unwrap();
    assert_eq!(objects.len(), 1_101);
    assert!(
        objects
            .iter()
            .any(|o| o["kind"] == "Deep" && o["metadata"]["namespace"] == "prod")
    );
}

// ---- the kustomize process: deadline, signals, remote bases, output cap ----

/// A fake `--kustomize` command: a shell script with `body` (the directory is its last argument).
fn fake_kustomize(dir: &Path, body: &str) -> KustomizeCommand {
    use std::os::unix::fs::PermissionsExt as _;
    let script = dir.join("kustomize.sh");
    std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    KustomizeCommand::parse(script.to_str().unwrap()).unwrap()
}

/// Renders a tree `apps/` holding `files` with `kustomize`.
async fn render_tree(
    files: &[(&str, &str)],
    kustomize: &KustomizeCommand,
) -> Result<Rendered, RenderError> {
    let root = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        let path = root.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let ks = tiny_ks("./apps");
    render::render(&RenderRequest {
        root: root.path(),
        owner: Owner {
            name: "a",
            namespace: "b",
            spec: &ks.spec,
        },
        variables: &Variables::new(),
        strict: true,
        kustomize,
    })
    .await
}

const ONE_CONFIG_MAP: (&str, &str) = (
    "apps/a.yaml",
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
);

fn alive(pid: &str) -> bool {
    Command::new("kill")
        .args(["-0", pid])
        .status()
        .unwrap()
        .success()
}

#[tokio::test]
async fn a_build_past_its_deadline_is_killed_with_its_children_and_is_not_bad_input() {
    let scripts = tempfile::tempdir().unwrap();
    let pid_file = scripts.path().join("child.pid");
    // A child that would hang for ever (as git on a silent server does).
    let kustomize = fake_kustomize(
        scripts.path(),
        &format!("sleep 300 &\necho $! > {}\nwait", pid_file.display()),
    )
    // The script reports its child's pid in a file outside the root: no sandbox.
    .with_sandbox(flux_converger::flux::render::sandbox::SandboxMode::Off)
    .with_timeout(std::time::Duration::from_millis(300));
    let e = render_tree(&[ONE_CONFIG_MAP], &kustomize)
        .await
        .unwrap_err();
    assert!(matches!(e, RenderError::KustomizeTimeout { .. }), "{e}");
    assert!(!e.is_bad_input(), "a timeout is retried, never refused");
    assert!(e.to_string().contains("timed out after 300ms"), "{e}");
    let child = std::fs::read_to_string(&pid_file).unwrap();
    let child = child.trim();
    // SIGKILL is delivered before kill(2) returns; the zombie is reaped by init shortly after.
    for _ in 0..500 {
        if !alive(child) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!alive(child), "the build's child {child} outlived the kill");
}

#[tokio::test]
async fn a_build_killed_by_a_signal_is_a_failure_not_bad_input() {
    let scripts = tempfile::tempdir().unwrap();
    let kustomize = fake_kustomize(scripts.path(), "echo partial >&2\nkill -9 $$");
    let e = render_tree(&[ONE_CONFIG_MAP], &kustomize)
        .await
        .unwrap_err();
    assert!(matches!(e, RenderError::KustomizeKilled { .. }), "{e}");
    assert!(!e.is_bad_input());
    let text = e.to_string();
    assert!(text.contains("killed by signal 9"), "{text}");
    assert!(text.contains("partial"), "stderr quoted: {text}");
}

#[tokio::test]
async fn an_unreachable_remote_base_is_a_failure_not_bad_input() {
    // A closed port on loopback: kustomize fails at once, without the network.
    let files = [(
        "apps/kustomization.yaml",
        "resources:\n- https://127.0.0.1:1/org/repo//base?ref=main\n",
    )];
    let e = render_tree(&files, &KustomizeCommand::default())
        .await
        .unwrap_err();
    let RenderError::KustomizeFailed { remote, stderr, .. } = &e else {
        panic!("expected a kustomize failure, got {e}")
    };
    assert!(*remote, "{stderr}");
    assert!(!e.is_bad_input(), "{e}");
    // A missing local file stays bad input (the same tree always fails).
    let files = [("apps/kustomization.yaml", "resources:\n- nothere.yaml\n")];
    let e = render_tree(&files, &KustomizeCommand::default())
        .await
        .unwrap_err();
    assert!(e.is_bad_input(), "{e}");
}

#[tokio::test]
async fn output_past_the_render_cap_is_cut_off_and_refused() {
    let scripts = tempfile::tempdir().unwrap();
    // Never ends on its own: only the cap stops it.
    let kustomize = fake_kustomize(
        scripts.path(),
        "exec yes '# an overlay that multiplies its input'",
    )
    .with_max_output(64 * 1024);
    let e = render_tree(&[ONE_CONFIG_MAP], &kustomize)
        .await
        .unwrap_err();
    assert!(
        matches!(e, RenderError::KustomizeOutputTooLarge { limit: 65536, .. }),
        "{e}"
    );
    assert!(e.is_bad_input(), "the same overlay always prints as much");
    assert!(
        e.to_string()
            .contains("more than the maximum render size of 65536 bytes"),
        "{e}"
    );
    // Output of exactly the cap renders; one byte over is refused.
    let object = "apiVersion: v1\\nkind: ConfigMap\\nmetadata:\\n  name: a\\n  namespace: b\\n";
    let printing = fake_kustomize(scripts.path(), &format!("printf '{object}'"));
    let rendered = render_tree(&[ONE_CONFIG_MAP], &printing.clone().with_max_output(66))
        .await
        .unwrap();
    assert_eq!(rendered.objects.len(), 1);
    let e = render_tree(&[ONE_CONFIG_MAP], &printing.with_max_output(65))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("65 bytes"), "{e}");
}

#[test]
fn cli_build_limits_exit_1_for_a_timeout_and_2_for_the_output_cap() {
    let scripts = tempfile::tempdir().unwrap();
    let slow = fake_kustomize(scripts.path(), "exec sleep 300");
    let (plain, ks) = (data("plain"), data("plain.ks.yaml"));
    let base = [
        "--path",
        path_str(&plain),
        "--kustomization-file",
        path_str(&ks),
    ];
    let (code, out, err) = cli(&[
        &base[..],
        &["--kustomize", &slow.program, "--render-timeout", "200ms"][..],
    ]
    .concat());
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    assert!(err.contains("timed out after 200ms"), "{err}");
    let (code, out, err) = cli(&[&base[..], &["--max-render-size", "100"][..]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    assert!(err.contains("maximum render size of 100 bytes"), "{err}");
    // The cap follows --max-unpacked-size unless given.
    let (code, _, err) = cli(&[&base[..], &["--max-unpacked-size", "1Mi"][..]].concat());
    assert_eq!(code, 0, "{err}");
}
