//! Push delivery against real HTTP receivers on loopback ports, with a real
//! `Server` (embedded store on a temp dir).

mod support;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use dq_server::ServerConfig;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Got {
    at: Instant,
    headers: HeaderMap,
    body: Bytes,
}

/// Statuses to answer, each with an optional Retry-After.
type Answers = Arc<Mutex<VecDeque<(u16, Option<&'static str>)>>>;

/// A callback receiver: answers with the queued statuses (then 200), after
/// an optional delay, and records every request.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
    answers: Answers,
    delay: Arc<Mutex<Duration>>,
}

impl Receiver {
    async fn start(&self) -> String {
        let me = self.clone();
        let app = Router::new().route(
            "/hook",
            axum::routing::any(move |headers: HeaderMap, body: Bytes| {
                let me = me.clone();
                async move {
                    me.got.lock().unwrap().push(Got {
                        at: Instant::now(),
                        headers,
                        body,
                    });
                    let delay = *me.delay.lock().unwrap();
                    tokio::time::sleep(delay).await;
                    let (status, retry_after) = me
                        .answers
                        .lock()
                        .unwrap()
                        .pop_front()
                        .unwrap_or((200, None));
                    let mut res = (StatusCode::from_u16(status).unwrap(), "ok").into_response();
                    if let Some(r) = retry_after {
                        res.headers_mut().insert("retry-after", r.parse().unwrap());
                    }
                    res
                }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        url
    }

    fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }
}

struct Dq {
    running: support::Running,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Dq {
    type Target = support::Running;
    fn deref(&self) -> &support::Running {
        &self.running
    }
}

async fn dq(deny_private: bool) -> Dq {
    let (store, dir) = support::embedded_store();
    let running = support::serve(
        store,
        ServerConfig {
            push_deny_private: deny_private,
            ..Default::default()
        },
    )
    .await;
    Dq { running, _dir: dir }
}

impl Dq {
    async fn push_topic(&self, topic: &str, delivery: Value, extra: Value) -> (u16, Value) {
        let mut body = json!({"delivery": delivery});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        self.call(reqwest::Method::PUT, &format!("/v1/topics/{topic}"), body)
            .await
    }

    async fn wait_for(&self, topic: &str, what: &str, pred: impl Fn(&Value) -> bool) {
        let t0 = Instant::now();
        loop {
            let s = self.stats(topic).await;
            if pred(&s) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "timed out waiting for {what}: {s}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    let id = headers["webhook-id"].to_str().unwrap();
    let ts = headers["webhook-timestamp"].to_str().unwrap();
    let key = B64.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    let want = format!("v1,{}", B64.encode(mac.finalize().into_bytes()));
    headers["webhook-signature"]
        .to_str()
        .unwrap()
        .split(' ')
        .any(|s| s == want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_signed_and_acks_after_2xx() {
    let r = Receiver::default();
    let url = r.start().await;
    let d = dq(false).await;
    let (s, v) = d
        .push_topic(
            "orders",
            json!({"mode": "push", "url": url, "secrets": [SECRET], "headers": {"X-Team": "shop"}}),
            json!({}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["config"]["max_attempts"],
        json!(10),
        "push default attempts"
    );
    assert_eq!(
        v["config"]["retry"]["delays_ms"][1],
        json!(180_000),
        "push default retry waits"
    );
    let (s, _) = d
        .call(reqwest::Method::POST, "/v1/topics/orders/jobs:batch", json!({"jobs": [
            {"id": "a", "body": {"order": 1}}, {"id": "b", "body": {"order": 2}, "delay_ms": 300}
        ]}))
        .await;
    assert_eq!(s, 200);
    d.wait_for("orders", "2 acks", |s| s["counters"]["acked"] == json!(2))
        .await;
    let (s, v) = d
        .call(
            reqwest::Method::POST,
            "/v1/reserve",
            json!({"topics": ["orders"]}),
        )
        .await;
    assert_eq!(
        (s, v["error"]["code"].clone()),
        (409, json!("topic_is_push")),
        "pull consumers cannot take push jobs"
    );
    // Each delivery is measured once, by outcome (recorded just after the ack).
    let want = "dq_push_delivery_duration_seconds_count{topic=\"orders\",outcome=\"acked\"} 2\n";
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = reqwest::Client::new()
            .get(format!("{}/metrics", d.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metrics.contains(want) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(metrics.contains(want), "{metrics}");
    assert!(!metrics.contains("outcome=\"retry\""), "{metrics}");
    // The deliverer's own reserves are not consumers waiting for work.
    assert!(
        metrics.contains("\ndq_reserve_in_progress 0\n"),
        "{metrics}"
    );
    let got = r.got();
    assert_eq!(got.len(), 2, "each job delivered once");
    for g in &got {
        let id = g.headers["dq-job-id"].to_str().unwrap();
        assert_eq!(g.headers["dq-topic"], "orders");
        assert_eq!(g.headers["dq-attempt"], "1");
        assert_eq!(
            g.headers["webhook-id"].to_str().unwrap(),
            format!("orders/{id}")
        );
        assert_eq!(g.headers["x-team"], "shop");
        assert_eq!(g.headers["content-type"], "application/json");
        assert!(verify(SECRET, &g.headers, &g.body), "signature verifies");
        let body: Value = serde_json::from_slice(&g.body).unwrap();
        assert_eq!(body["order"], json!(if id == "a" { 1 } else { 2 }));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_retry_with_backoff_and_410_is_dead() {
    let r = Receiver::default();
    r.answers
        .lock()
        .unwrap()
        .extend([(500, None), (503, Some("1"))]);
    let url = r.start().await;
    let d = dq(false).await;
    let (s, v) = d
        .push_topic(
            "hooks",
            json!({"mode": "push", "url": url}),
            json!({"retry": {"fixed_ms": 200}, "max_attempts": 5}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["config"]["max_attempts"], json!(5), "own settings kept");
    d.call(
        reqwest::Method::POST,
        "/v1/topics/hooks/jobs",
        json!({"id": "h"}),
    )
    .await;
    d.wait_for("hooks", "the ack", |s| s["counters"]["acked"] == json!(1))
        .await;
    let got = r.got();
    assert_eq!(got.len(), 3);
    let attempts: Vec<&str> = got
        .iter()
        .map(|g| g.headers["dq-attempt"].to_str().unwrap())
        .collect();
    assert_eq!(attempts, vec!["1", "2", "3"]);
    assert!(
        got.iter().all(|g| g.headers["webhook-id"] == "hooks/h"),
        "stable webhook-id"
    );
    assert!(
        got[1].at - got[0].at >= Duration::from_millis(200),
        "backoff after 500"
    );
    assert!(
        got[2].at - got[1].at >= Duration::from_millis(1000),
        "Retry-After honoured after 503"
    );

    // 410: dead at once.
    r.answers.lock().unwrap().push_back((410, None));
    d.call(
        reqwest::Method::POST,
        "/v1/topics/hooks/jobs",
        json!({"id": "gone"}),
    )
    .await;
    d.wait_for("hooks", "a dead letter", |s| s["dead"] == json!(1))
        .await;
    let (_, dead) = d
        .call(reqwest::Method::GET, "/v1/topics/hooks/dead", Value::Null)
        .await;
    assert_eq!(dead["jobs"][0]["id"], json!("gone"));
    assert_eq!(dead["jobs"][0]["attempts"], json!(1));
    assert!(
        dead["jobs"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains("410")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_down_receivers_are_retried_nothing_lost() {
    let d = dq(false).await;
    // Nothing listens on this port: connection refused until a receiver appears.
    let port = dq_testkit::free_port();
    let (s, v) = d
        .push_topic("down", json!({"mode": "push", "url": format!("http://127.0.0.1:{port}/hook"), "timeout_ms": 300}), json!({"retry": {"fixed_ms": 100}, "max_attempts": 50}))
        .await;
    assert_eq!(s, 200, "{v}");
    d.call(
        reqwest::Method::POST,
        "/v1/topics/down/jobs:batch",
        json!({"jobs": [{"id": "1"}, {"id": "2"}, {"id": "3"}]}),
    )
    .await;
    d.wait_for("down", "failed attempts", |s| {
        s["counters"]["failed"].as_u64().unwrap_or(0) >= 3
    })
    .await;
    let (_, job) = d
        .call(reqwest::Method::GET, "/v1/topics/down/jobs/1", Value::Null)
        .await;
    assert!(
        job["last_error"].as_str().unwrap().contains("unreachable"),
        "{job}"
    );

    // A slow receiver: timed out, retried.
    let slow = Receiver::default();
    *slow.delay.lock().unwrap() = Duration::from_millis(600);
    let url = slow.start().await;
    d.push_topic(
        "slow",
        json!({"mode": "push", "url": url, "timeout_ms": 300}),
        json!({"retry": {"fixed_ms": 100}, "max_attempts": 2}),
    )
    .await;
    d.call(
        reqwest::Method::POST,
        "/v1/topics/slow/jobs",
        json!({"id": "s"}),
    )
    .await;
    d.wait_for("slow", "dead after two timeouts", |s| s["dead"] == json!(1))
        .await;
    let (_, job) = d
        .call(reqwest::Method::GET, "/v1/topics/slow/jobs/s", Value::Null)
        .await;
    assert!(
        job["last_error"].as_str().unwrap().contains("timed out"),
        "{job}"
    );

    // The receiver comes up on the port: every job is delivered, none lost.
    let r = Receiver::default();
    {
        let me = r.clone();
        let app = Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let me = me.clone();
                async move {
                    me.got.lock().unwrap().push(Got {
                        at: Instant::now(),
                        headers,
                        body,
                    });
                    StatusCode::NO_CONTENT
                }
            }),
        );
        let l = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        tokio::spawn(async move { axum::serve(l, app).await });
    }
    d.wait_for("down", "3 acks", |s| s["counters"]["acked"] == json!(3))
        .await;
    let mut ids: Vec<String> = r
        .got()
        .iter()
        .map(|g| g.headers["dq-job-id"].to_str().unwrap().to_string())
        .collect();
    ids.sort();
    assert_eq!(ids, vec!["1", "2", "3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_topic_does_not_delay_another() {
    let slow = Receiver::default();
    *slow.delay.lock().unwrap() = Duration::from_millis(1500);
    let slow_url = slow.start().await;
    let fast = Receiver::default();
    let fast_url = fast.start().await;
    let d = dq(false).await;
    d.push_topic(
        "slow",
        json!({"mode": "push", "url": slow_url, "concurrency": 1, "timeout_ms": 5000}),
        json!({}),
    )
    .await;
    d.push_topic("fast", json!({"mode": "push", "url": fast_url}), json!({}))
        .await;
    let slow_jobs: Vec<Value> = (0..5).map(|i| json!({"id": format!("s{i}")})).collect();
    d.call(
        reqwest::Method::POST,
        "/v1/topics/slow/jobs:batch",
        json!({ "jobs": slow_jobs }),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let t0 = Instant::now();
    d.call(
        reqwest::Method::POST,
        "/v1/topics/fast/jobs",
        json!({"id": "f", "delay_ms": 200}),
    )
    .await;
    d.wait_for("fast", "the fast ack", |s| {
        s["counters"]["acked"] == json!(1)
    })
    .await;
    let took = fast.got()[0].at - t0;
    assert!(
        took < Duration::from_millis(700),
        "fast topic delivered on time while slow one is busy: {took:?}"
    );
    assert!(slow.got().len() <= 2, "slow topic respects concurrency 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssrf_guard_refuses_metadata_and_optionally_private() {
    let d = dq(false).await;
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/x",
        "http://0.0.0.0/x",
    ] {
        let (s, v) = d
            .push_topic("x", json!({"mode": "push", "url": url}), json!({}))
            .await;
        assert_eq!(
            (s, v["error"]["code"].clone()),
            (400, json!("invalid_callback")),
            "{url}: {v}"
        );
    }
    // Taken: loopback (allowed by default), and a name that does not
    // resolve yet (saved with a warning in the log; each delivery resolves
    // it again).
    for url in ["http://127.0.0.1:9/x", "http://no-such-host.invalid/"] {
        let (s, v) = d
            .push_topic("x", json!({"mode": "push", "url": url}), json!({}))
            .await;
        assert_eq!(s, 200, "{url}: {v}");
    }
    let strict = dq(true).await;
    let (s, v) = strict
        .push_topic(
            "x",
            json!({"mode": "push", "url": "http://localhost:9/x"}),
            json!({}),
        )
        .await;
    assert_eq!(
        (s, v["error"]["code"].clone()),
        (400, json!("invalid_callback")),
        "{v}"
    );
    assert!(v["error"]["message"].as_str().unwrap().contains("loopback"));
}

/// The signature verifies with the Standard Webhooks reference library
/// (`standardwebhooks` from PyPI, installed by this test into the target
/// directory when missing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signature_verifies_with_the_standardwebhooks_library() {
    let r = Receiver::default();
    let url = r.start().await;
    let d = dq(false).await;
    let other = "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    d.push_topic(
        "signed",
        json!({"mode": "push", "url": url, "secrets": [other, SECRET]}),
        json!({}),
    )
    .await;
    d.call(
        reqwest::Method::POST,
        "/v1/topics/signed/jobs",
        json!({"id": "s1", "body": {"order": 42, "note": "ünï"}}),
    )
    .await;
    d.wait_for("signed", "the ack", |s| s["counters"]["acked"] == json!(1))
        .await;
    let g = r.got().remove(0);

    let deps = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("pydeps");
    let have = std::process::Command::new("python3")
        .args(["-c", "import standardwebhooks"])
        .env("PYTHONPATH", &deps)
        .status()
        .expect("python3 runs");
    if !have.success() {
        let ok = std::process::Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
            ])
            .arg(&deps)
            .arg("standardwebhooks==1.1.0")
            .status()
            .expect("pip runs");
        assert!(ok.success(), "cannot install standardwebhooks from PyPI");
    }
    let script = r#"
import sys, json
from standardwebhooks.webhooks import Webhook
headers = json.loads(sys.argv[2])
body = sys.stdin.buffer.read()
Webhook(sys.argv[1]).verify(body, headers)
print("verified")
"#;
    let headers = json!({
        "webhook-id": g.headers["webhook-id"].to_str().unwrap(),
        "webhook-timestamp": g.headers["webhook-timestamp"].to_str().unwrap(),
        "webhook-signature": g.headers["webhook-signature"].to_str().unwrap(),
    });
    let verifies = |secret: &str, body: &[u8]| -> (bool, String) {
        let mut child = std::process::Command::new("python3")
            .args(["-c", script, secret, &headers.to_string()])
            .env("PYTHONPATH", &deps)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(body).unwrap();
        let out = child.wait_with_output().unwrap();
        let ok = out.status.success() && String::from_utf8_lossy(&out.stdout).contains("verified");
        (ok, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for secret in [SECRET, other] {
        let (ok, err) = verifies(secret, &g.body);
        assert!(
            ok,
            "standardwebhooks refused the signature for {secret}: {err}"
        );
    }
    // A tampered body is refused by the library (the check can fail).
    assert!(!verifies(SECRET, b"{\"order\": 43}").0);
}

/// GET deliveries carry topic, id and attempt in the query string.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_method_sends_the_query() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s2 = seen.clone();
    let app = Router::new().route(
        "/hook",
        axum::routing::get(move |uri: axum::http::Uri| {
            let s2 = s2.clone();
            async move {
                s2.lock()
                    .unwrap()
                    .push(uri.query().unwrap_or("").to_string());
                StatusCode::OK
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook?k=v", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    let d = dq(false).await;
    d.push_topic(
        "g",
        json!({"mode": "push", "url": url, "method": "GET"}),
        json!({}),
    )
    .await;
    d.call(
        reqwest::Method::POST,
        "/v1/topics/g/jobs",
        json!({"id": "x/1"}),
    )
    .await;
    d.wait_for("g", "the ack", |s| s["counters"]["acked"] == json!(1))
        .await;
    assert_eq!(seen.lock().unwrap()[0], "k=v&topic=g&id=x%2F1&attempt=1");
}

/// The retry schedule with a manual clock: the push default waits 1, 3, 5
/// minutes are exact, and nothing is delivered a millisecond early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_retry_schedule_is_exact_with_a_test_clock() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let r = Receiver::default();
    r.answers
        .lock()
        .unwrap()
        .extend([(500, None), (500, None), (500, None)]);
    let url = r.start().await;
    let (store, dir) = support::embedded_store();
    let t0 = 1_700_000_000_000u64;
    let clock = dq_core::ManualClock::new(t0);
    let running = support::serve_on(store, ServerConfig::default(), Arc::new(clock.clone())).await;
    let st = running.state.clone();
    let d = Dq { running, _dir: dir };
    d.push_topic("sched", json!({"mode": "push", "url": url}), json!({}))
        .await;
    d.call(
        reqwest::Method::POST,
        "/v1/topics/sched/jobs",
        json!({"id": "j"}),
    )
    .await;
    let mut now = t0;
    for (n, wait) in [(1usize, 60_000u64), (2, 180_000), (3, 300_000)] {
        let t = Instant::now();
        while r.got().len() < n {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "delivery {n} did not come"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The failed attempt is scheduled exactly `wait` after the clock's now.
        let t = Instant::now();
        let job = loop {
            let (_, job) = d
                .call(reqwest::Method::GET, "/v1/topics/sched/jobs/j", Value::Null)
                .await;
            if job["state"] == json!("scheduled") {
                break job;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "not rescheduled: {job}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(job["due_at_ms"], json!(now + wait), "retry {n}");
        assert_eq!(job["attempts"], json!(n));
        // One millisecond early: nothing.
        clock.set(now + wait - 1);
        st.service.wakers().wake("");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(r.got().len(), n, "not delivered early");
        clock.set(now + wait);
        st.service.wakers().wake("");
        now += wait;
    }
    let t = Instant::now();
    while r.got().len() < 4 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the 4th delivery did not come"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.wait_for("sched", "the ack", |s| s["counters"]["acked"] == json!(1))
        .await;
}

/// A drain (`POST /v1/admin/drain`) waits for the delivery in flight, which
/// is acked, and claims nothing more: the next due job stays ready for
/// another instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_waits_for_the_delivery_in_flight_and_claims_no_more() {
    let slow = Receiver::default();
    *slow.delay.lock().unwrap() = Duration::from_millis(1000);
    let url = slow.start().await;
    let d = dq(false).await;
    d.push_topic(
        "slow",
        json!({"mode": "push", "url": url, "concurrency": 1, "timeout_ms": 5000}),
        json!({}),
    )
    .await;
    d.call(
        reqwest::Method::POST,
        "/v1/topics/slow/jobs:batch",
        json!({"jobs": [{"id": "first"}, {"id": "second", "delay_ms": 300}]}),
    )
    .await;
    let t0 = Instant::now();
    while slow.got().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(10), "first delivery");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let asked = Instant::now();
    let (s, v) = d
        .call(
            reqwest::Method::POST,
            "/v1/admin/drain",
            json!({"wait_ms": 10000}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v,
        json!({"draining": true, "in_flight": 0, "drained": true})
    );
    assert!(
        asked.elapsed() >= Duration::from_millis(500),
        "it waited for the delivery: {:?}",
        asked.elapsed()
    );
    let st = d.stats("slow").await;
    assert_eq!(st["counters"]["acked"], json!(1), "{st}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(slow.got().len(), 1, "nothing claimed after the drain");
    let (_, job) = d
        .call(
            reqwest::Method::GET,
            "/v1/topics/slow/jobs/second",
            Value::Null,
        )
        .await;
    assert_ne!(job["state"], json!("reserved"), "{job}");
    let (s, v) = d.call(reqwest::Method::GET, "/readyz", Value::Null).await;
    assert_eq!((s, v["status"].clone()), (503, json!("draining")));
}

/// A job enqueued with a W3C trace context takes it to its callee: every
/// delivery attempt (here one refused with a 500, then one acked, after the
/// job's delay) carries the `traceparent` and `tracestate` it was enqueued with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callee_gets_the_trace_context_the_job_was_enqueued_with() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let r = Receiver::default();
    r.answers.lock().unwrap().push_back((500, None));
    let url = r.start().await;
    let d = dq(false).await;
    let (s, v) = d
        .push_topic(
            "traced",
            json!({"mode": "push", "url": url}),
            json!({"retry": {"fixed_ms": 50}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let res = reqwest::Client::new()
        .post(format!("{}/v1/topics/traced/jobs", d.base))
        .header("traceparent", TP)
        .header("tracestate", "rojo=00f067aa0ba902b7")
        .json(&json!({"id": "t1", "delay_ms": 200}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    d.wait_for("traced", "the ack", |s| s["counters"]["acked"] == json!(1))
        .await;
    let got = r.got();
    assert_eq!(got.len(), 2, "refused once, then acked");
    for g in &got {
        assert_eq!(g.headers["traceparent"], TP);
        assert_eq!(g.headers["tracestate"], "rojo=00f067aa0ba902b7");
    }
}
