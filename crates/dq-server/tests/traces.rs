//! OpenTelemetry export (`otlp_endpoint`) against a real OTLP/HTTP
//! receiver started here, which decodes the protobuf requests with the
//! `opentelemetry-proto` types: a job enqueued in a trace, delivered by push
//! after a delay, refused once and acked, shows as one trace with the right
//! parents and links, and the callee continues it.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use dq_server::ServerConfig;
use dq_testkit::otlp::{AnyValue, Receiver, Span, attr, hex};
use serde_json::json;

/// The producer's trace: trace id, and the span that enqueues.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER: &str = "00f067aa0ba902b7";

/// A server on the embedded store exporting spans to `otlp`.
async fn exporting_to(otlp: String) -> (support::Running, tempfile::TempDir) {
    let (store, dir) = support::embedded_store();
    let d = support::serve(
        store,
        ServerConfig {
            otlp_endpoint: Some(otlp),
            ..Default::default()
        },
    )
    .await;
    (d, dir)
}

/// The JSON log lines this test process writes (every test of the binary
/// shares them).
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || Writer(sink.clone()))
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        buf
    })
    .clone()
}

struct Writer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Writer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A push callee answering 500 once, then 200, keeping each request's
/// `traceparent`.
async fn callee(seen: Arc<Mutex<Vec<String>>>) -> String {
    let app = Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                let mut s = seen.lock().unwrap();
                s.push(
                    headers
                        .get("traceparent")
                        .map(|v| v.to_str().unwrap().to_string())
                        .unwrap_or_default(),
                );
                if s.len() == 1 {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_job_is_one_trace_from_its_enqueue_to_its_ack() {
    let logs = logs();
    let receiver = Receiver::default();
    let otlp = receiver.start().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hook = callee(seen.clone()).await;
    let (d, _dir) = exporting_to(otlp).await;
    let (s, v) = d
        .call(
            reqwest::Method::PUT,
            "/v1/topics/traced",
            json!({"delivery": {"mode": "push", "url": hook}, "retry": {"fixed_ms": 50}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let res = reqwest::Client::new()
        .post(format!("{}/v1/topics/traced/jobs", d.base))
        .header("traceparent", format!("00-{TRACE}-{PRODUCER}-01"))
        .header("tracestate", "rojo=1")
        .json(&json!({"id": "t1", "delay_ms": 200}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let got = receiver.wait_for(7).await;
    let named =
        |n: &str| -> Vec<&Span> { got.iter().map(|(_, s)| s).filter(|s| s.name == n).collect() };
    assert!(got.iter().all(|(svc, _)| svc == "dq"), "service.name");
    assert!(
        got.iter().all(|(_, s)| hex(&s.trace_id) == TRACE),
        "one trace: the producer's"
    );
    let enqueue = named("dq enqueue");
    assert_eq!(enqueue.len(), 1);
    let enqueue = enqueue[0];
    assert_eq!(hex(&enqueue.parent_span_id), PRODUCER);
    let e_id = hex(&enqueue.span_id);
    let handouts = named("dq hand-out");
    assert_eq!(handouts.len(), 2, "two hand-outs: refused, then acked");
    for h in &handouts {
        assert_eq!(hex(&h.parent_span_id), e_id, "under the enqueue");
        assert_eq!(h.links.len(), 1);
        assert_eq!(
            (hex(&h.links[0].trace_id), hex(&h.links[0].span_id)),
            (TRACE.to_string(), e_id.clone()),
            "linked to the enqueue"
        );
        match attr(h, "dq.lateness_ms") {
            Some(AnyValue::IntValue(ms)) => assert!(ms >= 0),
            other => panic!("lateness: {other:?}"),
        }
    }
    let handout_ids: Vec<String> = handouts.iter().map(|h| hex(&h.span_id)).collect();
    let pushes = named("dq push");
    assert_eq!(pushes.len(), 2);
    let mut statuses = Vec::new();
    for p in &pushes {
        assert!(
            handout_ids.contains(&hex(&p.parent_span_id)),
            "under a hand-out"
        );
        assert_eq!(
            p.links
                .iter()
                .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                .collect::<Vec<_>>(),
            [(TRACE.to_string(), e_id.clone())],
            "each delivery attempt linked to the enqueue"
        );
        match attr(p, "http.response.status_code") {
            Some(AnyValue::IntValue(code)) => statuses.push(code),
            other => panic!("status: {other:?}"),
        }
    }
    statuses.sort();
    assert_eq!(statuses, [200, 500]);
    // The callee continued each attempt's span.
    let mut sent: Vec<String> = seen.lock().unwrap().clone();
    let mut want: Vec<String> = pushes
        .iter()
        .map(|p| format!("00-{TRACE}-{}-01", hex(&p.span_id)))
        .collect();
    sent.sort();
    want.sort();
    assert_eq!(sent, want);
    let nack = named("dq nack");
    let ack = named("dq ack");
    assert_eq!((nack.len(), ack.len()), (1, 1));
    assert!(handout_ids.contains(&hex(&nack[0].parent_span_id)));
    assert!(handout_ids.contains(&hex(&ack[0].parent_span_id)));
    assert_ne!(nack[0].parent_span_id, ack[0].parent_span_id);
    // Its log lines carry its trace id: the failed attempt, each delivery.
    let lines: Vec<serde_json::Value> = String::from_utf8(logs.lock().unwrap().clone())
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let of = |msg: &str| -> Vec<serde_json::Value> {
        lines
            .iter()
            .filter(|l| l["fields"]["message"] == msg || l["fields"]["outcome"] == msg)
            .map(|l| l["fields"]["trace_id"].clone())
            .collect()
    };
    assert_eq!(of("job failed; will retry"), [json!(TRACE)]);
    assert_eq!(of("acked"), [json!(TRACE)], "the delivery that was acked");
    // A job's stored context is its enqueue span's: what a consumer gets.
    let res = reqwest::Client::new()
        .post(format!("{}/v1/topics/pulled/jobs", d.base))
        .header("traceparent", format!("00-{TRACE}-{PRODUCER}-01"))
        .json(&json!({"id": "p1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let (_, job) = d
        .call(
            reqwest::Method::GET,
            "/v1/topics/pulled/jobs/p1",
            json!(null),
        )
        .await;
    let stored = job["traceparent"].as_str().unwrap().to_string();
    let got = receiver.wait_for(8).await;
    let e2 = got
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.name == "dq enqueue" && hex(&s.span_id) != e_id)
        .expect("the second enqueue's span");
    assert_eq!(stored, format!("00-{TRACE}-{}-01", hex(&e2.span_id)));
    let (_, r) = d
        .call(
            reqwest::Method::POST,
            "/v1/reserve",
            json!({"topics": ["pulled"]}),
        )
        .await;
    assert_eq!(r["jobs"][0]["traceparent"], json!(stored));
    let metrics = reqwest::get(format!("{}/metrics", d.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("\ndq_otlp_spans_dropped_total 0\n"),
        "{metrics}"
    );
}

/// A collector that takes connections and never answers: spans queue up to
/// the bound, the rest are dropped and counted, and no job waits for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_hangs_drops_spans_and_holds_no_job_up() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((c, _)) = l.accept().await {
            held.push(c);
        }
    });
    let (d, _dir) = exporting_to(otlp).await;
    let tp = format!("00-{TRACE}-{PRODUCER}-01");
    let http = reqwest::Client::new();
    let t0 = Instant::now();
    // 3 × 1,000 jobs, each enqueued, handed out and acked: 9,000 spans,
    // more than the export queue holds.
    for round in 0..3 {
        let jobs: Vec<_> = (0..1000)
            .map(|i| json!({"id": format!("j{round}-{i}")}))
            .collect();
        let res = http
            .post(format!("{}/v1/topics/hung/jobs:batch", d.base))
            .header("traceparent", &tp)
            .json(&json!({"jobs": jobs}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let (_, r) = d
            .call(
                reqwest::Method::POST,
                "/v1/reserve",
                json!({"topics": ["hung"], "max": 1000}),
            )
            .await;
        let acks: Vec<_> = r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| json!({"topic": "hung", "id": j["id"], "token": j["token"]}))
            .collect();
        assert_eq!(acks.len(), 1000);
        let (s, v) = d
            .call(
                reqwest::Method::POST,
                "/v1/ack:batch",
                json!({"acks": acks}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
    }
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "jobs were held up: {:?}",
        t0.elapsed()
    );
    let metrics = reqwest::get(format!("{}/metrics", d.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let dropped: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("dq_otlp_spans_dropped_total "))
        .expect("the dropped count")
        .parse()
        .unwrap();
    // The queue holds 8,192 and the hung export call took one batch of up
    // to 512: about 300 of the 9,000 are dropped.
    assert!(
        (200.0..=800.0).contains(&dropped),
        "9,000 spans, 8,192 + 513 held: {dropped} dropped"
    );
}

/// A traced job that expires before anyone takes it ends its trace with a
/// `dq expiry` span under its enqueue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_job_ends_its_trace_with_an_expiry_span() {
    let receiver = Receiver::default();
    let otlp = receiver.start().await;
    let (d, _dir) = exporting_to(otlp).await;
    let res = reqwest::Client::new()
        .post(format!("{}/v1/topics/late/jobs", d.base))
        .header("traceparent", format!("00-{TRACE}-{PRODUCER}-01"))
        .json(&json!({"id": "e1", "expires_in_ms": 50}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    // Reserves find it waiting until its expiry passes, then end it (one
    // that takes it first gives it back).
    let t0 = Instant::now();
    loop {
        let (_, r) = d
            .call(
                reqwest::Method::POST,
                "/v1/reserve",
                json!({"topics": ["late"]}),
            )
            .await;
        if let Some(tok) = r["jobs"][0].get("token") {
            d.call(
                reqwest::Method::POST,
                "/v1/topics/late/jobs/e1/release",
                json!({"token": tok}),
            )
            .await;
        }
        if d.stats("late").await["counters"]["expired_unhandled"] == json!(1) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "never expired");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let got = receiver.wait_for(2).await;
    let span = |name: &str| {
        got.iter()
            .map(|(_, s)| s)
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} span"))
    };
    let (enqueue, expiry) = (span("dq enqueue"), span("dq expiry"));
    assert_eq!(hex(&expiry.trace_id), TRACE);
    assert_eq!(expiry.parent_span_id, enqueue.span_id);
    assert_eq!(
        attr(expiry, "messaging.message.id"),
        Some(AnyValue::StringValue("e1".into()))
    );
}
