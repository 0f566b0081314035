//! Writing due jobs of a forwarding topic (`redis_stream`, `redis_list`)
//! into the target Redis.
//!
//! Two ways, chosen per job by the caller: on the store's own server the
//! store acks and writes in one script (`lua/forward.lua`,
//! [`RedisStore::ack_and_write`](crate::RedisStore::ack_and_write));
//! anywhere else a [`Sink`] writes a batch in one pipeline and the caller
//! acks afterwards (a crash between the two may write a job twice: at
//! least once). Both send the same commands, built here by [`args`].
//! [`crate::RedisSink`] offers both to the server.

use std::time::Duration;

use async_trait::async_trait;
use dq_core::ForwardConn;
use dq_core::forward::Write;
use redis::IntoConnectionInfo;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

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
