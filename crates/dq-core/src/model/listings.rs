//! Counts and listings: a topic's [`TopicStats`], the pages of topics
//! and of jobs an export reads.

use serde::{Deserialize, Serialize};

use super::{JobInfo, Topic};
use crate::retry::RetryPolicy;

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
    /// Leases that ran out (the holder neither acked nor failed the job in
    /// time): each is also a failed attempt. Not jobs that expired, which
    /// are [`TopicCounters::expired_unhandled`].
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
    /// Jobs whose own expiry (`expires_at_ms`) passed before their next
    /// hand-out: never handed out again, each went dead with the last error
    /// `expired`, or was dropped (the topic's `on_expiry`).
    #[serde(default)]
    pub expired_unhandled: u64,
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
