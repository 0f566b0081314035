//! Backups of a live store, restoring them, and upgrades of older files.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dq_core::*;
use dq_embedded::backup::{self, BackupError};
use dq_embedded::{EmbeddedStore, OpenError, SCHEMA_VERSION};

const T0: u64 = 1_700_000_000_000;

fn job(id: &str, delay: u64, body: &str) -> NewJob {
    NewJob::new(
        JobId::new(id).unwrap(),
        Body::Json(body.into()),
        When::DelayMs(delay),
    )
}

fn t(name: &str) -> Topic {
    Topic::new(name).unwrap()
}

/// Opens the store in `dir`, waiting for a dropped one's writer to let go.
async fn open_when_free(dir: &Path) -> EmbeddedStore {
    for _ in 0..200 {
        match EmbeddedStore::open(dir) {
            Ok(s) => return s,
            Err(OpenError::Locked { .. }) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("still locked after 2 s");
}

/// Runs `f` until the directory it needs is no longer locked by a dropped
/// store's closing writer.
async fn when_free<T, E: std::fmt::Debug>(
    mut f: impl FnMut() -> Result<T, E>,
    locked: impl Fn(&E) -> bool,
) -> Result<T, E> {
    for _ in 0..200 {
        match f() {
            Err(e) if locked(&e) => tokio::time::sleep(Duration::from_millis(10)).await,
            r => return r,
        }
    }
    panic!("still locked after 2 s");
}

fn user_version(file: &Path) -> i64 {
    let c = rusqlite::Connection::open(file).unwrap();
    c.query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

/// Schema version 1 as the first dq release wrote it (frozen here: this is
/// the file an operator has on disk, whatever the code says today).
const V1_DDL: &str = "
CREATE TABLE topics (
  tid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
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
  seq INTEGER PRIMARY KEY, tid INTEGER NOT NULL, id TEXT NOT NULL,
  state INTEGER NOT NULL, due_ms INTEGER NOT NULL, priority INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER, lease_ms INTEGER, retry TEXT, last_error TEXT,
  created_ms INTEGER NOT NULL, token TEXT, deadline_ms INTEGER, died_ms INTEGER,
  is_json INTEGER NOT NULL, body BLOB NOT NULL
);
CREATE UNIQUE INDEX jobs_id ON jobs(tid, id);
CREATE INDEX jobs_sched ON jobs(tid, due_ms) WHERE state = 0;
CREATE INDEX jobs_ready ON jobs(tid, priority, due_ms, seq) WHERE state = 1;
CREATE INDEX jobs_lease ON jobs(tid, deadline_ms) WHERE state = 2;
CREATE INDEX jobs_dead ON jobs(tid, died_ms, seq) WHERE state = 3;
PRAGMA application_id = 1685127169;
PRAGMA user_version = 1;
";

/// Schema version 2, today's release (frozen: when version 3 comes, this
/// file must still open, migrated).
const V2_DDL: &str = "
CREATE TABLE topics (
  tid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
  max_attempts INTEGER, lease_ms INTEGER, dead_cap INTEGER, default_delay_ms INTEGER,
  retry TEXT, delivery TEXT,
  enqueued INTEGER NOT NULL DEFAULT 0, acked INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0, expired INTEGER NOT NULL DEFAULT 0,
  dead INTEGER NOT NULL DEFAULT 0, cancelled INTEGER NOT NULL DEFAULT 0,
  dead_dropped INTEGER NOT NULL DEFAULT 0, replayed INTEGER NOT NULL DEFAULT 0,
  n_scheduled INTEGER NOT NULL DEFAULT 0, n_ready INTEGER NOT NULL DEFAULT 0,
  n_reserved INTEGER NOT NULL DEFAULT 0, n_dead INTEGER NOT NULL DEFAULT 0,
  paused_until_ms INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY, tid INTEGER NOT NULL, id TEXT NOT NULL,
  state INTEGER NOT NULL, due_ms INTEGER NOT NULL, priority INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER, lease_ms INTEGER, retry TEXT, last_error TEXT,
  created_ms INTEGER NOT NULL, token TEXT, deadline_ms INTEGER, died_ms INTEGER,
  is_json INTEGER NOT NULL, body BLOB NOT NULL,
  timeouts INTEGER NOT NULL DEFAULT 0, releases INTEGER NOT NULL DEFAULT 0,
  buries INTEGER NOT NULL DEFAULT 0, kicks INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX jobs_id ON jobs(tid, id);
CREATE INDEX jobs_sched ON jobs(tid, due_ms) WHERE state = 0;
CREATE INDEX jobs_ready ON jobs(tid, priority, due_ms, seq) WHERE state = 1;
CREATE INDEX jobs_lease ON jobs(tid, deadline_ms) WHERE state = 2;
CREATE INDEX jobs_dead ON jobs(tid, died_ms, seq) WHERE state = 3;
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
PRAGMA application_id = 1685127169;
PRAGMA user_version = 2;
";

/// Writes a data file of `ddl` into `dir` with topic `old` holding one job
/// in each state (scheduled `s`, ready `r`, reserved `l`, dead `d`), its
/// counts named `counts` (n0..n3 or n_scheduled..n_dead).
fn old_file(dir: &Path, ddl: &str, counts: [&str; 4]) {
    std::fs::create_dir_all(dir).unwrap();
    let c = rusqlite::Connection::open(dir.join(dq_embedded::DB_FILE)).unwrap();
    c.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
    c.execute_batch(ddl).unwrap();
    c.execute_batch(&format!(
        "INSERT INTO topics (tid, name, enqueued, {}, {}, {}, {}) VALUES (1, 'old', 4, 1, 1, 1, 1);
         INSERT INTO jobs (tid, id, state, due_ms, priority, attempts, created_ms, is_json, body, token, deadline_ms, died_ms, last_error)
         VALUES (1, 's', 0, {later}, 0, 0, {T0}, 1, CAST('{{\"k\":\"s\"}}' AS BLOB), NULL, NULL, NULL, NULL),
                (1, 'r', 1, {T0}, 5, 0, {T0}, 1, CAST('{{\"k\":\"r\"}}' AS BLOB), NULL, NULL, NULL, NULL),
                (1, 'l', 2, {T0}, 0, 1, {T0}, 1, CAST('{{\"k\":\"l\"}}' AS BLOB), 'tok', {later}, NULL, NULL),
                (1, 'd', 3, {T0}, 0, 3, {T0}, 0, x'00ff', NULL, NULL, {T0}, 'boom');",
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        later = T0 + 3_600_000,
    ))
    .unwrap();
}

/// The four jobs of [`old_file`] read through the store.
async fn assert_old_jobs(s: &EmbeddedStore) {
    let topic = t("old");
    let st = s.stats(&topic, T0).await.unwrap();
    assert_eq!(
        (st.scheduled, st.ready, st.reserved, st.dead),
        (1, 1, 1, 1),
        "counts kept"
    );
    let get = |id: &'static str| {
        let topic = topic.clone();
        async move {
            s.get(&topic, &JobId::new(id).unwrap())
                .await
                .unwrap()
                .unwrap()
        }
    };
    assert_eq!(get("s").await.state, JobState::Scheduled);
    assert_eq!(get("s").await.body, Body::Json("{\"k\":\"s\"}".into()));
    assert_eq!(get("r").await.priority, 5);
    assert_eq!(get("l").await.state, JobState::Reserved);
    let d = get("d").await;
    assert_eq!(
        (d.state, d.attempts, d.body),
        (JobState::Dead, 3, Body::Bytes(vec![0, 255]))
    );
    assert_eq!(d.last_error.as_deref(), Some("boom"));
    // And it works on: the ready job is handed out, counted.
    let got = s.reserve(&topic, 10, None, T0).await.unwrap();
    assert_eq!(got.leases.len(), 1);
    assert_eq!(got.leases[0].id.as_str(), "r");
    assert_eq!(s.stats(&topic, T0).await.unwrap().reserved, 2);
    // The old file's lease was read back at open: it ends at its deadline.
    let later = T0 + 3_600_000;
    let ended = s.requeue_expired(&topic, 10, later + 1).await.unwrap();
    assert!(
        ended.jobs.iter().any(|(id, _)| id.as_str() == "l"),
        "{:?}",
        ended.jobs
    );
}

#[tokio::test]
async fn a_version_1_file_is_migrated_after_a_backup_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    old_file(dir.path(), V1_DDL, ["n0", "n1", "n2", "n3"]);
    let db = dir.path().join(dq_embedded::DB_FILE);
    let s = EmbeddedStore::open(dir.path()).unwrap();
    assert_old_jobs(&s).await;
    drop(s);
    drop(open_when_free(dir.path()).await);
    assert_eq!(user_version(&db), SCHEMA_VERSION);
    // The file as it was, beside it: version 1, the same four jobs.
    let bak = dq_embedded::migration_backup_path(&db, 1);
    assert!(bak.ends_with("dq.sqlite3.v1.bak"), "{}", bak.display());
    assert_eq!(user_version(&bak), 1);
    let c = rusqlite::Connection::open(&bak).unwrap();
    let ids: Vec<String> = c
        .prepare("SELECT id FROM jobs ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ids, ["s", "r", "l", "d"]);
    let n0: i64 = c
        .query_row("SELECT n0 FROM topics", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n0, 1, "the backup is the old schema, untouched");
}

/// A file of today's release (schema version 2) opens with every job; once
/// a later version exists, it is migrated to it after a backup beside it.
#[tokio::test]
async fn a_file_of_todays_release_opens_and_migrates_to_the_current_schema() {
    let dir = tempfile::tempdir().unwrap();
    old_file(
        dir.path(),
        V2_DDL,
        ["n_scheduled", "n_ready", "n_reserved", "n_dead"],
    );
    let db = dir.path().join(dq_embedded::DB_FILE);
    let s = EmbeddedStore::open(dir.path()).unwrap();
    assert_old_jobs(&s).await;
    drop(s);
    drop(open_when_free(dir.path()).await);
    assert_eq!(user_version(&db), SCHEMA_VERSION);
    let bak = dq_embedded::migration_backup_path(&db, 2);
    assert_eq!(
        bak.exists(),
        SCHEMA_VERSION > 2,
        "a backup only when a migration ran"
    );
}

#[tokio::test]
async fn a_file_of_a_newer_dq_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    drop(EmbeddedStore::open(dir.path()).unwrap());
    drop(open_when_free(dir.path()).await);
    let db = dir.path().join(dq_embedded::DB_FILE);
    let newer = SCHEMA_VERSION + 1;
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(&format!("PRAGMA user_version = {newer};"))
        .unwrap();
    let err = when_free(
        || EmbeddedStore::open(dir.path()),
        |e| matches!(e, OpenError::Locked { .. }),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, OpenError::NewerSchema { found, supported, .. } if found == newer && supported == SCHEMA_VERSION),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("schema version {newer}, written by a newer dq"))
            && msg.contains(&format!("reads schema versions up to {SCHEMA_VERSION}")),
        "{msg}"
    );
    assert_eq!(user_version(&db), newer, "the file is untouched");
    assert!(!dq_embedded::migration_backup_path(&db, newer).exists());
}

/// A migration that fails (here: a version 1 file missing a column it
/// renames) leaves the file as it was, and says so.
#[tokio::test]
async fn a_failed_migration_leaves_the_file_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    old_file(
        dir.path(),
        &V1_DDL.replace("n3 INTEGER", "x3 INTEGER"),
        ["n0", "n1", "n2", "x3"],
    );
    let db = dir.path().join(dq_embedded::DB_FILE);
    let err = EmbeddedStore::open(dir.path()).unwrap_err();
    assert!(matches!(err, OpenError::Upgrade { from: 1, .. }), "{err:?}");
    assert!(err.to_string().contains("the file is unchanged"), "{err}");
    assert_eq!(user_version(&db), 1);
    let c = rusqlite::Connection::open(&db).unwrap();
    c.query_row("SELECT n0 FROM topics", [], |r| r.get::<_, i64>(0))
        .expect("not half-renamed");
}

/// A backup taken while a writer enqueues batch after batch: it holds every
/// batch acknowledged before it began, and is one snapshot — whole batches
/// only, the topic's counts matching its rows — while batches kept being
/// committed during the copy. Restored into a new directory, it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_under_concurrent_writes_restores_every_acknowledged_job() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = Arc::new(EmbeddedStore::open(&data).unwrap());
    let topic = t("busy");
    const BATCH: usize = 200;
    let body = format!("\"{}\"", "x".repeat(2000));
    let batch = move |b: usize| -> Vec<NewJob> {
        (0..BATCH)
            .map(|i| job(&format!("{b:05}-{i:03}"), 60_000, &body))
            .collect()
    };
    // About 20 MB before the backup: several steps of PAGES_PER_STEP.
    for b in 0..50 {
        store.enqueue(&topic, &batch(b), T0).await.unwrap();
    }
    let acked = Arc::new(AtomicU64::new(50));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (store, acked, stop, topic) =
            (store.clone(), acked.clone(), stop.clone(), topic.clone());
        tokio::spawn(async move {
            let mut b = 50;
            while !stop.load(Ordering::Relaxed) {
                store.enqueue(&topic, &batch(b), T0).await.unwrap();
                b += 1;
                acked.store(b as u64, Ordering::Relaxed);
            }
        })
    };
    let out = dir.path().join("dq.backup");
    let before = acked.load(Ordering::Relaxed);
    let (report, steps, during) = {
        let (data, out, acked) = (data.clone(), out.clone(), acked.clone());
        tokio::task::spawn_blocking(move || {
            let mut steps = 0;
            let mut seen = Vec::new();
            let r = backup::backup(&data, &out, &mut |p| {
                steps += 1;
                assert!(p.copied <= p.total);
                seen.push(acked.load(Ordering::Relaxed));
                // Slow enough for the writer to commit between steps.
                std::thread::sleep(Duration::from_millis(30));
            })
            .unwrap();
            let during = seen.last().unwrap() - seen.first().unwrap();
            (r, steps, during)
        })
        .await
        .unwrap()
    };
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    assert!(steps >= 3, "copied in steps, got {steps}");
    assert!(during > 0, "writes went on during the backup");
    assert_eq!(report.schema_version, SCHEMA_VERSION);
    assert!(report.bytes > 10_000_000, "{report:?}");
    assert!(
        !dir.path().read_dir().unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("partial")),
        "no temporary file left"
    );

    let restored = dir.path().join("restored");
    let r = backup::restore(&out, &restored, false, &mut |_| {}).unwrap();
    assert_eq!(r.pages, report.pages);
    let s = EmbeddedStore::open(&restored).unwrap();
    let st = s.stats(&topic, T0).await.unwrap();
    let n = st.scheduled as usize;
    assert_eq!(n % BATCH, 0, "whole batches only: {n}");
    let batches = (n / BATCH) as u64;
    assert!(
        batches >= before,
        "every batch acknowledged before the backup: {batches} < {before}"
    );
    for b in [0, before as usize - 1, batches as usize - 1] {
        for i in [0, BATCH - 1] {
            let id = JobId::new(format!("{b:05}-{i:03}")).unwrap();
            assert!(s.get(&topic, &id).await.unwrap().is_some(), "{id}");
        }
    }
    let next = JobId::new(format!("{batches:05}-000")).unwrap();
    assert!(s.get(&topic, &next).await.unwrap().is_none(), "a snapshot");
}

#[tokio::test]
async fn backup_and_restore_refuse_what_they_must() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = EmbeddedStore::open(&data).unwrap();
    s.enqueue(&t("a"), &[job("one", 0, "1")], T0).await.unwrap();

    let err = backup::backup(
        &dir.path().join("nothing"),
        &dir.path().join("x"),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(matches!(err, BackupError::NoStore { .. }), "{err}");

    let out = dir.path().join("taken");
    std::fs::write(&out, "keep me").unwrap();
    let err = backup::backup(&data, &out, &mut |_| {}).unwrap_err();
    assert!(matches!(err, BackupError::Exists { .. }), "{err}");
    assert!(err.to_string().contains("never overwrites"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");

    let out = dir.path().join("good");
    backup::backup(&data, &out, &mut |_| {}).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&out).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "readable by its owner alone: {mode:o}");

    // Into the live directory: not empty, and in use even with --force.
    let err = backup::restore(&out, &data, false, &mut |_| {}).unwrap_err();
    assert!(matches!(err, BackupError::NotEmpty { .. }), "{err}");
    assert!(err.to_string().contains("--force"), "{err}");
    let err = backup::restore(&out, &data, true, &mut |_| {}).unwrap_err();
    assert!(
        matches!(err, BackupError::Open(OpenError::Locked { .. })),
        "{err}"
    );

    // With the store stopped and a job added after the backup, --force
    // replaces the data: the later job is gone, the backed-up one is back.
    s.enqueue(&t("a"), &[job("two", 0, "2")], T0).await.unwrap();
    drop(s);
    when_free(
        || backup::restore(&out, &data, true, &mut |_| {}),
        |e| matches!(e, BackupError::Open(OpenError::Locked { .. })),
    )
    .await
    .unwrap();
    let s = open_when_free(&data).await;
    let a = t("a");
    let (one, two) = (JobId::new("one").unwrap(), JobId::new("two").unwrap());
    assert!(s.get(&a, &one).await.unwrap().is_some());
    assert!(s.get(&a, &two).await.unwrap().is_none());

    // Not a dq file.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![7u8; 8192]).unwrap();
    let err = backup::restore(&junk, &dir.path().join("new"), false, &mut |_| {}).unwrap_err();
    assert!(matches!(err, BackupError::Open(_)), "{err}");

    // A backup of a newer dq is refused before anything is written.
    let newer = dir.path().join("newer");
    std::fs::copy(&out, &newer).unwrap();
    rusqlite::Connection::open(&newer)
        .unwrap()
        .execute_batch(&format!("PRAGMA user_version = {};", SCHEMA_VERSION + 1))
        .unwrap();
    let target = dir.path().join("fresh");
    let err = backup::restore(&newer, &target, false, &mut |_| {}).unwrap_err();
    assert!(
        matches!(err, BackupError::Open(OpenError::NewerSchema { .. })),
        "{err}"
    );
    assert!(!target.exists(), "nothing written");
}
