//! A steady flow ([`SteadyPlan`], [`feed`], [`steady`]: jobs enqueued at a
//! rate, consumed as they fall due) and the `backlog` scenario, which ends
//! with one over a topic holding many scheduled jobs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use dq_client::{Client, NewJob};
use serde_json::{Value, json};

use super::consume::{Acks, consume};
use super::enqueue::produce;
use super::report::lateness_json;
use super::{body, progress, range_ms};

/// The parameters of a steady flow.
pub(super) struct SteadyPlan {
    pub(super) rate: usize,
    pub(super) secs: f64,
    pub(super) delay: (u64, u64),
    pub(super) consumers: usize,
    pub(super) max: usize,
    pub(super) body_bytes: usize,
}

impl SteadyPlan {
    pub(super) fn parse(
        rate: usize,
        duration: &str,
        delay: &str,
        consumers: usize,
        max: usize,
        body_bytes: usize,
    ) -> Result<Self> {
        Ok(Self {
            rate: rate.max(1),
            secs: humantime::parse_duration(duration)
                .context("--duration")?
                .as_secs_f64(),
            delay: range_ms(delay)?,
            consumers,
            max,
            body_bytes,
        })
    }
}

/// Enqueues `rate` jobs/s for `secs` (a batch every 10 ms), delays uniform
/// in `delay`; ids are `<run_id>-<n>`. Returns the jobs not accepted.
pub(super) async fn feed(api: &Client, topic: &str, run_id: &str, p: &SteadyPlan) -> u64 {
    let (a, b) = p.delay;
    let jobs = (p.rate as f64 * p.secs) as usize;
    let bd = body(p.body_bytes);
    let t0 = Instant::now();
    let mut sent = 0usize;
    let mut errors = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while sent < jobs {
        tick.tick().await;
        let owed = ((t0.elapsed().as_secs_f64() * p.rate as f64) as usize).min(jobs);
        if owed <= sent {
            continue;
        }
        let batch: Vec<NewJob> = (sent..owed)
            .map(|i| {
                let d = a + if b > a {
                    rand::random_range(0..=(b - a))
                } else {
                    0
                };
                NewJob::json(&bd)
                    .id(format!("{run_id}-{i}"))
                    .delay(Duration::from_millis(d))
            })
            .collect();
        for chunk in batch.chunks(1000) {
            if api.enqueue_batch(topic, chunk).await.is_err() {
                errors += chunk.len() as u64;
            }
        }
        sent = owed;
    }
    errors
}

/// `rate` jobs/s for `secs`, delays uniform in `delay`, consumed as they fall due.
pub(super) async fn steady(
    api: &Client,
    topic: &str,
    run_id: &str,
    p: &SteadyPlan,
) -> Result<Value> {
    let (a, b) = p.delay;
    let jobs = (p.rate as f64 * p.secs) as usize;
    let pb = progress(jobs as u64, "handed out");
    let deadline = Instant::now()
        + Duration::from_secs_f64(p.secs)
        + Duration::from_millis(b)
        + Duration::from_secs(60);
    let consumer = {
        let (api, topic, pb) = (api.clone(), topic.to_string(), pb.clone());
        let (consumers, max) = (p.consumers, p.max);
        tokio::spawn(async move {
            consume(
                &api,
                &topic,
                consumers,
                max,
                Acks::Inline,
                jobs,
                deadline,
                &pb,
            )
            .await
        })
    };
    let errors = feed(api, topic, run_id, p).await;
    let obs = consumer.await??;
    pb.finish_and_clear();
    let dup: u64 = obs
        .seen
        .values()
        .map(|c| (*c as u64).saturating_sub(1))
        .sum();
    Ok(
        json!({"rate": p.rate, "seconds": p.secs, "delay_ms": [a, b], "jobs": jobs,
              "consumers": p.consumers, "enqueue_errors": errors,
              "acked": obs.acked, "ack_errors": obs.ack_errors,
              "lateness": lateness_json(&obs.lateness),
              "lost": jobs.saturating_sub(obs.seen.len()), "duplicated": dup, "early": obs.early}),
    )
}

/// The arguments of `dq bench backlog`, read as the scenario goes (the
/// steady flow's only when it starts).
pub(super) struct BacklogPlan {
    pub(super) scheduled: usize,
    pub(super) jobs: usize,
    pub(super) rate: usize,
    pub(super) duration: String,
    pub(super) delay: String,
    pub(super) consumers: usize,
}

/// `dq bench backlog`: `scheduled` jobs a day ahead, then batch enqueue
/// speed on top of them, then a steady flow's lateness.
pub(super) async fn backlog(
    api: &Client,
    topic: &str,
    run_id: &str,
    p: &BacklogPlan,
) -> Result<Value> {
    let BacklogPlan {
        scheduled,
        jobs,
        rate,
        ref duration,
        ref delay,
        consumers,
    } = *p;
    // 1. The backlog: jobs due in a day, never handed out here.
    let b = body(64);
    let rid = run_id.to_string();
    let fill = Arc::new(move |i: usize| {
        NewJob::json(&b)
            .id(format!("{rid}-b{i}"))
            .delay(Duration::from_millis(86_400_000))
    });
    let pb = progress(scheduled as u64, "backlog");
    let t0 = Instant::now();
    let fill_errors = produce(api, topic, scheduled, 1000, 4, fill, &pb).await?;
    let fill_s = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    // 2. Batch enqueue on top of it.
    let b = body(64);
    let rid = run_id.to_string();
    let more = Arc::new(move |i: usize| {
        NewJob::json(&b)
            .id(format!("{rid}-e{i}"))
            .delay(Duration::from_millis(86_400_000))
    });
    let pb = progress(jobs as u64, "enqueue");
    let t0 = Instant::now();
    let errors = produce(api, topic, jobs, 1000, 4, more, &pb).await?;
    let enq_s = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    // 3. A steady flow through the same topic.
    let plan = SteadyPlan::parse(rate, duration, delay, consumers, 100, 64)?;
    let flow = steady(api, topic, &format!("{run_id}-s"), &plan).await?;
    Ok(json!({"scenario": "backlog", "scheduled": scheduled,
           "fill_jobs_per_s": (scheduled as f64 / fill_s).round(), "fill_errors": fill_errors,
           "enqueue_jobs_per_s": (jobs as f64 / enq_s).round(), "enqueue_errors": errors,
           "steady": flow, "lost": flow["lost"], "duplicated": flow["duplicated"],
           "early": flow["early"], "ack_errors": flow["ack_errors"]}))
}
