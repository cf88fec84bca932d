//! The storage side of a cluster the fake API server has no controller for: a provisioner that
//! binds every new claim, and a CSI resizer that brings `status.capacity` up to a grown
//! request. Without them every claim would stay Pending and the converger would (rightly)
//! defer growing it.

use std::time::Duration;

use flux_converger::quantity::Quantity;
use serde_json::Value;

use fake_apiserver::FakeApiServer;

/// Runs until the returned task is aborted.
pub fn start(fake: FakeApiServer) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            settle(&fake);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

fn settle(fake: &FakeApiServer) {
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
            continue;
        }
        let request = pvc
            .pointer("/spec/resources/requests/storage")
            .and_then(Value::as_str);
        let capacity = pvc
            .pointer("/status/capacity/storage")
            .and_then(Value::as_str);
        if let (Some(request), Some(capacity)) = (request, capacity)
            && grown(request, capacity)
        {
            fake.set_pvc_capacity(ns, name, request);
        }
    }
}

fn grown(request: &str, capacity: &str) -> bool {
    match (Quantity::parse(request), Quantity::parse(capacity)) {
        (Ok(r), Ok(c)) => r.nanos() > c.nanos(),
        _ => false,
    }
}
