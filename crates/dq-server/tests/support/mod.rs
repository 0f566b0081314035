//! The stores dq-server's tests run on, each fresh and empty, with what must
//! outlive it: the embedded store on a temp dir, the PostgreSQL store on a
//! fresh database of a private server, and the sharded Redis store
//! (`dq serve`'s Redis store: `ShardedStore` over one private
//! `redis-server`, time given by the caller, short timeouts so a test of an
//! unreachable store fails fast). [`api_over`] puts the router on a store.
//!
//! The request helpers and the macro that runs a test on both stores are in
//! `dq_testkit::http`; the stores are here because dq-testkit cannot name
//! them: dq-embedded and dq-redis dev-depend on dq-testkit for the
//! conformance suite, so depending on them would make a cycle. A macro in
//! dq-testkit expanding `dq_embedded::`/`dq_redis::` paths in the caller
//! would break that cycle too, but as code dq-testkit never compiles itself:
//! a change to a store's constructor would surface at each expansion, far
//! from its cause. Here it is plain code, compiled with its only users.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use dq_core::{Clock, Limits, Store};
use dq_embedded::EmbeddedStore;
use dq_redis::{RedisConfig, RedisStore, ShardedStore, TimeSource};
use dq_server::{AppState, app};
use dq_testkit::RedisServer;
use dq_testkit::http::Api;

/// The largest request the tests' routers accept (`app`'s `max_request_bytes`).
pub(crate) const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// A fresh PostgreSQL store: a new database on this test process's private
/// server (`dq_testkit::PgServer::shared`), time given by the caller. Its
/// schema is created on a thread of its own (this is called from inside a
/// test's runtime, which cannot block on it); the pool connects lazily.
pub(crate) fn postgres_store() -> (Arc<dyn Store>, ()) {
    let url = dq_testkit::PgServer::shared().fresh_database("http");
    let store = dq_postgres::PgStore::new(&dq_postgres::PgConfig {
        url,
        pool_size: 4,
        clock: dq_postgres::TimeSource::Caller,
        ..Default::default()
    })
    .unwrap();
    let migrating = store.clone();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(migrating.migrate())
    })
    .join()
    .unwrap()
    .unwrap();
    (Arc::new(store), ())
}

/// A fresh embedded store in a temp dir; the dir goes when the guard drops.
pub(crate) fn embedded_store() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path().join("data")).unwrap();
    (Arc::new(store), dir)
}

/// A fresh sharded Redis store over one private `redis-server`, stopped
/// when the guard drops.
pub(crate) fn sharded_redis_store() -> (Arc<dyn Store>, RedisServer) {
    let redis = RedisServer::start();
    (Arc::new(sharded_redis_at(&redis.url())), redis)
}

/// The sharded store, as `dq serve` runs it, over the one Redis at `url`
/// (reachable or not: a test of a store that is down gives a free port).
pub(crate) fn sharded_redis_at(url: &str) -> ShardedStore {
    ShardedStore::new(vec![("redis".into(), redis_shard(url))])
}

/// One shard: the Redis at `url`, time given by the caller, timeouts short
/// enough that an unreachable one is reported within a test's patience.
pub(crate) fn redis_shard(url: &str) -> RedisStore {
    RedisStore::new(&RedisConfig {
        url: url.to_string(),
        response_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(200),
        clock: TimeSource::Caller,
        ..Default::default()
    })
    .unwrap()
}

/// The limits the HTTP tests expect: a job body over 1000 bytes is refused
/// (`body_too_large`), well below the request limit (`request_too_large`).
pub(crate) fn limits() -> Limits {
    Limits {
        max_body_bytes: 1000,
        ..Limits::default()
    }
}

/// The router over `store` with [`limits`], reading time from `clock`;
/// `guard` is kept as long as the API.
pub(crate) fn api_over(
    (store, guard): (Arc<dyn Store>, impl std::any::Any + Send + Sync),
    clock: Arc<dyn Clock>,
) -> Api {
    Api::new(
        app(AppState::new(store, clock, limits()), MAX_REQUEST_BYTES),
        guard,
    )
}

/// `method uri` with a JSON `body` (none when `Null`) as if sent from
/// `peer` (`ip:port`, as the listener's `ConnectInfo` gives it), with an
/// optional `Authorization: Bearer`.
pub(crate) async fn request_from(
    api: &Api,
    peer: &str,
    bearer: Option<&str>,
    method: &str,
    uri: &str,
    body: serde_json::Value,
) -> dq_testkit::http::Reply {
    use axum::http::header;
    let mut req = axum::http::Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(t) = bearer {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let mut req = req
        .body(if body.is_null() {
            axum::body::Body::empty()
        } else {
            axum::body::Body::from(body.to_string())
        })
        .unwrap();
    req.extensions_mut().insert(axum::extract::ConnectInfo(
        peer.parse::<std::net::SocketAddr>().unwrap(),
    ));
    api.send(req).await
}

/// A running `Server` (listener, dispatcher, deliverer, forwarder) on a
/// free port of 127.0.0.1; it stops when this is dropped.
pub(crate) struct Running {
    /// `http://127.0.0.1:<port>`.
    pub(crate) base: String,
    /// The server's state (its service, metrics).
    pub(crate) state: AppState,
    http: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Running {
    /// `method path` with a JSON `body` (none when `Null`): the status and
    /// the JSON reply (`Null` when there is none).
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        if !body.is_null() {
            r = r.json(&body);
        }
        let r = r.send().await.unwrap();
        (
            r.status().as_u16(),
            r.json().await.unwrap_or(serde_json::Value::Null),
        )
    }

    /// The `stats` of `GET /v1/topics/{topic}`.
    pub(crate) async fn stats(&self, topic: &str) -> serde_json::Value {
        self.call(
            reqwest::Method::GET,
            &format!("/v1/topics/{topic}"),
            serde_json::Value::Null,
        )
        .await
        .1["stats"]
            .clone()
    }
}

/// Starts `dq_server::Server` over `store` with `config` (its `listen` is
/// replaced by a free port), on the system clock.
pub(crate) async fn serve(store: Arc<dyn Store>, config: dq_server::ServerConfig) -> Running {
    serve_on(store, config, Arc::new(dq_core::SystemClock)).await
}

/// [`serve`] reading time from `clock`.
pub(crate) async fn serve_on(
    store: Arc<dyn Store>,
    config: dq_server::ServerConfig,
    clock: Arc<dyn Clock>,
) -> Running {
    start(server(store, config, clock)).await
}

/// [`serve`] with forwarding topics written through `sink`, as `dq serve`
/// gives it.
pub(crate) async fn serve_forwarding(
    store: Arc<dyn Store>,
    sink: dq_redis::RedisSink,
    config: dq_server::ServerConfig,
) -> Running {
    let server = server(store, config, Arc::new(dq_core::SystemClock));
    start(server.with_forward_sink(Arc::new(sink))).await
}

/// A `Server` over `store` with `config` on a free port of 127.0.0.1.
fn server(
    store: Arc<dyn Store>,
    config: dq_server::ServerConfig,
    clock: Arc<dyn Clock>,
) -> dq_server::Server {
    let _ = rustls::crypto::ring::default_provider().install_default();
    dq_server::Server::new(
        dq_server::ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..config
        },
        store,
        clock,
    )
}

/// Runs `server` until the returned [`Running`] is dropped.
async fn start(server: dq_server::Server) -> Running {
    let state = server.state().clone();
    let l = server.bind().await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(l, async move {
        let _ = rx.await;
    }));
    Running {
        base,
        state,
        http: reqwest::Client::new(),
        _stop: tx,
    }
}
