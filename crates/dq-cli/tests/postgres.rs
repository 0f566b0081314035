//! `dq serve --postgres`: the built binary on a private PostgreSQL, two
//! instances sharing one database, driven over HTTP; a start while the
//! database is down, and a schema that stops the start.

use std::time::{Duration, Instant};

use dq_testkit::PgServer;
use serde_json::json;

mod support;
use support::Dq;

/// Two instances on one database: a consumer long-polling instance A is
/// handed a job enqueued through instance B (the wake-up crosses instances
/// by NOTIFY), never before its due time by the database's clock; the ack
/// through A is seen by B; `--postgres-schema` keeps two schemas apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_database_and_wake_each_other() {
    let url = PgServer::shared().fresh_database("cli");
    let a = std::sync::Arc::new(Dq::start_with(&["--postgres", &url]).await);
    let b = Dq::start_with(&["--postgres", &url]).await;
    let store = b.get_text("/metrics").await;
    assert!(store.contains("dq_up 1"), "{store}");

    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            let t0 = Instant::now();
            let (s, v) = a
                .post(
                    "/v1/reserve",
                    json!({"topics": ["orders"], "wait_ms": 10_000, "lease_ms": 60_000}),
                )
                .await;
            (s, v, t0.elapsed())
        })
    };
    // Let the long poll start waiting before the enqueue.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, v) = b
        .post(
            "/v1/topics/orders/jobs",
            json!({"id": "order-42", "body": {"order": 42}, "delay_ms": 500}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let due = v["due_at_ms"].as_u64().unwrap();
    let (s, v, waited) = waiter.await.unwrap();
    assert_eq!(s, 200, "{v}");
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{v}");
    assert_eq!(jobs[0]["id"], json!("order-42"));
    assert_eq!(jobs[0]["body"], json!({"order": 42}));
    assert_eq!(jobs[0]["due_at_ms"].as_u64(), Some(due));
    assert!(
        waited >= Duration::from_millis(300 + 500) && waited < Duration::from_secs(5),
        "handed out after {waited:?}: not before its due time, and soon after it"
    );
    let (s, v) = a.ack("orders", &jobs[0]).await;
    assert!((200..300).contains(&s), "{s} {v}");
    let (s, _) = b.get("/v1/topics/orders/jobs/order-42").await;
    assert_eq!(s, 404, "acked through A, gone for B");

    // Another schema of the same database is another queue.
    let c = Dq::start_with(&["--postgres", &url, "--postgres-schema", "other"]).await;
    let (s, v) = c
        .post(
            "/v1/topics/orders/jobs",
            json!({"id": "order-7", "body": 7, "delay_ms": 0}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, _) = b.get("/v1/topics/orders/jobs/order-7").await;
    assert_eq!(s, 404, "schema dq does not see schema other's job");
    let (s, v) = c.get("/v1/topics/orders/jobs/order-7").await;
    assert_eq!((s, &v["state"]), (200, &json!("ready")), "{v}");
}

/// A database that does not answer at start does not stop `dq serve` (as
/// Redis does not): it serves, says so in one log line naming the database
/// (its password hidden), answers 503 `store_unavailable` with
/// `Retry-After` to every call and to `/readyz`, and serves from the
/// database once it answers, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_while_the_database_is_down_serves_once_it_answers() {
    let pg = support::pg::OwnPg::start("cli");
    pg.stop_immediate().await;
    // Trust authentication: the password is never checked, only hidden.
    let url = format!(
        "postgres://postgres:hunter2@127.0.0.1:{}/{}",
        pg.port, pg.db
    );
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("dq.log");
    let port = dq_testkit::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["serve", "--config", "/dev/null"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--postgres", &url])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let _kill = support::KillOnDrop(child.id());
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str, body: Option<serde_json::Value>| {
        let mut req = http.request(method, format!("{base}{path}"));
        if let Some(b) = body {
            req = req.json(&b);
        }
        async move {
            let res = req.send().await.ok()?;
            let status = res.status().as_u16();
            let retry_after = res
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            let v: serde_json::Value = res.json().await.unwrap_or_default();
            Some((status, v, retry_after))
        }
    };
    // Serving: /healthz answers while the database does not.
    let deadline = Instant::now() + Duration::from_secs(20);
    while call(reqwest::Method::GET, "/healthz", None)
        .await
        .map(|r| r.0)
        != Some(200)
    {
        assert!(Instant::now() < deadline, "dq serve did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (s, v, retry) = call(reqwest::Method::GET, "/readyz", None).await.unwrap();
    assert_eq!((s, retry.as_deref()), (503, Some("1")), "{v}");
    assert_eq!(v["error"]["code"], "store_unavailable", "{v}");
    let enqueue = json!({"id": "early", "body": 1});
    let (s, v, retry) = call(
        reqwest::Method::POST,
        "/v1/topics/t/jobs",
        Some(enqueue.clone()),
    )
    .await
    .unwrap();
    assert_eq!(
        (s, v["error"]["code"].as_str(), retry.as_deref()),
        (503, Some("store_unavailable"), Some("1")),
        "{v}"
    );
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("PostgreSQL not reachable yet; serving anyway and retrying"),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "postgres at postgres://postgres:***@127.0.0.1:{}/{}",
            pg.port, pg.db
        )),
        "{log}"
    );
    assert!(!log.contains("hunter2"), "{log}");

    // The database comes up: the same process serves from it.
    pg.start_again().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = call(reqwest::Method::GET, "/readyz", None).await;
        if r.as_ref().map(|r| r.0) == Some(200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ready once the database answers: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (s, v, _) = call(reqwest::Method::POST, "/v1/topics/t/jobs", Some(enqueue))
        .await
        .unwrap();
    assert_eq!(s, 201, "{v}");
    let (s, v, _) = call(
        reqwest::Method::POST,
        "/v1/reserve",
        Some(json!({"topics": ["t"], "max": 1})),
    )
    .await
    .unwrap();
    assert_eq!((s, &v["jobs"][0]["id"]), (200, &json!("early")), "{v}");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("PostgreSQL reachable, schema ready"), "{log}");
    let _ = child.kill();
    let _ = child.wait();
}

/// A schema this dq must not use still stops `dq serve` at start, with a
/// message naming the database (its password hidden).
#[tokio::test]
async fn a_schema_of_another_program_stops_the_start() {
    let pg = PgServer::shared();
    let url = pg.fresh_database("cli");
    let db = url.rsplit('/').next().unwrap();
    pg.psql(db, "CREATE SCHEMA dq; CREATE TABLE dq.orders (id int)");
    let url = url.replace("postgres@", "postgres:hunter2@");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["serve", "--config", "/dev/null", "--listen", "127.0.0.1:0"])
        .args(["--postgres", &url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "postgres at postgres://postgres:***@127.0.0.1:{}/{db}",
            pg.port()
        )),
        "{err}"
    );
    assert!(err.contains("holds tables that are not dq's"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}
