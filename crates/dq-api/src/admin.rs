//! Admin operations: backup of the embedded store, drain before a restart.

use serde::{Deserialize, Serialize};

/// `POST /v1/admin/backup`: where the server writes the copy of its
/// embedded store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupRequest {
    /// An absolute path on the server's machine, of a file that does not
    /// exist yet, in a directory that does.
    pub path: String,
}

/// The answer to a backup: the file written, whole and checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupDone {
    /// The file.
    pub path: String,
    /// Its size.
    pub bytes: u64,
    /// Its database pages.
    pub pages: u64,
    /// The schema version of the data in it.
    pub schema_version: i64,
    /// How long the copy took.
    pub took_ms: u64,
}

/// `POST /v1/admin/drain`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// How long to wait for this instance's deliveries in flight to finish
    /// before answering (at most 600000); 0 or absent answers at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<i64>,
}

/// Where a drain is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainStatus {
    /// Always true once asked: reserves and push claims stop for good on
    /// this instance (until it restarts).
    pub draining: bool,
    /// Push deliveries and forwarded batches of this instance still running.
    pub in_flight: u64,
    /// Whether none is running any more: the process may be stopped.
    pub drained: bool,
}
