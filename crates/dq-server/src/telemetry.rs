//! A job's life in its trace: the trace ids of traced jobs for the log
//! lines of their ack or nack, and — with `--otlp-endpoint` — OpenTelemetry
//! spans exported over OTLP/HTTP (protobuf), in the trace the job was
//! enqueued in (its [`TraceContext`]): one span for its enqueue, one for
//! each hand-out (with its lateness), one for each push delivery attempt
//! (with the HTTP status), one for its ack, nack or death, and one for its
//! expiry when it expired before a hand-out (a store that keeps expiry
//! reports those of each reserve).
//!
//! Export is off by default ([`Spans::off`]): nothing is made but, for a
//! job enqueued in a trace, the memory of its trace id by lease token.
//! On, spans are made only for jobs whose trace is sampled (flag `01` of
//! their `traceparent`), put on a bounded queue without waiting and sent in
//! batches by one task: when the collector is down or slow the queue fills
//! and further spans are dropped and counted (`dq_otlp_spans_dropped_total`),
//! never holding a job up.
//!
//! The job's stored context becomes its enqueue span's, so everything dq
//! and the job's consumers do later continues under it:
//!
//! ```text
//! producer span (the enqueue request's traceparent)
//! └── dq enqueue
//!     ├── dq hand-out          (link → dq enqueue; dq.lateness_ms)
//!     │   ├── dq push          (link → dq enqueue; http.response.status_code;
//!     │   │                     the callee's traceparent)
//!     │   └── dq ack | dq nack | dq dead
//!     └── dq expiry            (expired before a hand-out)
//! ```
//!
//! An ack or nack is tied to its hand-out by the lease token, as this
//! process remembers it (the last [`LEASES_KEPT`] traced hand-outs): one
//! through another instance, or after a restart, makes no span and logs no
//! trace id.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use dq_core::{ExpiredJob, Lease, NackOutcome, NewJob, Topic, TraceContext};
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
/// Traced hand-outs remembered for their ack or nack.
pub const LEASES_KEPT: usize = 100_000;

/// The traces of jobs handed out here, and where their spans go: nowhere
/// ([`Spans::off`]), or an OTLP receiver ([`Spans::start`]).
pub struct Spans {
    on: Option<On>,
    /// Lease token → the traced job handed out under it. Made at the first
    /// traced hand-out.
    leases: Mutex<Option<Kept>>,
    /// Whether a traced job was ever handed out here: until then an ack or
    /// nack (every one, on a hot path) takes no lock to look.
    any_kept: AtomicBool,
}

struct On {
    tx: mpsc::Sender<SpanData>,
    dropped: AtomicU64,
    scope: InstrumentationScope,
}

/// A traced hand-out, remembered by its lease token: its trace id (for
/// log lines) and, when spans are exported, its hand-out span.
#[derive(Clone)]
struct Handed {
    trace_id: String,
    span: Option<SpanContext>,
}

#[derive(Default)]
struct Kept {
    by_token: HashMap<String, Handed>,
    order: VecDeque<String>,
}

/// A span to record: everything but its context and end.
struct Made {
    name: &'static str,
    kind: SpanKind,
    parent: SpanId,
    parent_is_remote: bool,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    links: Vec<Link>,
    status: Status,
}

/// The span a job's trace context names (its parent id), as a remote one.
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

/// A new span of the trace `of`, whose context it takes (state included).
fn sibling(of: &SpanContext, id: SpanId) -> SpanContext {
    SpanContext::new(
        of.trace_id(),
        id,
        TraceFlags::SAMPLED,
        false,
        of.trace_state().clone(),
    )
}

impl Spans {
    /// No export.
    pub const fn off() -> Self {
        Self {
            on: None,
            leases: Mutex::new(None),
            any_kept: AtomicBool::new(false),
        }
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
            }),
            leases: Mutex::new(None),
            any_kept: AtomicBool::new(false),
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
        let Some(parent) = context_of(ctx).filter(|_| ctx.sampled()) else {
            return;
        };
        let mut attributes = vec![
            KeyValue::new("messaging.system", "dq"),
            KeyValue::new("messaging.operation.type", "send"),
            KeyValue::new("messaging.destination.name", t.to_string()),
        ];
        if let Some(i) = &job.id {
            attributes.push(KeyValue::new("messaging.message.id", i.to_string()));
        }
        let id = new_span_id();
        on.record(
            sibling(&parent, id),
            Made {
                name: "dq enqueue",
                kind: SpanKind::Producer,
                parent: parent.span_id(),
                parent_is_remote: true,
                start: SystemTime::now(),
                attributes,
                links: Vec::new(),
                status: Status::Unset,
            },
        );
        job.trace = Some(ctx.child(&id.to_string()));
    }

    /// Records the hand-out of each lease whose job is traced, `now_ms`
    /// being the store's time (its lateness: from its due time), and
    /// remembers its trace by lease token for its ack or nack.
    pub fn handed_out(&self, leases: &[Lease], now_ms: u64) {
        for l in leases {
            let Some(ctx) = &l.trace else {
                continue;
            };
            let span = match (&self.on, context_of(ctx).filter(|_| ctx.sampled())) {
                (Some(on), Some(enqueue)) => {
                    let span = sibling(&enqueue, new_span_id());
                    on.record(
                        span.clone(),
                        Made {
                            name: "dq hand-out",
                            kind: SpanKind::Consumer,
                            parent: enqueue.span_id(),
                            parent_is_remote: false,
                            start: SystemTime::now(),
                            attributes: vec![
                                KeyValue::new("messaging.system", "dq"),
                                KeyValue::new("messaging.operation.type", "receive"),
                                KeyValue::new("messaging.destination.name", l.topic.to_string()),
                                KeyValue::new("messaging.message.id", l.id.to_string()),
                                KeyValue::new("dq.attempt", i64::from(l.attempt)),
                                KeyValue::new(
                                    "dq.lateness_ms",
                                    now_ms.saturating_sub(l.due_at_ms) as i64,
                                ),
                            ],
                            links: vec![Link::with_context(enqueue)],
                            status: Status::Unset,
                        },
                    );
                    Some(span)
                }
                _ => None,
            };
            self.keep(
                &l.token,
                Handed {
                    trace_id: ctx.trace_id().to_string(),
                    span,
                },
            );
        }
    }

    /// Records the jobs of `t` a reserve ended unhandled because their
    /// expiry passed: a `dq expiry` span each (its parent the job's
    /// context), and a log line with its trace id.
    pub fn expired(&self, t: &Topic, jobs: &[ExpiredJob]) {
        for j in jobs {
            tracing::debug!(topic = %t, id = %j.id, trace_id = j.trace.trace_id(), "job expired before a hand-out");
            let (Some(on), Some(parent)) =
                (&self.on, context_of(&j.trace).filter(|_| j.trace.sampled()))
            else {
                continue;
            };
            on.record(
                sibling(&parent, new_span_id()),
                Made {
                    name: "dq expiry",
                    kind: SpanKind::Internal,
                    parent: parent.span_id(),
                    parent_is_remote: false,
                    start: SystemTime::now(),
                    attributes: vec![
                        KeyValue::new("messaging.destination.name", t.to_string()),
                        KeyValue::new("messaging.message.id", j.id.to_string()),
                    ],
                    links: Vec::new(),
                    status: Status::error("expired before a hand-out"),
                },
            );
        }
    }

    /// The context a push delivery attempt of `lease` sends its callee
    /// (`traceparent`), and what [`Spans::pushed`] records when it ends:
    /// `None` when the job is not traced (or the export is off).
    pub fn push_starts(&self, lease: &Lease) -> Option<PushSpan> {
        self.on.as_ref()?;
        let ctx = lease.trace.as_ref().filter(|c| c.sampled())?;
        let enqueue = context_of(ctx)?;
        let parent = self
            .kept(&lease.token)
            .and_then(|h| h.span)
            .unwrap_or_else(|| enqueue.clone());
        let id = new_span_id();
        Some(PushSpan {
            header: ctx.child(&id.to_string()),
            parent,
            enqueue,
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
        let mut attributes = vec![
            KeyValue::new("messaging.destination.name", lease.topic.to_string()),
            KeyValue::new("messaging.message.id", lease.id.to_string()),
            KeyValue::new("dq.attempt", i64::from(lease.attempt)),
        ];
        if let Some(s) = status {
            attributes.push(KeyValue::new("http.response.status_code", i64::from(s)));
        }
        let ok = status.is_some_and(|s| (200..300).contains(&s));
        on.record(
            sibling(&span.parent, span.id),
            Made {
                name: "dq push",
                kind: SpanKind::Client,
                parent: span.parent.span_id(),
                parent_is_remote: false,
                start: span.start,
                attributes,
                links: vec![Link::with_context(span.enqueue.clone())],
                status: if ok {
                    Status::Unset
                } else {
                    Status::error(
                        error.map_or_else(
                            || format!("HTTP {}", status.unwrap_or(0)),
                            str::to_string,
                        ),
                    )
                },
            },
        );
    }

    /// Records the ack of the lease `token` handed out here; the job's
    /// trace id, when it is traced, for the log line.
    pub fn acked(&self, t: &Topic, token: &str) -> Option<String> {
        self.ended(t, token, "dq ack", Vec::new(), Status::Unset)
    }

    /// Records the nack of the lease `token` handed out here: `dq nack`,
    /// or `dq dead` when the job went dead; the job's trace id, when it is
    /// traced, for the log line.
    pub fn nacked(&self, t: &Topic, token: &str, error: &str, out: &NackOutcome) -> Option<String> {
        let (name, mut attributes) = match out {
            NackOutcome::Retry { due_at_ms, .. } => (
                "dq nack",
                vec![KeyValue::new("dq.retry_at_ms", *due_at_ms as i64)],
            ),
            NackOutcome::Dead { .. } => ("dq dead", Vec::new()),
        };
        attributes.push(KeyValue::new("dq.error", error.to_string()));
        self.ended(t, token, name, attributes, Status::error(name))
    }

    /// Forgets the lease `token` (given back: no span of its own); the
    /// job's trace id when it is traced.
    pub fn released(&self, token: &str) -> Option<String> {
        self.forget(token).map(|h| h.trace_id)
    }

    fn ended(
        &self,
        t: &Topic,
        token: &str,
        name: &'static str,
        mut attributes: Vec<KeyValue>,
        status: Status,
    ) -> Option<String> {
        let handed = self.forget(token)?;
        if let (Some(on), Some(parent)) = (&self.on, &handed.span) {
            attributes.push(KeyValue::new("messaging.destination.name", t.to_string()));
            on.record(
                sibling(parent, new_span_id()),
                Made {
                    name,
                    kind: SpanKind::Internal,
                    parent: parent.span_id(),
                    parent_is_remote: false,
                    start: SystemTime::now(),
                    attributes,
                    links: Vec::new(),
                    status,
                },
            );
        }
        Some(handed.trace_id)
    }

    fn keep(&self, token: &str, handed: Handed) {
        self.any_kept.store(true, Ordering::Release);
        let mut k = self.leases.lock().expect("lease traces");
        let k = k.get_or_insert_with(Kept::default);
        if k.by_token.insert(token.to_string(), handed).is_none() {
            k.order.push_back(token.to_string());
        }
        while k.order.len() > LEASES_KEPT {
            if let Some(old) = k.order.pop_front() {
                k.by_token.remove(&old);
            }
        }
    }

    fn kept(&self, token: &str) -> Option<Handed> {
        if !self.any_kept.load(Ordering::Acquire) {
            return None;
        }
        self.leases
            .lock()
            .expect("lease traces")
            .as_ref()?
            .by_token
            .get(token)
            .cloned()
    }

    fn forget(&self, token: &str) -> Option<Handed> {
        if !self.any_kept.load(Ordering::Acquire) {
            return None;
        }
        // The token stays in `order` until it comes up: cheaper than a
        // search, and bounded all the same.
        self.leases
            .lock()
            .expect("lease traces")
            .as_mut()?
            .by_token
            .remove(token)
    }
}

/// A push delivery attempt under way ([`Spans::push_starts`]).
pub struct PushSpan {
    /// The `traceparent` (and `tracestate`) to send the callee.
    pub header: TraceContext,
    parent: SpanContext,
    /// The job's enqueue, which the attempt links to.
    enqueue: SpanContext,
    id: SpanId,
    start: SystemTime,
}

impl On {
    /// Queues span `context` as `made` says, ending now; counts it dropped
    /// when the queue is full.
    fn record(&self, context: SpanContext, made: Made) {
        let mut links = SpanLinks::default();
        // (Non-exhaustive: filled, not built.)
        links.links = made.links;
        let span = SpanData {
            span_context: context,
            parent_span_id: made.parent,
            parent_span_is_remote: made.parent_is_remote,
            span_kind: made.kind,
            name: Cow::Borrowed(made.name),
            start_time: made.start,
            end_time: SystemTime::now(),
            attributes: made.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links,
            status: made.status,
            instrumentation_scope: self.scope.clone(),
        };
        if self.tx.try_send(span).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
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
