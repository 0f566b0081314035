//! The Store on a Redis Cluster (3 masters, 1 replica each, started by the
//! test kit): the whole conformance suite, each scenario under its own key
//! prefix so its topics hash to slots all over the cluster.

use dq_redis::{RedisConfig, RedisStore};
use dq_testkit::RedisCluster;

async fn on_cluster(cluster: &RedisCluster, scenario: &str) -> RedisStore {
    let store = RedisStore::new(&RedisConfig {
        cluster: cluster.urls(),
        prefix: format!("c-{scenario}"),
        ..Default::default()
    })
    .unwrap();
    store.load_scripts().await.unwrap();
    store
}

dq_testkit::conformance_tests!(in_one conformance_on_a_cluster, RedisCluster::start(3, 1), on_cluster);
