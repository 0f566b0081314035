//! The HTTP/JSON API under `/v1` (see docs/api.md).

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use dq_core::limits::{self, MAX_BATCH, MAX_CLAIM, MAX_WAIT_MS};
use dq_core::*;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{JsonBody, parse};
use crate::service::{AckItem, JobView};

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

/// A job as clients send it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnqueueReq {
    id: Option<String>,
    body: Option<Box<RawValue>>,
    body_base64: Option<String>,
    delay_ms: Option<i64>,
    due_at_ms: Option<i64>,
    priority: Option<u32>,
    max_attempts: Option<u32>,
    lease_ms: Option<u64>,
    retry: Option<RetryPolicy>,
    #[serde(default)]
    replace: bool,
}

impl EnqueueReq {
    /// Validates everything; nothing is written before this passes.
    fn into_job(self, limits: &Limits, now_ms: u64) -> Result<NewJob, ApiError> {
        let generated_id = self.id.is_none();
        let id = match self.id {
            Some(id) => job_id(id)?,
            None => JobId::generate(),
        };
        let body = match (self.body, self.body_base64) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_request(
                    "invalid_body",
                    "give body or body_base64, not both",
                ));
            }
            (Some(raw), None) => Body::Json(raw.get().to_string()),
            (None, Some(b64)) => Body::Bytes(B64.decode(b64.as_bytes()).map_err(|e| {
                ApiError::bad_request("invalid_body", format!("body_base64 is not base64: {e}"))
            })?),
            (None, None) => Body::Json("null".into()),
        };
        limits.check_body(body.len())?;
        let when =
            when(limits, self.delay_ms, self.due_at_ms, now_ms)?.unwrap_or(When::TopicDefault);
        if let Some(n) = self.max_attempts {
            limits::check_max_attempts(n)?;
        }
        if let Some(ms) = self.lease_ms {
            limits::check_lease(ms)?;
        }
        if let Some(r) = &self.retry {
            r.validate()?;
        }
        Ok(NewJob {
            id,
            body,
            when,
            priority: self.priority.unwrap_or(DEFAULT_PRIORITY),
            max_attempts: self.max_attempts,
            lease_ms: self.lease_ms,
            retry: self.retry,
            replace: self.replace,
            generated_id,
        })
    }
}

fn enqueued_json(e: &Enqueued) -> Value {
    json!({
        "id": e.id,
        "created": e.created,
        "replaced": e.replaced,
        "due_at_ms": e.due_at_ms,
        "state": e.state,
    })
}

/// Adds `body` (JSON) or `body_base64` (bytes) to an object.
fn put_body(obj: &mut Value, body: &Body) {
    match body {
        Body::Json(s) => {
            obj["body"] = serde_json::from_str(s).unwrap_or(Value::Null);
        }
        Body::Bytes(b) => obj["body_base64"] = Value::String(B64.encode(b)),
    }
}

fn job_json(view: &JobView) -> Value {
    let j = &view.job;
    let mut v = json!({
        "topic": view.topic,
        "id": j.id,
        "state": j.state,
        "due_at_ms": j.due_at_ms,
        "priority": j.priority,
        "attempts": j.attempts,
        "max_attempts": view.max_attempts,
        "lease_ms": view.lease_ms,
        "last_error": j.last_error,
        "created_at_ms": j.created_at_ms,
        "lease_deadline_ms": j.lease_deadline_ms,
        "died_at_ms": j.died_at_ms,
    });
    put_body(&mut v, &j.body);
    v
}

fn lease_json(l: &Lease) -> Value {
    let mut v = json!({
        "topic": l.topic,
        "id": l.id,
        "token": l.token,
        "attempt": l.attempt,
        "due_at_ms": l.due_at_ms,
        "lease_deadline_ms": l.lease_deadline_ms,
        "priority": l.priority,
    });
    put_body(&mut v, &l.body);
    v
}

/// `POST /v1/topics/{topic}/jobs`
pub(crate) async fn enqueue(
    State(st): State<AppState>,
    Path(t): Path<String>,
    JsonBody(req): JsonBody<EnqueueReq>,
) -> ApiResult {
    let t = topic(t)?;
    let svc = &st.service;
    let job = req.into_job(svc.limits(), svc.clock().now_ms())?;
    let e = svc.enqueue(&t, job).await?;
    let status = if e.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(enqueued_json(&e))).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchReq {
    jobs: Vec<Box<RawValue>>,
}

/// `POST /v1/topics/{topic}/jobs:batch` — a result per job; invalid jobs are
/// reported and skipped, the valid ones written in one store call.
pub(crate) async fn enqueue_batch(
    State(st): State<AppState>,
    Path(t): Path<String>,
    JsonBody(req): JsonBody<BatchReq>,
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
    let mut results: Vec<Value> = Vec::with_capacity(req.jobs.len());
    let mut valid: Vec<NewJob> = Vec::new();
    let mut slots: Vec<usize> = Vec::new();
    for raw in &req.jobs {
        match parse::<EnqueueReq>(raw.get().as_bytes()).and_then(|r| r.into_job(svc.limits(), now))
        {
            Ok(job) => {
                slots.push(results.len());
                results.push(Value::Null);
                valid.push(job);
            }
            Err(e) => results.push(e.body()),
        }
    }
    if !valid.is_empty() {
        let out = svc.enqueue_batch(&t, valid).await?;
        for (slot, e) in slots.into_iter().zip(out.iter()) {
            results[slot] = enqueued_json(e);
        }
    }
    Ok(Json(json!({ "results": results })).into_response())
}

/// `GET /v1/topics/{topic}/jobs/{id}`
pub(crate) async fn get_job(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    let job = st.service.get(&t, &id).await?;
    Ok(Json(job_json(&job)).into_response())
}

/// `DELETE /v1/topics/{topic}/jobs/{id}`
pub(crate) async fn cancel_job(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    let was = st.service.cancel(&t, &id).await?;
    Ok(Json(json!({"id": id, "cancelled": true, "state": was})).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RescheduleReq {
    delay_ms: Option<i64>,
    due_at_ms: Option<i64>,
}

/// `PATCH /v1/topics/{topic}/jobs/{id}` — move a waiting job.
pub(crate) async fn reschedule_job(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<RescheduleReq>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    let svc = &st.service;
    let now = svc.clock().now_ms();
    let due = match when(svc.limits(), req.delay_ms, req.due_at_ms, now)? {
        Some(When::DelayMs(d)) => now + d,
        Some(When::DueAtMs(t)) => t,
        _ => {
            return Err(ApiError::bad_request(
                "invalid_delay",
                "give exactly one of delay_ms and due_at_ms",
            ));
        }
    };
    svc.reschedule(&t, &id, due).await?;
    Ok(Json(json!({"id": id, "due_at_ms": due})).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReserveReq {
    topics: Vec<String>,
    max: Option<usize>,
    lease_ms: Option<u64>,
    wait_ms: Option<u64>,
}

/// Most topics one reserve may name.
const MAX_RESERVE_TOPICS: usize = 100;

/// `POST /v1/reserve` — lease up to `max` due jobs from the topics, waiting
/// up to `wait_ms` for one to become due.
pub(crate) async fn reserve(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<ReserveReq>,
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
        if !topics.contains(&t) {
            topics.push(t);
        }
    }
    let max = req.max.unwrap_or(1);
    if !(1..=MAX_CLAIM).contains(&max) {
        return Err(ApiError::bad_request(
            "invalid_max",
            format!("max must be between 1 and {MAX_CLAIM}, got {max}"),
        ));
    }
    if let Some(ms) = req.lease_ms {
        limits::check_lease(ms)?;
    }
    let wait_ms = req.wait_ms.unwrap_or(0);
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::bad_request(
            "invalid_wait",
            format!("wait_ms must be at most {MAX_WAIT_MS}, got {wait_ms}"),
        ));
    }
    let leases = st
        .service
        .reserve(&topics, max, req.lease_ms, wait_ms)
        .await?;
    let jobs: Vec<Value> = leases.iter().map(lease_json).collect();
    Ok(Json(json!({ "jobs": jobs })).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenReq {
    token: String,
}

/// `POST /v1/topics/{topic}/jobs/{id}/ack`
pub(crate) async fn ack(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<TokenReq>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    st.service.ack(&t, &id, &req.token).await?;
    Ok(Json(json!({"id": id, "acked": true})).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NackReq {
    token: String,
    error: Option<String>,
    retry_in_ms: Option<i64>,
    /// Dead at once, whatever attempts are left (a permanent failure).
    #[serde(default)]
    dead: bool,
}

/// `POST /v1/topics/{topic}/jobs/{id}/nack`
pub(crate) async fn nack(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<NackReq>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    let svc = &st.service;
    let retry_in = req
        .retry_in_ms
        .map(|ms| delay(svc.limits(), "retry_in_ms", ms))
        .transpose()?;
    let error = req.error.unwrap_or_else(|| "nacked".into());
    if req.dead {
        if retry_in.is_some() {
            return Err(ApiError::bad_request(
                "invalid_delay",
                "retry_in_ms makes no sense with dead: true",
            ));
        }
        svc.bury(&t, &id, &req.token, &error).await?;
        return Ok(Json(json!({"id": id, "state": "dead"})).into_response());
    }
    let body = match svc.nack(&t, &id, &req.token, &error, retry_in).await? {
        NackOutcome::Retry { due_at_ms, .. } => {
            json!({"id": id, "state": "scheduled", "due_at_ms": due_at_ms})
        }
        NackOutcome::Dead { .. } => json!({"id": id, "state": "dead"}),
    };
    Ok(Json(body).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReleaseReq {
    token: String,
    delay_ms: Option<i64>,
}

/// `POST /v1/topics/{topic}/jobs/{id}/release` — give a reserved job back
/// without counting the attempt, due after `delay_ms` (default 0).
pub(crate) async fn release(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<ReleaseReq>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    let svc = &st.service;
    let delay = delay(svc.limits(), "delay_ms", req.delay_ms.unwrap_or(0))?;
    let due = svc.release(&t, &id, &req.token, delay).await?;
    let state = if delay == 0 { "ready" } else { "scheduled" };
    Ok(Json(json!({"id": id, "state": state, "due_at_ms": due})).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TouchReq {
    token: String,
    lease_ms: Option<u64>,
}

/// `POST /v1/topics/{topic}/jobs/{id}/touch`
pub(crate) async fn touch(
    State(st): State<AppState>,
    Path((t, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<TouchReq>,
) -> ApiResult {
    let (t, id) = (topic(t)?, job_id(id)?);
    let deadline = st.service.touch(&t, &id, &req.token, req.lease_ms).await?;
    Ok(Json(json!({"id": id, "lease_deadline_ms": deadline})).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AckBatchReq {
    acks: Vec<AckReq>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AckReq {
    topic: String,
    id: String,
    token: String,
}

/// `POST /v1/ack:batch` — a result per ack.
pub(crate) async fn ack_batch(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<AckBatchReq>,
) -> ApiResult {
    if req.acks.is_empty() || req.acks.len() > MAX_BATCH {
        return Err(ApiError::bad_request(
            "invalid_batch",
            format!(
                "acks must hold 1 to {MAX_BATCH} items, got {}",
                req.acks.len()
            ),
        ));
    }
    // Items that do not parse get their error; the others are acked together.
    let mut results: Vec<Value> = Vec::with_capacity(req.acks.len());
    let mut valid: Vec<AckItem> = Vec::new();
    let mut slots: Vec<usize> = Vec::new();
    for a in req.acks {
        match topic(a.topic).and_then(|t| Ok((t, job_id(a.id)?))) {
            Ok((topic, id)) => {
                slots.push(results.len());
                results.push(Value::Null);
                valid.push(AckItem {
                    topic,
                    id,
                    token: a.token,
                });
            }
            Err(e) => results.push(e.body()),
        }
    }
    let acked = st.service.ack_batch(&valid).await;
    for (slot, r) in slots.into_iter().zip(acked) {
        results[slot] = match r {
            Ok(()) => json!({"acked": true}),
            Err(e) => ApiError::from(e).body(),
        };
    }
    Ok(Json(json!({ "results": results })).into_response())
}

fn summary(t: &Topic, stats: &TopicStats) -> Value {
    json!({"name": t, "stats": stats})
}

/// `GET /v1/topics`
pub(crate) async fn list_topics(State(st): State<AppState>) -> ApiResult {
    let topics = st.service.topics_with_stats().await?;
    let out: Vec<Value> = topics.iter().map(|(t, s)| summary(t, s)).collect();
    Ok(Json(json!({ "topics": out })).into_response())
}

/// `GET /v1/topics/{topic}`
pub(crate) async fn get_topic(State(st): State<AppState>, Path(t): Path<String>) -> ApiResult {
    let t = topic(t)?;
    let cfg = st.service.known_topic(&t).await?;
    let mut v = summary(&t, &st.service.stats(&t).await?);
    v["config"] = serde_json::to_value(cfg.redacted()).unwrap_or(Value::Null);
    Ok(Json(v).into_response())
}

/// `PUT /v1/topics/{topic}` — fields left out keep their value.
pub(crate) async fn put_topic(
    State(st): State<AppState>,
    Path(t): Path<String>,
    JsonBody(patch): JsonBody<TopicConfigPatch>,
) -> ApiResult {
    let t = topic(t)?;
    let cfg = st.service.configure_topic(&t, patch).await?;
    Ok(Json(json!({"name": t, "config": cfg.redacted()})).into_response())
}

/// `DELETE /v1/topics/{topic}` — deletes the topic and all its jobs.
pub(crate) async fn delete_topic(State(st): State<AppState>, Path(t): Path<String>) -> ApiResult {
    let t = topic(t)?;
    let deleted = st.service.delete_topic(&t).await?;
    Ok(Json(json!({"name": t, "deleted_jobs": deleted})).into_response())
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
    let jobs: Vec<Value> = jobs.iter().map(job_json).collect();
    Ok(Json(json!({ "jobs": jobs })).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayReq {
    ids: Option<Vec<String>>,
}

/// `POST /v1/topics/{topic}/dead/replay` — the named dead letters, or all.
pub(crate) async fn replay_dead(
    State(st): State<AppState>,
    Path(t): Path<String>,
    JsonBody(req): JsonBody<ReplayReq>,
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
    let replayed = st.service.replay(&t, ids.as_deref()).await?;
    Ok(Json(json!({ "replayed": replayed })).into_response())
}

/// `DELETE /v1/topics/{topic}/dead`
pub(crate) async fn purge_dead(State(st): State<AppState>, Path(t): Path<String>) -> ApiResult {
    let t = topic(t)?;
    let purged = st.service.purge(&t).await?;
    Ok(Json(json!({ "purged": purged })).into_response())
}

/// `GET /healthz` — the process answers.
pub(crate) async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// `GET /readyz` — the store answers (with shards: any of them), with the
/// health of each part of the store.
pub(crate) async fn readyz(State(st): State<AppState>) -> ApiResult {
    let health = tokio::time::timeout(Duration::from_secs(2), st.service.health()).await;
    let Ok(health) = health else {
        return Err(StoreError::Unavailable("health check timed out".into()).into());
    };
    let parts: Vec<Value> = health
        .iter()
        .map(|(name, r)| match r {
            Ok(()) => json!({"name": name, "up": true}),
            Err(e) => json!({"name": name, "up": false, "error": e.to_string()}),
        })
        .collect();
    if health.iter().any(|(_, r)| r.is_ok()) {
        return Ok(Json(json!({"status": "ready", "stores": parts})).into_response());
    }
    let e = health
        .into_iter()
        .find_map(|(_, r)| r.err())
        .unwrap_or_else(|| StoreError::Unavailable("no store".into()));
    Err(e.into())
}

/// Fallback for unknown routes.
pub(crate) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "route_not_found", "no such route")
}
