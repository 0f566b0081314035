//! Import (`import_jobs.lua`): jobs written as they were in another store,
//! in their state, counted and woken as any job arriving there.

use dq_core::*;
use rusqlite::params;

use super::dead::trim_dead;
use super::enqueue::mark_keyed;
use super::{DEAD, READY, SCHEDULED, bump, config, counts, ensure_tid, place, state_of};
use crate::ordered::died_place;
use crate::writer::{Ctx, OpResult};

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
                   last_error, created_ms, died_ms, is_json, body, dedup_ms, fkey, errors, trace)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
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
                dq_core::errors_to_json(&j.errors),
                j.trace.as_ref().map(TraceContext::to_stored),
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
