//! The service layer: every verb dq offers, said once.
//!
//! Front-ends — the HTTP API (`api`), the admin page (`admin`), the push
//! [`crate::deliverer`] and the config file's topics
//! ([`crate::Server::apply_topics`]) — parse their input into `dq_core`'s
//! validated types, call one method of [`Service`] and render what it
//! returns. No front-end calls the [`Store`]: this module decides, for all of
//! them, what goes with each state change — the effective per-job limits a
//! read shows, the push retry defaults, the loops over the
//! store's bounded calls (delete a topic, replay or purge all dead letters),
//! lateness, and the one log line per change (`debug` for the hot verbs:
//! enqueue, ack, touch, release; `info`/`warn` for the rest).
//!
//! Who is woken is the store's to say: it announces every change that makes
//! a job due earlier ([`Store::watch_wakes`], for this process and every
//! other one alike), and the service's wake listener, started with it,
//! passes each announcement to the waiters ([`Service::wakers`]). No verb
//! wakes anyone a second time.
//!
//! The store is a private field of [`Service`] with no accessor, so the
//! compiler keeps every front-end off it. The loops that need the store
//! itself (the wake listener, the API keys' refresh, the clock's sync and
//! the [`crate::dispatcher::Dispatcher`]) are started here, by
//! [`Service::spawn_loops`], which [`crate::Server::run`] calls once.
//!
//! Files, one group of verbs each: `jobs.rs` (enqueue, get, cancel,
//! reschedule, listings, import), `leases.rs` (reserve, ack, nack, touch,
//! release) with `long_poll.rs` (a reserve's wait for a due job),
//! `topics.rs` (settings, counts, pause, delete; the `SettingsCache`),
//! `schedules.rs`, `keys.rs` (API keys), `dead.rs` (dead letters),
//! `drain.rs` (intake and drain), `backup.rs` (a copy of the store); this
//! file holds the [`Service`] itself, its errors and its loops.

mod backup;
mod combine;
mod dead;
mod drain;
mod jobs;
mod keys;
mod leases;
mod long_poll;
mod schedules;
mod topics;

pub use drain::DrainState;
pub(crate) use jobs::MAX_WAITING_OFFSET;
pub use schedules::{Pass, PassMemory};
pub(crate) use topics::READS_IN_FLIGHT;

use std::sync::Arc;
use std::time::Duration;

use dq_core::{Clock, InvalidInput, JobInfo, Limits, Store, StoreError, StoreResult, Topic};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::StoreClock;
use crate::keys::KeyRing;
use crate::metrics::Metrics;
use crate::push_guard::PushGuard;
use crate::wakers::Wakers;

/// Why a verb was refused, as what the caller does next. Front-ends render
/// it (the HTTP API as [`crate::ApiError`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The store refused or failed (bad input included, as
    /// [`StoreError::Invalid`]; an unknown job as [`StoreError::NotFound`]).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No topic of that name (for verbs on a topic's settings and dead letters).
    #[error("no topic named {0:?}")]
    TopicNotFound(String),
    /// A reserve named a topic dq delivers itself (push or forwarding).
    #[error(
        "topic {0} is delivered by dq (push to its callback URL, or forwarded into Redis); reserve is for pull topics"
    )]
    TopicIsDelivered(String),
    /// A create of a topic that exists.
    #[error("topic {0:?} exists already")]
    TopicExists(String),
    /// This process is shutting down and takes no new reservations.
    #[error("this dq instance is shutting down; retry on another")]
    ShuttingDown,
    /// No schedule of that name.
    #[error("no schedule named {0:?}")]
    ScheduleNotFound(String),
    /// No API key of that name.
    #[error("no API key named {0:?}")]
    KeyNotFound(String),
    /// A create of a key whose name is taken.
    #[error("an API key named {0:?} exists already; rotate it or revoke it first")]
    KeyExists(String),
    /// This process is draining ([`Service::drain`]): it hands out no job
    /// any more, so a load balancer can move its consumers elsewhere.
    #[error("this dq instance is draining (taken out for a restart); reserve on another")]
    Draining,
}

impl From<InvalidInput> for Error {
    fn from(e: InvalidInput) -> Self {
        Self::Store(StoreError::Invalid(e))
    }
}

/// A verb's result.
pub type Result<T> = std::result::Result<T, Error>;

/// A job as reads show it, with its topic (the limits in effect for it are
/// the store's: [`JobInfo::max_attempts`], [`JobInfo::lease_ms`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    /// The job's topic.
    pub topic: Topic,
    /// The job.
    pub job: JobInfo,
}

/// Every verb, over one store. Shared by every front-end (`Arc<Service>`).
///
/// The store is a private field with no accessor: nothing outside this
/// module can call it, so every front-end goes through the verbs below.
pub struct Service {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    wakers: Arc<Wakers>,
    metrics: Arc<Metrics>,
    push_guard: PushGuard,
    shutdown: CancellationToken,
    /// Fires at drain and at shutdown (a child of `shutdown`): no job is
    /// handed out from then on.
    intake: CancellationToken,
    /// Push deliveries and forwarding tasks in flight (drain and shutdown
    /// wait for them).
    deliveries: TaskTracker,
    topics_changed: Notify,
    /// What this instance remembers of the topics' settings.
    settings: topics::SettingsCache,
    /// This process's copy of the API keys, read again every
    /// [`crate::keys::REFRESH`].
    keys: Arc<KeyRing>,
    /// `auto_create_topics` (see [`Service::check_topics_known`]).
    auto_create_topics: std::sync::atomic::AtomicBool,
    /// Single enqueues into a topic that arrive together, written in one
    /// store call.
    enqueues: Arc<combine::Combiner>,
    /// Where the jobs' spans go (`--otlp-endpoint`; none until set).
    spans: std::sync::OnceLock<crate::telemetry::Spans>,
}

/// No span export.
static NO_SPANS: crate::telemetry::Spans = crate::telemetry::Spans::off();

/// What a write of jobs needs, apart from the service (a combined
/// enqueue's writer runs as a task of its own): the store call, then the
/// waiters told.
#[derive(Clone)]
struct Writer {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    wakers: Arc<Wakers>,
}

/// The loops [`Service::spawn_loops`] runs beside the two every service
/// needs (the wake listener and the API keys' refresh).
#[derive(Default)]
pub struct Loops {
    /// Runs the [`crate::dispatcher::Dispatcher`] (promote due jobs, take
    /// back expired leases), sleeping at most this long between passes.
    pub dispatcher: Option<Duration>,
    /// Keeps this clock moved to the store's (`crate::clock::run_sync`).
    pub store_clock: Option<Arc<StoreClock>>,
}

impl Service {
    /// A service over `store`; `metrics` records lateness, `push_guard`
    /// decides which callback addresses topics may register. It starts no
    /// task: until [`Service::spawn_loops`], nobody is woken by the store.
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        limits: Limits,
        metrics: Arc<Metrics>,
        push_guard: PushGuard,
    ) -> Self {
        let shutdown = CancellationToken::new();
        Self {
            store,
            clock,
            limits,
            wakers: Arc::new(Wakers::default()),
            metrics,
            push_guard,
            intake: shutdown.child_token(),
            deliveries: TaskTracker::new(),
            shutdown,
            topics_changed: Notify::new(),
            settings: topics::SettingsCache::default(),
            keys: Arc::new(KeyRing::default()),
            auto_create_topics: std::sync::atomic::AtomicBool::new(true),
            enqueues: Arc::default(),
            spans: std::sync::OnceLock::new(),
        }
    }

    /// Exports the jobs' spans through `spans` from now on (once; a second
    /// call is ignored).
    pub fn set_spans(&self, spans: crate::telemetry::Spans) {
        let _ = self.spans.set(spans);
    }

    /// Where the jobs' spans go.
    pub fn spans(&self) -> &crate::telemetry::Spans {
        self.spans.get().unwrap_or(&NO_SPANS)
    }

    fn writer(&self) -> Writer {
        Writer {
            store: self.store.clone(),
            clock: self.clock.clone(),
            wakers: self.wakers.clone(),
        }
    }

    /// Starts the service's background loops on `tracker`, each supervised
    /// (restarted after a panic) until `cancel` fires: the wake listener
    /// (the store's announcements passed to the waiters), the refresh of
    /// the API keys, and those `loops` names. [`crate::Server::run`] calls
    /// it once, so every loop starts in one place and is awaited at
    /// shutdown. The loops hold the store, not the service.
    pub fn spawn_loops(&self, tracker: &TaskTracker, cancel: &CancellationToken, loops: &Loops) {
        {
            let (store, w) = (self.store.clone(), self.wakers.clone());
            // A listener that panics starts again, waking every waiter
            // first (one may have missed a wake-up meanwhile).
            crate::supervise(tracker, cancel, "wake-listener", move || {
                let (store, w) = (store.clone(), w.clone());
                async move {
                    w.wake("");
                    let on_wake = w.clone();
                    store
                        .watch_wakes(Arc::new(move |t: &str| on_wake.wake(t)))
                        .await;
                }
            });
        }
        self::keys::spawn_refresh(self.store.clone(), self.keys.clone(), tracker, cancel);
        if let Some(clock) = &loops.store_clock {
            let (clock, store, stop) = (clock.clone(), self.store.clone(), cancel.clone());
            crate::supervise(tracker, cancel, "clock-sync", move || {
                crate::clock::run_sync(clock.clone(), store.clone(), stop.clone())
            });
        }
        if let Some(max_sleep) = loops.dispatcher {
            let (store, clock, wakers) =
                (self.store.clone(), self.clock.clone(), self.wakers.clone());
            let stop = cancel.clone();
            crate::supervise(tracker, cancel, "dispatcher", move || {
                let d = crate::dispatcher::Dispatcher::new(
                    store.clone(),
                    clock.clone(),
                    wakers.clone(),
                    max_sleep,
                );
                d.run(stop.clone())
            });
        }
    }

    /// Moves `clock` to the store's time now (the [`Loops::store_clock`]
    /// loop keeps it there).
    pub async fn sync_clock(&self, clock: &StoreClock) {
        clock.sync(self.store.as_ref()).await;
    }

    /// The `/metrics` exposition: the store's figures read now (its health,
    /// topics, the counts of those with series of their own,
    /// `READS_IN_FLIGHT` at a time, size and work), then this process's.
    pub async fn metrics_text(&self) -> String {
        use futures::StreamExt;
        let health = self.store.health().await;
        let up = health.iter().any(|(_, r)| r.is_ok());
        let mut snap = crate::metrics::StoreSnapshot {
            health,
            ..Default::default()
        };
        if up && let Ok(topics) = self.topics().await {
            snap.topics = topics.len();
            snap.stats = futures::stream::iter(self.metrics.with_series(topics))
                .map(|t| async move { self.stats(&t).await.ok().map(|s| (t, s)) })
                .buffered(READS_IN_FLIGHT)
                .filter_map(std::future::ready)
                .collect()
                .await;
        }
        snap.bytes = self.size_bytes().await.ok().flatten();
        snap.work = self.work_counters();
        if self.spans().is_on() {
            snap.work.push(dq_core::WorkCounter {
                name: "dq_otlp_spans_dropped_total",
                help: "Spans of jobs not exported because the export queue was full (the collector down or slow).",
                value: self.spans().dropped() as f64,
            });
        }
        snap.now_ms = self.clock.now_ms();
        self.metrics.render(&snap)
    }

    /// The most partitions a topic may have on this store.
    pub fn max_partitions(&self) -> u32 {
        self.store.max_partitions()
    }

    /// The source of "now".
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Input bounds.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// In-process wake-ups (the dispatcher and the wake listener share them;
    /// tests wake waiters after moving a manual clock).
    pub fn wakers(&self) -> &Arc<Wakers> {
        &self.wakers
    }

    /// Which addresses push callbacks may reach.
    pub fn push_guard(&self) -> PushGuard {
        self.push_guard
    }

    /// Fires at shutdown: reserves stop taking jobs.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Notified when this process changed a topic's settings (the
    /// deliverer picks up a new push topic at once).
    pub(crate) fn topics_changed(&self) -> &Notify {
        &self.topics_changed
    }

    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// `t` was written through this process (a job may be due earlier):
    /// reserves here stop skipping it at once, before the store's
    /// announcement arrives (see [`Wakers::changed`]). Called whether the
    /// write succeeded or not: a failed call may have written.
    fn changed(&self, t: &Topic) {
        self.wakers.changed(t.as_str());
    }

    /// The store's size in bytes, where it can tell (see `Store::size_bytes`).
    ///
    /// # Errors
    /// A store error.
    pub async fn size_bytes(&self) -> Result<Option<u64>> {
        Ok(self.store.size_bytes().await?)
    }

    /// Counters of the store's own work (see `Store::work_counters`).
    pub fn work_counters(&self) -> Vec<dq_core::WorkCounter> {
        self.store.work_counters()
    }

    /// The next value of the store's counter `name` (unique and increasing
    /// across every instance sharing the store).
    ///
    /// # Errors
    /// A store error.
    pub async fn next_seq(&self, name: &str) -> Result<u64> {
        Ok(self.store.next_seq(name).await?)
    }

    /// Each part of the store (one per Redis shard) and whether it answers.
    pub async fn health(&self) -> Vec<(String, StoreResult<()>)> {
        self.store.health().await
    }
}

fn view(t: &Topic, job: JobInfo) -> JobView {
    JobView {
        topic: t.clone(),
        job,
    }
}
