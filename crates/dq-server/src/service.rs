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
//! Background loops that are not front-ends (the dispatcher's promote and
//! reap passes) are handed the store by [`crate::Server`] itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq_core::limits::{self, MAX_BATCH};
use dq_core::{
    Clock, Delivery, Enqueued, Held, HeldNack, HeldTouch, InvalidInput, JobId, JobInfo, JobState,
    Lease, Limits, Nack, NackOutcome, NewJob, Store, StoreError, StoreResult, Topic, TopicConfig,
    TopicConfigPatch, TopicStats,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::keys::{self, ApiKey, KeyRing};
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
    TopicIsPush(String),
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

/// Where a drain is ([`Service::drain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainState {
    /// Deliveries and forwarding tasks still running.
    pub in_flight: u64,
    /// None is running: the process may be stopped.
    pub drained: bool,
}

/// One ack of a batch.
#[derive(Debug, Clone)]
pub struct AckItem {
    /// The job's topic.
    pub topic: Topic,
    /// The job.
    pub id: JobId,
    /// The lease token the reserve handed out.
    pub token: String,
}

/// One nack of a batch ([`Service::nack_batch`]).
#[derive(Debug, Clone)]
pub struct NackItem {
    /// The job's topic.
    pub topic: Topic,
    /// The job.
    pub id: JobId,
    /// The lease token the reserve handed out.
    pub token: String,
    /// Why (kept, clipped, as the job's `last_error`).
    pub error: String,
    /// Retry after this long instead of the retry policy's wait.
    pub retry_in_ms: Option<u64>,
    /// Dead at once, whatever attempts are left.
    pub dead: bool,
    /// The job's new priority; `None` keeps it.
    pub priority: Option<u32>,
}

/// One lease extension of a batch ([`Service::touch_batch`]).
#[derive(Debug, Clone)]
pub struct TouchItem {
    /// The job's topic.
    pub topic: Topic,
    /// The job.
    pub id: JobId,
    /// The lease token the reserve handed out.
    pub token: String,
    /// New lease from now; `None` is the job's, else the topic's.
    pub lease_ms: Option<u64>,
}

/// How long a topic's delivery mode, as [`Service::reserve`] checks it, may
/// be stale when another dq instance changed it (changes through this
/// instance take effect at once).
const MODE_TTL: Duration = Duration::from_secs(1);

/// How long one read of the delivered topics serves the deliverer and the
/// forwarder (both read every second).
const DELIVERED_TTL: Duration = Duration::from_millis(500);

/// How often the store's settings version is read
/// ([`Store::settings_version`]): a cached read of settings is kept while it
/// has not moved, so settings changed through another instance are seen
/// within this, and nothing is read again per topic while none change.
const VERSION_EVERY: Duration = Duration::from_millis(250);

/// Longest a cached read of settings is kept on an unchanged version (the
/// backstop for a change whose version bump was lost with its instance,
/// killed between the two writes), per [`KEEPS_PER`] topics the read
/// covered: a read of every topic's settings then costs the same share of
/// the store whatever their number (at 100,000 topics, once in 100 min).
const VERSION_KEEPS: Duration = Duration::from_secs(60);

/// See [`VERSION_KEEPS`].
const KEEPS_PER: usize = 1000;

/// Store reads a listing keeps in flight at once (counts or settings of
/// many topics): a page of 100 costs a few round trips, not 100.
pub(crate) const READS_IN_FLIGHT: usize = 16;

/// Most topics whose mode is remembered; beyond it the memory starts over,
/// so hostile topic names in reserves cannot grow it.
const MODE_CACHE_MAX: usize = 10_000;

/// Something read from the topics' settings, when, and at which settings
/// version ([`Store::settings_version`]).
struct Cached<T> {
    at: Instant,
    version: Option<u64>,
    value: T,
    /// Topics whose settings the read covered.
    covered: usize,
}

impl<T> Cached<T> {
    fn new(version: Option<u64>, value: T, covered: usize) -> Self {
        Self {
            at: Instant::now(),
            version,
            value,
            covered,
        }
    }

    /// Whether the read still holds now that the version is `now`: within
    /// `ttl` always, and while the version has not moved for up to
    /// [`VERSION_KEEPS`] per [`KEEPS_PER`] topics covered.
    fn fresh(&self, now: Option<u64>, ttl: Duration) -> bool {
        let age = self.at.elapsed();
        let keeps = VERSION_KEEPS * self.covered.div_ceil(KEEPS_PER).max(1) as u32;
        age < ttl || (self.version.is_some() && self.version == now && age < keeps)
    }
}

/// Every verb, over one store. Shared by every front-end (`Arc<Service>`).
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
    /// Whether each recently reserved topic is delivered by push, when
    /// that was read, and at which settings version.
    modes: Mutex<HashMap<Topic, Cached<bool>>>,
    /// The last read of the topics dq delivers itself, when and at which
    /// settings version.
    delivered: Mutex<Option<Cached<HashMap<Topic, Delivery>>>>,
    /// The store's settings version as last read, and when.
    settings_seen: Mutex<Option<(Instant, Option<u64>)>>,
    /// Bumped by every settings change here: a read that began before one
    /// is not kept.
    delivered_gen: std::sync::atomic::AtomicU64,
    /// This process's copy of the API keys, read again every
    /// [`crate::keys::REFRESH`].
    keys: Arc<KeyRing>,
    /// Stops the wake listener when the service goes.
    _listener: tokio_util::sync::DropGuard,
}

impl Service {
    /// A service over `store`; `metrics` records lateness, `push_guard`
    /// decides which callback addresses topics may register. Called within
    /// a Tokio runtime, it starts listening to the store's wake-ups there
    /// (until the service is dropped); outside one, nobody is ever woken.
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        limits: Limits,
        metrics: Arc<Metrics>,
        push_guard: PushGuard,
    ) -> Self {
        let wakers = Arc::new(Wakers::default());
        let stop = CancellationToken::new();
        let ring = Arc::new(KeyRing::default());
        if tokio::runtime::Handle::try_current().is_ok() {
            let (store, ring) = (store.clone(), ring.clone());
            crate::supervise(&TaskTracker::new(), &stop, "key-refresh", move || {
                let (store, ring) = (store.clone(), ring.clone());
                async move {
                    loop {
                        if let Err(e) = refresh_keys(&*store, &ring).await {
                            tracing::debug!(error = %e, "reading the API keys failed; keeping the last copy");
                        }
                        tokio::time::sleep(keys::REFRESH).await;
                    }
                }
            });
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            let (store, w) = (store.clone(), wakers.clone());
            // Supervised like the Server's loops: a listener that panics
            // starts again, waking every waiter first (one may have missed
            // a wake-up meanwhile).
            crate::supervise(&TaskTracker::new(), &stop, "wake-listener", move || {
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
        let shutdown = CancellationToken::new();
        Self {
            store,
            clock,
            limits,
            _listener: stop.drop_guard(),
            wakers,
            metrics,
            push_guard,
            intake: shutdown.child_token(),
            deliveries: TaskTracker::new(),
            shutdown,
            topics_changed: Notify::new(),
            modes: Mutex::new(HashMap::new()),
            delivered: Mutex::new(None),
            settings_seen: Mutex::new(None),
            delivered_gen: std::sync::atomic::AtomicU64::new(0),
            keys: ring,
        }
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

    /// Fires when this instance stops handing out jobs: at
    /// [`Service::drain`] and at shutdown. Reserves waiting then return what
    /// they have; push and forwarding loops stop claiming.
    pub fn intake(&self) -> &CancellationToken {
        &self.intake
    }

    /// Whether this instance was asked to drain (or is shutting down).
    pub fn is_draining(&self) -> bool {
        self.intake.is_cancelled()
    }

    /// Push deliveries and forwarding tasks of this instance: the server
    /// spawns them here, so a drain and a shutdown can wait for them.
    pub fn deliveries(&self) -> &TaskTracker {
        &self.deliveries
    }

    /// Drains this instance for a rolling restart: from now on it hands out
    /// no job (reserves get [`Error::Draining`], push and forwarding stop
    /// claiming, `/readyz` answers 503 `draining`); then waits up to `wait`
    /// for the deliveries in flight. Jobs already leased by pull consumers
    /// stay theirs (ack, nack and touch go on working here and on every
    /// instance). There is no undoing it: restart the process.
    pub async fn drain(&self, wait: Duration) -> DrainState {
        if !self.intake.is_cancelled() {
            tracing::info!(
                in_flight = self.deliveries.len(),
                "draining: no new reservations or push claims on this instance; /readyz answers 503"
            );
            self.intake.cancel();
        }
        self.deliveries.close();
        let drained = tokio::time::timeout(wait, self.deliveries.wait())
            .await
            .is_ok();
        let in_flight = self.deliveries.len() as u64;
        if drained || in_flight == 0 {
            tracing::info!("drained: no delivery in flight; stop the process when ready");
        }
        DrainState {
            in_flight,
            drained: drained || in_flight == 0,
        }
    }

    /// Notified when this process changed a topic's settings (the
    /// deliverer picks up a new push topic at once).
    pub(crate) fn topics_changed(&self) -> &Notify {
        &self.topics_changed
    }

    /// The store, for the background loops [`crate::Server`] runs.
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
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

    // ---- jobs -------------------------------------------------------------

    /// Enqueues one job.
    ///
    /// # Errors
    /// A store error; nothing was written.
    pub async fn enqueue(&self, t: &Topic, job: NewJob) -> Result<Enqueued> {
        let mut out = self.enqueue_batch(t, vec![job]).await?;
        out.pop()
            .ok_or_else(|| StoreError::Unavailable("the store answered no result".into()).into())
    }

    /// Enqueues up to [`MAX_BATCH`] jobs in one store call; a result per job,
    /// in order. Waiters are woken when any job was created or replaced.
    ///
    /// # Errors
    /// `invalid_batch` for an empty or oversized batch; a store error
    /// (nothing written).
    pub async fn enqueue_batch(&self, t: &Topic, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        if jobs.is_empty() || jobs.len() > MAX_BATCH {
            return Err(InvalidInput::new(
                "invalid_batch",
                format!("a batch holds 1 to {MAX_BATCH} jobs, got {}", jobs.len()),
            )
            .into());
        }
        let out = self.store.enqueue(t, &jobs, self.now()).await;
        self.changed(t);
        let out = out?;
        let changed = out.iter().filter(|e| e.created || e.replaced).count();
        tracing::debug!(topic = %t, jobs = out.len(), changed, "jobs enqueued");
        Ok(out)
    }

    /// One job with the limits in effect for it.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; a store error.
    pub async fn get(&self, t: &Topic, id: &JobId) -> Result<JobView> {
        let job = self.store.get(t, id).await?.ok_or(StoreError::NotFound)?;
        Ok(view(t, job))
    }

    /// Removes a job in any state; returns the state it was in.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; a store error.
    pub async fn cancel(&self, t: &Topic, id: &JobId) -> Result<JobState> {
        let was = self
            .store
            .cancel(t, id, self.now())
            .await?
            .ok_or(StoreError::NotFound)?;
        tracing::info!(topic = %t, id = %id, state = %was, "job cancelled");
        Ok(was)
    }

    /// Moves a waiting job to `due_at_ms`.
    ///
    /// # Errors
    /// `invalid_due_at` beyond the largest delay; [`StoreError::NotFound`],
    /// [`StoreError::NotInState`] when reserved or dead.
    pub async fn reschedule(&self, t: &Topic, id: &JobId, due_at_ms: u64) -> Result<()> {
        let now = self.now();
        self.limits.check_due_at(due_at_ms, now)?;
        let done = self.store.reschedule(t, id, due_at_ms, now).await;
        self.changed(t);
        done?;
        tracing::info!(topic = %t, id = %id, due_at_ms, "job rescheduled");
        Ok(())
    }

    /// Leases up to `max` due jobs of pull topics, waiting up to `wait_ms`
    /// for one to become due (see `reserve.rs`). Lateness is recorded for
    /// each job handed out.
    ///
    /// # Errors
    /// [`Error::ShuttingDown`], [`Error::Draining`]; [`Error::TopicIsPush`]; a store error when
    /// nothing was reserved.
    pub async fn reserve(
        &self,
        topics: &[Topic],
        max: usize,
        lease_ms: Option<u64>,
        wait_ms: u64,
    ) -> Result<Vec<Lease>> {
        self.check_intake()?;
        for t in topics {
            if self.is_delivered(t).await? {
                return Err(Error::TopicIsPush(t.to_string()));
            }
        }
        // Consumers' calls only: the deliverer's own reserves are no consumer
        // waiting for work (dq_reserve_in_progress).
        let _in_progress = self.metrics.reserving();
        self.hand_out(topics, max, lease_ms, wait_ms).await
    }

    /// What the deliverer and the forwarder reserve of a topic they deliver:
    /// as [`Service::reserve`], without the pull-only check.
    pub(crate) async fn reserve_push(
        &self,
        t: &Topic,
        max: usize,
        lease_ms: u64,
        wait_ms: u64,
    ) -> Result<Vec<Lease>> {
        self.check_intake()?;
        self.hand_out(std::slice::from_ref(t), max, Some(lease_ms), wait_ms)
            .await
    }

    /// Refuses a hand-out once this instance shuts down or drains.
    fn check_intake(&self) -> Result<()> {
        if self.shutdown.is_cancelled() {
            return Err(Error::ShuttingDown);
        }
        if self.intake.is_cancelled() {
            return Err(Error::Draining);
        }
        Ok(())
    }

    async fn hand_out(
        &self,
        topics: &[Topic],
        max: usize,
        lease_ms: Option<u64>,
        wait_ms: u64,
    ) -> Result<Vec<Lease>> {
        let leases = crate::reserve::reserve(self, topics, max, lease_ms, wait_ms).await;
        for t in topics {
            self.wakers.release(t.as_str());
        }
        let leases = leases?;
        let now = self.now();
        for l in &leases {
            let late = Duration::from_millis(now.saturating_sub(l.due_at_ms));
            self.metrics.observe_lateness(l.topic.as_str(), late);
        }
        Ok(leases)
    }

    /// Whether dq delivers `t` itself (push, forwarding), as read within
    /// [`MODE_TTL`].
    async fn is_delivered(&self, t: &Topic) -> Result<bool> {
        let version = self.settings_version().await;
        if let Some(c) = self.modes.lock().expect("poisoned").get(t)
            && c.fresh(version, MODE_TTL)
        {
            return Ok(c.value);
        }
        let push = self
            .store
            .topic_config(t)
            .await?
            .is_some_and(|c| c.delivery.is_delivered_by_dq());
        let mut modes = self.modes.lock().expect("poisoned");
        if modes.len() >= MODE_CACHE_MAX {
            modes.clear();
        }
        modes.insert(t.clone(), Cached::new(version, push, 1));
        Ok(push)
    }

    /// Completes a job.
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::LeaseMismatch`] for a stale
    /// token, [`StoreError::NotInState`].
    pub async fn ack(&self, t: &Topic, id: &JobId, token: &str) -> Result<()> {
        self.store.ack(t, id, token, self.now()).await?;
        tracing::debug!(topic = %t, id = %id, "job acked");
        Ok(())
    }

    /// Acks each item in one store call ([`Store::ack_batch`]: one script
    /// per topic on Redis, one transaction on the embedded store); a result
    /// per item, in order, each as [`Service::ack`] answers it.
    pub async fn ack_batch(&self, acks: &[AckItem]) -> Vec<Result<()>> {
        let items: Vec<Held<'_>> = acks
            .iter()
            .map(|a| Held {
                topic: &a.topic,
                id: &a.id,
                token: &a.token,
            })
            .collect();
        let done = self.store.ack_batch(&items, self.now()).await;
        acks.iter()
            .zip(done)
            .map(|(a, r)| {
                r?;
                tracing::debug!(topic = %a.topic, id = %a.id, "job acked");
                Ok(())
            })
            .collect()
    }

    /// Fails an attempt: retried after `nack.retry_in_ms` (or the retry
    /// policy's wait), or dead when it was the last or `nack.dead` says so.
    ///
    /// # Errors
    /// `invalid_delay` beyond the largest delay; as [`Service::ack`].
    pub async fn nack(&self, t: &Topic, id: &JobId, nack: Nack<'_>) -> Result<NackOutcome> {
        if let Some(ms) = nack.retry_in_ms {
            self.limits.check_delay(ms)?;
        }
        let out = self.store.nack(t, id, nack, self.now()).await;
        self.changed(t);
        let out = out?;
        self.nacked(t, id, &nack, &out);
        Ok(out)
    }

    /// Nacks each item in one store call ([`Store::nack_batch`]: one script
    /// per topic on Redis, one transaction on the embedded store); a result
    /// per item, in order, each as [`Service::nack`] answers it (an item
    /// whose `retry_in_ms` is out of bounds is refused alone, before the
    /// store sees it).
    pub async fn nack_batch(&self, items: &[NackItem]) -> Vec<Result<NackOutcome>> {
        let mut out: Vec<Option<Result<NackOutcome>>> = Vec::with_capacity(items.len());
        let mut held: Vec<HeldNack<'_>> = Vec::with_capacity(items.len());
        let mut slots: Vec<usize> = Vec::with_capacity(items.len());
        for it in items {
            if let Some(ms) = it.retry_in_ms
                && let Err(e) = self.limits.check_delay(ms)
            {
                out.push(Some(Err(StoreError::from(e).into())));
                continue;
            }
            slots.push(out.len());
            out.push(None);
            held.push(HeldNack {
                topic: &it.topic,
                id: &it.id,
                nack: Nack {
                    token: &it.token,
                    error: &it.error,
                    retry_in_ms: it.retry_in_ms,
                    dead: it.dead,
                    priority: it.priority,
                },
            });
        }
        let done = self.store.nack_batch(&held, self.now()).await;
        let mut topics: Vec<&Topic> = held.iter().map(|h| h.topic).collect();
        topics.sort();
        topics.dedup();
        for t in topics {
            self.changed(t);
        }
        for ((slot, h), r) in slots.into_iter().zip(&held).zip(done) {
            if let Ok(o) = &r {
                self.nacked(h.topic, h.id, &h.nack, o);
            }
            out[slot] = Some(r.map_err(Error::from));
        }
        out.into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }

    /// What a nack did, for the dispatcher and the log.
    fn nacked(&self, t: &Topic, id: &JobId, nack: &Nack<'_>, out: &NackOutcome) {
        if matches!(out, NackOutcome::Dead { .. }) {
            self.wakers.died(t.as_str());
        }
        let error = limits::clip_error(nack.error);
        match *out {
            NackOutcome::Retry { due_at_ms, attempt } => {
                tracing::info!(topic = %t, id = %id, attempt, error = %error, retry_at_ms = due_at_ms, "job failed; will retry");
            }
            NackOutcome::Dead { attempt } if nack.dead => {
                tracing::warn!(topic = %t, id = %id, attempt, error = %error, "job failed for good; dead");
            }
            NackOutcome::Dead { attempt } => {
                tracing::warn!(topic = %t, id = %id, attempt, error = %error, "job failed for the last time; dead");
            }
        }
    }

    /// Gives a reserved job back without counting the attempt, due after
    /// `delay_ms`; returns the new due time.
    ///
    /// # Errors
    /// `invalid_delay`; as [`Service::ack`].
    pub async fn release(&self, t: &Topic, id: &JobId, token: &str, delay_ms: u64) -> Result<u64> {
        self.limits.check_delay(delay_ms)?;
        let due = self.store.release(t, id, token, delay_ms, self.now()).await;
        self.changed(t);
        let due = due?;
        tracing::debug!(topic = %t, id = %id, due_at_ms = due, "job released");
        Ok(due)
    }

    /// Extends a lease to now + `lease_ms` (or the job's / topic's lease);
    /// returns the new deadline.
    ///
    /// # Errors
    /// `invalid_lease`; as [`Service::ack`].
    pub async fn touch(
        &self,
        t: &Topic,
        id: &JobId,
        token: &str,
        lease_ms: Option<u64>,
    ) -> Result<u64> {
        if let Some(ms) = lease_ms {
            limits::check_lease(ms)?;
        }
        let deadline = self.store.touch(t, id, token, lease_ms, self.now()).await?;
        // A shorter lease than before ends before the dispatcher's plan says.
        self.wakers.lease_ends(t.as_str(), deadline);
        tracing::debug!(topic = %t, id = %id, lease_deadline_ms = deadline, "lease extended");
        Ok(deadline)
    }

    /// Extends each item's lease in one store call ([`Store::touch_batch`]:
    /// one script per topic on Redis, one transaction on the embedded
    /// store); a result per item, in order, each as [`Service::touch`]
    /// answers it (an item whose `lease_ms` is out of bounds is refused
    /// alone, before the store sees it).
    pub async fn touch_batch(&self, items: &[TouchItem]) -> Vec<Result<u64>> {
        let mut out: Vec<Option<Result<u64>>> = Vec::with_capacity(items.len());
        let mut held: Vec<HeldTouch<'_>> = Vec::with_capacity(items.len());
        let mut slots: Vec<usize> = Vec::with_capacity(items.len());
        for it in items {
            if let Some(ms) = it.lease_ms
                && let Err(e) = limits::check_lease(ms)
            {
                out.push(Some(Err(StoreError::from(e).into())));
                continue;
            }
            slots.push(out.len());
            out.push(None);
            held.push(HeldTouch {
                topic: &it.topic,
                id: &it.id,
                token: &it.token,
                lease_ms: it.lease_ms,
            });
        }
        let done = self.store.touch_batch(&held, self.now()).await;
        for ((slot, h), r) in slots.into_iter().zip(&held).zip(done) {
            if let Ok(deadline) = r {
                // A shorter lease than before ends before the dispatcher's plan says.
                self.wakers.lease_ends(h.topic.as_str(), deadline);
                tracing::debug!(topic = %h.topic, id = %h.id, lease_deadline_ms = deadline, "lease extended");
            }
            out[slot] = Some(r.map_err(Error::from));
        }
        out.into_iter()
            .map(|r| r.expect("every item answered"))
            .collect()
    }

    // ---- topics -----------------------------------------------------------

    /// Leases the job `id` of `t` whether it is scheduled, ready or dead
    /// (beanstalkd's `reserve-job`); `None` when it is missing or reserved.
    ///
    /// # Errors
    /// [`Error::ShuttingDown`], [`Error::Draining`]; a store error.
    pub async fn reserve_job(&self, t: &Topic, id: &JobId) -> Result<Option<Lease>> {
        self.check_intake()?;
        let now = self.now();
        let lease = self.store.reserve_job(t, id, None, now).await;
        // A failed call may have leased it: the dispatcher looks (see reserve.rs).
        let deadline = match &lease {
            Ok(Some(l)) => Some(l.lease_deadline_ms),
            Ok(None) => None,
            Err(_) => Some(now),
        };
        if let Some(d) = deadline {
            self.wakers.lease_ends(t.as_str(), d);
        }
        let lease = lease?;
        if lease.is_some() {
            tracing::debug!(topic = %t, id = %id, "job reserved by id");
        }
        Ok(lease)
    }

    /// Pauses `t` for `for_ms` (0: resumes it now): nothing is handed out of
    /// it meanwhile, through any front-end. Waiters here are woken.
    ///
    /// # Errors
    /// `invalid_delay` beyond the largest delay; a store error.
    pub async fn pause_topic(&self, t: &Topic, for_ms: u64) -> Result<()> {
        self.limits.check_delay(for_ms)?;
        let until = if for_ms == 0 { 0 } else { self.now() + for_ms };
        let done = self.store.pause_topic(t, until).await;
        self.changed(t);
        done?;
        tracing::info!(topic = %t, for_ms, "topic paused");
        Ok(())
    }

    /// The store's size in bytes, where it can tell (see `Store::size_bytes`).
    ///
    /// # Errors
    /// A store error.
    pub async fn store_bytes(&self) -> Result<Option<u64>> {
        Ok(self.store.size_bytes().await?)
    }

    /// Counters of the store's own work (see `Store::work_counters`).
    pub fn store_work(&self) -> Vec<dq_core::WorkCounter> {
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

    /// Every known topic.
    ///
    /// # Errors
    /// A store error.
    pub async fn topics(&self) -> Result<Vec<Topic>> {
        Ok(self.store.topics().await?)
    }

    /// A topic's counts (zeros for a topic never seen).
    ///
    /// # Errors
    /// A store error.
    pub async fn stats(&self, t: &Topic) -> Result<TopicStats> {
        Ok(self.store.stats(t, self.now()).await?)
    }

    /// Every topic with its counts, in name order. For front-ends that
    /// must show every topic at once (beanstalkd's `list-tubes` and
    /// `stats`); listings for people page with [`Service::list_topics`].
    ///
    /// # Errors
    /// A store error.
    pub async fn topics_with_stats(&self) -> Result<Vec<(Topic, TopicStats)>> {
        let topics = self.store.topics().await?;
        let stats = self.stats_of(&topics).await?;
        Ok(topics.into_iter().zip(stats).collect())
    }

    /// One page of the topics in name order: those after `cursor` (the
    /// previous page's last name; `backward`: those before it, the next
    /// page's first name) that start with `prefix`, at most `limit`, and
    /// whether more follow that way (see [`Store::list_topics`]).
    ///
    /// # Errors
    /// `invalid_limit` outside 1–[`limits::MAX_TOPICS_PAGE`];
    /// `invalid_cursor` for a cursor that is not a topic name;
    /// `invalid_prefix` ([`Topic::check_prefix`]); a store error.
    pub async fn list_topics(
        &self,
        cursor: Option<&str>,
        backward: bool,
        prefix: &str,
        limit: usize,
    ) -> Result<dq_core::TopicPage> {
        if !(1..=limits::MAX_TOPICS_PAGE).contains(&limit) {
            return Err(InvalidInput::new(
                "invalid_limit",
                format!(
                    "limit must be between 1 and {}, got {limit}",
                    limits::MAX_TOPICS_PAGE
                ),
            )
            .into());
        }
        let after = cursor
            .map(|c| {
                Topic::new(c).map_err(|_| {
                    InvalidInput::new(
                        "invalid_cursor",
                        "cursor is not one this server handed out (a topic name): start again without one",
                    )
                })
            })
            .transpose()?;
        Topic::check_prefix(prefix)?;
        let listing = dq_core::TopicListing {
            cursor: after.as_ref(),
            backward,
            prefix,
            limit,
        };
        Ok(self.store.list_topics(&listing).await?)
    }

    /// The counts of each of `topics`, in order: [`READS_IN_FLIGHT`] at a
    /// time, not one after another.
    ///
    /// # Errors
    /// The first store error.
    pub async fn stats_of(&self, topics: &[Topic]) -> Result<Vec<TopicStats>> {
        use futures::StreamExt;
        let now = self.now();
        // Owned topics in the futures: a future borrowing the slice's items
        // through the stream's closure is not `Send` for axum.
        let reads = topics
            .iter()
            .cloned()
            .map(|t| async move { self.store.stats(&t, now).await });
        let stats: Vec<StoreResult<TopicStats>> = futures::stream::iter(reads)
            .buffered(READS_IN_FLIGHT)
            .collect()
            .await;
        Ok(stats.into_iter().collect::<StoreResult<Vec<_>>>()?)
    }

    /// A topic's settings, `None` when unknown.
    ///
    /// # Errors
    /// A store error.
    pub async fn topic_config(&self, t: &Topic) -> Result<Option<TopicConfig>> {
        Ok(self.store.topic_config(t).await?)
    }

    /// A known topic's settings.
    ///
    /// # Errors
    /// [`Error::TopicNotFound`]; a store error.
    pub async fn known_topic(&self, t: &Topic) -> Result<TopicConfig> {
        self.store
            .topic_config(t)
            .await?
            .ok_or_else(|| Error::TopicNotFound(t.to_string()))
    }

    /// Validates and stores a topic's settings (fields left out keep their
    /// value; a push URL is checked against the SSRF guard; push defaults
    /// filled in). Returns the resulting settings.
    ///
    /// # Errors
    /// The first field out of bounds (`invalid_*`, `invalid_callback`); a
    /// store error. Nothing is written unless every check passed.
    pub async fn configure_topic(&self, t: &Topic, patch: TopicConfigPatch) -> Result<TopicConfig> {
        patch.validate(&self.limits)?;
        let mut patch = patch;
        match patch.delivery.as_ref() {
            Some(Delivery::Push(p)) => {
                let unresolved = self
                    .push_guard
                    .check_url_setting(&p.url)
                    .await
                    .map_err(|m| InvalidInput::new("invalid_callback", m))?;
                if let Some(why) = unresolved {
                    tracing::warn!(topic = %t, "{why}: the callback is saved; deliveries fail until it resolves");
                }
            }
            Some(d) if d.target().is_some() => {
                let url = d.target().map(|t| t.url().to_string()).unwrap_or_default();
                let (host, port) = dq_core::forward::host_port(&url)
                    .ok_or_else(|| InvalidInput::new("invalid_target", "url needs a host"))?;
                // Resolved and checked now, and a name that does not
                // resolve is refused: unlike a push callback, the Redis
                // client connects without the guard's resolver, so this is
                // the only check a target gets.
                self.push_guard
                    .check_host(host, port)
                    .await
                    .map_err(|m| InvalidInput::new("invalid_target", m))?;
            }
            _ => {}
        }
        if patch
            .delivery
            .as_ref()
            .is_some_and(Delivery::is_delivered_by_dq)
        {
            let current = self.store.topic_config(t).await?.unwrap_or_default();
            patch = patch.with_push_defaults(&current);
        }
        let cfg = self.store.configure_topic(t, &patch).await;
        // A failed call may have written: forget what this instance knew.
        self.forget_mode(t);
        let cfg = cfg?;
        self.topics_changed_now();
        // TopicConfig's Debug redacts push credentials.
        tracing::info!(topic = %t, config = ?cfg, "topic configured");
        Ok(cfg)
    }

    /// As [`Service::configure_topic`] for a topic that must be new.
    ///
    /// # Errors
    /// [`Error::TopicExists`]; as [`Service::configure_topic`].
    pub async fn create_topic(&self, t: &Topic, patch: TopicConfigPatch) -> Result<TopicConfig> {
        if self.store.topic_config(t).await?.is_some() {
            return Err(Error::TopicExists(t.to_string()));
        }
        self.configure_topic(t, patch).await
    }

    /// Deletes a topic and every job in it (in bounded store calls); returns
    /// how many jobs were deleted.
    ///
    /// # Errors
    /// [`Error::TopicNotFound`]; a store error (what was deleted so far
    /// stays deleted; calling again finishes the job).
    pub async fn delete_topic(&self, t: &Topic) -> Result<u64> {
        self.known_topic(t).await?;
        let mut deleted = 0;
        loop {
            let step = self.store.delete_topic(t, MAX_BATCH).await;
            if step.is_err() {
                // Part may be gone: forget what this instance knew.
                self.forget_mode(t);
            }
            let (n, gone) = step?;
            deleted += n;
            if gone {
                break;
            }
        }
        self.forget_mode(t);
        self.topics_changed_now();
        tracing::warn!(topic = %t, deleted, "topic deleted");
        Ok(deleted)
    }

    /// Tells the deliverer and the forwarder (both waiting, or one busy
    /// reading: it gets a stored permit) that settings changed.
    fn topics_changed_now(&self) {
        self.topics_changed.notify_waiters();
        self.topics_changed.notify_one();
    }

    fn forget_mode(&self, t: &Topic) {
        self.changed(t);
        self.modes.lock().expect("poisoned").remove(t);
        self.delivered_gen
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        *self.delivered.lock().expect("poisoned") = None;
    }

    /// Topics dq delivers itself (push, forwarding) with their delivery
    /// settings (the deliverer's and the forwarder's view).
    ///
    /// # Errors
    /// A store error.
    pub(crate) async fn delivered_topics(&self) -> Result<HashMap<Topic, Delivery>> {
        // The deliverer and the forwarder both ask every second: one read
        // of every topic's settings serves both (a change made through this
        // instance clears it at once).
        let version = self.settings_version().await;
        if let Some(c) = &*self.delivered.lock().expect("poisoned")
            && c.fresh(version, DELIVERED_TTL)
        {
            return Ok(c.value.clone());
        }
        let generation = self.delivered_gen.load(std::sync::atomic::Ordering::SeqCst);
        let mut out = HashMap::new();
        let topics = self.store.topics().await?;
        let covered = topics.len();
        use futures::StreamExt;
        // Several in flight: with 100,000 topics one after another is a
        // long wait for a new push topic to be delivered.
        let mut reads = futures::stream::iter(topics)
            .map(|t| async move { self.store.topic_config(&t).await.map(|c| (t, c)) })
            .buffered(READS_IN_FLIGHT);
        while let Some(read) = reads.next().await {
            if let (t, Some(cfg)) = read?
                && cfg.delivery.is_delivered_by_dq()
            {
                out.insert(t, cfg.delivery);
            }
        }
        let mut cache = self.delivered.lock().expect("poisoned");
        if self.delivered_gen.load(std::sync::atomic::Ordering::SeqCst) == generation {
            *cache = Some(Cached::new(version, out.clone(), covered));
        }
        Ok(out)
    }

    /// The store's settings version, read at most every [`VERSION_EVERY`]
    /// (`None`: the store cannot say, or did not answer).
    async fn settings_version(&self) -> Option<u64> {
        if let Some((at, v)) = *self.settings_seen.lock().expect("poisoned")
            && at.elapsed() < VERSION_EVERY
        {
            return v;
        }
        let v = self.store.settings_version().await.ok().flatten();
        *self.settings_seen.lock().expect("poisoned") = Some((Instant::now(), v));
        v
    }

    /// Gives leases back at once without counting their attempts (the
    /// deliverer or forwarder of a topic whose settings changed under it);
    /// one that cannot be given back returns after its lease.
    pub(crate) async fn give_back(&self, leases: &[Lease]) {
        for l in leases {
            if let Err(e) = self.release(&l.topic, &l.id, &l.token, 0).await {
                tracing::debug!(topic = %l.topic, id = %l.id, error = %e, "cannot give a lease back; the job returns after its lease");
            }
        }
    }

    /// Acks reserved jobs of a forwarding topic and writes them into its
    /// target in one step where the store can (see
    /// `Store::ack_and_write`); `None` for each job it cannot.
    ///
    /// # Errors
    /// A store error (nothing is known to be done).
    pub(crate) async fn ack_and_write(
        &self,
        t: &Topic,
        url: &str,
        items: &[dq_core::forward::AckWrite<'_>],
    ) -> Result<Vec<Option<StoreResult<()>>>> {
        Ok(self.store.ack_and_write(t, url, items, self.now()).await?)
    }

    // ---- schedules ----------------------------------------------------------

    /// Creates or replaces a schedule; returns whether it was created and
    /// how it stands. New or changed, its progress starts now: slots before
    /// now are not fired (a replaced schedule's coming slots already
    /// enqueued stay, and one enqueued again under the new rule is the same
    /// job). The same settings as stored change nothing.
    ///
    /// # Errors
    /// Bad settings (see [`crate::schedule::Schedule::new`]; a cron rule
    /// that never fires is `invalid_cron`); `too_many_schedules`; a store
    /// error.
    pub async fn put_schedule(
        &self,
        name: &str,
        spec: dq_api::ScheduleSpec,
    ) -> Result<(bool, dq_api::ScheduleInfo)> {
        self.save_schedule(name, spec, false).await
    }

    /// As [`Service::put_schedule`] for the config file at start: a schedule
    /// stored with the same settings but paused (through the API) stays
    /// paused, with its progress.
    ///
    /// # Errors
    /// As [`Service::put_schedule`].
    pub async fn apply_schedule(
        &self,
        name: &str,
        spec: dq_api::ScheduleSpec,
    ) -> Result<(bool, dq_api::ScheduleInfo)> {
        self.save_schedule(name, spec, true).await
    }

    async fn save_schedule(
        &self,
        name: &str,
        spec: dq_api::ScheduleSpec,
        keep_pause: bool,
    ) -> Result<(bool, dq_api::ScheduleInfo)> {
        use crate::schedule::{KIND, MAX_SCHEDULES, Schedule};
        let mut sched = Schedule::new(name, spec, &self.limits)?;
        let now = self.now();
        sched.check_fires(now)?;
        let stored = self.store.get_record(KIND, name).await?;
        if let Some(rec) = &stored {
            let old = Schedule::from_record(name, &rec.value, &self.limits).ok();
            if keep_pause
                && let Some(old) = &old
                && old.paused()
                && !sched.paused()
            {
                sched = sched.with_paused(true);
            }
            // The same settings again (a restart applying dq.toml): nothing
            // changes, progress included — slots missed meanwhile are
            // caught up as `catch_up` says.
            if rec.value == sched.to_record() {
                return Ok((false, self.schedule_info(&sched, rec.mark, now).await));
            }
        } else if self.store.list_records(KIND).await?.len() >= MAX_SCHEDULES {
            return Err(InvalidInput::new(
                "too_many_schedules",
                format!("at most {MAX_SCHEDULES} schedules; delete one first"),
            )
            .into());
        }
        let value = sched.to_record();
        if value.len() > dq_core::MAX_RECORD_BYTES {
            return Err(InvalidInput::new(
                "body_too_large",
                format!(
                    "a schedule's settings are at most {} bytes, got {}",
                    dq_core::MAX_RECORD_BYTES,
                    value.len()
                ),
            )
            .into());
        }
        let created = self.store.put_record(KIND, name, &value, now).await?;
        // Its first slots at once, not at the next pass.
        if !sched.paused()
            && let Err(e) = crate::schedule::fire(self, &sched, now, now).await
        {
            tracing::warn!(schedule = %name, error = %e, "schedule saved; its first slots are enqueued at the next pass");
        }
        tracing::info!(
            schedule = %name,
            topic = %sched.topic,
            rule = %sched.describe(),
            paused = sched.paused(),
            created,
            "schedule saved"
        );
        let info = self.schedule_info(&sched, now, now).await;
        Ok((created, info))
    }

    /// Every schedule, by name. One whose stored settings this dq cannot
    /// read is left out (and logged; it can still be deleted).
    ///
    /// # Errors
    /// A store error.
    pub async fn schedules(&self) -> Result<Vec<dq_api::ScheduleInfo>> {
        use crate::schedule::{KIND, Schedule};
        let now = self.now();
        let mut out = Vec::new();
        for (name, rec) in self.store.list_records(KIND).await? {
            match Schedule::from_record(&name, &rec.value, &self.limits) {
                Ok(s) => out.push(self.schedule_info(&s, rec.mark, now).await),
                Err(e) => {
                    tracing::warn!(schedule = %name, error = %e.message, "stored schedule is not valid")
                }
            }
        }
        Ok(out)
    }

    /// One schedule.
    ///
    /// # Errors
    /// [`Error::ScheduleNotFound`]; a store error.
    pub async fn schedule(&self, name: &str) -> Result<dq_api::ScheduleInfo> {
        let (sched, mark) = self.load_schedule(name).await?;
        Ok(self.schedule_info(&sched, mark, self.now()).await)
    }

    /// Pauses (`true`) or resumes a schedule. A pause stops the slots not
    /// enqueued yet: the jobs already enqueued ahead (due within
    /// [`crate::schedule::LEAD_MS`]) still run. Resuming starts from now
    /// (slots passed while paused are not fired).
    ///
    /// # Errors
    /// [`Error::ScheduleNotFound`]; a store error.
    pub async fn pause_schedule(&self, name: &str, paused: bool) -> Result<dq_api::ScheduleInfo> {
        use crate::schedule::KIND;
        let (sched, mark) = self.load_schedule(name).await?;
        let now = self.now();
        let sched = sched.with_paused(paused);
        let mark = if paused { mark.max(now) } else { now };
        self.store
            .put_record(KIND, name, &sched.to_record(), mark)
            .await?;
        if !paused && let Err(e) = crate::schedule::fire(self, &sched, mark, now).await {
            tracing::warn!(schedule = %name, error = %e, "schedule resumed; its next slots are enqueued at the next pass");
        }
        tracing::info!(schedule = %name, paused, "schedule {}", if paused { "paused" } else { "resumed" });
        Ok(self.schedule_info(&sched, mark, now).await)
    }

    /// Deletes a schedule (one this dq cannot read too). The jobs already
    /// enqueued ahead for its coming slots (due within
    /// [`crate::schedule::LEAD_MS`]) still run: a schedule put again under
    /// the same name finds them, one job per slot.
    ///
    /// # Errors
    /// [`Error::ScheduleNotFound`]; a store error.
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        crate::schedule::check_name(name)?;
        if !self
            .store
            .delete_record(crate::schedule::KIND, name)
            .await?
        {
            return Err(Error::ScheduleNotFound(name.to_string()));
        }
        tracing::info!(schedule = %name, "schedule deleted");
        Ok(())
    }

    async fn load_schedule(&self, name: &str) -> Result<(crate::schedule::Schedule, u64)> {
        use crate::schedule::{KIND, Schedule};
        crate::schedule::check_name(name)?;
        let rec = self
            .store
            .get_record(KIND, name)
            .await?
            .ok_or_else(|| Error::ScheduleNotFound(name.to_string()))?;
        let sched = Schedule::from_record(name, &rec.value, &self.limits)?;
        Ok((sched, rec.mark))
    }

    async fn schedule_info(
        &self,
        sched: &crate::schedule::Schedule,
        mark: u64,
        now: u64,
    ) -> dq_api::ScheduleInfo {
        let last = sched.prev_before(mark.min(now) + 1);
        let last_job = match last {
            Some(s) if !sched.paused() => {
                let id = sched.job_id(s);
                let state = self
                    .store
                    .get(&sched.topic, &id)
                    .await
                    .ok()
                    .flatten()
                    .map(|j| j.state);
                Some(dq_api::LastJob {
                    id: id.to_string(),
                    state,
                })
            }
            _ => None,
        };
        let next = if sched.paused() {
            Vec::new()
        } else {
            sched
                .next_n(now, crate::schedule::NEXT_SHOWN)
                .into_iter()
                .map(|s| sched.slot(s))
                .collect()
        };
        dq_api::ScheduleInfo {
            name: sched.name.clone(),
            spec: sched.spec.clone(),
            rule: sched.describe(),
            last: last.map(|s| sched.slot(s)),
            last_job,
            next,
        }
    }

    // ---- API keys -------------------------------------------------------------

    /// This process's copy of the keys (what requests are checked against).
    pub fn key_ring(&self) -> &KeyRing {
        &self.keys
    }

    /// Reads the keys from the store into [`Service::key_ring`] now (the
    /// background refresh does it every [`keys::REFRESH`]).
    ///
    /// # Errors
    /// A store error; the copy is kept.
    pub async fn refresh_keys(&self) -> Result<()> {
        refresh_keys(&*self.store, &self.keys).await
    }

    /// The key whose secret is `secret`. When this process knows none, it
    /// reads the keys again first (at most every [`keys::REREAD_EVERY`],
    /// whoever asks), so a key made on another instance a moment ago works
    /// here at once.
    pub async fn find_key(&self, secret: &str) -> Option<Arc<ApiKey>> {
        if let Some(k) = self.keys.find(secret) {
            return Some(k);
        }
        if !self.keys.may_reread() {
            return None;
        }
        let _ = self.refresh_keys().await;
        self.keys.find(secret)
    }

    /// Whether the keys were read at least once; if not, tries now (at
    /// most every [`keys::REREAD_EVERY`]). Callers treat `false` as "keys
    /// may exist": they refuse rather than act as if none did.
    pub async fn keys_loaded(&self) -> bool {
        if !self.keys.loaded() && self.keys.may_reread() {
            let _ = self.refresh_keys().await;
        }
        self.keys.loaded()
    }

    /// Creates a key; returns it with its secret (shown this once).
    ///
    /// # Errors
    /// `invalid_key_name`, `invalid_scope`, `too_many_keys`;
    /// [`Error::KeyExists`]; a store error.
    pub async fn create_key(
        &self,
        name: &str,
        scopes: &[String],
        rate_limit: Option<dq_core::RateLimit>,
    ) -> Result<dq_api::KeyCreated> {
        keys::check_name(name)?;
        let scopes = keys::parse_scopes(scopes)?;
        if let Some(r) = &rate_limit {
            r.validate("rate_limit")?;
        }
        if self.store.get_record(keys::KIND, name).await?.is_some() {
            return Err(Error::KeyExists(name.to_string()));
        }
        if self.store.list_records(keys::KIND).await?.len() >= keys::MAX_KEYS {
            return Err(InvalidInput::new(
                "too_many_keys",
                format!(
                    "a store holds at most {} API keys; revoke some first",
                    keys::MAX_KEYS
                ),
            )
            .into());
        }
        let secret = keys::new_secret();
        let key = ApiKey::new(name.to_string(), &secret, scopes, self.now()).limited(rate_limit);
        let fresh = self
            .store
            .put_record(keys::KIND, name, &key.to_record(), 0)
            .await?;
        if !fresh {
            // Another create of this name won the race between the check
            // and the write, and this one replaced it: neither secret may
            // work silently. Both callers are told; one retries.
            self.store.delete_record(keys::KIND, name).await?;
            self.keys.remove(name);
            return Err(Error::KeyExists(name.to_string()));
        }
        tracing::info!(key = %name, scopes = ?key.info().scopes, "API key created");
        let created = created(&key, secret);
        self.keys.insert(key);
        Ok(created)
    }

    /// Gives a key a new secret (same name and scopes); the old one stops
    /// working at once here and within [`keys::REFRESH`] everywhere.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`]; a store error.
    pub async fn rotate_key(&self, name: &str) -> Result<dq_api::KeyCreated> {
        let old = self.load_key(name).await?;
        let secret = keys::new_secret();
        let key = ApiKey::new(name.to_string(), &secret, old.scopes.clone(), self.now())
            .limited(old.rate_limit);
        let revoked_meanwhile = self
            .store
            .put_record(keys::KIND, name, &key.to_record(), old.last_used_ms())
            .await?;
        if revoked_meanwhile {
            // Revoked between the read and the write: it stays revoked.
            self.store.delete_record(keys::KIND, name).await?;
            return Err(Error::KeyNotFound(name.to_string()));
        }
        tracing::info!(key = %name, "API key rotated");
        let created = created(&key, secret);
        self.keys.insert(key);
        Ok(created)
    }

    /// Revokes (deletes) a key: at once here, within [`keys::REFRESH`]
    /// on every instance.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`]; a store error.
    pub async fn revoke_key(&self, name: &str) -> Result<()> {
        keys::check_name(name).map_err(|_| Error::KeyNotFound(name.to_string()))?;
        // The store first: a refresh between the two cannot bring it back.
        let deleted = self.store.delete_record(keys::KIND, name).await?;
        self.keys.remove(name);
        if !deleted {
            return Err(Error::KeyNotFound(name.to_string()));
        }
        tracing::info!(key = %name, "API key revoked");
        Ok(())
    }

    /// Every key, by name, as the store holds them now (never a secret).
    ///
    /// # Errors
    /// A store error.
    pub async fn list_keys(&self) -> Result<Vec<dq_api::KeyInfo>> {
        let mut out = Vec::new();
        for (name, rec) in self.store.list_records(keys::KIND).await? {
            match ApiKey::from_record(&name, &rec) {
                Ok(k) => out.push(self.key_info(k)),
                Err(e) => tracing::warn!(key = %name, error = %e, "stored API key is not valid"),
            }
        }
        Ok(out)
    }

    /// One key (never its secret).
    ///
    /// # Errors
    /// [`Error::KeyNotFound`]; a store error.
    pub async fn key(&self, name: &str) -> Result<dq_api::KeyInfo> {
        let k = self.load_key(name).await?;
        Ok(self.key_info(k))
    }

    /// A stored key with the latest use this process knows of.
    fn key_info(&self, k: ApiKey) -> dq_api::KeyInfo {
        let mut info = k.info();
        let here = self
            .keys
            .named(&k.name)
            .map_or(0, |known| known.last_used_ms());
        let used = here.max(info.last_used_ms.unwrap_or(0));
        info.last_used_ms = (used > 0).then_some(used);
        info
    }

    async fn load_key(&self, name: &str) -> Result<ApiKey> {
        keys::check_name(name).map_err(|_| Error::KeyNotFound(name.to_string()))?;
        let rec = self
            .store
            .get_record(keys::KIND, name)
            .await?
            .ok_or_else(|| Error::KeyNotFound(name.to_string()))?;
        ApiKey::from_record(name, &rec).map_err(|e| {
            StoreError::Unavailable(format!("stored API key {name:?} is not valid: {e}")).into()
        })
    }

    /// Notes that `key` was used now, writing it to the store at most once
    /// a minute (in the background: a request never waits for it).
    pub fn note_key_use(&self, key: &ApiKey) {
        let now = self.now();
        if key.note_use(now) {
            let (store, name) = (self.store.clone(), key.name.clone());
            tokio::spawn(async move {
                let _ = store.raise_mark(keys::KIND, &name, now).await;
            });
        }
    }

    // ---- dead letters and listings ------------------------------------------

    /// Dead letters, oldest death first, from `offset`.
    ///
    /// # Errors
    /// `invalid_limit` outside 1–1000; [`Error::TopicNotFound`]; a store error.
    pub async fn list_dead(&self, t: &Topic, offset: usize, limit: usize) -> Result<Vec<JobView>> {
        if !(1..=1000).contains(&limit) {
            return Err(InvalidInput::new(
                "invalid_limit",
                format!("limit must be between 1 and 1000, got {limit}"),
            )
            .into());
        }
        self.known_topic(t).await?;
        let jobs = self.store.list_dead(t, offset, limit).await?;
        Ok(jobs.into_iter().map(|j| view(t, j)).collect())
    }

    /// Up to `limit` (≤ 1000) scheduled jobs, earliest due first.
    ///
    /// # Errors
    /// A store error.
    pub async fn list_scheduled(&self, t: &Topic, limit: usize) -> Result<Vec<JobInfo>> {
        Ok(self.store.list_scheduled(t, limit.min(1000)).await?)
    }

    /// Up to `limit` (≤ 1000) ready jobs, in hand-out order.
    ///
    /// # Errors
    /// A store error.
    pub async fn list_ready(&self, t: &Topic, limit: usize) -> Result<Vec<JobInfo>> {
        Ok(self.store.list_ready(t, limit.min(1000)).await?)
    }

    /// One page of a topic's jobs (or those in `state`) for an export; see
    /// [`Store::list_jobs`] for the cursor and what happens to jobs that
    /// change meanwhile.
    ///
    /// # Errors
    /// `invalid_limit` outside 1–[`MAX_BATCH`]; `invalid_cursor`;
    /// [`Error::TopicNotFound`]; a store error.
    pub async fn list_jobs(
        &self,
        t: &Topic,
        state: Option<JobState>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<dq_core::JobPage> {
        if !(1..=MAX_BATCH).contains(&limit) {
            return Err(InvalidInput::new(
                "invalid_limit",
                format!("limit must be between 1 and {MAX_BATCH}, got {limit}"),
            )
            .into());
        }
        self.known_topic(t).await?;
        Ok(self.store.list_jobs(t, state, cursor, limit).await?)
    }

    /// Writes up to [`MAX_BATCH`] jobs as another store had them (an
    /// import): idempotent by id, due times, attempts and dead letters
    /// kept; a result per job, in order. Every job is checked first: one
    /// bad job refuses the whole batch, nothing written.
    ///
    /// # Errors
    /// `invalid_batch` for an empty or oversized batch; the first bad job's
    /// error ([`dq_core::ImportJob::check`]), its index in the message; a
    /// store error.
    pub async fn import_jobs(
        &self,
        t: &Topic,
        jobs: Vec<dq_core::ImportJob>,
    ) -> Result<Vec<dq_core::Imported>> {
        if jobs.is_empty() || jobs.len() > MAX_BATCH {
            return Err(InvalidInput::new(
                "invalid_batch",
                format!("a batch holds 1 to {MAX_BATCH} jobs, got {}", jobs.len()),
            )
            .into());
        }
        let now = self.now();
        for (i, j) in jobs.iter().enumerate() {
            j.check(&self.limits, now).map_err(|e| InvalidInput {
                message: format!("jobs[{i}]: {}", e.message),
                ..e
            })?;
        }
        let out = self.store.import_jobs(t, &jobs, now).await;
        self.changed(t);
        let out = out?;
        let created = out.iter().filter(|i| i.created).count();
        tracing::info!(topic = %t, jobs = out.len(), created, "jobs imported");
        Ok(out)
    }

    /// Replays the named dead letters, or all of them (as many as were dead
    /// when it began: a job that dies again meanwhile is not replayed twice);
    /// each is due now with a fresh attempt count. Returns how many.
    ///
    /// # Errors
    /// `invalid_batch` for more than [`MAX_BATCH`] ids; [`Error::TopicNotFound`];
    /// a store error.
    pub async fn replay_dead(&self, t: &Topic, ids: Option<&[JobId]>) -> Result<u64> {
        self.known_topic(t).await?;
        let now = self.now();
        let replayed = match ids {
            Some(ids) if ids.len() > MAX_BATCH => {
                return Err(InvalidInput::new(
                    "invalid_batch",
                    format!("ids may hold at most {MAX_BATCH} ids"),
                )
                .into());
            }
            Some(ids) => {
                let n = self.store.replay_dead(t, Some(ids), ids.len(), now).await;
                self.changed(t);
                n?
            }
            None => {
                let mut left = self.store.stats(t, now).await?.dead;
                let mut total = 0;
                while left > 0 {
                    let n = self
                        .store
                        .replay_dead(t, None, left.min(MAX_BATCH as u64) as usize, now)
                        .await;
                    self.changed(t);
                    let n = n?;
                    total += n;
                    if n == 0 {
                        break;
                    }
                    left = left.saturating_sub(n);
                }
                total
            }
        };
        if replayed > 0 {
            tracing::info!(topic = %t, replayed, "dead letters replayed");
        }
        Ok(replayed)
    }

    /// Deletes every dead letter of `t`; returns how many.
    ///
    /// # Errors
    /// [`Error::TopicNotFound`]; a store error (what was purged so far stays
    /// purged).
    pub async fn purge_dead(&self, t: &Topic) -> Result<u64> {
        self.known_topic(t).await?;
        let mut total = 0;
        loop {
            let n = self.store.purge_dead(t, MAX_BATCH).await?;
            total += n;
            if n < MAX_BATCH as u64 {
                break;
            }
        }
        tracing::info!(topic = %t, purged = total, "dead letters purged");
        Ok(total)
    }

    // ---- health -------------------------------------------------------------

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

/// Reads the keys from `store` into `ring`, one read at a time per ring (a
/// slow read cannot land after a newer one and bring back a revoked key).
async fn refresh_keys(store: &dyn Store, ring: &KeyRing) -> Result<()> {
    let _one = ring.reading().lock().await;
    let mark = ring.begin_read();
    let records = store.list_records(keys::KIND).await?;
    ring.replace(mark, &records);
    Ok(())
}

fn created(key: &ApiKey, secret: String) -> dq_api::KeyCreated {
    let info = key.info();
    dq_api::KeyCreated {
        name: info.name,
        scopes: info.scopes,
        created_ms: info.created_ms,
        secret,
        rate_limit: info.rate_limit,
    }
}

#[cfg(test)]
mod tests {
    /// The rule of this module, checked: front-ends reach the store only
    /// through the service.
    #[test]
    fn no_front_end_calls_the_store() {
        for (file, text) in [
            ("api.rs", include_str!("api.rs")),
            ("admin/mod.rs", include_str!("admin/mod.rs")),
            ("admin/actions.rs", include_str!("admin/actions.rs")),
            ("admin/forms.rs", include_str!("admin/forms.rs")),
            ("admin/pages.rs", include_str!("admin/pages.rs")),
            ("admin/rates.rs", include_str!("admin/rates.rs")),
            ("admin/views.rs", include_str!("admin/views.rs")),
            ("deliverer.rs", include_str!("deliverer.rs")),
            ("forwarder.rs", include_str!("forwarder.rs")),
            ("alerts.rs", include_str!("alerts.rs")),
            ("metrics.rs", include_str!("metrics.rs")),
            ("auth.rs", include_str!("auth.rs")),
            ("beanstalkd.rs", include_str!("beanstalkd.rs")),
        ] {
            for needle in [
                ".store.",
                ".store()",
                "dyn Store",
                "dq_core::Store;",
                "dq_core::Store}",
                "Store,",
            ] {
                assert!(!text.contains(needle), "{file} uses {needle:?}");
            }
        }
    }
}
