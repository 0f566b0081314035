//! The keyed hand-out of a reserve (issue #18): the lanes of a topic's
//! flow-control keys take turns, each within its `key_concurrency` and
//! `key_rate_limit`.

use dq_core::*;
use rusqlite::{OptionalExtension, params};

use super::expire::expire;
use super::{HandOut, Leasable, ready_row};
use crate::writer::{Ctx, OpResult};

/// The next job of a key's lane (`None`: the jobs without a key, whose
/// order is in memory); those ahead of it found expired at `now` end
/// ([`expire`]).
fn lane_head(cx: &mut Ctx, tid: i64, key: Option<&str>, now: u64) -> OpResult<Option<Leasable>> {
    while let Some(place) = cx.mem.ready_head(tid, key) {
        if let Some(j) = ready_row(cx, tid, key, place)? {
            if j.expired(now) {
                expire(cx, tid, &j, now)?;
                continue;
            }
            return Ok(Some(j));
        }
    }
    Ok(None)
}

/// One lane of a keyed reserve: a key's (or, `key: None`, the jobs
/// without one), with its turn and what its limits allow.
struct Lane {
    turn: i64,
    key: Option<String>,
    active: i64,
    credit: Option<u64>,
    at: u64,
    touched: bool,
}

/// The keyed hand-out (issue #18): the lanes take turns, lowest turn
/// first, one job each per turn; a key goes while it holds fewer than
/// `key_concurrency` leases and its `key_rate_limit` bucket has a token.
/// Each lane's turn (the key's in `fkeys`, the jobs without a key in
/// `topics.uturn`) becomes the topic's next turn number when it hands out,
/// so a key with a backlog goes once per round. Returns whether ready jobs
/// that may go are left, and the earliest next token of a key out of them.
pub(super) fn reserve_keyed(
    cx: &mut Ctx,
    hand: &mut HandOut<'_>,
    take: u64,
) -> OpResult<(bool, Option<u64>)> {
    let (tid, now) = (hand.tid, hand.now);
    let (limit, krate, mut kturn, uturn): (Option<i64>, Option<String>, i64, i64) = cx
        .conn
        .prepare_cached(
            "SELECT key_concurrency, key_rate_limit, kturn, uturn FROM topics WHERE tid = ?1",
        )?
        .query_row([tid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
    let krate = krate.as_deref().and_then(RateLimit::decode);
    let mut lanes: Vec<Lane> = Vec::new();
    if cx.mem.ready.head(tid).is_some() {
        lanes.push(Lane {
            turn: uturn,
            key: None,
            active: 0,
            credit: None,
            at: 0,
            touched: false,
        });
    }
    let mut fresh = 0;
    for key in cx.mem.lanes.keys(tid) {
        let row: Option<(i64, i64, Option<u64>, u64)> = cx
            .conn
            .prepare_cached(
                "SELECT active, turn, credit, at FROM fkeys WHERE tid = ?1 AND fkey = ?2",
            )?
            .query_row(params![tid, key], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        // A key new to the round (no row: never handed out, or forgotten
        // while idle) joins at its end, as on Redis.
        let (active, turn, credit, at) = row.unwrap_or_else(|| {
            fresh += 1;
            (0, kturn + fresh, None, 0)
        });
        lanes.push(Lane {
            turn,
            key: Some(key),
            active,
            credit,
            at,
            touched: false,
        });
    }
    // Whether lane `l` may hand out now; its next token when it is out of them.
    let may_go = |l: &Lane| -> (bool, Option<u64>) {
        if l.key.is_none() {
            return (true, None);
        }
        if limit.is_some_and(|k| l.active >= k) {
            return (false, None);
        }
        match krate {
            Some(r) => {
                let c = r.refill(l.credit, l.at, now);
                match r.next_token_at(c, now) {
                    None => (true, None),
                    at => (false, at),
                }
            }
            None => (true, None),
        }
    };
    kturn += fresh;
    let mut token_at: Option<u64> = None;
    let mut held_back = 0i64;
    // Lanes that may go, by (turn, key): a round-robin over them.
    let mut open: std::collections::BTreeSet<(i64, Option<String>)> = Default::default();
    for l in &lanes {
        match may_go(l) {
            (true, _) => {
                open.insert((l.turn, l.key.clone()));
            }
            (false, at) => {
                if at.is_some() {
                    held_back += 1;
                }
                token_at = [token_at, at].into_iter().flatten().min();
            }
        }
    }
    let at_index: std::collections::HashMap<Option<String>, usize> = lanes
        .iter()
        .enumerate()
        .map(|(i, l)| (l.key.clone(), i))
        .collect();
    while (hand.leases.len() as u64) < take {
        let Some((_, key)) = open.pop_first() else {
            break;
        };
        let i = at_index[&key];
        let Some(j) = lane_head(cx, tid, key.as_deref(), now)? else {
            continue;
        };
        hand.lease(cx, j)?;
        kturn += 1;
        let l = &mut lanes[i];
        l.turn = kturn;
        l.touched = true;
        if l.key.is_some() {
            l.active += 1;
            if let Some(r) = krate {
                let c = r.refill(l.credit, l.at, now);
                l.credit = Some(c - r.per_ms);
                l.at = l.at.max(now);
            }
        }
        match may_go(l) {
            (true, _) => {
                open.insert((l.turn, l.key.clone()));
            }
            (false, at) => token_at = [token_at, at].into_iter().flatten().min(),
        }
    }
    // The turns and counts of the lanes that handed out.
    for l in lanes.iter().filter(|l| l.touched) {
        match &l.key {
            None => {
                cx.conn
                    .prepare_cached("UPDATE topics SET uturn = ?2 WHERE tid = ?1")?
                    .execute(params![tid, l.turn])?;
            }
            Some(k) => {
                cx.conn
                    .prepare_cached(
                        "INSERT INTO fkeys (tid, fkey, active, turn, credit, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                         ON CONFLICT (tid, fkey) DO UPDATE SET active = excluded.active,
                           turn = excluded.turn, credit = excluded.credit, at = excluded.at",
                    )?
                    .execute(params![
                        tid,
                        k,
                        l.active,
                        l.turn,
                        l.credit.map(|c| c as i64),
                        l.at as i64
                    ])?;
            }
        }
    }
    cx.conn
        .prepare_cached(
            "UPDATE topics SET kturn = ?2, rate_limited = rate_limited + ?3 WHERE tid = ?1",
        )?
        .execute(params![tid, kturn, held_back])?;
    // Keys with no lease, no ready job and a full bucket (or none) are
    // forgotten: they are the same as a key never seen.
    let (cap, per) = krate.map_or((None, 1), |r| (Some(r.capacity() as i64), r.limit as i64));
    // (Whether a key has ready jobs, the lanes in memory say.)
    let idle: Vec<String> = cx
        .conn
        .prepare_cached(
            "SELECT fkey FROM fkeys WHERE tid = ?1 AND active <= 0
               AND (?2 IS NULL OR credit IS NULL OR at + (?2 - credit + ?3 - 1) / ?3 <= ?4)",
        )?
        .query_map(params![tid, cap, per, now as i64], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for k in idle {
        if cx.mem.lanes.head(tid, &k).is_none() {
            cx.conn
                .prepare_cached("DELETE FROM fkeys WHERE tid = ?1 AND fkey = ?2")?
                .execute(params![tid, k])?;
        }
    }
    Ok((!open.is_empty(), token_at))
}
