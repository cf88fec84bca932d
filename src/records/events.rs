//! What a revision's outcome tells the world besides `/status`: a Kubernetes Event on the
//! gated object (`kubectl describe`, `flux events`), and, with `--events-addr`, the same event
//! posted to notification-controller in Flux's own format, so existing Flux Alerts report
//! converges like any Flux controller's.
//!
//! Events are best-effort, as Flux's own are: a failure to publish is logged, never turns a
//! converged revision into a failed one, and never retries for long.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};

use crate::flux::event::{Event as FluxEvent, InvolvedObject};
use crate::gated::Gated;

/// `reportingController` of every event (Kubernetes and Flux).
pub const REPORTING_CONTROLLER: &str = "flux-converger";
/// Kubernetes Event `action` of every event.
pub const ACTION: &str = "Converge";
/// Event reasons.
pub const REASON_CONVERGED: &str = "Converged";
pub const REASON_REFUSED: &str = "ConvergeRefused";
pub const REASON_FAILED: &str = "ConvergeFailed";
/// The gated object's controller answered a hand-off (`records::answer_event`): applied it
/// (Normal), failed it, or did not answer in time (Warning).
pub const REASON_HANDOFF_APPLIED: &str = "HandoffApplied";
pub const REASON_HANDOFF_FAILED: &str = "HandoffFailed";
pub const REASON_HANDOFF_TIMEOUT: &str = "HandoffTimeout";
/// The followed volumes' Events (docs/gate.md, Events): a claim the driver will not grow
/// (Warning), one past `--resize-timeout` (Warning), every claim of the revision grown (Normal,
/// once), a failed expansion recovered from by a size declared back down (Normal).
pub const REASON_VOLUME_RESIZE_INFEASIBLE: &str = "VolumeResizeInfeasible";
pub const REASON_VOLUME_RESIZE_STALLED: &str = "VolumeResizeStalled";
pub const REASON_VOLUMES_GROWN: &str = "VolumesGrown";
pub const REASON_VOLUME_RESIZE_RECOVERED: &str = "VolumeResizeRecovered";
/// A claim's move to another VolumeAttributesClass the driver refused for good (Warning).
pub const REASON_VOLUME_MODIFY_INFEASIBLE: &str = "VolumeModifyInfeasible";
/// A pod evicted to finish its claims' file system resize (`restart-for-resize`, Normal), and
/// an eviction a PodDisruptionBudget holds back for now (Normal: it is retried).
pub const REASON_VOLUME_RESTARTED: &str = "VolumeRestarted";
pub const REASON_VOLUME_RESTART_BLOCKED: &str = "VolumeRestartBlocked";
/// Flux's events carry at most this many characters of message (fluxcd/pkg `runtime/events`).
pub const MAX_MESSAGE: usize = 39_000;

const POST_TIMEOUT: Duration = Duration::from_secs(5);
const POST_ATTEMPTS: usize = 3;

/// Flux's two severities.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Severity {
    Info,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Error => "error",
        }
    }
}

/// One event about one revision of a Kustomization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevisionEvent {
    pub severity: Severity,
    pub reason: String,
    pub message: String,
    pub revision: String,
}

/// Why the event sink could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error("--events-addr {addr:?}: {message}")]
    BadAddress { addr: String, message: String },
}

/// What an Event is about: one gated object, as much of it as an Event names. Kept by
/// whatever publishes about the object after its run ended (the claim follower), so it needs
/// neither the object nor its type.
#[derive(Clone, Debug, PartialEq)]
pub struct EventTarget {
    pub kind: crate::model::Kind,
    /// Its API group (the Flux event's metadata keys are prefixed with it).
    pub group: String,
    /// What the Kubernetes Event's `regarding` is (the object's `object_ref`).
    pub reference: ObjectReference,
    /// The object's `resourceVersion` when the Event was made (the Flux event carries it).
    pub resource_version: Option<String>,
}

impl EventTarget {
    /// The target `object` is.
    pub fn of<G: Gated>(object: &G) -> Self {
        EventTarget {
            kind: G::KIND,
            group: G::group(&()).to_string(),
            reference: object.object_ref(&()),
            resource_version: object.meta().resource_version.clone(),
        }
    }

    /// A target named only by its kind and key (a follow resumed from the records, with no
    /// object at hand): the Event names it without its uid.
    pub fn named(kind: crate::model::Kind, key: &crate::model::Key) -> Self {
        let spec = kind.spec();
        let (group, api_version) = (spec.group, format!("{}/{}", spec.group, spec.version));
        EventTarget {
            kind,
            group: group.to_string(),
            reference: ObjectReference {
                api_version: Some(api_version.to_string()),
                kind: Some(kind.to_string()),
                namespace: Some(key.namespace.clone()),
                name: Some(key.name.clone()),
                ..ObjectReference::default()
            },
            resource_version: None,
        }
    }

    fn key(&self) -> String {
        format!(
            "{}/{}",
            self.reference.namespace.as_deref().unwrap_or_default(),
            self.reference.name.as_deref().unwrap_or_default()
        )
    }
}

/// fluxcd/pkg `runtime/events.Event` for `event` about `object`, as its controller posts it
/// (kustomize-controller, helm-controller): metadata keys prefixed with the object's API group
/// (notification-controller keeps only those, and strips the prefix before forwarding).
pub fn flux_event<G: Gated>(
    kustomization: &G,
    event: &RevisionEvent,
    instance: Option<&str>,
    timestamp: jiff::Timestamp,
) -> FluxEvent {
    flux_event_for(&EventTarget::of(kustomization), event, instance, timestamp)
}

/// [`flux_event`] about a [`EventTarget`].
pub fn flux_event_for(
    target: &EventTarget,
    event: &RevisionEvent,
    instance: Option<&str>,
    timestamp: jiff::Timestamp,
) -> FluxEvent {
    let group = &target.group;
    let reference = &target.reference;
    let mut message = event.message.clone();
    crate::records::results::truncate_text(&mut message, MAX_MESSAGE);
    FluxEvent {
        involved_object: InvolvedObject {
            kind: target.kind.to_string(),
            namespace: reference.namespace.clone().unwrap_or_default(),
            name: reference.name.clone().unwrap_or_default(),
            uid: reference.uid.clone(),
            api_version: reference.api_version.clone(),
            resource_version: target.resource_version.clone(),
        },
        severity: event.severity.as_str().to_string(),
        // metav1.Time: RFC 3339, whole seconds.
        timestamp: Some(timestamp.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        message,
        reason: event.reason.clone(),
        metadata: BTreeMap::from([(format!("{group}/revision"), event.revision.clone())]),
        reporting_controller: REPORTING_CONTROLLER.to_string(),
        reporting_instance: instance.map(str::to_string),
    }
}

#[derive(Clone)]
struct Notifier {
    http: reqwest::Client,
    url: String,
}

/// Where revision events go. Cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    recorder: Option<Recorder>,
    notifier: Option<Notifier>,
    instance: Option<String>,
}

impl EventSink {
    /// Kubernetes Events through `client` (the service's own identity), and, with
    /// `events_addr`, Flux events posted there. `instance` is the reporting instance (the pod).
    pub fn new(
        client: kube::Client,
        events_addr: Option<&str>,
        instance: Option<String>,
    ) -> Result<Self, EventsError> {
        let notifier = match events_addr {
            None => None,
            Some(addr) => {
                let url = reqwest::Url::parse(addr).map_err(|e| EventsError::BadAddress {
                    addr: addr.to_string(),
                    message: e.to_string(),
                })?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(EventsError::BadAddress {
                        addr: addr.to_string(),
                        message: "expected an http:// or https:// URL".into(),
                    });
                }
                // Explicit, as on the kube client (`wire::kube_client`): a small POST must not
                // wait on Nagle and the receiver's delayed ACK.
                let http = reqwest::Client::builder()
                    .tcp_nodelay(true)
                    .timeout(POST_TIMEOUT)
                    .build()
                    .map_err(|e| EventsError::BadAddress {
                        addr: addr.to_string(),
                        message: e.to_string(),
                    })?;
                Some(Notifier {
                    http,
                    url: url.to_string(),
                })
            }
        };
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.to_string(),
            instance: instance.clone(),
        };
        Ok(EventSink {
            recorder: Some(Recorder::new(client, reporter)),
            notifier,
            instance,
        })
    }

    /// Publishes nothing (tests, and runs that must not write Events).
    pub fn disabled() -> Self {
        EventSink {
            recorder: None,
            notifier: None,
            instance: None,
        }
    }

    /// Publishes `event` on `kustomization`; failures are logged, not returned.
    pub async fn publish<G: Gated>(&self, kustomization: &G, event: &RevisionEvent) {
        self.publish_to(&EventTarget::of(kustomization), event)
            .await;
    }

    /// Publishes `event` on `target`; failures are logged, not returned.
    pub async fn publish_to(&self, target: &EventTarget, event: &RevisionEvent) {
        // The one way out for Events and Flux events: no value substituted from a Secret of
        // the Kustomization's namespace goes with them (crate::redact).
        let mut event = event.clone();
        crate::redact::registry()
            .for_namespace(target.reference.namespace.as_deref().unwrap_or_default())
            .redact_in_place(&mut event.message);
        let event = &event;
        let shown = target.key();
        let kind = target.kind;
        if let Some(recorder) = &self.recorder {
            let reference: ObjectReference = target.reference.clone();
            let mut note = event.message.clone();
            // The Events API refuses notes over 1 kB.
            crate::records::results::truncate_text(&mut note, 1024);
            let published = recorder
                .publish(
                    &KubeEvent {
                        type_: match event.severity {
                            Severity::Info => EventType::Normal,
                            Severity::Error => EventType::Warning,
                        },
                        reason: event.reason.clone(),
                        note: Some(note),
                        action: ACTION.to_string(),
                        secondary: None,
                    },
                    &reference,
                )
                .await;
            if let Err(e) = published {
                tracing::warn!(kind = %kind, object = %shown, revision = %event.revision, error = %e,
                    "could not record the Kubernetes Event");
            }
        }
        if let Some(notifier) = &self.notifier {
            let body = flux_event_for(
                target,
                event,
                self.instance.as_deref(),
                jiff::Timestamp::now(),
            );
            if let Err(e) = notifier.post(&body).await {
                tracing::warn!(kind = %kind, object = %shown, revision = %event.revision, url = %notifier.url,
                    error = %e, "could not post the event to notification-controller");
            }
        }
    }
}

impl Notifier {
    /// Posts as Flux's controllers do: JSON, `Gotk-Component` naming the controller, a few
    /// retries on connection errors and 5xx; any 2xx is success.
    async fn post(&self, body: &FluxEvent) -> Result<(), String> {
        let body = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        let mut last = String::new();
        for attempt in 0..POST_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
            let sent = self
                .http
                .post(&self.url)
                .header("Gotk-Component", REPORTING_CONTROLLER)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) if r.status().is_server_error() || r.status().as_u16() == 429 => {
                    last = format!("answered {}", r.status());
                }
                Ok(r) => return Err(format!("answered {}", r.status())),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flux::objects::Kustomization;

    #[test]
    fn flux_event_has_flux_shape() {
        let ks: Kustomization = serde_json::from_value(serde_json::json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system", "uid": "u-1", "resourceVersion": "9"},
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "repo"}}
        }))
        .unwrap();
        let event = RevisionEvent {
            severity: Severity::Error,
            reason: REASON_REFUSED.into(),
            message: "StatefulSet apps/web: shrink: template data 2Gi -> 1Gi".into(),
            revision: "main@sha1:abc".into(),
        };
        let at: jiff::Timestamp = "2026-11-30T08:00:00.123Z".parse().unwrap();
        let got = serde_json::to_value(flux_event(&ks, &event, Some("pod-1"), at)).unwrap();
        assert_eq!(
            got,
            serde_json::json!({
                "involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": "apps",
                    "uid": "u-1", "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "resourceVersion": "9"},
                "severity": "error",
                "timestamp": "2026-11-30T08:00:00Z",
                "message": "StatefulSet apps/web: shrink: template data 2Gi -> 1Gi",
                "reason": "ConvergeRefused",
                "metadata": {"kustomize.toolkit.fluxcd.io/revision": "main@sha1:abc"},
                "reportingController": "flux-converger",
                "reportingInstance": "pod-1"
            })
        );
    }

    /// A follow resumed from the records has no object at hand: its Events still name the
    /// object as its controller's events do (kind, apiVersion, the group-prefixed revision).
    #[test]
    fn a_target_named_by_kind_and_key_has_the_kinds_shape() {
        use crate::model::{Key, Kind};
        let event = RevisionEvent {
            severity: Severity::Error,
            reason: REASON_VOLUME_RESIZE_INFEASIBLE.into(),
            message: "claim data-web-0: infeasible".into(),
            revision: "v3".into(),
        };
        let at: jiff::Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        for (kind, api_version, group) in [
            (
                Kind::KUSTOMIZATION,
                "kustomize.toolkit.fluxcd.io/v1",
                "kustomize.toolkit.fluxcd.io",
            ),
            (
                Kind::HELM_RELEASE,
                "helm.toolkit.fluxcd.io/v2",
                "helm.toolkit.fluxcd.io",
            ),
        ] {
            let target = EventTarget::named(kind, &Key::new(kind, "team", "db"));
            let got = serde_json::to_value(flux_event_for(&target, &event, None, at)).unwrap();
            assert_eq!(got["involvedObject"]["kind"], kind.as_str());
            assert_eq!(got["involvedObject"]["apiVersion"], api_version);
            assert_eq!(got["involvedObject"]["namespace"], "team");
            assert_eq!(got["involvedObject"]["name"], "db");
            assert_eq!(got["metadata"][format!("{group}/revision")], "v3");
            assert_eq!(got["reason"], "VolumeResizeInfeasible");
            assert_eq!(got["severity"], "error");
        }
    }

    #[tokio::test]
    async fn bad_events_addr_is_refused() {
        for addr in ["not a url", "ftp://notification-controller/"] {
            let client = kube::Client::new(
                tower::service_fn(|_: http::Request<kube::client::Body>| async {
                    Err::<http::Response<kube::client::Body>, std::io::Error>(
                        std::io::Error::other("unused"),
                    )
                }),
                "default",
            );
            let e = EventSink::new(client, Some(addr), None)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.starts_with("--events-addr"), "{addr}: {e}");
        }
    }
}
