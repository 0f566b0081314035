//! The Forwarder: for every `redis_stream` / `redis_list` topic, reserves
//! due jobs in batches, writes them into the topic's target Redis (`XADD`,
//! `LPUSH`/`RPUSH`; what is written: `dq_core::forward`) and acks them, so
//! consumers that already read a stream or a list get them at their due
//! time and dq keeps the delay, the order and the retries.
//!
//! - **Never early**: a job is written only once reserved, which is once due.
//! - **At least once**: when the target is the store's own Redis (same
//!   address and database; not a Cluster), the store acks and writes each
//!   job in one script ([`ForwardSink::ack_and_write`]): nothing is written
//!   twice, nothing acked unwritten. Anywhere else a batch is written in
//!   one pipeline ([`ForwardConn::write`]), then acked; a crash between the
//!   two writes those jobs again after their lease (30 s).
//! - **Retries**: a write the target refuses or cannot take (down, timeout,
//!   wrong key type) is a failed attempt of each job, retried with the
//!   topic's backoff; out of attempts, the job is dead as any other.
//!
//! The [`ForwardSink`] is the binary's (dq-redis's `RedisSink`), given with
//! [`crate::Server::with_forward_sink`]; a server given none refuses every
//! write ([`NoSink`]), so its forwarded jobs are retried, then dead, with
//! the reason.
//!
//! Each topic has its own task; one batch (up to 100 jobs) at a time. Its
//! tasks run in the tracker drain and shutdown wait for, so a batch being
//! written finishes (write and ack) before the process exits; a drain stops
//! each task after its batch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dq_core::forward::{AckWrite, Write};
use dq_core::{
    AckItem, Delivery, ForwardConn, ForwardSink, Lease, Nack, NackOutcome, StoreError, Topic,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;
use crate::service::{Error, Service};

/// Most jobs reserved and written at once.
pub const BATCH: usize = 100;
/// The lease of a job being written: far longer than a write takes.
const LEASE_MS: u64 = 30_000;
/// Longest wait for the target's answer.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// See the module docs.
pub struct Forwarder {
    svc: Arc<Service>,
    metrics: Arc<Metrics>,
    tracker: TaskTracker,
    sink: Arc<dyn ForwardSink>,
}

/// The sink of a server given none: every write is refused, with why.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSink;

impl ForwardSink for NoSink {
    fn connect(&self, url: &str, _: Duration) -> Result<Box<dyn ForwardConn>, String> {
        Err(format!(
            "target {}: this server was given no forward sink (dq serve gives one)",
            dq_core::forward::redact_url(url)
        ))
    }
}

impl Forwarder {
    /// A forwarder writing through `sink`, whose topic tasks run in
    /// `tracker`.
    pub fn new(
        svc: Arc<Service>,
        metrics: Arc<Metrics>,
        tracker: TaskTracker,
        sink: Arc<dyn ForwardSink>,
    ) -> Self {
        Self {
            svc,
            metrics,
            tracker,
            sink,
        }
    }

    /// Runs until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let pick = |d: Delivery| d.target().is_some().then_some(d);
        crate::deliverer::per_topic(&self.svc, &cancel, "forwarding", pick, |t, d, stop| {
            let task = TopicForward::new(self.svc.clone(), self.metrics.clone(), &self.sink, t, d);
            self.tracker.spawn(task.run(stop));
        })
        .await;
    }
}

struct TopicForward {
    svc: Arc<Service>,
    metrics: Arc<Metrics>,
    topic: Topic,
    delivery: Delivery,
    /// Acks and writes in one step where it can.
    sink: Arc<dyn ForwardSink>,
    /// The target's connection, or why the URL cannot be used.
    conn: Result<Box<dyn ForwardConn>, String>,
}

impl TopicForward {
    fn new(
        svc: Arc<Service>,
        metrics: Arc<Metrics>,
        sink: &Arc<dyn ForwardSink>,
        topic: Topic,
        delivery: Delivery,
    ) -> Self {
        let url = delivery
            .target()
            .map(|t| t.url().to_string())
            .unwrap_or_default();
        Self {
            svc,
            metrics,
            topic,
            delivery,
            sink: sink.clone(),
            conn: sink.connect(&url, WRITE_TIMEOUT),
        }
    }

    async fn run(self, stop: CancellationToken) {
        let mut failures = 0u32;
        while !stop.is_cancelled() && !self.svc.is_draining() {
            // As the deliverer's: never dropped midway; a second at most.
            let leases = self
                .svc
                .reserve_delivered(&self.topic, BATCH, LEASE_MS, 1000)
                .await;
            if stop.is_cancelled() || self.svc.is_draining() {
                if let Ok(l) = leases {
                    self.svc.give_back(&l).await;
                }
                return;
            }
            match leases {
                Ok(l) if l.is_empty() => {}
                Ok(l) => {
                    failures = 0;
                    // Not cancelled midway: a write is always followed by
                    // its ack (or nack).
                    self.forward(l).await;
                }
                Err(Error::ShuttingDown | Error::Draining) => return,
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(topic = %self.topic, error = %e, "forwarding topic cannot reserve jobs");
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Writes and acks one batch; every job ends acked, nacked, or (when
    /// even that fails) back after its lease.
    async fn forward(&self, leases: Vec<Lease>) {
        let started = Instant::now();
        let Some(target) = self.delivery.target() else {
            return;
        };
        let writes: Vec<Write> = leases.iter().map(|l| target.write_for(l)).collect();
        let items: Vec<AckWrite<'_>> = leases
            .iter()
            .zip(&writes)
            .map(|(l, w)| AckWrite {
                id: &l.id,
                token: &l.token,
                write: w,
            })
            .collect();
        let t = &self.topic;
        let done = match self
            .svc
            .ack_and_write(&*self.sink, t, target.url(), &items)
            .await
        {
            Ok(d) => d,
            Err(e) => {
                // Unknown whether the store did any: what it did not comes
                // back after the lease.
                tracing::warn!(topic = %t, jobs = leases.len(), error = %e, "cannot forward a batch; its jobs come back after their lease");
                return;
            }
        };
        let mut written = 0u64;
        let mut lost = 0u64;
        let mut unknown = 0u64;
        let mut refused: Vec<(usize, String)> = Vec::new();
        let mut rest: Vec<usize> = Vec::new();
        for (i, d) in done.into_iter().enumerate() {
            match d {
                Some(Ok(())) => {
                    written += 1;
                    self.svc.spans().acked(t, &leases[i].token);
                }
                Some(Err(StoreError::Storage { code, message }))
                    if code == dq_core::forward::TARGET_REFUSED =>
                {
                    refused.push((i, message));
                }
                Some(Err(StoreError::Unavailable(e))) => {
                    // Unknown whether the script ran: the lease decides.
                    unknown += 1;
                    tracing::debug!(topic = %t, id = %leases[i].id, error = %e, "forwarding store did not answer; the job comes back after its lease unless it was written");
                }
                Some(Err(e)) => {
                    lost += 1;
                    tracing::debug!(topic = %t, id = %leases[i].id, error = %e, "forwarded job's lease was lost");
                }
                None => rest.push(i),
            }
        }
        if !rest.is_empty() {
            let batch: Vec<&Write> = rest.iter().map(|&i| &writes[i]).collect();
            let wrote = match &self.conn {
                Ok(conn) => conn.write(&batch).await,
                Err(e) => Err(e.clone()),
            };
            match wrote {
                Ok(()) => {
                    let acks: Vec<AckItem> = rest
                        .iter()
                        .map(|&i| AckItem {
                            topic: leases[i].topic.clone(),
                            id: leases[i].id.clone(),
                            token: leases[i].token.clone(),
                        })
                        .collect();
                    for (r, &i) in self.svc.ack_batch(&acks).await.iter().zip(&rest) {
                        match r {
                            Ok(()) => written += 1,
                            Err(e) => {
                                // Written, not acked: it comes again (at least once).
                                lost += 1;
                                tracing::warn!(topic = %t, id = %leases[i].id, error = %e, "forwarded job written but not acked; it may be written again");
                            }
                        }
                    }
                }
                Err(why) => refused.extend(rest.iter().map(|&i| (i, why.clone()))),
            }
        }
        let (mut retried, mut dead) = (0u64, 0u64);
        for (i, why) in &refused {
            let l = &leases[*i];
            match self
                .svc
                .nack(&l.topic, &l.id, Nack::retry(&l.token, why))
                .await
            {
                Ok(NackOutcome::Retry { .. }) => retried += 1,
                Ok(NackOutcome::Dead { .. }) => dead += 1,
                Err(e) => {
                    lost += 1;
                    tracing::debug!(topic = %t, id = %l.id, error = %e, "cannot record a failed forward; the job comes back after its lease");
                }
            }
        }
        for (outcome, n) in [
            ("written", written),
            ("retry", retried),
            ("dead", dead),
            ("lost", lost),
            ("unknown", unknown),
        ] {
            self.metrics.observe_forward(t.as_str(), outcome, n);
        }
        let took_ms = started.elapsed().as_millis() as u64;
        if refused.is_empty() {
            tracing::debug!(target: "dq::delivery", topic = %t, written, lost, unknown, took_ms, "batch forwarded");
        } else {
            let error = &refused[0].1;
            tracing::warn!(target: "dq::delivery", topic = %t, written, retried, dead, lost, took_ms, error = %error, "target refused forwarded jobs; they are retried");
        }
    }
}
