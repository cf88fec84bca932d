//! No value substituted from a Secret leaves the process in a text: every record, Event, Flux
//! event, ExternalArtifact condition, log line and CLI error passes through a [`Redactor`]
//! that masks those values as `*****` (Flux's mask for Secret data in its diffs).
//!
//! The values are known at render time: `postBuild.substituteFrom` entries of kind Secret
//! ([`crate::flux::render::resolve::Resolver`] registers them per Kustomization in the
//! process [`registry`]). The texts that could carry them are many and come from far away (an
//! API server's 422 quotes the rejected value, serde quotes the value it could not read, Flux's
//! own Ready message quotes its dry run's 422), so they are not cleaned where they are made but
//! where they leave: `records::results::Results::put` (records, hence `/status`, the detail and
//! the dashboard), `records::events::EventSink::publish` (Kubernetes Events and Flux events),
//! the ExternalArtifact status write, the log writer ([`RedactingWriter`], every log line) and
//! the CLI's error print.
//!
//! Records, Events and conditions are masked with the values of the Kustomizations of their own
//! namespace only (the tenant boundary): masking with every tenant's values would let a tenant
//! learn whether a guess equals another tenant's secret by watching its own texts. Log lines
//! and CLI errors (read by the operator) are masked with every value the process knows.
//!
//! Short values: a value of fewer than [`MIN_ANYWHERE`] characters (`1`, `on`, `dev`) masked
//! everywhere would mangle every text (`main@sha1:` → `main@sha*****:`) while hiding little:
//! it is masked only where it stands quoted (`"on"`, `'on'`), which is how the API server and
//! serde quote a rejected value. The empty value is never a pattern.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};

use serde_json::Value;

/// What a secret value is replaced with (Flux's `*****`).
pub const MASK: &str = "*****";

/// Values at least this long (in characters) are masked wherever they appear.
pub const MIN_ANYWHERE: usize = 4;

/// A set of values to mask, as the patterns that find them, longest first (so that a value
/// containing another is masked whole). Cheap to clone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Redactor {
    /// (pattern, replacement), longest pattern first.
    patterns: Arc<Vec<(String, String)>>,
}

impl Redactor {
    /// A redactor for `values` (duplicates and empty values are ignored).
    pub fn new<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut patterns = BTreeMap::new();
        for value in values {
            let value = value.as_ref();
            if value.is_empty() {
                continue;
            }
            // JSON's escaping (also what a Go `%q` and a Rust `{:?}` give for the usual
            // characters), so a value with a quote or a backslash is found in a quoted text
            // and in a JSON log line.
            let escaped = json_escaped(value);
            if value.chars().count() >= MIN_ANYWHERE {
                patterns.insert(value.to_owned(), MASK.to_owned());
                patterns.insert(escaped, MASK.to_owned());
            } else {
                for quote in ["\"", "'", "`"] {
                    patterns.insert(
                        format!("{quote}{value}{quote}"),
                        format!("{quote}{MASK}{quote}"),
                    );
                }
                patterns.insert(format!("\"{escaped}\""), format!("\"{MASK}\""));
                patterns.insert(format!("\\\"{escaped}\\\""), format!("\\\"{MASK}\\\""));
            }
        }
        let mut patterns: Vec<(String, String)> = patterns.into_iter().collect();
        patterns.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        Redactor {
            patterns: Arc::new(patterns),
        }
    }

    /// Whether there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Both redactors' values.
    pub fn union(&self, other: &Redactor) -> Redactor {
        if other.is_empty() {
            return self.clone();
        }
        if self.is_empty() {
            return other.clone();
        }
        let mut patterns: Vec<(String, String)> = self
            .patterns
            .iter()
            .chain(other.patterns.iter())
            .cloned()
            .collect();
        patterns.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        patterns.dedup();
        Redactor {
            patterns: Arc::new(patterns),
        }
    }

    /// `text` with every value masked.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        self.redact_in_place(&mut out);
        out
    }

    /// Masks every value in `text`; `true` when something was masked.
    pub fn redact_in_place(&self, text: &mut String) -> bool {
        let mut changed = false;
        for (pattern, replacement) in self.patterns.iter() {
            if text.contains(pattern.as_str()) {
                *text = text.replace(pattern.as_str(), replacement);
                changed = true;
            }
        }
        changed
    }

    /// Masks every string (and every object key) in a JSON value.
    pub fn redact_json(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => {
                self.redact_in_place(s);
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (mut key, mut v) in entries {
                    self.redact_in_place(&mut key);
                    self.redact_json(&mut v);
                    map.insert(key, v);
                }
            }
            _ => {}
        }
    }

    /// `value` (any serde type: a record, a condition) with every string masked; `value`
    /// itself when it does not round-trip through JSON (never for the types used here).
    pub fn redact_serde<T>(&self, value: T) -> T
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        if self.is_empty() {
            return value;
        }
        let Ok(mut json) = serde_json::to_value(&value) else {
            return value;
        };
        self.redact_json(&mut json);
        serde_json::from_value(json).unwrap_or(value)
    }
}

fn json_escaped(value: &str) -> String {
    let quoted = serde_json::to_string(value).unwrap_or_default();
    quoted
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(value)
        .to_owned()
}

/// How many renders' values a Kustomization keeps: a rotated Secret's old value is still
/// masked in the texts that follow about the revisions rendered with it (Flux's answer to a
/// hand-off comes after the next render may have run).
pub const KEPT_RENDERS: usize = 4;

/// The secret values of every Kustomization this process rendered, by `namespace/name`: the
/// values of its last [`KEPT_RENDERS`] distinct renders.
#[derive(Debug, Default)]
pub struct Registry {
    inner: RwLock<RegistryState>,
}

#[derive(Debug, Default)]
struct RegistryState {
    by_key: BTreeMap<(String, String), Vec<Redactor>>,
    by_namespace: BTreeMap<String, Redactor>,
    all: Redactor,
}

impl Registry {
    /// Records the secret values the latest render of `namespace/name` substituted from.
    pub fn set(&self, namespace: &str, name: &str, redactor: Redactor) {
        let mut state = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_owned(), name.to_owned());
        if redactor.is_empty() {
            return;
        }
        let kept = state.by_key.entry(key).or_default();
        if kept.last() == Some(&redactor) {
            return;
        }
        kept.retain(|r| r != &redactor);
        kept.push(redactor);
        if kept.len() > KEPT_RENDERS {
            kept.remove(0);
        }
        state.recompute(namespace);
    }

    /// Forgets `namespace/name` (the Kustomization is gone).
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut state = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_owned(), name.to_owned());
        if state.by_key.remove(&key).is_some() {
            state.recompute(namespace);
        }
    }

    /// The values of every Kustomization of `namespace`: for texts a tenant of that namespace reads.
    pub fn for_namespace(&self, namespace: &str) -> Redactor {
        let state = self.inner.read().unwrap_or_else(|e| e.into_inner());
        state
            .by_namespace
            .get(namespace)
            .cloned()
            .unwrap_or_default()
    }

    /// Every value known: for log lines and CLI errors.
    pub fn all(&self) -> Redactor {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .all
            .clone()
    }
}

impl RegistryState {
    fn recompute(&mut self, namespace: &str) {
        let in_namespace = self
            .by_key
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .flat_map(|(_, kept)| kept)
            .fold(Redactor::default(), |acc, r| acc.union(r));
        if in_namespace.is_empty() {
            self.by_namespace.remove(namespace);
        } else {
            self.by_namespace.insert(namespace.to_owned(), in_namespace);
        }
        self.all = self
            .by_namespace
            .values()
            .fold(Redactor::default(), |acc, r| acc.union(r));
    }
}

/// The process's registry (one per process: the log writer reads it, and it has no handle to
/// be given one).
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

/// A `tracing_subscriber` writer that masks every value of the [`registry`] in each log line
/// before it reaches `inner` (the fmt layer writes one event per `write_all`).
#[derive(Clone, Debug)]
pub struct RedactingWriter<M> {
    inner: M,
}

impl<M> RedactingWriter<M> {
    pub fn new(inner: M) -> Self {
        RedactingWriter { inner }
    }
}

/// One log line's writer of [`RedactingWriter`].
pub struct Redacting<W> {
    inner: W,
}

impl<'a, M> tracing_subscriber::fmt::MakeWriter<'a> for RedactingWriter<M>
where
    M: tracing_subscriber::fmt::MakeWriter<'a>,
{
    type Writer = Redacting<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Redacting {
            inner: self.inner.make_writer(),
        }
    }
}

impl<W: std::io::Write> std::io::Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let redactor = registry().all();
        if redactor.is_empty() {
            return self.inner.write(buf);
        }
        let mut text = String::from_utf8_lossy(buf).into_owned();
        if redactor.redact_in_place(&mut text) {
            self.inner.write_all(text.as_bytes())?;
        } else {
            self.inner.write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redact_by_table() {
        for (values, text, expected) in [
            (vec!["s3cr3t"], "no value here", "no value here"),
            (
                vec!["s3cr3t"],
                r#"metadata.labels: Invalid value: "s3cr3t!": a valid label"#,
                r#"metadata.labels: Invalid value: "*****!": a valid label"#,
            ),
            (vec!["s3cr3t"], "a s3cr3t and s3cr3t", "a ***** and *****"),
            // Longest first: a value containing another is masked whole.
            (vec!["abcd", "abcdefgh"], "x abcdefgh y", "x ***** y"),
            (
                vec!["abcdefgh", "abcd"],
                "x abcdefgh y abcd",
                "x ***** y *****",
            ),
            // Quoted by JSON / Go's %q.
            (
                vec![r#"pa"ss\w"#],
                r#"Invalid value: "pa\"ss\\w""#,
                r#"Invalid value: "*****""#,
            ),
            (vec!["pa\"ss"], "raw pa\"ss", "raw *****"),
            // Short values: only where they stand quoted.
            (
                vec!["on"],
                r#"main@sha1:on Invalid value: "on""#,
                r#"main@sha1:on Invalid value: "*****""#,
            ),
            (vec!["1"], "replicas '1' of 10", "replicas '*****' of 10"),
            (vec!["ab"], r#"{\"v\":\"ab\"}"#, r#"{\"v\":\"*****\"}"#),
            (vec!["abc"], "abc", "abc"),
            // Four characters and more: everywhere, even where that over-masks.
            (vec!["true"], "spec.force is true", "spec.force is *****"),
            // Nothing to mask for an empty value.
            (vec![""], "text", "text"),
            (vec![], "text", "text"),
            // Non-ASCII: characters, not bytes, count.
            (vec!["äöü"], "x äöü \"äöü\"", "x äöü \"*****\""),
            (vec!["äöüß"], "x äöüß", "x *****"),
        ] {
            let r = Redactor::new(values.iter());
            assert_eq!(r.redact(text), expected, "{values:?} over {text:?}");
        }
    }

    #[test]
    fn json_strings_and_keys_are_masked() {
        let r = Redactor::new(["s3cr3t-value"]);
        let mut v = json!({
            "error": {"message": "env[0].value: \"s3cr3t-value\""},
            "list": ["s3cr3t-value", 3, null],
            "s3cr3t-value": true,
        });
        r.redact_json(&mut v);
        assert_eq!(
            v,
            json!({
                "error": {"message": "env[0].value: \"*****\""},
                "list": ["*****", 3, null],
                "*****": true,
            })
        );
    }

    #[test]
    fn the_registry_keeps_namespaces_apart() {
        let registry = Registry::default();
        registry.set("team-a", "apps", Redactor::new(["alpha-secret"]));
        registry.set("team-a", "db", Redactor::new(["gamma-secret"]));
        registry.set("team-b", "apps", Redactor::new(["beta-secret"]));
        let text = "alpha-secret beta-secret gamma-secret";
        assert_eq!(
            registry.for_namespace("team-a").redact(text),
            "***** beta-secret *****"
        );
        assert_eq!(
            registry.for_namespace("team-b").redact(text),
            "alpha-secret ***** gamma-secret"
        );
        assert_eq!(registry.all().redact(text), "***** ***** *****");
        // A render with other values (a rotated Secret) adds them; the oldest go after
        // KEPT_RENDERS renders; a forgotten Kustomization masks nothing more.
        registry.set("team-a", "apps", Redactor::new(["delta-secret"]));
        assert_eq!(
            registry
                .for_namespace("team-a")
                .redact("alpha-secret delta-secret"),
            "***** *****"
        );
        for i in 0..KEPT_RENDERS {
            registry.set("team-a", "apps", Redactor::new([format!("rotated-{i}")]));
        }
        assert_eq!(
            registry
                .for_namespace("team-a")
                .redact("alpha-secret delta-secret rotated-0"),
            "alpha-secret delta-secret *****"
        );
        registry.forget("team-a", "apps");
        registry.forget("team-a", "db");
        assert!(registry.for_namespace("team-a").is_empty());
        assert_eq!(
            registry.all().redact(text),
            "alpha-secret ***** gamma-secret"
        );
    }

    #[test]
    fn the_log_writer_masks_each_line() {
        use std::io::Write as _;
        registry().set("writer-test", "apps", Redactor::new(["log-secret-value"]));
        let mut out = Vec::new();
        {
            let mut w = Redacting { inner: &mut out };
            w.write_all(b"error=\"Invalid value: \\\"log-secret-value\\\"\"\n")
                .unwrap();
        }
        registry().forget("writer-test", "apps");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "error=\"Invalid value: \\\"*****\\\"\"\n"
        );
    }
}
