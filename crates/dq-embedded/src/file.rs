//! Opening the data file: the connection's pragmas (WAL,
//! `synchronous=FULL`, the statement cache, the query planner stability
//! guarantee), then a new file created at [`SCHEMA_VERSION`] or an older
//! one migrated to it — in one transaction, after a backup beside it
//! (`crate::backup`'s copy). What the file holds, and how its version is
//! told, is `crate::schema`'s.

use std::path::Path;

use rusqlite::Connection;

use crate::OpenError;
use crate::schema::{
    APPLICATION_ID, BASE, COUNTERS, FIRST_VERSION, SCHEMA_VERSION, check, migration_backup_path,
    steps_from,
};

/// Prepared statements kept per connection: more than the distinct SQL
/// strings in `ops` (about 90), so none is ever evicted.
pub(crate) const STATEMENT_CACHE: usize = 256;

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
    // parsed and planned anew each time, a large share of the writer's
    // time: docs/performance-log.md). The
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::MIGRATIONS;

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
