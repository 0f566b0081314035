//! The beanstalkd protocol (protocol.txt of beanstalkd 1.12) as one more
//! front-end of the [`Service`]: existing beanstalkd clients (pheanstalk,
//! greenstalk, beaneater, go-beanstalk) work against `dq serve
//! --beanstalkd 127.0.0.1:11300`.
//!
//! Mapping (docs/beanstalkd.md says what differs from the reference):
//! - a tube is a dq topic (tube names dq cannot hold get `BAD_FORMAT`);
//! - a job id is a decimal integer from the store's counter `beanstalkd`
//!   (unique and increasing across every instance sharing the store), used
//!   as the dq job id; a job put over HTTP whose id is not such a number is
//!   shown under an alias (`alias`);
//! - TTR is the lease; a job put here never runs out of attempts and comes
//!   back at once when its TTR passes (as in beanstalkd);
//! - bury is a dead letter, kick is replay (buried) or run-now (delayed);
//!   delete works on a job in any state but one reserved by another client;
//! - a connection that closes or quits puts the jobs it holds back at once.
//!
//! The modules, split the way mini-redis splits its server:
//! - `alias` — the numbers shown for jobs whose dq id is not one.
//! - `parse` — a command line into a [`Cmd`], or the reply word refusing it.
//! - `reply` — what a command answers and its bytes on the wire, the YAML
//!   bodies, a service error as the reference would say it.
//! - `conn` — one connection's loop: read a line, check who may run it,
//!   dispatch it, write the answer; give back what it holds at the end.
//! - `jobs` — the job commands: put, reserve (and reserve-job), delete,
//!   release, bury, touch, peek (and peek-ready/-delayed/-buried), kick,
//!   kick-job.
//! - `shared` — what the connections share: counts, tubes in use.
//! - `stats` — stats, stats-tube, stats-job, list-tubes, pause-tube.
//!
//! This file: the listener ([`serve`]: settings, accept loop) and what the
//! handlers share, a connection's state (used and watched tubes, the jobs it
//! holds, the key it acts as).

mod alias;
mod conn;
mod jobs;
mod parse;
mod reply;
mod shared;
mod stats;

pub use parse::{Cmd, parse};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dq_core::{JobId, JobInfo, Topic};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::Access;
use crate::keys::Action;
use crate::service::Service;
use shared::Shared;

/// Longest command line, `\r\n` included (the reference's limit).
pub const MAX_LINE: usize = 224;

/// The listener's settings.
#[derive(Clone)]
pub struct BeanstalkdConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Largest job body in bytes (`JOB_TOO_BIG` beyond).
    pub max_job_size: usize,
    /// An API key every connection acts as until it sends `auth <key>`
    /// (the protocol has no auth of its own, so clients that cannot send
    /// `auth` get one here). None: connections start without a key.
    pub key: Option<String>,
    /// `auth = "required"`: a key is needed even while none exists.
    pub auth_required: bool,
    /// Speak TLS, with the HTTP listener's certificate (`tls_cert`,
    /// `tls_key`, reloaded on SIGHUP with it).
    pub tls: bool,
}

impl std::fmt::Debug for BeanstalkdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BeanstalkdConfig")
            .field("listen", &self.listen)
            .field("max_job_size", &self.max_job_size)
            .field("key", &self.key.as_ref().map(|_| "…"))
            .field("auth_required", &self.auth_required)
            .field("tls", &self.tls)
            .finish()
    }
}

/// How long a client may take over its TLS handshake.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// Serves beanstalkd clients on `listener` until `cancel` fires; over TLS
/// when `tls` is given.
pub async fn serve(
    listener: TcpListener,
    svc: Arc<Service>,
    config: BeanstalkdConfig,
    cancel: CancellationToken,
    tls: Option<Arc<crate::tls::Tls>>,
) {
    let shared = Arc::new(Shared::new());
    let started = Instant::now();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = cancel.cancelled() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "beanstalkd listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = Conn {
            svc: svc.clone(),
            secret: config.key.clone(),
            config: config.clone(),
            shared: shared.clone(),
            started,
            used: default_tube(),
            watched: vec![default_tube()],
            held: HashMap::new(),
            allowed: Access::Open,
            peer,
            producer: false,
            worker: false,
        };
        let cancel = cancel.clone();
        let acceptor = tls.as_ref().map(|t| t.acceptor());
        tokio::spawn(async move {
            conn.shared.connections.fetch_add(1, Ordering::Relaxed);
            conn.shared
                .total_connections
                .fetch_add(1, Ordering::Relaxed);
            match acceptor {
                None => conn.run(stream, peer, cancel).await,
                Some(a) => match tokio::time::timeout(TLS_HANDSHAKE, a.accept(stream)).await {
                    Ok(Ok(s)) => conn.run(s, peer, cancel).await,
                    Ok(Err(e)) => {
                        conn.shared.connections.fetch_sub(1, Ordering::Relaxed);
                        tracing::debug!(%peer, error = %e, "beanstalkd TLS handshake failed");
                    }
                    Err(_) => {
                        conn.shared.connections.fetch_sub(1, Ordering::Relaxed);
                        tracing::debug!(%peer, "beanstalkd TLS handshake timed out");
                    }
                },
            }
        });
    }
}

fn default_tube() -> Topic {
    Topic::new("default").expect("a valid topic name")
}

/// A job this connection holds.
struct Held {
    topic: Topic,
    /// Its dq id (the number itself, or what an alias names).
    id: JobId,
    token: String,
    deadline_ms: u64,
}

struct Conn {
    svc: Arc<Service>,
    config: BeanstalkdConfig,
    /// The key this connection acts as (the listener's, or `auth`'s).
    secret: Option<String>,
    shared: Arc<Shared>,
    started: Instant,
    used: Topic,
    watched: Vec<Topic>,
    held: HashMap<u64, Held>,
    /// What the command being run may do (set before each command).
    allowed: Access,
    /// The client's address (for logs).
    peer: SocketAddr,
    /// Whether it has put a job (`current-producers`).
    producer: bool,
    /// Whether it has reserved (`current-workers`).
    worker: bool,
}

impl Conn {
    /// The job numbered `id`: the connection's own first, else looked for
    /// among the topics this connection's key allows `action` on (a job
    /// elsewhere is not found); an alias names its tube.
    async fn find(&self, id: u64, action: Action) -> Option<(Topic, JobInfo)> {
        if let Some(h) = self.held.get(&id)
            && let Ok(v) = self.svc.get(&h.topic, &h.id).await
        {
            return Some((h.topic.clone(), v.job));
        }
        let jid = match self.shared.aliases.named(id) {
            alias::Named::Id(jid) => jid,
            alias::Named::Alias(t, jid) => {
                if !self.allowed.allows(action, t.as_str()) {
                    return None;
                }
                return self.svc.get(&t, &jid).await.ok().map(|v| (t, v.job));
            }
            alias::Named::Unknown => return None,
        };
        for t in self.svc.topics().await.ok()? {
            if !self.allowed.allows(action, t.as_str()) {
                continue;
            }
            if let Ok(v) = self.svc.get(&t, &jid).await {
                return Some((t, v.job));
            }
        }
        None
    }

    /// The number this listener shows for a job.
    fn number(&self, topic: &Topic, id: &JobId) -> u64 {
        self.shared.aliases.number(topic, id)
    }
}
