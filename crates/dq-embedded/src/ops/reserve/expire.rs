//! Jobs whose expiry passed before a hand-out: found by the hand-out
//! that would have leased them, and moved to the dead letters with the
//! last error `expired` (or deleted, with the topic's `on_expiry` `drop`)
//! in the same transaction instead.

use dq_core::*;
use rusqlite::params;

use super::super::dead::trim_dead;
use super::super::leases::open_window;
use super::super::{DEAD, READY, bump, counts, delta};
use super::Leasable;
use crate::writer::{Ctx, OpResult};

impl Leasable {
    /// Whether its expiry has passed at `now`: a job due at or after its
    /// expiry is never handed out.
    pub(super) fn expired(&self, now: u64) -> bool {
        self.expires.is_some_and(|at| at <= now)
    }
}

/// Ends waiting job `j` of topic `tid`, whose expiry has passed, as the
/// topic's `on_expiry` says: dead with the last error `expired` (the
/// topic's dead-letter cap kept), or deleted. Either way its dedup window
/// opens and the topic's `expired_unhandled` counter goes up.
pub(super) fn expire(cx: &mut Ctx, tid: i64, j: &Leasable, now: u64) -> OpResult<()> {
    let (on_expiry, dead_cap): (Option<String>, Option<u64>) = cx
        .conn
        .prepare_cached("SELECT on_expiry, dead_cap FROM topics WHERE tid = ?1")?
        .query_row([tid], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if j.state == READY {
        cx.mem.remove_ready(
            tid,
            j.fkey.as_deref(),
            i64::from(j.priority),
            j.place,
            j.seq,
        );
    }
    let drop = on_expiry.as_deref().map(OnExpiry::decode) == Some(OnExpiry::Drop);
    let dedup_ms: Option<i64> = if drop {
        let d = cx
            .conn
            .prepare_cached("DELETE FROM jobs WHERE seq = ?1 RETURNING dedup_ms")?
            .query_row([j.seq], |r| r.get(0))?;
        counts(cx, tid, delta(Some(j.state), None))?;
        d
    } else {
        let d = cx
            .conn
            .prepare_cached(
                "UPDATE jobs SET state = 3, died_ms = ?1, last_error = ?2, buries = buries + 1
                 WHERE seq = ?3 RETURNING dedup_ms",
            )?
            .query_row(params![now as i64, EXPIRED_ERROR, j.seq], |r| r.get(0))?;
        cx.mem.dead.add((tid, now as i64, j.seq));
        counts(cx, tid, delta(Some(j.state), Some(DEAD)))?;
        bump(cx, tid, "dead", 1)?;
        d
    };
    open_window(cx, tid, &j.id, dedup_ms, now)?;
    bump(cx, tid, "expired_unhandled", 1)?;
    if let (Some(trace), Ok(id)) = (
        j.trace.as_deref().and_then(TraceContext::from_stored),
        JobId::new(j.id.clone()),
    ) {
        cx.expired.push(ExpiredJob { id, trace });
    }
    if !drop {
        trim_dead(cx, tid, dead_cap.unwrap_or(TopicConfig::default().dead_cap))?;
    }
    Ok(())
}
