//! Per-topic settings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::flow::RateLimit;
use crate::forward::{ListTarget, StreamTarget, Target};
use crate::limits::{self, InvalidInput, Limits};
use crate::retry::RetryPolicy;

/// How jobs of a topic reach consumers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase", deny_unknown_fields)]
pub enum Delivery {
    /// Consumers reserve jobs and ack them. (A struct without fields, not a
    /// unit: serde refuses an unknown field beside `"mode": "pull"` only
    /// in a struct.) The default.
    Pull {},
    /// dq calls a URL when each job is due; a 2xx acks it.
    Push(PushConfig),
    /// dq writes each job into a Redis Stream when it is due, then acks it
    /// (see [`crate::forward`]).
    #[serde(rename = "redis_stream")]
    RedisStream(StreamTarget),
    /// dq pushes each job onto a Redis list when it is due, then acks it.
    #[serde(rename = "redis_list")]
    RedisList(ListTarget),
}

impl Default for Delivery {
    fn default() -> Self {
        Delivery::Pull {}
    }
}

impl Delivery {
    /// The forwarding target of a `redis_stream` or `redis_list` topic.
    pub fn target(&self) -> Option<Target<'_>> {
        match self {
            Delivery::RedisStream(s) => Some(Target::Stream(s)),
            Delivery::RedisList(l) => Some(Target::List(l)),
            Delivery::Pull {} | Delivery::Push(_) => None,
        }
    }

    /// Whether dq itself hands the jobs out (push or forwarding), so
    /// consumers may not reserve them.
    pub fn is_delivered_by_dq(&self) -> bool {
        !matches!(self, Delivery::Pull {})
    }

    /// The mode's name on the wire: `pull`, `push`, `redis_stream`, `redis_list`.
    pub fn mode(&self) -> &'static str {
        match self {
            Delivery::Pull {} => "pull",
            Delivery::Push(_) => "push",
            Delivery::RedisStream(_) => "redis_stream",
            Delivery::RedisList(_) => "redis_list",
        }
    }

    /// A copy fit to show: credentials redacted.
    pub fn redacted(&self) -> Delivery {
        match self {
            Delivery::Pull {} => Delivery::Pull {},
            Delivery::Push(p) => Delivery::Push(p.redacted()),
            Delivery::RedisStream(s) => Delivery::RedisStream(s.redacted()),
            Delivery::RedisList(l) => Delivery::RedisList(l.redacted()),
        }
    }
}

/// HTTP method of push deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PushMethod {
    /// The body is the job's body.
    #[default]
    Post,
    /// No body; topic, id and attempt go in the query string.
    Get,
}

/// Where and how push deliveries go.
///
/// Its `secrets` and header values are credentials: they are write-only.
/// Replies and logs show [`PushConfig::redacted`] (its `Debug` is redacted
/// too, so `?cfg` in a log line is safe); only the store and the deliverer
/// see the values themselves.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushConfig {
    /// The callback URL (http or https).
    pub url: String,
    /// POST (default) or GET.
    #[serde(default)]
    pub method: PushMethod,
    /// Longest wait for the answer, in ms (default [`PUSH_TIMEOUT_MS`]).
    #[serde(default = "default_push_timeout")]
    pub timeout_ms: u64,
    /// Extra request headers.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Most deliveries of this topic in flight at once (default
    /// [`PUSH_CONCURRENCY`]).
    #[serde(default = "default_push_concurrency")]
    pub concurrency: u32,
    /// Standard Webhooks signing secrets (`whsec_…`); several during a
    /// rotation, each signs every request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
}

/// What replies and logs show of a credential: `…` and its last 4
/// characters when it is long enough that these give little away (16 or
/// more), else `…` alone. `…` is not visible ASCII, so a redacted copy sent
/// back as a header value or secret is refused, never stored.
pub fn redact(value: &str) -> String {
    let n = value.chars().count();
    if n >= 16 {
        let tail: String = value.chars().skip(n - 4).collect();
        format!("…{tail}")
    } else {
        "…".to_string()
    }
}

/// A signing secret as replies show it: `whsec_…a1b2`.
fn redact_secret(secret: &str) -> String {
    match secret.strip_prefix("whsec_") {
        Some(rest) => format!("whsec_{}", redact(rest)),
        None => redact(secret),
    }
}

impl std::fmt::Debug for PushConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.redacted();
        f.debug_struct("PushConfig")
            .field("url", &r.url)
            .field("method", &r.method)
            .field("timeout_ms", &r.timeout_ms)
            .field("headers", &r.headers)
            .field("concurrency", &r.concurrency)
            .field("secrets", &r.secrets)
            .finish()
    }
}

/// A push topic's answer timeout when its settings name none (ms).
pub const PUSH_TIMEOUT_MS: u64 = 3000;

/// A push topic's deliveries in flight at once when its settings name none.
pub const PUSH_CONCURRENCY: u32 = 16;

fn default_push_timeout() -> u64 {
    PUSH_TIMEOUT_MS
}

fn default_push_concurrency() -> u32 {
    PUSH_CONCURRENCY
}

impl PushConfig {
    /// A copy fit to show: every header value and secret replaced by
    /// [`redact`] (`whsec_…a1b2`; as many secrets as there are).
    pub fn redacted(&self) -> PushConfig {
        PushConfig {
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), redact(v)))
                .collect(),
            secrets: self.secrets.iter().map(|s| redact_secret(s)).collect(),
            ..self.clone()
        }
    }

    /// Checks the fields that can be checked without the network.
    ///
    /// # Errors
    /// `invalid_callback` naming the field.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        let bad = |m: String| Err(InvalidInput::new("invalid_callback", m));
        let rest = match self.url.split_once("://") {
            Some(("http" | "https", rest)) if !rest.is_empty() => rest,
            _ => {
                return bad(format!(
                    "url must be http:// or https://, got {:?}",
                    self.url
                ));
            }
        };
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        if host.is_empty() || host.contains('@') {
            return bad("url needs a host and no user info".into());
        }
        if self.url.len() > 2048
            || self
                .url
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return bad("url must be at most 2048 characters without spaces".into());
        }
        if !(100..=60_000).contains(&self.timeout_ms) {
            return bad(format!(
                "timeout_ms must be between 100 and 60000, got {}",
                self.timeout_ms
            ));
        }
        if !(1..=1000).contains(&self.concurrency) {
            return bad(format!(
                "concurrency must be between 1 and 1000, got {}",
                self.concurrency
            ));
        }
        for (k, v) in &self.headers {
            let token = !k.is_empty()
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return bad(format!("header {k:?} is not a valid header name"));
            }
            // What an HTTP client can send: visible ASCII, spaces and tabs.
            if v.contains('…') {
                return bad(format!(
                    "header {k:?}: its value is a redacted copy (values are never shown); send the value itself"
                ));
            }
            if !v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)) {
                return bad(format!(
                    "header {k:?}: the value must be visible ASCII, spaces and tabs"
                ));
            }
        }
        if self.secrets.len() > 5 {
            return bad("at most 5 secrets".into());
        }
        for sec in &self.secrets {
            let ok = sec.strip_prefix("whsec_").is_some_and(|b| {
                b.len() >= 16
                    && b.bytes()
                        .all(|c| c.is_ascii_alphanumeric() || b"+/=".contains(&c))
            });
            if !ok {
                let why = if sec.contains('…') {
                    " (this one is a redacted copy: secrets are never shown, send the secret itself)"
                } else {
                    ""
                };
                return bad(format!(
                    "each secret must be whsec_ followed by base64 (at least 16 characters){why}"
                ));
            }
        }
        Ok(())
    }
}

/// What happens to a job whose expiry passes before it is handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnExpiry {
    /// It goes dead, its last error `expired` (it can be seen and replayed).
    #[default]
    Dead,
    /// It is deleted.
    Drop,
}

impl OnExpiry {
    /// The name on the wire and in the stores: `dead`, `drop`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExpiry::Dead => "dead",
            OnExpiry::Drop => "drop",
        }
    }

    /// Reads [`OnExpiry::as_str`] back; anything else is the default.
    pub fn decode(s: &str) -> Self {
        if s == "drop" {
            OnExpiry::Drop
        } else {
            OnExpiry::Dead
        }
    }
}

/// A topic's settings. Jobs may override `max_attempts`, `lease_ms` and `retry`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicConfig {
    /// Hand-outs before a job goes dead.
    pub max_attempts: u32,
    /// Lease length when the reserve call names none.
    pub lease_ms: u64,
    /// Dead letters kept; the oldest are dropped beyond this.
    pub dead_cap: u64,
    /// Delay of a job enqueued with neither `delay_ms` nor `due_at_ms`.
    pub default_delay_ms: u64,
    /// Wait between failed attempts.
    pub retry: RetryPolicy,
    /// How jobs reach consumers.
    pub delivery: Delivery,
    /// How many independent parts the topic is split into (Redis only: each
    /// is its own hash slot, so on a Cluster or over shards a hot topic
    /// spreads over nodes). Order holds within a partition.
    #[serde(default = "one")]
    pub partitions: u32,
    /// Dedup window of the topic's jobs that name none ([`crate::NewJob::dedup_ms`]):
    /// for this long after a job ended (acked, cancelled, dead) its id is
    /// refused as a duplicate. 0: no window.
    #[serde(default)]
    pub dedup_ms: u64,
    /// Whether every hand-out (pull reserve, push and forwarding delivery)
    /// is held, on every instance, while enqueues go on. Unlike the timed
    /// pause of beanstalkd's `pause-tube` ([`crate::TopicStats::paused_until_ms`]),
    /// it lasts until resumed.
    #[serde(default)]
    pub paused: bool,
    /// At most this many hand-outs per window, counted by the store across
    /// every instance and every kind of hand-out; `None`: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// At most this many unexpired leases at a time of jobs with one
    /// [`crate::NewJob::key`], counted by the store across every instance
    /// and every kind of hand-out; a key at its limit waits while the
    /// topic's other keys go on. `None`: no limit per key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_concurrency: Option<u32>,
    /// A rate limit of its own for each key (the same shape as
    /// [`TopicConfig::rate_limit`], one bucket per key); `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_rate_limit: Option<RateLimit>,
    /// The expiry of the topic's jobs that name none of their own
    /// ([`crate::NewJob::expires`]), counted from the job's due time at
    /// enqueue: a job still not handed out this long after it was first due
    /// is never handed out. 0: none.
    #[serde(default)]
    pub expires_ms: u64,
    /// What becomes of an expired job: dead (the default) or dropped.
    #[serde(default)]
    pub on_expiry: OnExpiry,
}

/// Largest `key_concurrency`.
pub const MAX_KEY_CONCURRENCY: u32 = 100_000;

fn one() -> u32 {
    1
}

/// Most partitions a topic may have.
pub const MAX_PARTITIONS: u32 = 256;

impl TopicConfig {
    /// A copy fit to show in a reply or a log line (push credentials and
    /// forwarding passwords redacted, see [`Delivery::redacted`]).
    pub fn redacted(&self) -> TopicConfig {
        TopicConfig {
            delivery: self.delivery.redacted(),
            ..self.clone()
        }
    }
}

impl Default for TopicConfig {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            lease_ms: 30_000,
            dead_cap: 10_000,
            default_delay_ms: 0,
            retry: RetryPolicy::default(),
            delivery: Delivery::Pull {},
            partitions: 1,
            dedup_ms: 0,
            paused: false,
            rate_limit: None,
            key_concurrency: None,
            key_rate_limit: None,
            expires_ms: 0,
            on_expiry: OnExpiry::Dead,
        }
    }
}

/// Most dead letters a topic may keep.
pub const MAX_DEAD_CAP: u64 = 10_000_000;

/// `max_attempts` of a topic dq delivers (push or forwarding) that sets none.
pub const DELIVERED_MAX_ATTEMPTS: u32 = 10;

/// The retry waits of a topic dq delivers that sets none: 1, 3, 5, … 19
/// minutes — a callback or a target Redis that is down is usually down for
/// minutes, not for the pull default's seconds.
pub fn delivered_retry() -> RetryPolicy {
    RetryPolicy::DelaysMs((0..10).map(|n| (2 * n + 1) * 60_000).collect())
}

/// Where a setting in effect comes from ([`TopicConfig::sources`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettingSource {
    /// The default for the topic's delivery mode (a value set equal to it
    /// reads the same: it behaves the same).
    Default,
    /// Set for this topic, to something else than that default.
    Set,
}

impl TopicConfig {
    /// The settings a topic of `delivery`'s mode has when nothing is set:
    /// the defaults, with a delivered topic's retries and attempts
    /// ([`delivered_retry`], [`DELIVERED_MAX_ATTEMPTS`]).
    pub fn defaults_for(delivery: &Delivery) -> Self {
        let mut d = Self {
            delivery: delivery.clone(),
            ..Self::default()
        };
        if delivery.is_delivered_by_dq() {
            d.retry = delivered_retry();
            d.max_attempts = DELIVERED_MAX_ATTEMPTS;
        }
        d
    }

    /// For each setting (by its name on the wire), whether it is the
    /// default for this topic's delivery mode or set: what `GET
    /// /v1/topics/{topic}` answers as `config_sources`, and the CLI and the
    /// admin page show beside each value. `delivery` is `default` for pull.
    pub fn sources(&self) -> BTreeMap<&'static str, SettingSource> {
        let d = Self::defaults_for(&self.delivery);
        let from = |same: bool| {
            if same {
                SettingSource::Default
            } else {
                SettingSource::Set
            }
        };
        BTreeMap::from([
            ("max_attempts", from(self.max_attempts == d.max_attempts)),
            ("lease_ms", from(self.lease_ms == d.lease_ms)),
            ("dead_cap", from(self.dead_cap == d.dead_cap)),
            (
                "default_delay_ms",
                from(self.default_delay_ms == d.default_delay_ms),
            ),
            ("retry", from(self.retry == d.retry)),
            ("delivery", from(!self.delivery.is_delivered_by_dq())),
            ("partitions", from(self.partitions == d.partitions)),
            ("dedup_ms", from(self.dedup_ms == d.dedup_ms)),
            ("paused", from(self.paused == d.paused)),
            ("rate_limit", from(self.rate_limit == d.rate_limit)),
            (
                "key_concurrency",
                from(self.key_concurrency == d.key_concurrency),
            ),
            (
                "key_rate_limit",
                from(self.key_rate_limit == d.key_rate_limit),
            ),
            ("expires_ms", from(self.expires_ms == d.expires_ms)),
            ("on_expiry", from(self.on_expiry == d.on_expiry)),
        ])
    }
}

/// A partial update of a [`TopicConfig`]: fields left out keep their value.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicConfigPatch {
    /// See [`TopicConfig::max_attempts`].
    pub max_attempts: Option<u32>,
    /// See [`TopicConfig::lease_ms`].
    pub lease_ms: Option<u64>,
    /// See [`TopicConfig::dead_cap`].
    pub dead_cap: Option<u64>,
    /// See [`TopicConfig::default_delay_ms`].
    pub default_delay_ms: Option<u64>,
    /// See [`TopicConfig::retry`].
    pub retry: Option<RetryPolicy>,
    /// See [`TopicConfig::delivery`].
    pub delivery: Option<Delivery>,
    /// See [`TopicConfig::partitions`]. Changes only while the topic holds
    /// no jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
    /// See [`TopicConfig::dedup_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_ms: Option<u64>,
    /// See [`TopicConfig::paused`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// See [`TopicConfig::rate_limit`]; `Some(None)` (JSON `null`) removes
    /// the limit. Setting one starts with a full bucket.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_or_null"
    )]
    pub rate_limit: Option<Option<RateLimit>>,
    /// See [`TopicConfig::key_concurrency`]; `Some(None)` (JSON `null`)
    /// removes the limit.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_or_null"
    )]
    pub key_concurrency: Option<Option<u32>>,
    /// See [`TopicConfig::key_rate_limit`]; `Some(None)` (JSON `null`)
    /// removes it. Setting one starts every key with a full bucket.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_or_null"
    )]
    pub key_rate_limit: Option<Option<RateLimit>>,
    /// See [`TopicConfig::expires_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
    /// See [`TopicConfig::on_expiry`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_expiry: Option<OnExpiry>,
}

/// A field that may be given as a value, given as `null` (`Some(None)`), or
/// left out (`None`, through `#[serde(default)]`).
fn some_or_null<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl TopicConfigPatch {
    /// Checks every field given.
    ///
    /// # Errors
    /// The first field out of bounds, with its own code.
    pub fn validate(&self, limits: &Limits) -> Result<(), InvalidInput> {
        if let Some(n) = self.max_attempts {
            limits::check_max_attempts(n)?;
        }
        if let Some(ms) = self.lease_ms {
            limits::check_lease(ms)?;
        }
        if let Some(cap) = self.dead_cap
            && cap > MAX_DEAD_CAP
        {
            return Err(InvalidInput::new(
                "invalid_dead_cap",
                format!("dead_cap must be at most {MAX_DEAD_CAP}, got {cap}"),
            ));
        }
        if let Some(ms) = self.default_delay_ms {
            limits.check_delay(ms)?;
        }
        if let Some(r) = &self.retry {
            r.validate()?;
        }
        match &self.delivery {
            Some(Delivery::Push(p)) => p.validate()?,
            Some(Delivery::RedisStream(s)) => s.validate()?,
            Some(Delivery::RedisList(l)) => l.validate()?,
            Some(Delivery::Pull {}) | None => {}
        }
        if let Some(ms) = self.dedup_ms {
            limits::check_dedup(ms)?;
        }
        if let Some(Some(r)) = &self.rate_limit {
            r.validate("rate_limit")?;
        }
        if let Some(Some(r)) = &self.key_rate_limit {
            r.validate("key_rate_limit")?;
        }
        if let Some(Some(n)) = self.key_concurrency
            && !(1..=MAX_KEY_CONCURRENCY).contains(&n)
        {
            return Err(InvalidInput::new(
                "invalid_key_concurrency",
                format!("key_concurrency must be 1-{MAX_KEY_CONCURRENCY}, got {n}"),
            ));
        }
        if let Some(ms) = self.expires_ms
            && ms > limits.max_delay_ms
        {
            return Err(InvalidInput::new(
                "invalid_expiry",
                format!(
                    "expires_ms of {} is over the limit of {} (max_delay)",
                    limits::human_ms(ms),
                    limits::human_ms(limits.max_delay_ms)
                ),
            ));
        }
        if let Some(n) = self.partitions
            && !(1..=MAX_PARTITIONS).contains(&n)
        {
            return Err(InvalidInput::new(
                "invalid_partitions",
                format!("partitions must be 1-{MAX_PARTITIONS}, got {n}"),
            ));
        }
        Ok(())
    }

    /// This patch with a delivered topic's defaults filled in: a topic
    /// turned to push or to forwarding (`current` is its settings before the
    /// patch) that
    /// has no retry settings of its own, in the patch or from before, gets
    /// retries after 1, 3, 5, … 19 minutes and 10 attempts — a callback or a
    /// target Redis that is down is usually down for minutes, not for the
    /// pull default's seconds.
    pub fn with_delivered_defaults(mut self, current: &TopicConfig) -> Self {
        if !self
            .delivery
            .as_ref()
            .is_some_and(Delivery::is_delivered_by_dq)
        {
            return self;
        }
        let defaults = TopicConfig::default();
        if self.retry.is_none() && current.retry == defaults.retry {
            self.retry = Some(delivered_retry());
        }
        if self.max_attempts.is_none() && current.max_attempts == defaults.max_attempts {
            self.max_attempts = Some(DELIVERED_MAX_ATTEMPTS);
        }
        self
    }

    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// `base` with this patch's fields laid over it.
    pub fn apply(&self, mut base: TopicConfig) -> TopicConfig {
        if let Some(v) = self.max_attempts {
            base.max_attempts = v;
        }
        if let Some(v) = self.lease_ms {
            base.lease_ms = v;
        }
        if let Some(v) = self.dead_cap {
            base.dead_cap = v;
        }
        if let Some(v) = self.default_delay_ms {
            base.default_delay_ms = v;
        }
        if let Some(v) = &self.retry {
            base.retry = v.clone();
        }
        if let Some(v) = &self.delivery {
            base.delivery = v.clone();
        }
        if let Some(v) = self.partitions {
            base.partitions = v;
        }
        if let Some(v) = self.dedup_ms {
            base.dedup_ms = v;
        }
        if let Some(v) = self.paused {
            base.paused = v;
        }
        if let Some(v) = self.rate_limit {
            base.rate_limit = v;
        }
        if let Some(v) = self.key_concurrency {
            base.key_concurrency = v;
        }
        if let Some(v) = self.key_rate_limit {
            base.key_rate_limit = v;
        }
        if let Some(v) = self.expires_ms {
            base.expires_ms = v;
        }
        if let Some(v) = self.on_expiry {
            base.on_expiry = v;
        }
        base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_says_where_it_comes_from() {
        // Every field on the wire has a source (a new setting must be added
        // to `sources`): the options set, so none is left out.
        let mut all = TopicConfig {
            rate_limit: Some(RateLimit {
                limit: 1,
                per_ms: 1000,
                burst: 1,
            }),
            key_concurrency: Some(1),
            key_rate_limit: Some(RateLimit {
                limit: 1,
                per_ms: 1000,
                burst: 1,
            }),
            ..TopicConfig::default()
        };
        let wire = serde_json::to_value(&all).unwrap();
        let names: std::collections::BTreeSet<&str> = wire
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let sources = all.sources();
        assert_eq!(names, sources.keys().copied().collect());
        assert!(
            TopicConfig::default()
                .sources()
                .values()
                .all(|s| *s == SettingSource::Default)
        );

        // A topic turned to push takes the delivered defaults: still
        // "default" for its mode; the pull default's waits are "set" there.
        let push = Delivery::Push(PushConfig {
            url: "https://example.com/hook".into(),
            method: PushMethod::Post,
            timeout_ms: PUSH_TIMEOUT_MS,
            headers: Default::default(),
            concurrency: PUSH_CONCURRENCY,
            secrets: Vec::new(),
        });
        let pushed = TopicConfigPatch {
            delivery: Some(push.clone()),
            ..TopicConfigPatch::default()
        }
        .with_delivered_defaults(&TopicConfig::default())
        .apply(TopicConfig::default());
        let s = pushed.sources();
        assert_eq!(s["max_attempts"], SettingSource::Default);
        assert_eq!(s["retry"], SettingSource::Default);
        assert_eq!(s["delivery"], SettingSource::Set);
        assert_eq!(pushed.max_attempts, DELIVERED_MAX_ATTEMPTS);
        all.delivery = push;
        all.max_attempts = 5;
        let s = all.sources();
        assert_eq!(
            (s["max_attempts"], s["retry"]),
            (SettingSource::Set, SettingSource::Set)
        );
        assert_eq!(s["rate_limit"], SettingSource::Set);
        assert_eq!(s["lease_ms"], SettingSource::Default);
    }

    #[test]
    fn patch_keeps_unnamed_fields() {
        let p: TopicConfigPatch = serde_json::from_str(r#"{"max_attempts": 3}"#).unwrap();
        let c = p.apply(TopicConfig::default());
        assert_eq!(c.max_attempts, 3);
        assert_eq!(c.lease_ms, 30_000);
    }

    #[test]
    fn rate_limit_is_set_kept_and_removed() {
        let p: TopicConfigPatch =
            serde_json::from_str(r#"{"rate_limit": {"limit": 5, "per_ms": 1000}, "paused": true}"#)
                .unwrap();
        let c = p.apply(TopicConfig::default());
        assert!(c.paused);
        assert_eq!(c.rate_limit.map(|r| (r.limit, r.burst)), Some((5, 5)));
        let kept = TopicConfigPatch::default().apply(c.clone());
        assert_eq!(kept.rate_limit, c.rate_limit);
        let off: TopicConfigPatch = serde_json::from_str(r#"{"rate_limit": null}"#).unwrap();
        assert_eq!(off.rate_limit, Some(None));
        assert_eq!(off.apply(c).rate_limit, None);
        let bad: TopicConfigPatch =
            serde_json::from_str(r#"{"rate_limit": {"limit": 5, "per_ms": 0}}"#).unwrap();
        assert_eq!(
            bad.validate(&Limits::default()).unwrap_err().code,
            "invalid_rate_limit"
        );
    }

    #[test]
    fn expiry_settings_are_set_bounded_and_kept() {
        let p: TopicConfigPatch =
            serde_json::from_str(r#"{"expires_ms": 60000, "on_expiry": "drop"}"#).unwrap();
        assert_eq!(p.validate(&Limits::default()), Ok(()));
        let c = p.apply(TopicConfig::default());
        assert_eq!((c.expires_ms, c.on_expiry), (60_000, OnExpiry::Drop));
        let kept = TopicConfigPatch::default().apply(c.clone());
        assert_eq!((kept.expires_ms, kept.on_expiry), (60_000, OnExpiry::Drop));
        assert!(serde_json::from_str::<TopicConfigPatch>(r#"{"on_expiry": "later"}"#).is_err());
        let limits = Limits::default();
        let over = TopicConfigPatch {
            expires_ms: Some(limits.max_delay_ms + 1),
            ..Default::default()
        };
        assert_eq!(over.validate(&limits).unwrap_err().code, "invalid_expiry");
        assert_eq!(OnExpiry::decode(OnExpiry::Drop.as_str()), OnExpiry::Drop);
        assert_eq!(OnExpiry::decode(OnExpiry::Dead.as_str()), OnExpiry::Dead);
    }

    #[test]
    fn patch_rejects_unknown_and_out_of_range() {
        assert!(serde_json::from_str::<TopicConfigPatch>(r#"{"max_atempts": 3}"#).is_err());
        let p = TopicConfigPatch {
            lease_ms: Some(1),
            ..Default::default()
        };
        assert_eq!(
            p.validate(&Limits::default()).unwrap_err().code,
            "invalid_lease"
        );
        let p = TopicConfigPatch {
            dead_cap: Some(MAX_DEAD_CAP + 1),
            ..Default::default()
        };
        assert_eq!(
            p.validate(&Limits::default()).unwrap_err().code,
            "invalid_dead_cap"
        );
    }

    #[test]
    fn delivered_defaults_only_where_the_topic_has_no_settings_of_its_own() {
        let push = Delivery::Push(PushConfig {
            url: "http://127.0.0.1:9/h".into(),
            method: PushMethod::Post,
            timeout_ms: 3000,
            headers: Default::default(),
            concurrency: 1,
            secrets: vec![],
        });
        let fresh = TopicConfigPatch {
            delivery: Some(push.clone()),
            ..Default::default()
        }
        .with_delivered_defaults(&TopicConfig::default());
        assert_eq!(fresh.max_attempts, Some(10));
        assert_eq!(
            fresh.retry,
            Some(RetryPolicy::DelaysMs(vec![
                60_000, 180_000, 300_000, 420_000, 540_000, 660_000, 780_000, 900_000, 1_020_000,
                1_140_000
            ]))
        );
        let own = TopicConfig {
            max_attempts: 3,
            retry: RetryPolicy::FixedMs(5000),
            ..Default::default()
        };
        let kept = TopicConfigPatch {
            delivery: Some(push.clone()),
            ..Default::default()
        }
        .with_delivered_defaults(&own);
        assert_eq!((kept.max_attempts, kept.retry), (None, None));
        let pull = TopicConfigPatch {
            delivery: Some(Delivery::Pull {}),
            ..Default::default()
        };
        assert_eq!(
            pull.clone()
                .with_delivered_defaults(&TopicConfig::default()),
            pull
        );
    }

    #[test]
    fn delivery_json() {
        let d: Delivery = serde_json::from_str(r#"{"mode":"pull"}"#).unwrap();
        assert_eq!(d, Delivery::Pull {});
        assert!(serde_json::from_str::<Delivery>(r#"{"mode":"carrier-pigeon"}"#).is_err());
        let d: Delivery =
            serde_json::from_str(r#"{"mode":"push","url":"http://127.0.0.1:9/hook"}"#).unwrap();
        let Delivery::Push(p) = &d else {
            panic!("{d:?}")
        };
        assert_eq!(
            (p.method, p.timeout_ms, p.concurrency),
            (PushMethod::Post, 3000, 16)
        );
        assert!(p.validate().is_ok());
        let back: Delivery = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
        assert!(
            serde_json::from_str::<Delivery>(r#"{"mode":"push","url":"http://x","tiemout_ms":1}"#)
                .is_err(),
            "unknown fields refused"
        );
    }

    #[test]
    fn redaction_hides_secrets_and_header_values_and_cannot_be_stored() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let p = PushConfig {
            url: "https://hooks.example.com/dq".into(),
            method: PushMethod::Post,
            timeout_ms: 3000,
            headers: [
                (
                    "X-Api-Key".to_string(),
                    "sk_live_0123456789abcdef".to_string(),
                ),
                ("X-Short".to_string(), "tiny".to_string()),
            ]
            .into(),
            concurrency: 16,
            secrets: vec![secret.into(), "whsec_AAAAAAAAAAAAAAAAAAAAzz9Q".into()],
        };
        let r = p.redacted();
        assert_eq!(r.secrets, ["whsec_…LaSw", "whsec_…zz9Q"]);
        assert_eq!(r.headers["X-Api-Key"], "…cdef");
        assert_eq!(r.headers["X-Short"], "…", "short values show nothing");
        assert_eq!((r.url.as_str(), r.timeout_ms), (p.url.as_str(), 3000));
        for shown in [
            format!("{p:?}"),
            format!(
                "{:?}",
                TopicConfig {
                    delivery: Delivery::Push(p.clone()),
                    ..Default::default()
                }
            ),
            serde_json::to_string(
                &TopicConfig {
                    delivery: Delivery::Push(p.clone()),
                    ..Default::default()
                }
                .redacted(),
            )
            .unwrap(),
        ] {
            assert!(!shown.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2La"), "{shown}");
            assert!(!shown.contains("sk_live_0123"), "{shown}");
            assert!(!shown.contains("tiny"), "{shown}");
        }
        // A redacted copy sent back is refused, so it never replaces the real values.
        let e = r.validate().unwrap_err();
        assert_eq!(e.code, "invalid_callback");
        assert!(e.message.contains("redacted"), "{}", e.message);
        let only_secrets = PushConfig {
            headers: Default::default(),
            ..r.clone()
        };
        assert!(
            only_secrets
                .validate()
                .unwrap_err()
                .message
                .contains("redacted copy")
        );
        let non_ascii = PushConfig {
            headers: [("X-Name".to_string(), "café".to_string())].into(),
            secrets: vec![],
            ..p.clone()
        };
        assert!(
            non_ascii
                .validate()
                .unwrap_err()
                .message
                .contains("visible ASCII")
        );
        assert!(p.validate().is_ok());
    }

    #[test]
    fn push_validation() {
        let ok = PushConfig {
            url: "https://hooks.example.com/dq?x=1".into(),
            method: PushMethod::Get,
            timeout_ms: 100,
            headers: [("X-Token".to_string(), "abc".to_string())].into(),
            concurrency: 1,
            secrets: vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()],
        };
        assert!(ok.validate().is_ok());
        for bad in [
            PushConfig {
                url: "ftp://x".into(),
                ..ok.clone()
            },
            PushConfig {
                url: "http://".into(),
                ..ok.clone()
            },
            PushConfig {
                url: "http://user:pw@host/".into(),
                ..ok.clone()
            },
            PushConfig {
                timeout_ms: 99,
                ..ok.clone()
            },
            PushConfig {
                concurrency: 0,
                ..ok.clone()
            },
            PushConfig {
                headers: [("bad header".to_string(), "v".to_string())].into(),
                ..ok.clone()
            },
            PushConfig {
                secrets: vec!["nope".into()],
                ..ok.clone()
            },
        ] {
            assert_eq!(
                bad.validate().unwrap_err().code,
                "invalid_callback",
                "{bad:?}"
            );
        }
    }
}
