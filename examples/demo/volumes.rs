//! The storage side of a cluster the fake API server has no controller for: a provisioner that
//! binds every new claim (what the PersistentVolume controller and a provisioner do), and a CSI
//! resizer the walk drives step by step, so that what the converger follows can be shown as it
//! happens. The resizer is `test_support::resizer::Resizer`: it writes a claim's status through
//! the `persistentvolumeclaims/status` subresource and records the real resizer's Events, as
//! kubernetes-csi/external-resizer does; the converger sees it only through its watches.

use std::time::Duration;

use serde_json::Value;

use fake_apiserver::FakeApiServer;
pub use test_support::resizer::Resizer;

/// Binds every new claim; runs until the returned task is aborted.
pub fn start(fake: FakeApiServer) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            bind(&fake);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

fn bind(fake: &FakeApiServer) {
    for pvc in fake.list("v1", "PersistentVolumeClaim", None) {
        let (Some(ns), Some(name)) = (
            pvc.pointer("/metadata/namespace").and_then(Value::as_str),
            pvc.pointer("/metadata/name").and_then(Value::as_str),
        ) else {
            continue;
        };
        if pvc.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        if pvc.pointer("/status/phase").and_then(Value::as_str) != Some("Bound") {
            fake.set_pvc_phase(ns, name, "Bound");
        }
    }
}
