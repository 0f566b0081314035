//! The typed HTTP client.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use dq_core::{JobState, RetryPolicy, TopicConfig, TopicConfigPatch, TopicStats};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{Error, Result};

/// A job to enqueue. Build with [`NewJob::json`] or [`NewJob::bytes`], then
/// the setters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NewJob {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body_base64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    due_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry: Option<RetryPolicy>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    replace: bool,
}

impl NewJob {
    /// A job whose body is `body` as JSON.
    ///
    /// # Panics
    /// If `body` cannot be serialized to JSON (a map with non-string keys).
    pub fn json(body: impl Serialize) -> Self {
        Self {
            body: Some(serde_json::to_value(body).expect("job body serializes to JSON")),
            ..Self::default()
        }
    }

    /// A job whose body is opaque bytes.
    pub fn bytes(body: impl AsRef<[u8]>) -> Self {
        Self {
            body_base64: Some(B64.encode(body)),
            ..Self::default()
        }
    }

    /// The id (idempotency key); without one the server generates one.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Due after `delay`.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay_ms = Some(delay.as_millis() as u64);
        self.due_at_ms = None;
        self
    }

    /// Due at this Unix millisecond.
    pub fn due_at_ms(mut self, due_at_ms: u64) -> Self {
        self.due_at_ms = Some(due_at_ms);
        self.delay_ms = None;
        self
    }

    /// Priority, lower first (default 1024).
    pub fn priority(mut self, priority: u32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Attempts before the job goes dead (default: the topic's).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Lease length for this job's hand-outs (default: the topic's).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease_ms = Some(lease.as_millis() as u64);
        self
    }

    /// Retry waits for this job (default: the topic's).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Replace a job with this id if it is still waiting.
    pub fn replace(mut self) -> Self {
        self.replace = true;
        self
    }
}

/// What enqueue did.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Enqueued {
    /// The job's id.
    pub id: String,
    /// A new job was written.
    pub created: bool,
    /// A waiting job was replaced.
    #[serde(default)]
    pub replaced: bool,
    /// Its due time.
    pub due_at_ms: u64,
    /// Its state.
    pub state: JobState,
}

/// A job as `GET` shows it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Job {
    /// Topic.
    pub topic: String,
    /// Id.
    pub id: String,
    /// State.
    pub state: JobState,
    /// Due time.
    pub due_at_ms: u64,
    /// Priority.
    pub priority: u32,
    /// Hand-outs so far.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Last failure.
    pub last_error: Option<String>,
    /// Enqueue time.
    pub created_at_ms: u64,
    /// Current lease's deadline.
    pub lease_deadline_ms: Option<u64>,
    /// Death time.
    pub died_at_ms: Option<u64>,
    /// JSON body.
    pub body: Option<Value>,
    /// Bytes body, base64.
    pub body_base64: Option<String>,
}

/// A job leased to you by [`Client::reserve`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Leased {
    /// Topic.
    pub topic: String,
    /// Id.
    pub id: String,
    /// Lease token: ack, nack, touch and release need it.
    pub token: String,
    /// Which hand-out this is (1 for the first).
    pub attempt: u32,
    /// Due time.
    pub due_at_ms: u64,
    /// Lease deadline.
    pub lease_deadline_ms: u64,
    /// Priority.
    pub priority: u32,
    /// JSON body.
    pub body: Option<Value>,
    /// Bytes body, base64.
    pub body_base64: Option<String>,
}

impl Leased {
    /// The JSON body as `T`.
    ///
    /// # Errors
    /// [`Error::Decode`] when the body is bytes or not a `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        let body = self
            .body
            .clone()
            .ok_or_else(|| Error::Decode("the job's body is bytes, not JSON".into()))?;
        serde_json::from_value(body).map_err(|e| Error::Decode(e.to_string()))
    }

    /// The body's bytes (a JSON body as its text).
    ///
    /// # Errors
    /// [`Error::Decode`] for invalid base64.
    pub fn bytes(&self) -> Result<Vec<u8>> {
        match (&self.body_base64, &self.body) {
            (Some(b), _) => B64.decode(b).map_err(|e| Error::Decode(e.to_string())),
            (None, Some(v)) => Ok(v.to_string().into_bytes()),
            (None, None) => Ok(Vec::new()),
        }
    }
}

/// What a nack did.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Nacked {
    /// Id.
    pub id: String,
    /// `scheduled` (will be retried) or `dead`.
    pub state: JobState,
    /// When it is due again, if scheduled.
    pub due_at_ms: Option<u64>,
}

/// A topic's settings and counts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TopicInfo {
    /// Name.
    pub name: String,
    /// Counts and counters.
    pub stats: TopicStats,
    /// Settings (absent in listings). Push secrets and header values come
    /// redacted (`whsec_…a1b2`): they are write-only.
    pub config: Option<TopicConfig>,
}

/// Options of a reserve call.
#[derive(Debug, Clone, Serialize)]
pub struct Reserve {
    topics: Vec<String>,
    max: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_ms: Option<u64>,
    wait_ms: u64,
}

impl Reserve {
    /// Reserve from these topics, one job, no waiting.
    pub fn new<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            topics: topics.into_iter().map(Into::into).collect(),
            max: 1,
            lease_ms: None,
            wait_ms: 0,
        }
    }

    /// Up to `max` jobs (1–1000).
    pub fn max(mut self, max: usize) -> Self {
        self.max = max;
        self
    }

    /// Lease length.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease_ms = Some(lease.as_millis() as u64);
        self
    }

    /// Wait up to this long (≤ 30 s) for a job to become due.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait_ms = wait.as_millis() as u64;
        self
    }
}

/// One ack of [`Client::ack_batch`].
#[derive(Debug, Clone, Serialize)]
pub struct Ack {
    /// Topic.
    pub topic: String,
    /// Id.
    pub id: String,
    /// Lease token.
    pub token: String,
}

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
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(64)
            .build()?;
        Ok(Self::with_http(base, http))
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

    /// Sends `Authorization: Bearer <token>` with every call: needed for
    /// changes when the server has `admin_token` set.
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
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: String,
        body: Option<&Value>,
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
        let body = serde_json::to_value(job).map_err(|e| Error::Decode(e.to_string()))?;
        let url = format!("{}/v1/topics/{}/jobs", self.base, encode_segment(topic));
        self.call(Method::POST, url, Some(&body), job.id.is_some())
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
        let body = json!({ "jobs": jobs });
        let url = format!(
            "{}/v1/topics/{}/jobs:batch",
            self.base,
            encode_segment(topic)
        );
        let all_ids = jobs.iter().all(|j| j.id.is_some());
        let v: Value = self.call(Method::POST, url, Some(&body), all_ids).await?;
        per_item(&v, |item| {
            serde_json::from_value::<Enqueued>(item.clone())
                .map_err(|e| Error::Decode(e.to_string()))
        })
    }

    /// Reads a job.
    ///
    /// # Errors
    /// [`Error::NotFound`] when there is no such job.
    pub async fn get(&self, topic: &str, id: &str) -> Result<Job> {
        self.call(Method::GET, self.job_url(topic, id, None), None, true)
            .await
    }

    /// Cancels a job in any state; returns the state it was in.
    ///
    /// # Errors
    /// [`Error::NotFound`] when there is no such job.
    pub async fn cancel(&self, topic: &str, id: &str) -> Result<JobState> {
        let v: Value = self
            .call(Method::DELETE, self.job_url(topic, id, None), None, false)
            .await?;
        serde_json::from_value(v["state"].clone()).map_err(|e| Error::Decode(e.to_string()))
    }

    /// Moves a waiting job to `due_at_ms`; returns the new due time.
    ///
    /// # Errors
    /// [`Error::NotInState`] when reserved or dead, [`Error::NotFound`].
    pub async fn reschedule(&self, topic: &str, id: &str, due_at_ms: u64) -> Result<u64> {
        let v: Value = self
            .call(
                Method::PATCH,
                self.job_url(topic, id, None),
                Some(&json!({"due_at_ms": due_at_ms})),
                true,
            )
            .await?;
        v["due_at_ms"]
            .as_u64()
            .ok_or_else(|| Error::Decode("no due_at_ms".into()))
    }

    /// Leases due jobs.
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::Unavailable`], [`Error::Transport`].
    pub async fn reserve(&self, req: &Reserve) -> Result<Vec<Leased>> {
        #[derive(Deserialize)]
        struct Reply {
            jobs: Vec<Leased>,
        }
        let body = serde_json::to_value(req).map_err(|e| Error::Decode(e.to_string()))?;
        let r: Reply = self
            .call(
                Method::POST,
                format!("{}/v1/reserve", self.base),
                Some(&body),
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
        let _: Value = self
            .call(
                Method::POST,
                self.job_url(topic, id, Some("ack")),
                Some(&json!({"token": token})),
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
        let v: Value = self
            .call(
                Method::POST,
                format!("{}/v1/ack:batch", self.base),
                Some(&json!({ "acks": acks })),
                false,
            )
            .await?;
        per_item(&v, |_| Ok(()))
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
        let mut body = json!({"token": token, "error": error});
        if let Some(r) = retry_in {
            body["retry_in_ms"] = json!(r.as_millis() as u64);
        }
        self.call(
            Method::POST,
            self.job_url(topic, id, Some("nack")),
            Some(&body),
            false,
        )
        .await
    }

    /// Sends the job to the dead letters at once (a permanent failure).
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub async fn bury(&self, topic: &str, id: &str, token: &str, error: &str) -> Result<()> {
        let _: Value = self
            .call(
                Method::POST,
                self.job_url(topic, id, Some("nack")),
                Some(&json!({"token": token, "error": error, "dead": true})),
                false,
            )
            .await?;
        Ok(())
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
        let v: Value = self
            .call(
                Method::POST,
                self.job_url(topic, id, Some("release")),
                Some(&json!({"token": token, "delay_ms": delay.as_millis() as u64})),
                false,
            )
            .await?;
        v["due_at_ms"]
            .as_u64()
            .ok_or_else(|| Error::Decode("no due_at_ms".into()))
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
        let mut body = json!({"token": token});
        if let Some(l) = lease {
            body["lease_ms"] = json!(l.as_millis() as u64);
        }
        let v: Value = self
            .call(
                Method::POST,
                self.job_url(topic, id, Some("touch")),
                Some(&body),
                true,
            )
            .await?;
        v["lease_deadline_ms"]
            .as_u64()
            .ok_or_else(|| Error::Decode("no lease_deadline_ms".into()))
    }

    /// Every topic with its counts.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn topics(&self) -> Result<Vec<TopicInfo>> {
        #[derive(Deserialize)]
        struct Reply {
            topics: Vec<TopicInfo>,
        }
        let r: Reply = self
            .call(Method::GET, format!("{}/v1/topics", self.base), None, true)
            .await?;
        Ok(r.topics)
    }

    /// One topic's settings and counts.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown topic.
    pub async fn topic(&self, topic: &str) -> Result<TopicInfo> {
        self.call(
            Method::GET,
            format!("{}/v1/topics/{}", self.base, encode_segment(topic)),
            None,
            true,
        )
        .await
    }

    /// Creates or updates a topic's settings; fields left out keep their value.
    ///
    /// # Errors
    /// [`Error::Invalid`] for settings out of range.
    pub async fn put_topic(&self, topic: &str, patch: &TopicConfigPatch) -> Result<TopicConfig> {
        let body = serde_json::to_value(patch).map_err(|e| Error::Decode(e.to_string()))?;
        let body = strip_nulls(body);
        let v: Value = self
            .call(
                Method::PUT,
                format!("{}/v1/topics/{}", self.base, encode_segment(topic)),
                Some(&body),
                true,
            )
            .await?;
        serde_json::from_value(v["config"].clone()).map_err(|e| Error::Decode(e.to_string()))
    }

    /// Deletes a topic and all its jobs; returns how many jobs.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown topic.
    pub async fn delete_topic(&self, topic: &str) -> Result<u64> {
        let v: Value = self
            .call(
                Method::DELETE,
                format!("{}/v1/topics/{}", self.base, encode_segment(topic)),
                None,
                false,
            )
            .await?;
        Ok(v["deleted_jobs"].as_u64().unwrap_or(0))
    }

    /// Dead letters, oldest first.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a limit outside 1–1000.
    pub async fn dead(&self, topic: &str, offset: usize, limit: usize) -> Result<Vec<Job>> {
        #[derive(Deserialize)]
        struct Reply {
            jobs: Vec<Job>,
        }
        let url = format!(
            "{}/v1/topics/{}/dead?offset={offset}&limit={limit}",
            self.base,
            encode_segment(topic)
        );
        let r: Reply = self.call(Method::GET, url, None, true).await?;
        Ok(r.jobs)
    }

    /// Replays dead letters (the ids given, or all); returns how many.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn replay_dead(&self, topic: &str, ids: Option<&[&str]>) -> Result<u64> {
        let body = match ids {
            Some(ids) => json!({ "ids": ids }),
            None => json!({}),
        };
        let v: Value = self
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
        Ok(v["replayed"].as_u64().unwrap_or(0))
    }

    /// Deletes all dead letters of a topic; returns how many.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn purge_dead(&self, topic: &str) -> Result<u64> {
        let v: Value = self
            .call(
                Method::DELETE,
                format!("{}/v1/topics/{}/dead", self.base, encode_segment(topic)),
                None,
                true,
            )
            .await?;
        Ok(v["purged"].as_u64().unwrap_or(0))
    }
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => other,
    }
}

/// Splits `{"results": [...]}` into per-item results.
fn per_item<T>(v: &Value, ok: impl Fn(&Value) -> Result<T>) -> Result<Vec<Result<T>>> {
    let items = v["results"]
        .as_array()
        .ok_or_else(|| Error::Decode("no results".into()))?;
    Ok(items
        .iter()
        .map(|item| {
            if item.get("error").is_some() {
                let status = match item["error"]["code"].as_str().unwrap_or("") {
                    "job_not_found" | "topic_not_found" => 404,
                    "lease_mismatch" | "not_in_state" => 409,
                    c if c.starts_with("store_") => 503,
                    _ => 400,
                };
                Err(Error::from_reply(status, item, None))
            } else {
                ok(item)
            }
        })
        .collect())
}
