//! What dq keeps in its PostgreSQL schema (default `dq`): its tables and
//! indexes, and their versions. Creating or migrating them at start is
//! [`migrate`]'s; a schema written by a newer dq is refused with both
//! versions named.
//!
//! Jobs live in one table; their state is a small integer and each state
//! has a partial index in the order the store reads it:
//!
//! | state | meaning | index |
//! | --- | --- | --- |
//! | 0 | scheduled | `(tid, due_ms, seq)` |
//! | 1 | ready | `(tid, priority, place, seq)` without a key, `(tid, fkey, priority, place, seq)` with one |
//! | 2 | reserved | `(tid, deadline_ms)` |
//! | 3 | dead | `(tid, died_ms, seq)` |
//!
//! `seq` is the enqueue order. A ready job's `place` (`place_ms!`) is its
//! due time, or for a job ranked in put order (`put_delay_ms` not NULL,
//! `NewJob::put_order`) its put time, `created_ms`: an expression of the
//! row, indexed as such, so that it costs no column and adding it rewrote
//! no table. Topics are interned as integers (`tid`) to
//! keep rows and indexes small; the `topics` row also holds the per-state
//! counts and counters, and is the lock every write of a topic takes first
//! (`SELECT … FOR UPDATE`), so the writes of one topic are serialised as a
//! Redis script's are and those of different topics run in parallel.

use crate::Failure;

/// A job's place among the ready jobs of its priority: its due time, or
/// its put time (`created_ms`) when it is ranked in put order (it keeps a
/// `put_delay_ms`). The ready indexes are on this expression: a query
/// reads them in order only when it orders by the same expression, so
/// every one writes it through this macro (or [`PLACE_MS`]).
macro_rules! place_ms {
    () => {
        "(CASE WHEN put_delay_ms IS NULL THEN due_ms ELSE created_ms END)"
    };
}

/// `place_ms!`, for `format!`.
pub(crate) const PLACE_MS: &str = place_ms!();

/// The first schema version: what [`BASE`] creates.
pub(crate) const FIRST_VERSION: i64 = 1;

/// The schema version this dq writes, one past the last [`MIGRATIONS`] step.
pub(crate) const SCHEMA_VERSION: i64 = FIRST_VERSION + MIGRATIONS.len() as i64;

/// Version 1. A new schema is this plus every step of [`MIGRATIONS`].
const BASE: &str = "
CREATE TABLE meta (key text PRIMARY KEY, value bigint NOT NULL);
CREATE TABLE topics (
  tid bigserial PRIMARY KEY,
  name text NOT NULL UNIQUE COLLATE \"C\",
  max_attempts bigint, lease_ms bigint, dead_cap bigint, default_delay_ms bigint,
  retry text, delivery text, dedup_ms bigint,
  paused boolean NOT NULL DEFAULT false, paused_until_ms bigint NOT NULL DEFAULT 0,
  rate_limit text, rl_credit bigint, rl_at bigint NOT NULL DEFAULT 0,
  keyed boolean NOT NULL DEFAULT false, key_concurrency bigint, key_rate_limit text,
  kturn bigint NOT NULL DEFAULT 0, uturn bigint NOT NULL DEFAULT 0,
  n_scheduled bigint NOT NULL DEFAULT 0, n_ready bigint NOT NULL DEFAULT 0,
  n_reserved bigint NOT NULL DEFAULT 0, n_dead bigint NOT NULL DEFAULT 0,
  enqueued bigint NOT NULL DEFAULT 0, acked bigint NOT NULL DEFAULT 0,
  failed bigint NOT NULL DEFAULT 0, expired bigint NOT NULL DEFAULT 0,
  dead bigint NOT NULL DEFAULT 0, cancelled bigint NOT NULL DEFAULT 0,
  dead_dropped bigint NOT NULL DEFAULT 0, replayed bigint NOT NULL DEFAULT 0,
  rate_limited bigint NOT NULL DEFAULT 0
);
CREATE TABLE jobs (
  seq bigserial PRIMARY KEY,
  tid bigint NOT NULL,
  id text NOT NULL COLLATE \"C\",
  state smallint NOT NULL,
  due_ms bigint NOT NULL,
  priority bigint NOT NULL,
  attempts bigint NOT NULL DEFAULT 0,
  max_attempts bigint, lease_ms bigint, retry text, dedup_ms bigint, fkey text,
  last_error text,
  created_ms bigint NOT NULL,
  token text, deadline_ms bigint, died_ms bigint,
  timeouts bigint NOT NULL DEFAULT 0, releases bigint NOT NULL DEFAULT 0,
  buries bigint NOT NULL DEFAULT 0, kicks bigint NOT NULL DEFAULT 0,
  is_json boolean NOT NULL,
  body bytea NOT NULL,
  UNIQUE (tid, id)
);
CREATE INDEX jobs_sched ON jobs (tid, due_ms, seq) WHERE state = 0;
CREATE INDEX jobs_ready ON jobs (tid, priority, due_ms, seq) WHERE state = 1 AND fkey IS NULL;
CREATE INDEX jobs_kready ON jobs (tid, fkey, priority, due_ms, seq) WHERE state = 1 AND fkey IS NOT NULL;
CREATE INDEX jobs_lease ON jobs (tid, deadline_ms) WHERE state = 2;
CREATE INDEX jobs_dead ON jobs (tid, died_ms, seq) WHERE state = 3;
CREATE TABLE dedup (
  tid bigint NOT NULL, id text NOT NULL COLLATE \"C\", until_ms bigint NOT NULL,
  PRIMARY KEY (tid, id)
);
CREATE INDEX dedup_until ON dedup (tid, until_ms);
CREATE TABLE fkeys (
  tid bigint NOT NULL, fkey text NOT NULL COLLATE \"C\",
  active bigint NOT NULL DEFAULT 0, turn bigint NOT NULL DEFAULT 0,
  credit bigint, at bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (tid, fkey)
);
CREATE TABLE records (
  kind text NOT NULL COLLATE \"C\", name text NOT NULL COLLATE \"C\", value text NOT NULL,
  mark bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (kind, name)
);
CREATE TABLE counters (name text PRIMARY KEY, value bigint NOT NULL);
CREATE TABLE members (name text PRIMARY KEY, seen_ms bigint NOT NULL);
";

/// One schema change: the SQL that takes a schema from the version before
/// it to the next.
pub(crate) struct Migration {
    /// What the version it leads to adds, for the log.
    pub(crate) what: &'static str,
    /// Runs inside the migration's one transaction.
    pub(crate) sql: &'static str,
}

/// Every schema change since [`BASE`], in order: step `i` takes version
/// `FIRST_VERSION + i` to the next. A new version is one entry appended
/// here; nothing else changes.
pub(crate) const MIGRATIONS: &[Migration] = &[
    // → 2
    Migration {
        what: "the SQL front door: dq.enqueue, dq.cancel, dq.reschedule; topic counts moved by them in topic_deltas",
        // dq.enqueue as version 6 left it (`CREATE OR REPLACE`: the same
        // function either way; it reads a `trace` column, added by version
        // 5, only when called).
        sql: concat!(include_str!("sql_api.sql"), include_str!("sql_enqueue.sql")),
    },
    // → 3
    Migration {
        what: "a job's last failed attempts (errors: attempt, at_ms, error)",
        sql: "ALTER TABLE jobs ADD COLUMN errors jsonb;",
    },
    // → 4
    Migration {
        what: "jobs ranked in put order (put_delay_ms; the ready indexes on a job's place), a job's hand-outs in its whole life (carried)",
        // Adding a column without a default, or with a constant one, writes
        // no row; the ready indexes are built again (over the ready jobs).
        // `carried` is a job's hand-outs not in its `attempts` (given back
        // by a release, or before a replay): counts.reserves = attempts +
        // carried, so that a reserve writes nothing more than before, and
        // a job from before this version counts its attempts (an imported
        // job too: its attempts were hand-outs).
        sql: concat!(
            "ALTER TABLE jobs ADD COLUMN put_delay_ms bigint,
               ADD COLUMN carried bigint NOT NULL DEFAULT 0;
             DROP INDEX jobs_ready;
             DROP INDEX jobs_kready;
             CREATE INDEX jobs_ready ON jobs (tid, priority, ",
            place_ms!(),
            ", seq) WHERE state = 1 AND fkey IS NULL;
             CREATE INDEX jobs_kready ON jobs (tid, fkey, priority, ",
            place_ms!(),
            ", seq) WHERE state = 1 AND fkey IS NOT NULL;"
        ),
    },
    // → 5
    Migration {
        what: "a job's W3C trace context (trace: the traceparent, then a space and the tracestate)",
        // A nullable column without a default writes no row and rebuilds
        // no index: a change of the catalogue only.
        sql: "ALTER TABLE jobs ADD COLUMN trace text;",
    },
    // → 6
    Migration {
        what: "dq.enqueue keeps the transaction's dq.traceparent and dq.tracestate as the job's trace context",
        // The same signature: the GRANTs on it stay.
        sql: include_str!("sql_enqueue.sql"),
    },
];

/// Why a store did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The schema name is not a plain identifier.
    #[error(
        "invalid schema name {0:?}: use lower-case letters, digits and _ (at most 63, not starting with a digit)"
    )]
    SchemaName(String),
    /// The URL does not parse.
    #[error("invalid PostgreSQL URL: {0}")]
    Url(String),
    /// The database does not answer.
    #[error("cannot reach PostgreSQL: {0}")]
    Unreachable(String),
    /// The schema was written by a newer dq.
    #[error(
        "schema {schema:?} is at version {found}, newer than this dq's {supported}: run a dq at least as new, or point this one at another schema (--postgres-schema)"
    )]
    NewerSchema {
        /// The schema.
        schema: String,
        /// Its version.
        found: i64,
        /// The newest version this dq knows.
        supported: i64,
    },
    /// The schema exists but is not dq's.
    #[error(
        "schema {schema:?} holds tables that are not dq's ({reason}): choose another schema (--postgres-schema)"
    )]
    Foreign {
        /// The schema.
        schema: String,
        /// What was found.
        reason: String,
    },
    /// Creating or migrating failed.
    #[error("cannot create or migrate schema {schema:?}: {reason}")]
    Migrate {
        /// The schema.
        schema: String,
        /// The database's answer.
        reason: String,
    },
}

/// Whether `name` may be used as the schema (and is safe to write into SQL
/// unquoted).
pub(crate) fn valid_schema_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

/// Creates the schema or brings it to [`SCHEMA_VERSION`], under an advisory
/// lock so that instances starting together migrate once.
pub(crate) async fn migrate(
    client: &mut tokio_postgres::Client,
    schema: &str,
) -> Result<(), OpenError> {
    let fail = |e: tokio_postgres::Error| OpenError::Migrate {
        schema: schema.to_string(),
        reason: Failure::from(e).0.to_string(),
    };
    let tx = client.transaction().await.map_err(fail)?;
    // One migration at a time per schema, across processes.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('dq.migrate.' || $1))",
        &[&schema],
    )
    .await
    .map_err(fail)?;
    tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
        .await
        .map_err(fail)?;
    let tables: Vec<String> = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .await
        .map_err(fail)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let version = if tables.is_empty() {
        tx.batch_execute(&format!("SET LOCAL search_path = {schema}; {BASE}"))
            .await
            .map_err(fail)?;
        tx.execute(
            &format!(
                "INSERT INTO {schema}.meta VALUES ('schema_version', $1), ('settings_version', 1)"
            ),
            &[&FIRST_VERSION],
        )
        .await
        .map_err(fail)?;
        FIRST_VERSION
    } else if !tables.iter().any(|t| t == "meta") {
        return Err(OpenError::Foreign {
            schema: schema.to_string(),
            reason: format!("{} tables, none named meta", tables.len()),
        });
    } else {
        let row = tx
            .query_opt(
                &format!("SELECT value FROM {schema}.meta WHERE key = 'schema_version'"),
                &[],
            )
            .await
            .map_err(fail)?;
        match row {
            Some(r) => r.get(0),
            None => {
                return Err(OpenError::Foreign {
                    schema: schema.to_string(),
                    reason: "a meta table without schema_version".into(),
                });
            }
        }
    };
    if version > SCHEMA_VERSION {
        return Err(OpenError::NewerSchema {
            schema: schema.to_string(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    let steps = MIGRATIONS
        .iter()
        .skip(usize::try_from(version - FIRST_VERSION).unwrap_or(usize::MAX));
    for (i, m) in steps.enumerate() {
        tracing::info!(
            schema,
            to = version + 1 + i as i64,
            what = m.what,
            "migrating"
        );
        tx.batch_execute(&format!("SET LOCAL search_path = {schema}; {}", m.sql))
            .await
            .map_err(fail)?;
    }
    tx.execute(
        &format!("UPDATE {schema}.meta SET value = $1 WHERE key = 'schema_version'"),
        &[&SCHEMA_VERSION],
    )
    .await
    .map_err(fail)?;
    tx.commit().await.map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for ok in ["dq", "dq_test_1", "_x"] {
            assert!(valid_schema_name(ok), "{ok}");
        }
        for bad in ["", "1dq", "Dq", "dq;drop", "a-b", &"x".repeat(64)] {
            assert!(!valid_schema_name(bad), "{bad}");
        }
    }
}
