//! Alerts to a webhook receiver and a real SMTP sink on loopback, once per
//! incident: jobs going dead (aggregated), dead letters over a threshold, the
//! store going down and coming back.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq_server::alerts::AlertConfig;
use dq_server::{Server, ServerConfig};
use dq_testkit::RedisServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A minimal SMTP server that accepts every message and keeps it.
async fn smtp_sink() -> (u16, Arc<Mutex<Vec<String>>>) {
    let mails: Arc<Mutex<Vec<String>>> = Arc::default();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let m = mails.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = l.accept().await {
            let m = m.clone();
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut lines = BufReader::new(r).lines();
                let _ = w.write_all(b"220 sink ESMTP\r\n").await;
                let mut data: Option<String> = None;
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(d) = data.as_mut() {
                        if line == "." {
                            m.lock().unwrap().push(data.take().unwrap());
                            let _ = w.write_all(b"250 queued\r\n").await;
                        } else {
                            d.push_str(&line);
                            d.push('\n');
                        }
                        continue;
                    }
                    let verb = line
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .to_ascii_uppercase();
                    let reply: &[u8] = match verb.as_str() {
                        "EHLO" => b"250-sink\r\n250 8BITMIME\r\n",
                        "HELO" | "MAIL" | "RCPT" | "RSET" | "NOOP" => b"250 ok\r\n",
                        "DATA" => {
                            data = Some(String::new());
                            b"354 go on\r\n"
                        }
                        "QUIT" => {
                            let _ = w.write_all(b"221 bye\r\n").await;
                            return;
                        }
                        _ => b"502 no\r\n",
                    };
                    let _ = w.write_all(reply).await;
                }
            });
        }
    });
    (port, mails)
}

async fn webhook_sink() -> (String, Arc<Mutex<Vec<Value>>>) {
    let got: Arc<Mutex<Vec<Value>>> = Arc::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/alerts",
        axum::routing::post(move |axum::Json(v): axum::Json<Value>| {
            let g = g.clone();
            async move {
                g.lock().unwrap().push(v);
                "ok"
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/alerts", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    (url, got)
}

fn kinds(got: &Arc<Mutex<Vec<Value>>>, kind: &str) -> Vec<Value> {
    got.lock()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == json!(kind))
        .cloned()
        .collect()
}

async fn wait_until(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_once_per_incident_to_webhook_and_email() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut redis = RedisServer::start();
    let (hook, got) = webhook_sink().await;
    let (smtp_port, mails) = smtp_sink().await;
    let store = dq_redis::RedisStore::new(&dq_redis::RedisConfig {
        url: redis.url(),
        response_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(300),
        clock: dq_redis::TimeSource::Caller,
        ..Default::default()
    })
    .unwrap();
    let server = Server::new(
        ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            alerts: AlertConfig {
                webhooks: vec![hook],
                smtp_url: Some(format!("smtp://127.0.0.1:{smtp_port}")),
                email_from: "dq@example.com".into(),
                email_to: vec!["ops@example.com".into()],
                dead_threshold: Some(2),
                min_interval: Duration::from_secs(3),
                check_every: Duration::from_millis(100),
            },
            ..Default::default()
        },
        Arc::new(store),
        Arc::new(dq_core::SystemClock),
    );
    let l = server.bind().await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(l, async move {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        let req = http.post(format!("{base}{path}")).json(&body);
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    http.put(format!("{base}/v1/topics/t"))
        .json(&json!({"max_attempts": 1}))
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Three jobs go dead together (their leases expire in the same dispatcher
    // pass): one aggregated alert, and one for the threshold.
    post(
        "/v1/topics/t/jobs:batch",
        json!({"jobs": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}),
    )
    .await;
    let leased = post(
        "/v1/reserve",
        json!({"topics": ["t"], "max": 3, "lease_ms": 100}),
    )
    .await;
    assert_eq!(leased["jobs"].as_array().unwrap().len(), 3);
    wait_until("the dead alerts", || {
        !kinds(&got, "jobs_dead").is_empty() && !kinds(&got, "dead_over_threshold").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let dead = kinds(&got, "jobs_dead");
    assert_eq!(dead.len(), 1, "aggregated: {dead:?}");
    assert_eq!(
        (dead[0]["topic"].clone(), dead[0]["count"].clone()),
        (json!("t"), json!(3))
    );
    assert_eq!(
        kinds(&got, "dead_over_threshold").len(),
        1,
        "once per incident"
    );
    wait_until("an e-mail", || {
        mails
            .lock()
            .unwrap()
            .iter()
            .any(|m| m.contains("jobs_dead"))
    })
    .await;
    assert!(
        mails
            .lock()
            .unwrap()
            .iter()
            .any(|m| m.contains("To: ops@example.com"))
    );

    // The store goes down, then comes back: one alert each.
    redis.stop();
    wait_until("store_down", || !kinds(&got, "store_down").is_empty()).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        kinds(&got, "store_down").len(),
        1,
        "once per incident, not per check"
    );
    redis.restart();
    wait_until("store_recovered", || {
        !kinds(&got, "store_recovered").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(kinds(&got, "store_recovered").len(), 1);
    assert_eq!(
        kinds(&got, "jobs_dead").len(),
        1,
        "no new deaths, no new alert"
    );
    let _ = stop.send(());
}

/// With shards, a `store_down` alert names the shard that stopped answering
/// (once), and `store_recovered` follows when it is back; the other shard
/// raises nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_alerts_name_the_shard() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let a = RedisServer::start();
    let mut b = RedisServer::start();
    let (hook, got) = webhook_sink().await;
    let shard = |url: String| {
        dq_redis::RedisStore::new(&dq_redis::RedisConfig {
            url,
            response_timeout: Duration::from_millis(300),
            connect_timeout: Duration::from_millis(200),
            clock: dq_redis::TimeSource::Caller,
            ..Default::default()
        })
        .unwrap()
    };
    let store = dq_redis::ShardedStore::new(vec![
        ("shard-a".into(), shard(a.url())),
        ("shard-b".into(), shard(b.url())),
    ]);
    let server = Server::new(
        ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            alerts: AlertConfig {
                webhooks: vec![hook],
                check_every: Duration::from_millis(100),
                ..Default::default()
            },
            ..Default::default()
        },
        Arc::new(store),
        Arc::new(dq_core::SystemClock),
    );
    let l = server.bind().await.unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(l, async move {
        let _ = stopped.await;
    }));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(kinds(&got, "store_down").is_empty());
    b.stop();
    wait_until("the shard-down alert", || {
        !kinds(&got, "store_down").is_empty()
    })
    .await;
    b.restart();
    wait_until("the recovery", || {
        !kinds(&got, "store_recovered").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let down = kinds(&got, "store_down");
    assert_eq!(down.len(), 1, "{down:?}");
    let msg = down[0]["message"].as_str().unwrap();
    assert!(msg.contains("shard-b") && !msg.contains("shard-a"), "{msg}");
    assert_eq!(kinds(&got, "store_recovered").len(), 1);
    drop(a);
}

/// With more topics than one round reads, deaths through another instance
/// are found by the rotation, those through this one at once; topics made
/// after the start count all their dead letters as news.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_jobs_among_many_topics_are_alerted() {
    use dq_core::{Body, Clock, JobId, Nack, NewJob, Store, Topic, When};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (hook, got) = webhook_sink().await;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(dq_embedded::EmbeddedStore::open(dir.path().join("data")).unwrap());
    let now = dq_core::SystemClock.now_ms();
    let job = |id: &str| {
        NewJob::new(
            JobId::new(id).unwrap(),
            Body::Json("{}".into()),
            When::DelayMs(0),
        )
    };
    let topic = |i: usize| Topic::new(format!("t{i:04}")).unwrap();
    let server = Server::new(
        ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            alerts: AlertConfig {
                webhooks: vec![hook],
                min_interval: Duration::ZERO,
                check_every: Duration::from_millis(100),
                ..Default::default()
            },
            ..Default::default()
        },
        store.clone(),
        Arc::new(dq_core::SystemClock),
    );
    let l = server.bind().await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(l, async move {
        let _ = stopped.await;
    }));
    // The baseline round (no topics yet), then more than a round (500) of
    // topics, made after it: each of their dead letters is news.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..1200 {
        store.enqueue(&topic(i), &[job("j")], now).await.unwrap();
    }
    let bury = async |t: &Topic| {
        let r = store
            .reserve(t, 1, None, dq_core::SystemClock.now_ms())
            .await
            .unwrap();
        let l = &r.leases[0];
        let nack = Nack {
            token: &l.token,
            error: "no",
            retry_in_ms: None,
            dead: true,
            priority: None,
        };
        store
            .nack(t, &l.id, nack, dq_core::SystemClock.now_ms())
            .await
            .unwrap();
    };
    let alerted = |t: &str| {
        kinds(&got, "jobs_dead")
            .iter()
            .any(|a| a["topic"] == json!(t) && a["count"] == json!(1))
    };
    // Through this instance: alerted in the round after the baseline
    // round (so once it came, the baseline is taken).
    let http = reqwest::Client::new();
    let leased: Value = http
        .post(format!("{base}/v1/reserve"))
        .json(&json!({"topics": ["t0007"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let j = &leased["jobs"][0];
    let s = http
        .post(format!(
            "{base}/v1/topics/t0007/jobs/{}/nack",
            j["id"].as_str().unwrap()
        ))
        .json(&json!({"token": j["token"], "dead": true}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(s, 200);
    wait_until("the alert of t0007", || alerted("t0007")).await;
    // Through "another instance" (the store itself), the last topic.
    bury(&topic(1199)).await;
    // A topic made after the start.
    store.enqueue(&topic(1200), &[job("j")], now).await.unwrap();
    bury(&topic(1200)).await;
    let t0 = Instant::now();
    while !(alerted("t1199") && alerted("t1200") && alerted("t0007")) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "not all three alerted: {:?}",
            kinds(&got, "jobs_dead")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        kinds(&got, "jobs_dead").len(),
        3,
        "{:?}",
        kinds(&got, "jobs_dead")
    );
    let _ = stop.send(());
}
