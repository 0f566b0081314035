//! The typed HTTP client: [`Client`], how it is built, and the one call
//! path every request takes (authentication, retries of idempotent calls,
//! errors read from the reply). The calls themselves are `impl Client`
//! blocks, one file per resource of the API:
//!
//! - `jobs`: [`NewJob`]; enqueue (one, or a batch), get, cancel, reschedule.
//! - `leases`: [`Reserve`]; reserve, ack, nack, release, touch, and the
//!   batches of ack, nack and touch.
//! - `topics`: list, read, configure, delete.
//! - `dead`: dead letters: list, replay, purge.
//! - `export`: a topic's jobs listed for an export, and imported.
//! - `schedules`: put, list, read, pause or resume, delete.
//! - `keys`: API keys: create, list, revoke, rotate.
//! - `admin`: drain, readiness, backup.

mod admin;
mod dead;
mod export;
mod jobs;
mod keys;
mod leases;
mod schedules;
mod topics;

use std::time::Duration;

use dq_api as wire;
pub use dq_api::{Enqueued, Job, Leased, Nacked, RawJson, TopicInfo};
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use self::jobs::NewJob;
pub use self::leases::{Ack, NackItem, Reserve, TouchItem};
use crate::error::{Error, Result};

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
}

/// No request body.
const NONE: Option<&()> = None;

/// Milliseconds as the wire's signed fields carry them; beyond `i64::MAX`
/// (never a valid delay) the server refuses it with its own error.
fn wire_ms(ms: u128) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
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
