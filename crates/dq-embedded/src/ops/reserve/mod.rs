//! Reserve (`reserve.lua`): a topic's ready jobs handed out under leases,
//! after its due jobs are promoted, within its pause and rate limit. The
//! jobs without a flow-control key go in the order kept in memory, read
//! and leased a span at a time where their rows are dense; a topic with
//! keyed jobs takes the round of its keys (`keyed`). One job by id:
//! `job` (`reserve_job.lua`). A job found expired on its way out goes
//! dead or is dropped instead (`expire`).

use dq_core::*;
use rusqlite::{OptionalExtension, params};

use super::promote::promote;
use super::token::numbered;
use super::{BATCH, READY, counts, sched_head, tid};
use crate::writer::{Ctx, Failure, HotSql, OpResult};

mod expire;
mod job;
mod keyed;

pub(crate) use job::reserve_job;
use keyed::reserve_keyed;

pub(crate) fn reserve(
    cx: &mut Ctx,
    topic: &Topic,
    max: usize,
    lease_override: Option<u64>,
    now: u64,
) -> OpResult<Reservation> {
    // The traced jobs it ends unhandled (`expire::expire`) go in its answer.
    cx.expired.clear();
    let mut r = hand_out(cx, topic, max, lease_override, now)?;
    r.expired = std::mem::take(&mut cx.expired);
    Ok(r)
}

fn hand_out(
    cx: &mut Ctx,
    topic: &Topic,
    max: usize,
    lease_override: Option<u64>,
    now: u64,
) -> OpResult<Reservation> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(Reservation::default());
    };
    // A paused topic hands nothing out; the pause's end is when to look
    // again (paused until resumed: no time, the resume wakes waiters).
    // With the topic's lease length and its ready count: one read of the
    // topic's row per call.
    #[allow(clippy::type_complexity)]
    let (paused_until, paused, rate, credit, at, keyed, topic_lease_ms, n_ready): (
        u64,
        bool,
        Option<String>,
        Option<u64>,
        u64,
        bool,
        Option<u64>,
        i64,
    ) = cx
        .conn
        .prepare_cached(
            "SELECT paused_until_ms, paused, rate_limit, rl_credit, rl_at, keyed, lease_ms, n_ready
             FROM topics WHERE tid = ?1",
        )?
        .query_row([tid], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })?;
    if paused_until > now || paused {
        return Ok(Reservation {
            leases: Vec::new(),
            next_due_ms: (paused_until > now).then_some(paused_until),
            expired: Vec::new(),
        });
    }
    // The rate limit's bucket, taken from in this transaction (the one writer).
    let rate = rate.as_deref().and_then(RateLimit::decode);
    let mut take = max as u64;
    let mut bucket = None;
    if let Some(r) = rate {
        let c = r.refill(credit, at, now);
        take = take.min(r.allowed(c));
        bucket = Some((r, c));
    }
    let promoted = promote(cx, tid, now, BATCH)?;
    let mut hand = HandOut {
        topic,
        tid,
        lease_override,
        now,
        topic_lease_ms: topic_lease_ms.unwrap_or(TopicConfig::default().lease_ms),
        prefix: format!("{:016x}.", rand::random::<u64>()),
        leases: Vec::with_capacity(take.min(BATCH as u64) as usize),
    };
    // Whether ready jobs are left that may go now, and when a key out of
    // tokens has its next one.
    // A topic that had keyed jobs takes the keyed path while any is ready
    // (the lanes in memory say).
    let keyed = keyed && cx.mem.lanes.any(tid);
    let (go, key_token_at) = if keyed {
        reserve_keyed(cx, &mut hand, take)?
    } else {
        // The first ready jobs, from memory, and their rows; those found
        // expired end instead, and the next ones are read in their place.
        let mut ended = 0;
        loop {
            let want = take as usize - hand.leases.len();
            let places = cx.mem.ready.first(tid, want);
            let mut ready = ready_rows(cx, tid, &places)?;
            let before = ready.rows.len();
            ready.end_expired(cx, tid, now)?;
            let expired = before - ready.rows.len();
            hand.lease_rows(cx, ready)?;
            ended += expired as i64;
            if expired == 0 || hand.leases.len() as u64 >= take {
                break;
            }
        }
        // The topic's ready count once promote moved its jobs in.
        (n_ready + promoted - ended > hand.leases.len() as i64, None)
    };
    let leases = hand.leases;
    let n = leases.len() as i64;
    counts(cx, tid, [0, -n, n, 0])?;
    let mut next_due_ms = if go {
        Some(now)
    } else {
        [sched_head(cx, tid)?, key_token_at]
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
        cx.conn
            .prepare_cached(
                "UPDATE topics SET rl_credit = ?2, rl_at = max(rl_at, ?3),
                   rate_limited = rate_limited + min(?4, n_ready) WHERE tid = ?1",
            )?
            .execute(params![tid, credit as i64, now as i64, held])?;
        // Ready jobs wait for the next token: that is when to look again.
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

/// One reserve call's hand-outs: the leases made so far and what making
/// one needs.
struct HandOut<'a> {
    topic: &'a Topic,
    tid: i64,
    lease_override: Option<u64>,
    now: u64,
    /// The topic's lease length, for jobs without their own.
    topic_lease_ms: u64,
    prefix: String,
    leases: Vec<Lease>,
}

impl HandOut<'_> {
    /// How long job `j`'s lease lasts: the call's length, else the job's
    /// own, else the topic's.
    fn lease_ms(&self, j: &Leasable) -> u64 {
        self.lease_override
            .or(j.lease_ms)
            .unwrap_or(self.topic_lease_ms)
    }

    /// Leases ready job `j` (the state counts are the caller's to move).
    fn lease(&mut self, cx: &mut Ctx, j: Leasable) -> OpResult<()> {
        let lease_ms = self.lease_ms(&j);
        let token = numbered(&self.prefix, j.seq);
        let l = lease(cx, self.topic, self.tid, j, lease_ms, token, self.now)?;
        self.leases.push(l);
        Ok(())
    }

    /// Leases the rows [`ready_rows`] read: all with one `UPDATE` when they
    /// are the whole of the span it read and share one lease length (the
    /// jobs of one topic due at once, the usual batch: the statement's
    /// set-up and a search per row saved; measured in
    /// docs/performance-log.md, "Pipelined acks"), else one by one.
    fn lease_rows(&mut self, cx: &mut Ctx, ready: ReadyRows) -> OpResult<()> {
        let lease_ms = ready.rows.first().map(|j| self.lease_ms(j));
        let shared = ready
            .rows
            .iter()
            .all(|j| Some(self.lease_ms(j)) == lease_ms);
        let (Some(span), Some(lease_ms), true) = (ready.span, lease_ms, shared) else {
            for j in ready.rows {
                self.lease(cx, j)?;
            }
            return Ok(());
        };
        let deadline = self.now + lease_ms;
        let (p, d, seq) = span.last;
        let n = cx.conn.with(HotSql::LeaseSpan, |st| {
            st.execute(params![
                span.lo,
                span.hi,
                self.tid,
                p,
                d,
                seq,
                self.prefix,
                deadline as i64
            ])
        })?;
        if n != ready.rows.len() {
            // The read and this update select the same rows in one
            // transaction, so this cannot happen; refuse (the call's
            // savepoint undoes the update) rather than answer leases the
            // file does not hold.
            return Err(Failure(StoreError::Unavailable(format!(
                "leasing a span of {} ready jobs changed {n} rows",
                ready.rows.len()
            ))));
        }
        for j in ready.rows {
            let token = numbered(&self.prefix, j.seq);
            let l = note_lease(cx, self.topic, self.tid, j, token, deadline)?;
            self.leases.push(l);
        }
        Ok(())
    }
}

/// The ready job at `place` (`(priority, due, seq)`) of topic `tid`'s
/// lane `key` (`None`: the jobs without a key) in memory, read to be
/// leased. `None` when the file does not hold it ready there
/// ([`stale_ready`]).
fn ready_row(
    cx: &mut Ctx,
    tid: i64,
    key: Option<&str>,
    place: (i64, i64, i64),
) -> OpResult<Option<Leasable>> {
    let (priority, due, seq) = place;
    let row = cx.conn.with(HotSql::ReadyRow, |st| {
        st.query_row(params![seq, tid, priority, due, key], Leasable::row)
            .optional()
    })?;
    if row.is_none() {
        stale_ready(cx, tid, key, place);
    }
    Ok(row)
}

/// Drops a ready job's entry whose row the file does not hold ready at
/// that place: cannot happen while every change of a ready job goes
/// through [`crate::memory::Memory`]; the entry is dropped rather than
/// found again and again.
fn stale_ready(cx: &mut Ctx, tid: i64, key: Option<&str>, place: (i64, i64, i64)) {
    let (priority, due, seq) = place;
    tracing::warn!(
        seq,
        "embedded store: a ready job in memory had no ready row"
    );
    cx.mem.remove_ready(tid, key, priority, due, seq);
}

/// The rows of topic `tid`'s ready jobs at `places` (from memory, in
/// hand-out order), in that order. Jobs enqueued together and due together
/// have neighbouring row ids: when the places' row ids are that dense (a
/// span of at most twice their number), one pass over the table's rows
/// between the first and the last reads them all (instead of a statement
/// and a search from the table's root per job; measured in
/// docs/performance-log.md, "Ready jobs and dead letters in memory"); else each is read by its id ([`ready_row`]). The
/// pass reads only rows up to the last place in hand-out order, so a job
/// behind them whose row lies in between (a later priority) costs no read
/// of its body. A place whose row is not ready there is dropped, as
/// `ready_row` drops it.
fn ready_rows(cx: &mut Ctx, tid: i64, places: &[(i64, i64, i64)]) -> OpResult<ReadyRows> {
    let lo = places.iter().map(|p| p.2).min().unwrap_or(0);
    let hi = places.iter().map(|p| p.2).max().unwrap_or(0);
    if places.len() < 2 || hi - lo >= 2 * places.len() as i64 {
        let mut out = Vec::with_capacity(places.len());
        for &place in places {
            out.extend(ready_row(cx, tid, None, place)?);
        }
        return Ok(ReadyRows {
            rows: out,
            span: None,
        });
    }
    let last = places[places.len() - 1];
    let rows: Vec<Leasable> = cx.conn.with(HotSql::ReadySpan, |st| {
        st.query_map(params![lo, hi, tid, last.0, last.1, last.2], Leasable::row)?
            .collect()
    })?;
    // The span's rows come in row-id order.
    let seqs: Vec<i64> = rows.iter().map(|j| j.seq).collect();
    let read = rows.len();
    let mut rows: Vec<Option<Leasable>> = rows.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(places.len());
    for &place in places {
        let (priority, due, seq) = place;
        let row = seqs.binary_search(&seq).ok().and_then(|i| rows[i].take());
        match row.filter(|j| i64::from(j.priority) == priority && j.place == due) {
            Some(j) => out.push(j),
            None => stale_ready(cx, tid, None, place),
        }
    }
    // Every row the span's read found is handed out: the same condition
    // selects exactly these rows again (`HotSql::LeaseSpan`).
    let span = (out.len() == read).then_some(Span { lo, hi, last });
    Ok(ReadyRows { rows: out, span })
}

impl ReadyRows {
    /// Ends the rows whose expiry has passed at `now` ([`expire::expire`])
    /// and leaves them out; the rest are no longer one span's whole read.
    fn end_expired(&mut self, cx: &mut Ctx, tid: i64, now: u64) -> OpResult<()> {
        if !self.rows.iter().any(|j| j.expired(now)) {
            return Ok(());
        }
        self.span = None;
        for j in std::mem::take(&mut self.rows) {
            if j.expired(now) {
                expire::expire(cx, tid, &j, now)?;
            } else {
                self.rows.push(j);
            }
        }
        Ok(())
    }
}

/// Ready jobs' rows read to be leased ([`ready_rows`]), in hand-out order.
struct ReadyRows {
    rows: Vec<Leasable>,
    /// When they are every row of one span read with `HotSql::ReadySpan`:
    /// that span, whose condition `HotSql::LeaseSpan` repeats.
    span: Option<Span>,
}

/// Rows `lo..=hi` of a topic, ready, without a key, up to the place `last`
/// (`(priority, due_ms, seq)`) in hand-out order.
#[derive(Clone, Copy)]
struct Span {
    lo: i64,
    hi: i64,
    last: (i64, i64, i64),
}

/// The columns a lease is made of.
const LEASABLE: &str = concat!(
    "seq, id, lease_ms, due_ms, priority, is_json, body, attempts, state, fkey, expires_ms, trace, ",
    place_sql!()
);

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
    state: i64,
    fkey: Option<String>,
    /// When it expires, if it does.
    expires: Option<u64>,
    /// Its trace context as stored.
    trace: Option<String>,
    /// Its place among the ready jobs of its priority (`place_sql!`).
    place: i64,
}

impl Leasable {
    fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            seq: r.get(0)?,
            id: r.get(1)?,
            lease_ms: r.get(2)?,
            due: r.get(3)?,
            priority: r.get(4)?,
            is_json: r.get(5)?,
            body: r.get(6)?,
            attempts: r.get(7)?,
            state: r.get(8)?,
            fkey: r.get(9)?,
            expires: r.get(10)?,
            trace: r.get(11)?,
            place: r.get(12)?,
        })
    }
}

/// Leases `j` for `lease_ms` under `token`: reserved, the attempt counted,
/// a died-at time cleared. The state counts are the caller's to move.
fn lease(
    cx: &mut Ctx,
    topic: &Topic,
    tid: i64,
    j: Leasable,
    lease_ms: u64,
    token: String,
    now: u64,
) -> OpResult<Lease> {
    let deadline = now + lease_ms;
    cx.conn.with(HotSql::Lease, |st| {
        st.execute(params![token, deadline as i64, j.seq])
    })?;
    note_lease(cx, topic, tid, j, token, deadline)
}

/// Job `j`, its row leased until `deadline` under `token`: out of the
/// ready order, into the leases in memory, and the call's answer.
fn note_lease(
    cx: &mut Ctx,
    topic: &Topic,
    tid: i64,
    j: Leasable,
    token: String,
    deadline: u64,
) -> OpResult<Lease> {
    if j.state == READY {
        cx.mem.remove_ready(
            tid,
            j.fkey.as_deref(),
            i64::from(j.priority),
            j.place,
            j.seq,
        );
    }
    cx.mem.leases.add(tid, j.seq, deadline as i64);
    Ok(Lease {
        topic: topic.clone(),
        id: JobId::new(j.id).map_err(|e| Failure(StoreError::Invalid(e)))?,
        token,
        attempt: j.attempts + 1,
        due_at_ms: j.due,
        lease_deadline_ms: deadline,
        priority: j.priority,
        body: Body::from_stored(j.body, j.is_json),
        trace: j.trace.as_deref().and_then(TraceContext::from_stored),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::token::token_seq;
    use crate::ops::{RESERVED, runs};

    fn due_now(ids: &[&str], lease_ms: &[Option<u64>]) -> Vec<NewJob> {
        ids.iter()
            .zip(lease_ms)
            .map(|(id, ms)| {
                let mut j = NewJob::new(
                    JobId::new(*id).unwrap(),
                    Body::Json("1".into()),
                    When::DelayMs(0),
                );
                j.lease_ms = *ms;
                j
            })
            .collect()
    }

    /// Jobs due at once, leased by one call, are leased by one `UPDATE` over
    /// their span, which writes each row the token the call answers (row ids
    /// above 2³² included: SQLite's `printf('%x')` and `numbered` agree), so
    /// every ack finds its lease; a span with a job of its own lease length
    /// is leased row by row, each with its own deadline.
    #[tokio::test]
    async fn a_span_of_ready_jobs_is_leased_at_once_under_the_tokens_answered() {
        const T0: u64 = 1_700_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let s = crate::EmbeddedStore::open(dir.path()).unwrap();
        // Row ids from 2⁴⁰ on: a job due in a day, moved there.
        let later = Topic::new("later").unwrap();
        let mut far = due_now(&["far"], &[None]);
        far[0].when = When::DelayMs(86_400_000);
        s.enqueue(&later, &far, T0).await.unwrap();
        s.writer
            .exec(|cx| {
                cx.conn
                    .execute("UPDATE jobs SET seq = 1099511627776 WHERE id = 'far'", [])?;
                Ok(())
            })
            .await
            .unwrap();
        let topic = Topic::new("span").unwrap();
        let ids = ["a", "b", "c", "d", "e", "f"];
        s.enqueue(&topic, &due_now(&ids, &[None; 6]), T0)
            .await
            .unwrap();
        let (span0, one0) = (
            runs(&s, HotSql::LeaseSpan).await,
            runs(&s, HotSql::Lease).await,
        );
        let leases = s.reserve(&topic, 6, None, T0).await.unwrap().leases;
        assert_eq!(leases.len(), 6);
        assert_eq!(runs(&s, HotSql::LeaseSpan).await, span0 + 1);
        assert_eq!(runs(&s, HotSql::Lease).await, one0);
        for l in &leases {
            let (id, token) = (l.id.as_str().to_string(), l.token.clone());
            #[allow(clippy::type_complexity)]
            let stored: (String, (i64, i64, Option<i64>, Option<i64>)) = s
                .writer
                .read(move |cx| {
                    Ok(cx.conn.query_row(
                        "SELECT token, state, attempts, deadline_ms, died_ms FROM jobs WHERE id = ?1",
                        [&id],
                        |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))),
                    )?)
                })
                .await
                .unwrap();
            assert_eq!(stored.0, token);
            assert!(token_seq(&token).unwrap() > 1 << 40, "{token}");
            // The row as the per-row lease writes it: reserved, the attempt
            // counted, the deadline answered, no died-at time.
            let deadline = (T0 + TopicConfig::default().lease_ms) as i64;
            assert_eq!(stored.1, (RESERVED, 1, Some(deadline), None));
            assert_eq!(l.attempt, 1);
            assert_eq!(l.lease_deadline_ms, T0 + TopicConfig::default().lease_ms);
        }
        let held: Vec<AckItem> = leases
            .iter()
            .map(|l| AckItem::new(&topic, &l.id, &l.token))
            .collect();
        let acked = s.ack_batch(&held, T0).await;
        assert!(acked.iter().all(Result::is_ok), "{acked:?}");

        // One job of the span with a lease of its own: row by row.
        let own = [None, Some(5_000), None];
        s.enqueue(&topic, &due_now(&["g", "h", "i"], &own), T0)
            .await
            .unwrap();
        let (span0, one0) = (
            runs(&s, HotSql::LeaseSpan).await,
            runs(&s, HotSql::Lease).await,
        );
        let leases = s.reserve(&topic, 3, None, T0).await.unwrap().leases;
        assert_eq!(runs(&s, HotSql::LeaseSpan).await, span0);
        assert_eq!(runs(&s, HotSql::Lease).await, one0 + 3);
        let deadlines: Vec<(&str, u64)> = leases
            .iter()
            .map(|l| (l.id.as_str(), l.lease_deadline_ms - T0))
            .collect();
        let topic_ms = TopicConfig::default().lease_ms;
        assert_eq!(deadlines, [("g", topic_ms), ("h", 5_000), ("i", topic_ms)]);
    }

    /// A span whose read finds a row it does not hand out (its place in
    /// memory is stale: the row's priority changed behind the writer's
    /// back) is leased row by row: the row left out stays ready in the
    /// file, not leased without an answer. (All in one call of the writer,
    /// which then puts the row and its place back as they were: the debug
    /// build compares memory with the file at every commit.)
    #[tokio::test]
    async fn a_span_with_a_row_not_handed_out_is_leased_row_by_row() {
        const T0: u64 = 1_700_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let s = crate::EmbeddedStore::open(dir.path()).unwrap();
        let topic = Topic::new("stale").unwrap();
        let ids = ["a", "b", "c", "d"];
        s.enqueue(&topic, &due_now(&ids, &[None; 4]), T0)
            .await
            .unwrap();
        let (span0, one0) = (
            runs(&s, HotSql::LeaseSpan).await,
            runs(&s, HotSql::Lease).await,
        );
        let t = topic.clone();
        let (handed, b) = s
            .writer
            .exec(move |cx| {
                let (seq, tid): (i64, i64) = cx.conn.query_row(
                    "UPDATE jobs SET priority = 5 WHERE id = 'b' RETURNING seq, tid",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                let leases = reserve(cx, &t, 4, None, T0)?.leases;
                let b: (i64, Option<String>) =
                    cx.conn
                        .query_row("SELECT state, token FROM jobs WHERE id = 'b'", [], |r| {
                            Ok((r.get(0)?, r.get(1)?))
                        })?;
                cx.conn
                    .execute("UPDATE jobs SET priority = 1024 WHERE id = 'b'", [])?;
                cx.mem.add_ready(tid, None, 1024, T0 as i64, seq);
                let handed: Vec<String> = leases.iter().map(|l| l.id.to_string()).collect();
                Ok((handed, b))
            })
            .await
            .unwrap();
        assert_eq!(handed, ["a", "c", "d"]);
        assert_eq!(b, (READY, None), "b stays ready, unleased");
        assert_eq!(runs(&s, HotSql::LeaseSpan).await, span0);
        assert_eq!(runs(&s, HotSql::Lease).await, one0 + 3);
    }
}
