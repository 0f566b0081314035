//! The HTTP harness of dq's router tests: requests go through an
//! `axum::Router` with `tower::ServiceExt::oneshot` (no socket), replies come
//! back as status + JSON, status + text, or a whole [`Reply`].
//!
//! - [`Api`]: a router and whatever must outlive it (a temp dir, a
//!   `redis-server`), with the calls the tests make: [`Api::call`],
//!   [`Api::raw`], [`Api::text`], [`Api::send`], [`Api::stats`],
//!   [`Api::metrics_text`], [`Api::expect_error`].
//! - [`send`]: one request through any router, for harnesses that rebuild
//!   their router per request (the admin tests swap the auth settings).
//! - [`FreshApi`]: how a test that runs on every store gets an [`Api`] over
//!   a fresh, empty store of the kind [`router_tests!`](crate::router_tests)
//!   chose.
//! - [`router_tests!`](crate::router_tests): runs each such test on the
//!   embedded store and on the sharded Redis store.
//! - [`parse_metrics`]: the Prometheus text format, checked line by line.
//!
//! Nothing here names `dq-server`: it dev-depends on this crate, so the
//! router (`dq_server::app`) is built by the caller and handed in.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use dq_core::{Clock, SystemClock};
use serde_json::{Value, json};
use tower::ServiceExt;

/// Whatever a router's store needs kept alive for the test (a temp dir, a
/// `redis-server`); dropped with the [`Api`].
pub type Guard = Box<dyn Any + Send + Sync>;

/// A reply, read whole: status, headers and the body as text.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    /// The body as JSON; `Null` when it is none (an HTML page, an empty body).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    /// A header's value as text, `""` when absent.
    pub fn header(&self, name: header::HeaderName) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("a header that is text"))
            .unwrap_or_default()
    }
}

/// Sends `req` through `router` and reads the whole reply.
///
/// # Panics
///
/// If the router fails (axum routers do not) or the body is not UTF-8: a
/// test that meets either has found a bug.
pub async fn send(router: Router, req: Request<Body>) -> Reply {
    let res = router.oneshot(req).await.expect("the router answers");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .expect("the body is read");
    Reply {
        status,
        headers,
        text: String::from_utf8(bytes.to_vec()).expect("a text body"),
    }
}

/// A `POST` of `text` as `application/json`, sent as is (not re-encoded, so a
/// test can send what `serde_json` would never write).
pub fn post_json(uri: &str, text: impl Into<String>) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(text.into()))
        .expect("a valid request")
}

/// The API of one dq instance: its router and what its store needs alive.
pub struct Api {
    router: Router,
    _guard: Guard,
}

impl Api {
    /// An API over `router`, keeping `guard` until the API is dropped.
    pub fn new(router: Router, guard: impl Any + Send + Sync) -> Self {
        Self {
            router,
            _guard: Box::new(guard),
        }
    }

    /// The router, for a request the helpers do not build.
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// Sends `req` and reads the whole reply (status, headers, text).
    pub async fn send(&self, req: Request<Body>) -> Reply {
        send(self.router(), req).await
    }

    /// Sends `req`; the reply's status and body as JSON (`Null` if it is not).
    pub async fn raw(&self, req: Request<Body>) -> (StatusCode, Value) {
        let r = self.send(req).await;
        (r.status, r.json())
    }

    /// Sends `req`; the reply's status and exact text.
    pub async fn text(&self, req: Request<Body>) -> (StatusCode, String) {
        let r = self.send(req).await;
        (r.status, r.text)
    }

    /// `method uri` with `body` as JSON (or no body); status and JSON reply.
    pub async fn call(&self, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
        let req = Request::builder().method(method).uri(uri);
        let req = match body {
            Some(b) => req
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        }
        .expect("a valid request");
        self.raw(req).await
    }

    /// `GET /metrics` as text.
    pub async fn metrics_text(&self) -> String {
        let req = Request::builder()
            .uri("/metrics")
            .body(Body::empty())
            .expect("a valid request");
        self.text(req).await.1
    }

    /// The `stats` of `GET /v1/topics/{topic}`; all counts 0 for a topic the
    /// server does not know (nothing was ever written to it).
    pub async fn stats(&self, topic: &str) -> Value {
        let (s, v) = self.call("GET", &format!("/v1/topics/{topic}"), None).await;
        if s == StatusCode::NOT_FOUND {
            return json!({"scheduled": 0, "ready": 0, "reserved": 0, "dead": 0});
        }
        v["stats"].clone()
    }

    /// Asserts that `method uri` with `body` answers `status` with the error
    /// `code` and a non-empty message (docs/api.md's error body).
    pub async fn expect_error(
        &self,
        method: &str,
        uri: &str,
        body: Option<Value>,
        status: u16,
        code: &str,
    ) {
        let (s, v) = self.call(method, uri, body).await;
        assert_eq!(s.as_u16(), status, "{method} {uri}: {v}");
        assert_eq!(v["error"]["code"], json!(code), "{method} {uri}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{method} {uri}: no message in {v}"
        );
    }

    /// [`Api::expect_error`] for each `(method, uri, body, status, code)`, in order.
    pub async fn expect_errors(&self, cases: &[(&str, &str, Option<Value>, u16, &str)]) {
        for (method, uri, body, status, code) in cases {
            self.expect_error(method, uri, body.clone(), *status, code)
                .await;
        }
    }
}

/// Makes an [`Api`] over a fresh, empty store of one kind: what a test run
/// by [`router_tests!`](crate::router_tests) is given, once per store. The
/// test makes the API itself, so it chooses the clock its server reads.
#[derive(Clone, Copy)]
pub struct FreshApi {
    make: fn(Arc<dyn Clock>) -> Api,
}

impl FreshApi {
    /// `make` builds the API over a new, empty store, its server reading
    /// time from the clock it is given.
    pub fn new(make: fn(Arc<dyn Clock>) -> Api) -> Self {
        Self { make }
    }

    /// An API on the system clock.
    pub fn api(&self) -> Api {
        self.with_clock(Arc::new(SystemClock))
    }

    /// An API whose server reads time from `clock` (a `ManualClock` makes
    /// due times exact).
    pub fn with_clock(&self, clock: Arc<dyn Clock>) -> Api {
        (self.make)(clock)
    }
}

/// Runs each named `async fn(harness)` once per store: on the embedded store,
/// on the sharded Redis store and on the PostgreSQL store, as
/// [`conformance_tests!`](crate::conformance_tests) runs the conformance
/// scenarios on every store.
///
/// Expands to `mod embedded`, `mod sharded_redis` and `mod postgres`, each holding one
/// `#[tokio::test]` per name that calls the caller's function of that name
/// with that store's harness. The harness expressions are evaluated inside
/// those modules (which `use super::*`), once per test, so they can name the
/// caller's items. Every store must be given: a test listed here cannot end
/// up on one store only.
///
/// ```text
/// // In dq-server's tests/http.rs, each test an `async fn(FreshApi)`:
/// dq_testkit::router_tests! {
///     embedded: FreshApi::new(|clock| api_over(embedded_store(), clock)),
///     sharded_redis: FreshApi::new(|clock| api_over(sharded_redis_store(), clock)),
///     postgres: FreshApi::new(|clock| api_over(postgres_store(), clock)),
///     tests: [unpaid_order_tour, every_error_code_and_nothing_written],
/// }
/// ```
#[macro_export]
macro_rules! router_tests {
    (
        embedded: $embedded:expr,
        sharded_redis: $redis:expr,
        postgres: $postgres:expr,
        tests: [$($name:ident),* $(,)?] $(,)?
    ) => {
        mod embedded {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($embedded).await;
                }
            )*
        }
        mod sharded_redis {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($redis).await;
                }
            )*
        }
        mod postgres {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name($postgres).await;
                }
            )*
        }
    };
}

/// Parses the Prometheus text format into (`name{labels}` → value), checking
/// every sample line is well formed and every family has a TYPE line of a
/// kind dq uses.
///
/// # Panics
///
/// On a malformed line, a value that is not a number, or a sample of a
/// family without a TYPE.
pub fn parse_metrics(text: &str) -> HashMap<String, f64> {
    let mut samples = HashMap::new();
    let mut typed = HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let name = parts.next().unwrap().to_string();
            let kind = parts.next().unwrap();
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            typed.insert(name);
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (key, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let name = key.split('{').next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
            .unwrap_or(name);
        assert!(typed.contains(family), "{name} has no TYPE line");
        samples.insert(key.to_string(), value);
    }
    samples
}
