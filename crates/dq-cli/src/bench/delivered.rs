//! Topics dq delivers itself: the `push` scenario (a local HTTP receiver
//! started by the bench) and the `forward` scenario (a Redis Stream the
//! bench reads), both fed and measured by [`delivered`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use dq_client::{Client, NewJob};
use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::enqueue::produce;
use super::report::{Observed, lateness_json};
use super::steady::{SteadyPlan, feed};
use super::{body, now_us, progress};

/// A local HTTP receiver for push benches: records, per job id, the hand-outs
/// and the lateness (receipt − `Dq-Due-At`), answers 204.
async fn receiver(expected: usize) -> Result<(String, Arc<Mutex<Observed>>)> {
    let obs = Arc::new(Mutex::new(Observed::new(expected)?));
    let o = obs.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let o = o.clone();
            async move {
                let received = now_us();
                let due_ms = headers
                    .get("dq-due-at")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                let id = headers
                    .get("dq-job-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                o.lock().expect("poisoned").record(id, due_ms, received);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, obs))
}

/// Jobs a push or forward bench expects: `rate` × its duration, or with
/// rate 0 the `jobs` enqueued at once.
fn expected_jobs(rate: usize, jobs: usize, plan: &SteadyPlan) -> usize {
    if rate == 0 {
        jobs
    } else {
        (rate as f64 * plan.secs) as usize
    }
}

/// Feeds a topic dq delivers itself (push, forward) and waits until `obs`
/// saw every job (or a minute past the last due time): lateness, lost,
/// duplicated, early, and with rate 0 the jobs per second.
async fn delivered(
    api: &Client,
    topic: &str,
    run_id: &str,
    rate: usize,
    jobs: usize,
    plan: &SteadyPlan,
    obs: &Arc<Mutex<Observed>>,
) -> Result<Value> {
    let expected = expected_jobs(rate, jobs, plan);
    let pb = progress(expected as u64, "delivered");
    let started = Instant::now();
    let t0_us = now_us();
    let errors = if rate == 0 {
        let bd = body(64);
        let rid = run_id.to_string();
        let job = Arc::new(move |i: usize| NewJob::json(&bd).id(format!("{rid}-{i}")));
        produce(api, topic, jobs, 1000, 2, job, &ProgressBar::hidden()).await?
    } else {
        feed(api, topic, run_id, plan).await
    };
    let limit = started
        + Duration::from_secs_f64(plan.secs)
        + Duration::from_millis(plan.delay.1)
        + Duration::from_secs(60);
    loop {
        let n = obs.lock().expect("poisoned").seen.len();
        pb.set_position(n as u64);
        if n >= expected || Instant::now() > limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Late duplicates would show up shortly after.
    tokio::time::sleep(Duration::from_millis(200)).await;
    pb.finish_and_clear();
    let o = obs.lock().expect("poisoned");
    let dup: u64 = o.seen.values().map(|c| (*c as u64).saturating_sub(1)).sum();
    let wall = (o.last_us.saturating_sub(t0_us)) as f64 / 1e6;
    let mut v = json!({"jobs": expected, "enqueue_errors": errors,
           "lateness": lateness_json(&o.lateness),
           "lost": expected.saturating_sub(o.seen.len()), "duplicated": dup, "early": o.early});
    if rate == 0 {
        v["seconds"] = json!((wall * 1000.0).round() / 1000.0);
        v["deliveries_per_s"] = json!((o.seen.len() as f64 / wall.max(0.001)).round());
    } else {
        v["rate"] = json!(rate);
        v["delay_ms"] = json!([plan.delay.0, plan.delay.1]);
    }
    Ok(v)
}

/// A reader of the forward bench's stream (`XREAD BLOCK` from the start):
/// records, per job id, the entries and the lateness (receipt − the
/// entry's `due_at_ms`).
async fn stream_reader(url: &str, stream: &str, expected: usize) -> Result<Arc<Mutex<Observed>>> {
    let obs = Arc::new(Mutex::new(Observed::new(expected)?));
    let mut c = redis::Client::open(url)
        .context("--target")?
        .get_multiplexed_async_connection()
        .await
        .context("cannot reach the --target Redis")?;
    let (o, stream) = (obs.clone(), stream.to_string());
    tokio::spawn(async move {
        let mut from = "0".to_string();
        loop {
            let r: redis::RedisResult<redis::streams::StreamReadReply> = redis::cmd("XREAD")
                .arg("COUNT")
                .arg(1000)
                .arg("BLOCK")
                .arg(500)
                .arg("STREAMS")
                .arg(&stream)
                .arg(&from)
                .query_async(&mut c)
                .await;
            let Ok(reply) = r else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let received = now_us();
            let mut o = o.lock().expect("poisoned");
            for k in reply.keys {
                for e in k.ids {
                    from = e.id.clone();
                    let id: String = e.get("id").unwrap_or_default();
                    o.record(id, e.get::<u64>("due_at_ms").unwrap_or(0), received);
                }
            }
            if o.seen.len() >= expected {
                return;
            }
        }
    });
    Ok(obs)
}

/// `dq bench push`: a push topic delivering to [`receiver`].
pub(super) async fn push(
    api: &Client,
    topic: &str,
    run_id: &str,
    plan: &SteadyPlan,
    rate: usize,
    jobs: usize,
    concurrency: usize,
) -> Result<Value> {
    let expected = expected_jobs(rate, jobs, plan);
    let (url, obs) = receiver(expected).await?;
    let push = dq_core::PushConfig {
        url,
        method: dq_core::PushMethod::Post,
        timeout_ms: dq_core::topic::PUSH_TIMEOUT_MS,
        headers: Default::default(),
        concurrency: u32::try_from(concurrency).unwrap_or(u32::MAX),
        secrets: Vec::new(),
    };
    let patch = dq_core::TopicConfigPatch {
        delivery: Some(dq_core::Delivery::Push(push)),
        ..Default::default()
    };
    api.configure_topic(topic, &patch).await?;
    let mut v = delivered(api, topic, run_id, rate, jobs, plan, &obs).await?;
    v["scenario"] = json!("push");
    v["concurrency"] = json!(concurrency);
    Ok(v)
}

/// `dq bench forward`: a topic forwarding into a Redis Stream of `target`,
/// read by [`stream_reader`]; the stream is deleted afterwards.
pub(super) async fn forward(
    api: &Client,
    topic: &str,
    run_id: &str,
    plan: &SteadyPlan,
    target: &str,
    rate: usize,
    jobs: usize,
) -> Result<Value> {
    let expected = expected_jobs(rate, jobs, plan);
    let stream = format!("dq-bench:{run_id}");
    let obs = stream_reader(target, &stream, expected).await?;
    let patch = dq_core::TopicConfigPatch {
        delivery: Some(dq_core::Delivery::RedisStream(
            dq_core::forward::StreamTarget {
                url: target.to_string(),
                stream: stream.clone(),
                maxlen: None,
                fields: dq_core::forward::StreamFields::Flat,
            },
        )),
        ..Default::default()
    };
    api.configure_topic(topic, &patch).await?;
    let mut v = delivered(api, topic, run_id, rate, jobs, plan, &obs).await?;
    v["scenario"] = json!("forward");
    let mut c = redis::Client::open(target)?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut c).await?;
    Ok(v)
}
