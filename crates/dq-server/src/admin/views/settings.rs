//! The topic page's settings form, filled from the topic's config.

use dq_api::units;
use std::collections::BTreeMap;

use dq_core::{Delivery, PushMethod, SettingSource, TopicConfig};

/// The settings form's values. Push secrets and header values are not
/// among them: the form shows how many secrets are set, nothing more.
///
/// Durations and the retry policy are in the CLI's units (`30s`,
/// `1m,3m,5m`): what `dq topics put` takes, and what the form reads back.
pub(super) struct Settings {
    pub(super) max_attempts: u32,
    pub(super) lease: String,
    pub(super) dead_cap: u64,
    pub(super) default_delay: String,
    pub(super) partitions: u32,
    /// The rate limit's fields, empty when the topic has none.
    pub(super) rate_limit: String,
    pub(super) rate_per: String,
    pub(super) rate_burst: String,
    /// Leases per flow-control key, empty when unlimited.
    pub(super) key_concurrency: String,
    /// The per-key rate limit's fields, empty when the topic has none.
    pub(super) key_rate_limit: String,
    pub(super) key_rate_per: String,
    pub(super) key_rate_burst: String,
    /// The expiry of the topic's jobs after they are due, empty for none.
    pub(super) expires: String,
    /// Whether expired jobs are dropped rather than dead.
    pub(super) drop_expired: bool,
    /// The retry policy (`1m,3m,5m`, `fixed:30s`, `exp:1s,2,1h`).
    pub(super) retry: String,
    pub(super) push: bool,
    /// A forwarding topic's target in words (its password redacted): the
    /// form keeps it as it is.
    pub(super) forward: Option<String>,
    pub(super) url: String,
    pub(super) get: bool,
    pub(super) timeout: String,
    pub(super) concurrency: u32,
    pub(super) secrets: usize,
    /// Where each setting comes from ([`TopicConfig::sources`]).
    sources: BTreeMap<&'static str, SettingSource>,
    /// The delivery mode the defaults are those of.
    mode: &'static str,
}

impl Settings {
    pub(super) fn new(cfg: &TopicConfig) -> Self {
        let p = match &cfg.delivery {
            Delivery::Push(p) => Some(p),
            _ => None,
        };
        let forward = match &cfg.delivery.redacted() {
            Delivery::RedisStream(s) => Some(format!("Redis stream {} at {}", s.stream, s.url)),
            Delivery::RedisList(l) => Some(format!("Redis list {} at {}", l.list, l.url)),
            _ => None,
        };
        Self {
            max_attempts: cfg.max_attempts,
            lease: units::format_ms(cfg.lease_ms),
            dead_cap: cfg.dead_cap,
            default_delay: units::format_ms(cfg.default_delay_ms),
            partitions: cfg.partitions,
            rate_limit: cfg
                .rate_limit
                .map_or_else(String::new, |r| r.limit.to_string()),
            rate_per: cfg
                .rate_limit
                .map_or_else(String::new, |r| units::format_ms(r.per_ms)),
            rate_burst: cfg
                .rate_limit
                .map_or_else(String::new, |r| r.burst.to_string()),
            key_concurrency: cfg
                .key_concurrency
                .map_or_else(String::new, |k| k.to_string()),
            key_rate_limit: cfg
                .key_rate_limit
                .map_or_else(String::new, |r| r.limit.to_string()),
            key_rate_per: cfg
                .key_rate_limit
                .map_or_else(String::new, |r| units::format_ms(r.per_ms)),
            key_rate_burst: cfg
                .key_rate_limit
                .map_or_else(String::new, |r| r.burst.to_string()),
            expires: if cfg.expires_ms == 0 {
                String::new()
            } else {
                units::format_ms(cfg.expires_ms)
            },
            drop_expired: cfg.on_expiry == dq_core::OnExpiry::Drop,
            retry: units::format_retry(&cfg.retry),
            push: p.is_some(),
            forward,
            url: p.map_or_else(String::new, |p| p.url.clone()),
            get: p.is_some_and(|p| p.method == PushMethod::Get),
            timeout: units::format_ms(p.map_or(dq_core::topic::PUSH_TIMEOUT_MS, |p| p.timeout_ms)),
            concurrency: p.map_or(dq_core::topic::PUSH_CONCURRENCY, |p| p.concurrency),
            secrets: p.map_or(0, |p| p.secrets.len()),
            sources: cfg.sources(),
            mode: cfg.delivery.mode(),
        }
    }

    /// Beside a setting's field: `set`, or the default of which mode it is.
    pub(super) fn from(&self, name: &str) -> String {
        let source = self
            .sources
            .get(name)
            .copied()
            .unwrap_or(SettingSource::Default);
        dq_api::source_in_words(source, self.mode)
    }
}
