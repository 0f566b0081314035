//! The enqueue and ack rates the overview shows, from the counters seen at
//! its successive renders.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Enqueue and ack rates per topic, from the counters seen at successive
/// overview renders over the last minute (per process; shown after the
/// page's first refresh).
#[derive(Debug, Default)]
pub(crate) struct Rates {
    seen: Mutex<HashMap<String, VecDeque<Sample>>>,
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
}
