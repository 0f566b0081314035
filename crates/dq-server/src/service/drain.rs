//! Intake and drain: whether this instance still hands jobs out, and the
//! drain for a rolling restart (no more hand-outs, deliveries in flight
//! awaited).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Error, Result, Service};

/// Where a drain is ([`Service::drain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainState {
    /// Deliveries and forwarding tasks still running.
    pub in_flight: u64,
    /// None is running: the process may be stopped.
    pub drained: bool,
}

impl Service {
    /// Fires when this instance stops handing out jobs: at
    /// [`Service::drain`] and at shutdown. Reserves waiting then return what
    /// they have; push and forwarding loops stop claiming.
    pub fn intake(&self) -> &CancellationToken {
        &self.intake
    }

    /// Whether this instance was asked to drain (or is shutting down).
    pub fn is_draining(&self) -> bool {
        self.intake.is_cancelled()
    }

    /// Push deliveries and forwarding tasks of this instance: the server
    /// spawns them here, so a drain and a shutdown can wait for them.
    pub fn deliveries(&self) -> &TaskTracker {
        &self.deliveries
    }

    /// Drains this instance for a rolling restart: from now on it hands out
    /// no job (reserves get [`Error::Draining`], push and forwarding stop
    /// claiming, `/readyz` answers 503 `draining`); then waits up to `wait`
    /// for the deliveries in flight. Jobs already leased by pull consumers
    /// stay theirs (ack, nack and touch go on working here and on every
    /// instance). There is no undoing it: restart the process.
    pub async fn drain(&self, wait: Duration) -> DrainState {
        if !self.intake.is_cancelled() {
            tracing::info!(
                in_flight = self.deliveries.len(),
                "draining: no new reservations or push claims on this instance; /readyz answers 503"
            );
            self.intake.cancel();
        }
        self.deliveries.close();
        let drained = tokio::time::timeout(wait, self.deliveries.wait())
            .await
            .is_ok();
        let in_flight = self.deliveries.len() as u64;
        if drained || in_flight == 0 {
            tracing::info!("drained: no delivery in flight; stop the process when ready");
        }
        DrainState {
            in_flight,
            drained: drained || in_flight == 0,
        }
    }

    /// Refuses a hand-out once this instance shuts down or drains.
    pub(super) fn check_intake(&self) -> Result<()> {
        if self.shutdown.is_cancelled() {
            return Err(Error::ShuttingDown);
        }
        if self.intake.is_cancelled() {
            return Err(Error::Draining);
        }
        Ok(())
    }
}
