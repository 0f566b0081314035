//! The database file: its tables, indexes and identity.
//!
//! Jobs live in one table; their state is a small integer and each state has
//! a partial index in the order the store reads it:
//!
//! | state | meaning | index |
//! | --- | --- | --- |
//! | 0 | scheduled | `(tid, due_ms)` |
//! | 1 | ready | none: the writer keeps them in memory in hand-out order, each flow-control key's lane apart (`ordered`), built by the same scan at open |
//! | 2 | reserved | none: the writer keeps the leases in memory (`leases`), built by a scan at open |
//! | 3 | dead | none: the writer keeps them in memory, oldest first (`ordered`), built by the same scan |
//!
//! `seq` (the rowid) is the enqueue order. Topics are interned as integers
//! (`tid`) to keep rows and indexes small.
//!
//! Versions: `PRAGMA user_version` is the schema version. [`BASE`] is
//! version 1 and [`MIGRATIONS`] every change since, one entry per version;
//! a new file runs them all, an older file the ones it lacks (in one
//! transaction, after a backup beside it), and a newer file is refused with
//! both versions named.

use std::path::Path;

use rusqlite::Connection;

use crate::OpenError;

/// `PRAGMA application_id` of a dq file ("dq" + 1).
pub(crate) const APPLICATION_ID: i64 = 0x6471_0001;
/// The first schema version: what [`BASE`] creates.
const FIRST_VERSION: i64 = 1;

/// `PRAGMA user_version`: the schema version this dq writes, one past the
/// last [`MIGRATIONS`] step. An older file is migrated when opened (after a
/// backup beside it); a newer one is refused.
pub(crate) const SCHEMA_VERSION: i64 = FIRST_VERSION + MIGRATIONS.len() as i64;

/// The tables of schema version 1, as the first dq wrote them. A new file is
/// this plus every step of [`MIGRATIONS`], so a new file and a migrated one
/// cannot differ.
const BASE: &str = "
CREATE TABLE topics (
  tid INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  max_attempts INTEGER, lease_ms INTEGER, dead_cap INTEGER, default_delay_ms INTEGER,
  retry TEXT, delivery TEXT,
  enqueued INTEGER NOT NULL DEFAULT 0, acked INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0, expired INTEGER NOT NULL DEFAULT 0,
  dead INTEGER NOT NULL DEFAULT 0, cancelled INTEGER NOT NULL DEFAULT 0,
  dead_dropped INTEGER NOT NULL DEFAULT 0, replayed INTEGER NOT NULL DEFAULT 0,
  n0 INTEGER NOT NULL DEFAULT 0, n1 INTEGER NOT NULL DEFAULT 0,
  n2 INTEGER NOT NULL DEFAULT 0, n3 INTEGER NOT NULL DEFAULT 0
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
  body BLOB NOT NULL
);
CREATE UNIQUE INDEX jobs_id ON jobs(tid, id);
CREATE INDEX jobs_sched ON jobs(tid, due_ms) WHERE state = 0;
CREATE INDEX jobs_ready ON jobs(tid, priority, due_ms, seq) WHERE state = 1;
CREATE INDEX jobs_lease ON jobs(tid, deadline_ms) WHERE state = 2;
CREATE INDEX jobs_dead ON jobs(tid, died_ms, seq) WHERE state = 3;
";

/// One schema change: the SQL that takes a file from the version before it
/// to the next.
pub(crate) struct Migration {
    /// What the version it leads to adds, for the log.
    pub(crate) what: &'static str,
    /// Runs inside the migration's one transaction (no BEGIN/COMMIT).
    pub(crate) sql: &'static str,
}

/// Every schema change since [`BASE`], in order: step `i` takes version
/// `FIRST_VERSION + i` to the next. A new version is one entry appended
/// here (and its columns read by `ops`); nothing else changes.
pub(crate) const MIGRATIONS: &[Migration] = &[
    // → 2
    Migration {
        what: "named per-state counts; per-job timeouts, releases, buries, kicks",
        sql: "ALTER TABLE topics RENAME COLUMN n0 TO n_scheduled;
              ALTER TABLE topics RENAME COLUMN n1 TO n_ready;
              ALTER TABLE topics RENAME COLUMN n2 TO n_reserved;
              ALTER TABLE topics RENAME COLUMN n3 TO n_dead;
              ALTER TABLE jobs ADD COLUMN timeouts INTEGER NOT NULL DEFAULT 0;
              ALTER TABLE jobs ADD COLUMN releases INTEGER NOT NULL DEFAULT 0;
              ALTER TABLE jobs ADD COLUMN buries INTEGER NOT NULL DEFAULT 0;
              ALTER TABLE jobs ADD COLUMN kicks INTEGER NOT NULL DEFAULT 0;",
    },
    // → 3
    Migration {
        what: "dedup windows (a topic's default, a job's own, the ids in a window); named records (schedules and their progress)",
        sql: "ALTER TABLE topics ADD COLUMN dedup_ms INTEGER;
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
              ) WITHOUT ROWID;",
    },
    // → 4
    Migration {
        what: "flow control: a topic paused until resumed, its rate limit and token bucket, jobs held back by it",
        sql: "ALTER TABLE topics ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
              ALTER TABLE topics ADD COLUMN rate_limit TEXT;
              ALTER TABLE topics ADD COLUMN rl_credit INTEGER;
              ALTER TABLE topics ADD COLUMN rl_at INTEGER NOT NULL DEFAULT 0;
              ALTER TABLE topics ADD COLUMN rate_limited INTEGER NOT NULL DEFAULT 0;",
    },
    // → 5
    Migration {
        what: "flow-control keys: a job's key, the keys' lanes, leases, turns and buckets; key_concurrency and key_rate_limit",
        sql: "ALTER TABLE jobs ADD COLUMN fkey TEXT;
              ALTER TABLE topics ADD COLUMN keyed INTEGER NOT NULL DEFAULT 0;
              ALTER TABLE topics ADD COLUMN key_concurrency INTEGER;
              ALTER TABLE topics ADD COLUMN key_rate_limit TEXT;
              ALTER TABLE topics ADD COLUMN kturn INTEGER NOT NULL DEFAULT 0;
              ALTER TABLE topics ADD COLUMN uturn INTEGER NOT NULL DEFAULT 0;
              DROP INDEX jobs_ready;
              CREATE INDEX jobs_ready ON jobs(tid, priority, due_ms, seq) WHERE state = 1 AND fkey IS NULL;
              CREATE INDEX jobs_kready ON jobs(tid, fkey, priority, due_ms, seq) WHERE state = 1 AND fkey IS NOT NULL;
              CREATE TABLE fkeys (
                tid INTEGER NOT NULL, fkey TEXT NOT NULL,
                active INTEGER NOT NULL DEFAULT 0, turn INTEGER NOT NULL DEFAULT 0,
                credit INTEGER, at INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (tid, fkey)
              ) WITHOUT ROWID;
              CREATE INDEX fkeys_idle ON fkeys(tid, active);",
    },
    // → 6
    Migration {
        what: "leases kept in memory: the index of reserved jobs by deadline dropped; one index of ready jobs, the jobs without a key first",
        sql: "DROP INDEX jobs_lease;
              DROP INDEX jobs_ready;
              DROP INDEX jobs_kready;
              CREATE INDEX jobs_ready ON jobs(tid, fkey, priority, due_ms, seq) WHERE state = 1;",
    },
    // → 7
    Migration {
        what: "ready jobs and dead letters kept in memory: their indexes dropped",
        sql: "DROP INDEX jobs_ready;
              DROP INDEX jobs_dead;",
    },
];

/// The SQL of every step from `version` to [`SCHEMA_VERSION`].
fn steps_from(version: i64) -> impl Iterator<Item = &'static Migration> {
    MIGRATIONS
        .iter()
        .skip(usize::try_from(version - FIRST_VERSION).unwrap_or(usize::MAX))
}

/// The backup written beside `db` before migrating it from `version`
/// (`dq.sqlite3.v1.bak`).
pub fn migration_backup_path(db: &Path, version: i64) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_os_string();
    name.push(format!(".v{version}.bak"));
    name.into()
}

/// Reads a dq file's schema version; `Ok(None)` for a new (empty) file.
///
/// # Errors
/// [`OpenError::Corrupt`] when SQLite cannot read it; [`OpenError::Foreign`]
/// for another program's file; [`OpenError::NewerSchema`] for a version
/// this dq does not know.
pub(crate) fn check(conn: &Connection, path: &Path) -> Result<Option<i64>, OpenError> {
    let corrupt = |e: rusqlite::Error| OpenError::Corrupt {
        file: path.to_path_buf(),
        reason: e.to_string(),
    };
    // Reading the header is what fails on a file that is not SQLite.
    let app_id: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(corrupt)?;
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(corrupt)?;
    if tables == 0 && (app_id == 0 || app_id == APPLICATION_ID) {
        return Ok(None);
    }
    if app_id != APPLICATION_ID {
        return Err(OpenError::Foreign {
            file: path.to_path_buf(),
            reason: format!("application_id {app_id:#x}, {tables} schema objects"),
        });
    }
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(corrupt)?;
    if version > SCHEMA_VERSION {
        return Err(OpenError::NewerSchema {
            file: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version < FIRST_VERSION {
        return Err(OpenError::Foreign {
            file: path.to_path_buf(),
            reason: format!("schema version {version}"),
        });
    }
    Ok(Some(version))
}

/// Prepared statements kept per connection: more than the distinct SQL
/// strings in `ops` (about 90), so none is ever evicted.
pub(crate) const STATEMENT_CACHE: usize = 256;

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
    let version = check(&conn, path)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(corrupt)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(corrupt)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(corrupt)?;
    // Every statement the store runs stays prepared: rusqlite's default
    // cache of 16 is smaller than the statements of one enqueue → reserve →
    // ack cycle, and an LRU cache cycled through more entries than it holds
    // misses every time (each call would parse and plan its SQL again).
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // A cached statement must stay compiled. Without the query planner
    // stability guarantee SQLite compiles a bound `LIMIT ?` as a constant
    // and marks the statement to be compiled again whenever that parameter
    // is bound, i.e. on every call (promote's and reserve's statements were
    // parsed and planned anew each time: 7 % of the writer's time). The
    // cost: a bound value no longer matches a partial index's literal, so a
    // statement choosing rows by state writes the state into its SQL
    // (`ops::delete_topic::DELETE_SCHEDULED`; a test checks its plan).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map_err(corrupt)?;
    if let Some(pages) = max_pages {
        conn.pragma_update(None, "max_page_count", pages as i64)
            .map_err(corrupt)?;
    }
    match version {
        None => {
            let steps: String = steps_from(FIRST_VERSION).map(|m| m.sql).collect();
            conn.execute_batch(&format!(
                "BEGIN IMMEDIATE; {BASE} {steps} PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            ))
            .map_err(corrupt)?;
        }
        Some(version) => {
            if version < SCHEMA_VERSION {
                migrate(&conn, path, version)?;
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

/// Migrates the file at `path` (open as `conn`, whose directory lock this
/// process holds) from `version` to [`SCHEMA_VERSION`]: first a copy beside
/// it through SQLite's online backup API ([`migration_backup_path`]), then
/// every step in one transaction, so a failure leaves the file as it was.
fn migrate(conn: &Connection, path: &Path, version: i64) -> Result<(), OpenError> {
    let failed = |reason: String| OpenError::Upgrade {
        file: path.to_path_buf(),
        from: version,
        to: SCHEMA_VERSION,
        reason,
    };
    let backup = migration_backup_path(path, version);
    crate::backup::copy(conn, &backup, crate::backup::Place::Replace, &mut |_| {})
        .map_err(|e| failed(format!("cannot write the backup {}: {e}", backup.display())))?;
    let steps: String = steps_from(version).map(|m| m.sql).collect();
    conn.execute_batch(&format!(
        "BEGIN IMMEDIATE; {steps} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
    ))
    .map_err(|e| {
        let _ = conn.execute_batch("ROLLBACK");
        failed(e.to_string())
    })?;
    for (i, m) in steps_from(version).enumerate() {
        tracing::info!(
            file = %path.display(),
            to = version + 1 + i as i64,
            what = m.what,
            "schema migrated"
        );
    }
    tracing::info!(
        file = %path.display(),
        from = version,
        to = SCHEMA_VERSION,
        backup = %backup.display(),
        "data file migrated; the file as it was is kept beside it"
    );
    Ok(())
}

/// Named counters (`Store::next_seq`).
const COUNTERS: &str =
    "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_statements_are_not_compiled_again_when_bound_anew() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("f"), None).unwrap();
        // The shape of promote's statement: a bound LIMIT in a subquery.
        let sql = "UPDATE jobs SET state = 1 WHERE seq IN
                     (SELECT seq FROM jobs WHERE tid = ?1 AND state = 0 AND due_ms <= ?2 ORDER BY due_ms LIMIT ?3)";
        for limit in [1, 100, 7, 1000] {
            conn.prepare_cached(sql)
                .unwrap()
                .execute(rusqlite::params![1, 5, limit])
                .unwrap();
        }
        let st = conn.prepare_cached(sql).unwrap();
        assert_eq!(
            st.get_status(rusqlite::StatementStatus::RePrepare),
            0,
            "a new LIMIT must not recompile the statement"
        );
        assert_eq!(
            st.get_status(rusqlite::StatementStatus::Run),
            4,
            "run 4 times"
        );
    }

    #[test]
    fn a_new_file_is_every_step_from_the_base() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("f"), None).unwrap();
        let v: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        assert_eq!(SCHEMA_VERSION, FIRST_VERSION + MIGRATIONS.len() as i64);
        conn.prepare(
            "SELECT n_scheduled, n_ready, n_reserved, n_dead, paused_until_ms FROM topics",
        )
        .unwrap();
        conn.prepare("SELECT timeouts, releases, buries, kicks FROM jobs")
            .unwrap();
        conn.prepare("SELECT paused, rate_limit, rl_credit, rl_at, rate_limited FROM topics")
            .unwrap();
        assert!(
            !migration_backup_path(&dir.path().join("f"), FIRST_VERSION).exists(),
            "a new file needs no backup"
        );
    }
}
