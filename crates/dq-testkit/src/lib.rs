//! dq-testkit: what dq's tests stand on.
//!
//! - [`redis`]: starts private `redis-server` processes on free loopback ports
//!   (never the shared 6379), stops them on drop.
//! - [`cluster`]: a Redis Cluster of such servers (`redis-cli --cluster create`).
//! - [`conformance`]: the Store contract as `pub async fn` scenarios, and the
//!   [`conformance_tests!`] macro that instantiates all of them for a store.

pub mod cluster;
pub mod conformance;
pub mod redis;

pub use cluster::RedisCluster;
pub use redis::RedisServer;

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cannot bind a loopback port")
}
