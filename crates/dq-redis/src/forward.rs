//! Writing due jobs of a forwarding topic (`redis_stream`, `redis_list`)
//! into the target Redis: [`RedisSink`], dq's
//! [`ForwardSink`](dq_core::ForwardSink), which the binary gives the
//! server.
//!
//! Two ways, chosen per job by the caller: on the store's own server the
//! store acks and writes in one script (`lua/forward.lua`,
//! [`ForwardSink::ack_and_write`] through [`ShardedStore::ack_and_write`]);
//! anywhere else a [`Sink`] writes a batch in one pipeline and the caller
//! acks afterwards (a crash between the two may write a job twice: at
//! least once). Both send the same commands, built here by [`args`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dq_core::forward::{AckWrite, Write};
use dq_core::store::StoreResult;
use dq_core::{ForwardConn, ForwardSink, Topic};
use redis::IntoConnectionInfo;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::ShardedStore;

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

/// A connection to one target Redis (a single server; created lazily, so a
/// target that is down now is retried on each write).
#[derive(Clone)]
pub struct Sink {
    conn: ConnectionManager,
    url: String,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("url", &dq_core::forward::redact_url(&self.url))
            .finish()
    }
}

impl Sink {
    /// A sink writing to `url`; each write answers within `timeout`.
    ///
    /// # Errors
    /// The URL is not one Redis can be reached by (the message shows it
    /// with the password redacted).
    pub fn new(url: &str, timeout: Duration) -> Result<Self, String> {
        let shown = dq_core::forward::redact_url(url);
        let info = url
            .into_connection_info()
            .map_err(|e| format!("target {shown}: {e}"))?;
        let client = redis::Client::open(info).map_err(|e| format!("target {shown}: {e}"))?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(timeout))
            .set_connection_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| format!("target {shown}: {e}"))?;
        Ok(Self {
            conn,
            url: url.to_string(),
        })
    }
}

#[async_trait]
impl ForwardConn for Sink {
    async fn write(&self, writes: &[&Write]) -> Result<(), String> {
        let mut pipe = redis::pipe();
        for w in writes {
            let (cmd, rest) = command(w);
            let c = pipe.cmd(cmd);
            for a in rest {
                c.arg(a);
            }
            c.ignore();
        }
        let mut conn = self.conn.clone();
        pipe.query_async::<()>(&mut conn).await.map_err(|e| {
            format!(
                "target {} refused or unreachable: {e}",
                dq_core::forward::redact_url(&self.url)
            )
        })
    }
}

/// A stream entry's field-value pairs, flat.
fn pairs<'a>(fields: &'a [(&'static str, Vec<u8>)]) -> impl Iterator<Item = Vec<u8>> + 'a {
    fields
        .iter()
        .flat_map(|(k, v)| [k.as_bytes().to_vec(), v.clone()])
}

/// The Redis command of a write and its arguments.
fn command(w: &Write) -> (&'static str, Vec<Vec<u8>>) {
    match w {
        Write::Xadd {
            key,
            maxlen,
            fields,
        } => {
            let mut a = vec![key.as_bytes().to_vec()];
            if let Some(n) = maxlen {
                a.extend([
                    b"MAXLEN".to_vec(),
                    b"~".to_vec(),
                    n.to_string().into_bytes(),
                ]);
            }
            a.push(b"*".to_vec());
            a.extend(pairs(fields));
            ("XADD", a)
        }
        Write::Push { key, left, value } => (
            if *left { "LPUSH" } else { "RPUSH" },
            vec![key.as_bytes().to_vec(), value.clone()],
        ),
    }
}

/// `forward.lua`'s arguments for one job after its id and token: kind,
/// key, then the stream's maxlen and pairs or the list's element.
pub(crate) fn args(w: &Write) -> Vec<Vec<u8>> {
    match w {
        Write::Xadd {
            key,
            maxlen,
            fields,
        } => {
            let mut a = vec![
                b"x".to_vec(),
                key.as_bytes().to_vec(),
                maxlen
                    .map(|n| n.to_string())
                    .unwrap_or_default()
                    .into_bytes(),
                fields.len().to_string().into_bytes(),
            ];
            a.extend(pairs(fields));
            a
        }
        Write::Push { key, left, value } => vec![
            if *left { b"l".to_vec() } else { b"r".to_vec() },
            key.as_bytes().to_vec(),
            value.clone(),
        ],
    }
}

/// Whether `a` and `b` name the same server and database (as parsed: a
/// host name and its address count as different, and fall back to the
/// write-then-ack path).
pub(crate) fn same_server(a: &redis::ConnectionInfo, b: &str) -> bool {
    b.into_connection_info()
        .is_ok_and(|b| a.addr() == b.addr() && a.redis_settings().db() == b.redis_settings().db())
}
