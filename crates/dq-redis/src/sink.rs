//! [`RedisSink`]: dq's [`ForwardSink`], which the binary gives the server —
//! the store's own Redis acks and writes in one script where it is the
//! target ([`ShardedStore::ack_and_write`]); anywhere else a
//! [`Sink`](crate::forward::Sink) per target writes, then the caller acks.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dq_core::forward::AckWrite;
use dq_core::store::StoreResult;
use dq_core::{ForwardConn, ForwardSink, Topic};

use crate::ShardedStore;
use crate::forward::Sink;

/// Where `dq serve` writes forwarded jobs: a [`Sink`] per target, and,
/// over a Redis store, that store's servers acking and writing in one
/// script ([`ShardedStore::ack_and_write`]).
#[derive(Debug, Clone, Default)]
pub struct RedisSink {
    /// The Redis store dq serves from, if it does.
    store: Option<Arc<ShardedStore>>,
}

impl RedisSink {
    /// A sink that writes every batch through a connection to its target,
    /// the caller acking afterwards (a store that is not Redis).
    pub fn new() -> Self {
        Self::default()
    }

    /// A sink over `store`, the Redis store dq serves from: a target that
    /// is one of its servers gets each job acked and written in one script.
    pub fn over(store: Arc<ShardedStore>) -> Self {
        Self { store: Some(store) }
    }
}

#[async_trait]
impl ForwardSink for RedisSink {
    fn connect(&self, url: &str, timeout: Duration) -> Result<Box<dyn ForwardConn>, String> {
        Ok(Box::new(Sink::new(url, timeout)?))
    }

    async fn ack_and_write(
        &self,
        topic: &Topic,
        url: &str,
        items: &[AckWrite<'_>],
        now_ms: u64,
    ) -> StoreResult<Vec<Option<StoreResult<()>>>> {
        match &self.store {
            Some(store) => store.ack_and_write(topic, url, items, now_ms).await,
            None => Ok(vec![None; items.len()]),
        }
    }
}
