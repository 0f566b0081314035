//! Reading jobs: one by id (`get.lua`), a page of a topic's jobs in id
//! order (`list_jobs.lua`), and the first jobs of a state in the order the
//! store hands them out (ready), runs them (scheduled) or keeps them
//! (dead letters, oldest first).

use dq_core::*;
use rusqlite::{OptionalExtension, params};

use super::{BATCH, DEAD, READY, RESERVED, SCHEDULED, config, state_of, tid};
use crate::writer::{Ctx, OpResult};

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
            errors: dq_core::errors_from_json(r.get::<_, Option<String>>(22)?.as_deref()),
            created_at_ms: r.get(10)?,
            lease_deadline_ms: r.get(12)?,
            died_at_ms: r.get(13)?,
            body: Body::from_stored(body, is_json),
            counts: JobCounts {
                reserves: r.get::<_, u32>(5)? + r.get::<_, u32>(23)?,
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
            expires_at_ms: r.get(21)?,
            put_delay_ms: r.get(24)?,
            trace: r
                .get::<_, Option<String>>(25)?
                .as_deref()
                .and_then(TraceContext::from_stored),
        },
    ))
}

const JOB_COLUMNS: &str = "seq, id, state, due_ms, priority, attempts, max_attempts, lease_ms, retry, last_error, created_ms, token, deadline_ms, died_ms, is_json, body, timeouts, releases, buries, kicks, fkey, expires_ms, errors, reserves_extra, put_delay_ms, trace";

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

/// `limit` ready jobs of `topic` after the first `offset`: those without a
/// key in hand-out order (from memory), then the keys' lanes.
pub(crate) fn list_ready(
    cx: &mut Ctx,
    topic: &Topic,
    offset: usize,
    limit: usize,
) -> OpResult<Vec<JobInfo>> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(Vec::new());
    };
    let seqs: Vec<i64> = cx
        .mem
        .ready
        .topic(tid)
        .map(|p| p.2)
        .chain(cx.mem.lanes.topic(tid).map(|(_, p)| p.2))
        .skip(offset)
        .take(limit)
        .collect();
    rows_by_seq(cx, tid, READY, &seqs)
}

/// `limit` scheduled jobs of `topic` after the first `offset`, soonest
/// first (along the schedule's partial index).
pub(crate) fn list_scheduled(
    cx: &mut Ctx,
    topic: &Topic,
    offset: usize,
    limit: usize,
) -> OpResult<Vec<JobInfo>> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(Vec::new());
    };
    let cfg = config(cx, tid)?;
    let rows = cx
        .conn
        .prepare_cached(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE tid = ?1 AND state = 0 ORDER BY due_ms, seq LIMIT ?2 OFFSET ?3"
        ))?
        .query_map(params![tid, limit as i64, offset as i64], |r| {
            job_row(r, &cfg)
        })?
        .map(|r| r.map(|(_, j)| j))
        .collect::<Result<_, _>>()?;
    Ok(rows)
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
                dedup_ms: r.get::<_, Option<u64>>(26)?.filter(|ms| *ms > 0),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(JobPage { jobs, cursor: end })
}
