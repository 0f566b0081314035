//! Enqueue (`enqueue.lua`): jobs written ready or scheduled, an id
//! already there answered (or replaced while it waits), an id in its
//! dedup window dropped.

use dq_core::*;
use rusqlite::params;

use super::{READY, SCHEDULED, bump, config, counts, ensure_tid, sched_head, state_of};
use crate::writer::{Ctx, HotSql, OpResult};

pub(crate) fn enqueue(
    cx: &mut Ctx,
    topic: &Topic,
    jobs: &[NewJob],
    now: u64,
) -> OpResult<Vec<Enqueued>> {
    let tid = ensure_tid(cx, topic)?;
    let mut cfg: Option<TopicConfig> = None;
    // The topic's dedup window and expiry, read together once per call
    // when a job names no window or no expiry of its own.
    let mut topic_dedup: Option<(i64, i64)> = None;
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
        // The topic's window and expiry: one small read per call, only
        // when a job names either not.
        if (j.dedup_ms.is_none() || j.expires.is_none()) && topic_dedup.is_none() {
            topic_dedup = Some(
                cx.conn
                    .prepare_cached(
                        "SELECT coalesce(dedup_ms, 0), coalesce(expires_ms, 0) FROM topics WHERE tid = ?1",
                    )?
                    .query_row([tid], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?,
            );
        }
        let dedup_ms = j
            .dedup_ms
            .map(|ms| ms as i64)
            .or(topic_dedup.map(|t| t.0))
            .filter(|ms| *ms > 0);
        // The job's own expiry, else the topic's counted from the due time.
        let expires_ms = match j.expires {
            Some(e) => Some(e.at(now) as i64),
            None => topic_dedup
                .map(|t| t.1)
                .filter(|ms| *ms > 0)
                .map(|ms| due.saturating_add(ms as u64) as i64),
        };
        let state = if due <= now { READY } else { SCHEDULED };
        // Most jobs set none of the columns the plain insert leaves NULL.
        let plain = j.max_attempts.is_none()
            && j.lease_ms.is_none()
            && j.retry.is_none()
            && dedup_ms.is_none()
            && j.key.is_none()
            && expires_ms.is_none()
            && !j.put_order
            && j.trace.is_none();
        // A job in put order keeps its delay, and its place is its put time.
        let put_delay = j.put_order.then(|| (due - now) as i64);
        let place = if j.put_order { now } else { due };
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
                    expires_ms,
                    put_delay,
                    j.trace.as_ref().map(TraceContext::to_stored),
                ])
            })?)
        };
        let mut replaced = false;
        if insert(cx)? == 0 {
            #[allow(clippy::type_complexity)]
            let (seq, old, old_due, old_priority, old_key, old_place): (
                i64,
                i64,
                u64,
                i64,
                Option<String>,
                i64,
            ) = cx
                .conn
                .prepare_cached(concat!(
                    "SELECT seq, state, due_ms, priority, fkey, ",
                    place_sql!(),
                    " FROM jobs WHERE tid = ?1 AND id = ?2"
                ))?
                .query_row(params![tid, id.as_str()], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
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
                    .remove_ready(tid, old_key.as_deref(), old_priority, old_place, seq);
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
                place as i64,
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

/// Marks the topic as one whose jobs may carry flow-control keys: its
/// reserves take the keyed path from now on (until the topic is deleted).
pub(super) fn mark_keyed(cx: &Ctx, tid: i64) -> OpResult<()> {
    cx.conn
        .prepare_cached("UPDATE topics SET keyed = 1 WHERE tid = ?1 AND keyed = 0")?
        .execute([tid])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::runs;

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
}
