//! Export and import: a topic's jobs listed page by page with everything a
//! store keeps, and written back into another store.

use axum::extract::State;
use base64::Engine;
use dq_api as wire;
use dq_core::limits::{self, MAX_BATCH};
use dq_core::*;
use serde::Deserialize;

use super::{ApiResult, B64_IN, reply, topic, trace_sent, wire_body, wire_trace};
use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiPath as Path, ApiQuery as Query, JsonBody};

/// A job as an export lists it.
fn record(j: &ListedJob) -> wire::JobRecord {
    let i = &j.info;
    let (body, body_base64) = wire_body(&i.body);
    let (traceparent, tracestate) = wire_trace(i.trace.as_ref());
    wire::JobRecord {
        id: i.id.to_string(),
        state: i.state,
        due_at_ms: i.due_at_ms,
        priority: i.priority,
        attempts: i.attempts,
        max_attempts: j.max_attempts,
        lease_ms: j.lease_ms,
        retry: j.retry.clone(),
        dedup_ms: j.dedup_ms,
        last_error: i.last_error.clone(),
        errors: i.errors.clone(),
        created_at_ms: Some(i.created_at_ms),
        lease_deadline_ms: i.lease_deadline_ms,
        died_at_ms: i.died_at_ms,
        key: i.key.as_ref().map(ToString::to_string),
        traceparent,
        tracestate,
        body,
        body_base64,
    }
}

/// A job to import as a client sent it, its body decoded (the checks of
/// its values are [`ImportJob::check`], in the service).
fn import_job(
    r: wire::JobRecord,
    i: usize,
    now_ms: u64,
    limits: &dq_core::Limits,
    topic: &Topic,
) -> Result<ImportJob, ApiError> {
    let at = |code: &'static str, what: String| {
        ApiError::bad_request(code, format!("jobs[{i}] ({}): {what}", r.id))
    };
    // Both bounded in every state, as the document says (a reserved
    // record's lease deadline becomes its due time, and its due_at_ms is
    // not kept, but one out of bounds is still refused).
    for (field, t) in [
        ("due_at_ms", Some(r.due_at_ms)),
        ("lease_deadline_ms", r.lease_deadline_ms),
    ] {
        if let Some(t) = t {
            limits
                .check_due_at(t, now_ms)
                .map_err(|e| at(e.code, format!("{field}: {}", e.message)))?;
        }
    }
    let id = JobId::new(r.id.clone()).map_err(|e| at(e.code, e.message))?;
    let key = r
        .key
        .clone()
        .map(JobKey::new)
        .transpose()
        .map_err(|e| at(e.code, e.message))?;
    // A reserved job's lease belongs to the store it came from: it is
    // imported ready, due at its lease deadline (when it would have been
    // handed out again); a listing's lease_deadline_ms says nothing more.
    let (state, due_at_ms) = match r.state {
        JobState::Reserved => (JobState::Ready, r.lease_deadline_ms.unwrap_or(r.due_at_ms)),
        s => (s, r.due_at_ms),
    };
    let body = match (r.body, r.body_base64) {
        (Some(_), Some(_)) => {
            return Err(at(
                "invalid_body",
                "give body or body_base64, not both".into(),
            ));
        }
        (Some(raw), None) => {
            limits::check_json_depth(raw.get()).map_err(|e| at(e.code, e.message))?;
            Body::Json(raw.get().to_string())
        }
        (None, Some(b64)) => Body::Bytes(
            B64_IN
                .decode(b64.as_bytes())
                .map_err(|e| at("invalid_body", format!("body_base64 is not base64: {e}")))?,
        ),
        (None, None) => Body::Json("null".into()),
    };
    Ok(ImportJob {
        id,
        state,
        due_at_ms,
        priority: r.priority,
        attempts: r.attempts,
        max_attempts: r.max_attempts,
        lease_ms: r.lease_ms,
        retry: r.retry,
        dedup_ms: r.dedup_ms,
        body,
        // As a nack's: a longer error is cut, not refused.
        last_error: r.last_error.map(|e| limits::clip_error(&e).to_string()),
        errors: r
            .errors
            .into_iter()
            .map(|e| dq_core::AttemptError {
                error: limits::clip_error(&e.error).to_string(),
                ..e
            })
            .collect(),
        created_at_ms: r.created_at_ms.unwrap_or(now_ms),
        // Only a dead letter keeps when it died (a listing of another
        // state has none; one sent anyway is not kept).
        died_at_ms: r.died_at_ms.filter(|_| state == JobState::Dead),
        key,
        trace: trace_sent(
            r.traceparent.as_deref(),
            r.tracestate.as_deref(),
            topic,
            Some(&r.id),
        ),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobsQuery {
    state: Option<JobState>,
    cursor: Option<String>,
    limit: Option<usize>,
}

/// `GET /v1/topics/{topic}/jobs?state=&limit=&cursor=` — one page of every
/// job of a topic (or of one state), for an export.
pub(crate) async fn list_jobs(
    State(st): State<AppState>,
    Path(t): Path<String>,
    Query(q): Query<JobsQuery>,
) -> ApiResult {
    let t = topic(t)?;
    let page = st
        .service
        .list_jobs(&t, q.state, q.cursor.as_deref(), q.limit.unwrap_or(100))
        .await?;
    reply(wire::JobPage {
        jobs: page.jobs.iter().map(record).collect(),
        cursor: page.cursor,
    })
}

/// `POST /v1/topics/{topic}/jobs:import` — jobs as another store had them;
/// one bad job refuses the batch (nothing written).
pub(crate) async fn import_jobs(
    State(st): State<AppState>,
    Path(t): Path<String>,
    JsonBody(req): JsonBody<wire::ImportRequest>,
) -> ApiResult {
    let t = topic(t)?;
    let svc = &st.service;
    let now = svc.clock().now_ms();
    if req.jobs.is_empty() || req.jobs.len() > MAX_BATCH {
        return Err(ApiError::bad_request(
            "invalid_batch",
            format!(
                "jobs must hold 1 to {MAX_BATCH} jobs, got {}",
                req.jobs.len()
            ),
        ));
    }
    let jobs = req
        .jobs
        .into_iter()
        .enumerate()
        .map(|(i, r)| import_job(r, i, now, svc.limits(), &t))
        .collect::<Result<Vec<_>, _>>()?;
    let out = svc.import_jobs(&t, jobs).await?;
    reply(wire::ImportResponse {
        results: out
            .iter()
            .map(|i| wire::ImportResult {
                id: i.id.to_string(),
                created: i.created,
                deduplicated: i.deduplicated,
                state: (!i.deduplicated).then_some(i.state),
            })
            .collect(),
    })
}
