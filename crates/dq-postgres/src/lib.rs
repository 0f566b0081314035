//! dq-postgres: dq's store on PostgreSQL.
//!
//! Every dq sharing one database and schema sees the same jobs, as with
//! Redis. Each store call is one transaction: a write first locks its
//! topic's row (`SELECT … FOR UPDATE`), so the writes of one topic are
//! serialised as a Redis script's are, and different topics go in
//! parallel. Ready jobs are read in hand-out order with
//! `FOR UPDATE SKIP LOCKED`; a change that makes a job due earlier sends a
//! `NOTIFY` inside its transaction (it fires at commit), which every
//! instance's [`Store::watch_wakes`] hears through `LISTEN`. With
//! [`TimeSource::Database`] the store's clock is the database's
//! (`clock_timestamp()`), one time source for every instance.
//!
//! Modules:
//! - `schema`: tables, indexes, versions, [`OpenError`] and the migration.
//! - `cx`: one call's transaction, the topic lock, counts and wake-ups.
//! - `enqueue`, `reserve`, `leases`, `jobs`, `dead`, `topics`, `records`: the verbs,
//!   ported one for one from the embedded store's `ops/` (which mirror
//!   dq-redis's Lua scripts); the conformance suite holds all three to the
//!   same contract.
//! - `wakes`: the `LISTEN` connection behind `watch_wakes`.

use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use dq_core::*;

mod cx;
mod dead;
mod enqueue;
mod jobs;
mod leases;
mod records;
mod reserve;
mod schema;
mod topics;
mod wakes;

use cx::Cx;
pub use schema::OpenError;

/// Whose clock the store decides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeSource {
    /// The database's `clock_timestamp()`: one clock for every instance.
    #[default]
    Database,
    /// The `now_ms` callers pass (tests drive time with it).
    Caller,
}

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// `postgres://user:pass@host:port/db` (or a key=value string).
    pub url: String,
    /// The schema dq creates and uses.
    pub schema: String,
    /// Most connections in the pool (the `LISTEN` connection is apart).
    pub pool_size: usize,
    /// Whose clock decides.
    pub clock: TimeSource,
    /// Longest a statement of a store call may run (PostgreSQL's
    /// `statement_timeout` on the pool's connections), waits for locks
    /// included; a call that hits it is rolled back and answers
    /// [`StoreError::Unavailable`], and its connection goes back to the
    /// pool. `None`: the server's own setting (0, no limit, by default).
    pub statement_timeout: Option<std::time::Duration>,
}

impl Default for PgConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            schema: "dq".into(),
            pool_size: 16,
            clock: TimeSource::Database,
            statement_timeout: Some(DEFAULT_STATEMENT_TIMEOUT),
        }
    }
}

/// The default [`PgConfig::statement_timeout`]: far above what a bounded
/// store call takes, well below the pool's wait for a free connection
/// (10 s), so calls stuck behind a lock give their connections back before
/// calls queued for one give up.
pub const DEFAULT_STATEMENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// An error inside a store call: the [`StoreError`] the call answers.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) StoreError);

/// A store call's result inside this crate.
pub(crate) type OpResult<T> = Result<T, Failure>;

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure(e)
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        let text = match e.as_db_error() {
            Some(db) => format!("postgres: {} ({})", db.message(), db.code().code()),
            None => format!("postgres: {e}"),
        };
        Failure(StoreError::Unavailable(text))
    }
}

impl From<deadpool_postgres::PoolError> for Failure {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        Failure(StoreError::Unavailable(format!("postgres pool: {e}")))
    }
}

/// The store: a pool of connections to one schema.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    pg: tokio_postgres::Config,
    schema: String,
    clock: TimeSource,
    /// The NOTIFY channel of this schema.
    channel: String,
    /// Whether [`PgStore::migrate`] has succeeded: until then every call
    /// answers [`StoreError::Unavailable`] (the schema may be missing, or of
    /// a version this dq must not write).
    migrated: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.inner.schema)
            .finish()
    }
}

impl PgStore {
    /// Connects, creates or migrates the schema, and returns the store.
    ///
    /// # Errors
    /// [`OpenError`]: a bad URL or schema name, an unreachable database, a
    /// schema of a newer dq or of another program.
    pub async fn open(config: &PgConfig) -> Result<Self, OpenError> {
        let store = Self::new(config)?;
        store.migrate().await?;
        Ok(store)
    }

    /// The store, without touching the database: its pool connects when a
    /// call needs a connection. Call [`PgStore::migrate`] (or use
    /// [`PgStore::open`]) before the first call.
    ///
    /// # Errors
    /// [`OpenError::SchemaName`], [`OpenError::Url`].
    pub fn new(config: &PgConfig) -> Result<Self, OpenError> {
        if !schema::valid_schema_name(&config.schema) {
            return Err(OpenError::SchemaName(config.schema.clone()));
        }
        let mut pg: tokio_postgres::Config = config
            .url
            .parse()
            .map_err(|e: tokio_postgres::Error| OpenError::Url(e.to_string()))?;
        if pg.get_application_name().is_none() {
            pg.application_name("dq");
        }
        let schema = config.schema.clone();
        let mut pooled = pg.clone();
        // The URL's own `options` first, then dq's (the later `-c` wins).
        let mut options = pooled.get_options().map(str::to_owned).unwrap_or_default();
        options.push_str(&format!(" -c search_path={schema}"));
        if let Some(t) = config.statement_timeout {
            options.push_str(&format!(" -c statement_timeout={}", t.as_millis().max(1)));
        }
        pooled.options(options.trim_start());
        let manager = Manager::from_config(
            pooled,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size.max(1))
            .wait_timeout(Some(std::time::Duration::from_secs(10)))
            .create_timeout(Some(std::time::Duration::from_secs(5)))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| OpenError::Unreachable(e.to_string()))?;
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                pg,
                channel: format!("dq_wake.{schema}"),
                schema,
                clock: config.clock,
                migrated: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// Creates the schema or brings it to this dq's version, on a
    /// connection of its own.
    ///
    /// # Errors
    /// [`OpenError::Unreachable`], [`OpenError::NewerSchema`],
    /// [`OpenError::Foreign`], [`OpenError::Migrate`].
    pub async fn migrate(&self) -> Result<(), OpenError> {
        let (mut client, conn) = self
            .inner
            .pg
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| OpenError::Unreachable(Failure::from(e).0.to_string()))?;
        let driver = tokio::spawn(conn);
        let r = schema::migrate(&mut client, &self.inner.schema).await;
        drop(client);
        let _ = driver.await;
        if r.is_ok() {
            self.inner
                .migrated
                .store(true, std::sync::atomic::Ordering::Release);
        }
        r
    }

    /// The schema this store uses.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    async fn client(&self) -> OpResult<deadpool_postgres::Object> {
        if !self
            .inner
            .migrated
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(Failure(StoreError::Unavailable(
                "postgres: the schema is not checked yet (the database has not answered since dq started)".into(),
            )));
        }
        Ok(self.inner.pool.get().await?)
    }

    /// The caller's time when it decides, `None` when the database does.
    fn caller_now(&self, now_ms: u64) -> Option<u64> {
        (self.inner.clock == TimeSource::Caller).then_some(now_ms)
    }

    /// The current time by the store's clock, in this transaction.
    async fn now(&self, cx: &Cx<'_>, now_ms: u64) -> OpResult<u64> {
        match self.inner.clock {
            TimeSource::Caller => Ok(now_ms),
            TimeSource::Database => cx.db_now().await,
        }
    }
}

/// Runs `$body` (an async block using the `Cx` named `$cx`) in one
/// transaction of `$store`: committed, with its wake-ups sent, when it
/// returns `Ok`; rolled back otherwise. `lazy` first: the commit does not
/// wait for the disk (`synchronous_commit = off`), for calls whose loss in
/// a crash of PostgreSQL is a job handed out again, which at-least-once
/// allows — never an enqueue, a cancel or a setting.
macro_rules! in_tx {
    (lazy $store:expr, $cx:ident, $body:expr) => {
        in_tx!(@run true, $store, $cx, $body)
    };
    ($store:expr, $cx:ident, $body:expr) => {
        in_tx!(@run false, $store, $cx, $body)
    };
    (@run $lazy:expr, $store:expr, $cx:ident, $body:expr) => {{
        async {
            let mut client = $store.client().await?;
            let tx = client.transaction().await?;
            if $lazy {
                // A change whose loss in a crash only hands a job out again
                // (a lease, an ack, a retry): its commit does not wait for
                // the WAL to reach the disk, and its locks go sooner.
                tx.batch_execute("SET LOCAL synchronous_commit TO off").await?;
            }
            let mut $cx = Cx::new(&tx, &$store.inner.channel);
            let out: OpResult<_> = $body;
            match out {
                Ok(v) => {
                    $cx.send_wakes().await?;
                    drop($cx);
                    tx.commit().await.map_err(commit_failed)?;
                    Ok(v)
                }
                Err(e) => {
                    drop($cx);
                    let _ = tx.rollback().await;
                    Err(e)
                }
            }
        }
        .await
        .map_err(|e: Failure| e.0)
    }};
}

/// A `COMMIT` that failed: refused by the server (a known rollback, as any
/// statement's error), or lost with the connection, when the database may
/// or may not have committed it: `store_outcome_unknown`, as the embedded
/// store answers a failed fsync (a retry with the same id is safe).
fn commit_failed(e: tokio_postgres::Error) -> Failure {
    if e.as_db_error().is_some() {
        return Failure::from(e);
    }
    Failure(StoreError::Storage {
        code: "store_outcome_unknown",
        message: format!(
            "the connection to PostgreSQL was lost during COMMIT ({e}): this write may or may not have been kept; retry with the same id"
        ),
    })
}

/// Runs `$call` for each item of `$items` (bound to `$it`) in the call's
/// one transaction: an item refused is undone alone (a savepoint each), as
/// the single verb would answer it; any other error fails the call.
macro_rules! per_item {
    ($cx:ident, $items:expr, |$it:ident| $call:expr) => {{
        let mut out = Vec::with_capacity($items.len());
        for $it in $items {
            $cx.batch("SAVEPOINT item").await?;
            match $call.await {
                Ok(r) => {
                    $cx.batch("RELEASE SAVEPOINT item").await?;
                    out.push(Ok(r));
                }
                Err(Failure(
                    e @ (StoreError::NotFound
                    | StoreError::LeaseMismatch
                    | StoreError::NotInState(_)),
                )) => {
                    $cx.batch("ROLLBACK TO SAVEPOINT item; RELEASE SAVEPOINT item")
                        .await?;
                    out.push(Err(e));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }};
}

#[async_trait]
impl Store for PgStore {
    async fn enqueue(
        &self,
        topic: &Topic,
        jobs: &[NewJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Enqueued>> {
        in_tx!(self, cx, {
            let now = self.now(&cx, now_ms).await?;
            enqueue::enqueue(&mut cx, topic, jobs, now).await
        })
    }

    async fn get(&self, topic: &Topic, id: &JobId) -> StoreResult<Option<JobInfo>> {
        in_tx!(self, cx, jobs::get(&mut cx, topic, id).await)
    }

    async fn cancel(
        &self,
        topic: &Topic,
        id: &JobId,
        now_ms: u64,
    ) -> StoreResult<Option<JobState>> {
        in_tx!(self, cx, {
            let now = self.now(&cx, now_ms).await?;
            jobs::cancel(&mut cx, topic, id, now).await
        })
    }

    async fn reschedule(
        &self,
        topic: &Topic,
        id: &JobId,
        due_at_ms: u64,
        kick: bool,
        now_ms: u64,
    ) -> StoreResult<()> {
        in_tx!(self, cx, {
            let now = self.now(&cx, now_ms).await?;
            jobs::reschedule(&mut cx, topic, id, due_at_ms, kick, now).await
        })
    }

    async fn reserve(
        &self,
        topic: &Topic,
        max: usize,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Reservation> {
        in_tx!(lazy self, cx, {
            let now = self.now(&cx, now_ms).await?;
            reserve::reserve(&mut cx, topic, max, lease_ms, now).await
        })
    }

    async fn touch(
        &self,
        topic: &Topic,
        id: &JobId,
        token: &str,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<u64> {
        in_tx!(lazy self, cx, {
            let now = self.now(&cx, now_ms).await?;
            leases::touch(&mut cx, topic, id, token, lease_ms, now).await
        })
    }

    async fn ack(&self, topic: &Topic, id: &JobId, token: &str, now_ms: u64) -> StoreResult<()> {
        // Lazy by its own statement (see `leases::ack`): one round trip fewer.
        let now = self.caller_now(now_ms);
        in_tx!(self, cx, leases::ack(&mut cx, topic, id, token, now).await)
    }

    async fn ack_batch(&self, items: &[AckItem], now_ms: u64) -> Vec<StoreResult<()>> {
        let now = self.caller_now(now_ms);
        let r = in_tx!(self, cx, leases::ack_batch(&mut cx, items, now).await);
        spread(r, items.len())
    }

    async fn nack(
        &self,
        topic: &Topic,
        id: &JobId,
        nack: Nack<'_>,
        now_ms: u64,
    ) -> StoreResult<NackOutcome> {
        in_tx!(lazy self, cx, {
            let now = self.now(&cx, now_ms).await?;
            cx.lock_topics(&[topic]).await?;
            leases::nack(&mut cx, topic, id, nack, now).await
        })
    }

    async fn nack_batch(&self, items: &[NackItem], now_ms: u64) -> Vec<StoreResult<NackOutcome>> {
        let r = in_tx!(lazy self, cx, {
            let now = self.now(&cx, now_ms).await?;
            let topics: Vec<&Topic> = items.iter().map(|i| &i.topic).collect();
            cx.lock_topics(&topics).await?;
            per_item!(cx, items, |it| leases::nack(
                &mut cx,
                &it.topic,
                &it.id,
                it.nack(),
                now
            ))
        });
        spread(r, items.len())
    }

    async fn touch_batch(&self, items: &[TouchItem], now_ms: u64) -> Vec<StoreResult<u64>> {
        let r = in_tx!(lazy self, cx, {
            let now = self.now(&cx, now_ms).await?;
            per_item!(cx, items, |it| leases::touch(
                &mut cx,
                &it.topic,
                &it.id,
                &it.token,
                it.lease_ms,
                now
            ))
        });
        spread(r, items.len())
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
        in_tx!(lazy self, cx, {
            let now = self.now(&cx, now_ms).await?;
            cx.lock_topics(&[topic]).await?;
            leases::release(&mut cx, topic, id, token, delay_ms, how, now).await
        })
    }

    async fn promote_due(&self, topic: &Topic, max: usize, now_ms: u64) -> StoreResult<Promoted> {
        in_tx!(lazy self, cx, {
            let now = self.now(&cx, now_ms).await?;
            reserve::promote_due(&mut cx, topic, max, now).await
        })
    }

    async fn requeue_expired(
        &self,
        topic: &Topic,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<Requeued> {
        in_tx!(lazy self, cx, {
            let now = self.now(&cx, now_ms).await?;
            leases::requeue_expired(&mut cx, topic, max, now).await
        })
    }

    async fn list_dead(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        in_tx!(
            self,
            cx,
            jobs::list_dead(&mut cx, topic, offset, limit).await
        )
    }

    async fn list_scheduled(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        in_tx!(
            self,
            cx,
            jobs::list_scheduled(&mut cx, topic, offset, limit).await
        )
    }

    async fn list_ready(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        in_tx!(
            self,
            cx,
            jobs::list_ready(&mut cx, topic, offset, limit).await
        )
    }

    async fn list_jobs(
        &self,
        topic: &Topic,
        state: Option<JobState>,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<JobPage> {
        in_tx!(
            self,
            cx,
            jobs::list_jobs(&mut cx, topic, state, cursor, limit).await
        )
    }

    async fn import_jobs(
        &self,
        topic: &Topic,
        jobs: &[ImportJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Imported>> {
        in_tx!(self, cx, {
            let now = self.now(&cx, now_ms).await?;
            jobs::import_jobs(&mut cx, topic, jobs, now).await
        })
    }

    async fn replay_dead(
        &self,
        topic: &Topic,
        ids: Option<&[JobId]>,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<u64> {
        in_tx!(self, cx, {
            let now = self.now(&cx, now_ms).await?;
            dead::replay_dead(&mut cx, topic, ids, max, now).await
        })
    }

    async fn purge_dead(&self, topic: &Topic, max: usize) -> StoreResult<u64> {
        in_tx!(self, cx, dead::purge_dead(&mut cx, topic, max).await)
    }

    async fn topics(&self) -> StoreResult<Vec<Topic>> {
        in_tx!(self, cx, topics::topics(&mut cx).await)
    }

    async fn list_topics(&self, listing: &TopicListing<'_>) -> StoreResult<TopicPage> {
        in_tx!(self, cx, topics::list_topics(&mut cx, listing).await)
    }

    async fn topic_config(&self, topic: &Topic) -> StoreResult<Option<TopicConfig>> {
        in_tx!(self, cx, topics::topic_config(&mut cx, topic).await)
    }

    async fn configure_topic(
        &self,
        topic: &Topic,
        patch: &TopicConfigPatch,
    ) -> StoreResult<TopicConfig> {
        in_tx!(
            self,
            cx,
            topics::configure_topic(&mut cx, topic, patch).await
        )
    }

    async fn delete_topic(&self, topic: &Topic, max: usize) -> StoreResult<(u64, bool)> {
        in_tx!(self, cx, topics::delete_topic(&mut cx, topic, max).await)
    }

    async fn settings_version(&self) -> StoreResult<Option<u64>> {
        in_tx!(self, cx, {
            let r = cx
                .one("SELECT value FROM meta WHERE key = 'settings_version'", &[])
                .await?;
            Ok(Some(r.get::<_, i64>(0) as u64))
        })
    }

    async fn stats(&self, topic: &Topic, now_ms: u64) -> StoreResult<TopicStats> {
        in_tx!(self, cx, {
            let now = self.now(&cx, now_ms).await?;
            topics::stats(&mut cx, topic, now).await
        })
    }

    async fn ping(&self) -> StoreResult<()> {
        let c = self.client().await.map_err(|e| e.0)?;
        c.simple_query("SELECT 1")
            .await
            .map_err(|e| Failure::from(e).0)?;
        Ok(())
    }

    async fn members(&self, me: &str, now_ms: u64, ttl_ms: u64) -> StoreResult<Vec<String>> {
        in_tx!(self, cx, {
            let now = self.now(&cx, now_ms).await? as i64;
            records::members(&mut cx, me, now, ttl_ms as i64).await
        })
    }

    async fn reserve_job(
        &self,
        topic: &Topic,
        id: &JobId,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Option<Lease>> {
        in_tx!(lazy self, cx, {
            let now = self.now(&cx, now_ms).await?;
            reserve::reserve_job(&mut cx, topic, id, lease_ms, now).await
        })
    }

    async fn pause_topic(&self, topic: &Topic, until_ms: u64) -> StoreResult<()> {
        in_tx!(
            self,
            cx,
            topics::pause_topic(&mut cx, topic, until_ms).await
        )
    }

    async fn size_bytes(&self) -> StoreResult<Option<u64>> {
        in_tx!(self, cx, {
            let r = cx
                .one(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')",
                    &[],
                )
                .await?;
            Ok(Some(r.get::<_, i64>(0).max(0) as u64))
        })
    }

    async fn next_seq(&self, name: &str) -> StoreResult<u64> {
        in_tx!(self, cx, records::next_seq(&mut cx, name).await)
    }

    async fn time_ms(&self) -> StoreResult<Option<u64>> {
        match self.inner.clock {
            TimeSource::Caller => Ok(None),
            TimeSource::Database => in_tx!(self, cx, Ok(Some(self.now(&cx, 0).await?))),
        }
    }

    async fn put_record(
        &self,
        kind: &str,
        name: &str,
        value: &str,
        mark: u64,
    ) -> StoreResult<bool> {
        in_tx!(
            self,
            cx,
            records::put_record(&mut cx, kind, name, value, mark).await
        )
    }

    async fn get_record(&self, kind: &str, name: &str) -> StoreResult<Option<Record>> {
        in_tx!(self, cx, records::get_record(&mut cx, kind, name).await)
    }

    async fn list_records(&self, kind: &str) -> StoreResult<Vec<(String, Record)>> {
        in_tx!(self, cx, records::list_records(&mut cx, kind).await)
    }

    async fn delete_record(&self, kind: &str, name: &str) -> StoreResult<bool> {
        in_tx!(self, cx, records::delete_record(&mut cx, kind, name).await)
    }

    async fn raise_mark(&self, kind: &str, name: &str, mark: u64) -> StoreResult<Option<u64>> {
        in_tx!(
            self,
            cx,
            records::raise_mark(&mut cx, kind, name, mark).await
        )
    }

    async fn watch_wakes(&self, on_wake: WakeFn) {
        wakes::watch(self.inner.pg.clone(), self.inner.channel.clone(), on_wake).await
    }

    fn max_partitions(&self) -> u32 {
        1
    }

    fn backup_advice(&self) -> Option<String> {
        Some(backup_advice(&self.inner.schema))
    }
}

/// A batch call's answer: its items' results, or the call's error for
/// every item (the transaction was rolled back).
fn spread<T>(r: StoreResult<Vec<StoreResult<T>>>, n: usize) -> Vec<StoreResult<T>> {
    match r {
        Ok(v) => v,
        Err(e) => (0..n).map(|_| Err(e.clone())).collect(),
    }
}

/// What to use instead of a dq backup for the store in `schema`: the
/// message of [`Store::backup_advice`], also given by `dq backup` when it
/// is pointed at a PostgreSQL store (without connecting to it).
pub fn backup_advice(schema: &str) -> String {
    format!(
        "this dq's store is PostgreSQL (schema {schema}), which dq does not copy: back it up with PostgreSQL's own tools, e.g. pg_dump --schema={schema} --format=custom --file=dq.dump DATABASE_URL, and restore with pg_restore (see docs/postgres.md)"
    )
}

/// `url` with its password hidden, for logs and messages.
pub fn mask_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mask_url_hides_only_the_password() {
        assert_eq!(
            super::mask_url("postgres://app:s3cr@t@db:5432/shop"),
            "postgres://app:***@db:5432/shop"
        );
        assert_eq!(
            super::mask_url("postgres://app@db/shop"),
            "postgres://app@db/shop"
        );
        assert_eq!(super::mask_url("host=db user=app"), "host=db user=app");
    }
}
