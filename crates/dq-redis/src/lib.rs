//! dq-redis: the dq [`Store`] on one Redis server (7.0 or newer) or on a
//! Redis Cluster.
//!
//! The only crate that knows Redis. Modules:
//! - [`keys`]: every key name, hash-tagged per topic.
//! - `scripts`: the Lua scripts (`src/lua/*.lua`), one per state change.
//! - `codes`: the reply codes scripts answer, named once for Rust and Lua.
//! - `decode`: turns script replies into dq types and errors, in one place.
//! - [`forward`]: writing a forwarding topic's due jobs into a target Redis.
//! - [`layout`]: the layout version key, checked at start.
//! - `topic_index`: the topic names in name order (a ZSET beside the
//!   topics SET), for listings that page.
//!
//! Layout: a topic's schedule is a ZSET of ids scored by due time; due jobs
//! move to a ready ZSET ordered by (priority, due, enqueue sequence); leases
//! and dead letters are ZSETs of ids; each job is one MessagePack record
//! (body and metadata) in the topic's jobs hash, deleted on ack and cancel;
//! jobs due much later wait in a timing wheel. See `lua/common.lua`.
//!
//! Connections: two multiplexed [`ConnectionManager`]s (created lazily, so dq
//! starts while Redis is down), or two cluster connections (`conn`), with
//! TCP_NODELAY and an explicit response timeout: one for batches of new
//! jobs (enqueue, import), one for everything else, so a hand-out never
//! queues behind enqueue batches on one socket. Blocking commands are never
//! used, so nothing stalls a shared connection. Wake-ups cross instances
//! via pub/sub on a dedicated connection (on a cluster, to any node: a
//! PUBLISH reaches every node over the cluster bus).

mod codes;
mod conn;
mod decode;
pub mod forward;
pub mod keys;
pub mod layout;
mod scripts;
pub mod sharded;
mod topic_index;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use dq_core::limits::clip_error;
use dq_core::store::StoreResult;
use dq_core::*;
use futures::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::io::tcp::TcpSettings;
use redis::{AsyncCommands, IntoConnectionInfo, Value};

pub use keys::Keys;
pub use sharded::ShardedStore;

use conn::Conn;
use decode::*;
use scripts::Scripts;

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]` or `rediss://…` for TLS.
    pub url: String,
    /// Key namespace (default `dq`); several dq deployments can share a Redis
    /// by using different prefixes.
    pub prefix: String,
    /// Longest wait for any single reply.
    pub response_timeout: Duration,
    /// Longest wait to connect.
    pub connect_timeout: Duration,
    /// Replicas that must acknowledge each enqueue (Redis `WAIT`) before it
    /// is reported done; 0 (default) does not wait. See docs/design.md.
    pub wait_replicas: u32,
    /// Longest `WAIT` for those replicas; past it the enqueue fails (503) —
    /// it may still be on the master: retrying with the same id is safe.
    pub wait_timeout: Duration,
    /// Seed nodes of a Redis Cluster (`redis://host:port`, any few of its
    /// nodes). When not empty, `url` is not used and dq talks to the cluster.
    pub cluster: Vec<String>,
    /// Whose clock decides due times, reserves, lease expiry and retries.
    pub clock: TimeSource,
}

/// Whose clock a [`RedisStore`] decides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeSource {
    /// The Redis server's (`TIME` inside each script; on a Cluster, the
    /// clock of the master holding the partition): every dq instance decides
    /// by one clock, whatever its own says. The default, and what `dq serve`
    /// uses.
    #[default]
    Server,
    /// The `now_ms` each call passes: for tests that drive a
    /// [`ManualClock`](dq_core::ManualClock).
    Caller,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            prefix: "dq".into(),
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            cluster: Vec::new(),
            clock: TimeSource::Server,
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
        }
    }
}

/// Errors building a [`RedisStore`].
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL cannot be parsed or names an unsupported scheme.
    #[error("invalid Redis URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL with any password masked.
        url: String,
        /// Why.
        reason: String,
    },
}

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

/// Hides the password of a Redis URL for messages and logs.
pub fn mask_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

impl RedisStore {
    /// Every name in this server's topics set: topics, and partitions of
    /// topics (`t#p`, see [`Topic::partition`]), which [`Store::topics`]
    /// leaves out.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when Redis does not answer.
    pub async fn stored_topic_names(&self) -> StoreResult<Vec<String>> {
        let mut conn = self.conn.clone();
        conn.smembers(self.keys.topics()).await.map_err(unavailable)
    }

    /// A store for `config`. Does not connect yet: the first call does, and
    /// reconnects happen in the background, so this succeeds while Redis is down.
    ///
    /// # Errors
    /// [`ConnectError::InvalidUrl`] for a URL redis-rs cannot use.
    pub fn new(config: &RedisConfig) -> Result<Self, ConnectError> {
        let urls = if config.cluster.is_empty() {
            std::slice::from_ref(&config.url)
        } else {
            config.cluster.as_slice()
        };
        let mut infos = Vec::new();
        for url in urls {
            let invalid = |reason: String| ConnectError::InvalidUrl {
                url: mask_url(url),
                reason,
            };
            infos.push(
                url.as_str()
                    .into_connection_info()
                    .map_err(|e| invalid(e.to_string()))?
                    .set_tcp_settings(TcpSettings::default().set_nodelay(true)),
            );
        }
        let invalid = |reason: String| ConnectError::InvalidUrl {
            url: urls
                .iter()
                .map(|u| mask_url(u))
                .collect::<Vec<_>>()
                .join(","),
            reason,
        };
        let pubsub = infos
            .iter()
            .map(|i| redis::Client::open(i.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(e.to_string()))?;
        let connect = || -> Result<Conn, ConnectError> {
            if config.cluster.is_empty() {
                let cm_config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(config.response_timeout))
                    .set_connection_timeout(Some(config.connect_timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_secs(2));
                return Ok(Conn::Single(
                    ConnectionManager::new_lazy_with_config(pubsub[0].clone(), cm_config)
                        .map_err(|e| invalid(e.to_string()))?,
                ));
            }
            let client = ClusterClientBuilder::new(infos.clone())
                .tcp_settings(TcpSettings::default().set_nodelay(true))
                .connection_timeout(config.connect_timeout)
                .response_timeout(config.response_timeout)
                .retries(4)
                .min_retry_wait(50)
                .max_retry_wait(1000)
                .build()
                .map_err(|e| invalid(e.to_string()))?;
            Ok(Conn::Cluster(
                client.get_pending_async_connection_with_config(
                    ClusterConfig::new()
                        .set_connection_timeout(config.connect_timeout)
                        .set_response_timeout(config.response_timeout),
                ),
            ))
        };
        let conn = connect()?;
        let writes = connect()?;
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

    /// Unavailable while [`RedisStore::hold_until_layout_checked`] holds.
    fn layout_gate(&self) -> StoreResult<()> {
        if self
            .layout_checked
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Ok(());
        }
        Err(StoreError::Unavailable(
            "this Redis did not answer when dq started: its key layout is not checked yet".into(),
        ))
    }

    /// Refuses every script (503, nothing written) until
    /// [`RedisStore::check_layout`] has accepted this Redis's layout;
    /// `dq serve` calls it before its first check.
    pub fn hold_until_layout_checked(&self) {
        self.layout_checked
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// The "now" argument of a script: empty (the script reads the server's
    /// clock) unless the caller's time decides.
    fn now_arg(&self, now_ms: u64) -> Vec<u8> {
        match self.clock {
            TimeSource::Server => Vec::new(),
            TimeSource::Caller => n(now_ms),
        }
    }

    /// The key builder (for tests and tools that inspect the keyspace).
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Loads every script now, so the first real call does not pay for it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when Redis cannot be reached.
    pub async fn load_scripts(&self) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        for (_, s) in self.scripts.all() {
            s.prepare_invoke()
                .load_async(&mut conn)
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    /// Moves `Store::settings_version` on, after a settings change was written.
    async fn bump_settings_version(&self) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let _: u64 = conn
            .incr(self.keys.settings_version(), 1)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Adds `topic` to the topics set once per process.
    async fn register(&self, topic: &Topic) -> StoreResult<()> {
        self.layout_gate()?;
        if self
            .known
            .lock()
            .expect("poisoned")
            .contains(topic.as_str())
        {
            return Ok(());
        }
        self.add_topic_name(topic.as_str()).await?;
        self.known
            .lock()
            .expect("poisoned")
            .insert(topic.as_str().to_string());
        Ok(())
    }

    /// Runs `script` with the topic's keys and `args` (the topic name first).
    async fn run(
        &self,
        script: &redis::Script,
        topic: &Topic,
        args: &[&[u8]],
    ) -> StoreResult<Value> {
        self.run_on(self.conn.clone(), script, topic, args).await
    }

    async fn run_on(
        &self,
        mut conn: Conn,
        script: &redis::Script,
        topic: &Topic,
        args: &[&[u8]],
    ) -> StoreResult<Value> {
        self.layout_gate()?;
        let tk = self.keys.topic(topic);
        let mut inv = script.prepare_invoke();
        for k in &tk.all {
            inv.key(k);
        }
        inv.arg(topic.as_str());
        for a in args {
            inv.arg(*a);
        }
        // During a Cluster resharding a script whose keys are split between
        // two nodes is refused with TRYAGAIN, or redirected (ASK, MOVED)
        // more often than the client follows by itself; during a failover it
        // may be refused with CLUSTERDOWN or MASTERDOWN. In every case it did
        // not run: wait and run it again, for up to about 3 s beyond the
        // client's own retries.
        let mut wait = Duration::from_millis(20);
        let mut waited = Duration::ZERO;
        loop {
            match inv.invoke_async(&mut conn).await {
                Err(e) if not_run(&e) && waited < Duration::from_secs(3) => {
                    tokio::time::sleep(wait).await;
                    waited += wait;
                    wait = (wait * 2).min(Duration::from_millis(250));
                }
                r => return r.map_err(unavailable),
            }
        }
    }

    /// Runs a batch script (`ack_batch`, `nack_batch`, `touch_batch`) over
    /// items whose topics are `topics` (one per item): one call per topic
    /// (one hash slot) and [`limits::MAX_BATCH`] items, with `head` after
    /// the topic name and then `item_args(i)` for each item `i` of the
    /// call; `decode` reads each item's reply. The calls of one topic run in
    /// turn, so a duplicate item answers as it would one after the other;
    /// the topics run side by side. A result per item, in order.
    async fn run_batches<'a, R>(
        &self,
        script: &redis::Script,
        topics: &[&Topic],
        head: &[&[u8]],
        item_args: impl Fn(usize) -> Vec<std::borrow::Cow<'a, [u8]>>,
        decode: impl Fn(&Value) -> StoreResult<R>,
    ) -> Vec<StoreResult<R>> {
        let mut groups: Vec<(&Topic, Vec<usize>)> = Vec::new();
        for (i, t) in topics.iter().enumerate() {
            match groups.iter_mut().find(|(g, _)| g == t) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((t, vec![i])),
            }
        }
        let (item_args, decode) = (&item_args, &decode);
        let calls = groups.into_iter().map(|(topic, idx)| async move {
            let mut done = Vec::with_capacity(idx.len());
            for chunk in idx.chunks(limits::MAX_BATCH) {
                let owned: Vec<_> = chunk.iter().flat_map(|&i| item_args(i)).collect();
                let mut args: Vec<&[u8]> = head.to_vec();
                args.extend(owned.iter().map(|a| a.as_ref()));
                match self.run(script, topic, &args).await {
                    Ok(Value::Array(a)) if a.len() == chunk.len() => {
                        done.extend(a.iter().map(decode));
                    }
                    Ok(_) => done.extend(
                        chunk
                            .iter()
                            .map(|_| Err(StoreError::Unavailable("batch reply length".into()))),
                    ),
                    Err(e) => done.extend(chunk.iter().map(|_| Err(e.clone()))),
                }
            }
            (idx, done)
        });
        let mut out: Vec<Option<StoreResult<R>>> = topics.iter().map(|_| None).collect();
        for (idx, done) in futures::future::join_all(calls).await {
            for (i, r) in idx.into_iter().zip(done) {
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.expect("every item is in one call"))
            .collect()
    }

    /// Runs `script` (touch or release) on a held job: its arguments
    /// are the id, the token, one value and now; it answers a status or a time.
    async fn held_call(
        &self,
        script: &redis::Script,
        topic: &Topic,
        id: &JobId,
        token: &str,
        value: &[u8],
        now_ms: u64,
    ) -> StoreResult<u64> {
        let v = self
            .run(
                script,
                topic,
                &[
                    id.as_str().as_bytes(),
                    token.as_bytes(),
                    value,
                    &self.now_arg(now_ms),
                ],
            )
            .await?;
        status_time(&v)
    }

    /// Runs the enqueue script on the connection for new jobs; with
    /// `wait_replicas`, then waits for that many replicas to have it (WAIT
    /// on the same connection, at the master of the topic's slot).
    async fn enqueue_durably(&self, topic: &Topic, args: &[&[u8]]) -> StoreResult<Value> {
        self.enqueue_durably_with(&self.scripts.enqueue, topic, args)
            .await
    }

    /// Runs `script` (enqueue or import_jobs: it writes new jobs) as
    /// [`Self::enqueue_durably`] does.
    async fn enqueue_durably_with(
        &self,
        script: &redis::Script,
        topic: &Topic,
        args: &[&[u8]],
    ) -> StoreResult<Value> {
        let v = self
            .run_on(self.writes.clone(), script, topic, args)
            .await?;
        let Some((replicas, timeout)) = &self.durable else {
            return Ok(v);
        };
        let mut wait = redis::cmd("WAIT");
        wait.arg(*replicas).arg(timeout.as_millis() as u64);
        let acked: i64 = match self.writes.clone() {
            Conn::Single(mut c) => wait.query_async(&mut c).await,
            Conn::Cluster(mut c) => {
                let route = redis::cluster_routing::Route::with_key(
                    self.keys.topic(topic).sched(),
                    redis::cluster_routing::SlotAddr::Master,
                );
                c.route_command(
                    wait,
                    redis::cluster_routing::RoutingInfo::SingleNode(
                        redis::cluster_routing::SingleNodeRoutingInfo::SpecificNode(route),
                    ),
                )
                .await
                .and_then(|v| redis::from_redis_value(v).map_err(Into::into))
            }
        }
        .map_err(unavailable)?;
        if acked < i64::from(*replicas) {
            return Err(StoreError::Unavailable(format!(
                "written on the master but {acked} of {replicas} replicas acknowledged within {timeout:?}; retry (with the job's id, a retry is harmless)"
            )));
        }
        Ok(v)
    }
}

/// Whether Redis refused a script before running it, for a reason that passes
/// (a slot being migrated, a cluster without a master for a moment).
fn not_run(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::Ask
                | ServerErrorKind::Moved
        )
    )
}

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn n(v: u64) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// A job's kind (`j` JSON, `b` bytes) and body as its record stores them
/// (values 7 and 8, common.lua): two MessagePack strings, each with the
/// header cmsgpack.pack writes for its length (fixstr below 32 bytes, then
/// str 8, 16, 32), so a record that enqueue.lua's compact form splices
/// from this is the record cmsgpack.pack would have written, byte for byte.
fn packed_kind_body(json: bool, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 7);
    out.extend_from_slice(&[0xa1, if json { b'j' } else { b'b' }]);
    let len = body.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if let Ok(l) = u8::try_from(len) {
        out.extend_from_slice(&[0xd9, l]);
    } else if let Ok(l) = u16::try_from(len) {
        out.push(0xda);
        out.extend_from_slice(&l.to_be_bytes());
    } else {
        // The compact form takes bodies below 4 GiB only.
        let l = u32::try_from(len).unwrap_or(u32::MAX);
        out.push(0xdb);
        out.extend_from_slice(&l.to_be_bytes());
    }
    out.extend_from_slice(body);
    out
}

fn opt(v: Option<impl ToString>) -> Vec<u8> {
    v.map(|x| x.to_string().into_bytes()).unwrap_or_default()
}

fn token_prefix() -> String {
    format!("{:016x}.", rand::random::<u64>())
}

#[async_trait]
impl Store for RedisStore {
    async fn enqueue(
        &self,
        topic: &Topic,
        jobs: &[NewJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Enqueued>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.register(topic).await?;
        let ids: Vec<JobId> = jobs
            .iter()
            .map(|j| j.id.clone().unwrap_or_else(JobId::generate))
            .collect();
        // The compact form (see enqueue.lua) when no job sets an override,
        // a dedup window, a key or replace, and every body is below 4 GiB
        // (`packed_kind_body`).
        let compact = jobs.iter().all(|j| {
            j.max_attempts.is_none()
                && j.lease_ms.is_none()
                && j.retry.is_none()
                && !j.replace
                && j.dedup_ms.is_none()
                && j.key.is_none()
                && u32::try_from(j.body.as_bytes().len()).is_ok()
        });
        let mut args: Vec<Vec<u8>> =
            Vec::with_capacity(2 + jobs.len() * if compact { 5 } else { 12 });
        args.push(self.now_arg(now_ms));
        args.push(if compact {
            b"c".to_vec()
        } else {
            b"f".to_vec()
        });
        for (j, id) in jobs.iter().zip(&ids) {
            let (kind, value) = match j.when {
                When::DelayMs(d) => ("d", d),
                When::DueAtMs(t) => ("a", t),
                When::TopicDefault => ("t", 0),
            };
            args.push(id.as_str().as_bytes().to_vec());
            args.push(kind.as_bytes().to_vec());
            args.push(n(value));
            args.push(n(j.priority as u64));
            if compact {
                args.push(packed_kind_body(j.body.is_json(), j.body.as_bytes()));
                continue;
            }
            args.push(opt(j.max_attempts));
            args.push(opt(j.lease_ms));
            args.push(opt(j.retry.as_ref().map(RetryPolicy::encode)));
            args.push(if j.body.is_json() {
                b"j".to_vec()
            } else {
                b"b".to_vec()
            });
            args.push(j.body.as_bytes().to_vec());
            args.push(if j.replace {
                b"1".to_vec()
            } else {
                b"0".to_vec()
            });
            args.push(opt(j.dedup_ms));
            args.push(opt(j.key.as_ref().map(JobKey::as_str)));
        }
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let v = self.enqueue_durably(topic, &refs).await?;
        decode_enqueued(v, ids)
    }

    async fn get(&self, topic: &Topic, id: &JobId) -> StoreResult<Option<JobInfo>> {
        let v = self
            .run(&self.scripts.get, topic, &[b"i", id.as_str().as_bytes()])
            .await?;
        Ok(decode_jobs(v)?.pop())
    }

    async fn cancel(
        &self,
        topic: &Topic,
        id: &JobId,
        now_ms: u64,
    ) -> StoreResult<Option<JobState>> {
        let v = self
            .run(
                &self.scripts.cancel,
                topic,
                &[id.as_str().as_bytes(), &self.now_arg(now_ms)],
            )
            .await?;
        match v {
            Value::Nil => Ok(None),
            other => Ok(Some(state_of(&string(&other)?)?)),
        }
    }

    async fn reschedule(
        &self,
        topic: &Topic,
        id: &JobId,
        due_at_ms: u64,
        now_ms: u64,
    ) -> StoreResult<()> {
        let v = self
            .run(
                &self.scripts.reschedule,
                topic,
                &[id.as_str().as_bytes(), &n(due_at_ms), &self.now_arg(now_ms)],
            )
            .await?;
        status(&v).map(|_| ())
    }

    async fn reserve(
        &self,
        topic: &Topic,
        max: usize,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Reservation> {
        let max = max.clamp(1, limits::MAX_RESERVE);
        let v = self
            .run(
                &self.scripts.reserve,
                topic,
                &[
                    &self.now_arg(now_ms),
                    &n(max as u64),
                    &opt(lease_ms),
                    token_prefix().as_bytes(),
                ],
            )
            .await?;
        decode_reserved(topic, v)
    }

    async fn reserve_job(
        &self,
        topic: &Topic,
        id: &JobId,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Option<Lease>> {
        let token = format!("{}1", token_prefix());
        let v = self
            .run(
                &self.scripts.reserve_job,
                topic,
                &[
                    &self.now_arg(now_ms),
                    id.as_str().as_bytes(),
                    &opt(lease_ms),
                    token.as_bytes(),
                ],
            )
            .await?;
        Ok(decode_reserved(topic, v)?.leases.pop())
    }

    async fn touch(
        &self,
        topic: &Topic,
        id: &JobId,
        token: &str,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<u64> {
        self.held_call(
            &self.scripts.touch,
            topic,
            id,
            token,
            &opt(lease_ms),
            now_ms,
        )
        .await
    }

    async fn ack(&self, topic: &Topic, id: &JobId, token: &str, now_ms: u64) -> StoreResult<()> {
        let v = self
            .run(
                &self.scripts.ack,
                topic,
                &[
                    id.as_str().as_bytes(),
                    token.as_bytes(),
                    &self.now_arg(now_ms),
                ],
            )
            .await?;
        status(&v).map(|_| ())
    }

    async fn ack_batch(&self, items: &[Held<'_>], now_ms: u64) -> Vec<StoreResult<()>> {
        let topics: Vec<&Topic> = items.iter().map(|it| it.topic).collect();
        let now = self.now_arg(now_ms);
        self.run_batches(
            &self.scripts.ack_batch,
            &topics,
            &[&now],
            |i| {
                vec![
                    items[i].id.as_str().as_bytes().into(),
                    items[i].token.as_bytes().into(),
                ]
            },
            ack_status,
        )
        .await
    }

    async fn nack_batch(
        &self,
        items: &[HeldNack<'_>],
        now_ms: u64,
    ) -> Vec<StoreResult<NackOutcome>> {
        let topics: Vec<&Topic> = items.iter().map(|it| it.topic).collect();
        let now = self.now_arg(now_ms);
        // One seed per call (scripts may not call a random source); each
        // item's jitter is drawn from it by its place in the call.
        let seed = rand::random::<f64>().to_string();
        self.run_batches(
            &self.scripts.nack_batch,
            &topics,
            &[&now, seed.as_bytes()],
            |i| {
                let (id, nack) = (items[i].id, items[i].nack);
                vec![
                    id.as_str().as_bytes().into(),
                    nack.token.as_bytes().into(),
                    clip_error(nack.error).as_bytes().into(),
                    opt(nack.retry_in_ms).into(),
                    (if nack.dead { b"1" } else { b"0" })[..].into(),
                    opt(nack.priority).into(),
                ]
            },
            |v| decode_nacked(&status(v)?),
        )
        .await
    }

    async fn touch_batch(&self, items: &[HeldTouch<'_>], now_ms: u64) -> Vec<StoreResult<u64>> {
        let topics: Vec<&Topic> = items.iter().map(|it| it.topic).collect();
        let now = self.now_arg(now_ms);
        self.run_batches(
            &self.scripts.touch_batch,
            &topics,
            &[&now],
            |i| {
                vec![
                    items[i].id.as_str().as_bytes().into(),
                    items[i].token.as_bytes().into(),
                    opt(items[i].lease_ms).into(),
                ]
            },
            status_time,
        )
        .await
    }

    async fn ack_and_write(
        &self,
        topic: &Topic,
        url: &str,
        items: &[dq_core::forward::AckWrite<'_>],
        now_ms: u64,
    ) -> StoreResult<Vec<Option<StoreResult<()>>>> {
        if items.is_empty()
            || self.conn.is_cluster()
            || !crate::forward::same_server(self.pubsub[0].get_connection_info(), url)
        {
            return Ok(vec![None; items.len()]);
        }
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(1 + items.len() * 12);
        args.push(self.now_arg(now_ms));
        for it in items {
            args.push(it.id.as_str().as_bytes().to_vec());
            args.push(it.token.as_bytes().to_vec());
            args.extend(crate::forward::args(it.write));
        }
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let v = self.run(&self.scripts.forward, topic, &refs).await?;
        let replies = match v {
            Value::Array(a) if a.len() == items.len() => a,
            _ => return Err(StoreError::Unavailable("forward reply length".into())),
        };
        Ok(replies.iter().map(|r| Some(forward_status(r))).collect())
    }

    async fn nack(
        &self,
        topic: &Topic,
        id: &JobId,
        nack: Nack<'_>,
        now_ms: u64,
    ) -> StoreResult<NackOutcome> {
        // Jitter is drawn here (scripts may not call a random source);
        // dead at once needs none.
        let rand = if nack.dead {
            "0".to_string()
        } else {
            rand::random::<f64>().to_string()
        };
        let v = self
            .run(
                &self.scripts.nack,
                topic,
                &[
                    id.as_str().as_bytes(),
                    nack.token.as_bytes(),
                    clip_error(nack.error).as_bytes(),
                    &opt(nack.retry_in_ms),
                    &self.now_arg(now_ms),
                    rand.as_bytes(),
                    if nack.dead { b"1" } else { b"0" },
                    &opt(nack.priority),
                ],
            )
            .await?;
        decode_nacked(&status(&v)?)
    }

    async fn release(
        &self,
        topic: &Topic,
        id: &JobId,
        token: &str,
        delay_ms: u64,
        now_ms: u64,
    ) -> StoreResult<u64> {
        self.held_call(
            &self.scripts.release,
            topic,
            id,
            token,
            &n(delay_ms),
            now_ms,
        )
        .await
    }

    async fn promote_due(&self, topic: &Topic, max: usize, now_ms: u64) -> StoreResult<Promoted> {
        let v = self
            .run(
                &self.scripts.promote_due,
                topic,
                &[&self.now_arg(now_ms), &n(max.max(1) as u64)],
            )
            .await?;
        let items = array(v)?;
        Ok(Promoted {
            moved: int(&items[0])? as u64,
            next_due_ms: opt_time(int(&items[1])?),
        })
    }

    async fn requeue_expired(
        &self,
        topic: &Topic,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<Requeued> {
        let v = self
            .run(
                &self.scripts.requeue_expired,
                topic,
                &[
                    &self.now_arg(now_ms),
                    &n(max.max(1) as u64),
                    rand::random::<f64>().to_string().as_bytes(),
                ],
            )
            .await?;
        decode_requeued(v)
    }

    async fn list_dead(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        let v = self
            .run(
                &self.scripts.get,
                topic,
                &[b"d", &n(offset as u64), &n(limit.max(1) as u64)],
            )
            .await?;
        decode_jobs(v)
    }

    async fn list_ready(&self, topic: &Topic, limit: usize) -> StoreResult<Vec<JobInfo>> {
        let v = self
            .run(&self.scripts.get, topic, &[b"r", &n(limit.max(1) as u64)])
            .await?;
        decode_jobs(v)
    }

    async fn list_scheduled(&self, topic: &Topic, limit: usize) -> StoreResult<Vec<JobInfo>> {
        let v = self
            .run(&self.scripts.get, topic, &[b"u", &n(limit.max(1) as u64)])
            .await?;
        decode_jobs(v)
    }

    async fn list_jobs(
        &self,
        topic: &Topic,
        state: Option<JobState>,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<JobPage> {
        let cursor = match cursor {
            None => "0".to_string(),
            Some(c) if !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()) && c != "0" => {
                c.to_string()
            }
            Some(_) => {
                return Err(StoreError::Invalid(InvalidInput::new(
                    "invalid_cursor",
                    "cursor is not one this store handed out: start again without one",
                )));
            }
        };
        let letter: &[u8] = match state {
            None => b"",
            Some(JobState::Scheduled) => b"s",
            Some(JobState::Ready) => b"y",
            Some(JobState::Reserved) => b"r",
            Some(JobState::Dead) => b"d",
        };
        let count = limit.clamp(1, dq_core::limits::MAX_BATCH) as u64;
        let v = self
            .run(
                &self.scripts.list_jobs,
                topic,
                &[cursor.as_bytes(), &n(count), letter],
            )
            .await?;
        let (jobs, cursor) = decode_page(v)?;
        Ok(JobPage { jobs, cursor })
    }

    async fn import_jobs(
        &self,
        topic: &Topic,
        jobs: &[ImportJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Imported>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.register(topic).await?;
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(1 + jobs.len() * 16);
        args.push(self.now_arg(now_ms));
        for j in jobs {
            let dead = j.state == JobState::Dead;
            args.push(j.id.as_str().as_bytes().to_vec());
            args.push(if dead { b"d".to_vec() } else { b"w".to_vec() });
            args.push(n(j.due_at_ms));
            args.push(n(u64::from(j.priority)));
            args.push(n(u64::from(j.attempts)));
            args.push(opt(j.max_attempts));
            args.push(opt(j.lease_ms));
            args.push(opt(j.retry.as_ref().map(RetryPolicy::encode)));
            args.push(opt(j.dedup_ms));
            args.push(if j.body.is_json() {
                b"j".to_vec()
            } else {
                b"b".to_vec()
            });
            args.push(j.body.as_bytes().to_vec());
            args.push(
                j.last_error
                    .as_deref()
                    .map(|e| clip_error(e).as_bytes().to_vec())
                    .unwrap_or_default(),
            );
            args.push(n(j.created_at_ms));
            args.push(opt(j.died_at_ms.filter(|_| dead)));
            args.push(if j.last_error.is_some() {
                b"1".to_vec()
            } else {
                b"0".to_vec()
            });
            args.push(opt(j.key.as_ref().map(JobKey::as_str)));
        }
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let v = self
            .enqueue_durably_with(&self.scripts.import_jobs, topic, &refs)
            .await?;
        let ids: Vec<JobId> = jobs.iter().map(|j| j.id.clone()).collect();
        decode_imported(v, &ids)
    }

    async fn replay_dead(
        &self,
        topic: &Topic,
        ids: Option<&[JobId]>,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<u64> {
        let mut args: Vec<&[u8]> = Vec::new();
        let now = self.now_arg(now_ms);
        let max = n(max.max(1) as u64);
        args.push(&now);
        args.push(&max);
        if let Some(ids) = ids {
            if ids.is_empty() {
                return Ok(0);
            }
            args.extend(ids.iter().map(|i| i.as_str().as_bytes()));
        }
        let v = self.run(&self.scripts.replay_dead, topic, &args).await?;
        Ok(int(&v)? as u64)
    }

    async fn purge_dead(&self, topic: &Topic, max: usize) -> StoreResult<u64> {
        let v = self
            .run(&self.scripts.purge_dead, topic, &[&n(max.max(1) as u64)])
            .await?;
        Ok(int(&v)? as u64)
    }

    async fn topics(&self) -> StoreResult<Vec<Topic>> {
        let names = self.stored_topic_names().await?;
        let mut topics: Vec<Topic> = names
            .into_iter()
            .filter_map(|n| Topic::new(n).ok())
            .collect();
        topics.sort();
        Ok(topics)
    }

    async fn list_topics(&self, listing: &TopicListing<'_>) -> StoreResult<TopicPage> {
        self.topic_page(listing, false).await
    }

    async fn topic_config(&self, topic: &Topic) -> StoreResult<Option<TopicConfig>> {
        let mut conn = self.conn.clone();
        let (member, fields): (bool, Vec<(String, String)>) = if conn.is_cluster() {
            // The topics set and the topic's settings live in different slots.
            let mut other = conn.clone();
            let cfg_key = self.keys.topic(topic).cfg().to_string();
            let (member, fields) = futures::join!(
                conn.sismember(self.keys.topics(), topic.as_str()),
                other.hgetall(cfg_key)
            );
            (member.map_err(unavailable)?, fields.map_err(unavailable)?)
        } else {
            redis::pipe()
                .sismember(self.keys.topics(), topic.as_str())
                .hgetall(self.keys.topic(topic).cfg())
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?
        };
        if !member && fields.is_empty() {
            return Ok(None);
        }
        Ok(Some(decode_config(&fields)))
    }

    async fn configure_topic(
        &self,
        topic: &Topic,
        patch: &TopicConfigPatch,
    ) -> StoreResult<TopicConfig> {
        self.layout_gate()?;
        let tk = self.keys.topic(topic);
        let mut fields: Vec<(&str, String)> = Vec::new();
        if let Some(v) = patch.max_attempts {
            fields.push(("max_attempts", v.to_string()));
        }
        if let Some(v) = patch.lease_ms {
            fields.push(("lease_ms", v.to_string()));
        }
        if let Some(v) = patch.dead_cap {
            fields.push(("dead_cap", v.to_string()));
        }
        if let Some(v) = patch.default_delay_ms {
            fields.push(("default_delay_ms", v.to_string()));
        }
        if let Some(v) = patch.partitions {
            fields.push(("partitions", v.to_string()));
        }
        if let Some(v) = patch.dedup_ms {
            fields.push(("dedup_ms", v.to_string()));
        }
        if let Some(v) = &patch.retry {
            fields.push(("retry", v.encode()));
        }
        if let Some(v) = &patch.delivery {
            fields.push((
                "delivery",
                serde_json::to_string(v).expect("delivery serializes"),
            ));
        }
        if let Some(v) = patch.paused {
            fields.push(("paused", if v { "1" } else { "0" }.to_string()));
        }
        if let Some(Some(r)) = &patch.rate_limit {
            fields.push(("rate_limit", r.encode()));
        }
        if let Some(Some(r)) = &patch.key_rate_limit {
            fields.push(("key_rate_limit", r.encode()));
        }
        if let Some(Some(k)) = patch.key_concurrency {
            fields.push(("key_concurrency", k.to_string()));
        }
        let mut removed: Vec<&str> = Vec::new();
        if patch.rate_limit == Some(None) {
            removed.push("rate_limit");
        }
        if patch.key_rate_limit == Some(None) {
            removed.push("key_rate_limit");
        }
        if patch.key_concurrency == Some(None) {
            removed.push("key_concurrency");
        }
        // A new or changed rate limit starts with a full bucket (every key's,
        // for key_rate_limit); a resume or a new limit lets waiters look
        // again at once (reserve re-reads the keys held or waiting).
        let before = match patch.rate_limit.is_some()
            || patch.key_rate_limit.is_some()
            || patch.key_concurrency.is_some()
            || patch.paused == Some(false)
        {
            true => self.topic_config(topic).await?,
            false => None,
        };
        let limit_changed = patch
            .rate_limit
            .is_some_and(|r| before.as_ref().is_none_or(|b| b.rate_limit != r));
        let key_limit_changed = patch
            .key_rate_limit
            .is_some_and(|r| before.as_ref().is_none_or(|b| b.key_rate_limit != r));
        let keys_changed = key_limit_changed
            || patch
                .key_concurrency
                .is_some_and(|k| before.as_ref().is_none_or(|b| b.key_concurrency != k));
        let resumed = patch.paused == Some(false) && before.as_ref().is_some_and(|b| b.paused);
        let mut conn = self.conn.clone();
        // One slot (the topic's hash tag): one pipeline on a Cluster too.
        let mut pipe = redis::pipe();
        if !fields.is_empty() {
            pipe.hset_multiple(tk.cfg(), &fields).ignore();
        }
        if !removed.is_empty() {
            pipe.hdel(tk.cfg(), &removed).ignore();
        }
        if limit_changed {
            pipe.hdel(tk.ctr(), &["rl_credit", "rl_at"]).ignore();
        }
        if key_limit_changed {
            pipe.del(&[tk.key_buckets(), tk.key_buckets_full()])
                .ignore();
            // Keys waiting for a token of the old limit look again.
            pipe.hset(tk.ctr(), "kwait_stale", 1).ignore();
        }
        if !fields.is_empty() || !removed.is_empty() || limit_changed || key_limit_changed {
            let _: () = pipe.query_async(&mut conn).await.map_err(unavailable)?;
        }
        // As for a timed pause: the setting holds either way, a lost
        // announcement only leaves waiters until their next timeout.
        if (limit_changed || keys_changed || resumed)
            && let Err(e) = redis::cmd("PUBLISH")
                .arg(self.keys.wake_channel())
                .arg(topic.as_str())
                .query_async::<()>(&mut conn)
                .await
        {
            tracing::warn!(topic = %topic, error = %e, "topic resumed, its wake-up not announced");
        }
        self.known.lock().expect("poisoned").remove(topic.as_str());
        self.register(topic).await?;
        self.bump_settings_version().await?;
        Ok(self.topic_config(topic).await?.unwrap_or_default())
    }

    async fn delete_topic(&self, topic: &Topic, max: usize) -> StoreResult<(u64, bool)> {
        let v = self
            .run(&self.scripts.delete_topic, topic, &[&n(max.max(1) as u64)])
            .await?;
        let items = array(v)?;
        let deleted = int(&items[0])? as u64;
        let gone = int(&items[1])? == 1;
        if gone {
            let mut conn = self.conn.clone();
            let _: i64 = conn
                .zrem(self.keys.topic_names(), topic.as_str())
                .await
                .map_err(unavailable)?;
            let _: i64 = conn
                .srem(self.keys.topics(), topic.as_str())
                .await
                .map_err(unavailable)?;
            self.known.lock().expect("poisoned").remove(topic.as_str());
            self.bump_settings_version().await?;
        }
        Ok((deleted, gone))
    }

    async fn settings_version(&self) -> StoreResult<Option<u64>> {
        let mut conn = self.conn.clone();
        let v: Option<u64> = conn
            .get(self.keys.settings_version())
            .await
            .map_err(unavailable)?;
        Ok(Some(v.unwrap_or(0)))
    }

    async fn stats(&self, topic: &Topic, now_ms: u64) -> StoreResult<TopicStats> {
        let tk = self.keys.topic(topic);
        let mut conn = self.conn.clone();
        #[allow(clippy::type_complexity)]
        let (sched, ready, lease, dead, ctr, head, ready_head, key_head): (
            u64,
            u64,
            u64,
            u64,
            Vec<(String, i64)>,
            Vec<(String, f64)>,
            Vec<String>,
            Vec<(String, f64)>,
        ) = redis::pipe()
            .zcard(tk.sched())
            .zcard(tk.ready())
            .zcard(tk.lease())
            .zcard(tk.dead())
            .hgetall(tk.ctr())
            .zrange_withscores(tk.sched(), 0, 0)
            .zrange(tk.ready(), 0, 0)
            .zrange_withscores(tk.key_heads(), 0, 0)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let mut oldest_due: Option<u64> = None;
        if let Some((_, due)) = head.first() {
            oldest_due = Some(*due as u64);
        }
        let key_head = key_head.first().map(|(_, due)| *due as u64);
        for due in [
            ready_head.first().and_then(|m| ready_member_due(m)),
            key_head,
        ]
        .into_iter()
        .flatten()
        {
            oldest_due = Some(oldest_due.map_or(due, |d| d.min(due)));
        }
        let c = |name: &str| {
            ctr.iter()
                .find(|(k, _)| k == name)
                .map_or(0, |(_, v)| (*v).max(0) as u64)
        };
        Ok(TopicStats {
            // Jobs due soon are in the schedule ZSET, the rest in the wheel.
            scheduled: sched + c("far"),
            // Jobs with a flow-control key wait in their key's lane.
            ready: ready + c("kready"),
            reserved: lease,
            dead,
            oldest_overdue_ms: oldest_due.map_or(0, |d| now_ms.saturating_sub(d)),
            paused_until_ms: c("paused_until"),
            counters: TopicCounters {
                enqueued: c("enqueued"),
                acked: c("acked"),
                failed: c("failed"),
                expired: c("expired"),
                dead: c("dead"),
                cancelled: c("cancelled"),
                dead_dropped: c("dead_dropped"),
                replayed: c("replayed"),
                rate_limited: c("rate_limited"),
            },
            ..TopicStats::default()
        })
    }

    async fn pause_topic(&self, topic: &Topic, until_ms: u64) -> StoreResult<()> {
        self.register(topic).await?;
        let tk = self.keys.topic(topic);
        let key = tk.ctr();
        let mut conn = self.conn.clone();
        let mut cmd = if until_ms == 0 {
            redis::cmd("HDEL")
        } else {
            redis::cmd("HSET")
        };
        cmd.arg(key).arg("paused_until");
        if until_ms > 0 {
            cmd.arg(until_ms);
        }
        cmd.query_async::<()>(&mut conn)
            .await
            .map_err(unavailable)?;
        // Waiters sleeping until the pause's end (or the old one) look again.
        // The pause holds either way: a lost announcement is not an error
        // (waiters look again at their next wake-up or timeout).
        if let Err(e) = redis::cmd("PUBLISH")
            .arg(self.keys.wake_channel())
            .arg(topic.as_str())
            .query_async::<()>(&mut conn)
            .await
        {
            tracing::warn!(topic = %topic, error = %e, "pause set, its wake-up not announced");
        }
        Ok(())
    }

    async fn size_bytes(&self) -> StoreResult<Option<u64>> {
        if self.conn.is_cluster() {
            // INFO goes to one node of a Cluster: not the whole.
            return Ok(None);
        }
        let mut conn = self.conn.clone();
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

    async fn put_record(
        &self,
        kind: &str,
        name: &str,
        value: &str,
        mark: u64,
    ) -> StoreResult<bool> {
        let mut conn = self.conn.clone();
        // One HSET of both fields: atomic; it counts the fields it added.
        let added: u64 = redis::cmd("HSET")
            .arg(self.keys.records(kind))
            .arg(format!("v:{name}"))
            .arg(value)
            .arg(format!("m:{name}"))
            .arg(mark)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(added > 0)
    }

    async fn get_record(&self, kind: &str, name: &str) -> StoreResult<Option<Record>> {
        let mut conn = self.conn.clone();
        let (value, mark): (Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(self.keys.records(kind))
            .arg(format!("v:{name}"))
            .arg(format!("m:{name}"))
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(value.map(|value| Record {
            value,
            mark: mark.unwrap_or(0),
        }))
    }

    async fn list_records(&self, kind: &str) -> StoreResult<Vec<(String, Record)>> {
        let mut conn = self.conn.clone();
        let all: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.keys.records(kind))
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let mut out: Vec<(String, Record)> = all
            .iter()
            .filter_map(|(k, v)| {
                let name = k.strip_prefix("v:")?;
                let mark = all
                    .get(&format!("m:{name}"))
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(0);
                Some((
                    name.to_string(),
                    Record {
                        value: v.clone(),
                        mark,
                    },
                ))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    async fn delete_record(&self, kind: &str, name: &str) -> StoreResult<bool> {
        let mut conn = self.conn.clone();
        let n: u64 = redis::cmd("HDEL")
            .arg(self.keys.records(kind))
            .arg(format!("v:{name}"))
            .arg(format!("m:{name}"))
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(n > 0)
    }

    async fn raise_mark(&self, kind: &str, name: &str, mark: u64) -> StoreResult<Option<u64>> {
        let mut conn = self.conn.clone();
        let v: i64 = self
            .scripts
            .raise_mark
            .key(self.keys.records(kind))
            .arg(name)
            .arg(mark)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        // NOT_FOUND (negative): no such record.
        Ok(u64::try_from(v).ok())
    }

    async fn next_seq(&self, name: &str) -> StoreResult<u64> {
        let mut conn = self.conn.clone();
        redis::cmd("INCR")
            .arg(self.keys.seq(name))
            .query_async(&mut conn)
            .await
            .map_err(unavailable)
    }

    async fn time_ms(&self) -> StoreResult<Option<u64>> {
        if self.clock == TimeSource::Caller {
            return Ok(None);
        }
        let mut conn = self.conn.clone();
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(Some(secs * 1000 + micros / 1000))
    }

    async fn members(&self, me: &str, now_ms: u64, ttl_ms: u64) -> StoreResult<Vec<String>> {
        let key = self.keys.members();
        let mut conn = self.conn.clone();
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

    async fn ping(&self) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn watch_wakes(&self, on_wake: WakeFn) {
        let channel = self.keys.wake_channel();
        let mut next = 0;
        loop {
            let client = &self.pubsub[next % self.pubsub.len()];
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_url_hides_password() {
        assert_eq!(mask_url("redis://:secret@h:1/0"), "redis://***@h:1/0");
        assert_eq!(mask_url("redis://h:1"), "redis://h:1");
    }
}
