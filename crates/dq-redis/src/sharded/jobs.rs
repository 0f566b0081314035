//! Jobs of a partitioned topic: enqueue (each job to its id's partition; a
//! generated id names a partition whose shard answers, and is chosen again
//! when that shard fails), import_jobs, get, cancel and reschedule (on the
//! job's partition), the listings (every partition's, merged; list_jobs
//! partition by partition), and dead letters (replay, purge).

use std::collections::HashMap;

use dq_core::store::StoreResult;
use dq_core::*;
use futures::future::join_all;

use super::ShardedStore;
use super::routing::partition_of;

pub(super) async fn enqueue(
    store: &ShardedStore,
    topic: &Topic,
    jobs: &[NewJob],
    now_ms: u64,
) -> StoreResult<Vec<Enqueued>> {
    let n = store.partition_count(topic).await?;
    if n == 1 {
        let r = store.store(topic).enqueue(topic, jobs, now_ms).await;
        store.note(topic, &r);
        return r;
    }
    let mut results: Vec<Option<Enqueued>> = vec![None; jobs.len()];
    // Jobs still to place: (index in `jobs`, the job as placed with its
    // id, whether this store chose the id).
    let mut pending: Vec<(usize, NewJob, bool)> = Vec::with_capacity(jobs.len());
    let mut healthy = store.healthy_partitions(topic, n);
    for (i, j) in jobs.iter().enumerate() {
        let mut j = j.clone();
        let generated = j.id.is_none();
        if generated {
            j.id = Some(store.generated_id(&healthy)?);
        }
        pending.push((i, j, generated));
    }
    for _round in 0..3 {
        let mut groups: HashMap<u32, Vec<(usize, NewJob, bool)>> = HashMap::new();
        for (i, j, generated) in pending.drain(..) {
            let id = j.id.as_ref().expect("every id chosen above");
            groups
                .entry(partition_of(id.as_str(), n))
                .or_default()
                .push((i, j, generated));
        }
        let calls = groups.into_iter().map(|(p, group)| async move {
            let part = topic.partition(p);
            let batch: Vec<NewJob> = group.iter().map(|(_, j, _)| j.clone()).collect();
            let r = store.store(&part).enqueue(&part, &batch, now_ms).await;
            (part, group, r)
        });
        let mut failure = None;
        for (part, group, r) in join_all(calls).await {
            store.note(&part, &r);
            match r {
                Ok(done) => {
                    for ((i, _, _), e) in group.into_iter().zip(done) {
                        results[i] = Some(e);
                    }
                }
                // Jobs with generated ids go to a partition that answers.
                Err(StoreError::Unavailable(e))
                    if group.iter().all(|(_, _, generated)| *generated) =>
                {
                    failure.get_or_insert(StoreError::Unavailable(e));
                    pending.extend(group);
                }
                Err(e) => return Err(e),
            }
        }
        if pending.is_empty() {
            break;
        }
        healthy = store.healthy_partitions(topic, n);
        for (_, j, _) in &mut pending {
            j.id = Some(store.generated_id(&healthy)?);
        }
        if pending.len() == jobs.len() && healthy.len() == n as usize {
            // Nothing answered and no shard is marked down: give up.
            return Err(failure.expect("a failure"));
        }
    }
    if !pending.is_empty() {
        return Err(StoreError::Unavailable(
            "no Redis shard of this topic answers".into(),
        ));
    }
    Ok(results
        .into_iter()
        .map(|e| e.expect("every job placed"))
        .collect())
}

pub(super) async fn import_jobs(
    store: &ShardedStore,
    topic: &Topic,
    jobs: &[ImportJob],
    now_ms: u64,
) -> StoreResult<Vec<Imported>> {
    let n = store.partition_count(topic).await?;
    let mut groups: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, j) in jobs.iter().enumerate() {
        groups
            .entry(partition_of(j.id.as_str(), n))
            .or_default()
            .push(i);
    }
    let calls = groups.into_iter().map(|(p, idx)| async move {
        let part = topic.partition(p);
        let batch: Vec<ImportJob> = idx.iter().map(|i| jobs[*i].clone()).collect();
        let r = store.store(&part).import_jobs(&part, &batch, now_ms).await;
        store.note(&part, &r);
        (idx, r)
    });
    let mut results: Vec<Option<Imported>> = vec![None; jobs.len()];
    for (idx, r) in join_all(calls).await {
        for (i, done) in idx.into_iter().zip(r?) {
            results[i] = Some(done);
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every job imported"))
        .collect())
}

pub(super) async fn get(
    store: &ShardedStore,
    topic: &Topic,
    id: &JobId,
) -> StoreResult<Option<JobInfo>> {
    store
        .on_job(topic, id, |s, p| async move { s.get(&p, id).await })
        .await
}

pub(super) async fn cancel(
    store: &ShardedStore,
    topic: &Topic,
    id: &JobId,
    now_ms: u64,
) -> StoreResult<Option<JobState>> {
    store
        .on_job(
            topic,
            id,
            |s, p| async move { s.cancel(&p, id, now_ms).await },
        )
        .await
}

pub(super) async fn reschedule(
    store: &ShardedStore,
    topic: &Topic,
    id: &JobId,
    due_at_ms: u64,
    kick: bool,
    now_ms: u64,
) -> StoreResult<()> {
    store
        .on_job(topic, id, |s, p| async move {
            s.reschedule(&p, id, due_at_ms, kick, now_ms).await
        })
        .await
}

/// Each partition's first `offset + limit`, merged: the page is the
/// merge's `limit` after `offset`.
pub(super) async fn list_ready(
    store: &ShardedStore,
    topic: &Topic,
    offset: usize,
    limit: usize,
) -> StoreResult<Vec<JobInfo>> {
    let upto = offset.saturating_add(limit);
    let all = store
        .each(topic, false, |s, p| async move {
            s.list_ready(&p, 0, upto).await
        })
        .await?;
    ShardedStore::merged(
        all,
        // Each partition lists its jobs without a key in hand-out order,
        // then its keys' lanes: the merge orders by what every partition's
        // list already follows (a stable sort, partitions in turn on ties),
        // so a page is the same whatever offset each partition was cut at.
        // A job in put order is ranked by its put time (common.lua's rank()).
        |a, b| {
            let rank = |j: &JobInfo| match j.key {
                None if j.put_delay_ms.is_some() => (0, j.priority, j.created_at_ms),
                None => (0, j.priority, j.due_at_ms),
                Some(_) => (1, 0, 0),
            };
            rank(a).cmp(&rank(b))
        },
        offset,
        limit,
    )
}

/// As [`list_ready`].
pub(super) async fn list_scheduled(
    store: &ShardedStore,
    topic: &Topic,
    offset: usize,
    limit: usize,
) -> StoreResult<Vec<JobInfo>> {
    let upto = offset.saturating_add(limit);
    let all = store
        .each(topic, false, |s, p| async move {
            s.list_scheduled(&p, 0, upto).await
        })
        .await?;
    ShardedStore::merged(
        all,
        // By due time only, stable: as every partition lists them.
        |a, b| a.due_at_ms.cmp(&b.due_at_ms),
        offset,
        limit,
    )
}

/// Partition by partition: the cursor is `<partition>.<that
/// partition's cursor>`, and a partition's end goes on to the next.
pub(super) async fn list_jobs(
    store: &ShardedStore,
    topic: &Topic,
    state: Option<JobState>,
    cursor: Option<&str>,
    limit: usize,
) -> StoreResult<JobPage> {
    let n = store.partition_count(topic).await?;
    let bad = || {
        StoreError::Invalid(InvalidInput::new(
            "invalid_cursor",
            "cursor is not one this store handed out: start again without one",
        ))
    };
    let (p, inner) = match cursor {
        None => (0, None),
        Some(c) => {
            let (p, rest) = c.split_once('.').ok_or_else(bad)?;
            let p: u32 = p.parse().map_err(|_| bad())?;
            (p, Some(rest).filter(|r| !r.is_empty()))
        }
    };
    if p >= n {
        return Err(bad());
    }
    let part = topic.partition(p);
    let r = store
        .store(&part)
        .list_jobs(&part, state, inner, limit)
        .await;
    store.note(&part, &r);
    let page = r?;
    let cursor = match page.cursor {
        Some(c) => Some(format!("{p}.{c}")),
        None if p + 1 < n => Some(format!("{}.", p + 1)),
        None => None,
    };
    Ok(JobPage {
        jobs: page.jobs,
        cursor,
    })
}

pub(super) async fn list_dead(
    store: &ShardedStore,
    topic: &Topic,
    offset: usize,
    limit: usize,
) -> StoreResult<Vec<JobInfo>> {
    let want = offset.saturating_add(limit);
    let all = store
        .each(topic, false, |s, p| async move {
            s.list_dead(&p, 0, want).await
        })
        .await?;
    ShardedStore::merged(
        all,
        |a, b| (a.died_at_ms, a.id.as_str()).cmp(&(b.died_at_ms, b.id.as_str())),
        offset,
        limit,
    )
}

pub(super) async fn replay_dead(
    store: &ShardedStore,
    topic: &Topic,
    ids: Option<&[JobId]>,
    max: usize,
    now_ms: u64,
) -> StoreResult<u64> {
    let Some(ids) = ids else {
        return store
            .up_to(topic, max, |s, p, left| async move {
                s.replay_dead(&p, None, left, now_ms).await
            })
            .await;
    };
    let n = store.partition_count(topic).await?;
    let mut groups: HashMap<u32, Vec<JobId>> = HashMap::new();
    for id in ids {
        groups
            .entry(partition_of(id.as_str(), n))
            .or_default()
            .push(id.clone());
    }
    let mut total = 0;
    for (p, ids) in groups {
        let part = topic.partition(p);
        let r = store
            .store(&part)
            .replay_dead(&part, Some(&ids), ids.len(), now_ms)
            .await;
        store.note(&part, &r);
        total += r?;
    }
    Ok(total)
}

pub(super) async fn purge_dead(
    store: &ShardedStore,
    topic: &Topic,
    max: usize,
) -> StoreResult<u64> {
    store
        .up_to(topic, max, |s, p, left| async move {
            s.purge_dead(&p, left).await
        })
        .await
}
