//! Handing jobs out: reserve (`lua/reserve.lua`: due jobs promoted, then
//! up to `max` ready ones leased within the topic's flow control) and
//! reserve_job (`lua/reserve_job.lua`: one job by id). Both answer each
//! lease with the job's record as stored, read here ([`record`]).

mod record;

use dq_core::store::StoreResult;
use dq_core::*;
use redis::Value;

use super::{n, opt};
use crate::RedisStore;
use crate::decode::{array, bytes, int, opt_time, protocol, stored_trace, string};
use record::RecordHead;

pub(crate) async fn reserve(
    store: &RedisStore,
    topic: &Topic,
    max: usize,
    lease_ms: Option<u64>,
    now_ms: u64,
) -> StoreResult<Reservation> {
    let max = max.clamp(1, limits::MAX_RESERVE);
    let v = store
        .run(
            &store.scripts.reserve,
            topic,
            &[
                &store.now_arg(now_ms),
                &n(max as u64),
                &opt(lease_ms),
                token_prefix().as_bytes(),
            ],
        )
        .await?;
    decode_reserved(topic, v)
}

pub(crate) async fn reserve_job(
    store: &RedisStore,
    topic: &Topic,
    id: &JobId,
    lease_ms: Option<u64>,
    now_ms: u64,
) -> StoreResult<Option<Lease>> {
    let token = format!("{}1", token_prefix());
    let v = store
        .run(
            &store.scripts.reserve_job,
            topic,
            &[
                &store.now_arg(now_ms),
                id.as_str().as_bytes(),
                &opt(lease_ms),
                token.as_bytes(),
            ],
        )
        .await?;
    Ok(decode_reserved(topic, v)?.leases.pop())
}

fn token_prefix() -> String {
    format!("{:016x}.", rand::random::<u64>())
}

/// The reserve and reserve_job scripts' reply: the next due time, then 4
/// values per lease: id, token, lease deadline, and the job's record as
/// stored (its due time, priority, attempts before this lease, kind and
/// body are read from it here: 4 reply values per job fewer for Redis to
/// turn into RESP; so is its trace context, value 25 when it has one, at
/// no cost to the reply).
fn decode_reserved(topic: &Topic, v: Value) -> StoreResult<Reservation> {
    let mut items = array(v)?.into_iter();
    let next = int(&items.next().ok_or_else(|| protocol("empty reserve"))?)?;
    let rest: Vec<Value> = items.collect();
    if !rest.len().is_multiple_of(4) {
        return Err(protocol("reserve reply length"));
    }
    let mut leases = Vec::with_capacity(rest.len() / 4);
    let mut it = rest.into_iter();
    while let Some(id) = it.next() {
        let mut next_val = || it.next().ok_or_else(|| protocol("reserve reply length"));
        let token = string(&next_val()?)?;
        let deadline = int(&next_val()?)? as u64;
        let mut raw = bytes(next_val()?)?;
        let head = RecordHead::read(&raw)?;
        let trace = head.trace.clone().and_then(|r| stored_trace(&raw[r]));
        // The body cut out of the record in place (no second buffer).
        raw.truncate(head.body.end);
        raw.drain(..head.body.start);
        let id = JobId::new(string(&id)?).map_err(|_| protocol("bad id"))?;
        leases.push(Lease {
            topic: topic.clone(),
            id,
            token,
            attempt: head.attempts.saturating_add(1),
            due_at_ms: head.due_ms,
            lease_deadline_ms: deadline,
            priority: head.priority,
            body: Body::from_stored(raw, head.json),
            trace,
        });
    }
    Ok(Reservation {
        leases,
        next_due_ms: opt_time(next),
        expired: Vec::new(),
    })
}
