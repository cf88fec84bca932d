//! How every answer goes on the wire: a JSON body with its status code, and an `ApiError` as
//! its `Status` body.

use axum::body::Body;
use http::{Response, StatusCode, header};
use serde_json::Value;

use super::errors::ApiError;

pub fn json_response(code: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("static response parts are valid")
}

pub fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.body)
}
