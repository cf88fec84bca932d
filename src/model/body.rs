//! The `/status` bodies, encoded once: a row is encoded when its record changes, and the list
//! is the rows joined, byte for byte what encoding the whole list gives. Pure; the service
//! keeps the encoded rows (`records::status_cache`) and `http` serves them.

use bytes::Bytes;
use serde::Serialize;

/// `value` as compact JSON: the bytes `axum::Json` would answer.
pub fn encode<T: Serialize>(value: &T) -> Result<Bytes, serde_json::Error> {
    serde_json::to_vec(value).map(Bytes::from)
}

/// A JSON object of fields each already encoded, in the order given: the `GET /status` body,
/// `{"kustomizations":[...],"helmReleases":[...],...}`, from each kind's rows ([`array`]):
/// byte for byte what encoding the whole object gives.
pub fn object<'a>(fields: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Bytes {
    let mut out = vec![b'{'];
    for (i, (name, value)) in fields.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":");
        out.extend_from_slice(value);
    }
    out.push(b'}');
    Bytes::from(out)
}

/// `body` (a JSON object) with `"name":value` added last; `value` is JSON already encoded.
/// How the service adds what is not cached with the rows (`helmReleases`, `refusedIntents`)
/// without re-encoding the cached body. A body that is not an object is returned as it is.
pub fn append_field(body: Bytes, name: &str, value: &[u8]) -> Bytes {
    if !body.ends_with(b"}") {
        return body;
    }
    let mut out = Vec::with_capacity(body.len() + name.len() + value.len() + 4);
    out.extend_from_slice(&body[..body.len() - 1]);
    if body.len() > 2 {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
    out.extend_from_slice(value);
    out.push(b'}');
    Bytes::from(out)
}

/// Rows each already encoded, as one JSON array.
pub fn array<'a>(rows: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = vec![b'['];
    for (i, row) in rows.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(row);
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GateMode, StatusRow};
    use serde::Serialize;

    #[derive(Serialize)]
    struct StatusList {
        kustomizations: Vec<StatusRow>,
    }

    #[test]
    fn appended_fields_read_as_the_object_with_them_by_table() {
        for (body, name, value, want) in [
            (
                &b"{\"kustomizations\":[]}"[..],
                "helmReleases",
                &b"[]"[..],
                serde_json::json!({"kustomizations": [], "helmReleases": []}),
            ),
            (b"{}", "a", b"1", serde_json::json!({"a": 1})),
            (
                b"{\"k\":[1]}",
                "h",
                b"[{\"x\":2}]",
                serde_json::json!({"k": [1], "h": [{"x": 2}]}),
            ),
        ] {
            let out = append_field(Bytes::copy_from_slice(body), name, value);
            assert_eq!(
                serde_json::from_slice::<serde_json::Value>(&out).unwrap(),
                want
            );
        }
        let rows: [&[u8]; 2] = [b"1", b"{}"];
        assert_eq!(array(rows), b"[1,{}]");
        assert_eq!(array(std::iter::empty()), b"[]");
    }

    #[test]
    fn an_object_of_arrays_is_the_encoding_of_the_whole_list_by_table() {
        let row =
            |ns: &str, name: &str, revision: Option<&str>, last: Option<serde_json::Value>| {
                StatusRow {
                    kind: crate::model::Kind::KUSTOMIZATION,
                    waiting: None,
                    namespace: ns.into(),
                    name: name.into(),
                    gate: GateMode::Suspend,
                    source_revision: revision.map(String::from),
                    last,
                    hold: None,
                }
            };
        for rows in [
            vec![],
            vec![row("a", "x", None, None)],
            vec![
                row("a", "x", Some("main@sha1:1"), None),
                row(
                    "b",
                    "y \"quoted\"",
                    None,
                    Some(serde_json::json!({"state": "converged"})),
                ),
            ],
        ] {
            let encoded: Vec<Bytes> = rows.iter().map(|r| encode(r).unwrap()).collect();
            let expected = serde_json::to_vec(&StatusList {
                kustomizations: rows.clone(),
            })
            .unwrap();
            let rows = array(encoded.iter().map(|r| &r[..]));
            assert_eq!(
                object([("kustomizations", &rows[..])]),
                Bytes::from(expected)
            );
        }
    }
}
