//! The typed HTTP client.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use dq_api as wire;
pub use dq_api::{Enqueued, Job, Leased, Nacked, RawJson, TopicInfo};
use dq_core::{JobState, RetryPolicy, TopicConfig, TopicConfigPatch};
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

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

    /// The request as it goes on the wire.
    pub fn request(&self) -> &wire::EnqueueRequest {
        &self.0
    }
}

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

/// Milliseconds as the wire's signed fields carry them; beyond `i64::MAX`
/// (never a valid delay) the server refuses it with its own error.
fn wire_ms(ms: u128) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// One ack of [`Client::ack_batch`].
pub type Ack = wire::AckItem;

/// One nack of [`Client::nack_batch`].
pub type NackItem = wire::NackItem;

/// One lease extension of [`Client::touch_batch`].
pub type TouchItem = wire::TouchItem;

/// A client of one dq server. Cheap to clone (connections are pooled and shared).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    retries: u32,
    token: Option<String>,
}

/// Percent-encodes one path segment (a topic or a job id) for a URL.
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Client {
    /// A client of the server at `base` (e.g. `http://127.0.0.1:7070`), with
    /// a 60 s request timeout and 3 retries of idempotent calls.
    ///
    /// # Errors
    /// When the HTTP client cannot be built (no TLS provider installed).
    pub fn new(base: impl Into<String>) -> Result<Self> {
        Ok(Self::with_http(base, Self::http_builder().build()?))
    }

    /// As [`Client::new`], trusting the certificate authority (or the
    /// self-signed certificate) in `pem` for an `https://` server, besides
    /// the system's roots.
    ///
    /// # Errors
    /// `pem` holds no certificate; the HTTP client cannot be built.
    pub fn with_root_certificate(base: impl Into<String>, pem: &[u8]) -> Result<Self> {
        let certs = reqwest::Certificate::from_pem_bundle(pem)?;
        Ok(Self::with_http(
            base,
            Self::http_builder().tls_certs_merge(certs).build()?,
        ))
    }

    fn http_builder() -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(64)
            // Below dq's default keep-alive idle limit (http_header_timeout,
            // 30 s), so a pooled connection is not reused just as the
            // server closes it.
            .pool_idle_timeout(Duration::from_secs(20))
    }

    /// A client using your own `reqwest::Client` (timeouts, TLS, proxies).
    pub fn with_http(base: impl Into<String>, http: reqwest::Client) -> Self {
        Self {
            http,
            base: base.into().trim_end_matches('/').to_string(),
            retries: 3,
            token: None,
        }
    }

    /// Sends `Authorization: Bearer <token>` with every call: an API key
    /// (`dqk_…`) or the server's `admin_token`; needed for every call once
    /// the server has keys, and for changes when it has `admin_token`.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// How often idempotent calls are retried on transient errors (default 3).
    pub fn retries(mut self, n: u32) -> Self {
        self.retries = n;
        self
    }

    fn job_url(&self, topic: &str, id: &str, action: Option<&str>) -> String {
        let mut u = format!(
            "{}/v1/topics/{}/jobs/{}",
            self.base,
            encode_segment(topic),
            encode_segment(id)
        );
        if let Some(a) = action {
            u.push('/');
            u.push_str(a);
        }
        u
    }

    /// Sends a request; retries transient failures when `idempotent`.
    async fn call<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: String,
        body: Option<&B>,
        idempotent: bool,
    ) -> Result<T> {
        let mut attempt = 0;
        loop {
            let mut req = self.http.request(method.clone(), &url);
            if let Some(t) = &self.token {
                req = req.bearer_auth(t);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            let result = async {
                let res = req.send().await?;
                let status = res.status().as_u16();
                let retry_after = res
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok());
                let bytes = res.bytes().await?;
                if (200..300).contains(&status) {
                    return serde_json::from_slice::<T>(&bytes)
                        .map_err(|e| Error::Decode(e.to_string()));
                }
                let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                Err(Error::from_reply(status, &v, retry_after))
            }
            .await;
            match result {
                Err(e) if idempotent && e.is_transient() && attempt < self.retries => {
                    let wait = match &e {
                        Error::Unavailable {
                            retry_after_s: Some(s),
                            ..
                        } => Duration::from_secs(*s),
                        _ => Duration::from_millis(100 << attempt),
                    };
                    tracing::debug!(error = %e, ?wait, "retrying dq call");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

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

    /// Leases due jobs.
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::Unavailable`], [`Error::Transport`].
    pub async fn reserve(&self, req: &Reserve) -> Result<Vec<Leased>> {
        let r: wire::Reserved = self
            .call(
                Method::POST,
                format!("{}/v1/reserve", self.base),
                Some(&req.0),
                false,
            )
            .await?;
        Ok(r.jobs)
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

    /// Every topic with its counts (those whose name starts with
    /// `prefix`, when given), in name order: [`Client::list_topics`] page
    /// after page, following `next_cursor`, 1000 topics a request.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a prefix no topic name can start with;
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn topics_with_prefix(&self, prefix: Option<&str>) -> Result<Vec<TopicInfo>> {
        let mut query = wire::TopicListQuery {
            limit: Some(dq_core::limits::MAX_TOPICS_PAGE),
            cursor: None,
            prefix: prefix.map(str::to_string),
        };
        let mut out = Vec::new();
        loop {
            let page = self.list_topics(&query).await?;
            out.extend(page.topics);
            match page.next_cursor {
                Some(c) => query.cursor = Some(c),
                None => return Ok(out),
            }
        }
    }

    /// Every topic with its counts ([`Client::topics_with_prefix`] without
    /// a prefix).
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn topics(&self) -> Result<Vec<TopicInfo>> {
        self.topics_with_prefix(None).await
    }

    /// One page of the topics in name order (`GET /v1/topics`): pass the
    /// page's `next_cursor` as the next query's `cursor` until it is `None`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a limit outside 1–1000, a cursor the server
    /// did not hand out or a bad prefix; [`Error::Unavailable`],
    /// [`Error::Transport`].
    pub async fn list_topics(&self, query: &wire::TopicListQuery) -> Result<wire::TopicList> {
        let mut url = format!("{}/v1/topics", self.base);
        let mut sep = '?';
        let params = [
            ("limit", query.limit.map(|l| l.to_string())),
            ("cursor", query.cursor.clone()),
            ("prefix", query.prefix.clone()),
        ];
        for (name, value) in params {
            if let Some(v) = value {
                url.push(sep);
                url.push_str(name);
                url.push('=');
                url.push_str(&encode_segment(&v));
                sep = '&';
            }
        }
        self.call(Method::GET, url, NONE, true).await
    }

    /// One topic's settings and counts.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown topic.
    pub async fn topic(&self, topic: &str) -> Result<TopicInfo> {
        self.call(
            Method::GET,
            format!("{}/v1/topics/{}", self.base, encode_segment(topic)),
            NONE,
            true,
        )
        .await
    }

    /// Creates or updates a topic's settings; fields left out keep their
    /// value. Returns the settings now in force (push credentials redacted).
    ///
    /// # Errors
    /// [`Error::Invalid`] for settings out of range.
    pub async fn configure_topic(
        &self,
        topic: &str,
        patch: &TopicConfigPatch,
    ) -> Result<TopicConfig> {
        let body = serde_json::to_value(patch).map_err(|e| Error::Decode(e.to_string()))?;
        let mut body = strip_nulls(body);
        // The nulls that mean something: remove a limit.
        if let Value::Object(m) = &mut body {
            for (name, removed) in [
                ("rate_limit", patch.rate_limit == Some(None)),
                ("key_rate_limit", patch.key_rate_limit == Some(None)),
                ("key_concurrency", patch.key_concurrency == Some(None)),
            ] {
                if removed {
                    m.insert(name.into(), Value::Null);
                }
            }
        }
        let r: wire::TopicConfigured = self
            .call(
                Method::PUT,
                format!("{}/v1/topics/{}", self.base, encode_segment(topic)),
                Some(&body),
                true,
            )
            .await?;
        Ok(r.config)
    }

    /// Creates or replaces a schedule; returns how it stands (its next slots).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad rule, time zone, name or topic.
    pub async fn put_schedule(
        &self,
        name: &str,
        spec: &wire::ScheduleSpec,
    ) -> Result<wire::ScheduleInfo> {
        let body = serde_json::to_value(spec).map_err(|e| Error::Decode(e.to_string()))?;
        self.call(
            Method::PUT,
            format!("{}/v1/schedules/{}", self.base, encode_segment(name)),
            Some(&body),
            true,
        )
        .await
    }

    /// Every schedule, by name.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn schedules(&self) -> Result<Vec<wire::ScheduleInfo>> {
        let r: wire::ScheduleList = self
            .call(
                Method::GET,
                format!("{}/v1/schedules", self.base),
                NONE,
                true,
            )
            .await?;
        Ok(r.schedules)
    }

    /// One schedule: settings, last slot and its job, next slots.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown schedule.
    pub async fn schedule(&self, name: &str) -> Result<wire::ScheduleInfo> {
        self.call(
            Method::GET,
            format!("{}/v1/schedules/{}", self.base, encode_segment(name)),
            NONE,
            true,
        )
        .await
    }

    /// Pauses (`true`) or resumes a schedule.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown schedule.
    pub async fn pause_schedule(&self, name: &str, paused: bool) -> Result<wire::ScheduleInfo> {
        let verb = if paused { "pause" } else { "resume" };
        self.call(
            Method::POST,
            format!("{}/v1/schedules/{}/{verb}", self.base, encode_segment(name)),
            NONE,
            true,
        )
        .await
    }

    /// Deletes a schedule (the jobs it enqueued ahead, due within 2 s, still
    /// run).
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown schedule.
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        let _: wire::ScheduleDeleted = self
            .call(
                Method::DELETE,
                format!("{}/v1/schedules/{}", self.base, encode_segment(name)),
                NONE,
                false,
            )
            .await?;
        Ok(())
    }

    /// Creates an API key (admin only), optionally with a request rate
    /// limit per instance; the reply holds its secret, which the server
    /// cannot show again.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name or scope; [`Error::Http`] 409
    /// `key_exists`; [`Error::Unauthorized`] without an admin key.
    pub async fn create_key(
        &self,
        name: &str,
        scopes: &[String],
        rate_limit: Option<dq_core::RateLimit>,
    ) -> Result<wire::KeyCreated> {
        let req = wire::CreateKeyRequest {
            name: name.to_string(),
            scopes: scopes.to_vec(),
            rate_limit,
        };
        self.call(
            Method::POST,
            format!("{}/v1/keys", self.base),
            Some(&req),
            false,
        )
        .await
    }

    /// Every API key (never a secret).
    ///
    /// # Errors
    /// [`Error::Unauthorized`] without an admin key.
    pub async fn keys(&self) -> Result<Vec<wire::KeyInfo>> {
        let r: wire::KeyList = self
            .call(Method::GET, format!("{}/v1/keys", self.base), NONE, true)
            .await?;
        Ok(r.keys)
    }

    /// Revokes an API key: it stops working on every instance within a second.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown key.
    pub async fn revoke_key(&self, name: &str) -> Result<()> {
        let _: wire::KeyRevoked = self
            .call(
                Method::DELETE,
                format!("{}/v1/keys/{}", self.base, encode_segment(name)),
                NONE,
                false,
            )
            .await?;
        Ok(())
    }

    /// Gives an API key a new secret (returned); the old one stops working.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown key.
    pub async fn rotate_key(&self, name: &str) -> Result<wire::KeyCreated> {
        self.call(
            Method::POST,
            format!("{}/v1/keys/{}/rotate", self.base, encode_segment(name)),
            NONE,
            false,
        )
        .await
    }

    /// Deletes a topic and all its jobs; returns how many jobs.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown topic.
    pub async fn delete_topic(&self, topic: &str) -> Result<u64> {
        let r: wire::TopicDeleted = self
            .call(
                Method::DELETE,
                format!("{}/v1/topics/{}", self.base, encode_segment(topic)),
                NONE,
                false,
            )
            .await?;
        Ok(r.deleted_jobs)
    }

    /// Dead letters, oldest first.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a limit outside 1–1000.
    pub async fn list_dead(&self, topic: &str, offset: usize, limit: usize) -> Result<Vec<Job>> {
        let url = format!(
            "{}/v1/topics/{}/dead?offset={offset}&limit={limit}",
            self.base,
            encode_segment(topic)
        );
        let r: wire::DeadList = self.call(Method::GET, url, NONE, true).await?;
        Ok(r.jobs)
    }

    /// One page of a topic's jobs (all states, or `state`) for an export:
    /// pass `None` first, then each page's `cursor` until it is `None`.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown topic; [`Error::Invalid`] for a
    /// limit outside 1–1000 or a cursor the server did not hand out.
    pub async fn list_jobs(
        &self,
        topic: &str,
        state: Option<JobState>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<wire::JobPage> {
        let mut url = format!(
            "{}/v1/topics/{}/jobs?limit={limit}",
            self.base,
            encode_segment(topic)
        );
        if let Some(s) = state {
            url.push_str("&state=");
            url.push_str(s.as_str());
        }
        if let Some(c) = cursor {
            url.push_str("&cursor=");
            url.push_str(&encode_segment(c));
        }
        self.call(Method::GET, url, NONE, true).await
    }

    /// Writes up to 1000 jobs as another store had them (an import; due
    /// times, attempts and dead letters kept); a result per job. Idempotent
    /// by id, so it is retried on transient errors.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the first bad job (nothing was written).
    pub async fn import_jobs(
        &self,
        topic: &str,
        jobs: &[wire::JobRecord],
    ) -> Result<Vec<wire::ImportResult>> {
        let url = format!(
            "{}/v1/topics/{}/jobs:import",
            self.base,
            encode_segment(topic)
        );
        let body = wire::ImportRequest {
            jobs: jobs.to_vec(),
        };
        let r: wire::ImportResponse = self.call(Method::POST, url, Some(&body), true).await?;
        Ok(r.results)
    }

    /// Replays dead letters (the ids given, or all); returns how many.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn replay_dead(&self, topic: &str, ids: Option<&[&str]>) -> Result<u64> {
        let body = wire::ReplayRequest {
            ids: ids.map(|ids| ids.iter().map(|i| i.to_string()).collect()),
        };
        let r: wire::Replayed = self
            .call(
                Method::POST,
                format!(
                    "{}/v1/topics/{}/dead/replay",
                    self.base,
                    encode_segment(topic)
                ),
                Some(&body),
                true,
            )
            .await?;
        Ok(r.replayed)
    }

    /// Deletes all dead letters of a topic; returns how many.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn purge_dead(&self, topic: &str) -> Result<u64> {
        let r: wire::Purged = self
            .call(
                Method::DELETE,
                format!("{}/v1/topics/{}/dead", self.base, encode_segment(topic)),
                NONE,
                true,
            )
            .await?;
        Ok(r.purged)
    }

    /// Drains the server for a restart (`POST /v1/admin/drain`): it hands
    /// out no job any more and `/readyz` answers 503; waits up to `wait`
    /// for its deliveries in flight.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a wait over 10 minutes; refusals of the
    /// admin guard; [`Error::Transport`].
    pub async fn drain(&self, wait: Duration) -> Result<wire::DrainStatus> {
        let body = wire::DrainRequest {
            wait_ms: Some(wait.as_millis() as i64),
        };
        self.call(
            Method::POST,
            format!("{}/v1/admin/drain", self.base),
            Some(&body),
            true,
        )
        .await
    }

    /// Whether the server is ready (`GET /readyz` answers 200): its store
    /// answers and it is not draining.
    ///
    /// # Errors
    /// [`Error::Unavailable`] with the server's code (`store_unavailable`,
    /// `draining`, …) when it is not; [`Error::Transport`].
    pub async fn ready(&self) -> Result<wire::Health> {
        self.call(Method::GET, format!("{}/readyz", self.base), NONE, false)
            .await
    }

    /// Has the server back up its embedded store into `path`, a new file on
    /// the server's machine (`POST /v1/admin/backup`). Not retried.
    ///
    /// # Errors
    /// `backup_exists`, `invalid_backup_path`, `backup_unsupported` (a Redis
    /// store), `backup_in_progress`, `backup_failed`; [`Error::Transport`].
    pub async fn backup(&self, path: &str) -> Result<wire::BackupDone> {
        let body = wire::BackupRequest {
            path: path.to_string(),
        };
        self.call(
            Method::POST,
            format!("{}/v1/admin/backup", self.base),
            Some(&body),
            false,
        )
        .await
    }
}

/// No request body.
const NONE: Option<&()> = None;

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => other,
    }
}

/// A per-item refusal of a batch as the error the same refusal of a single
/// call would be.
fn item_error(e: &wire::ErrorBody) -> Error {
    let status = match e.error.code.as_str() {
        "job_not_found" | "topic_not_found" => 404,
        "lease_mismatch" | "not_in_state" => 409,
        c if c.starts_with("store_") => 503,
        _ => 400,
    };
    let v = serde_json::to_value(e).unwrap_or(Value::Null);
    Error::from_reply(status, &v, None)
}
