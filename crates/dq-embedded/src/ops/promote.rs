//! Due jobs to ready (`promote_due.lua`): the dispatcher's pass, and the
//! first step of every reserve.

use dq_core::*;
use rusqlite::params;

use super::{counts, sched_head, tid};
use crate::writer::{Ctx, OpResult};

/// Moves up to `max` due jobs to ready; returns how many.
pub(super) fn promote(cx: &mut Ctx, tid: i64, now: u64, max: i64) -> OpResult<i64> {
    // Read, then moved one by one: the jobs go into memory with their
    // places (not `UPDATE … RETURNING`, whose ephemeral table every
    // reserve would pay for, due jobs or not).
    #[allow(clippy::type_complexity)]
    let due: Vec<(i64, i64, i64, Option<String>)> = cx
        .conn
        .prepare_cached(concat!(
            "SELECT seq, priority, ",
            place_sql!(),
            ", fkey FROM jobs
                 WHERE tid = ?1 AND state = 0 AND due_ms <= ?2 ORDER BY due_ms LIMIT ?3"
        ))?
        .query_map(params![tid, now as i64, max], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<Result<_, _>>()?;
    for (seq, priority, place, key) in &due {
        cx.conn
            .prepare_cached("UPDATE jobs SET state = 1 WHERE seq = ?1")?
            .execute([seq])?;
        cx.mem
            .add_ready(tid, key.as_deref(), *priority, *place, *seq);
    }
    let moved = due.len() as i64;
    counts(cx, tid, [-moved, moved, 0, 0])?;
    Ok(moved)
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
