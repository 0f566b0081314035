//! Alerts: the HealthCheck and the conditions operators must hear about,
//! sent to webhook URLs (a JSON POST) and by e-mail (SMTP), once per
//! incident, never once per job:
//!
//! - `store_down` / `store_recovered`: the store stopped / started answering
//!   (pinged every `check_every`);
//! - `jobs_dead`: jobs of a topic went to the dead letters, aggregated: at
//!   most one alert per topic per `min_interval`, with the count;
//! - `dead_over_threshold`: a topic's dead letters reached the threshold;
//!   again only after it went back under.
//!
//! Each dq instance with alerts configured checks and alerts on its own:
//! configure alerts on one instance of a deployment. What a check reads is
//! bounded whatever the number of topics (see `TopicWatch`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::service::Service;

/// Where alerts go and when.
#[derive(Debug, Clone)]
pub struct AlertConfig {
    /// URLs that get each alert as a JSON POST.
    pub webhooks: Vec<String>,
    /// E-mail: `smtp://[user:pass@]host:port` (plain), `?tls=required` for
    /// STARTTLS, or `smtps://…`.
    pub smtp_url: Option<String>,
    /// Sender address.
    pub email_from: String,
    /// Recipients.
    pub email_to: Vec<String>,
    /// Dead letters per topic that raise `dead_over_threshold` (none: off).
    pub dead_threshold: Option<u64>,
    /// Least time between two `jobs_dead` alerts of one topic.
    pub min_interval: Duration,
    /// How often the store is pinged and topics are read.
    pub check_every: Duration,
}

impl Default for AlertConfig {
    fn default() -> Self {
        Self {
            webhooks: Vec::new(),
            smtp_url: None,
            email_from: "dq@localhost".into(),
            email_to: Vec::new(),
            dead_threshold: None,
            min_interval: Duration::from_secs(300),
            check_every: Duration::from_secs(5),
        }
    }
}

impl AlertConfig {
    /// Whether any channel is configured.
    pub fn enabled(&self) -> bool {
        !self.webhooks.is_empty() || (self.smtp_url.is_some() && !self.email_to.is_empty())
    }
}

/// One alert, as webhook receivers get it.
#[derive(Debug, Clone, Serialize)]
pub struct Alert {
    /// `store_down`, `store_recovered`, `jobs_dead`, `dead_over_threshold`.
    pub kind: &'static str,
    /// The topic, for topic alerts.
    pub topic: Option<String>,
    /// Jobs concerned (dead jobs since the last alert, or dead letters kept).
    pub count: Option<u64>,
    /// For a person.
    pub message: String,
    /// When, Unix ms.
    pub at_ms: u64,
}

/// Topics whose counts one round reads beside the ones jobs died in (see
/// [`TopicWatch`]).
const ROUND: usize = 500;

/// What the alert loop knows of the topics between rounds.
///
/// At start it reads every topic's counts (the baseline); after that each
/// round (every `check_every`) reads [`ROUND`] topics in turn, the topics
/// jobs died in through this instance (at once: [`crate::wakers::Wakers::died`]),
/// and those over the threshold, so a round costs the same with 100
/// topics or 100,000: deaths through this instance alert within a round,
/// deaths through other instances within a turn of the rotation
/// (`topics / 500 × check_every`: 5 s up to 500 topics, 17 min with
/// 100,000).
#[derive(Default)]
struct TopicWatch {
    baselined: bool,
    rotation: crate::dispatcher::Rotation,
    dead_seen: HashMap<String, u64>,
    pending: HashMap<String, u64>,
    last_sent: HashMap<String, Instant>,
    over: HashSet<String>,
}

/// The dead count last read of `name`: `Some(0)` for a topic first seen
/// after the baseline round (all its dead letters are news), `None` in the
/// baseline round.
fn dead_seen_before(w: &TopicWatch, name: &str) -> Option<u64> {
    match w.dead_seen.get(name) {
        Some(n) => Some(*n),
        None if w.baselined => Some(0),
        None => None,
    }
}

/// The alert loop (see the module docs).
pub struct Alerter {
    svc: Arc<Service>,
    cfg: AlertConfig,
    http: reqwest::Client,
}

impl Alerter {
    /// An alerter; sends nothing until [`Alerter::run`].
    ///
    /// # Panics
    /// When the HTTP client cannot be built (no TLS crypto provider installed).
    pub fn new(svc: Arc<Service>, cfg: AlertConfig) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("HTTP client for alerts");
        Self { svc, cfg, http }
    }

    /// Runs until `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        // Per part of the store (one per Redis shard): whether it answered.
        let mut up: HashMap<String, bool> = HashMap::new();
        let mut watch = TopicWatch::default();
        loop {
            let now_ms = self.svc.clock().now_ms();
            let health = tokio::time::timeout(Duration::from_secs(3), self.svc.health())
                .await
                .unwrap_or_else(|_| {
                    vec![(
                        "store".to_string(),
                        Err(dq_core::StoreError::Unavailable(
                            "health check timed out".into(),
                        )),
                    )]
                });
            let several = health.len() > 1;
            let mut ok = false;
            for (name, result) in health {
                ok |= result.is_ok();
                let was = up.insert(name.clone(), result.is_ok()).unwrap_or(true);
                if was == result.is_ok() {
                    continue;
                }
                let what = if several {
                    format!("Redis shard {name}")
                } else {
                    "the store".to_string()
                };
                let (kind, message) = match result {
                    Ok(()) => ("store_recovered", format!("{what} answers again")),
                    Err(e) => ("store_down", format!("{what} does not answer: {e}")),
                };
                self.send(Alert {
                    kind,
                    topic: None,
                    count: None,
                    message,
                    at_ms: now_ms,
                })
                .await;
            }
            if ok {
                self.check_topics(now_ms, &mut watch).await;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(self.cfg.check_every) => {}
            }
        }
    }

    /// Reads the counts of this round's topics (see [`TopicWatch`]) and
    /// sends what is due.
    async fn check_topics(&self, now_ms: u64, w: &mut TopicWatch) {
        let Some(round) = self.round(w).await else {
            return;
        };
        for t in round {
            let Ok(s) = self.svc.stats(&t).await else {
                continue;
            };
            let name = t.to_string();
            // The first reading of the topics at start is the baseline: old
            // dead letters are not news. A topic first seen later is new:
            // all its dead letters are.
            let before = dead_seen_before(w, &name);
            w.dead_seen.insert(name.clone(), s.counters.dead);
            if let Some(before) = before {
                let new = s.counters.dead.saturating_sub(before);
                if new > 0 {
                    *w.pending.entry(name.clone()).or_default() += new;
                }
            }
            if let Some(limit) = self.cfg.dead_threshold {
                if s.dead >= limit && w.over.insert(name.clone()) {
                    self.send(Alert {
                        kind: "dead_over_threshold",
                        topic: Some(name.clone()),
                        count: Some(s.dead),
                        message: format!(
                            "topic {name} keeps {} dead letters (threshold {limit})",
                            s.dead
                        ),
                        at_ms: now_ms,
                    })
                    .await;
                } else if s.dead < limit {
                    w.over.remove(&name);
                }
            }
        }
        let due: Vec<String> = w
            .pending
            .keys()
            .filter(|name| {
                w.last_sent
                    .get(*name)
                    .is_none_or(|at| at.elapsed() >= self.cfg.min_interval)
            })
            .cloned()
            .collect();
        w.baselined = true;
        for name in due {
            let Some(n) = w.pending.remove(&name).filter(|n| *n > 0) else {
                continue;
            };
            w.last_sent.insert(name.clone(), Instant::now());
            self.send(Alert {
                kind: "jobs_dead",
                topic: Some(name.clone()),
                count: Some(n),
                message: format!("{n} job(s) of topic {name} went to the dead letters"),
                at_ms: now_ms,
            })
            .await;
        }
    }

    /// This round's topics: every topic at start; then the next
    /// [`ROUND`] of the rotation, the topics jobs died in through this
    /// instance since the last round, and those over the threshold.
    /// `None` when the topics cannot be listed.
    async fn round(&self, w: &mut TopicWatch) -> Option<Vec<dq_core::Topic>> {
        if !w.baselined {
            let all = self.svc.topics().await.ok()?;
            w.rotation.finish(all.clone());
            return Some(all);
        }
        if w.rotation.at_end() {
            w.rotation.start(self.svc.topics().await.ok()?);
        }
        let mut round: Vec<dq_core::Topic> = w.rotation.next(ROUND).to_vec();
        round.extend(self.svc.wakers().take_died());
        round.extend(
            w.over
                .iter()
                .filter_map(|t| dq_core::Topic::new(t.clone()).ok()),
        );
        let mut seen = HashSet::new();
        round.retain(|t| seen.insert(t.clone()));
        Some(round)
    }

    async fn send(&self, alert: Alert) {
        tracing::warn!(target: "dq::alert", kind = alert.kind, topic = alert.topic.as_deref().unwrap_or(""), message = %alert.message, "alert");
        for url in &self.cfg.webhooks {
            match self.http.post(url).json(&alert).send().await {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => {
                    tracing::warn!(url = %url, status = r.status().as_u16(), "alert webhook refused the alert")
                }
                Err(e) => tracing::warn!(url = %url, error = %e, "alert webhook unreachable"),
            }
        }
        if let (Some(smtp), false) = (&self.cfg.smtp_url, self.cfg.email_to.is_empty())
            && let Err(e) = self.email(smtp, &alert).await
        {
            tracing::warn!(error = %e, "alert e-mail not sent");
        }
    }

    async fn email(&self, smtp: &str, alert: &Alert) -> Result<(), String> {
        use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
        let mut msg = Message::builder()
            .from(
                self.cfg
                    .email_from
                    .parse()
                    .map_err(|e| format!("email_from: {e}"))?,
            )
            .subject(format!("[dq] {}: {}", alert.kind, alert.message));
        for to in &self.cfg.email_to {
            msg = msg.to(to.parse().map_err(|e| format!("email_to {to:?}: {e}"))?);
        }
        let body = serde_json::to_string_pretty(alert).unwrap_or_default();
        let msg = msg
            .body(format!("{}\n\n{body}\n", alert.message))
            .map_err(|e| e.to_string())?;
        let mailer = AsyncSmtpTransport::<Tokio1Executor>::from_url(smtp)
            .map_err(|e| format!("smtp url: {e}"))?
            .timeout(Some(Duration::from_secs(10)))
            .build();
        mailer
            .send(msg)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
