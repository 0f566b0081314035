//! `dq bench drain`: N jobs due uniformly in a window, enqueued by
//! producers while consumers reserve and ack them; lateness (from the due
//! time, from the enqueue's acknowledgement, by due second), throughput,
//! CPU per job of dq and its store, and the embedded writer's work.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::ValueEnum;
use dq_client::{Client, NewJob};
use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::consume::{Acks, consume};
use super::enqueue::produce_noting;
use super::report::lateness_json;
use super::writer::WriterWork;
use super::{body, now_us, progress, topics};

/// The arguments of `dq bench drain`.
pub(super) struct DrainPlan {
    pub(super) jobs: usize,
    /// The due window after the start, ms.
    pub(super) window: (u64, u64),
    pub(super) consumers: usize,
    pub(super) max: usize,
    pub(super) acks: Acks,
    pub(super) producers: usize,
    pub(super) batch: usize,
    pub(super) body_bytes: usize,
}

/// Runs the scenario against `server` (its `/metrics` and, through
/// `/proc`, its process and its store's).
pub(super) async fn run(
    api: &Client,
    topic: &str,
    run_id: &str,
    server: &str,
    token: Option<&str>,
    p: &DrainPlan,
) -> Result<Value> {
    let DrainPlan {
        jobs,
        window: (a, b),
        consumers,
        max,
        acks,
        producers,
        batch,
        body_bytes,
    } = *p;
    // CPU of dq and of its store over the whole run (enqueue,
    // reserve, ack): the cost of a job's lifecycle.
    let procs = topics::processes(server, &topics::Given::default());
    let cpu0 = procs.cpu_us();
    let work0 = WriterWork::read(server, token).await;
    let t0_ms = now_us() / 1000;
    let bd = body(body_bytes);
    let rid = run_id.to_string();
    let job = Arc::new(move |i: usize| {
        let due = t0_ms
            + a
            + if b > a {
                rand::random_range(0..=(b - a))
            } else {
                0
            };
        NewJob::json(&bd).id(format!("{rid}-{i}")).due_at_ms(due)
    });
    let pb = progress(jobs as u64, "handed out");
    let deadline = Instant::now() + Duration::from_millis(b) + Duration::from_secs(120);
    let started = Instant::now();
    let consumer = {
        let (api, topic, pb) = (api.clone(), topic.to_string(), pb.clone());
        tokio::spawn(async move {
            consume(&api, &topic, consumers, max, acks, jobs, deadline, &pb).await
        })
    };
    // The writer's counters again when the last job is handed
    // out (not when the consumers stop: their last long polls
    // would add idle time).
    let work_end = {
        let (server, token, pb) = (server.to_string(), token.map(str::to_string), pb.clone());
        tokio::spawn(async move {
            while pb.position() < jobs as u64 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            WriterWork::read(&server, token.as_deref()).await
        })
    };
    let enq_pb = ProgressBar::hidden();
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..jobs).map(|_| AtomicU64::new(0)).collect());
    let errors = produce_noting(
        api,
        topic,
        jobs,
        batch.max(1),
        producers,
        job,
        &enq_pb,
        Some(acked.clone()),
    )
    .await?;
    let enqueue_s = started.elapsed().as_secs_f64();
    let obs = consumer.await??;
    let cpu1 = procs.cpu_us();
    let work1 = work_end.await.ok().flatten();
    pb.finish_and_clear();
    let per_job = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if !obs.seen.is_empty() => {
            json!(((b.saturating_sub(a)) as f64 / obs.seen.len() as f64 * 10.0).round() / 10.0)
        }
        _ => Value::Null,
    };
    let cpu = json!({"dq": per_job(cpu0.0, cpu1.0), "store": per_job(cpu0.1, cpu1.1),
                     "measured": procs.how()});
    let wall = (obs.last_us.saturating_sub(t0_ms * 1000)) as f64 / 1e6;
    let writer = work1
        .zip(work0)
        .map_or(Value::Null, |(w1, w0)| w1.since(&w0));
    let active = wall - a as f64 / 1000.0;
    let dup: u64 = obs
        .seen
        .values()
        .map(|c| (*c as u64).saturating_sub(1))
        .sum();
    Ok(
        json!({"scenario": "drain", "jobs": jobs, "window_ms": [a, b], "consumers": consumers, "max": max, "batch": batch,
           "acks": acks.to_possible_value().map(|v| v.get_name().to_string()), "acked": obs.acked, "ack_errors": obs.ack_errors,
           "enqueue_seconds": (enqueue_s * 1000.0).round() / 1000.0, "enqueue_errors": errors,
           "seconds": (wall * 1000.0).round() / 1000.0,
           "jobs_per_s": (obs.seen.len() as f64 / active.max(0.001)).round(),
           "lateness": lateness_json(&obs.lateness),
           "lateness_from_enqueue_ack": lateness_json(&obs.lateness_from_ack(&acked)?),
           "lateness_by_due_second": obs.lateness_by_second(t0_ms)?,
           "cpu_us_per_job": cpu, "writer": writer,
           "lost": jobs.saturating_sub(obs.seen.len()), "duplicated": dup, "early": obs.early}),
    )
}
