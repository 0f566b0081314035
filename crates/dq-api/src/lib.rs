//! dq-api: the HTTP/JSON wire format of dq, written once.
//!
//! Every request body and every response body of `/v1` (and of the health
//! routes) is one of these types. The server (`dq-server`) parses requests
//! into them and renders responses from them, the Rust client (`dq-client`)
//! does the reverse, and a test in `dq-server` checks the OpenAPI document
//! field by field against them (a field added here and not there fails it).
//!
//! Requests refuse unknown fields (a typo is an error, not a silent default);
//! optional fields left out are not sent. Numbers a client may get wrong by
//! sign (`delay_ms`, `due_at_ms`, `retry_in_ms`) are `i64`, so the server can
//! answer "must be >= 0" instead of a parse error. Bodies travel as
//! [`RawJson`]: the JSON text exactly as it was sent.
//!
//! docs/api.md describes each route; this crate is its vocabulary.
//!
//! [`units`] is the text form of durations and retry policies the CLI's
//! flags and the admin page's settings share (`30s`, `1m,3m,5m`).

pub mod units;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use dq_core::nulls::not_null;
use dq_core::{JobState, RetryPolicy, TopicConfig, TopicConfigPatch, TopicStats};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A JSON value kept as its text, byte for byte (a job body).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// `text` if it is one JSON value.
    ///
    /// # Errors
    /// When `text` is not JSON.
    pub fn from_text(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(Self)
    }

    /// `value` written as JSON.
    ///
    /// # Errors
    /// When `value` cannot be written as JSON (a map with non-string keys).
    pub fn from_value<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Self)
    }

    /// The value as `T`.
    ///
    /// # Errors
    /// When it is not a `T`.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.get())
    }
}

/// A body field that is there, whatever its value: `"body": null` is a
/// body of JSON `null` (the same job as no body), and it counts as given
/// beside `body_base64` (exclusive).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<RawJson>, D::Error> {
    RawJson::deserialize(d).map(Some)
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

/// An error: `{"error": {"code", "message"}}`, the body of every refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The inside of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorDetail {
    /// Stable, machine-readable (`lease_mismatch`); clients match on it.
    pub code: String,
    /// For a person.
    pub message: String,
}

// ---- jobs -------------------------------------------------------------------

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
    /// When it was enqueued.
    pub created_at_ms: u64,
    /// The current lease's deadline (reserved jobs).
    pub lease_deadline_ms: Option<u64>,
    /// When it died (dead letters).
    pub died_at_ms: Option<u64>,
    /// Its flow-control key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A JSON body, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<RawJson>,
    /// A bytes body, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
}

/// A job with everything an export keeps and an import writes back: an
/// item of `GET /v1/topics/{topic}/jobs` and of `POST
/// /v1/topics/{topic}/jobs:import`. `max_attempts`, `lease_ms`, `retry` and
/// `dedup_ms` are the job's own settings (absent: it follows its topic's),
/// unlike [`Job`]'s limits in effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRecord {
    /// Its id.
    pub id: String,
    /// Its state. An import takes `scheduled` and `ready` (the job waits
    /// until `due_at_ms`: ready once it has passed) and `dead`; a
    /// `reserved` job is imported as `ready`, due at its lease deadline.
    pub state: JobState,
    /// When it is (or was) due.
    pub due_at_ms: u64,
    /// Lower first.
    pub priority: u32,
    /// Hand-outs so far.
    pub attempts: u32,
    /// Its own `max_attempts`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub max_attempts: Option<u32>,
    /// Its own lease length.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub lease_ms: Option<u64>,
    /// Its own retry waits.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub retry: Option<RetryPolicy>,
    /// Its dedup window.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub dedup_ms: Option<u64>,
    /// The last failure's text.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub last_error: Option<String>,
    /// When it was enqueued (an import without it: now).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub created_at_ms: Option<u64>,
    /// The current lease's deadline (reserved jobs; listings only: an
    /// import refuses it).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub lease_deadline_ms: Option<u64>,
    /// When it died (dead jobs; required for them).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub died_at_ms: Option<u64>,
    /// Its flow-control key.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub key: Option<String>,
    /// A JSON body, as sent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub body: Option<RawJson>,
    /// A bytes body, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
}

/// `GET /v1/topics/{topic}/jobs?state=&limit=&cursor=`: one page of a
/// topic's jobs, for an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    /// The jobs of this page (may be fewer than `limit`, even none, while
    /// more follow).
    pub jobs: Vec<JobRecord>,
    /// Pass it as `cursor` for the next page; `null`: the listing is complete.
    pub cursor: Option<String>,
}

/// `POST /v1/topics/{topic}/jobs:import`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// 1 to 1000 jobs, written in order.
    pub jobs: Vec<JobRecord>,
}

/// What an import did with one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportResult {
    /// The job.
    pub id: String,
    /// Written; `false`: a job with this id exists (left as it is), or the
    /// id is in its dedup window.
    pub created: bool,
    /// Nothing written: a job with this id ended within its dedup window.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deduplicated: bool,
    /// Its state now (absent when deduplicated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
}

/// The answer to an import: a result per job, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportResponse {
    /// One per job.
    pub results: Vec<ImportResult>,
}

impl JobRecord {
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
    /// When `body_base64` is not base64.
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

// ---- consuming --------------------------------------------------------------

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
    /// A JSON body, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<RawJson>,
    /// A bytes body, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
}

/// A job body as replies carry it: JSON text or base64 bytes.
fn body_bytes(body: Option<&RawJson>, b64: Option<&str>) -> Result<Vec<u8>, String> {
    match (b64, body) {
        (Some(b), _) => B64.decode(b).map_err(|e| e.to_string()),
        (None, Some(j)) => Ok(j.get().as_bytes().to_vec()),
        (None, None) => Ok(b"null".to_vec()),
    }
}

/// A JSON `null` body arrives as no `body` field at all (serde reads
/// `"body": null` as `None`), so neither field means `null`.
fn body_json<'a, T: Deserialize<'a>>(
    body: Option<&'a RawJson>,
    b64: Option<&str>,
) -> Result<T, String> {
    match (body, b64) {
        (Some(j), _) => j.parse().map_err(|e| e.to_string()),
        (None, Some(_)) => Err("the job's body is bytes, not JSON".into()),
        (None, None) => serde_json::from_str("null").map_err(|e| e.to_string()),
    }
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

/// The answer to a reserve (empty when nothing became due in time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reserved {
    /// The jobs leased.
    pub jobs: Vec<Leased>,
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

/// The answer to a touch batch: a result per item, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TouchBatchResponse {
    /// One per item.
    pub results: Vec<TouchResult>,
}

// ---- schedules --------------------------------------------------------------

/// What a schedule does about slots that passed while no dq instance ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatchUp {
    /// Nothing: the next future slot only.
    Skip,
    /// One job for all the missed slots, due now (named after the latest).
    #[default]
    One,
    /// A job for every missed slot (the latest 1,000 at most), due now.
    All,
}

impl CatchUp {
    /// The name used in APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Skip => "skip",
            CatchUp::One => "one",
            CatchUp::All => "all",
        }
    }
}

/// `PUT /v1/schedules/{name}` (and `[schedules.<name>]` in dq.toml): a job
/// enqueued on `topic` at every slot of `cron` or `every`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// The topic each firing's job goes to.
    pub topic: String,
    /// A cron expression: 5 fields (minute hour day-of-month month
    /// day-of-week), or 6 with seconds first; names (MON, JAN), ranges,
    /// lists, steps. Exclusive with `every`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub cron: Option<String>,
    /// A fixed interval ("90s", "15m", "1h"; at least 1 s), counted from
    /// `start_at`, else from the Unix epoch. Exclusive with `cron`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub every: Option<String>,
    /// The IANA time zone `cron` is read in (default UTC).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub timezone: Option<String>,
    /// Each job's JSON body (default `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<RawJson>,
    /// Each job's priority (default 1024).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub priority: Option<u32>,
    /// Slots missed while no instance ran (default `one`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub catch_up: Option<CatchUp>,
    /// Fires nothing while true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// No slot before this moment (RFC 3339).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub start_at: Option<String>,
    /// No slot after this moment (RFC 3339).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub end_at: Option<String>,
}

/// One slot of a schedule: a moment a job is (or was) due.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// RFC 3339, in the schedule's time zone.
    pub at: String,
    /// Unix ms.
    pub at_ms: u64,
}

/// The job of a schedule's last fired slot, as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastJob {
    /// Its id: `<schedule>@<slot ms>`.
    pub id: String,
    /// Its state, or absent when it is gone (done, or cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
}

/// A schedule: its settings and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleInfo {
    /// Its name (the jobs' ids start with it).
    pub name: String,
    /// Its settings as given (defaults filled in: `timezone`, `catch_up`).
    pub spec: ScheduleSpec,
    /// The rule in words ("At 09:00, on Monday …", "every 1m 30s").
    pub rule: String,
    /// The latest slot fired (or passed while paused or skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Slot>,
    /// Its job, when one was fired for `last`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_job: Option<LastJob>,
    /// The next slots (up to 5; none while paused or after `end_at`).
    pub next: Vec<Slot>,
}

/// `GET /v1/schedules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleList {
    /// Every schedule, by name.
    pub schedules: Vec<ScheduleInfo>,
}

/// `DELETE /v1/schedules/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleDeleted {
    /// The schedule.
    pub name: String,
    /// Always true (an unknown schedule is 404).
    pub deleted: bool,
}

// ---- keys --------------------------------------------------------------------

/// `POST /v1/keys`: a new API key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyRequest {
    /// 1-64 bytes of `A-Z a-z 0-9 _ -`, unique.
    pub name: String,
    /// `action:pattern` each (`consume:billing-*`, `read:*`, `admin`).
    pub scopes: Vec<String>,
    /// Most requests per window this key may make to each instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<dq_core::RateLimit>,
}

/// A key as `GET /v1/keys` shows it: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInfo {
    /// The key's name.
    pub name: String,
    /// What it may do, `action:pattern` each.
    pub scopes: Vec<String>,
    /// When it was created or last rotated, Unix ms.
    pub created_ms: u64,
    /// When it was last used, Unix ms (to within a minute); left out if never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_ms: Option<u64>,
    /// Most requests per window it may make to each instance; left out: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<dq_core::RateLimit>,
}

/// `POST /v1/keys` (201) and `POST /v1/keys/{name}/rotate`: the key and its
/// secret, shown this once.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyCreated {
    /// The key's name.
    pub name: String,
    /// What it may do.
    pub scopes: Vec<String>,
    /// When it was created (or rotated), Unix ms.
    pub created_ms: u64,
    /// The secret (`dqk_…`), for `Authorization: Bearer`. dq keeps only its
    /// SHA-256: it cannot be shown again.
    pub secret: String,
    /// Most requests per window it may make to each instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<dq_core::RateLimit>,
}

impl std::fmt::Debug for KeyCreated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCreated")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .field("created_ms", &self.created_ms)
            .field("secret", &"dqk_…")
            .field("rate_limit", &self.rate_limit)
            .finish()
    }
}

/// `GET /v1/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyList {
    /// Every key, by name.
    pub keys: Vec<KeyInfo>,
}

/// `DELETE /v1/keys/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRevoked {
    /// The key.
    pub name: String,
    /// Always true (an unknown key is 404).
    pub revoked: bool,
}

// ---- topics -----------------------------------------------------------------

/// A topic with its counts, and on `GET /v1/topics/{topic}` its settings.
/// Push secrets and header values come redacted (`whsec_…a1b2`): they are
/// write-only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicInfo {
    /// Its name.
    pub name: String,
    /// Counts and counters.
    pub stats: TopicStats,
    /// Settings (absent in listings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<TopicConfig>,
}

/// The answer to `PUT /v1/topics/{topic}`: the settings now in force
/// (push credentials redacted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicConfigured {
    /// Its name.
    pub name: String,
    /// Its settings.
    pub config: TopicConfig,
}

/// `GET /v1/topics?limit=&cursor=&prefix=`: which page of the topics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicListQuery {
    /// Topics per page: 1 to [`MAX_TOPICS_PAGE`](dq_core::limits::MAX_TOPICS_PAGE)
    /// (default [`TOPICS_PAGE`](dq_core::limits::TOPICS_PAGE)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The previous page's `next_cursor`; absent for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Only topics whose name starts with it (a plain prefix, no
    /// wildcards; at most 200 bytes of topic characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// `GET /v1/topics`: one page of the topics, in name order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicList {
    /// The page's topics with their counts (those the key may read: a
    /// page may be short, even empty, while more follow).
    pub topics: Vec<TopicInfo>,
    /// Pass it as `cursor` for the next page (with the same `prefix`);
    /// `null`: this is the last page.
    pub next_cursor: Option<String>,
}

/// `PUT /v1/topics/{topic}`'s body: the settings to change.
pub type PutTopicRequest = TopicConfigPatch;

/// `DELETE /v1/topics/{topic}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicDeleted {
    /// The topic.
    pub name: String,
    /// Jobs deleted with it.
    pub deleted_jobs: u64,
}

/// `GET /v1/topics/{topic}/dead`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadList {
    /// Oldest death first.
    pub jobs: Vec<Job>,
}

/// `POST /v1/topics/{topic}/dead/replay`: the named dead letters, or (no
/// `ids`) all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// At most 1000 ids. Only a missing field means "all": `"ids": null` is
    /// refused, so a client that sends an unset list replays nothing by
    /// mistake rather than everything.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "ids_not_null"
    )]
    pub ids: Option<Vec<String>>,
}

fn ids_not_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    match Option::<Vec<String>>::deserialize(d)? {
        Some(ids) => Ok(Some(ids)),
        None => Err(serde::de::Error::custom(
            "ids: null is not a list of ids; leave ids out to replay all dead letters",
        )),
    }
}

/// The answer to a replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replayed {
    /// How many became due.
    pub replayed: u64,
}

/// `DELETE /v1/topics/{topic}/dead`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purged {
    /// How many were deleted.
    pub purged: u64,
}

// ---- admin operations ---------------------------------------------------------

/// `POST /v1/admin/backup`: where the server writes the copy of its
/// embedded store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupRequest {
    /// An absolute path on the server's machine, of a file that does not
    /// exist yet, in a directory that does.
    pub path: String,
}

/// The answer to a backup: the file written, whole and checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupDone {
    /// The file.
    pub path: String,
    /// Its size.
    pub bytes: u64,
    /// Its database pages.
    pub pages: u64,
    /// The schema version of the data in it.
    pub schema_version: i64,
    /// How long the copy took.
    pub took_ms: u64,
}

/// `POST /v1/admin/drain`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// How long to wait for this instance's deliveries in flight to finish
    /// before answering (at most 600000); 0 or absent answers at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<i64>,
}

/// Where a drain is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainStatus {
    /// Always true once asked: reserves and push claims stop for good on
    /// this instance (until it restarts).
    pub draining: bool,
    /// Push deliveries and forwarded batches of this instance still running.
    pub in_flight: u64,
    /// Whether none is running any more: the process may be stopped.
    pub drained: bool,
}

// ---- health -----------------------------------------------------------------

/// `GET /healthz`, and `GET /readyz` with `stores`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok` (healthz) or `ready`.
    pub status: String,
    /// Each part of the store (one per Redis shard), on readyz.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stores: Vec<StoreHealth>,
    /// On readyz: the time dq decides by (the store's clock, or the
    /// monotonic clock since start) minus this host's wall clock, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<i64>,
}

/// `GET /readyz` when no part of the store answers, or the instance is
/// draining (503, `Retry-After: 1`): the error, and each part of the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotReady {
    /// `unavailable`, or `draining`.
    pub status: String,
    /// Each part of the store.
    pub stores: Vec<StoreHealth>,
    /// As on [`Health`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<i64>,
    /// `store_unavailable` (or the store's own code), or `draining`.
    pub error: ErrorDetail,
}

/// One part of the store on `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreHealth {
    /// Its name (the shard's URL without password).
    pub name: String,
    /// Whether it answers.
    pub up: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

// ------------------------------------------------------- batch results, read

// The four per-item results of the batch routes are untagged on the wire
// (`{"error": …}` or the item's answer). serde's derive for an untagged enum
// buffers each item into an intermediate tree and tries every variant in
// turn, building an error message for each miss: a third of the Rust
// client's CPU per acked job in `perf`. These read each item once into its
// fields and pick the variant from which of them are there.

/// An untagged result read from its fields: the refusal (`error`) or the
/// answer (present when its required fields are), exactly one of them.
fn refusal_or<T, E: serde::de::Error>(
    what: &str,
    error: Option<ErrorDetail>,
    answer: Option<T>,
) -> Result<Result<T, ErrorBody>, E> {
    match (error, answer) {
        (Some(error), None) => Ok(Err(ErrorBody { error })),
        (None, Some(answer)) => Ok(Ok(answer)),
        (Some(_), Some(_)) => Err(E::custom(format!("{what}: both an error and an answer"))),
        (None, None) => Err(E::custom(format!("{what}: neither an error nor an answer"))),
    }
}

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

    #[test]
    fn replay_all_only_without_ids() {
        let all: ReplayRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(all.ids, None);
        let some: ReplayRequest = serde_json::from_str(r#"{"ids": []}"#).unwrap();
        assert_eq!(some.ids, Some(vec![]));
        let e = serde_json::from_str::<ReplayRequest>(r#"{"ids": null}"#).unwrap_err();
        assert!(e.to_string().contains("leave ids out"), "{e}");
    }

    #[test]
    fn requests_refuse_unknown_fields_and_results_tell_errors_apart() {
        assert!(serde_json::from_str::<EnqueueRequest>(r#"{"dealy_ms": 5}"#).is_err());
        assert!(serde_json::from_str::<NackRequest>(r#"{"token": "t", "x": 1}"#).is_err());
        let r: BatchResponse = serde_json::from_str(
            r#"{"results": [{"error": {"code": "invalid_id", "message": "m"}},
                {"id": "a", "created": true, "replaced": false, "due_at_ms": 5, "state": "scheduled"}]}"#,
        )
        .unwrap();
        assert!(matches!(&r.results[0], BatchResult::Error(e) if e.error.code == "invalid_id"));
        assert!(matches!(&r.results[1], BatchResult::Enqueued(e) if e.id == "a"));
    }

    /// Every batch route's results read back as they were written, and an
    /// item that is neither (or both) an error and an answer is refused.
    #[test]
    fn batch_results_round_trip_and_refuse_what_is_neither() {
        fn round_trip<T>(results: Vec<T>)
        where
            T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
        {
            let text = serde_json::to_string(&results).unwrap();
            let back: Vec<T> = serde_json::from_str(&text).unwrap();
            assert_eq!(back, results, "{text}");
        }
        let error = || ErrorBody {
            error: ErrorDetail {
                code: "lease_mismatch".into(),
                message: "m".into(),
            },
        };
        round_trip(vec![
            BatchResult::Error(error()),
            BatchResult::Enqueued(Enqueued {
                id: "a".into(),
                created: true,
                replaced: false,
                deduplicated: false,
                due_at_ms: Some(5),
                state: Some(JobState::Ready),
            }),
            BatchResult::Enqueued(Enqueued {
                id: "b".into(),
                created: false,
                replaced: false,
                deduplicated: true,
                due_at_ms: None,
                state: None,
            }),
        ]);
        round_trip(vec![
            AckResult::Error(error()),
            AckResult::Acked { acked: true },
        ]);
        round_trip(vec![
            NackResult::Error(error()),
            NackResult::Nacked {
                state: JobState::Dead,
                due_at_ms: None,
            },
            NackResult::Nacked {
                state: JobState::Scheduled,
                due_at_ms: Some(9),
            },
        ]);
        round_trip(vec![
            TouchResult::Error(error()),
            TouchResult::Touched {
                lease_deadline_ms: 7,
            },
        ]);
        let err = r#"{"code": "c", "message": "m"}"#;
        for text in [
            "{}".to_string(),
            format!(r#"{{"error": {err}, "acked": true}}"#),
        ] {
            assert!(serde_json::from_str::<AckResult>(&text).is_err(), "{text}");
        }
        for text in [
            r#"{"id": "a"}"#.to_string(),
            format!(r#"{{"error": {err}, "id": "a", "created": true}}"#),
        ] {
            assert!(
                serde_json::from_str::<BatchResult>(&text).is_err(),
                "{text}"
            );
        }
        for text in [
            r#"{"due_at_ms": 5}"#.to_string(),
            format!(r#"{{"error": {err}, "state": "dead"}}"#),
        ] {
            assert!(serde_json::from_str::<NackResult>(&text).is_err(), "{text}");
        }
        assert!(serde_json::from_str::<TouchResult>("{}").is_err());
        assert!(serde_json::from_str::<TouchResult>(r#"{"error": {"code": 1}}"#).is_err());
    }
}
