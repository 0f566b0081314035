//! The source of "now". Every piece of dq that depends on time takes a
//! [`Clock`], so tests can drive time by hand with [`ManualClock`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Unix time in milliseconds.
pub trait Clock: Send + Sync + 'static {
    /// The current time in Unix milliseconds.
    fn now_ms(&self) -> u64;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// The wall clock read once, at creation, then advanced by the monotonic
/// clock: a step of the system clock afterwards (an NTP step, a manual
/// change, a VM resumed with a stale clock) does not move it, so it never
/// jumps forward (which would hand jobs out early and cut leases short) or
/// back. The monotonic clock is slewed by NTP like the wall clock, so the two
/// differ only by the steps since creation; `dq serve` reports that
/// difference (`dq_clock_offset_seconds`) and warns above 1 s.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    start_ms: u64,
    start: Instant,
}

impl MonotonicClock {
    /// Starts at the wall clock's time now.
    pub fn new() -> Self {
        Self {
            start_ms: SystemClock.now_ms(),
            start: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ms(&self) -> u64 {
        self.start_ms + self.start.elapsed().as_millis() as u64
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self(Arc::new(AtomicU64::new(now_ms)))
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `now_ms`.
    pub fn set(&self, now_ms: u64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
