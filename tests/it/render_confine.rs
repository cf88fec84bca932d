//! The build reads nothing outside the artifact root (issue 27, item 1, the lexical line): for
//! every field kustomize reads a path from, in kustomization files and in the builtin plugin
//! configs they list, a tree refers to a sentinel file outside the root; `flux-converger render`
//! with the real `kubectl kustomize` must refuse it (exit 2) naming the kustomization file, the
//! field and the reference, and the sentinel's text must appear nowhere. The same tree with the
//! file inside the root still renders.

use test_support::flux_archive;

use std::path::Path;
use std::process::Command;

use fake_apiserver::FakeApiServer;
use flux_archive::{ArtifactServer, flux_artifact, sha256};
use flux_converger::flux::artifact::{FetchOptions, Fetcher};
use flux_converger::flux::render::KustomizeCommand;
use flux_converger::flux::render::resolve::Resolver;
use serde_json::json;

const KS: &str = "apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: confine, namespace: tenants}
spec:
  interval: 10m
  path: ./
  prune: true
  targetNamespace: tenants
  sourceRef: {kind: GitRepository, name: repo}
";

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: b}\n";

fn render(root: &Path, extra: &[&str]) -> (i32, String, String) {
    let ks = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ks.path(), KS).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flux-converger"))
        .arg("render")
        .args(["--path", root.to_str().unwrap()])
        .args(["--kustomization-file", ks.path().to_str().unwrap()])
        .args(extra)
        .env_remove("SOURCE_CONTROLLER_LOCALHOST")
        .env_remove("FLUX_CONVERGER_KUSTOMIZE")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Standard base64 (a SecretGenerator prints the sentinel encoded).
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| n << 8 | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
        out.push_str(&"=".repeat(3 - chunk.len()));
    }
    out
}

fn token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("SENTINEL-{}-{nanos}", std::process::id())
}

/// What the tree inside the root does once the file is moved in.
#[derive(Clone, Copy, PartialEq)]
enum Inside {
    /// Renders (exit 0).
    Renders,
    /// Passes this check and reaches kustomize, which fails for its own reason (no helm here).
    ReachesKustomize(&'static str),
}

/// Writes `files` (with `{P}` the sentinel file's path and `{D}` its directory) into a root,
/// renders it, and checks the refusal names `field` and the reference, without the sentinel.
/// Then renders the same tree with the file inside the root.
fn confined(files: &[(&str, &str)], secret: &str, field: &str, inside: Inside) {
    let token = token();
    let secret = secret.replace("{S}", &token);
    let outside = tempfile::tempdir().unwrap();
    let outside_file = outside.path().join("secret.json");
    std::fs::write(&outside_file, &secret).unwrap();
    let write_tree = |root: &Path, p: &str, d: &str| {
        for (rel, text) in files {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text.replace("{P}", p).replace("{D}", d)).unwrap();
        }
    };

    let root = tempfile::tempdir().unwrap();
    let p = outside_file.to_str().unwrap();
    let d = outside.path().to_str().unwrap();
    write_tree(root.path(), p, d);
    let (code, stdout, stderr) = render(root.path(), &[]);
    for text in [&stdout, &stderr] {
        assert!(!text.contains(&token), "the sentinel leaked: {text}");
        assert!(
            !text.contains(&base64(secret.as_bytes())),
            "the sentinel leaked: {text}"
        );
    }
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(field), "{field}: {stderr}");
    let reference = if stderr.contains(&format!("{p:?}")) {
        p
    } else {
        d
    };
    assert!(
        stderr.contains(&format!("{reference:?} escapes the artifact root")),
        "{stderr}"
    );

    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("inside")).unwrap();
    std::fs::write(root.path().join("inside/secret.json"), &secret).unwrap();
    write_tree(root.path(), "inside/secret.json", "inside");
    let (code, stdout, stderr) = render(root.path(), &[]);
    assert!(!stderr.contains("escapes the artifact root"), "{stderr}");
    match inside {
        Inside::Renders => {
            assert_eq!(code, 0, "{stderr}");
            assert!(
                stdout.contains("kind: ConfigMap") || stdout.contains("kind: Secret"),
                "{stdout}"
            );
        }
        Inside::ReachesKustomize(needle) => {
            assert!(stderr.contains(needle), "{stderr}");
        }
    }
}

fn generator(kind: &str, field: &str) -> String {
    format!("apiVersion: builtin\nkind: {kind}\nmetadata: {{name: stolen}}\n{field}\n")
}

// ---- builtin plugin configs listed by file ----

#[test]
fn config_map_generator_files() {
    confined(
        &[
            ("kustomization.yaml", "generators: [gen.yaml]\n"),
            (
                "gen.yaml",
                &generator("ConfigMapGenerator", "files: [stolen={P}]"),
            ),
        ],
        "{S}",
        "./kustomization.yaml: generators[0] (ConfigMapGenerator gen.yaml): files",
        Inside::Renders,
    );
}

#[test]
fn config_map_generator_envs() {
    confined(
        &[
            ("kustomization.yaml", "generators: [gen.yaml]\n"),
            (
                "gen.yaml",
                &generator("ConfigMapGenerator", "envs: ['{P}']"),
            ),
        ],
        "stolen={S}\n",
        "./kustomization.yaml: generators[0] (ConfigMapGenerator gen.yaml): envs",
        Inside::Renders,
    );
}

#[test]
fn config_map_generator_env() {
    confined(
        &[
            ("kustomization.yaml", "generators: [gen.yaml]\n"),
            ("gen.yaml", &generator("ConfigMapGenerator", "env: '{P}'")),
        ],
        "stolen={S}\n",
        "./kustomization.yaml: generators[0] (ConfigMapGenerator gen.yaml): env",
        Inside::Renders,
    );
}

#[test]
fn secret_generator_files() {
    confined(
        &[
            ("kustomization.yaml", "generators: [gen.yaml]\n"),
            (
                "gen.yaml",
                &generator("SecretGenerator", "files: [stolen={P}]"),
            ),
        ],
        "{S}",
        "./kustomization.yaml: generators[0] (SecretGenerator gen.yaml): files",
        Inside::Renders,
    );
}

#[test]
fn secret_generator_envs() {
    confined(
        &[
            ("kustomization.yaml", "generators: [gen.yaml]\n"),
            ("gen.yaml", &generator("SecretGenerator", "envs: ['{P}']")),
        ],
        "stolen={S}\n",
        "./kustomization.yaml: generators[0] (SecretGenerator gen.yaml): envs",
        Inside::Renders,
    );
}

/// Go decodes `Files:` into `files` (case-insensitive keys): it is checked too.
#[test]
fn generator_files_under_another_case() {
    confined(
        &[
            ("kustomization.yaml", "generators: [gen.yaml]\n"),
            (
                "gen.yaml",
                &generator("ConfigMapGenerator", "Files: [stolen={P}]"),
            ),
        ],
        "{S}",
        "./kustomization.yaml: generators[0] (ConfigMapGenerator gen.yaml): files",
        Inside::Renders,
    );
}

#[test]
fn patch_transformer_path() {
    confined(
        &[
            (
                "kustomization.yaml",
                "resources: [cm.yaml]\ntransformers: [patch.yaml]\n",
            ),
            ("cm.yaml", CM),
            (
                "patch.yaml",
                "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: '{P}'\n",
            ),
        ],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {stolen: '{S}'}\n",
        "./kustomization.yaml: transformers[0] (PatchTransformer patch.yaml): path",
        Inside::Renders,
    );
}

#[test]
fn patch_strategic_merge_transformer_paths() {
    confined(
        &[
            (
                "kustomization.yaml",
                "resources: [cm.yaml]\ntransformers: [patch.yaml]\n",
            ),
            ("cm.yaml", CM),
            (
                "patch.yaml",
                "apiVersion: builtin\nkind: PatchStrategicMergeTransformer\nmetadata: {name: p}\npaths: ['{P}']\n",
            ),
        ],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {stolen: '{S}'}\n",
        "./kustomization.yaml: transformers[0] (PatchStrategicMergeTransformer patch.yaml): paths",
        Inside::Renders,
    );
}

#[test]
fn patch_json6902_transformer_path() {
    confined(
        &[
            (
                "kustomization.yaml",
                "resources: [cm.yaml]\ntransformers: [patch.yaml]\n",
            ),
            ("cm.yaml", CM),
            (
                "patch.yaml",
                "apiVersion: builtin\nkind: PatchJson6902Transformer\nmetadata: {name: p}\ntarget: {version: v1, kind: ConfigMap, name: cm}\npath: '{P}'\n",
            ),
        ],
        "[{\"op\": \"add\", \"path\": \"/data/stolen\", \"value\": \"{S}\"}]",
        "./kustomization.yaml: transformers[0] (PatchJson6902Transformer patch.yaml): path",
        Inside::Renders,
    );
}

#[test]
fn replacement_transformer_replacements_path() {
    confined(
        &[
            (
                "kustomization.yaml",
                "resources: [cm.yaml]\ntransformers: [r.yaml]\n",
            ),
            ("cm.yaml", CM),
            (
                "r.yaml",
                "apiVersion: builtin\nkind: ReplacementTransformer\nmetadata: {name: r}\nreplacements: [{path: '{P}'}]\n",
            ),
        ],
        "# {S}\n- source: {kind: ConfigMap, name: cm, fieldPath: data.a}\n  targets: [{select: {kind: ConfigMap, name: cm}, fieldPaths: [data.c], options: {create: true}}]\n",
        "./kustomization.yaml: transformers[0] (ReplacementTransformer r.yaml): replacements[].path",
        Inside::Renders,
    );
}

#[test]
fn value_add_transformer_target_file_path() {
    confined(
        &[
            (
                "kustomization.yaml",
                "resources: [cm.yaml]\ntransformers: [v.yaml]\n",
            ),
            ("cm.yaml", CM),
            (
                "v.yaml",
                "apiVersion: builtin\nkind: ValueAddTransformer\nmetadata: {name: v}\nvalue: added\ntargetFilePath: '{P}'\n",
            ),
        ],
        "# {S}\ntargets: [{selector: {kind: ConfigMap}, fieldPath: metadata/annotations/x}]\n",
        "./kustomization.yaml: transformers[0] (ValueAddTransformer v.yaml): targetFilePath",
        Inside::Renders,
    );
}

#[test]
fn helm_chart_inflation_generator_values_file() {
    confined(
        &[
            ("kustomization.yaml", "generators: [helm.yaml]\n"),
            (
                "helm.yaml",
                "apiVersion: builtin\nkind: HelmChartInflationGenerator\nmetadata: {name: h}\nname: db\nvaluesFile: '{P}'\n",
            ),
        ],
        "stolen: '{S}'\n",
        "./kustomization.yaml: generators[0] (HelmChartInflationGenerator helm.yaml): valuesFile",
        Inside::ReachesKustomize("must specify --enable-helm"),
    );
}

#[test]
fn helm_chart_inflation_generator_additional_values_files() {
    confined(
        &[
            ("kustomization.yaml", "generators: [helm.yaml]\n"),
            (
                "helm.yaml",
                "apiVersion: builtin\nkind: HelmChartInflationGenerator\nmetadata: {name: h}\nname: db\nadditionalValuesFiles: ['{P}']\n",
            ),
        ],
        "stolen: '{S}'\n",
        "./kustomization.yaml: generators[0] (HelmChartInflationGenerator helm.yaml): additionalValuesFiles",
        Inside::ReachesKustomize("must specify --enable-helm"),
    );
}

#[test]
fn helm_chart_inflation_generator_chart_home() {
    confined(
        &[
            ("kustomization.yaml", "generators: [helm.yaml]\n"),
            (
                "helm.yaml",
                "apiVersion: builtin\nkind: HelmChartInflationGenerator\nmetadata: {name: h}\nname: db\nchartHome: '{D}'\n",
            ),
        ],
        "{S}",
        "./kustomization.yaml: generators[0] (HelmChartInflationGenerator helm.yaml): chartHome",
        Inside::ReachesKustomize("must specify --enable-helm"),
    );
}

// ---- builtin plugin configs listed inline and through a directory ----

#[test]
fn inline_generator() {
    confined(
        &[(
            "kustomization.yaml",
            "generators:\n- |\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n  metadata: {name: stolen}\n  files: [stolen={P}]\n",
        )],
        "{S}",
        "./kustomization.yaml: generators[0] (ConfigMapGenerator inline #0): files",
        Inside::Renders,
    );
}

#[test]
fn transformer_directory() {
    confined(
        &[
            (
                "kustomization.yaml",
                "resources: [cm.yaml]\ntransformers: [t]\n",
            ),
            ("cm.yaml", CM),
            ("t/kustomization.yaml", "resources: [patch.yaml]\n"),
            (
                "t/patch.yaml",
                "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: '{P}'\n",
            ),
        ],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {stolen: '{S}'}\n",
        "./kustomization.yaml: transformers[0] (./t/kustomization.yaml) (PatchTransformer ./t/patch.yaml): path",
        Inside::Renders,
    );
}

#[test]
fn validator_file() {
    confined(
        &[
            (
                "kustomization.yaml",
                "resources: [cm.yaml]\nvalidators: [v.yaml]\n",
            ),
            ("cm.yaml", CM),
            (
                "v.yaml",
                "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: '{P}'\n",
            ),
        ],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {stolen: '{S}'}\n",
        "./kustomization.yaml: validators[0] (PatchTransformer v.yaml): path",
        // A validator must not change the objects: kustomize refuses this one, after the check.
        Inside::ReachesKustomize("validator shouldn't modify the resource map"),
    );
}

// ---- the kustomization file's own fields ----

#[test]
fn kustomization_config_map_generator_files_under_another_case() {
    confined(
        &[(
            "kustomization.yaml",
            "ConfigMapGenerator: [{name: stolen, files: [stolen={P}]}]\n",
        )],
        "{S}",
        "./kustomization.yaml: configMapGenerator[].files",
        Inside::Renders,
    );
}

#[test]
fn kustomization_configurations() {
    confined(
        &[
            (
                "kustomization.yaml",
                "resources: [cm.yaml]\nconfigurations: ['{P}']\n",
            ),
            ("cm.yaml", CM),
        ],
        "# {S}\nnamePrefix:\n- path: metadata/name\n",
        "./kustomization.yaml: configurations",
        Inside::Renders,
    );
}

#[test]
fn kustomization_crds() {
    confined(
        &[
            (
                "kustomization.yaml",
                "resources: [cm.yaml]\ncrds: ['{P}']\n",
            ),
            ("cm.yaml", CM),
        ],
        // kustomize's format: OpenAPI definitions by name (api/internal/accumulator/loadconfigfromcrds.go).
        "{\"com.example.v1.Foo\": {\"Schema\": {\"description\": \"{S}\"}}}",
        "./kustomization.yaml: crds",
        Inside::Renders,
    );
}

#[test]
fn kustomization_openapi_path() {
    confined(
        &[
            (
                "kustomization.yaml",
                "resources: [cm.yaml]\nopenapi: {path: '{P}'}\n",
            ),
            ("cm.yaml", CM),
        ],
        "{\"definitions\": {}, \"info\": {\"title\": \"{S}\"}}",
        "./kustomization.yaml: openapi.path",
        Inside::Renders,
    );
}

#[test]
fn kustomization_helm_charts_values_file() {
    confined(
        &[(
            "kustomization.yaml",
            "helmCharts: [{name: db, valuesFile: '{P}'}]\n",
        )],
        "stolen: '{S}'\n",
        "./kustomization.yaml: helmCharts[].valuesFile",
        Inside::ReachesKustomize("must specify --enable-helm"),
    );
}

#[test]
fn kustomization_helm_charts_additional_values_files() {
    confined(
        &[(
            "kustomization.yaml",
            "helmCharts: [{name: db, additionalValuesFiles: ['{P}']}]\n",
        )],
        "stolen: '{S}'\n",
        "./kustomization.yaml: helmCharts[].additionalValuesFiles",
        Inside::ReachesKustomize("must specify --enable-helm"),
    );
}

#[test]
fn kustomization_helm_globals_chart_home() {
    confined(
        &[(
            "kustomization.yaml",
            "helmGlobals: {chartHome: '{D}'}\nhelmCharts: [{name: db}]\n",
        )],
        "{S}",
        "./kustomization.yaml: helmGlobals.chartHome",
        Inside::ReachesKustomize("must specify --enable-helm"),
    );
}

#[test]
fn kustomization_patches_path() {
    confined(
        &[
            (
                "kustomization.yaml",
                "resources: [cm.yaml]\npatches: [{path: '{P}'}]\n",
            ),
            ("cm.yaml", CM),
        ],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {stolen: '{S}'}\n",
        "./kustomization.yaml: patches[].path",
        Inside::Renders,
    );
}

// ---- refused whatever they point at ----

fn refused(files: &[(&str, &str)], extra: &[&str], needle: &str) {
    let root = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        let path = root.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let started = std::time::Instant::now();
    let (code, _, stderr) = render(root.path(), extra);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(needle), "{stderr}");
    // Refused before kustomize ran, let alone fetched anything.
    assert!(!stderr.contains("kustomize build failed"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[test]
fn an_exec_krm_function_is_refused_as_such() {
    refused(
        &[
            ("kustomization.yaml", "generators: [fn.yaml]\n"),
            (
                "fn.yaml",
                "apiVersion: example.com/v1\nkind: Steal\nmetadata:\n  name: f\n  annotations:\n    config.kubernetes.io/function: |\n      exec:\n        path: /bin/cat\n",
            ),
        ],
        &[],
        "./kustomization.yaml: generators[0] (fn.yaml): kind \"Steal\" apiVersion \"example.com/v1\" is not a kustomize builtin plugin",
    );
}

#[test]
fn a_container_krm_function_on_a_builtin_kind_is_refused() {
    refused(
        &[
            ("kustomization.yaml", "transformers: [fn.yaml]\n"),
            (
                "fn.yaml",
                "apiVersion: builtin\nkind: LabelTransformer\nmetadata:\n  name: f\n  annotations:\n    config.kubernetes.io/function: |\n      container:\n        image: example.com/steal\nlabels: {a: b}\nfieldSpecs: [{path: metadata/labels, create: true}]\n",
            ),
        ],
        &[],
        "KRM function annotation config.kubernetes.io/function",
    );
}

#[test]
fn a_generator_given_as_a_mapping_is_refused_for_its_shape() {
    refused(
        &[(
            "kustomization.yaml",
            "generators:\n- apiVersion: builtin\n  kind: ConfigMapGenerator\n  metadata: {name: x}\n  files: [/etc/hostname]\n",
        )],
        &[],
        "./kustomization.yaml: generators: expected a list of strings, found a mapping",
    );
}

#[test]
fn helm_config_home_is_refused() {
    refused(
        &[(
            "kustomization.yaml",
            "helmGlobals: {configHome: helm}\nhelmCharts: [{name: db}]\n",
        )],
        &[],
        "./kustomization.yaml: helmGlobals.configHome: helm's config home is passed to helm as it is",
    );
}

// ---- --no-remote-bases ----

#[test]
fn no_remote_bases_refuses_a_remote_base_before_fetching_it() {
    let wording = "remote bases are disallowed (--no-remote-bases), all resources must refer to local files included in the source artifact";
    for (kustomization, needle) in [
        (
            "resources: [cm.yaml, 'github.com/fluxcd/flux2//manifests/rbac?ref=main']\n",
            "./kustomization.yaml: resources \"github.com/fluxcd/flux2//manifests/rbac?ref=main\" is remote",
        ),
        (
            "resources: [cm.yaml, 'https://raw.githubusercontent.com/fluxcd/flux2/main/manifests/rbac/controller.yaml']\n",
            "./kustomization.yaml: resources \"https://raw.githubusercontent.com/fluxcd/flux2/main/manifests/rbac/controller.yaml\" is remote",
        ),
        (
            "resources: [cm.yaml, base]\n",
            "./base/kustomization.yaml: components \"git@github.com:org/repo//c\" is remote",
        ),
    ] {
        refused(
            &[
                ("kustomization.yaml", kustomization),
                ("cm.yaml", CM),
                (
                    "base/kustomization.yaml",
                    "components: ['git@github.com:org/repo//c']\n",
                ),
            ],
            &["--no-remote-bases"],
            &format!("{needle}: {wording}"),
        );
    }
    // A local tree renders with the flag.
    let root = tempfile::tempdir().unwrap();
    std::fs::write(
        root.path().join("kustomization.yaml"),
        "resources: [cm.yaml]\n",
    )
    .unwrap();
    std::fs::write(root.path().join("cm.yaml"), CM).unwrap();
    let (code, stdout, stderr) = render(root.path(), &["--no-remote-bases"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("name: cm"), "{stdout}");
}

// ---- the service's path: a Kustomization in the cluster, its artifact from source-controller ----

/// The Resolver `serve` renders with: the same tree is refused there as bad input (a `refused`
/// record, not a retry), naming the field, without the sentinel; and `--no-remote-bases`
/// reaches it through the build command.
#[tokio::test]
async fn the_service_refuses_the_same_trees_as_bad_input() {
    flux_converger::tls::install_crypto_provider();
    let token = token();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("token");
    std::fs::write(&secret, &token).unwrap();
    let config = generator(
        "ConfigMapGenerator",
        &format!("files: [token={}]", secret.display()),
    );
    let server = ArtifactServer::start().await;
    for (files, no_remote_bases, needle) in [
        (
            vec![("apps/kustomization.yaml", "generators: [gen.yaml]\n"), ("apps/gen.yaml", config.as_str())],
            false,
            format!(
                "./apps/kustomization.yaml: generators[0] (ConfigMapGenerator gen.yaml): files {:?} escapes the artifact root",
                secret.display().to_string()
            ),
        ),
        (
            vec![("apps/kustomization.yaml", "resources: ['github.com/org/repo//base?ref=v1']\n")],
            true,
            "./apps/kustomization.yaml: resources \"github.com/org/repo//base?ref=v1\" is remote: remote bases are disallowed (--no-remote-bases)".to_string(),
        ),
    ] {
        let archive = flux_artifact(&files);
        let path = "gitrepository/flux-system/repo/confine.tar.gz";
        let url = server.put(path, archive.clone());
        let fake = FakeApiServer::new();
        fake.seed(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "tenants"},
            "spec": {"interval": "10m", "path": "./apps", "prune": true, "targetNamespace": "tenants",
                     "sourceRef": {"kind": "GitRepository", "name": "repo", "namespace": "flux-system"}}
        }));
        fake.seed(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": "repo", "namespace": "flux-system"},
            "spec": {"interval": "1m", "url": "https://example.com/repo.git", "ref": {"branch": "main"}},
            "status": {
                "artifact": {"url": url, "digest": sha256(&archive), "revision": "main@sha1:0123abcd",
                             "path": path, "size": 1, "lastUpdateTime": "2026-11-29T00:00:00Z"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                                "message": "stored artifact", "lastTransitionTime": "2026-11-29T00:00:00Z"}]
            }
        }));
        let resolver = Resolver {
            client: fake.client(),
            fetcher: Fetcher::new(FetchOptions::default()).unwrap(),
            kustomize: KustomizeCommand::default().with_no_remote_bases(no_remote_bases),
            strict: true,
            allow_cross_namespace: true,
        };
        let e = resolver.resolve("tenants", "apps").await.unwrap_err();
        let text = e.to_string();
        assert!(e.is_bad_input(), "{text}");
        assert!(text.contains(&needle), "{text}");
        assert!(!text.contains(&token), "{text}");
    }
}
