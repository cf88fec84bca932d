//! What a resource request is, as every layer names it: where it points (`Target`) and what its
//! headers, query and body say about how to run it (dry run, field manager, content type).

use http::{Method, header};
use serde_json::Value;

use super::query::Query;
use super::resources::ResourceType;

/// Where a resource request points.
#[derive(Debug, Clone)]
pub struct Target {
    pub rt: ResourceType,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

pub fn content_type(parts: &http::request::Parts) -> Option<String> {
    parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.split(';').next().unwrap_or(s).trim().to_string())
}

/// The field manager of a write: the query parameter, else the user agent's program name
/// (`kubectl/v1.32 ...` → `kubectl`), as the real server derives it for updates.
pub fn field_manager(parts: &http::request::Parts, query: &Query) -> Option<String> {
    if let Some(m) = query.get("fieldManager") {
        return Some(m.to_string());
    }
    parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(|ua| ua.split('/').next().unwrap_or(ua).to_string())
}

/// Whether a request is a dry run. A DELETE with a body takes every option from the body's
/// `DeleteOptions`, the query's `dryRun` included (the real server decodes one or the other).
pub fn is_dry_run(method: &Method, query: &Query, body: &Value) -> bool {
    if *method == Method::DELETE && body.is_object() {
        body_dry_run(body)
    } else {
        query.dry_run()
    }
}

pub fn body_dry_run(body: &Value) -> bool {
    body.get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "All"))
}
