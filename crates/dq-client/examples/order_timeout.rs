//! The unpaid-order case end to end, with a real SQLite database.
//!
//! An order is created and a timeout job enqueued; paying cancels the job;
//! the worker closes an unpaid order with a conditional update, so a job
//! handed out twice (at-least-once) changes nothing the second time.
//!
//! ```sh
//! cargo run -p dq-client --example order_timeout                  # in-process dq
//! DQ_SERVER=http://127.0.0.1:7070 cargo run -p dq-client --example order_timeout
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq_client::{Client, NewJob, Outcome, Worker};
use rusqlite::{Connection, params};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Closes the order if it is still unpaid; returns whether it changed anything.
fn close_if_unpaid(db: &Mutex<Connection>, order: i64) -> rusqlite::Result<bool> {
    let n = db.lock().expect("poisoned").execute(
        "UPDATE orders SET status = 'closed' WHERE id = ?1 AND status = 'unpaid'",
        params![order],
    )?;
    Ok(n == 1)
}

fn status(db: &Mutex<Connection>, order: i64) -> String {
    db.lock()
        .expect("poisoned")
        .query_row("SELECT status FROM orders WHERE id = ?1", [order], |r| {
            r.get(0)
        })
        .expect("order exists")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A dq to talk to: DQ_SERVER, or one started here on a temp directory.
    let tmp = tempfile::tempdir()?;
    let (base, server_stop) = match std::env::var("DQ_SERVER") {
        Ok(url) => (url, None),
        Err(_) => {
            let store = dq_embedded::EmbeddedStore::open(tmp.path().join("dq-data"))?;
            let server = dq_server::Server::new(
                dq_server::ServerConfig {
                    listen: "127.0.0.1:0".parse()?,
                    ..Default::default()
                },
                Arc::new(store),
                Arc::new(dq_core::SystemClock),
            );
            let listener = server.bind().await?;
            let base = format!("http://{}", listener.local_addr()?);
            let stop = CancellationToken::new();
            let s = stop.clone();
            tokio::spawn(async move {
                server
                    .run(listener, async move { s.cancelled().await })
                    .await
            });
            (base, Some(stop))
        }
    };
    let client = Client::new(base)?;

    // The shop's database.
    let db = Arc::new(Mutex::new(Connection::open(
        tmp.path().join("shop.sqlite3"),
    )?));
    db.lock().expect("poisoned").execute_batch(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
         INSERT INTO orders VALUES (1, 'unpaid'), (2, 'unpaid');",
    )?;

    // Each order gets a timeout job (1 s here; 30 minutes in a real shop),
    // keyed by the order so a retried request does not enqueue twice.
    for order in [1, 2] {
        client
            .enqueue(
                "orders",
                &NewJob::json(json!({"event": "order.timeout", "order": order}))
                    .id(format!("order-{order}"))
                    .delay(Duration::from_secs(1)),
            )
            .await?;
    }

    // Order 1 is paid: mark it and cancel its timeout.
    db.lock()
        .expect("poisoned")
        .execute("UPDATE orders SET status = 'paid' WHERE id = 1", [])?;
    client.cancel("orders", "order-1").await?;

    // The worker closes unpaid orders.
    let stop = CancellationToken::new();
    let worker = {
        let db = db.clone();
        Worker::new(client.clone())
            .topic("orders")
            .handle("order.timeout", move |task| {
                let db = db.clone();
                async move {
                    let order: i64 = match task.json::<serde_json::Value>() {
                        Ok(v) => v["order"].as_i64().unwrap_or(0),
                        Err(e) => return Outcome::Abort(format!("bad job body: {e}")),
                    };
                    match close_if_unpaid(&db, order) {
                        Ok(changed) => {
                            println!("order {order}: timeout ran, closed = {changed}");
                            Outcome::Done
                        }
                        Err(e) => Outcome::Fail(format!("database: {e}")),
                    }
                }
            })
            .concurrency(4)
    };
    let run = tokio::spawn(worker.run(stop.clone()));

    let t0 = Instant::now();
    while status(&db, 2) != "closed" {
        if t0.elapsed() > Duration::from_secs(20) {
            return Err("order 2 was not closed within 20 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    run.await??;

    // A redelivered timeout (at-least-once) changes nothing.
    assert!(!close_if_unpaid(&db, 2)?, "second run is a no-op");
    assert_eq!(status(&db, 1), "paid");
    assert_eq!(status(&db, 2), "closed");
    println!("order 1: paid (timeout cancelled); order 2: closed by its timeout");
    if let Some(s) = server_stop {
        s.cancel();
    }
    Ok(())
}
