//! The Store conformance suite against the embedded store on a temp dir.

use dq_embedded::EmbeddedStore;

async fn fresh() -> (EmbeddedStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path().join("data")).unwrap();
    (store, dir)
}

dq_testkit::conformance_tests!(fresh());
dq_testkit::expiry_conformance_tests!(fresh());

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
    let (store, _dir) = fresh().await;
    dq_testkit::conformance::ack_and_write_elsewhere_does_nothing(&store, &WritesOnly).await;
}
