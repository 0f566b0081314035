//! Consuming: reserve (jobs handed out under a lease), then ack, nack,
//! release or touch each lease, one at a time or in batches.

use dq_core::JobState;
use serde::{Deserialize, Serialize};

use crate::body::{RawJson, body_bytes, body_json};
use crate::error::{ErrorBody, ErrorDetail, refusal_or};

/// `POST /v1/reserve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReserveRequest {
    /// 1 to 100 pull topics.
    pub topics: Vec<String>,
    /// Most jobs (1–1000, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<usize>,
    /// Lease length (default: the job's, else the topic's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// Longest wait for a due job (≤ 30000, default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// A job handed out under a lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Leased {
    /// Its topic.
    pub topic: String,
    /// Its id.
    pub id: String,
    /// The lease token: ack, nack, touch and release need it.
    pub token: String,
    /// Which hand-out this is (1 for the first).
    pub attempt: u32,
    /// When it was due.
    pub due_at_ms: u64,
    /// When the lease ends.
    pub lease_deadline_ms: u64,
    /// Lower first.
    pub priority: u32,
    /// The W3C `traceparent` the job was enqueued with (left out: none):
    /// the work it starts continues that trace.
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

impl Leased {
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

/// The answer to a reserve (empty when nothing became due in time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reserved {
    /// The jobs leased.
    pub jobs: Vec<Leased>,
    /// The topics named that nobody created (a typo waits for ever
    /// otherwise); left out when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_topics: Vec<String>,
}

/// `POST …/ack`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckRequest {
    /// The lease token.
    pub token: String,
}

/// The answer to an ack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acked {
    /// The job.
    pub id: String,
    /// Always `true`.
    pub acked: bool,
}

/// `POST …/nack`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NackRequest {
    /// The lease token.
    pub token: String,
    /// Why (kept as the job's `last_error`; default "nacked").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Retry after this long instead of the retry policy's wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<i64>,
    /// Dead at once, whatever attempts are left (a permanent failure).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dead: bool,
}

/// The answer to a nack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nacked {
    /// The job.
    pub id: String,
    /// `scheduled` (will be retried) or `dead`.
    pub state: JobState,
    /// When it is due again, if scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at_ms: Option<u64>,
}

/// `POST …/release`: give the job back without counting the attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The lease token.
    pub token: String,
    /// Due again after this long (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
}

/// The answer to a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// The job.
    pub id: String,
    /// `ready` (no delay) or `scheduled`.
    pub state: JobState,
    /// When it is due again.
    pub due_at_ms: u64,
}

/// `POST …/touch`: extend the lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TouchRequest {
    /// The lease token.
    pub token: String,
    /// New lease from now (default: the job's, else the topic's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

/// The answer to a touch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Touched {
    /// The job.
    pub id: String,
    /// The lease's new deadline.
    pub lease_deadline_ms: u64,
}

/// One ack of `POST /v1/ack:batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckItem {
    /// The job's topic.
    pub topic: String,
    /// The job.
    pub id: String,
    /// The lease token.
    pub token: String,
}

/// `POST /v1/ack:batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckBatchRequest {
    /// 1 to 1000 acks.
    pub acks: Vec<AckItem>,
}

/// One result of an ack batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum AckResult {
    /// Refused.
    Error(ErrorBody),
    /// Done.
    Acked {
        /// Always `true`.
        acked: bool,
    },
}

// Read from its fields, not by serde's untagged derive (see `refusal_or`).
#[derive(Deserialize)]
struct AckResultFields {
    error: Option<ErrorDetail>,
    acked: Option<bool>,
}

impl<'de> Deserialize<'de> for AckResult {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = AckResultFields::deserialize(d)?;
        Ok(match refusal_or("an ack result", f.error, f.acked)? {
            Ok(acked) => Self::Acked { acked },
            Err(e) => Self::Error(e),
        })
    }
}

/// The answer to an ack batch: a result per ack, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckBatchResponse {
    /// One per ack.
    pub results: Vec<AckResult>,
}

/// One nack of `POST /v1/nack:batch`: the fields of `POST …/nack`, with
/// the job's topic and id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NackItem {
    /// The job's topic.
    pub topic: String,
    /// The job.
    pub id: String,
    /// The lease token.
    pub token: String,
    /// Why (kept as the job's `last_error`; default "nacked").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Retry after this long instead of the retry policy's wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<i64>,
    /// Dead at once, whatever attempts are left (a permanent failure).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dead: bool,
    /// The job's new priority, kept from here on; absent keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
}

/// `POST /v1/nack:batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NackBatchRequest {
    /// 1 to 1000 nacks.
    pub nacks: Vec<NackItem>,
}

/// One result of a nack batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum NackResult {
    /// Refused.
    Error(ErrorBody),
    /// Done.
    Nacked {
        /// `scheduled` (will be retried) or `dead`.
        state: JobState,
        /// When it is due again, if scheduled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        due_at_ms: Option<u64>,
    },
}

// Read from its fields, not by serde's untagged derive (see `refusal_or`).
#[derive(Deserialize)]
struct NackResultFields {
    error: Option<ErrorDetail>,
    state: Option<JobState>,
    due_at_ms: Option<u64>,
}

impl<'de> Deserialize<'de> for NackResult {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = NackResultFields::deserialize(d)?;
        Ok(match refusal_or("a nack result", f.error, f.state)? {
            Ok(state) => Self::Nacked {
                state,
                due_at_ms: f.due_at_ms,
            },
            Err(e) => Self::Error(e),
        })
    }
}

/// The answer to a nack batch: a result per nack, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NackBatchResponse {
    /// One per nack.
    pub results: Vec<NackResult>,
}

/// One lease extension of `POST /v1/touch:batch`: the fields of
/// `POST …/touch`, with the job's topic and id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TouchItem {
    /// The job's topic.
    pub topic: String,
    /// The job.
    pub id: String,
    /// The lease token.
    pub token: String,
    /// New lease from now (default: the job's, else the topic's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

/// `POST /v1/touch:batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TouchBatchRequest {
    /// 1 to 1000 lease extensions.
    pub touches: Vec<TouchItem>,
}

/// One result of a touch batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum TouchResult {
    /// Refused.
    Error(ErrorBody),
    /// Done.
    Touched {
        /// The lease's new deadline.
        lease_deadline_ms: u64,
    },
}

// Read from its fields, not by serde's untagged derive (see `refusal_or`).
#[derive(Deserialize)]
struct TouchResultFields {
    error: Option<ErrorDetail>,
    lease_deadline_ms: Option<u64>,
}

impl<'de> Deserialize<'de> for TouchResult {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = TouchResultFields::deserialize(d)?;
        Ok(
            match refusal_or("a touch result", f.error, f.lease_deadline_ms)? {
                Ok(lease_deadline_ms) => Self::Touched { lease_deadline_ms },
                Err(e) => Self::Error(e),
            },
        )
    }
}

/// The answer to a touch batch: a result per item, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TouchBatchResponse {
    /// One per item.
    pub results: Vec<TouchResult>,
}
