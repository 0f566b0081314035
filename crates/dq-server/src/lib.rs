//! dq-server: the `dq serve` process as a library.
//!
//! - [`app`] builds the axum [`Router`] (HTTP API under `/v1`, health, the
//!   OpenAPI document), so tests call it with `oneshot` or on port 0.
//! - [`Server`] runs the router, the push deliverer, the forwarder and the
//!   scheduler as supervised tasks, with graceful shutdown; the loops that
//!   need the store (the wake listener, API-key refresh, the store-clock
//!   sync, the [`dispatcher::Dispatcher`]) are started by
//!   [`Service::spawn_loops`] on the same tracker, so shutdown awaits them
//!   too.
//! - [`service`] holds every verb ([`Service`]); the front-ends — `api`
//!   (HTTP handlers), `admin` (the admin page), [`deliverer`] (push),
//!   [`forwarder`] (into a Redis Stream or list), `beanstalkd` and
//!   [`Server::apply_topics`] (the config file's topics) — parse, call it and
//!   render, and never call the store themselves.
//! - [`AppState`] (`state.rs`): what the HTTP front-ends share.
//! - [`routes`]: every route, once (the router and the API scopes come
//!   from it).
//! - [`schedule`] (a schedule's rule, pure) and [`scheduler`] (the loop
//!   asking the service for a pass).
//! - Other modules: [`error`] (`ApiError`), `extract` (JSON bodies),
//!   [`ops`] (backup, drain), [`dispatcher`], [`wakers`], [`auth`],
//!   [`metrics`], `rates` (the admin page's rates and history),
//!   [`alerts`], [`push_guard`], `openapi`. The long-poll reserve is the
//!   service's (`service/long_poll.rs`).

mod admin;
pub mod alerts;
mod api;
pub mod auth;
pub mod beanstalkd;
pub mod clock;
pub mod credentials;
pub mod deliverer;
pub mod dispatcher;
pub mod error;
mod extract;
pub mod forwarder;
pub mod keys;
pub mod listener;
pub mod metrics;
mod openapi;
pub mod ops;
pub mod push_guard;
mod rates;
pub mod routes;
pub mod schedule;
pub mod scheduler;
pub mod service;
mod state;
pub mod telemetry;
pub mod tls;
pub mod wakers;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use dq_core::{Clock, Limits, Store};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use error::ApiError;
pub use service::Service;
pub use state::AppState;

/// The HTTP API: the routes of [`routes::ROUTES`], behind auth's guard and
/// the access log. `max_request_bytes` caps every request body.
pub fn app(state: AppState, max_request_bytes: usize) -> Router {
    routes::router()
        .fallback(api::not_found)
        .method_not_allowed_fallback(api::method_not_allowed)
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .layer(axum::middleware::from_fn_with_state(
            auth::GuardState {
                app: state.clone(),
                scopes: routes::SCOPES,
            },
            auth::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            observe_http,
        ))
        .with_state(state)
}

/// Records each request's duration (by method, matched route and status),
/// gives it a request id (the client's `x-request-id`, or a new one, echoed
/// in the response) and writes one access-log line on the target `dq::access`.
async fn observe_http(
    axum::extract::State(st): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let started = std::time::Instant::now();
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let path = req.uri().path().to_string();
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map_or_else(|| format!("{:016x}", next_request_id()), str::to_string);
    let mut req = req;
    req.extensions_mut()
        .insert(auth::RequestId(request_id.clone()));
    let mut res = next.run(req).await;
    let took = started.elapsed();
    let status = res.status().as_u16();
    st.metrics.observe_http(&method, &route, status, took);
    if let Ok(v) = axum::http::HeaderValue::from_str(&request_id) {
        res.headers_mut().insert("x-request-id", v);
    }
    tracing::info!(target: "dq::access", request_id = %request_id, method = %method, path = %path, status, took_us = took.as_micros() as u64, "request");
    res
}

/// A process-unique request id: a random start, then counting.
fn next_request_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: std::sync::OnceLock<AtomicU64> = std::sync::OnceLock::new();
    NEXT.get_or_init(|| {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        AtomicU64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    })
    .fetch_add(1, Ordering::Relaxed)
}

/// `GET /metrics`.
async fn metrics_text(
    axum::extract::State(st): axum::extract::State<AppState>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = st.service.metrics_text().await;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// How `dq serve` runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address of the HTTP API.
    pub listen: SocketAddr,
    /// Input bounds.
    pub limits: Limits,
    /// Largest request body.
    pub max_request_bytes: usize,
    /// How long in-flight requests may take to finish at shutdown.
    pub shutdown_grace: Duration,
    /// Longest dispatcher sleep (see [`dispatcher`]).
    pub dispatcher_max_sleep: Duration,
    /// Refuse push callbacks to loopback and private addresses too.
    pub push_deny_private: bool,
    /// Alert channels (none by default).
    pub alerts: alerts::AlertConfig,
    /// The admin token (see [`auth`]); None: admin page on loopback only.
    pub admin_token: Option<String>,
    /// `auth = "required"`: every `/v1` call needs a key even before one
    /// exists (see [`auth`]).
    pub auth_required: bool,
    /// The bearer token `/metrics` wants; None: open.
    pub metrics_token: Option<String>,
    /// Which topics get `dq_topic_*` series of their own.
    pub metrics_series: metrics::TopicSeries,
    /// What the admin page calls the store.
    pub store_name: String,
    /// Bounds on HTTP connections (timeouts, connection limit).
    pub http: listener::HttpLimits,
    /// The beanstalkd protocol listener (off by default).
    pub beanstalkd: Option<beanstalkd::BeanstalkdConfig>,
    /// TLS for the HTTP listener (off by default): read at start, again on
    /// SIGHUP.
    pub tls: Option<tls::TlsFiles>,
    /// An HTTP enqueue to a topic nobody created creates it (default); off:
    /// such an enqueue or reserve answers 404 `topic_not_found`.
    pub auto_create_topics: bool,
    /// The base URL of an OTLP/HTTP receiver that gets the jobs' spans
    /// ([`telemetry`]); None: no export (default).
    pub otlp_endpoint: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            limits: Limits::default(),
            max_request_bytes: 32 * 1024 * 1024,
            shutdown_grace: Duration::from_secs(10),
            dispatcher_max_sleep: Duration::from_secs(1),
            push_deny_private: false,
            alerts: alerts::AlertConfig::default(),
            admin_token: None,
            auth_required: false,
            metrics_token: None,
            metrics_series: metrics::TopicSeries::default(),
            store_name: "store".into(),
            http: listener::HttpLimits::default(),
            beanstalkd: None,
            tls: None,
            auto_create_topics: true,
            otlp_endpoint: None,
        }
    }
}

/// A running server.
pub struct Server {
    config: ServerConfig,
    state: AppState,
    clock: Arc<clock::StoreClock>,
    /// The beanstalkd listener when bound before [`Server::run`].
    beanstalkd_listener: Option<tokio::net::TcpListener>,
    /// Where forwarding topics write ([`Server::with_forward_sink`]).
    forward_sink: Arc<dyn dq_core::ForwardSink>,
}

impl Server {
    /// A server over `store`. `clock` is this instance's own clock; where
    /// the store has a clock of its own (Redis), the server moves it to the
    /// store's (see [`clock`]).
    pub fn new(config: ServerConfig, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        let guard = push_guard::PushGuard {
            deny_private: config.push_deny_private,
        };
        let clock = Arc::new(clock::StoreClock::new(clock));
        let mut state = AppState::with_guard(store, clock.clone(), config.limits, guard);
        state.admin = Arc::new(
            auth::AdminAuth::new(config.admin_token.clone())
                .requiring_keys(config.auth_required)
                .with_metrics_token(config.metrics_token.clone()),
        );
        state
            .metrics
            .set_topic_series(config.metrics_series.clone());
        state.store_name = config.store_name.clone();
        state
            .service
            .set_auto_create_topics(config.auto_create_topics);
        if let Some(endpoint) = &config.otlp_endpoint {
            let instance = format!(
                "{}-{}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "dq".into()),
                std::process::id()
            );
            match telemetry::Spans::start(endpoint, "dq", &instance) {
                Ok(spans) => state.service.set_spans(spans),
                Err(e) => tracing::error!(error = %e, "no span export"),
            }
        }
        Self {
            config,
            state,
            clock,
            beanstalkd_listener: None,
            forward_sink: Arc::new(forwarder::NoSink),
        }
    }

    /// Forwarding topics write through `sink` (`dq serve` gives dq-redis's
    /// `RedisSink`, over its store when that is Redis). Without one every
    /// write is refused ([`forwarder::NoSink`]).
    #[must_use]
    pub fn with_forward_sink(mut self, sink: Arc<dyn dq_core::ForwardSink>) -> Self {
        self.forward_sink = sink;
        self
    }

    /// The shared state (tests use it to wake waiters after moving a manual clock).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Applies topic settings (from the config file) before serving: each is
    /// validated like `PUT /v1/topics/{topic}`, push URLs included.
    ///
    /// # Errors
    /// The first topic whose settings are refused, or a store error.
    pub async fn apply_topics(
        &self,
        topics: &std::collections::BTreeMap<String, dq_core::TopicConfigPatch>,
    ) -> Result<(), String> {
        for (name, patch) in topics {
            let configured = match dq_core::Topic::new(name.clone()) {
                Ok(t) => self.state.service.configure_topic(&t, patch.clone()).await,
                Err(e) => Err(e.into()),
            };
            configured.map_err(|e| {
                let e = ApiError::from(e);
                format!("topic {name:?}: {} ({})", e.message, e.code)
            })?;
        }
        Ok(())
    }

    /// Applies schedules (from the config file) before serving, each as
    /// `PUT /v1/schedules/{name}`: one that is stored with the same
    /// settings keeps its progress (a restart catches up as its
    /// `catch_up` says), and one paused through the API stays paused.
    ///
    /// # Errors
    /// The first schedule refused, or a store error.
    pub async fn apply_schedules(
        &self,
        schedules: &std::collections::BTreeMap<String, dq_api::ScheduleSpec>,
    ) -> Result<(), String> {
        for (name, spec) in schedules {
            self.state
                .service
                .apply_schedule(name, spec.clone())
                .await
                .map_err(|e| {
                    let e = ApiError::from(e);
                    format!("schedule {name:?}: {} ({})", e.message, e.code)
                })?;
        }
        Ok(())
    }

    /// Binds the listen address (port 0 picks a free port).
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub async fn bind(&self) -> std::io::Result<tokio::net::TcpListener> {
        tokio::net::TcpListener::bind(self.config.listen).await
    }

    /// Binds the beanstalkd listen address now (port 0 picks a free port)
    /// and returns the address bound, so a caller learns the port before
    /// [`Server::run`] serves it; `None` when the protocol is off.
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub async fn bind_beanstalkd(&mut self) -> std::io::Result<Option<SocketAddr>> {
        let Some(bs) = &self.config.beanstalkd else {
            return Ok(None);
        };
        let l = tokio::net::TcpListener::bind(bs.listen).await?;
        let addr = l.local_addr()?;
        self.beanstalkd_listener = Some(l);
        Ok(Some(addr))
    }

    /// Serves on `listener` until `signal` completes, then shuts down:
    /// reservations stop (waiting reserves return empty), in-flight requests
    /// get `shutdown_grace` to finish, background loops stop.
    ///
    /// # Errors
    /// Only I/O errors of the listener.
    pub async fn run(
        self,
        listener: tokio::net::TcpListener,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let tracker = TaskTracker::new();
        let loops = CancellationToken::new();
        let state = self.state.clone();
        let svc = state.service.clone();
        // A certificate that cannot be read stops the start, with the reason.
        let tls = match &self.config.tls {
            Some(files) => Some(Arc::new(
                tls::Tls::load(files.clone()).map_err(std::io::Error::other)?,
            )),
            None => None,
        };

        // The store's time before the first call (a store that does not
        // answer yet is measured again by the loop).
        let _ = tokio::time::timeout(Duration::from_secs(2), svc.sync_clock(&self.clock)).await;
        // The service's own loops (wake listener, API keys, clock, dispatcher).
        svc.spawn_loops(
            &tracker,
            &loops,
            &service::Loops {
                dispatcher: Some(self.config.dispatcher_max_sleep),
                store_clock: Some(self.clock.clone()),
            },
        );

        // Push deliveries and forwarded batches in flight are tracked apart,
        // so shutdown can let them finish within the grace period.
        let deliveries = svc.deliveries().clone();
        {
            let svc = svc.clone();
            let metrics = state.metrics.clone();
            let cancel = loops.clone();
            let deliveries = deliveries.clone();
            supervise(&tracker, &loops, "deliverer", move || {
                let d = deliverer::Deliverer::new(svc.clone(), metrics.clone(), deliveries.clone());
                d.run(cancel.clone())
            });
        }
        {
            let svc = svc.clone();
            let metrics = state.metrics.clone();
            let cancel = loops.clone();
            let deliveries = deliveries.clone();
            let sink = self.forward_sink.clone();
            supervise(&tracker, &loops, "forwarder", move || {
                let f = forwarder::Forwarder::new(
                    svc.clone(),
                    metrics.clone(),
                    deliveries.clone(),
                    sink.clone(),
                );
                f.run(cancel.clone())
            });
        }

        {
            let svc = svc.clone();
            let cancel = loops.clone();
            supervise(&tracker, &loops, "scheduler", move || {
                scheduler::Scheduler::new(svc.clone()).run(cancel.clone())
            });
        }

        if self.config.alerts.enabled() {
            let svc = svc.clone();
            let cfg = self.config.alerts.clone();
            let cancel = loops.clone();
            supervise(&tracker, &loops, "alerts", move || {
                alerts::Alerter::new(svc.clone(), cfg.clone()).run(cancel.clone())
            });
        }

        if let Some(bs) = self.config.beanstalkd.clone() {
            let l = match self.beanstalkd_listener {
                Some(l) => l,
                None => tokio::net::TcpListener::bind(bs.listen).await?,
            };
            tracing::info!(addr = %l.local_addr()?, "dq serving the beanstalkd protocol");
            let (svc, cancel) = (svc.clone(), svc.shutdown().clone());
            let bs_tls = if bs.tls {
                Some(tls.clone().ok_or_else(|| {
                    std::io::Error::other("beanstalkd_tls needs tls_cert and tls_key")
                })?)
            } else {
                None
            };
            tracker.spawn(beanstalkd::serve(l, svc, bs, cancel, bs_tls));
        }

        let router = app(state.clone(), self.config.max_request_bytes);
        let shutdown = svc.shutdown().clone();
        {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                signal.await;
                tracing::info!("shutting down: no new reservations; finishing in-flight requests");
                shutdown.cancel();
            });
        }
        if config_open(&self.config, &listener) {
            tracing::warn!(
                "listening beyond loopback without admin_token: anyone who can reach this port may change jobs and topics; the admin page answers on loopback only"
            );
        }
        #[cfg(unix)]
        if let Some(tls) = &tls {
            // SIGHUP reads the certificate again (a renewal); connections
            // open keep theirs, a failed read keeps the one in use.
            let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
            let (tls, stop) = (tls.clone(), shutdown.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = hup.recv() => match tls.reload() {
                            Ok(()) => tracing::info!("SIGHUP: TLS certificate reloaded"),
                            Err(e) => tracing::error!(error = %e, "SIGHUP: cannot reload the TLS certificate; keeping the one in use"),
                        },
                        () = stop.cancelled() => return,
                    }
                }
            });
        }
        // Until the signal, then in-flight requests get the grace period.
        listener::serve(
            listener,
            router,
            self.config.http,
            shutdown.clone(),
            self.config.shutdown_grace,
            tls,
        )
        .await;
        let grace = self.config.shutdown_grace;
        deliveries.close();
        if tokio::time::timeout(grace, deliveries.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                ?grace,
                "push deliveries still running after the grace period; their jobs come back after their leases"
            );
        }
        loops.cancel();
        tracker.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), tracker.wait()).await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Whether the API is reachable beyond loopback with no token required.
fn config_open(config: &ServerConfig, listener: &tokio::net::TcpListener) -> bool {
    config.admin_token.is_none() && listener.local_addr().is_ok_and(|a| !a.ip().is_loopback())
}

/// Runs `make()` as a task on `tracker`; a panic is logged and the task
/// restarted after a backoff (up to 30 s); it ends when `cancel` fires.
fn supervise<F, Fut>(tracker: &TaskTracker, cancel: &CancellationToken, name: &'static str, make: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let cancel = cancel.clone();
    tracker.spawn(async move {
        let mut backoff = Duration::from_millis(100);
        loop {
            let task = tokio::spawn(make());
            let abort = task.abort_handle();
            tokio::select! {
                r = task => match r {
                    Ok(()) => return,
                    Err(e) if e.is_panic() => {
                        tracing::error!(task = name, ?backoff, "background task panicked; restarting");
                    }
                    Err(_) => return,
                },
                _ = cancel.cancelled() => {
                    abort.abort();
                    return;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = cancel.cancelled() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    });
}
