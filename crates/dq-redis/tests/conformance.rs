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

/// Outside the macro (it takes the forward sink too): through the sink
/// `dq serve` gives over this server (as one shard).
#[tokio::test]
async fn ack_and_write_elsewhere_does_nothing() {
    let (store, _server) = fresh().await;
    let store = std::sync::Arc::new(dq_redis::ShardedStore::new(vec![("redis".into(), store)]));
    let sink = dq_redis::RedisSink::over(store.clone());
    dq_testkit::conformance::ack_and_write_elsewhere_does_nothing(&*store, &sink).await;
}
