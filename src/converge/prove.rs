//! The proof step, pure parts: the objects to dry-run, and what the server's answers mean.
//!
//! `decide` knows which immutable changes a re-create carries; the server knows every other
//! immutable field (and they vary with the Kubernetes version). Dry-running the desired object
//! with the live values of exactly the carried fields put back (the volumeClaimTemplates, the
//! pod management policy, the revision history limit) asks the server one question: "apart
//! from what the re-create carries, would Flux's apply pass?" Anything else immutable is still
//! refused there (`other-immutable`). A second dry run, of the desired object as it is, asks
//! whether the server takes the carried changes in place (a newer server, a feature gate):
//! then nothing is re-created. Its "forbidden" is a property of the server, not of the object,
//! so it is remembered for a while ([`InPlaceMemory`]) and not asked again for every converge.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Volume,
};

use crate::cluster::CallError;
use crate::decide::{Change, ChangeClass, Refusal, RefusalCode};

/// The start of the server's message when a StatefulSet update touches an immutable field
/// (the field list that follows varies with the Kubernetes version).
pub const IMMUTABLE_PREFIX: &str = "updates to statefulset spec for fields other than";

/// The desired object with the live values of the fields a re-create carries put back:
/// `volumeClaimTemplates`, `podManagementPolicy` and `revisionHistoryLimit` (each as the live
/// object has it, absent when it is absent there).
///
/// The templates lose `status` and `metadata.creationTimestamp` (server output, not intent);
/// the server accepts them either way.
///
/// An added template is not in the proof, but the pod template may mount it, and from 1.33 on
/// the server validates the pod template's mounts against its volumes and the claim templates,
/// on update too (`tests/fixtures/v1.36/error-statefulset-update-mount-not-found.json`). So
/// each added template whose name no pod volume has is given, in the proof only, the volume the
/// StatefulSet controller gives every pod for it: a `persistentVolumeClaim` volume of that name
/// (ordinal 0's claim). The mounts are then validated as they will be after the re-create,
/// and a mount that names neither a template nor a volume is still refused, as Flux's own
/// apply is refused. Servers before 1.33 do not validate mounts; the volume changes nothing
/// there. The re-created object is the desired one, never this.
pub fn proof_object(desired: &StatefulSet, live: &StatefulSet) -> StatefulSet {
    let mut proof = desired.clone();
    let live_spec = live.spec.as_ref();
    let templates = live_spec
        .and_then(|s| s.volume_claim_templates.clone())
        .map(|ts| {
            ts.into_iter()
                .map(|mut t| {
                    t.status = None;
                    t.metadata.creation_timestamp = None;
                    t
                })
                .collect::<Vec<_>>()
        });
    let set_name = desired.metadata.name.clone().unwrap_or_default();
    if let Some(spec) = proof.spec.as_mut() {
        let added = added_templates(spec.volume_claim_templates.as_deref(), templates.as_deref());
        spec.volume_claim_templates = templates;
        spec.pod_management_policy = live_spec.and_then(|s| s.pod_management_policy.clone());
        spec.revision_history_limit = live_spec.and_then(|s| s.revision_history_limit);
        if let Some(pod) = spec.template.spec.as_mut() {
            for name in added {
                let volumes = pod.volumes.get_or_insert_with(Vec::new);
                if volumes.iter().any(|v| v.name == name) {
                    continue;
                }
                volumes.push(Volume {
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: format!("{name}-{set_name}-0"),
                        read_only: None,
                    }),
                    name,
                    ..Default::default()
                });
            }
        }
    }
    proof.status = None;
    proof
}

/// The names of the declared templates the live object does not have.
fn added_templates(
    declared: Option<&[PersistentVolumeClaim]>,
    live: Option<&[PersistentVolumeClaim]>,
) -> Vec<String> {
    let live: Vec<&str> = live
        .into_iter()
        .flatten()
        .filter_map(|t| t.metadata.name.as_deref())
        .collect();
    declared
        .into_iter()
        .flatten()
        .filter_map(|t| t.metadata.name.clone())
        .filter(|n| !live.contains(&n.as_str()))
        .collect()
}

/// Whether the proof's answer confirms the watched copy it was built from: the same uid on an
/// object that is not terminating. A refusal confirms nothing (the copy's fields may be what
/// the server refused), nor does any other failure: the object is read and decided on again,
/// and a real refusal or failure is met again there.
pub fn confirms(copy: &StatefulSet, answer: &Result<StatefulSet, Verdict>) -> bool {
    match answer {
        Ok(live) => {
            live.metadata.uid.is_some()
                && live.metadata.uid == copy.metadata.uid
                && live.metadata.deletion_timestamp.is_none()
        }
        Err(_) => false,
    }
}

/// What the dry run of the desired object as it is (carried fields included) says, once the
/// proof passed.
#[derive(Debug, PartialEq)]
pub enum InPlace {
    /// The server takes every change in place (KEP-4650's `StatefulSetUpdateVolumeClaimTemplate`
    /// gate, `revisionHistoryLimit` on 1.33 and later): Flux's apply passes, nothing is
    /// re-created.
    Accepted,
    /// The server forbids the carried changes in place: the re-create carries them.
    Forbidden,
    /// Any other answer, read as the proof's.
    Other(Verdict),
}

/// Reads the answer to the dry run of the desired object as it is.
pub fn classify_in_place(namespace: &str, name: &str, answer: Result<(), CallError>) -> InPlace {
    match answer {
        Ok(()) => InPlace::Accepted,
        Err(e) if e.code() == Some(422) && e.server_text().contains(IMMUTABLE_PREFIX) => {
            InPlace::Forbidden
        }
        Err(e) => InPlace::Other(classify(namespace, name, e)),
    }
}

/// How long a "forbidden in place" is taken as the server's answer: a control-plane upgrade
/// (1.33 made `revisionHistoryLimit` mutable) or a feature gate turned on is picked up within
/// this, and until then the re-create, which is always correct, is done instead.
pub const REMEMBER_FORBIDDEN: Duration = Duration::from_secs(3600);

/// The sets of carried change classes the server forbade in place, and when.
///
/// Only "forbidden" is remembered, never "accepted": skipping the question can then only lead
/// to a re-create where the server would have taken the change in place, the path every
/// server without the feature takes, and never to handing Flux an apply the server refuses.
/// What the skipped dry run also caught besides (an admission rejection of the carried
/// fields) the pre-flight create still catches before the first write. The validation that
/// forbids a field forbids it whatever else changes, so a remembered set answers for every
/// set that contains it. Shared by the converges of one process (the service keeps one).
#[derive(Clone, Debug, Default)]
pub struct InPlaceMemory(Arc<Mutex<Vec<(u8, Instant)>>>);

fn class_bit(class: ChangeClass) -> u8 {
    match class {
        ChangeClass::StorageGrown => 1,
        ChangeClass::PodManagementPolicy => 1 << 1,
        ChangeClass::RevisionHistoryLimit => 1 << 2,
        ChangeClass::ClaimMetadata => 1 << 3,
        ChangeClass::TemplateAdded => 1 << 4,
        ChangeClass::VolumeAttributesClass => 1 << 5,
    }
}

fn classes(changes: &[Change]) -> u8 {
    changes.iter().fold(0, |set, c| set | class_bit(c.class))
}

impl InPlaceMemory {
    /// Whether the server forbade, less than [`REMEMBER_FORBIDDEN`] ago, carrying in place
    /// changes of classes that `changes` all include.
    pub fn forbids(&self, changes: &[Change], now: Instant) -> bool {
        let set = classes(changes);
        set != 0
            && self
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .any(|(known, at)| {
                    set & known == *known && now.saturating_duration_since(*at) < REMEMBER_FORBIDDEN
                })
    }

    /// Notes the server's "forbidden in place" for `changes`.
    pub fn forbidden(&self, changes: &[Change], now: Instant) {
        let set = classes(changes);
        if set == 0 {
            return;
        }
        let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        known.retain(|(k, _)| *k != set);
        known.push((set, now));
    }
}

/// What a failed dry run means.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// The server refuses the object: Flux's apply would fail too. Nothing is proven.
    Refused(Refusal),
    /// The server could not answer (5xx, throttled, timeout, connection): try again later.
    Failed(CallError),
    /// 401, 403 or 404: the converger may not ask, or the object's namespace or API is
    /// missing. Not a statement about the object (Flux, with its own access, may well apply
    /// it), so not a refusal: a failure whose message says what access or object to fix.
    Denied { message: String, cause: CallError },
}

/// Reads a failed dry run: 422 naming the immutable fields → `other-immutable`; 401, 403 and
/// 404 → a failure to fix access ([`Verdict::Denied`]); any other rejection of the object
/// (4xx but 408/429, which are about the request, not the object) → `rejected`, quoting the
/// server; anything else is a failure to retry.
pub fn classify(namespace: &str, name: &str, error: CallError) -> Verdict {
    let refusal = |code, message| {
        Verdict::Refused(Refusal {
            namespace: namespace.to_string(),
            name: name.to_string(),
            code,
            message,
        })
    };
    let text = error.server_text();
    match error.code() {
        Some(422) if text.contains(IMMUTABLE_PREFIX) => refusal(
            RefusalCode::OtherImmutable,
            format!(
                "a field the converger does not carry changed and cannot change in place: the \
                 server's dry run of the desired object with the live volumeClaimTemplates, \
                 podManagementPolicy and revisionHistoryLimit put back says \"{text}\"; revert \
                 that field in git, or re-create the StatefulSet by hand"
            ),
        ),
        Some(401) => Verdict::Denied {
            message: format!(
                "the API server does not accept the converger's credentials (HTTP 401: \"{text}\"): \
                 renew or fix the kubeconfig or service account token"
            ),
            cause: error,
        },
        Some(403) => Verdict::Denied {
            message: format!(
                "the converger may not server-side apply StatefulSet {namespace}/{name} (HTTP 403: \
                 \"{text}\"): it needs the RBAC verb \"patch\" on \"statefulsets\" in API group \
                 \"apps\" in namespace {namespace} (as the identity it acts as, the Kustomization's \
                 service account when impersonating)"
            ),
            cause: error,
        },
        Some(404) => Verdict::Denied {
            message: format!(
                "the server-side apply dry run of StatefulSet {namespace}/{name} found nothing to \
                 apply to (HTTP 404: \"{text}\"): namespace {namespace} or the apps/v1 API is \
                 missing"
            ),
            cause: error,
        },
        Some(code) if (400..500).contains(&code) && code != 408 && code != 429 => refusal(
            RefusalCode::Rejected,
            format!(
                "the server's dry run rejects the desired object (HTTP {code}): \"{text}\"; \
                 Flux's apply would fail the same way and nothing is proven, so nothing is done"
            ),
        ),
        _ => Verdict::Failed(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(class: ChangeClass) -> Change {
        Change {
            class,
            field: "spec".into(),
            live: "a".into(),
            declared: "b".into(),
            note: None,
        }
    }

    /// A forbidden set answers for itself and every set containing it, for an hour; an
    /// empty set is never answered from memory.
    #[test]
    fn in_place_memory_by_table() {
        use ChangeClass::*;
        let t0 = Instant::now();
        let memory = InPlaceMemory::default();
        memory.forbidden(&[change(StorageGrown), change(ClaimMetadata)], t0);
        memory.forbidden(&[], t0);
        let cases: &[(&str, &[ChangeClass], Duration, bool)] = &[
            (
                "the same set",
                &[StorageGrown, ClaimMetadata],
                Duration::ZERO,
                true,
            ),
            (
                "the same classes, repeated",
                &[ClaimMetadata, StorageGrown, StorageGrown],
                Duration::ZERO,
                true,
            ),
            (
                "a set containing it",
                &[StorageGrown, ClaimMetadata, PodManagementPolicy],
                Duration::ZERO,
                true,
            ),
            (
                "a part of it: not known",
                &[StorageGrown],
                Duration::ZERO,
                false,
            ),
            (
                "another class: not known",
                &[RevisionHistoryLimit],
                Duration::ZERO,
                false,
            ),
            ("nothing carried", &[], Duration::ZERO, false),
            (
                "just before the hour",
                &[StorageGrown, ClaimMetadata],
                REMEMBER_FORBIDDEN - Duration::from_secs(1),
                true,
            ),
            (
                "after the hour: asked again",
                &[StorageGrown, ClaimMetadata],
                REMEMBER_FORBIDDEN,
                false,
            ),
        ];
        for (what, set, after, want) in cases {
            let changes: Vec<_> = set.iter().map(|c| change(*c)).collect();
            assert_eq!(memory.forbids(&changes, t0 + *after), *want, "{what}");
        }
        // Asked again and still forbidden: remembered from the new answer.
        let later = t0 + REMEMBER_FORBIDDEN * 2;
        memory.forbidden(&[change(StorageGrown), change(ClaimMetadata)], later);
        assert!(memory.forbids(&[change(StorageGrown), change(ClaimMetadata)], later));
        assert_eq!(memory.0.lock().unwrap().len(), 1);
    }
    use crate::cluster::CallErrorKind;

    fn fixture_error(file: &str) -> CallError {
        let path = format!("{}/tests/fixtures/v1.28/{file}", env!("CARGO_MANIFEST_DIR"));
        let status: kube::core::Status =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        CallError::new(
            "server-side apply dry run of",
            "StatefulSet default/web",
            CallErrorKind::Api {
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
                causes: status
                    .details
                    .map(|d| d.causes.into_iter().map(|c| c.message).collect())
                    .unwrap_or_default(),
            },
        )
    }

    fn code_of(v: &Verdict) -> Option<RefusalCode> {
        match v {
            Verdict::Refused(r) => Some(r.code),
            Verdict::Failed(_) | Verdict::Denied { .. } => None,
        }
    }

    #[test]
    fn server_answers_map_to_refusals_or_retries() {
        let api = |code: u16, reason: &str, message: &str| {
            CallError::api("dry run", "StatefulSet default/web", code, reason, message)
        };
        let cases: Vec<(&str, CallError, Option<RefusalCode>)> = vec![
            (
                "immutable fixture",
                fixture_error("error-statefulset-update-forbidden.json"),
                Some(RefusalCode::OtherImmutable),
            ),
            (
                "422 for another reason (fixture)",
                fixture_error("error-statefulset-dryrun-invalid-other.json"),
                Some(RefusalCode::Rejected),
            ),
            (
                "400",
                api(400, "BadRequest", "bad"),
                Some(RefusalCode::Rejected),
            ),
            (
                "409 conflict on the object",
                api(409, "Conflict", "field manager conflict"),
                Some(RefusalCode::Rejected),
            ),
            (
                "408 is about the request",
                api(408, "Timeout", "slow"),
                None,
            ),
            ("429 throttled", api(429, "TooManyRequests", "later"), None),
            ("500", api(500, "InternalError", "etcd"), None),
            ("503", api(503, "ServiceUnavailable", "x"), None),
            (
                "timeout",
                CallError::new("dry run", "x", CallErrorKind::Timeout { after_ms: 5 }),
                None,
            ),
            (
                "connection",
                CallError::new(
                    "dry run",
                    "x",
                    CallErrorKind::Connection {
                        message: "reset".into(),
                    },
                ),
                None,
            ),
        ];
        for (what, error, want) in cases {
            assert_eq!(code_of(&classify("default", "web", error)), want, "{what}");
        }
    }

    #[test]
    fn the_dry_run_as_declared_tells_in_place_from_re_create() {
        let api = |code: u16, reason: &str, message: &str| {
            CallError::api("dry run", "StatefulSet default/web", code, reason, message)
        };
        assert_eq!(
            classify_in_place("default", "web", Ok(())),
            InPlace::Accepted
        );
        assert_eq!(
            classify_in_place(
                "default",
                "web",
                Err(fixture_error("error-statefulset-update-forbidden.json"))
            ),
            InPlace::Forbidden
        );
        let rejected = classify_in_place(
            "default",
            "web",
            Err(fixture_error("error-statefulset-dryrun-invalid-other.json")),
        );
        assert!(
            matches!(&rejected, InPlace::Other(Verdict::Refused(r)) if r.code == RefusalCode::Rejected),
            "{rejected:?}"
        );
        let busy = classify_in_place("default", "web", Err(api(503, "ServiceUnavailable", "x")));
        assert!(
            matches!(busy, InPlace::Other(Verdict::Failed(_))),
            "{busy:?}"
        );
    }

    #[test]
    fn access_failures_are_not_refusals_and_name_what_to_fix() {
        let api = |code: u16, reason: &str, message: &str| {
            CallError::api("dry run", "StatefulSet default/web", code, reason, message)
        };
        let forbidden = "statefulsets.apps \"web\" is forbidden: User \"system:serviceaccount:apps:deployer\" cannot patch resource \"statefulsets\" in API group \"apps\" in the namespace \"default\"";
        let cases = [
            (api(401, "Unauthorized", "Unauthorized"), "credentials"),
            (
                api(403, "Forbidden", forbidden),
                "\"patch\" on \"statefulsets\"",
            ),
            (
                api(404, "NotFound", "namespaces \"default\" not found"),
                "namespace default",
            ),
        ];
        for (error, names) in cases {
            let code = error.code();
            match classify("default", "web", error) {
                Verdict::Denied { message, cause } => {
                    assert!(message.contains(names), "{code:?}: {message}");
                    assert_eq!(cause.code(), code);
                }
                other => panic!("{code:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn refusals_quote_the_server() {
        let Verdict::Refused(r) = classify(
            "default",
            "web",
            fixture_error("error-statefulset-update-forbidden.json"),
        ) else {
            panic!("not refused")
        };
        assert!(
            r.message
                .contains("'replicas', 'ordinals', 'template', 'updateStrategy'"),
            "{}",
            r.message
        );
        let Verdict::Refused(r) = classify(
            "default",
            "web",
            fixture_error("error-statefulset-dryrun-invalid-other.json"),
        ) else {
            panic!("not refused")
        };
        assert!(
            r.message
                .contains("only allowed for updateStrategy 'RollingUpdate'"),
            "{}",
            r.message
        );
        assert_eq!((r.namespace.as_str(), r.name.as_str()), ("default", "web"));
    }

    /// The proof of an added template: the live templates, and for each added template the
    /// volume the controller gives the pods, so a mount of it validates (1.33+) while a mount
    /// of nothing is still the desired object's to answer for.
    #[test]
    fn an_added_template_is_proven_with_its_pod_volume() {
        let dir = format!("{}/tests/fixtures/v1.28", env!("CARGO_MANIFEST_DIR"));
        let read = |f: &str| -> StatefulSet {
            serde_saphyr::from_str(&std::fs::read_to_string(format!("{dir}/{f}")).unwrap()).unwrap()
        };
        let live = read("live-statefulset.yaml");
        let with = |templates: &[&str], volumes: &[&str], mounts: &[&str]| {
            let mut desired = read("desired-statefulset-1Gi.yaml");
            let spec = desired.spec.as_mut().unwrap();
            let first = spec.volume_claim_templates.as_ref().unwrap()[0].clone();
            for t in templates {
                let mut added = first.clone();
                added.metadata.name = Some((*t).to_string());
                spec.volume_claim_templates.as_mut().unwrap().push(added);
            }
            let pod = spec.template.spec.as_mut().unwrap();
            for v in volumes {
                pod.volumes.get_or_insert_with(Vec::new).push(Volume {
                    name: (*v).to_string(),
                    empty_dir: Some(Default::default()),
                    ..Default::default()
                });
            }
            for m in mounts {
                pod.containers[0]
                    .volume_mounts
                    .get_or_insert_with(Vec::new)
                    .push(k8s_openapi::api::core::v1::VolumeMount {
                        name: (*m).to_string(),
                        mount_path: format!("/{m}"),
                        ..Default::default()
                    });
            }
            desired
        };
        let volumes = |proof: &StatefulSet| -> Vec<(String, Option<String>)> {
            proof
                .spec
                .as_ref()
                .unwrap()
                .template
                .spec
                .as_ref()
                .unwrap()
                .volumes
                .iter()
                .flatten()
                .map(|v| {
                    (
                        v.name.clone(),
                        v.persistent_volume_claim
                            .as_ref()
                            .map(|c| c.claim_name.clone()),
                    )
                })
                .collect()
        };
        let name = live.metadata.name.clone().unwrap();
        // (what, templates added, pod volumes, mounts added, the proof's pod volumes)
        type Case<'a> = (
            &'a str,
            &'a [&'a str],
            &'a [&'a str],
            &'a [&'a str],
            Vec<(String, Option<String>)>,
        );
        let cases: &[Case] = &[
            ("nothing added", &[], &[], &[], vec![]),
            (
                "added and mounted",
                &["logs"],
                &[],
                &["logs"],
                vec![("logs".into(), Some(format!("logs-{name}-0")))],
            ),
            (
                "added, not mounted",
                &["cache"],
                &[],
                &[],
                vec![("cache".into(), Some(format!("cache-{name}-0")))],
            ),
            (
                "a pod volume of that name already: kept as declared",
                &["logs"],
                &["logs"],
                &["logs"],
                vec![("logs".into(), None)],
            ),
            (
                "a mount of nothing: no volume made up for it",
                &[],
                &[],
                &["ghost"],
                vec![],
            ),
        ];
        for (what, templates, pod_volumes, mounts, want) in cases {
            let desired = with(templates, pod_volumes, mounts);
            let proof = proof_object(&desired, &live);
            assert_eq!(&volumes(&proof), want, "{what}");
            let names: Vec<_> = proof
                .spec
                .as_ref()
                .unwrap()
                .volume_claim_templates
                .iter()
                .flatten()
                .filter_map(|t| t.metadata.name.clone())
                .collect();
            let live_names: Vec<_> = live
                .spec
                .as_ref()
                .unwrap()
                .volume_claim_templates
                .iter()
                .flatten()
                .filter_map(|t| t.metadata.name.clone())
                .collect();
            assert_eq!(names, live_names, "{what}: the templates are the live ones");
            // The desired object itself is left as declared.
            assert_eq!(desired, with(templates, pod_volumes, mounts), "{what}");
        }
    }

    #[test]
    fn proof_puts_the_live_templates_back_without_server_output() {
        let dir = format!("{}/tests/fixtures/v1.28", env!("CARGO_MANIFEST_DIR"));
        let read = |f: &str| -> StatefulSet {
            serde_saphyr::from_str(&std::fs::read_to_string(format!("{dir}/{f}")).unwrap()).unwrap()
        };
        let desired = read("desired-statefulset-2Gi.yaml");
        let live = read("live-statefulset.yaml");
        let proof = proof_object(&desired, &live);
        let templates = proof
            .spec
            .as_ref()
            .unwrap()
            .volume_claim_templates
            .as_ref()
            .unwrap();
        assert_eq!(templates.len(), 1);
        let t = &templates[0];
        assert!(t.status.is_none() && t.metadata.creation_timestamp.is_none());
        let storage = &t
            .spec
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"];
        assert_eq!(storage.0, "1Gi");
        // The other carried fields are the live object's, whatever the desired one says.
        let (proof_spec, live_spec) = (proof.spec.as_ref().unwrap(), live.spec.as_ref().unwrap());
        assert_eq!(
            (
                &proof_spec.pod_management_policy,
                proof_spec.revision_history_limit
            ),
            (
                &live_spec.pod_management_policy,
                live_spec.revision_history_limit
            )
        );
        let mut changed = desired.clone();
        let spec = changed.spec.as_mut().unwrap();
        spec.pod_management_policy = Some("OrderedReady".into());
        spec.revision_history_limit = Some(3);
        assert_eq!(proof_object(&changed, &live), proof);
        // Everything else is the desired object's.
        let mut back = proof.clone();
        let back_spec = back.spec.as_mut().unwrap();
        let desired_spec = desired.spec.as_ref().unwrap();
        back_spec.volume_claim_templates = desired_spec.volume_claim_templates.clone();
        back_spec.pod_management_policy = desired_spec.pod_management_policy.clone();
        back_spec.revision_history_limit = desired_spec.revision_history_limit;
        assert_eq!(back, desired);
        assert!(proof.metadata.uid.is_none());
    }
}
