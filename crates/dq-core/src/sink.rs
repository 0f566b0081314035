//! [`ForwardSink`]: how the jobs of forwarding topics (`redis_stream`,
//! `redis_list`) reach their targets — what is written is
//! [`crate::forward`]'s, where and how is the sink's.
//!
//! The server's forwarder reserves due jobs, asks the sink to ack and write
//! them in one step where it can ([`ForwardSink::ack_and_write`]: on the
//! store's own Redis, so nothing acked goes unwritten and nothing is
//! written twice), writes the rest through a [`ForwardConn`] of the topic's
//! target and acks them afterwards (at least once). The binary gives the
//! server its sink (dq-redis's `RedisSink`, over the Redis store when dq
//! serves from one), so the server names no store crate.

use std::time::Duration;

use async_trait::async_trait;

use crate::forward::{AckWrite, Write};
use crate::model::Topic;
use crate::store::StoreResult;

/// Where forwarded jobs are written. See the module docs.
#[async_trait]
pub trait ForwardSink: Send + Sync + 'static {
    /// A connection to the target at `url` for one topic's writes, each
    /// answering within `timeout`. It connects lazily, so a target that is
    /// down now is tried again on each write.
    ///
    /// # Errors
    /// The URL is not one the target can be reached by (the message shows
    /// it with the password redacted).
    fn connect(&self, url: &str, timeout: Duration) -> Result<Box<dyn ForwardConn>, String>;

    /// Acks reserved jobs and writes each into a Redis stream or list of the
    /// server `url` in the same atomic step — when the store's own server
    /// is that Redis (a forwarding topic whose target is the store's Redis:
    /// nothing acked goes unwritten, nothing is written twice). One answer
    /// per item, in order: `None` when this cannot be done at once for it
    /// (another server, a Cluster, a store that is not Redis: the caller
    /// writes, then acks), else the ack's result — an item whose write the
    /// target refused is not acked and answers
    /// [`StoreError::Storage`](crate::StoreError::Storage) with code
    /// [`crate::forward::TARGET_REFUSED`];
    /// [`StoreError::Unavailable`](crate::StoreError::Unavailable) means the
    /// store did not answer (the item may or may not be done).
    /// Default: `None` for every item.
    async fn ack_and_write(
        &self,
        topic: &Topic,
        url: &str,
        items: &[AckWrite<'_>],
        now_ms: u64,
    ) -> StoreResult<Vec<Option<StoreResult<()>>>> {
        let _ = (topic, url, now_ms);
        Ok(vec![None; items.len()])
    }
}

/// A connection to one forwarding target ([`ForwardSink::connect`]).
#[async_trait]
pub trait ForwardConn: Send + Sync {
    /// Writes every item in one pipeline (not a transaction: on an error
    /// some may have been written; the caller retries them all, at least
    /// once).
    ///
    /// # Errors
    /// What the target answered, or that it cannot be reached.
    async fn write(&self, writes: &[&Write]) -> Result<(), String>;
}
