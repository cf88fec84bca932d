//! The event notification-controller posts to a `generic` / `generic-hmac` Provider, and its
//! signature check. Pure: no I/O, so the webhook's parsing and authentication are table-tested.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The object an event is about (`involvedObject`, a core/v1 ObjectReference).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvolvedObject {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub resource_version: Option<String>,
}

/// fluxcd/pkg `runtime/events.Event`, as the webhook receives it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub involved_object: InvolvedObject,
    #[serde(default)]
    pub severity: String,
    #[serde(default)]
    pub timestamp: Option<String>,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub reason: String,
    /// API-group prefix already stripped by notification-controller (`revision`, ...).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub reporting_controller: String,
    #[serde(default)]
    pub reporting_instance: Option<String>,
}

/// The raw payload with `involvedObject` optional, so its absence is a precise 400 rather than
/// serde's generic "missing field".
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEvent {
    #[serde(default)]
    involved_object: Option<InvolvedObject>,
    #[serde(default)]
    severity: String,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    message: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    reporting_controller: String,
    #[serde(default)]
    reporting_instance: Option<String>,
}

/// Why a webhook body is not an event the service can act on (the webhook answers 400).
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("the body is not a JSON event: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the event has no involvedObject")]
    MissingInvolvedObject,
    #[error("the event's involvedObject has no {0}")]
    IncompleteInvolvedObject(&'static str),
}

impl Event {
    /// Parses notification-controller's payload. An event must name its object (kind and
    /// name): without them there is nothing to map to a Kustomization.
    pub fn parse(body: &[u8]) -> Result<Event, EventError> {
        // An object first: serde would otherwise read a JSON array positionally as the struct.
        let object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body)?;
        let raw = RawEvent::deserialize(serde_json::Value::Object(object))?;
        let involved_object = raw
            .involved_object
            .ok_or(EventError::MissingInvolvedObject)?;
        if involved_object.kind.is_empty() {
            return Err(EventError::IncompleteInvolvedObject("kind"));
        }
        if involved_object.name.is_empty() {
            return Err(EventError::IncompleteInvolvedObject("name"));
        }
        Ok(Event {
            involved_object,
            severity: raw.severity,
            timestamp: raw.timestamp,
            message: raw.message,
            reason: raw.reason,
            metadata: raw.metadata.unwrap_or_default(),
            reporting_controller: raw.reporting_controller,
            reporting_instance: raw.reporting_instance,
        })
    }
}

/// The hash named in `X-Signature: <algorithm>=<hex>`. notification-controller's
/// `generic-hmac` provider signs with sha256; its receivers also accept sha1 and sha512, and
/// sha384 is the remaining SHA-2 size a relay in between may choose.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SignatureAlgorithm {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl SignatureAlgorithm {
    fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "sha1" => Some(SignatureAlgorithm::Sha1),
            "sha256" => Some(SignatureAlgorithm::Sha256),
            "sha384" => Some(SignatureAlgorithm::Sha384),
            "sha512" => Some(SignatureAlgorithm::Sha512),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SignatureAlgorithm::Sha1 => "sha1",
            SignatureAlgorithm::Sha256 => "sha256",
            SignatureAlgorithm::Sha384 => "sha384",
            SignatureAlgorithm::Sha512 => "sha512",
        }
    }
}

/// Why a signed webhook is refused (the webhook answers 401 and queues nothing).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the X-Signature header is missing")]
    Missing,
    #[error("the X-Signature header is not <algorithm>=<hex>")]
    Malformed,
    #[error("the X-Signature algorithm {0:?} is not one of sha1, sha256, sha384, sha512")]
    UnknownAlgorithm(String),
    #[error("the X-Signature does not match the body")]
    Mismatch,
}

/// A parsed `X-Signature` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    pub algorithm: SignatureAlgorithm,
    pub mac: Vec<u8>,
}

impl Signature {
    /// `sha256=<hex>` (hex in either case, as a relay may re-encode it).
    pub fn parse(header: &str) -> Result<Signature, SignatureError> {
        let (name, hex_mac) = header
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed)?;
        let algorithm = SignatureAlgorithm::parse(name)
            .ok_or_else(|| SignatureError::UnknownAlgorithm(name.to_string()))?;
        let mac = hex::decode(hex_mac).map_err(|_| SignatureError::Malformed)?;
        if mac.is_empty() {
            return Err(SignatureError::Malformed);
        }
        Ok(Signature { algorithm, mac })
    }

    /// Whether the MAC is the HMAC of `body` under `key`. The comparison is `hmac`'s
    /// constant-time `verify_slice`, so the time taken says nothing about how much matched.
    pub fn verify(&self, key: &[u8], body: &[u8]) -> Result<(), SignatureError> {
        use hmac::digest::KeyInit;
        use hmac::{Hmac, Mac};
        fn check<M: Mac + KeyInit>(
            key: &[u8],
            body: &[u8],
            mac: &[u8],
        ) -> Result<(), SignatureError> {
            let mut hmac =
                <M as KeyInit>::new_from_slice(key).map_err(|_| SignatureError::Mismatch)?;
            hmac.update(body);
            hmac.verify_slice(mac).map_err(|_| SignatureError::Mismatch)
        }
        match self.algorithm {
            SignatureAlgorithm::Sha1 => check::<Hmac<sha1::Sha1>>(key, body, &self.mac),
            SignatureAlgorithm::Sha256 => check::<Hmac<sha2::Sha256>>(key, body, &self.mac),
            SignatureAlgorithm::Sha384 => check::<Hmac<sha2::Sha384>>(key, body, &self.mac),
            SignatureAlgorithm::Sha512 => check::<Hmac<sha2::Sha512>>(key, body, &self.mac),
        }
    }
}

/// Checks an optional `X-Signature` header value against the raw body: what `generic-hmac`
/// requires of every delivery.
pub fn verify_signature(
    key: &[u8],
    body: &[u8],
    header: Option<&str>,
) -> Result<SignatureAlgorithm, SignatureError> {
    let signature = Signature::parse(header.ok_or(SignatureError::Missing)?)?;
    signature.verify(key, body)?;
    Ok(signature.algorithm)
}

/// `sha256=<hex>` of `body` under `key`, as notification-controller writes it; for tests and
/// for the stand-ins that play notification-controller.
pub fn sign(algorithm: SignatureAlgorithm, key: &[u8], body: &[u8]) -> String {
    use hmac::digest::KeyInit;
    use hmac::{Hmac, Mac};
    fn mac<M: Mac + KeyInit>(key: &[u8], body: &[u8]) -> Vec<u8> {
        // HMAC takes keys of any length, so this cannot fail.
        let Ok(mut hmac) = <M as KeyInit>::new_from_slice(key) else {
            return Vec::new();
        };
        hmac.update(body);
        hmac.finalize().into_bytes().to_vec()
    }
    let bytes = match algorithm {
        SignatureAlgorithm::Sha1 => mac::<Hmac<sha1::Sha1>>(key, body),
        SignatureAlgorithm::Sha256 => mac::<Hmac<sha2::Sha256>>(key, body),
        SignatureAlgorithm::Sha384 => mac::<Hmac<sha2::Sha384>>(key, body),
        SignatureAlgorithm::Sha512 => mac::<Hmac<sha2::Sha512>>(key, body),
    };
    format!("{}={}", algorithm.as_str(), hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"s3cret\n";
    const BODY: &[u8] =
        br#"{"involvedObject":{"kind":"GitRepository","namespace":"flux-system","name":"apps"}}"#;

    /// (case, X-Signature header, body, expected verdict)
    type SignatureCase<'a> = (
        &'a str,
        Option<&'a str>,
        &'a [u8],
        Result<SignatureAlgorithm, SignatureError>,
    );

    #[test]
    fn signature_table() {
        let algorithms = [
            SignatureAlgorithm::Sha1,
            SignatureAlgorithm::Sha256,
            SignatureAlgorithm::Sha384,
            SignatureAlgorithm::Sha512,
        ];
        for algorithm in algorithms {
            let good = sign(algorithm, KEY, BODY);
            let (name, hex_mac) = good.split_once('=').unwrap_or_default();
            let upper = format!("{}={}", name.to_uppercase(), hex_mac.to_uppercase());
            let trimmed_key = sign(algorithm, b"s3cret", BODY);
            let mut flipped = hex::decode(hex_mac).unwrap_or_default();
            flipped[0] ^= 1;
            let flipped = format!("{name}={}", hex::encode(&flipped));
            let short = format!("{name}={}", &hex_mac[..hex_mac.len() - 2]);
            let empty_mac = format!("{name}=");
            let not_hex = format!("{name}=zz");
            let md5 = format!("md5={hex_mac}");
            let cases: Vec<SignatureCase> = vec![
                ("good", Some(&good), BODY, Ok(algorithm)),
                ("upper case", Some(&upper), BODY, Ok(algorithm)),
                ("missing", None, BODY, Err(SignatureError::Missing)),
                ("empty", Some(""), BODY, Err(SignatureError::Malformed)),
                (
                    "no algorithm",
                    Some(hex_mac),
                    BODY,
                    Err(SignatureError::Malformed),
                ),
                (
                    "empty mac",
                    Some(&empty_mac),
                    BODY,
                    Err(SignatureError::Malformed),
                ),
                (
                    "not hex",
                    Some(&not_hex),
                    BODY,
                    Err(SignatureError::Malformed),
                ),
                (
                    "flipped bit",
                    Some(&flipped),
                    BODY,
                    Err(SignatureError::Mismatch),
                ),
                (
                    "truncated",
                    Some(&short),
                    BODY,
                    Err(SignatureError::Mismatch),
                ),
                (
                    "key trimmed by the sender",
                    Some(&trimmed_key),
                    BODY,
                    Err(SignatureError::Mismatch),
                ),
                (
                    "body changed",
                    Some(&good),
                    b"{}",
                    Err(SignatureError::Mismatch),
                ),
                (
                    "unknown algorithm",
                    Some(&md5),
                    BODY,
                    Err(SignatureError::UnknownAlgorithm("md5".into())),
                ),
            ];
            for (case, header, body, want) in cases {
                assert_eq!(
                    verify_signature(KEY, body, header),
                    want,
                    "{} {case}",
                    algorithm.as_str()
                );
            }
        }
    }

    #[test]
    fn signature_of_another_algorithm_does_not_verify() {
        let sha256 = sign(SignatureAlgorithm::Sha256, KEY, BODY);
        let relabelled = sha256.replacen("sha256", "sha512", 1);
        assert_eq!(
            verify_signature(KEY, BODY, Some(&relabelled)),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn known_vector_sha256() {
        // RFC 4231 test case 2.
        let got = sign(
            SignatureAlgorithm::Sha256,
            b"Jefe",
            b"what do ya want for nothing?",
        );
        assert_eq!(
            got,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn event_table() {
        // (case, body, Ok((kind, name)) or Err(words of the error))
        type EventCase<'a> = (&'a str, &'a [u8], Result<(&'a str, &'a str), &'a str>);
        let cases: Vec<EventCase> = vec![
            (
                "source-controller NewArtifact",
                br#"{"involvedObject":{"kind":"GitRepository","namespace":"flux-system","name":"apps","uid":"u","apiVersion":"source.toolkit.fluxcd.io/v1","resourceVersion":"7"},"severity":"info","timestamp":"2026-11-30T08:00:00Z","message":"stored artifact","reason":"NewArtifact","metadata":{"revision":"main@sha1:0123"},"reportingController":"source-controller","reportingInstance":"source-controller-1"}"#,
                Ok(("GitRepository", "apps")),
            ),
            (
                "no metadata",
                br#"{"involvedObject":{"kind":"Kustomization","namespace":"apps","name":"web"}}"#,
                Ok(("Kustomization", "web")),
            ),
            (
                "null metadata",
                br#"{"involvedObject":{"kind":"Kustomization","namespace":"apps","name":"web"},"metadata":null}"#,
                Ok(("Kustomization", "web")),
            ),
            ("not json", b"revision=main", Err("not a JSON event")),
            ("empty", b"", Err("not a JSON event")),
            ("array", b"[]", Err("not a JSON event")),
            ("no involvedObject", br#"{"reason":"NewArtifact"}"#, Err("no involvedObject")),
            ("null involvedObject", br#"{"involvedObject":null}"#, Err("no involvedObject")),
            (
                "no name",
                br#"{"involvedObject":{"kind":"GitRepository","namespace":"flux-system"}}"#,
                Err("has no name"),
            ),
            (
                "no kind",
                br#"{"involvedObject":{"name":"apps","namespace":"flux-system"}}"#,
                Err("has no kind"),
            ),
            (
                "metadata not strings",
                br#"{"involvedObject":{"kind":"GitRepository","name":"apps"},"metadata":{"n":1}}"#,
                Err("not a JSON event"),
            ),
        ];
        for (case, body, want) in cases {
            match (Event::parse(body), want) {
                (Ok(event), Ok((kind, name))) => {
                    assert_eq!(event.involved_object.kind, kind, "{case}");
                    assert_eq!(event.involved_object.name, name, "{case}");
                }
                (Err(err), Err(words)) => {
                    assert!(err.to_string().contains(words), "{case}: {err}")
                }
                (got, want) => panic!("{case}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn event_keeps_revision_metadata() {
        let event = Event::parse(
            br#"{"involvedObject":{"kind":"GitRepository","namespace":"flux-system","name":"apps"},"reason":"NewArtifact","metadata":{"revision":"main@sha1:abc"}}"#,
        )
        .expect("valid event");
        assert_eq!(
            event.metadata.get("revision").map(String::as_str),
            Some("main@sha1:abc")
        );
        assert_eq!(event.reason, "NewArtifact");
        assert_eq!(event.involved_object.namespace, "flux-system");
    }
}
