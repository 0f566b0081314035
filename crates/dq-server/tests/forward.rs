//! Forwarding topics (`redis_stream`, `redis_list`) through a running
//! `Server`, read by real consumers: a consumer group (`XREADGROUP`,
//! `XACK`, `XAUTOCLAIM` after a consumer died) and a pool of `BRPOP`
//! workers. Both ways of writing are covered: into the store's own Redis
//! (acked and written in one script) and into another Redis (a pipeline,
//! then the ack), and a target stopped and restarted mid-load.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dq_core::Store;
use dq_redis::RedisSink;
use dq_server::ServerConfig;
use dq_testkit::RedisServer;
use redis::{RedisResult, Value as RV};
use serde_json::{Value, json};

struct Dq(support::Running);

impl std::ops::Deref for Dq {
    type Target = support::Running;
    fn deref(&self) -> &support::Running {
        &self.0
    }
}

/// A server over `store` whose forwarding topics write through `sink`.
async fn dq(store: Arc<dyn Store>, sink: RedisSink) -> Dq {
    Dq(support::serve_forwarding(store, sink, ServerConfig::default()).await)
}

impl Dq {
    async fn topic(&self, topic: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::PUT, &format!("/v1/topics/{topic}"), body)
            .await
    }

    /// Enqueues `n` jobs `j0…` due `base_ms + i * step_ms` from now.
    async fn enqueue(&self, topic: &str, n: usize, base_ms: u64, step_ms: u64) {
        for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
            let jobs: Vec<Value> = chunk
                .iter()
                .map(|i| json!({"id": format!("j{i}"), "delay_ms": base_ms + *i as u64 * step_ms, "body": {"n": i}}))
                .collect();
            let (s, v) = self
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/topics/{topic}/jobs:batch"),
                    json!({ "jobs": jobs }),
                )
                .await;
            assert_eq!(s, 200, "{v}");
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// One stream entry: its id's time (the target's clock when written) and fields.
type Entry = (String, HashMap<String, Vec<u8>>);

fn entries(v: RV) -> Vec<Entry> {
    // XREADGROUP: [[stream, [[id, [f, v, …]], …]]]; XAUTOCLAIM: [next, [[id, [f, v]]], deleted]
    let mut out = Vec::new();
    let list = |v: &RV| -> Vec<RV> {
        match v {
            RV::Array(a) => a.clone(),
            _ => Vec::new(),
        }
    };
    for e in list(&v) {
        let e = list(&e);
        if e.len() != 2 {
            continue;
        }
        let (RV::BulkString(id), RV::Array(kv)) = (&e[0], &e[1]) else {
            continue;
        };
        let mut fields = HashMap::new();
        for pair in kv.chunks(2) {
            if let [RV::BulkString(k), RV::BulkString(v)] = pair {
                fields.insert(String::from_utf8_lossy(k).into_owned(), v.clone());
            }
        }
        out.push((String::from_utf8_lossy(id).into_owned(), fields));
    }
    out
}

/// The ms part of a stream entry id (`<ms>-<seq>`).
fn id_ms(id: &str) -> u64 {
    id.split('-').next().unwrap().parse().unwrap()
}

/// Reads `n` entries with a consumer group until all came or `within`
/// passed; acks each; returns them.
async fn read_group(url: &str, stream: &str, n: usize, within: Duration) -> Vec<Entry> {
    let mut c = conn(url).await;
    let _: RedisResult<()> = redis::cmd("XGROUP")
        .arg(&["CREATE", stream, "workers", "0", "MKSTREAM"][..])
        .query_async(&mut c)
        .await;
    let mut got = Vec::new();
    let deadline = Instant::now() + within;
    while got.len() < n && Instant::now() < deadline {
        let v: RV = match redis::cmd("XREADGROUP")
            .arg(
                &[
                    "GROUP", "workers", "w1", "COUNT", "200", "BLOCK", "200", "STREAMS", stream,
                    ">",
                ][..],
            )
            .query_async(&mut c)
            .await
        {
            Ok(v) => v,
            Err(_) => {
                // The target restarting: connect again.
                tokio::time::sleep(Duration::from_millis(100)).await;
                c = match redis::Client::open(url)
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                {
                    Ok(c) => c,
                    Err(_) => continue,
                };
                continue;
            }
        };
        let list = match v {
            RV::Array(mut a) if !a.is_empty() => match a.remove(0) {
                RV::Array(mut s) if s.len() == 2 => s.remove(1),
                _ => RV::Nil,
            },
            _ => RV::Nil,
        };
        for (id, f) in entries(list) {
            let _: () = redis::cmd("XACK")
                .arg(stream)
                .arg("workers")
                .arg(&id)
                .query_async(&mut c)
                .await
                .unwrap();
            got.push((id, f));
        }
    }
    got
}

/// Every job `j0..j{n-1}` exactly once, none written before it was due.
fn check_exactly_once_never_early(got: &[Entry], n: usize) {
    let seen = check_every_job_never_early(got, n);
    let twice: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).collect();
    assert!(twice.is_empty(), "written twice: {twice:?}");
}

/// Every job `j0..j{n-1}` at least once, none written before it was due,
/// each as sent; how many times each was written.
fn check_every_job_never_early(got: &[Entry], n: usize) -> HashMap<String, u32> {
    let mut seen: HashMap<String, u32> = HashMap::new();
    for (id, f) in got {
        let job = String::from_utf8(f["id"].clone()).unwrap();
        let due: u64 = String::from_utf8(f["due_at_ms"].clone())
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            id_ms(id) >= due,
            "{job} written at {} before its due time {due}",
            id_ms(id)
        );
        let i: usize = job[1..].parse().unwrap();
        assert_eq!(
            f["body"],
            format!("{{\"n\":{i}}}").into_bytes(),
            "body as sent"
        );
        assert_eq!(f["topic"], b"orders".to_vec());
        *seen.entry(job).or_default() += 1;
    }
    assert_eq!(seen.len(), n, "every job arrives");
    seen
}

async fn wait_drained(d: &Dq, topic: &str, acked: u64) {
    let t0 = Instant::now();
    loop {
        let s = d.stats(topic).await;
        if s["counters"]["acked"] == json!(acked) && s["reserved"] == json!(0) {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "not drained: {s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Into the store's own Redis: each job is acked and written in one script.
/// A consumer group reads every job once, none early; a consumer that dies
/// holding entries has them reclaimed with XAUTOCLAIM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_on_the_stores_own_redis_exactly_once_never_early() {
    let redis = RedisServer::start();
    let store = Arc::new(support::sharded_redis_at(&redis.url()));
    let d = dq(store.clone(), RedisSink::over(store)).await;
    let (s, v) = d
        .topic(
            "orders",
            json!({"delivery": {"mode": "redis_stream", "url": redis.url(), "stream": "orders:due"}}),
        )
        .await;
    assert!(s == 200 || s == 201, "{v}");
    assert_eq!(v["config"]["delivery"]["mode"], "redis_stream");
    d.enqueue("orders", 300, 200, 3).await;
    let got = read_group(&redis.url(), "orders:due", 300, Duration::from_secs(15)).await;
    check_exactly_once_never_early(&got, 300);
    wait_drained(&d, "orders", 300).await;

    // A consumer takes entries and dies without XACK: another reclaims them.
    d.enqueue("orders", 5, 0, 0).await;
    let mut c = conn(&redis.url()).await;
    let mut taken = Vec::new();
    let t0 = Instant::now();
    while taken.len() < 5 && t0.elapsed() < Duration::from_secs(10) {
        let v: RV = redis::cmd("XREADGROUP")
            .arg(
                &[
                    "GROUP",
                    "workers",
                    "dies",
                    "COUNT",
                    "10",
                    "BLOCK",
                    "200",
                    "STREAMS",
                    "orders:due",
                    ">",
                ][..],
            )
            .query_async(&mut c)
            .await
            .unwrap();
        if let RV::Array(mut a) = v
            && !a.is_empty()
            && let RV::Array(mut s) = a.remove(0)
        {
            taken.extend(entries(s.remove(1)));
        }
    }
    assert_eq!(taken.len(), 5);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let v: RV = redis::cmd("XAUTOCLAIM")
        .arg(&["orders:due", "workers", "heir", "100", "0", "COUNT", "10"][..])
        .query_async(&mut c)
        .await
        .unwrap();
    let RV::Array(parts) = v else { panic!("{v:?}") };
    let claimed = entries(parts[1].clone());
    let ids = |e: &[Entry]| {
        let mut v: Vec<String> = e.iter().map(|(id, _)| id.clone()).collect();
        v.sort();
        v
    };
    assert_eq!(
        ids(&claimed),
        ids(&taken),
        "the dead consumer's entries reclaimed"
    );
}

/// Into another Redis (a pipeline, then the ack), as a list of envelopes
/// read by four BRPOP workers: every job once, in due order per worker,
/// none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_of_envelopes_for_a_brpop_pool_on_another_redis() {
    let (store, _dir) = support::embedded_store();
    let target = RedisServer::start();
    let d = dq(store, RedisSink::new()).await;
    let (s, v) = d
        .topic(
            "orders",
            json!({"delivery": {"mode": "redis_list", "url": target.url(), "list": "orders:ready", "payload": "envelope"}}),
        )
        .await;
    assert!(s == 200 || s == 201, "{v}");
    d.enqueue("orders", 400, 200, 2).await;
    let got = Arc::new(std::sync::Mutex::new(Vec::<(u64, Value)>::new()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let url = target.url();
            let got = got.clone();
            tokio::spawn(async move {
                let mut c = conn(&url).await;
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs(15) && got.lock().unwrap().len() < 400 {
                    let r: Option<(String, Vec<u8>)> = redis::cmd("BRPOP")
                        .arg("orders:ready")
                        .arg(0.2)
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    if let Some((_, v)) = r {
                        let env: Value = serde_json::from_slice(&v).unwrap();
                        got.lock().unwrap().push((now_ms(), env));
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let got = got.lock().unwrap().clone();
    let mut seen: HashMap<String, u32> = HashMap::new();
    for (at, env) in &got {
        let due = env["due_at_ms"].as_u64().unwrap();
        assert!(*at >= due, "{env} popped at {at}, before it was due");
        let id = env["id"].as_str().unwrap().to_string();
        let i: u64 = id[1..].parse().unwrap();
        assert_eq!(env["body"], json!({"n": i}));
        assert_eq!(env["attempt"], 1);
        *seen.entry(id).or_default() += 1;
    }
    assert_eq!(seen.len(), 400, "every job arrives");
    assert!(seen.values().all(|c| *c == 1), "none twice");
    wait_drained(&d, "orders", 400).await;
}

/// The target (another Redis, durable) stopped for 1.5 s while jobs come
/// due: the writes that fail are failed attempts retried with the topic's
/// backoff; after the restart every job arrives, none early, none lost.
/// Another Redis is at least once (docs/forwarding.md): a batch the target
/// wrote but whose reply the stop cut off is written again, so a job may
/// arrive twice — only a job of a batch in flight at the stop, each at most
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_stopped_and_restarted_mid_load_loses_nothing() {
    let (store, _dir) = support::embedded_store();
    let mut target = RedisServer::start_durable();
    let d = dq(store, RedisSink::new()).await;
    let (s, v) = d
        .topic(
            "orders",
            json!({"delivery": {"mode": "redis_stream", "url": target.url(), "stream": "due"},
                   "retry": {"fixed_ms": 200}, "max_attempts": 1000}),
        )
        .await;
    assert!(s == 200 || s == 201, "{v}");
    // 300 jobs due over 3 s; the target is down from 1 s to 2.5 s.
    d.enqueue("orders", 300, 100, 10).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    target.stop();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let during = d.stats("orders").await;
    target.restart();
    let mut got = read_group(&target.url(), "due", 300, Duration::from_secs(20)).await;
    wait_drained(&d, "orders", 300).await;
    // Every job is acked, so every write is in the stream: read what is left.
    got.extend(read_group(&target.url(), "due", usize::MAX, Duration::from_millis(500)).await);
    let seen = check_every_job_never_early(&got, 300);
    let twice = seen.values().filter(|c| **c > 1).count();
    assert!(
        twice <= dq_server::forwarder::BATCH && seen.values().all(|c| *c <= 2),
        "only a batch in flight at the stop is written again, once: {seen:?}"
    );
    let s = d.stats("orders").await;
    assert_eq!(s["dead"], 0, "{s}");
    assert!(
        during["counters"]["failed"].as_u64().unwrap() > 0,
        "writes failed while the target was down: {during}"
    );
    let metrics = reqwest::get(format!("{}/metrics", d.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("dq_forwarded_jobs_total{topic=\"orders\",outcome=\"written\"} 300"),
        "{metrics}"
    );
    assert!(metrics.contains("dq_forwarded_jobs_total{topic=\"orders\",outcome=\"retry\"}"));
}

/// Settings: the reply and the topic read never show the URL's password; a
/// redacted URL sent back, a bad scheme, an empty key, maxlen 0, a refused
/// address or a name that does not resolve are 400 `invalid_target` and
/// change nothing; a forwarding topic is not reserved
/// by consumers (409 `topic_is_push`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_checked_and_the_password_never_shown() {
    let (store, _dir) = support::embedded_store();
    let target = RedisServer::start_with_password("hunter2hunter2");
    let d = dq(store, RedisSink::new()).await;
    let (s, v) = d
        .topic(
            "fw",
            json!({"delivery": {"mode": "redis_stream", "url": target.url(), "stream": "s", "maxlen": 1000, "fields": "json"}}),
        )
        .await;
    assert!(s == 200 || s == 201, "{v}");
    assert!(!v.to_string().contains("hunter2"), "{v}");
    let shown = v["config"]["delivery"]["url"].as_str().unwrap().to_string();
    assert!(shown.contains("…"), "{shown}");
    let (_, read) = d
        .call(reqwest::Method::GET, "/v1/topics/fw", Value::Null)
        .await;
    assert!(!read.to_string().contains("hunter2"), "{read}");
    for (delivery, want) in [
        (
            json!({"mode": "redis_stream", "url": shown, "stream": "s"}),
            "redacted copy",
        ),
        (
            json!({"mode": "redis_stream", "url": "http://h", "stream": "s"}),
            "redis://",
        ),
        (
            json!({"mode": "redis_stream", "url": target.url(), "stream": ""}),
            "stream must be",
        ),
        (
            json!({"mode": "redis_stream", "url": target.url(), "stream": "s", "maxlen": 0}),
            "maxlen",
        ),
        (
            json!({"mode": "redis_list", "url": target.url(), "list": "l", "side": "middle"}),
            "",
        ),
        (
            json!({"mode": "redis_stream", "url": "redis://169.254.169.254:6379", "stream": "s"}),
            "",
        ),
        // A name that does not resolve now is refused: the Redis client
        // would resolve it later without the address guard.
        (
            json!({"mode": "redis_stream", "url": "redis://no-such-host.invalid:6379", "stream": "s"}),
            "cannot resolve",
        ),
    ] {
        let (s, v) = d.topic("fw", json!({ "delivery": delivery })).await;
        assert_eq!(s, 400, "{delivery}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(want),
            "{delivery}: {v}"
        );
    }
    let (_, after) = d
        .call(reqwest::Method::GET, "/v1/topics/fw", Value::Null)
        .await;
    assert_eq!(
        after["config"], read["config"],
        "refused changes wrote nothing"
    );
    let (s, v) = d
        .call(
            reqwest::Method::POST,
            "/v1/reserve",
            json!({"topics": ["fw"]}),
        )
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("topic_is_push")),
        "{v}"
    );

    // With the password, the job arrives as one `job` field of JSON.
    d.enqueue("fw", 1, 0, 0).await;
    let t0 = Instant::now();
    let mut c = conn(&target.url()).await;
    loop {
        let v: RV = redis::cmd("XRANGE")
            .arg(&["s", "-", "+"][..])
            .query_async(&mut c)
            .await
            .unwrap();
        let e = entries(v);
        if let Some((_, f)) = e.first() {
            let job: Value = serde_json::from_slice(&f["job"]).unwrap();
            assert_eq!(
                (job["id"].as_str(), job["topic"].as_str()),
                (Some("j0"), Some("fw"))
            );
            assert_eq!(job["body"], json!({"n": 0}));
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "nothing arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A job enqueued with a W3C trace context is forwarded with it: the
/// envelope's `traceparent` and `tracestate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_envelope_carries_the_jobs_trace_context() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (store, _dir) = support::embedded_store();
    let target = RedisServer::start();
    let d = dq(store, RedisSink::new()).await;
    let (s, v) = d
        .topic(
            "traced",
            json!({"delivery": {"mode": "redis_list", "url": target.url(), "list": "traced:ready", "payload": "envelope"}}),
        )
        .await;
    assert!(s == 200 || s == 201, "{v}");
    let res = reqwest::Client::new()
        .post(format!("{}/v1/topics/traced/jobs", d.base))
        .header("traceparent", TP)
        .header("tracestate", "rojo=1")
        .json(&json!({"id": "t1", "body": {"n": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let mut c = conn(&target.url()).await;
    let popped: Option<(String, Vec<u8>)> = redis::cmd("BRPOP")
        .arg("traced:ready")
        .arg(10)
        .query_async(&mut c)
        .await
        .unwrap();
    let (_, raw) = popped.expect("the job is forwarded");
    let env: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(
        (
            env["id"].clone(),
            env["traceparent"].clone(),
            env["tracestate"].clone()
        ),
        (json!("t1"), json!(TP), json!("rojo=1"))
    );
    assert_eq!(env["body"], json!({"n": 1}));
}
