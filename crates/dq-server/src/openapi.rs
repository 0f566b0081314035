//! `GET /openapi.json`: the API described as OpenAPI 3.1.
//!
//! The document is kept by hand in `openapi.json` beside this file; a test
//! checks that it names every route of [`crate::app`] and no other.

use axum::http::header;
use axum::response::IntoResponse;

/// The document's text.
pub(crate) const OPENAPI_JSON: &str = include_str!("openapi.json");

pub(crate) async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}
