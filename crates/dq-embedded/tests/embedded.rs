//! What only the embedded store has: its files, its lock, durability across
//! reopening, a full disk, group commit isolating a failed call.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq_core::*;
use dq_embedded::{EmbeddedStore, OpenError};
use futures::future::join_all;

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

#[tokio::test]
async fn one_owner_per_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let first = EmbeddedStore::open(dir.path()).unwrap();
    let err = EmbeddedStore::open(dir.path()).unwrap_err();
    assert!(matches!(err, OpenError::Locked { .. }), "{err}");
    assert!(
        err.to_string().contains("in use by another dq process"),
        "{err}"
    );
    first.ping().await.unwrap();
    drop(first);
    // The lock goes with the store (after its writer thread closed the file).
    open_when_free(dir.path()).await.ping().await.unwrap();
}

#[tokio::test]
async fn jobs_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let topic = t("durable");
    {
        let s = EmbeddedStore::open(dir.path()).unwrap();
        s.enqueue(&topic, &[job("a", 5000, "{\"k\":1}"), job("b", 0, "2")], T0)
            .await
            .unwrap();
        let l = s
            .reserve(&topic, 1, Some(60_000), T0)
            .await
            .unwrap()
            .leases
            .remove(0);
        assert_eq!(l.id.as_str(), "b");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let a = s
        .get(&topic, &JobId::new("a").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (a.state, a.due_at_ms, a.attempts),
        (JobState::Scheduled, T0 + 5000, 0)
    );
    assert_eq!(a.body, Body::Json("{\"k\":1}".into()));
    let b = s
        .get(&topic, &JobId::new("b").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((b.state, b.attempts), (JobState::Reserved, 1));
    assert_eq!(b.lease_deadline_ms, Some(T0 + 60_000));
    let st = s.stats(&topic, T0).await.unwrap();
    assert_eq!((st.scheduled, st.reserved, st.counters.enqueued), (1, 1, 2));
    // The lease outlives the restart (the store reads it back at open):
    // not expired at its deadline, expired one millisecond later.
    let kept = s.requeue_expired(&topic, 10, T0 + 60_000).await.unwrap();
    assert!(kept.jobs.is_empty());
    assert_eq!(kept.next_deadline_ms, Some(T0 + 60_000));
    let ended = s.requeue_expired(&topic, 10, T0 + 60_001).await.unwrap();
    assert_eq!(ended.jobs.len(), 1);
    assert_eq!(ended.jobs[0].0.as_str(), "b");
    assert_eq!(ended.next_deadline_ms, None);
}

#[test]
fn corrupt_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(dq_embedded::DB_FILE), vec![0x5a; 8192]).unwrap();
    let err = EmbeddedStore::open(dir.path()).unwrap_err();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("dq.sqlite3"), "{err}");
}

#[test]
fn foreign_sqlite_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(dq_embedded::DB_FILE);
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE invoices (id INTEGER PRIMARY KEY); INSERT INTO invoices VALUES (7);",
        )
        .unwrap();
    }
    let err = EmbeddedStore::open(dir.path()).unwrap_err();
    assert!(matches!(err, OpenError::Foreign { .. }), "{err}");
    assert!(err.to_string().contains("not a dq data file"), "{err}");
    let c = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM invoices", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "the foreign file is left as it was");
}

/// A full disk fails the call with `store_full`, writes nothing of it, and
/// the store keeps serving reads and smaller writes that fit.
#[tokio::test]
async fn full_disk_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open_with(
        dir.path(),
        &dq_embedded::Options {
            max_pages: Some(40),
            disk_reserve_bytes: 0,
        },
    )
    .unwrap();
    let topic = t("full");
    s.enqueue(&topic, &[job("small", 0, "1")], T0)
        .await
        .unwrap();
    let big = "x".repeat(400_000);
    let err = s
        .enqueue(&topic, &[job("big", 0, &format!("\"{big}\""))], T0)
        .await
        .unwrap_err();
    match err {
        StoreError::Storage { code, message } => {
            assert_eq!(code, "store_full");
            assert!(message.contains("disk is full"), "{message}");
        }
        other => panic!("expected store_full, got {other:?}"),
    }
    assert!(
        s.get(&topic, &JobId::new("big").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    let st = s.stats(&topic, T0).await.unwrap();
    assert_eq!(
        (st.ready, st.counters.enqueued),
        (1, 1),
        "nothing of the failed call"
    );
    s.enqueue(&topic, &[job("small2", 0, "2")], T0)
        .await
        .unwrap();
    assert_eq!(
        s.reserve(&topic, 10, None, T0).await.unwrap().leases.len(),
        2
    );

    // A failed call that would have created a topic leaves no trace of it,
    // and the topic can be created afterwards (no stale cached id).
    let fresh = t("fresh");
    let huge = format!("\"{big}\"");
    assert!(
        s.enqueue(&fresh, &[job("big", 0, &huge)], T0)
            .await
            .is_err()
    );
    assert!(!s.topics().await.unwrap().contains(&fresh));
    s.enqueue(&fresh, &[job("ok", 0, "1")], T0).await.unwrap();
    assert!(s.topics().await.unwrap().contains(&fresh));
    assert_eq!(s.stats(&fresh, T0).await.unwrap().counters.enqueued, 1);
}

/// Concurrent calls share transactions; one that fails (stale token) is
/// undone alone and the others commit.
#[tokio::test]
async fn failed_call_in_a_group_is_undone_alone() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let topic = t("group");
    s.enqueue(&topic, &[job("held", 0, "0")], T0).await.unwrap();
    let lease = s
        .reserve(&topic, 1, None, T0)
        .await
        .unwrap()
        .leases
        .remove(0);
    let enqueues = (0..50).map(|i| {
        let s = &s;
        let topic = &topic;
        async move {
            s.enqueue(topic, &[job(&format!("j{i}"), 0, "1")], T0)
                .await
                .map(|_| ())
        }
    });
    let bad_acks = (0..50).map(|_| {
        let s = &s;
        let topic = &topic;
        async move { s.ack(topic, &JobId::new("held").unwrap(), "stale", 0).await }
    });
    let (ok, bad) = tokio::join!(join_all(enqueues), join_all(bad_acks));
    assert!(ok.iter().all(Result::is_ok));
    assert!(
        bad.iter()
            .all(|r| matches!(r, Err(StoreError::LeaseMismatch)))
    );
    let st = s.stats(&topic, T0).await.unwrap();
    assert_eq!((st.ready, st.reserved), (50, 1));
    s.ack(&topic, &lease.id, &lease.token, 0).await.unwrap();
}

/// Wake-ups reach watchers after the commit, for due-now jobs and new heads only.
#[tokio::test]
async fn wakes_after_commit() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let watcher = {
        let (s, got) = (s.clone(), got.clone());
        tokio::spawn(async move {
            s.watch_wakes(Arc::new(move |t: &str| got.lock().unwrap().push(t.into())))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let topic = t("w");
    s.enqueue(&topic, &[job("far", 60_000, "1")], T0)
        .await
        .unwrap();
    s.enqueue(&topic, &[job("farther", 120_000, "1")], T0)
        .await
        .unwrap();
    s.enqueue(&topic, &[job("now", 0, "1")], T0).await.unwrap();
    assert_eq!(*got.lock().unwrap(), vec!["w", "w"]);
    watcher.abort();
}

fn chattr(flag: &str, path: &std::path::Path) -> bool {
    std::process::Command::new("chattr")
        .arg(flag)
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}

/// A data directory that cannot be written is reported at start (even to
/// root: the directory is made immutable with chattr).
#[test]
fn unwritable_directory_is_a_clear_error_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    assert!(chattr("+i", &data), "chattr +i must work here (ext4, root)");
    let err = EmbeddedStore::open(&data);
    chattr("-i", &data);
    let err = err.unwrap_err();
    assert!(matches!(err, OpenError::Io { .. }), "{err}");
    assert!(
        err.to_string().contains("cannot use data directory"),
        "{err}"
    );
}

/// Files that stop being writable while serving: writes fail with a
/// storage error (503 for clients), reads go on, and writes work again
/// once the files are writable.
#[tokio::test]
async fn files_turning_unwritable_fail_writes_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let topic = t("ro");
    s.enqueue(&topic, &[job("before", 0, "1")], T0)
        .await
        .unwrap();
    let wal = dir.path().join(format!("{}-wal", dq_embedded::DB_FILE));
    assert!(wal.exists());
    assert!(chattr("+i", &wal));
    let err = s.enqueue(&topic, &[job("during", 0, "2")], T0).await;
    let read = s.get(&topic, &JobId::new("before").unwrap()).await;
    chattr("-i", &wal);
    match err {
        Err(StoreError::Storage { code, message }) => {
            assert_eq!(code, "store_io_error");
            assert!(message.contains("cannot write"), "{message}");
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
    assert!(read.unwrap().is_some(), "reads keep working");
    s.enqueue(&topic, &[job("after", 0, "3")], T0)
        .await
        .unwrap();
    assert!(
        s.get(&topic, &JobId::new("during").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        s.reserve(&topic, 10, None, T0).await.unwrap().leases.len(),
        2
    );
}

/// The embedded store keeps a topic whole: partitions other than 1 are
/// refused with a clear code, and 1 is accepted.
#[tokio::test]
async fn partitions_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let t = Topic::new("p").unwrap();
    let patch = |n| TopicConfigPatch {
        partitions: Some(n),
        ..Default::default()
    };
    match s.configure_topic(&t, &patch(4)).await {
        Err(StoreError::Invalid(i)) => assert_eq!(i.code, "invalid_partitions"),
        other => panic!("{other:?}"),
    }
    assert!(
        s.topic_config(&t).await.unwrap().is_none(),
        "nothing written"
    );
    let c = s.configure_topic(&t, &patch(1)).await.unwrap();
    assert_eq!(c.partitions, 1);
}

/// Opens the store in `dir`, waiting for a dropped one's writer to let go.
async fn open_when_free(dir: &std::path::Path) -> EmbeddedStore {
    for _ in 0..200 {
        match EmbeddedStore::open(dir) {
            Ok(s) => return s,
            Err(OpenError::Locked { .. }) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("still locked after 2 s");
}

/// A file of schema version 1 (per-state counts named n0..n3, no per-job
/// counts, no dedup windows or records, no flow control, no flow-control
/// keys, an index of leases) opens with its
/// jobs and counts kept, as the current version; a version this dq does not know is
/// refused at start, file untouched.
#[tokio::test]
async fn a_version_1_file_is_migrated_and_a_newer_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let topic = t("old");
    let s = EmbeddedStore::open(dir.path()).unwrap();
    s.enqueue(&topic, &[job("later", 60_000, "1"), job("now", 0, "2")], T0)
        .await
        .unwrap();
    drop(s);
    let db = dir.path().join("dq.sqlite3");
    let downgrade = |sql: &str| {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.busy_timeout(Duration::from_secs(5)).unwrap();
        c.execute_batch(sql).unwrap();
    };
    // The store's writer may still be closing: wait for the lock first.
    drop(open_when_free(dir.path()).await);
    downgrade(
        "ALTER TABLE jobs DROP COLUMN trace;
         ALTER TABLE jobs DROP COLUMN reserves_extra;
         ALTER TABLE jobs DROP COLUMN put_delay_ms;
         ALTER TABLE jobs DROP COLUMN errors;
         ALTER TABLE jobs DROP COLUMN expires_ms;
         ALTER TABLE topics DROP COLUMN expires_ms;
         ALTER TABLE topics DROP COLUMN on_expiry;
         ALTER TABLE topics DROP COLUMN expired_unhandled;
         CREATE INDEX jobs_lease ON jobs(tid, deadline_ms) WHERE state = 2;
         CREATE INDEX jobs_dead ON jobs(tid, died_ms, seq) WHERE state = 3;
         ALTER TABLE jobs DROP COLUMN fkey;
         CREATE INDEX jobs_ready ON jobs(tid, priority, due_ms, seq) WHERE state = 1;
         DROP TABLE fkeys;
         ALTER TABLE topics DROP COLUMN keyed;
         ALTER TABLE topics DROP COLUMN key_concurrency;
         ALTER TABLE topics DROP COLUMN key_rate_limit;
         ALTER TABLE topics DROP COLUMN kturn;
         ALTER TABLE topics DROP COLUMN uturn;
         ALTER TABLE topics RENAME COLUMN n_scheduled TO n0;
         ALTER TABLE topics RENAME COLUMN n_ready TO n1;
         ALTER TABLE topics RENAME COLUMN n_reserved TO n2;
         ALTER TABLE topics RENAME COLUMN n_dead TO n3;
         ALTER TABLE jobs DROP COLUMN timeouts;
         ALTER TABLE jobs DROP COLUMN releases;
         ALTER TABLE jobs DROP COLUMN buries;
         ALTER TABLE jobs DROP COLUMN kicks;
         ALTER TABLE topics DROP COLUMN dedup_ms;
         ALTER TABLE jobs DROP COLUMN dedup_ms;
         DROP TABLE dedup;
         DROP TABLE records;
         ALTER TABLE topics DROP COLUMN paused;
         ALTER TABLE topics DROP COLUMN rate_limit;
         ALTER TABLE topics DROP COLUMN rl_credit;
         ALTER TABLE topics DROP COLUMN rl_at;
         ALTER TABLE topics DROP COLUMN rate_limited;
         PRAGMA user_version = 1;",
    );
    let s = open_when_free(dir.path()).await;
    let st = s.stats(&topic, T0).await.unwrap();
    assert_eq!((st.scheduled, st.ready), (1, 1), "counts kept");
    let got = s.reserve(&topic, 10, None, T0).await.unwrap();
    assert_eq!(got.leases.len(), 1);
    assert_eq!(s.stats(&topic, T0).await.unwrap().reserved, 1, "counted on");
    drop(s);
    drop(open_when_free(dir.path()).await);
    let newer = dq_embedded::SCHEMA_VERSION + 1;
    downgrade(&format!("PRAGMA user_version = {newer};"));
    let err = loop {
        match EmbeddedStore::open(dir.path()) {
            Err(OpenError::Locked { .. }) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => break e,
            Ok(_) => panic!("a newer schema is refused"),
        }
    };
    assert!(
        err.to_string().contains(&format!(
            "schema version {newer}, written by a newer dq; this dq reads schema versions up to {}",
            dq_embedded::SCHEMA_VERSION
        )),
        "{err}"
    );
}
