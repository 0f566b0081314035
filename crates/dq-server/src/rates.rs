//! The enqueue and ack rates the overview shows, from the counters seen at
//! its successive renders; and the last hour of each topic the chart of the
//! topic page draws ([`History`]).
//!
//! Both are kept in this process's memory only: each dq instance has its
//! own, and a restart starts them empty. They are fed by the pages as they
//! render (the overview reloads itself every 5 s), not by a task of their
//! own, so a topic nobody looks at has gaps.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use dq_core::TopicStats;

/// Enqueue and ack rates per topic, from the counters seen at successive
/// overview renders over the last minute (per process; shown after the
/// page's first refresh); and the per-minute [`History`] of each topic.
#[derive(Debug, Default)]
pub(crate) struct Rates {
    seen: Mutex<HashMap<String, VecDeque<Sample>>>,
    history: Mutex<History>,
}

/// One sample a minute per topic, the last [`KEPT`] of them, for at most
/// [`TOPICS_KEPT`] topics (past that, the topic sampled longest ago is
/// forgotten).
#[derive(Debug, Default)]
struct History {
    topics: HashMap<String, VecDeque<Minute>>,
}

/// Samples kept per topic: an hour's worth of intervals.
const KEPT: usize = 61;
/// Topics with a history.
const TOPICS_KEPT: usize = 1000;
/// Time between two samples of a topic.
const EVERY_MS: u64 = 60_000;

/// A topic at one moment: when (ms), its enqueued and acked counters, its
/// oldest overdue job's age (ms).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Minute {
    at: u64,
    enqueued: u64,
    acked: u64,
    overdue_ms: u64,
}

/// One point of the chart: the minute ending `at` (ms), enqueues and acks
/// per second over it, the oldest overdue age (s) at its end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Point {
    pub(super) at: u64,
    pub(super) enqueued: f64,
    pub(super) acked: f64,
    pub(super) overdue_s: f64,
}

/// When (ms), enqueued, acked.
type Sample = (u64, u64, u64);

impl Rates {
    /// Records the counters of `topic` at `now` and returns the enqueue and
    /// ack rates per second over the samples kept (None under a second).
    pub(super) fn observe(
        &self,
        topic: &str,
        now: u64,
        enqueued: u64,
        acked: u64,
    ) -> Option<(f64, f64)> {
        let mut seen = self.seen.lock().expect("poisoned");
        let q = seen.entry(topic.to_string()).or_default();
        if q.back().is_none_or(|(t, _, _)| now >= t + 1000) {
            q.push_back((now, enqueued, acked));
        }
        while q.len() > 2 && q.front().is_some_and(|(t, _, _)| now > t + 60_000) {
            q.pop_front();
        }
        let (t0, e0, a0) = *q.front()?;
        let dt = now.checked_sub(t0).filter(|d| *d >= 1000)? as f64 / 1000.0;
        Some((
            enqueued.saturating_sub(e0) as f64 / dt,
            acked.saturating_sub(a0) as f64 / dt,
        ))
    }
}

impl Rates {
    /// Records `topic`'s counts at `now` in its history, if its last sample
    /// is a minute old (or it has none).
    pub(super) fn sample(&self, topic: &str, now: u64, s: &TopicStats) {
        let mut h = self.history.lock().expect("poisoned");
        if !h.topics.contains_key(topic) && h.topics.len() >= TOPICS_KEPT {
            let stalest = h
                .topics
                .iter()
                .min_by_key(|(_, q)| q.back().map_or(0, |m| m.at))
                .map(|(t, _)| t.clone());
            if let Some(t) = stalest {
                h.topics.remove(&t);
            }
        }
        let q = h.topics.entry(topic.to_string()).or_default();
        if q.back().is_some_and(|m| now < m.at + EVERY_MS) {
            return;
        }
        q.push_back(Minute {
            at: now,
            enqueued: s.counters.enqueued,
            acked: s.counters.acked,
            overdue_ms: s.oldest_overdue_ms,
        });
        while q.len() > KEPT {
            q.pop_front();
        }
    }

    /// `topic`'s points of the last hour before `now`, oldest first: one
    /// per pair of successive samples (none with fewer than two).
    pub(super) fn last_hour(&self, topic: &str, now: u64) -> Vec<Point> {
        let h = self.history.lock().expect("poisoned");
        let Some(q) = h.topics.get(topic) else {
            return Vec::new();
        };
        let since = now.saturating_sub(3_600_000);
        q.iter()
            .zip(q.iter().skip(1))
            .filter(|(_, b)| b.at >= since)
            .map(|(a, b)| {
                let dt = (b.at - a.at).max(1) as f64 / 1000.0;
                Point {
                    at: b.at,
                    enqueued: b.enqueued.saturating_sub(a.enqueued) as f64 / dt,
                    acked: b.acked.saturating_sub(a.acked) as f64 / dt,
                    overdue_s: b.overdue_ms as f64 / 1000.0,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_over_the_last_minute() {
        let r = Rates::default();
        assert_eq!(r.observe("t", 0, 0, 0), None);
        assert_eq!(r.observe("t", 500, 10, 0), None, "under a second");
        assert_eq!(r.observe("t", 2000, 100, 50), Some((50.0, 25.0)));
        let (e, _) = r.observe("t", 100_000, 1000, 50).unwrap();
        assert!(e > 0.0);
    }

    fn stats(enqueued: u64, acked: u64, overdue_ms: u64) -> TopicStats {
        let mut s = TopicStats {
            oldest_overdue_ms: overdue_ms,
            ..Default::default()
        };
        s.counters.enqueued = enqueued;
        s.counters.acked = acked;
        s
    }

    #[test]
    fn one_sample_a_minute_for_the_last_hour() {
        let r = Rates::default();
        assert!(r.last_hour("t", 0).is_empty(), "starts empty");
        r.sample("t", 0, &stats(0, 0, 0));
        r.sample("t", 30_000, &stats(999, 999, 0));
        assert!(
            r.last_hour("t", 30_000).is_empty(),
            "one sample: no rate yet"
        );
        r.sample("t", 60_000, &stats(600, 120, 2500));
        assert_eq!(
            r.last_hour("t", 60_000),
            [Point {
                at: 60_000,
                enqueued: 10.0,
                acked: 2.0,
                overdue_s: 2.5
            }],
            "the sample half a minute in was not kept"
        );
        for m in 2..=200 {
            r.sample("t", m * 60_000, &stats(600 * m, 120 * m, 0));
        }
        let hour = r.last_hour("t", 200 * 60_000);
        assert_eq!(hour.len(), 60, "an hour of minutes, no more");
        assert_eq!(hour[0].at, 141 * 60_000);
        assert!(hour.iter().all(|p| p.enqueued == 10.0));
        assert!(
            r.last_hour("t", 300 * 60_000).is_empty(),
            "nothing in the last hour"
        );
    }

    #[test]
    fn a_bounded_number_of_topics() {
        let r = Rates::default();
        for i in 0..TOPICS_KEPT as u64 + 5 {
            r.sample(&format!("t{i}"), i, &stats(0, 0, 0));
        }
        let h = r.history.lock().unwrap();
        assert_eq!(h.topics.len(), TOPICS_KEPT);
        assert!(!h.topics.contains_key("t0"), "the stalest forgotten");
        assert!(h.topics.contains_key(&format!("t{}", TOPICS_KEPT + 4)));
    }
}
