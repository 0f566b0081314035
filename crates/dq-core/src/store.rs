//! The contract every store keeps (see docs/design.md, "Job lifecycle").
//!
//! Every method is one state transition done atomically by the store, with a
//! bounded amount of work. Time comes in as `now_ms` from the caller's
//! [`Clock`](crate::Clock), so stores never read a clock of their own and tests
//! drive time exactly.

use async_trait::async_trait;

use crate::limits::InvalidInput;
use crate::model::*;
use crate::topic::{TopicConfig, TopicConfigPatch};

/// Why a store call failed, phrased as what the caller does next.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// No such job (acked, cancelled, dropped, or never there).
    #[error("job not found")]
    NotFound,
    /// The job exists but is not in a state that allows this call.
    #[error("job is {0}")]
    NotInState(JobState),
    /// The token is not the current lease's: another attempt holds (or held) it.
    #[error("lease token does not match the job's current lease")]
    LeaseMismatch,
    /// Bad input; nothing was written.
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    /// The store cannot be reached or answered with an error; try again later.
    /// The text is for logs, not for clients.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store's storage refuses writes for a reason an operator must fix
    /// (disk full, read-only files); the code and message are for clients.
    #[error("{message}")]
    Storage {
        /// Stable machine-readable code, e.g. `store_full`.
        code: &'static str,
        /// What is wrong, for a person.
        message: String,
    },
}

/// A store result.
pub type StoreResult<T> = Result<T, StoreError>;

/// What a [`Store::backup`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// The file's size.
    pub bytes: u64,
    /// Its pages.
    pub pages: u64,
    /// The schema version of the data copied.
    pub schema_version: i64,
    /// How long the copy took.
    pub took: std::time::Duration,
}

/// Why a [`Store::backup`] wrote nothing, phrased as what the caller does
/// next. The messages are for clients.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackupError {
    /// This store is not copied by dq (Redis: back up Redis itself).
    #[error("this store cannot be backed up by dq")]
    Unsupported,
    /// The destination exists: a backup never overwrites a file.
    #[error("{0}")]
    Exists(String),
    /// The copy failed; nothing is left under the destination.
    #[error("{0}")]
    Failed(String),
}

/// One of [`Store::work_counters`]: a Prometheus counter (it only grows
/// while the process runs).
#[derive(Clone, Debug, PartialEq)]
pub struct WorkCounter {
    /// The metric's name (`dq_…_total`).
    pub name: &'static str,
    /// Its `# HELP` text.
    pub help: &'static str,
    /// Its value.
    pub value: f64,
}

/// The storage behind dq. Implementations: `dq-redis` (`RedisStore` for one
/// server or a Cluster, `ShardedStore` over shards and partitions) and
/// `dq-embedded` (SQLite on local disk).
///
/// All ids and topics are already validated; bodies are within limits.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Enqueues up to [`MAX_BATCH`](crate::limits::MAX_BATCH) jobs on one topic,
    /// in order, in one atomic step. An existing id is left as it is
    /// (`created: false`) unless the job asks to `replace` and the existing
    /// job is still waiting (scheduled or ready). An id whose job ended
    /// (acked, cancelled, went dead) less than its dedup window ago
    /// ([`NewJob::dedup_ms`], else the topic's) writes nothing and answers
    /// `deduplicated` — `replace` included. A job's expiry
    /// ([`NewJob::expires`](crate::NewJob::expires)) is made absolute at
    /// `now_ms`; a job without one gets its topic's `expires_ms` after its
    /// due time (none when 0). A store that does not keep expiry refuses a
    /// job with one ([`StoreError::Invalid`], `expiry_unsupported`). A
    /// job's trace context ([`NewJob::trace`](crate::NewJob::trace)) is
    /// kept with it for its whole life and handed back in every
    /// [`Lease`] and [`JobInfo`] of it (an import keeps one too).
    async fn enqueue(
        &self,
        topic: &Topic,
        jobs: &[NewJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Enqueued>>;

    /// Reads one job.
    async fn get(&self, topic: &Topic, id: &JobId) -> StoreResult<Option<JobInfo>>;

    /// Removes a job in any state. Returns the state it was in, or `None` if
    /// there was no such job. A cancelled reserved job is not retried, and its
    /// holder's ack reports [`StoreError::NotFound`]. Starts the job's dedup
    /// window at `now_ms`.
    async fn cancel(&self, topic: &Topic, id: &JobId, now_ms: u64)
    -> StoreResult<Option<JobState>>;

    /// Moves a waiting (scheduled or ready) job to a new due time; with
    /// `kick` (beanstalkd's `kick` of a delayed job) it counts in the
    /// job's `kicks`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`], or [`StoreError::NotInState`] when reserved or dead.
    async fn reschedule(
        &self,
        topic: &Topic,
        id: &JobId,
        due_at_ms: u64,
        kick: bool,
        now_ms: u64,
    ) -> StoreResult<()>;

    /// Hands out up to `max` due jobs of one topic under leases, most urgent
    /// first (priority, then due time — put time for a job ranked in put
    /// order, [`NewJob::put_order`](crate::NewJob::put_order) — then
    /// enqueue order). `lease_ms`
    /// overrides the job's and the topic's lease length. A job whose expiry
    /// is at or before `now_ms` is not handed out: in the same atomic step
    /// it goes dead with the last error
    /// [`EXPIRED_ERROR`](crate::EXPIRED_ERROR) (or is deleted, with the
    /// topic's `on_expiry` `drop`), its dedup window opens, the topic's
    /// `expired_unhandled` counts it, and the jobs behind it go in its
    /// place. [`Store::reserve_job`] does the same with a waiting job.
    async fn reserve(
        &self,
        topic: &Topic,
        max: usize,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Reservation>;

    /// Extends a lease to `now + lease_ms`; returns the new deadline.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::LeaseMismatch`] for a token
    /// that is not the current lease's (a waiting job has no lease, so any
    /// token is stale); [`StoreError::NotInState`] when the job is dead.
    async fn touch(
        &self,
        topic: &Topic,
        id: &JobId,
        token: &str,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<u64>;

    /// Completes a job: it is gone; its dedup window starts at `now_ms`.
    ///
    /// # Errors
    /// As [`Store::touch`].
    async fn ack(&self, topic: &Topic, id: &JobId, token: &str, now_ms: u64) -> StoreResult<()>;

    /// Acks many jobs (of one topic or several) in one call: a result per
    /// item, in order, each what [`Store::ack`] would have answered had the
    /// items been acked one after the other (so a duplicate item answers
    /// [`StoreError::NotFound`] after its first ack). A refused item changes
    /// nothing. Up to [`MAX_BATCH`](crate::limits::MAX_BATCH) items per call
    /// are done with a bounded amount of work each; a store may split larger
    /// batches. [`StoreError::Unavailable`] for an item means the store did
    /// not answer for it (it may or may not be acked).
    ///
    /// Default: [`Store::ack`] for each item in turn. Redis overrides it with
    /// one script call per topic (hash slot), the embedded store with one
    /// writer transaction.
    async fn ack_batch(&self, items: &[AckItem], now_ms: u64) -> Vec<StoreResult<()>> {
        let mut out = Vec::with_capacity(items.len());
        for it in items {
            out.push(self.ack(&it.topic, &it.id, &it.token, now_ms).await);
        }
        out
    }

    /// Fails an attempt: the job is retried after `nack.retry_in_ms` (or the
    /// retry policy's wait), or goes dead when it was the last attempt or
    /// `nack.dead` says so (whatever attempts are left).
    ///
    /// # Errors
    /// As [`Store::touch`].
    async fn nack(
        &self,
        topic: &Topic,
        id: &JobId,
        nack: Nack<'_>,
        now_ms: u64,
    ) -> StoreResult<NackOutcome>;

    /// Nacks many jobs (of one topic or several) in one call: a result per
    /// item, in order, each what [`Store::nack`] would have answered had the
    /// items been nacked one after the other (a duplicate item answers
    /// [`StoreError::LeaseMismatch`] after its first nack: the job is
    /// waiting, or [`StoreError::NotInState`] if it went dead). A refused
    /// item changes nothing. Bounds and [`StoreError::Unavailable`] as
    /// [`Store::ack_batch`].
    ///
    /// Default: [`Store::nack`] for each item in turn. Redis overrides it with
    /// one script call per topic (hash slot), the embedded store with one
    /// writer transaction.
    async fn nack_batch(&self, items: &[NackItem], now_ms: u64) -> Vec<StoreResult<NackOutcome>> {
        let mut out = Vec::with_capacity(items.len());
        for it in items {
            out.push(self.nack(&it.topic, &it.id, it.nack(), now_ms).await);
        }
        out
    }

    /// Extends many leases (of one topic or several) in one call: a result
    /// per item, in order, each what [`Store::touch`] would have answered
    /// (the new deadline). A refused item changes nothing. Bounds and
    /// [`StoreError::Unavailable`] as [`Store::ack_batch`].
    ///
    /// Default: [`Store::touch`] for each item in turn. Redis overrides it
    /// with one script call per topic (hash slot), the embedded store with
    /// one writer transaction.
    async fn touch_batch(&self, items: &[TouchItem], now_ms: u64) -> Vec<StoreResult<u64>> {
        let mut out = Vec::with_capacity(items.len());
        for it in items {
            out.push(
                self.touch(&it.topic, &it.id, &it.token, it.lease_ms, now_ms)
                    .await,
            );
        }
        out
    }

    /// Gives a reserved job back without counting the attempt: it is due
    /// again after `delay_ms`, its attempts as before the lease (its
    /// `reserves` keep the hand-out). [`GiveBack::Released`] counts in its
    /// `releases` (and sets a put-order job's `put_delay_ms` to
    /// `delay_ms`); [`GiveBack::Dropped`] counts nothing. Returns the new
    /// due time.
    ///
    /// # Errors
    /// As [`Store::touch`].
    async fn release(
        &self,
        topic: &Topic,
        id: &JobId,
        token: &str,
        delay_ms: u64,
        how: GiveBack,
        now_ms: u64,
    ) -> StoreResult<u64>;

    /// Whether [`Store::backup`] copies this store (the embedded store);
    /// a caller asks before checking a destination, so a store dq does not
    /// copy is refused first. Default: no.
    fn can_backup(&self) -> bool {
        false
    }

    /// What an operator uses instead of [`Store::backup`] for a store dq
    /// does not copy, for the refusal's message (PostgreSQL: `pg_dump`).
    /// Default: `None` (the caller says to back up Redis itself).
    fn backup_advice(&self) -> Option<String> {
        None
    }

    /// Writes a consistent copy of the store to the new file `to` (on the
    /// store's machine) while writes go on, and returns when it is whole:
    /// a file under `to` is always a whole backup.
    ///
    /// # Errors
    /// [`BackupError::Exists`] when `to` exists; [`BackupError::Failed`]
    /// when the copy cannot be written. Default:
    /// [`BackupError::Unsupported`].
    async fn backup(&self, to: &std::path::Path) -> Result<BackupReport, BackupError> {
        let _ = to;
        Err(BackupError::Unsupported)
    }

    /// Moves up to `max` due jobs from scheduled to ready.
    async fn promote_due(&self, topic: &Topic, max: usize, now_ms: u64) -> StoreResult<Promoted>;

    /// Takes back up to `max` expired leases: each counts as a failed attempt.
    async fn requeue_expired(
        &self,
        topic: &Topic,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<Requeued>;

    /// Lists dead letters, oldest death first, starting at `offset`.
    async fn list_dead(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>>;

    /// Lists up to `limit` scheduled (not yet due) jobs, earliest due first
    /// (then in enqueue order), after skipping the first `offset`: page
    /// after page for an admin view and peeks. `limit` is small; a page
    /// costs about `offset + limit` index entries. Jobs that change state
    /// between two pages may be missed or shown twice.
    async fn list_scheduled(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>>;

    /// Lists up to `limit` ready jobs in hand-out order (priority, due time,
    /// enqueue order; jobs with a flow-control key after those without),
    /// after skipping the first `offset`, as [`Store::list_scheduled`].
    async fn list_ready(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>>;

    /// One page of every job of `topic` (or of those in `state`), for an
    /// export: start with `cursor` `None`, go on with each page's cursor
    /// until it is `None`. A call looks at about `limit` jobs (at most
    /// [`MAX_BATCH`](crate::limits::MAX_BATCH); Redis answers a small
    /// topic's whole table at once: up to its `hash-max-listpack-entries`,
    /// 512 by default) and returns those in
    /// `state`, so a page may be short or empty while more follow.
    ///
    /// The order is the store's own (by id on the embedded store, the job
    /// table's on Redis), not a state's index, so a job that changes state
    /// or due time during the listing keeps its place: every job present
    /// from the first page to the last is listed once, in the state it had
    /// when its page was read (a job listed before it changed state is not
    /// listed again; with `state`, a job that moved into or out of it may
    /// be listed or not). Jobs created during the listing may or may not be
    /// listed. On Redis a job may be listed twice if Redis shrinks the
    /// topic's job table meanwhile (most of its jobs removed during the
    /// listing); an import by id absorbs that.
    ///
    /// # Errors
    /// `invalid_cursor` ([`StoreError::Invalid`]) for a cursor this store
    /// did not hand out.
    async fn list_jobs(
        &self,
        topic: &Topic,
        state: Option<JobState>,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<JobPage>;

    /// Writes up to [`MAX_BATCH`](crate::limits::MAX_BATCH) jobs as they
    /// were in another store (checked with [`ImportJob::check`]), in order,
    /// in one atomic step: due time, priority, attempts, overrides, last
    /// error and dead letters kept; a waiting job is ready if its due time
    /// has passed at `now_ms`, else scheduled. Idempotent by id: an
    /// existing job is left as it is (`created: false`), and the id of a
    /// job that ended within its dedup window writes nothing
    /// (`deduplicated`). Dead letters over the
    /// topic's `dead_cap` are dropped, oldest first, as when jobs die.
    /// Counts created jobs as enqueued.
    async fn import_jobs(
        &self,
        topic: &Topic,
        jobs: &[ImportJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Imported>>;

    /// Makes dead letters due now with a fresh attempt count and no expiry:
    /// the named ones, or (with `None`) up to `max` of the oldest. Returns
    /// how many.
    async fn replay_dead(
        &self,
        topic: &Topic,
        ids: Option<&[JobId]>,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<u64>;

    /// Deletes up to `max` dead letters (oldest first). Returns how many.
    async fn purge_dead(&self, topic: &Topic, max: usize) -> StoreResult<u64>;

    /// Every known topic, in name order. For small listings and loops that
    /// visit every topic; a listing for people pages with
    /// [`Store::list_topics`].
    async fn topics(&self) -> StoreResult<Vec<Topic>>;

    /// One page of the known topics (those [`Store::topics`] lists) in name
    /// (byte) order: those that start with `listing.prefix` (empty: all; a
    /// prefix no topic name can start with, see [`Topic::check_prefix`],
    /// matches none), at most `listing.limit` (at least 1) of them, right
    /// after `listing.cursor` (exclusive; it need not exist any more) — or,
    /// `backward`, right before it — and whether more follow that way.
    /// Paging on with the last topic (backward: the first) as the cursor
    /// lists every topic present from the first page to the last exactly
    /// once; a topic created or deleted meanwhile may be listed or not. The
    /// work is about `limit` names, whatever the number of topics.
    async fn list_topics(&self, listing: &TopicListing<'_>) -> StoreResult<TopicPage>;

    /// A topic's settings; `None` if the topic is unknown.
    async fn topic_config(&self, topic: &Topic) -> StoreResult<Option<TopicConfig>>;

    /// Creates or updates a topic's settings; fields left out keep their
    /// value (or the default). Returns the resulting settings.
    async fn configure_topic(
        &self,
        topic: &Topic,
        patch: &TopicConfigPatch,
    ) -> StoreResult<TopicConfig>;

    /// Deletes up to `max` of a topic's jobs; when none are left, forgets the
    /// topic. Returns how many jobs were deleted and whether the topic is gone.
    async fn delete_topic(&self, topic: &Topic, max: usize) -> StoreResult<(u64, bool)>;

    /// A number that changes whenever a topic's settings change or a topic
    /// is deleted, through any instance sharing the store, so that readers
    /// keep settings until it moves instead of reading every topic's again
    /// each second. `None`: the store cannot say (readers then read again
    /// after a short time, as before). A change becomes visible in the
    /// number after the settings themselves.
    async fn settings_version(&self) -> StoreResult<Option<u64>> {
        Ok(None)
    }

    /// Counts and counters of a topic.
    async fn stats(&self, topic: &Topic, now_ms: u64) -> StoreResult<TopicStats>;

    /// Checks the store answers.
    async fn ping(&self) -> StoreResult<()>;

    /// Records that dispatcher `me` is alive at `now_ms` and returns every
    /// dispatcher seen alive within the last `ttl_ms`, sorted, `me`
    /// included; dispatchers share the topics among themselves by it. A
    /// store only one process uses (the embedded one) returns just `me`.
    async fn members(&self, me: &str, now_ms: u64, ttl_ms: u64) -> StoreResult<Vec<String>> {
        let _ = (now_ms, ttl_ms);
        Ok(vec![me.to_string()])
    }

    /// Leases one job by id, whether scheduled, ready or dead (beanstalkd's
    /// `reserve-job`); `None` when there is no such job or it is reserved.
    /// A dead job leaves the dead letters; the hand-out counts an attempt.
    async fn reserve_job(
        &self,
        topic: &Topic,
        id: &JobId,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Option<Lease>>;

    /// Pauses `topic` until `until_ms` (0: resumes it): reserves hand nothing
    /// out of it before then and answer the pause's end as the next due
    /// time. Kept in the topic's counters; `stats` reports it.
    async fn pause_topic(&self, topic: &Topic, until_ms: u64) -> StoreResult<()>;

    /// The store's size in bytes, where it can tell: the embedded store's
    /// files, the Redis servers' `used_memory` (the whole server's, dq's keys
    /// and any others). Default: unknown.
    async fn size_bytes(&self) -> StoreResult<Option<u64>> {
        Ok(None)
    }

    /// Counters of the store's own work, for `/metrics`: the embedded
    /// store's writer thread (calls run, commits, seconds busy), which
    /// tell how close that one thread is to its capacity. Default: none.
    fn work_counters(&self) -> Vec<WorkCounter> {
        Vec::new()
    }

    /// The next value of the counter `name`: 1, 2, 3, … — unique and
    /// increasing across every process sharing the store (beanstalkd job
    /// ids are such numbers).
    async fn next_seq(&self, name: &str) -> StoreResult<u64>;

    /// The clock this store decides by, when it has its own (Redis: the
    /// server's `TIME`): Unix ms. `None` when the store decides by the
    /// `now_ms` its callers pass (the embedded store; Redis driven by a test
    /// clock). Instances compare their own clock with it to sleep until the
    /// right moment and to report their offset.
    async fn time_ms(&self) -> StoreResult<Option<u64>> {
        Ok(None)
    }

    /// Writes the named record `name` of `kind` (e.g. `schedule`): its
    /// `value` (opaque text, at most [`MAX_RECORD_BYTES`]) and its `mark`,
    /// replacing both if it exists. Returns whether it was created. Every
    /// process sharing the store sees the same records.
    async fn put_record(&self, kind: &str, name: &str, value: &str, mark: u64)
    -> StoreResult<bool>;

    /// Reads one record; `None` if there is none.
    async fn get_record(&self, kind: &str, name: &str) -> StoreResult<Option<Record>>;

    /// Every record of `kind`, sorted by name.
    async fn list_records(&self, kind: &str) -> StoreResult<Vec<(String, Record)>>;

    /// Deletes a record; returns whether there was one.
    async fn delete_record(&self, kind: &str, name: &str) -> StoreResult<bool>;

    /// Raises a record's mark to `mark` if it is lower, atomically (two
    /// processes raising at once keep the higher). Returns the mark after
    /// the call, or `None` if there is no such record (nothing is created).
    async fn raise_mark(&self, kind: &str, name: &str, mark: u64) -> StoreResult<Option<u64>>;

    /// Each part of the store (one per Redis shard) and whether it answers.
    async fn health(&self) -> Vec<(String, StoreResult<()>)> {
        vec![("store".to_string(), self.ping().await)]
    }

    /// Calls `on_wake(topic)` whenever a job of `topic` became due earlier
    /// than before, through this process or another one, so waiting
    /// consumers and the dispatcher can wake up: the only source of
    /// wake-ups (the service wakes nobody itself), so every store must
    /// implement it (`watch_wakes_announces_what_became_due` checks). Runs
    /// until dropped, reconnecting as needed. The default announces
    /// nothing: waiters then see new jobs only at their next timeout.
    async fn watch_wakes(&self, on_wake: WakeFn) {
        let _ = on_wake;
        std::future::pending::<()>().await
    }

    /// Most partitions a topic of this store may have (the embedded store
    /// keeps every topic whole: 1). What the served OpenAPI document says.
    fn max_partitions(&self) -> u32 {
        crate::topic::MAX_PARTITIONS
    }
}

/// Longest [`Record::value`], in bytes.
pub const MAX_RECORD_BYTES: usize = 1 << 20;

/// A named record kept in the store ([`Store::put_record`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// What the owner wrote (a schedule's settings as JSON).
    pub value: String,
    /// A number [`Store::raise_mark`] only raises, and [`Store::put_record`]
    /// sets (a schedule's progress: every slot up to it is dealt with).
    pub mark: u64,
}

/// Callback for [`Store::watch_wakes`].
pub type WakeFn = std::sync::Arc<dyn Fn(&str) + Send + Sync>;
