//! Jobs per second through the Rust [`Worker`] with a no-op handler: the
//! baseline beside the client packages' own `bench/` scripts
//! (`clients/*/bench`), which do the same thing the same way.
//!
//! Enqueues `JOBS` (default 20,000) jobs due now to a fresh topic on the
//! `dq serve` at `DQ_URL`, in batches of 1,000, then runs a Worker of
//! `CONCURRENCY` (default 16) handlers that do nothing until every job is
//! acked, and prints `jobs/s: <n>` (jobs acked / seconds from the
//! worker's start to its last ack flushed). A benchmark, never a test.
//!
//! ```sh
//! DQ_URL=http://127.0.0.1:7070 cargo run --release -p dq-client --example worker_bench
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

    let done = Arc::new(AtomicU64::new(0));
    let shutdown = CancellationToken::new();
    let worker = {
        let (done, shutdown) = (done.clone(), shutdown.clone());
        Worker::new(client)
            .topic(&topic)
            .handle_any(move |_task| {
                let (done, shutdown) = (done.clone(), shutdown.clone());
                async move {
                    if done.fetch_add(1, Ordering::Relaxed) + 1 == jobs {
                        shutdown.cancel();
                    }
                    Outcome::Done
                }
            })
            .concurrency(usize::try_from(concurrency)?)
    };
    let start = Instant::now();
    // The run ends once the last handler returned and the acks are flushed.
    worker.run(shutdown).await?;
    let secs = start.elapsed().as_secs_f64();
    let acked = done.load(Ordering::Relaxed);
    #[allow(clippy::cast_precision_loss)] // a count far below 2^52
    let rate = acked as f64 / secs;
    println!("jobs/s: {rate:.0}");
    Ok(())
}
