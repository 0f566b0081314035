//! Jobs: enqueue (one, or a batch), get, cancel, reschedule.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use base64::Engine;
use dq_api as wire;
use dq_core::limits::MAX_BATCH;
use dq_core::*;

use super::{
    ApiResult, B64_IN, expiry_sent, job, job_id, reply, topic, trace_sent, when, when_sent,
};
use crate::error::ApiError;
use crate::extract::{ApiPath as Path, JsonBody, parse};
use crate::{AppState, Service};

/// The W3C trace context headers of an enqueue request: the default of
/// each job's `traceparent` and `tracestate`.
struct TraceHeaders {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl TraceHeaders {
    /// Reads them: one `traceparent` (more than one is none, as the
    /// recommendation says), the `tracestate` headers joined by commas.
    fn read(headers: &axum::http::HeaderMap) -> Self {
        let mut parents = headers.get_all("traceparent").iter();
        let traceparent = match (parents.next(), parents.next()) {
            (Some(v), None) => v.to_str().ok().map(str::to_string),
            _ => None,
        };
        let states: Vec<&str> = headers
            .get_all("tracestate")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        Self {
            traceparent,
            tracestate: (!states.is_empty()).then(|| states.join(",")),
        }
    }
}

/// A job as a client sent it, validated ([`NewJob::check`]); nothing is
/// written before this passes. Its trace context is its own fields', else
/// the request's headers' (a malformed one is dropped, not refused).
fn new_job(
    req: wire::EnqueueRequest,
    headers: &TraceHeaders,
    t: &Topic,
    limits: &Limits,
    now_ms: u64,
) -> Result<NewJob, ApiError> {
    // Its own fields whole, else the headers' (never a mix of the two).
    let (parent, state) = match &req.traceparent {
        Some(p) => (Some(p.as_str()), req.tracestate.as_deref()),
        None => (
            headers.traceparent.as_deref(),
            headers.tracestate.as_deref(),
        ),
    };
    let trace = trace_sent(parent, state, t, req.id.as_deref());
    let id = req.id.map(job_id).transpose()?;
    let body = match (req.body, req.body_base64) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "invalid_body",
                "give body or body_base64, not both",
            ));
        }
        (Some(raw), None) => Body::Json(raw.get().to_string()),
        (None, Some(b64)) => Body::Bytes(B64_IN.decode(b64.as_bytes()).map_err(|e| {
            ApiError::bad_request("invalid_body", format!("body_base64 is not base64: {e}"))
        })?),
        (None, None) => Body::Json("null".into()),
    };
    let when = when_sent(req.delay_ms, req.due_at_ms);
    let expires = expiry_sent(req.expires_in_ms, req.expires_at_ms);
    let key = req.key.map(JobKey::new).transpose();
    let mut job = NewJob {
        id,
        body,
        when: When::TopicDefault,
        priority: req.priority.unwrap_or(DEFAULT_PRIORITY),
        max_attempts: req.max_attempts,
        lease_ms: req.lease_ms,
        retry: req.retry,
        replace: req.replace,
        dedup_ms: req.dedup_ms,
        key: None,
        expires: None,
        put_order: false,
        trace,
    };
    // The first mistake is answered, in the order the API always took:
    // the body's checks, the form of the due time, the form of the expiry,
    // the other checks (their bounds among them), the key.
    job.check_body(limits)?;
    job.when = when?.unwrap_or(When::TopicDefault);
    job.expires = expires?;
    job.check(limits, now_ms)?;
    job.key = key?;
    Ok(job)
}

fn enqueued(e: &Enqueued) -> wire::Enqueued {
    wire::Enqueued {
        id: e.id.to_string(),
        created: e.created,
        replaced: e.replaced,
        deduplicated: e.deduplicated,
        due_at_ms: (!e.deduplicated).then_some(e.due_at_ms),
        state: (!e.deduplicated).then_some(e.state),
    }
}

/// An enqueue's topic exists, or may be created by it: 404
/// `topic_not_found` with `auto_create_topics` off for a topic nobody
/// created (nothing is read with it on).
async fn created_or_creating(svc: &Service, t: &Topic) -> Result<(), ApiError> {
    if !svc.auto_create_topics() {
        svc.check_topics_known(std::slice::from_ref(t)).await?;
    }
    Ok(())
}

/// `POST /v1/topics/{topic}/jobs`
pub(crate) async fn enqueue(
    State(st): State<AppState>,
    Path(t): Path<String>,
    headers: axum::http::HeaderMap,
    JsonBody(req): JsonBody<wire::EnqueueRequest>,
) -> ApiResult {
    let t = topic(t)?;
    let svc = &st.service;
    created_or_creating(svc, &t).await?;
    let trace = TraceHeaders::read(&headers);
    let job = new_job(req, &trace, &t, svc.limits(), svc.clock().now_ms())?;
    let e = svc.enqueue(&t, job).await?;
    let status = if e.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(enqueued(&e))).into_response())
}

/// `POST /v1/topics/{topic}/jobs:batch` — a result per job; invalid jobs are
/// reported and skipped, the valid ones written in one store call.
pub(crate) async fn enqueue_batch(
    State(st): State<AppState>,
    Path(t): Path<String>,
    headers: axum::http::HeaderMap,
    JsonBody(req): JsonBody<wire::BatchRequest>,
) -> ApiResult {
    let trace = TraceHeaders::read(&headers);
    let t = topic(t)?;
    if req.jobs.is_empty() || req.jobs.len() > MAX_BATCH {
        return Err(ApiError::bad_request(
            "invalid_batch",
            format!(
                "jobs must hold 1 to {MAX_BATCH} jobs, got {}",
                req.jobs.len()
            ),
        ));
    }
    let svc = &st.service;
    created_or_creating(svc, &t).await?;
    let now = svc.clock().now_ms();
    let mut results: Vec<Option<wire::BatchResult>> = Vec::with_capacity(req.jobs.len());
    let mut valid: Vec<NewJob> = Vec::new();
    let mut slots: Vec<usize> = Vec::new();
    for raw in &req.jobs {
        match parse::<wire::EnqueueRequest>(raw.get().as_bytes())
            .and_then(|r| new_job(r, &trace, &t, svc.limits(), now))
        {
            Ok(job) => {
                slots.push(results.len());
                results.push(None);
                valid.push(job);
            }
            Err(e) => results.push(Some(wire::BatchResult::Error(e.body()))),
        }
    }
    if !valid.is_empty() {
        let out = svc.enqueue_batch(&t, valid).await?;
        for (slot, e) in slots.into_iter().zip(out.iter()) {
            results[slot] = Some(wire::BatchResult::Enqueued(enqueued(e)));
        }
    }
    reply(wire::BatchResponse {
        results: results.into_iter().flatten().collect(),
    })
}

/// `GET /v1/topics/{topic}/jobs/{id}`
pub(crate) async fn get_job(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    reply(job(&st.service.get(&t, &id).await?))
}

/// `DELETE /v1/topics/{topic}/jobs/{id}`
pub(crate) async fn cancel_job(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    let was = st.service.cancel(&t, &id).await?;
    reply(wire::Cancelled {
        id: id.to_string(),
        cancelled: true,
        state: was,
    })
}

/// `PATCH /v1/topics/{topic}/jobs/{id}` — move a waiting job.
pub(crate) async fn reschedule_job(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<wire::RescheduleRequest>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    let svc = &st.service;
    let now = svc.clock().now_ms();
    let due = match when(svc.limits(), req.delay_ms, req.due_at_ms, now)? {
        Some(When::DelayMs(d)) => now + d,
        // In the past: due now (the store keeps it so).
        Some(When::DueAtMs(t)) => t.max(now),
        _ => {
            return Err(ApiError::bad_request(
                "invalid_delay",
                "give exactly one of delay_ms and due_at_ms",
            ));
        }
    };
    svc.reschedule(&t, &id, due).await?;
    reply(wire::Rescheduled {
        id: id.to_string(),
        due_at_ms: due,
    })
}
