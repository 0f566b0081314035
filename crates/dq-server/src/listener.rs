//! The HTTP listener: hyper's connection handling with the limits a server
//! reachable by careless or hostile clients needs (`axum::serve` sets none).
//!
//! - **Header timeout**: a connection must deliver a request's headers
//!   within [`HttpLimits::header_timeout`] of being ready for one — which
//!   also closes keep-alive connections idle that long — else it is closed
//!   (slowloris).
//! - **Body timeout**: a request body must arrive within
//!   [`HttpLimits::body_timeout`] (a request announcing 10 MB and sending
//!   100 bytes gets 408 `request_timeout`).
//! - **Connection limit**: at most [`HttpLimits::max_connections`] at once;
//!   beyond it new connections are closed at once (and logged, at most once
//!   a second), so descriptors and memory stay bounded.
//!
//! - **TLS** (with [`crate::tls::Tls`]): the handshake must finish within
//!   the header timeout too; every answer then carries
//!   `Strict-Transport-Security` (a year), so browsers on the admin page
//!   keep to https.
//!
//! Shutdown: stop accepting, let every connection finish its request in
//! flight (idle ones close at once) within the grace period.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Bounds on HTTP connections (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Longest wait for a request's headers (and longest keep-alive idle).
    pub header_timeout: Duration,
    /// Longest wait for a request's body.
    pub body_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_connections: 10_000,
        }
    }
}

/// Serves `router` on `listener` until `stop` fires, then gives requests in
/// flight `grace` to finish.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    stop: CancellationToken,
    grace: Duration,
    tls: Option<Arc<crate::tls::Tls>>,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let service = tower::ServiceBuilder::new()
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            limits.body_timeout,
        ))
        .service(router);
    let mut refused_logged: Option<Instant> = None;
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: wait, do not spin.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if refused_logged.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                refused_logged = Some(Instant::now());
                tracing::warn!(max_connections = limits.max_connections, %peer, "connection limit reached; closing new connections");
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let secure = tls.is_some();
        let svc = service
            .clone()
            .map_request(move |mut req: axum::http::Request<_>| {
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                req
            })
            .map_response(move |mut res: axum::response::Response| {
                if secure {
                    res.headers_mut().insert(
                        axum::http::header::STRICT_TRANSPORT_SECURITY,
                        axum::http::HeaderValue::from_static("max-age=31536000"),
                    );
                }
                res
            });
        let acceptor = tls.as_ref().map(|t| t.acceptor());
        let (builder, watcher, header_timeout, stop) = (
            builder.clone(),
            graceful.watcher(),
            limits.header_timeout,
            stop.clone(),
        );
        tokio::spawn(async move {
            // Telling HTTP/1 from HTTP/2 reads the first bytes with no timer
            // of hyper's running: a connection that sends nothing is cut
            // off here (hyper's header timeout covers the rest, keep-alive
            // idle included), and at shutdown, as an idle one is (a
            // browser's spare connection must not hold the stop up for the
            // header timeout).
            let mut first = [0u8; 1];
            tokio::select! {
                biased;
                r = tokio::time::timeout(header_timeout, stream.peek(&mut first)) => match r {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => return,
                },
                () = stop.cancelled() => return,
            }
            let svc = TowerToHyperService::new(svc);
            match acceptor {
                None => {
                    let conn = builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                        .into_owned();
                    let _ = watcher.watch(conn).await;
                }
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(header_timeout, acceptor.accept(stream));
                    let stream = tokio::select! {
                        biased;
                        r = handshake => match r {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => return,
                        },
                        // No request yet: closed at shutdown like an idle one.
                        () = stop.cancelled() => return,
                    };
                    let conn = builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                        .into_owned();
                    let _ = watcher.watch(conn).await;
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "in-flight requests did not finish within the grace period"
        );
    }
}
