//! The Store conformance suite against a private redis-server.

use dq_redis::{RedisConfig, RedisStore};
use dq_testkit::RedisServer;

async fn fresh() -> (RedisStore, RedisServer) {
    let server = RedisServer::start();
    let store = RedisStore::new(&RedisConfig {
        url: server.url(),
        clock: dq_redis::TimeSource::Caller,
        ..Default::default()
    })
    .unwrap();
    (store, server)
}

dq_testkit::conformance_tests!(fresh());
