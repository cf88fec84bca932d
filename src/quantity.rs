//! Exact Kubernetes resource quantities.
//!
//! A grown volume is detected by comparing quantities, so the comparison must agree with the
//! API server's: `1Gi == 1024Mi`, `1G < 1Gi`, `1.073741824G == 1Gi`. Floats cannot promise that
//! (the one published crate rounds through f64), so values are kept as integer nano-units in an
//! `i128`, which holds every quantity the server itself can represent in its fast path.
//!
//! Parsing follows apimachinery's `ParseQuantity`: a sign, a decimal mantissa (`1`, `1.5`, `.5`,
//! `1.`), then a binary suffix (`Ki`..`Ei`), a decimal suffix (`n u m k M G T P E`) or a decimal
//! exponent (`e3`, `E-2`). Like the server, a non-zero value finer than `1n` is rounded up (away
//! from zero) to `1n`, and `BinarySI`/`DecimalSI` values beyond `2^63-1` are capped there, so two
//! spellings compare equal here exactly when the server stores the same amount.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// A resource quantity: compared by exact value, displayed as spelled in its source.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(transparent)]
pub struct Quantity {
    raw: String,
    #[serde(skip)]
    nanos: i128,
}

/// Why a string is not a quantity. The message quotes the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a Kubernetes quantity: {reason}")]
pub struct QuantityError {
    pub input: String,
    pub reason: &'static str,
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;
/// The server caps suffixed (non-exponent) quantities at `2^63-1` units.
const MAX_CAPPED_NANOS: i128 = (i64::MAX as i128) * NANOS_PER_UNIT;
/// A bound on `e`/`E` exponents that keeps parsing cheap; the `i128` range check after it is
/// what decides whether a value fits.
const MAX_ABS_EXPONENT: i64 = 128;

#[derive(Copy, Clone)]
enum Suffix {
    /// `value * 2^shift`
    Binary(u32),
    /// `value * 10^exp`; `capped` is false for the `e`/`E` exponent form (DecimalExponent).
    Decimal { exp: i64, capped: bool },
}

impl Quantity {
    /// Parses `input` exactly; see the module docs for the grammar.
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        let nanos = parse_nanos(input).map_err(|reason| QuantityError {
            input: input.to_owned(),
            reason,
        })?;
        Ok(Quantity {
            raw: input.to_owned(),
            nanos,
        })
    }

    /// The spelling the quantity was parsed from.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The exact value in nano-units (`1` = `1n`, `1_000_000_000` = `1`).
    pub fn nanos(&self) -> i128 {
        self.nanos
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl Hash for Quantity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.nanos.hash(state);
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl TryFrom<&k8s_openapi::apimachinery::pkg::api::resource::Quantity> for Quantity {
    type Error = QuantityError;

    fn try_from(
        q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    ) -> Result<Self, Self::Error> {
        Quantity::parse(&q.0)
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Quantity::parse(&raw).map_err(serde::de::Error::custom)
    }
}

fn parse_nanos(input: &str) -> Result<i128, &'static str> {
    // The server trims surrounding space when it reads a quantity from JSON.
    let s = input.trim().as_bytes();
    if s.is_empty() {
        return Err("it is empty");
    }
    let mut pos = 0;
    let negative = match s[0] {
        b'-' => {
            pos += 1;
            true
        }
        b'+' => {
            pos += 1;
            false
        }
        _ => false,
    };
    let int_start = pos;
    while pos < s.len() && s[pos].is_ascii_digit() {
        pos += 1;
    }
    let int_digits = &s[int_start..pos];
    let mut frac_digits: &[u8] = &[];
    if pos < s.len() && s[pos] == b'.' {
        pos += 1;
        let frac_start = pos;
        while pos < s.len() && s[pos].is_ascii_digit() {
            pos += 1;
        }
        frac_digits = &s[frac_start..pos];
    }
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err("it has no digits before its suffix");
    }
    let suffix = parse_suffix(&s[pos..])?;

    // value = digits * 10^(-frac_len) * suffix, kept as a decimal integer with an exponent.
    let mut digits: Vec<u8> = int_digits
        .iter()
        .chain(frac_digits)
        .map(|d| d - b'0')
        .collect();
    let first_nonzero = digits.iter().position(|&d| d != 0);
    let Some(first_nonzero) = first_nonzero else {
        return Ok(0);
    };
    digits.drain(..first_nonzero);
    let frac_len = i64::try_from(frac_digits.len()).map_err(|_| "it is too long")?;
    // Nano-units: multiply by 10^9.
    let mut exp10 = 9 - frac_len;
    let mut shift = 0;
    let capped = match suffix {
        Suffix::Binary(s) => {
            shift = s;
            true
        }
        Suffix::Decimal { exp, capped } => {
            exp10 += exp;
            capped
        }
    };

    // Drop the digits below 1n; any non-zero one among them rounds the magnitude up.
    let mut round_up = false;
    if exp10 < 0 {
        let drop = usize::try_from(-exp10).unwrap_or(usize::MAX);
        if drop >= digits.len() {
            round_up = true; // a non-zero digit exists (checked above) and all are dropped
            digits.clear();
        } else {
            let keep = digits.len() - drop;
            round_up = digits[keep..].iter().any(|&d| d != 0);
            digits.truncate(keep);
        }
        exp10 = 0;
    }
    // Digits beyond 39 cannot fit in an i128 once leading zeros are gone.
    if digits.len() as i64 + exp10 > 39 {
        return Err("it is too large to represent");
    }
    let mut magnitude: i128 = 0;
    for d in digits {
        magnitude = magnitude
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(d)))
            .ok_or("it is too large to represent")?;
    }
    for _ in 0..exp10 {
        magnitude = magnitude
            .checked_mul(10)
            .ok_or("it is too large to represent")?;
    }
    magnitude = magnitude
        .checked_shl(shift)
        .filter(|m| m.checked_shr(shift) == Some(magnitude))
        .ok_or("it is too large to represent")?;
    if round_up {
        magnitude += 1;
    }
    if capped && magnitude > MAX_CAPPED_NANOS {
        magnitude = MAX_CAPPED_NANOS;
    }
    Ok(if negative { -magnitude } else { magnitude })
}

fn parse_suffix(s: &[u8]) -> Result<Suffix, &'static str> {
    let decimal = |exp| Ok(Suffix::Decimal { exp, capped: true });
    match s {
        b"" => decimal(0),
        b"n" => decimal(-9),
        b"u" => decimal(-6),
        b"m" => decimal(-3),
        b"k" => decimal(3),
        b"M" => decimal(6),
        b"G" => decimal(9),
        b"T" => decimal(12),
        b"P" => decimal(15),
        b"E" => decimal(18),
        b"Ki" => Ok(Suffix::Binary(10)),
        b"Mi" => Ok(Suffix::Binary(20)),
        b"Gi" => Ok(Suffix::Binary(30)),
        b"Ti" => Ok(Suffix::Binary(40)),
        b"Pi" => Ok(Suffix::Binary(50)),
        b"Ei" => Ok(Suffix::Binary(60)),
        [b'e' | b'E', rest @ ..] => {
            let (negative, digits) = match rest {
                [b'-', d @ ..] => (true, d),
                [b'+', d @ ..] => (false, d),
                d => (false, d),
            };
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Err("its exponent is not an integer");
            }
            // Leading zeros do not change the value; keep the parse bounded.
            let significant: &[u8] = {
                let start = digits
                    .iter()
                    .position(|&d| d != b'0')
                    .unwrap_or(digits.len());
                &digits[start..]
            };
            if significant.len() > 4 {
                return Err("its exponent is out of range");
            }
            let mut exp: i64 = 0;
            for &d in significant {
                exp = exp * 10 + i64::from(d - b'0');
            }
            if exp > MAX_ABS_EXPONENT {
                return Err("its exponent is out of range");
            }
            Ok(Suffix::Decimal {
                exp: if negative { -exp } else { exp },
                capped: false,
            })
        }
        _ => Err("its suffix is not one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or an exponent"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn values_in_nano_units() {
        let cases: &[(&str, i128)] = &[
            ("0", 0),
            ("-0", 0),
            ("+0.000", 0),
            ("1", 1_000_000_000),
            ("1n", 1),
            ("1u", 1_000),
            ("1m", 1_000_000),
            ("500m", 500_000_000),
            ("0.5", 500_000_000),
            (".5", 500_000_000),
            ("5.", 5_000_000_000),
            ("1k", 1_000 * NANOS_PER_UNIT),
            ("1M", 1_000_000 * NANOS_PER_UNIT),
            ("1G", 1_000_000_000 * NANOS_PER_UNIT),
            ("1T", 10i128.pow(12) * NANOS_PER_UNIT),
            ("1P", 10i128.pow(15) * NANOS_PER_UNIT),
            ("1E", 10i128.pow(18) * NANOS_PER_UNIT),
            ("1Ki", 1024 * NANOS_PER_UNIT),
            ("1Mi", (1 << 20) * NANOS_PER_UNIT),
            ("1Gi", (1 << 30) * NANOS_PER_UNIT),
            ("1Ti", (1 << 40) * NANOS_PER_UNIT),
            ("1Pi", (1 << 50) * NANOS_PER_UNIT),
            ("1Ei", (1 << 60) * NANOS_PER_UNIT),
            ("1.5Gi", 3 * (1 << 29) * NANOS_PER_UNIT),
            ("-1.5Gi", -3 * (1 << 29) * NANOS_PER_UNIT),
            ("1e3", 1_000 * NANOS_PER_UNIT),
            ("1E3", 1_000 * NANOS_PER_UNIT),
            ("1e+3", 1_000 * NANOS_PER_UNIT),
            ("15e-1", 1_500_000_000),
            ("1e-9", 1),
            ("1e0", NANOS_PER_UNIT),
            ("007", 7 * NANOS_PER_UNIT),
            ("1.Gi", (1 << 30) * NANOS_PER_UNIT),
            // Finer than 1n rounds up, away from zero, as the server does.
            ("0.1n", 1),
            ("1.0000000001", NANOS_PER_UNIT + 1),
            ("-0.1n", -1),
            ("1e-20", 1),
            // The server caps suffixed quantities at 2^63-1 units, not exponent ones.
            ("9223372036854775807", MAX_CAPPED_NANOS),
            ("9223372036854775808", MAX_CAPPED_NANOS),
            ("100Ei", MAX_CAPPED_NANOS),
            ("1e19", 10i128.pow(19) * NANOS_PER_UNIT),
            (" 1Gi ", (1 << 30) * NANOS_PER_UNIT),
        ];
        for (input, nanos) in cases {
            assert_eq!(q(input).nanos(), *nanos, "{input}");
        }
    }

    #[test]
    fn equal_and_ordered_by_value() {
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("1Gi"), q("1.073741824G"));
        assert_eq!(q("1.5Gi"), q("1536Mi"));
        assert_eq!(q("0.5"), q("500m"));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("2048Ki"), q("2Mi"));
        assert!(q("1G") < q("1Gi"));
        assert!(q("1Gi") < q("2Gi"));
        assert!(q("999Mi") < q("1Gi"));
        assert!(q("1.073741825G") > q("1Gi"));
        assert!(q("-1") < q("0"));
        assert!(q("1n") > q("0"));
        assert!(q("1Ei") > q("1E"));
    }

    #[test]
    fn display_and_serialize_keep_the_spelling() {
        let x = q("1024Mi");
        assert_eq!(x.to_string(), "1024Mi");
        assert_eq!(x.as_str(), "1024Mi");
        assert_eq!(serde_json::to_string(&x).unwrap(), "\"1024Mi\"");
        let back: Quantity = serde_json::from_str("\"1Gi\"").unwrap();
        assert_eq!(back, x);
        assert_eq!(back.as_str(), "1Gi");
        assert_eq!("2Gi".parse::<Quantity>().unwrap(), q("2048Mi"));
    }

    #[test]
    fn garbage_is_an_error_quoting_the_input() {
        for input in [
            "", "  ", "Gi", "abc", "1GB", "1K", "1 Gi", "1gi", "1.2.3", "--1", "+-1", "1e", "1e+",
            "1e1.5", "1Ki1", "e3", ".", "-", "1ee3", "1e99999", "0x10", "1,000", "∞",
        ] {
            let err = Quantity::parse(input).expect_err(input);
            assert_eq!(err.input, input);
            assert!(
                err.to_string().contains(&format!("{input:?}")),
                "{err} does not quote {input:?}"
            );
        }
        assert!(Quantity::parse("1e40").is_err());
        assert!(serde_json::from_str::<Quantity>("\"big\"").is_err());
    }

    /// A quantity and the exact value it should have, built from parts.
    fn spelled() -> impl Strategy<Value = (String, i128)> {
        let suffixes: Vec<(&str, i128, i128)> = vec![
            // (suffix, numerator, denominator) of the unit in nano-units
            ("", NANOS_PER_UNIT, 1),
            ("m", 1_000_000, 1),
            ("u", 1_000, 1),
            ("k", 1_000 * NANOS_PER_UNIT, 1),
            ("M", 1_000_000 * NANOS_PER_UNIT, 1),
            ("G", 1_000_000_000 * NANOS_PER_UNIT, 1),
            ("Ki", 1024 * NANOS_PER_UNIT, 1),
            ("Mi", (1 << 20) * NANOS_PER_UNIT, 1),
            ("Gi", (1 << 30) * NANOS_PER_UNIT, 1),
            ("Ti", (1 << 40) * NANOS_PER_UNIT, 1),
            ("e2", 100 * NANOS_PER_UNIT, 1),
            ("e-3", 1_000_000, 1),
        ];
        (
            any::<bool>(),
            0u64..100_000,
            0u32..1000,
            0usize..suffixes.len(),
        )
            .prop_map(move |(neg, int, frac, si)| {
                let (suffix, unit, _) = suffixes[si];
                // Three fractional digits: value = (int*1000 + frac) * unit / 1000, exact for
                // every unit above since each is a multiple of 1000 nano-units.
                let text = format!("{}{int}.{frac:03}{suffix}", if neg { "-" } else { "" });
                let magnitude = (i128::from(int) * 1000 + i128::from(frac)) * unit / 1000;
                (text, if neg { -magnitude } else { magnitude })
            })
    }

    proptest! {
        #[test]
        fn parse_gives_the_exact_value((text, nanos) in spelled()) {
            prop_assert_eq!(q(&text).nanos(), nanos);
        }

        #[test]
        fn order_agrees_with_value((a, va) in spelled(), (b, vb) in spelled()) {
            let (qa, qb) = (q(&a), q(&b));
            prop_assert_eq!(qa.cmp(&qb), va.cmp(&vb));
            prop_assert_eq!(qa == qb, va == vb);
            prop_assert_eq!(qb.cmp(&qa), qa.cmp(&qb).reverse());
        }

        #[test]
        fn order_is_transitive((a, _) in spelled(), (b, _) in spelled(), (c, _) in spelled()) {
            let mut v = [q(&a), q(&b), q(&c)];
            v.sort();
            prop_assert!(v[0] <= v[1] && v[1] <= v[2] && v[0] <= v[2]);
        }

        #[test]
        fn binary_and_decimal_spellings_agree(n in 0i64..1_000_000, shift in 0u32..5) {
            let suffix = ["", "Ki", "Mi", "Gi", "Ti"][shift as usize];
            let bytes = i128::from(n) << (10 * shift);
            let spelled = q(&format!("{n}{suffix}"));
            prop_assert_eq!(&spelled, &q(&bytes.to_string()));
            prop_assert!(spelled < q(&(bytes + 1).to_string()));
        }

        #[test]
        fn arbitrary_text_never_panics(s in "\\PC{0,12}") {
            if let Err(e) = Quantity::parse(&s) {
                prop_assert_eq!(e.input, s);
            }
        }
    }
}
