//! `flux-converger plan` end to end: the built binary on files, its JSON contract, exit codes
//! (0 planned, 3 refused, 2 bad input) and the error messages for bad input.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_flux-converger");

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn example(name: &str) -> String {
    repo(&format!("examples/grow/{name}")).display().to_string()
}

pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

fn plan(args: &[&str], stdin: Option<&str>) -> Run {
    run_bin(&[&["plan"], args].concat(), stdin, &[])
}

/// Runs the binary with a hermetic environment: no kubeconfig (unless `env` gives one), no
/// inherited log filter or `FLUX_CONVERGER_*` flags.
pub(crate) fn run_bin(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("KUBECONFIG", "/nonexistent/flux-converger-test-kubeconfig")
        .env_remove("RUST_LOG")
        .env_remove("KUBERNETES_SERVICE_HOST");
    for (k, _) in std::env::vars() {
        if k.starts_with("FLUX_CONVERGER_") {
            command.env_remove(k);
        }
    }
    command.envs(env.iter().copied());
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the binary");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or("").as_bytes())
        .expect("write stdin");
    drop(input);
    let out = child.wait_with_output().expect("wait");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn example_plan(output: &str) -> Run {
    plan(
        &[
            "--desired",
            &example("desired.yaml"),
            "--cluster-state",
            &example("cluster-state.yaml"),
            "-o",
            output,
        ],
        None,
    )
}

/// Writes `text` to a file in `dir` and returns its path.
fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    path.display().to_string()
}

fn fixture(path: &str) -> String {
    std::fs::read_to_string(repo(&format!("tests/fixtures/{path}"))).expect("fixture")
}

/// The captured cluster: live `web` at 1Gi, one Bound claim, one Pending claim, both classes.
fn captured_cluster() -> String {
    let bound = fixture("v1.28/pvc-bound.yaml");
    let pending = fixture("v1.28/pvc-pending.yaml").replace("name: data-web-0", "name: data-web-1");
    format!(
        "{}---\n{bound}---\n{pending}---\n{}",
        fixture("v1.28/live-statefulset.yaml"),
        fixture("v1.28/storageclasses.yaml")
    )
}

fn json_of(run: &Run) -> Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

#[test]
fn example_json_is_the_contract() {
    let run = example_plan("json");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let expected = json!({
        "plans": [
            {
                "namespace": "default",
                "name": "web",
                "recreate": true,
                "changes": [{
                    "class": "storage-grown",
                    "field": "spec.volumeClaimTemplates[data].spec.resources.requests.storage",
                    "live": "1Gi",
                    "declared": "2Gi"
                }],
                "grown": [{"template": "data", "from": "1Gi", "to": "2Gi"}],
                "resize": [
                    {"claim": "data-web-0", "template": "data", "storageClass": "expandable", "from": "1Gi", "to": "2Gi"},
                    {"claim": "data-web-2", "template": "data", "storageClass": "expandable", "from": "1Gi", "to": "2Gi"},
                    {"claim": "data-web-3", "template": "data", "storageClass": "expandable", "from": "1Gi", "to": "2Gi"}
                ],
                "deferred": [{
                    "claim": "data-web-4",
                    "reason": "claim is Pending, not Bound, so it cannot grow from 1Gi to 2Gi yet: the API server answers \"spec is immutable after creation except resources.requests for bound claims\""
                }]
            },
            {
                "namespace": "default",
                "name": "cache",
                "recreate": false,
                "changes": [],
                "grown": [],
                "resize": [
                    {"claim": "data-cache-1", "template": "data", "storageClass": "expandable", "from": "256Mi", "to": "0.5Gi"}
                ],
                "deferred": []
            }
        ],
        "refusals": []
    });
    assert_eq!(json_of(&run), expected);
}

#[test]
fn example_text_is_readable() {
    let run = example_plan("text");
    assert_eq!(run.code, 0, "{}", run.stderr);
    for line in [
        "StatefulSet default/web: grow claims, orphan-delete and re-apply the StatefulSet",
        "  template data: 1Gi -> 2Gi",
        "  grow claim data-web-3 (data, class expandable): 1Gi -> 2Gi",
        "  defer claim data-web-4: claim is Pending",
        "StatefulSet default/cache: grow lagging claims only",
        "  grow claim data-cache-1 (data, class expandable): 256Mi -> 0.5Gi",
        "2 planned, 0 refused",
    ] {
        assert!(
            run.stdout.contains(line),
            "missing {line:?} in\n{}",
            run.stdout
        );
    }
    assert!(!run.stdout.contains("data-web-1 "), "{}", run.stdout);
    // Text is the default output.
    let default = plan(
        &[
            "--desired",
            &example("desired.yaml"),
            "--cluster-state",
            &example("cluster-state.yaml"),
        ],
        None,
    );
    assert_eq!(default.stdout, run.stdout);
}

#[test]
fn example_commands_follow_the_plan() {
    let run = example_plan("commands");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let commands: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("kubectl "))
        .collect();
    let grow = |claim: &str, from: &str, to: &str| {
        format!(
            r#"kubectl patch pvc {claim} -n default --type json -p '[{{"op":"test","path":"/spec/resources/requests/storage","value":"{from}"}},{{"op":"replace","path":"/spec/resources/requests/storage","value":"{to}"}}]'"#
        )
    };
    assert_eq!(
        commands,
        vec![
            grow("data-web-0", "1Gi", "2Gi").as_str(),
            &grow("data-web-2", "1Gi", "2Gi"),
            &grow("data-web-3", "1Gi", "2Gi"),
            "kubectl wait --for=delete statefulset/web -n default --timeout=60s",
            "kubectl apply --server-side --field-manager=kustomize-controller --force-conflicts -f - <<'FLUX_CONVERGER_EOF'",
            // `cache` only lags: its claim is patched, the StatefulSet is left alone.
            &grow("data-cache-1", "256Mi", "0.5Gi"),
        ]
    );
    // Before any write, the uid planned on is checked; the delete carries it as a precondition.
    let first_write = run.stdout.find("kubectl patch").expect("a patch");
    let check = run
        .stdout
        .find(r#"if [ "$uid_0" != 529384b8-cf92-4028-81ea-97763f7e3d7b ]; then"#)
        .expect("the uid check");
    assert!(check < first_write, "{}", run.stdout);
    assert!(
        run.stdout.contains(
            r#"printf '{"apiVersion":"v1","kind":"DeleteOptions","propagationPolicy":"Orphan","preconditions":{"uid":"%s"}}' "$uid_0" | kubectl delete --raw /apis/apps/v1/namespaces/default/statefulsets/web -f - >/dev/null"#
        ),
        "{}",
        run.stdout
    );
    // The heredoc carries the desired StatefulSet, grown, with its namespace filled in.
    let start = run
        .stdout
        .find("<<'FLUX_CONVERGER_EOF'\n")
        .expect("heredoc")
        + 22;
    let len = run.stdout[start..]
        .find("\nFLUX_CONVERGER_EOF\n")
        .expect("heredoc end");
    let docs =
        flux_converger::manifest::parse_documents("heredoc", &run.stdout[start..start + len + 1])
            .expect("the applied YAML parses");
    assert_eq!(docs.len(), 1);
    let sts = &docs[0].object;
    assert_eq!(sts["kind"], "StatefulSet");
    assert_eq!(sts["metadata"]["namespace"], "default");
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    // And the whole output is a valid shell script.
    let sh = Command::new("sh")
        .arg("-n")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin
                .take()
                .expect("stdin")
                .write_all(run.stdout.as_bytes())?;
            c.wait_with_output()
        })
        .expect("sh -n");
    assert!(
        sh.status.success(),
        "{}",
        String::from_utf8_lossy(&sh.stderr)
    );
}

#[test]
fn the_captured_growth_from_fixtures_and_stdin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = file(&dir, "cluster.yaml", &captured_cluster());
    let run = plan(
        &["--desired", "-", "--cluster-state", &cluster, "-o", "json"],
        Some(&fixture("v1.28/desired-statefulset-2Gi.yaml")),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = json_of(&run);
    assert_eq!(v["plans"][0]["recreate"], true);
    assert_eq!(v["plans"][0]["resize"][0]["claim"], "data-web-0");
    assert_eq!(v["plans"][0]["deferred"][0]["claim"], "data-web-1");
    // Nothing grew: nothing to do, and the commands are only comments.
    let run = plan(
        &[
            "--desired",
            "-",
            "--cluster-state",
            &cluster,
            "-o",
            "commands",
        ],
        Some(&fixture("v1.28/desired-statefulset-1Gi.yaml")),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stdout.contains("kubectl "), "{}", run.stdout);
    assert!(run.stdout.contains("# nothing to do"), "{}", run.stdout);
}

#[test]
fn refusals_exit_3_and_keep_the_other_plans() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = file(&dir, "cluster.yaml", &captured_cluster());
    let shrink =
        fixture("v1.28/desired-statefulset-1Gi.yaml").replace("storage: 1Gi", "storage: 512Mi");
    let other = fixture("v1.28/desired-statefulset-1Gi.yaml")
        .replace("name: web\n  namespace", "name: db\n  namespace");
    let desired = file(&dir, "desired.yaml", &format!("{shrink}---\n{other}"));
    let run = plan(
        &[
            "--desired",
            &desired,
            "--cluster-state",
            &cluster,
            "-o",
            "json",
        ],
        None,
    );
    assert_eq!(run.code, 3, "{}", run.stderr);
    let v = json_of(&run);
    assert_eq!(v["plans"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["plans"][0]["name"], "db");
    assert_eq!(v["plans"][0]["recreate"], false);
    let refusal = &v["refusals"][0];
    assert_eq!(refusal["namespace"], "default");
    assert_eq!(refusal["name"], "web");
    assert_eq!(refusal["code"], "shrink");
    let message = refusal["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"data\"")
            && message.contains("1Gi (live)")
            && message.contains("512Mi (desired)"),
        "{message}"
    );

    let text = plan(&["--desired", &desired, "--cluster-state", &cluster], None);
    assert_eq!(text.code, 3);
    assert!(
        text.stdout
            .contains("StatefulSet default/web: REFUSED (shrink)"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("1 planned, 1 refused"),
        "{}",
        text.stdout
    );
    let commands = plan(
        &[
            "--desired",
            &desired,
            "--cluster-state",
            &cluster,
            "-o",
            "commands",
        ],
        None,
    );
    assert_eq!(commands.code, 3);
    assert!(
        commands
            .stdout
            .contains("# StatefulSet default/web: refused (shrink)"),
        "{}",
        commands.stdout
    );
    assert!(!commands.stdout.contains("kubectl "), "{}", commands.stdout);
}

/// Every immutable change a re-create carries is planned (json: `changes`, each naming field,
/// both values and the note; text: the notes; commands: orphan delete with the uid
/// precondition, then the re-apply), and its refused neighbours print no script.
#[test]
fn carried_changes_are_planned_in_every_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = file(&dir, "cluster.yaml", &captured_cluster());
    let carried = fixture("v1.28/desired-statefulset-1Gi.yaml")
        .replace(
            "podManagementPolicy: Parallel",
            "podManagementPolicy: OrderedReady",
        )
        .replace(
            "      name: data\n",
            "      name: data\n      labels:\n        helm.sh/chart: db-1.2.3\n",
        );
    let desired = file(&dir, "d.yaml", &carried);
    let args = |output: &'static str| {
        vec![
            "--desired".to_string(),
            desired.clone(),
            "--cluster-state".to_string(),
            cluster.clone(),
            "-o".to_string(),
            output.to_string(),
        ]
    };
    let run_with = |output: &'static str| {
        let a = args(output);
        plan(&a.iter().map(String::as_str).collect::<Vec<_>>(), None)
    };

    let json = run_with("json");
    assert_eq!(json.code, 0, "{}", json.stdout);
    let v = json_of(&json);
    let planned = &v["plans"][0];
    assert_eq!(planned["recreate"], true, "{}", json.stdout);
    let classes: Vec<&str> = planned["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| c["class"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(classes, ["pod-management-policy", "claim-metadata"]);
    let labels = &planned["changes"][1];
    assert_eq!(
        labels["field"],
        "spec.volumeClaimTemplates[data].metadata.labels.helm.sh/chart"
    );
    assert_eq!(
        (labels["live"].as_str(), labels["declared"].as_str()),
        (Some("<unset>"), Some("\"db-1.2.3\""))
    );
    assert!(
        labels["note"]
            .as_str()
            .is_some_and(|n| n.contains("keep their old labels")),
        "{labels}"
    );

    let text = run_with("text");
    assert_eq!(text.code, 0);
    assert!(
        text.stdout.contains("orphan-delete and re-apply the StatefulSet to carry")
            && text
                .stdout
                .contains("change pod-management-policy spec.podManagementPolicy: \"Parallel\" -> \"OrderedReady\"")
            && text.stdout.contains("keep their old labels"),
        "{}",
        text.stdout
    );

    let commands = run_with("commands");
    assert_eq!(commands.code, 0);
    let script = &commands.stdout;
    let delete = script
        .find("\"propagationPolicy\":\"Orphan\",\"preconditions\":{\"uid\"")
        .unwrap_or_else(|| panic!("no orphan delete with the uid: {script}"));
    let apply = script
        .find("kubectl apply --server-side --field-manager=kustomize-controller")
        .unwrap_or_else(|| panic!("no re-apply: {script}"));
    assert!(delete < apply, "{script}");
    assert!(
        script.contains("podManagementPolicy: OrderedReady"),
        "{script}"
    );
    assert!(
        script.contains("# pod-management-policy spec.podManagementPolicy"),
        "{script}"
    );
    assert!(!script.contains("kubectl patch pvc"), "{script}");

    // A refused neighbour: exit 3, and no command for it.
    let refused = file(
        &dir,
        "r.yaml",
        &carried.replace("serviceName: web", "serviceName: web-headless"),
    );
    let run = plan(
        &[
            "--desired",
            &refused,
            "--cluster-state",
            &cluster,
            "-o",
            "commands",
        ],
        None,
    );
    assert_eq!(run.code, 3, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("# StatefulSet default/web: refused (service-name-changed)"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("kubectl "), "{}", run.stdout);
}

#[test]
fn each_refusal_code_reaches_the_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = file(&dir, "cluster.yaml", &captured_cluster());
    let grown = fixture("v1.28/desired-statefulset-2Gi.yaml");
    let cases = [
        ("shrink", grown.replace("storage: 2Gi", "storage: 1G")),
        (
            "storage-class-changed",
            grown.replace("storageClassName: expandable", "storageClassName: fixed"),
        ),
        (
            "access-modes-changed",
            grown.replace("[\"ReadWriteOnce\"]", "[\"ReadWriteOncePod\"]"),
        ),
        (
            "volume-mode-changed",
            grown.replace(
                "storageClassName: expandable",
                "storageClassName: expandable\n      volumeMode: Block",
            ),
        ),
        (
            "service-name-changed",
            grown.replace("serviceName: web", "serviceName: web-headless"),
        ),
        (
            "selector-changed",
            grown.replace("      app: web", "      app: web2"),
        ),
        (
            "template-removed",
            grown.replace("      name: data\n", "      name: store\n"),
        ),
        (
            "other-immutable",
            grown.replace(
                "    spec:\n      accessModes",
                "    spec:\n      dataSource: {kind: PersistentVolumeClaim, name: seed}\n      accessModes",
            ),
        ),
        // A template moved to another VolumeAttributesClass is carried since issue #38 (it was
        // `other-immutable`): refused only when the class is not there, as in this state.
        (
            "volume-attributes-class-missing",
            grown.replace(
                "    spec:\n      accessModes",
                "    spec:\n      volumeAttributesClassName: gold\n      accessModes",
            ),
        ),
        ("not-expandable", grown.clone()),
    ];
    for (code, desired) in cases {
        let cluster = if code == "not-expandable" {
            file(
                &dir,
                "fixed.yaml",
                // The claims' class only (the template's is indented deeper).
                &captured_cluster().replace(
                    "\n  storageClassName: expandable",
                    "\n  storageClassName: fixed",
                ),
            )
        } else {
            cluster.clone()
        };
        let desired = file(&dir, "d.yaml", &desired);
        let run = plan(
            &[
                "--desired",
                &desired,
                "--cluster-state",
                &cluster,
                "-o",
                "json",
            ],
            None,
        );
        assert_eq!(run.code, 3, "{code}: {}", run.stdout);
        assert_eq!(json_of(&run)["refusals"][0]["code"], code, "{}", run.stdout);
    }
}

#[test]
fn namespace_flag_defaults_objects_without_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The cluster has `web` in `team` only.
    let cluster = file(
        &dir,
        "cluster.yaml",
        &captured_cluster().replace("namespace: default", "namespace: team"),
    );
    let desired_text =
        fixture("v1.28/desired-statefulset-2Gi.yaml").replace("  namespace: default\n", "");
    let desired = file(&dir, "desired.yaml", &desired_text);
    let run = plan(
        &[
            "--desired",
            &desired,
            "--cluster-state",
            &cluster,
            "--namespace",
            "team",
            "-o",
            "json",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = json_of(&run);
    assert_eq!(v["plans"][0]["namespace"], "team");
    assert_eq!(v["plans"][0]["recreate"], true);
    assert_eq!(v["plans"][0]["resize"][0]["claim"], "data-web-0");
    // Without the flag it lands in `default`, where nothing lives: the empty plan.
    let run = plan(
        &[
            "--desired",
            &desired,
            "--cluster-state",
            &cluster,
            "-o",
            "json",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        json_of(&run),
        json!({"plans": [{"namespace": "default", "name": "web", "recreate": false, "changes": [], "grown": [], "resize": [], "deferred": []}], "refusals": []})
    );
    let text = plan(&["--desired", &desired, "--cluster-state", &cluster], None);
    assert!(
        text.stdout.contains("not in the cluster state"),
        "{}",
        text.stdout
    );
}

#[test]
fn desired_as_a_list_and_other_kinds_ignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = file(&dir, "cluster.yaml", &captured_cluster());
    let sts = fixture("v1.28/desired-statefulset-2Gi.yaml");
    let item: String = sts
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect::<String>()
        .replacen("  apiVersion", "- apiVersion", 1);
    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: c}}\n{item}"
    );
    let desired = file(&dir, "list.yaml", &list);
    let run = plan(
        &[
            "--desired",
            &desired,
            "--cluster-state",
            &cluster,
            "-o",
            "json",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = json_of(&run);
    assert_eq!(v["plans"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["plans"][0]["grown"][0]["to"], "2Gi");
    // No StatefulSet at all: nothing to plan, still success.
    let none = file(
        &dir,
        "none.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
    );
    let run = plan(
        &[
            "--desired",
            &none,
            "--cluster-state",
            &cluster,
            "-o",
            "json",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(json_of(&run), json!({"plans": [], "refusals": []}));
}

#[test]
fn bad_input_exits_2_naming_file_document_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = file(&dir, "cluster.yaml", &captured_cluster());
    let sts = fixture("v1.28/desired-statefulset-2Gi.yaml");
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n";
    let missing = dir.path().join("nope.yaml").display().to_string();
    let cases: Vec<(&str, String, Vec<String>)> = vec![
        ("unreadable file", missing.clone(), vec![format!("{missing}: cannot read")]),
        ("invalid YAML", file(&dir, "bad.yaml", &format!("{cm}---\n{cm}---\nkind: [unclosed\n")), vec!["bad.yaml: document 2: invalid YAML".into(), "line 9".into()]),
        ("not a mapping", file(&dir, "scalar.yaml", &format!("{cm}---\njust text\n")), vec!["scalar.yaml: document 1".into(), "must be a mapping".into()]),
        ("StatefulSet without name", file(&dir, "noname.yaml", &format!("{cm}---\n{}", sts.replace("  name: web\n", "")))
            , vec!["noname.yaml: document 1 (StatefulSet".into(), "field metadata.name: missing".into()]),
        ("unparsable quantity", file(&dir, "qty.yaml", &sts.replace("storage: 2Gi", "storage: 2GB")),
            vec!["qty.yaml: document 0 (StatefulSet default/web): field spec.volumeClaimTemplates[0].spec.resources.requests.storage: \"2GB\" is not a Kubernetes quantity".into()]),
        ("template without name", file(&dir, "tname.yaml", &sts.replace("      name: data\n", "      labels: {a: b}\n")),
            vec!["field spec.volumeClaimTemplates[0].metadata.name: missing".into()]),
        ("wrong type", file(&dir, "type.yaml", &sts.replace("replicas: 3", "replicas: three")),
            vec!["type.yaml: document 0 (StatefulSet default/web): field spec.replicas: invalid type".into()]),
    ];
    for (what, desired, words) in cases {
        let run = plan(&["--desired", &desired, "--cluster-state", &cluster], None);
        assert_eq!(run.code, 2, "{what}: {}{}", run.stdout, run.stderr);
        assert!(run.stdout.is_empty(), "{what}: {}", run.stdout);
        for w in words {
            assert!(
                run.stderr.contains(&w),
                "{what}: {w:?} not in {}",
                run.stderr
            );
        }
    }
    // The cluster state is checked the same way.
    let bad_claim = file(
        &dir,
        "claims.yaml",
        &captured_cluster().replace(
            "storage: 1Gi\n  storageClassName: expandable\n  volumeMode: Filesystem\n  volumeName",
            "storage: lots\n  storageClassName: expandable\n  volumeMode: Filesystem\n  volumeName",
        ),
    );
    let desired = file(&dir, "desired.yaml", &sts);
    let run = plan(
        &["--desired", &desired, "--cluster-state", &bad_claim],
        None,
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("claims.yaml: document 1 (PersistentVolumeClaim default/data-web-0): field spec.resources.requests.storage: \"lots\""), "{}", run.stderr);
    // Both from stdin, and usage errors.
    let run = plan(&["--desired", "-", "--cluster-state", "-"], Some(&sts));
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("cannot both read stdin"),
        "{}",
        run.stderr
    );
    let run = plan(
        &[
            "--desired",
            &desired,
            "--cluster-state",
            &cluster,
            "-o",
            "xml",
        ],
        None,
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    let run = plan(&["--desired", &desired], None);
    assert_eq!(run.code, 2, "{}", run.stderr);
}

/// A kubeconfig whose current context has namespace `team` (and another context with none);
/// the server is never contacted by `plan`.
const KUBECONFIG: &str = r#"apiVersion: v1
kind: Config
current-context: team
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: team
  context:
    cluster: c
    user: u
    namespace: team
- name: bare
  context:
    cluster: c
    user: u
users:
- name: u
  user:
    token: t
"#;

#[test]
fn kubectl_conventions_filename_yaml_and_the_context_namespace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = file(
        &dir,
        "cluster.yaml",
        &captured_cluster().replace("namespace: default", "namespace: team"),
    );
    let desired_text =
        fixture("v1.28/desired-statefulset-2Gi.yaml").replace("  namespace: default\n", "");
    let desired = file(&dir, "desired.yaml", &desired_text);
    let kubeconfig = file(&dir, "kubeconfig", KUBECONFIG);
    let namespace_of = |extra: &[&str], env: &[(&str, &str)]| {
        let args = [
            &[
                "plan",
                "-f",
                &desired,
                "--cluster-state",
                &cluster,
                "-o",
                "json",
            ][..],
            extra,
        ]
        .concat();
        let run = run_bin(&args, None, env);
        assert_eq!(run.code, 0, "{extra:?}: {}", run.stderr);
        json_of(&run)["plans"][0]["namespace"]
            .as_str()
            .expect("namespace")
            .to_owned()
    };
    // The context's namespace, from --kubeconfig or $KUBECONFIG; -n wins; --context picks.
    assert_eq!(namespace_of(&["--kubeconfig", &kubeconfig], &[]), "team");
    assert_eq!(namespace_of(&[], &[("KUBECONFIG", &kubeconfig)]), "team");
    assert_eq!(
        namespace_of(&["--kubeconfig", &kubeconfig, "-n", "other"], &[]),
        "other"
    );
    assert_eq!(
        namespace_of(&["--kubeconfig", &kubeconfig, "--context", "bare"], &[]),
        "default"
    );
    // Global flags go before the command too, as kubectl allows.
    let run = run_bin(
        &[
            "-n",
            "team",
            "plan",
            "-f",
            &desired,
            "--cluster-state",
            &cluster,
            "-o",
            "json",
        ],
        None,
        &[],
    );
    assert_eq!(json_of(&run)["plans"][0]["namespace"], "team");
    // Offline never fails for a missing or unreadable kubeconfig.
    let missing = dir.path().join("missing").display().to_string();
    assert_eq!(namespace_of(&["--kubeconfig", &missing], &[]), "default");
    assert_eq!(namespace_of(&[], &[]), "default");

    // `-o yaml` is the JSON contract as YAML: the same value.
    let yaml = run_bin(
        &[
            "plan",
            "-f",
            &desired,
            "--cluster-state",
            &cluster,
            "-n",
            "team",
            "-o",
            "yaml",
        ],
        None,
        &[],
    );
    assert_eq!(yaml.code, 0, "{}", yaml.stderr);
    let json = run_bin(
        &[
            "plan",
            "--desired",
            &desired,
            "--cluster-state",
            &cluster,
            "-n",
            "team",
            "-o",
            "json",
        ],
        None,
        &[],
    );
    let from_yaml: Value = serde_saphyr::from_str(&yaml.stdout).expect("yaml output parses");
    assert_eq!(from_yaml, json_of(&json));
    assert_eq!(from_yaml["plans"][0]["resize"][0]["claim"], "data-web-0");
}

#[test]
fn rust_log_is_honoured_unless_log_level_is_given() {
    let args = [
        "plan",
        "-f",
        &example("desired.yaml"),
        "--cluster-state",
        &example("cluster-state.yaml"),
    ];
    let debug = run_bin(&args, None, &[("RUST_LOG", "flux_converger=debug")]);
    assert_eq!(debug.code, 0, "{}", debug.stderr);
    assert!(debug.stderr.contains("planned"), "{}", debug.stderr);
    let quiet = run_bin(
        &[&["--log-level", "info"], &args[..]].concat(),
        None,
        &[("RUST_LOG", "flux_converger=debug")],
    );
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    assert!(!quiet.stderr.contains("planned"), "{}", quiet.stderr);
    let default = run_bin(&args, None, &[]);
    assert!(!default.stderr.contains("planned"), "{}", default.stderr);
    let bad = run_bin(&args, None, &[("RUST_LOG", "flux_converger=loud")]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("RUST_LOG"), "{}", bad.stderr);
}

#[test]
fn bad_input_is_exit_2_before_any_client_is_built() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = file(
        &dir,
        "bad.yaml",
        "kind: StatefulSet\napiVersion: apps/v1\nspec: [\n",
    );
    let good = example("desired.yaml");
    // No kubeconfig and no in-cluster environment: a bad file is still 2, not 1.
    for args in [
        vec!["converge", "-f", bad.as_str()],
        vec!["converge", "--desired", bad.as_str(), "--dry-run"],
        vec!["converge", "-f", good.as_str(), "--dry-run=client"],
        vec!["converge", "-f", good.as_str(), "-o", "xml"],
        vec!["render", "--kustomization", "a/b/c"],
    ] {
        let run = run_bin(&args, None, &[]);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
    }
    // A good file then fails to find a cluster: 1.
    for args in [
        vec!["converge", "-f", good.as_str()],
        vec![
            "converge",
            "-f",
            good.as_str(),
            "--dry-run=server",
            "-o",
            "yaml",
        ],
        vec!["render", "--kustomization", "apps"],
    ] {
        let run = run_bin(&args, None, &[]);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
    }
}

/// Runs `program args` with `KUBECONFIG` set, asynchronously: the fake API server answers on
/// this test's runtime.
async fn run_with_kubeconfig(
    kubeconfig: &Path,
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Run {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut input = child.stdin.take().expect("stdin");
    tokio::io::AsyncWriteExt::write_all(&mut input, stdin.unwrap_or("").as_bytes())
        .await
        .expect("stdin");
    drop(input);
    let out = child.wait_with_output().await.expect("wait");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A fake cluster where Flux applied `web` at 1Gi: three pods, three Bound claims.
async fn cluster_with_web() -> (fake_apiserver::FakeApiServer, fake_apiserver::Served) {
    flux_converger::tls::install_crypto_provider();
    let fake = fake_apiserver::FakeApiServer::new();
    fake.seed_yaml(&fixture("v1.28/storageclasses.yaml"));
    fake.enable_statefulset_controller();
    let served = fake.serve().await;
    let apply = run_with_kubeconfig(
        &served.kubeconfig,
        "kubectl",
        &[
            "apply",
            "--server-side",
            "--field-manager=kustomize-controller",
            "-f",
            "-",
        ],
        Some(&fixture("v1.28/desired-statefulset-1Gi.yaml")),
    )
    .await;
    assert_eq!(apply.code, 0, "{}", apply.stderr);
    for _ in 0..500 {
        if (0..3).all(|i| {
            fake.get(
                "v1",
                "PersistentVolumeClaim",
                Some("default"),
                &format!("data-web-{i}"),
            )
            .is_some()
        }) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for i in 0..3 {
        fake.set_pvc_phase("default", &format!("data-web-{i}"), "Bound");
    }
    (fake, served)
}

/// What an operator would snapshot, then the script `plan -o commands` makes of it.
async fn planned_script(served: &fake_apiserver::Served, dir: &tempfile::TempDir) -> String {
    let state = run_with_kubeconfig(
        &served.kubeconfig,
        "kubectl",
        &[
            "get",
            "statefulsets,persistentvolumeclaims,storageclasses",
            "-A",
            "-o",
            "yaml",
        ],
        None,
    )
    .await;
    assert_eq!(state.code, 0, "{}", state.stderr);
    let state = file(dir, "state.yaml", &state.stdout);
    let desired = repo("tests/fixtures/v1.28/desired-statefulset-2Gi.yaml");
    let plan = run_with_kubeconfig(
        &served.kubeconfig,
        BIN,
        &[
            "plan",
            "-f",
            desired.to_str().expect("path"),
            "--cluster-state",
            &state,
            "-o",
            "commands",
            "--wait-timeout",
            "20s",
        ],
        None,
    )
    .await;
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    plan.stdout
}

fn request_of(fake: &fake_apiserver::FakeApiServer, claim: &str) -> Value {
    fake.get("v1", "PersistentVolumeClaim", Some("default"), claim)
        .expect("claim")
        .pointer("/spec/resources/requests/storage")
        .cloned()
        .unwrap_or(Value::Null)
}

fn uid_of_web(fake: &fake_apiserver::FakeApiServer) -> Option<Value> {
    fake.get("apps/v1", "StatefulSet", Some("default"), "web")
        .map(|s| s["metadata"]["uid"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commands_script_converges_a_cluster_with_kubectl() {
    let (fake, served) = cluster_with_web().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = planned_script(&served, &dir).await;
    assert!(script.contains("--timeout=20s"), "{script}");
    let planned_uid = uid_of_web(&fake).expect("web");
    let pods_before: Vec<Value> = fake
        .list("v1", "Pod", Some("default"))
        .iter()
        .map(|p| p["metadata"]["uid"].clone())
        .collect();
    assert_eq!(pods_before.len(), 3);

    let run = run_with_kubeconfig(&served.kubeconfig, "bash", &["-"], Some(&script)).await;
    assert_eq!(run.code, 0, "{}\n{}\n{script}", run.stdout, run.stderr);
    for i in 0..3 {
        assert_eq!(request_of(&fake, &format!("data-web-{i}")), "2Gi");
    }
    let web = fake
        .get("apps/v1", "StatefulSet", Some("default"), "web")
        .expect("re-applied");
    assert_ne!(web["metadata"]["uid"], planned_uid);
    assert_eq!(
        web.pointer("/spec/volumeClaimTemplates/0/spec/resources/requests/storage"),
        Some(&Value::from("2Gi"))
    );
    // Orphaned, then adopted: the same pods, never deleted.
    let pods_after: Vec<Value> = fake
        .list("v1", "Pod", Some("default"))
        .iter()
        .map(|p| p["metadata"]["uid"].clone())
        .collect();
    assert_eq!(pods_after, pods_before);
    // The delete carried the planned uid as a precondition and orphaned.
    let deletes: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == http::Method::DELETE)
        .collect();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commands_script_stops_before_writing_when_the_statefulset_was_replaced() {
    let (fake, served) = cluster_with_web().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = planned_script(&served, &dir).await;
    // Someone replaces `web` between the plan and the run.
    let delete = run_with_kubeconfig(
        &served.kubeconfig,
        "kubectl",
        &["delete", "statefulset", "web", "--cascade=orphan", "--wait"],
        None,
    )
    .await;
    assert_eq!(delete.code, 0, "{}", delete.stderr);
    fake.gc_settled().await;
    let apply = run_with_kubeconfig(
        &served.kubeconfig,
        "kubectl",
        &[
            "apply",
            "--server-side",
            "--field-manager=kustomize-controller",
            "-f",
            "-",
        ],
        Some(&fixture("v1.28/desired-statefulset-1Gi.yaml")),
    )
    .await;
    assert_eq!(apply.code, 0, "{}", apply.stderr);
    let replacement = uid_of_web(&fake).expect("web");
    fake.clear_requests();

    let run = run_with_kubeconfig(&served.kubeconfig, "bash", &["-"], Some(&script)).await;
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("was replaced since the plan"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("nothing was written"), "{}", run.stderr);
    assert!(fake.writes().is_empty(), "{:?}", fake.writes());
    assert_eq!(uid_of_web(&fake), Some(replacement));
    assert_eq!(request_of(&fake, "data-web-0"), "1Gi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commands_script_never_shrinks_a_claim_grown_since_the_plan() {
    let (fake, served) = cluster_with_web().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = planned_script(&served, &dir).await;
    let planned_uid = uid_of_web(&fake).expect("web");
    // Someone grows data-web-1 past the planned size after the plan.
    let patch = run_with_kubeconfig(
        &served.kubeconfig,
        "kubectl",
        &[
            "patch",
            "pvc",
            "data-web-1",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"resources":{"requests":{"storage":"3Gi"}}}}"#,
        ],
        None,
    )
    .await;
    assert_eq!(patch.code, 0, "{}", patch.stderr);

    let run = run_with_kubeconfig(&served.kubeconfig, "bash", &["-"], Some(&script)).await;
    assert_ne!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(request_of(&fake, "data-web-1"), "3Gi");
    // It stopped there: the StatefulSet was not deleted.
    assert_eq!(uid_of_web(&fake), Some(planned_uid));
}

/// A desired file exported from a cluster re-applies as `converge` would send it: without the
/// server-owned fields (uid, resourceVersion, managedFields, status).
#[test]
fn the_commands_script_reapplies_the_object_converge_would() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = file(&dir, "cluster.yaml", &captured_cluster());
    let exported = fixture("v1.28/live-statefulset.yaml").replace("storage: 1Gi", "storage: 2Gi");
    let desired = file(&dir, "desired.yaml", &exported);
    let run = plan(
        &[
            "-f",
            &desired,
            "--cluster-state",
            &cluster,
            "-o",
            "commands",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let start = run
        .stdout
        .find("<<'FLUX_CONVERGER_EOF'\n")
        .expect("heredoc")
        + 22;
    let len = run.stdout[start..]
        .find("\nFLUX_CONVERGER_EOF\n")
        .expect("heredoc end");
    let docs =
        flux_converger::manifest::parse_documents("heredoc", &run.stdout[start..start + len + 1])
            .expect("the applied YAML parses");
    let applied = &docs[0].object;
    for field in [
        "uid",
        "resourceVersion",
        "managedFields",
        "creationTimestamp",
        "generation",
    ] {
        assert!(
            applied["metadata"].get(field).is_none(),
            "{field}: {applied}"
        );
    }
    assert!(applied.get("status").is_none(), "{applied}");
    let expected = serde_json::to_value(flux_converger::converge::clean_desired(
        &serde_json::from_value(
            flux_converger::manifest::parse_documents("x", &exported).expect("parse")[0]
                .object
                .clone(),
        )
        .expect("StatefulSet"),
    ))
    .expect("json");
    assert_eq!(applied, &expected);
}

/// `converge` speaks kubectl too: `-f`, bare `--dry-run` (= server), `-o yaml` with the same
/// document as `-o json`, the namespace from the kubeconfig's context.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converge_takes_kubectl_flags_and_prints_yaml() {
    let (fake, served) = cluster_with_web().await;
    let desired = repo("tests/fixtures/v1.28/desired-statefulset-2Gi.yaml");
    let desired = desired.to_str().expect("path");
    let planned_uid = uid_of_web(&fake).expect("web");
    let mut documents = Vec::new();
    for (dry_run, output) in [("--dry-run", "yaml"), ("--dry-run=server", "json")] {
        let run = run_with_kubeconfig(
            &served.kubeconfig,
            BIN,
            &["converge", "-f", desired, dry_run, "-o", output],
            None,
        )
        .await;
        assert_eq!(run.code, 0, "{dry_run} -o {output}: {}", run.stderr);
        let v: Value = if output == "yaml" {
            serde_saphyr::from_str(&run.stdout).expect("yaml")
        } else {
            serde_json::from_str(&run.stdout).expect("json")
        };
        documents.push(v);
    }
    for v in &documents {
        assert_eq!(v["dryRun"], true, "{v}");
        assert_eq!(v["statefulsets"][0]["name"], "web", "{v}");
        assert_eq!(
            v["statefulsets"][0]["outcome"], documents[1]["statefulsets"][0]["outcome"],
            "{v}"
        );
    }
    // A dry run writes nothing.
    assert_eq!(uid_of_web(&fake), Some(planned_uid));
    assert_eq!(request_of(&fake, "data-web-0"), "1Gi");
    let none = run_with_kubeconfig(
        &served.kubeconfig,
        BIN,
        &["converge", "-f", desired, "--dry-run=none", "-o", "json"],
        None,
    )
    .await;
    assert_eq!(none.code, 0, "{}", none.stderr);
    assert_eq!(request_of(&fake, "data-web-0"), "2Gi");
}

/// A hand-written cluster state without uids: the script cannot check the uid planned on, so it
/// says so and binds the delete to the uid it reads when it starts.
#[test]
fn the_commands_script_without_a_planned_uid_binds_the_delete_to_the_one_it_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let without_uid: String = captured_cluster()
        .lines()
        .filter(|l| !l.trim_start().starts_with("uid:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let cluster = file(&dir, "cluster.yaml", &without_uid);
    let desired = file(
        &dir,
        "desired.yaml",
        &fixture("v1.28/desired-statefulset-2Gi.yaml"),
    );
    let run = plan(
        &[
            "-f",
            &desired,
            "--cluster-state",
            &cluster,
            "-o",
            "commands",
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stdout.contains("if [ "), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("# the cluster state has no uid for default/web: the delete is bound to the uid read above"),
        "{}",
        run.stdout
    );
    let read = run
        .stdout
        .find("uid_0=$(kubectl get statefulset web")
        .expect("uid read");
    assert!(read < run.stdout.find("kubectl patch").expect("patch"));
    assert!(
        run.stdout
            .contains(r#""preconditions":{"uid":"%s"}}' "$uid_0""#)
    );
}

/// A template moved to another VolumeAttributesClass (issue #38): planned with each claim to
/// move, as JSON, text and the careful commands; refused with its code when the class is not in
/// the cluster state, as for the other codes.
#[test]
fn a_class_move_is_planned_and_a_missing_class_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sts = |class: &str| {
        format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: db, namespace: shop, uid: u-db}}\n\
             spec:\n  serviceName: db\n  replicas: 2\n  selector: {{matchLabels: {{app: db}}}}\n  \
             template: {{metadata: {{labels: {{app: db}}}}, spec: {{containers: [{{name: db, image: postgres}}]}}}}\n  \
             volumeClaimTemplates:\n  - metadata: {{name: data}}\n    spec: {{accessModes: [ReadWriteOnce], \
             storageClassName: expandable, volumeAttributesClassName: {class}, resources: {{requests: {{storage: 1Gi}}}}}}\n"
        )
    };
    let claim = |i: u32, class: &str| {
        format!(
            "---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data-db-{i}, namespace: shop}}\n\
             spec: {{accessModes: [ReadWriteOnce], storageClassName: expandable, volumeAttributesClassName: {class}, \
             resources: {{requests: {{storage: 1Gi}}}}}}\nstatus: {{phase: Bound, capacity: {{storage: 1Gi}}}}\n"
        )
    };
    let classes = "---\napiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: expandable}\n\
                   provisioner: x\nallowVolumeExpansion: true\n";
    let gold = "---\napiVersion: storage.k8s.io/v1\nkind: VolumeAttributesClass\nmetadata: {name: gold}\n\
                driverName: ebs.csi.aws.com\nparameters: {iops: \"6000\"}\n";
    let desired = file(&dir, "desired.yaml", &sts("gold"));
    let state = format!(
        "{}{}{}{classes}{gold}",
        sts("silver"),
        claim(0, "silver"),
        claim(1, "gold")
    );
    let state = file(&dir, "state.yaml", &state);
    let run = plan(
        &["-f", &desired, "--cluster-state", &state, "-o", "json"],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: Value = serde_json::from_str(&run.stdout).unwrap();
    let p = &out["plans"][0];
    assert_eq!(p["recreate"], true);
    assert_eq!(p["changes"][0]["class"], "volume-attributes-class");
    assert_eq!(
        p["changes"][0]["field"],
        "spec.volumeClaimTemplates[data].spec.volumeAttributesClassName"
    );
    assert_eq!(
        p["modify"],
        json!([{"claim": "data-db-0", "template": "data", "from": "silver", "to": "gold"}]),
        "data-db-1 has the class already: left alone"
    );
    let run = plan(&["-f", &desired, "--cluster-state", &state], None);
    assert_eq!(run.code, 0);
    assert!(
        run.stdout.contains(
            "  move claim data-db-0 (data) to VolumeAttributesClass \"gold\": from \"silver\""
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("change volume-attributes-class"),
        "{}",
        run.stdout
    );
    let run = plan(
        &["-f", &desired, "--cluster-state", &state, "-o", "commands"],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(
            r#"kubectl patch pvc data-db-0 -n shop --type json -p '[{"op":"test","path":"/spec/volumeAttributesClassName","value":"silver"},{"op":"add","path":"/spec/volumeAttributesClassName","value":"gold"}]'"#
        ),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("pvc data-db-1"), "{}", run.stdout);

    // The class is not in the cluster state: refused, exit 3, as every refusal.
    let without = format!(
        "{}{}{}{classes}",
        sts("silver"),
        claim(0, "silver"),
        claim(1, "silver")
    );
    let without = file(&dir, "without.yaml", &without);
    let run = plan(
        &["-f", &desired, "--cluster-state", &without, "-o", "json"],
        None,
    );
    assert_eq!(run.code, 3, "{}", run.stdout);
    let out: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        out["refusals"][0]["code"],
        "volume-attributes-class-missing"
    );
    let run = plan(
        &[
            "-f",
            &desired,
            "--cluster-state",
            &without,
            "-o",
            "commands",
        ],
        None,
    );
    assert_eq!(run.code, 3);
    assert!(
        run.stdout.contains("volume-attributes-class-missing"),
        "{}",
        run.stdout
    );
    // Removed: its own code.
    let removed = file(
        &dir,
        "removed.yaml",
        &sts("silver").replace(", volumeAttributesClassName: silver", ""),
    );
    let run = plan(
        &["-f", &removed, "--cluster-state", &state, "-o", "json"],
        None,
    );
    assert_eq!(run.code, 3, "{}", run.stdout);
    let out: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        out["refusals"][0]["code"],
        "volume-attributes-class-removed"
    );
}
