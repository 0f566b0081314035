//! One job leased by its id (`reserve_job.lua`), from any state but
//! reserved.

use dq_core::*;
use rusqlite::{OptionalExtension, params};

use super::super::token::numbered;
use super::super::{DEAD, RESERVED, config, counts, delta, tid};
use super::expire::expire;
use super::{LEASABLE, Leasable, lease};
use crate::ordered::died_place;
use crate::writer::{Ctx, OpResult};

/// Leases one job by id unless it is reserved (see `Store::reserve_job`).
pub(crate) fn reserve_job(
    cx: &mut Ctx,
    topic: &Topic,
    id: &JobId,
    lease_override: Option<u64>,
    now: u64,
) -> OpResult<Option<Lease>> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(None);
    };
    let row: Option<Leasable> = cx
        .conn
        .prepare_cached(&format!(
            "SELECT {LEASABLE} FROM jobs WHERE tid = ?1 AND id = ?2"
        ))?
        .query_row(params![tid, id.as_str()], Leasable::row)
        .optional()?;
    let Some(j) = row.filter(|j| j.state != RESERVED) else {
        return Ok(None);
    };
    // A waiting job past its expiry is not handed out, by id either: it
    // ends as any hand-out finds it. (A dead letter has ended already.)
    if j.state != DEAD && j.expired(now) {
        expire(cx, tid, &j, now)?;
        return Ok(None);
    }
    let lease_ms = match lease_override.or(j.lease_ms) {
        Some(l) => l,
        None => config(cx, tid)?.lease_ms,
    };
    let from = j.state;
    if from == DEAD {
        // Out of the dead letters in memory, from its place among them.
        let died: Option<i64> = cx
            .conn
            .prepare_cached("SELECT died_ms FROM jobs WHERE seq = ?1")?
            .query_row([j.seq], |r| r.get(0))?;
        cx.mem.dead.remove((tid, died_place(died), j.seq));
    }
    let token = numbered(&format!("{:016x}.", rand::random::<u64>()), j.seq);
    if let Some(k) = &j.fkey {
        cx.conn
            .prepare_cached(
                "INSERT INTO fkeys (tid, fkey, active) VALUES (?1, ?2, 1)
                 ON CONFLICT (tid, fkey) DO UPDATE SET active = active + 1",
            )?
            .execute(params![tid, k])?;
    }
    let l = lease(cx, topic, tid, j, lease_ms, token, now)?;
    counts(cx, tid, delta(Some(from), Some(RESERVED)))?;
    Ok(Some(l))
}
