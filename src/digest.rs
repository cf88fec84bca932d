//! Content digests, `<algorithm>:<hex>`: what Flux publishes for an artifact and what the blob
//! store names its files by.
//!
//! A leaf (it imports nothing of the crate) because both sides of the artifact cache need it:
//! `flux::artifact` checks a download against it, `storage` keys and re-checks its blobs by it,
//! and neither may import the other for it.

use sha2::Digest as _;

/// A digest algorithm Flux may publish.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Sha256,
    Sha384,
    Sha512,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sha256 => "sha256",
            Self::Sha384 => "sha384",
            Self::Sha512 => "sha512",
        }
    }

    fn hex_len(self) -> usize {
        match self {
            Self::Sha256 => 64,
            Self::Sha384 => 96,
            Self::Sha512 => 128,
        }
    }
}

/// Why a digest text cannot be used. The message is the one the artifact errors have always
/// shown (`ArtifactError::BadDigest` carries the same fields), so users see no change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid artifact digest {digest:?}: {reason}")]
pub struct DigestError {
    /// The text as given.
    pub digest: String,
    pub reason: String,
}

/// An expected artifact digest, `<algorithm>:<hex>` (bare hex means sha256, as Flux's old format).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    pub algorithm: Algorithm,
    /// Lowercase hex.
    pub hex: String,
}

impl Digest {
    pub fn parse(text: &str) -> Result<Self, DigestError> {
        let bad = |reason: &str| DigestError {
            digest: text.to_string(),
            reason: reason.to_string(),
        };
        let (algorithm, hex) = match text.split_once(':') {
            None => (Algorithm::Sha256, text),
            Some(("sha256", h)) => (Algorithm::Sha256, h),
            Some(("sha384", h)) => (Algorithm::Sha384, h),
            Some(("sha512", h)) => (Algorithm::Sha512, h),
            Some((other, _)) => {
                return Err(bad(&format!(
                    "unsupported algorithm {other:?} (expected sha256, sha384 or sha512)"
                )));
            }
        };
        let hex = hex.to_ascii_lowercase();
        if hex.len() != algorithm.hex_len() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad(&format!(
                "expected {} hex digits for {}",
                algorithm.hex_len(),
                algorithm.as_str()
            )));
        }
        Ok(Self { algorithm, hex })
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.algorithm.as_str(), self.hex)
    }
}

/// A running hash of one of the supported algorithms (also the storage's re-check of a blob).
pub enum Hasher {
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
}

impl Hasher {
    pub fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::Sha256 => Self::Sha256(sha2::Sha256::new()),
            Algorithm::Sha384 => Self::Sha384(sha2::Sha384::new()),
            Algorithm::Sha512 => Self::Sha512(sha2::Sha512::new()),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Self::Sha256(h) => h.update(data),
            Self::Sha384(h) => h.update(data),
            Self::Sha512(h) => h.update(data),
        }
    }

    /// The lowercase hex of the digest.
    pub fn finish(self) -> String {
        match self {
            Self::Sha256(h) => hex::encode(h.finalize()),
            Self::Sha384(h) => hex::encode(h.finalize()),
            Self::Sha512(h) => hex::encode(h.finalize()),
        }
    }
}

/// Computes the digest of `data` with `algorithm` (for tests and offline artifacts).
pub fn digest_of(algorithm: Algorithm, data: &[u8]) -> Digest {
    let mut h = Hasher::new(algorithm);
    h.update(data);
    Digest {
        algorithm,
        hex: h.finish(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_by_table() {
        let h64 = "a".repeat(64);
        let h96 = "B".repeat(96);
        let h128 = "c".repeat(128);
        let ok = [
            (h64.clone(), Algorithm::Sha256, h64.clone()),
            (format!("sha256:{h64}"), Algorithm::Sha256, h64.clone()),
            (
                format!("sha384:{h96}"),
                Algorithm::Sha384,
                h96.to_lowercase(),
            ),
            (format!("sha512:{h128}"), Algorithm::Sha512, h128.clone()),
        ];
        for (text, algorithm, hex) in ok {
            assert_eq!(
                Digest::parse(&text).unwrap(),
                Digest { algorithm, hex },
                "{text}"
            );
        }
        for bad in [
            format!("md5:{h64}"),
            format!("sha1:{}", "a".repeat(40)),
            format!("sha256:{h96}"),
            "sha256:zz".to_string(),
            String::new(),
            format!("sha512:{h64}"),
        ] {
            let error = Digest::parse(&bad).unwrap_err();
            assert_eq!(error.digest, bad);
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("invalid artifact digest {bad:?}: ")),
                "{error}"
            );
        }
    }

    #[test]
    fn digest_of_known_value() {
        assert_eq!(
            digest_of(Algorithm::Sha256, b"").hex,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
