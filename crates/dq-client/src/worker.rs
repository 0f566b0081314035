//! [`Worker`]: reserves due jobs in batches, runs a handler per topic and
//! event with a concurrency limit, extends the leases of running handlers
//! (all of them in one call per interval), acks and nacks in batches, and
//! stops gracefully.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::client::{Ack, Client, Leased, NackItem, Reserve, TouchItem};
use crate::error::{Error, Result};

/// The span a job's handler runs in: `job`, with its topic, id, attempt
/// and — for a job enqueued in a trace — its `trace_id`, so every log line
/// of the handler joins the trace. With the `otel` feature its
/// OpenTelemetry parent is the job's trace context (the enqueue's span),
/// so the handler's spans continue the producer's trace.
fn job_span(leased: &Leased) -> tracing::Span {
    let trace = leased
        .traceparent
        .as_deref()
        .and_then(|p| dq_core::TraceContext::parse(p, leased.tracestate.as_deref()).ok())
        .map(|(t, _)| t);
    let span = tracing::info_span!(
        "job",
        topic = %leased.topic,
        id = %leased.id,
        attempt = leased.attempt,
        trace_id = tracing::field::Empty
    );
    if let Some(t) = &trace {
        span.record("trace_id", t.trace_id());
        #[cfg(feature = "otel")]
        otel_parent(&span, t);
    }
    span
}

/// Makes the job's trace context the OpenTelemetry parent of `span`.
#[cfg(feature = "otel")]
fn otel_parent(span: &tracing::Span, t: &dq_core::TraceContext) {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let (Ok(trace_id), Ok(span_id)) = (
        TraceId::from_hex(t.trace_id()),
        SpanId::from_hex(t.parent_id()),
    ) else {
        return;
    };
    let flags = if t.sampled() {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let state = t
        .tracestate()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let parent = SpanContext::new(trace_id, span_id, flags, true, state);
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
}

/// What a handler decided about its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the job is acked and gone.
    Done,
    /// Not now: give the job back, due again after this delay. The attempt
    /// is not counted (e.g. "payment still pending, look again in a minute").
    RetryAfter(Duration),
    /// Failed: counts an attempt; retried with the topic's backoff, dead
    /// after the last attempt.
    Fail(String),
    /// Failed for good: dead at once, whatever attempts are left.
    Abort(String),
}

/// A job handed to a handler.
#[derive(Debug, Clone)]
pub struct Task {
    /// The lease and the job as reserved.
    pub leased: Leased,
    /// The value of the job body's event field, if any.
    pub event: Option<String>,
}

impl Task {
    /// Topic.
    pub fn topic(&self) -> &str {
        &self.leased.topic
    }
    /// Id.
    pub fn id(&self) -> &str {
        &self.leased.id
    }
    /// Which hand-out this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.leased.attempt
    }
    /// The JSON body as `T`.
    ///
    /// # Errors
    /// [`Error::Decode`] when the body is not a `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        self.leased.json().map_err(Error::Decode)
    }
}

type BoxFut = Pin<Box<dyn Future<Output = Outcome> + Send>>;
type Handler = Arc<dyn Fn(Task) -> BoxFut + Send + Sync>;

#[derive(Default, Clone)]
struct TopicHandlers {
    events: HashMap<String, Handler>,
    any: Option<Handler>,
}

/// Counts of what a [`Worker::run`] did.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Handlers that returned Done.
    pub done: AtomicU64,
    /// RetryAfter.
    pub retried: AtomicU64,
    /// Fail, and panics.
    pub failed: AtomicU64,
    /// Abort, and jobs whose event has no handler.
    pub aborted: AtomicU64,
    /// Handlers that panicked (counted in `failed` too).
    pub panicked: AtomicU64,
    /// Jobs reserved but not started at shutdown, given back.
    pub handed_back: AtomicU64,
}

/// Runs handlers for due jobs. See the crate docs for an example.
pub struct Worker {
    client: Client,
    handlers: HashMap<String, TopicHandlers>,
    current: Option<String>,
    concurrency: usize,
    lease: Duration,
    batch: usize,
    wait: Duration,
    grace: Duration,
    event_field: String,
    stats: Arc<WorkerStats>,
}

impl Worker {
    /// A worker on `client` with concurrency 16, leases of 30 s, reserves of
    /// up to 100 jobs, 10 s of grace at shutdown, events read from the body's
    /// `event` field.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            handlers: HashMap::new(),
            current: None,
            concurrency: 16,
            lease: Duration::from_secs(30),
            batch: 100,
            wait: Duration::from_secs(1),
            grace: Duration::from_secs(10),
            event_field: "event".into(),
            stats: Arc::default(),
        }
    }

    /// Consume `topic`; the handlers registered next are for it.
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        let t = topic.into();
        self.handlers.entry(t.clone()).or_default();
        self.current = Some(t);
        self
    }

    fn current(&mut self) -> &mut TopicHandlers {
        let t = self
            .current
            .clone()
            .expect("Worker: call .topic(name) before registering handlers");
        self.handlers.entry(t).or_default()
    }

    /// Runs `handler` for jobs of the current topic whose event is `event`.
    ///
    /// # Panics
    /// When no topic was named first with [`Worker::topic`].
    pub fn handle<F, Fut>(mut self, event: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let h: Handler = Arc::new(move |t| Box::pin(handler(t)));
        self.current().events.insert(event.into(), h);
        self
    }

    /// Runs `handler` for jobs of the current topic that no event handler takes
    /// (including jobs without an event field).
    ///
    /// # Panics
    /// When no topic was named first with [`Worker::topic`].
    pub fn handle_any<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let h: Handler = Arc::new(move |t| Box::pin(handler(t)));
        self.current().any = Some(h);
        self
    }

    /// Most handlers running at once (default 16).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Lease per job; extended every third of it while the handler runs, in
    /// one call for all running jobs (default 30 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(300));
        self
    }

    /// Most jobs per reserve call (default 100).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.clamp(1, 1000);
        self
    }

    /// How long running handlers may take to finish after shutdown (default 10 s).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The body field that names the event (default `event`).
    pub fn event_field(mut self, field: impl Into<String>) -> Self {
        self.event_field = field.into();
        self
    }

    /// Counts of what this worker did, readable while it runs.
    pub fn stats(&self) -> Arc<WorkerStats> {
        self.stats.clone()
    }

    /// Runs until `shutdown` fires, then stops reserving, gives back jobs
    /// reserved but not started, lets running handlers finish within the
    /// grace period and flushes acks and nacks.
    ///
    /// # Errors
    /// Only for a worker with no topic; call failures are logged and retried.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        if self.handlers.is_empty() {
            return Err(Error::Decode("Worker has no topic to consume".into()));
        }
        let topics: Vec<String> = self.handlers.keys().cloned().collect();
        let handlers = Arc::new(self.handlers);
        let slots = Arc::new(Semaphore::new(self.concurrency));
        let tracker = TaskTracker::new();
        let (ack_tx, ack_rx) = mpsc::unbounded_channel::<Ack>();
        let acker = tokio::spawn(report_loop(ack_rx, "ack", |a: &Ack| (&a.topic, &a.id), {
            let client = self.client.clone();
            move |batch| {
                let client = client.clone();
                async move { client.ack_batch(&batch).await }
            }
        }));
        let (nack_tx, nack_rx) = mpsc::unbounded_channel::<NackItem>();
        let nacker = tokio::spawn(report_loop(
            nack_rx,
            "nack",
            |n: &NackItem| (&n.topic, &n.id),
            {
                let client = self.client.clone();
                move |batch| {
                    let client = client.clone();
                    async move { client.nack_batch(&batch).await }
                }
            },
        ));
        let in_flight = InFlight::default();
        let keeper_stop = CancellationToken::new();
        let keeper = tokio::spawn(lease_loop(
            self.client.clone(),
            in_flight.clone(),
            self.lease,
            keeper_stop.clone(),
        ));
        let mut failures = 0u32;
        // Each topic nobody created is named in the log once.
        let mut warned_unknown = std::collections::HashSet::new();
        while !shutdown.is_cancelled() {
            let free = slots.available_permits();
            if free == 0 {
                tokio::select! {
                    p = slots.acquire() => drop(p),
                    _ = shutdown.cancelled() => break,
                }
                continue;
            }
            // A reserve in flight is not cancelled at shutdown: what it
            // returns is handed back below, not stranded until its lease ends.
            let req = Reserve::new(topics.clone())
                .max(free.min(self.batch))
                .lease(self.lease)
                .wait(self.wait);
            let jobs = match self.client.reserve_answer(&req).await {
                Ok(answer) => {
                    failures = 0;
                    for t in answer.unknown_topics {
                        if warned_unknown.insert(t.clone()) {
                            tracing::warn!(topic = %t, "no topic of this name: nobody created it (a typo?)");
                        }
                    }
                    answer.jobs
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(error = %e, failures, "reserve failed; retrying");
                    }
                    let backoff = Duration::from_millis(100 * u64::from(failures.min(20)));
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.cancelled() => {}
                    }
                    continue;
                }
            };
            for leased in jobs {
                if shutdown.is_cancelled() {
                    hand_back(&self.client, &leased, &self.stats).await;
                    continue;
                }
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    break;
                };
                let ctx = JobRun {
                    client: self.client.clone(),
                    handlers: handlers.clone(),
                    event_field: self.event_field.clone(),
                    lease_ms: self.lease.as_millis() as u64,
                    in_flight: in_flight.clone(),
                    acks: ack_tx.clone(),
                    nacks: nack_tx.clone(),
                    stats: self.stats.clone(),
                };
                let span = job_span(&leased);
                tracker.spawn(
                    async move {
                        ctx.run(leased).await;
                        drop(permit);
                    }
                    .instrument(span),
                );
            }
        }
        tracker.close();
        if tokio::time::timeout(self.grace, tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(grace = ?self.grace, "handlers still running after the grace period; their jobs come back when their leases end");
        }
        keeper_stop.cancel();
        let _ = keeper.await;
        drop((ack_tx, nack_tx));
        let _ = tokio::join!(acker, nacker);
        Ok(())
    }
}

async fn hand_back(client: &Client, leased: &Leased, stats: &WorkerStats) {
    match client
        .release(&leased.topic, &leased.id, &leased.token, Duration::ZERO)
        .await
    {
        Ok(_) => {
            stats.handed_back.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            tracing::warn!(topic = %leased.topic, id = %leased.id, error = %e, "cannot hand back job at shutdown; it comes back when its lease ends")
        }
    }
}

/// Collects reports of one kind (`verb`: acks, nacks) and sends them in
/// batches (up to 100, or what arrived within 5 ms) with `send`, retrying a
/// batch on transient failures; `about` names an item's topic and id for
/// the log.
async fn report_loop<T, R, Fut>(
    mut rx: mpsc::UnboundedReceiver<T>,
    verb: &'static str,
    about: impl Fn(&T) -> (&str, &str),
    send: impl Fn(Vec<T>) -> Fut,
) where
    T: Clone,
    Fut: Future<Output = Result<Vec<Result<R>>>>,
{
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let until = tokio::time::Instant::now() + Duration::from_millis(5);
        while batch.len() < 100 {
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some(a)) => batch.push(a),
                _ => break,
            }
        }
        let mut tries = 0;
        loop {
            match send(batch.clone()).await {
                Ok(results) => {
                    for (a, r) in batch.iter().zip(results) {
                        if let Err(e) = r {
                            let (topic, id) = about(a);
                            tracing::warn!(topic, id, error = %e, "{verb} refused (lease lost or job cancelled)");
                        }
                    }
                    break;
                }
                Err(e) if e.is_transient() && tries < 5 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(200 * tries)).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, n = batch.len(), "{verb}s failed; those jobs come back when their leases end");
                    break;
                }
            }
        }
    }
}

/// The leases of the jobs whose handlers run, by token.
type InFlight = Arc<Mutex<HashMap<String, TouchItem>>>;

/// Extends every lease in `in_flight` every third of `lease`, in one
/// `touch:batch` call (per 1000 jobs), until `stop`.
async fn lease_loop(client: Client, in_flight: InFlight, lease: Duration, stop: CancellationToken) {
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once: a job just started needs no extension.
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        let items: Vec<TouchItem> = in_flight
            .lock()
            .expect("poisoned")
            .values()
            .cloned()
            .collect();
        for chunk in items.chunks(1000) {
            match client.touch_batch(chunk).await {
                Ok(results) => {
                    for (it, r) in chunk.iter().zip(results) {
                        // A job that ended meanwhile (acked) has no lease to extend.
                        let running = in_flight.lock().expect("poisoned").contains_key(&it.token);
                        if let Err(e) = r
                            && running
                        {
                            tracing::warn!(topic = %it.topic, id = %it.id, error = %e, "cannot extend the lease of a running job");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, n = chunk.len(), "cannot extend the leases of running jobs");
                }
            }
        }
    }
}

/// Keeps a job in [`InFlight`] while its handler runs.
struct Running {
    in_flight: InFlight,
    token: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.in_flight.lock().expect("poisoned").remove(&self.token);
    }
}

struct JobRun {
    client: Client,
    handlers: Arc<HashMap<String, TopicHandlers>>,
    event_field: String,
    lease_ms: u64,
    in_flight: InFlight,
    acks: mpsc::UnboundedSender<Ack>,
    nacks: mpsc::UnboundedSender<NackItem>,
    stats: Arc<WorkerStats>,
}

impl JobRun {
    async fn run(self, leased: Leased) {
        let started = Instant::now();
        let event = leased.json::<Value>().ok().and_then(|b| {
            b.get(&self.event_field)
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        let handler = self.handlers.get(&leased.topic).and_then(|h| {
            event
                .as_ref()
                .and_then(|e| h.events.get(e))
                .or(h.any.as_ref())
                .cloned()
        });
        let (topic, id, token) = (
            leased.topic.clone(),
            leased.id.clone(),
            leased.token.clone(),
        );
        let nack = |error: String, dead: bool| NackItem {
            topic: topic.clone(),
            id: id.clone(),
            token: token.clone(),
            error: Some(error),
            retry_in_ms: None,
            dead,
            priority: None,
        };
        let Some(handler) = handler else {
            let msg = format!(
                "no handler for event {:?} on topic {topic:?}",
                event.as_deref().unwrap_or("")
            );
            tracing::error!(error = %msg, "job dead-lettered");
            self.stats.aborted.fetch_add(1, Ordering::Relaxed);
            let _ = self.nacks.send(nack(msg, true));
            return;
        };
        let task = Task { leased, event };
        // The lease loop extends its lease while the handler runs.
        self.in_flight.lock().expect("poisoned").insert(
            token.clone(),
            TouchItem {
                topic: topic.clone(),
                id: id.clone(),
                token: token.clone(),
                lease_ms: Some(self.lease_ms),
            },
        );
        let running = Running {
            in_flight: self.in_flight.clone(),
            token: token.clone(),
        };
        let outcome = AssertUnwindSafe(handler(task)).catch_unwind().await;
        drop(running);
        let took_ms = started.elapsed().as_millis() as u64;
        match outcome {
            Ok(Outcome::Done) => {
                self.stats.done.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(took_ms, "job done");
                let _ = self.acks.send(Ack { topic, id, token });
            }
            Ok(Outcome::RetryAfter(d)) => {
                self.stats.retried.fetch_add(1, Ordering::Relaxed);
                tracing::info!(took_ms, retry_in = ?d, "job handed back for later");
                if let Err(e) = self.client.release(&topic, &id, &token, d).await {
                    tracing::warn!(error = %e, "cannot report the job's outcome; it comes back when its lease ends");
                }
            }
            Ok(Outcome::Fail(msg)) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(took_ms, error = %msg, "job failed");
                let _ = self.nacks.send(nack(msg, false));
            }
            Ok(Outcome::Abort(msg)) => {
                self.stats.aborted.fetch_add(1, Ordering::Relaxed);
                tracing::error!(took_ms, error = %msg, "job aborted; dead");
                let _ = self.nacks.send(nack(msg, true));
            }
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                self.stats.panicked.fetch_add(1, Ordering::Relaxed);
                tracing::error!(took_ms, error = %msg, "handler panicked; counts as a failed attempt");
                let _ = self
                    .nacks
                    .send(nack(format!("handler panicked: {msg}"), false));
            }
        }
    }
}
