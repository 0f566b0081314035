//! The Deliverer: for every push topic, reserves due jobs and calls the
//! topic's URL; a 2xx acks the job, 410 sends it to the dead letters at once,
//! anything else (timeout, connection error, 5xx, 429, other 4xx) is a failed
//! attempt retried with the topic's backoff, or after `Retry-After`.
//!
//! A job is acked only after its callback answered 2xx. Each topic has its
//! own task and concurrency limit, so a slow endpoint delays only its topic.
//! Requests are signed by the Standard Webhooks convention (`webhook-id`
//! stable across attempts, `webhook-timestamp`, `webhook-signature`).
//! One log line per attempt goes to the target `dq::delivery`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use dq_core::{Body, Delivery, Lease, Nack, PushConfig, PushMethod, Topic, TraceContext};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;
use crate::push_guard;
use crate::service::Service;

/// How often the set of push (and forwarding) topics is read again.
const REFRESH: Duration = Duration::from_secs(1);

/// Signs `{id}.{timestamp}.{body}` with each `whsec_` secret:
/// `v1,<base64 HMAC-SHA256>` values separated by spaces.
pub fn sign(secrets: &[String], msg_id: &str, timestamp: u64, body: &[u8]) -> String {
    let mut sigs = Vec::with_capacity(secrets.len());
    for s in secrets {
        let Some(key) = s.strip_prefix("whsec_").and_then(|k| B64.decode(k).ok()) else {
            continue;
        };
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&key) else {
            continue;
        };
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        sigs.push(format!("v1,{}", B64.encode(mac.finalize().into_bytes())));
    }
    sigs.join(" ")
}

/// See the module docs.
pub struct Deliverer {
    svc: Arc<Service>,
    metrics: Arc<Metrics>,
    http: reqwest::Client,
    tracker: TaskTracker,
}

impl Deliverer {
    /// A deliverer whose connections obey the service's push guard; each
    /// attempt's duration and outcome go to `metrics`.
    ///
    /// # Panics
    /// When the HTTP client cannot be built (no TLS crypto provider installed).
    pub fn new(svc: Arc<Service>, metrics: Arc<Metrics>, tracker: TaskTracker) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(push_guard::resolver(svc.push_guard()))
            .pool_max_idle_per_host(64)
            .user_agent(concat!("dq/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("HTTP client for push delivery");
        Self {
            svc,
            metrics,
            http,
            tracker,
        }
    }

    /// Runs until `cancel` fires; deliveries in flight are tracked by the
    /// tracker given to [`Deliverer::new`].
    pub async fn run(self, cancel: CancellationToken) {
        let pick = |d: Delivery| match d {
            Delivery::Push(p) => Some(p),
            _ => None,
        };
        per_topic(&self.svc, &cancel, "push", pick, |topic, cfg, stop| {
            let task = TopicDelivery {
                svc: self.svc.clone(),
                metrics: self.metrics.clone(),
                http: self.http.clone(),
                topic,
                cfg,
                tracker: self.tracker.clone(),
            };
            tokio::spawn(task.run(stop));
        })
        .await;
    }
}

/// Keeps one task per topic dq delivers in one way (push, forwarding)
/// until `cancel` fires: `pick` gives a topic's settings for that way,
/// `spawn` starts its task with a token that stops it. The topics are read
/// every [`REFRESH`] and when settings change here; a topic whose settings
/// changed gets a new task, one no longer delivered that way is stopped.
pub(crate) async fn per_topic<C, P, S>(
    svc: &Service,
    cancel: &CancellationToken,
    what: &str,
    pick: P,
    mut spawn: S,
) where
    C: PartialEq + Clone,
    P: Fn(Delivery) -> Option<C>,
    S: FnMut(Topic, C, CancellationToken),
{
    let mut topics: HashMap<Topic, (C, CancellationToken)> = HashMap::new();
    loop {
        match svc.delivered_topics().await {
            Ok(now) => {
                let now: HashMap<Topic, C> = now
                    .into_iter()
                    .filter_map(|(t, d)| pick(d).map(|c| (t, c)))
                    .collect();
                topics.retain(|t, (cfg, stop)| {
                    let keep = now.get(t) == Some(cfg);
                    if !keep {
                        stop.cancel();
                    }
                    keep
                });
                for (t, cfg) in now {
                    if topics.contains_key(&t) {
                        continue;
                    }
                    let stop = cancel.child_token();
                    spawn(t.clone(), cfg.clone(), stop.clone());
                    topics.insert(t, (cfg, stop));
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the {what} topics"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(REFRESH) => {}
            _ = svc.topics_changed().notified() => {}
        }
    }
}

struct TopicDelivery {
    svc: Arc<Service>,
    metrics: Arc<Metrics>,
    http: reqwest::Client,
    topic: Topic,
    cfg: PushConfig,
    tracker: TaskTracker,
}

impl TopicDelivery {
    async fn run(self, stop: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.cfg.concurrency as usize));
        // The lease outlasts the request: a job is not handed out again
        // while its callback may still be answering.
        let lease_ms = self.cfg.timeout_ms + 5_000;
        let this = Arc::new(self);
        let mut failures = 0u32;
        while !stop.is_cancelled() && !this.svc.is_draining() {
            let free = slots.available_permits();
            if free == 0 {
                tokio::select! {
                    p = slots.acquire() => drop(p),
                    _ = stop.cancelled() => return,
                }
                continue;
            }
            // Not dropped midway when the topic's settings change (its
            // leases would be lost for their whole length): it waits at most
            // a second, and what it got then goes back unattempted.
            // A claim counts as in flight: a drain waits for what it gets.
            let _claim = this.tracker.token();
            let leases = this
                .svc
                .reserve_delivered(&this.topic, free, lease_ms, 1000)
                .await;
            if stop.is_cancelled() || this.svc.is_draining() {
                if let Ok(l) = leases {
                    this.svc.give_back(&l).await;
                }
                return;
            }
            let leases = match leases {
                Ok(l) => {
                    failures = 0;
                    l
                }
                Err(crate::service::Error::Draining | crate::service::Error::ShuttingDown) => {
                    return;
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(topic = %this.topic, error = %e, "push topic cannot reserve jobs");
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            for lease in leases {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    return;
                };
                let this = this.clone();
                this.clone().tracker.spawn(async move {
                    let in_flight = this.metrics.delivering();
                    this.deliver(lease).await;
                    drop(in_flight);
                    drop(permit);
                });
            }
        }
    }

    async fn deliver(&self, lease: Lease) {
        let started = Instant::now();
        let msg_id = format!("{}/{}", lease.topic, lease.id);
        let ts = self.svc.clock().now_ms() / 1000;
        let (body, content_type): (Vec<u8>, &str) = match &lease.body {
            Body::Json(s) => (s.as_bytes().to_vec(), "application/json"),
            Body::Bytes(b) => (b.clone(), "application/octet-stream"),
        };
        let mut req = match self.cfg.method {
            PushMethod::Post => self
                .http
                .post(&self.cfg.url)
                .header("content-type", content_type)
                .body(body.clone()),
            PushMethod::Get => {
                let mut url = match reqwest::Url::parse(&self.cfg.url) {
                    Ok(u) => u,
                    Err(e) => {
                        tracing::error!(topic = %lease.topic, error = %e, "invalid callback url");
                        return;
                    }
                };
                url.query_pairs_mut()
                    .append_pair("topic", lease.topic.as_str())
                    .append_pair("id", lease.id.as_str())
                    .append_pair("attempt", &lease.attempt.to_string());
                self.http.get(url)
            }
        };
        let signed: &[u8] = if self.cfg.method == PushMethod::Post {
            &body
        } else {
            b""
        };
        req = req
            .timeout(Duration::from_millis(self.cfg.timeout_ms))
            .header("dq-topic", lease.topic.as_str())
            .header("dq-job-id", lease.id.as_str())
            .header("dq-attempt", lease.attempt.to_string())
            .header("dq-due-at", lease.due_at_ms.to_string())
            .header("webhook-id", &msg_id)
            .header("webhook-timestamp", ts.to_string());
        // The trace the job was enqueued in goes on in the callee: under
        // this attempt's span when spans are exported.
        let span = self.svc.spans().push_starts(&lease);
        if let Some(trace) = span.as_ref().map(|s| &s.header).or(lease.trace.as_ref()) {
            req = req.header("traceparent", trace.traceparent());
            if let Some(state) = trace.tracestate() {
                req = req.header("tracestate", state);
            }
        }
        if !self.cfg.secrets.is_empty() {
            req = req.header(
                "webhook-signature",
                sign(&self.cfg.secrets, &msg_id, ts, signed),
            );
        }
        for (k, v) in &self.cfg.headers {
            req = req.header(k, v);
        }
        let result = self.guarded(req).await;
        let took = started.elapsed();
        let took_ms = took.as_millis() as u64;
        if let Some(span) = span {
            let (status, error) = match &result {
                Ok((status, _)) => (Some(*status), None),
                Err(e) => (None, Some(e.as_str())),
            };
            self.svc.spans().pushed(span, &lease, status, error);
        }
        let (t, id, token) = (&lease.topic, &lease.id, lease.token.as_str());
        let svc = &self.svc;
        let outcome = match &result {
            Ok((status, _)) if (200..300).contains(status) => {
                svc.ack(t, id, token).await.map(|_| "acked")
            }
            Ok((410, _)) => svc
                .nack(t, id, Nack::dead(token, "callback answered 410 Gone"))
                .await
                .map(|_| "dead"),
            Ok((status, retry_after)) => svc
                .nack(
                    t,
                    id,
                    Nack::retry(token, &format!("callback answered HTTP {status}"))
                        .retry_in_opt(*retry_after),
                )
                .await
                .map(nack_outcome),
            Err(e) => svc
                .nack(t, id, Nack::retry(token, e))
                .await
                .map(nack_outcome),
        };
        let outcome = outcome.unwrap_or_else(|e| {
            tracing::warn!(topic = %t, id = %id, error = %e, "cannot record the delivery's outcome; the job comes back after its lease");
            "unrecorded"
        });
        self.metrics.observe_push(t.as_str(), outcome, took);
        let trace_id = lease.trace.as_ref().map(TraceContext::trace_id);
        match &result {
            Ok((status, _)) => {
                tracing::info!(target: "dq::delivery", topic = %t, id = %id, attempt = lease.attempt, status, took_ms, outcome, trace_id)
            }
            Err(e) => {
                tracing::info!(target: "dq::delivery", topic = %t, id = %id, attempt = lease.attempt, error = %e, took_ms, outcome, trace_id)
            }
        }
    }

    /// Sends after checking an IP-literal host (names are checked by the
    /// client's resolver). Returns the status and a Retry-After in ms.
    async fn guarded(&self, req: reqwest::RequestBuilder) -> Result<(u16, Option<u64>), String> {
        let req = req.build().map_err(|e| format!("invalid request: {e}"))?;
        if let Some(host) = req.url().host_str()
            && host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok()
        {
            let port = req.url().port_or_known_default().unwrap_or(80);
            self.svc.push_guard().check_host(host, port).await?;
        }
        let res = self.http.execute(req).await.map_err(|e| {
            if e.is_timeout() {
                format!("callback timed out after {} ms", self.cfg.timeout_ms)
            } else {
                format!("callback unreachable: {}", root_cause(&e))
            }
        })?;
        let status = res.status().as_u16();
        let retry_after = res
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| s.min(86_400) * 1000);
        Ok((status, retry_after))
    }
}

/// A failed attempt's outcome label: `dead` when it was the last.
fn nack_outcome(o: dq_core::NackOutcome) -> &'static str {
    match o {
        dq_core::NackOutcome::Retry { .. } => "retry",
        dq_core::NackOutcome::Dead { .. } => "dead",
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification.
    #[test]
    fn signature_matches_the_specification_example() {
        let sig = sign(
            &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let two = sign(
            &[
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
                "whsec_AAAAAAAAAAAAAAAAAAAAAAAA".into(),
            ],
            "m",
            1,
            b"x",
        );
        assert_eq!(two.split(' ').count(), 2, "one signature per secret");
    }
}
