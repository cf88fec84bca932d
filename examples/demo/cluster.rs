//! What the demo's cluster looks like at a moment: a StatefulSet with its pods and claims, a
//! Kustomization as Flux reports it, the ExternalArtifact the converger publishes. Read straight from the fake API server's store,
//! so every check in the walk is about state, not about what some component said it did.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::scenario::{APP_NS, FLUX_NS, Workload};
use fake_apiserver::FakeApiServer;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    pub uid: String,
    pub owner_uid: Option<String>,
    pub phase: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub uid: String,
    pub request: String,
    pub capacity: String,
    pub phase: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct App {
    pub statefulset_uid: Option<String>,
    /// The `data` template's storage request.
    pub template: Option<String>,
    pub appliers: Vec<String>,
    pub pods: BTreeMap<String, Pod>,
    pub claims: BTreeMap<String, Claim>,
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

pub fn app(fake: &FakeApiServer, w: &Workload) -> App {
    let sts = fake.get("apps/v1", "StatefulSet", Some(APP_NS), w.statefulset);
    let mut app = App {
        statefulset_uid: sts.as_ref().map(|s| text(s, "/metadata/uid")),
        template: sts.as_ref().map(|s| {
            text(
                s,
                "/spec/volumeClaimTemplates/0/spec/resources/requests/storage",
            )
        }),
        appliers: sts
            .as_ref()
            .and_then(|s| s.pointer("/metadata/managedFields"))
            .and_then(Value::as_array)
            .map(|fields| {
                fields
                    .iter()
                    .filter(|f| f["operation"] == "Apply")
                    .map(|f| text(f, "/manager"))
                    .collect()
            })
            .unwrap_or_default(),
        ..App::default()
    };
    let prefix = format!("{}-", w.statefulset);
    for pod in fake.list("v1", "Pod", Some(APP_NS)) {
        let name = text(&pod, "/metadata/name");
        if !name.starts_with(&prefix) {
            continue;
        }
        let owner_uid = pod
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| refs.iter().find(|r| r["controller"] == true))
            .map(|r| text(r, "/uid"));
        app.pods.insert(
            name,
            Pod {
                uid: text(&pod, "/metadata/uid"),
                owner_uid,
                phase: text(&pod, "/status/phase"),
            },
        );
    }
    let suffix = format!("-{}-", w.statefulset);
    for pvc in fake.list("v1", "PersistentVolumeClaim", Some(APP_NS)) {
        let name = text(&pvc, "/metadata/name");
        if !name.contains(&suffix) {
            continue;
        }
        app.claims.insert(
            name,
            Claim {
                uid: text(&pvc, "/metadata/uid"),
                request: text(&pvc, "/spec/resources/requests/storage"),
                capacity: text(&pvc, "/status/capacity/storage"),
                phase: text(&pvc, "/status/phase"),
            },
        );
    }
    app
}

/// The Kustomization as `flux get kustomizations` would show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flux {
    pub suspended: bool,
    pub applied: String,
    pub attempted: String,
    pub ready: String,
    pub reason: String,
    pub message: String,
}

pub fn flux(fake: &FakeApiServer, kustomization: &str) -> Flux {
    let Some(ks) = fake.get(
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some(FLUX_NS),
        kustomization,
    ) else {
        return Flux::default();
    };
    let ready = ready(&ks);
    Flux {
        suspended: ks.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true),
        applied: text(&ks, "/status/lastAppliedRevision"),
        attempted: text(&ks, "/status/lastAttemptedRevision"),
        ready: text(&ready, "/status"),
        reason: text(&ready, "/reason"),
        message: text(&ready, "/message"),
    }
}

fn ready(object: &Value) -> Value {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// An ExternalArtifact as `flux get sources external` would show it: what it publishes
/// (`status.artifact`) and its `Ready` condition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct External {
    pub revision: String,
    pub digest: String,
    pub url: String,
    pub path: String,
    pub size: Option<u64>,
    pub last_update_time: String,
    pub ready: String,
    pub reason: String,
    pub message: String,
}

pub fn external_artifact(fake: &FakeApiServer, name: &str) -> External {
    let Some(ea) = fake.get(
        "source.toolkit.fluxcd.io/v1",
        "ExternalArtifact",
        Some(FLUX_NS),
        name,
    ) else {
        return External::default();
    };
    let ready = ready(&ea);
    External {
        revision: text(&ea, "/status/artifact/revision"),
        digest: text(&ea, "/status/artifact/digest"),
        url: text(&ea, "/status/artifact/url"),
        path: text(&ea, "/status/artifact/path"),
        size: ea.pointer("/status/artifact/size").and_then(Value::as_u64),
        last_update_time: text(&ea, "/status/artifact/lastUpdateTime"),
        ready: text(&ready, "/status"),
        reason: text(&ready, "/reason"),
        message: text(&ready, "/message"),
    }
}

/// Polls `read` until `pred` holds; the last value either way (`Err` when it never held).
pub async fn until<T>(
    timeout: Duration,
    read: impl Fn() -> T,
    pred: impl Fn(&T) -> bool,
) -> Result<T, T> {
    let deadline = Instant::now() + timeout;
    loop {
        let value = read();
        if pred(&value) {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(value);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
