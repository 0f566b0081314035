//! One time source: the store's.
//!
//! A store with a clock of its own (Redis: `TIME` inside every script)
//! decides due times, reserves, lease expiry and retries by it, so instances
//! whose clocks disagree still never hand a job out early nor give a lease to
//! a second holder. This instance still needs to know the store's time to
//! sleep until the next due moment, to measure lateness and to keep its
//! dispatcher membership fresh: [`StoreClock`] is its own clock (monotonic:
//! [`dq_core::MonotonicClock`] in `dq serve`) plus the offset measured from
//! the store, re-measured every [`SYNC_EVERY`].
//!
//! The offset of the time dq decides by from this host's wall clock is
//! exported as `dq_clock_offset_seconds`, shown on `/readyz`, and logged as a
//! warning above [`WARN_ABOVE_MS`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use dq_core::{Clock, Store, SystemClock};
use tokio_util::sync::CancellationToken;

/// How often the offset to the store's clock is measured.
pub const SYNC_EVERY: Duration = Duration::from_secs(10);
/// Offsets from the wall clock above this are logged as warnings.
pub const WARN_ABOVE_MS: i64 = 1000;

/// This instance's clock moved to the store's.
pub struct StoreClock {
    local: Arc<dyn Clock>,
    offset_ms: AtomicI64,
    warned: AtomicBool,
}

impl StoreClock {
    /// Starts with no offset (until [`StoreClock::sync`] measures one).
    pub fn new(local: Arc<dyn Clock>) -> Self {
        Self {
            local,
            offset_ms: AtomicI64::new(0),
            warned: AtomicBool::new(false),
        }
    }

    /// Measures the store's clock against the local one (half the round trip
    /// is the measurement's error) and adopts the offset. A store without a
    /// clock of its own keeps the offset at 0.
    pub async fn sync(&self, store: &dyn Store) {
        let before = Instant::now();
        let local_before = self.local.now_ms();
        match store.time_ms().await {
            Ok(Some(store_ms)) => {
                let rtt = before.elapsed().as_millis() as u64;
                let local_mid = local_before + rtt / 2;
                self.offset_ms
                    .store(store_ms as i64 - local_mid as i64, Ordering::Relaxed);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the store's clock; keeping the last offset")
            }
        }
        self.report();
    }

    /// The time dq decides by minus this host's wall clock, in ms.
    pub fn wall_offset_ms(&self) -> i64 {
        self.now_ms() as i64 - SystemClock.now_ms() as i64
    }

    /// Logs when the offset from the wall clock crosses [`WARN_ABOVE_MS`].
    fn report(&self) {
        let off = self.wall_offset_ms();
        let above = off.abs() > WARN_ABOVE_MS;
        if above && !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                offset_ms = off,
                "this host's clock differs from the time dq decides by (the store's clock, or the monotonic clock since start) by more than 1 s; dq keeps deciding by that one time, but fix the host's time sync (NTP)"
            );
        } else if !above && self.warned.swap(false, Ordering::Relaxed) {
            tracing::info!(
                offset_ms = off,
                "this host's clock agrees with dq's time again"
            );
        }
    }
}

impl Clock for StoreClock {
    fn now_ms(&self) -> u64 {
        (self.local.now_ms() as i64 + self.offset_ms.load(Ordering::Relaxed)).max(0) as u64
    }
}

/// Re-measures the offset every [`SYNC_EVERY`] until cancelled.
pub(crate) async fn run_sync(
    clock: Arc<StoreClock>,
    store: Arc<dyn Store>,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SYNC_EVERY) => {}
            _ = cancel.cancelled() => return,
        }
        clock.sync(store.as_ref()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dq_core::ManualClock;

    #[test]
    fn the_offset_moves_the_local_clock() {
        let local = ManualClock::new(1_000_000);
        let c = StoreClock::new(Arc::new(local.clone()));
        assert_eq!(c.now_ms(), 1_000_000);
        c.offset_ms.store(-30_000, Ordering::Relaxed);
        assert_eq!(c.now_ms(), 970_000);
        local.advance(5);
        assert_eq!(c.now_ms(), 970_005);
    }
}
