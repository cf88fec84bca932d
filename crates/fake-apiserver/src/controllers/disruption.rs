//! The disruption controller (`pkg/controller/disruption`): the status of each
//! PodDisruptionBudget, which the eviction subresource reads. Per budget: the pods its selector
//! matches; `currentHealthy` those Ready, not deleting and not recorded in `disruptedPods`
//! (an eviction's record, kept while the pod of that name is still there and for at most
//! `DeletionTimeout`, two minutes); `desiredHealthy` from `minAvailable` (an integer, or a
//! percentage of the pods' controllers' scale, rounded up) or the scale less `maxUnavailable`;
//! `expectedPods`; `disruptionsAllowed` the healthy pods above the desired ones (0 when no pod
//! is expected); the `DisruptionAllowed` condition; `observedGeneration`.
//!
//! It runs after every commit of pods, budgets and StatefulSets of a namespace, before and after
//! the StatefulSet controller (`controllers::after_write`): an evicted pod's removal is seen
//! (and its `disruptedPods` entry dropped) before the controller creates its successor, as on a
//! cluster, where the pod takes its grace period to go.

use serde_json::{Value, json};

use crate::query::LabelSelector;
use crate::resources;
use crate::semantics::pod::is_ready;
use crate::store::{Key, State, now};

/// `DeletionTimeout`: how long an eviction's `disruptedPods` entry holds a pod out of the count.
const DELETION_TIMEOUT: jiff::SignedDuration = jiff::SignedDuration::from_secs(120);

/// An `IntOrString` against `total` (`GetScaledValueFromIntOrPercent`, rounding up).
fn scaled(v: &Value, total: i64) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(p) => (p * total + 99) / 100,
            None => s.parse().unwrap_or(0),
        },
        _ => 0,
    }
}

/// The summed scale of the pods' controllers (StatefulSets here), by distinct owner.
fn expected_scale(state: &State, ns: &str, pods: &[Value]) -> i64 {
    let mut seen: Vec<String> = Vec::new();
    let mut total = 0;
    for pod in pods {
        let Some(owner) = pod
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| refs.iter().find(|r| r["controller"] == json!(true)))
        else {
            continue;
        };
        let uid = owner["uid"].as_str().unwrap_or_default().to_string();
        if seen.contains(&uid) {
            continue;
        }
        seen.push(uid);
        if owner["kind"] == "StatefulSet"
            && let Some(set) = state.get(&Key::new(
                &resources::STATEFULSET,
                Some(ns),
                owner["name"].as_str().unwrap_or_default(),
            ))
        {
            total += set["spec"]["replicas"].as_i64().unwrap_or(1);
        }
    }
    total
}

/// Recomputes the status of every budget of `namespace` (all for `None`).
pub fn reconcile(state: &mut State, namespace: Option<&str>) {
    let at = jiff::Timestamp::now();
    for pdb in state.list(&resources::POD_DISRUPTION_BUDGET, namespace) {
        let ns = pdb["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let selector = LabelSelector::from_object(&pdb["spec"]["selector"]);
        let pods: Vec<Value> = state
            .list(&resources::POD, Some(&ns))
            .into_iter()
            .filter(|p| selector.matches(p))
            .collect();
        let recorded = pdb["status"]["disruptedPods"].as_object().cloned();
        let mut disrupted = serde_json::Map::new();
        for pod in pods
            .iter()
            .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
        {
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            if let Some(when) = recorded.as_ref().and_then(|r| r.get(name))
                && when
                    .as_str()
                    .and_then(|w| w.parse::<jiff::Timestamp>().ok())
                    .is_some_and(|w| w + DELETION_TIMEOUT > at)
            {
                disrupted.insert(name.to_string(), when.clone());
            }
        }
        let healthy = pods
            .iter()
            .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
            .filter(|p| !disrupted.contains_key(p["metadata"]["name"].as_str().unwrap_or_default()))
            .filter(|p| is_ready(p))
            .count() as i64;
        let (expected, desired) = match (
            pdb["spec"].get("maxUnavailable"),
            pdb["spec"].get("minAvailable"),
        ) {
            (Some(max), _) if !max.is_null() => {
                let expected = expected_scale(state, &ns, &pods);
                (expected, (expected - scaled(max, expected)).max(0))
            }
            (_, Some(Value::Number(n))) => (pods.len() as i64, n.as_i64().unwrap_or(0)),
            (_, Some(min @ Value::String(_))) => {
                let expected = expected_scale(state, &ns, &pods);
                (expected, scaled(min, expected))
            }
            _ => (pods.len() as i64, 0),
        };
        let allowed = if expected <= 0 {
            0
        } else {
            (healthy - desired).max(0)
        };
        let generation = pdb["metadata"]["generation"].as_i64().unwrap_or(1);
        let (status, reason) = if allowed > 0 {
            ("True", "SufficientPods")
        } else {
            ("False", "InsufficientPods")
        };
        let previous = pdb["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionAllowed"))
            .cloned();
        let transition = match &previous {
            Some(p) if p["status"] == status && p["reason"] == reason => {
                p["lastTransitionTime"].clone()
            }
            _ => json!(now()),
        };
        let mut next = json!({
            "observedGeneration": generation,
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": [{
                "type": "DisruptionAllowed",
                "status": status,
                "reason": reason,
                "message": "",
                "observedGeneration": generation,
                "lastTransitionTime": transition,
            }],
        });
        if !disrupted.is_empty() {
            next["disruptedPods"] = Value::Object(disrupted);
        }
        if pdb.get("status") != Some(&next) {
            let mut updated = pdb.clone();
            updated["status"] = next;
            state.replace(resources::POD_DISRUPTION_BUDGET, updated);
        }
    }
}
