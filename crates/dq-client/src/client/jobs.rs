//! Jobs: [`NewJob`], and enqueue (one, or a batch), get, cancel,
//! reschedule.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use dq_api as wire;
use dq_core::{JobState, RetryPolicy};
use reqwest::Method;
use serde::Serialize;

use super::{Client, Enqueued, Job, NONE, RawJson, encode_segment, item_error, wire_ms};
use crate::error::{Error, Result};

/// A job to enqueue. Build with [`NewJob::json`] or [`NewJob::bytes`], then
/// the setters.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(transparent)]
pub struct NewJob(wire::EnqueueRequest);

impl NewJob {
    /// A job whose body is `body` as JSON.
    ///
    /// # Panics
    /// If `body` cannot be serialized to JSON (a map with non-string keys).
    pub fn json(body: impl Serialize) -> Self {
        Self(wire::EnqueueRequest {
            body: Some(RawJson::from_value(&body).expect("job body serializes to JSON")),
            ..Default::default()
        })
    }

    /// A job whose body is this JSON text, sent exactly as it is.
    ///
    /// # Errors
    /// [`Error::Decode`] when `text` is not JSON.
    pub fn json_text(text: impl Into<String>) -> Result<Self> {
        let body = RawJson::from_text(text.into()).map_err(|e| Error::Decode(e.to_string()))?;
        Ok(Self(wire::EnqueueRequest {
            body: Some(body),
            ..Default::default()
        }))
    }

    /// A job whose body is opaque bytes.
    pub fn bytes(body: impl AsRef<[u8]>) -> Self {
        Self(wire::EnqueueRequest {
            body_base64: Some(B64.encode(body)),
            ..Default::default()
        })
    }

    /// The id (idempotency key); without one the server generates one.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.0.id = Some(id.into());
        self
    }

    /// Due after `delay`.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.0.delay_ms = Some(wire_ms(delay.as_millis()));
        self.0.due_at_ms = None;
        self
    }

    /// Due at this Unix millisecond.
    pub fn due_at_ms(mut self, due_at_ms: u64) -> Self {
        self.0.due_at_ms = Some(wire_ms(due_at_ms.into()));
        self.0.delay_ms = None;
        self
    }

    /// Priority, lower first (default 1024).
    pub fn priority(mut self, priority: u32) -> Self {
        self.0.priority = Some(priority);
        self
    }

    /// Attempts before the job goes dead (default: the topic's).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.0.max_attempts = Some(n);
        self
    }

    /// Lease length for this job's hand-outs (default: the topic's).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.0.lease_ms = Some(lease.as_millis() as u64);
        self
    }

    /// Retry waits for this job (default: the topic's).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.0.retry = Some(retry);
        self
    }

    /// Replace a job with this id if it is still waiting.
    pub fn replace(mut self) -> Self {
        self.0.replace = true;
        self
    }

    /// Dedup window: for this long after the job ended (acked, cancelled,
    /// dead), enqueueing its id again stores nothing (default: the topic's).
    pub fn dedup(mut self, window: Duration) -> Self {
        self.0.dedup_ms = Some(u64::try_from(window.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Flow-control key (e.g. a customer id): the jobs of one key share
    /// the topic's `key_concurrency` and `key_rate_limit`, and keys take
    /// turns at hand-out.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.0.key = Some(key.into());
        self
    }

    /// Expires `after` its enqueue: not handed out by then, it never is
    /// (it goes dead with the last error `expired`, or is dropped: the
    /// topic's `on_expiry`). Must be later than its due time. Default: the
    /// topic's `expires_ms` after it is due.
    pub fn expires_in(mut self, after: Duration) -> Self {
        self.0.expires_in_ms = Some(wire_ms(after.as_millis()));
        self.0.expires_at_ms = None;
        self
    }

    /// Expires at this Unix millisecond (see [`NewJob::expires_in`]).
    pub fn expires_at_ms(mut self, at_ms: u64) -> Self {
        self.0.expires_at_ms = Some(wire_ms(at_ms.into()));
        self.0.expires_in_ms = None;
        self
    }

    /// The W3C trace context of the work that enqueues the job
    /// (`traceparent`, and a `tracestate` or none): kept with the job and
    /// handed back with it ([`dq_api::Leased::traceparent`]), so the work
    /// done at its due time continues this trace. A malformed one is
    /// dropped by the server (logged), never refused.
    pub fn trace(mut self, traceparent: impl Into<String>, tracestate: Option<String>) -> Self {
        self.0.traceparent = Some(traceparent.into());
        self.0.tracestate = tracestate;
        self
    }

    /// The request as it goes on the wire.
    pub fn request(&self) -> &wire::EnqueueRequest {
        &self.0
    }
}

impl Client {
    /// Enqueues a job. Retried on transient errors only when it has an id
    /// (then a repeat is harmless: the second one reports `created: false`).
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad input, [`Error::Unavailable`], [`Error::Transport`].
    pub async fn enqueue(&self, topic: &str, job: &NewJob) -> Result<Enqueued> {
        let url = format!("{}/v1/topics/{}/jobs", self.base, encode_segment(topic));
        self.call(Method::POST, url, Some(job.request()), job.0.id.is_some())
            .await
    }

    /// Enqueues up to 1000 jobs in one call; a result per job.
    ///
    /// # Errors
    /// For the call as a whole; per-job refusals are in the results.
    pub async fn enqueue_batch(
        &self,
        topic: &str,
        jobs: &[NewJob],
    ) -> Result<Vec<Result<Enqueued>>> {
        let body = wire::BatchRequest {
            jobs: jobs.iter().map(NewJob::request).collect::<Vec<_>>(),
        };
        let url = format!(
            "{}/v1/topics/{}/jobs:batch",
            self.base,
            encode_segment(topic)
        );
        let all_ids = jobs.iter().all(|j| j.0.id.is_some());
        let r: wire::BatchResponse = self.call(Method::POST, url, Some(&body), all_ids).await?;
        Ok(r.results
            .into_iter()
            .map(|item| match item {
                wire::BatchResult::Enqueued(e) => Ok(e),
                wire::BatchResult::Error(e) => Err(item_error(&e)),
            })
            .collect())
    }

    /// Reads a job.
    ///
    /// # Errors
    /// [`Error::NotFound`] when there is no such job.
    pub async fn get(&self, topic: &str, id: &str) -> Result<Job> {
        self.call(Method::GET, self.job_url(topic, id, None), NONE, true)
            .await
    }

    /// Cancels a job in any state; returns the state it was in.
    ///
    /// # Errors
    /// [`Error::NotFound`] when there is no such job.
    pub async fn cancel(&self, topic: &str, id: &str) -> Result<JobState> {
        let r: wire::Cancelled = self
            .call(Method::DELETE, self.job_url(topic, id, None), NONE, false)
            .await?;
        Ok(r.state)
    }

    /// Moves a waiting job to `due_at_ms`; returns the new due time.
    ///
    /// # Errors
    /// [`Error::NotInState`] when reserved or dead, [`Error::NotFound`].
    pub async fn reschedule(&self, topic: &str, id: &str, due_at_ms: u64) -> Result<u64> {
        let body = wire::RescheduleRequest {
            delay_ms: None,
            due_at_ms: Some(wire_ms(due_at_ms.into())),
        };
        self.reschedule_request(topic, id, &body).await
    }

    /// Moves a waiting job to `delay` from now by the server's clock (not
    /// this machine's); returns the new due time.
    ///
    /// # Errors
    /// As [`Client::reschedule`].
    pub async fn reschedule_after(&self, topic: &str, id: &str, delay: Duration) -> Result<u64> {
        let body = wire::RescheduleRequest {
            delay_ms: Some(wire_ms(delay.as_millis())),
            due_at_ms: None,
        };
        self.reschedule_request(topic, id, &body).await
    }

    async fn reschedule_request(
        &self,
        topic: &str,
        id: &str,
        body: &wire::RescheduleRequest,
    ) -> Result<u64> {
        let r: wire::Rescheduled = self
            .call(
                Method::PATCH,
                self.job_url(topic, id, None),
                Some(body),
                true,
            )
            .await?;
        Ok(r.due_at_ms)
    }
}
