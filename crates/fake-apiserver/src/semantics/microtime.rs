//! `MicroTime` fields (Lease `acquireTime`/`renewTime`, events' `eventTime`) decode only in
//! the layout `2006-01-02T15:04:05.000000Z07:00`: exactly six fractional digits. Anything else
//! is the real 400 with Go's `time.Parse` error, before any other rule looks at the object.

use serde_json::Value;

use super::super::errors::ApiError;
use super::super::resources::{self, ResourceType};

const LAYOUT: &str = "2006-01-02T15:04:05.000000Z07:00";

fn fields(rt: &ResourceType) -> &'static [&'static str] {
    if *rt == resources::LEASE {
        &["/spec/acquireTime", "/spec/renewTime"]
    } else if *rt == resources::EVENT || *rt == resources::EVENT_V1 {
        &["/eventTime", "/series/lastObservedTime"]
    } else {
        &[]
    }
}

fn digits(s: &[u8]) -> bool {
    s.iter().all(u8::is_ascii_digit)
}

/// Go's `time.Parse(LAYOUT, value)` error text, or `None` when it parses.
pub fn parse_error(value: &str) -> Option<String> {
    let b = value.as_bytes();
    let cannot = |rest: &str, elem: &str| {
        Some(format!(
            "parsing time {value:?} as {LAYOUT:?}: cannot parse {rest:?} as {elem:?}"
        ))
    };
    // 2006-01-02T15:04:05, element by element.
    let elems: [(usize, usize, &str); 11] = [
        (0, 4, "2006"),
        (4, 5, "-"),
        (5, 7, "01"),
        (7, 8, "-"),
        (8, 10, "02"),
        (10, 11, "T"),
        (11, 13, "15"),
        (13, 14, ":"),
        (14, 16, "04"),
        (16, 17, ":"),
        (17, 19, "05"),
    ];
    for (start, end, elem) in elems {
        let ok = b.len() >= end
            && if elem.len() == 1 && !elem.as_bytes()[0].is_ascii_digit() {
                &b[start..end] == elem.as_bytes()
            } else {
                digits(&b[start..end])
            };
        if !ok {
            return cannot(&value[start.min(value.len())..], elem);
        }
    }
    let rest = &value[19..];
    let rb = rest.as_bytes();
    if !(rb.len() >= 7 && rb[0] == b'.' && digits(&rb[1..7])) {
        return cannot(rest, ".000000");
    }
    let zone = &rest[7..];
    let zb = zone.as_bytes();
    let used = if zb.first() == Some(&b'Z') {
        1
    } else if zb.len() >= 6
        && (zb[0] == b'+' || zb[0] == b'-')
        && digits(&zb[1..3])
        && zb[3] == b':'
        && digits(&zb[4..6])
    {
        6
    } else {
        return cannot(zone, "Z07:00");
    };
    let extra = &zone[used..];
    if !extra.is_empty() {
        return Some(format!("parsing time {value:?}: extra text: {extra:?}"));
    }
    None
}

/// The decode error of the first malformed `MicroTime`, as the real server answers it.
pub fn check(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    for pointer in fields(rt) {
        let Some(value) = obj.pointer(pointer).and_then(Value::as_str) else {
            continue;
        };
        if let Some(e) = parse_error(value) {
            return Err(ApiError::bad_request(&format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}",
                kind = rt.kind,
                version = rt.version,
            )));
        }
    }
    Ok(())
}
