//! Just enough of `resource.Quantity` for the fake: exact comparison and the canonical string
//! the real server stores (`1024Mi` comes back as `1Gi`, `1.5Gi` as `1536Mi`, `1000M` as `1G`).
//! Rounding of sub-nano precision and the `int64Amount`/`inf.Dec` split are not modelled.

use std::cmp::Ordering;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    BinarySI,
    DecimalSI,
    DecimalExponent,
}

/// `num / 10^scale`, exactly.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    pub num: i128,
    pub scale: u32,
    pub format: Format,
}

fn pow10(n: u32) -> i128 {
    10i128.pow(n)
}

impl Quantity {
    pub fn parse(s: &str) -> Option<Quantity> {
        let s = s.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
            .unwrap_or(s.len());
        let (number, suffix) = s.split_at(split);
        let (negative, number) = match number.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, number.strip_prefix('+').unwrap_or(number)),
        };
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let digits = format!("{int_part}{frac_part}");
        if !digits.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let mut num: i128 = digits.parse().ok()?;
        let mut scale = frac_part.len() as u32;
        let format;
        let binary = |k: u32| 1i128 << (10 * k);
        match suffix {
            "" => format = Format::DecimalSI,
            "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
                let k = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
                    .iter()
                    .position(|x| *x == suffix)? as u32
                    + 1;
                num = num.checked_mul(binary(k))?;
                format = Format::BinarySI;
            }
            "n" | "u" | "m" => {
                scale += match suffix {
                    "n" => 9,
                    "u" => 6,
                    _ => 3,
                };
                format = Format::DecimalSI;
            }
            "k" | "M" | "G" | "T" | "P" | "E" => {
                let e = 3
                    * (["k", "M", "G", "T", "P", "E"]
                        .iter()
                        .position(|x| *x == suffix)? as u32
                        + 1);
                num = num.checked_mul(pow10(e))?;
                format = Format::DecimalSI;
            }
            _ => {
                let exp: i32 = suffix
                    .strip_prefix('e')
                    .or_else(|| suffix.strip_prefix('E'))?
                    .parse()
                    .ok()?;
                if exp.unsigned_abs() > 30 {
                    return None;
                }
                if exp >= 0 {
                    num = num.checked_mul(pow10(exp as u32))?;
                } else {
                    scale += exp.unsigned_abs();
                }
                format = Format::DecimalExponent;
            }
        }
        // Beyond this the fake's i128 arithmetic could overflow; no test needs such values.
        if scale > 30 {
            return None;
        }
        while scale > 0 && num % 10 == 0 {
            num /= 10;
            scale -= 1;
        }
        if negative {
            num = -num;
        }
        Some(Quantity { num, scale, format })
    }

    #[expect(
        clippy::should_implement_trait,
        reason = "compares values only (1Gi = 1024Mi): not the `Ord` of a type whose format differs"
    )]
    pub fn cmp(&self, other: &Quantity) -> Ordering {
        let s = self.scale.max(other.scale);
        let a = self.num.checked_mul(pow10(s - self.scale));
        let b = other.num.checked_mul(pow10(s - other.scale));
        match (a, b) {
            (Some(a), Some(b)) => a.cmp(&b),
            // Only astronomically large values overflow: compare by magnitude of the digits.
            _ => (
                self.num.signum(),
                self.num.abs().ilog10() as i64 - self.scale as i64,
            )
                .cmp(&(
                    other.num.signum(),
                    other.num.abs().ilog10() as i64 - other.scale as i64,
                )),
        }
    }

    /// The integer value, if it is one (bytes for storage).
    pub fn integer(&self) -> Option<i128> {
        (self.scale == 0).then_some(self.num)
    }

    /// The canonical string the real server serialises.
    pub fn canonical(&self) -> String {
        if self.num == 0 {
            return "0".into();
        }
        if self.format == Format::BinarySI
            && let Some(v) = self.integer()
        {
            let suffixes = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            let mut k = 0;
            let mut m = v;
            while k < 6 && m % 1024 == 0 && m.abs() >= 1024 {
                m /= 1024;
                k += 1;
            }
            // Below 1Ki the binary form is the plain integer.
            return format!("{m}{}", suffixes[k]);
        }
        // Decimal: the largest exponent (a multiple of 3) that keeps the mantissa whole.
        if self.num.abs() > i128::MAX / 100 {
            return format!("{}e-{}", self.num, self.scale);
        }
        let mut exp: i32 = -(self.scale as i32);
        let mut m = self.num;
        while exp % 3 != 0 {
            m *= 10;
            exp -= 1;
        }
        while m % 1000 == 0 && exp < 18 {
            m /= 1000;
            exp += 3;
        }
        if self.format == Format::DecimalExponent {
            return if exp == 0 {
                format!("{m}")
            } else {
                format!("{m}e{exp}")
            };
        }
        let suffix = match exp {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            _ => return format!("{m}e{exp}"),
        };
        format!("{m}{suffix}")
    }

    /// How Go's `%#v`/go-cmp prints it inside a diff: `{i: resource.int64Amount{value: N}, s: "..", Format: ".."}`.
    pub fn go_repr(&self, original: &str) -> String {
        let (value, scale) = match self.format {
            Format::BinarySI => (self.num, -(self.scale as i32)),
            _ => {
                let mut v = self.num;
                let mut e = -(self.scale as i32);
                while v != 0 && v % 10 == 0 {
                    v /= 10;
                    e += 1;
                }
                (v, e)
            }
        };
        let amount = if scale == 0 {
            format!("resource.int64Amount{{value: {value}}}")
        } else {
            format!("resource.int64Amount{{value: {value}, scale: {scale}}}")
        };
        let format = match self.format {
            Format::BinarySI => "BinarySI",
            Format::DecimalSI => "DecimalSI",
            Format::DecimalExponent => "DecimalExponent",
        };
        format!("{{i: {amount}, s: {original:?}, Format: {format:?}}}")
    }
}

/// Compares two quantity strings by value; unparsable strings compare as strings.
pub fn cmp_str(a: &str, b: &str) -> Ordering {
    match (Quantity::parse(a), Quantity::parse(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

pub fn canonical_str(s: &str) -> String {
    Quantity::parse(s)
        .map(|q| q.canonical())
        .unwrap_or_else(|| s.to_string())
}
