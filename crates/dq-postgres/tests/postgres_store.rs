//! What the PostgreSQL store does beyond the conformance suite: its schema
//! created, reopened and refused when newer or foreign; its clock the
//! database's.

use dq_core::*;
use dq_postgres::{OpenError, PgConfig, PgStore, TimeSource};
use dq_testkit::PgServer;

fn config(url: String) -> PgConfig {
    PgConfig {
        url,
        pool_size: 2,
        ..Default::default()
    }
}

/// A second open of the same schema finds the jobs of the first; a schema
/// at a newer version is refused with both versions named and nothing
/// changed; a schema of another program's tables is refused.
#[tokio::test]
async fn schema_is_reopened_and_newer_or_foreign_ones_refused() {
    let pg = PgServer::shared();
    let url = pg.fresh_database("schema");
    let db = url.rsplit('/').next().unwrap().to_string();
    let s = PgStore::open(&config(url.clone())).await.unwrap();
    let t = Topic::new("kept").unwrap();
    let j = NewJob::new(
        JobId::new("a").unwrap(),
        Body::Json("1".into()),
        When::DelayMs(0),
    );
    s.enqueue(&t, &[j], 0).await.unwrap();
    drop(s);
    let s = PgStore::open(&config(url.clone())).await.unwrap();
    assert!(
        s.get(&t, &JobId::new("a").unwrap())
            .await
            .unwrap()
            .is_some()
    );
    drop(s);

    pg.psql(
        &db,
        "UPDATE dq.meta SET value = 99 WHERE key = 'schema_version'",
    );
    let e = PgStore::open(&config(url.clone())).await.unwrap_err();
    assert!(
        matches!(
            e,
            OpenError::NewerSchema {
                found: 99,
                supported: 3,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("version 99, newer than this dq's 3"),
        "{e}"
    );
    assert_eq!(
        pg.psql(
            &db,
            "SELECT value FROM dq.meta WHERE key = 'schema_version'"
        )
        .trim(),
        "99"
    );

    pg.psql(&db, "CREATE SCHEMA shop; CREATE TABLE shop.orders (id int)");
    let e = PgStore::open(&PgConfig {
        schema: "shop".into(),
        ..config(url.clone())
    })
    .await
    .unwrap_err();
    assert!(matches!(e, OpenError::Foreign { .. }), "{e}");

    let e = PgStore::open(&PgConfig {
        schema: "Bad-Name".into(),
        ..config(url)
    })
    .await
    .unwrap_err();
    assert!(matches!(e, OpenError::SchemaName(_)), "{e}");
}

/// With the database's clock, the store's time is PostgreSQL's
/// `clock_timestamp()` whatever the caller passes: a job enqueued "at 0"
/// with a delay is due that delay after the database's now.
#[tokio::test]
async fn the_database_clock_decides() {
    let url = PgServer::shared().fresh_database("clock");
    let s = PgStore::open(&PgConfig {
        clock: TimeSource::Database,
        ..config(url)
    })
    .await
    .unwrap();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let db = s.time_ms().await.unwrap().expect("the database's time");
    assert!(db.abs_diff(wall) < 5_000, "db {db} wall {wall}");
    let t = Topic::new("clock").unwrap();
    let j = NewJob::new(
        JobId::new("a").unwrap(),
        Body::Json("1".into()),
        When::DelayMs(60_000),
    );
    let e = s.enqueue(&t, &[j], 0).await.unwrap();
    assert!(
        e[0].due_at_ms >= db + 60_000 && e[0].due_at_ms < db + 65_000,
        "{e:?}"
    );
    assert!(
        s.reserve(&t, 1, None, u64::MAX / 2)
            .await
            .unwrap()
            .leases
            .is_empty(),
        "never early by the caller's clock"
    );
}

/// A schema at version 1 (before the SQL front door) is migrated to this
/// dq's version when opened, its jobs kept, and the functions work after.
#[tokio::test]
async fn a_version_1_schema_is_migrated() {
    let pg = PgServer::shared();
    let url = pg.fresh_database("migrate");
    let db = url.rsplit('/').next().unwrap().to_string();
    let s = PgStore::open(&config(url.clone())).await.unwrap();
    let t = Topic::new("kept").unwrap();
    let j = NewJob::new(
        JobId::new("a").unwrap(),
        Body::Json("1".into()),
        When::DelayMs(0),
    );
    s.enqueue(&t, &[j], 0).await.unwrap();
    drop(s);
    // What version 1 was: no front door.
    pg.psql(
        &db,
        "DROP FUNCTION dq.enqueue, dq.cancel, dq.reschedule, dq.wake, dq.interval_ms,
           dq.json_depth, dq.check_topic, dq.check_name, dq.now_ms, dq.fail;
         DROP TABLE dq.topic_deltas;
         ALTER TABLE dq.jobs DROP COLUMN errors;
         UPDATE dq.meta SET value = 1 WHERE key = 'schema_version'",
    );
    let s = PgStore::open(&config(url.clone())).await.unwrap();
    assert_eq!(
        pg.psql(
            &db,
            "SELECT value FROM dq.meta WHERE key = 'schema_version'"
        )
        .trim(),
        "3"
    );
    assert!(
        s.get(&t, &JobId::new("a").unwrap())
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        pg.psql(&db, "SELECT state FROM dq.enqueue('kept', 'b', '2', '0')")
            .trim(),
        "ready"
    );
    assert_eq!(s.stats(&t, 0).await.unwrap().ready, 2);
}

/// One statement acks a batch, yet each item answers what acking the
/// items one after the other would: a stale token before the job's ack is
/// a lease mismatch, the ack succeeds, the same ack again finds nothing.
#[tokio::test]
async fn an_ack_batch_answers_as_one_ack_after_the_other() {
    let url = PgServer::shared().fresh_database("ackbatch");
    let s = PgStore::open(&PgConfig {
        clock: TimeSource::Caller,
        ..config(url)
    })
    .await
    .unwrap();
    let t = Topic::new("b").unwrap();
    let jobs: Vec<NewJob> = ["a", "b"]
        .iter()
        .map(|id| {
            NewJob::new(
                JobId::new(*id).unwrap(),
                Body::Json("1".into()),
                When::DelayMs(0),
            )
        })
        .collect();
    s.enqueue(&t, &jobs, 1_000).await.unwrap();
    let leases = s.reserve(&t, 2, None, 1_000).await.unwrap().leases;
    let a = leases.iter().find(|l| l.id.as_str() == "a").unwrap();
    let held = |token: &str| AckItem::new(&t, &a.id, token);
    let stale = "0000000000000000";
    let token = a.token.as_str();
    let r = s
        .ack_batch(&[held(stale), held(token), held(token)], 1_000)
        .await;
    assert!(matches!(r[0], Err(StoreError::LeaseMismatch)), "{r:?}");
    assert!(r[1].is_ok(), "{r:?}");
    assert!(matches!(r[2], Err(StoreError::NotFound)), "{r:?}");
    let st = s.stats(&t, 1_000).await.unwrap();
    assert_eq!((st.reserved, st.counters.acked), (1, 1));
}
