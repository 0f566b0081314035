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
//!
//! Modules: `routing` (a job's partition, a partition's shard, partition
//! counts, shard health), `fanout` (a verb over partitions, answers put
//! together), and the verbs by group: `jobs`, `leases`, `topics`, `server`;
//! the `impl Store` here hands each verb to its function there.

mod fanout;
mod jobs;
mod leases;
mod routing;
mod server;
mod topics;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Instant;

use async_trait::async_trait;
use dq_core::store::StoreResult;
use dq_core::*;
use futures::future::join_all;

use crate::RedisStore;
use routing::Shard;
pub use routing::partition_of;

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

    /// [`RedisStore::ack_and_write`] per partition, on its shard: a job is
    /// acked and written in one script when the target is its shard's
    /// server, else answers `None` (what [`crate::RedisSink`]
    /// does over this store).
    pub async fn ack_and_write(
        &self,
        topic: &Topic,
        url: &str,
        items: &[dq_core::forward::AckWrite<'_>],
        now_ms: u64,
    ) -> StoreResult<Vec<Option<StoreResult<()>>>> {
        leases::ack_and_write(self, topic, url, items, now_ms).await
    }

    /// Each shard's name and store.
    pub(crate) fn shards(&self) -> impl Iterator<Item = (&str, &RedisStore)> {
        self.shards.iter().map(|s| (s.name.as_str(), &s.store))
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
        jobs::enqueue(self, topic, jobs, now_ms).await
    }

    async fn get(&self, topic: &Topic, id: &JobId) -> StoreResult<Option<JobInfo>> {
        jobs::get(self, topic, id).await
    }

    async fn reserve_job(
        &self,
        topic: &Topic,
        id: &JobId,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Option<Lease>> {
        leases::reserve_job(self, topic, id, lease_ms, now_ms).await
    }

    async fn cancel(
        &self,
        topic: &Topic,
        id: &JobId,
        now_ms: u64,
    ) -> StoreResult<Option<JobState>> {
        jobs::cancel(self, topic, id, now_ms).await
    }

    async fn reschedule(
        &self,
        topic: &Topic,
        id: &JobId,
        due_at_ms: u64,
        kick: bool,
        now_ms: u64,
    ) -> StoreResult<()> {
        jobs::reschedule(self, topic, id, due_at_ms, kick, now_ms).await
    }

    async fn reserve(
        &self,
        topic: &Topic,
        max: usize,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Reservation> {
        leases::reserve(self, topic, max, lease_ms, now_ms).await
    }

    async fn touch(
        &self,
        topic: &Topic,
        id: &JobId,
        token: &str,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<u64> {
        leases::touch(self, topic, id, token, lease_ms, now_ms).await
    }

    async fn ack(&self, topic: &Topic, id: &JobId, token: &str, now_ms: u64) -> StoreResult<()> {
        leases::ack(self, topic, id, token, now_ms).await
    }

    async fn ack_batch(&self, items: &[AckItem], now_ms: u64) -> Vec<StoreResult<()>> {
        leases::ack_batch(self, items, now_ms).await
    }

    async fn nack_batch(&self, items: &[NackItem], now_ms: u64) -> Vec<StoreResult<NackOutcome>> {
        leases::nack_batch(self, items, now_ms).await
    }

    async fn touch_batch(&self, items: &[TouchItem], now_ms: u64) -> Vec<StoreResult<u64>> {
        leases::touch_batch(self, items, now_ms).await
    }

    async fn nack(
        &self,
        topic: &Topic,
        id: &JobId,
        nack: Nack<'_>,
        now_ms: u64,
    ) -> StoreResult<NackOutcome> {
        leases::nack(self, topic, id, nack, now_ms).await
    }

    async fn release(
        &self,
        topic: &Topic,
        id: &JobId,
        token: &str,
        delay_ms: u64,
        how: GiveBack,
        now_ms: u64,
    ) -> StoreResult<u64> {
        leases::release(self, topic, id, token, delay_ms, how, now_ms).await
    }

    async fn promote_due(&self, topic: &Topic, max: usize, now_ms: u64) -> StoreResult<Promoted> {
        leases::promote_due(self, topic, max, now_ms).await
    }

    async fn requeue_expired(
        &self,
        topic: &Topic,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<Requeued> {
        leases::requeue_expired(self, topic, max, now_ms).await
    }

    async fn list_dead(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        jobs::list_dead(self, topic, offset, limit).await
    }

    async fn list_ready(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        jobs::list_ready(self, topic, offset, limit).await
    }

    async fn list_scheduled(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        jobs::list_scheduled(self, topic, offset, limit).await
    }

    async fn list_jobs(
        &self,
        topic: &Topic,
        state: Option<JobState>,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<JobPage> {
        jobs::list_jobs(self, topic, state, cursor, limit).await
    }

    async fn import_jobs(
        &self,
        topic: &Topic,
        jobs: &[ImportJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Imported>> {
        jobs::import_jobs(self, topic, jobs, now_ms).await
    }

    async fn replay_dead(
        &self,
        topic: &Topic,
        ids: Option<&[JobId]>,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<u64> {
        jobs::replay_dead(self, topic, ids, max, now_ms).await
    }

    async fn purge_dead(&self, topic: &Topic, max: usize) -> StoreResult<u64> {
        jobs::purge_dead(self, topic, max).await
    }

    async fn topics(&self) -> StoreResult<Vec<Topic>> {
        topics::topics(self).await
    }

    async fn list_topics(&self, listing: &TopicListing<'_>) -> StoreResult<TopicPage> {
        topics::list_topics(self, listing).await
    }

    async fn topic_config(&self, topic: &Topic) -> StoreResult<Option<TopicConfig>> {
        topics::topic_config(self, topic).await
    }

    async fn configure_topic(
        &self,
        topic: &Topic,
        patch: &TopicConfigPatch,
    ) -> StoreResult<TopicConfig> {
        topics::configure_topic(self, topic, patch).await
    }

    async fn delete_topic(&self, topic: &Topic, max: usize) -> StoreResult<(u64, bool)> {
        topics::delete_topic(self, topic, max).await
    }

    async fn stats(&self, topic: &Topic, now_ms: u64) -> StoreResult<TopicStats> {
        topics::stats(self, topic, now_ms).await
    }

    async fn pause_topic(&self, topic: &Topic, until_ms: u64) -> StoreResult<()> {
        topics::pause_topic(self, topic, until_ms).await
    }

    async fn size_bytes(&self) -> StoreResult<Option<u64>> {
        server::size_bytes(self).await
    }

    async fn next_seq(&self, name: &str) -> StoreResult<u64> {
        server::next_seq(self, name).await
    }

    async fn put_record(
        &self,
        kind: &str,
        name: &str,
        value: &str,
        mark: u64,
    ) -> StoreResult<bool> {
        server::put_record(self, kind, name, value, mark).await
    }

    async fn get_record(&self, kind: &str, name: &str) -> StoreResult<Option<Record>> {
        server::get_record(self, kind, name).await
    }

    async fn list_records(&self, kind: &str) -> StoreResult<Vec<(String, Record)>> {
        server::list_records(self, kind).await
    }

    async fn delete_record(&self, kind: &str, name: &str) -> StoreResult<bool> {
        server::delete_record(self, kind, name).await
    }

    async fn raise_mark(&self, kind: &str, name: &str, mark: u64) -> StoreResult<Option<u64>> {
        server::raise_mark(self, kind, name, mark).await
    }

    async fn time_ms(&self) -> StoreResult<Option<u64>> {
        server::time_ms(self).await
    }

    async fn members(&self, me: &str, now_ms: u64, ttl_ms: u64) -> StoreResult<Vec<String>> {
        server::members(self, me, now_ms, ttl_ms).await
    }

    async fn ping(&self) -> StoreResult<()> {
        server::ping(self).await
    }

    async fn settings_version(&self) -> StoreResult<Option<u64>> {
        topics::settings_version(self).await
    }

    async fn health(&self) -> Vec<(String, StoreResult<()>)> {
        server::health(self).await
    }

    async fn watch_wakes(&self, on_wake: WakeFn) {
        server::watch_wakes(self, on_wake).await
    }
}
