//! dq-redis: the dq [`Store`] on one Redis server (7.0 or newer) or on a
//! Redis Cluster.
//!
//! The only crate that knows Redis. Modules:
//! - `config`: [`RedisConfig`], [`TimeSource`], [`ConnectError`], [`mask_url`].
//! - `conn`: one connection type for a server or a Cluster, opened from the
//!   config; the Redis errors every caller maps alike.
//! - `runner`: running a script on a topic's keys (retries during a
//!   resharding, batches, durable writes, the layout gate).
//! - `verbs`: each [`Store`] verb's arguments and reply, by group, beside
//!   its script; this file's `impl Store` hands each verb there.
//! - [`keys`]: every key name, hash-tagged per topic.
//! - `scripts`: the Lua scripts (`src/lua/*.lua`), one per state change,
//!   declared once.
//! - `codes`: the reply codes scripts answer, named once for Rust and Lua.
//! - `decode`: reading script replies, and their codes to errors, in one
//!   place.
//! - [`forward`]: writing a forwarding topic's due jobs into a target Redis.
//! - `sink`: [`RedisSink`], the forward sink `dq serve` gives the server.
//! - [`layout`]: the layout version key, checked at start.
//! - `topic_index`: the topic names in name order (a ZSET beside the
//!   topics SET), for listings that page.
//! - [`sharded`]: [`ShardedStore`], partitions and shards over
//!   `RedisStore`s (what `dq serve` uses).
//!
//! Layout: a topic's schedule is a ZSET of ids scored by due time; due jobs
//! move to a ready ZSET ordered by (priority, due, enqueue sequence); leases
//! and dead letters are ZSETs of ids; each job is one MessagePack record
//! (body and metadata) in the topic's jobs hash, deleted on ack and cancel;
//! jobs due much later wait in a timing wheel. See `lua/common.lua`.
//!
//! Connections: two multiplexed
//! [`ConnectionManager`](redis::aio::ConnectionManager)s (created lazily, so
//! dq starts while Redis is down), or two cluster connections (`conn`), with
//! TCP_NODELAY and an explicit response timeout: one for batches of new
//! jobs (enqueue, import), one for everything else, so a hand-out never
//! queues behind enqueue batches on one socket. Blocking commands are never
//! used, so nothing stalls a shared connection. Wake-ups cross instances
//! via pub/sub on a dedicated connection (on a cluster, to any node: a
//! PUBLISH reaches every node over the cluster bus).

mod codes;
mod config;
mod conn;
mod decode;
pub mod forward;
pub mod keys;
pub mod layout;
mod runner;
mod scripts;
pub mod sharded;
mod sink;
mod topic_index;
mod verbs;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use dq_core::store::StoreResult;
use dq_core::*;

pub use config::{ConnectError, RedisConfig, TimeSource, mask_url};
pub use keys::Keys;
pub use sharded::ShardedStore;
pub use sink::RedisSink;

use conn::{Conn, Connections};
use scripts::Scripts;

/// The store on one Redis server or a Redis Cluster.
pub struct RedisStore {
    /// Where wake-ups are subscribed: the server, or each seed node in turn.
    pubsub: Vec<redis::Client>,
    conn: Conn,
    /// Batches of new jobs (enqueue, import) go through a connection of
    /// their own: Redis serves its connections in turn, so a reserve, ack
    /// or promotion never waits behind a queue of 1000-job enqueue scripts
    /// on one socket (the first second of a drain whose producer is still
    /// enqueueing had a p99 of 30–130 ms from that). With `wait_replicas`
    /// their `WAIT` goes there too, so waiting never holds up other calls.
    writes: Conn,
    /// `wait_replicas` and `wait_timeout`, when set.
    durable: Option<(u32, Duration)>,
    keys: Keys,
    scripts: Scripts,
    /// Topics this process already added to the topics set.
    known: Mutex<HashSet<String>>,
    clock: TimeSource,
    /// False from [`RedisStore::hold_until_layout_checked`] until
    /// [`RedisStore::check_layout`] accepts this Redis's layout: no script
    /// runs meanwhile (a Redis that did not answer at start must not get
    /// this layout's writes before its version is known).
    layout_checked: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("keys", &self.keys)
            .finish()
    }
}

impl RedisStore {
    /// A store for `config`. Does not connect yet: the first call does, and
    /// reconnects happen in the background, so this succeeds while Redis is down.
    ///
    /// # Errors
    /// [`ConnectError::InvalidUrl`] for a URL redis-rs cannot use.
    pub fn new(config: &RedisConfig) -> Result<Self, ConnectError> {
        let Connections {
            pubsub,
            conn,
            writes,
        } = Connections::open(config)?;
        let durable = (config.wait_replicas > 0).then(|| {
            (
                config.wait_replicas,
                config.wait_timeout.max(Duration::from_millis(1)),
            )
        });
        let keys = Keys::new(config.prefix.clone());
        let scripts = Scripts::new(&keys.wake_channel());
        Ok(Self {
            pubsub,
            conn,
            writes,
            durable,
            keys,
            scripts,
            known: Mutex::new(HashSet::new()),
            clock: config.clock,
            layout_checked: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// The key builder (for tests and tools that inspect the keyspace).
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Acks reserved jobs and writes each into a stream or list of the
    /// server `url` in one script (`lua/forward.lua`) when that server is
    /// this store's own (same address and database; not a Cluster): what
    /// [`RedisSink`] does, see
    /// [`ForwardSink::ack_and_write`](dq_core::ForwardSink::ack_and_write)
    /// for the answers. `None` for every item anywhere else.
    pub async fn ack_and_write(
        &self,
        topic: &Topic,
        url: &str,
        items: &[dq_core::forward::AckWrite<'_>],
        now_ms: u64,
    ) -> StoreResult<Vec<Option<StoreResult<()>>>> {
        verbs::leases::ack_and_write(self, topic, url, items, now_ms).await
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn enqueue(
        &self,
        topic: &Topic,
        jobs: &[NewJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Enqueued>> {
        verbs::enqueue::enqueue(self, topic, jobs, now_ms).await
    }

    async fn get(&self, topic: &Topic, id: &JobId) -> StoreResult<Option<JobInfo>> {
        verbs::jobs::get(self, topic, id).await
    }

    async fn cancel(
        &self,
        topic: &Topic,
        id: &JobId,
        now_ms: u64,
    ) -> StoreResult<Option<JobState>> {
        verbs::jobs::cancel(self, topic, id, now_ms).await
    }

    async fn reschedule(
        &self,
        topic: &Topic,
        id: &JobId,
        due_at_ms: u64,
        kick: bool,
        now_ms: u64,
    ) -> StoreResult<()> {
        verbs::jobs::reschedule(self, topic, id, due_at_ms, kick, now_ms).await
    }

    async fn reserve(
        &self,
        topic: &Topic,
        max: usize,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Reservation> {
        verbs::reserve::reserve(self, topic, max, lease_ms, now_ms).await
    }

    async fn reserve_job(
        &self,
        topic: &Topic,
        id: &JobId,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Option<Lease>> {
        verbs::reserve::reserve_job(self, topic, id, lease_ms, now_ms).await
    }

    async fn touch(
        &self,
        topic: &Topic,
        id: &JobId,
        token: &str,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<u64> {
        verbs::leases::touch(self, topic, id, token, lease_ms, now_ms).await
    }

    async fn ack(&self, topic: &Topic, id: &JobId, token: &str, now_ms: u64) -> StoreResult<()> {
        verbs::leases::ack(self, topic, id, token, now_ms).await
    }

    async fn ack_batch(&self, items: &[AckItem], now_ms: u64) -> Vec<StoreResult<()>> {
        let topics: Vec<&Topic> = items.iter().map(|it| &it.topic).collect();
        verbs::leases::ack_batch(self, &topics, items, now_ms).await
    }

    async fn nack_batch(&self, items: &[NackItem], now_ms: u64) -> Vec<StoreResult<NackOutcome>> {
        let topics: Vec<&Topic> = items.iter().map(|it| &it.topic).collect();
        verbs::leases::nack_batch(self, &topics, items, now_ms).await
    }

    async fn touch_batch(&self, items: &[TouchItem], now_ms: u64) -> Vec<StoreResult<u64>> {
        let topics: Vec<&Topic> = items.iter().map(|it| &it.topic).collect();
        verbs::leases::touch_batch(self, &topics, items, now_ms).await
    }

    async fn nack(
        &self,
        topic: &Topic,
        id: &JobId,
        nack: Nack<'_>,
        now_ms: u64,
    ) -> StoreResult<NackOutcome> {
        verbs::leases::nack(self, topic, id, nack, now_ms).await
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
        verbs::leases::release(self, topic, id, token, delay_ms, how, now_ms).await
    }

    async fn promote_due(&self, topic: &Topic, max: usize, now_ms: u64) -> StoreResult<Promoted> {
        verbs::passes::promote_due(self, topic, max, now_ms).await
    }

    async fn requeue_expired(
        &self,
        topic: &Topic,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<Requeued> {
        verbs::passes::requeue_expired(self, topic, max, now_ms).await
    }

    async fn list_dead(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        verbs::dead::list_dead(self, topic, offset, limit).await
    }

    async fn list_ready(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        verbs::jobs::list_waiting(self, topic, b"r", offset, limit).await
    }

    async fn list_scheduled(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        verbs::jobs::list_waiting(self, topic, b"u", offset, limit).await
    }

    async fn list_jobs(
        &self,
        topic: &Topic,
        state: Option<JobState>,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<JobPage> {
        verbs::jobs::list_jobs(self, topic, state, cursor, limit).await
    }

    async fn import_jobs(
        &self,
        topic: &Topic,
        jobs: &[ImportJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Imported>> {
        verbs::enqueue::import_jobs(self, topic, jobs, now_ms).await
    }

    async fn replay_dead(
        &self,
        topic: &Topic,
        ids: Option<&[JobId]>,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<u64> {
        verbs::dead::replay_dead(self, topic, ids, max, now_ms).await
    }

    async fn purge_dead(&self, topic: &Topic, max: usize) -> StoreResult<u64> {
        verbs::dead::purge_dead(self, topic, max).await
    }

    async fn topics(&self) -> StoreResult<Vec<Topic>> {
        verbs::topics::topics(self).await
    }

    async fn list_topics(&self, listing: &TopicListing<'_>) -> StoreResult<TopicPage> {
        verbs::topics::list_topics(self, listing).await
    }

    async fn topic_config(&self, topic: &Topic) -> StoreResult<Option<TopicConfig>> {
        verbs::topics::topic_config(self, topic).await
    }

    async fn configure_topic(
        &self,
        topic: &Topic,
        patch: &TopicConfigPatch,
    ) -> StoreResult<TopicConfig> {
        verbs::topics::configure_topic(self, topic, patch).await
    }

    async fn delete_topic(&self, topic: &Topic, max: usize) -> StoreResult<(u64, bool)> {
        verbs::topics::delete_topic(self, topic, max).await
    }

    async fn settings_version(&self) -> StoreResult<Option<u64>> {
        verbs::topics::settings_version(self).await
    }

    async fn stats(&self, topic: &Topic, now_ms: u64) -> StoreResult<TopicStats> {
        verbs::topics::stats(self, topic, now_ms).await
    }

    async fn pause_topic(&self, topic: &Topic, until_ms: u64) -> StoreResult<()> {
        verbs::topics::pause_topic(self, topic, until_ms).await
    }

    async fn size_bytes(&self) -> StoreResult<Option<u64>> {
        verbs::server::size_bytes(self).await
    }

    async fn put_record(
        &self,
        kind: &str,
        name: &str,
        value: &str,
        mark: u64,
    ) -> StoreResult<bool> {
        verbs::records::put_record(self, kind, name, value, mark).await
    }

    async fn get_record(&self, kind: &str, name: &str) -> StoreResult<Option<Record>> {
        verbs::records::get_record(self, kind, name).await
    }

    async fn list_records(&self, kind: &str) -> StoreResult<Vec<(String, Record)>> {
        verbs::records::list_records(self, kind).await
    }

    async fn delete_record(&self, kind: &str, name: &str) -> StoreResult<bool> {
        verbs::records::delete_record(self, kind, name).await
    }

    async fn raise_mark(&self, kind: &str, name: &str, mark: u64) -> StoreResult<Option<u64>> {
        verbs::records::raise_mark(self, kind, name, mark).await
    }

    async fn next_seq(&self, name: &str) -> StoreResult<u64> {
        verbs::records::next_seq(self, name).await
    }

    async fn time_ms(&self) -> StoreResult<Option<u64>> {
        verbs::server::time_ms(self).await
    }

    async fn members(&self, me: &str, now_ms: u64, ttl_ms: u64) -> StoreResult<Vec<String>> {
        verbs::server::members(self, me, now_ms, ttl_ms).await
    }

    async fn ping(&self) -> StoreResult<()> {
        verbs::server::ping(self).await
    }

    async fn watch_wakes(&self, on_wake: WakeFn) {
        verbs::server::watch_wakes(self, on_wake).await
    }
}
