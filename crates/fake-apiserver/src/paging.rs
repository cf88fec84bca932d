//! `limit`/`continue` on lists, with the real server's token: unpadded URL-safe base64 of
//! `{"v":"meta.k8s.io/v1","rv":<list rv>,"start":"<last key>\u0000"}`, so a client that pages
//! (kube-runtime's watcher with a page size, kubectl's chunked lists) walks the same pages,
//! and a token that does not decode is the real 400.
//!
//! A page is cut from the current state, not from a snapshot at the first page's
//! resourceVersion (the real server reads the snapshot while it is not compacted); the items
//! are in key order either way.

use serde_json::{Value, json};

use super::errors::ApiError;
use super::query::Query;
use super::store::{obj_name, obj_namespace};

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// One page of a list.
pub struct Page {
    pub items: Vec<Value>,
    /// The token for the next page, when there is one.
    pub continue_token: Option<String>,
    /// Items after this page; only without selectors, as the real server counts it.
    pub remaining: Option<usize>,
}

/// The storage key the pages are ordered by, relative to the list's prefix.
fn key(obj: &Value, all_namespaces: bool) -> String {
    match obj_namespace(obj) {
        Some(ns) if all_namespaces => format!("{ns}/{}", obj_name(obj)),
        _ => obj_name(obj).to_string(),
    }
}

fn bad_token(why: &str) -> ApiError {
    ApiError::bad_request(&format!("invalid continue token: {why}"))
}

/// How Go's `encoding/json` names an unexpected byte (`'x'`, `'\u009e'`).
fn go_quote_char(b: u8) -> String {
    if (0x20..0x7f).contains(&b) {
        format!("'{}'", b as char)
    } else {
        format!("'\\u{b:04x}'")
    }
}

/// The start key of a `continue` token, or the real server's error for a bad one.
fn decode(token: &str) -> Result<String, ApiError> {
    let raw = decode_base64_url(token).map_err(|at| {
        bad_token(&format!(
            "continue key is not valid: illegal base64 data at input byte {at}"
        ))
    })?;
    let parsed: Value = serde_json::from_slice(&raw).map_err(|_| {
        let first = raw.iter().copied().find(|b| !b.is_ascii_whitespace());
        match first {
            Some(b) if !matches!(b, b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n') => {
                bad_token(&format!(
                    "continue key is not valid: invalid character {} looking for beginning of value",
                    go_quote_char(b)
                ))
            }
            _ => bad_token("continue key is not valid: unexpected end of JSON input"),
        }
    })?;
    if parsed["v"] != json!(TOKEN_VERSION) {
        return Err(bad_token(&format!(
            "continue key is not valid: server only supports version {TOKEN_VERSION:?}"
        )));
    }
    let start = parsed["start"].as_str().unwrap_or_default();
    Ok(start.trim_end_matches('\u{0}').to_string())
}

fn encode(rv: u64, last_key: &str) -> String {
    let json = json!({"v": TOKEN_VERSION, "rv": rv, "start": format!("{last_key}\u{0}")});
    super::semantics::base64(json.to_string().as_bytes())
        .trim_end_matches('=')
        .replace('+', "-")
        .replace('/', "_")
}

/// Go's `base64.RawURLEncoding.DecodeString`; `Err` is the offset of the first bad byte.
fn decode_base64_url(s: &str) -> Result<Vec<u8>, usize> {
    let value = |c: u8| -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'-' => Some(62),
            b'_' => Some(63),
            _ => None,
        }
    };
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for (chunk_index, chunk) in bytes.chunks(4).enumerate() {
        if chunk.len() == 1 {
            return Err(chunk_index * 4);
        }
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c).ok_or(chunk_index * 4 + i)? << (18 - 6 * i);
        }
        let produced = chunk.len() - 1;
        for i in 0..produced {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Ok(out)
}

/// Cuts the page the query asks for out of the selected items (already in key order).
pub fn page(
    items: Vec<Value>,
    query: &Query,
    all_namespaces: bool,
    has_selectors: bool,
    rv: u64,
) -> Result<Page, ApiError> {
    let start = match query.get("continue").filter(|t| !t.is_empty()) {
        Some(token) => Some(decode(token)?),
        None => None,
    };
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<i64>().ok())
        .filter(|l| *l > 0)
        .map(|l| l as usize);
    let mut items: Vec<Value> = match &start {
        Some(after) => items
            .into_iter()
            .filter(|o| key(o, all_namespaces).as_str() > after.as_str())
            .collect(),
        None => items,
    };
    let Some(limit) = limit else {
        return Ok(Page {
            items,
            continue_token: None,
            remaining: None,
        });
    };
    if items.len() <= limit {
        return Ok(Page {
            items,
            continue_token: None,
            remaining: None,
        });
    }
    let rest = items.split_off(limit);
    let last = items
        .last()
        .map(|o| key(o, all_namespaces))
        .unwrap_or_default();
    Ok(Page {
        continue_token: Some(encode(rv, &last)),
        remaining: (!has_selectors).then_some(rest.len()),
        items,
    })
}
