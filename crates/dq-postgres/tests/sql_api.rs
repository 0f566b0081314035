//! The SQL front door: `dq.enqueue`, `dq.cancel` and `dq.reschedule`
//! called by an application inside its own transactions, on a private
//! PostgreSQL, with the store deciding by the database's clock as
//! `dq serve` does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq_core::*;
use dq_postgres::{PgConfig, PgStore, TimeSource};
use dq_testkit::PgServer;

struct Fixture {
    store: PgStore,
    app: tokio_postgres::Client,
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
    _watch: tokio::task::JoinHandle<()>,
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

async fn fixture(name: &str) -> Fixture {
    let url = PgServer::shared().fresh_database(name);
    let store = PgStore::open(&PgConfig {
        url: url.clone(),
        pool_size: 2,
        clock: TimeSource::Database,
        ..Default::default()
    })
    .await
    .unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let s = store.clone();
    let watch = tokio::spawn(async move {
        s.watch_wakes(Arc::new(move |t: &str| {
            log.lock().unwrap().push(t.to_string())
        }))
        .await
    });
    let app = connect(&url).await;
    let f = Fixture {
        store,
        app,
        url,
        seen,
        _watch: watch,
    };
    // Until the listener stands: a committed enqueue due now is announced.
    for i in 0..50 {
        f.app
            .execute(
                "SELECT dq.enqueue('probe', $1, '1', '0')",
                &[&format!("p{i}")],
            )
            .await
            .unwrap();
        if f.woken("probe", Duration::from_millis(100)).await {
            return f;
        }
    }
    panic!("the wake-up listener never stood");
}

impl Fixture {
    /// Whether `topic` is announced within `within` (the log is cleared).
    async fn woken(&self, topic: &str, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.seen.lock().unwrap().iter().any(|t| t == topic) {
                self.seen.lock().unwrap().clear();
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn get(&self, topic: &str, id: &str) -> Option<JobInfo> {
        self.store
            .get(&Topic::new(topic).unwrap(), &JobId::new(id).unwrap())
            .await
            .unwrap()
    }

    /// A reserve by the database's clock (the `now` passed is ignored).
    async fn reserve(&self, topic: &str) -> Vec<Lease> {
        self.store
            .reserve(&Topic::new(topic).unwrap(), 10, None, 0)
            .await
            .unwrap()
            .leases
    }

    /// The error `sql` raises: its SQLSTATE and message.
    async fn error(&self, sql: &str) -> (String, String) {
        let e = self.app.batch_execute(sql).await.unwrap_err();
        let db = e.as_db_error().expect("a database error");
        (db.code().code().to_string(), db.message().to_string())
    }
}

/// A job enqueued in a transaction that rolls back never existed; one
/// that commits wakes waiters at the commit (not before), is never handed
/// out before its due time and then is, with its body; enqueuing its id
/// again answers the job (idempotent by id).
#[tokio::test]
async fn a_rolled_back_enqueue_never_exists_and_a_committed_one_is_delivered_when_due() {
    let f = fixture("sqlenq").await;
    f.app
        .batch_execute(
            "BEGIN; SELECT dq.enqueue('orders', 'order-1', '{\"order\": 1}', '0'); ROLLBACK",
        )
        .await
        .unwrap();
    assert!(f.get("orders", "order-1").await.is_none());
    assert!(
        !f.woken("orders", Duration::from_millis(300)).await,
        "no wake-up for a rollback"
    );
    assert!(f.reserve("orders").await.is_empty());

    f.app.batch_execute("BEGIN").await.unwrap();
    let row = f
        .app
        .query_one(
            "SELECT job_id, created, deduplicated, state,
                    (extract(epoch FROM due_at) * 1000)::int8 - (extract(epoch FROM clock_timestamp()) * 1000)::int8
             FROM dq.enqueue('orders', 'order-2', '{\"order\": 2}', '700 milliseconds')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "order-2");
    assert!(row.get::<_, bool>(1) && !row.get::<_, bool>(2));
    assert_eq!(row.get::<_, String>(3), "scheduled");
    let ahead: i64 = row.get(4);
    assert!((600..=700).contains(&ahead), "due {ahead} ms ahead");
    assert!(
        f.get("orders", "order-2").await.is_none(),
        "not visible before commit"
    );
    assert!(
        !f.woken("orders", Duration::from_millis(200)).await,
        "no wake-up before commit"
    );
    f.app.batch_execute("COMMIT").await.unwrap();
    assert!(
        f.woken("orders", Duration::from_secs(2)).await,
        "a wake-up at commit"
    );
    let info = f.get("orders", "order-2").await.unwrap();
    assert_eq!(info.state, JobState::Scheduled);
    assert_eq!(info.body, Body::Json("{\"order\": 2}".into()));

    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while got.is_empty() {
        let now = f.store.time_ms().await.unwrap().unwrap();
        got = f.reserve("orders").await;
        if got.is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "never delivered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        } else {
            assert!(now + 50 >= info.due_at_ms, "handed out early");
        }
    }
    assert_eq!(got[0].id.as_str(), "order-2");
    assert_eq!(got[0].due_at_ms, info.due_at_ms);

    let row = f
        .app
        .query_one(
            "SELECT created, state FROM dq.enqueue('orders', 'order-2', '{}', '1 hour')",
            &[],
        )
        .await
        .unwrap();
    assert!(!row.get::<_, bool>(0));
    assert_eq!(row.get::<_, String>(1), "reserved");
    let st = f
        .store
        .stats(&Topic::new("orders").unwrap(), 0)
        .await
        .unwrap();
    assert_eq!((st.scheduled, st.ready, st.reserved), (0, 0, 1));
    assert_eq!(st.counters.enqueued, 1);
}

/// Bad input is refused as the HTTP API refuses it: a SQL error whose
/// message starts with dq's error code, and nothing written.
#[tokio::test]
async fn bad_input_raises_dq_error_codes() {
    let f = fixture("sqlbad").await;
    let big = format!("'\"{}\"'", "x".repeat(1_048_577));
    let deep = format!("'{}{}'", "[".repeat(129), "]".repeat(129));
    let cases: Vec<(String, &str)> = vec![
        (
            "SELECT dq.enqueue('bad topic', 'a', '1', '0')".into(),
            "invalid_topic: ",
        ),
        (
            "SELECT dq.enqueue('..', 'a', '1', '0')".into(),
            "invalid_topic: ",
        ),
        (
            "SELECT dq.enqueue('t', 'has space', '1', '0')".into(),
            "invalid_id: ",
        ),
        (
            "SELECT dq.enqueue('t', '', '1', '0')".into(),
            "invalid_id: ",
        ),
        (
            "SELECT dq.enqueue('t', 'a', NULL, '0')".into(),
            "invalid_body: ",
        ),
        (
            format!("SELECT dq.enqueue('t', 'a', {big}, '0')"),
            "body_too_large: ",
        ),
        (
            format!("SELECT dq.enqueue('t', 'a', {deep}, '0')"),
            "invalid_body: ",
        ),
        (
            "SELECT dq.enqueue('t', 'a', '1', '-1 second')".into(),
            "invalid_delay: ",
        ),
        (
            "SELECT dq.enqueue('t', 'a', '1', '3651 days')".into(),
            "invalid_delay: ",
        ),
        (
            "SELECT dq.enqueue('t', 'a', '1', '1 second', due => now())".into(),
            "invalid_delay: ",
        ),
        (
            "SELECT dq.enqueue('t', 'a', '1', due => now() + interval '4000 days')".into(),
            "invalid_due_at: ",
        ),
        (
            "SELECT dq.enqueue('t', 'a', '1', priority => -1)".into(),
            "invalid_priority: ",
        ),
        (
            "SELECT dq.enqueue('t', 'a', '1', key => '')".into(),
            "invalid_key: ",
        ),
        (
            "SELECT dq.enqueue('t', 'a', '1', dedup => '31 days')".into(),
            "invalid_dedup: ",
        ),
    ];
    for (sql, code) in cases {
        let (state, message) = f.error(&sql).await;
        assert!(message.starts_with(code), "{sql:.80}: {message}");
        assert_eq!(state, "22023", "{sql:.80}");
    }
    // A text literal that is not JSON is refused by the jsonb type itself.
    let (state, _) = f.error("SELECT dq.enqueue('t', 'a', '{oops', '0')").await;
    assert_eq!(state, "22P02");
    assert!(f.get("t", "a").await.is_none());
    assert!(
        f.store
            .topics()
            .await
            .unwrap()
            .iter()
            .all(|t| t.as_str() != "t")
    );
}

/// The full form (due time, priority, key, dedup window), cancel and
/// reschedule from SQL: a cancel rolled back leaves the job, a committed
/// one removes it and opens its dedup window; reschedule moves a waiting
/// job (and wakes at commit), refuses a reserved one and a missing one;
/// the topic's counts follow every change.
#[tokio::test]
async fn cancel_and_reschedule_in_transactions() {
    let f = fixture("sqlcancel").await;
    let t = Topic::new("shop").unwrap();
    let row = f
        .app
        .query_one(
            "SELECT created, state FROM dq.enqueue('shop', 'timeout-7', '{\"order\": 7}',
               due => now() + interval '1 hour', priority => 5, key => 'customer-1',
               dedup => '1 minute')",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0));
    let info = f.get("shop", "timeout-7").await.unwrap();
    assert_eq!(info.priority, 5);
    assert_eq!(info.key.as_ref().map(JobKey::as_str), Some("customer-1"));
    assert_eq!(f.store.stats(&t, 0).await.unwrap().scheduled, 1);

    // Paid: the order's update and the cancel roll back together...
    f.app
        .batch_execute("BEGIN; SELECT dq.cancel('shop', 'timeout-7'); ROLLBACK")
        .await
        .unwrap();
    assert!(f.get("shop", "timeout-7").await.is_some());
    // ... or commit together.
    let state: Option<String> = f
        .app
        .query_one("SELECT dq.cancel('shop', 'timeout-7')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state.as_deref(), Some("scheduled"));
    assert!(f.get("shop", "timeout-7").await.is_none());
    let none: Option<String> = f
        .app
        .query_one("SELECT dq.cancel('shop', 'timeout-7')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(none, None);
    let row = f
        .app
        .query_one(
            "SELECT created, deduplicated FROM dq.enqueue('shop', 'timeout-7', '1', '0')",
            &[],
        )
        .await
        .unwrap();
    assert!(
        !row.get::<_, bool>(0) && row.get::<_, bool>(1),
        "in its dedup window"
    );
    let st = f.store.stats(&t, 0).await.unwrap();
    assert_eq!(
        (st.scheduled, st.counters.cancelled, st.counters.enqueued),
        (0, 1, 1)
    );

    f.seen.lock().unwrap().clear();
    f.app
        .batch_execute("SELECT dq.enqueue('shop', 'later', '2', '1 hour')")
        .await
        .unwrap();
    // The new head of the schedule is announced (at its commit); the
    // reschedule's own wake-up is looked for after it.
    assert!(f.woken("shop", Duration::from_secs(2)).await);
    assert!(f.reserve("shop").await.is_empty());
    f.app
        .batch_execute("BEGIN; SELECT dq.reschedule('shop', 'later', now() - interval '1 minute')")
        .await
        .unwrap();
    assert!(
        !f.woken("shop", Duration::from_millis(200)).await,
        "not before commit"
    );
    f.app.batch_execute("COMMIT").await.unwrap();
    assert!(
        f.woken("shop", Duration::from_secs(2)).await,
        "a wake-up at commit"
    );
    let got = f.reserve("shop").await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id.as_str(), "later");
    let (state, message) = f
        .error("SELECT dq.reschedule('shop', 'later', now())")
        .await;
    assert_eq!(state, "55000");
    assert!(
        message.starts_with("not_in_state: job is reserved"),
        "{message}"
    );
    let (state, message) = f.error("SELECT dq.reschedule('shop', 'nope', now())").await;
    assert_eq!(state, "P0002");
    assert!(message.starts_with("job_not_found: "), "{message}");
    let st = f.store.stats(&t, 0).await.unwrap();
    assert_eq!((st.scheduled, st.ready, st.reserved), (0, 0, 1));
}

/// A role granted what docs/postgres.md says may call the three functions
/// and nothing else.
#[tokio::test]
async fn the_enqueue_role_calls_the_functions_and_nothing_else() {
    let f = fixture("sqlrole").await;
    let role = format!("dq_enqueue_{}", f.url.rsplit('/').next().unwrap());
    f.app
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN;
             GRANT USAGE ON SCHEMA dq TO {role};
             GRANT EXECUTE ON FUNCTION dq.enqueue(text, text, jsonb, interval, timestamptz, bigint, text, interval),
               dq.cancel(text, text), dq.reschedule(text, text, timestamptz) TO {role};"
        ))
        .await
        .unwrap();
    let (base, _) = f.url.rsplit_once("postgres@").unwrap();
    let url = format!("{base}{role}@{}", f.url.rsplit_once('@').unwrap().1);
    let app = connect(&url).await;
    app.batch_execute(
        "SELECT dq.enqueue('r', 'a', '1', '0'); SELECT dq.reschedule('r', 'a', now()); SELECT dq.cancel('r', 'a')",
    )
    .await
    .unwrap();
    for sql in [
        "SELECT count(*) FROM dq.jobs",
        "DELETE FROM dq.topics",
        "SELECT dq.now_ms()",
        "SELECT dq.wake('r')",
    ] {
        let e = app.batch_execute(sql).await.unwrap_err();
        assert_eq!(
            e.as_db_error().map(|d| d.code().code()),
            Some("42501"),
            "{sql}: {e}"
        );
    }
    // A role with the schema's USAGE and no grant calls none of them.
    let other = format!("{role}_x");
    f.app
        .batch_execute(&format!(
            "CREATE ROLE {other} LOGIN; GRANT USAGE ON SCHEMA dq TO {other};"
        ))
        .await
        .unwrap();
    let url = format!("{base}{other}@{}", f.url.rsplit_once('@').unwrap().1);
    let stranger = connect(&url).await;
    for sql in [
        "SELECT dq.enqueue('r', 'b', '1', '0')",
        "SELECT dq.cancel('r', 'b')",
        "SELECT dq.reschedule('r', 'b', now())",
    ] {
        let e = stranger.batch_execute(sql).await.unwrap_err();
        assert_eq!(
            e.as_db_error().map(|d| d.code().code()),
            Some("42501"),
            "{sql}: {e}"
        );
    }
    for sql in ["SELECT count(*) FROM dq.jobs"] {
        let e = app.batch_execute(sql).await.unwrap_err();
        assert_eq!(
            e.as_db_error().map(|d| d.code().code()),
            Some("42501"),
            "{sql}: {e}"
        );
    }
}

/// A transaction's `dq.traceparent` and `dq.tracestate` settings are the
/// trace context of the jobs it enqueues, handed back at their hand-out; a
/// malformed one is dropped (a NOTICE), never refused; `SET LOCAL` ends
/// with the transaction.
#[tokio::test]
async fn the_transactions_trace_context_goes_with_its_jobs() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let f = fixture("sqltrace").await;
    f.app
        .batch_execute(&format!(
            "BEGIN;
             SET LOCAL dq.traceparent = '{TP}';
             SET LOCAL dq.tracestate = 'rojo=00f067aa0ba902b7';
             SELECT dq.enqueue('traced', 'a', '1', '0');
             COMMIT;
             BEGIN;
             SET LOCAL dq.traceparent = 'cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future';
             SELECT dq.enqueue('traced', 'later', '1', '0');
             COMMIT;
             BEGIN;
             SET LOCAL dq.traceparent = 'not-a-traceparent';
             SELECT dq.enqueue('traced', 'bad', '1', '0');
             COMMIT;
             SELECT dq.enqueue('traced', 'after', '1', '0');"
        ))
        .await
        .unwrap();
    let a = f.get("traced", "a").await.unwrap();
    let trace = a.trace.expect("kept");
    assert_eq!(
        (trace.traceparent(), trace.tracestate()),
        (TP, Some("rojo=00f067aa0ba902b7"))
    );
    assert_eq!(f.get("traced", "bad").await.unwrap().trace, None, "dropped");
    assert_eq!(
        f.get("traced", "later")
            .await
            .unwrap()
            .trace
            .map(|t| t.traceparent().to_string())
            .as_deref(),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        "a later version read as version 00"
    );
    assert_eq!(
        f.get("traced", "after").await.unwrap().trace,
        None,
        "SET LOCAL ended with its transaction"
    );
    let leased = f.reserve("traced").await;
    let a = leased.iter().find(|l| l.id.as_str() == "a").unwrap();
    assert_eq!(a.trace.as_ref().map(TraceContext::traceparent), Some(TP));
}
