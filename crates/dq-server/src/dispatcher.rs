//! The dispatcher: takes back expired leases (Reaper) and moves due jobs to
//! ready (Promoter), for every topic, in capped batches.
//!
//! It sleeps until the earliest next due time or lease deadline it saw, or
//! until woken (an earlier job in this or another process), but at most
//! `max_sleep`: leases taken through *other* dq processes and topics created
//! there are noticed within that bound. Several dispatchers on one store are
//! safe: every step is one atomic store call.

use std::sync::Arc;
use std::time::Duration;

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
}

impl Dispatcher {
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

    /// One pass over every topic. Returns when to run again.
    pub async fn tick(&self) -> Result<Instant, StoreError> {
        let started = Instant::now();
        let mut next = started + self.max_sleep;
        for topic in self.store.topics().await? {
            // A topic whose store part (Redis shard) fails waits; the others go on.
            if let Err(e) = self.topic_pass(&topic, started, &mut next).await {
                tracing::debug!(topic = %topic, error = %e, "dispatcher pass of a topic failed");
                next = next.min(started + Duration::from_secs(1).min(self.max_sleep));
            }
        }
        Ok(next)
    }

    /// Expired leases and due jobs of one topic; lowers `next` to when the
    /// topic needs another pass.
    async fn topic_pass(
        &self,
        topic: &dq_core::Topic,
        started: Instant,
        next: &mut Instant,
    ) -> Result<(), StoreError> {
        {
            let topic = topic.clone();
            loop {
                let now = self.clock.now_ms();
                let r = self.store.requeue_expired(&topic, BATCH, now).await?;
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
                let p = self.store.promote_due(&topic, BATCH, now).await?;
                if p.moved < BATCH as u64 {
                    if let Some(d) = p.next_due_ms {
                        *next = (*next).min(at(started, now, d));
                    }
                    break;
                }
            }
        }
        Ok(())
    }
}

/// The instant at which the clock will read `due_ms`, given it read `now_ms` at `base`.
fn at(base: Instant, now_ms: u64, due_ms: u64) -> Instant {
    base + Duration::from_millis(due_ms.saturating_sub(now_ms))
}
