//! Flow control through the built binary (issue #18): a push topic's rate
//! limit and its key concurrency, each shared by two `dq serve` on one
//! Redis, as its receiver sees them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dq_testkit::RedisServer;
use serde_json::{Value, json};

mod support;
use support::Dq;

/// Serves `app` on a free port (its `/hook` is the push URL) and starts
/// two `dq serve` on one new Redis.
async fn receiver_and_two_instances(app: axum::Router) -> (String, RedisServer, Dq, Dq) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    let redis = RedisServer::start();
    let a = Dq::start(&redis.url()).await;
    let b = Dq::start(&redis.url()).await;
    (url, redis, a, b)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// 500 jobs due at once on a push topic limited to 50/s with a burst of
/// 10, delivered by two `dq serve` on one Redis: the receiver gets every
/// job once, none before its due time, and never more than 50 + 10 in any
/// 1 s window (give or take the deliveries' own jitter, see below) — the
/// two instances draw from one bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_topic_rate_limited_to_50_per_second() {
    // (arrival ms, id, due ms) of every delivery.
    let got: Arc<Mutex<Vec<(u64, String, u64)>>> = Arc::default();
    let app = {
        let got = got.clone();
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move |h: axum::http::HeaderMap, body: axum::body::Bytes| {
                let got = got.clone();
                async move {
                    let at = now_ms();
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    let id = h["webhook-id"].to_str().unwrap().to_string();
                    got.lock()
                        .unwrap()
                        .push((at, id, v["due"].as_u64().unwrap()));
                    axum::http::StatusCode::OK
                }
            }),
        )
    };
    let (url, _redis, a, b) = receiver_and_two_instances(app).await;
    let (s, v, _) = a
        .call(
            reqwest::Method::PUT,
            "/v1/topics/limited",
            Some(json!({
                "delivery": {"mode": "push", "url": url},
                "rate_limit": {"limit": 50, "per_ms": 1000, "burst": 10},
            })),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let due = now_ms() + 1500;
    let jobs: Vec<Value> = (0..500)
        .map(|i| json!({"id": format!("j{i:03}"), "due_at_ms": due, "body": {"due": due}}))
        .collect();
    let (s, v) = b
        .post("/v1/topics/limited/jobs:batch", json!({ "jobs": jobs }))
        .await;
    assert_eq!(s, 200, "{v}");

    let t0 = Instant::now();
    while got.lock().unwrap().len() < 500 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{} of 500 delivered",
            got.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut got = got.lock().unwrap().clone();
    got.sort();
    let mut ids: Vec<&str> = got.iter().map(|g| g.1.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 500, "each job once");
    assert!(got.iter().all(|(at, _, due)| at >= due), "none early");
    let arrivals: Vec<u64> = got.iter().map(|g| g.0).collect();
    let most = arrivals
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            arrivals[i..]
                .iter()
                .take_while(|&&t| t < start + 1000)
                .count()
        })
        .max()
        .unwrap();
    // The store hands out at most 10 + 50 in any 1 s (the manual-clock
    // conformance scenarios check that exactly); arrivals add the jitter of
    // HTTP deliveries: the burst's 10 open new connections and arrive some
    // 20 ms later than the steady ones that follow, a token's worth (one
    // token per 20 ms). Seen: 61.
    assert!(most <= 62, "{most} deliveries within one second");
    let span = arrivals[499] - arrivals[0];
    // 10 at once, then 490 at 50/s: 9.8 s.
    assert!(
        span >= 9_500,
        "the limit held for the whole backlog: {span} ms"
    );
    eprintln!("most in 1 s: {most}; 500 delivered over {span} ms");
    let metrics = a.get_text("/metrics").await;
    assert!(
        metrics.contains("dq_topic_rate_limited_total{topic=\"limited\"}"),
        "{metrics}"
    );
}

/// A push topic with `key_concurrency` 2, delivered by two `dq serve` on
/// one Redis to a receiver that takes 300 ms per request: key `big` (20
/// jobs) never has more than 2 requests in flight at the receiver, the 10
/// other keys (one job each) are not held behind it (all of them arrive
/// before `big`'s third job), every job arrives once and none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_topic_key_concurrency_across_two_instances() {
    #[derive(Default)]
    struct Seen {
        in_flight: std::collections::HashMap<String, usize>,
        most: std::collections::HashMap<String, usize>,
        // (arrival ms, id, key, due ms)
        arrivals: Vec<(u64, String, String, u64)>,
    }
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let app = {
        let seen = seen.clone();
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move |h: axum::http::HeaderMap, body: axum::body::Bytes| {
                let seen = seen.clone();
                async move {
                    let at = now_ms();
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    let key = v["key"].as_str().unwrap().to_string();
                    let id = h["webhook-id"].to_str().unwrap().to_string();
                    {
                        let mut s = seen.lock().unwrap();
                        let n = {
                            let n = s.in_flight.entry(key.clone()).or_default();
                            *n += 1;
                            *n
                        };
                        let most = s.most.entry(key.clone()).or_default();
                        *most = (*most).max(n);
                        s.arrivals
                            .push((at, id, key.clone(), v["due"].as_u64().unwrap()));
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    *seen.lock().unwrap().in_flight.get_mut(&key).unwrap() -= 1;
                    axum::http::StatusCode::OK
                }
            }),
        )
    };
    let (url, _redis, a, b) = receiver_and_two_instances(app).await;
    let (s, v, _) = a
        .call(
            reqwest::Method::PUT,
            "/v1/topics/tenants",
            Some(json!({
                "delivery": {"mode": "push", "url": url, "concurrency": 16},
                "key_concurrency": 2,
            })),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let due = now_ms() + 1500;
    let mut jobs: Vec<Value> = (0..20)
        .map(|i| json!({"id": format!("big-{i:02}"), "key": "big", "due_at_ms": due, "body": {"due": due, "key": "big"}}))
        .collect();
    jobs.extend((0..10).map(|i| {
        let key = format!("k{i}");
        json!({"id": format!("{key}-0"), "key": key, "due_at_ms": due, "body": {"due": due, "key": key}})
    }));
    let (s, v) = b
        .post("/v1/topics/tenants/jobs:batch", json!({ "jobs": jobs }))
        .await;
    assert_eq!(s, 200, "{v}");

    let t0 = Instant::now();
    while seen.lock().unwrap().arrivals.len() < 30 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{} of 30 delivered",
            seen.lock().unwrap().arrivals.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = seen.lock().unwrap();
    let mut ids: Vec<&str> = s.arrivals.iter().map(|a| a.1.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 30, "each job once");
    assert!(
        s.arrivals.iter().all(|(at, _, _, due)| at >= due),
        "none early"
    );
    assert_eq!(s.most["big"], 2, "at most 2 of key big in flight");
    let mut bigs: Vec<u64> = s
        .arrivals
        .iter()
        .filter(|a| a.2 == "big")
        .map(|a| a.0)
        .collect();
    bigs.sort();
    let last_small = s
        .arrivals
        .iter()
        .filter(|a| a.2 != "big")
        .map(|a| a.0)
        .max()
        .unwrap();
    assert!(
        last_small < bigs[2],
        "the other keys went first: last of them at {last_small}, big's third at {}",
        bigs[2]
    );
    // 20 jobs, 2 at a time, 300 ms each: about 3 s.
    let span = bigs[19] - bigs[0];
    assert!(
        span >= 2_700,
        "the limit held for the whole backlog: {span} ms"
    );
    eprintln!("big: 20 over {span} ms, most in flight {}", s.most["big"]);
}
