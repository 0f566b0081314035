//! With the `otel` feature, a Worker's handler runs in a span whose
//! OpenTelemetry parent is the trace context the job was enqueued with: the
//! handler's own spans continue the producer's trace, across the delay.

mod support;

use std::time::{Duration, Instant};

use dq_client::*;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::json;
use support::TestServer;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_continues_the_trace_its_job_was_enqueued_in() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    // This test binary's only test: the subscriber is the process's.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let srv = TestServer::start().await;
    let c = srv.client();
    let tp = format!("00-{TRACE}-{PRODUCER}-01");
    c.enqueue(
        "traced",
        &NewJob::json(json!({"event": "e"}))
            .id("t1")
            .delay(Duration::from_millis(100))
            .trace(tp, Some("rojo=1".into())),
    )
    .await
    .unwrap();
    c.enqueue("traced", &NewJob::json(json!({"event": "e"})).id("plain"))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let w = Worker::new(c.clone())
        .topic("traced")
        .handle("e", |_job| async {
            tracing::info_span!("handle").in_scope(|| ());
            Outcome::Done
        });
    let run = tokio::spawn(w.run(stop.clone()));
    let t0 = Instant::now();
    let spans = loop {
        let spans = exporter.get_finished_spans().unwrap();
        if spans.iter().filter(|s| s.name == "job").count() == 2 {
            break spans;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{spans:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.cancel();
    run.await.unwrap().unwrap();
    let id_of = |s: &opentelemetry_sdk::trace::SpanData, key: &str| {
        s.attributes
            .iter()
            .find(|a| a.key.as_str() == key)
            .map(|a| a.value.to_string())
    };
    let traced = spans
        .iter()
        .find(|s| s.name == "job" && id_of(s, "id").as_deref() == Some("t1"))
        .expect("the traced job's span");
    assert_eq!(traced.span_context.trace_id().to_string(), TRACE);
    assert_eq!(traced.parent_span_id.to_string(), PRODUCER);
    assert_eq!(id_of(traced, "trace_id").as_deref(), Some(TRACE));
    let handle = spans
        .iter()
        .find(|s| s.name == "handle" && s.parent_span_id == traced.span_context.span_id())
        .expect("the handler's span under it");
    assert_eq!(handle.span_context.trace_id().to_string(), TRACE);
    let plain = spans
        .iter()
        .find(|s| s.name == "job" && id_of(s, "id").as_deref() == Some("plain"))
        .expect("the other job's span");
    assert_ne!(
        plain.span_context.trace_id().to_string(),
        TRACE,
        "a job without a trace context starts its own"
    );
    srv.stop().await;
}
