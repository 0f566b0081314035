//! Dead letters: list_dead (`lua/get.lua`, oldest death first),
//! replay_dead (`lua/replay_dead.lua`) and purge_dead
//! (`lua/purge_dead.lua`).

use dq_core::store::StoreResult;
use dq_core::*;

use super::jobs::decode_jobs;
use super::n;
use crate::RedisStore;
use crate::decode::int;

pub(crate) async fn list_dead(
    store: &RedisStore,
    topic: &Topic,
    offset: usize,
    limit: usize,
) -> StoreResult<Vec<JobInfo>> {
    let v = store
        .run(
            &store.scripts.get,
            topic,
            &[b"d", &n(offset as u64), &n(limit.max(1) as u64)],
        )
        .await?;
    decode_jobs(v)
}

pub(crate) async fn replay_dead(
    store: &RedisStore,
    topic: &Topic,
    ids: Option<&[JobId]>,
    max: usize,
    now_ms: u64,
) -> StoreResult<u64> {
    let mut args: Vec<&[u8]> = Vec::new();
    let now = store.now_arg(now_ms);
    let max = n(max.max(1) as u64);
    args.push(&now);
    args.push(&max);
    if let Some(ids) = ids {
        if ids.is_empty() {
            return Ok(0);
        }
        args.extend(ids.iter().map(|i| i.as_str().as_bytes()));
    }
    let v = store.run(&store.scripts.replay_dead, topic, &args).await?;
    Ok(int(&v)? as u64)
}

pub(crate) async fn purge_dead(store: &RedisStore, topic: &Topic, max: usize) -> StoreResult<u64> {
    let v = store
        .run(&store.scripts.purge_dead, topic, &[&n(max.max(1) as u64)])
        .await?;
    Ok(int(&v)? as u64)
}
