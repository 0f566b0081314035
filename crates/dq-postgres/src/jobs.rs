//! Jobs by id and in lists: read one (`get.lua`), cancel and reschedule
//! one (`cancel.lua`, `reschedule.lua`), the first jobs of a state, a page
//! of a topic's jobs by id (`list_jobs.lua`), and jobs imported as another
//! store held them (`import_jobs.lua`).

use dq_core::*;
use tokio_postgres::Row;

use crate::OpResult;
use crate::cx::{BATCH, Cx, DEAD, READY, RESERVED, SCHEDULED, code_of, delta, job_id, state_of};
use crate::dead::trim_dead;
use crate::enqueue::mark_keyed;
use crate::leases::{open_window, unlease};
use crate::schema::PLACE_MS;

/// What [`info`] reads; counts.reserves is `attempts + carried`.
const JOB_COLUMNS: &str = "seq, id, state, due_ms, priority, attempts, max_attempts, lease_ms, retry, last_error, created_ms, token, deadline_ms, died_ms, is_json, body, timeouts, releases, buries, kicks, fkey, dedup_ms, errors::text, put_delay_ms, attempts + carried, trace";

fn info(r: &Row, cfg: &TopicConfig) -> OpResult<JobInfo> {
    let u = |i: usize| r.get::<_, i64>(i) as u64;
    let ou = |i: usize| r.get::<_, Option<i64>>(i).map(|v| v as u64);
    Ok(JobInfo {
        expires_at_ms: None,
        id: job_id(r.get(1))?,
        state: state_of(r.get(2)),
        due_at_ms: u(3),
        priority: u(4) as u32,
        attempts: u(5) as u32,
        max_attempts: ou(6).map_or(cfg.max_attempts, |v| v as u32),
        lease_ms: ou(7).unwrap_or(cfg.lease_ms),
        last_error: r.get(9),
        errors: dq_core::errors_from_json(r.get::<_, Option<String>>(22).as_deref()),
        created_at_ms: u(10),
        lease_deadline_ms: ou(12),
        died_at_ms: ou(13),
        body: Body::from_stored(r.get(15), r.get(14)),
        put_delay_ms: ou(23),
        trace: r
            .get::<_, Option<&str>>(25)
            .and_then(TraceContext::from_stored),
        counts: JobCounts {
            reserves: u(24) as u32,
            timeouts: u(16) as u32,
            releases: u(17) as u32,
            buries: u(18) as u32,
            kicks: u(19) as u32,
        },
        key: r
            .get::<_, Option<String>>(20)
            .map(|k| JobKey::new(k).map_err(|e| crate::Failure(StoreError::Invalid(e))))
            .transpose()?,
    })
}

async fn infos(cx: &Cx<'_>, tid: i64, rows: Vec<Row>) -> OpResult<Vec<JobInfo>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let cfg = cx.config(tid).await?;
    rows.iter().map(|r| info(r, &cfg)).collect()
}

pub(crate) async fn get(cx: &mut Cx<'_>, topic: &Topic, id: &JobId) -> OpResult<Option<JobInfo>> {
    let Some(tid) = cx.tid(topic).await? else {
        return Ok(None);
    };
    let rows = cx
        .q(
            &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE tid = $1 AND id = $2"),
            &[&tid, &id.as_str()],
        )
        .await?;
    Ok(infos(cx, tid, rows).await?.pop())
}

pub(crate) async fn list_dead(
    cx: &mut Cx<'_>,
    topic: &Topic,
    offset: usize,
    limit: usize,
) -> OpResult<Vec<JobInfo>> {
    let Some(tid) = cx.tid(topic).await? else {
        return Ok(Vec::new());
    };
    let rows = cx
        .q(
            &format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE tid = $1 AND state = 3
                 ORDER BY died_ms, seq OFFSET $2 LIMIT $3"
            ),
            &[&tid, &(offset as i64), &(limit as i64)],
        )
        .await?;
    infos(cx, tid, rows).await
}

pub(crate) async fn list_scheduled(
    cx: &mut Cx<'_>,
    topic: &Topic,
    offset: usize,
    limit: usize,
) -> OpResult<Vec<JobInfo>> {
    let Some(tid) = cx.tid(topic).await? else {
        return Ok(Vec::new());
    };
    let rows = cx
        .q(
            &format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE tid = $1 AND state = 0
                 ORDER BY due_ms, seq LIMIT $2 OFFSET $3"
            ),
            &[&tid, &(limit as i64), &(offset as i64)],
        )
        .await?;
    infos(cx, tid, rows).await
}

/// `limit` ready jobs after the first `offset`: the jobs without a key in
/// hand-out order, then the keys' lanes.
pub(crate) async fn list_ready(
    cx: &mut Cx<'_>,
    topic: &Topic,
    offset: usize,
    limit: usize,
) -> OpResult<Vec<JobInfo>> {
    let Some(tid) = cx.tid(topic).await? else {
        return Ok(Vec::new());
    };
    let mut rows = cx
        .q(
            &format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE tid = $1 AND state = 1 AND fkey IS NULL
                 ORDER BY priority, {PLACE_MS}, seq LIMIT $2 OFFSET $3"
            ),
            &[&tid, &(limit as i64), &(offset as i64)],
        )
        .await?;
    if rows.len() < limit {
        // How many of the offset the jobs without a key took: all of it
        // when the page has some of them, else as many as there are.
        let unkeyed = if rows.is_empty() {
            let n: i64 = cx
                .one(
                    "SELECT count(*) FROM jobs WHERE tid = $1 AND state = 1 AND fkey IS NULL",
                    &[&tid],
                )
                .await?
                .get(0);
            usize::try_from(n).unwrap_or(0)
        } else {
            offset
        };
        rows.extend(
            cx.q(
                &format!(
                    "SELECT {JOB_COLUMNS} FROM jobs WHERE tid = $1 AND state = 1 AND fkey IS NOT NULL
                     ORDER BY fkey, priority, {PLACE_MS}, seq LIMIT $2 OFFSET $3"
                ),
                &[
                    &tid,
                    &((limit - rows.len()) as i64),
                    &(offset.saturating_sub(unkeyed) as i64),
                ],
            )
            .await?,
        );
    }
    infos(cx, tid, rows).await
}

pub(crate) async fn list_jobs(
    cx: &mut Cx<'_>,
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
    let Some(tid) = cx.tid(topic).await? else {
        return Ok(JobPage::default());
    };
    let limit = limit.clamp(1, BATCH as usize) as i64;
    let end: Option<String> = cx
        .opt(
            "SELECT id FROM jobs WHERE tid = $1 AND id > $2 ORDER BY id OFFSET $3 LIMIT 1",
            &[&tid, &after, &(limit - 1)],
        )
        .await?
        .map(|r| r.get(0));
    let code = state.map(code_of);
    let rows = cx
        .q(
            &format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE tid = $1 AND id > $2
                 AND ($3::text IS NULL OR id <= $3) AND ($4::int2 IS NULL OR state = $4) ORDER BY id"
            ),
            &[&tid, &after, &end, &code],
        )
        .await?;
    let cfg = cx.config(tid).await?;
    let mut jobs = Vec::with_capacity(rows.len());
    for r in &rows {
        jobs.push(ListedJob {
            info: info(r, &cfg)?,
            max_attempts: r.get::<_, Option<i64>>(6).map(|v| v as u32),
            lease_ms: r.get::<_, Option<i64>>(7).map(|v| v as u64),
            retry: r
                .get::<_, Option<String>>(8)
                .and_then(|s| RetryPolicy::decode(&s)),
            dedup_ms: r
                .get::<_, Option<i64>>(21)
                .filter(|ms| *ms > 0)
                .map(|v| v as u64),
        });
    }
    Ok(JobPage { jobs, cursor: end })
}

pub(crate) async fn cancel(
    cx: &mut Cx<'_>,
    topic: &Topic,
    id: &JobId,
    now: u64,
) -> OpResult<Option<JobState>> {
    let Some(tid) = cx.lock(topic).await? else {
        return Ok(None);
    };
    let Some(r) = cx
        .opt(
            "DELETE FROM jobs WHERE tid = $1 AND id = $2 RETURNING state, dedup_ms, fkey",
            &[&tid, &id.as_str()],
        )
        .await?
    else {
        return Ok(None);
    };
    let (state, dedup_ms, fkey): (i16, Option<i64>, Option<String>) =
        (r.get(0), r.get(1), r.get(2));
    open_window(cx, tid, id.as_str(), dedup_ms, now).await?;
    cx.counts(tid, delta(Some(state), None)).await?;
    cx.bump(tid, "cancelled", 1).await?;
    if state == RESERVED {
        unlease(cx, topic, tid, fkey).await?;
    }
    Ok(Some(state_of(state)))
}

pub(crate) async fn reschedule(
    cx: &mut Cx<'_>,
    topic: &Topic,
    id: &JobId,
    due: u64,
    kick: bool,
    now: u64,
) -> OpResult<()> {
    let not_found = || crate::Failure(StoreError::NotFound);
    let tid = cx.lock(topic).await?.ok_or_else(not_found)?;
    let r = cx
        .opt(
            "SELECT seq, state FROM jobs WHERE tid = $1 AND id = $2 FOR UPDATE",
            &[&tid, &id.as_str()],
        )
        .await?
        .ok_or_else(not_found)?;
    let (seq, state): (i64, i16) = (r.get(0), r.get(1));
    if state != SCHEDULED && state != READY {
        return Err(StoreError::NotInState(state_of(state)).into());
    }
    if kick {
        cx.exec("UPDATE jobs SET kicks = kicks + 1 WHERE seq = $1", &[&seq])
            .await?;
    }
    cx.place(topic, tid, seq, Some(state), due.max(now), None, now)
        .await?;
    Ok(())
}

pub(crate) async fn import_jobs(
    cx: &mut Cx<'_>,
    topic: &Topic,
    jobs: &[ImportJob],
    now: u64,
) -> OpResult<Vec<Imported>> {
    let tid = cx.ensure_tid(topic).await?;
    cx.exec(
        "DELETE FROM dedup WHERE tid = $1 AND until_ms <= $2",
        &[&tid, &(now as i64)],
    )
    .await?;
    let mut out = Vec::with_capacity(jobs.len());
    let (mut created, mut dead) = (0, 0);
    for j in jobs {
        let existing = cx
            .opt(
                "SELECT state FROM jobs WHERE tid = $1 AND id = $2",
                &[&tid, &j.id.as_str()],
            )
            .await?;
        if let Some(r) = existing {
            out.push(Imported {
                id: j.id.clone(),
                created: false,
                deduplicated: false,
                state: state_of(r.get(0)),
            });
            continue;
        }
        if cx
            .opt(
                "SELECT 1 FROM dedup WHERE tid = $1 AND id = $2",
                &[&tid, &j.id.as_str()],
            )
            .await?
            .is_some()
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
        // Written scheduled (or dead), then placed as any job arriving; in
        // due order, its counts zero (an export carries neither) but its
        // reserves, which are its attempts (hand-outs), as the other stores.
        let first = if state == DEAD { DEAD } else { SCHEDULED };
        let seq: i64 = cx
            .one(
                "INSERT INTO jobs (tid, id, state, due_ms, priority, attempts, max_attempts, lease_ms, retry,
                   last_error, created_ms, died_ms, is_json, body, dedup_ms, fkey, errors, trace)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                   $17::text::jsonb, $18)
                 RETURNING seq",
                &[
                    &tid,
                    &j.id.as_str(),
                    &first,
                    &(j.due_at_ms as i64),
                    &i64::from(j.priority),
                    &i64::from(j.attempts),
                    &j.max_attempts.map(i64::from),
                    &j.lease_ms.map(|v| v as i64),
                    &j.retry.as_ref().map(RetryPolicy::encode),
                    &j.last_error.as_deref(),
                    &(j.created_at_ms as i64),
                    &j.died_at_ms.filter(|_| state == DEAD).map(|v| v as i64),
                    &j.body.is_json(),
                    &j.body.as_bytes(),
                    &j.dedup_ms.filter(|ms| *ms > 0).map(|v| v as i64),
                    &j.key.as_ref().map(JobKey::as_str),
                    &dq_core::errors_to_json(&j.errors),
                    &j.trace.as_ref().map(TraceContext::to_stored),
                ],
            )
            .await?
            .get(0);
        created += 1;
        if state == DEAD {
            dead += 1;
            cx.counts(tid, [0, 0, 0, 1]).await?;
        } else {
            cx.place(topic, tid, seq, None, j.due_at_ms, None, now)
                .await?;
        }
        out.push(Imported {
            id: j.id.clone(),
            created: true,
            deduplicated: false,
            state: state_of(state),
        });
    }
    cx.bump(tid, "enqueued", created).await?;
    if jobs.iter().any(|j| j.key.is_some()) {
        mark_keyed(cx, tid).await?;
    }
    if dead > 0 {
        let cap = cx.config(tid).await?.dead_cap;
        trim_dead(cx, tid, cap).await?;
    }
    Ok(out)
}
