//! Admin operations: drain before a restart, readiness, backup of the
//! embedded store.

use std::time::Duration;

use dq_api as wire;
use reqwest::Method;

use super::{Client, NONE};
use crate::error::Result;
// Named by the `# Errors` doc links only.
#[cfg(doc)]
use crate::error::Error;

impl Client {
    /// Drains the server for a restart (`POST /v1/admin/drain`): it hands
    /// out no job any more and `/readyz` answers 503; waits up to `wait`
    /// for its deliveries in flight.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a wait over 10 minutes; refusals of the
    /// admin guard; [`Error::Transport`].
    pub async fn drain(&self, wait: Duration) -> Result<wire::DrainStatus> {
        let body = wire::DrainRequest {
            wait_ms: Some(wait.as_millis() as i64),
        };
        self.call(
            Method::POST,
            format!("{}/v1/admin/drain", self.base),
            Some(&body),
            true,
        )
        .await
    }

    /// Whether the server is ready (`GET /readyz` answers 200): its store
    /// answers and it is not draining.
    ///
    /// # Errors
    /// [`Error::Unavailable`] with the server's code (`store_unavailable`,
    /// `draining`, …) when it is not; [`Error::Transport`].
    pub async fn ready(&self) -> Result<wire::Health> {
        self.call(Method::GET, format!("{}/readyz", self.base), NONE, false)
            .await
    }

    /// Has the server back up its embedded store into `path`, a new file on
    /// the server's machine (`POST /v1/admin/backup`). Not retried.
    ///
    /// # Errors
    /// `backup_exists`, `invalid_backup_path`, `backup_unsupported` (a Redis
    /// store), `backup_in_progress`, `backup_failed`; [`Error::Transport`].
    pub async fn backup(&self, path: &str) -> Result<wire::BackupDone> {
        let body = wire::BackupRequest {
            path: path.to_string(),
        };
        self.call(
            Method::POST,
            format!("{}/v1/admin/backup", self.base),
            Some(&body),
            false,
        )
        .await
    }
}
