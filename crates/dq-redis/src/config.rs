//! How to reach Redis ([`RedisConfig`], whose clock decides:
//! [`TimeSource`]) and what can go wrong building a store from it
//! ([`ConnectError`]); URLs with their password hidden for messages
//! ([`mask_url`]).

use std::time::Duration;

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]` or `rediss://…` for TLS.
    pub url: String,
    /// Key namespace (default `dq`); several dq deployments can share a Redis
    /// by using different prefixes.
    pub prefix: String,
    /// Longest wait for any single reply.
    pub response_timeout: Duration,
    /// Longest wait to connect.
    pub connect_timeout: Duration,
    /// Replicas that must acknowledge each enqueue (Redis `WAIT`) before it
    /// is reported done; 0 (default) does not wait. See docs/design.md.
    pub wait_replicas: u32,
    /// Longest `WAIT` for those replicas; past it the enqueue fails (503) —
    /// it may still be on the master: retrying with the same id is safe.
    pub wait_timeout: Duration,
    /// Seed nodes of a Redis Cluster (`redis://host:port`, any few of its
    /// nodes). When not empty, `url` is not used and dq talks to the cluster.
    pub cluster: Vec<String>,
    /// Whose clock decides due times, reserves, lease expiry and retries.
    pub clock: TimeSource,
}

/// Whose clock a [`RedisStore`](crate::RedisStore) decides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeSource {
    /// The Redis server's (`TIME` inside each script; on a Cluster, the
    /// clock of the master holding the partition): every dq instance decides
    /// by one clock, whatever its own says. The default, and what `dq serve`
    /// uses.
    #[default]
    Server,
    /// The `now_ms` each call passes: for tests that drive a
    /// [`ManualClock`](dq_core::ManualClock).
    Caller,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            prefix: "dq".into(),
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            cluster: Vec::new(),
            clock: TimeSource::Server,
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
        }
    }
}

/// Errors building a [`RedisStore`](crate::RedisStore).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL cannot be parsed or names an unsupported scheme.
    #[error("invalid Redis URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL with any password masked.
        url: String,
        /// Why.
        reason: String,
    },
}

/// Hides the password of a Redis URL for messages and logs.
pub fn mask_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_url_hides_password() {
        assert_eq!(mask_url("redis://:secret@h:1/0"), "redis://***@h:1/0");
        assert_eq!(mask_url("redis://h:1"), "redis://h:1");
    }
}
