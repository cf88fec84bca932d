//! The `pods/eviction` subresource, as kube-apiserver's `EvictionREST.Create` runs it
//! (`pkg/registry/core/pod/storage/eviction.go`): the body is a `policy/v1` (or `v1beta1`)
//! Eviction named as the URL; a pod that is not running (Pending, Succeeded, Failed) or already
//! deleting is deleted at once; otherwise the one PodDisruptionBudget selecting it decides:
//! none, the pod is deleted; a budget whose status the disruption controller has not caught up
//! with, or with no disruption allowed, answers 429 `TooManyRequests` (`Cannot evict pod as it
//! would violate the pod's disruption budget.` and a `DisruptionBudget` cause), and nothing is
//! written; else the budget's `disruptionsAllowed` goes down by one and the pod is recorded in
//! its `disruptedPods`. An unready pod is deleted without spending the budget while the budget
//! is met (or under `unhealthyPodEvictionPolicy: AlwaysAllow`). The pod then gets the
//! `DisruptionTarget` condition (`EvictionByEvictionAPI`) and is deleted with the Eviction's
//! `deleteOptions` (its `uid`/`resourceVersion` preconditions answer the real 409). Success is
//! 201 with a `Status` of `Success`.
//!
//! The fake plays no kubelet: a deleted pod goes at once, as every pod delete in the fake does,
//! and the StatefulSet controller (when on) creates it again from the commit handed back.

use serde_json::{Value, json};

use super::commit::{Commit, WriteResult, Written};
use super::deletion::{self, Propagation};
use super::errors::ApiError;
use super::query::{LabelSelector, Query};
use super::request::Target;
use super::resources;
use super::semantics::pod::is_ready;
use super::store::{Key, State, now, obj_name};

/// The message of every 429 the eviction subresource answers.
pub const VIOLATES_BUDGET: &str =
    "Cannot evict pod as it would violate the pod's disruption budget.";
/// `policyv1.DisruptionBudgetCause`: the `reason` of the 429's cause.
pub const DISRUPTION_BUDGET_CAUSE: &str = "DisruptionBudget";

/// `errors.NewTooManyRequests(VIOLATES_BUDGET, retry)` with one `DisruptionBudget` cause
/// (`retryAfterSeconds` is omitted when 0, as the Go struct's `omitempty` does).
fn too_many_requests(cause: String, retry_after: u32) -> ApiError {
    let mut details = json!({
        "causes": [{"reason": DISRUPTION_BUDGET_CAUSE, "message": cause}],
    });
    if retry_after > 0 {
        details["retryAfterSeconds"] = json!(retry_after);
    }
    ApiError {
        code: 429,
        body: json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": VIOLATES_BUDGET,
            "reason": "TooManyRequests",
            "details": details,
            "code": 429,
        }),
    }
}

fn int(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// The budgets of `pod`'s namespace whose (non-empty) selector matches it.
fn budgets_of(state: &State, pod: &Value) -> Vec<Value> {
    if pod
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_none_or(|l| l.is_empty())
    {
        return Vec::new();
    }
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    state
        .list(&resources::POD_DISRUPTION_BUDGET, Some(ns))
        .into_iter()
        .filter(|b| {
            let selector = &b["spec"]["selector"];
            let empty = selector
                .get("matchLabels")
                .and_then(Value::as_object)
                .is_none_or(|m| m.is_empty())
                && selector
                    .get("matchExpressions")
                    .and_then(Value::as_array)
                    .is_none_or(|e| e.is_empty());
            // A budget with an empty selector matches nothing, not everything.
            !empty && LabelSelector::from_object(selector).matches(pod)
        })
        .collect()
}

/// What the budget lets happen to the pod: `Ok(true)` spend one disruption, `Ok(false)` delete
/// without spending (an unready pod while the budget is met), or the refusal.
fn check_budget(pdb: &Value, pod_ready: bool) -> Result<bool, ApiError> {
    let name = obj_name(pdb);
    let (current, desired) = (
        int(pdb, "/status/currentHealthy"),
        int(pdb, "/status/desiredHealthy"),
    );
    if !pod_ready {
        let always = pdb.pointer("/spec/unhealthyPodEvictionPolicy") == Some(&json!("AlwaysAllow"));
        if always || (current >= desired && desired > 0) {
            return Ok(false);
        }
    }
    // `checkAndDecrement`.
    if int(pdb, "/status/observedGeneration") < int(pdb, "/metadata/generation") {
        return Err(too_many_requests(
            format!("The disruption budget {name} is still being processed by the server."),
            10,
        ));
    }
    let allowed = int(pdb, "/status/disruptionsAllowed");
    if allowed < 0 {
        return Err(ApiError::forbidden(
            &resources::POD_DISRUPTION_BUDGET,
            name,
            "pdb disruptions allowed is negative",
        ));
    }
    if allowed == 0 {
        return Err(too_many_requests(
            format!(
                "The disruption budget {name} needs {desired} healthy pods and has {current} currently"
            ),
            0,
        ));
    }
    Ok(true)
}

/// POST `pods/{name}/eviction`.
pub fn evict(state: &mut State, t: &Target, name: &str, query: &Query, body: Value) -> WriteResult {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request is not an object",
        ));
    }
    let kind_ok = body.get("kind").is_none_or(|k| k == "Eviction");
    let group_ok = body
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_none_or(|v| v == "policy/v1" || v == "policy/v1beta1");
    if !kind_ok || !group_ok {
        return Err(ApiError::bad_request(&format!(
            "not a Eviction object: {} {}",
            body["apiVersion"].as_str().unwrap_or_default(),
            body["kind"].as_str().unwrap_or_default()
        )));
    }
    if body.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    // `propagateDryRun`: the query's `dryRun` or the Eviction's own `deleteOptions.dryRun`.
    let delete_options = body.get("deleteOptions").cloned().unwrap_or(json!({}));
    let options = deletion::delete_options(&Query(Vec::new()), &delete_options)?;
    let dry_run = query.dry_run() || options.dry_run;
    let key = Key::new(&resources::POD, t.namespace.as_deref(), name);
    let Some(pod) = state.get(&key).cloned() else {
        return Err(ApiError::not_found(&resources::POD, name));
    };
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    let ignore_budget = matches!(phase, "Pending" | "Succeeded" | "Failed")
        || pod["metadata"].get("deletionTimestamp").is_some();
    if !ignore_budget {
        let budgets = budgets_of(state, &pod);
        if budgets.len() > 1 {
            return Err(ApiError::custom(
                500,
                "",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(pdb) = budgets.first() {
            let spend = check_budget(pdb, is_ready(&pod))?;
            if spend && !dry_run {
                let mut pdb = pdb.clone();
                let allowed = int(&pdb, "/status/disruptionsAllowed") - 1;
                pdb["status"]["disruptionsAllowed"] = json!(allowed);
                if !pdb["status"]["disruptedPods"].is_object() {
                    pdb["status"]["disruptedPods"] = json!({});
                }
                pdb["status"]["disruptedPods"][name] = json!(now());
                state.replace(resources::POD_DISRUPTION_BUDGET, pdb);
            }
        }
    }
    // The delete, with the Eviction's own preconditions, as `addConditionAndDeletePod` sends it.
    options.check(&resources::POD, &pod, name)?;
    if dry_run {
        return Ok(Written::answer(201, success()));
    }
    let mut marked = pod.clone();
    let conditions = marked["status"]
        .as_object_mut()
        .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
    if let Some(Value::Array(conditions)) = conditions {
        conditions.retain(|c| c["type"] != "DisruptionTarget");
        conditions.push(json!({
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": now(),
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        }));
    }
    state.replace(resources::POD, marked);
    let policy = options.propagation.unwrap_or(Propagation::Background);
    let (_, _, commit) = deletion::begin_delete(state, &resources::POD, &key, policy);
    let commit = commit.unwrap_or_else(|| Commit::stored(&resources::POD, t.namespace.as_deref()));
    Ok(Written::committed(201, success(), commit))
}

/// The `Status` an accepted eviction answers (the create handler fills in its code).
fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}
