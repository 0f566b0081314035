//! Consuming: reserve (jobs handed out under a lease), then ack, nack,
//! release or touch each lease, one at a time or in batches.

use axum::extract::{Extension, State};
use dq_api as wire;
use dq_core::limits::MAX_BATCH;
use dq_core::*;

use super::{ApiResult, delay, job_id, reply, topic, wire_body, wire_trace};
use crate::AppState;
use crate::auth::Access;
use crate::error::ApiError;
use crate::extract::{ApiPath as Path, JsonBody};
use crate::keys::Action;

fn leased(l: &Lease) -> wire::Leased {
    let (body, body_base64) = wire_body(&l.body);
    let (traceparent, tracestate) = wire_trace(l.trace.as_ref());
    wire::Leased {
        topic: l.topic.to_string(),
        id: l.id.to_string(),
        token: l.token.clone(),
        attempt: l.attempt,
        due_at_ms: l.due_at_ms,
        lease_deadline_ms: l.lease_deadline_ms,
        priority: l.priority,
        traceparent,
        tracestate,
        body,
        body_base64,
    }
}

/// `POST /v1/reserve` — lease up to `max` due jobs from the topics, waiting
/// up to `wait_ms` for one to become due.
pub(crate) async fn reserve(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    JsonBody(req): JsonBody<wire::ReserveRequest>,
) -> ApiResult {
    let params = ReserveParams {
        topics: req.topics.len(),
        max: req.max.unwrap_or(1),
        lease_ms: req.lease_ms,
        wait_ms: req.wait_ms.unwrap_or(0),
    };
    // The number of topics is answered before each topic's name and
    // scope, the other rules after them.
    params.check_topics()?;
    let mut topics: Vec<Topic> = Vec::with_capacity(req.topics.len());
    for name in req.topics {
        let t = topic(name)?;
        access.require(Action::Consume, t.as_str())?;
        if !topics.contains(&t) {
            topics.push(t);
        }
    }
    st.service.check_reserve(&params)?;
    let unknown = st.service.check_topics_known(&topics).await?;
    let leases = st
        .service
        .reserve(&topics, params.max, params.lease_ms, params.wait_ms)
        .await?;
    reply(wire::Reserved {
        jobs: leases.iter().map(leased).collect(),
        unknown_topics: unknown.iter().map(ToString::to_string).collect(),
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
    let due = svc
        .release(&t, &id, &req.token, delay, dq_core::GiveBack::Released)
        .await?;
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
