//! The service's Prometheus series (`/metrics`, prefix `flux_converger_`). One registry; the
//! handles are cheap clones shared by the HTTP side and the workers. Label values come from
//! closed sets (status codes, states, refusal codes, step names), so cardinality stays bounded.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::model::Kind;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: String,
}

/// The series about converges carry the gated object's kind (`Kustomization`,
/// `HelmRelease`), last, after the label they had before it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabel {
    pub step: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabel {
    pub code: String,
    pub kind: String,
}

/// A failure's reason (a typed error's metric label, `handoff_held`, `fenced_not_held`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub error: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

fn step_histogram() -> Histogram {
    // 1 ms .. ~65 s: a claim patch answers in milliseconds, an orphan wait or a hand-off in seconds.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn resize_histogram() -> Histogram {
    // 1 s .. ~18 h: a volume grows in seconds on a fast driver, in hours when it waits for a
    // pod to restart (offline expansion) or for EBS's six hours between modifications.
    Histogram::new(exponential_buckets(1.0, 2.0, 17))
}

#[derive(Clone)]
pub struct Metrics {
    /// Followed claims by state (`flux_converger_claims{state,kind}`): each claim of the newest
    /// followed revision of each gated object, as the follower last saw it.
    pub claims: Family<StateLabel, Gauge>,
    /// From a claim's request to its `grown` (`flux_converger_volume_resize_seconds{kind}`).
    pub volume_resize: Family<KindLabel, Histogram, fn() -> Histogram>,
    pub hook_requests: Family<CodeLabel, Counter>,
    pub revisions: Family<StateLabel, Counter>,
    pub claims_grown: Family<KindLabel, Counter>,
    pub statefulsets_recreated: Family<KindLabel, Counter>,
    pub refusals: Family<RefusalLabel, Counter>,
    /// Failures by reason (`flux_converger_errors_total{error,kind}`): each typed error's
    /// metric label, as kube-rs's controllers count their reconcile failures.
    pub errors: Family<ErrorLabel, Counter>,
    pub queue_depth: Gauge,
    pub step_duration: Family<StepLabel, Histogram, fn() -> Histogram>,
    pub last_resync: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Intents the last resume on start left in the journal, not resumed (docs/converge.md,
    /// the journal): not what they say, an identity their Kustomization no longer uses, or an
    /// absent StatefulSet no render at hand still has.
    pub intents_refused: Gauge,
    /// 1 when kustomize builds run under the Landlock sandbox, 0 when unsandboxed.
    pub render_sandbox_active: Gauge,
    /// The kernel's Landlock ABI version (0 without Landlock), whatever `--render-sandbox` says.
    pub render_sandbox_landlock_abi: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            claims: Family::default(),
            volume_resize: Family::new_with_constructor(resize_histogram),
            hook_requests: Family::default(),
            revisions: Family::default(),
            claims_grown: Family::default(),
            statefulsets_recreated: Family::default(),
            refusals: Family::default(),
            errors: Family::default(),
            queue_depth: Gauge::default(),
            step_duration: Family::new_with_constructor(step_histogram),
            last_resync: Gauge::default(),
            intents_refused: Gauge::default(),
            render_sandbox_active: Gauge::default(),
            render_sandbox_landlock_abi: Gauge::default(),
        }
    }
}

impl Metrics {
    /// Registers every series under `registry` (give it the `flux_converger` prefix).
    pub fn register(self, registry: &mut Registry) -> Self {
        registry.register(
            "hook_requests",
            "Webhook requests by HTTP status code",
            self.hook_requests.clone(),
        );
        registry.register(
            "revisions",
            "Revisions finished, by state",
            self.revisions.clone(),
        );
        registry.register(
            "claims_grown",
            "PersistentVolumeClaims grown",
            self.claims_grown.clone(),
        );
        registry.register(
            "statefulsets_recreated",
            "StatefulSets orphan-deleted and re-applied",
            self.statefulsets_recreated.clone(),
        );
        registry.register(
            "refusals",
            "StatefulSets refused, by refusal code",
            self.refusals.clone(),
        );
        registry.register(
            "errors",
            "Failures, by reason (a typed error's label)",
            self.errors.clone(),
        );
        registry.register(
            "queue_depth",
            "Kustomizations waiting in the queue",
            self.queue_depth.clone(),
        );
        registry.register(
            "step_duration_seconds",
            "Duration of each step (resolve, converge steps, handoff, observe)",
            self.step_duration.clone(),
        );
        registry.register(
            "last_resync_timestamp_seconds",
            "Unix time of the last completed resync",
            self.last_resync.clone(),
        );
        registry.register(
            "intents_refused",
            "Intents the last resume left in the journal without resuming them",
            self.intents_refused.clone(),
        );
        registry.register(
            "claims",
            "Followed PersistentVolumeClaims by the state of their expansion",
            self.claims.clone(),
        );
        registry.register(
            "volume_resize_seconds",
            "Time from a claim's raised request to its capacity reaching it",
            self.volume_resize.clone(),
        );
        registry.register(
            "render_sandbox_active",
            "1 when kustomize builds run under the Landlock sandbox (--render-sandbox), 0 when unsandboxed",
            self.render_sandbox_active.clone(),
        );
        registry.register(
            "render_sandbox_landlock_abi",
            "The kernel's Landlock ABI version (0: none)",
            self.render_sandbox_landlock_abi.clone(),
        );
        self
    }

    pub fn hook(&self, code: u16) {
        self.hook_requests
            .get_or_create(&CodeLabel {
                code: code.to_string(),
            })
            .inc();
    }

    pub fn revision(&self, kind: Kind, state: &str) {
        self.revisions
            .get_or_create(&StateLabel {
                state: state.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// One failure of `kind`'s run, by its error's metric label.
    pub fn error(&self, kind: Kind, label: &str) {
        self.errors
            .get_or_create(&ErrorLabel {
                error: label.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    pub fn refusal(&self, kind: Kind, code: &str) {
        self.refusals
            .get_or_create(&RefusalLabel {
                code: code.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    pub fn claims_grown(&self, kind: Kind, claims: u64) {
        self.claims_grown
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .inc_by(claims);
    }

    pub fn recreated(&self, kind: Kind) {
        self.statefulsets_recreated
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Sets the followed claims of `kind` in each state (every state is set, 0 when none):
    /// by their size's state (`counts`), and those moved to another VolumeAttributesClass by
    /// their move's (`moves`: `modified`, `modifying`, and `infeasible`, added to the claims
    /// whose size is infeasible: a claim is counted once in each of its two states).
    pub fn claims(
        &self,
        kind: Kind,
        counts: &std::collections::BTreeMap<crate::volume::VolumeState, i64>,
        moves: &std::collections::BTreeMap<crate::volume::ModifyState, i64>,
    ) {
        use crate::volume::{ModifyState, VolumeState};
        let mut labels: std::collections::BTreeMap<&'static str, i64> = VolumeState::ALL
            .iter()
            .map(|s| (s.as_str(), counts.get(s).copied().unwrap_or(0)))
            .collect();
        for state in ModifyState::ALL {
            *labels.entry(state.as_str()).or_default() += moves.get(&state).copied().unwrap_or(0);
        }
        for (state, n) in labels {
            self.claims
                .get_or_create(&StateLabel {
                    state: state.to_string(),
                    kind: kind.to_string(),
                })
                .set(n);
        }
    }

    /// A claim of `kind` grew, `seconds` after its request.
    pub fn volume_resized(&self, kind: Kind, seconds: f64) {
        self.volume_resize
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .observe(seconds);
    }

    /// Records the render sandbox's status (set once, at start).
    pub fn render_sandbox(&self, status: &crate::flux::render::sandbox::SandboxStatus) {
        self.render_sandbox_active.set(i64::from(status.active));
        self.render_sandbox_landlock_abi.set(i64::from(status.abi));
    }

    pub fn step(&self, kind: Kind, step: &str, seconds: f64) {
        self.step_duration
            .get_or_create(&StepLabel {
                step: step.to_string(),
                kind: kind.to_string(),
            })
            .observe(seconds);
    }
}

/// A fresh registry with the `flux_converger` prefix and the metrics registered in it.
pub fn registry() -> (Registry, Metrics) {
    let mut registry = Registry::with_prefix("flux_converger");
    let metrics = Metrics::default().register(&mut registry);
    (registry, metrics)
}

/// The registry in the text exposition format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flux::render::sandbox::{Enforcement, KernelSupport, SandboxMode, SandboxStatus};

    #[test]
    fn render_sandbox_status_is_exposed_by_table() {
        let kernel = KernelSupport {
            abi: 7,
            enforcement: Enforcement::Full,
            reason: None,
        };
        for (mode, active) in [("auto", "1"), ("off", "0")] {
            let (registry, metrics) = registry();
            let mode: SandboxMode = mode.parse().unwrap();
            metrics.render_sandbox(&SandboxStatus::of(mode, &kernel));
            let text = encode(&registry);
            assert!(
                text.contains(&format!("flux_converger_render_sandbox_active {active}\n")),
                "{text}"
            );
            assert!(
                text.contains("flux_converger_render_sandbox_landlock_abi 7\n"),
                "{text}"
            );
        }
    }
}
