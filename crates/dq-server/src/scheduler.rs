//! The schedules' loop: every instance asks the service for a pass of the
//! recurring schedules ([`crate::schedule`]) every [`TICK`]; the pass
//! (`service/schedules.rs`) enqueues what each schedule owes.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::schedule::TICK;
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
