//! The writer thread: the only user of the database connection.
//!
//! Operations arrive on a channel as closures. The thread takes every
//! operation waiting (up to [`MAX_GROUP`]), runs them in one transaction, each
//! inside its own savepoint (an operation that fails is rolled back alone, so
//! a rejected call changes nothing), commits once — one fsync for the group —
//! and only then answers each caller.
//!
//! When the commit fails, what the caller hears depends on what is known:
//!
//! - **Nothing was written** (disk full, read-only files, a failed write):
//!   every call of the group gets the storage error (`store_full`,
//!   `store_read_only`, `store_io_error`) and nothing of the group is kept.
//! - **The outcome is unknown** (the fsync failed: the log's pages may or may
//!   not reach the disk, and after a write-back error the page cache cannot be
//!   trusted — PostgreSQL's "fsyncgate"): every call of the group gets 503
//!   `store_outcome_unknown` ("retry with the same id"). The writer fails
//!   stop: it drops the cached pages of its files, closes the connection and
//!   reopens the file before the next call, so what it serves from then on is
//!   what the file holds; and until a write is synced again the store reports
//!   itself not ready (`ping` writes a probe to find out).
//!
//! Read-only operations go through the same thread, in order, without a
//! savepoint, and are answered with the group (so a read never reports a
//! write that a failed commit then lost).
//!
//! A full disk is handled before it fails calls: see [`crate::space`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq_core::store::StoreResult;
use dq_core::{ExpiredJob, StoreError, WakeFn, WorkCounter};
use rusqlite::{Connection, Statement};
use tokio::sync::oneshot;

use crate::memory::Memory;
use crate::space::Space;

/// Most operations in one transaction.
pub const MAX_GROUP: usize = 1000;

/// The statements every job's lifecycle runs: enqueue's insert, the lease,
/// the ack of a plain job (one delete), the ack of any other (a read and a
/// delete).
#[derive(Clone, Copy, Debug)]
pub(crate) enum HotSql {
    Insert,
    InsertPlain,
    Lease,
    AckPlain,
    FindLease,
    Delete,
    ReadyRow,
    ReadySpan,
    LeaseSpan,
}

impl HotSql {
    #[cfg(test)]
    const ALL: [HotSql; 9] = [
        HotSql::Insert,
        HotSql::InsertPlain,
        HotSql::Lease,
        HotSql::AckPlain,
        HotSql::FindLease,
        HotSql::Delete,
        HotSql::ReadyRow,
        HotSql::ReadySpan,
        HotSql::LeaseSpan,
    ];

    fn sql(self) -> &'static str {
        match self {
            HotSql::Insert => {
                "INSERT INTO jobs (tid, id, state, due_ms, priority, max_attempts, lease_ms, retry, created_ms, is_json, body, dedup_ms, fkey, expires_ms, put_delay_ms, trace)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
                 ON CONFLICT (tid, id) DO NOTHING"
            }
            // `Insert` of a job that sets none of the eight columns most jobs
            // leave NULL (its own attempts, lease, retry, dedup window, key,
            // expiry, put order, trace context): eight bindings fewer per
            // job (`ops::enqueue`).
            HotSql::InsertPlain => {
                "INSERT INTO jobs (tid, id, state, due_ms, priority, created_ms, is_json, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (tid, id) DO NOTHING"
            }
            HotSql::Lease => {
                "UPDATE jobs SET state = 2, attempts = attempts + 1, token = ?1, deadline_ms = ?2,
                 died_ms = NULL WHERE seq = ?3"
            }
            HotSql::AckPlain => {
                "DELETE FROM jobs WHERE seq = ?1 AND tid = ?2 AND id = ?3 AND state = 2 AND token = ?4
                 AND fkey IS NULL AND (dedup_ms IS NULL OR dedup_ms <= 0)"
            }
            HotSql::FindLease => {
                "SELECT seq, dedup_ms, fkey FROM jobs WHERE tid = ?1 AND id = ?2 AND state = 2 AND token = ?3"
            }
            HotSql::Delete => "DELETE FROM jobs WHERE seq = ?1",
            // A ready job of lane `?5` (a key, or NULL: the jobs without
            // one), found in memory at `(priority, place)` (`crate::memory`),
            // read to be leased: the columns of `ops::reserve::LEASABLE`.
            HotSql::ReadyRow => {
                concat!(
                    "SELECT seq, id, lease_ms, due_ms, priority, is_json, body, attempts, state, fkey, expires_ms, trace, ",
                    place_sql!(),
                    " FROM jobs WHERE seq = ?1 AND tid = ?2 AND state = 1 AND fkey IS ?5
                     AND priority = ?3 AND ",
                    place_sql!(),
                    " = ?4"
                )
            }
            // The same for the rows between two row ids, in row-id order
            // (`ops::reserve::ready_rows`): those up to the last place handed out
            // (`?4`–`?6`), so a job behind them in the order, its body
            // above all, is not read. `+tid`: a range of row ids, never
            // the topic's whole `(tid, id)` index, which the planner would
            // otherwise pick.
            HotSql::ReadySpan => {
                concat!(
                    "SELECT seq, id, lease_ms, due_ms, priority, is_json, body, attempts, state, fkey, expires_ms, trace, ",
                    place_sql!(),
                    " FROM jobs WHERE seq BETWEEN ?1 AND ?2 AND +tid = ?3 AND state = 1 AND fkey IS NULL
                     AND (priority, ",
                    place_sql!(),
                    ", seq) <= (?4, ?5, ?6)
                     ORDER BY seq"
                )
            }
            // `Lease` for every row `ReadySpan` read with the same first
            // six parameters (`ops::reserve::HandOut::lease_rows`): each row's token
            // is the call's prefix `?7` and its row id in lower-case hex,
            // as `ops::token::numbered` writes it.
            HotSql::LeaseSpan => {
                concat!(
                    "UPDATE jobs SET state = 2, attempts = attempts + 1, token = ?7 || printf('%x', seq),
                 deadline_ms = ?8, died_ms = NULL
                 WHERE seq BETWEEN ?1 AND ?2 AND +tid = ?3 AND state = 1 AND fkey IS NULL
                 AND (priority, ",
                    place_sql!(),
                    ", seq) <= (?4, ?5, ?6)"
                )
            }
        }
    }
}

/// The connection's [`HotSql`] statements, each prepared on first use and
/// held for the connection's life. Through rusqlite's statement cache every
/// call cost a copy and two hashes of the SQL text and a reset of the
/// bindings (held, a statement keeps its last bound values, the last job's
/// body among them, until its next call), a share of the writer's
/// instructions per job worth saving (docs/performance-log.md, "Held
/// statements").
/// One cell per statement: a `with` inside another's `f` is fine, the same
/// statement twice would panic.
pub(crate) struct Hot<'c>([RefCell<Option<Statement<'c>>>; 9]);

self_cell::self_cell!(
    /// The connection and its held statements, which self_cell drops before
    /// the connection (rusqlite closes with `sqlite3_close`, which would
    /// fail on an unfinalized statement and leave the file open). self_cell
    /// is the one place with `unsafe` (in its macro, reviewed there): the
    /// workspace forbids it in our own code.
    pub(crate) struct Db {
        owner: Connection,
        #[not_covariant]
        dependent: Hot,
    }
);

impl Db {
    /// Takes the connection; its statements are prepared as they are used.
    pub(crate) fn hold(conn: Connection) -> Self {
        Db::new(conn, |_| Hot(Default::default()))
    }

    /// Runs `f` with the held statement `which`, preparing it the first time
    /// (persistent, as rusqlite's cache prepares its statements).
    pub(crate) fn with<T>(
        &self,
        which: HotSql,
        f: impl FnOnce(&mut Statement<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.with_dependent(|conn, hot| {
            let mut slot = hot.0[which as usize].borrow_mut();
            if slot.is_none() {
                *slot = Some(conn.prepare_with_flags(
                    which.sql(),
                    rusqlite::PrepFlags::SQLITE_PREPARE_PERSISTENT,
                )?);
            }
            f(slot.as_mut().expect("prepared above"))
        })
    }
}

impl std::ops::Deref for Db {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.borrow_owner()
    }
}

/// What an operation sees: the connection, a topic-id cache, and the topics
/// to wake once the transaction is committed.
pub(crate) struct Ctx {
    pub(crate) conn: Db,
    pub(crate) tids: HashMap<String, i64>,
    /// Topics whose rows the current transaction created: their cached ids
    /// are dropped if the operation or the transaction is undone.
    pub(crate) created: Vec<String>,
    pub(crate) wake: Vec<String>,
    /// A commit's fsync failed and no write has been synced since: `ping`
    /// writes a probe, and reports the store not ready until one is synced.
    pub(crate) unsynced: bool,
    /// `ping` wrote a probe in the current transaction.
    pub(crate) probed: bool,
    /// The leases, ready jobs (without a key and in each key's lane) and
    /// dead letters, in step with the transaction.
    pub(crate) mem: Memory,
    /// Traced jobs the current reserve ended because their expiry passed
    /// (`ops::reserve::expire`), for its answer: emptied by each reserve.
    pub(crate) expired: Vec<ExpiredJob>,
}

impl Ctx {
    /// Drops the cached ids of topics created since `mark` (their rows were undone).
    fn forget_created(&mut self, mark: usize) {
        for name in self.created.drain(mark..) {
            self.tids.remove(&name);
        }
    }
}

/// Sends an operation's answer: its own result, or (with `Some`) the error
/// that undid its transaction.
type Reply = Box<dyn FnOnce(Option<StoreError>) + Send>;
/// Runs against the context, or (with `None`) reports that it could not run.
/// Returns its error (if any) and its reply.
type Op = Box<dyn FnOnce(Option<&mut Ctx>) -> (Option<StoreError>, Reply) + Send>;

/// What an operation does to the file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Reads only: no savepoint.
    Read,
    /// Changes rows without adding jobs.
    Write,
    /// Adds jobs: refused while the disk reserve is released.
    Grow,
}

struct Msg {
    op: Op,
    kind: Kind,
}

/// Where the writer's files are, to reopen them after a failed commit.
pub(crate) struct Files {
    pub(crate) db: PathBuf,
    pub(crate) max_pages: Option<u64>,
    pub(crate) space: Space,
}

/// Handle to the writer thread. Dropping it stops the thread after the
/// operations already sent.
pub(crate) struct Writer {
    tx: mpsc::Sender<Msg>,
    work: Arc<Work>,
}

/// What the writer thread has done since it started: the store's
/// [`dq_core::Store::work_counters`]. Its busy time over wall-clock time is
/// how close the one writer is to the embedded store's capacity (near 1:
/// calls queue behind it; docs/operations.md, "Metrics").
#[derive(Default)]
pub(crate) struct Work {
    operations: AtomicU64,
    commits: AtomicU64,
    busy: Timer,
    commit: Timer,
}

/// Time spent in spans of work, the span in progress included (a writer
/// stuck in an fsync shows as busy while it is stuck); never goes back,
/// as a counter must not (the total and the open span's start under one
/// lock, taken twice per span: a few hundred times a second).
#[derive(Default)]
struct Timer(Mutex<(Duration, Option<Instant>)>);

impl Timer {
    fn start(&self) {
        self.0.lock().expect("poisoned").1 = Some(Instant::now());
    }

    fn stop(&self) {
        let mut t = self.0.lock().expect("poisoned");
        if let Some(since) = t.1.take() {
            t.0 += since.elapsed();
        }
    }

    fn seconds(&self) -> f64 {
        let t = self.0.lock().expect("poisoned");
        (t.0 + t.1.map_or(Duration::ZERO, |since| since.elapsed())).as_secs_f64()
    }
}

impl Work {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The counters, as `/metrics` shows them.
    pub(crate) fn counters(&self) -> Vec<WorkCounter> {
        vec![
            WorkCounter {
                name: WORK_OPERATIONS,
                help: "Calls the embedded store's writer thread has run: every store call of this process, each one (an enqueue of up to 1,000 jobs, a reserve, an ack of a batch, and reads: stats, listings, the health check's ping).",
                value: self.operations.load(Ordering::Relaxed) as f64,
            },
            WorkCounter {
                name: WORK_COMMITS,
                help: "Transactions the writer has committed: the calls that waited together share one; one that wrote is fsynced before its calls are answered.",
                value: self.commits.load(Ordering::Relaxed) as f64,
            },
            WorkCounter {
                name: WORK_BUSY,
                help: "Seconds the writer has spent running calls and committing them (the group of calls in progress included); its rate is the writer's utilisation: near 1, calls queue behind the one writer.",
                value: self.busy.seconds(),
            },
            WorkCounter {
                name: WORK_COMMIT,
                help: "Of the busy seconds, those spent committing: writing the log, waiting for its fsync, and SQLite's checkpoints, which run inside a commit (failed commits included).",
                value: self.commit.seconds(),
            },
        ]
    }
}

/// The names of the writer's counters in `/metrics`.
pub const WORK_OPERATIONS: &str = "dq_embedded_writer_operations_total";
/// See [`WORK_OPERATIONS`].
pub const WORK_COMMITS: &str = "dq_embedded_writer_commits_total";
/// See [`WORK_OPERATIONS`].
pub const WORK_BUSY: &str = "dq_embedded_writer_busy_seconds_total";
/// See [`WORK_OPERATIONS`].
pub const WORK_COMMIT: &str = "dq_embedded_writer_commit_seconds_total";

/// Runs one statement without parameters or rows (`BEGIN`, `SAVEPOINT`,
/// `RELEASE`, `COMMIT`) through the connection's statement cache: the writer
/// runs several per operation, and `execute_batch` would parse each anew.
pub(crate) fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// SQLite errors as store errors: a full disk and a read-only file get
/// their own codes and messages (clients see them); the rest is "unavailable".
pub(crate) fn sql_error(e: &rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    if fsync_failed(e) {
        return outcome_unknown();
    }
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => StoreError::Storage {
            code: "store_full",
            message: "the embedded store's disk is full; free space, then retry".into(),
        },
        Some(ErrorCode::ReadOnly) => StoreError::Storage {
            code: "store_read_only",
            message: "the embedded store's files are read-only; fix the data directory's permissions, then retry".into(),
        },
        Some(ErrorCode::SystemIoFailure | ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => {
            StoreError::Storage {
                code: "store_io_error",
                message: format!("the embedded store cannot write its files ({e}); check the data directory's disk and permissions"),
            }
        }
        _ => StoreError::Unavailable(format!("embedded store: {e}")),
    }
}

/// Whether SQLite reports a failed fsync (of the log, the file or the
/// directory): what was written may or may not be on disk.
fn fsync_failed(e: &rusqlite::Error) -> bool {
    use rusqlite::ffi::{SQLITE_IOERR_DIR_FSYNC, SQLITE_IOERR_FSYNC};
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == SQLITE_IOERR_FSYNC || f.extended_code == SQLITE_IOERR_DIR_FSYNC)
}

/// The answer to every call of a group whose commit's fsync failed.
pub(crate) fn outcome_unknown() -> StoreError {
    StoreError::Storage {
        code: "store_outcome_unknown",
        message: "the embedded store could not confirm that this write reached the disk (fsync failed): it may or may not have been kept; retry with the same id (check the disk: the store reports itself not ready until a write is synced)".into(),
    }
}

/// The answer to an enqueue while the disk reserve is released.
fn refused_full() -> StoreError {
    StoreError::Storage {
        code: "store_full",
        message: "the embedded store's disk is full: enqueues are refused until space is freed (acks, cancels, dead-letter purges and topic deletes still work)".into(),
    }
}

fn is_full(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Storage {
            code: "store_full",
            ..
        }
    )
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Self {
        Failure(sql_error(&e))
    }
}

/// A store error raised inside an operation; `?` on SQL errors makes one.
pub(crate) struct Failure(pub(crate) StoreError);

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure(e)
    }
}

/// An operation's result.
pub(crate) type OpResult<T> = Result<T, Failure>;

impl Writer {
    pub(crate) fn start(
        conn: Connection,
        mem: Memory,
        lock: File,
        files: Files,
        wakes: Arc<Mutex<Vec<(u64, WakeFn)>>>,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Msg>();
        let work = Arc::new(Work::default());
        let counted = work.clone();
        std::thread::Builder::new()
            .name("dq-embedded-writer".into())
            .spawn(move || {
                let mut cx = Ctx {
                    conn: Db::hold(conn),
                    tids: HashMap::new(),
                    created: Vec::new(),
                    wake: Vec::new(),
                    unsynced: false,
                    probed: false,
                    mem,
                    expired: Vec::new(),
                };
                let mut files = files;
                run(&mut cx, &mut files, &rx, &wakes, &counted);
                drop(cx);
                // The lock is released only after the connection is closed.
                drop(lock);
            })
            .expect("spawn writer thread");
        Self { tx, work }
    }

    /// What the writer thread has done since it started.
    pub(crate) fn work(&self) -> &Work {
        &self.work
    }

    /// Runs a writing operation; answers after its group is committed.
    pub(crate) async fn exec<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Ctx) -> OpResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.send(f, Kind::Write).await
    }

    /// Runs an operation that adds jobs (refused while the disk is full).
    pub(crate) async fn grow<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Ctx) -> OpResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.send(f, Kind::Grow).await
    }

    /// Runs a read-only operation.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Ctx) -> OpResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.send(f, Kind::Read).await
    }

    async fn send<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Ctx) -> OpResult<T> + Send + 'static,
        kind: Kind,
    ) -> StoreResult<T> {
        let (tx, rx) = oneshot::channel::<StoreResult<T>>();
        let op: Op = Box::new(move |cx| {
            let r = match cx {
                Some(cx) => f(cx).map_err(|Failure(e)| e),
                None => Err(StoreError::Unavailable(String::new())),
            };
            let err = r.as_ref().err().cloned();
            let reply: Reply = Box::new(move |undone| {
                let _ = tx.send(match undone {
                    None => r,
                    Some(e) => Err(e),
                });
            });
            (err, reply)
        });
        self.tx
            .send(Msg { op, kind })
            .map_err(|_| StoreError::Unavailable("embedded store writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("embedded store writer has stopped".into()))?
    }
}

fn run(
    cx: &mut Ctx,
    files: &mut Files,
    rx: &mpsc::Receiver<Msg>,
    wakes: &Mutex<Vec<(u64, WakeFn)>>,
    work: &Work,
) {
    // The connection must be reopened before the next call (a commit failed).
    let mut stale = false;
    while let Ok(first) = rx.recv() {
        work.busy.start();
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(m) => group.push(m),
                Err(_) => break,
            }
        }
        Work::add(&work.operations, group.len() as u64);
        if stale {
            match reopen(cx, files) {
                Ok(()) => stale = false,
                Err(e) => {
                    tracing::error!(error = %e, "embedded store cannot reopen its file");
                    work.busy.stop();
                    for m in group {
                        op_failed(m.op, e.clone());
                    }
                    continue;
                }
            }
        }
        files.space.check();
        // Whether enqueues may run in this group (asked once, when one comes).
        let mut admits_growth: Option<bool> = None;
        let mut full = false;
        let changes_before = cx.conn.total_changes();
        // Answers owed once the current transaction commits.
        let mut replies: Vec<Reply> = Vec::with_capacity(group.len());
        for Msg { op, kind } in group {
            if kind == Kind::Grow
                && !*admits_growth.get_or_insert_with(|| files.space.admits_growth(&cx.conn))
            {
                op_failed(op, refused_full());
                continue;
            }
            if cx.conn.is_autocommit()
                && let Err(e) = run_cached(&cx.conn, "BEGIN IMMEDIATE")
            {
                tracing::error!(error = %e, "embedded store cannot begin a transaction");
                op_failed(op, sql_error(&e));
                continue;
            }
            let savepoint = kind != Kind::Read;
            if savepoint && let Err(e) = run_cached(&cx.conn, "SAVEPOINT op") {
                op_failed(op, sql_error(&e));
                continue;
            }
            let wake_mark = cx.wake.len();
            let created_mark = cx.created.len();
            let mem_mark = cx.mem.mark();
            let (err, reply) = op(Some(cx));
            let Some(err) = err else {
                if savepoint && let Err(e) = run_cached(&cx.conn, "RELEASE op") {
                    tracing::error!(error = %e, "embedded store savepoint failed");
                }
                replies.push(reply);
                continue;
            };
            full |= is_full(&err);
            // The operation failed: undo it alone. A topic row it created is
            // gone too, so forget that cached topic id.
            cx.wake.truncate(wake_mark);
            cx.forget_created(created_mark);
            cx.mem.undo_to(mem_mark);
            if cx.conn.is_autocommit() {
                // SQLite rolled back the whole transaction (a full disk does
                // that): the group's earlier operations are lost with it.
                tracing::error!(error = %err, "embedded store transaction rolled back");
                cx.wake.clear();
                cx.forget_created(0);
                cx.mem.undo_all();
                for r in replies.drain(..) {
                    r(Some(err.clone()));
                }
                reply(None);
                continue;
            }
            if savepoint && let Err(e) = cx.conn.execute_batch("ROLLBACK TO op; RELEASE op") {
                // What the file kept of the operation is unknown: read it
                // afresh (the leases in memory with it) before the next call.
                tracing::error!(error = %e, "embedded store savepoint rollback failed; the file is reopened before the next call");
                stale = true;
            }
            replies.push(reply);
        }
        // The group's answer: each call's own result, or the error that
        // undid the transaction.
        let undone = if cx.conn.is_autocommit() {
            None
        } else {
            work.commit.start();
            let committed = run_cached(&cx.conn, "COMMIT");
            work.commit.stop();
            match committed {
                Ok(()) => {
                    Work::add(&work.commits, 1);
                    if cx.probed || cx.conn.total_changes() > changes_before {
                        cx.unsynced = false;
                    }
                    cx.created.clear();
                    cx.mem.committed(Some(&cx.conn));
                    // Wake first, so a caller that sees its answer can rely on
                    // its wake-up having been delivered.
                    deliver_wakes(cx, wakes);
                    None
                }
                Err(e) => {
                    let err = sql_error(&e);
                    full |= is_full(&err);
                    if fsync_failed(&e) {
                        cx.unsynced = true;
                        tracing::error!(error = %e, "embedded store: fsync failed; the group's calls get 503 store_outcome_unknown, the file is reopened before the next call");
                    } else {
                        tracing::error!(error = %e, "embedded store commit failed; the group's calls get 503");
                    }
                    let _ = cx.conn.execute_batch("ROLLBACK");
                    cx.forget_created(0);
                    cx.wake.clear();
                    cx.mem.undo_all();
                    // Only an unknown outcome needs the file read afresh; a
                    // known failure is undone by the rollback (unless that
                    // failed too).
                    stale = cx.unsynced || !cx.conn.is_autocommit();
                    Some(err)
                }
            }
        };
        // Counted before the answers: a caller that reads the counters
        // after its answer finds its call in them. (Without a transaction
        // left open no answer is owed here: a rollback of the whole
        // transaction answered its calls.)
        work.busy.stop();
        for r in replies {
            r(undone.clone());
        }
        cx.probed = false;
        if full {
            files.space.release("SQLite reported the disk full");
        }
        if cx.conn.is_autocommit() {
            files.space.after_group(&cx.conn);
        }
    }
}

/// Closes the connection and opens the file again, after the page cache's
/// copy of the files was dropped where the kernel allows: from here on the
/// store serves what the file holds.
fn reopen(cx: &mut Ctx, files: &Files) -> Result<(), StoreError> {
    let placeholder = Connection::open_in_memory().map_err(|e| sql_error(&e))?;
    drop(std::mem::replace(&mut cx.conn, Db::hold(placeholder)));
    let wal = crate::schema::wal_path(&files.db);
    for path in [&files.db, &wal] {
        if let Ok(f) = File::open(path) {
            let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
        }
    }
    cx.conn = Db::hold(crate::file::open(&files.db, files.max_pages).map_err(|e| {
        StoreError::Storage {
            code: "store_io_error",
            message: format!(
                "the embedded store cannot reopen its file ({e}); check the data directory's disk"
            ),
        }
    })?);
    cx.mem = Memory::load(&cx.conn).map_err(|e| StoreError::Storage {
        code: "store_io_error",
        message: format!(
            "the embedded store cannot read its leases and ready jobs after reopening its file ({e}); check the data directory's disk"
        ),
    })?;
    cx.tids.clear();
    cx.created.clear();
    cx.wake.clear();
    tracing::info!(file = %files.db.display(), "embedded store reopened its file");
    Ok(())
}

fn deliver_wakes(cx: &mut Ctx, wakes: &Mutex<Vec<(u64, WakeFn)>>) {
    if cx.wake.is_empty() {
        return;
    }
    let callbacks: Vec<WakeFn> = wakes
        .lock()
        .expect("poisoned")
        .iter()
        .map(|(_, f)| f.clone())
        .collect();
    cx.wake.sort();
    cx.wake.dedup();
    for topic in cx.wake.drain(..) {
        for f in &callbacks {
            f(&topic);
        }
    }
}

/// Answers an operation that could not run with the reason.
fn op_failed(op: Op, e: StoreError) {
    let (_, reply) = op(None);
    reply(Some(e));
}

#[cfg(test)]
mod tests;
