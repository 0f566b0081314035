//! The Redis store as dq serves it: one or more shards (independent Redis
//! servers, or one Redis Cluster), and topics split into partitions.
//!
//! - **Partitions.** Partition `p` of topic `t` is stored as if it were its
//!   own topic, named [`Topic::partition`] (`t` for 0, `t#p` else), so each
//!   partition has its own hash tag (`dq:{t#p}:…`): its own Cluster slot,
//!   possibly its own shard. A job's partition follows from its id
//!   ([`partition_of`]); a dq-generated id names its partition
//!   (`<uuid>~p<N>`) and is placed on a partition whose shard answers.
//!   Every partition holds the topic's settings (the scripts read them); the
//!   partition count is read from partition 0 and cached for a second.
//! - **Shards.** Partition `t#p` lives on shard
//!   `jump_hash(fnv1a(t#p), shards)`: stable while the list of shards stays
//!   the same. A shard that does not answer delays only its own partitions:
//!   reserves and dispatcher passes skip it for a second after a failure, and
//!   everything else works on.
//!
//! Order (priority, then due time, then enqueue order) holds within a
//! partition; reserves visit the partitions round-robin.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use dq_core::store::StoreResult;
use dq_core::*;
use futures::future::join_all;

use crate::RedisStore;

/// How long a partition count read from Redis is trusted.
const PARTITIONS_TTL: Duration = Duration::from_secs(1);
/// How long a shard that failed is skipped by reserves and dispatcher passes.
const DOWN_FOR: Duration = Duration::from_secs(1);

struct Shard {
    name: String,
    store: RedisStore,
    /// Skipped by reserves and promotions until this instant (ms since `epoch`).
    down_until_ms: AtomicU64,
}

impl Shard {
    /// Whether it is marked down at `now_ms` (ms since `epoch`).
    fn is_down(&self, now_ms: u64) -> bool {
        self.down_until_ms.load(Ordering::Relaxed) > now_ms
    }
}

/// The dq store over one or more Redis shards, with partitioned topics.
pub struct ShardedStore {
    shards: Vec<Shard>,
    epoch: Instant,
    partitions: Mutex<HashMap<String, (u32, Instant)>>,
    next: AtomicUsize,
}

impl std::fmt::Debug for ShardedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedStore")
            .field(
                "shards",
                &self.shards.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// FNV-1a of a name (see [`dq_core::hash`]).
fn fnv1a(s: &str) -> u64 {
    dq_core::hash::fnv1a(&[s.as_bytes()])
}

/// Jump consistent hash (Lamping & Veach): a bucket in `0..n` for `key`;
/// growing `n` moves only the keys that must move.
fn jump_hash(mut key: u64, n: usize) -> usize {
    let (mut b, mut j): (i64, i64) = (-1, 0);
    while j < n as i64 {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b.max(0) as usize
}

/// The partition of job `id` in a topic of `partitions` partitions: the one
/// a generated id names (`…~p<N>`), else a stable hash of the id.
pub fn partition_of(id: &str, partitions: u32) -> u32 {
    if partitions <= 1 {
        return 0;
    }
    if let Some((_, p)) = id.rsplit_once("~p")
        && let Ok(p) = p.parse::<u32>()
        && p < partitions
    {
        return p;
    }
    (fnv1a(id) % u64::from(partitions)) as u32
}

/// A batch verb's results in item order: each shard call's results (`done`:
/// its items' places and their results) where they belong, and the error of
/// each item whose partition could not be told (`parts`).
fn scatter<R>(
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

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

impl ShardedStore {
    /// A store over `shards` (name, store), e.g. one per Redis server; one
    /// shard for a single server or a Cluster.
    ///
    /// # Panics
    /// With no shard.
    pub fn new(shards: Vec<(String, RedisStore)>) -> Self {
        assert!(!shards.is_empty(), "at least one shard");
        Self {
            shards: shards
                .into_iter()
                .map(|(name, store)| Shard {
                    name,
                    store,
                    down_until_ms: AtomicU64::new(0),
                })
                .collect(),
            epoch: Instant::now(),
            partitions: Mutex::default(),
            next: AtomicUsize::new(0),
        }
    }

    /// Loads the scripts on every shard that answers.
    ///
    /// # Errors
    /// When no shard answers.
    pub async fn load_scripts(&self) -> StoreResult<()> {
        let results = join_all(self.shards.iter().map(|s| s.store.load_scripts())).await;
        if results.iter().all(Result::is_err) {
            return results.into_iter().next().expect("a shard");
        }
        Ok(())
    }

    /// Each shard's name and store.
    pub(crate) fn shards(&self) -> impl Iterator<Item = (&str, &RedisStore)> {
        self.shards.iter().map(|s| (s.name.as_str(), &s.store))
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The shard (index in the list given to [`ShardedStore::new`]) holding
    /// partition `part` (a name from [`Topic::partition`]).
    pub fn shard_of_partition(&self, part: &Topic) -> usize {
        self.shard_index(part)
    }

    fn shard_index(&self, part: &Topic) -> usize {
        if self.shards.len() == 1 {
            0
        } else {
            jump_hash(fnv1a(part.as_str()), self.shards.len())
        }
    }

    fn shard(&self, part: &Topic) -> &Shard {
        &self.shards[self.shard_index(part)]
    }

    fn store(&self, part: &Topic) -> &RedisStore {
        &self.shard(part).store
    }

    fn is_down(&self, part: &Topic) -> bool {
        self.shard(part).is_down(self.now_ms())
    }

    /// Notes a failure of the shard of `part` (when Redis did not answer).
    fn note<T>(&self, part: &Topic, r: &StoreResult<T>) {
        if let Err(StoreError::Unavailable(e)) = r {
            let s = self.shard(part);
            let until = self.now_ms() + DOWN_FOR.as_millis() as u64;
            if s.down_until_ms.swap(until, Ordering::Relaxed) <= self.now_ms() {
                tracing::warn!(shard = %s.name, error = %e, "Redis shard not answering; its partitions wait");
            }
        }
    }

    /// Each batch item's partition (`keys`: its topic and id; the count read
    /// once per topic), and the items of each shard, in order: a batch
    /// verb makes one call per shard, whose store makes one script call per
    /// partition.
    async fn shard_groups(
        &self,
        keys: &[(&Topic, &JobId)],
    ) -> (Vec<StoreResult<Topic>>, HashMap<usize, Vec<usize>>) {
        let mut counts: HashMap<&str, StoreResult<u32>> = HashMap::new();
        let mut parts: Vec<StoreResult<Topic>> = Vec::with_capacity(keys.len());
        for (topic, id) in keys {
            let n = match counts.get(topic.as_str()) {
                Some(n) => n.clone(),
                None => {
                    let n = self.partition_count(topic).await;
                    counts.insert(topic.as_str(), n.clone());
                    n
                }
            };
            parts.push(n.map(|n| topic.partition(partition_of(id.as_str(), n))));
        }
        let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, p) in parts.iter().enumerate() {
            if let Ok(p) = p {
                groups.entry(self.shard_index(p)).or_default().push(i);
            }
        }
        (parts, groups)
    }

    /// How many partitions `t` has (1 if unknown).
    ///
    /// Read from partition 0's settings. While partition 0's shard does not
    /// answer, the last count read stands; without one, partition 1's copy
    /// of the settings tells (every partition holds them) — so a dead shard
    /// holding partition 0 delays only its own partitions. A topic of one
    /// partition is unavailable while that partition's shard is.
    async fn partition_count(&self, t: &Topic) -> StoreResult<u32> {
        let known = self
            .partitions
            .lock()
            .expect("poisoned")
            .get(t.as_str())
            .copied();
        if let Some((n, at)) = known
            && (at.elapsed() < PARTITIONS_TTL || self.is_down(t))
        {
            // Fresh, or partition 0's shard failed within the last second:
            // do not wait for it on every call.
            return Ok(n);
        }
        let r = self.store(t).topic_config(t).await;
        self.note(t, &r);
        let n = match r {
            // No settings yet: one partition, but not remembered — the topic
            // may be being made with more right now (partition 0's settings
            // are written last), and a count of 1 kept for a second would
            // put this instance's jobs where their ids do not lead.
            Ok(None) => return Ok(1),
            Ok(Some(c)) => c.partitions.max(1),
            Err(e @ StoreError::Unavailable(_)) => {
                if let Some((n, _)) = known {
                    return Ok(n);
                }
                match self.second_copy(t).await {
                    Some(c) => c.partitions.max(1),
                    None => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        self.partitions
            .lock()
            .expect("poisoned")
            .insert(t.as_str().to_string(), (n, Instant::now()));
        Ok(n)
    }

    /// The topic's settings as partition 1 holds them (`None` when it has
    /// one partition, or partition 1's shard does not answer either).
    async fn second_copy(&self, t: &Topic) -> Option<TopicConfig> {
        let p1 = t.partition(1);
        if self.shard_index(&p1) == self.shard_index(t) {
            return None;
        }
        let r = self.store(&p1).topic_config(&p1).await;
        self.note(&p1, &r);
        r.ok().flatten()
    }

    fn forget_partitions(&self, t: &Topic) {
        self.partitions.lock().expect("poisoned").remove(t.as_str());
    }

    /// The partition holding job `id` of `t`.
    async fn part_of(&self, t: &Topic, id: &JobId) -> StoreResult<Topic> {
        let n = self.partition_count(t).await?;
        Ok(t.partition(partition_of(id.as_str(), n)))
    }

    /// Runs `f` on the partition holding job `id`, noting a shard failure.
    async fn on_job<'a, T, F, Fut>(&'a self, topic: &Topic, id: &JobId, f: F) -> StoreResult<T>
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
    fn rotation(&self, n: u32) -> impl Iterator<Item = u32> {
        let start = (self.next.fetch_add(1, Ordering::Relaxed) % n as usize) as u32;
        (0..n).map(move |k| (start + k) % n)
    }

    /// Runs `f` on every partition of `t` (concurrently), with the results in
    /// partition order; partitions on shards known to be down are skipped
    /// when `skip_down`.
    async fn each<'a, T, F, Fut>(
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
    fn merged(
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
    fn gathered<T>(results: Vec<(Topic, StoreResult<T>)>) -> StoreResult<Vec<T>> {
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

    /// A new generated id naming one of `partitions` (taken in turn).
    fn generated_id(&self, partitions: &[u32]) -> StoreResult<JobId> {
        let p = partitions[self.next.fetch_add(1, Ordering::Relaxed) % partitions.len()];
        Ok(JobId::new(format!("{}~p{p}", JobId::generate()))?)
    }

    /// Runs `f(store, partition, left)` on the partitions of `t` in order
    /// until `max` is reached in all (replay and purge of the oldest dead
    /// letters); returns the sum.
    async fn up_to<'a, F, Fut>(&'a self, t: &Topic, max: usize, f: F) -> StoreResult<u64>
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

    /// Partitions whose shard is not known to be down (all if none is up).
    fn healthy_partitions(&self, t: &Topic, n: u32) -> Vec<u32> {
        let up: Vec<u32> = (0..n).filter(|p| !self.is_down(&t.partition(*p))).collect();
        if up.is_empty() { (0..n).collect() } else { up }
    }
}

#[async_trait]
impl Store for ShardedStore {
    async fn enqueue(
        &self,
        topic: &Topic,
        jobs: &[NewJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Enqueued>> {
        let n = self.partition_count(topic).await?;
        if n == 1 {
            let r = self.store(topic).enqueue(topic, jobs, now_ms).await;
            self.note(topic, &r);
            return r;
        }
        let mut results: Vec<Option<Enqueued>> = vec![None; jobs.len()];
        // Jobs still to place: (index in `jobs`, the job as placed with its
        // id, whether this store chose the id).
        let mut pending: Vec<(usize, NewJob, bool)> = Vec::with_capacity(jobs.len());
        let mut healthy = self.healthy_partitions(topic, n);
        for (i, j) in jobs.iter().enumerate() {
            let mut j = j.clone();
            let generated = j.id.is_none();
            if generated {
                j.id = Some(self.generated_id(&healthy)?);
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
                let r = self.store(&part).enqueue(&part, &batch, now_ms).await;
                (part, group, r)
            });
            let mut failure = None;
            for (part, group, r) in join_all(calls).await {
                self.note(&part, &r);
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
            healthy = self.healthy_partitions(topic, n);
            for (_, j, _) in &mut pending {
                j.id = Some(self.generated_id(&healthy)?);
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

    async fn get(&self, topic: &Topic, id: &JobId) -> StoreResult<Option<JobInfo>> {
        self.on_job(topic, id, |s, p| async move { s.get(&p, id).await })
            .await
    }

    async fn reserve_job(
        &self,
        topic: &Topic,
        id: &JobId,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Option<Lease>> {
        let lease = self
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

    async fn cancel(
        &self,
        topic: &Topic,
        id: &JobId,
        now_ms: u64,
    ) -> StoreResult<Option<JobState>> {
        self.on_job(
            topic,
            id,
            |s, p| async move { s.cancel(&p, id, now_ms).await },
        )
        .await
    }

    async fn reschedule(
        &self,
        topic: &Topic,
        id: &JobId,
        due_at_ms: u64,
        now_ms: u64,
    ) -> StoreResult<()> {
        self.on_job(topic, id, |s, p| async move {
            s.reschedule(&p, id, due_at_ms, now_ms).await
        })
        .await
    }

    async fn reserve(
        &self,
        topic: &Topic,
        max: usize,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Reservation> {
        let n = self.partition_count(topic).await?;
        if n == 1 {
            let r = self
                .store(topic)
                .reserve(topic, max, lease_ms, now_ms)
                .await;
            self.note(topic, &r);
            return r;
        }
        let mut out = Reservation {
            leases: Vec::new(),
            next_due_ms: None,
        };
        let mut failure = None;
        let mut answered = false;
        for p in self.rotation(n) {
            let part = topic.partition(p);
            if self.is_down(&part) {
                continue;
            }
            let want = max - out.leases.len();
            let r = self
                .store(&part)
                .reserve(&part, want, lease_ms, now_ms)
                .await;
            self.note(&part, &r);
            match r {
                Ok(c) => {
                    answered = true;
                    out.next_due_ms = min_opt(out.next_due_ms, c.next_due_ms);
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

    async fn touch(
        &self,
        topic: &Topic,
        id: &JobId,
        token: &str,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<u64> {
        self.on_job(topic, id, |s, p| async move {
            s.touch(&p, id, token, lease_ms, now_ms).await
        })
        .await
    }

    async fn ack(&self, topic: &Topic, id: &JobId, token: &str, now_ms: u64) -> StoreResult<()> {
        self.on_job(topic, id, |s, p| async move {
            s.ack(&p, id, token, now_ms).await
        })
        .await
    }

    async fn ack_batch(&self, items: &[Held<'_>], now_ms: u64) -> Vec<StoreResult<()>> {
        let keys: Vec<_> = items.iter().map(|it| (it.topic, it.id)).collect();
        let (parts, groups) = self.shard_groups(&keys).await;
        let calls = groups.into_iter().map(|(shard, idx)| {
            let parts = &parts;
            async move {
                let batch: Vec<Held<'_>> = idx
                    .iter()
                    .filter_map(|&i| {
                        let topic = parts[i].as_ref().ok()?;
                        Some(Held { topic, ..items[i] })
                    })
                    .collect();
                let done = self.shards[shard].store.ack_batch(&batch, now_ms).await;
                for (b, r) in batch.iter().zip(&done) {
                    self.note(b.topic, r);
                }
                (idx, done)
            }
        });
        scatter(&parts, join_all(calls).await)
    }

    async fn nack_batch(
        &self,
        items: &[HeldNack<'_>],
        now_ms: u64,
    ) -> Vec<StoreResult<NackOutcome>> {
        let keys: Vec<_> = items.iter().map(|it| (it.topic, it.id)).collect();
        let (parts, groups) = self.shard_groups(&keys).await;
        let calls = groups.into_iter().map(|(shard, idx)| {
            let parts = &parts;
            async move {
                let batch: Vec<HeldNack<'_>> = idx
                    .iter()
                    .filter_map(|&i| {
                        let topic = parts[i].as_ref().ok()?;
                        Some(HeldNack { topic, ..items[i] })
                    })
                    .collect();
                let done = self.shards[shard].store.nack_batch(&batch, now_ms).await;
                for (b, r) in batch.iter().zip(&done) {
                    self.note(b.topic, r);
                }
                (idx, done)
            }
        });
        scatter(&parts, join_all(calls).await)
    }

    async fn touch_batch(&self, items: &[HeldTouch<'_>], now_ms: u64) -> Vec<StoreResult<u64>> {
        let keys: Vec<_> = items.iter().map(|it| (it.topic, it.id)).collect();
        let (parts, groups) = self.shard_groups(&keys).await;
        let calls = groups.into_iter().map(|(shard, idx)| {
            let parts = &parts;
            async move {
                let batch: Vec<HeldTouch<'_>> = idx
                    .iter()
                    .filter_map(|&i| {
                        let topic = parts[i].as_ref().ok()?;
                        Some(HeldTouch { topic, ..items[i] })
                    })
                    .collect();
                let done = self.shards[shard].store.touch_batch(&batch, now_ms).await;
                for (b, r) in batch.iter().zip(&done) {
                    self.note(b.topic, r);
                }
                (idx, done)
            }
        });
        scatter(&parts, join_all(calls).await)
    }

    async fn ack_and_write(
        &self,
        topic: &Topic,
        url: &str,
        items: &[dq_core::forward::AckWrite<'_>],
        now_ms: u64,
    ) -> StoreResult<Vec<Option<StoreResult<()>>>> {
        let n = self.partition_count(topic).await?;
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
            let r = self
                .store(&part)
                .ack_and_write(&part, url, &batch, now_ms)
                .await;
            self.note(&part, &r);
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

    async fn nack(
        &self,
        topic: &Topic,
        id: &JobId,
        nack: Nack<'_>,
        now_ms: u64,
    ) -> StoreResult<NackOutcome> {
        self.on_job(topic, id, |s, p| async move {
            s.nack(&p, id, nack, now_ms).await
        })
        .await
    }

    async fn release(
        &self,
        topic: &Topic,
        id: &JobId,
        token: &str,
        delay_ms: u64,
        now_ms: u64,
    ) -> StoreResult<u64> {
        self.on_job(topic, id, |s, p| async move {
            s.release(&p, id, token, delay_ms, now_ms).await
        })
        .await
    }

    async fn promote_due(&self, topic: &Topic, max: usize, now_ms: u64) -> StoreResult<Promoted> {
        let all = self
            .each(topic, true, |s, p| async move {
                s.promote_due(&p, max, now_ms).await
            })
            .await?;
        let mut out = Promoted {
            moved: 0,
            next_due_ms: None,
        };
        for p in Self::gathered(all)? {
            // The dispatcher goes again while `moved` reaches its batch size:
            // a sum reaches it whenever one partition's batch was full.
            out.moved += p.moved;
            out.next_due_ms = min_opt(out.next_due_ms, p.next_due_ms);
        }
        Ok(out)
    }

    async fn requeue_expired(
        &self,
        topic: &Topic,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<Requeued> {
        let all = self
            .each(topic, true, |s, p| async move {
                s.requeue_expired(&p, max, now_ms).await
            })
            .await?;
        let mut out = Requeued::default();
        for r in Self::gathered(all)? {
            out.retried += r.retried;
            out.dead += r.dead;
            out.next_deadline_ms = min_opt(out.next_deadline_ms, r.next_deadline_ms);
            out.jobs.extend(r.jobs);
        }
        Ok(out)
    }

    async fn list_dead(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        let want = offset.saturating_add(limit);
        let all = self
            .each(topic, false, |s, p| async move {
                s.list_dead(&p, 0, want).await
            })
            .await?;
        Self::merged(
            all,
            |a, b| (a.died_at_ms, a.id.as_str()).cmp(&(b.died_at_ms, b.id.as_str())),
            offset,
            limit,
        )
    }

    async fn list_ready(&self, topic: &Topic, limit: usize) -> StoreResult<Vec<JobInfo>> {
        let all = self
            .each(
                topic,
                false,
                |s, p| async move { s.list_ready(&p, limit).await },
            )
            .await?;
        Self::merged(
            all,
            |a, b| {
                (a.priority, a.due_at_ms, a.id.as_str()).cmp(&(
                    b.priority,
                    b.due_at_ms,
                    b.id.as_str(),
                ))
            },
            0,
            limit,
        )
    }

    async fn list_scheduled(&self, topic: &Topic, limit: usize) -> StoreResult<Vec<JobInfo>> {
        let all = self
            .each(topic, false, |s, p| async move {
                s.list_scheduled(&p, limit).await
            })
            .await?;
        Self::merged(
            all,
            |a, b| (a.due_at_ms, a.id.as_str()).cmp(&(b.due_at_ms, b.id.as_str())),
            0,
            limit,
        )
    }

    /// Partition by partition: the cursor is `<partition>.<that
    /// partition's cursor>`, and a partition's end goes on to the next.
    async fn list_jobs(
        &self,
        topic: &Topic,
        state: Option<JobState>,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<JobPage> {
        let n = self.partition_count(topic).await?;
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
        let r = self
            .store(&part)
            .list_jobs(&part, state, inner, limit)
            .await;
        self.note(&part, &r);
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

    async fn import_jobs(
        &self,
        topic: &Topic,
        jobs: &[ImportJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Imported>> {
        let n = self.partition_count(topic).await?;
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
            let r = self.store(&part).import_jobs(&part, &batch, now_ms).await;
            self.note(&part, &r);
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

    async fn replay_dead(
        &self,
        topic: &Topic,
        ids: Option<&[JobId]>,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<u64> {
        let Some(ids) = ids else {
            return self
                .up_to(topic, max, |s, p, left| async move {
                    s.replay_dead(&p, None, left, now_ms).await
                })
                .await;
        };
        let n = self.partition_count(topic).await?;
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
            let r = self
                .store(&part)
                .replay_dead(&part, Some(&ids), ids.len(), now_ms)
                .await;
            self.note(&part, &r);
            total += r?;
        }
        Ok(total)
    }

    async fn purge_dead(&self, topic: &Topic, max: usize) -> StoreResult<u64> {
        self.up_to(topic, max, |s, p, left| async move {
            s.purge_dead(&p, left).await
        })
        .await
    }

    async fn topics(&self) -> StoreResult<Vec<Topic>> {
        // Each shard lists the partitions it holds; a topic is known while
        // any shard holding one of its partitions answers.
        let all = join_all(self.shards.iter().map(|s| s.store.stored_topic_names())).await;
        let mut names = BTreeSet::new();
        let mut first_err = None;
        let mut answered = false;
        for r in all {
            match r {
                Ok(ts) => {
                    answered = true;
                    names.extend(
                        ts.iter()
                            .filter_map(|n| Topic::split_partition(n))
                            .map(|(t, _)| t),
                    );
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) if !answered => Err(e),
            _ => Ok(names.into_iter().collect()),
        }
    }

    async fn list_topics(&self, listing: &TopicListing<'_>) -> StoreResult<TopicPage> {
        // Each shard's page of `limit` topics (a partition standing for its
        // topic), merged in order, cut to `limit` (backward: the last
        // `limit`): whatever a shard holds past its page lies beyond every
        // topic of it. As in `topics`, a shard that does not answer is left
        // out while another answers.
        let limit = listing.limit.max(1);
        let pages = join_all(
            self.shards
                .iter()
                .map(|s| s.store.topic_page(listing, true)),
        )
        .await;
        let mut names = BTreeSet::new();
        let mut more = false;
        let mut first_err = None;
        let mut answered = false;
        for r in pages {
            match r {
                Ok(page) => {
                    answered = true;
                    more |= page.more;
                    names.extend(page.topics);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err
            && !answered
        {
            return Err(e);
        }
        more |= names.len() > limit;
        let skip = match listing.backward {
            true => names.len().saturating_sub(limit),
            false => 0,
        };
        Ok(TopicPage {
            topics: names.into_iter().skip(skip).take(limit).collect(),
            more,
        })
    }

    async fn topic_config(&self, topic: &Topic) -> StoreResult<Option<TopicConfig>> {
        let r = self.store(topic).topic_config(topic).await;
        self.note(topic, &r);
        match r {
            // Partition 0's shard is down: every partition holds the settings.
            Err(e @ StoreError::Unavailable(_)) => match self.second_copy(topic).await {
                Some(c) => Ok(Some(c)),
                None => Err(e),
            },
            other => other,
        }
    }

    async fn configure_topic(
        &self,
        topic: &Topic,
        patch: &TopicConfigPatch,
    ) -> StoreResult<TopicConfig> {
        let current = self.store(topic).topic_config(topic).await?;
        let old_n = current.as_ref().map_or(1, |c| c.partitions.max(1));
        let new_n = patch.partitions.unwrap_or(old_n);
        if new_n != old_n {
            let mut held = 0;
            for p in 0..old_n {
                let part = topic.partition(p);
                let s = self.store(&part).stats(&part, 0).await?;
                held += s.scheduled + s.ready + s.reserved + s.dead;
            }
            if held > 0 {
                return Err(StoreError::Invalid(InvalidInput::new(
                    "invalid_partitions",
                    format!(
                        "topic {topic} holds {held} jobs in {old_n} partitions; the partition count changes only while a topic is empty (drain it, or use a new topic)"
                    ),
                )));
            }
        }
        // Every partition gets the whole resulting settings: the scripts of
        // each read their own copy.
        let result = patch.apply(current.unwrap_or_default());
        let full = TopicConfigPatch {
            max_attempts: Some(result.max_attempts),
            lease_ms: Some(result.lease_ms),
            dead_cap: Some(result.dead_cap),
            default_delay_ms: Some(result.default_delay_ms),
            retry: Some(result.retry.clone()),
            delivery: Some(result.delivery.clone()),
            partitions: Some(new_n),
            dedup_ms: Some(result.dedup_ms),
            paused: Some(result.paused),
            rate_limit: Some(result.rate_limit),
            key_concurrency: Some(result.key_concurrency),
            key_rate_limit: Some(result.key_rate_limit),
        };
        // Partition 0 last: it holds the count the others are found by.
        for p in (1..new_n).chain([0]) {
            let part = topic.partition(p);
            self.store(&part).configure_topic(&part, &full).await?;
        }
        for p in new_n..old_n {
            let part = topic.partition(p);
            self.store(&part).delete_topic(&part, 1).await?;
        }
        self.forget_partitions(topic);
        Ok(result)
    }

    async fn delete_topic(&self, topic: &Topic, max: usize) -> StoreResult<(u64, bool)> {
        let n = self.partition_count(topic).await?;
        let mut deleted = 0;
        let mut gone = true;
        // Partition 0 last: while it stands, the topic and its count stand.
        for p in (1..n).chain([0]) {
            let part = topic.partition(p);
            if p == 0 && !gone {
                break;
            }
            let left = max.saturating_sub(deleted as usize).max(1);
            let (d, g) = self.store(&part).delete_topic(&part, left).await?;
            deleted += d;
            gone &= g;
        }
        self.forget_partitions(topic);
        Ok((deleted, gone))
    }

    async fn stats(&self, topic: &Topic, now_ms: u64) -> StoreResult<TopicStats> {
        let all = self
            .each(
                topic,
                false,
                |s, p| async move { s.stats(&p, now_ms).await },
            )
            .await?;
        let mut out = TopicStats::default();
        let mut missing = BTreeSet::new();
        for (p, r) in &all {
            if r.is_err() {
                missing.insert(self.shard(p).name.clone());
            }
        }
        out.partial = !missing.is_empty();
        out.missing = missing.into_iter().collect();
        for s in Self::gathered(all)? {
            out.scheduled += s.scheduled;
            out.ready += s.ready;
            out.reserved += s.reserved;
            out.dead += s.dead;
            out.oldest_overdue_ms = out.oldest_overdue_ms.max(s.oldest_overdue_ms);
            out.paused_until_ms = out.paused_until_ms.max(s.paused_until_ms);
            let (c, d) = (&mut out.counters, &s.counters);
            c.enqueued += d.enqueued;
            c.acked += d.acked;
            c.failed += d.failed;
            c.expired += d.expired;
            c.dead += d.dead;
            c.cancelled += d.cancelled;
            c.dead_dropped += d.dead_dropped;
            c.replayed += d.replayed;
            c.rate_limited += d.rate_limited;
        }
        Ok(out)
    }

    /// Every partition is paused (each decides its own reserves).
    async fn pause_topic(&self, topic: &Topic, until_ms: u64) -> StoreResult<()> {
        let all = self
            .each(topic, false, |s, p| async move {
                s.pause_topic(&p, until_ms).await
            })
            .await?;
        Self::gathered(all).map(|_| ())
    }

    /// The sum over the shards; unknown while any does not answer.
    async fn size_bytes(&self) -> StoreResult<Option<u64>> {
        let mut total = 0;
        let now = self.now_ms();
        for s in &self.shards {
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
    async fn next_seq(&self, name: &str) -> StoreResult<u64> {
        self.shards[0].store.next_seq(name).await
    }

    // Named records (schedules) live on the first shard, as the counters do.
    async fn put_record(
        &self,
        kind: &str,
        name: &str,
        value: &str,
        mark: u64,
    ) -> StoreResult<bool> {
        self.shards[0]
            .store
            .put_record(kind, name, value, mark)
            .await
    }

    async fn get_record(&self, kind: &str, name: &str) -> StoreResult<Option<Record>> {
        self.shards[0].store.get_record(kind, name).await
    }

    async fn list_records(&self, kind: &str) -> StoreResult<Vec<(String, Record)>> {
        self.shards[0].store.list_records(kind).await
    }

    async fn delete_record(&self, kind: &str, name: &str) -> StoreResult<bool> {
        self.shards[0].store.delete_record(kind, name).await
    }

    async fn raise_mark(&self, kind: &str, name: &str, mark: u64) -> StoreResult<Option<u64>> {
        self.shards[0].store.raise_mark(kind, name, mark).await
    }

    /// The first answering shard's clock (each shard decides its own
    /// partitions by its own clock; they should agree within milliseconds).
    async fn time_ms(&self) -> StoreResult<Option<u64>> {
        let mut last = Ok(None);
        let now = self.now_ms();
        for s in &self.shards {
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

    async fn members(&self, me: &str, now_ms: u64, ttl_ms: u64) -> StoreResult<Vec<String>> {
        // Kept on the first shard that answers (while shard 0 is down, two
        // instances may both dispatch a topic for a while: that is safe).
        let mut first_err = None;
        for s in &self.shards {
            match s.store.members(me, now_ms, ttl_ms).await {
                Ok(m) => return Ok(m),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        Err(first_err.expect("a shard"))
    }

    async fn ping(&self) -> StoreResult<()> {
        // Ready while any shard answers: the others delay only their jobs.
        let all = join_all(self.shards.iter().map(|s| s.store.ping())).await;
        if all.iter().any(Result::is_ok) {
            return Ok(());
        }
        all.into_iter().next().expect("a shard")
    }

    async fn settings_version(&self) -> StoreResult<Option<u64>> {
        // Each shard counts the changes it holds; the sum moves with any.
        let all = join_all(self.shards.iter().map(|s| s.store.settings_version())).await;
        let mut sum = 0u64;
        for v in all {
            sum = sum.wrapping_add(v?.unwrap_or(0));
        }
        Ok(Some(sum))
    }

    async fn health(&self) -> Vec<(String, StoreResult<()>)> {
        let all = join_all(self.shards.iter().map(|s| s.store.ping())).await;
        self.shards
            .iter()
            .map(|s| s.name.clone())
            .zip(all)
            .collect()
    }

    async fn watch_wakes(&self, on_wake: WakeFn) {
        // Wake-ups name partitions: pass on the topic.
        let on_topic: WakeFn = std::sync::Arc::new(move |name: &str| match name.split_once('#') {
            Some((t, _)) => on_wake(t),
            None => on_wake(name),
        });
        join_all(
            self.shards
                .iter()
                .map(|s| s.store.watch_wakes(on_topic.clone())),
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_of_ids() {
        assert_eq!(partition_of("anything", 1), 0);
        assert_eq!(partition_of("0190-abc~p3", 4), 3);
        assert_eq!(
            partition_of("0190-abc~p3", 2),
            partition_of("0190-abc~p3", 2)
        );
        assert!(partition_of("0190-abc~p9", 4) < 4, "out of range: hashed");
        let mut seen = [0u32; 8];
        for i in 0..8000 {
            seen[partition_of(&format!("order-{i}"), 8) as usize] += 1;
        }
        assert!(seen.iter().all(|n| (800..1200).contains(n)), "{seen:?}");
        // Stable across processes and releases: a fixed value.
        assert_eq!(
            partition_of("order-42", 16),
            (fnv1a("order-42") % 16) as u32
        );
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn jump_hash_is_stable_and_moves_little() {
        let keys: Vec<u64> = (0..10_000u64).map(|i| fnv1a(&format!("t#{i}"))).collect();
        let three: Vec<usize> = keys.iter().map(|k| jump_hash(*k, 3)).collect();
        let four: Vec<usize> = keys.iter().map(|k| jump_hash(*k, 4)).collect();
        assert!(three.iter().all(|b| *b < 3));
        let moved = three.iter().zip(&four).filter(|(a, b)| a != b).count();
        assert!(
            (2000..3000).contains(&moved),
            "about a quarter moves: {moved}"
        );
        assert!(three.iter().zip(&four).all(|(a, b)| a == b || *b == 3));
        assert_eq!(jump_hash(12345, 1), 0);
    }
}
