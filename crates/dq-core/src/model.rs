//! Validated names, bodies, jobs and leases: the values that cross the
//! [`Store`](crate::Store) contract.

use std::fmt;

use serde::{Deserialize, Serialize};

/// `.` and `..`: HTTP clients resolve them away as path segments (RFC 3986
/// dot segments), so a topic or id spelled so could be written but never
/// reached again by URL.
fn is_dot_segment(s: &str) -> bool {
    s == "." || s == ".."
}

use crate::limits::InvalidInput;
use crate::retry::RetryPolicy;

/// A topic name: 1–200 bytes of `[A-Za-z0-9._:+/;$()-]` (beanstalkd's tube
/// characters and `:`), not `.` or `..`.
///
/// The character set keeps names safe inside Redis hash tags (`{` and `}` are
/// excluded), URLs and log lines.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Topic(String);

impl Topic {
    /// Longest topic name, in bytes.
    pub const MAX_LEN: usize = 200;

    /// Validates a topic name.
    ///
    /// # Errors
    /// `invalid_topic` when empty, too long, or with a character outside the set.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidInput> {
        let name = name.into();
        if name.is_empty() || name.len() > Self::MAX_LEN {
            return Err(InvalidInput::new(
                "invalid_topic",
                format!(
                    "topic must be 1-{} bytes, got {}",
                    Self::MAX_LEN,
                    name.len()
                ),
            ));
        }
        if let Some(c) = name.chars().find(|c| !Topic::is_name_char(*c)) {
            return Err(InvalidInput::new(
                "invalid_topic",
                format!("topic may hold only A-Z a-z 0-9 . _ : - + / ; $ ( ), found {c:?}"),
            ));
        }
        if is_dot_segment(&name) {
            return Err(InvalidInput::new(
                "invalid_topic",
                format!("{name:?} is not a topic name: a URL path cannot carry it"),
            ));
        }
        Ok(Self(name))
    }

    /// The store-internal name of partition `p` of this topic: the topic
    /// itself for partition 0 (so a one-partition topic keeps its keys),
    /// `<topic>#<p>` for the others. `#` cannot occur in a topic name, so
    /// these never collide with a real topic; see [`Topic::split_partition`].
    pub fn partition(&self, p: u32) -> Topic {
        if p == 0 {
            self.clone()
        } else {
            Topic(format!("{}#{p}", self.0))
        }
    }

    /// The topic and partition of a store-internal name made by
    /// [`Topic::partition`]; `None` for a name that is neither.
    pub fn split_partition(name: &str) -> Option<(Topic, u32)> {
        match name.split_once('#') {
            None => Topic::new(name).ok().map(|t| (t, 0)),
            Some((t, p)) => {
                let p: u32 = p.parse().ok().filter(|p| *p > 0)?;
                Topic::new(t).ok().map(|t| (t, p))
            }
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `c` may occur in a topic name.
    pub fn is_name_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || "._:-+/;$()".contains(c)
    }

    /// Checks a name prefix a listing filters by ([`crate::Store::list_topics`]):
    /// empty (every topic), or at most [`Topic::MAX_LEN`] bytes of topic
    /// characters — anything else could match no topic, and is more likely a
    /// mistake than a question.
    ///
    /// # Errors
    /// `invalid_prefix`, naming what is wrong.
    pub fn check_prefix(prefix: &str) -> Result<(), InvalidInput> {
        if prefix.len() > Self::MAX_LEN {
            return Err(InvalidInput::new(
                "invalid_prefix",
                format!(
                    "prefix must be at most {} bytes (the longest topic name), got {}",
                    Self::MAX_LEN,
                    prefix.len()
                ),
            ));
        }
        if let Some(c) = prefix.chars().find(|c| !Topic::is_name_char(*c)) {
            return Err(InvalidInput::new(
                "invalid_prefix",
                format!(
                    "prefix may hold only the characters of topic names (A-Z a-z 0-9 . _ : - + / ; $ ( )), found {c:?}"
                ),
            ));
        }
        Ok(())
    }

    /// The names that start with `prefix`, as the range `[start, end)` in
    /// byte order (`end` `None`: no upper bound, for the empty prefix), so a
    /// store can filter on an index instead of a pattern (no `LIKE`, whose
    /// `%` and `_` are wildcards). `None` when no topic name can start with
    /// `prefix` ([`Topic::check_prefix`] refuses it).
    pub fn prefix_range(prefix: &str) -> Option<(String, Option<String>)> {
        Self::check_prefix(prefix).ok()?;
        let Some(last) = prefix.bytes().last() else {
            return Some((String::new(), None));
        };
        // Topic characters are ASCII below 0x7f: the successor of the last
        // byte is still one ASCII byte.
        let mut end = prefix[..prefix.len() - 1].to_string();
        end.push(char::from(last + 1));
        Some((prefix.to_string(), Some(end)))
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Topic {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Topic::new(s).map_err(serde::de::Error::custom)
    }
}

/// A job id: 1–256 characters (so at most 1024 bytes), printable, no
/// whitespace.
///
/// Producers choose ids to make enqueue idempotent; when they do not, dq
/// generates a time-ordered UUIDv7.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct JobId(String);

impl JobId {
    /// Longest id, in characters (what JSON Schema's `maxLength` counts).
    pub const MAX_LEN: usize = 256;

    /// Validates an id.
    ///
    /// # Errors
    /// `invalid_id` when empty, too long, or holding whitespace or control characters.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidInput> {
        let id = id.into();
        printable("id", "invalid_id", Self::MAX_LEN, &id)?;
        if is_dot_segment(&id) {
            return Err(InvalidInput::new(
                "invalid_id",
                format!("{id:?} is not a job id: a URL path cannot carry it"),
            ));
        }
        Ok(Self(id))
    }

    /// A new time-ordered id (UUIDv7).
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for JobId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        JobId::new(s).map_err(serde::de::Error::custom)
    }
}

/// Checks that `value` (a `what`) is 1 to `max` characters, none of them
/// whitespace or control; else `code`.
fn printable(what: &str, code: &'static str, max: usize, value: &str) -> Result<(), InvalidInput> {
    // Visible ASCII only (most ids, topics and keys): one byte per
    // character, none of them whitespace or control; checked in one pass
    // the compiler vectorizes, without decoding characters (every id and
    // topic of every call comes through here).
    if !value.is_empty() && value.len() <= max && value.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Ok(());
    }
    let chars = value.chars().count();
    if chars == 0 || chars > max {
        return Err(InvalidInput::new(
            code,
            format!("{what} must be 1-{max} characters, got {chars}"),
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(InvalidInput::new(
            code,
            format!("{what} may not hold whitespace or control characters, found {c:?}"),
        ));
    }
    Ok(())
}

/// A job's flow-control key (e.g. `customer-17`): jobs of one key share
/// the topic's `key_concurrency` and `key_rate_limit`, and the keys of a
/// topic take turns at hand-out (issue #18). 1–128 characters, printable,
/// no whitespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct JobKey(String);

impl JobKey {
    /// Longest key, in characters.
    pub const MAX_LEN: usize = 128;

    /// Validates a key.
    ///
    /// # Errors
    /// `invalid_key` when empty, too long, or holding whitespace or control
    /// characters.
    pub fn new(key: impl Into<String>) -> Result<Self, InvalidInput> {
        let key = key.into();
        printable("key", "invalid_key", Self::MAX_LEN, &key)?;
        Ok(Self(key))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for JobKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        JobKey::new(s).map_err(serde::de::Error::custom)
    }
}

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
}

/// A job's history in counts (beanstalkd's `stats-job` shows them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JobCounts {
    /// Leases that expired (the holder neither acked nor failed it in time).
    pub timeouts: u32,
    /// Attempts its holder gave back to be tried again: nacks that did not
    /// ask for dead at once, and releases.
    pub releases: u32,
    /// Times it went dead (out of attempts, or a nack asking for it).
    pub buries: u32,
    /// Times it was replayed out of the dead letters.
    pub kicks: u32,
}

/// A job handed to a consumer, with the token that proves the lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// The topic.
    pub topic: Topic,
    /// The job's id.
    pub id: JobId,
    /// Fencing token: ack, nack and touch must present it.
    pub token: String,
    /// Which hand-out this is (1 for the first).
    pub attempt: u32,
    /// The job's due time.
    pub due_at_ms: u64,
    /// When the lease ends unless touched.
    pub lease_deadline_ms: u64,
    /// The job's priority.
    pub priority: u32,
    /// The payload.
    pub body: Body,
}

/// The result of a reserve on one topic.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reservation {
    /// Jobs now leased to the caller, in order.
    pub leases: Vec<Lease>,
    /// The due time of the next scheduled job, if any: when to try again.
    pub next_due_ms: Option<u64>,
}

/// One held job of a batch verb ([`crate::Store::ack_batch`]): which job,
/// and the lease token its holder got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held<'a> {
    /// The job's topic.
    pub topic: &'a Topic,
    /// The job.
    pub id: &'a JobId,
    /// The lease token the reserve handed out.
    pub token: &'a str,
}

/// One nack of a batch ([`crate::Store::nack_batch`]): which job, and the
/// failed attempt as [`crate::Store::nack`] takes it (its token included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldNack<'a> {
    /// The job's topic.
    pub topic: &'a Topic,
    /// The job.
    pub id: &'a JobId,
    /// The failed attempt.
    pub nack: Nack<'a>,
}

/// One lease extension of a batch ([`crate::Store::touch_batch`]): which
/// job, and the lease length [`crate::Store::touch`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldTouch<'a> {
    /// The job's topic.
    pub topic: &'a Topic,
    /// The job.
    pub id: &'a JobId,
    /// The lease token the reserve handed out.
    pub token: &'a str,
    /// New lease from now; `None` is the job's, else the topic's.
    pub lease_ms: Option<u64>,
}

/// A failed attempt as its holder reports it ([`crate::Store::nack`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nack<'a> {
    /// The lease token.
    pub token: &'a str,
    /// Why: kept (clipped) as the job's `last_error`.
    pub error: &'a str,
    /// Retry after this long instead of the retry policy's wait.
    pub retry_in_ms: Option<u64>,
    /// Dead at once, whatever attempts are left (a permanent failure, an
    /// unknown event; beanstalkd's `bury`).
    pub dead: bool,
    /// The job's new priority, kept from here on (beanstalkd's `release`
    /// and `bury` give one); `None` keeps it.
    pub priority: Option<u32>,
}

impl<'a> Nack<'a> {
    /// Retried after the retry policy's wait (dead if it was the last attempt).
    pub fn retry(token: &'a str, error: &'a str) -> Self {
        Self {
            token,
            error,
            retry_in_ms: None,
            dead: false,
            priority: None,
        }
    }

    /// Dead at once.
    pub fn dead(token: &'a str, error: &'a str) -> Self {
        Self {
            dead: true,
            ..Self::retry(token, error)
        }
    }

    /// Retried after `ms` instead of the policy's wait.
    pub fn retry_in(self, ms: u64) -> Self {
        self.retry_in_opt(Some(ms))
    }

    /// With the job's priority changed to `p`.
    pub fn with_priority(self, p: u32) -> Self {
        Self {
            priority: Some(p),
            ..self
        }
    }

    /// Retried after `ms` if given, else the policy's wait.
    pub fn retry_in_opt(self, ms: Option<u64>) -> Self {
        Self {
            retry_in_ms: ms,
            ..self
        }
    }
}

/// What a nack (or an expired lease) did with the attempt that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NackOutcome {
    /// Scheduled again for another attempt.
    Retry {
        /// When it is due again.
        due_at_ms: u64,
        /// The attempt that failed (1 for the first).
        attempt: u32,
    },
    /// Out of attempts: moved to the dead letters.
    Dead {
        /// The attempt that failed: the last one.
        attempt: u32,
    },
}

/// The result of one promotion pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Promoted {
    /// Jobs moved from scheduled to ready.
    pub moved: u64,
    /// Due time of the next scheduled job.
    pub next_due_ms: Option<u64>,
}

/// The result of one expired-lease pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Requeued {
    /// Expired leases scheduled for another attempt.
    pub retried: u64,
    /// Expired leases that were the last attempt.
    pub dead: u64,
    /// The next lease deadline, if any lease is held.
    pub next_deadline_ms: Option<u64>,
    /// Each job taken back and what became of it.
    pub jobs: Vec<(JobId, NackOutcome)>,
}

/// Counts and counters of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TopicStats {
    /// Jobs waiting for their due time.
    pub scheduled: u64,
    /// Due jobs waiting for a consumer.
    pub ready: u64,
    /// Jobs under a lease.
    pub reserved: u64,
    /// Dead letters kept.
    pub dead: u64,
    /// How long the most overdue waiting job has been due, in ms (0 if none).
    pub oldest_overdue_ms: u64,
    /// Running totals since the topic was created.
    pub counters: TopicCounters,
    /// Some parts of the store holding this topic did not answer: the counts
    /// above leave their jobs out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// The parts (Redis shards) that did not answer, when `partial`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// Until when (Unix ms) the topic is paused: nothing is handed out
    /// before then. 0 (left out): not paused.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub paused_until_ms: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Running totals of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TopicCounters {
    /// Jobs created.
    pub enqueued: u64,
    /// Jobs acknowledged.
    pub acked: u64,
    /// Failed attempts (nacks and expired leases).
    pub failed: u64,
    /// Leases that expired.
    pub expired: u64,
    /// Jobs that went dead.
    pub dead: u64,
    /// Jobs cancelled.
    pub cancelled: u64,
    /// Dead letters dropped over the cap.
    pub dead_dropped: u64,
    /// Dead letters replayed.
    pub replayed: u64,
    /// Ready jobs a reserve asked for but held back for want of a
    /// rate-limit token (a job held over several reserves counts each time).
    #[serde(default)]
    pub rate_limited: u64,
}

/// A job as an export lists it ([`crate::Store::list_jobs`]): what it is,
/// with its own overrides (`None`: it follows its topic's setting), so an
/// import elsewhere keeps exactly what the job itself asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedJob {
    /// The job, limits in effect included.
    pub info: JobInfo,
    /// Its own `max_attempts`, if it set one.
    pub max_attempts: Option<u32>,
    /// Its own lease length, if it set one.
    pub lease_ms: Option<u64>,
    /// Its own retry policy, if it set one.
    pub retry: Option<RetryPolicy>,
    /// Its dedup window, if it has one.
    pub dedup_ms: Option<u64>,
}

/// Which page of topics [`crate::Store::list_topics`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicListing<'a> {
    /// The page starts right after this name (exclusive); `None`: at the
    /// first topic. With `backward`, the page ends right before it;
    /// `None`: at the last topic.
    pub cursor: Option<&'a Topic>,
    /// Read the page that ends before `cursor` instead of the one after it
    /// (a "previous page" link; the topics still come in name order).
    pub backward: bool,
    /// Only names that start with it (empty: every name).
    pub prefix: &'a str,
    /// Most topics in the page (at least 1 is read).
    pub limit: usize,
}

impl<'a> TopicListing<'a> {
    /// The page of at most `limit` topics after `cursor`.
    pub fn after(cursor: Option<&'a Topic>, prefix: &'a str, limit: usize) -> Self {
        Self {
            cursor,
            backward: false,
            prefix,
            limit,
        }
    }

    /// The page of at most `limit` topics before `cursor` (the last page
    /// for `None`).
    pub fn before(cursor: Option<&'a Topic>, prefix: &'a str, limit: usize) -> Self {
        Self {
            backward: true,
            ..Self::after(cursor, prefix, limit)
        }
    }
}

/// One page of [`crate::Store::list_topics`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicPage {
    /// Topic names in byte order.
    pub topics: Vec<Topic>,
    /// Whether more topics follow the last one (list on with it as the
    /// cursor) — backward: precede the first one.
    pub more: bool,
}

/// One page of [`crate::Store::list_jobs`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobPage {
    /// The jobs of this page (possibly none even when more follow: a page
    /// looks at a bounded number of jobs and keeps those in the state asked).
    pub jobs: Vec<ListedJob>,
    /// Where the next page starts; `None` when the listing is complete.
    pub cursor: Option<String>,
}

/// A job to write as it was elsewhere ([`crate::Store::import_jobs`]): its
/// due time, attempts and dead letter kept, unlike an enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportJob {
    /// Its id.
    pub id: JobId,
    /// [`JobState::Dead`] for a dead letter; else (scheduled or ready) the
    /// job waits: ready when `due_at_ms` has passed, scheduled until then.
    /// Never [`JobState::Reserved`] (see [`ImportJob::check`]).
    pub state: JobState,
    /// When it is (or was) due.
    pub due_at_ms: u64,
    /// Its priority.
    pub priority: u32,
    /// Hand-outs so far.
    pub attempts: u32,
    /// Its own `max_attempts` override.
    pub max_attempts: Option<u32>,
    /// Its own lease override.
    pub lease_ms: Option<u64>,
    /// Its own retry policy.
    pub retry: Option<RetryPolicy>,
    /// Its dedup window.
    pub dedup_ms: Option<u64>,
    /// The payload.
    pub body: Body,
    /// The last failure's text.
    pub last_error: Option<String>,
    /// When it was first enqueued.
    pub created_at_ms: u64,
    /// When it died (dead letters; required for them).
    pub died_at_ms: Option<u64>,
    /// Its flow-control key.
    pub key: Option<JobKey>,
}

impl ImportJob {
    /// Checks the fields a store relies on.
    ///
    /// # Errors
    /// `invalid_state` for a reserved job (a lease belongs to a consumer of
    /// the store it was taken from: export it as ready at its deadline),
    /// `invalid_died_at` for a dead job without `died_at_ms` or a waiting
    /// one with it, the body, lease, attempts and dedup checks of an
    /// enqueue, `invalid_due_at` for a job due further ahead than an
    /// enqueue may ask ([`crate::Limits::latest_due`]), `invalid_time` for a time past
    /// 2^53 ms (no store keeps it exactly), `invalid_attempts` over
    /// [`crate::limits::MAX_ATTEMPTS`], `invalid_error` for a `last_error`
    /// over [`crate::limits::MAX_ERROR_BYTES`].
    pub fn check(&self, limits: &crate::Limits, now_ms: u64) -> Result<(), InvalidInput> {
        use crate::limits;
        /// The largest integer a double (a Lua number) holds exactly.
        const MAX_TIME_MS: u64 = (1 << 53) - 1;
        for (name, t) in [
            ("due_at_ms", Some(self.due_at_ms)),
            ("created_at_ms", Some(self.created_at_ms)),
            ("died_at_ms", self.died_at_ms),
        ] {
            if t.is_some_and(|t| t > MAX_TIME_MS) {
                return Err(InvalidInput::new(
                    "invalid_time",
                    format!("job {}: {name} must be at most {MAX_TIME_MS}", self.id),
                ));
            }
        }
        limits.check_due_at(self.due_at_ms, now_ms)?;
        match (self.state, self.died_at_ms) {
            (JobState::Reserved, _) => {
                return Err(InvalidInput::new(
                    "invalid_state",
                    format!(
                        "job {}: state reserved cannot be imported (its lease belongs to the store it came from): import it as ready, due at its lease deadline",
                        self.id
                    ),
                ));
            }
            (JobState::Dead, None) => {
                return Err(InvalidInput::new(
                    "invalid_died_at",
                    format!("job {}: a dead job needs died_at_ms", self.id),
                ));
            }
            (JobState::Scheduled | JobState::Ready, Some(_)) => {
                return Err(InvalidInput::new(
                    "invalid_died_at",
                    format!("job {}: died_at_ms is only for dead jobs", self.id),
                ));
            }
            _ => {}
        }
        limits.check_body(self.body.len())?;
        if let Some(n) = self.max_attempts {
            limits::check_max_attempts(n)?;
        }
        if let Some(ms) = self.lease_ms {
            limits::check_lease(ms)?;
        }
        if let Some(ms) = self.dedup_ms {
            limits::check_dedup(ms)?;
        }
        if let Some(r) = &self.retry {
            r.validate()?;
        }
        if self.attempts > limits::MAX_ATTEMPTS {
            return Err(InvalidInput::new(
                "invalid_attempts",
                format!(
                    "job {}: attempts must be at most {}, got {}",
                    self.id,
                    limits::MAX_ATTEMPTS,
                    self.attempts
                ),
            ));
        }
        if self
            .last_error
            .as_deref()
            .is_some_and(|e| e.len() > limits::MAX_ERROR_BYTES)
        {
            return Err(InvalidInput::new(
                "invalid_error",
                format!(
                    "job {}: last_error is longer than {} bytes",
                    self.id,
                    limits::MAX_ERROR_BYTES
                ),
            ));
        }
        Ok(())
    }
}

/// What an import did with one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The job's id.
    pub id: JobId,
    /// True when the job was written; false when a job with this id
    /// exists (it is left as it is) or the id is in its dedup window.
    pub created: bool,
    /// True when nothing was written because a job with this id ended
    /// within its dedup window here.
    pub deduplicated: bool,
    /// The job's state after the call (the existing job's when not
    /// created; meaningless when deduplicated).
    pub state: JobState,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_rules() {
        assert!(Topic::new("orders.close-unpaid:v2_x").is_ok());
        assert_eq!(Topic::new("").unwrap_err().code, "invalid_topic");
        assert!(Topic::new("a".repeat(200)).is_ok());
        assert!(Topic::new("a".repeat(201)).is_err());
        for bad in ["a b", "a{b}", "a#1", "a%2F", "é", ".", "..", "a?b"] {
            assert!(Topic::new(bad).is_err(), "{bad}");
        }
        assert!(Topic::new("...").is_ok() && Topic::new(".a").is_ok());
        // beanstalkd's tube characters.
        assert!(Topic::new("mail/out+retry;v1$(x)").is_ok());
    }

    #[test]
    fn prefix_ranges() {
        assert_eq!(Topic::prefix_range(""), Some((String::new(), None)));
        assert_eq!(
            Topic::prefix_range("ab"),
            Some(("ab".to_string(), Some("ac".to_string())))
        );
        // `_` is a topic character like any other, not a wildcard.
        assert_eq!(
            Topic::prefix_range("a_"),
            Some(("a_".to_string(), Some("a`".to_string())))
        );
        assert_eq!(
            Topic::prefix_range("z"),
            Some(("z".to_string(), Some("{".to_string())))
        );
        for bad in ["a%", "a b", "é", "#"] {
            assert_eq!(Topic::prefix_range(bad), None, "{bad}");
            assert_eq!(Topic::check_prefix(bad).unwrap_err().code, "invalid_prefix");
        }
        assert!(Topic::check_prefix(&"a".repeat(200)).is_ok());
        assert!(Topic::check_prefix(&"a".repeat(201)).is_err());
        // Every name with the prefix is in the range, and no other.
        let (start, end) = Topic::prefix_range("ab").unwrap();
        let end = end.unwrap();
        for (name, inside) in [
            ("ab", true),
            ("ab.x", true),
            ("abz", true),
            ("aa", false),
            ("ac", false),
            ("a", false),
        ] {
            let n = name.to_string();
            assert_eq!(n >= start && n < end, inside, "{name}");
        }
    }

    #[test]
    fn id_rules() {
        assert!(JobId::new("order-42/ünï").is_ok());
        assert!(JobId::new("...").is_ok() && JobId::new("./a").is_ok());
        assert!(JobId::new("x".repeat(256)).is_ok());
        assert!(JobId::new("x".repeat(257)).is_err());
        for bad in ["", "a b", "a\tb", "a\u{7}b", "a\nb", ".", ".."] {
            assert_eq!(JobId::new(bad).unwrap_err().code, "invalid_id", "{bad:?}");
        }
        let a = JobId::generate();
        let b = JobId::generate();
        assert_ne!(a, b);
        assert!(JobId::new(a.as_str()).is_ok());
    }

    #[test]
    fn body_round_trip() {
        let j = Body::Json("{\"a\":1}".into());
        assert_eq!(Body::from_stored(j.as_bytes().to_vec(), true), j);
        let b = Body::Bytes(vec![0, 255]);
        assert_eq!(Body::from_stored(vec![0, 255], false), b);
    }
}
