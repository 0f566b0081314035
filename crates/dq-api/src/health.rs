//! Health: `/healthz` and `/readyz`.

use serde::{Deserialize, Serialize};

use crate::error::ErrorDetail;

/// `GET /healthz`, and `GET /readyz` with `stores`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok` (healthz) or `ready`.
    pub status: String,
    /// Each part of the store (one per Redis shard), on readyz.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stores: Vec<StoreHealth>,
    /// On readyz: the time dq decides by (the store's clock, or the
    /// monotonic clock since start) minus this host's wall clock, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<i64>,
}

/// `GET /readyz` when no part of the store answers, or the instance is
/// draining (503, `Retry-After: 1`): the error, and each part of the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotReady {
    /// `unavailable`, or `draining`.
    pub status: String,
    /// Each part of the store.
    pub stores: Vec<StoreHealth>,
    /// As on [`Health`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<i64>,
    /// `store_unavailable` (or the store's own code), or `draining`.
    pub error: ErrorDetail,
}

/// One part of the store on `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreHealth {
    /// Its name (the shard's URL without password).
    pub name: String,
    /// Whether it answers.
    pub up: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
