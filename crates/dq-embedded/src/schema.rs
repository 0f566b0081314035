//! The database file: its tables, indexes and identity.
//!
//! Jobs live in one table; their state is a small integer and each state has
//! a partial index in the order the store reads it:
//!
//! | state | meaning | index |
//! | --- | --- | --- |
//! | 0 | scheduled | `(tid, due_ms)` |
//! | 1 | ready | `(tid, priority, due_ms, seq)` — the hand-out order |
//! | 2 | reserved | `(tid, deadline_ms)` |
//! | 3 | dead | `(tid, died_ms, seq)` |
//!
//! `seq` (the rowid) is the enqueue order. Topics are interned as integers
//! (`tid`) to keep rows and indexes small.

use std::path::Path;

use rusqlite::Connection;

use crate::OpenError;

/// `PRAGMA application_id` of a dq file ("dq" + 1).
pub(crate) const APPLICATION_ID: i64 = 0x6471_0001;
/// `PRAGMA user_version`: the schema version. Version 1 (dq before the
/// counts were named) is migrated when opened; a later version is refused.
pub(crate) const SCHEMA_VERSION: i64 = 3;

/// What version 3 added: dedup windows (a topic's default, a job's own,
/// and the ids whose window is open) and named records (schedules and
/// their progress, see `Store::put_record`).
const V3: &str = "
ALTER TABLE topics ADD COLUMN dedup_ms INTEGER;
ALTER TABLE jobs ADD COLUMN dedup_ms INTEGER;
CREATE TABLE dedup (
  tid INTEGER NOT NULL, id TEXT NOT NULL, until_ms INTEGER NOT NULL,
  PRIMARY KEY (tid, id)
) WITHOUT ROWID;
CREATE INDEX dedup_until ON dedup(tid, until_ms);
CREATE TABLE records (
  kind TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL,
  mark INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (kind, name)
) WITHOUT ROWID;
";

const SCHEMA: &str = "
CREATE TABLE topics (
  tid INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  max_attempts INTEGER, lease_ms INTEGER, dead_cap INTEGER, default_delay_ms INTEGER,
  retry TEXT, delivery TEXT,
  enqueued INTEGER NOT NULL DEFAULT 0, acked INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0, expired INTEGER NOT NULL DEFAULT 0,
  dead INTEGER NOT NULL DEFAULT 0, cancelled INTEGER NOT NULL DEFAULT 0,
  dead_dropped INTEGER NOT NULL DEFAULT 0, replayed INTEGER NOT NULL DEFAULT 0,
  n_scheduled INTEGER NOT NULL DEFAULT 0, n_ready INTEGER NOT NULL DEFAULT 0,
  n_reserved INTEGER NOT NULL DEFAULT 0, n_dead INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY,
  tid INTEGER NOT NULL,
  id TEXT NOT NULL,
  state INTEGER NOT NULL,
  due_ms INTEGER NOT NULL,
  priority INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER, lease_ms INTEGER, retry TEXT,
  last_error TEXT,
  created_ms INTEGER NOT NULL,
  token TEXT, deadline_ms INTEGER, died_ms INTEGER,
  is_json INTEGER NOT NULL,
  body BLOB NOT NULL,
  timeouts INTEGER NOT NULL DEFAULT 0, releases INTEGER NOT NULL DEFAULT 0,
  buries INTEGER NOT NULL DEFAULT 0, kicks INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX jobs_id ON jobs(tid, id);
CREATE INDEX jobs_sched ON jobs(tid, due_ms) WHERE state = 0;
CREATE INDEX jobs_ready ON jobs(tid, priority, due_ms, seq) WHERE state = 1;
CREATE INDEX jobs_lease ON jobs(tid, deadline_ms) WHERE state = 2;
CREATE INDEX jobs_dead ON jobs(tid, died_ms, seq) WHERE state = 3;
";

/// The write-ahead log beside the database file `db`.
pub(crate) fn wal_path(db: &Path) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_os_string();
    name.push("-wal");
    name.into()
}

/// Opens or creates the file, checks it is ours, sets durability pragmas.
pub(crate) fn open(path: &Path, max_pages: Option<u64>) -> Result<Connection, OpenError> {
    let corrupt = |e: rusqlite::Error| OpenError::Corrupt {
        file: path.to_path_buf(),
        reason: e.to_string(),
    };
    let conn = Connection::open(path).map_err(corrupt)?;
    // Reading the header is what fails on a file that is not SQLite.
    let app_id: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(corrupt)?;
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(corrupt)?;
    if app_id != APPLICATION_ID && (app_id != 0 || tables != 0) {
        return Err(OpenError::Foreign {
            file: path.to_path_buf(),
            reason: format!("application_id {app_id:#x}, {tables} schema objects"),
        });
    }
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(corrupt)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(corrupt)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(corrupt)?;
    if let Some(pages) = max_pages {
        conn.pragma_update(None, "max_page_count", pages as i64)
            .map_err(corrupt)?;
    }
    if tables == 0 {
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE; {SCHEMA} {V3} PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
        ))
        .map_err(corrupt)?;
    } else {
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(corrupt)?;
        if version == 1 {
            // Version 2 names the per-state counts and counts each job's
            // history (timeouts, releases, buries, kicks).
            conn.execute_batch(
                "BEGIN IMMEDIATE;
                 ALTER TABLE topics RENAME COLUMN n0 TO n_scheduled;
                 ALTER TABLE topics RENAME COLUMN n1 TO n_ready;
                 ALTER TABLE topics RENAME COLUMN n2 TO n_reserved;
                 ALTER TABLE topics RENAME COLUMN n3 TO n_dead;
                 ALTER TABLE jobs ADD COLUMN timeouts INTEGER NOT NULL DEFAULT 0;
                 ALTER TABLE jobs ADD COLUMN releases INTEGER NOT NULL DEFAULT 0;
                 ALTER TABLE jobs ADD COLUMN buries INTEGER NOT NULL DEFAULT 0;
                 ALTER TABLE jobs ADD COLUMN kicks INTEGER NOT NULL DEFAULT 0;
                 PRAGMA user_version = 2;
                 COMMIT;",
            )
            .map_err(corrupt)?;
        }
        if version == 1 || version == 2 {
            conn.execute_batch(&format!(
                "BEGIN IMMEDIATE; {V3} PRAGMA user_version = 3; COMMIT;"
            ))
            .map_err(corrupt)?;
        } else if version != SCHEMA_VERSION {
            return Err(OpenError::Foreign {
                file: path.to_path_buf(),
                reason: format!("schema version {version}, this dq reads version {SCHEMA_VERSION}"),
            });
        }
        // Touch both tables: catches a damaged schema at start, not mid-request.
        // (No full integrity check: start-up must not read every page.)
        conn.query_row("SELECT count(*) FROM topics", [], |r| r.get::<_, i64>(0))
            .map_err(corrupt)?;
        conn.query_row("SELECT seq FROM jobs LIMIT 1", [], |_| Ok(()))
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(()),
                e => Err(e),
            })
            .map_err(corrupt)?;
    }
    // Added after schema version 1 shipped: created where missing.
    conn.execute_batch(COUNTERS).map_err(corrupt)?;
    if conn
        .prepare("SELECT paused_until_ms FROM topics LIMIT 0")
        .is_err()
    {
        conn.execute_batch(
            "ALTER TABLE topics ADD COLUMN paused_until_ms INTEGER NOT NULL DEFAULT 0",
        )
        .map_err(corrupt)?;
    }
    Ok(conn)
}

/// Named counters (`Store::next_seq`).
const COUNTERS: &str =
    "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);";
