//! OpenTelemetry export of a job's life as spans (`--otlp-endpoint`,
//! OTLP over HTTP/protobuf), in the trace the job was enqueued in (its
//! [`TraceContext`]): one span for its enqueue, one for each hand-out (with
//! its lateness), one for each push delivery attempt (with the HTTP
//! status), and one for its ack, nack or death.
//!
//! Off by default: [`Spans::off`] makes nothing and costs a branch per
//! call. On, spans are made only for jobs whose trace is sampled (flag
//! `01` of their `traceparent`), put on a bounded queue without waiting and
//! sent in batches by one task: when the collector is down or slow the
//! queue fills and further spans are dropped and counted
//! (`dq_otlp_spans_dropped_total`), never holding a job up.
//!
//! The job's stored context becomes its enqueue span's, so everything dq
//! and the job's consumers do later continues under it:
//!
//! ```text
//! producer span (the enqueue request's traceparent)
//! └── dq enqueue
//!     └── dq hand-out          (link → dq enqueue; dq.lateness_ms)
//!         ├── dq push          (http.response.status_code; the callee's traceparent)
//!         └── dq ack | dq nack | dq dead
//! ```
//!
//! An ack or nack is tied to its hand-out by the lease token, as this
//! process remembers it (the last [`LEASES_KEPT`] hand-outs): one through
//! another instance, or after a restart, makes no span.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use dq_core::{Lease, NackOutcome, NewJob, Topic, TraceContext};
use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use tokio::sync::mpsc;

/// Spans waiting to be sent; more are dropped.
const QUEUE: usize = 8192;
/// Most spans in one export call.
const BATCH: usize = 512;
/// How long an export call may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Hand-outs remembered for their ack or nack.
pub const LEASES_KEPT: usize = 100_000;

/// Where spans go: nowhere ([`Spans::off`]), or an OTLP receiver.
pub struct Spans {
    on: Option<On>,
}

struct On {
    tx: mpsc::Sender<SpanData>,
    dropped: AtomicU64,
    scope: InstrumentationScope,
    /// Lease token → its hand-out span, for the ack or nack.
    leases: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    by_token: HashMap<String, SpanContext>,
    order: VecDeque<String>,
}

/// One span's context from a job's trace context.
fn context_of(t: &TraceContext) -> Option<SpanContext> {
    let trace_id = TraceId::from_hex(t.trace_id()).ok()?;
    let span_id = SpanId::from_hex(t.parent_id()).ok()?;
    let state = t
        .tracestate()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::SAMPLED,
        true,
        state,
    ))
}

fn new_span_id() -> SpanId {
    loop {
        let id = SpanId::from_bytes(rand::random::<[u8; 8]>());
        if id != SpanId::INVALID {
            return id;
        }
    }
}

impl Spans {
    /// No export: every call does nothing.
    pub const fn off() -> Self {
        Self { on: None }
    }

    /// Spans sent to the OTLP/HTTP receiver at `endpoint` (its base URL:
    /// spans go to `<endpoint>/v1/traces`), described by `service` and
    /// `instance` (resource attributes `service.name`,
    /// `service.instance.id`), by a task that runs until the process ends.
    ///
    /// # Errors
    /// An endpoint the exporter cannot be built for.
    pub fn start(endpoint: &str, service: &str, instance: &str) -> Result<Self, String> {
        use opentelemetry_otlp::{Protocol, WithExportConfig};
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("otlp endpoint {endpoint}: {e}"))?;
        exporter.set_resource(
            &Resource::builder_empty()
                .with_attributes([
                    KeyValue::new("service.name", service.to_string()),
                    KeyValue::new("service.instance.id", instance.to_string()),
                    KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                ])
                .build(),
        );
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(export_loop(exporter, rx));
        Ok(Self {
            on: Some(On {
                tx,
                dropped: AtomicU64::new(0),
                scope: InstrumentationScope::builder("dq")
                    .with_version(env!("CARGO_PKG_VERSION"))
                    .build(),
                leases: Mutex::default(),
            }),
        })
    }

    /// Whether spans are exported.
    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// Spans dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.on
            .as_ref()
            .map_or(0, |o| o.dropped.load(Ordering::Relaxed))
    }

    /// Records the enqueue of `job` into `t` (its trace sampled) and makes
    /// the enqueue span the job's context.
    pub fn enqueue(&self, t: &Topic, job: &mut NewJob) {
        let (Some(on), Some(ctx)) = (&self.on, &job.trace) else {
            return;
        };
        if !ctx.sampled() {
            return;
        }
        let Some(parent) = context_of(ctx) else {
            return;
        };
        let id = new_span_id();
        let now = SystemTime::now();
        let mut attrs = vec![
            KeyValue::new("messaging.system", "dq"),
            KeyValue::new("messaging.operation.type", "send"),
            KeyValue::new("messaging.destination.name", t.to_string()),
        ];
        if let Some(i) = &job.id {
            attrs.push(KeyValue::new("messaging.message.id", i.to_string()));
        }
        on.record(SpanData {
            span_context: SpanContext::new(
                parent.trace_id(),
                id,
                TraceFlags::SAMPLED,
                false,
                parent.trace_state().clone(),
            ),
            parent_span_id: parent.span_id(),
            parent_span_is_remote: true,
            span_kind: SpanKind::Producer,
            name: Cow::Borrowed("dq enqueue"),
            start_time: now,
            end_time: now,
            attributes: attrs,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: on.scope.clone(),
        });
        job.trace = Some(ctx.child(&id.to_string()));
    }

    /// Records the hand-out of each lease whose job is traced, `now_ms`
    /// being the store's time (its lateness: from its due time).
    pub fn handed_out(&self, leases: &[Lease], now_ms: u64) {
        let Some(on) = &self.on else {
            return;
        };
        for l in leases {
            let Some(ctx) = l.trace.as_ref().filter(|c| c.sampled()) else {
                continue;
            };
            let Some(enqueue) = context_of(ctx) else {
                continue;
            };
            let id = new_span_id();
            let span = SpanContext::new(
                enqueue.trace_id(),
                id,
                TraceFlags::SAMPLED,
                false,
                enqueue.trace_state().clone(),
            );
            let now = SystemTime::now();
            // (Non-exhaustive: filled, not built.)
            let mut links = SpanLinks::default();
            links.links.push(Link::with_context(enqueue.clone()));
            on.record(SpanData {
                span_context: span.clone(),
                parent_span_id: enqueue.span_id(),
                parent_span_is_remote: false,
                span_kind: SpanKind::Consumer,
                name: Cow::Borrowed("dq hand-out"),
                start_time: now,
                end_time: now,
                attributes: vec![
                    KeyValue::new("messaging.system", "dq"),
                    KeyValue::new("messaging.operation.type", "receive"),
                    KeyValue::new("messaging.destination.name", l.topic.to_string()),
                    KeyValue::new("messaging.message.id", l.id.to_string()),
                    KeyValue::new("dq.attempt", i64::from(l.attempt)),
                    KeyValue::new("dq.lateness_ms", now_ms.saturating_sub(l.due_at_ms) as i64),
                ],
                dropped_attributes_count: 0,
                events: SpanEvents::default(),
                links,
                status: Status::Unset,
                instrumentation_scope: on.scope.clone(),
            });
            on.keep(&l.token, span);
        }
    }

    /// The context a push delivery attempt of `lease` sends its callee
    /// (`traceparent`), and what [`Spans::pushed`] records when it ends:
    /// `None` when the job is not traced (or the export is off).
    pub fn push_starts(&self, lease: &Lease) -> Option<PushSpan> {
        let on = self.on.as_ref()?;
        let ctx = lease.trace.as_ref().filter(|c| c.sampled())?;
        let parent = on.kept(&lease.token).or_else(|| context_of(ctx))?;
        let id = new_span_id();
        Some(PushSpan {
            header: ctx.child(&id.to_string()),
            parent,
            id,
            start: SystemTime::now(),
        })
    }

    /// Records a push delivery attempt that ended with HTTP `status` (none:
    /// no answer, `error` says why).
    pub fn pushed(&self, span: PushSpan, lease: &Lease, status: Option<u16>, error: Option<&str>) {
        let Some(on) = &self.on else {
            return;
        };
        let mut attrs = vec![
            KeyValue::new("messaging.destination.name", lease.topic.to_string()),
            KeyValue::new("messaging.message.id", lease.id.to_string()),
            KeyValue::new("dq.attempt", i64::from(lease.attempt)),
        ];
        if let Some(s) = status {
            attrs.push(KeyValue::new("http.response.status_code", i64::from(s)));
        }
        let ok = status.is_some_and(|s| (200..300).contains(&s));
        on.record(SpanData {
            span_context: SpanContext::new(
                span.parent.trace_id(),
                span.id,
                TraceFlags::SAMPLED,
                false,
                span.parent.trace_state().clone(),
            ),
            parent_span_id: span.parent.span_id(),
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: Cow::Borrowed("dq push"),
            start_time: span.start,
            end_time: SystemTime::now(),
            attributes: attrs,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: if ok {
                Status::Unset
            } else {
                Status::error(
                    error.map_or_else(|| format!("HTTP {}", status.unwrap_or(0)), str::to_string),
                )
            },
            instrumentation_scope: on.scope.clone(),
        });
    }

    /// Records the ack of the lease `token` handed out here.
    pub fn acked(&self, t: &Topic, token: &str) {
        self.ended(t, token, "dq ack", Vec::new(), false);
    }

    /// Records the nack of the lease `token` handed out here: `dq nack`,
    /// or `dq dead` when the job went dead.
    pub fn nacked(&self, t: &Topic, token: &str, error: &str, out: &NackOutcome) {
        let (name, attrs) = match out {
            NackOutcome::Retry { due_at_ms, .. } => (
                "dq nack",
                vec![KeyValue::new("dq.retry_at_ms", *due_at_ms as i64)],
            ),
            NackOutcome::Dead { .. } => ("dq dead", Vec::new()),
        };
        let mut attrs = attrs;
        attrs.push(KeyValue::new("dq.error", error.to_string()));
        self.ended(t, token, name, attrs, true);
    }

    fn ended(
        &self,
        t: &Topic,
        token: &str,
        name: &'static str,
        mut attrs: Vec<KeyValue>,
        failed: bool,
    ) {
        let Some(on) = &self.on else {
            return;
        };
        let Some(parent) = on.forget(token) else {
            return;
        };
        attrs.push(KeyValue::new("messaging.destination.name", t.to_string()));
        let now = SystemTime::now();
        on.record(SpanData {
            span_context: SpanContext::new(
                parent.trace_id(),
                new_span_id(),
                TraceFlags::SAMPLED,
                false,
                parent.trace_state().clone(),
            ),
            parent_span_id: parent.span_id(),
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(name),
            start_time: now,
            end_time: now,
            attributes: attrs,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: if failed {
                Status::error(name)
            } else {
                Status::Unset
            },
            instrumentation_scope: on.scope.clone(),
        });
    }
}

/// A push delivery attempt under way ([`Spans::push_starts`]).
pub struct PushSpan {
    /// The `traceparent` (and `tracestate`) to send the callee.
    pub header: TraceContext,
    parent: SpanContext,
    id: SpanId,
    start: SystemTime,
}

impl On {
    fn record(&self, span: SpanData) {
        if self.tx.try_send(span).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn keep(&self, token: &str, span: SpanContext) {
        let mut k = self.leases.lock().expect("lease spans");
        if k.by_token.insert(token.to_string(), span).is_none() {
            k.order.push_back(token.to_string());
        }
        while k.order.len() > LEASES_KEPT {
            if let Some(old) = k.order.pop_front() {
                k.by_token.remove(&old);
            }
        }
    }

    fn kept(&self, token: &str) -> Option<SpanContext> {
        self.leases
            .lock()
            .expect("lease spans")
            .by_token
            .get(token)
            .cloned()
    }

    fn forget(&self, token: &str) -> Option<SpanContext> {
        // The token stays in `order` until it comes up: cheaper than a
        // search, and bounded all the same.
        self.leases
            .lock()
            .expect("lease spans")
            .by_token
            .remove(token)
    }
}

/// Sends the queued spans in batches until every sender is gone.
async fn export_loop(exporter: opentelemetry_otlp::SpanExporter, mut rx: mpsc::Receiver<SpanData>) {
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        // What else is queued, up to a batch; a short wait lets a burst
        // (a reserve of many traced jobs) go in one call.
        let until = tokio::time::Instant::now() + Duration::from_millis(200);
        while batch.len() < BATCH {
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some(s)) => batch.push(s),
                Ok(None) | Err(_) => break,
            }
        }
        let n = batch.len();
        if let Err(e) = exporter.export(std::mem::take(&mut batch)).await {
            tracing::warn!(spans = n, error = %e, "otlp export failed; spans dropped");
        }
    }
}
