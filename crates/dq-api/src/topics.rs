//! Topics: their settings and counts, listed page by page, configured,
//! deleted.

use std::collections::BTreeMap;

use dq_core::{
    Delivery, PushMethod, RateLimit, SettingSource, TopicConfig, TopicConfigPatch, TopicStats,
};

use crate::units;
use serde::{Deserialize, Serialize};

/// A topic with its counts, and on `GET /v1/topics/{topic}` its settings.
/// Push secrets and header values come redacted (`whsec_…a1b2`): they are
/// write-only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicInfo {
    /// Its name.
    pub name: String,
    /// Counts and counters.
    pub stats: TopicStats,
    /// Settings (absent in listings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<TopicConfig>,
    /// Where each setting of `config` comes from: the default for the
    /// topic's delivery mode, or set ([`TopicConfig::sources`]; absent in
    /// listings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_sources: Option<BTreeMap<String, SettingSource>>,
}

/// The answer to `PUT /v1/topics/{topic}`: the settings now in force
/// (push credentials redacted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicConfigured {
    /// Its name.
    pub name: String,
    /// Its settings.
    pub config: TopicConfig,
    /// Where each comes from (as [`TopicInfo::config_sources`]).
    #[serde(default)]
    pub config_sources: BTreeMap<String, SettingSource>,
}

/// `config`'s sources with their names as the wire has them.
pub fn config_sources(config: &TopicConfig) -> BTreeMap<String, SettingSource> {
    config
        .sources()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// One setting in effect, for people: its wire name, its value in the
/// CLI's units (what `dq topics put` takes: `30s`, `1m,3m,5m`) and where
/// it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingLine {
    /// The setting's name on the wire (`max_attempts`, `retry`, …).
    pub name: &'static str,
    /// Its value in words.
    pub value: String,
    /// The default for the topic's delivery mode, or set.
    pub source: SettingSource,
}

/// Every setting of `config` in words, in the wire's order ([`SettingLine`]).
/// `config` is shown as given: pass it as the API answers it, credentials
/// redacted ([`TopicConfig::redacted`]).
pub fn settings_in_words(config: &TopicConfig) -> Vec<SettingLine> {
    let sources = config.sources();
    let rate = |r: Option<RateLimit>| {
        r.map_or_else(
            || "unlimited".to_string(),
            |r| {
                format!(
                    "{} per {} (burst {})",
                    r.limit,
                    units::format_ms(r.per_ms),
                    r.burst
                )
            },
        )
    };
    let never_if_zero = |ms: u64| {
        if ms == 0 {
            "none".to_string()
        } else {
            units::format_ms(ms)
        }
    };
    let values: [(&'static str, String); 14] = [
        ("max_attempts", config.max_attempts.to_string()),
        ("lease_ms", units::format_ms(config.lease_ms)),
        ("dead_cap", config.dead_cap.to_string()),
        (
            "default_delay_ms",
            units::format_ms(config.default_delay_ms),
        ),
        ("retry", units::format_retry(&config.retry)),
        ("delivery", delivery_in_words(&config.delivery)),
        ("partitions", config.partitions.to_string()),
        ("dedup_ms", never_if_zero(config.dedup_ms)),
        (
            "paused",
            if config.paused { "yes" } else { "no" }.to_string(),
        ),
        ("rate_limit", rate(config.rate_limit)),
        (
            "key_concurrency",
            config
                .key_concurrency
                .map_or_else(|| "unlimited".to_string(), |k| k.to_string()),
        ),
        ("key_rate_limit", rate(config.key_rate_limit)),
        ("expires_ms", never_if_zero(config.expires_ms)),
        ("on_expiry", config.on_expiry.as_str().to_string()),
    ];
    values
        .into_iter()
        .map(|(name, value)| SettingLine {
            name,
            value,
            source: sources.get(name).copied().unwrap_or(SettingSource::Default),
        })
        .collect()
}

/// Where a setting comes from, for people: `set`, or `default (push)`
/// naming the delivery mode ([`Delivery::mode`]) whose default it is (the
/// CLI's table and the admin page).
pub fn source_in_words(source: SettingSource, mode: &str) -> String {
    match source {
        SettingSource::Set => "set".into(),
        SettingSource::Default => format!("default ({mode})"),
    }
}

/// A delivery mode in words, shown as given: pass it as the API shows it
/// (credentials redacted; redacting twice would cut the hints further).
fn delivery_in_words(d: &Delivery) -> String {
    match d {
        Delivery::Pull {} => "pull".into(),
        // Secrets and header values as the API shows them (`whsec_…Io2w`).
        Delivery::Push(p) => format!(
            "push: {} {} (timeout {}, concurrency {}, signing secrets: {}{})",
            match p.method {
                PushMethod::Post => "POST",
                PushMethod::Get => "GET",
            },
            p.url,
            units::format_ms(p.timeout_ms),
            p.concurrency,
            if p.secrets.is_empty() {
                "none".to_string()
            } else {
                p.secrets.join(" ")
            },
            p.headers
                .iter()
                .map(|(k, v)| format!(", header {k}: {v}"))
                .collect::<String>()
        ),
        Delivery::RedisStream(s) => format!("redis_stream: stream {} at {}", s.stream, s.url),
        Delivery::RedisList(l) => format!("redis_list: list {} at {}", l.list, l.url),
    }
}

/// `GET /v1/topics?limit=&cursor=&prefix=`: which page of the topics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicListQuery {
    /// Topics per page: 1 to [`MAX_TOPICS_PAGE`](dq_core::limits::MAX_TOPICS_PAGE)
    /// (default [`TOPICS_PAGE`](dq_core::limits::TOPICS_PAGE)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The previous page's `next_cursor`; absent for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Only topics whose name starts with it (a plain prefix, no
    /// wildcards; at most 200 bytes of topic characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// `GET /v1/topics`: one page of the topics, in name order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicList {
    /// The page's topics with their counts (those the key may read: a
    /// page may be short, even empty, while more follow).
    pub topics: Vec<TopicInfo>,
    /// Pass it as `cursor` for the next page (with the same `prefix`);
    /// `null`: this is the last page.
    pub next_cursor: Option<String>,
}

/// `PUT /v1/topics/{topic}`'s body: the settings to change.
pub type PutTopicRequest = TopicConfigPatch;

/// `DELETE /v1/topics/{topic}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicDeleted {
    /// The topic.
    pub name: String,
    /// Jobs deleted with it.
    pub deleted_jobs: u64,
}
