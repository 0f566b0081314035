//! The job commands, over the [`Service`]: put, reserve,
//! reserve-with-timeout, reserve-job, delete, release, bury, touch, peek,
//! peek-ready, peek-delayed, peek-buried, kick, kick-job.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use dq_core::{Body, JobId, JobState, Nack, NewJob, RetryPolicy, StoreError, Topic, When};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use super::reply::{Reply, bad_format, body_bytes, failed, line, not_found};
use super::shared::Waiting;
use super::{Conn, Held};
use crate::keys::Action;
use crate::service::{Error, Service};

/// The store counter that numbers beanstalkd jobs.
const SEQ: &str = "beanstalkd";
/// Longest wait of one store reserve call inside `reserve`.
const WAIT_SLICE_MS: u64 = 10_000;
/// How often a reserve waiting while this instance drains looks again.
const DRAIN_POLL_MS: u64 = 100;
/// How far the store's clock and this instance's may disagree when telling
/// the last second of a TTR (`DEADLINE_SOON`).
const DEADLINE_SOON_SLACK_MS: u64 = 50;

/// Whether an error says this connection no longer holds the job.
fn lease_lost(e: &Error) -> bool {
    matches!(
        e,
        Error::Store(StoreError::NotFound | StoreError::LeaseMismatch | StoreError::NotInState(_))
    )
}

impl Conn {
    pub(super) async fn put<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        pri: u32,
        delay: u32,
        ttr: u32,
        bytes: usize,
        trailing: bool,
        reader: &mut BufReader<R>,
    ) -> Reply {
        if bytes > self.config.max_job_size || self.svc.limits().check_body(bytes).is_err() {
            // The reference reads and drops the body it will not keep.
            let mut sink = tokio::io::sink();
            let _ = tokio::io::copy(&mut (&mut *reader).take(bytes as u64 + 2), &mut sink).await;
            return line("JOB_TOO_BIG");
        }
        if trailing {
            // Refused before the body is read: as in the reference, the
            // body that follows is read as a command line.
            return bad_format();
        }
        if !self.producer {
            self.producer = true;
            self.shared.producers.fetch_add(1, Ordering::Relaxed);
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
        if self.svc.is_draining() {
            // Drain mode (SIGUSR1), as the reference: no new job.
            return line("DRAINING");
        }
        let (delay_ms, ttr_ms) = (u64::from(delay) * 1000, u64::from(ttr.max(1)) * 1000);
        let mut job = NewJob::with_generated_id(Body::Bytes(data), When::DelayMs(delay_ms));
        job.priority = pri;
        job.lease_ms = Some(ttr_ms);
        // Handed out by (priority, id) as in the reference, and keeping
        // its delay for `stats-job`.
        job.put_order = true;
        // beanstalkd jobs never run out of attempts; a passed TTR makes the
        // job ready again at once.
        job.max_attempts = Some(dq_core::limits::MAX_ATTEMPTS);
        job.retry = Some(RetryPolicy::FixedMs(0));
        // What dq cannot hold (the body's size is answered above): a delay
        // beyond its largest, a TTR beyond the longest lease. Checked before
        // the job takes a number.
        if job
            .check(self.svc.limits(), self.svc.clock().now_ms())
            .is_err()
        {
            return bad_format();
        }
        let id = match self.svc.next_seq(SEQ).await {
            Ok(id) => id,
            Err(e) => return failed(&e),
        };
        job.id = Some(JobId::new(id.to_string()).expect("a number is a valid id"));
        match self.svc.enqueue(&self.used, job).await {
            Ok(_) => line(format!("INSERTED {id}")),
            Err(Error::Store(StoreError::Invalid(e))) if e.too_large => line("JOB_TOO_BIG"),
            Err(e) => failed(&e),
        }
    }

    pub(super) async fn reserve<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        timeout_ms: Option<u64>,
        reader: &mut BufReader<R>,
    ) -> Reply {
        self.become_worker();
        let start = Instant::now();
        let mut first = true;
        // Bytes of the next command arrived: the wait no longer watches the socket.
        let mut pipelined = false;
        let shared = self.shared.clone();
        // Counted in `current-waiting` until it answers, as the reference
        // counts a reserve from its start.
        let _waiting = Waiting::start(&shared, &self.watched);
        loop {
            let waited = start.elapsed().as_millis() as u64;
            let mut wait = if first {
                0
            } else {
                match timeout_ms {
                    Some(t) => t.saturating_sub(waited).min(WAIT_SLICE_MS),
                    None => WAIT_SLICE_MS,
                }
            };
            if !first {
                // A held job entering its last second ends the wait with
                // DEADLINE_SOON, as in the reference.
                match self.deadline_soon_in(0) {
                    Some(0) => return line("DEADLINE_SOON"),
                    Some(ms) => wait = wait.min(ms),
                    None => {}
                }
            }
            // Across several watched tubes, the most urgent job ready now of
            // all of them (priority, then id), as the reference hands out;
            // a waiting call takes what becomes ready first.
            let urgent = if wait == 0 {
                self.most_urgent_tube().await
            } else {
                None
            };
            let tubes = urgent.map_or_else(|| self.watched.clone(), |t| vec![t]);
            let svc = self.svc.clone();
            let call = async move {
                if svc.is_draining() && !svc.shutdown().is_cancelled() {
                    // Drain mode: workers go on taking jobs, as from the
                    // reference. The service's waits end at a drain, so
                    // this one looks again every DRAIN_POLL_MS.
                    let got = svc.reserve_in_drain(&tubes, 1).await;
                    if matches!(&got, Ok(l) if l.is_empty()) && wait > 0 {
                        let ms = wait.min(DRAIN_POLL_MS);
                        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    }
                    return got;
                }
                svc.reserve(&tubes, 1, None, wait).await
            };
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
                    return self.hold(l);
                }
                Ok(_) => {}
                Err(e) => return failed(&e),
            }
            if first {
                first = false;
                if self.deadline_soon_in(DEADLINE_SOON_SLACK_MS) == Some(0) {
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

    /// Milliseconds until a job this connection holds enters the last
    /// second of its TTR (0: one is in it now); None when it holds none
    /// still running. The deadline is the store's time, `now` this
    /// instance's (kept to the store's within a few ms): a `slack` keeps a
    /// TTR of exactly 1 s wholly in its last second when a reserve starts;
    /// a waiting reserve wakes when the last second begins by this clock.
    fn deadline_soon_in(&self, slack: u64) -> Option<u64> {
        let now = self.svc.clock().now_ms();
        self.held
            .values()
            .filter(|h| h.deadline_ms > now)
            .map(|h| h.deadline_ms.saturating_sub(now + 1000 + slack))
            .min()
    }

    /// Counts this connection among the workers (once).
    fn become_worker(&mut self) {
        if !self.worker {
            self.worker = true;
            self.shared.workers.fetch_add(1, Ordering::Relaxed);
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
            let Ok(head) = self.svc.list_ready(t, 0, 1).await else {
                continue;
            };
            if let Some(j) = head.first() {
                let key = (j.priority, self.number(t, &j.id));
                if best.as_ref().is_none_or(|(k, _)| key < *k) {
                    best = Some((key, t.clone()));
                }
            }
        }
        best.map(|(_, t)| t)
    }

    /// Keeps a lease this connection was handed; answers `RESERVED`.
    fn hold(&mut self, l: dq_core::Lease) -> Reply {
        let body = body_bytes(&l.body);
        let id = self.number(&l.topic, &l.id);
        self.held.insert(
            id,
            Held {
                id: l.id,
                topic: l.topic,
                token: l.token,
                deadline_ms: l.lease_deadline_ms,
            },
        );
        Reply::Data(format!("RESERVED {id} {}", body.len()), body)
    }

    /// Reserves one job by id, unless another client holds it.
    pub(super) async fn reserve_job(&mut self, id: u64) -> Reply {
        let Some((t, job)) = self.find(id, Action::Consume).await else {
            return not_found();
        };
        if job.state == JobState::Reserved {
            return not_found();
        }
        self.become_worker();
        match self.svc.reserve_job_in_drain(&t, &job.id).await {
            Ok(Some(l)) => self.hold(l),
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
        let r = verb(
            self.svc.clone(),
            h.topic.clone(),
            h.id.clone(),
            h.token.clone(),
        )
        .await;
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

    pub(super) async fn delete(&mut self, id: u64) -> Reply {
        if self.held.contains_key(&id) {
            let r = self
                .on_held(id, |svc, t, jid, token| async move {
                    svc.ack(&t, &jid, &token).await.map(|()| "DELETED")
                })
                .await;
            if !self.held.contains_key(&id) {
                self.shared.aliases.forget(id);
            }
            return r;
        }
        let Some((t, job)) = self.find(id, Action::Manage).await else {
            return not_found();
        };
        if job.state == JobState::Reserved {
            // Held by another client.
            return not_found();
        }
        match self.svc.cancel(&t, &job.id).await {
            Ok(_) => {
                self.shared.aliases.forget(id);
                line("DELETED")
            }
            Err(e) => failed(&e),
        }
    }

    /// Gives a held job back with priority `pri`, due after the delay: a
    /// dq nack, so the attempt stays counted toward dq's bound (the 1,000th
    /// release buries it); `releases` counts it and the job keeps the
    /// delay. `reserves` (`stats-job`) is the store's count of hand-outs,
    /// which clients read their attempts from (Laravel's `$tries` does).
    pub(super) async fn release(&mut self, id: u64, pri: u32, delay_s: u32) -> Reply {
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
    pub(super) async fn bury(&mut self, id: u64, pri: u32) -> Reply {
        self.on_held(id, |svc, t, jid, token| async move {
            svc.nack(&t, &jid, Nack::dead(&token, "buried").with_priority(pri))
                .await
                .map(|_| "BURIED")
        })
        .await
    }

    pub(super) async fn touch(&mut self, id: u64) -> Reply {
        let Some(h) = self.held.get_mut(&id) else {
            return not_found();
        };
        match self.svc.touch(&h.topic, &h.id, &h.token, None).await {
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

    pub(super) async fn peek(&mut self, id: u64) -> Reply {
        match self.find(id, Action::Read).await {
            Some((_, job)) => {
                let body = body_bytes(&job.body);
                Reply::Data(format!("FOUND {id} {}", body.len()), body)
            }
            None => not_found(),
        }
    }

    /// The used tube's next ready, next delayed or oldest buried job.
    pub(super) async fn peek_state(&mut self, state: JobState) -> Reply {
        let found = match state {
            JobState::Dead => self
                .svc
                .list_dead(&self.used, 0, 1)
                .await
                .map(|v| v.into_iter().map(|j| j.job).next()),
            JobState::Ready => self
                .svc
                .list_ready(&self.used, 0, 1)
                .await
                .map(|v| v.into_iter().next()),
            _ => self
                .svc
                .list_scheduled(&self.used, 0, 1)
                .await
                .map(|v| v.into_iter().next()),
        };
        match found {
            Ok(Some(job)) => {
                let body = body_bytes(&job.body);
                let n = self.number(&self.used, &job.id);
                Reply::Data(format!("FOUND {n} {}", body.len()), body)
            }
            Ok(None) | Err(Error::TopicNotFound(_)) => not_found(),
            Err(e) => failed(&e),
        }
    }

    /// Buried jobs first (up to `n`), else delayed ones.
    pub(super) async fn kick(&mut self, n: u32) -> Reply {
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
        let delayed = match self.svc.list_scheduled(&self.used, 0, n).await {
            Ok(d) => d,
            Err(e) => return failed(&e),
        };
        let mut kicked = 0;
        for j in delayed {
            if self.svc.kick(&self.used, &j.id).await.is_ok() {
                kicked += 1;
            }
        }
        line(format!("KICKED {kicked}"))
    }

    pub(super) async fn kick_job(&mut self, id: u64) -> Reply {
        let Some((t, job)) = self.find(id, Action::Manage).await else {
            return not_found();
        };
        let r = match job.state {
            JobState::Dead => self.svc.replay_dead(&t, Some(&[job.id])).await.map(|_| ()),
            JobState::Scheduled => self.svc.kick(&t, &job.id).await,
            _ => return not_found(),
        };
        match r {
            Ok(()) => line("KICKED"),
            Err(e) => failed(&e),
        }
    }
}
