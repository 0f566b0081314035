//! Consuming: [`Reserve`], and reserve, ack, nack, release, touch, with
//! the batches of ack, nack and touch.

use std::time::Duration;

use dq_api as wire;
use reqwest::Method;

use super::{Client, Leased, Nacked, item_error, wire_ms};
use crate::error::Result;
// Named by the `# Errors` doc links only.
#[cfg(doc)]
use crate::error::Error;

/// Options of a reserve call.
#[derive(Debug, Clone)]
pub struct Reserve(wire::ReserveRequest);

impl Reserve {
    /// Reserve from these topics, one job, no waiting.
    pub fn new<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(wire::ReserveRequest {
            topics: topics.into_iter().map(Into::into).collect(),
            max: Some(1),
            lease_ms: None,
            wait_ms: Some(0),
        })
    }

    /// Up to `max` jobs (1–1000).
    pub fn max(mut self, max: usize) -> Self {
        self.0.max = Some(max);
        self
    }

    /// Lease length.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.0.lease_ms = Some(lease.as_millis() as u64);
        self
    }

    /// Wait up to this long (≤ 30 s) for a job to become due.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.0.wait_ms = Some(wait.as_millis() as u64);
        self
    }
}

/// One ack of [`Client::ack_batch`].
pub type Ack = wire::AckItem;

/// One nack of [`Client::nack_batch`].
pub type NackItem = wire::NackItem;

/// One lease extension of [`Client::touch_batch`].
pub type TouchItem = wire::TouchItem;

impl Client {
    /// Leases due jobs.
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::Unavailable`], [`Error::Transport`].
    pub async fn reserve(&self, req: &Reserve) -> Result<Vec<Leased>> {
        Ok(self.reserve_answer(req).await?.jobs)
    }

    /// [`Client::reserve`] with the whole answer: the jobs, and the topics
    /// named that nobody created (`unknown_topics`: a typo there waits for
    /// ever).
    ///
    /// # Errors
    /// As [`Client::reserve`]; [`Error::NotFound`] for a topic nobody
    /// created when the server's `auto_create_topics` is off.
    pub async fn reserve_answer(&self, req: &Reserve) -> Result<wire::Reserved> {
        self.call(
            Method::POST,
            format!("{}/v1/reserve", self.base),
            Some(&req.0),
            false,
        )
        .await
    }

    /// Completes a leased job.
    ///
    /// # Errors
    /// [`Error::LeaseMismatch`] when the lease is no longer yours;
    /// [`Error::NotFound`] when the job was cancelled.
    pub async fn ack(&self, topic: &str, id: &str, token: &str) -> Result<()> {
        let _: wire::Acked = self
            .call(
                Method::POST,
                self.job_url(topic, id, Some("ack")),
                Some(&wire::AckRequest {
                    token: token.into(),
                }),
                false,
            )
            .await?;
        Ok(())
    }

    /// Acks many jobs in one call; a result per ack.
    ///
    /// # Errors
    /// For the call as a whole.
    pub async fn ack_batch(&self, acks: &[Ack]) -> Result<Vec<Result<()>>> {
        let r: wire::AckBatchResponse = self
            .call(
                Method::POST,
                format!("{}/v1/ack:batch", self.base),
                Some(&wire::AckBatchRequest {
                    acks: acks.to_vec(),
                }),
                false,
            )
            .await?;
        Ok(r.results
            .into_iter()
            .map(|item| match item {
                wire::AckResult::Acked { .. } => Ok(()),
                wire::AckResult::Error(e) => Err(item_error(&e)),
            })
            .collect())
    }

    /// Nacks many jobs in one call; a result per nack, in order, each as
    /// [`Client::nack`] answers it.
    ///
    /// # Errors
    /// For the call as a whole.
    pub async fn nack_batch(&self, items: &[NackItem]) -> Result<Vec<Result<Nacked>>> {
        let r: wire::NackBatchResponse = self
            .call(
                Method::POST,
                format!("{}/v1/nack:batch", self.base),
                Some(&wire::NackBatchRequest {
                    nacks: items.to_vec(),
                }),
                false,
            )
            .await?;
        Ok(r.results
            .into_iter()
            .zip(items)
            .map(|(result, item)| match result {
                wire::NackResult::Nacked { state, due_at_ms } => Ok(Nacked {
                    id: item.id.clone(),
                    state,
                    due_at_ms,
                }),
                wire::NackResult::Error(e) => Err(item_error(&e)),
            })
            .collect())
    }

    /// Extends many leases in one call; a result per item, in order: the
    /// new deadline, as [`Client::touch`] answers it. Retried on transient
    /// failures like a single touch (extending a lease twice is harmless).
    ///
    /// # Errors
    /// For the call as a whole.
    pub async fn touch_batch(&self, items: &[TouchItem]) -> Result<Vec<Result<u64>>> {
        let r: wire::TouchBatchResponse = self
            .call(
                Method::POST,
                format!("{}/v1/touch:batch", self.base),
                Some(&wire::TouchBatchRequest {
                    touches: items.to_vec(),
                }),
                true,
            )
            .await?;
        Ok(r.results
            .into_iter()
            .map(|result| match result {
                wire::TouchResult::Touched { lease_deadline_ms } => Ok(lease_deadline_ms),
                wire::TouchResult::Error(e) => Err(item_error(&e)),
            })
            .collect())
    }

    async fn nack_request(
        &self,
        topic: &str,
        id: &str,
        body: &wire::NackRequest,
    ) -> Result<Nacked> {
        self.call(
            Method::POST,
            self.job_url(topic, id, Some("nack")),
            Some(body),
            false,
        )
        .await
    }

    /// Fails the attempt: retried after `retry_in` (or the retry policy), or dead.
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub async fn nack(
        &self,
        topic: &str,
        id: &str,
        token: &str,
        error: &str,
        retry_in: Option<Duration>,
    ) -> Result<Nacked> {
        let body = wire::NackRequest {
            token: token.into(),
            error: Some(error.into()),
            retry_in_ms: retry_in.map(|r| wire_ms(r.as_millis())),
            dead: false,
        };
        self.nack_request(topic, id, &body).await
    }

    /// Nacks with `dead: true`: the job goes to the dead letters at once,
    /// whatever attempts are left (a permanent failure).
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub async fn nack_dead(&self, topic: &str, id: &str, token: &str, error: &str) -> Result<()> {
        let body = wire::NackRequest {
            token: token.into(),
            error: Some(error.into()),
            retry_in_ms: None,
            dead: true,
        };
        self.nack_request(topic, id, &body).await.map(|_| ())
    }

    /// Gives the job back without counting the attempt; due after `delay`.
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub async fn release(
        &self,
        topic: &str,
        id: &str,
        token: &str,
        delay: Duration,
    ) -> Result<u64> {
        let body = wire::ReleaseRequest {
            token: token.into(),
            delay_ms: Some(wire_ms(delay.as_millis())),
        };
        let r: wire::Released = self
            .call(
                Method::POST,
                self.job_url(topic, id, Some("release")),
                Some(&body),
                false,
            )
            .await?;
        Ok(r.due_at_ms)
    }

    /// Extends a lease to now + `lease` (or the job's/topic's lease); returns the deadline.
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub async fn touch(
        &self,
        topic: &str,
        id: &str,
        token: &str,
        lease: Option<Duration>,
    ) -> Result<u64> {
        let body = wire::TouchRequest {
            token: token.into(),
            lease_ms: lease.map(|l| l.as_millis() as u64),
        };
        let r: wire::Touched = self
            .call(
                Method::POST,
                self.job_url(topic, id, Some("touch")),
                Some(&body),
                true,
            )
            .await?;
        Ok(r.lease_deadline_ms)
    }
}
