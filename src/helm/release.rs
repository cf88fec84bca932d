//! Helm's release records: the Secrets `sh.helm.release.v1.<release>.v<version>` Helm's storage
//! driver writes, one per revision, and what the converger reads from them.
//!
//! The record is the release Helm tried to apply, post-rendered manifest included, written
//! before Helm applies anything: so the StatefulSets of a failed upgrade can be read from it
//! without running Helm. It is read, never written: helm-controller keeps a digest of each
//! record in `status.history`, and an edited record makes the release "Unmanaged".
//!
//! The layers, as Helm's `pkg/storage/driver/util.go` has them: `encodeRelease` is
//! `json.Marshal` → gzip (`BestCompression`) → `base64.StdEncoding`, stored as the bytes of
//! `data.release` (so over the raw API, where `data` values are base64 of bytes, it is base64
//! twice; k8s-openapi undoes the outer one). `decodeRelease` undoes the base64, gunzips only when
//! the bytes start with the gzip magic (`len(b) > 3 && b[0:3] == 1f 8b 08`; records stored before
//! compression was introduced are plain JSON) and unmarshals the JSON. Here the gunzip reads
//! through a capped reader: a record that inflates past the cap is refused, never inflated.

use std::collections::BTreeMap;
use std::io::Read;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::base64;

/// The `type` Helm gives its release Secrets (`newSecretsObject`).
pub const SECRET_TYPE: &str = "helm.sh/release.v1";
/// The prefix of a release Secret's name (`storage.HelmStorageType`).
pub const STORAGE_TYPE: &str = "sh.helm.release.v1";
/// The key of the record in the Secret's `data`.
pub const DATA_KEY: &str = "release";
/// The label every release Secret carries (`owner: helm`) and Helm's own queries select on.
pub const OWNER_LABEL: (&str, &str) = ("owner", "helm");
/// The label that names the release; Helm's `Query` selects `owner=helm,name=<release>`.
pub const NAME_LABEL: &str = "name";
/// The default cap on a decoded record: the one artifacts are unpacked under
/// (`--max-unpacked-size`), since a record is as much a tenant's input as an artifact.
pub const DEFAULT_MAX_DECODED_BYTES: u64 = crate::model::limits::DEFAULT_MAX_UNPACKED_BYTES;

const GZIP_MAGIC: [u8; 3] = [0x1f, 0x8b, 0x08];

/// `sh.helm.release.v1.<release>.v<version>` (`storage.makeKey`).
pub fn secret_name(release: &str, version: i64) -> String {
    format!("{STORAGE_TYPE}.{release}.v{version}")
}

/// The release name and version a Secret's name says, when it has the form of a release record.
pub fn parse_secret_name(name: &str) -> Option<(&str, i64)> {
    let rest = name.strip_prefix(STORAGE_TYPE)?.strip_prefix('.')?;
    let (release, version) = rest.rsplit_once(".v")?;
    if release.is_empty() || version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((release, version.parse().ok()?))
}

/// A release's status (Helm's `pkg/release/common/status.go`); a value this code does not know
/// is kept as it was written.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Status {
    #[default]
    Unknown,
    Deployed,
    Uninstalled,
    Superseded,
    Failed,
    Uninstalling,
    PendingInstall,
    PendingUpgrade,
    PendingRollback,
    Other(String),
}

impl Status {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Unknown => "unknown",
            Self::Deployed => "deployed",
            Self::Uninstalled => "uninstalled",
            Self::Superseded => "superseded",
            Self::Failed => "failed",
            Self::Uninstalling => "uninstalling",
            Self::PendingInstall => "pending-install",
            Self::PendingUpgrade => "pending-upgrade",
            Self::PendingRollback => "pending-rollback",
            Self::Other(s) => s,
        }
    }

    /// A transition under way rather than a state (Helm's `Status.IsPending`): another Helm
    /// action holds the release.
    pub fn is_pending(&self) -> bool {
        matches!(
            self,
            Self::PendingInstall | Self::PendingUpgrade | Self::PendingRollback
        )
    }
}

impl From<String> for Status {
    fn from(s: String) -> Self {
        match s.as_str() {
            "unknown" => Self::Unknown,
            "deployed" => Self::Deployed,
            "uninstalled" => Self::Uninstalled,
            "superseded" => Self::Superseded,
            "failed" => Self::Failed,
            "uninstalling" => Self::Uninstalling,
            "pending-install" => Self::PendingInstall,
            "pending-upgrade" => Self::PendingUpgrade,
            "pending-rollback" => Self::PendingRollback,
            _ => Self::Other(s),
        }
    }
}

impl From<Status> for String {
    fn from(s: Status) -> Self {
        s.as_str().to_owned()
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A release record (Helm's `pkg/release/v1.Release`), fields in Go's order so the encoder
/// writes the JSON as `json.Marshal` does. What the converger does not read (the chart, the
/// values, the hooks) is kept as JSON, so a record round-trips.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReleaseRecord {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<Info>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<Chart>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// The rendered (and post-rendered) manifest: `---` documents.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub manifest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Value>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: i64,
    /// The release namespace (where its objects go), not the storage namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// `"ssa"` or `"csa"`; empty means client-side apply (Helm v4's `ApplyMethod`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub apply_method: String,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// `Release.Info`. Times are kept as their RFC 3339 text.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Info {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_deployed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_deployed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<String>,
    /// What the last action said, e.g. `Upgrade "web" failed: ...` (Helm's `failRelease`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default)]
    pub status: Status,
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

/// `Release.Chart`: only `metadata` is read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Chart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ChartMetadata>,
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChartMetadata {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

/// The action that made a record, as far as the record tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Install,
    Upgrade,
    Rollback,
}

/// What the "when to act" decision reads from the newest record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseInfo {
    pub name: String,
    pub namespace: String,
    pub version: i64,
    pub status: Status,
    pub description: String,
    pub apply_method: String,
    pub chart_name: String,
    pub chart_version: String,
}

impl ReleaseInfo {
    /// The action, from the description Helm's actions write: `Upgrade "<name>" failed: ...`
    /// (upgrade's `failRelease`), `Upgrade complete`, `Rollback to N`, `Rollback "<name>" failed`,
    /// `Install complete`, `Initial install underway`, `Release "<name>" failed: ...` (install).
    /// `None` when the text is none of these (a custom `--description`).
    pub fn action(&self) -> Option<Action> {
        let d = self.description.as_str();
        let quoted = |verb: &str| d.starts_with(&format!("{verb} {:?} failed", self.name));
        if quoted("Upgrade") || d == "Upgrade complete" || d == "Preparing upgrade" {
            Some(Action::Upgrade)
        } else if quoted("Rollback") || d.starts_with("Rollback to ") {
            Some(Action::Rollback)
        } else if d == "Install complete" || d == "Initial install underway" || quoted("Release") {
            Some(Action::Install)
        } else {
            None
        }
    }
}

impl ReleaseRecord {
    pub fn status(&self) -> Status {
        self.info
            .as_ref()
            .map(|i| i.status.clone())
            .unwrap_or_default()
    }

    pub fn summary(&self) -> ReleaseInfo {
        let metadata = self.chart.as_ref().and_then(|c| c.metadata.as_ref());
        ReleaseInfo {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            version: self.version,
            status: self.status(),
            description: self
                .info
                .as_ref()
                .map(|i| i.description.clone())
                .unwrap_or_default(),
            apply_method: self.apply_method.clone(),
            chart_name: metadata.map(|m| m.name.clone()).unwrap_or_default(),
            chart_version: metadata.map(|m| m.version.clone()).unwrap_or_default(),
        }
    }
}

/// Why a release Secret could not be read. Every message names the Secret; "malformed" (the
/// bytes are not a record) and "oversized" (a record bigger than the cap, or a gzip bomb) are
/// told apart, and neither echoes the record (it holds the release's values).
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("Secret {secret}: not a Helm release record: {reason}")]
    NotARecord { secret: String, reason: String },
    #[error("Secret {secret}: malformed Helm release record: {reason}")]
    Malformed { secret: String, reason: String },
    #[error(
        "Secret {secret}: oversized Helm release record: data.release decodes to more than {limit} bytes (decompression bomb?): refused (--max-unpacked-size)"
    )]
    Oversized { secret: String, limit: u64 },
    #[error(
        "Secret {secret}: the record inside is release {name:?} version {version}, which is stored as {expected:?}: not the record its name says"
    )]
    NameMismatch {
        secret: String,
        name: String,
        version: i64,
        expected: String,
    },
}

impl ReleaseError {
    /// Every one of these is the input's fault: reading the same Secret again gives the same.
    pub fn is_bad_input(&self) -> bool {
        true
    }
}

/// `namespace/name` of a Secret, for messages.
pub fn describe_secret(secret: &Secret) -> String {
    let name = secret.metadata.name.as_deref().unwrap_or("(no name)");
    match secret.metadata.namespace.as_deref() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// Reads the record of a release Secret: checks its type, its `owner=helm` label and that the
/// record is the one its name says; decodes at most `max_decoded_bytes` of JSON.
pub fn decode_secret(
    secret: &Secret,
    max_decoded_bytes: u64,
) -> Result<ReleaseRecord, ReleaseError> {
    let shown = describe_secret(secret);
    let not_a_record = |reason: String| ReleaseError::NotARecord {
        secret: shown.clone(),
        reason,
    };
    let kind = secret.type_.as_deref().unwrap_or("");
    if kind != SECRET_TYPE {
        return Err(not_a_record(format!(
            "type is {kind:?}, expected {SECRET_TYPE:?}"
        )));
    }
    let owner = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(OWNER_LABEL.0));
    if owner.map(String::as_str) != Some(OWNER_LABEL.1) {
        return Err(not_a_record(format!(
            "label {}={} missing (found {owner:?})",
            OWNER_LABEL.0, OWNER_LABEL.1
        )));
    }
    let name = secret.metadata.name.as_deref().unwrap_or("");
    if parse_secret_name(name).is_none() {
        return Err(not_a_record(format!(
            "its name {name:?} is not {STORAGE_TYPE}.<release>.v<version>"
        )));
    }
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(DATA_KEY))
        .ok_or_else(|| not_a_record(format!("no data.{DATA_KEY}")))?;
    let record = decode_release(&shown, &data.0, max_decoded_bytes)?;
    let expected = secret_name(&record.name, record.version);
    if expected != name {
        return Err(ReleaseError::NameMismatch {
            secret: shown,
            name: record.name,
            version: record.version,
            expected,
        });
    }
    Ok(record)
}

/// Helm's `decodeRelease` over the value Helm stored (its base64 text), with the decoded JSON
/// capped at `max_decoded_bytes`. `secret` names the Secret in errors.
pub fn decode_release(
    secret: &str,
    stored: &[u8],
    max_decoded_bytes: u64,
) -> Result<ReleaseRecord, ReleaseError> {
    let malformed = |reason: String| ReleaseError::Malformed {
        secret: secret.to_owned(),
        reason,
    };
    let oversized = || ReleaseError::Oversized {
        secret: secret.to_owned(),
        limit: max_decoded_bytes,
    };
    let bytes = base64::decode(stored)
        .map_err(|e| malformed(format!("data.{DATA_KEY} is not base64: {e}")))?;
    let json = if bytes.len() > 3 && bytes[..3] == GZIP_MAGIC {
        // Go's gzip.Reader reads concatenated members, as MultiGzDecoder does.
        let mut inflated = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes.as_slice())
            .take(max_decoded_bytes.saturating_add(1))
            .read_to_end(&mut inflated)
            .map_err(|e| malformed(format!("data.{DATA_KEY} is not valid gzip: {e}")))?;
        if inflated.len() as u64 > max_decoded_bytes {
            return Err(oversized());
        }
        inflated
    } else {
        if bytes.len() as u64 > max_decoded_bytes {
            return Err(oversized());
        }
        bytes
    };
    serde_json::from_slice(&json)
        .map_err(|e| malformed(format!("data.{DATA_KEY} is not a release in JSON: {e}")))
}

/// Helm's `encodeRelease`: JSON, gzip at best compression, standard base64. For tests and
/// fixtures: the converger itself never writes a record.
pub fn encode_release(record: &ReleaseRecord) -> Result<String, serde_json::Error> {
    use std::io::Write as _;
    let json = serde_json::to_vec(record)?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&json).map_err(serde_json::Error::io)?;
    let compressed = gz.finish().map_err(serde_json::Error::io)?;
    Ok(base64::encode(&compressed))
}

/// The Secret Helm's `newSecretsObject` makes for `record` in `storage_namespace`, with
/// `time_label` (`createdAt` on create, `modifiedAt` on update, Unix seconds). For tests and
/// fixtures.
pub fn encode_secret(
    record: &ReleaseRecord,
    storage_namespace: &str,
    time_label: (&str, i64),
) -> Result<Secret, serde_json::Error> {
    let stored = encode_release(record)?;
    let labels = BTreeMap::from([
        (time_label.0.to_owned(), time_label.1.to_string()),
        (NAME_LABEL.to_owned(), record.name.clone()),
        (OWNER_LABEL.0.to_owned(), OWNER_LABEL.1.to_owned()),
        ("status".to_owned(), record.status().to_string()),
        ("version".to_owned(), record.version.to_string()),
    ]);
    Ok(Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(secret_name(&record.name, record.version)),
            namespace: Some(storage_namespace.to_owned()),
            labels: Some(labels),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.to_owned()),
        data: Some(BTreeMap::from([(
            DATA_KEY.to_owned(),
            ByteString(stored.into_bytes()),
        )])),
        ..Default::default()
    })
}

/// The newest record among `secrets`: the highest version their names say, of release
/// `release` when given. Only the names are read; the one returned is decoded by the caller.
pub fn newest<'a>(secrets: &'a [Secret], release: Option<&str>) -> Option<&'a Secret> {
    secrets
        .iter()
        .filter_map(|s| {
            let (name, version) = parse_secret_name(s.metadata.name.as_deref()?)?;
            (release.is_none_or(|r| r == name)).then_some((version, s))
        })
        .max_by_key(|(version, _)| *version)
        .map(|(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: i64, status: Status, description: &str) -> ReleaseRecord {
        ReleaseRecord {
            name: "web".into(),
            info: Some(Info {
                first_deployed: Some("2026-12-01T10:00:00Z".into()),
                last_deployed: Some("2026-12-01T10:05:00Z".into()),
                description: description.into(),
                status,
                ..Default::default()
            }),
            chart: Some(Chart {
                metadata: Some(ChartMetadata {
                    name: "web".into(),
                    version: "0.2.0".into(),
                    rest: BTreeMap::from([("apiVersion".into(), "v2".into())]),
                }),
                rest: BTreeMap::from([("values".into(), serde_json::json!({"size": "2Gi"}))]),
            }),
            config: Some(serde_json::json!({})),
            manifest: "---\n# Source: web/templates/sts.yaml\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: web\n".into(),
            hooks: None,
            version,
            namespace: "demo".into(),
            apply_method: "ssa".into(),
        }
    }

    fn secret_of(record: &ReleaseRecord) -> Secret {
        encode_secret(record, "demo", ("modifiedAt", 1764583500)).unwrap()
    }

    #[test]
    fn a_record_round_trips_through_the_encoder_by_table() {
        for r in [
            record(1, Status::Deployed, "Install complete"),
            record(2, Status::Failed, "Upgrade \"web\" failed: boom"),
            record(3, Status::PendingUpgrade, "Preparing upgrade"),
            record(4, Status::Other("from-the-future".into()), ""),
        ] {
            let secret = secret_of(&r);
            assert_eq!(
                secret.metadata.name.as_deref(),
                Some(format!("sh.helm.release.v1.web.v{}", r.version).as_str())
            );
            let back = decode_secret(&secret, DEFAULT_MAX_DECODED_BYTES).unwrap();
            assert_eq!(back, r);
            // The layers are Helm's: base64 of gzip (magic first) of JSON.
            let stored = &secret.data.as_ref().unwrap()["release"].0;
            let gz = base64::decode(stored).unwrap();
            assert_eq!(gz[..3], GZIP_MAGIC);
            // Through the raw API the bytes are base64 once more, which k8s-openapi undoes.
            let raw = serde_json::to_value(&secret).unwrap();
            assert_eq!(
                raw["data"]["release"].as_str().unwrap(),
                base64::encode(stored)
            );
            let parsed: Secret = serde_json::from_value(raw).unwrap();
            assert_eq!(decode_secret(&parsed, 1 << 20).unwrap(), r);
        }
    }

    #[test]
    fn json_keys_are_helms() {
        let json = serde_json::to_value(record(2, Status::Failed, "x")).unwrap();
        let keys: Vec<_> = json.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "apply_method",
                "chart",
                "config",
                "info",
                "manifest",
                "name",
                "namespace",
                "version"
            ]
        );
        assert_eq!(json["info"]["status"], "failed");
        assert_eq!(json["info"]["first_deployed"], "2026-12-01T10:00:00Z");
    }

    #[test]
    fn a_record_stored_before_compression_is_read_as_plain_json() {
        let r = record(1, Status::Deployed, "Install complete");
        let stored = base64::encode(&serde_json::to_vec(&r).unwrap());
        assert_eq!(decode_release("s", stored.as_bytes(), 1 << 20).unwrap(), r);
        // Three bytes or fewer are never taken for gzip (Go's `len(b) > 3`).
        let err = decode_release("s", base64::encode(&GZIP_MAGIC).as_bytes(), 1 << 20).unwrap_err();
        assert!(
            err.to_string().contains("is not a release in JSON"),
            "{err}"
        );
    }

    /// A change to a good release Secret, and the refusal it gives.
    type BadCase = (Box<dyn Fn(&mut Secret)>, &'static str);

    #[test]
    fn bad_secrets_are_refused_naming_the_secret_and_what_is_wrong() {
        let good = secret_of(&record(2, Status::Failed, "x"));
        let cases: Vec<BadCase> = vec![
            (
                Box::new(|s| s.type_ = Some("Opaque".into())),
                "Secret demo/sh.helm.release.v1.web.v2: not a Helm release record: type is \"Opaque\", expected \"helm.sh/release.v1\"",
            ),
            (
                Box::new(|s| {
                    s.metadata.labels.as_mut().unwrap().remove("owner");
                }),
                "Secret demo/sh.helm.release.v1.web.v2: not a Helm release record: label owner=helm missing (found None)",
            ),
            (
                Box::new(|s| s.data = None),
                "Secret demo/sh.helm.release.v1.web.v2: not a Helm release record: no data.release",
            ),
            (
                Box::new(|s| s.metadata.name = Some("web".into())),
                "Secret demo/web: not a Helm release record: its name \"web\" is not sh.helm.release.v1.<release>.v<version>",
            ),
            (
                Box::new(|s| s.metadata.name = Some("sh.helm.release.v1.web.v3".into())),
                "Secret demo/sh.helm.release.v1.web.v3: the record inside is release \"web\" version 2, which is stored as \"sh.helm.release.v1.web.v2\": not the record its name says",
            ),
            (
                Box::new(|s| {
                    s.data
                        .as_mut()
                        .unwrap()
                        .insert("release".into(), ByteString(b"H4sI*".to_vec()));
                }),
                "Secret demo/sh.helm.release.v1.web.v2: malformed Helm release record: data.release is not base64: illegal base64 data at input byte 4",
            ),
            (
                Box::new(|s| {
                    let bytes = base64::encode(b"\x1f\x8b\x08\x00garbage");
                    s.data
                        .as_mut()
                        .unwrap()
                        .insert("release".into(), ByteString(bytes.into_bytes()));
                }),
                "Secret demo/sh.helm.release.v1.web.v2: malformed Helm release record: data.release is not valid gzip: ",
            ),
            (
                Box::new(|s| {
                    let bytes = base64::encode(b"{\"name\": 3}");
                    s.data
                        .as_mut()
                        .unwrap()
                        .insert("release".into(), ByteString(bytes.into_bytes()));
                }),
                "Secret demo/sh.helm.release.v1.web.v2: malformed Helm release record: data.release is not a release in JSON: invalid type",
            ),
        ];
        for (spoil, expected) in cases {
            let mut secret = good.clone();
            spoil(&mut secret);
            let err = decode_secret(&secret, DEFAULT_MAX_DECODED_BYTES).unwrap_err();
            assert!(
                err.to_string().starts_with(expected),
                "{err}\nexpected: {expected}"
            );
            assert!(err.is_bad_input());
        }
    }

    #[test]
    fn a_gzip_bomb_is_refused_as_oversized_without_inflating_it() {
        use std::io::Write as _;
        // 64 MiB of zeros inflate from some 64 KiB; the cap is 1 MiB.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            gz.write_all(&zeros).unwrap();
        }
        let stored = base64::encode(&gz.finish().unwrap());
        let err = decode_release("demo/sh.helm.release.v1.web.v2", stored.as_bytes(), 1 << 20)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Secret demo/sh.helm.release.v1.web.v2: oversized Helm release record: data.release decodes to more than 1048576 bytes (decompression bomb?): refused (--max-unpacked-size)"
        );
        // A record exactly at the cap is read; one byte over is not.
        let r = record(2, Status::Failed, "x");
        let len = serde_json::to_vec(&r).unwrap().len() as u64;
        let stored = encode_release(&r).unwrap();
        assert!(decode_release("s", stored.as_bytes(), len).is_ok());
        assert!(matches!(
            decode_release("s", stored.as_bytes(), len - 1),
            Err(ReleaseError::Oversized { .. })
        ));
    }

    #[test]
    fn secret_names_by_table() {
        for (name, expected) in [
            ("sh.helm.release.v1.web.v2", Some(("web", 2))),
            ("sh.helm.release.v1.my.app.v10", Some(("my.app", 10))),
            ("sh.helm.release.v1.a.v1.v3", Some(("a.v1", 3))),
            ("sh.helm.release.v1.web.v", None),
            ("sh.helm.release.v1..v1", None),
            ("sh.helm.release.v1.web.v-1", None),
            ("sh.helm.release.v2.web.v1", None),
            ("web", None),
        ] {
            assert_eq!(parse_secret_name(name), expected, "{name}");
        }
        assert_eq!(secret_name("web", 2), "sh.helm.release.v1.web.v2");
    }

    #[test]
    fn the_newest_record_is_the_highest_version_not_the_last_listed() {
        let secrets: Vec<Secret> = [10, 9, 2]
            .iter()
            .map(|v| secret_of(&record(*v, Status::Superseded, "")))
            .chain([secret_of(&ReleaseRecord {
                name: "other".into(),
                version: 11,
                ..Default::default()
            })])
            .collect();
        let name = |s: Option<&Secret>| s.and_then(|s| s.metadata.name.clone());
        assert_eq!(
            name(newest(&secrets, Some("web"))).as_deref(),
            Some("sh.helm.release.v1.web.v10")
        );
        assert_eq!(
            name(newest(&secrets, None)).as_deref(),
            Some("sh.helm.release.v1.other.v11")
        );
        assert_eq!(newest(&secrets, Some("none")), None);
    }

    #[test]
    fn the_action_is_read_from_helms_descriptions() {
        let info = |d: &str| ReleaseInfo {
            name: "web".into(),
            namespace: "demo".into(),
            version: 2,
            status: Status::Failed,
            description: d.into(),
            apply_method: String::new(),
            chart_name: String::new(),
            chart_version: String::new(),
        };
        for (description, expected) in [
            (
                "Upgrade \"web\" failed: cannot patch \"web\" with kind StatefulSet: ...",
                Some(Action::Upgrade),
            ),
            ("Upgrade complete", Some(Action::Upgrade)),
            ("Preparing upgrade", Some(Action::Upgrade)),
            ("Rollback to 1", Some(Action::Rollback)),
            ("Rollback \"web\" failed: x", Some(Action::Rollback)),
            ("Release \"web\" failed: x", Some(Action::Install)),
            ("Install complete", Some(Action::Install)),
            ("Upgrade \"other\" failed: x", None),
            ("my own words", None),
        ] {
            assert_eq!(info(description).action(), expected, "{description}");
        }
    }
}
