//! Jobs per second through the Rust [`Worker`] with a no-op handler: the
//! baseline beside the client packages' own `bench/` scripts
//! (`clients/*/bench`), which do the same thing the same way.
//!
//! Enqueues `JOBS` (default 20,000) jobs due now to a fresh topic on the
//! `dq serve` at `DQ_URL`, in batches of 1,000, then runs a Worker of
//! `CONCURRENCY` (default 16) handlers that do nothing until every job is
//! acked, and prints `jobs/s: <n>` (jobs acked / seconds from the
//! worker's start to its last ack). A benchmark, never a test.
//!
//! ```sh
//! DQ_URL=http://127.0.0.1:7070 cargo run --release -p dq-client --example worker_bench
//! ```

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use dq_client::{Client, NewJob, Outcome, Worker};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DQ_URL").map_err(|_| "set DQ_URL (a running dq serve)")?;
    let jobs = env_or("JOBS", 20_000);
    let concurrency = env_or("CONCURRENCY", 16);
    // dq-client brings no crypto provider of its own (see its crate docs).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = Client::new(&url)?;
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let topic = format!("bench-rust-{nanos}");
    let mut left = jobs;
    let mut n = 0u64;
    while left > 0 {
        let take = left.min(1000);
        let batch: Vec<NewJob> = (0..take)
            .map(|i| NewJob::json(json!({"n": n + i})))
            .collect();
        for r in client.enqueue_batch(&topic, &batch).await? {
            r?;
        }
        n += take;
        left -= take;
    }

    let shutdown = CancellationToken::new();
    let worker = Worker::new(client.clone())
        .topic(&topic)
        .handle_any(|_task| async { Outcome::Done })
        .concurrency(usize::try_from(concurrency)?);
    let start = Instant::now();
    let run = tokio::spawn(worker.run(shutdown.clone()));
    // Acks go in batches beside the handlers: the last ack is when the
    // topic's acked counter reaches JOBS (as the other packages' benches
    // measure it).
    loop {
        let acked = client.topic(&topic).await.map(|t| t.stats.counters.acked);
        if acked.is_ok_and(|a| a >= jobs) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    shutdown.cancel();
    run.await??;
    client.delete_topic(&topic).await?;
    #[allow(clippy::cast_precision_loss)] // a count far below 2^52
    let rate = jobs as f64 / secs;
    println!("jobs/s: {rate:.0}");
    Ok(())
}
