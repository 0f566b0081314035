//! End-to-end: the built `dq` binary against private redis-servers, driven
//! over HTTP like any client would.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dq_testkit::{RedisServer, free_port};
use serde_json::{Value, json};

mod support;
use support::Dq;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// What consumers saw.
#[derive(Default)]
struct Seen {
    /// id -> (due, received, attempt) for every hand-out.
    handouts: Vec<(String, u64, u64, u64)>,
}

/// A consumer loop: reserve (long-poll) from `dq`, record, ack in batch,
/// until `stop` says so.
async fn consume(
    dq: Arc<Dq>,
    topic: &'static str,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<dyn Fn() -> bool + Send + Sync>,
    ack: bool,
) {
    while !stop() {
        let (s, v) = dq
            .post(
                "/v1/reserve",
                json!({"topics": [topic], "max": 100, "wait_ms": 500, "lease_ms": 60000}),
            )
            .await;
        if s != 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let received = now_ms();
        let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
        if jobs.is_empty() {
            continue;
        }
        {
            let mut seen = seen.lock().unwrap();
            for j in &jobs {
                seen.handouts.push((
                    j["id"].as_str().unwrap().to_string(),
                    j["due_at_ms"].as_u64().unwrap(),
                    received,
                    j["attempt"].as_u64().unwrap(),
                ));
            }
        }
        if ack {
            let acks: Vec<Value> = jobs
                .iter()
                .map(|j| json!({"topic": topic, "id": j["id"], "token": j["token"]}))
                .collect();
            let (s, v) = dq.post("/v1/ack:batch", json!({ "acks": acks })).await;
            assert_eq!(s, 200, "{v}");
            for r in v["results"].as_array().unwrap() {
                assert_eq!(
                    r,
                    &json!({"acked": true}),
                    "every ack of a live lease succeeds"
                );
            }
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// (a) 10,000 jobs with random delays 0–3 s: none early, none lost, none
/// handed out twice; lateness and throughput printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_jobs_none_early_none_lost_none_twice() {
    let redis = RedisServer::start();
    let dq = Arc::new(Dq::start(&redis.url()).await);
    const N: usize = 10_000;
    // Consumers first, so that jobs due at once are not late by the time it
    // takes to enqueue the rest.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let stop: Arc<dyn Fn() -> bool + Send + Sync> = {
        let seen = seen.clone();
        Arc::new(move || seen.lock().unwrap().handouts.len() >= N || Instant::now() > deadline)
    };
    let consumers: Vec<_> = (0..8)
        .map(|_| tokio::spawn(consume(dq.clone(), "e2e", seen.clone(), stop.clone(), true)))
        .collect();
    let start = Instant::now();
    let mut due: HashMap<String, u64> = HashMap::new();
    for batch in 0..N / 1000 {
        let jobs: Vec<Value> = (0..1000)
            .map(|i| {
                let n = batch * 1000 + i;
                json!({"id": format!("job-{n}"), "body": {"n": n}, "delay_ms": rand::random_range(0..=3000u64)})
            })
            .collect();
        let (s, v) = dq
            .post("/v1/topics/e2e/jobs:batch", json!({ "jobs": jobs }))
            .await;
        assert_eq!(s, 200, "{v}");
        for r in v["results"].as_array().unwrap() {
            assert_eq!(r["created"], json!(true), "{r}");
            due.insert(
                r["id"].as_str().unwrap().into(),
                r["due_at_ms"].as_u64().unwrap(),
            );
        }
    }
    let enqueue_secs = start.elapsed().as_secs_f64();
    for c in consumers {
        c.await.unwrap();
    }
    let total_secs = start.elapsed().as_secs_f64();
    let handouts = std::mem::take(&mut seen.lock().unwrap().handouts);
    let mut ids = HashSet::new();
    let mut lateness = Vec::with_capacity(N);
    for (id, d, received, attempt) in &handouts {
        assert!(ids.insert(id.clone()), "{id} handed out twice");
        assert_eq!(*attempt, 1);
        assert_eq!(due[id], *d, "due time as enqueued");
        assert!(received >= d, "{id} handed out {} ms early", d - received);
        lateness.push(received - d);
    }
    assert_eq!(ids.len(), N, "lost {} jobs", N - ids.len());
    lateness.sort_unstable();
    eprintln!(
        "e2e 10k: enqueue {:.0} jobs/s; all {N} handed out and acked in {total_secs:.2} s ({:.0} jobs/s overall); lateness ms p50 {} p99 {} max {}",
        N as f64 / enqueue_secs,
        N as f64 / total_secs,
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        lateness.last().unwrap()
    );
    let (_, v, _) = dq.call(reqwest::Method::GET, "/v1/topics/e2e", None).await;
    assert_eq!(v["stats"]["counters"]["acked"], json!(N));
    assert_eq!(v["stats"]["reserved"], json!(0));
}

/// (b) A `dq serve` holding leases is killed with SIGKILL: a second one hands
/// the jobs out again once the leases expire, as attempt 2, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_leases_come_back_after_expiry() {
    let redis = RedisServer::start();
    let mut a = Dq::start(&redis.url()).await;
    let (s, _, _) = a
        .call(
            reqwest::Method::PUT,
            "/v1/topics/k",
            Some(json!({"retry": {"fixed_ms": 0}})),
        )
        .await;
    assert_eq!(s, 200);
    let jobs: Vec<Value> = (0..50).map(|i| json!({"id": format!("k{i}")})).collect();
    a.post("/v1/topics/k/jobs:batch", json!({ "jobs": jobs }))
        .await;
    let (_, v) = a
        .post(
            "/v1/reserve",
            json!({"topics": ["k"], "max": 100, "lease_ms": 1500}),
        )
        .await;
    let leased = v["jobs"].as_array().unwrap();
    assert_eq!(leased.len(), 50);
    let deadline = leased
        .iter()
        .map(|j| j["lease_deadline_ms"].as_u64().unwrap())
        .max()
        .unwrap();
    a.kill9();

    let b = Dq::start(&redis.url()).await;
    let mut back = HashSet::new();
    let give_up = Instant::now() + Duration::from_secs(15);
    while back.len() < 50 && Instant::now() < give_up {
        let (s, v) = b
            .post(
                "/v1/reserve",
                json!({"topics": ["k"], "max": 100, "wait_ms": 2000}),
            )
            .await;
        assert_eq!(s, 200);
        let received = now_ms();
        for j in v["jobs"].as_array().unwrap() {
            assert!(
                received > deadline - 1500,
                "handed out while the first lease held"
            );
            assert_eq!(j["attempt"], json!(2));
            assert!(back.insert(j["id"].as_str().unwrap().to_string()), "twice");
        }
    }
    assert_eq!(back.len(), 50, "every leased job came back");
    assert!(now_ms() > deadline, "not before the leases ended");
}

/// (c) Two `dq serve` on one Redis: consumers on both, each job has one holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_one_redis_one_holder_per_job() {
    let redis = RedisServer::start();
    let a = Arc::new(Dq::start(&redis.url()).await);
    let b = Arc::new(Dq::start(&redis.url()).await);
    const N: usize = 3000;
    for (k, dq) in [&a, &b, &a].iter().enumerate() {
        let jobs: Vec<Value> = (0..1000)
            .map(
                |i| json!({"id": format!("p{k}-{i}"), "delay_ms": rand::random_range(0..=1000u64)}),
            )
            .collect();
        let (s, _) = dq
            .post("/v1/topics/two/jobs:batch", json!({ "jobs": jobs }))
            .await;
        assert_eq!(s, 200);
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let deadline = Instant::now() + Duration::from_secs(30);
    let stop: Arc<dyn Fn() -> bool + Send + Sync> = {
        let seen = seen.clone();
        Arc::new(move || seen.lock().unwrap().handouts.len() >= N || Instant::now() > deadline)
    };
    let consumers: Vec<_> = (0..6)
        .map(|i| {
            let dq = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(consume(dq, "two", seen.clone(), stop.clone(), i < 3))
        })
        .collect();
    for c in consumers {
        c.await.unwrap();
    }
    let seen = seen.lock().unwrap();
    let mut ids = HashSet::new();
    for (id, d, received, _) in &seen.handouts {
        assert!(ids.insert(id.clone()), "{id} handed to two holders");
        assert!(received >= d, "early");
    }
    assert_eq!(ids.len(), N);
}

/// Three `dq serve` on one Redis Cluster (3 masters), a 16-partition topic:
/// jobs enqueued through all three (with and without ids) are each handed to
/// exactly one holder, none early, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_one_cluster_sixteen_partitions_one_holder_per_job() {
    let cluster = dq_testkit::RedisCluster::start(3, 0);
    let seeds = cluster.urls().join(",");
    let mut dqs = Vec::new();
    for _ in 0..3 {
        dqs.push(Arc::new(
            Dq::start_with(&["--redis-cluster", &seeds, "--redis-timeout", "2s"]).await,
        ));
    }
    // Through the CLI, as an operator would.
    let out = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["topics", "put", "hot", "--partitions", "16", "--json"])
        .args(["--server", &dqs[0].base])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config"]["partitions"], json!(16));
    const N: usize = 3000;
    for (k, dq) in dqs.iter().enumerate() {
        let jobs: Vec<Value> = (0..1000)
            .map(|i| {
                let delay = rand::random_range(0..=1000u64);
                if i % 2 == 0 {
                    json!({"id": format!("p{k}-{i}"), "delay_ms": delay})
                } else {
                    json!({"delay_ms": delay})
                }
            })
            .collect();
        let (s, v) = dq
            .post("/v1/topics/hot/jobs:batch", json!({ "jobs": jobs }))
            .await;
        assert_eq!(s, 200, "{v}");
    }
    // The partitions are spread over the masters.
    let mut masters = HashSet::new();
    for p in 0..16 {
        let tag = if p == 0 {
            "hot".to_string()
        } else {
            format!("hot#{p}")
        };
        masters.insert(cluster.master_of(&format!("dq:{{{tag}}}:jobs")));
    }
    assert_eq!(masters.len(), 3, "16 partitions over 3 masters");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let stop: Arc<dyn Fn() -> bool + Send + Sync> = {
        let seen = seen.clone();
        Arc::new(move || seen.lock().unwrap().handouts.len() >= N || Instant::now() > deadline)
    };
    let consumers: Vec<_> = (0..6)
        .map(|i| {
            tokio::spawn(consume(
                dqs[i % 3].clone(),
                "hot",
                seen.clone(),
                stop.clone(),
                true,
            ))
        })
        .collect();
    for c in consumers {
        c.await.unwrap();
    }
    let mut ids = HashSet::new();
    for (id, d, received, _) in &seen.lock().unwrap().handouts {
        assert!(ids.insert(id.clone()), "{id} handed to two holders");
        assert!(received >= d, "early");
    }
    assert_eq!(ids.len(), N, "every job handed out");
    let (_, v, _) = dqs[2]
        .call(reqwest::Method::GET, "/v1/topics/hot", None)
        .await;
    assert_eq!(v["stats"]["counters"]["acked"], json!(N));
    let (s, v, _) = dqs[1].call(reqwest::Method::GET, "/readyz", None).await;
    assert_eq!(s, 200, "{v}");
}

/// (d) Redis (AOF, appendfsync always) is killed mid-load: enqueues get 503
/// with Retry-After; after a restart service resumes and every enqueue that
/// was answered OK is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_mid_load_loses_nothing_acknowledged() {
    let mut redis = RedisServer::start_durable();
    let dq = Dq::start(&redis.url()).await;
    let mut acknowledged: Vec<String> = Vec::new();
    let mut saw_503 = false;
    let mut n = 0;
    let mut restarted = false;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        let id = format!("d{n}");
        n += 1;
        let (s, v, retry_after) = dq
            .call(
                reqwest::Method::POST,
                "/v1/topics/durable/jobs",
                Some(json!({"id": id, "body": {"n": n}, "delay_ms": 3_600_000})),
            )
            .await;
        match s {
            201 | 200 => acknowledged.push(id),
            503 => {
                assert_eq!(v["error"]["code"], json!("store_unavailable"));
                assert_eq!(retry_after.as_deref(), Some("1"));
                saw_503 = true;
            }
            other => panic!("unexpected {other}: {v}"),
        }
        if n == 300 {
            redis.stop();
        }
        if saw_503 && !restarted {
            redis.restart();
            restarted = true;
        }
        if restarted && acknowledged.len() >= 600 {
            break;
        }
    }
    assert!(saw_503, "a dead Redis gives 503");
    assert!(
        acknowledged.len() >= 600,
        "service resumed after the restart"
    );
    let (_, v, _) = dq
        .call(reqwest::Method::GET, "/v1/topics/durable", None)
        .await;
    let scheduled = v["stats"]["scheduled"].as_u64().unwrap() as usize;
    for id in &acknowledged {
        let (s, v, _) = dq
            .call(
                reqwest::Method::GET,
                &format!("/v1/topics/durable/jobs/{id}"),
                None,
            )
            .await;
        assert_eq!(s, 200, "acknowledged enqueue {id} lost: {v}");
    }
    assert!(scheduled >= acknowledged.len());
}

/// SIGTERM: a waiting reserve returns at once, the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_gracefully() {
    let redis = RedisServer::start();
    let mut dq = Dq::start(&redis.url()).await;
    let http = dq.http.clone();
    let url = format!("{}/v1/reserve", dq.base);
    let waiter = tokio::spawn(async move {
        let t0 = Instant::now();
        let r = http
            .post(url)
            .json(&json!({"topics": ["quiet"], "wait_ms": 30000}))
            .send()
            .await
            .unwrap();
        (
            r.status().as_u16(),
            r.json::<Value>().await.unwrap(),
            t0.elapsed(),
        )
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    dq.sigterm();
    let (status, body, took) = waiter.await.unwrap();
    // Nothing was ever enqueued to "quiet": the answer names it.
    assert_eq!(
        (status, body),
        (200, json!({"jobs": [], "unknown_topics": ["quiet"]}))
    );
    assert!(
        took < Duration::from_secs(5),
        "the waiting reserve returned at shutdown: {took:?}"
    );
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = dq.child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit status {status}");
}

/// (e) Each error status through the binary: the codes of docs/api.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_codes_through_the_binary() {
    use reqwest::Method;
    let redis = RedisServer::start();
    let dq = Dq::start(&redis.url()).await;
    let cases: Vec<(Method, &str, Option<Value>, u16, &str)> = vec![
        (
            Method::POST,
            "/v1/topics/t/jobs",
            Some(json!({"delay_ms": -1})),
            400,
            "invalid_delay",
        ),
        (
            Method::POST,
            "/v1/topics/t/jobs",
            Some(json!({"dealy_ms": 1})),
            400,
            "invalid_json",
        ),
        (
            Method::POST,
            "/v1/topics/t%20t/jobs",
            Some(json!({})),
            400,
            "invalid_topic",
        ),
        (
            Method::POST,
            "/v1/topics/t/jobs",
            Some(json!({"body": "x".repeat(1024 * 1024)})),
            413,
            "body_too_large",
        ),
        (
            Method::POST,
            "/v1/topics/t/jobs",
            Some(json!({"body": "x".repeat(33 * 1024 * 1024)})),
            413,
            "request_too_large",
        ),
        (
            Method::GET,
            "/v1/topics/t/jobs/none",
            None,
            404,
            "job_not_found",
        ),
        (Method::GET, "/v1/topics/none", None, 404, "topic_not_found"),
        (Method::GET, "/v2", None, 404, "route_not_found"),
    ];
    for (m, path, body, status, code) in cases {
        let (s, v, _) = dq.call(m.clone(), path, body).await;
        assert_eq!(
            (s, v["error"]["code"].clone()),
            (status, json!(code)),
            "{m} {path}: {v}"
        );
    }
    dq.post("/v1/topics/t/jobs", json!({"id": "j"})).await;
    let (s, v) = dq
        .post("/v1/topics/t/jobs/j/ack", json!({"token": "stale"}))
        .await;
    assert_eq!(
        (s, v["error"]["code"].clone()),
        (409, json!("lease_mismatch"))
    );
    let res = dq
        .http
        .post(format!("{}/v1/topics/t/jobs", dq.base))
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 415);

    // A dq whose Redis is gone answers 503 with Retry-After.
    let dead_port = free_port();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--redis",
            &format!("redis://127.0.0.1:{dead_port}"),
            "--redis-timeout",
            "500ms",
        ])
        .args(["--config", "/dev/null", "--log-level", "error"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let t0 = Instant::now();
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "dq did not start without Redis"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let res = http
        .post(format!("{base}/v1/topics/t/jobs"))
        .json(&json!({"id": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["code"], json!("store_unavailable"));
    let res = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 503);
    let _ = child.kill();
    let _ = child.wait();
}

/// The embedded store under load, killed with SIGKILL: after a restart on the
/// same directory every enqueue that was answered OK is there with its due
/// time, body and attempt count; a leased job is still leased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let dq = Arc::new(Dq::start_embedded(dir.path()).await);
    dq.post("/v1/topics/crash/jobs", json!({"id": "held"}))
        .await;
    let (_, v) = dq
        .post(
            "/v1/reserve",
            json!({"topics": ["crash"], "lease_ms": 600000}),
        )
        .await;
    assert_eq!(v["jobs"][0]["id"], json!("held"));
    let acked: Arc<Mutex<Vec<(String, u64, Value)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producers: Vec<_> = (0..4)
        .map(|p| {
            let (dq, acked, stop) = (dq.clone(), acked.clone(), stop.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let id = format!("p{p}-{n}");
                    let body = json!({"producer": p, "n": n});
                    let (s, v) = dq
                        .post(
                            "/v1/topics/crash/jobs",
                            json!({"id": id, "body": body, "delay_ms": 60_000 + n}),
                        )
                        .await;
                    match s {
                        201 => {
                            acked
                                .lock()
                                .unwrap()
                                .push((id, v["due_at_ms"].as_u64().unwrap(), body))
                        }
                        // The connection died with the server: the enqueue may or may not be there.
                        0 => {}
                        _ => panic!("unexpected {s}: {v}"),
                    }
                    n += 1;
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < 500 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let killed = Command::new("kill")
        .args(["-KILL", &dq.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for p in producers {
        p.await.unwrap();
    }
    drop(dq);
    let acked = acked.lock().unwrap().clone();
    let dq = Dq::start_embedded(dir.path()).await;
    for (id, due, body) in &acked {
        let (s, v, _) = dq
            .call(
                reqwest::Method::GET,
                &format!("/v1/topics/crash/jobs/{id}"),
                None,
            )
            .await;
        assert_eq!(s, 200, "acknowledged enqueue {id} lost");
        assert_eq!(v["due_at_ms"].as_u64(), Some(*due));
        assert_eq!(&v["body"], body);
        assert_eq!(
            (v["state"].clone(), v["attempts"].clone()),
            (json!("scheduled"), json!(0))
        );
    }
    let (_, v, _) = dq
        .call(reqwest::Method::GET, "/v1/topics/crash/jobs/held", None)
        .await;
    assert_eq!(
        (v["state"].clone(), v["attempts"].clone()),
        (json!("reserved"), json!(1))
    );
    eprintln!(
        "kill -9 test: {} acknowledged enqueues, all present after restart",
        acked.len()
    );
}

/// A `dq serve` killed while a push delivery is in flight: after a restart
/// the job is delivered again once the lease ends, with the same webhook-id,
/// and acked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_delivery_survives_kill_9_mid_delivery() {
    use axum::http::HeaderMap;
    let dir = tempfile::tempdir().unwrap();
    let got: Arc<Mutex<Vec<(Instant, String, String)>>> = Arc::default();
    let hang_first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let app = {
        let (got, hang_first) = (got.clone(), hang_first.clone());
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move |h: HeaderMap| {
                let (got, hang_first) = (got.clone(), hang_first.clone());
                async move {
                    let id = h["webhook-id"].to_str().unwrap().to_string();
                    let attempt = h["dq-attempt"].to_str().unwrap().to_string();
                    got.lock().unwrap().push((Instant::now(), id, attempt));
                    if hang_first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                        // The first delivery never answers (its dq dies meanwhile).
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                    axum::http::StatusCode::OK
                }
            }),
        )
    };
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });

    let mut a = Dq::start_embedded(dir.path()).await;
    let (s, v, _) = a
        .call(
            reqwest::Method::PUT,
            "/v1/topics/pushed",
            Some(json!({"delivery": {"mode": "push", "url": url, "timeout_ms": 500}, "retry": {"fixed_ms": 0}})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    a.post("/v1/topics/pushed/jobs", json!({"id": "p1"})).await;
    let t0 = Instant::now();
    while got.lock().unwrap().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "first delivery never came"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.kill9();
    let killed_at = Instant::now();
    let b = Dq::start_embedded(dir.path()).await;
    let t0 = Instant::now();
    loop {
        let (_, v, _) = b
            .call(reqwest::Method::GET, "/v1/topics/pushed", None)
            .await;
        if v["stats"]["counters"]["acked"] == json!(1) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "not delivered again: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].1, "pushed/p1");
    assert_eq!(
        got[1].1, got[0].1,
        "same webhook-id: the receiver can drop the repeat"
    );
    assert_eq!((got[0].2.as_str(), got[1].2.as_str()), ("1", "2"));
    // The lease (timeout + 5 s) had to end first.
    assert!(
        got[1].0 > killed_at + Duration::from_secs(4),
        "redelivered only after the lease"
    );
}
