//! The Store conformance suite against a private PostgreSQL (one server per
//! test process, a fresh database per scenario).

use dq_postgres::{PgConfig, PgStore, TimeSource};
use dq_testkit::PgServer;

async fn fresh() -> (PgStore, ()) {
    let url = PgServer::shared().fresh_database("conf");
    let store = PgStore::open(&PgConfig {
        url,
        pool_size: 4,
        clock: TimeSource::Caller,
        ..Default::default()
    })
    .await
    .unwrap();
    (store, ())
}

dq_testkit::conformance_tests!(fresh());

/// The forward sink of a store that is not Redis: it writes, the caller
/// acks; its `ack_and_write` is the trait's default.
struct WritesOnly;

impl dq_core::ForwardSink for WritesOnly {
    fn connect(
        &self,
        url: &str,
        _: std::time::Duration,
    ) -> Result<Box<dyn dq_core::ForwardConn>, String> {
        Err(format!("not connecting to {url} in this test"))
    }
}

#[tokio::test]
async fn ack_and_write_elsewhere_does_nothing() {
    let (store, ()) = fresh().await;
    dq_testkit::conformance::ack_and_write_elsewhere_does_nothing(&store, &WritesOnly).await;
}
