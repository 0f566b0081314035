//! In-process wake-ups: "topic X has a job due earlier than you think".
//!
//! Waiting reserve calls and the dispatcher sleep until the next due time they
//! know of; wake-up announcements of the store (for changes made through this
//! process or another one) cut those sleeps short.
//!
//! More rides on them, so that nothing dq does while idle grows with the
//! number of topics:
//! - the dispatcher's *pending* work: the topics announced since its last
//!   look, and the lease deadlines this process handed out
//!   ([`Wakers::take_pending`]), so it passes only those topics;
//! - *quiet hints* for reserves naming many topics: a reserve that found
//!   nothing due in a topic before time T records it, and later reserves of
//!   this process skip the topic until T or until a change of it is
//!   announced or made here ([`Wakers::changed`]), whichever comes first;
//! - the topics jobs died in through this process, for the alert loop
//!   ([`Wakers::died`]);
//! - one *gate* per topic with waiters ([`TopicWaiters::gate`]): woken
//!   reserves of one topic ask the store one at a time, and one that waited
//!   for another's answer takes its quiet hint instead of asking again.
//!   Eight consumers woken by one due job make one store call, not eight.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Most topics remembered as pending for the dispatcher; beyond, it looks
/// at every topic instead.
const MAX_PENDING: usize = 1_000_000;

/// Most topics with a quiet hint or a change remembered; beyond, every hint
/// is forgotten at once (reserves over random names cannot grow it).
const MAX_HINTS: usize = 100_000;

/// Longest a quiet hint holds without a change: the bound on how long a
/// change nobody announced (a dq killed between its write and its
/// announcement, a Redis shard back without its subscription dropping)
/// hides a topic from reserves naming several topics.
pub const HINT_MS: u64 = 10_000;

/// One [`TopicWaiters`] per topic with waiters, plus a [`Notify`] for "any
/// topic", plus the dispatcher's pending work and the reserves' quiet hints.
#[derive(Debug, Default)]
pub struct Wakers {
    topics: Mutex<HashMap<String, Arc<TopicWaiters>>>,
    any: Notify,
    pending: Mutex<Pending>,
    hints: Mutex<Hints>,
    /// Topics jobs died in through this process, for the alert loop.
    died: Mutex<HashSet<String>>,
}

/// What the dispatcher has to look at, collected since it last took it.
#[derive(Debug, Default)]
pub struct Pending {
    /// Every topic (an announcement may have been missed).
    pub all: bool,
    /// Topics announced to have a job due earlier.
    pub topics: HashSet<String>,
    /// The earliest lease deadline (ms) handed out here, per topic.
    pub leases: HashMap<String, u64>,
}

#[derive(Debug, Default)]
struct Hints {
    /// Bumped by every change.
    epoch: u64,
    /// The epoch of the last "forget everything".
    all_changed: u64,
    /// Per topic: the epoch of its last change, and the time before which
    /// it has nothing to hand out, as a reserve found (`None`: unknown).
    topics: HashMap<String, (u64, Option<u64>)>,
}

/// What the reserves of one topic share while any of them waits.
#[derive(Debug, Default)]
pub struct TopicWaiters {
    /// Woken when the topic may have a job due earlier.
    pub notify: Notify,
    /// Held across a woken reserve's store call (`service/long_poll.rs`).
    pub gate: tokio::sync::Mutex<()>,
}

impl Wakers {
    /// The waiters' notifier and gate of `topic` (created on first use).
    pub fn topic(&self, topic: &str) -> Arc<TopicWaiters> {
        self.topics
            .lock()
            .expect("poisoned")
            .entry(topic.to_string())
            .or_default()
            .clone()
    }

    /// The notifier woken for every topic (the dispatcher waits on it).
    pub fn any(&self) -> &Notify {
        &self.any
    }

    /// Wakes the waiters of `topic`, forgets its quiet hint and marks it
    /// pending for the dispatcher; an empty name does so for every topic.
    pub fn wake(&self, topic: &str) {
        // The hint goes first: a waiter woken on another thread must not
        // find it still standing and skip the topic.
        self.changed(topic);
        {
            let mut p = self.pending.lock().expect("poisoned");
            if topic.is_empty() || p.topics.len() >= MAX_PENDING {
                p.all = true;
                p.topics.clear();
            } else if !p.all {
                p.topics.insert(topic.to_string());
            }
        }
        let map = self.topics.lock().expect("poisoned");
        if topic.is_empty() {
            for n in map.values() {
                n.notify.notify_waiters();
            }
        } else if let Some(n) = map.get(topic) {
            n.notify.notify_waiters();
        }
        drop(map);
        self.any.notify_waiters();
    }

    /// Forgets notifiers nobody holds, so hostile topic names cannot grow the map.
    pub fn release(&self, topic: &str) {
        let mut map = self.topics.lock().expect("poisoned");
        if map.get(topic).is_some_and(|n| Arc::strong_count(n) == 1) {
            map.remove(topic);
        }
    }

    /// Notes that a lease of `topic` handed out here ends at `deadline_ms`
    /// (store clock): the dispatcher of this process takes it back if
    /// it expires, whichever dispatcher owns the topic.
    pub fn lease_ends(&self, topic: &str, deadline_ms: u64) {
        {
            let mut p = self.pending.lock().expect("poisoned");
            // Kept even past the bound: a lease noted nowhere else would
            // wait for the owner's sweep.
            let d = p.leases.entry(topic.to_string()).or_insert(deadline_ms);
            *d = (*d).min(deadline_ms);
        }
        self.any.notify_waiters();
    }

    /// Notes that jobs of `topic` went to the dead letters through this
    /// process (the alert loop reads its counts in its next round).
    pub fn died(&self, topic: &str) {
        let mut d = self.died.lock().expect("poisoned");
        if d.len() < MAX_HINTS {
            d.insert(topic.to_string());
        }
    }

    /// Takes the topics jobs died in since the last call.
    pub fn take_died(&self) -> Vec<dq_core::Topic> {
        std::mem::take(&mut *self.died.lock().expect("poisoned"))
            .into_iter()
            .filter_map(|t| dq_core::Topic::new(t).ok())
            .collect()
    }

    /// Takes what the dispatcher has to look at.
    pub fn take_pending(&self) -> Pending {
        std::mem::take(&mut *self.pending.lock().expect("poisoned"))
    }

    /// `topic` changed (a job may be due earlier): its quiet hint no longer
    /// holds. An empty name: every topic changed.
    pub fn changed(&self, topic: &str) {
        let mut h = self.hints.lock().expect("poisoned");
        h.epoch += 1;
        let epoch = h.epoch;
        if topic.is_empty() || h.topics.len() >= MAX_HINTS {
            h.all_changed = epoch;
            h.topics.clear();
        } else if let Some(e) = h.topics.get_mut(topic) {
            *e = (epoch, None);
        } else {
            h.topics.insert(topic.to_string(), (epoch, None));
        }
    }

    /// The current change epoch: take it before reading a topic, and give
    /// it to [`Wakers::note_quiet`] with what the read found.
    pub fn epoch(&self) -> u64 {
        self.hints.lock().expect("poisoned").epoch
    }

    /// Records that `topic` has nothing to hand out before `until_ms`
    /// (`None`: nothing at all), as read at `now_ms` after `epoch`; held at
    /// most [`HINT_MS`], ignored when a change came since.
    pub fn note_quiet(&self, topic: &str, until_ms: Option<u64>, now_ms: u64, epoch: u64) {
        let until_ms = until_ms.unwrap_or(u64::MAX).min(now_ms + HINT_MS);
        let mut h = self.hints.lock().expect("poisoned");
        if h.all_changed > epoch {
            return;
        }
        if h.topics.len() >= MAX_HINTS {
            h.epoch += 1;
            h.all_changed = h.epoch;
            h.topics.clear();
            return;
        }
        let e = h.topics.entry(topic.to_string()).or_insert((0, None));
        if e.0 <= epoch {
            e.1 = Some(until_ms);
        }
    }

    /// A read found `topic` with jobs to hand out now: a quiet hint still
    /// standing (a change nobody announced) no longer holds.
    pub fn not_quiet(&self, topic: &str) {
        let mut h = self.hints.lock().expect("poisoned");
        if let Some(e) = h.topics.get_mut(topic) {
            e.1 = None;
        }
    }

    /// Whether `topic` is known to have nothing to hand out at `now_ms`.
    pub fn is_quiet(&self, topic: &str, now_ms: u64) -> bool {
        self.quiet_until(topic, now_ms).is_some()
    }

    /// When `topic`, known to have nothing to hand out at `now_ms`, may
    /// have; `None` when not known quiet.
    pub fn quiet_until(&self, topic: &str, now_ms: u64) -> Option<u64> {
        let h = self.hints.lock().expect("poisoned");
        h.topics
            .get(topic)
            .and_then(|(_, until)| *until)
            .filter(|until| now_ms < *until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_hint_holds_until_its_time_or_a_change() {
        let w = Wakers::default();
        let e = w.epoch();
        w.note_quiet("a", Some(100), 0, e);
        assert!(w.is_quiet("a", 99));
        assert!(!w.is_quiet("a", 100), "due at 100: look then");
        assert!(!w.is_quiet("b", 0), "never read: not quiet");
        w.changed("a");
        assert!(!w.is_quiet("a", 0), "a change forgets the hint");
        // A read that began before a change records nothing.
        let before = w.epoch();
        w.changed("a");
        w.note_quiet("a", None, 0, before);
        assert!(!w.is_quiet("a", 0));
        // A change of another topic does not matter.
        let e = w.epoch();
        w.changed("b");
        w.note_quiet("a", None, 0, e);
        assert!(w.is_quiet("a", HINT_MS - 1));
        assert!(!w.is_quiet("a", HINT_MS), "a hint holds at most HINT_MS");
        // "Everything changed" forgets every hint and refuses older reads.
        let before = w.epoch();
        w.wake("");
        assert!(!w.is_quiet("a", 0));
        w.note_quiet("a", None, 0, before);
        assert!(!w.is_quiet("a", 0));
    }

    #[test]
    fn pending_collects_topics_and_the_earliest_lease() {
        let w = Wakers::default();
        w.wake("a");
        w.wake("a");
        w.lease_ends("b", 50);
        w.lease_ends("b", 40);
        w.lease_ends("b", 60);
        let p = w.take_pending();
        assert!(!p.all);
        assert_eq!(p.topics, HashSet::from(["a".to_string()]));
        assert_eq!(p.leases.get("b"), Some(&40));
        assert!(w.take_pending().topics.is_empty(), "taken");
        w.wake("");
        assert!(w.take_pending().all);
    }
}
