//! Topics: their settings (validated, push defaults filled in, the
//! callback address checked), counts, listings, pause and delete; and the
//! one cache of settings reads ([`SettingsCache`]) that spares a reserve,
//! the deliverer and the forwarder a store read per call.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dq_core::limits::{self, MAX_BATCH};
use dq_core::{
    Delivery, InvalidInput, StoreError, StoreResult, Topic, TopicConfig, TopicConfigPatch,
    TopicStats,
};

use super::{Error, Result, Service};

/// The record kind that keeps the length asked of a topic's pause, named
/// by the topic, marked with the pause's end ([`Service::pause_topic`]).
const PAUSE_KIND: &str = "pause";

/// How long a topic's delivery mode, as [`Service::reserve`] checks it, may
/// be stale when another dq instance changed it (changes through this
/// instance take effect at once).
const MODE_TTL: Duration = Duration::from_secs(1);

/// How long one read of the delivered topics serves the deliverer and the
/// forwarder (both read every second).
const DELIVERED_TTL: Duration = Duration::from_millis(500);

/// How often the store's settings version is read
/// ([`Store::settings_version`](dq_core::Store::settings_version)): a cached read of settings is kept while it
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
/// version ([`Store::settings_version`](dq_core::Store::settings_version)).
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

/// What this instance remembers of the topics' settings: whether each
/// recently reserved topic is delivered by dq (push, forwarding), the last
/// read of every delivered topic, and the store's settings version
/// ([`Store::settings_version`](dq_core::Store::settings_version)) as last read. A change made through this
/// instance forgets what it touched at once ([`SettingsCache::forget`]); one
/// made through another is seen when the version moves, or after a TTL.
///
/// [`Store::settings_version`](dq_core::Store::settings_version): dq_core::Store::settings_version
#[derive(Default)]
pub(super) struct SettingsCache {
    /// Whether each recently reserved topic is delivered by dq, when that
    /// was read, and at which settings version.
    modes: Mutex<HashMap<Topic, Cached<bool>>>,
    /// The last read of the topics dq delivers itself, when and at which
    /// settings version.
    delivered: Mutex<Option<Cached<HashMap<Topic, Delivery>>>>,
    /// The store's settings version as last read, and when.
    version: Mutex<Option<(Instant, Option<u64>)>>,
    /// Bumped by every settings change here: a read that began before one
    /// is not kept.
    generation: AtomicU64,
}

impl SettingsCache {
    /// `t`'s mode if read within [`MODE_TTL`] (or on version `version`).
    fn mode(&self, t: &Topic, version: Option<u64>) -> Option<bool> {
        self.modes
            .lock()
            .expect("poisoned")
            .get(t)
            .filter(|c| c.fresh(version, MODE_TTL))
            .map(|c| c.value)
    }

    fn keep_mode(&self, t: &Topic, version: Option<u64>, delivered: bool) {
        let mut modes = self.modes.lock().expect("poisoned");
        if modes.len() >= MODE_CACHE_MAX {
            modes.clear();
        }
        modes.insert(t.clone(), Cached::new(version, delivered, 1));
    }

    /// The delivered topics if read within [`DELIVERED_TTL`] (or on
    /// version `version`).
    fn delivered(&self, version: Option<u64>) -> Option<HashMap<Topic, Delivery>> {
        self.delivered
            .lock()
            .expect("poisoned")
            .as_ref()
            .filter(|c| c.fresh(version, DELIVERED_TTL))
            .map(|c| c.value.clone())
    }

    /// Where the changes stand: a read begun now is kept only if no change
    /// comes before it ends ([`SettingsCache::keep_delivered`]).
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn keep_delivered(
        &self,
        generation: u64,
        version: Option<u64>,
        value: HashMap<Topic, Delivery>,
        covered: usize,
    ) {
        let mut cache = self.delivered.lock().expect("poisoned");
        if self.generation() == generation {
            *cache = Some(Cached::new(version, value, covered));
        }
    }

    /// The settings version if read within [`VERSION_EVERY`].
    fn version(&self) -> Option<Option<u64>> {
        self.version
            .lock()
            .expect("poisoned")
            .filter(|(at, _)| at.elapsed() < VERSION_EVERY)
            .map(|(_, v)| v)
    }

    fn keep_version(&self, v: Option<u64>) {
        *self.version.lock().expect("poisoned") = Some((Instant::now(), v));
    }

    /// Forgets what was read of `t` and of the delivered topics (a change
    /// made here, or a call that may have made one).
    fn forget(&self, t: &Topic) {
        self.modes.lock().expect("poisoned").remove(t);
        self.generation.fetch_add(1, Ordering::SeqCst);
        *self.delivered.lock().expect("poisoned") = None;
    }
}

impl Service {
    /// Whether dq delivers `t` itself (push, forwarding), as read within
    /// [`MODE_TTL`]; `None` when there is no topic `t`.
    ///
    /// Only a topic that exists is remembered: the first enqueue creates
    /// one without a settings change, so "no such topic" is read again at
    /// each call (a consumer waiting on a topic nobody wrote yet costs one
    /// store read per reserve).
    pub(super) async fn mode(&self, t: &Topic) -> Result<Option<bool>> {
        let version = self.settings_version().await;
        if let Some(delivered) = self.settings.mode(t, version) {
            return Ok(Some(delivered));
        }
        let Some(config) = self.store.topic_config(t).await? else {
            return Ok(None);
        };
        let delivered = config.delivery.is_delivered_by_dq();
        self.settings.keep_mode(t, version, delivered);
        Ok(Some(delivered))
    }

    /// Whether dq delivers `t` itself (push, forwarding), as read within
    /// [`MODE_TTL`]: false for a topic that does not exist.
    pub(super) async fn is_delivered(&self, t: &Topic) -> Result<bool> {
        Ok(self.mode(t).await?.unwrap_or(false))
    }

    /// Whether an enqueue to a topic nobody created creates it (the
    /// default; `auto_create_topics`).
    pub fn auto_create_topics(&self) -> bool {
        self.auto_create_topics.load(Ordering::Relaxed)
    }

    /// Sets `auto_create_topics` (see [`Service::check_topics_known`]).
    pub fn set_auto_create_topics(&self, on: bool) {
        self.auto_create_topics.store(on, Ordering::Relaxed);
    }

    /// Of the topics an HTTP enqueue or reserve names, those nobody created
    /// (by `PUT /v1/topics/{t}` or a first enqueue), in the order given.
    /// With `auto_create_topics` off, the first of them is an error instead
    /// (nothing is written or reserved). The beanstalkd listener does not
    /// ask: its protocol creates a tube by naming it. With
    /// `auto_create_topics` on (the default) an enqueue need not ask.
    ///
    /// # Errors
    /// [`Error::TopicNotFound`] (auto-creation off); a store error.
    ///
    /// A topic whose settings cannot be read now (its Redis shard does not
    /// answer) is neither: of several topics, the others are checked and
    /// the call goes on (the reserve leaves it out, see
    /// [`Service::reserve`]); the error is returned when no topic could be
    /// read.
    pub async fn check_topics_known(&self, topics: &[Topic]) -> Result<Vec<Topic>> {
        let mut unknown = Vec::new();
        let mut unreadable = None;
        for t in topics {
            match self.mode(t).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    if !self.auto_create_topics() {
                        return Err(Error::TopicNotFound(t.to_string()));
                    }
                    unknown.push(t.clone());
                }
                Err(e @ Error::Store(StoreError::Unavailable(_))) => {
                    unreadable.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        match unreadable {
            Some(e) if topics.len() == 1 => Err(e),
            _ => Ok(unknown),
        }
    }

    /// Pauses `t` for `for_ms` (0: resumes it now): nothing is handed out of
    /// it meanwhile, through any front-end. Waiters here are woken. The
    /// length asked is kept beside the pause's end ([`Service::paused_for`]).
    ///
    /// # Errors
    /// `invalid_delay` beyond the largest delay; a store error.
    pub async fn pause_topic(&self, t: &Topic, for_ms: u64) -> Result<()> {
        self.limits.check_delay(for_ms)?;
        let until = if for_ms == 0 { 0 } else { self.now() + for_ms };
        let done = self.store.pause_topic(t, until).await;
        self.changed(t);
        done?;
        if until > 0 {
            self.store
                .put_record(PAUSE_KIND, t.as_str(), &for_ms.to_string(), until)
                .await?;
        } else {
            self.store.delete_record(PAUSE_KIND, t.as_str()).await?;
        }
        tracing::info!(topic = %t, for_ms, "topic paused");
        Ok(())
    }

    /// The length asked (ms) of `t`'s pause that ends at `until_ms`
    /// ([`dq_core::TopicStats::paused_until_ms`]): `None` when it is not
    /// known (a pause kept by an older dq, or none).
    ///
    /// # Errors
    /// A store error.
    pub async fn paused_for(&self, t: &Topic, until_ms: u64) -> Result<Option<u64>> {
        if until_ms == 0 {
            return Ok(None);
        }
        let r = self.store.get_record(PAUSE_KIND, t.as_str()).await?;
        Ok(r.filter(|r| r.mark == until_ms)
            .and_then(|r| r.value.parse().ok()))
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
    /// whether more follow that way (see [`Store::list_topics`](dq_core::Store::list_topics)).
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

    /// The counts of each of `topics`, in order: `READS_IN_FLIGHT` at a
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
            patch = patch.with_delivered_defaults(&current);
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
        self.store.delete_record(PAUSE_KIND, t.as_str()).await?;
        tracing::warn!(topic = %t, deleted, "topic deleted");
        Ok(deleted)
    }

    /// Tells the deliverer and the forwarder (both waiting, or one busy
    /// reading: it gets a stored permit) that settings changed.
    pub(super) fn topics_changed_now(&self) {
        self.topics_changed.notify_waiters();
        self.topics_changed.notify_one();
    }

    pub(super) fn forget_mode(&self, t: &Topic) {
        self.changed(t);
        self.settings.forget(t);
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
        if let Some(delivered) = self.settings.delivered(version) {
            return Ok(delivered);
        }
        let generation = self.settings.generation();
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
        self.settings
            .keep_delivered(generation, version, out.clone(), covered);
        Ok(out)
    }

    /// The store's settings version, read at most every [`VERSION_EVERY`]
    /// (`None`: the store cannot say, or did not answer).
    pub(super) async fn settings_version(&self) -> Option<u64> {
        if let Some(v) = self.settings.version() {
            return v;
        }
        let v = self.store.settings_version().await.ok().flatten();
        self.settings.keep_version(v);
        v
    }
}
