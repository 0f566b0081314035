//! Export and import: a topic's jobs listed page by page with everything a
//! store keeps ([`JobRecord`]), and written back into another store.

use dq_core::nulls::not_null;
use dq_core::{JobState, RetryPolicy};
use serde::{Deserialize, Serialize};

use crate::body::{RawJson, body_bytes, body_json, present};

/// A job with everything an export keeps and an import writes back: an
/// item of `GET /v1/topics/{topic}/jobs` and of `POST
/// /v1/topics/{topic}/jobs:import`. `max_attempts`, `lease_ms`, `retry` and
/// `dedup_ms` are the job's own settings (absent: it follows its topic's),
/// unlike [`Job`](crate::Job)'s limits in effect.
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
    /// Its last failed attempts, oldest first (at most ten).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<dq_core::AttemptError>,
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
    /// The W3C trace context it was enqueued with (an import keeps a well
    /// formed one and drops any other, as an enqueue does).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub traceparent: Option<String>,
    /// The `tracestate` that came with `traceparent`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub tracestate: Option<String>,
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
