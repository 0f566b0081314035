//! What a lease's holder does — touch (`touch.lua`), ack (`ack.lua`), nack
//! (`nack.lua`), release (`release.lua`) and the batches of the first three
//! (`ack_batch.lua`, `touch_batch.lua`, `nack_batch.lua`) — and the end of
//! the leases that expired (`requeue_expired.lua`). With the steps every
//! end of a lease shares: the key's slot freed, the dedup window opened.

use dq_core::*;
use rusqlite::{OptionalExtension, params};

use super::dead::trim_dead;
use super::token::token_seq;
use super::{DEAD, RESERVED, bump, config, counts, place, tid};
use crate::writer::{Ctx, Failure, HotSql, OpResult, run_cached};

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
pub(super) fn open_window(
    cx: &Ctx,
    tid: i64,
    id: &str,
    dedup_ms: Option<i64>,
    now: u64,
) -> OpResult<()> {
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

/// One lease fewer for key `key` of topic `tid`; its count after, when the
/// key has a row.
pub(super) fn free_slot(cx: &Ctx, tid: i64, key: &str) -> OpResult<Option<i64>> {
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
pub(super) fn unlease(cx: &mut Ctx, topic: &Topic, tid: i64, fkey: Option<String>) -> OpResult<()> {
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
    // checked against the token, ends its lease (docs/performance-log.md,
    // "The embedded writer's ceiling"). Any other job, and a refusal, pays this
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
    items: &[AckItem],
    now: u64,
) -> OpResult<Vec<StoreResult<()>>> {
    let mut out = Vec::with_capacity(items.len());
    // Acks per topic id, in the order the topics first appear.
    let mut per_topic: Vec<(i64, i64)> = Vec::new();
    for AckItem { topic, id, token } in items {
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

/// Nacks each item as [`nack`] does (see [`per_item`]).
pub(crate) fn nack_batch(
    cx: &mut Ctx,
    items: &[NackItem],
    now: u64,
) -> OpResult<Vec<StoreResult<NackOutcome>>> {
    per_item(cx, items, |cx, it| {
        let n = Nack {
            error: limits::clip_error(&it.error),
            ..it.nack()
        };
        nack(cx, &it.topic, &it.id, n, now)
    })
}

/// Extends each lease as [`touch`] does (see [`per_item`]); an item is its
/// topic, id, token and lease length.
pub(crate) fn touch_batch(
    cx: &mut Ctx,
    items: &[TouchItem],
    now: u64,
) -> OpResult<Vec<StoreResult<u64>>> {
    per_item(cx, items, |cx, it| {
        touch(cx, &it.topic, &it.id, &it.token, it.lease_ms, now)
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
    type Failing = (
        u32,
        Option<u32>,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let (attempts, max, retry, fkey, kept): Failing = cx
        .conn
        .prepare_cached(
            "SELECT attempts, max_attempts, retry, fkey, errors FROM jobs WHERE seq = ?1",
        )?
        .query_row([seq], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?;
    let errors = dq_core::errors_with(
        kept.as_deref(),
        dq_core::AttemptError {
            attempt: attempts,
            at_ms: now,
            error: error.to_string(),
        },
    );
    cx.mem.leases.remove(seq);
    unlease(cx, topic, tid, fkey)?;
    let max = max.unwrap_or(cfg.max_attempts);
    let dead = how == Failed::Dead || attempts >= max;
    let wait = match retry_in {
        Some(w) => w,
        None => retry
            .and_then(|r| RetryPolicy::decode(&r))
            .unwrap_or_else(|| cfg.retry.clone())
            .delay_ms(attempts, rand),
    };
    // A job in put order keeps the delay a nack gave it back with.
    let put_delay = (how == Failed::GivenBack && !dead).then_some(wait as i64);
    cx.conn
        .prepare_cached(
            "UPDATE jobs SET token = NULL, deadline_ms = NULL, last_error = ?1,
             releases = releases + ?3, timeouts = timeouts + ?4, errors = ?5,
             put_delay_ms = CASE WHEN put_delay_ms IS NOT NULL THEN coalesce(?6, put_delay_ms) END
             WHERE seq = ?2",
        )?
        .execute(params![
            error,
            seq,
            i64::from(how == Failed::GivenBack),
            i64::from(how == Failed::Expired),
            errors,
            put_delay
        ])?;
    bump(cx, tid, "failed", 1)?;
    if dead {
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
    let due = now + wait;
    place(cx, topic, tid, seq, Some(RESERVED), due, now)?;
    Ok(NackOutcome::Retry {
        due_at_ms: due,
        attempt: attempts,
    })
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
    how: GiveBack,
    now: u64,
) -> OpResult<u64> {
    let (tid, seq) = held(cx, topic, id, token)?;
    // The attempt given back; the hand-out kept in `reserves`.
    let fkey: Option<String> = match how {
        GiveBack::Released => cx
            .conn
            .prepare_cached(
                "UPDATE jobs SET attempts = attempts - 1, reserves_extra = reserves_extra + 1,
                 token = NULL, deadline_ms = NULL, releases = releases + 1,
                 put_delay_ms = CASE WHEN put_delay_ms IS NOT NULL THEN ?2 END
                 WHERE seq = ?1 RETURNING fkey",
            )?
            .query_row(params![seq, delay_ms as i64], |r| r.get(0))?,
        GiveBack::Dropped => cx
            .conn
            .prepare_cached(
                "UPDATE jobs SET attempts = attempts - 1, reserves_extra = reserves_extra + 1,
                 token = NULL, deadline_ms = NULL WHERE seq = ?1 RETURNING fkey",
            )?
            .query_row([seq], |r| r.get(0))?,
    };
    cx.mem.leases.remove(seq);
    unlease(cx, topic, tid, fkey)?;
    let due = now + delay_ms;
    place(cx, topic, tid, seq, Some(RESERVED), due, now)?;
    Ok(due)
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

/// The id and key of reserved job `seq` of topic `tid`, a lease in memory.
/// `None` when the file does not hold it reserved: cannot happen while
/// every change of a lease goes through `Leases`; the entry is dropped
/// rather than found again and again.
pub(super) fn leased_row(
    cx: &mut Ctx,
    tid: i64,
    seq: i64,
) -> OpResult<Option<(String, Option<String>)>> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
