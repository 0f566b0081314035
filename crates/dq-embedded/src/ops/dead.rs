//! Dead letters: replayed (`replay_dead.lua`), purged (`purge_dead.lua`),
//! and trimmed to the topic's `dead_cap`, oldest first (found in memory).

use dq_core::*;
use rusqlite::{OptionalExtension, params};

use super::{BATCH, DEAD, bump, counts, place, tid};
use crate::ordered::died_place;
use crate::writer::{Ctx, OpResult};

/// Drops the oldest dead letters over the cap, at most [`BATCH`] per call.
pub(super) fn trim_dead(cx: &mut Ctx, tid: i64, cap: u64) -> OpResult<()> {
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
pub(super) fn delete_dead(cx: &mut Ctx, tid: i64, max: i64) -> OpResult<i64> {
    let mut n = 0;
    for (died, seq) in cx.mem.dead.first(tid, max.max(0) as usize) {
        cx.mem.dead.remove((tid, died, seq));
        n += delete_row(cx, tid, DEAD, seq)?;
    }
    Ok(n)
}

/// Deletes job `seq` of topic `tid` if it is in `state` (an entry found in
/// memory); returns how many rows went (0 or 1).
pub(super) fn delete_row(cx: &Ctx, tid: i64, state: i64, seq: i64) -> OpResult<i64> {
    Ok(cx
        .conn
        .prepare_cached("DELETE FROM jobs WHERE seq = ?1 AND tid = ?2 AND state = ?3")?
        .execute(params![seq, tid, state])? as i64)
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
                "UPDATE jobs SET attempts = 0, reserves_extra = reserves_extra + attempts,
                 died_ms = NULL, kicks = kicks + 1, expires_ms = NULL
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
