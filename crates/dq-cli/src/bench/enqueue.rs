//! The bench's producers ([`produce`], [`produce_noting`]: many tasks
//! enqueueing in batches) and the `enqueue` scenario that times them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use dq_client::{Client, NewJob};
use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::{body, now_us, progress};

/// Enqueues `n` jobs with `producers` tasks in batches; `job(i)` builds job i.
pub(super) async fn produce(
    api: &Client,
    topic: &str,
    n: usize,
    batch: usize,
    producers: usize,
    job: Arc<dyn Fn(usize) -> NewJob + Send + Sync>,
    pb: &ProgressBar,
) -> Result<u64> {
    produce_noting(api, topic, n, batch, producers, job, pb, None).await
}

/// [`produce`], noting in `acked[i]` when (µs, this machine's clock) the
/// server acknowledged the enqueue of job `i`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn produce_noting(
    api: &Client,
    topic: &str,
    n: usize,
    batch: usize,
    producers: usize,
    job: Arc<dyn Fn(usize) -> NewJob + Send + Sync>,
    pb: &ProgressBar,
    acked: Option<Arc<Vec<AtomicU64>>>,
) -> Result<u64> {
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let (api, next, errors, job, pb, acked) = (
            api.clone(),
            next.clone(),
            errors.clone(),
            job.clone(),
            pb.clone(),
            acked.clone(),
        );
        let topic = topic.to_string();
        tasks.push(tokio::spawn(async move {
            loop {
                let start = next.fetch_add(batch, Ordering::SeqCst);
                if start >= n {
                    return;
                }
                let end = (start + batch).min(n);
                let ok = if batch == 1 {
                    api.enqueue(&topic, &job(start)).await.is_ok()
                } else {
                    let jobs: Vec<NewJob> = (start..end).map(|i| job(i)).collect();
                    match api.enqueue_batch(&topic, &jobs).await {
                        Ok(r) => r.iter().all(Result::is_ok),
                        Err(_) => false,
                    }
                };
                if !ok {
                    errors.fetch_add((end - start) as u64, Ordering::Relaxed);
                }
                if let Some(acked) = &acked {
                    let at = now_us();
                    for a in &acked[start..end] {
                        a.store(at, Ordering::Relaxed);
                    }
                }
                pb.inc((end - start) as u64);
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok(errors.load(Ordering::Relaxed))
}

/// `dq bench enqueue`: `jobs` jobs due in an hour, enqueued by
/// `producers` tasks in batches of `batch`.
pub(super) async fn run(
    api: &Client,
    topic: &str,
    run_id: &str,
    jobs: usize,
    batch: usize,
    producers: usize,
    body_bytes: usize,
) -> Result<Value> {
    let batch = batch.clamp(1, 1000);
    let b = body(body_bytes);
    let rid = run_id.to_string();
    let job = Arc::new(move |i: usize| {
        NewJob::json(&b)
            .id(format!("{rid}-{i}"))
            .delay(Duration::from_millis(3_600_000))
    });
    let pb = progress(jobs as u64, "enqueue");
    let t0 = Instant::now();
    let errors = produce(api, topic, jobs, batch, producers, job, &pb).await?;
    let secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    Ok(
        json!({"scenario": "enqueue", "jobs": jobs, "batch": batch, "producers": producers,
           "body_bytes": body_bytes, "seconds": (secs * 1000.0).round() / 1000.0,
           "jobs_per_s": (jobs as f64 / secs).round(), "errors": errors}),
    )
}
