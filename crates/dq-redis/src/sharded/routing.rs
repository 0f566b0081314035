//! Where a partition and a job live, and which shards answer: a job's
//! partition ([`partition_of`]: the one its generated id names, else a
//! stable hash of the id), a partition's shard (jump hash of its name, so
//! growing the list of shards moves only what must move), each topic's
//! partition count (read from partition 0's settings, cached for a second,
//! partition 1's copy while partition 0's shard is down), and shard health
//! (a shard that failed is skipped by reserves and dispatcher passes for a
//! second).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dq_core::store::StoreResult;
use dq_core::*;

use super::ShardedStore;
use crate::RedisStore;

/// How long a partition count read from Redis is trusted.
const PARTITIONS_TTL: Duration = Duration::from_secs(1);
/// How long a shard that failed is skipped by reserves and dispatcher passes.
const DOWN_FOR: Duration = Duration::from_secs(1);

/// One shard: its name (for logs and health), its store, and until when
/// it counts as down.
pub(super) struct Shard {
    pub(super) name: String,
    pub(super) store: RedisStore,
    /// Skipped by reserves and promotions until this instant (ms since `epoch`).
    pub(super) down_until_ms: AtomicU64,
}

impl Shard {
    /// Whether it is marked down at `now_ms` (ms since `epoch`).
    pub(super) fn is_down(&self, now_ms: u64) -> bool {
        self.down_until_ms.load(Ordering::Relaxed) > now_ms
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

impl ShardedStore {
    pub(super) fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The shard (index in the list given to [`ShardedStore::new`]) holding
    /// partition `part` (a name from [`Topic::partition`]).
    pub fn shard_of_partition(&self, part: &Topic) -> usize {
        self.shard_index(part)
    }

    pub(super) fn shard_index(&self, part: &Topic) -> usize {
        if self.shards.len() == 1 {
            0
        } else {
            jump_hash(fnv1a(part.as_str()), self.shards.len())
        }
    }

    pub(super) fn shard(&self, part: &Topic) -> &Shard {
        &self.shards[self.shard_index(part)]
    }

    pub(super) fn store(&self, part: &Topic) -> &RedisStore {
        &self.shard(part).store
    }

    pub(super) fn is_down(&self, part: &Topic) -> bool {
        self.shard(part).is_down(self.now_ms())
    }

    /// Notes a failure of the shard of `part` (when Redis did not answer).
    pub(super) fn note<T>(&self, part: &Topic, r: &StoreResult<T>) {
        self.note_shard(self.shard(part), r);
    }

    /// As [`ShardedStore::note`], for a call made to shard `s` itself. A
    /// shard that answered is up again at once.
    pub(super) fn note_shard<T>(&self, s: &Shard, r: &StoreResult<T>) {
        match r {
            Err(StoreError::Unavailable(e)) => {
                let until = self.now_ms() + DOWN_FOR.as_millis() as u64;
                if s.down_until_ms.swap(until, Ordering::Relaxed) <= self.now_ms() {
                    tracing::warn!(shard = %s.name, error = %e, "Redis shard not answering; its partitions wait");
                }
            }
            _ => {
                if s.down_until_ms.load(Ordering::Relaxed) > self.now_ms()
                    && s.down_until_ms.swap(0, Ordering::Relaxed) > self.now_ms()
                {
                    tracing::info!(shard = %s.name, "Redis shard answering again");
                }
            }
        }
    }

    /// Whether a call to `part`'s shard is answered at once with
    /// [`ShardedStore::down_error`]: the shard did not answer within the
    /// last [`DOWN_FOR`]. Not for a Cluster, the one shard of its store:
    /// one master that does not answer says nothing of the others.
    pub(super) fn fails_fast(&self, part: &Topic) -> bool {
        let s = self.shard(part);
        s.is_down(self.now_ms()) && !s.store.conn.is_cluster()
    }

    /// The answer of a call not made because `part`'s shard did not answer
    /// within the last [`DOWN_FOR`]: at once, instead of another wait for
    /// the response timeout (a shard cut off by the network answers
    /// nothing; each call would wait the whole timeout).
    pub(super) fn down_error(&self, part: &Topic) -> StoreError {
        StoreError::Unavailable(format!(
            "Redis shard {} did not answer in the last second",
            self.shard(part).name
        ))
    }

    /// Each batch item's partition (`keys`: its topic and id; the count read
    /// once per topic), and the items of each shard, in order: a batch
    /// verb makes one call per shard, whose store makes one script call per
    /// partition.
    pub(super) async fn shard_groups(
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
    pub(super) async fn partition_count(&self, t: &Topic) -> StoreResult<u32> {
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
                // One partition: it lives where the read just failed, and
                // a second call there would wait the timeout again.
                if let Some((n, _)) = known
                    && n > 1
                {
                    return Ok(n);
                }
                if known.is_some() {
                    return Err(e);
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
    pub(super) async fn second_copy(&self, t: &Topic) -> Option<TopicConfig> {
        let p1 = t.partition(1);
        if self.shard_index(&p1) == self.shard_index(t) || self.is_down(&p1) {
            return None;
        }
        let r = self.store(&p1).topic_config(&p1).await;
        self.note(&p1, &r);
        r.ok().flatten()
    }

    pub(super) fn forget_partitions(&self, t: &Topic) {
        self.partitions.lock().expect("poisoned").remove(t.as_str());
    }

    /// The partition holding job `id` of `t`.
    pub(super) async fn part_of(&self, t: &Topic, id: &JobId) -> StoreResult<Topic> {
        let n = self.partition_count(t).await?;
        Ok(t.partition(partition_of(id.as_str(), n)))
    }

    /// Partitions whose shard is not known to be down (all if none is up).
    pub(super) fn healthy_partitions(&self, t: &Topic, n: u32) -> Vec<u32> {
        let up: Vec<u32> = (0..n).filter(|p| !self.is_down(&t.partition(*p))).collect();
        if up.is_empty() { (0..n).collect() } else { up }
    }

    /// A new generated id naming one of `partitions` (taken in turn).
    pub(super) fn generated_id(&self, partitions: &[u32]) -> StoreResult<JobId> {
        let p = partitions[self.next.fetch_add(1, Ordering::Relaxed) % partitions.len()];
        Ok(JobId::new(format!("{}~p{p}", JobId::generate()))?)
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
