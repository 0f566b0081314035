//! The HTTP/JSON API under `/v1` (see docs/api.md).

use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use base64::engine::{GeneralPurpose, GeneralPurposeConfig};

/// Base64 as bodies are read: the standard alphabet with its padding, and
/// the unused bits of the last symbol not checked (`AB==` and `AA==` are
/// the same byte), so every string of the OpenAPI document's pattern reads.
const B64_IN: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);
use dq_api as wire;
use dq_core::limits::{self, MAX_BATCH, MAX_RESERVE};
use dq_core::*;
use serde::Deserialize;

use crate::AppState;
use crate::auth::Access;
use crate::error::ApiError;
use crate::extract::{ApiPath as Path, ApiQuery as Query, JsonBody, parse};
use crate::keys::Action;
use crate::service::{AckItem, JobView, NackItem, TouchItem};

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
    let ms = u64::try_from(ms).map_err(|_| {
        ApiError::bad_request("invalid_delay", format!("{field} must be >= 0, got {ms}"))
    })?;
    limits.check_delay(ms)?;
    Ok(ms)
}

/// When a job is due, from `delay_ms` or `due_at_ms` (not both); `None`
/// when neither is given.
fn when(
    limits: &Limits,
    delay_ms: Option<i64>,
    due_at_ms: Option<i64>,
    now_ms: u64,
) -> Result<Option<When>, ApiError> {
    match (delay_ms, due_at_ms) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "invalid_delay",
            "give delay_ms or due_at_ms, not both",
        )),
        (Some(d), None) => Ok(Some(When::DelayMs(delay(limits, "delay_ms", d)?))),
        (None, Some(t)) => {
            let t = u64::try_from(t).map_err(|_| {
                ApiError::bad_request("invalid_due_at", format!("due_at_ms must be >= 0, got {t}"))
            })?;
            limits.check_due_at(t, now_ms)?;
            Ok(Some(When::DueAtMs(t)))
        }
        (None, None) => Ok(None),
    }
}

/// A job as a client sent it, validated; nothing is written before this passes.
fn new_job(req: wire::EnqueueRequest, limits: &Limits, now_ms: u64) -> Result<NewJob, ApiError> {
    let id = req.id.map(job_id).transpose()?;
    let body = match (req.body, req.body_base64) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "invalid_body",
                "give body or body_base64, not both",
            ));
        }
        (Some(raw), None) => {
            limits::check_json_depth(raw.get())?;
            Body::Json(raw.get().to_string())
        }
        (None, Some(b64)) => Body::Bytes(B64_IN.decode(b64.as_bytes()).map_err(|e| {
            ApiError::bad_request("invalid_body", format!("body_base64 is not base64: {e}"))
        })?),
        (None, None) => Body::Json("null".into()),
    };
    limits.check_body(body.len())?;
    let when = when(limits, req.delay_ms, req.due_at_ms, now_ms)?.unwrap_or(When::TopicDefault);
    if let Some(n) = req.max_attempts {
        limits::check_max_attempts(n)?;
    }
    if let Some(ms) = req.lease_ms {
        limits::check_lease(ms)?;
    }
    if let Some(r) = &req.retry {
        r.validate()?;
    }
    if let Some(ms) = req.dedup_ms {
        limits::check_dedup(ms)?;
    }
    let key = req.key.map(JobKey::new).transpose()?;
    Ok(NewJob {
        id,
        body,
        when,
        priority: req.priority.unwrap_or(DEFAULT_PRIORITY),
        max_attempts: req.max_attempts,
        lease_ms: req.lease_ms,
        retry: req.retry,
        replace: req.replace,
        dedup_ms: req.dedup_ms,
        key,
    })
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

fn job(view: &JobView) -> wire::Job {
    let j = &view.job;
    let (body, body_base64) = wire_body(&j.body);
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
        created_at_ms: j.created_at_ms,
        lease_deadline_ms: j.lease_deadline_ms,
        died_at_ms: j.died_at_ms,
        key: j.key.as_ref().map(ToString::to_string),
        body,
        body_base64,
    }
}

fn leased(l: &Lease) -> wire::Leased {
    let (body, body_base64) = wire_body(&l.body);
    wire::Leased {
        topic: l.topic.to_string(),
        id: l.id.to_string(),
        token: l.token.clone(),
        attempt: l.attempt,
        due_at_ms: l.due_at_ms,
        lease_deadline_ms: l.lease_deadline_ms,
        priority: l.priority,
        body,
        body_base64,
    }
}

/// `POST /v1/topics/{topic}/jobs`
pub(crate) async fn enqueue(
    State(st): State<AppState>,
    Path(t): Path<String>,
    JsonBody(req): JsonBody<wire::EnqueueRequest>,
) -> ApiResult {
    let t = topic(t)?;
    let svc = &st.service;
    let job = new_job(req, svc.limits(), svc.clock().now_ms())?;
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
    JsonBody(req): JsonBody<wire::BatchRequest>,
) -> ApiResult {
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
    let now = svc.clock().now_ms();
    let mut results: Vec<Option<wire::BatchResult>> = Vec::with_capacity(req.jobs.len());
    let mut valid: Vec<NewJob> = Vec::new();
    let mut slots: Vec<usize> = Vec::new();
    for raw in &req.jobs {
        match parse::<wire::EnqueueRequest>(raw.get().as_bytes())
            .and_then(|r| new_job(r, svc.limits(), now))
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

/// A job as an export lists it.
fn record(j: &ListedJob) -> wire::JobRecord {
    let i = &j.info;
    let (body, body_base64) = wire_body(&i.body);
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
        created_at_ms: Some(i.created_at_ms),
        lease_deadline_ms: i.lease_deadline_ms,
        died_at_ms: i.died_at_ms,
        key: i.key.as_ref().map(ToString::to_string),
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
        created_at_ms: r.created_at_ms.unwrap_or(now_ms),
        // Only a dead letter keeps when it died (a listing of another
        // state has none; one sent anyway is not kept).
        died_at_ms: r.died_at_ms.filter(|_| state == JobState::Dead),
        key,
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
        .map(|(i, r)| import_job(r, i, now, svc.limits()))
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

/// Most topics one reserve may name.
const MAX_RESERVE_TOPICS: usize = 1000;

/// `POST /v1/reserve` — lease up to `max` due jobs from the topics, waiting
/// up to `wait_ms` for one to become due.
pub(crate) async fn reserve(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    JsonBody(req): JsonBody<wire::ReserveRequest>,
) -> ApiResult {
    if req.topics.is_empty() || req.topics.len() > MAX_RESERVE_TOPICS {
        return Err(ApiError::bad_request(
            "invalid_topics",
            format!("topics must name 1 to {MAX_RESERVE_TOPICS} topics"),
        ));
    }
    let mut topics: Vec<Topic> = Vec::with_capacity(req.topics.len());
    for name in req.topics {
        let t = topic(name)?;
        access.require(Action::Consume, t.as_str())?;
        if !topics.contains(&t) {
            topics.push(t);
        }
    }
    let max = req.max.unwrap_or(1);
    if !(1..=MAX_RESERVE).contains(&max) {
        return Err(ApiError::bad_request(
            "invalid_max",
            format!("max must be between 1 and {MAX_RESERVE}, got {max}"),
        ));
    }
    if let Some(ms) = req.lease_ms {
        limits::check_lease(ms)?;
    }
    let wait_ms = req.wait_ms.unwrap_or(0);
    let max_wait = st.service.limits().max_wait_ms;
    if wait_ms > max_wait {
        return Err(ApiError::bad_request(
            "invalid_wait",
            format!("wait_ms must be at most {max_wait} (max_wait), got {wait_ms}"),
        ));
    }
    let leases = st
        .service
        .reserve(&topics, max, req.lease_ms, wait_ms)
        .await?;
    reply(wire::Reserved {
        jobs: leases.iter().map(leased).collect(),
    })
}

/// `POST /v1/topics/{topic}/jobs/{id}/ack`
pub(crate) async fn ack(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<wire::AckRequest>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    st.service.ack(&t, &id, &req.token).await?;
    reply(wire::Acked {
        id: id.to_string(),
        acked: true,
    })
}

/// A nack's `last_error` when it gives none.
const DEFAULT_NACK_ERROR: &str = "nacked";

/// A nack's `retry_in_ms` as a client sent it: within the delay bounds, and
/// not with `dead: true`.
fn retry_in(limits: &Limits, ms: Option<i64>, dead: bool) -> Result<Option<u64>, ApiError> {
    let retry_in = ms.map(|ms| delay(limits, "retry_in_ms", ms)).transpose()?;
    if dead && retry_in.is_some() {
        return Err(ApiError::bad_request(
            "invalid_delay",
            "retry_in_ms makes no sense with dead: true",
        ));
    }
    Ok(retry_in)
}

/// The state a nack left the job in, and when it is due again if scheduled.
fn nacked_state(out: NackOutcome) -> (JobState, Option<u64>) {
    match out {
        NackOutcome::Retry { due_at_ms, .. } => (JobState::Scheduled, Some(due_at_ms)),
        NackOutcome::Dead { .. } => (JobState::Dead, None),
    }
}

/// `POST /v1/topics/{topic}/jobs/{id}/nack`
pub(crate) async fn nack(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<wire::NackRequest>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    let svc = &st.service;
    let retry_in = retry_in(svc.limits(), req.retry_in_ms, req.dead)?;
    let error = req.error.unwrap_or_else(|| DEFAULT_NACK_ERROR.into());
    let nack = Nack {
        token: &req.token,
        error: &error,
        retry_in_ms: retry_in,
        dead: req.dead,
        priority: None,
    };
    let (state, due_at_ms) = nacked_state(svc.nack(&t, &id, nack).await?);
    reply(wire::Nacked {
        id: id.to_string(),
        state,
        due_at_ms,
    })
}

/// `POST /v1/topics/{topic}/jobs/{id}/release` — give a reserved job back
/// without counting the attempt, due after `delay_ms` (default 0).
pub(crate) async fn release(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<wire::ReleaseRequest>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    let svc = &st.service;
    let delay = delay(svc.limits(), "delay_ms", req.delay_ms.unwrap_or(0))?;
    let due = svc.release(&t, &id, &req.token, delay).await?;
    reply(wire::Released {
        id: id.to_string(),
        state: if delay == 0 {
            JobState::Ready
        } else {
            JobState::Scheduled
        },
        due_at_ms: due,
    })
}

/// `POST /v1/topics/{topic}/jobs/{id}/touch`
pub(crate) async fn touch(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<wire::TouchRequest>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    let deadline = st.service.touch(&t, &id, &req.token, req.lease_ms).await?;
    reply(wire::Touched {
        id: id.to_string(),
        lease_deadline_ms: deadline,
    })
}

/// Checks a batch of lease holders' calls (`ack:batch`, `nack:batch`,
/// `touch:batch`; `field` names its items): 1 to [`MAX_BATCH`] items, and
/// the key may consume every topic named (a batch touching a topic outside
/// the key's scopes is refused whole).
fn check_batch<'a>(
    access: &Access,
    field: &str,
    topics: impl ExactSizeIterator<Item = &'a str>,
) -> Result<(), ApiError> {
    if topics.len() == 0 || topics.len() > MAX_BATCH {
        return Err(ApiError::bad_request(
            "invalid_batch",
            format!(
                "{field} must hold 1 to {MAX_BATCH} items, got {}",
                topics.len()
            ),
        ));
    }
    for t in topics {
        access.require(Action::Consume, t)?;
    }
    Ok(())
}

/// A batch's items as `parse` reads them: those that parse, and for each
/// item in order either its place among them or its error.
struct Parsed<T> {
    valid: Vec<T>,
    slots: Vec<Result<usize, ApiError>>,
}

impl<T> Parsed<T> {
    fn new<W>(items: Vec<W>, parse: impl Fn(W) -> Result<T, ApiError>) -> Self {
        let mut valid = Vec::new();
        let slots = items
            .into_iter()
            .map(|w| {
                let item = parse(w)?;
                valid.push(item);
                Ok(valid.len() - 1)
            })
            .collect();
        Self { valid, slots }
    }

    /// A result per item, in order: `ok` of the store's answer for the
    /// items that parsed, `error` of the error of those that did not.
    fn results<R, O>(
        self,
        done: Vec<crate::service::Result<R>>,
        ok: impl Fn(R) -> O,
        error: impl Fn(wire::ErrorBody) -> O,
    ) -> Vec<O> {
        let mut done: Vec<Option<_>> = done.into_iter().map(Some).collect();
        self.slots
            .into_iter()
            .map(|slot| match slot.map(|i| done[i].take()) {
                Ok(Some(Ok(r))) => ok(r),
                Ok(Some(Err(e))) => error(ApiError::from(e).body()),
                Ok(None) => error(
                    ApiError::from(crate::service::Error::from(StoreError::Unavailable(
                        "no answer for the item".into(),
                    )))
                    .body(),
                ),
                Err(e) => error(e.body()),
            })
            .collect()
    }
}

/// `POST /v1/ack:batch` — a result per ack.
pub(crate) async fn ack_batch(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    JsonBody(req): JsonBody<wire::AckBatchRequest>,
) -> ApiResult {
    check_batch(&access, "acks", req.acks.iter().map(|a| a.topic.as_str()))?;
    // Items that do not parse get their error; the others are acked together.
    let parsed = Parsed::new(req.acks, |a| {
        Ok(AckItem {
            topic: topic(a.topic)?,
            id: job_id(a.id)?,
            token: a.token,
        })
    });
    let done = st.service.ack_batch(&parsed.valid).await;
    reply(wire::AckBatchResponse {
        results: parsed.results(
            done,
            |()| wire::AckResult::Acked { acked: true },
            wire::AckResult::Error,
        ),
    })
}

/// `POST /v1/nack:batch` — a result per nack, each as `POST …/nack`
/// answers it (and a new priority if asked).
pub(crate) async fn nack_batch(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    JsonBody(req): JsonBody<wire::NackBatchRequest>,
) -> ApiResult {
    check_batch(&access, "nacks", req.nacks.iter().map(|n| n.topic.as_str()))?;
    let svc = &st.service;
    // Items that do not parse get their error; the others are nacked together.
    let parsed = Parsed::new(req.nacks, |n| {
        Ok(NackItem {
            topic: topic(n.topic)?,
            id: job_id(n.id)?,
            token: n.token,
            error: n.error.unwrap_or_else(|| DEFAULT_NACK_ERROR.into()),
            retry_in_ms: retry_in(svc.limits(), n.retry_in_ms, n.dead)?,
            dead: n.dead,
            priority: n.priority,
        })
    });
    let done = svc.nack_batch(&parsed.valid).await;
    reply(wire::NackBatchResponse {
        results: parsed.results(
            done,
            |out| {
                let (state, due_at_ms) = nacked_state(out);
                wire::NackResult::Nacked { state, due_at_ms }
            },
            wire::NackResult::Error,
        ),
    })
}

/// `POST /v1/touch:batch` — a result per lease extension, each as
/// `POST …/touch` answers it.
pub(crate) async fn touch_batch(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    JsonBody(req): JsonBody<wire::TouchBatchRequest>,
) -> ApiResult {
    check_batch(
        &access,
        "touches",
        req.touches.iter().map(|t| t.topic.as_str()),
    )?;
    let parsed = Parsed::new(req.touches, |t| {
        Ok(TouchItem {
            topic: topic(t.topic)?,
            id: job_id(t.id)?,
            token: t.token,
            lease_ms: t.lease_ms,
        })
    });
    let done = st.service.touch_batch(&parsed.valid).await;
    reply(wire::TouchBatchResponse {
        results: parsed.results(
            done,
            |lease_deadline_ms| wire::TouchResult::Touched { lease_deadline_ms },
            wire::TouchResult::Error,
        ),
    })
}

/// `GET /v1/topics?limit=&cursor=&prefix=` — one page of the topics in
/// name order, with their counts (read concurrently); `next_cursor` goes
/// on. Topics the key may not read are left out of the page, so a page
/// may be short while more follow.
pub(crate) async fn list_topics(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Query(q): Query<wire::TopicListQuery>,
) -> ApiResult {
    let page = st
        .service
        .list_topics(
            q.cursor.as_deref(),
            false,
            q.prefix.as_deref().unwrap_or(""),
            q.limit.unwrap_or(limits::TOPICS_PAGE),
        )
        .await?;
    let next_cursor = match page.more {
        true => page.topics.last().map(Topic::to_string),
        false => None,
    };
    let visible: Vec<Topic> = page
        .topics
        .into_iter()
        .filter(|t| access.allows(Action::Read, t.as_str()))
        .collect();
    let stats = st.service.stats_of(&visible).await?;
    reply(wire::TopicList {
        topics: visible
            .into_iter()
            .zip(stats)
            .map(|(t, stats)| wire::TopicInfo {
                name: t.to_string(),
                stats,
                config: None,
            })
            .collect(),
        next_cursor,
    })
}

/// `GET /v1/topics/{topic}`
pub(crate) async fn get_topic(State(st): State<AppState>, Path(t): Path<String>) -> ApiResult {
    let t = topic(t)?;
    let cfg = st.service.known_topic(&t).await?;
    reply(wire::TopicInfo {
        stats: st.service.stats(&t).await?,
        name: t.to_string(),
        config: Some(cfg.redacted()),
    })
}

/// `PUT /v1/topics/{topic}` — fields left out keep their value.
pub(crate) async fn put_topic(
    State(st): State<AppState>,
    Path(t): Path<String>,
    JsonBody(patch): JsonBody<wire::PutTopicRequest>,
) -> ApiResult {
    let t = topic(t)?;
    let cfg = st.service.configure_topic(&t, patch).await?;
    reply(wire::TopicConfigured {
        name: t.to_string(),
        config: cfg.redacted(),
    })
}

/// `DELETE /v1/topics/{topic}` — deletes the topic and all its jobs.
pub(crate) async fn delete_topic(State(st): State<AppState>, Path(t): Path<String>) -> ApiResult {
    let t = topic(t)?;
    let deleted = st.service.delete_topic(&t).await?;
    reply(wire::TopicDeleted {
        name: t.to_string(),
        deleted_jobs: deleted,
    })
}

/// `PUT /v1/schedules/{name}` — 201 created, 200 replaced; the reply
/// shows the next slots.
pub(crate) async fn put_schedule(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Path(name): Path<String>,
    JsonBody(spec): JsonBody<wire::ScheduleSpec>,
) -> ApiResult {
    access.require(Action::Manage, &spec.topic)?;
    if !matches!(access, Access::Open | Access::Admin) {
        // Replacing a schedule moves its jobs off its old topic too.
        match st.service.schedule(&name).await {
            Ok(old) => access.require(Action::Manage, &old.spec.topic)?,
            Err(crate::service::Error::ScheduleNotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (created, info) = st.service.put_schedule(&name, spec).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(info)).into_response())
}

/// `GET /v1/schedules`
pub(crate) async fn list_schedules(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
) -> ApiResult {
    let mut schedules = st.service.schedules().await?;
    schedules.retain(|s| access.allows(Action::Read, &s.spec.topic));
    reply(wire::ScheduleList { schedules })
}

/// `GET /v1/schedules/{name}`
pub(crate) async fn get_schedule(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Path(name): Path<String>,
) -> ApiResult {
    let info = st.service.schedule(&name).await?;
    access.require(Action::Read, &info.spec.topic)?;
    reply(info)
}

/// Checks `access` may manage the schedule `name` (its topic's scope; a
/// stored schedule dq cannot read is the admin's).
async fn may_manage_schedule(st: &AppState, access: &Access, name: &str) -> ApiResult<()> {
    if matches!(access, Access::Open | Access::Admin) {
        return Ok(());
    }
    match st.service.schedule(name).await {
        Ok(info) => access.require(Action::Manage, &info.spec.topic),
        Err(crate::service::Error::ScheduleNotFound(n)) => {
            Err(crate::service::Error::ScheduleNotFound(n).into())
        }
        Err(_) => access.require(Action::Admin, ""),
    }
}

/// `DELETE /v1/schedules/{name}`
pub(crate) async fn delete_schedule(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Path(name): Path<String>,
) -> ApiResult {
    may_manage_schedule(&st, &access, &name).await?;
    st.service.delete_schedule(&name).await?;
    reply(wire::ScheduleDeleted {
        name,
        deleted: true,
    })
}

/// `POST /v1/schedules/{name}/pause`
pub(crate) async fn pause_schedule(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Path(name): Path<String>,
) -> ApiResult {
    may_manage_schedule(&st, &access, &name).await?;
    reply(st.service.pause_schedule(&name, true).await?)
}

/// `POST /v1/schedules/{name}/resume`
pub(crate) async fn resume_schedule(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Path(name): Path<String>,
) -> ApiResult {
    may_manage_schedule(&st, &access, &name).await?;
    reply(st.service.pause_schedule(&name, false).await?)
}

/// Without an admin token, keep an admin key: else nobody could manage
/// keys any more. Refuses (409 `admin_key_needed`) a change that would leave
/// none: a first key without `admin`, or revoking the last admin key.
fn keep_an_admin(st: &AppState, making_admin: bool, revoking: Option<&str>) -> ApiResult<()> {
    if st.admin.has_token() {
        return Ok(());
    }
    let ring = st.service.key_ring();
    let admins_left = match revoking {
        Some(name) => ring
            .named(name)
            .is_none_or(|k| !k.is_admin() || ring.admin_count() > 1),
        None => making_admin || ring.has_admin(),
    };
    if admins_left {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "admin_key_needed",
        "this dq has no admin_token, so it keeps at least one key with the admin scope: create an admin key first (--scope admin), or set admin_token",
    ))
}

/// `POST /v1/keys` — 201 with the secret, shown this once.
pub(crate) async fn create_key(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<wire::CreateKeyRequest>,
) -> ApiResult {
    let making_admin = req
        .scopes
        .iter()
        .any(|s| crate::keys::Scope::parse(s).is_ok_and(|scope| scope.action() == Action::Admin));
    keep_an_admin(&st, making_admin, None)?;
    let created = st
        .service
        .create_key(&req.name, &req.scopes, req.rate_limit)
        .await?;
    Ok(no_store(
        (StatusCode::CREATED, Json(created)).into_response(),
    ))
}

/// A reply holding a secret: no cache may keep it.
fn no_store(mut res: Response) -> Response {
    res.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    res
}

/// `GET /v1/keys` — never a secret.
pub(crate) async fn list_keys(State(st): State<AppState>) -> ApiResult {
    reply(wire::KeyList {
        keys: st.service.list_keys().await?,
    })
}

/// `GET /v1/keys/{name}`
pub(crate) async fn get_key(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult {
    reply(st.service.key(&name).await?)
}

/// `DELETE /v1/keys/{name}` — revoked here at once, everywhere within 1 s.
pub(crate) async fn revoke_key(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult {
    keep_an_admin(&st, false, Some(&name))?;
    st.service.revoke_key(&name).await?;
    reply(wire::KeyRevoked {
        name,
        revoked: true,
    })
}

/// `POST /v1/keys/{name}/rotate` — a new secret, shown this once; the old
/// one stops working.
pub(crate) async fn rotate_key(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult {
    Ok(no_store(
        Json(st.service.rotate_key(&name).await?).into_response(),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadQuery {
    offset: Option<usize>,
    limit: Option<usize>,
}

/// `GET /v1/topics/{topic}/dead?offset=&limit=` — oldest death first.
pub(crate) async fn list_dead(
    State(st): State<AppState>,
    Path(t): Path<String>,
    Query(q): Query<DeadQuery>,
) -> ApiResult {
    let t = topic(t)?;
    let jobs = st
        .service
        .list_dead(&t, q.offset.unwrap_or(0), q.limit.unwrap_or(100))
        .await?;
    reply(wire::DeadList {
        jobs: jobs.iter().map(job).collect(),
    })
}

/// `POST /v1/topics/{topic}/dead/replay` — the named dead letters, or all.
pub(crate) async fn replay_dead(
    State(st): State<AppState>,
    Path(t): Path<String>,
    JsonBody(req): JsonBody<wire::ReplayRequest>,
) -> ApiResult {
    let t = topic(t)?;
    let ids = match req.ids {
        Some(ids) => {
            if ids.len() > MAX_BATCH {
                return Err(ApiError::bad_request(
                    "invalid_batch",
                    format!("ids may hold at most {MAX_BATCH} ids"),
                ));
            }
            Some(ids.into_iter().map(job_id).collect::<Result<Vec<_>, _>>()?)
        }
        None => None,
    };
    let replayed = st.service.replay_dead(&t, ids.as_deref()).await?;
    reply(wire::Replayed { replayed })
}

/// `DELETE /v1/topics/{topic}/dead`
pub(crate) async fn purge_dead(State(st): State<AppState>, Path(t): Path<String>) -> ApiResult {
    let t = topic(t)?;
    let purged = st.service.purge_dead(&t).await?;
    reply(wire::Purged { purged })
}

/// `GET /healthz` — the process answers.
pub(crate) async fn healthz() -> ApiResult {
    reply(wire::Health {
        status: "ok".into(),
        stores: Vec::new(),
        clock_offset_ms: None,
    })
}

/// `GET /readyz` — the store answers (with shards: any of them) and the
/// instance is not draining, with the health of each part of the store.
pub(crate) async fn readyz(State(st): State<AppState>) -> ApiResult {
    let health = tokio::time::timeout(Duration::from_secs(2), st.service.health()).await;
    let Ok(health) = health else {
        return Err(StoreError::Unavailable("health check timed out".into()).into());
    };
    let parts: Vec<wire::StoreHealth> = health
        .iter()
        .map(|(name, r)| wire::StoreHealth {
            name: name.clone(),
            up: r.is_ok(),
            error: r.as_ref().err().map(ToString::to_string),
        })
        .collect();
    let clock_offset_ms =
        Some(st.service.clock().now_ms() as i64 - dq_core::SystemClock.now_ms() as i64);
    if st.service.is_draining() {
        // A load balancer moves away; the store's health is still shown.
        let body = wire::NotReady {
            status: "draining".into(),
            stores: parts,
            clock_offset_ms,
            error: ApiError::draining().body().error,
        };
        return Ok((
            StatusCode::SERVICE_UNAVAILABLE,
            [(axum::http::header::RETRY_AFTER, "1")],
            Json(body),
        )
            .into_response());
    }
    if health.iter().any(|(_, r)| r.is_ok()) {
        return reply(wire::Health {
            status: "ready".into(),
            stores: parts,
            clock_offset_ms,
        });
    }
    let e = ApiError::from(
        health
            .into_iter()
            .find_map(|(_, r)| r.err())
            .unwrap_or_else(|| StoreError::Unavailable("no store".into())),
    );
    let body = wire::NotReady {
        status: "unavailable".into(),
        stores: parts,
        clock_offset_ms,
        error: e.body().error,
    };
    Ok((
        e.status,
        [(axum::http::header::RETRY_AFTER, "1")],
        Json(body),
    )
        .into_response())
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
