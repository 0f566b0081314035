//! The Lua scripts, one file per state change, each prepended with the shared
//! helpers of `lua/common.lua` and a generated line of config defaults.
//!
//! Scripts run by SHA (EVALSHA); `redis::Script` reloads a script on NOSCRIPT
//! (after a Redis restart or `SCRIPT FLUSH`). dq sends each script as its own
//! command, never inside a pipeline, because redis-rs does not reload
//! scripts inside pipelines (redis-rs #1394). Every script is safe to
//! retry after a connection error: the worst case is a reported "exists"
//! or "not found" for work that was done.

use dq_core::TopicConfig;
use redis::Script;

const COMMON: &str = include_str!("lua/common.lua");

/// Width of a timing-wheel bucket (see `lua/common.lua`): jobs due later than
/// the next bucket wait in per-bucket lists, not in the schedule ZSET.
pub(crate) const WHEEL_MS: u64 = 60_000;

/// The loaded scripts.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) enqueue: Script,
    pub(crate) reserve: Script,
    pub(crate) reserve_job: Script,
    pub(crate) promote_due: Script,
    pub(crate) touch: Script,
    pub(crate) ack: Script,
    pub(crate) ack_batch: Script,
    pub(crate) nack: Script,
    pub(crate) nack_batch: Script,
    pub(crate) touch_batch: Script,
    pub(crate) release: Script,
    pub(crate) requeue_expired: Script,
    pub(crate) cancel: Script,
    pub(crate) reschedule: Script,
    pub(crate) replay_dead: Script,
    pub(crate) purge_dead: Script,
    pub(crate) delete_topic: Script,
    pub(crate) get: Script,
    pub(crate) forward: Script,
    pub(crate) list_jobs: Script,
    pub(crate) import_jobs: Script,
    /// Not a topic script: no prelude, one key (the records hash).
    pub(crate) raise_mark: Script,
}

impl Scripts {
    pub(crate) fn new(wake_channel: &str) -> Self {
        let d = TopicConfig::default();
        let prelude = format!(
            "local DEFAULTS = {{max_attempts = {}, lease_ms = {}, dead_cap = {}, default_delay_ms = {}, retry = '{}'}}\nlocal WAKE_CHANNEL = '{}'\nlocal WHEEL_MS = {}\nlocal MAX_BATCH = {}\n{}",
            d.max_attempts,
            d.lease_ms,
            d.dead_cap,
            d.default_delay_ms,
            d.retry.encode(),
            wake_channel.replace('\'', ""),
            WHEEL_MS,
            dq_core::limits::MAX_BATCH,
            COMMON
        );
        let s = |body: &str| Script::new(&format!("{prelude}\n{body}"));
        Self {
            enqueue: s(include_str!("lua/enqueue.lua")),
            reserve: s(include_str!("lua/reserve.lua")),
            reserve_job: s(include_str!("lua/reserve_job.lua")),
            promote_due: s(include_str!("lua/promote_due.lua")),
            touch: s(include_str!("lua/touch.lua")),
            ack: s(include_str!("lua/ack.lua")),
            ack_batch: s(include_str!("lua/ack_batch.lua")),
            nack: s(include_str!("lua/nack.lua")),
            nack_batch: s(include_str!("lua/nack_batch.lua")),
            touch_batch: s(include_str!("lua/touch_batch.lua")),
            release: s(include_str!("lua/release.lua")),
            requeue_expired: s(include_str!("lua/requeue_expired.lua")),
            cancel: s(include_str!("lua/cancel.lua")),
            reschedule: s(include_str!("lua/reschedule.lua")),
            replay_dead: s(include_str!("lua/replay_dead.lua")),
            purge_dead: s(include_str!("lua/purge_dead.lua")),
            delete_topic: s(include_str!("lua/delete_topic.lua")),
            get: s(include_str!("lua/get.lua")),
            forward: s(include_str!("lua/forward.lua")),
            list_jobs: s(include_str!("lua/list_jobs.lua")),
            import_jobs: s(include_str!("lua/import_jobs.lua")),
            raise_mark: Script::new(include_str!("lua/raise_mark.lua")),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 20] {
        [
            &self.list_jobs,
            &self.import_jobs,
            &self.get,
            &self.release,
            &self.enqueue,
            &self.reserve,
            &self.promote_due,
            &self.touch,
            &self.ack,
            &self.ack_batch,
            &self.nack,
            &self.nack_batch,
            &self.touch_batch,
            &self.requeue_expired,
            &self.cancel,
            &self.reschedule,
            &self.replay_dead,
            &self.purge_dead,
            &self.delete_topic,
            &self.raise_mark,
        ]
    }
}
