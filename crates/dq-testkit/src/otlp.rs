//! An OTLP/HTTP trace receiver on a loopback port ([`Receiver`]): it
//! decodes each `POST /v1/traces` (protobuf) with the `opentelemetry-proto`
//! types and keeps the spans, for tests of what dq and its clients export.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::StatusCode;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
pub use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
pub use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// Lower-case hex of an id's bytes.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The value of a span's attribute `key`.
pub fn attr(s: &Span, key: &str) -> Option<AnyValue> {
    s.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.clone())
}

/// A receiver keeping every span it is sent, with its resource's
/// `service.name`.
#[derive(Clone, Default)]
pub struct Receiver {
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

impl Receiver {
    /// Starts listening on a free loopback port; its base URL (spans are
    /// posted to `<url>/v1/traces`).
    pub async fn start(&self) -> String {
        let me = self.clone();
        let app = Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let me = me.clone();
                async move {
                    let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    for rs in req.resource_spans {
                        let service = rs
                            .resource
                            .iter()
                            .flat_map(|r| &r.attributes)
                            .find(|a| a.key == "service.name")
                            .and_then(|a| a.value.as_ref()?.value.clone())
                            .map(|v| match v {
                                AnyValue::StringValue(s) => s,
                                other => format!("{other:?}"),
                            })
                            .unwrap_or_default();
                        for ss in rs.scope_spans {
                            for s in ss.spans {
                                me.spans.lock().unwrap().push((service.clone(), s));
                            }
                        }
                    }
                    (
                        StatusCode::OK,
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        url
    }

    /// The spans (with their `service.name`), once `n` arrived; panics
    /// after 20 s.
    pub async fn wait_for(&self, n: usize) -> Vec<(String, Span)> {
        let t0 = Instant::now();
        loop {
            let got = self.spans.lock().unwrap().clone();
            if got.len() >= n {
                return got;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{} spans of {n}: {:?}",
                got.len(),
                got.iter().map(|(_, s)| &s.name).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
