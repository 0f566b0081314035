//! The dispatcher: takes back expired leases (`requeue_expired`) and moves
//! due jobs to ready (`promote_due`), in capped batches — for the topics
//! that have such work, not for every topic on every pass, so an idle dq
//! costs the same with ten topics or a hundred thousand.
//!
//! It keeps a plan: per topic, the store-clock time of its next timed event
//! (the next due job or wheel bucket, the next lease deadline plus 1 ms), as
//! the store's own answers to its last pass said. It sleeps until the
//! earliest entry (a topic's due jobs at most every [`PROMOTE_GAP_MS`]),
//! and passes only the topics whose time came, plus:
//! - the topics the store announced a job due earlier for
//!   ([`Store::watch_wakes`], from this process or another one; see
//!   [`Wakers::take_pending`]);
//! - the topics this process handed out leases of, at their deadline
//!   ([`Wakers::lease_ends`]): whoever owns a topic, the instance that
//!   handed a lease out takes it back if it expires;
//! - every topic it owns, once at start, whenever the live dispatchers
//!   change (ownership moved, or one stopped and left leases behind) and
//!   whenever an announcement may have been missed (the wake-up
//!   subscription was (re)made);
//! - a sweep, as the backstop for an announcement that never came (a dq
//!   killed between its write and its announcement): [`SWEEP`] topics per
//!   `max_sleep`, so every topic is looked at every
//!   `max(1, topics / SWEEP) × max_sleep` (34 min with 100,000 topics).
//!
//! Several dispatchers (one per dq instance) share the topics: each
//! records itself alive in the store ([`Store::members`]) and handles the
//! announcements and the sweep only of the topics it owns by rendezvous
//! hashing over the live ones; when one stops answering, its topics pass to
//! the others after `member_ttl` (5 s, or 3 × `max_sleep` if longer).
//! Several dispatchers on one store are safe: every step is one atomic
//! store call. Reserve calls promote due jobs themselves, so the dispatcher
//! is what takes back expired leases, keeps counts current and wakes
//! waiting consumers.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use dq_core::hash::{fnv1a, mix64};
use dq_core::limits::MAX_BATCH;
use dq_core::{Clock, NackOutcome, Store, StoreError, Topic};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::wakers::Wakers;

/// Least time between two passes of a topic for its due jobs (ms). Every
/// reserve promotes what is due, so a waiting consumer never depends on
/// the dispatcher for a due job; without a floor, a topic whose jobs fall
/// due every millisecond kept the dispatcher passing it back to back (two
/// store calls each, a large share of Redis's time in a drain: the figure
/// is in docs/performance-log.md), and so did the announcement its own
/// promote makes. Lease expiries are not held back by it.
pub const PROMOTE_GAP_MS: u64 = 10;

/// Topics the sweep looks at per `max_sleep` (see the module docs).
pub const SWEEP: usize = 50;

/// Topics passed between two heartbeats during a long pass.
const BEAT_EVERY: usize = 256;

/// See the module docs.
pub struct Dispatcher {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Wake-ups.
    pub wakers: Arc<Wakers>,
    /// Longest sleep.
    pub max_sleep: Duration,
    /// This dispatcher's id among the live ones.
    pub id: String,
    /// The live dispatchers as last read, and when.
    members: std::sync::Mutex<Option<(Instant, Vec<String>)>>,
}

/// Whether `me` handles `topic` among the live dispatchers `members`
/// (rendezvous hashing: the member with the highest hash of (member, topic)
/// does; with no members known, everyone does).
pub fn owns(members: &[String], me: &str, topic: &str) -> bool {
    members
        .iter()
        .max_by_key(|m| {
            let h = fnv1a(&[m.as_bytes(), b"\0", topic.as_bytes(), b"\0"]);
            (mix64(h), m.as_str())
        })
        .is_none_or(|owner| owner == me)
}

/// A turn over the topics as listed at its start, a few at a time (the
/// dispatcher's sweep, the alert loop's rounds).
#[derive(Default)]
pub(crate) struct Rotation {
    listed: Vec<Topic>,
    cursor: usize,
}

impl Rotation {
    /// Whether the turn is over: the next step lists the topics again.
    pub(crate) fn at_end(&self) -> bool {
        self.cursor >= self.listed.len()
    }

    /// Starts a turn over `topics`.
    pub(crate) fn start(&mut self, topics: Vec<Topic>) {
        self.listed = topics;
        self.cursor = 0;
    }

    /// Ends the turn: every one of `topics` was just looked at.
    pub(crate) fn finish(&mut self, topics: Vec<Topic>) {
        self.cursor = topics.len();
        self.listed = topics;
    }

    /// The turn's next `n` topics (fewer at its end).
    pub(crate) fn next(&mut self, n: usize) -> &[Topic] {
        let from = self.cursor;
        self.cursor = (from + n).min(self.listed.len());
        &self.listed[from..self.cursor]
    }
}

/// When each topic needs its next pass, and where the sweep is.
#[derive(Default)]
struct Plan {
    /// Topic → the store-clock ms of its next pass.
    at: HashMap<Topic, u64>,
    /// The same, in time order.
    order: BTreeSet<(u64, Topic)>,
    /// The live dispatchers the plan was made for.
    members: Option<Vec<String>>,
    /// Every topic must be passed (start, members changed, a wake-up
    /// possibly missed, or a failed listing).
    full: bool,
    /// The sweep's turn over the topics.
    sweep: Rotation,
    /// When the next sweep step is due.
    next_sweep: Option<Instant>,
    /// Topics passed in the last [`PROMOTE_GAP_MS`], and when (store-clock
    /// ms): an announcement of one of them (its own promote announces the
    /// jobs it moved) plans its next pass after the gap, not at once.
    recent: HashMap<Topic, u64>,
}

impl Plan {
    /// Moves `t`'s next pass to `ms` if that is earlier.
    fn lower(&mut self, t: &Topic, ms: u64) {
        if self.at.get(t).is_some_and(|at| *at <= ms) {
            return;
        }
        self.set(t, Some(ms));
    }

    /// Sets `t`'s next pass (`None`: nothing timed is left).
    fn set(&mut self, t: &Topic, ms: Option<u64>) {
        if let Some(old) = self.at.remove(t) {
            self.order.remove(&(old, t.clone()));
        }
        if let Some(ms) = ms {
            self.at.insert(t.clone(), ms);
            self.order.insert((ms, t.clone()));
        }
    }

    /// Takes the topics whose time is `now_ms` or earlier.
    fn take_due(&mut self, now_ms: u64) -> Vec<Topic> {
        let mut out = Vec::new();
        while let Some((ms, _)) = self.order.first()
            && *ms <= now_ms
        {
            let (_, t) = self.order.pop_first().expect("just seen");
            self.at.remove(&t);
            out.push(t);
        }
        out
    }
}

impl Dispatcher {
    /// A dispatcher with a new random id.
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        wakers: Arc<Wakers>,
        max_sleep: Duration,
    ) -> Self {
        Self {
            store,
            clock,
            wakers,
            max_sleep,
            id: format!("{:016x}", rand::random::<u64>()),
            members: std::sync::Mutex::new(None),
        }
    }

    /// How long a dispatcher counts as alive after it was last seen.
    pub fn member_ttl(&self) -> Duration {
        Duration::from_secs(5).max(self.max_sleep * 3)
    }

    /// The live dispatchers (read at most every 500 ms), sorted (the store
    /// lists them by when each was last seen, an order that changes with
    /// every heartbeat, and a changed list means a pass over every topic);
    /// the last list read when the store cannot say (every instance would
    /// otherwise own every topic, and pass them all, twice, at each blip);
    /// empty when it never could (then this one handles every topic).
    async fn live_members(&self) -> Vec<String> {
        if let Some((at, m)) = &*self.members.lock().expect("poisoned")
            && at.elapsed() < Duration::from_millis(500)
        {
            return m.clone();
        }
        let ttl = self.member_ttl().as_millis() as u64;
        match self.store.members(&self.id, self.clock.now_ms(), ttl).await {
            Ok(mut m) => {
                m.sort();
                *self.members.lock().expect("poisoned") = Some((Instant::now(), m.clone()));
                m
            }
            Err(_) => self
                .members
                .lock()
                .expect("poisoned")
                .as_ref()
                .map(|(_, m)| m.clone())
                .unwrap_or_default(),
        }
    }

    /// Shows this dispatcher alive during a long pass (every [`BEAT_EVERY`]
    /// topics; the read itself is at most every 500 ms): a pass over
    /// 100,000 topics outlasts `member_ttl`, and the others would take this
    /// one for gone.
    async fn beat(&self, i: usize) {
        if i % BEAT_EVERY == BEAT_EVERY - 1 {
            self.live_members().await;
        }
    }

    /// Runs until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let mut plan = Plan {
            full: true,
            ..Plan::default()
        };
        let mut failures = 0u32;
        loop {
            let notified = self.wakers.any().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake_at = match self.step(&mut plan).await {
                Ok(at) => {
                    failures = 0;
                    at
                }
                Err(e) => {
                    failures += 1;
                    // Log the first failure and then every 30th, not every retry.
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(error = %e, failures, "dispatcher pass failed; retrying");
                    }
                    plan.full = true;
                    Instant::now() + Duration::from_secs(1).min(self.max_sleep)
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(wake_at) => {}
                _ = &mut notified => {}
            }
        }
    }

    /// One pass over every topic this dispatcher owns (what it does at
    /// start). Returns when to run again.
    pub async fn tick(&self) -> Result<Instant, StoreError> {
        self.tick_report().await.map(|(next, _)| next)
    }

    /// [`Dispatcher::tick`], also returning the topics it handled.
    pub async fn tick_report(&self) -> Result<(Instant, Vec<Topic>), StoreError> {
        let mut plan = Plan::default();
        let members = self.live_members().await;
        let visited = self.full_pass(&mut plan, &members).await?;
        Ok((self.next_wake(&plan), visited))
    }

    /// One step of [`Dispatcher::run`]: what is pending, due or swept.
    /// Returns when to take the next.
    async fn step(&self, plan: &mut Plan) -> Result<Instant, StoreError> {
        let pending = self.wakers.take_pending();
        let members = self.live_members().await;
        if plan.members.as_ref() != Some(&members) {
            plan.full = true;
            plan.members = Some(members.clone());
        }
        plan.full |= pending.all;
        for (t, deadline) in pending.leases {
            if let Ok(t) = Topic::new(t) {
                // The scripts expire leases strictly after their deadline.
                plan.lower(&t, deadline + 1);
            }
        }
        if plan.full {
            self.full_pass(plan, &members).await?;
            return Ok(self.next_wake(plan));
        }
        let now = self.clock.now_ms();
        // (An entry "passed later than now" is a store clock that stepped
        // back: dropped, so it cannot hold a topic back longer than the gap.)
        plan.recent
            .retain(|_, at| *at <= now && now < at.saturating_add(PROMOTE_GAP_MS));
        let mut todo: Vec<Topic> = Vec::new();
        for t in pending
            .topics
            .into_iter()
            .filter(|t| owns(&members, &self.id, t))
            .filter_map(|t| Topic::new(t).ok())
        {
            match plan.recent.get(&t) {
                Some(at) => {
                    let again = at + PROMOTE_GAP_MS;
                    plan.lower(&t, again);
                }
                None => todo.push(t),
            }
        }
        todo.extend(plan.take_due(now));
        if plan.next_sweep.is_none_or(|at| Instant::now() >= at) {
            plan.next_sweep = Some(Instant::now() + self.max_sleep);
            if plan.sweep.at_end() {
                // A failed listing skips this step only: what is due and
                // announced is passed all the same.
                match self.store.topics().await {
                    Ok(t) => plan.sweep.start(t),
                    Err(e) => {
                        tracing::debug!(error = %e, "the sweep cannot list the topics");
                        plan.sweep.start(Vec::new());
                    }
                }
            }
            todo.extend(
                plan.sweep
                    .next(SWEEP)
                    .iter()
                    .filter(|t| owns(&members, &self.id, t.as_str()))
                    .cloned(),
            );
        }
        let mut seen = HashSet::new();
        for (i, t) in todo.into_iter().enumerate() {
            if seen.insert(t.clone()) {
                self.pass(plan, &t, &members).await;
            }
            self.beat(i).await;
        }
        Ok(self.next_wake(plan))
    }

    /// Passes every topic owned among `members`; the plan is made anew.
    async fn full_pass(
        &self,
        plan: &mut Plan,
        members: &[String],
    ) -> Result<Vec<Topic>, StoreError> {
        let topics = self.store.topics().await?;
        plan.full = false;
        let mut visited = Vec::new();
        for (i, t) in topics.iter().enumerate() {
            if owns(members, &self.id, t.as_str()) {
                self.pass(plan, t, members).await;
                visited.push(t.clone());
            }
            self.beat(i).await;
        }
        plan.sweep.finish(topics);
        plan.next_sweep = Some(Instant::now() + self.max_sleep);
        Ok(visited)
    }

    /// Passes one topic and plans its next pass: at its next timed event if
    /// this dispatcher owns it, else only while it has leases (it was
    /// passed for a lease handed out here; the owner does the rest). A
    /// topic whose store part (Redis shard) fails is tried again within a
    /// second, the others go on.
    async fn pass(&self, plan: &mut Plan, t: &Topic, members: &[String]) {
        plan.recent.insert(t.clone(), self.clock.now_ms());
        match self.topic_pass(t).await {
            Ok((lease, due)) if owns(members, &self.id, t.as_str()) => {
                let floor = self.clock.now_ms() + PROMOTE_GAP_MS;
                plan.set(t, earliest(lease, due.map(|d| d.max(floor))));
            }
            Ok((lease, _)) => plan.set(t, lease),
            Err(e) => {
                tracing::debug!(topic = %t, error = %e, "dispatcher pass of a topic failed");
                let retry = Duration::from_secs(1).min(self.max_sleep).as_millis() as u64;
                plan.set(t, Some(self.clock.now_ms() + retry));
            }
        }
    }

    /// When the plan's earliest pass or the next sweep step is due.
    fn next_wake(&self, plan: &Plan) -> Instant {
        let base = Instant::now();
        let mut next = plan.next_sweep.unwrap_or(base + self.max_sleep);
        if let Some((ms, _)) = plan.order.first() {
            let in_ms = ms.saturating_sub(self.clock.now_ms());
            next = next.min(base + Duration::from_millis(in_ms));
        }
        next
    }

    /// Expired leases and due jobs of one topic. Returns the store-clock
    /// times of its next lease expiry and of its next due job or bucket
    /// (`None`: none).
    async fn topic_pass(&self, topic: &Topic) -> Result<(Option<u64>, Option<u64>), StoreError> {
        let (lease, due);
        loop {
            let now = self.clock.now_ms();
            let r = self.store.requeue_expired(topic, MAX_BATCH, now).await?;
            if r.retried > 0 {
                // Jobs back to wait: reserves here look at the topic again.
                self.wakers.changed(topic.as_str());
            }
            if r.dead > 0 {
                self.wakers.died(topic.as_str());
            }
            for (id, outcome) in &r.jobs {
                match outcome {
                    NackOutcome::Retry { due_at_ms, attempt } => tracing::info!(
                        topic = %topic, id = %id, attempt, error = "lease expired",
                        retry_at_ms = due_at_ms, "job failed; will retry"
                    ),
                    NackOutcome::Dead { attempt } => tracing::warn!(
                        topic = %topic, id = %id, attempt, error = "lease expired",
                        "job failed for the last time; dead"
                    ),
                }
            }
            if (r.retried + r.dead) < MAX_BATCH as u64 {
                // The script expires leases strictly after their deadline.
                lease = r.next_deadline_ms.map(|d| d + 1);
                break;
            }
        }
        loop {
            let now = self.clock.now_ms();
            let p = self.store.promote_due(topic, MAX_BATCH, now).await?;
            if p.moved < MAX_BATCH as u64 {
                due = p.next_due_ms;
                break;
            }
        }
        Ok((lease, due))
    }
}

/// The earlier of two optional times (`None`: none).
pub(crate) fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_spread_over_members_and_move_only_from_a_leaver() {
        let three: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let topics: Vec<String> = (0..300).map(|i| format!("t{i}")).collect();
        let owner = |members: &[String], t: &str| {
            members
                .iter()
                .filter(|m| owns(members, m, t))
                .cloned()
                .collect::<Vec<_>>()
        };
        let mut per = std::collections::HashMap::new();
        for t in &topics {
            let o = owner(&three, t);
            assert_eq!(o.len(), 1, "exactly one owner of {t}");
            *per.entry(o[0].clone()).or_insert(0) += 1;
        }
        assert!(per.values().all(|n| (70..130).contains(n)), "{per:?}");
        // "b" leaves: only its topics move.
        let two: Vec<String> = ["a", "c"].map(String::from).to_vec();
        for t in &topics {
            let before = owner(&three, t)[0].clone();
            let after = owner(&two, t)[0].clone();
            assert!(before == after || before == "b", "{t} moved from {before}");
        }
        assert!(owns(&[], "x", "t"), "no members known: handle everything");
    }
}
