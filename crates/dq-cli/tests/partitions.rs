//! Partitions, not crashes (issue #53 item 2): a Redis that stops answering
//! without closing the connection (packets dropped), through a proxy each
//! test starts and partitions ([`dq_testkit::TcpProxy`]), in front of the
//! real `dq serve`:
//!
//! - one Redis cut off: every call answers 503 `store_unavailable` with
//!   `Retry-After` within `--redis-timeout` (and a slack for a loaded
//!   machine), a reserve waiting when it began returns by its wait, and
//!   when the network is back everything works again without a restart:
//!   enqueues, the jobs from before, and wake-ups across instances.
//! - one of three shards cut off: the others keep serving (a reserve of a
//!   topic on a live shard and one on the cut-off shard hands out the
//!   first's jobs; enqueues to live shards are taken), and the cut-off
//!   shard's jobs come back with it.
//! - a Cluster master cut off (frozen with SIGSTOP: a proxy in front of a
//!   Cluster node is bypassed, see [`RedisServer::freeze`]) for 6 s, past
//!   the Cluster's failover: every call answers within the bound, the other
//!   masters' topics keep serving; when the node answers again its topic
//!   serves again and the job from before is handed out. (dq does not
//!   follow the failover while the old master is silent: see
//!   docs/reliability.md.)
//!
//! Each test takes under 30 s.

mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use dq_testkit::redis::RedisServer;
use dq_testkit::{RedisCluster, TcpProxy};
use serde_json::{Value, json};
use support::Dq;

/// The response timeout the tests give `dq serve`.
const TIMEOUT: Duration = Duration::from_secs(2);

/// What a call may take beyond [`TIMEOUT`] on a loaded machine: less than
/// a second timeout, so a call that waited twice is caught.
const SLACK: Duration = Duration::from_millis(1500);

/// Runs `f`, and how long it took.
async fn timed<T>(f: impl Future<Output = T>) -> (Duration, T) {
    let start = Instant::now();
    let out = f.await;
    (start.elapsed(), out)
}

/// Asserts a 503 `store_unavailable` with `Retry-After`, answered within
/// `limit`.
fn assert_unavailable(
    what: &str,
    took: Duration,
    limit: Duration,
    r: &(u16, Value, Option<String>),
) {
    let (s, v, retry_after) = r;
    assert_eq!(
        (*s, v["error"]["code"].as_str()),
        (503, Some("store_unavailable")),
        "{what}: {v}"
    );
    assert_eq!(retry_after.as_deref(), Some("1"), "{what}: Retry-After");
    assert!(took <= limit, "{what} took {took:?}, more than {limit:?}");
}

/// The ids of a reserve's jobs.
fn ids(v: &Value) -> Vec<String> {
    v["jobs"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|j| j["id"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Enqueues `id` to `topic` until it is taken (201, or 200: a retry of a
/// write the partition held back), within `limit`.
async fn enqueue_until_taken(dq: &Dq, topic: &str, id: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let (s, v) = dq
            .post(
                &format!("/v1/topics/{topic}/jobs"),
                json!({"id": id, "body": 1}),
            )
            .await;
        if s == 201 || s == 200 {
            return;
        }
        assert_eq!(s, 503, "{v}");
        assert!(Instant::now() < deadline, "never taken again: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A reserve, again until it is answered with 200 (within 15 s: calls that
/// timed out just before the network came back may mark the store down for
/// a second more).
async fn reserve_until_answered(dq: &Dq, body: Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (s, v) = dq.post("/v1/reserve", body.clone()).await;
        if s == 200 {
            return v;
        }
        assert_eq!(s, 503, "{v}");
        assert!(
            Instant::now() < deadline,
            "reserves never answered again: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn timeout_arg() -> String {
    format!("{}ms", TIMEOUT.as_millis())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_redis_cut_off_answers_503_within_its_timeout_and_recovers() {
    let redis = RedisServer::start();
    let proxy = TcpProxy::start(redis.port());
    let url = proxy.redis_url();
    let timeout = timeout_arg();
    let args = ["--redis", url.as_str(), "--redis-timeout", timeout.as_str()];
    let a = Dq::start_with(&args).await;
    let b = Dq::start_with(&args).await;
    let (s, v) = a
        .post("/v1/topics/t/jobs", json!({"id": "a", "body": 1}))
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = a
        .post("/v1/reserve", json!({"topics": ["idle"], "wait_ms": 0}))
        .await;
    assert_eq!(s, 200, "{v}");

    // A consumer waiting when the network goes.
    let waiting = {
        let http = a.http.clone();
        let base = a.base.clone();
        tokio::spawn(timed(async move {
            http.post(format!("{base}/v1/reserve"))
                .json(&json!({"topics": ["idle"], "wait_ms": 3000}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        }))
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(proxy.forwarded() > 0, "dq talks to Redis through the proxy");
    proxy.blackhole();

    let limit = TIMEOUT + SLACK;
    let (took, r) = timed(a.call(
        reqwest::Method::POST,
        "/v1/topics/t/jobs",
        Some(json!({"id": "b", "body": 1})),
    ))
    .await;
    assert_unavailable("enqueue", took, limit, &r);
    let (took, r) = timed(a.call(reqwest::Method::GET, "/v1/topics/t/jobs/a", None)).await;
    assert_unavailable("get", took, limit, &r);
    let (took, r) = timed(a.call(
        reqwest::Method::POST,
        "/v1/reserve",
        Some(json!({"topics": ["t"], "wait_ms": 1000})),
    ))
    .await;
    assert_unavailable("reserve", took, limit + Duration::from_secs(1), &r);
    let (took, r) = timed(a.call(reqwest::Method::GET, "/readyz", None)).await;
    assert_unavailable("readyz", took, limit, &r);
    let (took, status) = waiting.await.unwrap();
    let status = status.expect("the waiting reserve is answered");
    assert!(
        status == 200 || status == 503,
        "the waiting reserve: {status}"
    );
    assert!(
        took <= Duration::from_secs(3) + limit,
        "a reserve waiting 3 s took {took:?}"
    );

    // The network is back: no restart, the same connections.
    proxy.resume();
    enqueue_until_taken(&a, "t", "b", Duration::from_secs(15)).await;
    let v = reserve_until_answered(&a, json!({"topics": ["t"], "max": 10})).await;
    let mut got = ids(&v);
    got.sort();
    assert_eq!(got, ["a", "b"], "{v}");
    // Wake-ups across instances still arrive: a reserve waiting on `a`
    // gets a job enqueued through `b` long before its wait ends.
    let waiting = {
        let http = a.http.clone();
        let base = a.base.clone();
        tokio::spawn(async move {
            http.post(format!("{base}/v1/reserve"))
                .json(&json!({"topics": ["w"], "wait_ms": 20000}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, v) = b
        .post("/v1/topics/w/jobs", json!({"id": "w1", "body": 1}))
        .await;
    assert_eq!(s, 201, "{v}");
    let (took, v) = timed(waiting).await;
    let v = v.unwrap();
    assert_eq!(ids(&v), ["w1"], "woken by the other instance: {v}");
    assert!(took < Duration::from_secs(15), "{took:?}");
}

/// Which of `n` shards holds partition `part` (the routing `dq serve` uses).
fn shard_of(urls: &[String], part: &str) -> usize {
    let shards = urls
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let config = dq_redis::RedisConfig {
                url: u.clone(),
                ..Default::default()
            };
            (
                format!("shard {i}"),
                dq_redis::RedisStore::new(&config).unwrap(),
            )
        })
        .collect();
    let part = dq_core::Topic::new(part.to_string()).unwrap();
    dq_redis::ShardedStore::new(shards).shard_of_partition(&part)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shard_cut_off_leaves_the_others_serving() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let proxies: Vec<TcpProxy> = servers.iter().map(|s| TcpProxy::start(s.port())).collect();
    let urls: Vec<String> = proxies.iter().map(TcpProxy::redis_url).collect();
    let shards = urls.join(",");
    let timeout = timeout_arg();
    let dq = Dq::start_with(&["--redis-shards", &shards, "--redis-timeout", &timeout]).await;
    let live = (0..)
        .map(|i| format!("live{i}"))
        .find(|n| shard_of(&urls, n) != 0)
        .unwrap();
    let cut = (0..)
        .map(|i| format!("cut{i}"))
        .find(|n| shard_of(&urls, n) == 0)
        .unwrap();
    for t in [&live, &cut] {
        let (s, v) = dq
            .post(
                &format!("/v1/topics/{t}/jobs"),
                json!({"id": "a", "body": 1}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
    }

    proxies[0].blackhole();
    let limit = TIMEOUT + SLACK;
    // A reserve of both topics hands out the live one's job.
    let (took, r) = timed(dq.call(
        reqwest::Method::POST,
        "/v1/reserve",
        Some(json!({"topics": [live, cut], "max": 10, "wait_ms": 0})),
    ))
    .await;
    assert_eq!(r.0, 200, "{}", r.1);
    assert_eq!(ids(&r.1), ["a"], "{}", r.1);
    assert_eq!(r.1["jobs"][0]["topic"], live.as_str(), "{}", r.1);
    assert!(took <= limit, "the reserve took {took:?}");
    // Enqueues to the live shards are taken, each within the bound.
    for i in 0..20 {
        let (took, r) = timed(dq.call(
            reqwest::Method::POST,
            &format!("/v1/topics/{live}/jobs"),
            Some(json!({"id": format!("l{i}"), "body": i})),
        ))
        .await;
        assert_eq!(r.0, 201, "{}", r.1);
        assert!(took <= limit, "enqueue {i} to a live shard took {took:?}");
    }
    let (s, v) = dq.get(&format!("/v1/topics/{live}")).await;
    assert_eq!(s, 200, "{v}");
    // The cut-off shard's topic: 503 with Retry-After, within the bound.
    let (took, r) = timed(dq.call(
        reqwest::Method::POST,
        &format!("/v1/topics/{cut}/jobs"),
        Some(json!({"id": "b", "body": 1})),
    ))
    .await;
    assert_unavailable("enqueue to the cut-off shard", took, limit, &r);

    // Back: its jobs with it.
    proxies[0].resume();
    enqueue_until_taken(&dq, &cut, "b", Duration::from_secs(15)).await;
    let v = reserve_until_answered(&dq, json!({"topics": [cut], "max": 10})).await;
    let mut got = ids(&v);
    got.sort();
    assert_eq!(got, ["a", "b"], "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_cut_off_leaves_the_other_masters_serving_and_recovers() {
    let cluster = RedisCluster::start(3, 1);
    let seeds = cluster.urls().join(",");
    let timeout = timeout_arg();
    let dq = Dq::start_with(&["--redis-cluster", &seeds, "--redis-timeout", &timeout]).await;
    let victim = cluster.master_of("{cut}");
    let live = (0..)
        .map(|i| format!("live{i}"))
        .find(|n| cluster.master_of(&format!("{{{n}}}")) != victim)
        .unwrap();
    for t in ["cut", live.as_str()] {
        let (s, v) = dq
            .post(
                &format!("/v1/topics/{t}/jobs"),
                json!({"id": "a", "body": 1}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
    }
    // The job is on the replica before its master goes.
    let replicated: i64 = ::redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut cluster.nodes[victim].connection())
        .unwrap();
    assert_eq!(replicated, 1);

    cluster.nodes[victim].freeze();
    let frozen_at = Instant::now();
    let limit = TIMEOUT + SLACK;
    // Past the Cluster's failover (node timeout 1 s): the topic's calls get
    // 503 within the bound; the other masters' topic is served all along.
    let mut calls = 0;
    while frozen_at.elapsed() < Duration::from_secs(6) {
        calls += 1;
        let (took, r) = timed(dq.call(
            reqwest::Method::POST,
            "/v1/topics/cut/jobs",
            Some(json!({"id": format!("c{calls}"), "body": 1})),
        ))
        .await;
        assert!(r.0 == 201 || r.0 == 503, "{}", r.1);
        if r.0 == 503 {
            assert_unavailable("enqueue to the cut-off master", took, limit, &r);
        }
        let (took, r) = timed(dq.call(
            reqwest::Method::POST,
            &format!("/v1/topics/{live}/jobs"),
            Some(json!({"id": format!("l{calls}"), "body": 1})),
        ))
        .await;
        assert_eq!(r.0, 201, "the other masters serve: {}", r.1);
        assert!(took <= limit, "an enqueue to a live master took {took:?}");
    }

    // The network back: the old master answers (as a replica now), dq
    // learns where the slot went, and the job enqueued before is handed out.
    cluster.nodes[victim].thaw();
    enqueue_until_taken(&dq, "cut", "after", Duration::from_secs(20)).await;
    let v = reserve_until_answered(&dq, json!({"topics": ["cut"], "max": 100})).await;
    assert!(ids(&v).contains(&"a".to_string()), "{v}");
}
