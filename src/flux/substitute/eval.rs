//! Evaluation of parsed `${...}` nodes and the string functions behind each operator, ported
//! from fluxcd/pkg `envsubst/template.go` and `funcs.go`.
//!
//! Values are bytes, as in Go: `${#v}` counts bytes and `${v:n:len}` slices bytes, so a result
//! may split a multi-byte character. The caller turns such output into an error, where Flux
//! would fail later when parsing the YAML.

use super::glob;
use super::parse::{FuncNode, Node};

/// Why evaluation stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EvalError {
    /// Strict mode: the variable is unset and the operator supplies no default.
    NotSet(String),
}

/// Looks a variable up: `(value, exists)`, as Flux's mapping function answers.
pub(crate) trait Lookup {
    fn lookup(&self, name: &str) -> (&str, bool);
}

pub(crate) fn eval_nodes(
    nodes: &[Node],
    vars: &dyn Lookup,
    out: &mut Vec<u8>,
) -> Result<(), EvalError> {
    for node in nodes {
        eval_node(node, vars, out)?;
    }
    Ok(())
}

fn eval_node(node: &Node, vars: &dyn Lookup, out: &mut Vec<u8>) -> Result<(), EvalError> {
    match node {
        Node::Text(text) => {
            out.extend_from_slice(text);
            Ok(())
        }
        Node::Func(func) => eval_func(func, vars, out),
    }
}

/// Arguments are evaluated before the variable is looked up, so in strict mode an unset
/// variable inside a default fails even when the default is not used, exactly as in Flux.
fn eval_func(node: &FuncNode, vars: &dyn Lookup, out: &mut Vec<u8>) -> Result<(), EvalError> {
    let mut args = Vec::with_capacity(node.args.len());
    for arg in &node.args {
        let mut buf = Vec::new();
        eval_node(arg, vars, &mut buf)?;
        args.push(buf);
    }
    let (value, exists) = vars.lookup(&node.param);
    if !exists && !is_default_op(&node.name) {
        return Err(EvalError::NotSet(node.param.clone()));
    }
    out.extend_from_slice(&apply(&node.name, value.as_bytes(), &args));
    Ok(())
}

/// Operators that tolerate an unset variable in strict mode because they carry a fallback.
fn is_default_op(name: &str) -> bool {
    matches!(name, "-" | "+" | "=" | "?" | ":-" | ":+" | ":=" | ":?")
}

/// Go's `lookupFunc` then the call. `:+` and `:?` are plain defaults in Flux, not bash's
/// alternate value and error; unknown operators (e.g. `,^`) also fall back to the default.
fn apply(name: &str, s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    match name {
        "," => case_first(s, false),
        ",," => case_all(s, false),
        "^" => case_first(s, true),
        "^^" => case_all(s, true),
        "#" if args.is_empty() => s.len().to_string().into_bytes(),
        "#" => trim_prefix(s, args, false),
        "##" => trim_prefix(s, args, true),
        "%" => trim_suffix(s, args, false),
        "%%" => trim_suffix(s, args, true),
        ":" => substr(s, args),
        "/#" => replace_prefix(s, args),
        "/%" => replace_suffix(s, args),
        "/" => replace(s, args, Some(1)),
        "//" => replace(s, args, None),
        _ => to_default(s, args),
    }
}

fn to_default(s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    if s.is_empty() && !args.is_empty() {
        return args.concat();
    }
    s.to_vec()
}

fn lossy(s: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(s)
}

/// Go's simple case mapping: one rune to one rune, else unchanged (`ß` stays `ß`).
fn map_char(c: char, upper: bool) -> char {
    let mut mapped: Vec<char> = if upper {
        c.to_uppercase().collect()
    } else {
        c.to_lowercase().collect()
    };
    match (mapped.pop(), mapped.is_empty()) {
        (Some(m), true) => m,
        _ => c,
    }
}

fn case_all(s: &[u8], upper: bool) -> Vec<u8> {
    lossy(s)
        .chars()
        .map(|c| map_char(c, upper))
        .collect::<String>()
        .into_bytes()
}

fn case_first(s: &[u8], upper: bool) -> Vec<u8> {
    let text = lossy(s);
    let mut chars = text.chars();
    match chars.next() {
        None => Vec::new(),
        Some(first) => {
            let mut out = String::with_capacity(text.len());
            out.push(map_char(first, upper));
            out.push_str(chars.as_str());
            out.into_bytes()
        }
    }
}

/// Go's `strconv.Atoi` on a 64-bit platform: optional sign, decimal digits, no spaces.
fn atoi(arg: &[u8]) -> Option<i64> {
    std::str::from_utf8(arg).ok()?.parse::<i64>().ok()
}

fn substr(s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    let len = i64::try_from(s.len()).unwrap_or(i64::MAX);
    let slice = |from: i64, to: i64| -> Vec<u8> {
        let from = usize::try_from(from).unwrap_or(0);
        let to = usize::try_from(to).unwrap_or(0);
        s.get(from..to).map(<[u8]>::to_vec).unwrap_or_default()
    };
    let Some(first) = args.first() else {
        return s.to_vec();
    };
    let Some(mut pos) = atoi(first) else {
        return s.to_vec();
    };
    if pos < 0 {
        pos = len.saturating_add(pos).max(0);
    }
    let Some(second) = args.get(1) else {
        return if pos < len {
            slice(pos, len)
        } else {
            Vec::new()
        };
    };
    let Some(length) = atoi(second) else {
        return s.to_vec();
    };
    if length < 0 {
        // A negative length counts back from the end: `${v:1:-1}` drops both ends.
        let end = len.saturating_add(length);
        return if end < pos {
            Vec::new()
        } else {
            slice(pos, end)
        };
    }
    if pos.saturating_add(length) >= len {
        return if pos < len {
            slice(pos, len)
        } else {
            Vec::new()
        };
    }
    slice(pos, pos + length)
}

/// Go's `strings.Replace`: an empty pattern inserts before every character and at the end.
fn go_replace(s: &[u8], old: &[u8], new: &[u8], limit: Option<usize>) -> Vec<u8> {
    let max = limit.unwrap_or(usize::MAX);
    let mut out = Vec::with_capacity(s.len());
    let mut done = 0;
    if old.is_empty() {
        let text = lossy(s);
        let mut rest = text.as_ref();
        loop {
            if done < max {
                out.extend_from_slice(new);
                done += 1;
            } else {
                out.extend_from_slice(rest.as_bytes());
                break;
            }
            let mut chars = rest.chars();
            match chars.next() {
                None => break,
                Some(c) => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    rest = chars.as_str();
                }
            }
        }
        return out;
    }
    let mut i = 0;
    while i < s.len() {
        if done < max && s[i..].starts_with(old) {
            out.extend_from_slice(new);
            i += old.len();
            done += 1;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

fn replace(s: &[u8], args: &[Vec<u8>], limit: Option<usize>) -> Vec<u8> {
    match args {
        [] => s.to_vec(),
        [old] => go_replace(s, old, b"", limit),
        [old, new, ..] => go_replace(s, old, new, limit),
    }
}

/// Needs both arguments: `${v/#p/}` (no replacement) leaves the value unchanged, as in Flux.
fn replace_prefix(s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    match args {
        [old, new] if s.starts_with(old) => [new.as_slice(), &s[old.len()..]].concat(),
        _ => s.to_vec(),
    }
}

fn replace_suffix(s: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    match args {
        [old, new] if s.ends_with(old) => [&s[..s.len() - old.len()], new.as_slice()].concat(),
        _ => s.to_vec(),
    }
}

/// Go reverses by runes; invalid bytes become U+FFFD like Go's `[]rune(s)`.
fn reverse(s: &[u8]) -> Vec<u8> {
    lossy(s).chars().rev().collect::<String>().into_bytes()
}

fn trim_prefix(s: &[u8], args: &[Vec<u8>], longest: bool) -> Vec<u8> {
    match args.first() {
        None => s.to_vec(),
        Some(pattern) if longest => trim_longest(s, pattern),
        Some(pattern) => trim_shortest(s, pattern),
    }
}

/// Suffix removal reverses value and pattern (so `[a-z]` reads `]z-a[`), as Flux does.
fn trim_suffix(s: &[u8], args: &[Vec<u8>], longest: bool) -> Vec<u8> {
    match args.first() {
        None => s.to_vec(),
        Some(pattern) => {
            let (r, rp) = (reverse(s), reverse(pattern));
            let trimmed = if longest {
                trim_longest(&r, &rp)
            } else {
                trim_shortest(&r, &rp)
            };
            reverse(&trimmed)
        }
    }
}

/// Tries byte prefixes from the longest down to one byte (never the empty one).
fn trim_shortest(s: &[u8], pattern: &[u8]) -> Vec<u8> {
    let mut shortest = None;
    for end in (1..=s.len()).rev() {
        match glob::matches(pattern, &s[..end]) {
            Err(_) => return s.to_vec(),
            Ok(true) => shortest = Some(end),
            Ok(false) => {}
        }
    }
    match shortest {
        Some(end) => s[end..].to_vec(),
        None => s.to_vec(),
    }
}

fn trim_longest(s: &[u8], pattern: &[u8]) -> Vec<u8> {
    for end in (1..=s.len()).rev() {
        match glob::matches(pattern, &s[..end]) {
            Err(_) => return s.to_vec(),
            Ok(true) => return s[end..].to_vec(),
            Ok(false) => {}
        }
    }
    s.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap_or_default()
    }

    /// Ported from fluxcd/pkg envsubst/funcs_test.go (`Test_substr`, `Test_default`, ...).
    #[test]
    fn funcs_table() {
        let cases: &[(&str, &str, &[&str], &str)] = &[
            ("#", "Hello World", &[], "11"),
            (",,", "Hello World", &[], "hello world"),
            (",", "HELLO WORLD", &[], "hELLO WORLD"),
            (",", "", &[], ""),
            ("^^", "Hello World", &[], "HELLO WORLD"),
            ("^", "hello world", &[], "Hello world"),
            ("^", "", &[], ""),
            ("^", "élan", &[], "Élan"),
            ("^^", "straße", &[], "STRAßE"),
            (":-", "Hello World", &["Hola Mundo"], "Hello World"),
            (":-", "", &["Hola Mundo"], "Hola Mundo"),
            (
                ":-",
                "",
                &["Hola Mundo", "-Bonjour le monde", "-Halló heimur"],
                "Hola Mundo-Bonjour le monde-Halló heimur",
            ),
            (":", "123456789123456789", &["0", "8"], "12345678"),
            (":", "123456789123456789", &["1", "8"], "23456789"),
            (":", "123456789123456789", &["9"], "123456789"),
            (":", "123456789123456789", &["9", "50"], "123456789"),
            (":", "123456789123456789", &["-3", "2"], "78"),
            (":", "123456789123456789", &["-300", "3"], "123"),
            (":", "12345678", &["9", "1"], ""),
            (":", "12345678", &["9"], ""),
            (":", "hello world", &["2", "-1"], "llo worl"),
            (":", "hello world", &["0", "-3"], "hello wo"),
            (":", "hello world", &["8", "-8"], ""),
            (":", "hello world", &["-4", "-1"], "orl"),
            (":", "hello", &["x"], "hello"),
            (":", "hello", &["1", "x"], "hello"),
            (":", "hello", &["+1", "2"], "el"),
            (":", "hello", &[" 1"], "hello"),
            ("//", "abc", &["", "-"], "-a-b-c-"),
            ("/", "abc", &["", "-"], "-abc"),
            ("/", "a.b.c", &["."], "ab.c"),
            ("//", "a.b.c", &["."], "abc"),
            ("/#", "abc", &["a"], "abc"),
            ("/%", "abc", &["c"], "abc"),
            ("/#", "abc", &["", "x-"], "x-abc"),
            ("/%", "abc", &["", "-x"], "abc-x"),
            ("/#", "abc", &["b", "x"], "abc"),
            ("/%", "abc", &["b", "x"], "abc"),
            ("#", "abc", &["["], "abc"),
            ("#", "abc", &["*"], "bc"),
            ("##", "abc", &["*"], ""),
            ("%", "abc", &["*"], "ab"),
            // Suffix patterns are reversed: a class `[.]` reads `].[` and never matches.
            ("%", "archive.tar.gz", &["[.]*"], "archive.tar.gz"),
            ("%", "archive.tar.gz", &[".*"], "archive.tar"),
            ("%%", "archive.tar.gz", &[".*"], "archive"),
            ("#", "a*b", &["a\\*"], "b"),
            ("##", "héllo", &["h?"], "llo"),
            ("%", "héllo", &["l?"], "hél"),
        ];
        for (op, value, a, want) in cases {
            let got = text(apply(op, value.as_bytes(), &args(a)));
            assert_eq!(&got, want, "{op} on {value:?} with {a:?}");
        }
    }

    #[test]
    fn byte_semantics_match_go() {
        assert_eq!(apply("#", "é".as_bytes(), &[]), b"2".to_vec());
        // Slicing inside a character yields bytes that are not UTF-8, as in Go.
        assert_eq!(apply(":", "é".as_bytes(), &args(&["1"])), vec![0xa9]);
    }
}
