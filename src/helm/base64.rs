//! Base64 as Go's `encoding/base64.StdEncoding` reads and writes it, the encoding Helm's storage
//! driver uses for `data.release` (`var b64 = base64.StdEncoding` in Helm's
//! `pkg/storage/driver/util.go`), on the `base64` crate's engine configured to match: the
//! standard alphabet, `=` padding required, non-zero trailing bits accepted (Go's encodings are
//! not strict by default), and `\r` and `\n` skipped anywhere, as Go's decoder skips them.

use base64::Engine as _;
use base64::alphabet::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// Go's `StdEncoding`, decoding as leniently as `DecodeString` does.
const GO_STD: GeneralPurpose = GeneralPurpose::new(
    &STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
        .with_decode_allow_trailing_bits(true),
);

/// Why the text is not base64, naming the input byte (newlines counted) where that is known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Base64Error(String);

/// Standard base64 with padding, as Go's `StdEncoding.EncodeToString` writes it.
pub fn encode(bytes: &[u8]) -> String {
    GO_STD.encode(bytes)
}

/// Decodes standard padded base64 as Go's `StdEncoding.DecodeString` does.
pub fn decode(input: &[u8]) -> Result<Vec<u8>, Base64Error> {
    if !input.iter().any(|b| matches!(b, b'\r' | b'\n')) {
        return GO_STD.decode(input).map_err(|e| error(e, |i| i));
    }
    // Where each kept byte was in the input, so an error names the byte an operator sees.
    let (kept, offsets): (Vec<u8>, Vec<usize>) = input
        .iter()
        .enumerate()
        .filter(|(_, b)| !matches!(b, b'\r' | b'\n'))
        .map(|(i, &b)| (b, i))
        .unzip();
    GO_STD
        .decode(&kept)
        .map_err(|e| error(e, |i| offsets.get(i).copied().unwrap_or(input.len())))
}

fn error(e: base64::DecodeError, at: impl Fn(usize) -> usize) -> Base64Error {
    use base64::DecodeError::*;
    Base64Error(match e {
        InvalidByte(i, b) | InvalidLastSymbol(i, b) => {
            format!(
                "illegal base64 data at input byte {} ({:?})",
                at(i),
                char::from(b)
            )
        }
        InvalidLength(n) => {
            format!("illegal base64 data: {n} symbols is not a whole number of quanta")
        }
        InvalidPadding => "illegal base64 data: missing or misplaced = padding".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_go_std_encoding() {
        for (bytes, text) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"\x1f\x8b\x08\xff", "H4sI/w=="),
        ] {
            assert_eq!(encode(bytes), text);
            assert_eq!(decode(text.as_bytes()).as_deref(), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn decodes_what_go_decodes_and_refuses_the_rest() {
        for (text, expected) in [
            // Newlines anywhere are skipped, as Go's decoder does.
            ("Zm9v\nYg==", Ok(&b"foob"[..])),
            ("Zm\r\n9vYg=\n=", Ok(b"foob")),
            // Non-zero trailing bits are accepted (not a strict encoding).
            ("Zh==", Ok(b"f")),
            // Padding is required.
            ("Zm9vYg", Err("padding")),
            ("Zm9vY", Err("quanta")),
            ("Zm9vYg=", Err("padding")),
            // Outside the alphabet, URL-safe symbols included; the byte is named.
            ("Zm9v-A==", Err("input byte 4 ('-')")),
            ("Zm9v\n YQ==", Err("input byte 5 (' ')")),
            // Nothing after the padding.
            ("Zg==Zg==", Err("input byte 2")),
        ] {
            match (decode(text.as_bytes()), expected) {
                (Ok(bytes), Ok(want)) => assert_eq!(bytes, want, "{text:?}"),
                (Err(e), Err(want)) => assert!(e.to_string().contains(want), "{text:?}: {e}"),
                (got, want) => panic!("{text:?}: {got:?}, expected {want:?}"),
            }
        }
    }
}
