//! A real dq server (the `dq serve` library, embedded store on a temp dir)
//! on a free loopback port, for client and worker tests.

use std::sync::Arc;

use dq_client::Client;
use dq_server::{Server, ServerConfig};

pub(crate) struct TestServer {
    pub(crate) base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    pub(crate) async fn start() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let store = dq_embedded::EmbeddedStore::open(dir.path().join("data")).unwrap();
        let config = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        };
        let server = Server::new(config, Arc::new(store), Arc::new(dq_core::SystemClock));
        let listener = server.bind().await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .run(listener, async move {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        Self {
            base,
            stop: Some(tx),
            task: Some(task),
            _dir: dir,
        }
    }

    pub(crate) fn client(&self) -> Client {
        Client::new(self.base.clone()).unwrap()
    }

    pub(crate) async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}
