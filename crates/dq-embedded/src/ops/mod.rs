//! Each store operation as SQL, run by the writer thread inside a
//! transaction. The semantics mirror `dq-redis`'s Lua scripts one for one
//! (`crates/dq-redis/src/lua/`); the conformance suite holds both to the
//! same contract.
//!
//! Every transition of a job between states goes through [`place`] or
//! [`counts`], which keep the per-state counts in the `topics` row (`n_scheduled`, `n_ready`, `n_reserved`, `n_dead`)
//! so stats never count rows.
//!
//! This module holds what every verb shares (the state codes, a topic's id
//! and settings, its counts, [`place`]) and names each verb for the
//! store (`crate::EmbeddedStore`); the verbs live one group a file:
//!
//! - `enqueue`: enqueue (`enqueue.lua`).
//! - `promote`: due jobs to ready (`promote_due.lua`), also the first step
//!   of every reserve.
//! - `reserve`: hand-out of ready jobs under leases (`reserve.lua`); its
//!   `keyed` child the round of flow-control keys, its `job` child one job
//!   by id (`reserve_job.lua`).
//! - `token`: a lease's token, which names the job's row.
//! - `leases`: what a lease holder does — touch, ack, nack, release and
//!   their batches — and the end of leases that expired (`ack.lua`,
//!   `ack_batch.lua`, `touch.lua`, `touch_batch.lua`, `nack.lua`,
//!   `nack_batch.lua`, `release.lua`, `requeue_expired.lua`).
//! - `cancel`: cancel and reschedule a waiting job (`cancel.lua`,
//!   `reschedule.lua`).
//! - `dead`: dead letters — replayed, purged, trimmed to their cap
//!   (`replay_dead.lua`, `purge_dead.lua`).
//! - `jobs`: reading jobs — one by id, a page by id, a state's first
//!   (`get.lua`, `list_jobs.lua`).
//! - `import`: jobs written as another store held them (`import_jobs.lua`).
//! - `topics`: topic names, settings, pauses and stats.
//! - `delete_topic`: a topic and its jobs deleted in bounded steps
//!   (`delete_topic.lua`).
//! - `records`: named records and counters (schedules, API keys;
//!   `raise_mark.lua`).
//! - `ping`: the health probe.

use dq_core::*;
use rusqlite::{OptionalExtension, params};

use crate::writer::{Ctx, OpResult};

mod cancel;
mod dead;
mod delete_topic;
mod enqueue;
mod import;
mod jobs;
mod leases;
mod ping;
mod promote;
mod records;
mod reserve;
mod token;
mod topics;

pub(crate) use cancel::{cancel, reschedule};
pub(crate) use dead::{purge_dead, replay_dead};
pub(crate) use delete_topic::delete_topic;
pub(crate) use enqueue::enqueue;
pub(crate) use import::import_jobs;
pub(crate) use jobs::{get, list_dead, list_jobs, list_ready, list_scheduled};
pub(crate) use leases::{
    ack, ack_batch, nack, nack_batch, release, requeue_expired, touch, touch_batch,
};
pub(crate) use ping::ping;
pub(crate) use promote::promote_due;
pub(crate) use records::{
    delete_record, get_record, list_records, next_seq, put_record, raise_mark,
};
pub(crate) use reserve::{reserve, reserve_job};
pub(crate) use topics::{configure_topic, list_topics, pause_topic, stats, topic_config, topics};

const SCHEDULED: i64 = 0;
const READY: i64 = 1;
const RESERVED: i64 = 2;
const DEAD: i64 = 3;

/// Most jobs moved or deleted per statement: the store contract's one bound.
const BATCH: i64 = dq_core::limits::MAX_BATCH as i64;

fn state_of(code: i64) -> JobState {
    match code {
        SCHEDULED => JobState::Scheduled,
        READY => JobState::Ready,
        RESERVED => JobState::Reserved,
        _ => JobState::Dead,
    }
}

/// The topic's id, if the topic exists.
fn tid(cx: &mut Ctx, topic: &Topic) -> OpResult<Option<i64>> {
    if let Some(t) = cx.tids.get(topic.as_str()) {
        return Ok(Some(*t));
    }
    let t: Option<i64> = cx
        .conn
        .prepare_cached("SELECT tid FROM topics WHERE name = ?1")?
        .query_row([topic.as_str()], |r| r.get(0))
        .optional()?;
    if let Some(t) = t {
        cx.tids.insert(topic.as_str().to_string(), t);
    }
    Ok(t)
}

/// The topic's id, creating the topic if needed.
fn ensure_tid(cx: &mut Ctx, topic: &Topic) -> OpResult<i64> {
    if let Some(t) = tid(cx, topic)? {
        return Ok(t);
    }
    cx.conn
        .prepare_cached("INSERT INTO topics (name) VALUES (?1)")?
        .execute([topic.as_str()])?;
    let t = cx.conn.last_insert_rowid();
    cx.tids.insert(topic.as_str().to_string(), t);
    cx.created.push(topic.as_str().to_string());
    Ok(t)
}

fn config(cx: &Ctx, tid: i64) -> OpResult<TopicConfig> {
    let d = TopicConfig::default();
    let c = cx
        .conn
        .prepare_cached(
            "SELECT max_attempts, lease_ms, dead_cap, default_delay_ms, retry, delivery, dedup_ms, paused, rate_limit,
               key_concurrency, key_rate_limit, expires_ms, on_expiry FROM topics WHERE tid = ?1",
        )?
        .query_row([tid], |r| {
            Ok(TopicConfig {
                max_attempts: r.get::<_, Option<u32>>(0)?.unwrap_or(d.max_attempts),
                lease_ms: r.get::<_, Option<u64>>(1)?.unwrap_or(d.lease_ms),
                dead_cap: r.get::<_, Option<u64>>(2)?.unwrap_or(d.dead_cap),
                default_delay_ms: r.get::<_, Option<u64>>(3)?.unwrap_or(d.default_delay_ms),
                retry: r
                    .get::<_, Option<String>>(4)?
                    .and_then(|s| RetryPolicy::decode(&s))
                    .unwrap_or(d.retry.clone()),
                delivery: r
                    .get::<_, Option<String>>(5)?
                    .and_then(|s| serde_json::from_str(&s).ok())
                    .unwrap_or(d.delivery.clone()),
                partitions: 1,
                dedup_ms: r.get::<_, Option<u64>>(6)?.unwrap_or(d.dedup_ms),
                paused: r.get(7)?,
                rate_limit: r
                    .get::<_, Option<String>>(8)?
                    .and_then(|s| RateLimit::decode(&s)),
                key_concurrency: r.get(9)?,
                key_rate_limit: r
                    .get::<_, Option<String>>(10)?
                    .and_then(|s| RateLimit::decode(&s)),
                expires_ms: r.get::<_, Option<u64>>(11)?.unwrap_or(d.expires_ms),
                on_expiry: r
                    .get::<_, Option<String>>(12)?
                    .map_or(d.on_expiry, |s| OnExpiry::decode(&s)),
            })
        })?;
    Ok(c)
}

/// Adds to a running total of the topic. `name` is one of the counter columns.
fn bump(cx: &Ctx, tid: i64, name: &'static str, n: i64) -> OpResult<()> {
    if n != 0 {
        cx.conn
            .prepare_cached(&format!(
                "UPDATE topics SET {name} = {name} + ?1 WHERE tid = ?2"
            ))?
            .execute(params![n, tid])?;
    }
    Ok(())
}

/// Adds `d[state]` to the topic's count of jobs in each state.
fn counts(cx: &Ctx, tid: i64, d: [i64; 4]) -> OpResult<()> {
    if d != [0; 4] {
        cx.conn
            .prepare_cached(
                "UPDATE topics SET n_scheduled = n_scheduled + ?1, n_ready = n_ready + ?2,
                 n_reserved = n_reserved + ?3, n_dead = n_dead + ?4 WHERE tid = ?5",
            )?
            .execute(params![d[0], d[1], d[2], d[3], tid])?;
    }
    Ok(())
}

fn delta(from: Option<i64>, to: Option<i64>) -> [i64; 4] {
    let mut d = [0; 4];
    if let Some(f) = from {
        d[f as usize] -= 1;
    }
    if let Some(t) = to {
        d[t as usize] += 1;
    }
    d
}

/// Due time of the schedule's head.
fn sched_head(cx: &Ctx, tid: i64) -> OpResult<Option<u64>> {
    Ok(cx
        .conn
        .prepare_cached("SELECT min(due_ms) FROM jobs WHERE tid = ?1 AND state = 0")?
        .query_row([tid], |r| r.get::<_, Option<u64>>(0))?)
}

/// Puts job `seq` (coming from state `from`) where its due time says: ready
/// if due, else scheduled. Wakes the topic's waiters, after commit, when the
/// job is due now or is the new head of the schedule.
fn place(
    cx: &mut Ctx,
    topic: &Topic,
    tid: i64,
    seq: i64,
    from: Option<i64>,
    due: u64,
    now: u64,
) -> OpResult<i64> {
    let (to, wake) = if due <= now {
        (READY, true)
    } else {
        let head = sched_head(cx, tid)?;
        (SCHEDULED, head.is_none_or(|h| due < h))
    };
    if from == Some(READY) || to == READY {
        // The ready jobs are in memory, by key, priority and place (the
        // due time, or the put time of a job in put order).
        let (priority, old_due, key, put_at): (i64, i64, Option<String>, Option<i64>) = cx
            .conn
            .prepare_cached(
                "SELECT priority, due_ms, fkey, CASE WHEN put_delay_ms IS NOT NULL THEN created_ms END
                 FROM jobs WHERE seq = ?1",
            )?
            .query_row([seq], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
        if from == Some(READY) {
            cx.mem.remove_ready(
                tid,
                key.as_deref(),
                priority,
                put_at.unwrap_or(old_due),
                seq,
            );
        }
        if to == READY {
            cx.mem.add_ready(
                tid,
                key.as_deref(),
                priority,
                put_at.unwrap_or(due as i64),
                seq,
            );
        }
    }
    cx.conn
        .prepare_cached("UPDATE jobs SET state = ?1, due_ms = ?2 WHERE seq = ?3")?
        .execute(params![to, due as i64, seq])?;
    counts(cx, tid, delta(from, Some(to)))?;
    if wake {
        cx.wake.push(topic.as_str().to_string());
    }
    Ok(to)
}

/// How often the held statement `which` ran on the writer's connection
/// (the tests of `enqueue` and `reserve`).
#[cfg(test)]
async fn runs(s: &crate::EmbeddedStore, which: crate::writer::HotSql) -> i32 {
    s.writer
        .read(move |cx| {
            Ok(cx.conn.with(
                which,
                |st| Ok(st.get_status(rusqlite::StatementStatus::Run)),
            )?)
        })
        .await
        .unwrap()
}
