//! What the database file holds: its tables, indexes, schema versions and
//! identity (how a file is told to be dq's, and of which version), and the
//! names of the files beside it (its write-ahead log, the backup before a
//! migration). Opening it, creating or migrating it, is `crate::file`'s.
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
pub(crate) const FIRST_VERSION: i64 = 1;

/// `PRAGMA user_version`: the schema version this dq writes, one past the
/// last [`MIGRATIONS`] step. An older file is migrated when opened (after a
/// backup beside it); a newer one is refused.
pub(crate) const SCHEMA_VERSION: i64 = FIRST_VERSION + MIGRATIONS.len() as i64;

/// The tables of schema version 1, as the first dq wrote them. A new file is
/// this plus every step of [`MIGRATIONS`], so a new file and a migrated one
/// cannot differ.
pub(crate) const BASE: &str = "
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
    // → 8
    Migration {
        what: "job expiry: a job's expires_ms, a topic's expires_ms and on_expiry, the count of jobs that expired before a hand-out",
        sql: "ALTER TABLE jobs ADD COLUMN expires_ms INTEGER;
              ALTER TABLE topics ADD COLUMN expires_ms INTEGER;
              ALTER TABLE topics ADD COLUMN on_expiry TEXT;
              ALTER TABLE topics ADD COLUMN expired_unhandled INTEGER NOT NULL DEFAULT 0;",
    },
    // → 9
    Migration {
        what: "a job's last failed attempts (JSON: attempt, at_ms, error)",
        sql: "ALTER TABLE jobs ADD COLUMN errors TEXT;",
    },
    // → 10
    Migration {
        what: "jobs in put order (beanstalkd's) with their last delay; hand-outs a replay or release took from the attempts",
        sql: "ALTER TABLE jobs ADD COLUMN put_delay_ms INTEGER;
              ALTER TABLE jobs ADD COLUMN reserves_extra INTEGER NOT NULL DEFAULT 0;",
    },
    // → 11
    Migration {
        what: "a job's W3C trace context (traceparent, then a space and the tracestate)",
        sql: "ALTER TABLE jobs ADD COLUMN trace TEXT;",
    },
];

/// The SQL of every step from `version` to [`SCHEMA_VERSION`].
pub(crate) fn steps_from(version: i64) -> impl Iterator<Item = &'static Migration> {
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

/// The write-ahead log beside the database file `db`.
pub(crate) fn wal_path(db: &Path) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_os_string();
    name.push("-wal");
    name.into()
}

/// Named counters (`Store::next_seq`).
pub(crate) const COUNTERS: &str =
    "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);";
