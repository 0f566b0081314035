//! Each store operation as SQL, run by the writer thread inside a
//! transaction. The semantics mirror `dq-redis`'s Lua scripts one for one;
//! the conformance suite holds both to the same contract.
//!
//! Every transition of a job between states goes through [`place`] or
//! [`counts`], which keep the per-state counts in the `topics` row (`n_scheduled`, `n_ready`, `n_reserved`, `n_dead`)
//! so stats never count rows.

use dq_core::*;
use rusqlite::{OptionalExtension, params};

use crate::ordered::died_place;
use crate::writer::{Ctx, Failure, HotSql, OpResult, run_cached};

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
               key_concurrency, key_rate_limit FROM topics WHERE tid = ?1",
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
        // The ready jobs are in memory, by key, priority and due time.
        let (priority, old_due, key): (i64, i64, Option<String>) = cx
            .conn
            .prepare_cached("SELECT priority, due_ms, fkey FROM jobs WHERE seq = ?1")?
            .query_row([seq], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        if from == Some(READY) {
            cx.mem
                .remove_ready(tid, key.as_deref(), priority, old_due, seq);
        }
        if to == READY {
            cx.mem
                .add_ready(tid, key.as_deref(), priority, due as i64, seq);
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

pub(crate) fn enqueue(
    cx: &mut Ctx,
    topic: &Topic,
    jobs: &[NewJob],
    now: u64,
) -> OpResult<Vec<Enqueued>> {
    let tid = ensure_tid(cx, topic)?;
    let mut cfg: Option<TopicConfig> = None;
    let mut topic_dedup: Option<i64> = None;
    // Ids in an open dedup window: looked up only when the topic has any,
    // after dropping the windows that ended.
    let dedup = cx
        .conn
        .prepare_cached("SELECT 1 FROM dedup WHERE tid = ?1 LIMIT 1")?
        .exists([tid])?
        && {
            cx.conn
                .prepare_cached("DELETE FROM dedup WHERE tid = ?1 AND until_ms <= ?2")?
                .execute(params![tid, now as i64])?;
            cx.conn
                .prepare_cached("SELECT 1 FROM dedup WHERE tid = ?1 LIMIT 1")?
                .exists([tid])?
        };
    // The schedule's head, kept up to date in memory over the batch, decides
    // the wake-up the same way `place` does, without a query per job.
    let mut head = sched_head(cx, tid)?;
    let mut wake = false;
    let mut d = [0i64; 4];
    let mut created = 0;
    let mut out = Vec::with_capacity(jobs.len());
    for j in jobs {
        let id = j.id.clone().unwrap_or_else(JobId::generate);
        if dedup
            && cx
                .conn
                .prepare_cached(
                    "SELECT 1 FROM dedup WHERE tid = ?1 AND id = ?2
                     AND NOT EXISTS (SELECT 1 FROM jobs WHERE tid = ?1 AND id = ?2)",
                )?
                .exists(params![tid, id.as_str()])?
        {
            out.push(Enqueued {
                id,
                created: false,
                replaced: false,
                deduplicated: true,
                due_at_ms: 0,
                state: JobState::Scheduled,
            });
            continue;
        }
        if cfg.is_none() && j.when == When::TopicDefault {
            cfg = Some(config(cx, tid)?);
        }
        let due = match j.when {
            When::DelayMs(ms) => now + ms,
            // A due time in the past is now: lateness counts from the enqueue.
            When::DueAtMs(t) => t.max(now),
            When::TopicDefault => now + cfg.as_ref().map_or(0, |c| c.default_delay_ms),
        };
        // The topic's window: one small read per call, only when a job
        // names none.
        if j.dedup_ms.is_none() && topic_dedup.is_none() {
            topic_dedup = Some(
                cx.conn
                    .prepare_cached("SELECT coalesce(dedup_ms, 0) FROM topics WHERE tid = ?1")?
                    .query_row([tid], |r| r.get::<_, i64>(0))?,
            );
        }
        let dedup_ms = j
            .dedup_ms
            .map(|ms| ms as i64)
            .or(topic_dedup)
            .filter(|ms| *ms > 0);
        let state = if due <= now { READY } else { SCHEDULED };
        // Most jobs set none of the columns the plain insert leaves NULL.
        let plain = j.max_attempts.is_none()
            && j.lease_ms.is_none()
            && j.retry.is_none()
            && dedup_ms.is_none()
            && j.key.is_none();
        let insert = |cx: &Ctx| -> OpResult<usize> {
            if plain {
                return Ok(cx.conn.with(HotSql::InsertPlain, |st| {
                    st.execute(params![
                        tid,
                        id.as_str(),
                        state,
                        due as i64,
                        j.priority,
                        now as i64,
                        j.body.is_json(),
                        j.body.as_bytes(),
                    ])
                })?);
            }
            Ok(cx.conn.with(HotSql::Insert, |st| {
                st.execute(params![
                    tid,
                    id.as_str(),
                    state,
                    due as i64,
                    j.priority,
                    j.max_attempts,
                    j.lease_ms.map(|v| v as i64),
                    j.retry.as_ref().map(RetryPolicy::encode),
                    now as i64,
                    j.body.is_json(),
                    j.body.as_bytes(),
                    dedup_ms,
                    j.key.as_ref().map(JobKey::as_str),
                ])
            })?)
        };
        let mut replaced = false;
        if insert(cx)? == 0 {
            #[allow(clippy::type_complexity)]
            let (seq, old, old_due, old_priority, old_key): (i64, i64, u64, i64, Option<String>) = cx
                .conn
                .prepare_cached(
                    "SELECT seq, state, due_ms, priority, fkey FROM jobs WHERE tid = ?1 AND id = ?2",
                )?
                .query_row(params![tid, id.as_str()], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })?;
            if !(j.replace && (old == SCHEDULED || old == READY)) {
                out.push(Enqueued {
                    id,
                    created: false,
                    replaced: false,
                    deduplicated: false,
                    due_at_ms: old_due,
                    state: state_of(old),
                });
                continue;
            }
            cx.conn.with(HotSql::Delete, |st| st.execute([seq]))?;
            if old == READY {
                cx.mem
                    .remove_ready(tid, old_key.as_deref(), old_priority, old_due as i64, seq);
            }
            d[old as usize] -= 1;
            if old == SCHEDULED && head == Some(old_due) {
                // The head may have been this job: ask again.
                head = sched_head(cx, tid)?;
            }
            insert(cx)?;
            replaced = true;
        } else {
            created += 1;
        }
        d[state as usize] += 1;
        if state == READY {
            let seq = cx.conn.last_insert_rowid();
            cx.mem.add_ready(
                tid,
                j.key.as_ref().map(JobKey::as_str),
                i64::from(j.priority),
                due as i64,
                seq,
            );
            wake = true;
        } else {
            if head.is_none_or(|h| due < h) {
                wake = true;
            }
            head = Some(head.map_or(due, |h| h.min(due)));
        }
        out.push(Enqueued {
            id,
            created: !replaced,
            replaced,
            deduplicated: false,
            due_at_ms: due,
            state: state_of(state),
        });
    }
    counts(cx, tid, d)?;
    bump(cx, tid, "enqueued", created)?;
    if jobs.iter().any(|j| j.key.is_some()) {
        mark_keyed(cx, tid)?;
    }
    if wake {
        cx.wake.push(topic.as_str().to_string());
    }
    Ok(out)
}

type Row = (i64, JobInfo);

/// A job's row, with the limits in effect for it: its own overrides, else
/// `cfg`'s (its topic's settings).
fn job_row(r: &rusqlite::Row<'_>, cfg: &TopicConfig) -> rusqlite::Result<Row> {
    let id: String = r.get(1)?;
    let body: Vec<u8> = r.get(15)?;
    let is_json: bool = r.get(14)?;
    Ok((
        r.get(0)?,
        JobInfo {
            id: JobId::new(id).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    1,
                    rusqlite::types::Type::Text,
                    Box::new(e),
                )
            })?,
            state: state_of(r.get(2)?),
            due_at_ms: r.get(3)?,
            priority: r.get(4)?,
            attempts: r.get(5)?,
            max_attempts: r.get::<_, Option<u32>>(6)?.unwrap_or(cfg.max_attempts),
            lease_ms: r.get::<_, Option<u64>>(7)?.unwrap_or(cfg.lease_ms),
            last_error: r.get(9)?,
            created_at_ms: r.get(10)?,
            lease_deadline_ms: r.get(12)?,
            died_at_ms: r.get(13)?,
            body: Body::from_stored(body, is_json),
            counts: JobCounts {
                timeouts: r.get(16)?,
                releases: r.get(17)?,
                buries: r.get(18)?,
                kicks: r.get(19)?,
            },
            key: r
                .get::<_, Option<String>>(20)?
                .map(|k| {
                    JobKey::new(k).map_err(|e| {
                        rusqlite::Error::FromSqlConversionFailure(
                            20,
                            rusqlite::types::Type::Text,
                            Box::new(e),
                        )
                    })
                })
                .transpose()?,
        },
    ))
}

const JOB_COLUMNS: &str = "seq, id, state, due_ms, priority, attempts, max_attempts, lease_ms, retry, last_error, created_ms, token, deadline_ms, died_ms, is_json, body, timeouts, releases, buries, kicks, fkey";

pub(crate) fn get(cx: &mut Ctx, topic: &Topic, id: &JobId) -> OpResult<Option<JobInfo>> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(None);
    };
    let cfg = config(cx, tid)?;
    Ok(cx
        .conn
        .prepare_cached(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE tid = ?1 AND id = ?2"
        ))?
        .query_row(params![tid, id.as_str()], |r| job_row(r, &cfg))
        .optional()?
        .map(|(_, j)| j))
}

/// Lease-holder checks shared by ack, nack and touch: returns the job's seq.
/// A waiting job has no lease, so any token is stale (`LeaseMismatch`); a
/// dead job reports its state.
fn held(cx: &mut Ctx, topic: &Topic, id: &JobId, token: &str) -> OpResult<(i64, i64)> {
    let tid = tid(cx, topic)?.ok_or(Failure(StoreError::NotFound))?;
    let row: Option<(i64, i64, Option<String>)> = cx
        .conn
        .prepare_cached("SELECT seq, state, token FROM jobs WHERE tid = ?1 AND id = ?2")?
        .query_row(params![tid, id.as_str()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?;
    let (seq, state, current) = row.ok_or(Failure(StoreError::NotFound))?;
    if state == DEAD {
        return Err(StoreError::NotInState(JobState::Dead).into());
    }
    if state != RESERVED || current.as_deref() != Some(token) {
        return Err(StoreError::LeaseMismatch.into());
    }
    Ok((tid, seq))
}

/// Starts the dedup window of job `id` that ended at `now`, if it has one
/// (`dedup_ms`, as its row held it when the lease ended).
fn open_window(cx: &Ctx, tid: i64, id: &str, dedup_ms: Option<i64>, now: u64) -> OpResult<()> {
    if let Some(ms) = dedup_ms.filter(|ms| *ms > 0) {
        cx.conn
            .prepare_cached(
                "INSERT INTO dedup (tid, id, until_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (tid, id) DO UPDATE SET until_ms = excluded.until_ms",
            )?
            .execute(params![tid, id, now as i64 + ms])?;
    }
    Ok(())
}

pub(crate) fn cancel(
    cx: &mut Ctx,
    topic: &Topic,
    id: &JobId,
    now: u64,
) -> OpResult<Option<JobState>> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(None);
    };
    let row: Option<(i64, i64)> = cx
        .conn
        .prepare_cached("SELECT seq, state FROM jobs WHERE tid = ?1 AND id = ?2")?
        .query_row(params![tid, id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((seq, state)) = row else {
        return Ok(None);
    };
    #[allow(clippy::type_complexity)]
    let (dedup_ms, fkey, priority, due, died): (
        Option<i64>,
        Option<String>,
        i64,
        i64,
        Option<i64>,
    ) = cx
        .conn
        .prepare_cached(
            "DELETE FROM jobs WHERE seq = ?1 RETURNING dedup_ms, fkey, priority, due_ms, died_ms",
        )?
        .query_row([seq], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?;
    if state == READY {
        cx.mem
            .remove_ready(tid, fkey.as_deref(), priority, due, seq);
    }
    if state == DEAD {
        cx.mem.dead.remove((tid, died_place(died), seq));
    }
    open_window(cx, tid, id.as_str(), dedup_ms, now)?;
    counts(cx, tid, delta(Some(state), None))?;
    bump(cx, tid, "cancelled", 1)?;
    if state == RESERVED {
        cx.mem.leases.remove(seq);
        unlease(cx, topic, tid, fkey)?;
    }
    Ok(Some(state_of(state)))
}

pub(crate) fn reschedule(
    cx: &mut Ctx,
    topic: &Topic,
    id: &JobId,
    due: u64,
    now: u64,
) -> OpResult<()> {
    let tid = tid(cx, topic)?.ok_or(Failure(StoreError::NotFound))?;
    let row: Option<(i64, i64)> = cx
        .conn
        .prepare_cached("SELECT seq, state FROM jobs WHERE tid = ?1 AND id = ?2")?
        .query_row(params![tid, id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (seq, state) = row.ok_or(Failure(StoreError::NotFound))?;
    if state != SCHEDULED && state != READY {
        return Err(StoreError::NotInState(state_of(state)).into());
    }
    // A due time in the past is now: lateness counts from the reschedule.
    place(cx, topic, tid, seq, Some(state), due.max(now), now)?;
    Ok(())
}

/// Moves up to `max` due jobs to ready; returns how many.
fn promote(cx: &mut Ctx, tid: i64, now: u64, max: i64) -> OpResult<i64> {
    // Read, then moved one by one: the jobs go into memory with their
    // places (not `UPDATE … RETURNING`, whose ephemeral table every
    // reserve would pay for, due jobs or not).
    #[allow(clippy::type_complexity)]
    let due: Vec<(i64, i64, i64, Option<String>)> = cx
        .conn
        .prepare_cached(
            "SELECT seq, priority, due_ms, fkey FROM jobs
             WHERE tid = ?1 AND state = 0 AND due_ms <= ?2 ORDER BY due_ms LIMIT ?3",
        )?
        .query_map(params![tid, now as i64, max], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<Result<_, _>>()?;
    for (seq, priority, due_ms, key) in &due {
        cx.conn
            .prepare_cached("UPDATE jobs SET state = 1 WHERE seq = ?1")?
            .execute([seq])?;
        cx.mem
            .add_ready(tid, key.as_deref(), *priority, *due_ms, *seq);
    }
    let moved = due.len() as i64;
    counts(cx, tid, [-moved, moved, 0, 0])?;
    Ok(moved)
}

pub(crate) fn reserve(
    cx: &mut Ctx,
    topic: &Topic,
    max: usize,
    lease_override: Option<u64>,
    now: u64,
) -> OpResult<Reservation> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(Reservation::default());
    };
    // A paused topic hands nothing out; the pause's end is when to look
    // again (paused until resumed: no time, the resume wakes waiters).
    // With the topic's lease length and its ready count: one read of the
    // topic's row per call.
    #[allow(clippy::type_complexity)]
    let (paused_until, paused, rate, credit, at, keyed, topic_lease_ms, n_ready): (
        u64,
        bool,
        Option<String>,
        Option<u64>,
        u64,
        bool,
        Option<u64>,
        i64,
    ) = cx
        .conn
        .prepare_cached(
            "SELECT paused_until_ms, paused, rate_limit, rl_credit, rl_at, keyed, lease_ms, n_ready
             FROM topics WHERE tid = ?1",
        )?
        .query_row([tid], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })?;
    if paused_until > now || paused {
        return Ok(Reservation {
            leases: Vec::new(),
            next_due_ms: (paused_until > now).then_some(paused_until),
        });
    }
    // The rate limit's bucket, taken from in this transaction (the one writer).
    let rate = rate.as_deref().and_then(RateLimit::decode);
    let mut take = max as u64;
    let mut bucket = None;
    if let Some(r) = rate {
        let c = r.refill(credit, at, now);
        take = take.min(r.allowed(c));
        bucket = Some((r, c));
    }
    let promoted = promote(cx, tid, now, BATCH)?;
    let mut hand = HandOut {
        topic,
        tid,
        lease_override,
        now,
        topic_lease_ms: topic_lease_ms.unwrap_or(TopicConfig::default().lease_ms),
        prefix: format!("{:016x}.", rand::random::<u64>()),
        leases: Vec::with_capacity(take.min(BATCH as u64) as usize),
    };
    // Whether ready jobs are left that may go now, and when a key out of
    // tokens has its next one.
    // A topic that had keyed jobs takes the keyed path while any is ready
    // (the lanes in memory say).
    let keyed = keyed && cx.mem.lanes.any(tid);
    let (go, key_token_at) = if keyed {
        reserve_keyed(cx, &mut hand, take)?
    } else {
        // The first ready jobs, from memory, and their rows.
        let places = cx.mem.ready.first(tid, take as usize);
        let ready = ready_rows(cx, tid, &places)?;
        hand.lease_rows(cx, ready)?;
        // The topic's ready count once promote moved its jobs in.
        (n_ready + promoted > hand.leases.len() as i64, None)
    };
    let leases = hand.leases;
    let n = leases.len() as i64;
    counts(cx, tid, [0, -n, n, 0])?;
    let mut next_due_ms = if go {
        Some(now)
    } else {
        [sched_head(cx, tid)?, key_token_at]
            .into_iter()
            .flatten()
            .min()
    };
    if let Some((r, credit)) = bucket {
        let credit = credit - n as u64 * r.per_ms;
        let held = if go && take < max as u64 {
            max as i64 - n
        } else {
            0
        };
        cx.conn
            .prepare_cached(
                "UPDATE topics SET rl_credit = ?2, rl_at = max(rl_at, ?3),
                   rate_limited = rate_limited + min(?4, n_ready) WHERE tid = ?1",
            )?
            .execute(params![tid, credit as i64, now as i64, held])?;
        // Ready jobs wait for the next token: that is when to look again.
        if go && let Some(at) = r.next_token_at(credit, now) {
            next_due_ms = Some(at);
        }
    }
    Ok(Reservation {
        leases,
        next_due_ms,
    })
}

/// One reserve call's hand-outs: the leases made so far and what making
/// one needs.
struct HandOut<'a> {
    topic: &'a Topic,
    tid: i64,
    lease_override: Option<u64>,
    now: u64,
    /// The topic's lease length, for jobs without their own.
    topic_lease_ms: u64,
    prefix: String,
    leases: Vec<Lease>,
}

impl HandOut<'_> {
    /// How long job `j`'s lease lasts: the call's length, else the job's
    /// own, else the topic's.
    fn lease_ms(&self, j: &Leasable) -> u64 {
        self.lease_override
            .or(j.lease_ms)
            .unwrap_or(self.topic_lease_ms)
    }

    /// Leases ready job `j` (the state counts are the caller's to move).
    fn lease(&mut self, cx: &mut Ctx, j: Leasable) -> OpResult<()> {
        let lease_ms = self.lease_ms(&j);
        let token = numbered(&self.prefix, j.seq);
        let l = lease(cx, self.topic, self.tid, j, lease_ms, token, self.now)?;
        self.leases.push(l);
        Ok(())
    }

    /// Leases the rows [`ready_rows`] read: all with one `UPDATE` when they
    /// are the whole of the span it read and share one lease length (the
    /// jobs of one topic due at once, the usual batch: the statement's
    /// set-up and a search per row saved, −4.9 % of the writer's
    /// instructions per lifecycle, docs/performance.md), else one by one.
    fn lease_rows(&mut self, cx: &mut Ctx, ready: ReadyRows) -> OpResult<()> {
        let lease_ms = ready.rows.first().map(|j| self.lease_ms(j));
        let shared = ready
            .rows
            .iter()
            .all(|j| Some(self.lease_ms(j)) == lease_ms);
        let (Some(span), Some(lease_ms), true) = (ready.span, lease_ms, shared) else {
            for j in ready.rows {
                self.lease(cx, j)?;
            }
            return Ok(());
        };
        let deadline = self.now + lease_ms;
        let (p, d, seq) = span.last;
        let n = cx.conn.with(HotSql::LeaseSpan, |st| {
            st.execute(params![
                span.lo,
                span.hi,
                self.tid,
                p,
                d,
                seq,
                self.prefix,
                deadline as i64
            ])
        })?;
        if n != ready.rows.len() {
            // The read and this update select the same rows in one
            // transaction, so this cannot happen; refuse (the call's
            // savepoint undoes the update) rather than answer leases the
            // file does not hold.
            return Err(Failure(StoreError::Unavailable(format!(
                "leasing a span of {} ready jobs changed {n} rows",
                ready.rows.len()
            ))));
        }
        for j in ready.rows {
            let token = numbered(&self.prefix, j.seq);
            let l = note_lease(cx, self.topic, self.tid, j, token, deadline)?;
            self.leases.push(l);
        }
        Ok(())
    }
}

/// `prefix` followed by `seq` in lower-case hex: a lease's token, the
/// call's random prefix and the job's row id (as `format!("{prefix}{seq:x}")`
/// writes it, without the formatting machinery: 1.5 % of the writer's
/// instructions per job went to `format!` here). The row id lets an ack
/// find the row and its lease without an index: [`token_seq`].
fn numbered(prefix: &str, seq: i64) -> String {
    const DIGITS: usize = 2 * std::mem::size_of::<u64>();
    let mut hex = [0u8; DIGITS];
    let mut at = DIGITS;
    let mut rest = seq as u64;
    loop {
        at -= 1;
        hex[at] = b"0123456789abcdef"[(rest & 0xf) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    let mut token = String::with_capacity(prefix.len() + DIGITS - at);
    token.push_str(prefix);
    token.extend(hex[at..].iter().map(|&b| char::from(b)));
    token
}

/// The row id a token [`numbered`] names; `None` for any other string (a
/// client's typo, a token of an older dq). Only a hint: the ack that uses
/// it checks the row's topic, id, state and token.
fn token_seq(token: &str) -> Option<i64> {
    let (_, hex) = token.rsplit_once('.')?;
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16)
        .ok()
        .and_then(|v| i64::try_from(v).ok())
}

/// Marks the topic as one whose jobs may carry flow-control keys: its
/// reserves take the keyed path from now on (until the topic is deleted).
fn mark_keyed(cx: &Ctx, tid: i64) -> OpResult<()> {
    cx.conn
        .prepare_cached("UPDATE topics SET keyed = 1 WHERE tid = ?1 AND keyed = 0")?
        .execute([tid])?;
    Ok(())
}

/// The ready job at `place` (`(priority, due, seq)`) of topic `tid`'s
/// lane `key` (`None`: the jobs without a key) in memory, read to be
/// leased. `None` when the file does not hold it ready there
/// ([`stale_ready`]).
fn ready_row(
    cx: &mut Ctx,
    tid: i64,
    key: Option<&str>,
    place: (i64, i64, i64),
) -> OpResult<Option<Leasable>> {
    let (priority, due, seq) = place;
    let row = cx.conn.with(HotSql::ReadyRow, |st| {
        st.query_row(params![seq, tid, priority, due, key], Leasable::row)
            .optional()
    })?;
    if row.is_none() {
        stale_ready(cx, tid, key, place);
    }
    Ok(row)
}

/// Drops a ready job's entry whose row the file does not hold ready at
/// that place: cannot happen while every change of a ready job goes
/// through [`crate::memory::Memory`]; the entry is dropped rather than
/// found again and again.
fn stale_ready(cx: &mut Ctx, tid: i64, key: Option<&str>, place: (i64, i64, i64)) {
    let (priority, due, seq) = place;
    tracing::warn!(
        seq,
        "embedded store: a ready job in memory had no ready row"
    );
    cx.mem.remove_ready(tid, key, priority, due, seq);
}

/// The rows of topic `tid`'s ready jobs at `places` (from memory, in
/// hand-out order), in that order. Jobs enqueued together and due together
/// have neighbouring row ids: when the places' row ids are that dense (a
/// span of at most twice their number), one pass over the table's rows
/// between the first and the last reads them all (instead of a statement
/// and a search from the table's root per job: −4 % of the writer's
/// instructions per lifecycle, docs/performance.md, "Ready jobs and dead
/// letters in memory"); else each is read by its id ([`ready_row`]). The
/// pass reads only rows up to the last place in hand-out order, so a job
/// behind them whose row lies in between (a later priority) costs no read
/// of its body. A place whose row is not ready there is dropped, as
/// `ready_row` drops it.
fn ready_rows(cx: &mut Ctx, tid: i64, places: &[(i64, i64, i64)]) -> OpResult<ReadyRows> {
    let lo = places.iter().map(|p| p.2).min().unwrap_or(0);
    let hi = places.iter().map(|p| p.2).max().unwrap_or(0);
    if places.len() < 2 || hi - lo >= 2 * places.len() as i64 {
        let mut out = Vec::with_capacity(places.len());
        for &place in places {
            out.extend(ready_row(cx, tid, None, place)?);
        }
        return Ok(ReadyRows {
            rows: out,
            span: None,
        });
    }
    let last = places[places.len() - 1];
    let rows: Vec<Leasable> = cx.conn.with(HotSql::ReadySpan, |st| {
        st.query_map(params![lo, hi, tid, last.0, last.1, last.2], Leasable::row)?
            .collect()
    })?;
    // The span's rows come in row-id order.
    let seqs: Vec<i64> = rows.iter().map(|j| j.seq).collect();
    let read = rows.len();
    let mut rows: Vec<Option<Leasable>> = rows.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(places.len());
    for &place in places {
        let (priority, due, seq) = place;
        let row = seqs.binary_search(&seq).ok().and_then(|i| rows[i].take());
        match row.filter(|j| i64::from(j.priority) == priority && j.due as i64 == due) {
            Some(j) => out.push(j),
            None => stale_ready(cx, tid, None, place),
        }
    }
    // Every row the span's read found is handed out: the same condition
    // selects exactly these rows again (`HotSql::LeaseSpan`).
    let span = (out.len() == read).then_some(Span { lo, hi, last });
    Ok(ReadyRows { rows: out, span })
}

/// Ready jobs' rows read to be leased ([`ready_rows`]), in hand-out order.
struct ReadyRows {
    rows: Vec<Leasable>,
    /// When they are every row of one span read with `HotSql::ReadySpan`:
    /// that span, whose condition `HotSql::LeaseSpan` repeats.
    span: Option<Span>,
}

/// Rows `lo..=hi` of a topic, ready, without a key, up to the place `last`
/// (`(priority, due_ms, seq)`) in hand-out order.
#[derive(Clone, Copy)]
struct Span {
    lo: i64,
    hi: i64,
    last: (i64, i64, i64),
}

/// The next job of a key's lane (`None`: the jobs without a key, whose
/// order is in memory).
fn lane_head(cx: &mut Ctx, tid: i64, key: Option<&str>) -> OpResult<Option<Leasable>> {
    while let Some(place) = cx.mem.ready_head(tid, key) {
        if let Some(j) = ready_row(cx, tid, key, place)? {
            return Ok(Some(j));
        }
    }
    Ok(None)
}

/// One lease fewer for key `key` of topic `tid`; its count after, when the
/// key has a row.
fn free_slot(cx: &Ctx, tid: i64, key: &str) -> OpResult<Option<i64>> {
    Ok(cx
        .conn
        .prepare_cached(
            "UPDATE fkeys SET active = max(active - 1, 0) WHERE tid = ?1 AND fkey = ?2 RETURNING active",
        )?
        .query_row(params![tid, key], |r| r.get(0))
        .optional()?)
}

/// A lease of a job with key `fkey` ended: one lease fewer for the key, and
/// when that frees a key held at its `key_concurrency`, the topic's waiters
/// are told.
fn unlease(cx: &mut Ctx, topic: &Topic, tid: i64, fkey: Option<String>) -> OpResult<()> {
    let Some(k) = fkey else { return Ok(()) };
    let after = free_slot(cx, tid, &k)?;
    let limit: Option<i64> = cx
        .conn
        .prepare_cached("SELECT key_concurrency FROM topics WHERE tid = ?1")?
        .query_row([tid], |r| r.get(0))?;
    if let (Some(a), Some(l)) = (after, limit)
        && a + 1 >= l
    {
        cx.wake.push(topic.as_str().to_string());
    }
    Ok(())
}

/// One lane of a keyed reserve: a key's (or, `key: None`, the jobs
/// without one), with its turn and what its limits allow.
struct Lane {
    turn: i64,
    key: Option<String>,
    active: i64,
    credit: Option<u64>,
    at: u64,
    touched: bool,
}

/// The keyed hand-out (issue #18): the lanes take turns, lowest turn
/// first, one job each per turn; a key goes while it holds fewer than
/// `key_concurrency` leases and its `key_rate_limit` bucket has a token.
/// Each lane's turn (the key's in `fkeys`, the jobs without a key in
/// `topics.uturn`) becomes the topic's next turn number when it hands out,
/// so a key with a backlog goes once per round. Returns whether ready jobs
/// that may go are left, and the earliest next token of a key out of them.
fn reserve_keyed(cx: &mut Ctx, hand: &mut HandOut<'_>, take: u64) -> OpResult<(bool, Option<u64>)> {
    let (tid, now) = (hand.tid, hand.now);
    let (limit, krate, mut kturn, uturn): (Option<i64>, Option<String>, i64, i64) = cx
        .conn
        .prepare_cached(
            "SELECT key_concurrency, key_rate_limit, kturn, uturn FROM topics WHERE tid = ?1",
        )?
        .query_row([tid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
    let krate = krate.as_deref().and_then(RateLimit::decode);
    let mut lanes: Vec<Lane> = Vec::new();
    if cx.mem.ready.head(tid).is_some() {
        lanes.push(Lane {
            turn: uturn,
            key: None,
            active: 0,
            credit: None,
            at: 0,
            touched: false,
        });
    }
    let mut fresh = 0;
    for key in cx.mem.lanes.keys(tid) {
        let row: Option<(i64, i64, Option<u64>, u64)> = cx
            .conn
            .prepare_cached(
                "SELECT active, turn, credit, at FROM fkeys WHERE tid = ?1 AND fkey = ?2",
            )?
            .query_row(params![tid, key], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        // A key new to the round (no row: never handed out, or forgotten
        // while idle) joins at its end, as on Redis.
        let (active, turn, credit, at) = row.unwrap_or_else(|| {
            fresh += 1;
            (0, kturn + fresh, None, 0)
        });
        lanes.push(Lane {
            turn,
            key: Some(key),
            active,
            credit,
            at,
            touched: false,
        });
    }
    // Whether lane `l` may hand out now; its next token when it is out of them.
    let may_go = |l: &Lane| -> (bool, Option<u64>) {
        if l.key.is_none() {
            return (true, None);
        }
        if limit.is_some_and(|k| l.active >= k) {
            return (false, None);
        }
        match krate {
            Some(r) => {
                let c = r.refill(l.credit, l.at, now);
                match r.next_token_at(c, now) {
                    None => (true, None),
                    at => (false, at),
                }
            }
            None => (true, None),
        }
    };
    kturn += fresh;
    let mut token_at: Option<u64> = None;
    let mut held_back = 0i64;
    // Lanes that may go, by (turn, key): a round-robin over them.
    let mut open: std::collections::BTreeSet<(i64, Option<String>)> = Default::default();
    for l in &lanes {
        match may_go(l) {
            (true, _) => {
                open.insert((l.turn, l.key.clone()));
            }
            (false, at) => {
                if at.is_some() {
                    held_back += 1;
                }
                token_at = [token_at, at].into_iter().flatten().min();
            }
        }
    }
    let at_index: std::collections::HashMap<Option<String>, usize> = lanes
        .iter()
        .enumerate()
        .map(|(i, l)| (l.key.clone(), i))
        .collect();
    while (hand.leases.len() as u64) < take {
        let Some((_, key)) = open.pop_first() else {
            break;
        };
        let i = at_index[&key];
        let Some(j) = lane_head(cx, tid, key.as_deref())? else {
            continue;
        };
        hand.lease(cx, j)?;
        kturn += 1;
        let l = &mut lanes[i];
        l.turn = kturn;
        l.touched = true;
        if l.key.is_some() {
            l.active += 1;
            if let Some(r) = krate {
                let c = r.refill(l.credit, l.at, now);
                l.credit = Some(c - r.per_ms);
                l.at = l.at.max(now);
            }
        }
        match may_go(l) {
            (true, _) => {
                open.insert((l.turn, l.key.clone()));
            }
            (false, at) => token_at = [token_at, at].into_iter().flatten().min(),
        }
    }
    // The turns and counts of the lanes that handed out.
    for l in lanes.iter().filter(|l| l.touched) {
        match &l.key {
            None => {
                cx.conn
                    .prepare_cached("UPDATE topics SET uturn = ?2 WHERE tid = ?1")?
                    .execute(params![tid, l.turn])?;
            }
            Some(k) => {
                cx.conn
                    .prepare_cached(
                        "INSERT INTO fkeys (tid, fkey, active, turn, credit, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                         ON CONFLICT (tid, fkey) DO UPDATE SET active = excluded.active,
                           turn = excluded.turn, credit = excluded.credit, at = excluded.at",
                    )?
                    .execute(params![
                        tid,
                        k,
                        l.active,
                        l.turn,
                        l.credit.map(|c| c as i64),
                        l.at as i64
                    ])?;
            }
        }
    }
    cx.conn
        .prepare_cached(
            "UPDATE topics SET kturn = ?2, rate_limited = rate_limited + ?3 WHERE tid = ?1",
        )?
        .execute(params![tid, kturn, held_back])?;
    // Keys with no lease, no ready job and a full bucket (or none) are
    // forgotten: they are the same as a key never seen.
    let (cap, per) = krate.map_or((None, 1), |r| (Some(r.capacity() as i64), r.limit as i64));
    // (Whether a key has ready jobs, the lanes in memory say.)
    let idle: Vec<String> = cx
        .conn
        .prepare_cached(
            "SELECT fkey FROM fkeys WHERE tid = ?1 AND active <= 0
               AND (?2 IS NULL OR credit IS NULL OR at + (?2 - credit + ?3 - 1) / ?3 <= ?4)",
        )?
        .query_map(params![tid, cap, per, now as i64], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for k in idle {
        if cx.mem.lanes.head(tid, &k).is_none() {
            cx.conn
                .prepare_cached("DELETE FROM fkeys WHERE tid = ?1 AND fkey = ?2")?
                .execute(params![tid, k])?;
        }
    }
    Ok((!open.is_empty(), token_at))
}

pub(crate) fn touch(
    cx: &mut Ctx,
    topic: &Topic,
    id: &JobId,
    token: &str,
    lease: Option<u64>,
    now: u64,
) -> OpResult<u64> {
    let (tid, seq) = held(cx, topic, id, token)?;
    let job_lease: Option<u64> = cx
        .conn
        .prepare_cached("SELECT lease_ms FROM jobs WHERE seq = ?1")?
        .query_row([seq], |r| r.get(0))?;
    let lease = match lease.or(job_lease) {
        Some(l) => l,
        None => config(cx, tid)?.lease_ms,
    };
    let deadline = now + lease;
    cx.conn
        .prepare_cached("UPDATE jobs SET deadline_ms = ?1 WHERE seq = ?2")?
        .execute(params![deadline as i64, seq])?;
    cx.mem.leases.add(tid, seq, deadline as i64);
    Ok(deadline)
}

pub(crate) fn ack(cx: &mut Ctx, topic: &Topic, id: &JobId, token: &str, now: u64) -> OpResult<()> {
    let tid = end_lease(cx, topic, id, token, now)?;
    acked(cx, tid, 1)
}

/// Ends the lease `token` of job `id` as an ack does, except for the
/// topic's counts (the caller's, once per topic: [`acked`]): the row
/// deleted, its dedup window opened, its key's slot freed. Returns the
/// topic's id. Refused (nothing written) unless the job is reserved under
/// `token`.
fn end_lease(cx: &mut Ctx, topic: &Topic, id: &JobId, token: &str, now: u64) -> OpResult<i64> {
    let tid = tid(cx, topic)?.ok_or(Failure(StoreError::NotFound))?;
    // A job without a dedup window or a flow-control key (most jobs) leaves
    // nothing behind: one delete, found by the row id its token names and
    // checked against the token, ends its lease (−9 % of the writer's
    // instructions per lifecycle). Any other job, and a refusal, pays this
    // one row lookup more.
    if let Some(seq) = token_seq(token)
        && cx.conn.with(HotSql::AckPlain, |st| {
            st.execute(params![seq, tid, id.as_str(), token])
        })? == 1
    {
        cx.mem.leases.remove(seq);
        return Ok(tid);
    }
    // Any other: one read finds the lease (only a refusal looks again, to
    // say why), one delete by row id ends it. Not `DELETE … RETURNING`: SQLite
    // collects a RETURNING statement's rows in an ephemeral table, a B-tree
    // opened and closed on every call (a fifth of the ack's time in `perf`).
    let ended: Option<(i64, Option<i64>, Option<String>)> =
        cx.conn.with(HotSql::FindLease, |st| {
            st.query_row(params![tid, id.as_str(), token], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
        })?;
    let Some((seq, dedup_ms, fkey)) = ended else {
        held(cx, topic, id, token)?;
        // `held` found the lease the read did not: cannot happen with one
        // writer, but refuse rather than report an ack that wrote nothing.
        return Err(StoreError::LeaseMismatch.into());
    };
    cx.conn.with(HotSql::Delete, |st| st.execute([seq]))?;
    cx.mem.leases.remove(seq);
    open_window(cx, tid, id.as_str(), dedup_ms, now)?;
    unlease(cx, topic, tid, fkey)?;
    Ok(tid)
}

/// Counts `n` acks of topic `tid`: `n` fewer reserved, `n` more acked.
fn acked(cx: &Ctx, tid: i64, n: i64) -> OpResult<()> {
    cx.conn
        .prepare_cached(
            "UPDATE topics SET n_reserved = n_reserved - ?1, acked = acked + ?1 WHERE tid = ?2",
        )?
        .execute(params![n, tid])?;
    Ok(())
}

/// Acks each item as [`ack`] does, with the topics' counts updated once per
/// topic. An item is refused before it writes anything (unknown job, stale
/// token), so a refused item needs no savepoint of its own. A storage
/// error (a full disk while opening a dedup window, an I/O error) fails
/// every item of the call, not only the one that met it: the writer undoes
/// the whole operation, and each item answers that error.
pub(crate) fn ack_batch(
    cx: &mut Ctx,
    items: &[(Topic, JobId, String)],
    now: u64,
) -> OpResult<Vec<StoreResult<()>>> {
    let mut out = Vec::with_capacity(items.len());
    // Acks per topic id, in the order the topics first appear.
    let mut per_topic: Vec<(i64, i64)> = Vec::new();
    for (topic, id, token) in items {
        match end_lease(cx, topic, id, token, now) {
            Ok(tid) => {
                match per_topic.iter_mut().find(|(t, _)| *t == tid) {
                    Some((_, n)) => *n += 1,
                    None => per_topic.push((tid, 1)),
                }
                out.push(Ok(()));
            }
            Err(Failure(
                e @ (StoreError::NotFound | StoreError::LeaseMismatch | StoreError::NotInState(_)),
            )) => out.push(Err(e)),
            Err(e) => return Err(e),
        }
    }
    for (tid, n) in per_topic {
        acked(cx, tid, n)?;
    }
    Ok(out)
}

/// Runs `op` on each item in turn, in the one transaction of this call:
/// an item that fails is undone alone (a savepoint each), as the single
/// verb would answer it. Only an error that undid the whole transaction
/// fails the call. [`nack_batch`] and [`touch_batch`] are this over their
/// single verb ([`ack_batch`] needs no savepoints: its refusals write nothing).
fn per_item<T, R>(
    cx: &mut Ctx,
    items: &[T],
    mut op: impl FnMut(&mut Ctx, &T) -> OpResult<R>,
) -> OpResult<Vec<StoreResult<R>>> {
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        let mark = cx.mem.mark();
        run_cached(&cx.conn, "SAVEPOINT item")?;
        match op(cx, it) {
            Ok(r) => {
                run_cached(&cx.conn, "RELEASE item")?;
                out.push(Ok(r));
            }
            Err(Failure(e)) => {
                // The item's leases and ready jobs go back with its rows.
                cx.mem.undo_to(mark);
                if cx.conn.is_autocommit() {
                    // SQLite rolled back the whole transaction.
                    return Err(Failure(e));
                }
                cx.conn.execute_batch("ROLLBACK TO item; RELEASE item")?;
                out.push(Err(e));
            }
        }
    }
    Ok(out)
}

/// One nack of [`nack_batch`], owned to cross to the writer thread.
#[derive(Debug, Clone)]
pub(crate) struct OwnedNack {
    pub(crate) topic: Topic,
    pub(crate) id: JobId,
    pub(crate) token: String,
    /// Already clipped.
    pub(crate) error: String,
    pub(crate) retry_in_ms: Option<u64>,
    pub(crate) dead: bool,
    pub(crate) priority: Option<u32>,
}

/// Nacks each item as [`nack`] does (see [`per_item`]).
pub(crate) fn nack_batch(
    cx: &mut Ctx,
    items: &[OwnedNack],
    now: u64,
) -> OpResult<Vec<StoreResult<NackOutcome>>> {
    per_item(cx, items, |cx, it| {
        let n = Nack {
            token: &it.token,
            error: &it.error,
            retry_in_ms: it.retry_in_ms,
            dead: it.dead,
            priority: it.priority,
        };
        nack(cx, &it.topic, &it.id, n, now)
    })
}

/// Extends each lease as [`touch`] does (see [`per_item`]); an item is its
/// topic, id, token and lease length.
pub(crate) fn touch_batch(
    cx: &mut Ctx,
    items: &[(Topic, JobId, String, Option<u64>)],
    now: u64,
) -> OpResult<Vec<StoreResult<u64>>> {
    per_item(cx, items, |cx, (topic, id, token, lease)| {
        touch(cx, topic, id, token, *lease, now)
    })
}

/// How an attempt failed, for [`fail`] and the job's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failed {
    /// Its holder gave it back to be tried again (a nack).
    GivenBack,
    /// Its holder asked for dead at once.
    Dead,
    /// Its lease expired.
    Expired,
}

/// A failed attempt of reserved job `seq`: retry after a wait, or dead.
#[allow(clippy::too_many_arguments)]
fn fail(
    cx: &mut Ctx,
    topic: &Topic,
    tid: i64,
    cfg: &TopicConfig,
    seq: i64,
    now: u64,
    error: &str,
    retry_in: Option<u64>,
    rand: f64,
    how: Failed,
) -> OpResult<NackOutcome> {
    let (attempts, max, retry, fkey): (u32, Option<u32>, Option<String>, Option<String>) = cx
        .conn
        .prepare_cached("SELECT attempts, max_attempts, retry, fkey FROM jobs WHERE seq = ?1")?
        .query_row([seq], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
    cx.mem.leases.remove(seq);
    unlease(cx, topic, tid, fkey)?;
    let max = max.unwrap_or(cfg.max_attempts);
    cx.conn
        .prepare_cached(
            "UPDATE jobs SET token = NULL, deadline_ms = NULL, last_error = ?1,
             releases = releases + ?3, timeouts = timeouts + ?4 WHERE seq = ?2",
        )?
        .execute(params![
            error,
            seq,
            i64::from(how == Failed::GivenBack),
            i64::from(how == Failed::Expired)
        ])?;
    bump(cx, tid, "failed", 1)?;
    if how == Failed::Dead || attempts >= max {
        let (id, dedup_ms): (String, Option<i64>) = cx
            .conn
            .prepare_cached(
                "UPDATE jobs SET state = 3, died_ms = ?1, buries = buries + 1 WHERE seq = ?2
                 RETURNING id, dedup_ms",
            )?
            .query_row(params![now as i64, seq], |r| Ok((r.get(0)?, r.get(1)?)))?;
        cx.mem.dead.add((tid, now as i64, seq));
        open_window(cx, tid, &id, dedup_ms, now)?;
        counts(cx, tid, [0, 0, -1, 1])?;
        bump(cx, tid, "dead", 1)?;
        trim_dead(cx, tid, cfg.dead_cap)?;
        return Ok(NackOutcome::Dead { attempt: attempts });
    }
    let wait = match retry_in {
        Some(w) => w,
        None => retry
            .and_then(|r| RetryPolicy::decode(&r))
            .unwrap_or_else(|| cfg.retry.clone())
            .delay_ms(attempts, rand),
    };
    let due = now + wait;
    place(cx, topic, tid, seq, Some(RESERVED), due, now)?;
    Ok(NackOutcome::Retry {
        due_at_ms: due,
        attempt: attempts,
    })
}

/// Drops the oldest dead letters over the cap, at most [`BATCH`] per call.
fn trim_dead(cx: &mut Ctx, tid: i64, cap: u64) -> OpResult<()> {
    let dead: i64 = cx
        .conn
        .prepare_cached("SELECT n_dead FROM topics WHERE tid = ?1")?
        .query_row([tid], |r| r.get(0))?;
    let over = (dead - cap as i64).min(BATCH);
    if over <= 0 {
        return Ok(());
    }
    let n = delete_oldest_dead(cx, tid, over)?;
    bump(cx, tid, "dead_dropped", n)
}

/// Deletes up to `max` of topic `tid`'s oldest dead letters and counts
/// them gone; returns how many.
fn delete_oldest_dead(cx: &mut Ctx, tid: i64, max: i64) -> OpResult<i64> {
    let n = delete_dead(cx, tid, max)?;
    counts(cx, tid, [0, 0, 0, -n])?;
    Ok(n)
}

/// Deletes up to `max` of topic `tid`'s oldest dead letters (found in
/// memory), leaving the counts to the caller; returns how many.
fn delete_dead(cx: &mut Ctx, tid: i64, max: i64) -> OpResult<i64> {
    let mut n = 0;
    for (died, seq) in cx.mem.dead.first(tid, max.max(0) as usize) {
        cx.mem.dead.remove((tid, died, seq));
        n += delete_row(cx, tid, DEAD, seq)?;
    }
    Ok(n)
}

/// Deletes job `seq` of topic `tid` if it is in `state` (an entry found in
/// memory); returns how many rows went (0 or 1).
fn delete_row(cx: &Ctx, tid: i64, state: i64, seq: i64) -> OpResult<i64> {
    Ok(cx
        .conn
        .prepare_cached("DELETE FROM jobs WHERE seq = ?1 AND tid = ?2 AND state = ?3")?
        .execute(params![seq, tid, state])? as i64)
}

pub(crate) fn nack(
    cx: &mut Ctx,
    topic: &Topic,
    id: &JobId,
    nack: Nack<'_>,
    now: u64,
) -> OpResult<NackOutcome> {
    let (tid, seq) = held(cx, topic, id, nack.token)?;
    let cfg = config(cx, tid)?;
    if let Some(p) = nack.priority {
        cx.conn
            .prepare_cached("UPDATE jobs SET priority = ?1 WHERE seq = ?2")?
            .execute(params![p, seq])?;
    }
    // Dead at once draws no jitter.
    let rand = if nack.dead { 0.0 } else { rand::random() };
    fail(
        cx,
        topic,
        tid,
        &cfg,
        seq,
        now,
        nack.error,
        nack.retry_in_ms,
        rand,
        if nack.dead {
            Failed::Dead
        } else {
            Failed::GivenBack
        },
    )
}

pub(crate) fn release(
    cx: &mut Ctx,
    topic: &Topic,
    id: &JobId,
    token: &str,
    delay_ms: u64,
    now: u64,
) -> OpResult<u64> {
    let (tid, seq) = held(cx, topic, id, token)?;
    let fkey: Option<String> = cx
        .conn
        .prepare_cached(
            "UPDATE jobs SET attempts = attempts - 1, token = NULL, deadline_ms = NULL,
             releases = releases + 1 WHERE seq = ?1 RETURNING fkey",
        )?
        .query_row([seq], |r| r.get(0))?;
    cx.mem.leases.remove(seq);
    unlease(cx, topic, tid, fkey)?;
    let due = now + delay_ms;
    place(cx, topic, tid, seq, Some(RESERVED), due, now)?;
    Ok(due)
}

pub(crate) fn promote_due(cx: &mut Ctx, topic: &Topic, max: usize, now: u64) -> OpResult<Promoted> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(Promoted::default());
    };
    let moved = promote(cx, tid, now, max as i64)?;
    if moved > 0 {
        cx.wake.push(topic.as_str().to_string());
    }
    Ok(Promoted {
        moved: moved as u64,
        next_due_ms: sched_head(cx, tid)?,
    })
}

pub(crate) fn requeue_expired(
    cx: &mut Ctx,
    topic: &Topic,
    max: usize,
    now: u64,
) -> OpResult<Requeued> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(Requeued::default());
    };
    // The leases that ended, from memory; each row read by its id.
    let mut rows: Vec<(i64, String)> = Vec::new();
    for seq in cx.mem.leases.expired(tid, now as i64, max) {
        if let Some((id, _)) = leased_row(cx, tid, seq)? {
            rows.push((seq, id));
        }
    }
    let mut out = Requeued::default();
    if !rows.is_empty() {
        let cfg = config(cx, tid)?;
        for (seq, id) in rows {
            let outcome = fail(
                cx,
                topic,
                tid,
                &cfg,
                seq,
                now,
                "lease expired",
                None,
                rand::random(),
                Failed::Expired,
            )?;
            match outcome {
                NackOutcome::Retry { .. } => out.retried += 1,
                NackOutcome::Dead { .. } => out.dead += 1,
            }
            out.jobs.push((
                JobId::new(id).map_err(|e| Failure(StoreError::Invalid(e)))?,
                outcome,
            ));
        }
        bump(cx, tid, "expired", out.jobs.len() as i64)?;
    }
    out.next_deadline_ms = cx.mem.leases.next_deadline(tid);
    Ok(out)
}

pub(crate) fn list_dead(
    cx: &mut Ctx,
    topic: &Topic,
    offset: usize,
    limit: usize,
) -> OpResult<Vec<JobInfo>> {
    // Oldest first, from memory; each row read by its id.
    let Some(tid) = tid(cx, topic)? else {
        return Ok(Vec::new());
    };
    let seqs: Vec<i64> = cx
        .mem
        .dead
        .topic(tid)
        .skip(offset)
        .take(limit)
        .map(|(_, seq)| seq)
        .collect();
    rows_by_seq(cx, tid, 3, &seqs)
}

/// The rows of topic `tid`'s jobs `seqs` in state `state`, in that order
/// (a job no longer there is left out).
fn rows_by_seq(cx: &mut Ctx, tid: i64, state: i64, seqs: &[i64]) -> OpResult<Vec<JobInfo>> {
    let cfg = config(cx, tid)?;
    let mut st = cx.conn.prepare_cached(&format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE seq = ?1 AND tid = ?2 AND state = ?3"
    ))?;
    let mut jobs = Vec::with_capacity(seqs.len());
    for &seq in seqs {
        jobs.extend(
            st.query_row(params![seq, tid, state], |r| job_row(r, &cfg))
                .optional()?
                .map(|(_, j)| j),
        );
    }
    Ok(jobs)
}

pub(crate) fn list_ready(cx: &mut Ctx, topic: &Topic, limit: usize) -> OpResult<Vec<JobInfo>> {
    // The jobs without a key in hand-out order (from memory), then the
    // keys' lanes.
    let Some(tid) = tid(cx, topic)? else {
        return Ok(Vec::new());
    };
    let seqs: Vec<i64> = cx.mem.ready.topic(tid).take(limit).map(|p| p.2).collect();
    let mut jobs = rows_by_seq(cx, tid, READY, &seqs)?;
    if jobs.len() < limit {
        let keyed: Vec<i64> = cx
            .mem
            .lanes
            .topic(tid)
            .take(limit - jobs.len())
            .map(|(_, p)| p.2)
            .collect();
        jobs.extend(rows_by_seq(cx, tid, READY, &keyed)?);
    }
    Ok(jobs)
}

/// The first `limit` scheduled jobs of `topic`, soonest first (along the
/// schedule's partial index).
pub(crate) fn list_scheduled(cx: &mut Ctx, topic: &Topic, limit: usize) -> OpResult<Vec<JobInfo>> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(Vec::new());
    };
    let cfg = config(cx, tid)?;
    let rows = cx
        .conn
        .prepare_cached(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE tid = ?1 AND state = 0 ORDER BY due_ms, seq LIMIT ?2"
        ))?
        .query_map(params![tid, limit as i64], |r| job_row(r, &cfg))?
        .map(|r| r.map(|(_, j)| j))
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub(crate) fn replay_dead(
    cx: &mut Ctx,
    topic: &Topic,
    ids: Option<&[JobId]>,
    max: usize,
    now: u64,
) -> OpResult<u64> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(0);
    };
    // `(died, seq)` of each: its place among the dead letters in memory.
    let seqs: Vec<(i64, i64)> = match ids {
        Some(ids) => {
            let mut v = Vec::new();
            for id in ids {
                let s: Option<(i64, i64)> = cx
                    .conn
                    .prepare_cached(
                        "SELECT died_ms, seq FROM jobs WHERE tid = ?1 AND id = ?2 AND state = 3",
                    )?
                    .query_row(params![tid, id.as_str()], |r| {
                        Ok((died_place(r.get(0)?), r.get(1)?))
                    })
                    .optional()?;
                v.extend(s);
            }
            v
        }
        None => cx.mem.dead.first(tid, max),
    };
    let mut replayed = 0;
    for &(died, seq) in &seqs {
        // Only a job still dead (an id named twice is replayed once).
        let moved = cx
            .conn
            .prepare_cached(
                "UPDATE jobs SET attempts = 0, died_ms = NULL, kicks = kicks + 1
                 WHERE seq = ?1 AND tid = ?2 AND state = 3",
            )?
            .execute(params![seq, tid])?;
        if moved == 0 {
            continue;
        }
        cx.mem.dead.remove((tid, died, seq));
        place(cx, topic, tid, seq, Some(DEAD), now, now)?;
        replayed += 1;
    }
    bump(cx, tid, "replayed", replayed)?;
    Ok(replayed as u64)
}

pub(crate) fn purge_dead(cx: &mut Ctx, topic: &Topic, max: usize) -> OpResult<u64> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(0);
    };
    Ok(delete_oldest_dead(cx, tid, max as i64)? as u64)
}

pub(crate) fn topics(cx: &mut Ctx) -> OpResult<Vec<Topic>> {
    let names: Vec<String> = cx
        .conn
        .prepare_cached("SELECT name FROM topics ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(names
        .into_iter()
        .filter_map(|n| Topic::new(n).ok())
        .collect())
}

/// One page of topic names in name order, on the `name` column's unique
/// index: one range of it, from the cursor (or the prefix's first name)
/// to the prefix's successor — the prefix as a range, never `LIKE`, whose
/// `_` and `%` are wildcards — read forward or backward, one name more
/// than `limit` to tell whether more follow.
pub(crate) fn list_topics(cx: &mut Ctx, listing: &TopicListing<'_>) -> OpResult<TopicPage> {
    let Some((start, end)) = Topic::prefix_range(listing.prefix) else {
        return Ok(TopicPage::default());
    };
    let limit = listing.limit.max(1);
    // Every name is ASCII below 0x7f.
    let end = end.unwrap_or_else(|| "\u{7f}".to_string());
    let cursor = listing.cursor.map(Topic::as_str);
    let (sql, low, high) = match (listing.backward, cursor) {
        (false, Some(c)) if c >= start.as_str() => (
            "SELECT name FROM topics WHERE name > ?1 AND name < ?2 ORDER BY name LIMIT ?3",
            c.to_string(),
            end,
        ),
        (false, _) => (
            "SELECT name FROM topics WHERE name >= ?1 AND name < ?2 ORDER BY name LIMIT ?3",
            start,
            end,
        ),
        (true, Some(c)) if c < end.as_str() => (
            "SELECT name FROM topics WHERE name >= ?1 AND name < ?2 ORDER BY name DESC LIMIT ?3",
            start,
            c.to_string(),
        ),
        (true, _) => (
            "SELECT name FROM topics WHERE name >= ?1 AND name < ?2 ORDER BY name DESC LIMIT ?3",
            start,
            end,
        ),
    };
    let mut names: Vec<String> = cx
        .conn
        .prepare_cached(sql)?
        .query_map(params![low, high, limit as i64 + 1], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let more = names.len() > limit;
    names.truncate(limit);
    if listing.backward {
        names.reverse();
    }
    Ok(TopicPage {
        topics: names
            .into_iter()
            .filter_map(|n| Topic::new(n).ok())
            .collect(),
        more,
    })
}

pub(crate) fn topic_config(cx: &mut Ctx, topic: &Topic) -> OpResult<Option<TopicConfig>> {
    match tid(cx, topic)? {
        Some(tid) => Ok(Some(config(cx, tid)?)),
        None => Ok(None),
    }
}

pub(crate) fn configure_topic(
    cx: &mut Ctx,
    topic: &Topic,
    p: &TopicConfigPatch,
) -> OpResult<TopicConfig> {
    if p.partitions.is_some_and(|n| n != 1) {
        return Err(StoreError::Invalid(InvalidInput::new(
            "invalid_partitions",
            "the embedded store keeps a topic in one partition; partitions spread a topic over Redis Cluster slots or shards",
        ))
        .into());
    }
    let tid = ensure_tid(cx, topic)?;
    let before = config(cx, tid)?;
    cx.conn
        .prepare_cached(
            "UPDATE topics SET
               max_attempts = coalesce(?1, max_attempts),
               lease_ms = coalesce(?2, lease_ms),
               dead_cap = coalesce(?3, dead_cap),
               default_delay_ms = coalesce(?4, default_delay_ms),
               retry = coalesce(?5, retry),
               delivery = coalesce(?6, delivery),
               dedup_ms = coalesce(?8, dedup_ms)
             WHERE tid = ?7",
        )?
        .execute(params![
            p.max_attempts,
            p.lease_ms.map(|v| v as i64),
            p.dead_cap.map(|v| v as i64),
            p.default_delay_ms.map(|v| v as i64),
            p.retry.as_ref().map(RetryPolicy::encode),
            p.delivery
                .as_ref()
                .map(|d| serde_json::to_string(d).expect("delivery serializes")),
            tid,
            p.dedup_ms.map(|v| v as i64)
        ])?;
    if let Some(paused) = p.paused {
        cx.conn
            .prepare_cached("UPDATE topics SET paused = ?2 WHERE tid = ?1")?
            .execute(params![tid, paused])?;
    }
    // A new or changed rate limit starts with a full bucket.
    let limit_changed = p.rate_limit.is_some_and(|r| r != before.rate_limit);
    if let Some(r) = p.rate_limit.filter(|_| limit_changed) {
        cx.conn
            .prepare_cached(
                "UPDATE topics SET rate_limit = ?2, rl_credit = NULL, rl_at = 0 WHERE tid = ?1",
            )?
            .execute(params![tid, r.map(|r| r.encode())])?;
    }
    // Keys: a new or changed key_rate_limit starts every key with a full
    // bucket; reserve reads key_concurrency afresh each time.
    let key_limit_changed = p.key_rate_limit.is_some_and(|r| r != before.key_rate_limit);
    if let Some(r) = p.key_rate_limit.filter(|_| key_limit_changed) {
        cx.conn
            .prepare_cached("UPDATE topics SET key_rate_limit = ?2 WHERE tid = ?1")?
            .execute(params![tid, r.map(|r| r.encode())])?;
        cx.conn
            .prepare_cached("UPDATE fkeys SET credit = NULL, at = 0 WHERE tid = ?1")?
            .execute([tid])?;
    }
    let concurrency_changed = p
        .key_concurrency
        .is_some_and(|k| k != before.key_concurrency);
    if let Some(k) = p.key_concurrency.filter(|_| concurrency_changed) {
        cx.conn
            .prepare_cached("UPDATE topics SET key_concurrency = ?2 WHERE tid = ?1")?
            .execute(params![tid, k])?;
    }
    // A resume or a new limit lets waiters look again at once.
    if limit_changed
        || key_limit_changed
        || concurrency_changed
        || (before.paused && p.paused == Some(false))
    {
        cx.wake.push(topic.as_str().to_string());
    }
    config(cx, tid)
}

/// Deletes up to `?2` scheduled jobs of topic `?1` (the other states are
/// found in memory). The state is written into the SQL, not bound: only a
/// literal matches the schedule's partial index `WHERE state = 0` (with
/// the query planner stability guarantee on, a bound state would read
/// every row of the topic through `jobs_id`).
const DELETE_SCHEDULED: &str =
    "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE tid = ?1 AND state = 0 LIMIT ?2)";

/// The id and key of reserved job `seq` of topic `tid`, a lease in memory.
/// `None` when the file does not hold it reserved: cannot happen while
/// every change of a lease goes through `Leases`; the entry is dropped
/// rather than found again and again.
fn leased_row(cx: &mut Ctx, tid: i64, seq: i64) -> OpResult<Option<(String, Option<String>)>> {
    let row = cx
        .conn
        .prepare_cached("SELECT id, fkey FROM jobs WHERE seq = ?1 AND tid = ?2 AND state = 2")?
        .query_row(params![seq, tid], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if row.is_none() {
        tracing::warn!(seq, "embedded store: a lease in memory had no reserved row");
        cx.mem.leases.remove(seq);
    }
    Ok(row)
}

/// Deletes up to `max` of topic `tid`'s reserved jobs (found in memory:
/// no index holds them), freeing their keys' slots (a delete cut short
/// leaves no key held for good); returns how many.
fn delete_leases(cx: &mut Ctx, tid: i64, max: i64) -> OpResult<i64> {
    let mut n = 0;
    for seq in cx.mem.leases.of_topic(tid, max.max(0) as usize) {
        let Some((_, key)) = leased_row(cx, tid, seq)? else {
            continue;
        };
        cx.mem.leases.remove(seq);
        cx.conn.with(HotSql::Delete, |st| st.execute([seq]))?;
        if let Some(k) = key {
            free_slot(cx, tid, &k)?;
        }
        n += 1;
    }
    Ok(n)
}

/// Deletes up to `max` of topic `tid`'s ready jobs (found in memory):
/// those without a key, then those with one; returns how many.
fn delete_ready(cx: &mut Ctx, tid: i64, max: i64) -> OpResult<i64> {
    let mut n = 0;
    for (priority, due, seq) in cx.mem.ready.first(tid, max.max(0) as usize) {
        cx.mem.ready.remove((tid, priority, due, seq));
        n += delete_row(cx, tid, READY, seq)?;
    }
    let keyed: Vec<(String, (i64, i64, i64))> = cx
        .mem
        .lanes
        .topic(tid)
        .take((max - n).max(0) as usize)
        .map(|(k, p)| (k.to_string(), p))
        .collect();
    for (k, p) in keyed {
        cx.mem.lanes.remove(tid, &k, p);
        n += delete_row(cx, tid, READY, p.2)?;
    }
    Ok(n)
}

pub(crate) fn delete_topic(cx: &mut Ctx, topic: &Topic, max: usize) -> OpResult<(u64, bool)> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok((0, true));
    };
    let mut left = max as i64;
    let mut deleted = 0;
    // Leases before the jobs that wait for them (a delete cut short frees
    // the keys' slots first); ready last.
    for state in [SCHEDULED, RESERVED, DEAD, READY] {
        if left <= 0 {
            break;
        }
        let n = match state {
            SCHEDULED => cx
                .conn
                .prepare_cached(DELETE_SCHEDULED)?
                .execute(params![tid, left])? as i64,
            RESERVED => delete_leases(cx, tid, left)?,
            READY => delete_ready(cx, tid, left)?,
            _ => delete_dead(cx, tid, left)?,
        };
        let mut d = [0; 4];
        d[state as usize] = -n;
        counts(cx, tid, d)?;
        deleted += n;
        left -= n;
    }
    let rest: bool = cx
        .conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM jobs WHERE tid = ?1)")?
        .query_row([tid], |r| r.get(0))?;
    if rest {
        return Ok((deleted as u64, false));
    }
    cx.conn
        .prepare_cached("DELETE FROM dedup WHERE tid = ?1")?
        .execute([tid])?;
    cx.conn
        .prepare_cached("DELETE FROM fkeys WHERE tid = ?1")?
        .execute([tid])?;
    cx.conn
        .prepare_cached("DELETE FROM topics WHERE tid = ?1")?
        .execute([tid])?;
    cx.tids.remove(topic.as_str());
    Ok((deleted as u64, true))
}

pub(crate) fn stats(cx: &mut Ctx, topic: &Topic, now: u64) -> OpResult<TopicStats> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(TopicStats::default());
    };
    let mut st = cx
        .conn
        .prepare_cached(
            "SELECT n_scheduled, n_ready, n_reserved, n_dead, enqueued, acked, failed, expired, dead, cancelled, dead_dropped, replayed,
             paused_until_ms, rate_limited FROM topics WHERE tid = ?1",
        )?
        .query_row([tid], |r| {
            Ok(TopicStats {
                scheduled: r.get(0)?,
                ready: r.get(1)?,
                reserved: r.get(2)?,
                dead: r.get(3)?,
                oldest_overdue_ms: 0,
                counters: TopicCounters {
                    enqueued: r.get(4)?,
                    acked: r.get(5)?,
                    failed: r.get(6)?,
                    expired: r.get(7)?,
                    dead: r.get(8)?,
                    cancelled: r.get(9)?,
                    dead_dropped: r.get(10)?,
                    replayed: r.get(11)?,
                    rate_limited: r.get(13)?,
                },
                paused_until_ms: r.get(12)?,
                ..TopicStats::default()
            })
        })?;
    let ready_head = cx.mem.ready.head(tid).map(|(_, due, _)| due.max(0) as u64);
    // The head of each key's lane.
    let key_heads = cx
        .mem
        .lanes
        .heads(tid)
        .map(|(_, due, _)| due.max(0) as u64)
        .min();
    let oldest = [sched_head(cx, tid)?, ready_head, key_heads]
        .into_iter()
        .flatten()
        .min();
    st.oldest_overdue_ms = oldest.map_or(0, |d| now.saturating_sub(d));
    Ok(st)
}

/// Leases one job by id unless it is reserved (see `Store::reserve_job`).
pub(crate) fn reserve_job(
    cx: &mut Ctx,
    topic: &Topic,
    id: &JobId,
    lease_override: Option<u64>,
    now: u64,
) -> OpResult<Option<Lease>> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(None);
    };
    let row: Option<Leasable> = cx
        .conn
        .prepare_cached(&format!(
            "SELECT {LEASABLE} FROM jobs WHERE tid = ?1 AND id = ?2"
        ))?
        .query_row(params![tid, id.as_str()], Leasable::row)
        .optional()?;
    let Some(j) = row.filter(|j| j.state != RESERVED) else {
        return Ok(None);
    };
    let lease_ms = match lease_override.or(j.lease_ms) {
        Some(l) => l,
        None => config(cx, tid)?.lease_ms,
    };
    let from = j.state;
    if from == DEAD {
        // Out of the dead letters in memory, from its place among them.
        let died: Option<i64> = cx
            .conn
            .prepare_cached("SELECT died_ms FROM jobs WHERE seq = ?1")?
            .query_row([j.seq], |r| r.get(0))?;
        cx.mem.dead.remove((tid, died_place(died), j.seq));
    }
    let token = numbered(&format!("{:016x}.", rand::random::<u64>()), j.seq);
    if let Some(k) = &j.fkey {
        cx.conn
            .prepare_cached(
                "INSERT INTO fkeys (tid, fkey, active) VALUES (?1, ?2, 1)
                 ON CONFLICT (tid, fkey) DO UPDATE SET active = active + 1",
            )?
            .execute(params![tid, k])?;
    }
    let l = lease(cx, topic, tid, j, lease_ms, token, now)?;
    counts(cx, tid, delta(Some(from), Some(RESERVED)))?;
    Ok(Some(l))
}

/// The columns a lease is made of.
const LEASABLE: &str = "seq, id, lease_ms, due_ms, priority, is_json, body, attempts, state, fkey";

/// A job about to be leased.
struct Leasable {
    seq: i64,
    id: String,
    lease_ms: Option<u64>,
    due: u64,
    priority: u32,
    is_json: bool,
    body: Vec<u8>,
    attempts: u32,
    state: i64,
    fkey: Option<String>,
}

impl Leasable {
    fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            seq: r.get(0)?,
            id: r.get(1)?,
            lease_ms: r.get(2)?,
            due: r.get(3)?,
            priority: r.get(4)?,
            is_json: r.get(5)?,
            body: r.get(6)?,
            attempts: r.get(7)?,
            state: r.get(8)?,
            fkey: r.get(9)?,
        })
    }
}

/// Leases `j` for `lease_ms` under `token`: reserved, the attempt counted,
/// a died-at time cleared. The state counts are the caller's to move.
fn lease(
    cx: &mut Ctx,
    topic: &Topic,
    tid: i64,
    j: Leasable,
    lease_ms: u64,
    token: String,
    now: u64,
) -> OpResult<Lease> {
    let deadline = now + lease_ms;
    cx.conn.with(HotSql::Lease, |st| {
        st.execute(params![token, deadline as i64, j.seq])
    })?;
    note_lease(cx, topic, tid, j, token, deadline)
}

/// Job `j`, its row leased until `deadline` under `token`: out of the
/// ready order, into the leases in memory, and the call's answer.
fn note_lease(
    cx: &mut Ctx,
    topic: &Topic,
    tid: i64,
    j: Leasable,
    token: String,
    deadline: u64,
) -> OpResult<Lease> {
    if j.state == READY {
        cx.mem.remove_ready(
            tid,
            j.fkey.as_deref(),
            i64::from(j.priority),
            j.due as i64,
            j.seq,
        );
    }
    cx.mem.leases.add(tid, j.seq, deadline as i64);
    Ok(Lease {
        topic: topic.clone(),
        id: JobId::new(j.id).map_err(|e| Failure(StoreError::Invalid(e)))?,
        token,
        attempt: j.attempts + 1,
        due_at_ms: j.due,
        lease_deadline_ms: deadline,
        priority: j.priority,
        body: Body::from_stored(j.body, j.is_json),
    })
}

/// Pauses the topic until `until` (0: resumes it).
pub(crate) fn pause_topic(cx: &mut Ctx, topic: &Topic, until: u64) -> OpResult<()> {
    let tid = ensure_tid(cx, topic)?;
    cx.conn
        .prepare_cached("UPDATE topics SET paused_until_ms = ?2 WHERE tid = ?1")?
        .execute(params![tid, until as i64])?;
    cx.wake.push(topic.as_str().to_string());
    Ok(())
}

/// Counts `name` up by one and returns the new value (1 first).
pub(crate) fn next_seq(cx: &mut Ctx, name: &str) -> OpResult<u64> {
    let v: i64 = cx
        .conn
        .prepare_cached(
            "INSERT INTO counters (name, value) VALUES (?1, 1) \
             ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value",
        )?
        .query_row([name], |r| r.get(0))?;
    Ok(v as u64)
}

pub(crate) fn put_record(
    cx: &mut Ctx,
    kind: &str,
    name: &str,
    value: &str,
    mark: u64,
) -> OpResult<bool> {
    let existed = cx
        .conn
        .prepare_cached("SELECT 1 FROM records WHERE kind = ?1 AND name = ?2")?
        .exists(params![kind, name])?;
    cx.conn
        .prepare_cached(
            "INSERT INTO records (kind, name, value, mark) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (kind, name) DO UPDATE SET value = excluded.value, mark = excluded.mark",
        )?
        .execute(params![kind, name, value, mark as i64])?;
    Ok(!existed)
}

pub(crate) fn get_record(cx: &mut Ctx, kind: &str, name: &str) -> OpResult<Option<Record>> {
    Ok(cx
        .conn
        .prepare_cached("SELECT value, mark FROM records WHERE kind = ?1 AND name = ?2")?
        .query_row(params![kind, name], |r| {
            Ok(Record {
                value: r.get(0)?,
                mark: r.get::<_, i64>(1)? as u64,
            })
        })
        .optional()?)
}

pub(crate) fn list_records(cx: &mut Ctx, kind: &str) -> OpResult<Vec<(String, Record)>> {
    let mut st = cx
        .conn
        .prepare_cached("SELECT name, value, mark FROM records WHERE kind = ?1 ORDER BY name")?;
    let rows = st.query_map([kind], |r| {
        Ok((
            r.get::<_, String>(0)?,
            Record {
                value: r.get(1)?,
                mark: r.get::<_, i64>(2)? as u64,
            },
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(crate) fn delete_record(cx: &mut Ctx, kind: &str, name: &str) -> OpResult<bool> {
    Ok(cx
        .conn
        .prepare_cached("DELETE FROM records WHERE kind = ?1 AND name = ?2")?
        .execute(params![kind, name])?
        > 0)
}

pub(crate) fn raise_mark(cx: &mut Ctx, kind: &str, name: &str, mark: u64) -> OpResult<Option<u64>> {
    Ok(cx
        .conn
        .prepare_cached(
            "UPDATE records SET mark = max(mark, ?3) WHERE kind = ?1 AND name = ?2 RETURNING mark",
        )?
        .query_row(params![kind, name, mark as i64], |r| r.get::<_, i64>(0))
        .optional()?
        .map(|m| m as u64))
}

/// Reads a row; after a failed fsync, also writes a probe (the file's
/// schema version, unchanged) so that the commit tells whether writes are
/// synced again.
pub(crate) fn ping(cx: &mut Ctx) -> OpResult<()> {
    cx.conn.query_row("SELECT 1", [], |_| Ok(()))?;
    if cx.unsynced {
        cx.conn.execute_batch(&format!(
            "PRAGMA user_version = {}",
            crate::schema::SCHEMA_VERSION
        ))?;
        cx.probed = true;
    }
    Ok(())
}

/// One page of a topic's jobs in id order: the window is the next `limit`
/// ids after the cursor (found on the `(tid, id)` index alone), and the
/// page the jobs of that window in `state`. The cursor is the window's last
/// id, so a job keeps its place whatever happens to it.
pub(crate) fn list_jobs(
    cx: &mut Ctx,
    topic: &Topic,
    state: Option<JobState>,
    cursor: Option<&str>,
    limit: usize,
) -> OpResult<JobPage> {
    let after = match cursor {
        None => String::new(),
        Some(c) => JobId::new(c)
            .map_err(|_| {
                StoreError::Invalid(InvalidInput::new(
                    "invalid_cursor",
                    "cursor is not one this store handed out: start again without one",
                ))
            })?
            .as_str()
            .to_string(),
    };
    let Some(tid) = tid(cx, topic)? else {
        return Ok(JobPage::default());
    };
    let limit = limit.clamp(1, BATCH as usize) as i64;
    let end: Option<String> = cx
        .conn
        .prepare_cached(
            "SELECT id FROM jobs WHERE tid = ?1 AND id > ?2 ORDER BY id LIMIT 1 OFFSET ?3",
        )?
        .query_row(params![tid, after, limit - 1], |r| r.get(0))
        .optional()?;
    let code = state.map(|s| match s {
        JobState::Scheduled => SCHEDULED,
        JobState::Ready => READY,
        JobState::Reserved => RESERVED,
        JobState::Dead => DEAD,
    });
    let cfg = config(cx, tid)?;
    let jobs = cx
        .conn
        .prepare_cached(&format!(
            "SELECT {JOB_COLUMNS}, dedup_ms FROM jobs WHERE tid = ?1 AND id > ?2
             AND (?3 IS NULL OR id <= ?3) AND (?4 IS NULL OR state = ?4) ORDER BY id"
        ))?
        .query_map(params![tid, after, end, code], |r| {
            let (_, info) = job_row(r, &cfg)?;
            Ok(ListedJob {
                info,
                max_attempts: r.get(6)?,
                lease_ms: r.get(7)?,
                retry: r
                    .get::<_, Option<String>>(8)?
                    .and_then(|s| RetryPolicy::decode(&s)),
                dedup_ms: r.get::<_, Option<u64>>(21)?.filter(|ms| *ms > 0),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(JobPage { jobs, cursor: end })
}

/// Writes jobs as they were in another store (see `Store::import_jobs`).
pub(crate) fn import_jobs(
    cx: &mut Ctx,
    topic: &Topic,
    jobs: &[ImportJob],
    now: u64,
) -> OpResult<Vec<Imported>> {
    let tid = ensure_tid(cx, topic)?;
    cx.conn
        .prepare_cached("DELETE FROM dedup WHERE tid = ?1 AND until_ms <= ?2")?
        .execute(params![tid, now as i64])?;
    let mut out = Vec::with_capacity(jobs.len());
    let (mut created, mut dead) = (0, 0);
    for j in jobs {
        // A live job first (a replayed dead letter may still be in its window).
        let live = cx
            .conn
            .prepare_cached("SELECT 1 FROM jobs WHERE tid = ?1 AND id = ?2")?
            .exists(params![tid, j.id.as_str()])?;
        if !live
            && cx
                .conn
                .prepare_cached("SELECT 1 FROM dedup WHERE tid = ?1 AND id = ?2")?
                .exists(params![tid, j.id.as_str()])?
        {
            out.push(Imported {
                id: j.id.clone(),
                created: false,
                deduplicated: true,
                state: JobState::Scheduled,
            });
            continue;
        }
        let state = match j.state {
            JobState::Dead => DEAD,
            _ if j.due_at_ms <= now => READY,
            _ => SCHEDULED,
        };
        let written = cx
            .conn
            .prepare_cached(
                "INSERT INTO jobs (tid, id, state, due_ms, priority, attempts, max_attempts, lease_ms, retry,
                   last_error, created_ms, died_ms, is_json, body, dedup_ms, fkey)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
                 ON CONFLICT (tid, id) DO NOTHING",
            )?
            .execute(params![
                tid,
                j.id.as_str(),
                state,
                j.due_at_ms as i64,
                j.priority,
                j.attempts,
                j.max_attempts,
                j.lease_ms.map(|v| v as i64),
                j.retry.as_ref().map(RetryPolicy::encode),
                j.last_error.as_deref(),
                j.created_at_ms as i64,
                j.died_at_ms.filter(|_| state == DEAD).map(|v| v as i64),
                j.body.is_json(),
                j.body.as_bytes(),
                j.dedup_ms.filter(|ms| *ms > 0).map(|v| v as i64),
                j.key.as_ref().map(JobKey::as_str),
            ])?
            == 1;
        if !written {
            let old: i64 = cx
                .conn
                .prepare_cached("SELECT state FROM jobs WHERE tid = ?1 AND id = ?2")?
                .query_row(params![tid, j.id.as_str()], |r| r.get(0))?;
            out.push(Imported {
                id: j.id.clone(),
                created: false,
                deduplicated: false,
                state: state_of(old),
            });
            continue;
        }
        created += 1;
        if state == DEAD {
            let died = died_place(j.died_at_ms.map(|v| v as i64));
            cx.mem.dead.add((tid, died, cx.conn.last_insert_rowid()));
            dead += 1;
            counts(cx, tid, [0, 0, 0, 1])?;
        } else {
            // Counted and woken as any job arriving in that state.
            let seq = cx.conn.last_insert_rowid();
            place(cx, topic, tid, seq, None, j.due_at_ms, now)?;
        }
        out.push(Imported {
            id: j.id.clone(),
            created: true,
            deduplicated: false,
            state: state_of(state),
        });
    }
    bump(cx, tid, "enqueued", created)?;
    if jobs.iter().any(|j| j.key.is_some()) {
        mark_keyed(cx, tid)?;
    }
    if dead > 0 {
        let cap = config(cx, tid)?.dead_cap;
        trim_dead(cx, tid, cap)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A topic delete's scheduled step seeks the schedule's partial index,
    /// not every row of the topic (leases, ready jobs without a key and
    /// dead letters are found in memory).
    #[test]
    fn deleting_a_topic_seeks_the_schedules_index() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::schema::open(&dir.path().join("f"), None).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {DELETE_SCHEDULED}"))
            .unwrap()
            .query_map(params![1, 10], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(plan.iter().any(|p| p.contains("jobs_sched")), "{plan:?}");
    }

    /// How often the held statement `which` ran on the writer's connection.
    async fn runs(s: &crate::EmbeddedStore, which: HotSql) -> i32 {
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

    /// A job that sets none of the five columns the short insert leaves
    /// NULL goes in by it, a job that sets any one of them (or whose topic
    /// has a dedup window) by the full insert, and both rows read back as
    /// what the job asked for.
    #[tokio::test]
    async fn a_plain_job_is_inserted_by_the_short_statement_and_any_other_by_the_full_one() {
        const T0: u64 = 1_700_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let s = crate::EmbeddedStore::open(dir.path()).unwrap();
        let topic = Topic::new("ins").unwrap();
        let job = |id: &str| {
            let mut j = NewJob::new(
                JobId::new(id).unwrap(),
                Body::Bytes(b"\x00\xffbody".to_vec()),
                When::DelayMs(7),
            );
            j.priority = 9;
            j
        };
        let mut jobs = vec![job("plain")];
        let mut j = job("attempts");
        j.max_attempts = Some(3);
        jobs.push(j);
        let mut j = job("lease");
        j.lease_ms = Some(4_000);
        jobs.push(j);
        let mut j = job("retry");
        j.retry = Some(RetryPolicy::FixedMs(50));
        jobs.push(j);
        let mut j = job("window");
        j.dedup_ms = Some(60_000);
        jobs.push(j);
        let mut j = job("keyed");
        j.key = Some(JobKey::new("k").unwrap());
        jobs.push(j);
        let (full0, plain0) = (
            runs(&s, HotSql::Insert).await,
            runs(&s, HotSql::InsertPlain).await,
        );
        let out = s.enqueue(&topic, &jobs, T0).await.unwrap();
        assert!(out.iter().all(|e| e.created), "{out:?}");
        assert_eq!(runs(&s, HotSql::InsertPlain).await, plain0 + 1);
        assert_eq!(runs(&s, HotSql::Insert).await, full0 + 5);
        // The same id again: refused by either statement, nothing written.
        let again = s.enqueue(&topic, &jobs[..2], T0).await.unwrap();
        assert!(again.iter().all(|e| !e.created), "{again:?}");
        #[allow(clippy::type_complexity)]
        let rows: Vec<(
            String,
            (i64, i64, i64, i64, i64, bool, Vec<u8>),
            (
                Option<i64>,
                Option<i64>,
                Option<String>,
                Option<i64>,
                Option<String>,
            ),
        )> = s
            .writer
            .read(|cx| {
                let mut st = cx.conn.prepare(
                    "SELECT id, state, due_ms, priority, attempts, created_ms, is_json, body,
                     max_attempts, lease_ms, retry, dedup_ms, fkey FROM jobs ORDER BY seq",
                )?;
                let rows = st
                    .query_map([], |r| {
                        Ok((
                            r.get(0)?,
                            (
                                r.get(1)?,
                                r.get(2)?,
                                r.get(3)?,
                                r.get(4)?,
                                r.get(5)?,
                                r.get(6)?,
                                r.get(7)?,
                            ),
                            (r.get(8)?, r.get(9)?, r.get(10)?, r.get(11)?, r.get(12)?),
                        ))
                    })?
                    .collect::<Result<_, _>>()?;
                Ok(rows)
            })
            .await
            .unwrap();
        let t0 = T0 as i64;
        let common = (SCHEDULED, t0 + 7, 9, 0, t0, false, b"\x00\xffbody".to_vec());
        let retry = Some(RetryPolicy::FixedMs(50).encode());
        let expected = [
            ("plain", (None, None, None, None, None)),
            ("attempts", (Some(3), None, None, None, None)),
            ("lease", (None, Some(4_000), None, None, None)),
            ("retry", (None, None, retry, None, None)),
            ("window", (None, None, None, Some(60_000), None)),
            ("keyed", (None, None, None, None, Some("k".to_string()))),
        ];
        assert_eq!(rows.len(), expected.len());
        for (row, (id, own)) in rows.iter().zip(expected) {
            assert_eq!(row.0, id);
            assert_eq!(row.1, common, "{id}");
            assert_eq!(row.2, own, "{id}");
        }
        // A topic whose default window applies to every job: the full insert.
        let windowed = Topic::new("windowed").unwrap();
        s.configure_topic(
            &windowed,
            &TopicConfigPatch {
                dedup_ms: Some(30_000),
                ..TopicConfigPatch::default()
            },
        )
        .await
        .unwrap();
        let (full0, plain0) = (
            runs(&s, HotSql::Insert).await,
            runs(&s, HotSql::InsertPlain).await,
        );
        s.enqueue(&windowed, &[job("w")], T0).await.unwrap();
        assert_eq!(runs(&s, HotSql::InsertPlain).await, plain0);
        assert_eq!(runs(&s, HotSql::Insert).await, full0 + 1);
    }

    fn due_now(ids: &[&str], lease_ms: &[Option<u64>]) -> Vec<NewJob> {
        ids.iter()
            .zip(lease_ms)
            .map(|(id, ms)| {
                let mut j = NewJob::new(
                    JobId::new(*id).unwrap(),
                    Body::Json("1".into()),
                    When::DelayMs(0),
                );
                j.lease_ms = *ms;
                j
            })
            .collect()
    }

    /// Jobs due at once, leased by one call, are leased by one `UPDATE` over
    /// their span, which writes each row the token the call answers (row ids
    /// above 2³² included: SQLite's `printf('%x')` and `numbered` agree), so
    /// every ack finds its lease; a span with a job of its own lease length
    /// is leased row by row, each with its own deadline.
    #[tokio::test]
    async fn a_span_of_ready_jobs_is_leased_at_once_under_the_tokens_answered() {
        const T0: u64 = 1_700_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let s = crate::EmbeddedStore::open(dir.path()).unwrap();
        // Row ids from 2⁴⁰ on: a job due in a day, moved there.
        let later = Topic::new("later").unwrap();
        let mut far = due_now(&["far"], &[None]);
        far[0].when = When::DelayMs(86_400_000);
        s.enqueue(&later, &far, T0).await.unwrap();
        s.writer
            .exec(|cx| {
                cx.conn
                    .execute("UPDATE jobs SET seq = 1099511627776 WHERE id = 'far'", [])?;
                Ok(())
            })
            .await
            .unwrap();
        let topic = Topic::new("span").unwrap();
        let ids = ["a", "b", "c", "d", "e", "f"];
        s.enqueue(&topic, &due_now(&ids, &[None; 6]), T0)
            .await
            .unwrap();
        let (span0, one0) = (
            runs(&s, HotSql::LeaseSpan).await,
            runs(&s, HotSql::Lease).await,
        );
        let leases = s.reserve(&topic, 6, None, T0).await.unwrap().leases;
        assert_eq!(leases.len(), 6);
        assert_eq!(runs(&s, HotSql::LeaseSpan).await, span0 + 1);
        assert_eq!(runs(&s, HotSql::Lease).await, one0);
        for l in &leases {
            let (id, token) = (l.id.as_str().to_string(), l.token.clone());
            #[allow(clippy::type_complexity)]
            let stored: (String, (i64, i64, Option<i64>, Option<i64>)) = s
                .writer
                .read(move |cx| {
                    Ok(cx.conn.query_row(
                        "SELECT token, state, attempts, deadline_ms, died_ms FROM jobs WHERE id = ?1",
                        [&id],
                        |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))),
                    )?)
                })
                .await
                .unwrap();
            assert_eq!(stored.0, token);
            assert!(token_seq(&token).unwrap() > 1 << 40, "{token}");
            // The row as the per-row lease writes it: reserved, the attempt
            // counted, the deadline answered, no died-at time.
            let deadline = (T0 + TopicConfig::default().lease_ms) as i64;
            assert_eq!(stored.1, (RESERVED, 1, Some(deadline), None));
            assert_eq!(l.attempt, 1);
            assert_eq!(l.lease_deadline_ms, T0 + TopicConfig::default().lease_ms);
        }
        let held: Vec<Held> = leases
            .iter()
            .map(|l| Held {
                topic: &topic,
                id: &l.id,
                token: &l.token,
            })
            .collect();
        let acked = s.ack_batch(&held, T0).await;
        assert!(acked.iter().all(Result::is_ok), "{acked:?}");

        // One job of the span with a lease of its own: row by row.
        let own = [None, Some(5_000), None];
        s.enqueue(&topic, &due_now(&["g", "h", "i"], &own), T0)
            .await
            .unwrap();
        let (span0, one0) = (
            runs(&s, HotSql::LeaseSpan).await,
            runs(&s, HotSql::Lease).await,
        );
        let leases = s.reserve(&topic, 3, None, T0).await.unwrap().leases;
        assert_eq!(runs(&s, HotSql::LeaseSpan).await, span0);
        assert_eq!(runs(&s, HotSql::Lease).await, one0 + 3);
        let deadlines: Vec<(&str, u64)> = leases
            .iter()
            .map(|l| (l.id.as_str(), l.lease_deadline_ms - T0))
            .collect();
        let topic_ms = TopicConfig::default().lease_ms;
        assert_eq!(deadlines, [("g", topic_ms), ("h", 5_000), ("i", topic_ms)]);
    }

    /// A span whose read finds a row it does not hand out (its place in
    /// memory is stale: the row's priority changed behind the writer's
    /// back) is leased row by row: the row left out stays ready in the
    /// file, not leased without an answer. (All in one call of the writer,
    /// which then puts the row and its place back as they were: the debug
    /// build compares memory with the file at every commit.)
    #[tokio::test]
    async fn a_span_with_a_row_not_handed_out_is_leased_row_by_row() {
        const T0: u64 = 1_700_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let s = crate::EmbeddedStore::open(dir.path()).unwrap();
        let topic = Topic::new("stale").unwrap();
        let ids = ["a", "b", "c", "d"];
        s.enqueue(&topic, &due_now(&ids, &[None; 4]), T0)
            .await
            .unwrap();
        let (span0, one0) = (
            runs(&s, HotSql::LeaseSpan).await,
            runs(&s, HotSql::Lease).await,
        );
        let t = topic.clone();
        let (handed, b) = s
            .writer
            .exec(move |cx| {
                let (seq, tid): (i64, i64) = cx.conn.query_row(
                    "UPDATE jobs SET priority = 5 WHERE id = 'b' RETURNING seq, tid",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                let leases = reserve(cx, &t, 4, None, T0)?.leases;
                let b: (i64, Option<String>) =
                    cx.conn
                        .query_row("SELECT state, token FROM jobs WHERE id = 'b'", [], |r| {
                            Ok((r.get(0)?, r.get(1)?))
                        })?;
                cx.conn
                    .execute("UPDATE jobs SET priority = 1024 WHERE id = 'b'", [])?;
                cx.mem.add_ready(tid, None, 1024, T0 as i64, seq);
                let handed: Vec<String> = leases.iter().map(|l| l.id.to_string()).collect();
                Ok((handed, b))
            })
            .await
            .unwrap();
        assert_eq!(handed, ["a", "c", "d"]);
        assert_eq!(b, (READY, None), "b stays ready, unleased");
        assert_eq!(runs(&s, HotSql::LeaseSpan).await, span0);
        assert_eq!(runs(&s, HotSql::Lease).await, one0 + 3);
    }

    /// An item of a batch undone by its own savepoint takes its lease
    /// changes with it: the lease its nack ended is held again, in memory
    /// as in the file, and ends at its deadline.
    #[tokio::test]
    async fn a_batch_item_undone_alone_keeps_its_lease() {
        const T0: u64 = 1_700_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let s = crate::EmbeddedStore::open(dir.path()).unwrap();
        let topic = Topic::new("items").unwrap();
        let jobs: Vec<NewJob> = ["a", "b"]
            .map(|id| {
                NewJob::new(
                    JobId::new(id).unwrap(),
                    Body::Json("1".into()),
                    When::DelayMs(0),
                )
            })
            .into();
        s.enqueue(&topic, &jobs, T0).await.unwrap();
        let leases = s.reserve(&topic, 2, Some(1000), T0).await.unwrap().leases;
        let t = topic.clone();
        let results = s
            .writer
            .exec(move |cx| {
                per_item(cx, &leases, |cx, l| {
                    let given_back = Nack {
                        token: &l.token,
                        error: "e",
                        retry_in_ms: Some(0),
                        dead: false,
                        priority: None,
                    };
                    nack(cx, &t, &l.id, given_back, T0)?;
                    // b's nack ran, then its item fails: undone alone.
                    if l.id.as_str() == "b" {
                        return Err(Failure(StoreError::Unavailable(
                            "the test's failure".into(),
                        )));
                    }
                    Ok(())
                })
            })
            .await
            .unwrap();
        assert!(results[0].is_ok() && results[1].is_err(), "{results:?}");
        assert_eq!(
            s.writer.read(|cx| Ok(cx.mem.leases.len())).await.unwrap(),
            1
        );
        let b = s
            .get(&topic, &JobId::new("b").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(b.state, JobState::Reserved);
        let r = s.requeue_expired(&topic, 10, T0 + 1001).await.unwrap();
        let ids: Vec<_> = r.jobs.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["b"]);
    }

    #[test]
    fn tokens_are_the_prefix_and_the_row_id_in_hex() {
        for n in [0, 1, 9, 10, 15, 16, 255, 4096, 0xdead_beef, i64::MAX] {
            let token = numbered("0123456789abcdef.", n);
            assert_eq!(token, format!("0123456789abcdef.{n:x}"));
            assert_eq!(token_seq(&token), Some(n));
        }
        assert_eq!(numbered("", 0), "0");
        // Anything else names no row.
        for other in [
            "",
            "abc",
            "0123456789abcdef.",
            "0123456789abcdef.+1",
            "0123456789abcdef.-1",
            "0123456789abcdef.x1",
            "0123456789abcdef.8000000000000000",
            "0123456789abcdef.10000000000000000",
            "0123456789abcdef.1 ",
        ] {
            assert_eq!(token_seq(other), None, "{other:?}");
        }
    }
}
