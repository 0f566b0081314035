//! The Worker against a real server.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq_client::*;
use serde_json::json;
use support::TestServer;
use tokio_util::sync::CancellationToken;

async fn wait_until(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> bool) {
    let t0 = Instant::now();
    while !f().await {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn gone(c: &Client, topic: &str) -> u64 {
    c.topic(topic)
        .await
        .map(|t| t.stats.counters.acked)
        .unwrap_or(0)
}

fn jobs(n: usize, event: &str) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob::json(json!({"event": event, "n": i})).id(format!("j{i}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_is_respected() {
    let srv = TestServer::start().await;
    let c = srv.client();
    c.enqueue_batch("t", &jobs(24, "e")).await.unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let w = {
        let (running, peak) = (running.clone(), peak.clone());
        Worker::new(c.clone()).topic("t").handle("e", move |_t| {
            let (running, peak) = (running.clone(), peak.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Outcome::Done
            }
        })
    }
    .concurrency(4);
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until("24 acks", Duration::from_secs(20), async || {
        gone(&c, "t").await == 24
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    assert_eq!(
        peak.load(Ordering::SeqCst),
        4,
        "never more than 4, and 4 were used"
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_handler_keeps_its_lease() {
    let srv = TestServer::start().await;
    let c = srv.client();
    c.enqueue("t", &NewJob::json(json!({"event": "slow"})).id("s"))
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let w = {
        let calls = calls.clone();
        Worker::new(c.clone())
            .topic("t")
            .handle("slow", move |_t| {
                let calls = calls.clone();
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    // Three times the lease: only touches keep it.
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    Outcome::Done
                }
            })
            .lease(Duration::from_millis(500))
    };
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until("the ack", Duration::from_secs(20), async || {
        gone(&c, "t").await == 1
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "never handed out twice");
    let st = c.topic("t").await.unwrap().stats;
    assert_eq!((st.counters.expired, st.counters.failed), (0, 0));
    srv.stop().await;
}

/// Requests the server answered on `route` (a route template), from its
/// `/metrics`.
async fn requests_on(base: &str, route: &str) -> f64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let label = format!("route=\"{route}\"");
    text.lines()
        .filter(|l| l.starts_with("dq_http_request_duration_seconds_count{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Eight long handlers at once keep their leases with one `touch:batch`
/// per third of the lease for all of them, not a touch per job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_running_jobs_are_extended_in_one_call_per_interval() {
    let srv = TestServer::start().await;
    let c = srv.client();
    c.enqueue_batch("t", &jobs(8, "slow")).await.unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let w = {
        let started = started.clone();
        Worker::new(c.clone())
            .topic("t")
            .handle("slow", move |_t| {
                let started = started.clone();
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    // Four times the lease: only touches keep it.
                    tokio::time::sleep(Duration::from_millis(2400)).await;
                    Outcome::Done
                }
            })
            .lease(Duration::from_millis(600))
            .concurrency(8)
            .batch(8)
    };
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until("8 acks", Duration::from_secs(20), async || {
        gone(&c, "t").await == 8
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    assert_eq!(started.load(Ordering::SeqCst), 8, "never handed out twice");
    let st = c.topic("t").await.unwrap().stats;
    assert_eq!((st.counters.expired, st.counters.failed), (0, 0));
    let single = requests_on(&srv.base, "/v1/topics/{topic}/jobs/{id}/touch").await;
    let batches = requests_on(&srv.base, "/v1/touch:batch").await;
    assert_eq!(single, 0.0, "no touch per job");
    // 2.4 s of handlers, a touch:batch every 200 ms: about 12 (a touch per
    // job would be about 96).
    assert!(
        (6.0..=16.0).contains(&batches),
        "one touch:batch per interval: {batches}"
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_panics_and_unknown_events() {
    let srv = TestServer::start().await;
    let c = srv.client();
    c.configure_topic(
        "t",
        &TopicConfigPatch {
            retry: Some(RetryPolicy::FixedMs(0)),
            max_attempts: Some(5),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    for (id, event) in [
        ("panics", "panic"),
        ("later", "later"),
        ("fails", "fail"),
        ("aborts", "abort"),
        ("unknown", "nope"),
    ] {
        c.enqueue("t", &NewJob::json(json!({"event": event})).id(id))
            .await
            .unwrap();
    }
    let seen: Arc<Mutex<HashMap<String, Vec<u32>>>> = Arc::default();
    let rec = |seen: &Arc<Mutex<HashMap<String, Vec<u32>>>>, t: &Task| {
        seen.lock()
            .unwrap()
            .entry(t.id().to_string())
            .or_default()
            .push(t.attempt());
    };
    let stop = CancellationToken::new();
    let (s1, s2, s3, s4) = (seen.clone(), seen.clone(), seen.clone(), seen.clone());
    let w = Worker::new(c.clone())
        .topic("t")
        .handle("panic", move |t| {
            rec(&s1, &t);
            async move {
                if t.attempt() == 1 {
                    panic!("first try blows up");
                }
                Outcome::Done
            }
        })
        .handle("later", move |t| {
            let runs = {
                rec(&s2, &t);
                s2.lock().unwrap()["later"].len()
            };
            async move {
                if runs < 3 {
                    Outcome::RetryAfter(Duration::from_millis(50))
                } else {
                    Outcome::Done
                }
            }
        })
        .handle("fail", move |t| {
            rec(&s3, &t);
            async move {
                if t.attempt() < 3 {
                    Outcome::Fail(format!("try {}", t.attempt()))
                } else {
                    Outcome::Done
                }
            }
        })
        .handle("abort", move |t| {
            rec(&s4, &t);
            async move { Outcome::Abort("bad payload".into()) }
        });
    let stats = w.stats();
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until("3 acks and 2 dead", Duration::from_secs(20), async || {
        let st = c.topic("t").await.unwrap().stats;
        st.counters.acked == 3 && st.dead == 2
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen["panics"],
        vec![1, 2],
        "a panic is a failed attempt, retried"
    );
    assert_eq!(
        seen["later"],
        vec![1, 1, 1],
        "RetryAfter does not count attempts"
    );
    assert_eq!(seen["fails"], vec![1, 2, 3], "Fail counts attempts");
    assert_eq!(seen["aborts"], vec![1], "Abort is dead at once");
    assert!(!seen.contains_key("unknown"));
    let dead = c.list_dead("t", 0, 10).await.unwrap();
    let unknown = dead.iter().find(|j| j.id == "unknown").unwrap();
    assert!(
        unknown
            .last_error
            .as_deref()
            .unwrap()
            .contains("no handler for event \"nope\"")
    );
    assert_eq!(unknown.attempts, 1, "not retried");
    let aborted = dead.iter().find(|j| j.id == "aborts").unwrap();
    assert_eq!(aborted.last_error.as_deref(), Some("bad payload"));
    assert_eq!(stats.panicked.load(Ordering::Relaxed), 1);
    srv.stop().await;
}

/// Shutdown while handlers run: they finish and are acked; nothing is lost,
/// nothing that finished is handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_loses_and_duplicates_nothing() {
    let srv = TestServer::start().await;
    let c = srv.client();
    c.enqueue_batch("t", &jobs(40, "e")).await.unwrap();
    let done: Arc<Mutex<Vec<String>>> = Arc::default();
    let started = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let mk = |done: Arc<Mutex<Vec<String>>>, started: Arc<AtomicUsize>| {
        Worker::new(c.clone())
            .topic("t")
            .handle("e", move |t| {
                let (done, started) = (done.clone(), started.clone());
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    done.lock().unwrap().push(t.id().to_string());
                    Outcome::Done
                }
            })
            .concurrency(8)
            .grace(Duration::from_secs(5))
    };
    let run = tokio::spawn(mk(done.clone(), started.clone()).run(stop.clone()));
    wait_until("handlers running", Duration::from_secs(10), async || {
        started.load(Ordering::SeqCst) >= 8
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    let first: Vec<String> = done.lock().unwrap().clone();
    assert!(
        first.len() >= 8,
        "running handlers finished within the grace period"
    );
    let st = c.topic("t").await.unwrap().stats;
    assert_eq!(
        st.counters.acked as usize,
        first.len(),
        "every finished job was acked"
    );
    assert_eq!(st.reserved, 0, "nothing left leased");
    assert_eq!(st.ready as usize + first.len(), 40, "nothing lost");

    // A second worker takes the rest; none of the finished ones come back.
    let stop2 = CancellationToken::new();
    let run = tokio::spawn(mk(done.clone(), started.clone()).run(stop2.clone()));
    wait_until("all acked", Duration::from_secs(20), async || {
        gone(&c, "t").await == 40
    })
    .await;
    stop2.cancel();
    run.await.unwrap().unwrap();
    let mut all = done.lock().unwrap().clone();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 40);
    assert_eq!(done.lock().unwrap().len(), 40, "no job ran twice");
    srv.stop().await;
}

/// A worker of 64 no-op handlers drains 5,000 jobs, each handled once
/// (at-least-once allows more only after a lost lease; none is lost here).
/// Its speed is `dq bench`'s to measure, not this test's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_op_worker_drains_every_job_once() {
    let srv = TestServer::start().await;
    let c = srv.client();
    const N: usize = 5000;
    for chunk in (0..N).collect::<Vec<_>>().chunks(1000) {
        let batch: Vec<NewJob> = chunk
            .iter()
            .map(|i| NewJob::json(json!({"event": "e"})).id(format!("j{i}")))
            .collect();
        c.enqueue_batch("t", &batch).await.unwrap();
    }
    let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let stop = CancellationToken::new();
    let handled = seen.clone();
    let w = Worker::new(c.clone())
        .topic("t")
        .handle("e", move |t| {
            *handled
                .lock()
                .unwrap()
                .entry(t.id().to_string())
                .or_default() += 1;
            async { Outcome::Done }
        })
        .concurrency(64);
    let run = tokio::spawn(w.run(stop.clone()));
    wait_until("all acked", Duration::from_secs(60), async || {
        gone(&c, "t").await == N as u64
    })
    .await;
    stop.cancel();
    run.await.unwrap().unwrap();
    srv.stop().await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), N, "every job handled");
    assert!(seen.values().all(|n| *n == 1), "no job handled twice");
    assert!((0..N).all(|i| seen.contains_key(&format!("j{i}"))));
}
