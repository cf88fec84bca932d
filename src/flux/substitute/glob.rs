//! Shell patterns for `${v#p}` `${v##p}` `${v%p}` `${v%%p}`, as Flux matches them.
//!
//! Flux uses drone/envsubst's copy of Go's `path.Match` with the path rules removed: the name
//! is one flat string, so `*` and `?` also match `/` (that is why `${f##*/}` gives the base
//! name). Like Go, it works on bytes, and a malformed pattern is an error only once the
//! matcher reaches it; the callers then leave the value unchanged.

/// The pattern is malformed (Go's `path.ErrBadPattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BadPattern;

/// Reports whether all of `name` matches `pattern`.
pub(crate) fn matches(mut pattern: &[u8], mut name: &[u8]) -> Result<bool, BadPattern> {
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing star matches the rest of the name.
            return Ok(true);
        }
        let (t, ok, err) = match_chunk(chunk, name);
        // The last chunk must exhaust the name, else a later star might still match.
        if ok && (t.is_empty() || !pattern.is_empty()) {
            name = t;
            continue;
        }
        if let Some(e) = err {
            return Err(e);
        }
        if star {
            for i in 0..name.len() {
                let (t, ok, err) = match_chunk(chunk, &name[i + 1..]);
                if ok {
                    if pattern.is_empty() && !t.is_empty() {
                        continue;
                    }
                    name = t;
                    continue 'pattern;
                }
                if let Some(e) = err {
                    return Err(e);
                }
            }
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Splits off the next run of non-star pattern, noting whether stars preceded it.
fn scan_chunk(mut pattern: &[u8]) -> (bool, &[u8], &[u8]) {
    let mut star = false;
    while let Some((b'*', rest)) = pattern.split_first() {
        pattern = rest;
        star = true;
    }
    let mut in_range = false;
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            b'\\' if i + 1 < pattern.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &pattern[..i], &pattern[i..])
}

fn decode(s: &[u8]) -> (char, usize) {
    let n = match s.first() {
        None => return (char::REPLACEMENT_CHARACTER, 0),
        Some(&b) if b < 0x80 => return (b as char, 1),
        Some(0xc2..=0xdf) => 2,
        Some(0xe0..=0xef) => 3,
        Some(0xf0..=0xf4) => 4,
        Some(_) => return (char::REPLACEMENT_CHARACTER, 1),
    };
    match s.get(..n).map(std::str::from_utf8) {
        Some(Ok(text)) => text
            .chars()
            .next()
            .map_or((char::REPLACEMENT_CHARACTER, 1), |c| (c, n)),
        _ => (char::REPLACEMENT_CHARACTER, 1),
    }
}

/// Matches `chunk` at the start of `s`: (rest of `s`, matched, malformed-pattern error).
fn match_chunk<'a>(mut chunk: &[u8], mut s: &'a [u8]) -> (&'a [u8], bool, Option<BadPattern>) {
    while !chunk.is_empty() {
        if s.is_empty() {
            return (s, false, None);
        }
        match chunk[0] {
            b'[' => {
                let (r, n) = decode(s);
                s = &s[n..];
                chunk = &chunk[1..];
                let mut negated = false;
                if chunk.first() == Some(&b'^') {
                    negated = true;
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut nrange = 0;
                loop {
                    if chunk.first() == Some(&b']') && nrange > 0 {
                        chunk = &chunk[1..];
                        break;
                    }
                    let (lo, rest) = match get_esc(chunk) {
                        Ok(v) => v,
                        Err(e) => return (s, false, Some(e)),
                    };
                    chunk = rest;
                    let mut hi = lo;
                    if chunk.first() == Some(&b'-') {
                        match get_esc(&chunk[1..]) {
                            Ok((h, rest)) => {
                                hi = h;
                                chunk = rest;
                            }
                            Err(e) => return (s, false, Some(e)),
                        }
                    }
                    if lo <= r && r <= hi {
                        matched = true;
                    }
                    nrange += 1;
                }
                if matched == negated {
                    return (s, false, None);
                }
            }
            b'?' => {
                let (_, n) = decode(s);
                s = &s[n..];
                chunk = &chunk[1..];
            }
            b'\\' => {
                chunk = &chunk[1..];
                if chunk.is_empty() {
                    return (s, false, Some(BadPattern));
                }
                if chunk[0] != s[0] {
                    return (s, false, None);
                }
                s = &s[1..];
                chunk = &chunk[1..];
            }
            c => {
                if c != s[0] {
                    return (s, false, None);
                }
                s = &s[1..];
                chunk = &chunk[1..];
            }
        }
    }
    (s, true, None)
}

/// One possibly escaped character of a `[...]` class.
fn get_esc(mut chunk: &[u8]) -> Result<(char, &[u8]), BadPattern> {
    match chunk.first() {
        None | Some(b'-') | Some(b']') => return Err(BadPattern),
        Some(b'\\') => {
            chunk = &chunk[1..];
            if chunk.is_empty() {
                return Err(BadPattern);
            }
        }
        Some(_) => {}
    }
    let (r, n) = decode(chunk);
    if r == char::REPLACEMENT_CHARACTER && n == 1 {
        return Err(BadPattern);
    }
    let rest = &chunk[n..];
    if rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((r, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, &str, Result<bool, BadPattern>)] = &[
            ("*", "a/b", Ok(true)),
            ("*/", "path/to/", Ok(true)),
            ("*.", "bash.string.", Ok(true)),
            ("?", "/", Ok(true)),
            ("a?c", "abc", Ok(true)),
            ("a?c", "ac", Ok(false)),
            ("[a-c]x", "bx", Ok(true)),
            ("[^a-c]x", "bx", Ok(false)),
            ("[^a-c]x", "dx", Ok(true)),
            ("\\*", "*", Ok(true)),
            ("\\*", "a", Ok(false)),
            ("[", "a", Err(BadPattern)),
            ("a\\", "ab", Err(BadPattern)),
            ("abc", "abc", Ok(true)),
            ("ab", "abc", Ok(false)),
            ("*c", "abc", Ok(true)),
            ("a*b*c", "axxbyyc", Ok(true)),
            ("é?", "éa", Ok(true)),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(
                matches(pattern.as_bytes(), name.as_bytes()),
                *want,
                "{pattern} vs {name}"
            );
        }
    }
}
