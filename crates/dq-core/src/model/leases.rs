//! Leases: a job handed out ([`Lease`]), the calls of its holder (ack,
//! nack, touch, one or in batches) and what the store's passes move.

use super::{Body, JobId, Topic};

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
    /// The trace context the job was enqueued with ([`crate::NewJob::trace`]):
    /// the work it starts continues that trace.
    pub trace: Option<crate::TraceContext>,
}

/// The result of a reserve on one topic.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reservation {
    /// Jobs now leased to the caller, in order.
    pub leases: Vec<Lease>,
    /// The due time of the next scheduled job, if any: when to try again.
    pub next_due_ms: Option<u64>,
    /// The jobs with a trace context that this call ended because their
    /// expiry had passed ([`crate::Store::reserve`]), for their trace (a
    /// store that does not keep expiry leaves it empty).
    pub expired: Vec<ExpiredJob>,
}

/// A job a reserve ended unhandled because its expiry had passed.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpiredJob {
    /// Its id.
    pub id: crate::JobId,
    /// The trace context it was enqueued with.
    pub trace: crate::TraceContext,
}

/// One ack of a batch ([`crate::Store::ack_batch`]): which job, and the
/// lease token its holder got. The one shape of an ack item, from the
/// front-ends through the service to every store (the wire's
/// `dq_api::AckItem` is mapped to it by the HTTP front-end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckItem {
    /// The job's topic.
    pub topic: Topic,
    /// The job.
    pub id: JobId,
    /// The lease token the reserve handed out.
    pub token: String,
}

/// One nack of a batch ([`crate::Store::nack_batch`]): which job, and the
/// failed attempt as [`crate::Store::nack`] takes it ([`NackItem::nack`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NackItem {
    /// The job's topic.
    pub topic: Topic,
    /// The job.
    pub id: JobId,
    /// The lease token the reserve handed out.
    pub token: String,
    /// Why: kept (clipped by the store) as the job's `last_error`.
    pub error: String,
    /// Retry after this long instead of the retry policy's wait.
    pub retry_in_ms: Option<u64>,
    /// Dead at once, whatever attempts are left.
    pub dead: bool,
    /// The job's new priority, kept from here on; `None` keeps it.
    pub priority: Option<u32>,
}

impl AckItem {
    /// The ack of job `id` of `topic` under the lease `token`.
    pub fn new(topic: &Topic, id: &JobId, token: &str) -> Self {
        Self {
            topic: topic.clone(),
            id: id.clone(),
            token: token.to_owned(),
        }
    }
}

impl NackItem {
    /// The nack of job `id` of `topic`: the failed attempt `nack`.
    pub fn new(topic: &Topic, id: &JobId, nack: Nack<'_>) -> Self {
        Self {
            topic: topic.clone(),
            id: id.clone(),
            token: nack.token.to_owned(),
            error: nack.error.to_owned(),
            retry_in_ms: nack.retry_in_ms,
            dead: nack.dead,
            priority: nack.priority,
        }
    }

    /// The failed attempt, as [`crate::Store::nack`] takes it.
    pub fn nack(&self) -> Nack<'_> {
        Nack {
            token: &self.token,
            error: &self.error,
            retry_in_ms: self.retry_in_ms,
            dead: self.dead,
            priority: self.priority,
        }
    }
}

/// One lease extension of a batch ([`crate::Store::touch_batch`]): which
/// job, and the lease length [`crate::Store::touch`] takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TouchItem {
    /// The job's topic.
    pub topic: Topic,
    /// The job.
    pub id: JobId,
    /// The lease token the reserve handed out.
    pub token: String,
    /// New lease from now; `None` is the job's, else the topic's.
    pub lease_ms: Option<u64>,
}

impl TouchItem {
    /// The extension of job `id`'s lease `token` in `topic` by `lease_ms`
    /// (`None`: the job's, else the topic's).
    pub fn new(topic: &Topic, id: &JobId, token: &str, lease_ms: Option<u64>) -> Self {
        Self {
            topic: topic.clone(),
            id: id.clone(),
            token: token.to_owned(),
            lease_ms,
        }
    }
}

/// How a job given back by [`Store::release`](crate::Store::release) is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack {
    /// Its holder released it (HTTP `release`): counted in its `releases`.
    Released,
    /// It went back because its holder went away (a beanstalkd connection
    /// closed while holding it): no count changes, as in beanstalkd.
    Dropped,
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
