//! In-process wake-ups: "topic X has a job due earlier than you think".
//!
//! Waiting reserve calls and the dispatcher sleep until the next due time they
//! know of; enqueues in this process and wake-up messages from other dq
//! processes (through the store) cut those sleeps short.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// One [`Notify`] per topic with waiters, plus one for "any topic".
#[derive(Debug, Default)]
pub struct Wakers {
    topics: Mutex<HashMap<String, Arc<Notify>>>,
    any: Notify,
}

impl Wakers {
    /// The notifier of `topic` (created on first use).
    pub fn topic(&self, topic: &str) -> Arc<Notify> {
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

    /// Wakes the waiters of `topic`; an empty name wakes every waiter.
    pub fn wake(&self, topic: &str) {
        let map = self.topics.lock().expect("poisoned");
        if topic.is_empty() {
            for n in map.values() {
                n.notify_waiters();
            }
        } else if let Some(n) = map.get(topic) {
            n.notify_waiters();
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
}
