//! Query parameters and the label/field selectors of list and watch.

use serde_json::Value;

use super::errors::ApiError;
use super::resources::{self, ResourceType};

/// The decoded query string (later keys do not override earlier ones: first wins, like Go's
/// `url.Values.Get`).
#[derive(Debug, Clone, Default)]
pub struct Query(pub Vec<(String, String)>);

impl Query {
    pub fn parse(raw: &str) -> Self {
        Query(
            form_urlencoded::parse(raw.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("1" | "true" | "True" | "TRUE"))
    }

    pub fn dry_run(&self) -> bool {
        self.0.iter().any(|(k, v)| k == "dryRun" && v == "All")
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector` (equality-based and set-based requirements, ANDed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                current.push(c);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                current.push(c);
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn set_values(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl LabelSelector {
    pub fn parse(raw: &str) -> Result<Self, ApiError> {
        let bad = || {
            ApiError::bad_request(&format!(
                "unable to parse requirement: found '{raw}', expected: valid label selector"
            ))
        };
        let mut reqs = Vec::new();
        for part in split_top_level(raw) {
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), set_values(v).ok_or_else(bad)?)
            } else if let Some((k, v)) = part.split_once(" in ") {
                Requirement::In(k.trim().into(), set_values(v).ok_or_else(bad)?)
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else if part.contains(' ') || part.contains('(') {
                return Err(bad());
            } else {
                Requirement::Exists(part)
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// From a `LabelSelector` object (`matchLabels` + `matchExpressions`).
    pub fn from_object(selector: &Value) -> Self {
        let mut reqs = Vec::new();
        if let Some(m) = selector.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(Requirement::Equals(
                    k.clone(),
                    v.as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        if let Some(exprs) = selector.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e["key"].as_str().unwrap_or_default().to_string();
                let values: Vec<String> = e["values"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                reqs.push(match e["operator"].as_str().unwrap_or_default() {
                    "In" => Requirement::In(key, values),
                    "NotIn" => Requirement::NotIn(key, values),
                    "Exists" => Requirement::Exists(key),
                    _ => Requirement::NotExists(key),
                });
            }
        }
        LabelSelector(reqs)
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::NotExists(k) => label(k).is_none(),
        })
    }
}

/// The field labels a kind supports in `fieldSelector` besides `metadata.name` and
/// `metadata.namespace` (the real server's per-type `GetAttrs`).
fn field_labels(rt: &ResourceType) -> &'static [&'static str] {
    if *rt == resources::EVENT {
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]
    } else if *rt == resources::EVENT_V1 {
        &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "reason",
            "reportingController",
            "type",
        ]
    } else if *rt == resources::POD {
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]
    } else if *rt == resources::SECRET {
        &["type"]
    } else if *rt == resources::NAMESPACE {
        &["status.phase"]
    } else {
        &[]
    }
}

/// A parsed `fieldSelector` (`=`, `==`, `!=`), over the field labels the kind supports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(raw: &str, rt: &ResourceType) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top_level(raw) {
            let (field, equal, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(&format!(
                    "invalid selector: '{raw}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if field != "metadata.name"
                && field != "metadata.namespace"
                && !field_labels(rt).contains(&field)
            {
                return Err(ApiError::bad_request(&format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let actual = field
                .split('.')
                .try_fold(obj, |cur, seg| cur.get(seg))
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    // `source` is "component" of the EventSource in the real attrs.
                    Value::Object(o) => o
                        .get("component")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    other => other.to_string(),
                })
                .unwrap_or_default();
            (actual == *value) == *equal
        })
    }
}

/// Both selectors of a list or watch.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub fn from_query(q: &Query, rt: &ResourceType) -> Result<Self, ApiError> {
        Ok(Selectors {
            labels: match q.get("labelSelector") {
                Some(s) => LabelSelector::parse(s)?,
                None => LabelSelector::default(),
            },
            fields: match q.get("fieldSelector") {
                Some(s) => FieldSelector::parse(s, rt)?,
                None => FieldSelector::default(),
            },
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}
