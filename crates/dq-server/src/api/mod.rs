//! The HTTP/JSON API under `/v1` (see docs/api.md): the handlers, one
//! module per resource as in `dq-api` (`jobs`, `export`, `leases`,
//! `topics`, `schedules`, `keys`, `dead`, `health`); the routes that reach
//! them are [`crate::routes`]. This module keeps what they share: the JSON
//! reply, the path parameters read as a [`Topic`] and a [`JobId`], the
//! delay and due-time checks, a job and a body as replies carry them, and
//! the answers to unknown routes and methods.

pub(crate) mod dead;
pub(crate) mod export;
pub(crate) mod health;
pub(crate) mod jobs;
pub(crate) mod keys;
pub(crate) mod leases;
pub(crate) mod schedules;
pub(crate) mod topics;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use base64::engine::{GeneralPurpose, GeneralPurposeConfig};

use dq_api as wire;
use dq_core::*;

use crate::error::ApiError;
use crate::service::JobView;

/// Base64 as bodies are read: the standard alphabet with its padding, and
/// the unused bits of the last symbol not checked (`AB==` and `AA==` are
/// the same byte), so every string of the OpenAPI document's pattern reads.
const B64_IN: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// A JSON reply.
fn reply<T: serde::Serialize>(v: T) -> ApiResult {
    Ok(Json(v).into_response())
}

type ApiResult<T = Response> = Result<T, ApiError>;

fn topic(name: String) -> Result<Topic, ApiError> {
    Ok(Topic::new(name)?)
}

fn job_id(id: String) -> Result<JobId, ApiError> {
    Ok(JobId::new(id)?)
}

/// A delay in ms as a client sent it (`field` names it in the error): not
/// negative and within `max_delay`.
fn delay(limits: &Limits, field: &str, ms: i64) -> Result<u64, ApiError> {
    let ms = not_negative(field, ms)?;
    limits.check_delay(ms)?;
    Ok(ms)
}

/// A delay in ms as a client sent it, not negative.
fn not_negative(field: &str, ms: i64) -> Result<u64, ApiError> {
    u64::try_from(ms).map_err(|_| {
        ApiError::bad_request("invalid_delay", format!("{field} must be >= 0, got {ms}"))
    })
}

/// When a job is due, from `delay_ms` or `due_at_ms` (not both); `None`
/// when neither is given. Its bounds are checked too.
fn when(
    limits: &Limits,
    delay_ms: Option<i64>,
    due_at_ms: Option<i64>,
    now_ms: u64,
) -> Result<Option<When>, ApiError> {
    let when = when_sent(delay_ms, due_at_ms)?;
    match when {
        Some(When::DelayMs(ms)) => limits.check_delay(ms)?,
        Some(When::DueAtMs(t)) => limits.check_due_at(t, now_ms)?,
        _ => {}
    }
    Ok(when)
}

/// [`when`] without the bounds: one of `delay_ms` and `due_at_ms`, not
/// negative.
fn when_sent(delay_ms: Option<i64>, due_at_ms: Option<i64>) -> Result<Option<When>, ApiError> {
    match (delay_ms, due_at_ms) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "invalid_delay",
            "give delay_ms or due_at_ms, not both",
        )),
        (Some(d), None) => Ok(Some(When::DelayMs(not_negative("delay_ms", d)?))),
        (None, Some(t)) => {
            let t = u64::try_from(t).map_err(|_| {
                ApiError::bad_request("invalid_due_at", format!("due_at_ms must be >= 0, got {t}"))
            })?;
            Ok(Some(When::DueAtMs(t)))
        }
        (None, None) => Ok(None),
    }
}

/// When a job expires, from `expires_in_ms` or `expires_at_ms` (not
/// both, neither negative); `None` when neither is given. Its bounds are
/// [`NewJob::check_expiry`]'s.
fn expiry_sent(in_ms: Option<i64>, at_ms: Option<i64>) -> Result<Option<Expiry>, ApiError> {
    let bad = |m: String| Err(ApiError::bad_request("invalid_expiry", m));
    match (in_ms, at_ms) {
        (Some(_), Some(_)) => bad("give expires_in_ms or expires_at_ms, not both".into()),
        (Some(ms), None) => match u64::try_from(ms) {
            Ok(ms) => Ok(Some(Expiry::InMs(ms))),
            Err(_) => bad(format!("expires_in_ms must be > 0, got {ms}")),
        },
        (None, Some(t)) => match u64::try_from(t) {
            Ok(t) => Ok(Some(Expiry::AtMs(t))),
            Err(_) => bad(format!("expires_at_ms must be >= 0, got {t}")),
        },
        (None, None) => Ok(None),
    }
}

/// A body as replies carry it: JSON as it was sent, bytes as base64.
fn wire_body(body: &Body) -> (Option<wire::RawJson>, Option<String>) {
    match body {
        // Stored only after it parsed as JSON; the fallback is unreachable.
        Body::Json(s) => (
            Some(wire::RawJson::from_text(s.clone()).unwrap_or_else(|_| {
                wire::RawJson::from_text("null".into()).expect("null is JSON")
            })),
            None,
        ),
        Body::Bytes(b) => (None, Some(B64.encode(b))),
    }
}

/// A job's trace context as the wire carries it: `traceparent`, `tracestate`.
fn wire_trace(t: Option<&TraceContext>) -> (Option<String>, Option<String>) {
    match t {
        Some(t) => (
            Some(t.traceparent().to_string()),
            t.tracestate().map(str::to_string),
        ),
        None => (None, None),
    }
}

/// The trace context a client sent with job `id` of `topic`: kept when
/// well formed; a malformed one is dropped with a log line (tracing never
/// costs a job), as is a `tracestate` that is malformed alone.
fn trace_sent(
    traceparent: Option<&str>,
    tracestate: Option<&str>,
    topic: &Topic,
    id: Option<&str>,
) -> Option<TraceContext> {
    let parent = traceparent?;
    match TraceContext::parse(parent, tracestate) {
        Ok((ctx, None)) => Some(ctx),
        Ok((ctx, Some(bad))) => {
            tracing::info!(topic = %topic, id, reason = %bad, "tracestate dropped");
            Some(ctx)
        }
        Err(bad) => {
            tracing::info!(topic = %topic, id, reason = %bad, "trace context dropped");
            None
        }
    }
}

fn job(view: &JobView) -> wire::Job {
    let j = &view.job;
    let (body, body_base64) = wire_body(&j.body);
    let (traceparent, tracestate) = wire_trace(j.trace.as_ref());
    wire::Job {
        topic: view.topic.to_string(),
        id: j.id.to_string(),
        state: j.state,
        due_at_ms: j.due_at_ms,
        priority: j.priority,
        attempts: j.attempts,
        max_attempts: view.job.max_attempts,
        lease_ms: view.job.lease_ms,
        last_error: j.last_error.clone(),
        errors: j.errors.clone(),
        created_at_ms: j.created_at_ms,
        lease_deadline_ms: j.lease_deadline_ms,
        died_at_ms: j.died_at_ms,
        key: j.key.as_ref().map(ToString::to_string),
        expires_at_ms: j.expires_at_ms,
        traceparent,
        tracestate,
        body,
        body_base64,
    }
}

/// A known route with a method it does not take.
pub(crate) async fn method_not_allowed(method: axum::http::Method) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("this route does not take {method}"),
    )
}

/// Fallback for unknown routes.
pub(crate) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "route_not_found", "no such route")
}
