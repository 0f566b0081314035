//! What a lease's holder does — touch, ack, nack, release — and the end of
//! the leases that expired (`touch.lua`, `ack.lua`, `nack.lua`,
//! `release.lua`, `requeue_expired.lua`; the embedded `ops/leases.rs`).
//! The callers of nack, release and requeue_expired hold the topic's
//! lock; touch and ack take none (they change one job's row, and ack counts
//! through `topic_deltas`), so the acks of one topic go in parallel.

use dq_core::*;

use crate::cx::{Cx, DEAD, RESERVED, job_id};
use crate::dead::trim_dead;
use crate::{Failure, OpResult};

/// Lease-holder checks shared by ack, nack, touch and release: returns the
/// topic's id and the job's seq. A waiting job has no lease, so any token
/// is stale (`LeaseMismatch`); a dead job reports its state.
async fn held(cx: &Cx<'_>, topic: &Topic, id: &JobId, token: &str) -> OpResult<(i64, i64)> {
    let tid = cx.tid(topic).await?.ok_or(Failure(StoreError::NotFound))?;
    let r = cx
        .opt(
            "SELECT seq, state, token FROM jobs WHERE tid = $1 AND id = $2 FOR UPDATE",
            &[&tid, &id.as_str()],
        )
        .await?
        .ok_or(Failure(StoreError::NotFound))?;
    let (seq, state, current): (i64, i16, Option<String>) = (r.get(0), r.get(1), r.get(2));
    if state == DEAD {
        return Err(StoreError::NotInState(JobState::Dead).into());
    }
    if state != RESERVED || current.as_deref() != Some(token) {
        return Err(StoreError::LeaseMismatch.into());
    }
    Ok((tid, seq))
}

/// Starts the dedup window of job `id` that ended at `now`, if it has one.
pub(crate) async fn open_window(
    cx: &Cx<'_>,
    tid: i64,
    id: &str,
    dedup_ms: Option<i64>,
    now: u64,
) -> OpResult<()> {
    if let Some(ms) = dedup_ms.filter(|ms| *ms > 0) {
        cx.exec(
            "INSERT INTO dedup (tid, id, until_ms) VALUES ($1, $2, $3)
             ON CONFLICT (tid, id) DO UPDATE SET until_ms = excluded.until_ms",
            &[&tid, &id, &(now as i64 + ms)],
        )
        .await?;
    }
    Ok(())
}

/// One lease fewer for key `key`; its count after, when the key has a row.
pub(crate) async fn free_slot(cx: &Cx<'_>, tid: i64, key: &str) -> OpResult<Option<i64>> {
    Ok(cx
        .opt(
            "UPDATE fkeys SET active = greatest(active - 1, 0) WHERE tid = $1 AND fkey = $2 RETURNING active",
            &[&tid, &key],
        )
        .await?
        .map(|r| r.get(0)))
}

/// A lease of a job with key `fkey` ended: one lease fewer for the key,
/// and when that frees a key held at its `key_concurrency`, the topic's
/// waiters are told.
pub(crate) async fn unlease(
    cx: &mut Cx<'_>,
    topic: &Topic,
    tid: i64,
    fkey: Option<String>,
) -> OpResult<()> {
    let Some(k) = fkey else { return Ok(()) };
    let after = free_slot(cx, tid, &k).await?;
    let limit: Option<i64> = cx
        .one("SELECT key_concurrency FROM topics WHERE tid = $1", &[&tid])
        .await?
        .get(0);
    if let (Some(a), Some(l)) = (after, limit)
        && a + 1 >= l
    {
        cx.wake(topic);
    }
    Ok(())
}

pub(crate) async fn touch(
    cx: &mut Cx<'_>,
    topic: &Topic,
    id: &JobId,
    token: &str,
    lease: Option<u64>,
    now: u64,
) -> OpResult<u64> {
    let (tid, seq) = held(cx, topic, id, token).await?;
    let job_lease: Option<i64> = cx
        .one("SELECT lease_ms FROM jobs WHERE seq = $1", &[&seq])
        .await?
        .get(0);
    let lease = match lease.or(job_lease.map(|v| v as u64)) {
        Some(l) => l,
        None => cx.config(tid).await?.lease_ms,
    };
    let deadline = now + lease;
    cx.exec(
        "UPDATE jobs SET deadline_ms = $1 WHERE seq = $2",
        &[&(deadline as i64), &seq],
    )
    .await?;
    Ok(deadline)
}

/// Acks with one statement in the usual case (a job without a dedup
/// window or a key): the row deleted by its lease, the ack counted in
/// `topic_deltas` without the topic's lock (acks of one topic go in
/// parallel; the next call that locks the topic folds them), and the
/// transaction's commit made lazy (`synchronous_commit` off: an ack lost
/// in a crash of PostgreSQL hands the job out again, which at-least-once
/// allows). `now`: the caller's time, or `None` for the database's, read
/// only when a dedup window opens.
pub(crate) async fn ack(
    cx: &mut Cx<'_>,
    topic: &Topic,
    id: &JobId,
    token: &str,
    now: Option<u64>,
) -> OpResult<()> {
    let ended = cx
        .opt(
            "WITH d AS (
               DELETE FROM jobs WHERE tid = (SELECT tid FROM topics WHERE name = $1)
                 AND id = $2 AND state = 2 AND token = $3
               RETURNING tid, dedup_ms, fkey),
             c AS (INSERT INTO topic_deltas (tid, d_reserved, acked) SELECT tid, -1, 1 FROM d)
             SELECT tid, dedup_ms, fkey, set_config('synchronous_commit', 'off', true) FROM d",
            &[&topic.as_str(), &id.as_str(), &token],
        )
        .await?;
    let Some(r) = ended else {
        held(cx, topic, id, token).await?;
        return Err(StoreError::LeaseMismatch.into());
    };
    let (tid, dedup_ms, fkey): (i64, Option<i64>, Option<String>) = (r.get(0), r.get(1), r.get(2));
    if dedup_ms.is_some_and(|ms| ms > 0) {
        let now = match now {
            Some(n) => n,
            None => cx.db_now().await?,
        };
        open_window(cx, tid, id.as_str(), dedup_ms, now).await?;
    }
    unlease(cx, topic, tid, fkey).await?;
    Ok(())
}

/// Acks many jobs with one statement (the rows deleted by their leases,
/// counted per topic in `topic_deltas`), then answers each item as
/// [`ack`] would have one after the other: an item whose lease was not
/// there is refused with the reason a read of its job gives (a duplicate
/// item, after its first ack: not found). Dedup windows and keys' slots
/// are then dealt with per acked job that has them.
pub(crate) async fn ack_batch(
    cx: &mut Cx<'_>,
    items: &[AckItem],
    now: Option<u64>,
) -> OpResult<Vec<StoreResult<()>>> {
    let topics: Vec<&str> = items.iter().map(|i| i.topic.as_str()).collect();
    let ids: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
    let tokens: Vec<&str> = items.iter().map(|i| i.token.as_str()).collect();
    let rows = cx
        .q(
            "WITH i AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS u(topic, id, token)),
             d AS (
               DELETE FROM jobs j USING i, topics t
               WHERE t.name = i.topic AND j.tid = t.tid AND j.id = i.id AND j.state = 2 AND j.token = i.token
               RETURNING t.name, j.id, j.token, j.tid, j.dedup_ms, j.fkey),
             c AS (INSERT INTO topic_deltas (tid, d_reserved, acked)
                   SELECT tid, -count(*), count(*) FROM d GROUP BY tid)
             SELECT name, id, token, tid, dedup_ms, fkey, set_config('synchronous_commit', 'off', true) FROM d",
            &[&topics, &ids, &tokens],
        )
        .await?;
    // Each acked job: by the first item that names it with its token.
    let mut acked: std::collections::HashMap<(&str, &str), Option<usize>> =
        std::collections::HashMap::new();
    let mut ended = Vec::new();
    for r in &rows {
        let (name, id, token): (String, String, String) = (r.get(0), r.get(1), r.get(2));
        let (tid, dedup_ms, fkey): (i64, Option<i64>, Option<String>) =
            (r.get(3), r.get(4), r.get(5));
        ended.push((name, id, token, tid, dedup_ms, fkey));
    }
    for (name, id, token, ..) in &ended {
        let first = items
            .iter()
            .position(|it| it.topic.as_str() == name && it.id.as_str() == id && it.token == *token);
        acked.insert((name.as_str(), id.as_str()), first);
    }
    let mut out = Vec::with_capacity(items.len());
    for (k, it) in items.iter().enumerate() {
        match acked.get(&(it.topic.as_str(), it.id.as_str())) {
            // Its ack.
            Some(Some(first)) if *first == k => out.push(Ok(())),
            // Before the item that acked the job, it was leased under
            // another token; after it, it is gone.
            Some(Some(first)) if k < *first => out.push(Err(StoreError::LeaseMismatch)),
            Some(_) => out.push(Err(StoreError::NotFound)),
            None => match held(cx, &it.topic, &it.id, &it.token).await {
                Ok(_) => out.push(Err(StoreError::LeaseMismatch)),
                Err(Failure(
                    e @ (StoreError::NotFound
                    | StoreError::LeaseMismatch
                    | StoreError::NotInState(_)),
                )) => out.push(Err(e)),
                Err(e) => return Err(e),
            },
        }
    }
    let mut db_now = None;
    for (name, id, _, tid, dedup_ms, fkey) in ended {
        if dedup_ms.is_some_and(|ms| ms > 0) {
            let now = match (now, db_now) {
                (Some(n), _) | (None, Some(n)) => n,
                (None, None) => {
                    let n = cx.db_now().await?;
                    db_now = Some(n);
                    n
                }
            };
            open_window(cx, tid, &id, dedup_ms, now).await?;
        }
        if fkey.is_some() {
            let topic = Topic::new(name).map_err(|e| Failure(StoreError::Invalid(e)))?;
            unlease(cx, &topic, tid, fkey).await?;
        }
    }
    Ok(out)
}

/// How an attempt failed.
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
async fn fail(
    cx: &mut Cx<'_>,
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
    let r = cx
        .one(
            "UPDATE jobs SET token = NULL, deadline_ms = NULL, last_error = $1::text,
               releases = releases + $3, timeouts = timeouts + $4,
               errors = (SELECT jsonb_agg(e ORDER BY o) FROM (
                 SELECT e, o FROM jsonb_array_elements(coalesce(errors, '[]'::jsonb)
                   || jsonb_build_array(jsonb_build_object(
                        'attempt', attempts, 'at_ms', $5::bigint, 'error', $1::text)))
                   WITH ORDINALITY AS kept(e, o)
                 ORDER BY o DESC LIMIT $6) AS last)
             WHERE seq = $2
             RETURNING attempts, max_attempts, retry, fkey, id, dedup_ms",
            &[
                &error,
                &seq,
                &i64::from(how == Failed::GivenBack),
                &i64::from(how == Failed::Expired),
                &(now as i64),
                &(dq_core::ERRORS_KEPT as i64),
            ],
        )
        .await?;
    let attempts = r.get::<_, i64>(0) as u32;
    let max = r
        .get::<_, Option<i64>>(1)
        .map_or(cfg.max_attempts, |v| v as u32);
    let retry: Option<String> = r.get(2);
    let fkey: Option<String> = r.get(3);
    let id: String = r.get(4);
    let dedup_ms: Option<i64> = r.get(5);
    unlease(cx, topic, tid, fkey).await?;
    cx.bump(tid, "failed", 1).await?;
    if how == Failed::Dead || attempts >= max {
        cx.exec(
            "UPDATE jobs SET state = 3, died_ms = $1, buries = buries + 1 WHERE seq = $2",
            &[&(now as i64), &seq],
        )
        .await?;
        open_window(cx, tid, &id, dedup_ms, now).await?;
        cx.counts(tid, [0, 0, -1, 1]).await?;
        cx.bump(tid, "dead", 1).await?;
        trim_dead(cx, tid, cfg.dead_cap).await?;
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
    // A nack's wait is a put-order job's new delay; a lease expiry leaves it.
    let put_delay = (how == Failed::GivenBack).then_some(wait);
    cx.place(topic, tid, seq, Some(RESERVED), due, put_delay, now)
        .await?;
    Ok(NackOutcome::Retry {
        due_at_ms: due,
        attempt: attempts,
    })
}

pub(crate) async fn nack(
    cx: &mut Cx<'_>,
    topic: &Topic,
    id: &JobId,
    nack: Nack<'_>,
    now: u64,
) -> OpResult<NackOutcome> {
    let (tid, seq) = held(cx, topic, id, nack.token).await?;
    let cfg = cx.config(tid).await?;
    if let Some(p) = nack.priority {
        cx.exec(
            "UPDATE jobs SET priority = $1 WHERE seq = $2",
            &[&i64::from(p), &seq],
        )
        .await?;
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
        limits::clip_error(nack.error),
        nack.retry_in_ms,
        rand,
        if nack.dead {
            Failed::Dead
        } else {
            Failed::GivenBack
        },
    )
    .await
}

/// Gives the attempt back: its hand-out moves from `attempts` to
/// `carried` (counts.reserves = attempts + carried keeps it). Released:
/// counted in `releases`, and the delay is a put-order job's new
/// `put_delay_ms`; dropped (its holder went away): neither.
pub(crate) async fn release(
    cx: &mut Cx<'_>,
    topic: &Topic,
    id: &JobId,
    token: &str,
    delay_ms: u64,
    how: GiveBack,
    now: u64,
) -> OpResult<u64> {
    let (tid, seq) = held(cx, topic, id, token).await?;
    let released = how == GiveBack::Released;
    let fkey: Option<String> = cx
        .one(
            "UPDATE jobs SET attempts = attempts - 1, carried = carried + 1, token = NULL,
               deadline_ms = NULL, releases = releases + $2 WHERE seq = $1 RETURNING fkey",
            &[&seq, &i64::from(released)],
        )
        .await?
        .get(0);
    unlease(cx, topic, tid, fkey).await?;
    let due = now + delay_ms;
    let put_delay = released.then_some(delay_ms);
    cx.place(topic, tid, seq, Some(RESERVED), due, put_delay, now)
        .await?;
    Ok(due)
}

pub(crate) async fn requeue_expired(
    cx: &mut Cx<'_>,
    topic: &Topic,
    max: usize,
    now: u64,
) -> OpResult<Requeued> {
    let Some(tid) = cx.lock(topic).await? else {
        return Ok(Requeued::default());
    };
    let rows: Vec<(i64, String)> = cx
        .q(
            "SELECT seq, id FROM jobs WHERE tid = $1 AND state = 2 AND deadline_ms < $2
             ORDER BY deadline_ms LIMIT $3 FOR UPDATE SKIP LOCKED",
            &[&tid, &(now as i64), &(max as i64)],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut out = Requeued::default();
    if !rows.is_empty() {
        let cfg = cx.config(tid).await?;
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
            )
            .await?;
            match outcome {
                NackOutcome::Retry { .. } => out.retried += 1,
                NackOutcome::Dead { .. } => out.dead += 1,
            }
            out.jobs.push((job_id(id)?, outcome));
        }
        cx.bump(tid, "expired", out.jobs.len() as i64).await?;
    }
    out.next_deadline_ms = cx
        .opt(
            "SELECT deadline_ms FROM jobs WHERE tid = $1 AND state = 2 ORDER BY deadline_ms LIMIT 1",
            &[&tid],
        )
        .await?
        .map(|r| r.get::<_, i64>(0) as u64);
    Ok(out)
}
