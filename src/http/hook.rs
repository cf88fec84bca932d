//! `POST /hook`: notification-controller's `generic` / `generic-hmac` deliveries.
//!
//! The order is chosen so that nothing unauthenticated costs much: the bearer token and the
//! form of `X-Signature` are checked before the body is read; the body is read under the 3 MiB
//! cap, in one of two bounded lanes ([`BodyLanes`]), so that however many are posted at once
//! only a few MiB are held; the HMAC is checked (on the blocking pool) before the bytes are
//! parsed, and only an authenticated, well-formed event reaches the backend. The answer is immediate (202): the work runs in the background, because Flux waits
//! at most 15 s and retries a slow receiver.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::BytesMut;
use futures::StreamExt;
use hmac::Mac;
use serde_json::json;
use tokio::sync::Semaphore;

use super::AppState;
use super::error::ApiError;
use crate::flux::event::{Event, Signature, SignatureError};

/// notification-controller's own event server caps a body at 3 MiB; a body this large is not
/// one of its events.
pub const BODY_LIMIT: usize = 3 * 1024 * 1024;

/// A body announced (`Content-Length`) at most this large is a small one: Flux's events are
/// a few kB.
pub const SMALL_BODY: usize = 64 * 1024;

/// Small bodies read at once (at most 4 MiB held).
pub const SMALL_BODIES: usize = 64;

/// Other bodies (larger, or without a `Content-Length`) read at once (at most 12 MiB held):
/// a flood of large posts waits here, not in memory, and does not hold up the small ones.
pub const LARGE_BODIES: usize = 4;

/// The two lanes bodies are read in, shared by every clone of the router: what bounds the
/// memory unauthenticated bodies can hold however many are posted at once (the HMAC can only
/// be checked once the whole body is in).
#[derive(Debug)]
pub struct BodyLanes {
    small: Semaphore,
    large: Semaphore,
}

impl Default for BodyLanes {
    fn default() -> Self {
        BodyLanes {
            small: Semaphore::new(SMALL_BODIES),
            large: Semaphore::new(LARGE_BODIES),
        }
    }
}

pub(super) async fn hook(
    State(state): State<AppState>,
    Extension(lanes): Extension<Arc<BodyLanes>>,
    request: Request,
) -> Response {
    let response = match accept(&state, &lanes, request).await {
        Ok(queued) => (StatusCode::ACCEPTED, Json(json!({ "queued": queued }))).into_response(),
        Err(err) => {
            tracing::warn!(code = err.status.as_u16(), reason = %err.message, "webhook refused");
            err.into_response()
        }
    };
    state.metrics.hook(response.status().as_u16());
    response
}

async fn accept(
    state: &AppState,
    lanes: &BodyLanes,
    request: Request,
) -> Result<Vec<String>, ApiError> {
    if let Some(token) = &state.auth.token {
        bearer_matches(request.headers(), token)
            .map_err(|why| ApiError::new(StatusCode::UNAUTHORIZED, why))?;
    }
    let (parts, body) = request.into_parts();
    // The signature header is read before the body: without a well-formed one nothing is read.
    let signature = match &state.auth.hmac_key {
        Some(key) => {
            let header = parts
                .headers
                .get("x-signature")
                .map(|value| value.to_str().unwrap_or(""));
            let signature = header
                .ok_or(SignatureError::Missing)
                .and_then(Signature::parse)
                .map_err(|err| ApiError::new(StatusCode::UNAUTHORIZED, err.to_string()))?;
            Some((key.clone(), signature))
        }
        None => None,
    };
    // The lane is held until the body is dropped: hashing and parsing included, so at most a
    // lane's worth of bodies is in memory at once.
    let (body, _lane) = read_body(lanes, &parts.headers, body).await?;
    if let Some((key, signature)) = signature {
        // Hashing 3 MiB takes milliseconds of CPU: on the blocking pool, so a flood of large
        // posts never keeps the async workers (and `/healthz`) waiting.
        let checked = body.clone();
        let verdict = tokio::task::spawn_blocking(move || signature.verify(&key, &checked))
            .await
            .unwrap_or(Err(SignatureError::Mismatch));
        verdict.map_err(|err| ApiError::new(StatusCode::UNAUTHORIZED, err.to_string()))?;
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

/// The body of a webhook (`/hook`, `/hook/argocd`), read under [`BODY_LIMIT`] in one of the
/// two [`BodyLanes`]: an announced `Content-Length` over the cap is 413 before anything is
/// read. Returned with its lane's permit: the caller holds it for as long as it holds the body
/// (released early, a flood of large bodies would all be in memory at once while they are
/// checked).
pub(super) async fn read_body<'a>(
    lanes: &'a BodyLanes,
    headers: &HeaderMap,
    body: Body,
) -> Result<(bytes::Bytes, tokio::sync::SemaphorePermit<'a>), ApiError> {
    let announced = content_length(headers);
    if announced.is_some_and(|n| n > BODY_LIMIT as u64) {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over {BODY_LIMIT} bytes"),
        ));
    }
    let lane = match announced {
        Some(n) if n <= SMALL_BODY as u64 => &lanes.small,
        _ => &lanes.large,
    };
    let reading = lane
        .acquire()
        .await
        .map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down"))?;
    Ok((read_capped(body, announced).await?, reading))
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// The body, frame by frame, into one buffer of at most [`BODY_LIMIT`] bytes (sized by
/// `Content-Length`, so it is allocated once): one byte more is 413, whatever
/// `Content-Length` said. A body that stops sending fails here once the request timeout's
/// body layer gives up.
async fn read_capped(body: Body, announced: Option<u64>) -> Result<bytes::Bytes, ApiError> {
    let capacity = announced.map_or(SMALL_BODY, |n| n as usize).min(BODY_LIMIT);
    let mut buffer = BytesMut::with_capacity(capacity);
    let mut frames = body.into_data_stream();
    while let Some(data) = frames.next().await {
        let data = data.map_err(|err| {
            ApiError::new(StatusCode::BAD_REQUEST, format!("reading the body: {err}"))
        })?;
        if buffer.len() + data.len() > BODY_LIMIT {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is over {BODY_LIMIT} bytes"),
            ));
        }
        buffer.extend_from_slice(&data);
    }
    Ok(buffer.freeze())
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
