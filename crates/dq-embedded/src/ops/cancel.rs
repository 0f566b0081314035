//! A job taken out or moved by its id: cancel, in any state
//! (`cancel.lua`), and reschedule, while it waits (`reschedule.lua`).

use dq_core::*;
use rusqlite::{OptionalExtension, params};

use super::leases::{open_window, unlease};
use super::{DEAD, READY, RESERVED, SCHEDULED, bump, counts, delta, place, state_of, tid};
use crate::ordered::died_place;
use crate::writer::{Ctx, Failure, OpResult};

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
        .prepare_cached(concat!(
            "DELETE FROM jobs WHERE seq = ?1 RETURNING dedup_ms, fkey, priority, ",
            place_sql!(),
            ", died_ms"
        ))?
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
    kick: bool,
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
    if kick {
        cx.conn
            .prepare_cached("UPDATE jobs SET kicks = kicks + 1 WHERE seq = ?1")?
            .execute([seq])?;
    }
    Ok(())
}
