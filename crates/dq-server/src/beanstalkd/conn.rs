//! One connection's life: read a command line, check who may run it,
//! dispatch it to its handler (`jobs`, `stats`, or here for the tube
//! commands that only change this connection), write the answer; at the
//! end, give back at once what the connection holds.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use dq_core::Topic;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

use super::parse::{Cmd, parse};
use super::reply::{Reply, bad_format, line, ok_yaml, yaml_list};
use super::{Conn, MAX_LINE};
use crate::auth::Access;
use crate::keys::Action;

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

/// What reading a command line gave.
enum Line {
    /// A line and its `\r\n`, in the buffer.
    Whole,
    /// MAX_LINE bytes without a `\r\n`.
    TooLong,
    /// The connection closed (or the listener stops).
    Closed,
}

/// Reads and drops bytes up to and including the next `\r\n`.
async fn skip_line<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
) -> std::io::Result<()> {
    let mut last = 0u8;
    loop {
        let mut chunk = Vec::new();
        if reader.read_until(b'\n', &mut chunk).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let crlf = chunk.ends_with(b"\r\n") || (chunk == b"\n" && last == b'\r');
        if crlf {
            return Ok(());
        }
        last = *chunk.last().expect("a byte was read");
    }
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

impl Conn {
    pub(super) async fn run<S>(mut self, stream: S, peer: SocketAddr, cancel: CancellationToken)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
    {
        self.shared.tube(&self.used, |u| u.using += 1);
        for t in &self.watched {
            self.shared.tube(t, |u| u.watching += 1);
        }
        let (read, mut write) = tokio::io::split(stream);
        let mut reader = BufReader::new(read);
        let mut buf = Vec::with_capacity(MAX_LINE);
        loop {
            buf.clear();
            // A line ends at `\r\n` only (a bare `\n` is part of it), as
            // in the reference; at most MAX_LINE bytes with its `\r\n`.
            let line = loop {
                let got = {
                    let mut limited = (&mut reader).take((MAX_LINE - buf.len()) as u64);
                    tokio::select! {
                        r = limited.read_until(b'\n', &mut buf) => r,
                        _ = cancel.cancelled() => break Line::Closed,
                    }
                };
                match got {
                    Ok(0) | Err(_) => break Line::Closed,
                    Ok(_) if buf.ends_with(b"\r\n") => break Line::Whole,
                    Ok(_) if buf.len() >= MAX_LINE => break Line::TooLong,
                    Ok(_) if buf.ends_with(b"\n") => continue,
                    Ok(_) => break Line::Closed, // closed in the middle of a line
                }
            };
            let reply = match line {
                Line::Closed => break,
                Line::TooLong => {
                    // Answered once its end comes; the rest of it dropped.
                    if skip_line(&mut reader).await.is_err() {
                        break;
                    }
                    bad_format()
                }
                Line::Whole => {
                    let text = String::from_utf8_lossy(&buf[..buf.len() - 2]).into_owned();
                    self.command(&text, &mut reader).await
                }
            };
            let Some(out) = reply.into_bytes() else {
                break;
            };
            if write.write_all(&out).await.is_err() {
                break;
            }
        }
        // What this connection holds goes back at once.
        for (_, h) in self.held.drain() {
            let _ = self
                .svc
                .release(&h.topic, &h.id, &h.token, 0, dq_core::GiveBack::Dropped)
                .await;
        }
        self.shared
            .tube(&self.used, |u| u.using = u.using.saturating_sub(1));
        for t in &self.watched {
            self.shared
                .tube(t, |u| u.watching = u.watching.saturating_sub(1));
        }
        if self.producer {
            self.shared.producers.fetch_sub(1, Ordering::Relaxed);
        }
        if self.worker {
            self.shared.workers.fetch_sub(1, Ordering::Relaxed);
        }
        self.shared.connections.fetch_sub(1, Ordering::Relaxed);
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
        self.shared.count(&cmd);
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
            Cmd::Reserve(_) | Cmd::ReserveWithTimeout(_) => self
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
                trailing,
            } => self.put(pri, delay, ttr, bytes, trailing, reader).await,
            Cmd::Use(t) => {
                self.shared.tube(&t, |u| u.using += 1);
                self.shared
                    .tube(&self.used, |u| u.using = u.using.saturating_sub(1));
                self.used = t;
                line(format!("USING {}", self.used))
            }
            Cmd::Watch(t) => {
                if !self.watched.contains(&t) {
                    self.shared.tube(&t, |u| u.watching += 1);
                    self.watched.push(t);
                }
                line(format!("WATCHING {}", self.watched.len()))
            }
            Cmd::Ignore(t) => {
                if self.watched.len() == 1 && self.watched[0] == t {
                    line("NOT_IGNORED")
                } else {
                    if self.watched.contains(&t) {
                        self.shared
                            .tube(&t, |u| u.watching = u.watching.saturating_sub(1));
                    }
                    self.watched.retain(|w| *w != t);
                    line(format!("WATCHING {}", self.watched.len()))
                }
            }
            Cmd::Reserve(timeout_s) | Cmd::ReserveWithTimeout(timeout_s) => {
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
            Cmd::ListTubes => self.list_tubes().await,
            Cmd::ListTubeUsed => line(format!("USING {}", self.used)),
            Cmd::ListTubesWatched => {
                let names: Vec<String> = self.watched.iter().map(ToString::to_string).collect();
                ok_yaml(yaml_list(&names))
            }
            Cmd::Quit => Reply::Quit,
            Cmd::Auth(_) => unreachable!("answered above"),
        }
    }

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
}
