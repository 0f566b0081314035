//! Handing jobs out and taking them back over partitions: reserve (the
//! partitions in turn from a rotating one, shards known down skipped),
//! reserve_job and what a lease holder does (on the job's partition), the
//! batches (one call per shard), ack_and_write (per partition, on its
//! shard), and the dispatcher's passes (every partition whose shard
//! answers).

use std::collections::HashMap;

use dq_core::store::StoreResult;
use dq_core::*;
use futures::future::join_all;

use super::ShardedStore;
use super::fanout::{min_opt, scatter};
use super::routing::partition_of;
use crate::{RedisStore, verbs};

pub(super) async fn reserve(
    store: &ShardedStore,
    topic: &Topic,
    max: usize,
    lease_ms: Option<u64>,
    now_ms: u64,
) -> StoreResult<Reservation> {
    let n = store.partition_count(topic).await?;
    if n == 1 {
        if store.fails_fast(topic) {
            return Err(store.down_error(topic));
        }
        let r = store
            .store(topic)
            .reserve(topic, max, lease_ms, now_ms)
            .await;
        store.note(topic, &r);
        return r;
    }
    let mut out = Reservation {
        leases: Vec::new(),
        next_due_ms: None,
        expired: Vec::new(),
    };
    let mut failure = None;
    let mut answered = false;
    for p in store.rotation(n) {
        let part = topic.partition(p);
        if store.is_down(&part) {
            continue;
        }
        let want = max - out.leases.len();
        let r = store
            .store(&part)
            .reserve(&part, want, lease_ms, now_ms)
            .await;
        store.note(&part, &r);
        match r {
            Ok(c) => {
                answered = true;
                out.next_due_ms = min_opt(out.next_due_ms, c.next_due_ms);
                out.expired.extend(c.expired);
                out.leases.extend(c.leases.into_iter().map(|mut l| {
                    l.topic = topic.clone();
                    l
                }));
                if out.leases.len() >= max {
                    break;
                }
            }
            Err(e @ StoreError::Unavailable(_)) => {
                failure.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    match failure {
        Some(e) if !answered => Err(e),
        _ => Ok(out),
    }
}

pub(super) async fn reserve_job(
    store: &ShardedStore,
    topic: &Topic,
    id: &JobId,
    lease_ms: Option<u64>,
    now_ms: u64,
) -> StoreResult<Option<Lease>> {
    let lease = store
        .on_job(topic, id, |s, p| async move {
            s.reserve_job(&p, id, lease_ms, now_ms).await
        })
        .await?;
    // The lease names the partition; callers know the topic.
    Ok(lease.map(|l| Lease {
        topic: topic.clone(),
        ..l
    }))
}

pub(super) async fn touch(
    store: &ShardedStore,
    topic: &Topic,
    id: &JobId,
    token: &str,
    lease_ms: Option<u64>,
    now_ms: u64,
) -> StoreResult<u64> {
    store
        .on_job(topic, id, |s, p| async move {
            s.touch(&p, id, token, lease_ms, now_ms).await
        })
        .await
}

pub(super) async fn ack(
    store: &ShardedStore,
    topic: &Topic,
    id: &JobId,
    token: &str,
    now_ms: u64,
) -> StoreResult<()> {
    store
        .on_job(topic, id, |s, p| async move {
            s.ack(&p, id, token, now_ms).await
        })
        .await
}

pub(super) async fn nack(
    store: &ShardedStore,
    topic: &Topic,
    id: &JobId,
    nack: Nack<'_>,
    now_ms: u64,
) -> StoreResult<NackOutcome> {
    store
        .on_job(topic, id, |s, p| async move {
            s.nack(&p, id, nack, now_ms).await
        })
        .await
}

pub(super) async fn release(
    store: &ShardedStore,
    topic: &Topic,
    id: &JobId,
    token: &str,
    delay_ms: u64,
    how: GiveBack,
    now_ms: u64,
) -> StoreResult<u64> {
    store
        .on_job(topic, id, |s, p| async move {
            s.release(&p, id, token, delay_ms, how, now_ms).await
        })
        .await
}

pub(super) async fn ack_batch(
    store: &ShardedStore,
    items: &[AckItem],
    now_ms: u64,
) -> Vec<StoreResult<()>> {
    let keys: Vec<_> = items.iter().map(|it| (&it.topic, &it.id)).collect();
    let (parts, groups) = store.shard_groups(&keys).await;
    let calls = ShardBatch::all(store, &parts, groups, items).map(|b| async move {
        let done = verbs::leases::ack_batch(b.shard, &b.topics, &b.items, now_ms).await;
        b.done(store, done)
    });
    scatter(&parts, join_all(calls).await)
}

pub(super) async fn nack_batch(
    store: &ShardedStore,
    items: &[NackItem],
    now_ms: u64,
) -> Vec<StoreResult<NackOutcome>> {
    let keys: Vec<_> = items.iter().map(|it| (&it.topic, &it.id)).collect();
    let (parts, groups) = store.shard_groups(&keys).await;
    let calls = ShardBatch::all(store, &parts, groups, items).map(|b| async move {
        let done = verbs::leases::nack_batch(b.shard, &b.topics, &b.items, now_ms).await;
        b.done(store, done)
    });
    scatter(&parts, join_all(calls).await)
}

pub(super) async fn touch_batch(
    store: &ShardedStore,
    items: &[TouchItem],
    now_ms: u64,
) -> Vec<StoreResult<u64>> {
    let keys: Vec<_> = items.iter().map(|it| (&it.topic, &it.id)).collect();
    let (parts, groups) = store.shard_groups(&keys).await;
    let calls = ShardBatch::all(store, &parts, groups, items).map(|b| async move {
        let done = verbs::leases::touch_batch(b.shard, &b.topics, &b.items, now_ms).await;
        b.done(store, done)
    });
    scatter(&parts, join_all(calls).await)
}

/// The items of a batch verb that go to one shard, each with its
/// partition's name beside it (the shard's verb takes the topics apart
/// from the items, so nothing is copied).
struct ShardBatch<'a, T> {
    shard: &'a RedisStore,
    /// The items' places in the whole batch.
    idx: Vec<usize>,
    topics: Vec<&'a Topic>,
    items: Vec<&'a T>,
}

impl<'a, T> ShardBatch<'a, T> {
    /// A batch per shard, as [`ShardedStore::shard_groups`] answers:
    /// `groups` maps a shard to the places of its items, `parts` is each
    /// item's partition. Only items with a partition are in a group (the
    /// others [`scatter`] answers with their error), so every place of `idx`
    /// has its item here and its result in [`ShardBatch::done`].
    fn all(
        store: &'a ShardedStore,
        parts: &'a [StoreResult<Topic>],
        groups: HashMap<usize, Vec<usize>>,
        items: &'a [T],
    ) -> impl Iterator<Item = Self> {
        groups.into_iter().map(move |(shard, idx)| {
            let (topics, batch) = idx
                .iter()
                .map(|&i| {
                    let part = parts[i].as_ref().expect("grouped items have a partition");
                    (part, &items[i])
                })
                .unzip();
            Self {
                shard: &store.shards[shard].store,
                idx,
                topics,
                items: batch,
            }
        })
    }

    /// Notes each result for the shard's health; the results with their
    /// places, for [`scatter`].
    fn done<R>(
        self,
        store: &ShardedStore,
        done: Vec<StoreResult<R>>,
    ) -> (Vec<usize>, Vec<StoreResult<R>>) {
        for (t, r) in self.topics.iter().zip(&done) {
            store.note(t, r);
        }
        (self.idx, done)
    }
}

pub(super) async fn ack_and_write(
    store: &ShardedStore,
    topic: &Topic,
    url: &str,
    items: &[dq_core::forward::AckWrite<'_>],
    now_ms: u64,
) -> StoreResult<Vec<Option<StoreResult<()>>>> {
    let n = store.partition_count(topic).await?;
    // Each partition's shard does its own items (in their order), if
    // that shard is the target's server.
    let mut groups: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, it) in items.iter().enumerate() {
        groups
            .entry(partition_of(it.id.as_str(), n))
            .or_default()
            .push(i);
    }
    let calls = groups.into_iter().map(|(p, idx)| async move {
        let part = topic.partition(p);
        let batch: Vec<_> = idx.iter().map(|&i| items[i]).collect();
        let r = store
            .store(&part)
            .ack_and_write(&part, url, &batch, now_ms)
            .await;
        store.note(&part, &r);
        (idx, r)
    });
    let mut out = vec![None; items.len()];
    for (idx, r) in join_all(calls).await {
        match r {
            Ok(done) => {
                for (i, d) in idx.into_iter().zip(done) {
                    out[i] = d;
                }
            }
            Err(e) => {
                for i in idx {
                    out[i] = Some(Err(e.clone()));
                }
            }
        }
    }
    Ok(out)
}

pub(super) async fn promote_due(
    store: &ShardedStore,
    topic: &Topic,
    max: usize,
    now_ms: u64,
) -> StoreResult<Promoted> {
    let all = store
        .each(topic, true, |s, p| async move {
            s.promote_due(&p, max, now_ms).await
        })
        .await?;
    let mut out = Promoted {
        moved: 0,
        next_due_ms: None,
    };
    for p in ShardedStore::gathered(all)? {
        // The dispatcher goes again while `moved` reaches its batch size:
        // a sum reaches it whenever one partition's batch was full.
        out.moved += p.moved;
        out.next_due_ms = min_opt(out.next_due_ms, p.next_due_ms);
    }
    Ok(out)
}

pub(super) async fn requeue_expired(
    store: &ShardedStore,
    topic: &Topic,
    max: usize,
    now_ms: u64,
) -> StoreResult<Requeued> {
    let all = store
        .each(topic, true, |s, p| async move {
            s.requeue_expired(&p, max, now_ms).await
        })
        .await?;
    let mut out = Requeued::default();
    for r in ShardedStore::gathered(all)? {
        out.retried += r.retried;
        out.dead += r.dead;
        out.next_deadline_ms = min_opt(out.next_deadline_ms, r.next_deadline_ms);
        out.jobs.extend(r.jobs);
    }
    Ok(out)
}
