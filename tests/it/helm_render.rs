//! `render --release-secret` and `render --helm-release` end to end: the built binary on Helm
//! release Secrets (tests/fixtures/helm/, written by the crate's encoder exactly as Helm's
//! `encodeRelease` writes them), its output piped into `plan`, and the refusals of a malformed
//! and an oversized (gzip bomb) record. `FLUX_CONVERGER_WRITE_FIXTURES=1` rewrites the fixtures.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use flux_converger::helm::base64;
use flux_converger::helm::release::{
    self, Chart, ChartMetadata, Info, ReleaseRecord, Status, decode_secret, encode_secret,
};
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

use crate::plan_cli::{Run, run_bin};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/helm")
        .join(name)
}

/// Runs the binary hermetically (no kubeconfig unless given, no inherited flags).
fn run(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
    run_bin(args, stdin, env)
}

fn docs(stream: &str) -> Vec<Value> {
    flux_converger::flux::render::parse_stream(stream).expect("a YAML stream")
}

// ---- The fixtures: chart `web` 0.1.0 (1Gi) installed as v1, upgraded to 0.2.0 (2Gi) as v2. ----

const SERVICE_TEMPLATE: &str = "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Release.Name }}\n  labels:\n    {{- include \"web.labels\" . | nindent 4 }}\nspec:\n  clusterIP: None\n  ports:\n  - name: http\n    port: 80\n  selector:\n    {{- include \"web.selectorLabels\" . | nindent 4 }}\n";
const STATEFULSET_TEMPLATE: &str = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: {{ .Release.Name }}\n  labels:\n    {{- include \"web.labels\" . | nindent 4 }}\nspec:\n  replicas: {{ .Values.replicas }}\n  serviceName: {{ .Release.Name }}\n  selector:\n    matchLabels:\n      {{- include \"web.selectorLabels\" . | nindent 6 }}\n  template:\n    metadata:\n      labels:\n        {{- include \"web.selectorLabels\" . | nindent 8 }}\n    spec:\n      containers:\n      - name: app\n        image: busybox:1.36\n        command: [sleep, \"3600\"]\n        volumeMounts:\n        - name: data\n          mountPath: /data\n  volumeClaimTemplates:\n  - metadata:\n      name: data\n    spec:\n      accessModes: [ReadWriteOnce]\n      storageClassName: expandable\n      resources:\n        requests:\n          storage: {{ .Values.persistence.size }}\n";

/// The manifest as helm-controller's post-renderers leave it: kustomize's output (no `# Source:`
/// comments), every object with the origin labels `helm.toolkit.fluxcd.io/{name,namespace}`.
fn manifest(size: &str) -> String {
    let labels = "    app.kubernetes.io/instance: web\n    app.kubernetes.io/managed-by: Helm\n    app.kubernetes.io/name: web\n    helm.toolkit.fluxcd.io/name: web\n    helm.toolkit.fluxcd.io/namespace: demo\n";
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  labels:\n{labels}  name: web\nspec:\n  clusterIP: None\n  ports:\n  - name: http\n    port: 80\n  selector:\n    app.kubernetes.io/instance: web\n    app.kubernetes.io/name: web\n---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  labels:\n{labels}  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app.kubernetes.io/instance: web\n      app.kubernetes.io/name: web\n  serviceName: web\n  template:\n    metadata:\n      labels:\n        app.kubernetes.io/instance: web\n        app.kubernetes.io/name: web\n    spec:\n      containers:\n      - command:\n        - sleep\n        - \"3600\"\n        image: busybox:1.36\n        name: app\n        volumeMounts:\n        - mountPath: /data\n          name: data\n  volumeClaimTemplates:\n  - metadata:\n      name: data\n    spec:\n      accessModes:\n      - ReadWriteOnce\n      resources:\n        requests:\n          storage: {size}\n      storageClassName: expandable\n"
    )
}

fn chart(version: &str, size: &str) -> Chart {
    let file =
        |name: &str, text: &str| json!({"name": name, "data": base64::encode(text.as_bytes())});
    Chart {
        metadata: Some(ChartMetadata {
            name: "web".into(),
            version: version.into(),
            rest: BTreeMap::from([
                ("apiVersion".into(), json!("v2")),
                ("appVersion".into(), json!("1.0.0")),
                ("description".into(), json!("One StatefulSet with a volume")),
                ("type".into(), json!("application")),
            ]),
        }),
        rest: BTreeMap::from([
            ("lock".into(), Value::Null),
            (
                "templates".into(),
                json!([
                    file("templates/service.yaml", SERVICE_TEMPLATE),
                    file("templates/statefulset.yaml", STATEFULSET_TEMPLATE),
                ]),
            ),
            (
                "values".into(),
                json!({"replicas": 2, "persistence": {"size": size}}),
            ),
            ("schema".into(), Value::Null),
            ("files".into(), json!([])),
        ]),
    }
}

const FORBIDDEN: &str = "StatefulSet.apps \"web\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

fn record_v1() -> ReleaseRecord {
    ReleaseRecord {
        name: "web".into(),
        info: Some(Info {
            first_deployed: Some("2026-12-01T10:00:02.418205117Z".into()),
            last_deployed: Some("2026-12-01T10:00:02.418205117Z".into()),
            description: "Install complete".into(),
            status: Status::Deployed,
            ..Default::default()
        }),
        chart: Some(chart("0.1.0", "1Gi")),
        config: Some(json!({})),
        manifest: manifest("1Gi"),
        hooks: None,
        version: 1,
        namespace: "demo".into(),
        apply_method: "ssa".into(),
    }
}

/// Upgrade's `failRelease`: `Upgrade "<name>" failed: <err>`, the error of server-side apply.
fn record_v2() -> ReleaseRecord {
    ReleaseRecord {
        info: Some(Info {
            first_deployed: Some("2026-12-01T10:00:02.418205117Z".into()),
            last_deployed: Some("2026-12-01T10:30:02.907331562Z".into()),
            description: format!(
                "Upgrade \"web\" failed: server-side apply failed for object demo/web apps/v1, Kind=StatefulSet: {FORBIDDEN}"
            ),
            status: Status::Failed,
            ..Default::default()
        }),
        chart: Some(chart("0.2.0", "2Gi")),
        manifest: manifest("2Gi"),
        version: 2,
        ..record_v1()
    }
}

/// The Secret as `kubectl get secret -o yaml` prints it: keys sorted, and `data.release` on one
/// line (sigs.k8s.io/yaml never wraps). Both records were last written by an update (install:
/// pending-install → deployed; upgrade: pending-upgrade → failed), which sets `modifiedAt` and
/// drops `createdAt` (Helm's `Secrets.Update` starts from fresh labels).
fn secret_yaml(
    record: &ReleaseRecord,
    created: &str,
    modified: i64,
    rv: &str,
    uid: &str,
) -> String {
    let secret = encode_secret(record, "demo", ("modifiedAt", modified)).unwrap();
    let raw = serde_json::to_value(&secret).unwrap();
    let labels = &raw["metadata"]["labels"];
    format!(
        "apiVersion: v1\ndata:\n  release: {release}\nkind: Secret\nmetadata:\n  creationTimestamp: \"{created}\"\n  labels:\n    modifiedAt: \"{modified}\"\n    name: {name}\n    owner: helm\n    status: {status}\n    version: \"{version}\"\n  name: {secret_name}\n  namespace: demo\n  resourceVersion: \"{rv}\"\n  uid: {uid}\ntype: helm.sh/release.v1\n",
        release = raw["data"]["release"].as_str().unwrap(),
        name = labels["name"].as_str().unwrap(),
        status = labels["status"].as_str().unwrap(),
        version = labels["version"].as_str().unwrap(),
        secret_name = raw["metadata"]["name"].as_str().unwrap(),
    )
}

fn expected_fixtures() -> Vec<(&'static str, String)> {
    vec![
        (
            "release-v1-deployed.yaml",
            secret_yaml(
                &record_v1(),
                "2026-12-01T10:00:02Z",
                1_764_583_203,
                "1198",
                "5e0c2a4b-8f1d-4c6e-9a3b-7d2f1e0c4b81",
            ),
        ),
        (
            "release-v2-failed.yaml",
            secret_yaml(
                &record_v2(),
                "2026-12-01T10:30:02Z",
                1_764_585_004,
                "1847",
                "c2d9e4f1-6a3b-4d8c-b7e0-1f5a9c3d2e64",
            ),
        ),
    ]
}

#[test]
fn the_fixtures_are_what_the_encoder_writes() {
    let write = std::env::var_os("FLUX_CONVERGER_WRITE_FIXTURES").is_some();
    for (name, text) in expected_fixtures() {
        if write {
            std::fs::write(fixture(name), &text).unwrap();
        }
        let on_disk = std::fs::read_to_string(fixture(name)).unwrap();
        assert_eq!(
            on_disk, text,
            "{name}: rewrite with FLUX_CONVERGER_WRITE_FIXTURES=1"
        );
    }
    // And they read back to the records (decoded as Helm's decodeRelease would).
    for (name, record) in [
        ("release-v1-deployed.yaml", record_v1()),
        ("release-v2-failed.yaml", record_v2()),
    ] {
        let value: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap();
        // Over the raw API `data.release` is base64 of Helm's base64 of gzip.
        let outer = value["data"]["release"].as_str().unwrap();
        let helm_b64 = base64::decode(outer.as_bytes()).unwrap();
        let gz = base64::decode(&helm_b64).unwrap();
        assert_eq!(gz[..3], [0x1f, 0x8b, 0x08], "{name}: gzip magic");
        let secret: Secret = serde_json::from_value(value).unwrap();
        assert_eq!(
            decode_secret(&secret, release::DEFAULT_MAX_DECODED_BYTES).unwrap(),
            record
        );
    }
}

// ---- The CLI, offline. ----

fn render(args: &[&str]) -> Run {
    run(&[&["render"], args].concat(), None, &[])
}

fn path(name: &str) -> String {
    fixture(name).display().to_string()
}

#[test]
fn the_newest_records_statefulsets_carry_helms_ownership() {
    let out = render(&[
        "--release-secret",
        &path("release-v2-failed.yaml"),
        "--statefulsets",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let objects = docs(&out.stdout);
    assert_eq!(objects.len(), 1, "{}", out.stdout);
    let sts = &objects[0];
    assert_eq!(sts["kind"], "StatefulSet");
    assert_eq!(sts["metadata"]["name"], "web");
    assert_eq!(sts["metadata"]["namespace"], "demo");
    assert_eq!(
        sts["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "Helm"
    );
    assert_eq!(
        sts["metadata"]["labels"]["helm.toolkit.fluxcd.io/name"],
        "web"
    );
    assert_eq!(
        sts["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "web"
    );
    assert_eq!(
        sts["metadata"]["annotations"]["meta.helm.sh/release-namespace"],
        "demo"
    );
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    assert!(
        out.stdout.starts_with("---\n"),
        "a YAML stream as render prints"
    );

    // Without --statefulsets: every object of the record, each with the ownership metadata.
    let out = render(&["--release-secret", &path("release-v2-failed.yaml")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let objects = docs(&out.stdout);
    let kinds: Vec<_> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["Service", "StatefulSet"]);
    assert_eq!(
        objects[0]["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "web"
    );
}

#[test]
fn of_several_records_the_highest_version_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = std::fs::read_to_string(fixture("release-v1-deployed.yaml")).unwrap();
    let v2 = std::fs::read_to_string(fixture("release-v2-failed.yaml")).unwrap();
    // As `kubectl get secrets -l owner=helm -o yaml` prints them: a List, v2 first.
    let item = |t: &str| serde_saphyr::from_str::<Value>(t).unwrap();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [item(&v2), item(&v1)], "metadata": {"resourceVersion": ""}});
    let listed = dir.path().join("list.yaml");
    std::fs::write(&listed, serde_saphyr::to_string(&list).unwrap()).unwrap();
    // And as a stream, v1 last.
    let stream = dir.path().join("stream.yaml");
    std::fs::write(&stream, format!("{v2}---\n{v1}")).unwrap();
    for file in [&listed, &stream] {
        let out = render(&[
            "--release-secret",
            &file.display().to_string(),
            "--statefulsets",
        ]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let sts = &docs(&out.stdout)[0];
        assert_eq!(
            sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
            "2Gi"
        );
    }
}

#[test]
fn plan_accepts_the_output_as_it_accepts_a_render() {
    let rendered = render(&[
        "--release-secret",
        &path("release-v2-failed.yaml"),
        "--statefulsets",
    ]);
    assert_eq!(rendered.code, 0, "{}", rendered.stderr);
    let planned = run(
        &[
            "plan",
            "-f",
            "-",
            "--cluster-state",
            &path("cluster-state.yaml"),
            "-o",
            "json",
        ],
        Some(&rendered.stdout),
        &[],
    );
    assert_eq!(planned.code, 0, "{}\n{}", planned.stdout, planned.stderr);
    let v: Value = serde_json::from_str(&planned.stdout).unwrap();
    let plan = &v["plans"][0];
    assert_eq!(plan["namespace"], "demo", "{v}");
    assert_eq!(plan["name"], "web");
    assert_eq!(plan["recreate"], true);
    let claims: Vec<_> = plan["resize"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["claim"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(claims, ["data-web-0", "data-web-1"], "{v}");
}

/// The v2 fixture with `data.release` (Helm's base64 text) replaced.
fn spoiled(dir: &Path, name: &str, helm_b64: &str) -> String {
    let text = std::fs::read_to_string(fixture("release-v2-failed.yaml")).unwrap();
    let mut value: Value = serde_saphyr::from_str(&text).unwrap();
    value["data"]["release"] = json!(base64::encode(helm_b64.as_bytes()));
    let file = dir.join(name);
    std::fs::write(&file, serde_saphyr::to_string(&value).unwrap()).unwrap();
    file.display().to_string()
}

#[test]
fn a_malformed_record_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for (name, stored, says) in [
        (
            "not-base64.yaml",
            "H4sI!!!!".to_owned(),
            "data.release is not base64: illegal base64 data at input byte 4",
        ),
        (
            "not-gzip.yaml",
            base64::encode(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xffcut short"),
            "data.release is not valid gzip",
        ),
        (
            "not-json.yaml",
            base64::encode(b"<release/>"),
            "data.release is not a release in JSON",
        ),
    ] {
        let file = spoiled(dir.path(), name, &stored);
        let out = render(&["--release-secret", &file, "--statefulsets"]);
        assert_eq!(out.code, 2, "{name}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!(
                "Secret demo/sh.helm.release.v1.web.v2: malformed Helm release record: {says}"
            )),
            "{name}: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty());
    }
    // Not a release Secret at all.
    let text = std::fs::read_to_string(fixture("release-v2-failed.yaml"))
        .unwrap()
        .replace("type: helm.sh/release.v1", "type: Opaque");
    let file = dir.path().join("opaque.yaml");
    std::fs::write(&file, text).unwrap();
    let out = render(&["--release-secret", &file.display().to_string()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("not a Helm release record: type is \"Opaque\""),
        "{}",
        out.stderr
    );
    // A file without a Secret.
    let out = render(&["--release-secret", &path("cluster-state.yaml")]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("no Secret in the file"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_gzip_bomb_is_refused_as_oversized_with_exit_2() {
    // 8 MiB of zeros, some 8 KiB compressed: over a 1 MiB cap, it is refused while inflating.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![0u8; 8 << 20]).unwrap();
    let bomb = base64::encode(&gz.finish().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let file = spoiled(dir.path(), "bomb.yaml", &bomb);
    let out = render(&["--release-secret", &file, "--max-unpacked-size", "1Mi"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "Secret demo/sh.helm.release.v1.web.v2: oversized Helm release record: data.release decodes to more than 1048576 bytes (decompression bomb?): refused (--max-unpacked-size)"
        ),
        "{}",
        out.stderr
    );
    // The fixture itself is well under the same cap.
    let out = render(&[
        "--release-secret",
        &path("release-v2-failed.yaml"),
        "--max-unpacked-size",
        "1Mi",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn helm_flags_are_checked_before_any_client() {
    for (args, says) in [
        (
            &["--helm-release", "a/b/c"][..],
            "expected NAMESPACE/NAME or NAME",
        ),
        (
            &["--helm-release", "demo/web", "-n", "other"][..],
            "names namespace \"demo\", but --namespace is \"other\"",
        ),
    ] {
        let out = render(args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    let out = render(&[
        "--release-secret",
        &path("release-v2-failed.yaml"),
        "--kustomization",
        "x",
    ]);
    assert_eq!(out.code, 2, "{}", out.stderr);
}

// ---- The CLI, from a cluster: a stub API server with one HelmRelease and its records. ----

#[tokio::test]
async fn helm_release_reads_the_newest_record_from_the_storage_namespace() {
    use axum::extract::{Query, State};
    use axum::routing::get;

    let hr: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(fixture("helmrelease-stalled.yaml")).unwrap(),
    )
    .unwrap();
    let secrets: Vec<Value> = ["release-v1-deployed.yaml", "release-v2-failed.yaml"]
        .iter()
        .map(|f| serde_saphyr::from_str(&std::fs::read_to_string(fixture(f)).unwrap()).unwrap())
        .collect();
    let selectors = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    #[derive(Clone)]
    struct Stub {
        hr: Value,
        secrets: Vec<Value>,
        selectors: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    }
    let app = axum::Router::new()
        .route(
            "/apis/helm.toolkit.fluxcd.io/v2/namespaces/demo/helmreleases/web",
            get(|State(s): State<Stub>| async move { axum::Json(s.hr) }),
        )
        .route(
            "/api/v1/namespaces/demo/secrets",
            get(
                |State(s): State<Stub>, Query(q): Query<BTreeMap<String, String>>| async move {
                    let selector = q.get("labelSelector").cloned().unwrap_or_default();
                    s.selectors.lock().unwrap().push(selector);
                    axum::Json(json!({
                        "apiVersion": "v1", "kind": "SecretList",
                        "metadata": {"resourceVersion": "1900"},
                        "items": s.secrets,
                    }))
                },
            ),
        )
        .with_state(Stub {
            hr,
            secrets,
            selectors: selectors.clone(),
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stub\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: stub\n  context: {{cluster: stub, user: stub, namespace: demo}}\ncurrent-context: stub\nusers:\n- name: stub\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    let kubeconfig = kubeconfig.display().to_string();
    let out = tokio::task::spawn_blocking(move || {
        run(
            &["render", "--helm-release", "web", "--statefulsets"],
            None,
            &[("KUBECONFIG", &kubeconfig)],
        )
    })
    .await
    .unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let sts = &docs(&out.stdout)[0];
    assert_eq!(sts["metadata"]["namespace"], "demo");
    assert_eq!(
        sts["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "web"
    );
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    assert_eq!(*selectors.lock().unwrap(), ["owner=helm,name=web"]);
    // The decision the service would take, on stderr.
    assert!(
        out.stderr
            .contains("release record v2 is a failed upgrade helm-controller gave up on"),
        "{}",
        out.stderr
    );
}
