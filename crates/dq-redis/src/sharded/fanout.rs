//! Running a verb over a topic's partitions, each on its shard, and
//! putting their answers together: on the partition of one job
//! ([`ShardedStore::on_job`]), on every partition side by side (`each`),
//! in turn up to a total (`up_to`), starting at a rotating one
//! (`rotation`); lists merged in order, results gathered while some
//! partition answers, batch results put back in item order (`scatter`).
//! Every shard failure is noted ([`ShardedStore::note`]).

use std::sync::atomic::Ordering;

use dq_core::store::StoreResult;
use dq_core::*;
use futures::future::join_all;

use super::ShardedStore;
use crate::RedisStore;

/// A batch verb's results in item order: each shard call's results (`done`:
/// its items' places and their results) where they belong, and the error of
/// each item whose partition could not be told (`parts`).
pub(super) fn scatter<R>(
    parts: &[StoreResult<Topic>],
    done: Vec<(Vec<usize>, Vec<StoreResult<R>>)>,
) -> Vec<StoreResult<R>> {
    let mut out: Vec<Option<StoreResult<R>>> = parts
        .iter()
        .map(|p| p.as_ref().err().map(|e| Err(e.clone())))
        .collect();
    for (idx, done) in done {
        for (i, r) in idx.into_iter().zip(done) {
            out[i] = Some(r);
        }
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(StoreError::Unavailable("no answer for the item".into()))))
        .collect()
}

pub(super) fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

impl ShardedStore {
    /// Runs `f` on the partition holding job `id`, noting a shard failure.
    pub(super) async fn on_job<'a, T, F, Fut>(
        &'a self,
        topic: &Topic,
        id: &JobId,
        f: F,
    ) -> StoreResult<T>
    where
        F: FnOnce(&'a RedisStore, Topic) -> Fut,
        Fut: std::future::Future<Output = StoreResult<T>>,
    {
        let part = self.part_of(topic, id).await?;
        let r = f(&self.shards[self.shard_index(&part)].store, part.clone()).await;
        self.note(&part, &r);
        r
    }

    /// The partitions of `t`, starting at a rotating one.
    pub(super) fn rotation(&self, n: u32) -> impl Iterator<Item = u32> {
        let start = (self.next.fetch_add(1, Ordering::Relaxed) % n as usize) as u32;
        (0..n).map(move |k| (start + k) % n)
    }

    /// Runs `f` on every partition of `t` (concurrently), with the results in
    /// partition order; partitions on shards known to be down are skipped
    /// when `skip_down`.
    pub(super) async fn each<'a, T, F, Fut>(
        &'a self,
        t: &Topic,
        skip_down: bool,
        f: F,
    ) -> StoreResult<Vec<(Topic, StoreResult<T>)>>
    where
        F: Fn(&'a RedisStore, Topic) -> Fut,
        Fut: std::future::Future<Output = StoreResult<T>>,
    {
        let n = self.partition_count(t).await?;
        let parts: Vec<Topic> = (0..n)
            .map(|p| t.partition(p))
            .filter(|p| !(skip_down && self.is_down(p)))
            .collect();
        let results = join_all(
            parts
                .iter()
                .map(|p| f(&self.shards[self.shard_index(p)].store, p.clone())),
        )
        .await;
        for (p, r) in parts.iter().zip(&results) {
            self.note(p, r);
        }
        Ok(parts.into_iter().zip(results).collect())
    }

    /// Every partition's list as one, in the order `cmp` gives, `offset`
    /// skipped and at most `limit` kept (errors as [`Self::gathered`]).
    pub(super) fn merged(
        lists: Vec<(Topic, StoreResult<Vec<JobInfo>>)>,
        cmp: impl Fn(&JobInfo, &JobInfo) -> std::cmp::Ordering,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        let mut jobs: Vec<JobInfo> = Self::gathered(lists)?.into_iter().flatten().collect();
        jobs.sort_by(cmp);
        Ok(jobs.into_iter().skip(offset).take(limit).collect())
    }

    /// The results that succeeded; an error when none did (and some failed).
    pub(super) fn gathered<T>(results: Vec<(Topic, StoreResult<T>)>) -> StoreResult<Vec<T>> {
        let mut ok = Vec::new();
        let mut first_err = None;
        let total = results.len();
        for (_, r) in results {
            match r {
                Ok(v) => ok.push(v),
                Err(e) => {
                    if !matches!(e, StoreError::Unavailable(_)) {
                        return Err(e);
                    }
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) if ok.is_empty() && total > 0 => Err(e),
            _ => Ok(ok),
        }
    }

    /// Runs `f(store, partition, left)` on the partitions of `t` in order
    /// until `max` is reached in all (replay and purge of the oldest dead
    /// letters); returns the sum.
    pub(super) async fn up_to<'a, F, Fut>(&'a self, t: &Topic, max: usize, f: F) -> StoreResult<u64>
    where
        F: Fn(&'a RedisStore, Topic, usize) -> Fut,
        Fut: std::future::Future<Output = StoreResult<u64>>,
    {
        let n = self.partition_count(t).await?;
        let mut total = 0;
        for p in 0..n {
            if total >= max as u64 {
                break;
            }
            let part = t.partition(p);
            let r = f(
                &self.shards[self.shard_index(&part)].store,
                part.clone(),
                max - total as usize,
            )
            .await;
            self.note(&part, &r);
            total += r?;
        }
        Ok(total)
    }
}
