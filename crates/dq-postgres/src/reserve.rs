//! Reserve (`reserve.lua`, the embedded `ops/reserve/`): a topic's ready
//! jobs handed out under leases, after its due jobs are promoted, within
//! its pause and rate limit; the jobs without a key in hand-out order
//! (`FOR UPDATE SKIP LOCKED`, leased by one `UPDATE`), a topic with keyed
//! jobs by the round of its keys. One job by id (`reserve_job.lua`), and
//! the dispatcher's promotion of due jobs (`promote_due.lua`).

use std::collections::{BTreeSet, HashMap};

use dq_core::*;
use tokio_postgres::Row;

use crate::OpResult;
use crate::cx::{BATCH, Cx, RESERVED, delta, job_id, new_token};
use crate::schema::PLACE_MS;

/// Moves up to `max` due jobs of topic `tid` to ready; returns how many.
pub(crate) async fn promote(cx: &Cx<'_>, tid: i64, now: u64, max: i64) -> OpResult<i64> {
    let moved = cx
        .exec(
            "UPDATE jobs SET state = 1 WHERE seq IN (
               SELECT seq FROM jobs WHERE tid = $1 AND state = 0 AND due_ms <= $2
               ORDER BY due_ms, seq LIMIT $3)",
            &[&tid, &(now as i64), &max],
        )
        .await? as i64;
    cx.counts(tid, [-moved, moved, 0, 0]).await?;
    Ok(moved)
}

pub(crate) async fn promote_due(
    cx: &mut Cx<'_>,
    topic: &Topic,
    max: usize,
    now: u64,
) -> OpResult<Promoted> {
    let Some(tid) = cx.lock(topic).await? else {
        return Ok(Promoted::default());
    };
    let moved = promote(cx, tid, now, max as i64).await?;
    if moved > 0 {
        cx.wake(topic);
    }
    Ok(Promoted {
        moved: moved as u64,
        next_due_ms: cx.sched_head(tid).await?,
    })
}

/// The columns a lease is made of.
const LEASABLE: &str =
    "seq, id, lease_ms, due_ms, priority, is_json, body, attempts, state, fkey, trace";

/// A job about to be leased.
struct Leasable {
    seq: i64,
    id: String,
    lease_ms: Option<u64>,
    due: u64,
    priority: u32,
    is_json: bool,
    body: Vec<u8>,
    attempts: u32,
    state: i16,
    fkey: Option<String>,
    /// As [`TraceContext::to_stored`] wrote it.
    trace: Option<String>,
}

impl Leasable {
    fn row(r: &Row) -> Self {
        Self {
            seq: r.get(0),
            id: r.get(1),
            lease_ms: r.get::<_, Option<i64>>(2).map(|v| v as u64),
            due: r.get::<_, i64>(3) as u64,
            priority: r.get::<_, i64>(4) as u32,
            is_json: r.get(5),
            body: r.get(6),
            attempts: r.get::<_, i64>(7) as u32,
            state: r.get(8),
            fkey: r.get(9),
            trace: r.get(10),
        }
    }
}

/// One reserve call's hand-outs.
struct HandOut<'a> {
    topic: &'a Topic,
    lease_override: Option<u64>,
    now: u64,
    topic_lease_ms: u64,
    leases: Vec<Lease>,
}

impl HandOut<'_> {
    fn lease_ms(&self, j: &Leasable) -> u64 {
        self.lease_override
            .or(j.lease_ms)
            .unwrap_or(self.topic_lease_ms)
    }

    fn answer(&mut self, j: Leasable, token: String, deadline: u64) -> OpResult<()> {
        self.leases.push(Lease {
            topic: self.topic.clone(),
            id: job_id(j.id)?,
            token,
            attempt: j.attempts + 1,
            due_at_ms: j.due,
            lease_deadline_ms: deadline,
            priority: j.priority,
            body: Body::from_stored(j.body, j.is_json),
            trace: j.trace.as_deref().and_then(TraceContext::from_stored),
        });
        Ok(())
    }

    /// Leases `rows` with one statement (the state counts are the caller's).
    async fn lease_rows(&mut self, cx: &Cx<'_>, rows: Vec<Leasable>) -> OpResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut seqs = Vec::with_capacity(rows.len());
        let mut tokens = Vec::with_capacity(rows.len());
        let mut deadlines = Vec::with_capacity(rows.len());
        for j in &rows {
            seqs.push(j.seq);
            tokens.push(new_token());
            deadlines.push((self.now + self.lease_ms(j)) as i64);
        }
        cx.exec(
            "UPDATE jobs j SET state = 2, token = u.token, deadline_ms = u.deadline,
               attempts = j.attempts + 1, died_ms = NULL
             FROM unnest($1::int8[], $2::text[], $3::int8[]) AS u(seq, token, deadline)
             WHERE j.seq = u.seq",
            &[&seqs, &tokens, &deadlines],
        )
        .await?;
        for ((j, token), deadline) in rows.into_iter().zip(tokens).zip(deadlines) {
            self.answer(j, token, deadline as u64)?;
        }
        Ok(())
    }
}

pub(crate) async fn reserve(
    cx: &mut Cx<'_>,
    topic: &Topic,
    max: usize,
    lease_override: Option<u64>,
    now: u64,
) -> OpResult<Reservation> {
    let Some(tid) = cx.lock(topic).await? else {
        return Ok(Reservation::default());
    };
    let r = cx
        .one(
            "SELECT paused_until_ms, paused, rate_limit, rl_credit, rl_at, keyed, lease_ms, n_ready
             FROM topics WHERE tid = $1",
            &[&tid],
        )
        .await?;
    let paused_until = r.get::<_, i64>(0) as u64;
    let paused: bool = r.get(1);
    let rate: Option<String> = r.get(2);
    let credit = r.get::<_, Option<i64>>(3).map(|v| v as u64);
    let at = r.get::<_, i64>(4) as u64;
    let keyed: bool = r.get(5);
    let topic_lease_ms = r
        .get::<_, Option<i64>>(6)
        .map_or(TopicConfig::default().lease_ms, |v| v as u64);
    let n_ready: i64 = r.get(7);
    // A paused topic hands nothing out; the pause's end is when to look
    // again (paused until resumed: no time, the resume wakes waiters).
    if paused_until > now || paused {
        return Ok(Reservation {
            leases: Vec::new(),
            next_due_ms: (paused_until > now).then_some(paused_until),
            expired: Vec::new(),
        });
    }
    let rate = rate.as_deref().and_then(RateLimit::decode);
    let mut take = max as u64;
    let mut bucket = None;
    if let Some(r) = rate {
        let c = r.refill(credit, at, now);
        take = take.min(r.allowed(c));
        bucket = Some((r, c));
    }
    let promoted = promote(cx, tid, now, BATCH).await?;
    let mut hand = HandOut {
        topic,
        lease_override,
        now,
        topic_lease_ms,
        leases: Vec::new(),
    };
    let keyed = keyed
        && cx
            .opt(
                "SELECT 1 FROM jobs WHERE tid = $1 AND state = 1 AND fkey IS NOT NULL LIMIT 1",
                &[&tid],
            )
            .await?
            .is_some();
    let (go, key_token_at) = if keyed {
        reserve_keyed(cx, tid, &mut hand, take).await?
    } else {
        let take_i = take.min(BATCH as u64) as i64;
        let rows: Vec<Leasable> = if take_i > 0 {
            cx.q(
                &format!(
                    "SELECT {LEASABLE} FROM jobs WHERE tid = $1 AND state = 1 AND fkey IS NULL
                     ORDER BY priority, {PLACE_MS}, seq LIMIT $2 FOR UPDATE SKIP LOCKED"
                ),
                &[&tid, &take_i],
            )
            .await?
            .iter()
            .map(Leasable::row)
            .collect()
        } else {
            Vec::new()
        };
        hand.lease_rows(cx, rows).await?;
        (n_ready + promoted > hand.leases.len() as i64, None)
    };
    let leases = hand.leases;
    let n = leases.len() as i64;
    cx.counts(tid, [0, -n, n, 0]).await?;
    let mut next_due_ms = if go {
        Some(now)
    } else {
        [cx.sched_head(tid).await?, key_token_at]
            .into_iter()
            .flatten()
            .min()
    };
    if let Some((r, credit)) = bucket {
        let credit = credit - n as u64 * r.per_ms;
        let held = if go && take < max as u64 {
            max as i64 - n
        } else {
            0
        };
        cx.exec(
            "UPDATE topics SET rl_credit = $2, rl_at = greatest(rl_at, $3),
               rate_limited = rate_limited + least($4, n_ready) WHERE tid = $1",
            &[&tid, &(credit as i64), &(now as i64), &held],
        )
        .await?;
        if go && let Some(at) = r.next_token_at(credit, now) {
            next_due_ms = Some(at);
        }
    }
    Ok(Reservation {
        leases,
        next_due_ms,
        expired: Vec::new(),
    })
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

/// The next job of a lane.
async fn lane_head(cx: &Cx<'_>, tid: i64, key: Option<&str>) -> OpResult<Option<Leasable>> {
    let row = match key {
        None => {
            cx.opt(
                &format!(
                    "SELECT {LEASABLE} FROM jobs WHERE tid = $1 AND state = 1 AND fkey IS NULL
                     ORDER BY priority, {PLACE_MS}, seq LIMIT 1 FOR UPDATE SKIP LOCKED"
                ),
                &[&tid],
            )
            .await?
        }
        Some(k) => {
            cx.opt(
                &format!(
                    "SELECT {LEASABLE} FROM jobs WHERE tid = $1 AND state = 1 AND fkey = $2
                     ORDER BY priority, {PLACE_MS}, seq LIMIT 1 FOR UPDATE SKIP LOCKED"
                ),
                &[&tid, &k],
            )
            .await?
        }
    };
    Ok(row.as_ref().map(Leasable::row))
}

/// The keyed hand-out (issue #18), as the embedded store's
/// `ops/reserve/keyed.rs`: the lanes take turns, lowest turn first, one job
/// each per turn; a key goes while it holds fewer than `key_concurrency`
/// leases and its `key_rate_limit` bucket has a token. Returns whether
/// ready jobs that may go are left, and the earliest next token of a key
/// out of them.
async fn reserve_keyed(
    cx: &Cx<'_>,
    tid: i64,
    hand: &mut HandOut<'_>,
    take: u64,
) -> OpResult<(bool, Option<u64>)> {
    let now = hand.now;
    let r = cx
        .one(
            "SELECT key_concurrency, key_rate_limit, kturn, uturn FROM topics WHERE tid = $1",
            &[&tid],
        )
        .await?;
    let limit: Option<i64> = r.get(0);
    let krate = r
        .get::<_, Option<String>>(1)
        .as_deref()
        .and_then(RateLimit::decode);
    let mut kturn: i64 = r.get(2);
    let uturn: i64 = r.get(3);
    let mut lanes: Vec<Lane> = Vec::new();
    if cx
        .opt(
            "SELECT 1 FROM jobs WHERE tid = $1 AND state = 1 AND fkey IS NULL LIMIT 1",
            &[&tid],
        )
        .await?
        .is_some()
    {
        lanes.push(Lane {
            turn: uturn,
            key: None,
            active: 0,
            credit: None,
            at: 0,
            touched: false,
        });
    }
    // The keys with ready jobs, with their rows in `fkeys` (none: a key new
    // to the round, which joins at its end).
    let keys = cx
        .q(
            "SELECT k.fkey, f.active, f.turn, f.credit, f.at FROM
               (SELECT DISTINCT fkey FROM jobs WHERE tid = $1 AND state = 1 AND fkey IS NOT NULL) k
             LEFT JOIN fkeys f ON f.tid = $1 AND f.fkey = k.fkey
             ORDER BY k.fkey",
            &[&tid],
        )
        .await?;
    let mut fresh = 0;
    for r in keys {
        let key: String = r.get(0);
        let (active, turn, credit, at) = match r.get::<_, Option<i64>>(1) {
            Some(active) => (
                active,
                r.get::<_, i64>(2),
                r.get::<_, Option<i64>>(3).map(|v| v as u64),
                r.get::<_, i64>(4) as u64,
            ),
            None => {
                fresh += 1;
                (0, kturn + fresh, None, 0)
            }
        };
        lanes.push(Lane {
            turn,
            key: Some(key),
            active,
            credit,
            at,
            touched: false,
        });
    }
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
    let mut open: BTreeSet<(i64, Option<String>)> = BTreeSet::new();
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
    let at_index: HashMap<Option<String>, usize> = lanes
        .iter()
        .enumerate()
        .map(|(i, l)| (l.key.clone(), i))
        .collect();
    while (hand.leases.len() as u64) < take {
        let Some((_, key)) = open.pop_first() else {
            break;
        };
        let i = at_index[&key];
        let Some(j) = lane_head(cx, tid, key.as_deref()).await? else {
            continue;
        };
        hand.lease_rows(cx, vec![j]).await?;
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
    for l in lanes.iter().filter(|l| l.touched) {
        match &l.key {
            None => {
                cx.exec(
                    "UPDATE topics SET uturn = $2 WHERE tid = $1",
                    &[&tid, &l.turn],
                )
                .await?;
            }
            Some(k) => {
                cx.exec(
                    "INSERT INTO fkeys (tid, fkey, active, turn, credit, at) VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (tid, fkey) DO UPDATE SET active = excluded.active,
                       turn = excluded.turn, credit = excluded.credit, at = excluded.at",
                    &[
                        &tid,
                        k,
                        &l.active,
                        &l.turn,
                        &l.credit.map(|c| c as i64),
                        &(l.at as i64),
                    ],
                )
                .await?;
            }
        }
    }
    cx.exec(
        "UPDATE topics SET kturn = $2, rate_limited = rate_limited + $3 WHERE tid = $1",
        &[&tid, &kturn, &held_back],
    )
    .await?;
    // Keys with no lease, no ready job and a full bucket (or none) are
    // forgotten: they are the same as a key never seen.
    let (cap, per) = krate.map_or((None, 1), |r| (Some(r.capacity() as i64), r.limit as i64));
    cx.exec(
        "DELETE FROM fkeys f WHERE f.tid = $1 AND f.active <= 0
           AND ($2::int8 IS NULL OR f.credit IS NULL OR f.at + ($2 - f.credit + $3 - 1) / $3 <= $4)
           AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.tid = $1 AND j.state = 1 AND j.fkey = f.fkey)",
        &[&tid, &cap, &per, &(now as i64)],
    )
    .await?;
    Ok((!open.is_empty(), token_at))
}

pub(crate) async fn reserve_job(
    cx: &mut Cx<'_>,
    topic: &Topic,
    id: &JobId,
    lease_override: Option<u64>,
    now: u64,
) -> OpResult<Option<Lease>> {
    let Some(tid) = cx.lock(topic).await? else {
        return Ok(None);
    };
    let row = cx
        .opt(
            &format!("SELECT {LEASABLE} FROM jobs WHERE tid = $1 AND id = $2 FOR UPDATE"),
            &[&tid, &id.as_str()],
        )
        .await?;
    let Some(j) = row
        .as_ref()
        .map(Leasable::row)
        .filter(|j| j.state != RESERVED)
    else {
        return Ok(None);
    };
    let lease_ms = match lease_override.or(j.lease_ms) {
        Some(l) => l,
        None => cx.config(tid).await?.lease_ms,
    };
    let from = j.state;
    if let Some(k) = &j.fkey {
        cx.exec(
            "INSERT INTO fkeys (tid, fkey, active) VALUES ($1, $2, 1)
             ON CONFLICT (tid, fkey) DO UPDATE SET active = fkeys.active + 1",
            &[&tid, k],
        )
        .await?;
    }
    let mut hand = HandOut {
        topic,
        lease_override: Some(lease_ms),
        now,
        topic_lease_ms: lease_ms,
        leases: Vec::new(),
    };
    hand.lease_rows(cx, vec![j]).await?;
    cx.counts(tid, delta(Some(from), Some(RESERVED))).await?;
    Ok(hand.leases.pop())
}
