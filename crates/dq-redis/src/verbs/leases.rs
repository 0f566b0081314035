//! What a lease holder does: touch (`lua/touch.lua`), ack (`lua/ack.lua`),
//! nack (`lua/nack.lua`), release (`lua/release.lua`), the batches of the
//! first three (`lua/*_batch.lua`, run by `RedisStore::run_batches`), and
//! ack_and_write (`lua/forward.lua`: ack and write to a stream or list of
//! the same server in one step).

use std::borrow::Borrow;

use dq_core::limits::clip_error;
use dq_core::store::StoreResult;
use dq_core::*;
use redis::Value;

use super::{n, opt};
use crate::RedisStore;
use crate::decode::{ack_status, forward_status, int, protocol, status};

pub(crate) async fn touch(
    store: &RedisStore,
    topic: &Topic,
    id: &JobId,
    token: &str,
    lease_ms: Option<u64>,
    now_ms: u64,
) -> StoreResult<u64> {
    held_call(
        store,
        &store.scripts.touch,
        topic,
        id,
        token,
        &opt(lease_ms),
        now_ms,
    )
    .await
}

pub(crate) async fn ack(
    store: &RedisStore,
    topic: &Topic,
    id: &JobId,
    token: &str,
    now_ms: u64,
) -> StoreResult<()> {
    let v = store
        .run(
            &store.scripts.ack,
            topic,
            &[
                id.as_str().as_bytes(),
                token.as_bytes(),
                &store.now_arg(now_ms),
            ],
        )
        .await?;
    status(&v).map(|_| ())
}

/// The batch verbs take each item's topic apart from the item: the sharded
/// store runs a partition's items under the partition's name
/// (`sharded/leases.rs`) without copying them.
pub(crate) async fn ack_batch<I: Borrow<AckItem>>(
    store: &RedisStore,
    topics: &[&Topic],
    items: &[I],
    now_ms: u64,
) -> Vec<StoreResult<()>> {
    let now = store.now_arg(now_ms);
    store
        .run_batches(
            &store.scripts.ack_batch,
            topics,
            &[&now],
            |i| {
                let it = items[i].borrow();
                vec![it.id.as_str().as_bytes().into(), it.token.as_bytes().into()]
            },
            ack_status,
        )
        .await
}

pub(crate) async fn nack_batch<I: Borrow<NackItem>>(
    store: &RedisStore,
    topics: &[&Topic],
    items: &[I],
    now_ms: u64,
) -> Vec<StoreResult<NackOutcome>> {
    let now = store.now_arg(now_ms);
    // One seed per call (scripts may not call a random source); each
    // item's jitter is drawn from it by its place in the call.
    let seed = rand::random::<f64>().to_string();
    store
        .run_batches(
            &store.scripts.nack_batch,
            topics,
            &[&now, seed.as_bytes()],
            |i| {
                let it = items[i].borrow();
                vec![
                    it.id.as_str().as_bytes().into(),
                    it.token.as_bytes().into(),
                    clip_error(&it.error).as_bytes().into(),
                    opt(it.retry_in_ms).into(),
                    (if it.dead { b"1" } else { b"0" })[..].into(),
                    opt(it.priority).into(),
                ]
            },
            |v| decode_nacked(&status(v)?),
        )
        .await
}

pub(crate) async fn touch_batch<I: Borrow<TouchItem>>(
    store: &RedisStore,
    topics: &[&Topic],
    items: &[I],
    now_ms: u64,
) -> Vec<StoreResult<u64>> {
    let now = store.now_arg(now_ms);
    store
        .run_batches(
            &store.scripts.touch_batch,
            topics,
            &[&now],
            |i| {
                let it = items[i].borrow();
                vec![
                    it.id.as_str().as_bytes().into(),
                    it.token.as_bytes().into(),
                    opt(it.lease_ms).into(),
                ]
            },
            status_time,
        )
        .await
}

pub(crate) async fn ack_and_write(
    store: &RedisStore,
    topic: &Topic,
    url: &str,
    items: &[dq_core::forward::AckWrite<'_>],
    now_ms: u64,
) -> StoreResult<Vec<Option<StoreResult<()>>>> {
    if items.is_empty()
        || store.conn.is_cluster()
        || !crate::forward::same_server(store.pubsub[0].get_connection_info(), url)
    {
        return Ok(vec![None; items.len()]);
    }
    let mut args: Vec<Vec<u8>> = Vec::with_capacity(1 + items.len() * 12);
    args.push(store.now_arg(now_ms));
    for it in items {
        args.push(it.id.as_str().as_bytes().to_vec());
        args.push(it.token.as_bytes().to_vec());
        args.extend(crate::forward::args(it.write));
    }
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let v = store.run(&store.scripts.forward, topic, &refs).await?;
    let replies = match v {
        Value::Array(a) if a.len() == items.len() => a,
        _ => return Err(StoreError::Unavailable("forward reply length".into())),
    };
    Ok(replies.iter().map(|r| Some(forward_status(r))).collect())
}

pub(crate) async fn nack(
    store: &RedisStore,
    topic: &Topic,
    id: &JobId,
    nack: Nack<'_>,
    now_ms: u64,
) -> StoreResult<NackOutcome> {
    // Jitter is drawn here (scripts may not call a random source);
    // dead at once needs none.
    let rand = if nack.dead {
        "0".to_string()
    } else {
        rand::random::<f64>().to_string()
    };
    let v = store
        .run(
            &store.scripts.nack,
            topic,
            &[
                id.as_str().as_bytes(),
                nack.token.as_bytes(),
                clip_error(nack.error).as_bytes(),
                &opt(nack.retry_in_ms),
                &store.now_arg(now_ms),
                rand.as_bytes(),
                if nack.dead { b"1" } else { b"0" },
                &opt(nack.priority),
            ],
        )
        .await?;
    decode_nacked(&status(&v)?)
}

pub(crate) async fn release(
    store: &RedisStore,
    topic: &Topic,
    id: &JobId,
    token: &str,
    delay_ms: u64,
    how: GiveBack,
    now_ms: u64,
) -> StoreResult<u64> {
    let v = store
        .run(
            &store.scripts.release,
            topic,
            &[
                id.as_str().as_bytes(),
                token.as_bytes(),
                &n(delay_ms),
                &store.now_arg(now_ms),
                match how {
                    GiveBack::Released => b"r",
                    GiveBack::Dropped => b"d",
                },
            ],
        )
        .await?;
    status_time(&v)
}

/// Runs `script` (touch) on a held job: its arguments are the id, the
/// token, one value and now; it answers a status or a time.
async fn held_call(
    store: &RedisStore,
    script: &redis::Script,
    topic: &Topic,
    id: &JobId,
    token: &str,
    value: &[u8],
    now_ms: u64,
) -> StoreResult<u64> {
    let v = store
        .run(
            script,
            topic,
            &[
                id.as_str().as_bytes(),
                token.as_bytes(),
                value,
                &store.now_arg(now_ms),
            ],
        )
        .await?;
    status_time(&v)
}

/// A `{1, time}` status reply's time (touch's deadline, release's due).
fn status_time(v: &Value) -> StoreResult<u64> {
    let items = status(v)?;
    int(items
        .get(1)
        .ok_or_else(|| protocol("status without a time"))?)
    .map(|t| t as u64)
}

/// nack's `{1, due, attempt}` or `{2, attempt}`.
fn decode_nacked(items: &[Value]) -> StoreResult<NackOutcome> {
    let at = |i: usize| int(items.get(i).ok_or_else(|| protocol("nack reply length"))?);
    match at(0)? {
        1 => Ok(NackOutcome::Retry {
            due_at_ms: at(1)? as u64,
            attempt: at(2)? as u32,
        }),
        _ => Ok(NackOutcome::Dead {
            attempt: at(1)? as u32,
        }),
    }
}
