//! The dispatcher: takes back expired leases (Reaper) and moves due jobs to
//! ready (Promoter), for every topic, in capped batches.
//!
//! It sleeps until the earliest next due time or lease deadline it saw, or
//! until woken (an earlier job in this or another process), but at most
//! `max_sleep`: leases taken through *other* dq processes and topics created
//! there are noticed within that bound. Several dispatchers on one store are
//! safe: every step is one atomic store call.
//!
//! Several dispatchers (one per dq instance) share the topics: each records
//! itself alive in the store ([`Store::members`]) and handles only the topics
//! it owns by rendezvous hashing over the live ones; when one stops
//! answering, its topics pass to the others after `member_ttl` (5 s, or 3 ×
//! `max_sleep` if longer). Reserve calls promote due jobs themselves, so the
//! dispatcher is what takes back expired leases, keeps counts current and
//! wakes waiting consumers.

use std::sync::Arc;
use std::time::Duration;

use dq_core::hash::{fnv1a, mix64};
use dq_core::{Clock, NackOutcome, Store, StoreError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::wakers::Wakers;

/// Jobs moved per store call.
const BATCH: usize = 1000;

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

    /// The live dispatchers (read at most every 500 ms); empty when the
    /// store cannot say (then this one handles every topic).
    async fn live_members(&self) -> Vec<String> {
        if let Some((at, m)) = &*self.members.lock().expect("poisoned")
            && at.elapsed() < Duration::from_millis(500)
        {
            return m.clone();
        }
        let ttl = self.member_ttl().as_millis() as u64;
        match self.store.members(&self.id, self.clock.now_ms(), ttl).await {
            Ok(m) => {
                *self.members.lock().expect("poisoned") = Some((Instant::now(), m.clone()));
                m
            }
            Err(_) => Vec::new(),
        }
    }

    /// Runs until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let mut failures = 0u32;
        loop {
            let notified = self.wakers.any().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake_at = match self.tick().await {
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

    /// One pass over the topics this dispatcher owns. Returns when to run
    /// again.
    pub async fn tick(&self) -> Result<Instant, StoreError> {
        self.tick_report().await.map(|(next, _)| next)
    }

    /// [`Dispatcher::tick`], also returning the topics it handled.
    pub async fn tick_report(&self) -> Result<(Instant, Vec<dq_core::Topic>), StoreError> {
        let started = Instant::now();
        let mut next = started + self.max_sleep;
        let members = self.live_members().await;
        let mut visited = Vec::new();
        for topic in self.store.topics().await? {
            if !owns(&members, &self.id, topic.as_str()) {
                continue;
            }
            visited.push(topic.clone());
            // A topic whose store part (Redis shard) fails waits; the others go on.
            if let Err(e) = self.topic_pass(&topic, started, &mut next).await {
                tracing::debug!(topic = %topic, error = %e, "dispatcher pass of a topic failed");
                next = next.min(started + Duration::from_secs(1).min(self.max_sleep));
            }
        }
        Ok((next, visited))
    }

    /// Expired leases and due jobs of one topic; lowers `next` to when the
    /// topic needs another pass.
    async fn topic_pass(
        &self,
        topic: &dq_core::Topic,
        started: Instant,
        next: &mut Instant,
    ) -> Result<(), StoreError> {
        loop {
            let now = self.clock.now_ms();
            let r = self.store.requeue_expired(topic, BATCH, now).await?;
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
            if (r.retried + r.dead) < BATCH as u64 {
                if let Some(d) = r.next_deadline_ms {
                    // The script expires leases strictly after their deadline.
                    *next = (*next).min(at(started, now, d + 1));
                }
                break;
            }
        }
        loop {
            let now = self.clock.now_ms();
            let p = self.store.promote_due(topic, BATCH, now).await?;
            if p.moved < BATCH as u64 {
                if let Some(d) = p.next_due_ms {
                    *next = (*next).min(at(started, now, d));
                }
                break;
            }
        }
        Ok(())
    }
}

/// The instant at which the clock will read `due_ms`, given it read `now_ms` at `base`.
fn at(base: Instant, now_ms: u64, due_ms: u64) -> Instant {
    base + Duration::from_millis(due_ms.saturating_sub(now_ms))
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
