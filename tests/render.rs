//! Rendering revisions like kustomize-controller: real tar.gz artifacts in Flux's layout, served
//! by a local stand-in for source-controller, rendered with the real `kubectl kustomize`, and
//! compared with expected YAML; plus every bad input, through the library and the CLI.

#[path = "data/render/flux_archive.rs"]
mod flux_archive;

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
    let cases: Vec<(&str, Vec<(&str, &str)>, &str, Vec<&str>)> = vec![
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
            vec!["--kustomization", "no-slash"],
            "expected NAMESPACE/NAME",
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
