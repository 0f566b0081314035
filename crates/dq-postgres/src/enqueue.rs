//! Enqueue (`enqueue.lua`, the embedded `ops/enqueue.rs`): jobs written
//! ready or scheduled, an id already there answered (or replaced while it
//! waits), an id in its dedup window dropped. A batch is a fixed number of
//! statements whatever its size: one read of the ids already there, one of
//! the ids in a window, one `INSERT … SELECT FROM unnest(…)` of the new
//! rows (more only for a job that replaces one already stored).

use std::collections::{HashMap, HashSet};

use dq_core::*;

use crate::OpResult;
use crate::cx::{Cx, READY, SCHEDULED, state_of};

/// What a batch knows of an id while it goes through the batch.
#[derive(Clone, Copy)]
enum Slot {
    /// A row stored before the call.
    Stored { seq: i64, state: i16, due: u64 },
    /// Row `i` of the rows this call inserts.
    New { i: usize, state: i16, due: u64 },
}

/// One row to insert.
struct NewRow<'a> {
    id: JobId,
    state: i16,
    due: u64,
    job: &'a NewJob,
    dedup_ms: Option<i64>,
    dropped: bool,
}

pub(crate) async fn enqueue(
    cx: &mut Cx<'_>,
    topic: &Topic,
    jobs: &[NewJob],
    now: u64,
) -> OpResult<Vec<Enqueued>> {
    if jobs.iter().any(|j| j.expires.is_some()) {
        return Err(crate::topics::expiry_unsupported().into());
    }
    let tid = cx.ensure_tid(topic).await?;
    let ids: Vec<JobId> = jobs
        .iter()
        .map(|j| j.id.clone().unwrap_or_else(JobId::generate))
        .collect();
    let given: Vec<&str> = jobs
        .iter()
        .zip(&ids)
        .filter(|(j, _)| j.id.is_some())
        .map(|(_, id)| id.as_str())
        .collect();
    let mut slots: HashMap<String, Slot> = HashMap::new();
    let mut windowed: HashSet<String> = HashSet::new();
    if !given.is_empty() {
        for r in cx
            .q(
                "SELECT id, seq, state, due_ms FROM jobs WHERE tid = $1 AND id = ANY($2)",
                &[&tid, &given],
            )
            .await?
        {
            slots.insert(
                r.get(0),
                Slot::Stored {
                    seq: r.get(1),
                    state: r.get(2),
                    due: r.get::<_, i64>(3) as u64,
                },
            );
        }
        let now_i = now as i64;
        cx.exec(
            "DELETE FROM dedup WHERE tid = $1 AND until_ms <= $2",
            &[&tid, &now_i],
        )
        .await?;
        for r in cx
            .q(
                "SELECT id FROM dedup WHERE tid = $1 AND id = ANY($2)",
                &[&tid, &given],
            )
            .await?
        {
            windowed.insert(r.get(0));
        }
    }
    let needs_cfg = jobs
        .iter()
        .any(|j| j.when == When::TopicDefault || j.dedup_ms.is_none());
    let cfg = if needs_cfg {
        Some(cx.config(tid).await?)
    } else {
        None
    };
    let mut head = cx.sched_head(tid).await?;
    let mut wake = false;
    let mut d = [0i64; 4];
    let mut created = 0i64;
    let mut rows: Vec<NewRow<'_>> = Vec::with_capacity(jobs.len());
    let mut out = Vec::with_capacity(jobs.len());
    for (j, id) in jobs.iter().zip(ids) {
        let slot = slots.get(id.as_str()).copied();
        if slot.is_none() && windowed.contains(id.as_str()) {
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
        let due = match j.when {
            When::DelayMs(ms) => now + ms,
            // A due time in the past is now: lateness counts from the enqueue.
            When::DueAtMs(t) => t.max(now),
            When::TopicDefault => now + cfg.as_ref().map_or(0, |c| c.default_delay_ms),
        };
        let dedup_ms = j
            .dedup_ms
            .or(cfg.as_ref().map(|c| c.dedup_ms))
            .map(|ms| ms as i64)
            .filter(|ms| *ms > 0);
        let state = if due <= now { READY } else { SCHEDULED };
        let mut replaced = false;
        if let Some(slot) = slot {
            let (old_state, old_due) = match slot {
                Slot::Stored { state, due, .. } | Slot::New { state, due, .. } => (state, due),
            };
            if !(j.replace && (old_state == SCHEDULED || old_state == READY)) {
                out.push(Enqueued {
                    id,
                    created: false,
                    replaced: false,
                    deduplicated: false,
                    due_at_ms: old_due,
                    state: state_of(old_state),
                });
                continue;
            }
            match slot {
                Slot::Stored { seq, .. } => {
                    cx.exec("DELETE FROM jobs WHERE seq = $1", &[&seq]).await?;
                    if old_state == SCHEDULED && head == Some(old_due) {
                        // The head may have been this job: ask again, with
                        // the rows of this batch not yet written.
                        let pending = rows
                            .iter()
                            .filter(|r| !r.dropped && r.state == SCHEDULED)
                            .map(|r| r.due)
                            .min();
                        head = [cx.sched_head(tid).await?, pending]
                            .into_iter()
                            .flatten()
                            .min();
                    }
                }
                Slot::New { i, .. } => rows[i].dropped = true,
            }
            d[old_state as usize] -= 1;
            replaced = true;
        } else {
            created += 1;
        }
        d[state as usize] += 1;
        if state == READY {
            wake = true;
        } else {
            if head.is_none_or(|h| due < h) {
                wake = true;
            }
            head = Some(head.map_or(due, |h| h.min(due)));
        }
        slots.insert(
            id.as_str().to_string(),
            Slot::New {
                i: rows.len(),
                state,
                due,
            },
        );
        out.push(Enqueued {
            id: id.clone(),
            created: !replaced,
            replaced,
            deduplicated: false,
            due_at_ms: due,
            state: state_of(state),
        });
        rows.push(NewRow {
            id,
            state,
            due,
            job: j,
            dedup_ms,
            dropped: false,
        });
    }
    insert(cx, tid, rows.iter().filter(|r| !r.dropped), now).await?;
    cx.counts(tid, d).await?;
    cx.bump(tid, "enqueued", created).await?;
    if jobs.iter().any(|j| j.key.is_some()) {
        mark_keyed(cx, tid).await?;
    }
    if wake {
        cx.wake(topic);
    }
    Ok(out)
}

/// Inserts `rows` in order with one statement.
async fn insert<'r>(
    cx: &Cx<'_>,
    tid: i64,
    rows: impl Iterator<Item = &'r NewRow<'r>>,
    now: u64,
) -> OpResult<()> {
    let mut ids: Vec<&str> = Vec::new();
    let mut states: Vec<i16> = Vec::new();
    let mut dues: Vec<i64> = Vec::new();
    let mut prios: Vec<i64> = Vec::new();
    let mut maxes: Vec<Option<i64>> = Vec::new();
    let mut leases: Vec<Option<i64>> = Vec::new();
    let mut retries: Vec<Option<String>> = Vec::new();
    let mut jsons: Vec<bool> = Vec::new();
    let mut bodies: Vec<&[u8]> = Vec::new();
    let mut dedups: Vec<Option<i64>> = Vec::new();
    let mut keys: Vec<Option<&str>> = Vec::new();
    let mut put_delays: Vec<Option<i64>> = Vec::new();
    let mut traces: Vec<Option<String>> = Vec::new();
    for r in rows {
        ids.push(r.id.as_str());
        states.push(r.state);
        dues.push(r.due as i64);
        prios.push(i64::from(r.job.priority));
        maxes.push(r.job.max_attempts.map(i64::from));
        leases.push(r.job.lease_ms.map(|v| v as i64));
        retries.push(r.job.retry.as_ref().map(RetryPolicy::encode));
        jsons.push(r.job.body.is_json());
        bodies.push(r.job.body.as_bytes());
        dedups.push(r.dedup_ms);
        keys.push(r.job.key.as_ref().map(JobKey::as_str));
        // A job ranked in put order keeps the delay it was put with (its
        // place is its put time, `created_ms`); NULL: in due order.
        put_delays.push(r.job.put_order.then(|| (r.due - now) as i64));
        traces.push(r.job.trace.as_ref().map(TraceContext::to_stored));
    }
    if ids.is_empty() {
        return Ok(());
    }
    let now = now as i64;
    cx.exec(
        "INSERT INTO jobs (tid, id, state, due_ms, priority, max_attempts, lease_ms, retry,
           created_ms, is_json, body, dedup_ms, fkey, put_delay_ms, trace)
         SELECT $1, u.id, u.state, u.due, u.prio, u.maxa, u.lease, u.retry, $2, u.js, u.body, u.dedup,
           u.fkey, u.put_delay, u.trace
         FROM unnest($3::text[], $4::int2[], $5::int8[], $6::int8[], $7::int8[], $8::int8[],
                     $9::text[], $10::bool[], $11::bytea[], $12::int8[], $13::text[], $14::int8[],
                     $15::text[])
              WITH ORDINALITY AS u(id, state, due, prio, maxa, lease, retry, js, body, dedup, fkey,
                put_delay, trace, n)
         ORDER BY u.n",
        &[
            &tid, &now, &ids, &states, &dues, &prios, &maxes, &leases, &retries, &jsons, &bodies,
            &dedups, &keys, &put_delays, &traces,
        ],
    )
    .await?;
    Ok(())
}

/// Marks the topic as one whose jobs may carry flow-control keys: its
/// reserves take the keyed path from now on (until the topic is deleted).
pub(crate) async fn mark_keyed(cx: &Cx<'_>, tid: i64) -> OpResult<()> {
    cx.exec(
        "UPDATE topics SET keyed = true WHERE tid = $1 AND NOT keyed",
        &[&tid],
    )
    .await?;
    Ok(())
}
