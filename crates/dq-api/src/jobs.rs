//! Jobs: enqueue (one, or a batch), get, cancel, reschedule.

use dq_core::nulls::not_null;
use dq_core::{JobState, RetryPolicy};
use serde::{Deserialize, Serialize};

use crate::body::{RawJson, body_bytes, body_json, present};
use crate::error::{ErrorBody, ErrorDetail, refusal_or};

/// `POST /v1/topics/{topic}/jobs`, and each job of a batch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// The idempotency key; generated when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub id: Option<String>,
    /// A JSON body (exclusive with `body_base64`); `null` when neither.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub body: Option<RawJson>,
    /// A bytes body, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// Due this long from now (exclusive with `due_at_ms`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub delay_ms: Option<i64>,
    /// Due at this Unix millisecond.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub due_at_ms: Option<i64>,
    /// Lower first; default 1024.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub priority: Option<u32>,
    /// Overrides the topic's.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub max_attempts: Option<u32>,
    /// Overrides the topic's lease for this job's hand-outs.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub lease_ms: Option<u64>,
    /// Overrides the topic's retry waits.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub retry: Option<RetryPolicy>,
    /// Rewrite a job with this id that is still waiting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
    /// Dedup window: for this long after the job ended (acked, cancelled,
    /// dead), enqueueing its id again stores nothing. Default: the topic's
    /// `dedup_ms`; 0: none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub dedup_ms: Option<u64>,
    /// Flow-control key (e.g. a customer id): the jobs of one key share the
    /// topic's `key_concurrency` and `key_rate_limit`, and keys take turns.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub key: Option<String>,
    /// Expires this long after the enqueue (exclusive with
    /// `expires_at_ms`): not handed out by then, it never is (dead with the
    /// last error `expired`, or dropped: the topic's `on_expiry`). Default:
    /// the topic's `expires_ms` after the job is due.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub expires_in_ms: Option<i64>,
    /// Expires at this Unix millisecond (exclusive with `expires_in_ms`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub expires_at_ms: Option<i64>,
    /// The W3C `traceparent` of the work that enqueues the job (default:
    /// the request's `traceparent` header): kept with the job and handed
    /// back with it. A malformed one is dropped (logged), never refused.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` that goes with `traceparent` (default: the
    /// request's header, when `traceparent` came from it).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub tracestate: Option<String>,
}

/// What an enqueue did (the answer to one job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The job's id (generated ones included).
    pub id: String,
    /// A new job was written (201); `false`: the id existed (200).
    pub created: bool,
    /// A waiting job was replaced.
    #[serde(default)]
    pub replaced: bool,
    /// Nothing was stored: a job with this id ended within its dedup
    /// window (`due_at_ms` and `state` are then left out: there is no job).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deduplicated: bool,
    /// When it is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at_ms: Option<u64>,
    /// Its state now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
}

/// `POST /v1/topics/{topic}/jobs:batch`. The server reads each job on its
/// own (`J` = [`RawJson`]) so one bad job is reported, not the whole batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest<J = RawJson> {
    /// 1 to 1000 jobs.
    pub jobs: Vec<J>,
}

/// One result of a batch: the job's answer or its refusal.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum BatchResult {
    /// Refused (nothing written for it).
    Error(ErrorBody),
    /// Written, or already there.
    Enqueued(Enqueued),
}

// Read from its fields, not by serde's untagged derive (see `refusal_or`).
#[derive(Deserialize)]
struct BatchResultFields {
    error: Option<ErrorDetail>,
    id: Option<String>,
    created: Option<bool>,
    #[serde(default)]
    replaced: bool,
    #[serde(default)]
    deduplicated: bool,
    due_at_ms: Option<u64>,
    state: Option<JobState>,
}

impl<'de> Deserialize<'de> for BatchResult {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = BatchResultFields::deserialize(d)?;
        let answer = f.id.zip(f.created).map(|(id, created)| Enqueued {
            id,
            created,
            replaced: f.replaced,
            deduplicated: f.deduplicated,
            due_at_ms: f.due_at_ms,
            state: f.state,
        });
        Ok(match refusal_or("a batch result", f.error, answer)? {
            Ok(e) => Self::Enqueued(e),
            Err(e) => Self::Error(e),
        })
    }
}

/// The answer to a batch: a result per job, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchResponse {
    /// One per job.
    pub results: Vec<BatchResult>,
}

/// A job as `GET /v1/topics/{topic}/jobs/{id}` and the dead-letter list show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Its topic.
    pub topic: String,
    /// Its id.
    pub id: String,
    /// Its state.
    pub state: JobState,
    /// When it is (or was) due.
    pub due_at_ms: u64,
    /// Lower first.
    pub priority: u32,
    /// Hand-outs so far.
    pub attempts: u32,
    /// Hand-outs allowed (its own, else the topic's).
    pub max_attempts: u32,
    /// Lease of its hand-outs (its own, else the topic's).
    pub lease_ms: u64,
    /// The last failure's text.
    pub last_error: Option<String>,
    /// Its last failed attempts (at most ten), oldest first: which attempt,
    /// when, and why (a nack's error, or `lease expired`). Left out when
    /// none failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<dq_core::AttemptError>,
    /// When it was enqueued.
    pub created_at_ms: u64,
    /// The current lease's deadline (reserved jobs).
    pub lease_deadline_ms: Option<u64>,
    /// When it died (dead letters).
    pub died_at_ms: Option<u64>,
    /// Its flow-control key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When it expires (Unix ms): a hand-out due at or after it does not
    /// happen. Left out: it does not expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// The W3C trace context it was enqueued with (left out: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The `tracestate` that came with `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// A JSON body, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<RawJson>,
    /// A bytes body, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
}

impl Job {
    /// The JSON body as `T`.
    ///
    /// # Errors
    /// When the body is bytes or not a `T`.
    pub fn json<'a, T: Deserialize<'a>>(&'a self) -> Result<T, String> {
        body_json(self.body.as_ref(), self.body_base64.as_deref())
    }

    /// The body's bytes (a JSON body as its text, exactly as sent).
    ///
    /// # Errors
    /// For invalid base64.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        body_bytes(self.body.as_ref(), self.body_base64.as_deref())
    }
}

/// `DELETE /v1/topics/{topic}/jobs/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    /// The job.
    pub id: String,
    /// Always `true`.
    pub cancelled: bool,
    /// The state it was in.
    pub state: JobState,
}

/// `PATCH /v1/topics/{topic}/jobs/{id}`: exactly one of the two.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RescheduleRequest {
    /// Due this long from now.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub delay_ms: Option<i64>,
    /// Due at this Unix millisecond.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub due_at_ms: Option<i64>,
}

/// The answer to a reschedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rescheduled {
    /// The job.
    pub id: String,
    /// Its new due time.
    pub due_at_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_kept_as_its_text() {
        let text = r#"{"b": 1.0,  "a": "\u00e9"}"#;
        let req: EnqueueRequest =
            serde_json::from_str(&format!(r#"{{"body": {text}, "delay_ms": -1}}"#)).unwrap();
        assert_eq!(req.body.as_ref().unwrap().get(), text);
        assert_eq!(req.delay_ms, Some(-1));
        let out = serde_json::to_string(&req).unwrap();
        assert_eq!(out, format!(r#"{{"body":{text},"delay_ms":-1}}"#));
    }
}
