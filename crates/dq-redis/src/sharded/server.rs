//! What is not a topic's: memory (summed over shards), named counters and
//! records (on the first shard), the clock and the members (the first
//! shard that answers), ping and health (per shard), wake-ups (from every
//! shard, partitions named as their topic).

use dq_core::store::StoreResult;
use dq_core::*;
use futures::future::join_all;

use super::ShardedStore;

/// The sum over the shards; unknown while any does not answer.
pub(super) async fn size_bytes(store: &ShardedStore) -> StoreResult<Option<u64>> {
    let mut total = 0;
    let now = store.now_ms();
    for s in &store.shards {
        if s.is_down(now) {
            return Ok(None);
        }
        match s.store.size_bytes().await {
            Ok(Some(b)) => total += b,
            _ => return Ok(None),
        }
    }
    Ok(Some(total))
}

/// Counters live on the first shard (while it is down, they cannot move).
pub(super) async fn next_seq(store: &ShardedStore, name: &str) -> StoreResult<u64> {
    store.shards[0].store.next_seq(name).await
}

// Named records (schedules) live on the first shard, as the counters do.
pub(super) async fn put_record(
    store: &ShardedStore,
    kind: &str,
    name: &str,
    value: &str,
    mark: u64,
) -> StoreResult<bool> {
    store.shards[0]
        .store
        .put_record(kind, name, value, mark)
        .await
}

pub(super) async fn get_record(
    store: &ShardedStore,
    kind: &str,
    name: &str,
) -> StoreResult<Option<Record>> {
    store.shards[0].store.get_record(kind, name).await
}

pub(super) async fn list_records(
    store: &ShardedStore,
    kind: &str,
) -> StoreResult<Vec<(String, Record)>> {
    store.shards[0].store.list_records(kind).await
}

pub(super) async fn delete_record(
    store: &ShardedStore,
    kind: &str,
    name: &str,
) -> StoreResult<bool> {
    store.shards[0].store.delete_record(kind, name).await
}

pub(super) async fn raise_mark(
    store: &ShardedStore,
    kind: &str,
    name: &str,
    mark: u64,
) -> StoreResult<Option<u64>> {
    store.shards[0].store.raise_mark(kind, name, mark).await
}

/// The first answering shard's clock (each shard decides its own
/// partitions by its own clock; they should agree within milliseconds).
pub(super) async fn time_ms(store: &ShardedStore) -> StoreResult<Option<u64>> {
    let mut last = Ok(None);
    let now = store.now_ms();
    for s in &store.shards {
        if s.is_down(now) {
            continue;
        }
        match s.store.time_ms().await {
            Ok(t) => return Ok(t),
            Err(e) => last = Err(e),
        }
    }
    last
}

pub(super) async fn members(
    store: &ShardedStore,
    me: &str,
    now_ms: u64,
    ttl_ms: u64,
) -> StoreResult<Vec<String>> {
    // Kept on the first shard that answers (while shard 0 is down, two
    // instances may both dispatch a topic for a while: that is safe).
    let mut first_err = None;
    for s in &store.shards {
        match s.store.members(me, now_ms, ttl_ms).await {
            Ok(m) => return Ok(m),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    Err(first_err.expect("a shard"))
}

pub(super) async fn ping(store: &ShardedStore) -> StoreResult<()> {
    // Ready while any shard answers: the others delay only their jobs.
    let all = join_all(store.shards.iter().map(|s| s.store.ping())).await;
    if all.iter().any(Result::is_ok) {
        return Ok(());
    }
    all.into_iter().next().expect("a shard")
}

pub(super) async fn health(store: &ShardedStore) -> Vec<(String, StoreResult<()>)> {
    let all = join_all(store.shards.iter().map(|s| s.store.ping())).await;
    store
        .shards
        .iter()
        .map(|s| s.name.clone())
        .zip(all)
        .collect()
}

pub(super) async fn watch_wakes(store: &ShardedStore, on_wake: WakeFn) {
    // Wake-ups name partitions: pass on the topic.
    let on_topic: WakeFn = std::sync::Arc::new(move |name: &str| match name.split_once('#') {
        Some((t, _)) => on_wake(t),
        None => on_wake(name),
    });
    join_all(
        store
            .shards
            .iter()
            .map(|s| s.store.watch_wakes(on_topic.clone())),
    )
    .await;
}
