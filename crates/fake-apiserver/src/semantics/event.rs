//! Event validation on create (`ValidateEventCreate`): the legacy rules for every Event, the
//! strict ones for `events.k8s.io/v1`. Field paths are the internal type's, as the real server
//! reports them (`message` even when the client wrote `note`). A too long message (1024 bytes)
//! is the rule a converger quoting a long server error is most likely to hit.

use serde_json::Value;

use super::super::errors::Cause;

const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

fn text<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn set(obj: &Value, key: &str) -> bool {
    obj.get(key).is_some_and(|v| !v.is_null())
}

/// `strict`: created through `events.k8s.io/v1` (field names differ from core/v1).
pub fn validate_create(obj: &Value, strict: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let (involved, message, controller, controller_path) = if strict {
        (
            "regarding",
            "note",
            "reportingController",
            "reportingController",
        )
    } else {
        (
            "involvedObject",
            "message",
            "reportingComponent",
            "reportingComponent",
        )
    };
    let namespace = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let involved_ns = obj
        .get(involved)
        .map(|o| text(o, "namespace"))
        .unwrap_or_default();
    let ns_mismatch = || {
        Cause::invalid(
            "involvedObject.namespace",
            &format!("{involved_ns:?}"),
            "does not match event.namespace",
        )
    };
    let required = |field: &str| Cause::required(field, "");
    let too_long = |field: &str, limit: usize| {
        Cause::invalid(
            field,
            "\"\"",
            &format!("can have at most {limit} characters"),
        )
    };

    if !set(obj, "eventTime") {
        if involved_ns.is_empty() {
            if !namespace.is_empty() && namespace != "default" {
                causes.push(ns_mismatch());
            }
        } else if namespace != involved_ns {
            causes.push(ns_mismatch());
        }
    } else {
        if involved_ns.is_empty() && namespace != "default" && namespace != "kube-system" {
            causes.push(ns_mismatch());
        }
        if text(obj, controller).is_empty() {
            causes.push(required(controller_path));
        }
        let instance = text(obj, "reportingInstance");
        if instance.is_empty() {
            causes.push(required("reportingInstance"));
        } else if instance.len() > REPORTING_INSTANCE_LIMIT {
            causes.push(too_long("reportingInstance", REPORTING_INSTANCE_LIMIT));
        }
        let action = text(obj, "action");
        if action.is_empty() {
            causes.push(required("action"));
        } else if action.len() > ACTION_LIMIT {
            causes.push(too_long("action", ACTION_LIMIT));
        }
        let reason = text(obj, "reason");
        if reason.is_empty() {
            causes.push(required("reason"));
        } else if reason.len() > REASON_LIMIT {
            causes.push(too_long("reason", REASON_LIMIT));
        }
        if text(obj, message).len() > NOTE_LIMIT {
            causes.push(too_long("message", NOTE_LIMIT));
        }
    }
    if !strict {
        return causes;
    }
    if !set(obj, "eventTime") {
        causes.push(required("eventTime"));
    }
    let kind = text(obj, "type");
    if kind != "Normal" && kind != "Warning" {
        causes.push(Cause::invalid(
            "type",
            "\"\"",
            &format!("has invalid value: {kind}"),
        ));
    }
    for (field, path) in [
        ("deprecatedFirstTimestamp", "deprecatedFirstTimestamp"),
        ("deprecatedLastTimestamp", "deprecatedLastTimestamp"),
    ] {
        if set(obj, field) {
            causes.push(Cause::invalid(path, "\"\"", "needs to be unset"));
        }
    }
    if obj
        .get("deprecatedCount")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        != 0
    {
        causes.push(Cause::invalid(
            "deprecatedCount",
            "\"\"",
            "needs to be unset",
        ));
    }
    if obj
        .get("deprecatedSource")
        .is_some_and(|s| !text(s, "component").is_empty() || !text(s, "host").is_empty())
    {
        causes.push(Cause::invalid(
            "deprecatedSource",
            "\"\"",
            "needs to be unset",
        ));
    }
    causes
}
