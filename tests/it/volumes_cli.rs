//! `converge --wait-for-volumes` (issue #40): the binary over a socket against the fake, the
//! claim's expansion played by the resizer stand-in through the status subresource and Events
//! while the command waits: one line per state change, exit 0 once grown, 4 when infeasible,
//! 5 at the deadline (with `stalled` past `--resize-timeout`); without the flag, as before.

use std::time::Duration;

use fake_apiserver::{FakeApiServer, KubeVersion};
use serde_json::{Value, json};
use test_support::resizer::Resizer;

const NS: &str = "default";

fn db(size: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {
            "serviceName": "db", "replicas": 1,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                         "spec": {"containers": [{"name": "db", "image": "postgres"}]}},
            "volumeClaimTemplates": [
                {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                  "storageClassName": "expandable", "resources": {"requests": {"storage": size}}}},
            ],
        }
    })
}

/// `db` live at 1Gi with its claim Bound at 1Gi, served on a socket.
async fn world() -> (FakeApiServer, fake_apiserver::Served) {
    use flux_converger::cluster::Cluster as _;
    flux_converger::tls::install_crypto_provider();
    let fake = FakeApiServer::with_version(KubeVersion::V1_32);
    let path = format!(
        "{}/tests/fixtures/v1.28/storageclasses.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    fake.seed_yaml(&std::fs::read_to_string(path).unwrap());
    fake.seed(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-db-0", "namespace": NS, "labels": {"app": "db"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "expandable",
                 "volumeMode": "Filesystem",
                 "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-data-db-0"},
    }));
    fake.set_pvc_phase(NS, "data-db-0", "Bound");
    let cluster = flux_converger::cluster::KubeCluster::new(fake.client(), Duration::from_secs(5));
    cluster
        .apply(&serde_json::from_value(db("1Gi")).unwrap())
        .await
        .unwrap();
    let served = fake.serve().await;
    (fake, served)
}

fn request(fake: &FakeApiServer) -> String {
    fake.get("v1", "PersistentVolumeClaim", Some(NS), "data-db-0")
        .unwrap()["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The command's process, running while the test plays the resizer.
fn spawn(
    kubeconfig: &std::path::Path,
    file: &std::path::Path,
    extra: &[&str],
) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_flux-converger"))
        .arg("converge")
        .arg("-f")
        .arg(file)
        .args(extra)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("FLUX_CONVERGER_JOURNAL_NAMESPACE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

async fn finished(child: tokio::process::Child) -> (i32, String, String) {
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the command ends")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits (the test's side) until the converge raised the claim to `size`.
async fn raised(fake: &FakeApiServer, size: &str) {
    for _ in 0..600 {
        if request(fake) == size {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the claim was never raised to {size}");
}

fn file(dir: &tempfile::TempDir, size: &str) -> std::path::PathBuf {
    let p = dir.path().join(format!("db-{size}.yaml"));
    std::fs::write(&p, serde_json::to_string(&db(size)).unwrap()).unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_follows_a_claim_in_steps_until_it_grew() {
    let (fake, served) = world().await;
    let dir = tempfile::tempdir().unwrap();
    let child = spawn(
        &served.kubeconfig,
        &file(&dir, "2Gi"),
        &["--wait-for-volumes=30s"],
    );
    raised(&fake, "2Gi").await;
    let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");
    // Each step once the command has had time to see the one before.
    resizer.start(NS, "data-db-0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    resizer.needs_node(NS, "data-db-0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    resizer.finish(NS, "data-db-0").await.unwrap();
    let (code, out, err) = finished(child).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let states: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("StatefulSet default/db: claim data-db-0: "))
        .map(|l| {
            l.trim_start_matches("StatefulSet default/db: claim data-db-0: ")
                .split([' ', ':'])
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(
        states,
        ["requested", "resizing", "filesystem-pending", "grown"],
        "{out}"
    );
    assert!(
        out.contains("claim data-db-0: grown (2Gi requested, 2Gi held)"),
        "{out}"
    );
    assert!(
        out.contains("restart the pod using it"),
        "filesystem-pending says what the node waits for: {out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infeasible_expansion_exits_4_and_json_carries_the_final_state() {
    let (fake, served) = world().await;
    let dir = tempfile::tempdir().unwrap();
    let child = spawn(
        &served.kubeconfig,
        &file(&dir, "2Gi"),
        &["--wait-for-volumes=30s", "-o", "json"],
    );
    raised(&fake, "2Gi").await;
    let resizer = Resizer::new(fake.client(), "ebs.csi.aws.com");
    resizer.start(NS, "data-db-0").await.unwrap();
    resizer
        .infeasible(NS, "data-db-0", "the volume type's maximum is 1Gi")
        .await
        .unwrap();
    let (code, out, err) = finished(child).await;
    assert_eq!(code, 4, "{out}\n{err}");
    let summary: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let v = &summary["statefulsets"][0]["volumes"][0];
    assert_eq!(v["state"], "infeasible", "{summary}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("the volume type's maximum is 1Gi"),
        "{v}"
    );
    assert!(
        err.contains("claim data-db-0: infeasible"),
        "the lines go to stderr: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_growth_by_the_deadline_exits_5_and_stalled_is_said_past_the_resize_timeout() {
    let (fake, served) = world().await;
    let dir = tempfile::tempdir().unwrap();
    let child = spawn(
        &served.kubeconfig,
        &file(&dir, "2Gi"),
        &["--wait-for-volumes=3s", "--resize-timeout=1s"],
    );
    let (code, out, err) = finished(child).await;
    assert_eq!(code, 5, "{out}\n{err}");
    assert!(out.contains("claim data-db-0: stalled"), "{out}");
    assert_eq!(request(&fake), "2Gi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_the_command_does_not_wait() {
    let (fake, served) = world().await;
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = finished(spawn(&served.kubeconfig, &file(&dir, "2Gi"), &[])).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!out.contains("StatefulSet default/db: claim"), "{out}");
    assert!(
        out.contains("volume data-db-0: requested (2Gi requested, 1Gi held)"),
        "{out}"
    );
    assert_eq!(request(&fake), "2Gi");
    // And nothing was watched: the command's requests end with the converge.
    assert!(
        fake.requests()
            .iter()
            .all(|r| !r.watch || r.path.contains("statefulsets")),
        "{:?}",
        fake.requests()
            .iter()
            .filter(|r| r.watch)
            .collect::<Vec<_>>()
    );
}
