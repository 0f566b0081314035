//! dq-embedded: the dq [`Store`](dq_core::Store) on local disk, for `dq serve`
//! with no Redis.
//!
//! SQLite in WAL mode with `synchronous=FULL`: a call returns only after its
//! transaction is on disk, so an enqueue that returned OK survives `kill -9`
//! and power loss. Throughput comes from group commit: one writer thread
//! owns the database and runs every operation that arrived meanwhile in one
//! transaction, one fsync (see [`writer`]).
//!
//! Modules:
//! - [`writer`]: the writer thread, group commit, savepoint per operation.
//! - `schema`: tables, indexes, versions, the file's identity checks.
//! - `file`: opening the data file: pragmas, created or migrated.
//! - `ops`: each state change as SQL, mirroring `dq-redis`'s Lua scripts,
//!   one file per group of verbs (the list in its module doc).
//! - `memory`: what the writer keeps in memory instead of an index — the
//!   leases (`leases`), the ready jobs and dead letters in order (`ordered`),
//!   on an ordered set cheap to add to in order (`sorted`).
//! - [`space`]: the disk reserve that keeps a full store drainable.
//! - [`backup`]: consistent copies of a live store (SQLite's online backup
//!   API) and restoring one.
//!
//! Upgrades: the file's schema version is [`SCHEMA_VERSION`]; an older file
//! is migrated when opened, in one transaction, after a backup beside it
//! (`dq.sqlite3.v<old>.bak`); a newer file is refused
//! ([`OpenError::NewerSchema`]).
//!
//! A data directory has one owner: `dq.lock` is locked for the life of the
//! store, and a second process opening the same directory gets
//! [`OpenError::Locked`].

/// A ready job's place among those of its priority, as SQL over a `jobs`
/// row: its due time, or its put time for a job in put order
/// (`NewJob::put_order`: it keeps a delay). The memory's ready order is
/// `(priority, place, seq)`.
macro_rules! place_sql {
    () => {
        "CASE WHEN put_delay_ms IS NULL THEN due_ms ELSE created_ms END"
    };
}

pub mod backup;
mod file;
mod leases;
mod memory;
mod ops;
mod ordered;
mod schema;
mod sorted;
pub mod space;
pub mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dq_core::store::StoreResult;
use dq_core::*;

use writer::Writer;

/// How a data directory is opened.
#[derive(Debug, Clone)]
pub struct Options {
    /// Caps SQLite's `max_page_count` (pages of 4 KiB): a way to test a full
    /// file without a full disk.
    pub max_pages: Option<u64>,
    /// Size of the disk reserve, `dq.reserve` ([`space`]); 0 keeps none (a
    /// full disk then fails every write until space is freed).
    pub disk_reserve_bytes: u64,
}

/// The disk reserve's default size: 8 MiB.
pub const DEFAULT_DISK_RESERVE_BYTES: u64 = 8 << 20;

impl Default for Options {
    fn default() -> Self {
        Self {
            max_pages: None,
            disk_reserve_bytes: DEFAULT_DISK_RESERVE_BYTES,
        }
    }
}

/// Why a data directory cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The directory or its files cannot be created or read.
    #[error("cannot use data directory {dir}: {source}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the directory.
    #[error(
        "data directory {dir} is in use by another dq process (lock file {dir}/dq.lock); stop it or choose another --data-dir"
    )]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// The database file is not a dq data file (another program's SQLite file).
    #[error("{file} is not a dq data file ({reason}); move it away or choose another --data-dir")]
    Foreign {
        /// The file.
        file: PathBuf,
        /// What was found.
        reason: String,
    },
    /// The file was written by a newer dq: its schema version is one this dq
    /// does not know.
    #[error(
        "{file} has schema version {found}, written by a newer dq; this dq reads schema versions up to {supported}: run the newer dq, or restore a backup taken before the upgrade"
    )]
    NewerSchema {
        /// The file.
        file: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest version this dq reads.
        supported: i64,
    },
    /// An older file could not be migrated; it is left as it was.
    #[error(
        "{file} has schema version {from} and could not be migrated to version {to}: {reason}; the file is unchanged"
    )]
    Upgrade {
        /// The file.
        file: PathBuf,
        /// Its schema version.
        from: i64,
        /// The version this dq writes.
        to: i64,
        /// Why.
        reason: String,
    },
    /// The database file is damaged or not SQLite at all.
    #[error("{file} cannot be opened as a dq data file: {reason}")]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// SQLite's words.
        reason: String,
    },
}

/// The store in one data directory.
pub struct EmbeddedStore {
    writer: Writer,
    wakes: Arc<Mutex<Vec<(u64, WakeFn)>>>,
    dir: PathBuf,
    /// `Store::settings_version`: one process holds the database, so a
    /// count in memory is every change.
    settings_version: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("dir", &self.dir)
            .finish()
    }
}

/// The database file's name inside the data directory.
pub const DB_FILE: &str = "dq.sqlite3";

/// The schema version of the files this dq writes (see [`OpenError::NewerSchema`]).
pub const SCHEMA_VERSION: i64 = schema::SCHEMA_VERSION;

pub use schema::migration_backup_path;

/// Creates `dir` if needed and locks its `dq.lock` for as long as the
/// returned file is kept.
fn lock_dir(dir: &Path) -> Result<File, OpenError> {
    let io = |source| OpenError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("dq.lock"))
        .map_err(io)?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(OpenError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(io(e)),
    }
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir`.
    ///
    /// # Errors
    /// See [`OpenError`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_with(dir, &Options::default())
    }

    /// As [`EmbeddedStore::open`], with [`Options`].
    ///
    /// # Errors
    /// See [`OpenError`].
    pub fn open_with(dir: impl AsRef<Path>, options: &Options) -> Result<Self, OpenError> {
        let dir = dir.as_ref().to_path_buf();
        let lock = lock_dir(&dir)?;
        let db = dir.join(DB_FILE);
        let conn = file::open(&db, options.max_pages)?;
        let mem = memory::Memory::load(&conn).map_err(|e| OpenError::Corrupt {
            file: db.clone(),
            reason: e.to_string(),
        })?;
        let files = writer::Files {
            space: space::Space::open(&dir, &db, options.disk_reserve_bytes),
            db,
            max_pages: options.max_pages,
        };
        let wakes: Arc<Mutex<Vec<(u64, WakeFn)>>> = Arc::default();
        let writer = Writer::start(conn, mem, lock, files, wakes.clone());
        Ok(Self {
            writer,
            wakes,
            dir,
            settings_version: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs a batch verb's `op` over `items` in writer calls of up to
    /// [`limits::MAX_BATCH`] items: one transaction (and one fsync) per
    /// call, bounded like every call. A result per item, in order; a call
    /// that failed whole answers its error for each of its items.
    async fn batch<T, R>(
        &self,
        items: Vec<T>,
        op: impl Fn(&mut writer::Ctx, &[T]) -> writer::OpResult<Vec<StoreResult<R>>>
        + Clone
        + Send
        + 'static,
    ) -> Vec<StoreResult<R>>
    where
        T: Send + 'static,
        R: Send + 'static,
    {
        let mut out = Vec::with_capacity(items.len());
        let mut rest = items;
        while !rest.is_empty() {
            let tail = rest.split_off(rest.len().min(limits::MAX_BATCH));
            let chunk = std::mem::replace(&mut rest, tail);
            let len = chunk.len();
            let op = op.clone();
            match self.writer.exec(move |cx| op(cx, &chunk)).await {
                Ok(done) => out.extend(done),
                Err(e) => out.extend((0..len).map(|_| Err(e.clone()))),
            }
        }
        out
    }

    /// Moves `Store::settings_version` on (after a change, whether the
    /// call said it succeeded or not: a failed one may have written).
    fn bump_settings_version(&self) {
        self.settings_version
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Removes a wake callback when its watcher is dropped.
struct WakeGuard {
    wakes: Arc<Mutex<Vec<(u64, WakeFn)>>>,
    key: u64,
}

impl Drop for WakeGuard {
    fn drop(&mut self) {
        self.wakes
            .lock()
            .expect("poisoned")
            .retain(|(k, _)| *k != self.key);
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn enqueue(
        &self,
        topic: &Topic,
        jobs: &[NewJob],
        now_ms: u64,
    ) -> StoreResult<Vec<Enqueued>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let (topic, jobs) = (topic.clone(), jobs.to_vec());
        self.writer
            .grow(move |cx| ops::enqueue(cx, &topic, &jobs, now_ms))
            .await
    }

    async fn get(&self, topic: &Topic, id: &JobId) -> StoreResult<Option<JobInfo>> {
        let (topic, id) = (topic.clone(), id.clone());
        self.writer.read(move |cx| ops::get(cx, &topic, &id)).await
    }

    async fn cancel(
        &self,
        topic: &Topic,
        id: &JobId,
        now_ms: u64,
    ) -> StoreResult<Option<JobState>> {
        let (topic, id) = (topic.clone(), id.clone());
        self.writer
            .exec(move |cx| ops::cancel(cx, &topic, &id, now_ms))
            .await
    }

    async fn reschedule(
        &self,
        topic: &Topic,
        id: &JobId,
        due_at_ms: u64,
        kick: bool,
        now_ms: u64,
    ) -> StoreResult<()> {
        let (topic, id) = (topic.clone(), id.clone());
        self.writer
            .exec(move |cx| ops::reschedule(cx, &topic, &id, due_at_ms, kick, now_ms))
            .await
    }

    async fn reserve(
        &self,
        topic: &Topic,
        max: usize,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Reservation> {
        let topic = topic.clone();
        let max = max.clamp(1, limits::MAX_RESERVE);
        self.writer
            .exec(move |cx| ops::reserve(cx, &topic, max, lease_ms, now_ms))
            .await
    }

    async fn touch(
        &self,
        topic: &Topic,
        id: &JobId,
        token: &str,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<u64> {
        let (topic, id, token) = (topic.clone(), id.clone(), token.to_string());
        self.writer
            .exec(move |cx| ops::touch(cx, &topic, &id, &token, lease_ms, now_ms))
            .await
    }

    async fn ack(&self, topic: &Topic, id: &JobId, token: &str, now_ms: u64) -> StoreResult<()> {
        let (topic, id, token) = (topic.clone(), id.clone(), token.to_string());
        self.writer
            .exec(move |cx| ops::ack(cx, &topic, &id, &token, now_ms))
            .await
    }

    fn max_partitions(&self) -> u32 {
        1
    }

    async fn ack_batch(&self, items: &[AckItem], now_ms: u64) -> Vec<StoreResult<()>> {
        // One statement per ack (more for a job with a dedup window or a
        // flow-control key), and the topics' counts written once per topic.
        self.batch(items.to_vec(), move |cx, chunk| {
            ops::ack_batch(cx, chunk, now_ms)
        })
        .await
    }

    async fn nack_batch(&self, items: &[NackItem], now_ms: u64) -> Vec<StoreResult<NackOutcome>> {
        self.batch(items.to_vec(), move |cx, chunk| {
            ops::nack_batch(cx, chunk, now_ms)
        })
        .await
    }

    async fn touch_batch(&self, items: &[TouchItem], now_ms: u64) -> Vec<StoreResult<u64>> {
        self.batch(items.to_vec(), move |cx, chunk| {
            ops::touch_batch(cx, chunk, now_ms)
        })
        .await
    }

    async fn nack(
        &self,
        topic: &Topic,
        id: &JobId,
        nack: Nack<'_>,
        now_ms: u64,
    ) -> StoreResult<NackOutcome> {
        let (topic, id, token) = (topic.clone(), id.clone(), nack.token.to_string());
        let error = limits::clip_error(nack.error).to_string();
        let (retry_in_ms, dead, priority) = (nack.retry_in_ms, nack.dead, nack.priority);
        self.writer
            .exec(move |cx| {
                let nack = Nack {
                    token: &token,
                    error: &error,
                    retry_in_ms,
                    dead,
                    priority,
                };
                ops::nack(cx, &topic, &id, nack, now_ms)
            })
            .await
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
        let (topic, id, token) = (topic.clone(), id.clone(), token.to_string());
        self.writer
            .exec(move |cx| ops::release(cx, &topic, &id, &token, delay_ms, how, now_ms))
            .await
    }

    async fn promote_due(&self, topic: &Topic, max: usize, now_ms: u64) -> StoreResult<Promoted> {
        let topic = topic.clone();
        self.writer
            .exec(move |cx| ops::promote_due(cx, &topic, max.max(1), now_ms))
            .await
    }

    async fn requeue_expired(
        &self,
        topic: &Topic,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<Requeued> {
        let topic = topic.clone();
        self.writer
            .exec(move |cx| ops::requeue_expired(cx, &topic, max.max(1), now_ms))
            .await
    }

    async fn list_dead(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        let topic = topic.clone();
        self.writer
            .read(move |cx| ops::list_dead(cx, &topic, offset, limit.max(1)))
            .await
    }

    async fn list_ready(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        let topic = topic.clone();
        self.writer
            .read(move |cx| ops::list_ready(cx, &topic, offset, limit.max(1)))
            .await
    }

    async fn list_scheduled(
        &self,
        topic: &Topic,
        offset: usize,
        limit: usize,
    ) -> StoreResult<Vec<JobInfo>> {
        let topic = topic.clone();
        self.writer
            .read(move |cx| ops::list_scheduled(cx, &topic, offset, limit.max(1)))
            .await
    }

    async fn list_jobs(
        &self,
        topic: &Topic,
        state: Option<JobState>,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<JobPage> {
        let (topic, cursor) = (topic.clone(), cursor.map(str::to_string));
        self.writer
            .read(move |cx| ops::list_jobs(cx, &topic, state, cursor.as_deref(), limit))
            .await
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
        let (topic, jobs) = (topic.clone(), jobs.to_vec());
        self.writer
            .grow(move |cx| ops::import_jobs(cx, &topic, &jobs, now_ms))
            .await
    }

    async fn replay_dead(
        &self,
        topic: &Topic,
        ids: Option<&[JobId]>,
        max: usize,
        now_ms: u64,
    ) -> StoreResult<u64> {
        let topic = topic.clone();
        let ids = ids.map(<[JobId]>::to_vec);
        self.writer
            .exec(move |cx| ops::replay_dead(cx, &topic, ids.as_deref(), max.max(1), now_ms))
            .await
    }

    async fn purge_dead(&self, topic: &Topic, max: usize) -> StoreResult<u64> {
        let topic = topic.clone();
        self.writer
            .exec(move |cx| ops::purge_dead(cx, &topic, max.max(1)))
            .await
    }

    async fn topics(&self) -> StoreResult<Vec<Topic>> {
        self.writer.read(ops::topics).await
    }

    async fn list_topics(&self, listing: &TopicListing<'_>) -> StoreResult<TopicPage> {
        let (cursor, prefix) = (listing.cursor.cloned(), listing.prefix.to_string());
        let (backward, limit) = (listing.backward, listing.limit);
        self.writer
            .read(move |cx| {
                ops::list_topics(
                    cx,
                    &TopicListing {
                        cursor: cursor.as_ref(),
                        backward,
                        prefix: &prefix,
                        limit,
                    },
                )
            })
            .await
    }

    async fn topic_config(&self, topic: &Topic) -> StoreResult<Option<TopicConfig>> {
        let topic = topic.clone();
        self.writer
            .read(move |cx| ops::topic_config(cx, &topic))
            .await
    }

    async fn configure_topic(
        &self,
        topic: &Topic,
        patch: &TopicConfigPatch,
    ) -> StoreResult<TopicConfig> {
        let (topic, patch) = (topic.clone(), patch.clone());
        let out = self
            .writer
            .exec(move |cx| ops::configure_topic(cx, &topic, &patch))
            .await;
        self.bump_settings_version();
        out
    }

    async fn delete_topic(&self, topic: &Topic, max: usize) -> StoreResult<(u64, bool)> {
        let topic = topic.clone();
        let out = self
            .writer
            .exec(move |cx| ops::delete_topic(cx, &topic, max.max(1)))
            .await;
        if out.as_ref().is_ok_and(|(_, gone)| *gone) {
            self.bump_settings_version();
        }
        out
    }

    async fn settings_version(&self) -> StoreResult<Option<u64>> {
        Ok(Some(
            self.settings_version
                .load(std::sync::atomic::Ordering::SeqCst),
        ))
    }

    async fn stats(&self, topic: &Topic, now_ms: u64) -> StoreResult<TopicStats> {
        let topic = topic.clone();
        self.writer
            .read(move |cx| ops::stats(cx, &topic, now_ms))
            .await
    }

    async fn reserve_job(
        &self,
        topic: &Topic,
        id: &JobId,
        lease_ms: Option<u64>,
        now_ms: u64,
    ) -> StoreResult<Option<Lease>> {
        let (topic, id) = (topic.clone(), id.clone());
        self.writer
            .exec(move |cx| ops::reserve_job(cx, &topic, &id, lease_ms, now_ms))
            .await
    }

    async fn pause_topic(&self, topic: &Topic, until_ms: u64) -> StoreResult<()> {
        let topic = topic.clone();
        self.writer
            .exec(move |cx| ops::pause_topic(cx, &topic, until_ms))
            .await
    }

    fn work_counters(&self) -> Vec<WorkCounter> {
        self.writer.work().counters()
    }

    fn can_backup(&self) -> bool {
        true
    }

    /// SQLite's online backup API through a connection of its own
    /// ([`backup`]): the writer goes on committing meanwhile.
    async fn backup(&self, to: &Path) -> Result<BackupReport, BackupError> {
        backup::backup_live(&self.dir, to).await
    }

    async fn size_bytes(&self) -> StoreResult<Option<u64>> {
        let db = self.dir.join(DB_FILE);
        let bytes = [schema::wal_path(&db), db]
            .iter()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        Ok(Some(bytes))
    }

    async fn put_record(
        &self,
        kind: &str,
        name: &str,
        value: &str,
        mark: u64,
    ) -> StoreResult<bool> {
        let (kind, name, value) = (kind.to_string(), name.to_string(), value.to_string());
        self.writer
            .exec(move |cx| ops::put_record(cx, &kind, &name, &value, mark))
            .await
    }

    async fn get_record(&self, kind: &str, name: &str) -> StoreResult<Option<Record>> {
        let (kind, name) = (kind.to_string(), name.to_string());
        self.writer
            .read(move |cx| ops::get_record(cx, &kind, &name))
            .await
    }

    async fn list_records(&self, kind: &str) -> StoreResult<Vec<(String, Record)>> {
        let kind = kind.to_string();
        self.writer
            .read(move |cx| ops::list_records(cx, &kind))
            .await
    }

    async fn delete_record(&self, kind: &str, name: &str) -> StoreResult<bool> {
        let (kind, name) = (kind.to_string(), name.to_string());
        self.writer
            .exec(move |cx| ops::delete_record(cx, &kind, &name))
            .await
    }

    async fn raise_mark(&self, kind: &str, name: &str, mark: u64) -> StoreResult<Option<u64>> {
        let (kind, name) = (kind.to_string(), name.to_string());
        self.writer
            .exec(move |cx| ops::raise_mark(cx, &kind, &name, mark))
            .await
    }

    async fn next_seq(&self, name: &str) -> StoreResult<u64> {
        let name = name.to_string();
        self.writer.exec(move |cx| ops::next_seq(cx, &name)).await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.writer.read(ops::ping).await
    }

    async fn watch_wakes(&self, on_wake: WakeFn) {
        let key = rand::random::<u64>();
        self.wakes.lock().expect("poisoned").push((key, on_wake));
        let _guard = WakeGuard {
            wakes: self.wakes.clone(),
            key,
        };
        std::future::pending::<()>().await
    }
}

#[cfg(test)]
mod tests;
