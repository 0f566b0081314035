//! `dq serve --postgres`: the built binary on a private PostgreSQL, two
//! instances sharing one database, driven over HTTP.

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

/// A database that does not answer stops `dq serve` at start with a
/// message naming it (its password hidden).
#[tokio::test]
async fn an_unreachable_database_is_named_at_start() {
    let port = dq_testkit::free_port();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["serve", "--config", "/dev/null", "--listen", "127.0.0.1:0"])
        .args([
            "--postgres",
            &format!("postgres://app:hunter2@127.0.0.1:{port}/shop"),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "postgres at postgres://app:***@127.0.0.1:{port}/shop"
        )),
        "{err}"
    );
    assert!(err.contains("cannot reach PostgreSQL"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}
