//! The Store conformance suite against the embedded store on a temp dir.

use dq_embedded::EmbeddedStore;

async fn fresh() -> (EmbeddedStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path().join("data")).unwrap();
    (store, dir)
}

dq_testkit::conformance_tests!(fresh());
