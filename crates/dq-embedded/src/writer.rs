//! The writer thread: the only user of the database connection.
//!
//! Operations arrive on a channel as closures. The thread takes every
//! operation waiting (up to [`MAX_GROUP`]), runs them in one transaction, each
//! inside its own savepoint (an operation that fails is rolled back alone, so
//! a rejected call changes nothing), commits once — one fsync for the group —
//! and only then answers each caller. If the commit fails (disk full, I/O
//! error) every caller of the group gets [`StoreError::Unavailable`] and
//! nothing of the group is kept.
//!
//! Read-only operations go through the same thread, in order, without a
//! savepoint, and are answered with the group (so a read never reports a
//! write that a failed commit then lost).

use std::collections::HashMap;
use std::fs::File;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use dq_core::store::StoreResult;
use dq_core::{StoreError, WakeFn};
use rusqlite::Connection;
use tokio::sync::oneshot;

/// Most operations in one transaction.
pub const MAX_GROUP: usize = 1000;

/// What an operation sees: the connection, a topic-id cache, and the topics
/// to wake once the transaction is committed.
pub(crate) struct Ctx {
    pub(crate) conn: Connection,
    pub(crate) tids: HashMap<String, i64>,
    /// Topics whose rows the current transaction created: their cached ids
    /// are dropped if the operation or the transaction is undone.
    pub(crate) created: Vec<String>,
    pub(crate) wake: Vec<String>,
}

/// Sends an operation's answer: its own result, or (with `Some`) the error
/// that undid its transaction.
impl Ctx {
    /// Drops the cached ids of topics created since `mark` (their rows were undone).
    fn forget_created(&mut self, mark: usize) {
        for name in self.created.drain(mark..) {
            self.tids.remove(&name);
        }
    }
}

type Reply = Box<dyn FnOnce(Option<StoreError>) + Send>;
/// Runs against the context, or (with `None`) reports that it could not run.
/// Returns its error (if any) and its reply.
type Op = Box<dyn FnOnce(Option<&mut Ctx>) -> (Option<StoreError>, Reply) + Send>;

enum Msg {
    Write(Op),
    Read(Op),
}

/// Handle to the writer thread. Dropping it stops the thread after the
/// operations already sent.
pub(crate) struct Writer {
    tx: mpsc::Sender<Msg>,
}

/// SQLite errors as store errors: a full disk and a read-only file get
/// their own codes and messages (clients see them); the rest is "unavailable".
pub(crate) fn sql_error(e: &rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
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
        lock: File,
        wakes: Arc<Mutex<Vec<(u64, WakeFn)>>>,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Msg>();
        std::thread::Builder::new()
            .name("dq-embedded-writer".into())
            .spawn(move || {
                let mut cx = Ctx {
                    conn,
                    tids: HashMap::new(),
                    created: Vec::new(),
                    wake: Vec::new(),
                };
                run(&mut cx, &rx, &wakes);
                drop(cx);
                // The lock is released only after the connection is closed.
                drop(lock);
            })
            .expect("spawn writer thread");
        Self { tx }
    }

    /// Runs a writing operation; answers after its group is committed.
    pub(crate) async fn exec<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Ctx) -> OpResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.send(f, true).await
    }

    /// Runs a read-only operation.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Ctx) -> OpResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.send(f, false).await
    }

    async fn send<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Ctx) -> OpResult<T> + Send + 'static,
        write: bool,
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
        let msg = if write { Msg::Write(op) } else { Msg::Read(op) };
        self.tx
            .send(msg)
            .map_err(|_| StoreError::Unavailable("embedded store writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("embedded store writer has stopped".into()))?
    }
}

fn run(cx: &mut Ctx, rx: &mpsc::Receiver<Msg>, wakes: &Mutex<Vec<(u64, WakeFn)>>) {
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(m) => group.push(m),
                Err(_) => break,
            }
        }
        // Answers owed once the current transaction commits.
        let mut replies: Vec<Reply> = Vec::with_capacity(group.len());
        for m in group {
            if cx.conn.is_autocommit()
                && let Err(e) = cx.conn.execute_batch("BEGIN IMMEDIATE")
            {
                tracing::error!(error = %e, "embedded store cannot begin a transaction");
                let (Msg::Write(op) | Msg::Read(op)) = m;
                op_failed(op, sql_error(&e));
                continue;
            }
            let (op, savepoint) = match m {
                Msg::Read(op) => (op, false),
                Msg::Write(op) => (op, true),
            };
            if savepoint && let Err(e) = cx.conn.execute_batch("SAVEPOINT op") {
                op_failed(op, sql_error(&e));
                continue;
            }
            let wake_mark = cx.wake.len();
            let created_mark = cx.created.len();
            let (err, reply) = op(Some(cx));
            let Some(err) = err else {
                if savepoint && let Err(e) = cx.conn.execute_batch("RELEASE op") {
                    tracing::error!(error = %e, "embedded store savepoint failed");
                }
                replies.push(reply);
                continue;
            };
            // The operation failed: undo it alone. A topic row it created is
            // gone too, so forget that cached topic id.
            cx.wake.truncate(wake_mark);
            cx.forget_created(created_mark);
            if cx.conn.is_autocommit() {
                // SQLite rolled back the whole transaction (a full disk does
                // that): the group's earlier operations are lost with it.
                tracing::error!(error = %err, "embedded store transaction rolled back");
                cx.wake.clear();
                cx.forget_created(0);
                for r in replies.drain(..) {
                    r(Some(err.clone()));
                }
                reply(None);
                continue;
            }
            if savepoint && let Err(e) = cx.conn.execute_batch("ROLLBACK TO op; RELEASE op") {
                tracing::error!(error = %e, "embedded store savepoint rollback failed");
            }
            replies.push(reply);
        }
        if cx.conn.is_autocommit() {
            continue;
        }
        match cx.conn.execute_batch("COMMIT") {
            Ok(()) => {
                cx.created.clear();
                // Wake first, so a caller that sees its answer can rely on
                // its wake-up having been delivered.
                deliver_wakes(cx, wakes);
                for r in replies {
                    r(None);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "embedded store commit failed; the group's calls get 503");
                let _ = cx.conn.execute_batch("ROLLBACK");
                cx.forget_created(0);
                cx.wake.clear();
                for r in replies {
                    r(Some(sql_error(&e)));
                }
            }
        }
    }
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
