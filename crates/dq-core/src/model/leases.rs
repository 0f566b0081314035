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
