//! The server itself, not a topic: ping, time_ms (the clock that decides,
//! see `TimeSource`), size_bytes (its memory), members (the dq instances
//! seen lately), watch_wakes (wake-ups over pub/sub).

use std::time::Duration;

use dq_core::store::StoreResult;
use dq_core::*;
use futures::StreamExt;

use crate::conn::unavailable;
use crate::{RedisStore, TimeSource};

pub(crate) async fn size_bytes(store: &RedisStore) -> StoreResult<Option<u64>> {
    if store.conn.is_cluster() {
        // INFO goes to one node of a Cluster: not the whole.
        return Ok(None);
    }
    let mut conn = store.conn.clone();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok()))
}

pub(crate) async fn time_ms(store: &RedisStore) -> StoreResult<Option<u64>> {
    if store.clock == TimeSource::Caller {
        return Ok(None);
    }
    let mut conn = store.conn.clone();
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    Ok(Some(secs * 1000 + micros / 1000))
}

pub(crate) async fn members(
    store: &RedisStore,
    me: &str,
    now_ms: u64,
    ttl_ms: u64,
) -> StoreResult<Vec<String>> {
    let key = store.keys.members();
    let mut conn = store.conn.clone();
    let (members,): (Vec<String>,) = redis::pipe()
        .atomic()
        .zadd(&key, me, now_ms)
        .ignore()
        .zrembyscore(&key, "-inf", format!("({}", now_ms.saturating_sub(ttl_ms)))
        .ignore()
        .zrange(&key, 0, -1)
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    Ok(members)
}

pub(crate) async fn ping(store: &RedisStore) -> StoreResult<()> {
    let mut conn = store.conn.clone();
    let _: String = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    Ok(())
}

pub(crate) async fn watch_wakes(store: &RedisStore, on_wake: WakeFn) {
    let channel = store.keys.wake_channel();
    let mut next = 0;
    loop {
        let client = &store.pubsub[next % store.pubsub.len()];
        next += 1;
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => {
                if let Err(e) = pubsub.subscribe(&channel).await {
                    tracing::warn!(error = %e, "cannot subscribe to wake-ups; retrying");
                } else {
                    // A wake-up may have been missed while disconnected:
                    // tell every waiter to look again.
                    on_wake("");
                    let mut stream = pubsub.on_message();
                    while let Some(msg) = stream.next().await {
                        if let Ok(topic) = msg.get_payload::<String>() {
                            on_wake(&topic);
                        }
                    }
                    tracing::warn!("wake-up subscription lost; reconnecting");
                }
            }
            Err(e) => tracing::debug!(error = %e, "wake-up subscription cannot connect"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
