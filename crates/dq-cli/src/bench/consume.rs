//! The bench's consumers: reserve from a topic, record each hand-out in
//! an [`Observed`], and ack inline or pipelined ([`Acks`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use clap::ValueEnum;
use dq_client::{Ack, Client, Reserve};
use indicatif::ProgressBar;

use super::now_us;
use super::report::Observed;

/// How a bench consumer acks the jobs it reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum Acks {
    /// Ack a batch, wait for the answer, then reserve again.
    Inline,
    /// Send a batch's acks and reserve again without waiting for them (at
    /// most one ack call in flight per consumer).
    Pipelined,
}

/// Acks `acks` in one call; counts what was acked and what was not into
/// `tally` (acked, errors).
async fn ack_counted(api: &Client, acks: Vec<Ack>, tally: &(AtomicU64, AtomicU64)) {
    let n = acks.len() as u64;
    let acked = match api.ack_batch(&acks).await {
        Ok(results) => (results.iter().filter(|r| r.is_ok()).count() as u64).min(n),
        Err(_) => 0,
    };
    tally.0.fetch_add(acked, Ordering::Relaxed);
    tally.1.fetch_add(n - acked, Ordering::Relaxed);
}

/// Waits for a pipelined ack call (its task and its number of acks); a
/// task that did not finish counts its acks as errors.
async fn ack_landed(call: (tokio::task::JoinHandle<()>, u64), tally: &(AtomicU64, AtomicU64)) {
    let (task, n) = call;
    if task.await.is_err() {
        tally.1.fetch_add(n, Ordering::Relaxed);
    }
}

/// Runs `c` consumers until `expected` distinct jobs were received or
/// `deadline`, each reserving `max` at a time and acking as `acks` says.
#[allow(clippy::too_many_arguments)]
pub(super) async fn consume(
    api: &Client,
    topic: &str,
    c: usize,
    max: usize,
    ack_mode: Acks,
    expected: usize,
    deadline: Instant,
    pb: &ProgressBar,
) -> Result<Observed> {
    let obs = Arc::new(Mutex::new(Observed::new(expected)?));
    let done = Arc::new(AtomicBool::new(false));
    let tally = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for _ in 0..c {
        let (api, obs, done, pb) = (api.clone(), obs.clone(), done.clone(), pb.clone());
        let tally = tally.clone();
        let topic = topic.to_string();
        tasks.push(tokio::spawn(async move {
            // Pipelined: the ack call still in flight, awaited before the
            // next one is sent and when the consumer stops.
            let mut in_flight: Option<(tokio::task::JoinHandle<()>, u64)> = None;
            while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                let req = Reserve::new([topic.clone()])
                    .max(max)
                    .wait(Duration::from_millis(500))
                    .lease(Duration::from_secs(120));
                let jobs = match api.reserve(&req).await {
                    Ok(jobs) => jobs,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let received = now_us();
                if jobs.is_empty() {
                    continue;
                }
                {
                    let mut o = obs.lock().expect("poisoned");
                    for j in &jobs {
                        o.record(j.id.clone(), j.due_at_ms, received);
                    }
                    if o.seen.len() >= expected {
                        done.store(true, Ordering::SeqCst);
                    }
                }
                pb.inc(jobs.len() as u64);
                let acks: Vec<Ack> = jobs
                    .into_iter()
                    .map(|j| Ack {
                        topic: j.topic,
                        id: j.id,
                        token: j.token,
                    })
                    .collect();
                match ack_mode {
                    Acks::Inline => ack_counted(&api, acks, &tally).await,
                    Acks::Pipelined => {
                        if let Some(previous) = in_flight.take() {
                            ack_landed(previous, &tally).await;
                        }
                        let n = acks.len() as u64;
                        let (api, tally) = (api.clone(), tally.clone());
                        let task = tokio::spawn(async move {
                            ack_counted(&api, acks, &tally).await;
                        });
                        in_flight = Some((task, n));
                    }
                }
            }
            if let Some(last) = in_flight {
                ack_landed(last, &tally).await;
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let mut obs = Arc::try_unwrap(obs)
        .map_err(|_| anyhow!("consumers still running"))?
        .into_inner()
        .expect("poisoned");
    obs.acked = tally.0.load(Ordering::Relaxed);
    obs.ack_errors = tally.1.load(Ordering::Relaxed);
    Ok(obs)
}
