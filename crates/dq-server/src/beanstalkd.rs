//! The beanstalkd protocol (protocol.txt of beanstalkd 1.12) as one more
//! front-end of the [`Service`]: existing beanstalkd clients (pheanstalk,
//! greenstalk, beaneater, go-beanstalk) work against `dq serve
//! --beanstalkd 127.0.0.1:11300`.
//!
//! Mapping (docs/beanstalkd.md says what differs from the reference):
//! - a tube is a dq topic (tube names dq cannot hold get `BAD_FORMAT`);
//! - a job id is a decimal integer from the store's counter `beanstalkd`
//!   (unique and increasing across every instance sharing the store), used
//!   as the dq job id;
//! - TTR is the lease; a job put here never runs out of attempts and comes
//!   back at once when its TTR passes (as in beanstalkd);
//! - bury is a dead letter, kick is replay (buried) or run-now (delayed);
//!   delete works on a job in any state but one reserved by another client;
//! - a connection that closes or quits puts the jobs it holds back at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dq_core::{Body, JobId, JobInfo, JobState, Nack, NewJob, RetryPolicy, StoreError, Topic, When};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::Access;
use crate::keys::Action;
use crate::service::{Error, Service};

/// Longest command line, `\r\n` included (the reference's limit).
pub const MAX_LINE: usize = 224;
/// The store counter that numbers beanstalkd jobs.
const SEQ: &str = "beanstalkd";
/// Longest wait of one store reserve call inside `reserve`.
const WAIT_SLICE_MS: u64 = 10_000;
/// Ready jobs looked at to count the urgent ones of a tube (`stats-tube`
/// reports at most this many).
const URGENT_SCAN: usize = 1000;
/// How far the store's clock and this instance's may disagree when telling
/// the last second of a TTR (`DEADLINE_SOON`).
const DEADLINE_SOON_SLACK_MS: u64 = 50;
/// beanstalkd's urgent: a priority below this.
const URGENT_BELOW: u32 = 1024;

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

/// Counts shared by the connections (for `stats`).
#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    total_connections: AtomicU64,
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
    let counters = Arc::new(Counters::default());
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
            counters: counters.clone(),
            started,
            used: default_tube(),
            watched: vec![default_tube()],
            held: HashMap::new(),
            allowed: Access::Open,
            peer,
        };
        let cancel = cancel.clone();
        let acceptor = tls.as_ref().map(|t| t.acceptor());
        tokio::spawn(async move {
            conn.counters.connections.fetch_add(1, Ordering::Relaxed);
            conn.counters
                .total_connections
                .fetch_add(1, Ordering::Relaxed);
            match acceptor {
                None => conn.run(stream, peer, cancel).await,
                Some(a) => match tokio::time::timeout(TLS_HANDSHAKE, a.accept(stream)).await {
                    Ok(Ok(s)) => conn.run(s, peer, cancel).await,
                    Ok(Err(e)) => {
                        conn.counters.connections.fetch_sub(1, Ordering::Relaxed);
                        tracing::debug!(%peer, error = %e, "beanstalkd TLS handshake failed");
                    }
                    Err(_) => {
                        conn.counters.connections.fetch_sub(1, Ordering::Relaxed);
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
    token: String,
    deadline_ms: u64,
}

struct Conn {
    svc: Arc<Service>,
    config: BeanstalkdConfig,
    /// The key this connection acts as (the listener's, or `auth`'s).
    secret: Option<String>,
    counters: Arc<Counters>,
    started: Instant,
    used: Topic,
    watched: Vec<Topic>,
    held: HashMap<u64, Held>,
    /// What the command being run may do (set before each command).
    allowed: Access,
    /// The client's address (for logs).
    peer: SocketAddr,
}

/// What a command answers.
enum Reply {
    Line(String),
    /// A line, then a body and `\r\n`.
    Data(String, Vec<u8>),
    Quit,
}

fn line(s: impl Into<String>) -> Reply {
    Reply::Line(s.into())
}

fn bad_format() -> Reply {
    line("BAD_FORMAT")
}

/// What an audit line says of a command that changes something (command,
/// topic, job id; "" where it names none); None for the others.
fn changes(cmd: &Cmd, used: &Topic) -> Option<(&'static str, String, String)> {
    let id = |i: &u64| i.to_string();
    Some(match cmd {
        Cmd::Put { .. } => ("put", used.to_string(), String::new()),
        Cmd::Delete(i) => ("delete", String::new(), id(i)),
        Cmd::Kick(n) => ("kick", used.to_string(), n.to_string()),
        Cmd::KickJob(i) => ("kick-job", String::new(), id(i)),
        Cmd::PauseTube(t, _) => ("pause-tube", t.to_string(), String::new()),
        _ => return None,
    })
}

/// Refuses `cmd` with `word`; a put's body is read and dropped first, so
/// the connection stays in step.
async fn refuse<R: tokio::io::AsyncRead + Unpin>(
    cmd: &Cmd,
    word: &str,
    reader: &mut BufReader<R>,
) -> Reply {
    if let Cmd::Put { bytes, .. } = cmd {
        let mut sink = tokio::io::sink();
        let _ = tokio::io::copy(&mut (&mut *reader).take(*bytes as u64 + 2), &mut sink).await;
    }
    line(word)
}

fn not_found() -> Reply {
    line("NOT_FOUND")
}

/// A store or service error as the reference would say it.
fn failed(e: &Error) -> Reply {
    match e {
        Error::Store(StoreError::NotFound | StoreError::LeaseMismatch)
        | Error::Store(StoreError::NotInState(_)) => not_found(),
        Error::Store(StoreError::Invalid(_)) => bad_format(),
        Error::ShuttingDown | Error::Draining => line("DRAINING"),
        other => {
            tracing::warn!(error = %other, "beanstalkd command failed");
            line("INTERNAL_ERROR")
        }
    }
}

/// Whether an error says this connection no longer holds the job.
fn lease_lost(e: &Error) -> bool {
    matches!(
        e,
        Error::Store(StoreError::NotFound | StoreError::LeaseMismatch | StoreError::NotInState(_))
    )
}

fn yaml(pairs: &[(&str, String)]) -> Vec<u8> {
    let mut out = String::from("---\n");
    for (k, v) in pairs {
        out.push_str(k);
        out.push_str(": ");
        out.push_str(v);
        out.push('\n');
    }
    out.into_bytes()
}

fn yaml_list(items: &[String]) -> Vec<u8> {
    let mut out = String::from("---\n");
    for i in items {
        out.push_str("- ");
        out.push_str(i);
        out.push('\n');
    }
    out.into_bytes()
}

fn ok_yaml(body: Vec<u8>) -> Reply {
    Reply::Data(format!("OK {}", body.len()), body)
}

fn body_bytes(b: &Body) -> Vec<u8> {
    match b {
        Body::Bytes(v) => v.clone(),
        Body::Json(s) => s.as_bytes().to_vec(),
    }
}

/// A tube name: beanstalkd's rules (its characters are all topic characters
/// too; only a leading `-` is beanstalkd's own rule).
fn tube(name: &str) -> Option<Topic> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-+/;.$_()".contains(c);
    if name.is_empty() || name.len() > 200 || name.starts_with('-') || !name.chars().all(allowed) {
        return None;
    }
    Topic::new(name).ok()
}

/// A command line, parsed (the body of a `put` follows it on the wire).
#[derive(Debug, Clone, PartialEq)]
pub enum Cmd {
    /// `put <pri> <delay> <ttr> <bytes>`
    Put {
        /// Priority (lower first).
        pri: u32,
        /// Seconds before it is ready.
        delay: u32,
        /// Seconds a reserve holds it.
        ttr: u32,
        /// Body length.
        bytes: usize,
    },
    /// `use <tube>`
    Use(Topic),
    /// `watch <tube>`
    Watch(Topic),
    /// `ignore <tube>`
    Ignore(Topic),
    /// `reserve` (None) or `reserve-with-timeout <seconds>`
    Reserve(Option<u64>),
    /// `reserve-job <id>`
    ReserveJob(u64),
    /// `delete <id>`
    Delete(u64),
    /// `release <id> <pri> <delay>`
    Release {
        /// The job.
        id: u64,
        /// Its new priority.
        pri: u32,
        /// Seconds before it is ready again.
        delay: u32,
    },
    /// `bury <id> <pri>`
    Bury {
        /// The job.
        id: u64,
        /// Its new priority.
        pri: u32,
    },
    /// `touch <id>`
    Touch(u64),
    /// `peek <id>`
    Peek(u64),
    /// `peek-ready` (Ready), `peek-delayed` (Scheduled), `peek-buried` (Dead)
    PeekState(JobState),
    /// `kick <bound>`
    Kick(u64),
    /// `kick-job <id>`
    KickJob(u64),
    /// `stats-job <id>`
    StatsJob(u64),
    /// `stats-tube <tube>`
    StatsTube(Topic),
    /// `stats`
    Stats,
    /// `pause-tube <tube> <delay>`
    PauseTube(Topic, u32),
    /// `list-tubes`
    ListTubes,
    /// `list-tube-used`
    ListTubeUsed,
    /// `list-tubes-watched`
    ListTubesWatched,
    /// `quit`
    Quit,
    /// `auth <key>` (dq's own): act as an API key from now on.
    Auth(String),
}

/// Parses a command line (without its `\r\n`). The error is the reply
/// word: `BAD_FORMAT` for a known command with wrong arguments, else
/// `UNKNOWN_COMMAND`. Never panics, whatever the bytes.
pub fn parse(text: &str) -> Result<Cmd, &'static str> {
    const BAD: &str = "BAD_FORMAT";
    let parts: Vec<&str> = text.split(' ').collect();
    let args = &parts[1..];
    let id = |i: usize| num::<u64>(args[i]).ok_or(BAD);
    let u32_at = |i: usize| num::<u32>(args[i]).ok_or(BAD);
    let tube_at = |i: usize| tube(args[i]).ok_or(BAD);
    Ok(match (parts[0], args.len()) {
        ("put", 4) => Cmd::Put {
            pri: u32_at(0)?,
            delay: u32_at(1)?,
            ttr: u32_at(2)?,
            bytes: num::<usize>(args[3]).ok_or(BAD)?,
        },
        ("use", 1) => Cmd::Use(tube_at(0)?),
        ("watch", 1) => Cmd::Watch(tube_at(0)?),
        ("ignore", 1) => Cmd::Ignore(tube_at(0)?),
        ("reserve", 0) => Cmd::Reserve(None),
        ("reserve-with-timeout", 1) => Cmd::Reserve(Some(id(0)?)),
        ("reserve-job", 1) => Cmd::ReserveJob(id(0)?),
        ("delete", 1) => Cmd::Delete(id(0)?),
        ("release", 3) => Cmd::Release {
            id: id(0)?,
            pri: u32_at(1)?,
            delay: u32_at(2)?,
        },
        ("bury", 2) => Cmd::Bury {
            id: id(0)?,
            pri: u32_at(1)?,
        },
        ("touch", 1) => Cmd::Touch(id(0)?),
        ("peek", 1) => Cmd::Peek(id(0)?),
        ("peek-ready", 0) => Cmd::PeekState(JobState::Ready),
        ("peek-delayed", 0) => Cmd::PeekState(JobState::Scheduled),
        ("peek-buried", 0) => Cmd::PeekState(JobState::Dead),
        ("kick", 1) => Cmd::Kick(id(0)?),
        ("kick-job", 1) => Cmd::KickJob(id(0)?),
        ("stats-job", 1) => Cmd::StatsJob(id(0)?),
        ("stats-tube", 1) => Cmd::StatsTube(tube_at(0)?),
        ("pause-tube", 2) => Cmd::PauseTube(tube_at(0)?, u32_at(1)?),
        ("stats", 0) => Cmd::Stats,
        ("list-tubes", 0) => Cmd::ListTubes,
        ("list-tube-used", 0) => Cmd::ListTubeUsed,
        ("list-tubes-watched", 0) => Cmd::ListTubesWatched,
        ("quit", 0) => Cmd::Quit,
        ("auth", 1) if !args[0].is_empty() => Cmd::Auth(args[0].to_string()),
        (
            "put"
            | "use"
            | "watch"
            | "ignore"
            | "reserve"
            | "reserve-with-timeout"
            | "delete"
            | "release"
            | "bury"
            | "touch"
            | "peek"
            | "peek-ready"
            | "peek-delayed"
            | "peek-buried"
            | "kick"
            | "kick-job"
            | "stats-job"
            | "stats-tube"
            | "stats"
            | "list-tubes"
            | "list-tube-used"
            | "list-tubes-watched"
            | "quit"
            | "pause-tube"
            | "reserve-job"
            | "auth",
            _,
        ) => return Err(BAD),
        _ => return Err("UNKNOWN_COMMAND"),
    })
}

fn num<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl Conn {
    async fn run<S>(mut self, stream: S, peer: SocketAddr, cancel: CancellationToken)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
    {
        let (read, mut write) = tokio::io::split(stream);
        let mut reader = BufReader::new(read);
        let mut buf = Vec::with_capacity(MAX_LINE);
        loop {
            buf.clear();
            let got = {
                let mut limited = (&mut reader).take(MAX_LINE as u64);
                tokio::select! {
                    r = limited.read_until(b'\n', &mut buf) => r,
                    _ = cancel.cancelled() => break,
                }
            };
            match got {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let reply = if !buf.ends_with(b"\n") {
                if buf.len() < MAX_LINE {
                    break; // closed in the middle of a line
                }
                // Longer than the limit: answered, and the rest of the line dropped.
                let mut rest = Vec::new();
                if reader.read_until(b'\n', &mut rest).await.is_err() {
                    break;
                }
                bad_format()
            } else if !buf.ends_with(b"\r\n") {
                bad_format()
            } else {
                let text = String::from_utf8_lossy(&buf[..buf.len() - 2]).into_owned();
                self.command(&text, &mut reader).await
            };
            let out = match reply {
                Reply::Quit => break,
                Reply::Line(l) => format!("{l}\r\n").into_bytes(),
                Reply::Data(l, body) => {
                    let mut v = format!("{l}\r\n").into_bytes();
                    v.extend_from_slice(&body);
                    v.extend_from_slice(b"\r\n");
                    v
                }
            };
            if write.write_all(&out).await.is_err() {
                break;
            }
        }
        // What this connection holds goes back at once.
        for (id, h) in self.held.drain() {
            if let Ok(jid) = JobId::new(id.to_string()) {
                let _ = self.svc.release(&h.topic, &jid, &h.token, 0).await;
            }
        }
        self.counters.connections.fetch_sub(1, Ordering::Relaxed);
        tracing::debug!(%peer, "beanstalkd connection closed");
    }

    async fn command<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        text: &str,
        reader: &mut BufReader<R>,
    ) -> Reply {
        let cmd = match parse(text) {
            Ok(c) => c,
            Err(word) => return line(word),
        };
        let access = match &cmd {
            Cmd::Auth(secret) => {
                return match self.svc.find_key(secret).await {
                    Some(_) => {
                        self.secret = Some(secret.clone());
                        line("OK")
                    }
                    None => {
                        tracing::warn!(peer = %self.peer, "beanstalkd auth refused: not a key");
                        line("UNAUTHORIZED")
                    }
                };
            }
            Cmd::Quit => Access::Open,
            _ => match self.access().await {
                Some(a) => a,
                None => return refuse(&cmd, "UNAUTHORIZED", reader).await,
            },
        };
        let needs: Option<(Action, &Topic)> = match &cmd {
            Cmd::Put { .. } => Some((Action::Enqueue, &self.used)),
            Cmd::PeekState(_) | Cmd::StatsTube(_) if !access.allows_any(Action::Read) => {
                return line("FORBIDDEN");
            }
            Cmd::PeekState(_) => Some((Action::Read, &self.used)),
            Cmd::StatsTube(t) => Some((Action::Read, t)),
            Cmd::Kick(_) => Some((Action::Manage, &self.used)),
            Cmd::PauseTube(t, _) => Some((Action::Manage, t)),
            // Counts summed over every tube: for a key that reads them all.
            Cmd::Stats if !access.allows_all(Action::Read) => return line("FORBIDDEN"),
            Cmd::Reserve(_) => self
                .watched
                .iter()
                .find(|t| !access.allows(Action::Consume, t.as_str()))
                .map(|t| (Action::Consume, t)),
            _ => None,
        };
        if let Some((a, t)) = needs
            && !access.allows(a, t.as_str())
        {
            return refuse(&cmd, "FORBIDDEN", reader).await;
        }
        if let (Access::Key(k), Some(what)) = (&access, changes(&cmd, &self.used)) {
            tracing::info!(target: "dq::audit", key = %k.name, peer = %self.peer, command = %what.0, topic = %what.1, id = %what.2, "beanstalkd change");
        }
        self.allowed = access;
        match cmd {
            Cmd::Put {
                pri,
                delay,
                ttr,
                bytes,
            } => self.put(pri, delay, ttr, bytes, reader).await,
            Cmd::Use(t) => {
                self.used = t;
                line(format!("USING {}", self.used))
            }
            Cmd::Watch(t) => {
                if !self.watched.contains(&t) {
                    self.watched.push(t);
                }
                line(format!("WATCHING {}", self.watched.len()))
            }
            Cmd::Ignore(t) => {
                if self.watched.len() == 1 && self.watched[0] == t {
                    line("NOT_IGNORED")
                } else {
                    self.watched.retain(|w| *w != t);
                    line(format!("WATCHING {}", self.watched.len()))
                }
            }
            Cmd::Reserve(timeout_s) => {
                self.reserve(timeout_s.map(|s| s.saturating_mul(1000)), reader)
                    .await
            }
            Cmd::ReserveJob(id) => self.reserve_job(id).await,
            Cmd::Delete(id) => self.delete(id).await,
            Cmd::Release { id, pri, delay } => self.release(id, pri, delay).await,
            Cmd::Bury { id, pri } => self.bury(id, pri).await,
            Cmd::Touch(id) => self.touch(id).await,
            Cmd::Peek(id) => self.peek(id).await,
            Cmd::PeekState(state) => self.peek_state(state).await,
            Cmd::Kick(n) => self.kick(n).await,
            Cmd::KickJob(id) => self.kick_job(id).await,
            Cmd::StatsJob(id) => self.stats_job(id).await,
            Cmd::StatsTube(t) => self.stats_tube(t).await,
            Cmd::Stats => self.stats().await,
            Cmd::PauseTube(t, delay) => self.pause_tube(t, delay).await,
            Cmd::ListTubes => match self.svc.topics().await {
                Ok(ts) => {
                    let mut names: Vec<String> = ts
                        .iter()
                        .filter(|t| self.allowed.allows(Action::Read, t.as_str()))
                        .map(ToString::to_string)
                        .collect();
                    if !names.iter().any(|n| n == "default") {
                        names.insert(0, "default".into());
                    }
                    ok_yaml(yaml_list(&names))
                }
                Err(e) => failed(&e),
            },
            Cmd::ListTubeUsed => line(format!("USING {}", self.used)),
            Cmd::ListTubesWatched => {
                let names: Vec<String> = self.watched.iter().map(ToString::to_string).collect();
                ok_yaml(yaml_list(&names))
            }
            Cmd::Quit => Reply::Quit,
            Cmd::Auth(_) => unreachable!("answered above"),
        }
    }

    async fn put<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        pri: u32,
        delay: u32,
        ttr: u32,
        bytes: usize,
        reader: &mut BufReader<R>,
    ) -> Reply {
        if bytes > self.config.max_job_size || self.svc.limits().check_body(bytes).is_err() {
            // The reference reads and drops the body it will not keep.
            let mut sink = tokio::io::sink();
            let _ = tokio::io::copy(&mut (&mut *reader).take(bytes as u64 + 2), &mut sink).await;
            return line("JOB_TOO_BIG");
        }
        let mut data = vec![0u8; bytes + 2];
        if reader.read_exact(&mut data).await.is_err() {
            // Closed before the whole body: nothing is stored.
            return Reply::Quit;
        }
        if !data.ends_with(b"\r\n") {
            return line("EXPECTED_CRLF");
        }
        data.truncate(bytes);
        // What dq cannot hold: a delay beyond its largest, a TTR beyond the
        // longest lease.
        let (delay_ms, ttr_ms) = (u64::from(delay) * 1000, u64::from(ttr.max(1)) * 1000);
        if self.svc.limits().check_delay(delay_ms).is_err()
            || dq_core::limits::check_lease(ttr_ms).is_err()
        {
            return bad_format();
        }
        let id = match self.svc.next_seq(SEQ).await {
            Ok(id) => id,
            Err(e) => return failed(&e),
        };
        let jid = JobId::new(id.to_string()).expect("a number is a valid id");
        let mut job = NewJob::new(jid, Body::Bytes(data), When::DelayMs(delay_ms));
        job.priority = pri;
        job.lease_ms = Some(ttr_ms);
        // beanstalkd jobs never run out of attempts; a passed TTR makes the
        // job ready again at once.
        job.max_attempts = Some(dq_core::limits::MAX_ATTEMPTS);
        job.retry = Some(RetryPolicy::FixedMs(0));
        match self.svc.enqueue(&self.used, job).await {
            Ok(_) => line(format!("INSERTED {id}")),
            Err(Error::Store(StoreError::Invalid(e))) if e.too_large => line("JOB_TOO_BIG"),
            Err(e) => failed(&e),
        }
    }

    async fn reserve<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        timeout_ms: Option<u64>,
        reader: &mut BufReader<R>,
    ) -> Reply {
        let start = Instant::now();
        let mut first = true;
        // Bytes of the next command arrived: the wait no longer watches the socket.
        let mut pipelined = false;
        loop {
            let waited = start.elapsed().as_millis() as u64;
            let wait = if first {
                0
            } else {
                match timeout_ms {
                    Some(t) => t.saturating_sub(waited).min(WAIT_SLICE_MS),
                    None => WAIT_SLICE_MS,
                }
            };
            // Across several watched tubes, the most urgent job ready now of
            // all of them (priority, then id), as the reference hands out;
            // a waiting call takes what becomes ready first.
            let urgent = if wait == 0 {
                self.most_urgent_tube().await
            } else {
                None
            };
            let tubes = urgent.map_or_else(|| self.watched.clone(), |t| vec![t]);
            let call = self.svc.reserve(&tubes, 1, None, wait);
            // A client that closes while waiting ends the wait.
            let got = tokio::select! {
                r = call => r,
                r = reader.fill_buf(), if wait > 0 && !pipelined => match r {
                    Ok([]) | Err(_) => return Reply::Quit,
                    Ok(_) => {
                        pipelined = true;
                        continue;
                    }
                },
            };
            match got {
                Ok(mut leases) if !leases.is_empty() => {
                    let l = leases.remove(0);
                    let Ok(id) = l.id.as_str().parse::<u64>() else {
                        // A job put through the HTTP API with an id that is
                        // not a number cannot be named in this protocol:
                        // give it back for HTTP consumers, look again later.
                        tracing::warn!(topic = %l.topic, id = %l.id, "beanstalkd reserve skipped a job whose id is not a number (put it with a numeric id, or consume it over HTTP)");
                        let _ = self.svc.release(&l.topic, &l.id, &l.token, 0).await;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        first = false;
                        continue;
                    };
                    return self.hold(id, l);
                }
                Ok(_) => {}
                Err(e) => return failed(&e),
            }
            if first {
                first = false;
                let now = self.svc.clock().now_ms();
                // The deadline is the store's time, `now` this instance's
                // (kept to the store's within a few ms): the slack keeps a
                // TTR of exactly 1 s wholly in its last second.
                if self.held.values().any(|h| {
                    h.deadline_ms > now && h.deadline_ms - now <= 1000 + DEADLINE_SOON_SLACK_MS
                }) {
                    return line("DEADLINE_SOON");
                }
            }
            if let Some(t) = timeout_ms
                && start.elapsed().as_millis() as u64 >= t
            {
                return line("TIMED_OUT");
            }
        }
    }

    /// With several watched tubes: the one whose next ready job comes first
    /// by (priority, id).
    async fn most_urgent_tube(&self) -> Option<Topic> {
        if self.watched.len() < 2 {
            return None;
        }
        let mut best: Option<((u32, u64), Topic)> = None;
        for t in &self.watched {
            let Ok(head) = self.svc.list_ready(t, 1).await else {
                continue;
            };
            if let Some(j) = head.first() {
                let key = (j.priority, j.id.as_str().parse::<u64>().unwrap_or(u64::MAX));
                if best.as_ref().is_none_or(|(k, _)| key < *k) {
                    best = Some((key, t.clone()));
                }
            }
        }
        best.map(|(_, t)| t)
    }

    /// Finds a job by number: the connection's own first, else every topic.
    /// Who this connection acts as now: its key, looked up again for every
    /// command (so a revoked key stops at once); open while auth is not
    /// enforced; None when a key is needed and there is none that works.
    async fn access(&self) -> Option<Access> {
        let loaded = self.svc.keys_loaded().await;
        let ring = self.svc.key_ring();
        match &self.secret {
            Some(secret) => ring.find(secret).map(Access::Key),
            // Keys not read yet (the store does not answer): as if some existed.
            None if self.config.auth_required || !loaded || ring.any() => None,
            None => Some(Access::Open),
        }
    }

    /// The job numbered `id`, looked for among the topics this
    /// connection's key allows `action` on (a job elsewhere is not found).
    async fn find(&self, id: u64, action: Action) -> Option<(Topic, JobInfo)> {
        let jid = JobId::new(id.to_string()).ok()?;
        if let Some(h) = self.held.get(&id)
            && let Ok(v) = self.svc.get(&h.topic, &jid).await
        {
            return Some((h.topic.clone(), v.job));
        }
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

    /// Keeps a lease this connection was handed; answers `RESERVED`.
    fn hold(&mut self, id: u64, l: dq_core::Lease) -> Reply {
        let body = body_bytes(&l.body);
        self.held.insert(
            id,
            Held {
                topic: l.topic,
                token: l.token,
                deadline_ms: l.lease_deadline_ms,
            },
        );
        Reply::Data(format!("RESERVED {id} {}", body.len()), body)
    }

    /// Reserves one job by id, unless another client holds it.
    async fn reserve_job(&mut self, id: u64) -> Reply {
        let Some((t, job)) = self.find(id, Action::Consume).await else {
            return not_found();
        };
        if job.state == JobState::Reserved {
            return not_found();
        }
        match self.svc.reserve_job(&t, &job.id).await {
            Ok(Some(l)) => self.hold(id, l),
            Ok(None) => not_found(),
            Err(e) => failed(&e),
        }
    }

    /// Runs `verb` on a job this connection holds: the job is forgotten
    /// when the verb succeeds or the lease is gone, kept when the store
    /// failed (the holder may try again).
    async fn on_held<F, Fut>(&mut self, id: u64, verb: F) -> Reply
    where
        F: FnOnce(Arc<Service>, Topic, JobId, String) -> Fut,
        Fut: std::future::Future<Output = Result<&'static str, Error>>,
    {
        let Some(h) = self.held.get(&id) else {
            return not_found();
        };
        let jid = JobId::new(id.to_string()).expect("a number is a valid id");
        let r = verb(self.svc.clone(), h.topic.clone(), jid, h.token.clone()).await;
        match r {
            Ok(word) => {
                self.held.remove(&id);
                line(word)
            }
            Err(e) => {
                if lease_lost(&e) {
                    self.held.remove(&id);
                }
                failed(&e)
            }
        }
    }

    async fn delete(&mut self, id: u64) -> Reply {
        let jid = JobId::new(id.to_string()).expect("a number is a valid id");
        if self.held.contains_key(&id) {
            return self
                .on_held(id, |svc, t, jid, token| async move {
                    svc.ack(&t, &jid, &token).await.map(|()| "DELETED")
                })
                .await;
        }
        let Some((t, job)) = self.find(id, Action::Manage).await else {
            return not_found();
        };
        if job.state == JobState::Reserved {
            // Held by another client.
            return not_found();
        }
        match self.svc.cancel(&t, &jid).await {
            Ok(_) => line("DELETED"),
            Err(e) => failed(&e),
        }
    }

    /// Gives a held job back with priority `pri`, due after the delay.
    /// Counted as an attempt (a dq nack), because beanstalkd's `reserves`
    /// counts every reserve and clients read their attempts from it
    /// (Laravel's `$tries` does).
    async fn release(&mut self, id: u64, pri: u32, delay_s: u32) -> Reply {
        let delay_ms = u64::from(delay_s) * 1000;
        self.on_held(id, |svc, t, jid, token| async move {
            let nack = Nack::retry(&token, "released")
                .retry_in(delay_ms)
                .with_priority(pri);
            svc.nack(&t, &jid, nack).await.map(|out| match out {
                dq_core::NackOutcome::Dead { .. } => "BURIED",
                dq_core::NackOutcome::Retry { .. } => "RELEASED",
            })
        })
        .await
    }

    /// Buries a held job with priority `pri` (it keeps it when kicked).
    async fn bury(&mut self, id: u64, pri: u32) -> Reply {
        self.on_held(id, |svc, t, jid, token| async move {
            svc.nack(&t, &jid, Nack::dead(&token, "buried").with_priority(pri))
                .await
                .map(|_| "BURIED")
        })
        .await
    }

    async fn touch(&mut self, id: u64) -> Reply {
        let Some(h) = self.held.get_mut(&id) else {
            return not_found();
        };
        let jid = JobId::new(id.to_string()).expect("a number is a valid id");
        match self.svc.touch(&h.topic, &jid, &h.token, None).await {
            Ok(deadline) => {
                h.deadline_ms = deadline;
                line("TOUCHED")
            }
            Err(e) => {
                if lease_lost(&e) {
                    self.held.remove(&id);
                }
                failed(&e)
            }
        }
    }

    async fn peek(&mut self, id: u64) -> Reply {
        match self.find(id, Action::Read).await {
            Some((_, job)) => {
                let body = body_bytes(&job.body);
                Reply::Data(format!("FOUND {id} {}", body.len()), body)
            }
            None => not_found(),
        }
    }

    /// The used tube's next ready, next delayed or oldest buried job.
    async fn peek_state(&mut self, state: JobState) -> Reply {
        let found = match state {
            JobState::Dead => self
                .svc
                .list_dead(&self.used, 0, 1)
                .await
                .map(|v| v.into_iter().map(|j| j.job).next()),
            JobState::Ready => self
                .svc
                .list_ready(&self.used, 1)
                .await
                .map(|v| v.into_iter().next()),
            _ => self
                .svc
                .list_scheduled(&self.used, 1)
                .await
                .map(|v| v.into_iter().next()),
        };
        match found {
            Ok(Some(job)) => {
                let body = body_bytes(&job.body);
                Reply::Data(format!("FOUND {} {}", job.id, body.len()), body)
            }
            Ok(None) | Err(Error::TopicNotFound(_)) => not_found(),
            Err(e) => failed(&e),
        }
    }

    /// Buried jobs first (up to `n`), else delayed ones.
    async fn kick(&mut self, n: u64) -> Reply {
        let n = n.min(1000) as usize;
        if n == 0 {
            return line("KICKED 0");
        }
        let dead = match self.svc.list_dead(&self.used, 0, n).await {
            Ok(d) => d,
            Err(Error::TopicNotFound(_)) => return line("KICKED 0"),
            Err(e) => return failed(&e),
        };
        if !dead.is_empty() {
            let ids: Vec<JobId> = dead.into_iter().map(|v| v.job.id).collect();
            return match self.svc.replay_dead(&self.used, Some(&ids)).await {
                Ok(k) => line(format!("KICKED {k}")),
                Err(e) => failed(&e),
            };
        }
        let delayed = match self.svc.list_scheduled(&self.used, n).await {
            Ok(d) => d,
            Err(e) => return failed(&e),
        };
        let now = self.svc.clock().now_ms();
        let mut kicked = 0;
        for j in delayed {
            if self.svc.reschedule(&self.used, &j.id, now).await.is_ok() {
                kicked += 1;
            }
        }
        line(format!("KICKED {kicked}"))
    }

    async fn kick_job(&mut self, id: u64) -> Reply {
        let Some((t, job)) = self.find(id, Action::Manage).await else {
            return not_found();
        };
        let r = match job.state {
            JobState::Dead => self.svc.replay_dead(&t, Some(&[job.id])).await.map(|_| ()),
            JobState::Scheduled => {
                let now = self.svc.clock().now_ms();
                self.svc.reschedule(&t, &job.id, now).await
            }
            _ => return not_found(),
        };
        match r {
            Ok(()) => line("KICKED"),
            Err(e) => failed(&e),
        }
    }

    async fn stats_job(&mut self, id: u64) -> Reply {
        let Some((t, job)) = self.find(id, Action::Read).await else {
            return not_found();
        };
        let now = self.svc.clock().now_ms();
        let state = match job.state {
            JobState::Scheduled => "delayed",
            JobState::Ready => "ready",
            JobState::Reserved => "reserved",
            JobState::Dead => "buried",
        };
        let ttr_s = job.lease_ms / 1000;
        let time_left = match job.state {
            JobState::Scheduled => job.due_at_ms.saturating_sub(now) / 1000,
            JobState::Reserved => job.lease_deadline_ms.unwrap_or(now).saturating_sub(now) / 1000,
            _ => 0,
        };
        let delay = job.due_at_ms.saturating_sub(job.created_at_ms) / 1000;
        ok_yaml(yaml(&[
            ("id", id.to_string()),
            ("tube", t.to_string()),
            ("state", state.into()),
            ("pri", job.priority.to_string()),
            (
                "age",
                (now.saturating_sub(job.created_at_ms) / 1000).to_string(),
            ),
            ("delay", delay.to_string()),
            ("ttr", ttr_s.to_string()),
            ("time-left", time_left.to_string()),
            ("file", "0".into()),
            ("reserves", job.attempts.to_string()),
            ("timeouts", job.counts.timeouts.to_string()),
            ("releases", job.counts.releases.to_string()),
            ("buries", job.counts.buries.to_string()),
            ("kicks", job.counts.kicks.to_string()),
        ]))
    }

    /// Ready jobs of `t` with a priority below 1024 (beanstalkd's urgent),
    /// counted over the first [`URGENT_SCAN`] in hand-out order (which is
    /// priority first, so the urgent ones come first).
    async fn urgent(&self, t: &Topic, ready: u64) -> Result<u64, Error> {
        if ready == 0 {
            return Ok(0);
        }
        let head = self.svc.list_ready(t, URGENT_SCAN).await?;
        Ok(head
            .iter()
            .take_while(|j| j.priority < URGENT_BELOW)
            .count() as u64)
    }

    async fn pause_tube(&mut self, t: Topic, delay_s: u32) -> Reply {
        match self.svc.topics().await {
            Ok(ts) if ts.contains(&t) => {}
            Ok(_) => return not_found(),
            Err(e) => return failed(&e),
        }
        match self.svc.pause_topic(&t, u64::from(delay_s) * 1000).await {
            Ok(()) => line("PAUSED"),
            Err(e) => failed(&e),
        }
    }

    async fn stats_tube(&mut self, t: Topic) -> Reply {
        let known = match self.svc.topics().await {
            Ok(ts) => ts.contains(&t),
            Err(e) => return failed(&e),
        };
        if !known && t.as_str() != "default" {
            return not_found();
        }
        let s = match self.svc.stats(&t).await {
            Ok(s) => s,
            Err(e) => return failed(&e),
        };
        let total = s.scheduled + s.ready + s.reserved + s.dead;
        let now = self.svc.clock().now_ms();
        let urgent = match self.urgent(&t, s.ready).await {
            Ok(n) => n,
            Err(e) => return failed(&e),
        };
        ok_yaml(yaml(&[
            ("name", t.to_string()),
            ("current-jobs-urgent", urgent.to_string()),
            ("current-jobs-ready", s.ready.to_string()),
            ("current-jobs-reserved", s.reserved.to_string()),
            ("current-jobs-delayed", s.scheduled.to_string()),
            ("current-jobs-buried", s.dead.to_string()),
            ("total-jobs", s.counters.enqueued.max(total).to_string()),
            ("current-using", u64::from(self.used == t).to_string()),
            (
                "current-watching",
                u64::from(self.watched.contains(&t)).to_string(),
            ),
            ("current-waiting", "0".into()),
            (
                "cmd-delete",
                (s.counters.acked + s.counters.cancelled).to_string(),
            ),
            ("cmd-pause-tube", "0".into()),
            // The seconds still paused, rounded up (the delay asked is not kept).
            (
                "pause",
                s.paused_until_ms
                    .saturating_sub(now)
                    .div_ceil(1000)
                    .to_string(),
            ),
            (
                "pause-time-left",
                (s.paused_until_ms.saturating_sub(now) / 1000).to_string(),
            ),
        ]))
    }

    async fn stats(&mut self) -> Reply {
        let all = match self.svc.topics_with_stats().await {
            Ok(a) => a,
            Err(e) => return failed(&e),
        };
        let sum = |f: fn(&dq_core::TopicStats) -> u64| all.iter().map(|(_, s)| f(s)).sum::<u64>();
        let mut urgent = 0;
        for (t, s) in &all {
            match self.urgent(t, s.ready).await {
                Ok(n) => urgent += n,
                Err(e) => return failed(&e),
            }
        }
        ok_yaml(yaml(&[
            ("current-jobs-urgent", urgent.to_string()),
            ("current-jobs-ready", sum(|s| s.ready).to_string()),
            ("current-jobs-reserved", sum(|s| s.reserved).to_string()),
            ("current-jobs-delayed", sum(|s| s.scheduled).to_string()),
            ("current-jobs-buried", sum(|s| s.dead).to_string()),
            ("total-jobs", sum(|s| s.counters.enqueued).to_string()),
            ("current-tubes", all.len().max(1).to_string()),
            (
                "current-connections",
                self.counters
                    .connections
                    .load(Ordering::Relaxed)
                    .to_string(),
            ),
            (
                "total-connections",
                self.counters
                    .total_connections
                    .load(Ordering::Relaxed)
                    .to_string(),
            ),
            ("pid", std::process::id().to_string()),
            ("version", format!("\"dq {}\"", env!("CARGO_PKG_VERSION"))),
            ("uptime", self.started.elapsed().as_secs().to_string()),
            ("max-job-size", self.config.max_job_size.to_string()),
            ("draining", self.svc.is_draining().to_string()),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_as_the_reference_reads_them() {
        assert_eq!(
            parse("put 1 2 3 4"),
            Ok(Cmd::Put {
                pri: 1,
                delay: 2,
                ttr: 3,
                bytes: 4
            })
        );
        assert_eq!(
            parse("put 4294967295 0 0 0").map(|_| ()),
            Ok(()),
            "u32 priority"
        );
        assert_eq!(parse("put 4294967296 0 0 0"), Err("BAD_FORMAT"));
        assert_eq!(parse("put -1 0 0 0"), Err("BAD_FORMAT"));
        assert_eq!(parse("put 1 2 3"), Err("BAD_FORMAT"));
        assert_eq!(
            parse("put  1 2 3 4"),
            Err("BAD_FORMAT"),
            "arguments are separated by one space"
        );
        assert_eq!(
            parse("delete 18446744073709551615"),
            Ok(Cmd::Delete(u64::MAX))
        );
        assert_eq!(parse("delete 18446744073709551616"), Err("BAD_FORMAT"));
        assert_eq!(
            parse("use a(b)"),
            Ok(Cmd::Use(Topic::new("a(b)").unwrap())),
            "every tube character"
        );
        assert_eq!(parse("use a{b}"), Err("BAD_FORMAT"), "not a tube character");
        assert_eq!(parse("use -a"), Err("BAD_FORMAT"));
        assert_eq!(parse("peek-ready"), Ok(Cmd::PeekState(JobState::Ready)));
        assert_eq!(parse("PUT 1 2 3 4"), Err("UNKNOWN_COMMAND"), "case matters");
        assert_eq!(parse(""), Err("UNKNOWN_COMMAND"));
        assert_eq!(parse("quit now"), Err("BAD_FORMAT"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        /// Whatever the line — any text, or command words with hostile
        /// arguments — the parser answers a command or a reply word, never
        /// panics.
        #[test]
        fn parse_never_panics(line in "\\PC{0,60}") {
            let _ = parse(&line);
        }

        #[test]
        fn parse_never_panics_on_near_commands(
            word in "(put|use|watch|ignore|reserve|reserve-with-timeout|reserve-job|delete|release|bury|touch|peek|peek-ready|peek-delayed|peek-buried|kick|kick-job|stats-job|stats-tube|stats|pause-tube|list-tubes|list-tube-used|list-tubes-watched|quit|)",
            args in proptest::collection::vec("(-?[0-9]{0,25}|[A-Za-z0-9+/;.$_()-]{0,210}| |\\PC{0,5})", 0..6),
        ) {
            let line = std::iter::once(word).chain(args).collect::<Vec<_>>().join(" ");
            match parse(&line) {
                Ok(_) | Err("BAD_FORMAT") | Err("UNKNOWN_COMMAND") => {}
                Err(other) => proptest::prop_assert!(false, "{line:?}: {other}"),
            }
        }

        /// A well-formed put reads back its numbers.
        #[test]
        fn put_reads_its_numbers(pri: u32, delay: u32, ttr: u32, bytes in 0usize..1_000_000) {
            let got = parse(&format!("put {pri} {delay} {ttr} {bytes}"));
            proptest::prop_assert_eq!(got, Ok(Cmd::Put { pri, delay, ttr, bytes }));
        }
    }
}
