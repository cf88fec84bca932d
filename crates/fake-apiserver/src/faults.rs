//! Fault injection and the request log: both wrap every request, before any routing, so a
//! test can fail or observe any call the client makes. And the other refusal a test installs:
//! a validating admission webhook that denies creates (`CreateDenial`, answered by `admission`).

use std::time::Duration;

use http::Method;

/// What a matching request gets instead of (or besides) its normal answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Answer this `Status` instead; nothing is applied.
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    /// Wait, then handle the request normally.
    Delay(Duration),
    /// Close the connection before the request is applied.
    Drop,
    /// Apply the request, then close the connection: the client never sees the answer.
    DropAfterWrite,
}

/// Fires once, on the `nth` (0-based) request matching `method` (any if `None`) and whose
/// path contains `path_contains`.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    pub method: Option<Method>,
    pub path_contains: String,
    pub nth: usize,
    pub action: Fault,
}

impl FaultRule {
    pub fn matches(&self, method: &Method, path: &str) -> bool {
        self.method.as_ref().is_none_or(|m| m == method) && path.contains(&self.path_contains)
    }
}

/// One request as the fake received it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// Order of arrival (1, 2, ...), never reused, not reset by `clear_requests`.
    pub id: u64,
    pub method: Method,
    pub path: String,
    /// The raw query string (`""` when there is none).
    pub query: String,
    pub field_manager: Option<String>,
    /// `dryRun=All` in the query, or `dryRun: ["All"]` in a DELETE body.
    pub dry_run: bool,
    /// `watch=1`/`watch=true` in the query.
    pub watch: bool,
    /// `Content-Type`, if any (tells the patch types apart).
    pub content_type: Option<String>,
    /// `Impersonate-User`, if any (writes made on behalf of a service account).
    pub impersonate_user: Option<String>,
    /// The HTTP status answered; `None` while in flight or when a fault dropped the connection.
    pub code: Option<u16>,
}

impl RequestRecord {
    /// A request that changes (or would change) stored state.
    pub fn is_write(&self) -> bool {
        matches!(
            self.method,
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        ) && !self.dry_run
    }

    /// A server-side apply (`application/apply-patch+yaml`).
    pub fn is_apply(&self) -> bool {
        self.method == Method::PATCH
            && self
                .content_type
                .as_deref()
                .is_some_and(|c| c.starts_with("application/apply-patch"))
    }

    /// Value of one query parameter.
    pub fn query_param(&self, key: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }
}

/// Finds the fault for this request, counting it against every rule it matches.
pub fn pick(rules: &mut [(FaultRule, usize)], method: &Method, path: &str) -> Option<Fault> {
    let mut chosen = None;
    for (rule, seen) in rules.iter_mut() {
        if rule.matches(method, path) {
            if *seen == rule.nth && chosen.is_none() {
                chosen = Some(rule.action.clone());
            }
            *seen += 1;
        }
    }
    chosen
}

/// One installed denial: every create of `kind` is answered with it.
#[derive(Clone, Debug)]
pub struct CreateDenial {
    /// The kind denied, e.g. `StatefulSet`.
    pub kind: String,
    /// The webhook's name, as its configuration names it (`deny.example.com`).
    pub webhook: String,
    /// The webhook's own message.
    pub message: String,
    /// The status the webhook answered with (the server raises anything below 400 to 400).
    pub code: u16,
}
