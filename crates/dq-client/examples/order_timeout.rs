//! The unpaid-order case end to end, with a real SQLite database, talking
//! to a `dq serve` over HTTP as any program of yours would.
//!
//! An order is created and a timeout job enqueued; paying cancels the job;
//! the worker closes an unpaid order with a conditional update, so a job
//! handed out twice (at-least-once) changes nothing the second time.
//!
//! The dq it talks to: `DQ_SERVER` (its URL), or else a `dq serve` it
//! starts on a temp directory and stops at the end — the binary `DQ_BIN`
//! names, or `dq` beside this example's own build (`cargo build -p dq-cli`
//! puts it there).
//!
//! ```sh
//! cargo build -p dq-cli && cargo run -p dq-client --example order_timeout   # starts a dq
//! DQ_SERVER=http://127.0.0.1:7070 cargo run -p dq-client --example order_timeout
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq_client::{Client, NewJob, Outcome, Worker};
use rusqlite::{Connection, params};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A `dq serve` started by this example; stopped (SIGTERM, then killed if
/// it lingers) when dropped.
struct Serve(Child);

impl Serve {
    /// Starts `dq serve` with its data in `dir` on a free port of
    /// 127.0.0.1 and waits until it is ready; returns it and its URL.
    async fn start(dir: &Path) -> Result<(Self, String), Box<dyn std::error::Error>> {
        let bin = match std::env::var_os("DQ_BIN") {
            Some(b) => PathBuf::from(b),
            // target/<profile>/examples/order_timeout → target/<profile>/dq
            None => std::env::current_exe()?
                .parent()
                .and_then(Path::parent)
                .ok_or("no directory above this example's binary")?
                .join("dq"),
        };
        if !bin.is_file() {
            return Err(format!(
                "no dq binary at {} (cargo build -p dq-cli, set DQ_BIN, or give DQ_SERVER)",
                bin.display()
            )
            .into());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(&bin)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(dir)
            .args(["--config", "/dev/null", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut serve = Self(child);
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let t0 = Instant::now();
        loop {
            if let Some(status) = serve.0.try_wait()? {
                return Err(format!("dq serve exited before it was ready ({status})").into());
            }
            let ready = http.get(format!("{base}/readyz")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return Ok((serve, base));
            }
            if t0.elapsed() > Duration::from_secs(20) {
                return Err("dq serve not ready within 20 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // A graceful stop first: SIGTERM, as a service manager sends it.
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
    // A dq to talk to: DQ_SERVER, or a `dq serve` started here on a temp
    // directory (stopped when `_serve` goes, at the end, before the directory).
    let tmp = tempfile::tempdir()?;
    let (base, _serve) = match std::env::var("DQ_SERVER") {
        Ok(url) => (url, None),
        Err(_) => {
            let (serve, base) = Serve::start(&tmp.path().join("dq-data")).await?;
            (base, Some(serve))
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
    Ok(())
}
