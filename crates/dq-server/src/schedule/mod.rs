//! Recurring schedules: a job enqueued on a topic at every slot of a cron
//! expression or a fixed interval (docs/schedules.md).
//!
//! Each firing is an ordinary job with id `<name>@<slot ms>` and due time
//! the slot, enqueued [`LEAD_MS`] ahead of it, so it comes out at the slot
//! exactly like any delayed job — never early — with the topic's retries,
//! dead letters, push delivery and metrics. A schedule lives in the store
//! as a named record (`Store::put_record`, kind [`KIND`]): its settings as
//! JSON, and its mark — every slot up to the mark is dealt with. Every dq
//! instance runs [`Scheduler`]; each pass enqueues the slots in
//! (mark, now + lead] and then raises the mark. Two instances doing the
//! same slot at once enqueue the same id: the second finds the job waiting
//! (`created: false`), or, if it already ran, inside the job's dedup window
//! ([`FIRING_DEDUP_MS`]): one job per slot, whatever the number of
//! instances, restarts or retries.
//!
//! Slots of a cron rule are wall-clock times in the schedule's time zone.
//! A wall-clock time that does not exist (spring forward) fires once, at
//! the first valid moment after the gap; one that exists twice (fall back)
//! fires once, at its first occurrence.
//!
//! After downtime — a slot before now whose job was never enqueued —
//! `catch_up` decides: `skip` (nothing), `one` (one job, named after the
//! latest missed slot, due now), `all` (every missed slot, the latest
//! [`MAX_CATCH_UP`] at most, due now).
//!
//! Files: `rule.rs` (the rule: settings, cron and interval maths, time
//! zones; pure), this file (the [`Scheduler`] loop). Storing a schedule and
//! firing its slots are the service's (`service/schedules.rs`).

mod rule;

pub use rule::*;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::service::{Pass, PassMemory, Service};

/// Every instance's loop: a pass each [`TICK`] (see the module docs).
pub struct Scheduler {
    svc: Arc<Service>,
}

impl Scheduler {
    /// A scheduler over `svc`.
    pub fn new(svc: Arc<Service>) -> Self {
        Self { svc }
    }

    /// Runs passes until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let mut mem = PassMemory::default();
        loop {
            let clock = self.svc.clock().clone();
            match self.svc.schedules_pass(&|| clock.now_ms(), &mut mem).await {
                Err(e) if !mem.list_failing => {
                    mem.list_failing = true;
                    tracing::warn!(error = %e, "schedules cannot be read; trying again every {TICK:?}");
                }
                Ok(_) if mem.list_failing => {
                    mem.list_failing = false;
                    tracing::info!("schedules can be read again");
                }
                _ => {}
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(TICK) => {}
            }
        }
    }
}

/// One pass at `now`: enqueues what every schedule owes (tests call it with
/// a manual clock's time).
///
/// # Errors
/// When the schedules cannot be listed.
pub async fn pass(svc: &Service, now: u64) -> crate::service::Result<Pass> {
    svc.schedules_pass(&|| now, &mut PassMemory::default())
        .await
}
