//! One connection type for one Redis server and for a Redis Cluster, so the
//! store's code is the same for both: every script touches the keys of one
//! topic, all in one hash slot, which the cluster client routes by the
//! script's first key (following MOVED and ASK during a resharding, and the
//! new master after a failover).
//!
//! Also here: opening a store's connections from its [`RedisConfig`]
//! ([`Connections::open`]), `WAIT` for replicas at the right node
//! ([`Conn::wait`]), and the Redis errors every caller maps alike
//! ([`not_run`], [`unavailable`]).

use std::time::Duration;

use dq_core::StoreError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};

use crate::config::{ConnectError, RedisConfig, mask_url};

/// A multiplexed connection to one server or to a cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server, reconnecting in the background.
    Single(ConnectionManager),
    /// A cluster; slots are refreshed on MOVED and on connection errors.
    Cluster(ClusterConnection),
}

impl Conn {
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// `WAIT replicas timeout` on this connection, at the master holding
    /// `key`'s slot on a Cluster: how many replicas acknowledged the
    /// writes sent on it before.
    pub(crate) async fn wait(
        &self,
        replicas: u32,
        timeout: Duration,
        key: &str,
    ) -> redis::RedisResult<i64> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(timeout.as_millis() as u64);
        match self.clone() {
            Conn::Single(mut c) => wait.query_async(&mut c).await,
            Conn::Cluster(mut c) => {
                let route = redis::cluster_routing::Route::with_key(
                    key,
                    redis::cluster_routing::SlotAddr::Master,
                );
                c.route_command(
                    wait,
                    redis::cluster_routing::RoutingInfo::SingleNode(
                        redis::cluster_routing::SingleNodeRoutingInfo::SpecificNode(route),
                    ),
                )
                .await
                .and_then(|v| redis::from_redis_value(v).map_err(Into::into))
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// A store's connections, opened lazily from its config.
pub(crate) struct Connections {
    /// Where wake-ups are subscribed: the server, or each seed node.
    pub(crate) pubsub: Vec<redis::Client>,
    /// For everything but batches of new jobs.
    pub(crate) conn: Conn,
    /// For batches of new jobs (enqueue, import) and their `WAIT`.
    pub(crate) writes: Conn,
}

impl Connections {
    /// The connections `config` names. Does not connect yet: the first
    /// call does, and reconnects happen in the background.
    ///
    /// # Errors
    /// [`ConnectError::InvalidUrl`] for a URL redis-rs cannot use.
    pub(crate) fn open(config: &RedisConfig) -> Result<Self, ConnectError> {
        let urls = if config.cluster.is_empty() {
            std::slice::from_ref(&config.url)
        } else {
            config.cluster.as_slice()
        };
        let mut infos = Vec::new();
        for url in urls {
            let invalid = |reason: String| ConnectError::InvalidUrl {
                url: mask_url(url),
                reason,
            };
            infos.push(
                url.as_str()
                    .into_connection_info()
                    .map_err(|e| invalid(e.to_string()))?
                    .set_tcp_settings(TcpSettings::default().set_nodelay(true)),
            );
        }
        let invalid = |reason: String| ConnectError::InvalidUrl {
            url: urls
                .iter()
                .map(|u| mask_url(u))
                .collect::<Vec<_>>()
                .join(","),
            reason,
        };
        let pubsub = infos
            .iter()
            .map(|i| redis::Client::open(i.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(e.to_string()))?;
        let connect = || -> Result<Conn, ConnectError> {
            if config.cluster.is_empty() {
                let cm_config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(config.response_timeout))
                    .set_connection_timeout(Some(config.connect_timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_secs(2));
                return Ok(Conn::Single(
                    ConnectionManager::new_lazy_with_config(pubsub[0].clone(), cm_config)
                        .map_err(|e| invalid(e.to_string()))?,
                ));
            }
            let client = ClusterClientBuilder::new(infos.clone())
                .tcp_settings(TcpSettings::default().set_nodelay(true))
                .connection_timeout(config.connect_timeout)
                .response_timeout(config.response_timeout)
                .retries(4)
                .min_retry_wait(50)
                .max_retry_wait(1000)
                .build()
                .map_err(|e| invalid(e.to_string()))?;
            Ok(Conn::Cluster(
                client.get_pending_async_connection_with_config(
                    ClusterConfig::new()
                        .set_connection_timeout(config.connect_timeout)
                        .set_response_timeout(config.response_timeout),
                ),
            ))
        };
        let conn = connect()?;
        let writes = connect()?;
        Ok(Self {
            pubsub,
            conn,
            writes,
        })
    }
}

/// Whether Redis refused a script before running it, for a reason that passes
/// (a slot being migrated, a cluster without a master for a moment).
pub(crate) fn not_run(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::Ask
                | ServerErrorKind::Moved
        )
    )
}

/// A Redis error as the store reports it: Redis did not answer as it
/// should, a retry may do.
pub(crate) fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}
