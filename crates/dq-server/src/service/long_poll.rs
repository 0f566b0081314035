//! The long-poll behind `POST /v1/reserve`.
//!
//! Reserves from each topic; when nothing is due, sleeps until the earliest
//! next due time any reserve reported, until a wake-up for one of the topics
//! (a local enqueue, or another process via the store), or until the wait
//! ends — never on a fixed polling interval. A drain or shutdown ends the
//! wait with what it has.
//!
//! A reserve naming several topics (a beanstalkd watch list, a worker of
//! a thousand tenants' topics) skips those this process knows to have
//! nothing to hand out ([`crate::wakers::Wakers::quiet_until`]: what an
//! earlier reserve found, until its next due time or a change of the topic
//! made here or announced by the store, and at most
//! [`crate::wakers::HINT_MS`]), so it costs about as much as
//! reserving from the topics that have work. A job written through
//! another instance is seen once its announcement arrives (about a
//! millisecond on one Redis; the long-poll wakes for it).
//!
//! Reserves that slept and were woken ask the store of a topic one at a
//! time (the topic's gate, [`crate::wakers::TopicWaiters::gate`]). One
//! that found the gate free asks the store; one that had to wait for
//! another's call takes that call's answer when it found the topic with
//! nothing more to hand out (its quiet hint, unless a change came since)
//! and skips the store. So consumers woken together by one due job make
//! one store call between them instead of one each. A reserve's first
//! look never waits at the gate: under load, calls to the store overlap.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use dq_core::{Lease, StoreError, Topic};
use tokio::time::Instant;

use super::Service;
use crate::dispatcher::earliest;
use crate::wakers::TopicWaiters;

/// Leases up to `max` jobs from `topics`, waiting up to `wait_ms` for one.
///
/// # Errors
/// A store error when nothing was reserved; once some jobs are leased they are
/// returned even if a later reserve fails (they would otherwise only come back
/// after their lease expired).
pub(super) async fn reserve(
    svc: &Service,
    topics: &[Topic],
    max: usize,
    lease_ms: Option<u64>,
    wait_ms: u64,
) -> Result<Vec<Lease>, StoreError> {
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    let waiters: Vec<Arc<TopicWaiters>> = topics
        .iter()
        .map(|t| svc.wakers().topic(t.as_str()))
        .collect();
    // Start at a different topic each call so one busy topic cannot starve the others.
    let start = rand_index(topics.len());
    // Whether this call slept and was woken (by a due time or a change):
    // then it may be one of many woken together, and takes the gates.
    let mut woken = false;
    loop {
        let mut notified: Vec<Pin<Box<tokio::sync::futures::Notified<'_>>>> = waiters
            .iter()
            .map(|w| Box::pin(w.notify.notified()))
            .collect();
        for n in &mut notified {
            n.as_mut().enable();
        }
        let now = svc.clock().now_ms();
        let mut leases: Vec<Lease> = Vec::new();
        let mut next_due: Option<u64> = None;
        // A topic whose store does not answer (a Redis shard down or cut
        // off) does not fail the call while another topic answered: the
        // others keep serving, and it is asked again at the next look.
        let mut answered = false;
        let mut unavailable = None;
        let hinted = topics.len() > 1;
        for i in 0..topics.len() {
            if leases.len() >= max {
                break;
            }
            let k = (start + i) % topics.len();
            let t = &topics[k];
            if hinted && let Some(until) = svc.wakers().quiet_until(t.as_str(), now) {
                next_due = earliest(next_due, Some(until));
                answered = true;
                continue;
            }
            let mut now = now;
            let _turn = match woken.then(|| waiters[k].gate.try_lock()) {
                None => None,
                Some(Ok(turn)) => Some(turn),
                Some(Err(_)) => {
                    // Another reserve is asking the store: its answer may
                    // say the topic has nothing more for now.
                    let turn = waiters[k].gate.lock().await;
                    now = svc.clock().now_ms();
                    if let Some(until) = svc.wakers().quiet_until(t.as_str(), now) {
                        next_due = earliest(next_due, Some(until));
                        answered = true;
                        continue;
                    }
                    Some(turn)
                }
            };
            let epoch = svc.wakers().epoch();
            // Until the store answered, whether it handed leases out is not
            // known (the call may time out after the script ran, or this
            // future may be dropped: a beanstalkd client gone): then this
            // instance's dispatcher looks at the topic, learns the deadline of
            // any lease it finds and takes it back when it expires.
            let unknown = LookIfUnanswered {
                svc,
                topic: t,
                now,
                answered: false,
            };
            let got = svc
                .store
                .reserve(t, max - leases.len(), lease_ms, now)
                .await;
            match got {
                Ok(c) => {
                    unknown.answered();
                    answered = true;
                    if c.next_due_ms.is_none_or(|d| d > now) {
                        svc.wakers()
                            .note_quiet(t.as_str(), c.next_due_ms, now, epoch);
                    } else {
                        svc.wakers().not_quiet(t.as_str());
                    }
                    if let Some(d) = c.leases.iter().map(|l| l.lease_deadline_ms).min() {
                        svc.wakers().lease_ends(t.as_str(), d);
                    }
                    svc.spans().expired(t, &c.expired);
                    leases.extend(c.leases);
                    next_due = earliest(next_due, c.next_due_ms);
                }
                Err(e @ StoreError::Unavailable(_)) if leases.is_empty() => {
                    tracing::debug!(topic = %t, error = %e, "reserve: the topic's store does not answer; asking the others");
                    unavailable.get_or_insert(e);
                }
                Err(e) if leases.is_empty() => return Err(e),
                Err(e) => {
                    tracing::warn!(topic = %t, error = %e, "reserve failed; returning the jobs already leased");
                    break;
                }
            }
        }
        if let (false, Some(e)) = (answered, unavailable) {
            return Err(e);
        }
        if !leases.is_empty() || Instant::now() >= deadline || svc.intake().is_cancelled() {
            return Ok(leases);
        }
        let mut wake_at = deadline;
        if let Some(due) = next_due {
            let in_ms = due.saturating_sub(svc.clock().now_ms());
            wake_at = wake_at.min(Instant::now() + Duration::from_millis(in_ms));
        }
        tokio::select! {
            _ = futures::future::select_all(notified) => {}
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = svc.intake().cancelled() => return Ok(Vec::new()),
        }
        woken = true;
    }
}

/// Notes a topic for the dispatcher when dropped before [`Self::answered`]
/// (see where it is made).
struct LookIfUnanswered<'a> {
    svc: &'a Service,
    topic: &'a Topic,
    now: u64,
    answered: bool,
}

impl LookIfUnanswered<'_> {
    fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for LookIfUnanswered<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.svc.wakers().lease_ends(self.topic.as_str(), self.now);
        }
    }
}

fn rand_index(n: usize) -> usize {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as usize)
        .unwrap_or(0);
    nanos % n.max(1)
}
