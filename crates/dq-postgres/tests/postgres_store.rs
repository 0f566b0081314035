//! What the PostgreSQL store does beyond the conformance suite: its schema
//! created, reopened, migrated from older versions and refused when newer
//! or foreign; its clock the database's; a key's lane in put order; an ack
//! batch answered item by item; a job's trace context kept as one text.

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
                supported: 6,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("version 99, newer than this dq's 6"),
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
    to_version_3(pg, &db);
    assert!(
        !columns(pg, &db).contains("trace"),
        "no version-5 column is left"
    );
    let s = PgStore::open(&config(url.clone())).await.unwrap();
    assert_eq!(
        pg.psql(
            &db,
            "SELECT value FROM dq.meta WHERE key = 'schema_version'"
        )
        .trim(),
        "6"
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

/// The columns of `dq.jobs` in `db`, one a line.
fn columns(pg: &PgServer, db: &str) -> String {
    pg.psql(
        db,
        "SELECT column_name || ' ' || data_type || ' ' || is_nullable FROM information_schema.columns
         WHERE table_schema = 'dq' AND table_name = 'jobs' ORDER BY ordinal_position",
    )
}

/// Takes the `dq` schema of `db` from version 5 back to what version 4
/// was: no trace context.
fn to_version_4(pg: &PgServer, db: &str) {
    pg.psql(
        db,
        "ALTER TABLE dq.jobs DROP COLUMN trace;
         UPDATE dq.meta SET value = least(value, 4) WHERE key = 'schema_version'",
    );
}

/// Takes the `dq` schema of `db` back to what version 3 was (through
/// [`to_version_4`]): no put order, no `carried`, the ready indexes on the
/// due time.
fn to_version_3(pg: &PgServer, db: &str) {
    to_version_4(pg, db);
    pg.psql(
        db,
        "DROP INDEX dq.jobs_ready, dq.jobs_kready;
         ALTER TABLE dq.jobs DROP COLUMN put_delay_ms, DROP COLUMN carried;
         CREATE INDEX jobs_ready ON dq.jobs (tid, priority, due_ms, seq) WHERE state = 1 AND fkey IS NULL;
         CREATE INDEX jobs_kready ON dq.jobs (tid, fkey, priority, due_ms, seq)
           WHERE state = 1 AND fkey IS NOT NULL;
         UPDATE dq.meta SET value = least(value, 3) WHERE key = 'schema_version'",
    );
}

/// A schema at version 3 (before put order and a job's reserves) is
/// migrated to version 4 when opened: its jobs kept in due order, each
/// counting its attempts as its reserves (a lower bound: version 3 kept
/// no more), its ready indexes rebuilt on a job's place; put-order jobs
/// enqueued after it keep their place, and the SQL front door still makes
/// jobs in due order.
#[tokio::test]
async fn a_version_3_schema_is_migrated() {
    let pg = PgServer::shared();
    let url = pg.fresh_database("migrate3");
    let db = url.rsplit('/').next().unwrap().to_string();
    let caller = |url: String| PgConfig {
        clock: TimeSource::Caller,
        ..config(url)
    };
    let s = PgStore::open(&caller(url.clone())).await.unwrap();
    let t = Topic::new("kept").unwrap();
    let job = |id: &str, delay: u64| {
        NewJob::new(
            JobId::new(id).unwrap(),
            Body::Json("1".into()),
            When::DelayMs(delay),
        )
    };
    s.enqueue(&t, &[job("old", 0), job("tried", 0)], 1_000)
        .await
        .unwrap();
    // "tried": handed out once and failed (attempts 1), due again at 1_500.
    let c = s.reserve(&t, 2, None, 1_000).await.unwrap();
    let tried = c.leases.iter().find(|l| l.id.as_str() == "tried").unwrap();
    s.nack(
        &t,
        &tried.id,
        Nack::retry(&tried.token, "x").retry_in(500),
        1_000,
    )
    .await
    .unwrap();
    let old = c.leases.iter().find(|l| l.id.as_str() == "old").unwrap();
    s.release(&t, &old.id, &old.token, 0, GiveBack::Released, 1_000)
        .await
        .unwrap();
    drop(s);
    to_version_3(pg, &db);
    assert_eq!(
        pg.psql(
            &db,
            "SELECT value FROM dq.meta WHERE key = 'schema_version'"
        )
        .trim(),
        "3"
    );

    let s = PgStore::open(&caller(url.clone())).await.unwrap();
    assert_eq!(
        pg.psql(
            &db,
            "SELECT value FROM dq.meta WHERE key = 'schema_version'"
        )
        .trim(),
        "6"
    );
    let indexes = pg.psql(
        &db,
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'dq' AND indexname LIKE 'jobs_%ready'
         ORDER BY indexname",
    );
    assert_eq!(
        indexes.matches("put_delay_ms IS NULL").count(),
        2,
        "the ready indexes are on a job's place: {indexes}"
    );
    let get = |id: &'static str| {
        let (s, t) = (&s, &t);
        async move { s.get(t, &JobId::new(id).unwrap()).await.unwrap().unwrap() }
    };
    let tried = get("tried").await;
    assert_eq!((tried.attempts, tried.counts.reserves), (1, 1));
    assert_eq!(tried.put_delay_ms, None);
    // Released: its attempt given back, its hand-out not counted by
    // version 3.
    let old = get("old").await;
    assert_eq!((old.attempts, old.counts.reserves), (0, 0));
    assert_eq!((old.counts.releases, old.put_delay_ms), (1, None));

    // A job in put order, put at 1_200 and due at 1_600, comes before
    // "tried" (due at 1_500, in due order) and after "old" (due at 1_000).
    let put = NewJob {
        put_order: true,
        ..job("put", 400)
    };
    s.enqueue(&t, &[put], 1_200).await.unwrap();
    assert_eq!(get("put").await.put_delay_ms, Some(400));
    let c = s.reserve(&t, 3, None, 1_600).await.unwrap();
    let ids: Vec<&str> = c.leases.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["old", "put", "tried"]);
    let tried = get("tried").await;
    assert_eq!((tried.attempts, tried.counts.reserves), (2, 2));
    let old = get("old").await;
    assert_eq!((old.attempts, old.counts.reserves), (1, 1));

    assert_eq!(
        pg.psql(&db, "SELECT state FROM dq.enqueue('kept', 'sql', '2', '0')")
            .trim(),
        "ready"
    );
    let sql = get("sql").await;
    assert_eq!((sql.put_delay_ms, sql.counts), (None, JobCounts::default()));
}

/// A schema at version 4 (before trace contexts) is migrated to version 6
/// when opened by adding one nullable column, without writing the table or
/// an index again (their files are the same after): its jobs, one of them
/// leased, have no trace context and go on as before; a job enqueued after
/// keeps its own, and one from the SQL front door has none.
#[tokio::test]
async fn a_version_4_schema_is_migrated() {
    let pg = PgServer::shared();
    let url = pg.fresh_database("migrate4");
    let db = url.rsplit('/').next().unwrap().to_string();
    let caller = |url: String| PgConfig {
        clock: TimeSource::Caller,
        ..config(url)
    };
    let s = PgStore::open(&caller(url.clone())).await.unwrap();
    let t = Topic::new("kept").unwrap();
    let job = |id: &str| {
        NewJob::new(
            JobId::new(id).unwrap(),
            Body::Json("1".into()),
            When::DelayMs(0),
        )
    };
    s.enqueue(&t, &[job("held"), job("waiting")], 1_000)
        .await
        .unwrap();
    let held = s.reserve(&t, 1, None, 1_000).await.unwrap().leases;
    assert_eq!(held[0].id.as_str(), "held");
    drop(s);
    to_version_4(pg, &db);
    assert!(!columns(pg, &db).contains("trace"));
    let files = || {
        pg.psql(
            &db,
            "SELECT c.relname || ' ' || pg_relation_filenode(c.oid) FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'dq' AND (c.relname = 'jobs' OR c.relname LIKE 'jobs\\_%')
             ORDER BY c.relname",
        )
    };
    let before = files();
    assert!(before.contains("jobs_ready "), "{before}");

    let s = PgStore::open(&caller(url.clone())).await.unwrap();
    assert_eq!(
        pg.psql(
            &db,
            "SELECT value FROM dq.meta WHERE key = 'schema_version'"
        )
        .trim(),
        "6"
    );
    assert!(
        columns(pg, &db).contains("trace text YES"),
        "{}",
        columns(pg, &db)
    );
    assert_eq!(files(), before, "no table or index written again");
    let get = |id: &'static str| {
        let (s, t) = (&s, &t);
        async move { s.get(t, &JobId::new(id).unwrap()).await.unwrap().unwrap() }
    };
    assert_eq!(get("held").await.trace, None);
    s.ack(&t, &held[0].id, &held[0].token, 1_000).await.unwrap();

    let (ctx, _) = TraceContext::parse(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("rojo=00f067aa0ba902b7"),
    )
    .unwrap();
    let traced = NewJob {
        trace: Some(ctx.clone()),
        ..job("traced")
    };
    s.enqueue(&t, &[traced], 1_001).await.unwrap();
    assert_eq!(
        pg.psql(&db, "SELECT trace FROM dq.jobs WHERE id = 'traced'")
            .trim(),
        ctx.to_stored(),
        "kept as one text"
    );
    assert_eq!(
        pg.psql(&db, "SELECT state FROM dq.enqueue('kept', 'sql', '2', '0')")
            .trim(),
        "ready"
    );
    let c = s.reserve(&t, 3, None, 1_002).await.unwrap();
    let got: Vec<(&str, Option<TraceContext>)> = c
        .leases
        .iter()
        .map(|l| (l.id.as_str(), l.trace.clone()))
        .collect();
    assert_eq!(
        got,
        [("waiting", None), ("traced", Some(ctx)), ("sql", None)]
    );
}

/// A flow-control key's lane hands out and lists its jobs in the order
/// of the jobs without a key: a job ranked in put order by its put time,
/// whatever its due time.
#[tokio::test]
async fn a_key_lane_keeps_put_order() {
    let url = PgServer::shared().fresh_database("keyput");
    let s = PgStore::open(&PgConfig {
        clock: TimeSource::Caller,
        ..config(url)
    })
    .await
    .unwrap();
    let t = Topic::new("lane").unwrap();
    let job = |id: &str, delay: u64, put_order: bool| NewJob {
        put_order,
        key: Some(JobKey::new("k").unwrap()),
        ..NewJob::new(
            JobId::new(id).unwrap(),
            Body::Json("1".into()),
            When::DelayMs(delay),
        )
    };
    // "late" is put first and due last; "now" and "due" after it, due at
    // once ("due" in due order).
    s.enqueue(&t, &[job("late", 1_000, true)], 1_000)
        .await
        .unwrap();
    s.enqueue(&t, &[job("now", 0, true)], 1_001).await.unwrap();
    s.enqueue(&t, &[job("due", 0, false)], 1_002).await.unwrap();
    s.promote_due(&t, 10, 2_000).await.unwrap();
    let listed: Vec<String> = s
        .list_ready(&t, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id.to_string())
        .collect();
    assert_eq!(listed, ["late", "now", "due"]);
    let c = s.reserve(&t, 1, None, 2_000).await.unwrap();
    assert_eq!(c.leases[0].id.as_str(), "late");
    let l = &c.leases[0];
    s.release(&t, &l.id, &l.token, 0, GiveBack::Released, 2_000)
        .await
        .unwrap();
    let c = s.reserve(&t, 3, None, 2_000).await.unwrap();
    let ids: Vec<&str> = c.leases.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["late", "now", "due"], "released: first again");
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
