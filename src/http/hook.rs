//! `POST /hook`: notification-controller's `generic` / `generic-hmac` deliveries.
//!
//! The order is chosen so that nothing unauthenticated costs much: the bearer token is checked
//! before the body is read, the body is read under the 3 MiB cap, the HMAC is checked over the
//! raw bytes before they are parsed, and only an authenticated, well-formed event reaches the
//! backend. The answer is immediate (202): the work runs in the background, because Flux waits
//! at most 15 s and retries a slow receiver.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hmac::Mac;
use serde_json::json;

use super::AppState;
use super::error::ApiError;
use crate::flux::event::{Event, verify_signature};

/// notification-controller's events are small; a body this large is not one of them.
pub const BODY_LIMIT: usize = 3 * 1024 * 1024;

pub(super) async fn hook(State(state): State<AppState>, request: Request) -> Response {
    let response = match accept(&state, request).await {
        Ok(queued) => (StatusCode::ACCEPTED, Json(json!({ "queued": queued }))).into_response(),
        Err(err) => {
            tracing::warn!(code = err.status.as_u16(), reason = %err.message, "webhook refused");
            err.into_response()
        }
    };
    state.metrics.hook(response.status().as_u16());
    response
}

async fn accept(state: &AppState, request: Request) -> Result<Vec<String>, ApiError> {
    if let Some(token) = &state.auth.token {
        bearer_matches(request.headers(), token)
            .map_err(|why| ApiError::new(StatusCode::UNAUTHORIZED, why))?;
    }
    let headers = request.headers().clone();
    let body = Bytes::from_request(request, state)
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the body is over {BODY_LIMIT} bytes"),
                )
            } else {
                ApiError::new(rejection.status(), rejection.body_text())
            }
        })?;
    if let Some(key) = &state.auth.hmac_key {
        let signature = headers
            .get("x-signature")
            .map(|value| value.to_str().unwrap_or(""));
        verify_signature(key, &body, signature)
            .map_err(|err| ApiError::new(StatusCode::UNAUTHORIZED, err.to_string()))?;
    }
    let event = Event::parse(&body)
        .map_err(|err| ApiError::new(StatusCode::BAD_REQUEST, err.to_string()))?;
    let queued = state.backend.hook(&event);
    tracing::info!(
        kind = %event.involved_object.kind,
        namespace = %event.involved_object.namespace,
        name = %event.involved_object.name,
        reason = %event.reason,
        revision = event.metadata.get("revision").map(String::as_str).unwrap_or(""),
        queued = ?queued,
        "webhook accepted"
    );
    Ok(queued)
}

/// `Authorization: Bearer <token>` (scheme case-insensitive, RFC 9110), compared in constant time.
pub(super) fn bearer_matches(headers: &HeaderMap, token: &str) -> Result<(), &'static str> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or("the Authorization header is missing")?;
    let value = value
        .to_str()
        .map_err(|_| "the Authorization header is not text")?;
    let (scheme, presented) = value
        .split_once(' ')
        .ok_or("the Authorization header is not Bearer <token>")?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("the Authorization header is not Bearer <token>");
    }
    if constant_time_eq(presented.trim().as_bytes(), token.as_bytes()) {
        Ok(())
    } else {
        Err("the bearer token is wrong")
    }
}

/// Equal-length MACs of both under one fixed key, compared with `hmac`'s constant-time check:
/// neither the length nor the common prefix of the presented token shows in the timing.
fn constant_time_eq(presented: &[u8], expected: &[u8]) -> bool {
    type Tag = hmac::Hmac<sha2::Sha256>;
    let mac = |bytes: &[u8]| {
        let Ok(mut mac) = <Tag as hmac::digest::KeyInit>::new_from_slice(b"flux-converger bearer")
        else {
            return None;
        };
        mac.update(bytes);
        Some(mac)
    };
    match (mac(presented), mac(expected)) {
        (Some(presented), Some(expected)) => {
            let expected = expected.finalize().into_bytes();
            presented.verify_slice(&expected).is_ok()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn bearer_table() {
        // (case, Authorization header, Ok or Err(words of the reason))
        type BearerCase<'a> = (&'a str, Option<&'a [u8]>, Result<(), &'a str>);
        let cases: &[BearerCase] = &[
            ("right", Some(b"Bearer t0ken"), Ok(())),
            ("scheme case", Some(b"bearer t0ken"), Ok(())),
            ("missing", None, Err("missing")),
            ("wrong", Some(b"Bearer t0ke"), Err("wrong")),
            ("longer", Some(b"Bearer t0ken2"), Err("wrong")),
            ("empty token", Some(b"Bearer "), Err("wrong")),
            ("basic", Some(b"Basic dDBrZW4="), Err("not Bearer")),
            ("no scheme", Some(b"t0ken"), Err("not Bearer")),
            ("not text", Some(b"Bearer \xff"), Err("not text")),
        ];
        for (case, value, want) in cases {
            let mut headers = HeaderMap::new();
            if let Some(value) = value {
                let value = HeaderValue::from_bytes(value).expect("header value");
                headers.insert(header::AUTHORIZATION, value);
            }
            match (bearer_matches(&headers, "t0ken"), want) {
                (Ok(()), Ok(())) => {}
                (Err(got), Err(words)) => assert!(got.contains(words), "{case}: {got}"),
                (got, want) => panic!("{case}: got {got:?}, want {want:?}"),
            }
        }
    }
}
