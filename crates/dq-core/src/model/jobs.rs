//! Jobs: a [`Body`], a job to enqueue ([`NewJob`], due [`When`]), its
//! [`JobState`], what an enqueue answers and what a read shows.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{JobId, JobKey};
use crate::retry::RetryPolicy;

/// A job's payload: JSON text, or opaque bytes.
///
/// Kept apart so a JSON body comes back as JSON and bytes come back as base64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Serialized JSON text (already validated as JSON).
    Json(String),
    /// Opaque bytes.
    Bytes(Vec<u8>),
}

impl Body {
    /// Size in bytes as stored.
    pub fn len(&self) -> usize {
        match self {
            Body::Json(s) => s.len(),
            Body::Bytes(b) => b.len(),
        }
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stored bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Body::Json(s) => s.as_bytes(),
            Body::Bytes(b) => b,
        }
    }

    /// Whether the body is JSON.
    pub fn is_json(&self) -> bool {
        matches!(self, Body::Json(_))
    }

    /// Rebuilds a body from stored bytes and its kind. A stored JSON body
    /// that is not UTF-8 any more (it cannot happen through dq) comes back as bytes.
    pub fn from_stored(bytes: Vec<u8>, is_json: bool) -> Self {
        if is_json {
            match String::from_utf8(bytes) {
                Ok(s) => Body::Json(s),
                Err(e) => Body::Bytes(e.into_bytes()),
            }
        } else {
            Body::Bytes(bytes)
        }
    }
}

/// When a new job becomes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// After the topic's `default_delay_ms`.
    TopicDefault,
    /// After this many milliseconds from now.
    DelayMs(u64),
    /// At this Unix millisecond (in the past means now).
    DueAtMs(u64),
}

/// When a new job expires: not handed out by then, it is never handed out
/// (it goes dead with the last error `expired`, or is dropped, as its
/// topic's `on_expiry` says). The store turns it into an absolute time
/// with its own clock at enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// This many milliseconds after the enqueue (`expires_in_ms`).
    InMs(u64),
    /// At this Unix millisecond (`expires_at_ms`).
    AtMs(u64),
}

impl Expiry {
    /// The absolute expiry of a job enqueued at `now_ms`.
    pub fn at(self, now_ms: u64) -> u64 {
        match self {
            Expiry::InMs(ms) => now_ms.saturating_add(ms),
            Expiry::AtMs(t) => t,
        }
    }
}

/// The last error of a job that went dead because its expiry passed
/// before it was handed out.
pub const EXPIRED_ERROR: &str = "expired";

/// A job to enqueue, already validated.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// The producer's id (idempotency key); `None`: the store assigns a
    /// new, time-ordered one (a store with partitions picks one naming a
    /// partition it can write to now) and answers it in [`Enqueued::id`].
    pub id: Option<JobId>,
    /// The payload.
    pub body: Body,
    /// When it becomes due.
    pub when: When,
    /// Lower runs first (as in beanstalkd).
    pub priority: u32,
    /// Overrides the topic's `max_attempts`.
    pub max_attempts: Option<u32>,
    /// Overrides the topic's `lease_ms` for this job's reservations.
    pub lease_ms: Option<u64>,
    /// Overrides the topic's retry policy.
    pub retry: Option<RetryPolicy>,
    /// Replace an existing job with this id if it is still waiting.
    pub replace: bool,
    /// The dedup window: for this long after the job is acked, cancelled
    /// or dead, enqueueing its id again stores nothing and answers
    /// [`Enqueued::deduplicated`]. `None`: the topic's `dedup_ms`; 0: none.
    pub dedup_ms: Option<u64>,
    /// Its flow-control key ([`JobKey`]); `None`: none.
    pub key: Option<JobKey>,
    /// When it expires; `None`: its topic's `expires_ms` after it is due
    /// (none when that is 0).
    pub expires: Option<Expiry>,
    /// Ranked in put order: among the ready jobs of its priority it comes
    /// by when it was put (then by enqueue order), not by its due time, for
    /// its whole life (releases, lease expiries, kicks and replays leave
    /// its place) — beanstalkd's ready order, (priority, id). Such a job
    /// also keeps the delay it was last put or given back with
    /// ([`JobInfo::put_delay_ms`]). The beanstalkd listener's jobs; `false`
    /// for every other.
    pub put_order: bool,
    /// The W3C trace context of the request that enqueued it, handed back
    /// with the job ([`JobInfo::trace`], [`crate::Lease::trace`]).
    pub trace: Option<crate::TraceContext>,
}

/// The default priority.
pub const DEFAULT_PRIORITY: u32 = 1024;

impl NewJob {
    /// A job with defaults for everything but id, body and due time.
    pub fn new(id: JobId, body: Body, when: When) -> Self {
        Self {
            id: Some(id),
            ..Self::with_generated_id(body, when)
        }
    }

    /// A job whose id the store assigns, defaults for everything else.
    pub fn with_generated_id(body: Body, when: When) -> Self {
        Self {
            id: None,
            body,
            when,
            priority: DEFAULT_PRIORITY,
            max_attempts: None,
            lease_ms: None,
            retry: None,
            replace: false,
            dedup_ms: None,
            key: None,
            expires: None,
            put_order: false,
            trace: None,
        }
    }
}

/// Where a job is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for its due time.
    Scheduled,
    /// Due, waiting for a consumer.
    Ready,
    /// Held by a consumer under a lease.
    Reserved,
    /// Out of attempts or buried; kept in the dead letters.
    Dead,
}

impl JobState {
    /// The name used in APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Ready => "ready",
            JobState::Reserved => "reserved",
            JobState::Dead => "dead",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What enqueue did with one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The job's id.
    pub id: JobId,
    /// True when a new job was written.
    pub created: bool,
    /// True when an existing waiting job was replaced.
    pub replaced: bool,
    /// True when nothing was written because a job with this id ended
    /// within its dedup window (see [`NewJob::dedup_ms`]). There is no job
    /// then: `due_at_ms` is 0 and `state` means nothing (front-ends leave
    /// both out).
    pub deduplicated: bool,
    /// The job's due time (the existing job's when not created).
    pub due_at_ms: u64,
    /// The job's state after the call.
    pub state: JobState,
}

/// Everything known about one job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    /// The job's id.
    pub id: JobId,
    /// Where it is.
    pub state: JobState,
    /// When it is (or was) due.
    pub due_at_ms: u64,
    /// Its priority.
    pub priority: u32,
    /// Hand-outs so far.
    pub attempts: u32,
    /// Hand-outs before it goes dead: the job's own override, else its
    /// topic's setting (as the store decides it).
    pub max_attempts: u32,
    /// Lease length of its hand-outs when the reserve names none: the job's
    /// own override, else its topic's setting.
    pub lease_ms: u64,
    /// The last failure's text.
    pub last_error: Option<String>,
    /// Its last [`ERRORS_KEPT`] failed attempts, oldest first: a nack's
    /// error, or `lease expired` (empty for a job that never failed, or
    /// failed only before the store kept them).
    pub errors: Vec<AttemptError>,
    /// When it was enqueued.
    pub created_at_ms: u64,
    /// The current lease's deadline, when reserved.
    pub lease_deadline_ms: Option<u64>,
    /// When it died, when dead.
    pub died_at_ms: Option<u64>,
    /// The payload.
    pub body: Body,
    /// What happened to it so far, beyond its attempts.
    pub counts: JobCounts,
    /// Its flow-control key, if it has one.
    pub key: Option<JobKey>,
    /// When it expires (Unix ms), if it does: a hand-out due at or after
    /// this time does not happen.
    pub expires_at_ms: Option<u64>,
    /// For a job ranked in put order ([`NewJob::put_order`], else `None`):
    /// the delay it was put with, or given back with by its last nack to
    /// retry or release (beanstalkd's `delay`); a lease expiry, a
    /// reschedule or a replay leaves it.
    pub put_delay_ms: Option<u64>,
    /// The trace context it was enqueued with ([`NewJob::trace`]).
    pub trace: Option<crate::TraceContext>,
}

/// One failed attempt of a job ([`JobInfo::errors`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptError {
    /// Which hand-out failed (1 for the first).
    pub attempt: u32,
    /// When it failed (Unix ms).
    pub at_ms: u64,
    /// Why: the nack's error, or `lease expired`.
    pub error: String,
}

/// How many failed attempts a job keeps ([`JobInfo::errors`]).
pub const ERRORS_KEPT: usize = 10;

/// Reads a job's kept errors as the stores keep them (JSON text of
/// [`AttemptError`]s); anything else reads as none.
pub fn errors_from_json(text: Option<&str>) -> Vec<AttemptError> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

/// `errors` as the stores keep them, the JSON text [`errors_from_json`]
/// reads; `None` for none.
pub fn errors_to_json(errors: &[AttemptError]) -> Option<String> {
    (!errors.is_empty()).then(|| serde_json::to_string(errors).unwrap_or_else(|_| "[]".into()))
}

/// `kept` (as [`errors_from_json`] reads it) with one more failed
/// attempt, the oldest dropped past [`ERRORS_KEPT`]: the JSON text to keep.
pub fn errors_with(kept: Option<&str>, failed: AttemptError) -> String {
    let mut errors = errors_from_json(kept);
    errors.push(failed);
    let over = errors.len().saturating_sub(ERRORS_KEPT);
    errors.drain(..over);
    errors_to_json(&errors).unwrap_or_default()
}

/// A job's history in counts (beanstalkd's `stats-job` shows them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JobCounts {
    /// Hand-outs in its whole life: unlike its attempts, not reset by a
    /// replay nor taken back by a release (beanstalkd's `reserves`).
    pub reserves: u32,
    /// Leases that expired (the holder neither acked nor failed it in time).
    pub timeouts: u32,
    /// Attempts its holder gave back to be tried again: nacks that did not
    /// ask for dead at once, and releases.
    pub releases: u32,
    /// Times it went dead (out of attempts, or a nack asking for it).
    pub buries: u32,
    /// Times it was replayed out of the dead letters, or kicked out of
    /// the schedule ([`crate::Store::reschedule`] with `kick`).
    pub kicks: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_round_trip() {
        let j = Body::Json("{\"a\":1}".into());
        assert_eq!(Body::from_stored(j.as_bytes().to_vec(), true), j);
        let b = Body::Bytes(vec![0, 255]);
        assert_eq!(Body::from_stored(vec![0, 255], false), b);
    }
}
