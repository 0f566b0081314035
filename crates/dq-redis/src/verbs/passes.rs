//! The dispatcher's passes over a topic: promote_due
//! (`lua/promote_due.lua`: due jobs from the schedule to the ready set) and
//! requeue_expired (`lua/requeue_expired.lua`: leases past their deadline
//! taken back, each a failed attempt).

use dq_core::store::StoreResult;
use dq_core::*;
use redis::Value;

use super::n;
use crate::RedisStore;
use crate::decode::{array, int, opt_time, protocol, string};

pub(crate) async fn promote_due(
    store: &RedisStore,
    topic: &Topic,
    max: usize,
    now_ms: u64,
) -> StoreResult<Promoted> {
    let v = store
        .run(
            &store.scripts.promote_due,
            topic,
            &[&store.now_arg(now_ms), &n(max.max(1) as u64)],
        )
        .await?;
    let items = array(v)?;
    Ok(Promoted {
        moved: int(&items[0])? as u64,
        next_due_ms: opt_time(int(&items[1])?),
    })
}

pub(crate) async fn requeue_expired(
    store: &RedisStore,
    topic: &Topic,
    max: usize,
    now_ms: u64,
) -> StoreResult<Requeued> {
    let v = store
        .run(
            &store.scripts.requeue_expired,
            topic,
            &[
                &store.now_arg(now_ms),
                &n(max.max(1) as u64),
                rand::random::<f64>().to_string().as_bytes(),
            ],
        )
        .await?;
    decode_requeued(v)
}

/// requeue_expired's `{retried, dead, next, (id, attempt, due|-1)*}`.
fn decode_requeued(v: Value) -> StoreResult<Requeued> {
    let items = array(v)?;
    if items.len() < 3 || !(items.len() - 3).is_multiple_of(3) {
        return Err(protocol("requeue_expired reply length"));
    }
    let mut jobs = Vec::with_capacity((items.len() - 3) / 3);
    for c in items[3..].chunks(3) {
        let id = JobId::new(string(&c[0])?).map_err(|_| protocol("bad id"))?;
        let attempt = int(&c[1])? as u32;
        let outcome = match opt_time(int(&c[2])?) {
            Some(due_at_ms) => NackOutcome::Retry { due_at_ms, attempt },
            None => NackOutcome::Dead { attempt },
        };
        jobs.push((id, outcome));
    }
    Ok(Requeued {
        retried: int(&items[0])? as u64,
        dead: int(&items[1])? as u64,
        next_deadline_ms: opt_time(int(&items[2])?),
        jobs,
    })
}
