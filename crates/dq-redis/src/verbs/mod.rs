//! The [`Store`](dq_core::Store) verbs of [`RedisStore`],
//! by group: each file turns a verb's arguments into its script's ARGV and
//! its script's reply into dq types, beside the scripts (`lua/`) it runs.
//! `lib.rs`'s `impl Store` hands each verb to its function here: each
//! `pub(crate) fn` is the [`Store`](dq_core::Store) method of its name
//! (documented there), `store` standing for `self`.
//!
//! - [`enqueue`]: enqueue, import_jobs (`enqueue.lua`, `import_jobs.lua`).
//! - [`reserve`]: reserve, reserve_job (`reserve.lua`, `reserve_job.lua`),
//!   and the reader of the job records their replies carry.
//! - [`leases`]: what a lease holder does: touch, ack, nack, release, their
//!   batches, ack_and_write (`touch.lua`, `ack.lua`, `nack.lua`,
//!   `release.lua`, `*_batch.lua`, `forward.lua`).
//! - [`passes`]: the dispatcher's passes: promote_due, requeue_expired
//!   (`promote_due.lua`, `requeue_expired.lua`).
//! - [`jobs`]: one job or a listing: get, cancel, reschedule, list_ready,
//!   list_scheduled, list_jobs (`get.lua`, `cancel.lua`, `reschedule.lua`,
//!   `list_jobs.lua`).
//! - [`dead`]: dead letters: list_dead, replay_dead, purge_dead (`get.lua`,
//!   `replay_dead.lua`, `purge_dead.lua`).
//! - [`topics`]: a topic's settings, stats, pause and deletion, and the
//!   topic listings (`delete_topic.lua`; the rest plain commands).
//! - [`records`]: named records and counters (`raise_mark.lua`; the rest
//!   plain commands).
//! - [`server`]: the server itself: ping, time, memory, members, wake-ups.
//!
//! Here: the argument encodings every group uses.

pub(crate) mod dead;
pub(crate) mod enqueue;
pub(crate) mod jobs;
pub(crate) mod leases;
pub(crate) mod passes;
pub(crate) mod records;
pub(crate) mod reserve;
pub(crate) mod server;
pub(crate) mod topics;

use crate::{RedisStore, TimeSource};

/// A number as a script argument.
fn n(v: u64) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// An optional value as a script argument: empty when absent.
fn opt(v: Option<impl ToString>) -> Vec<u8> {
    v.map(|x| x.to_string().into_bytes()).unwrap_or_default()
}

impl RedisStore {
    /// The "now" argument of a script: empty (the script reads the server's
    /// clock) unless the caller's time decides.
    fn now_arg(&self, now_ms: u64) -> Vec<u8> {
        match self.clock {
            TimeSource::Server => Vec::new(),
            TimeSource::Caller => n(now_ms),
        }
    }
}
