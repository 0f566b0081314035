//! A topic as a whole: its settings (topic_config, configure_topic, and
//! the settings version that moves with them), stats, pause_topic,
//! delete_topic (`lua/delete_topic.lua`), and the topic listings (topics,
//! list_topics, with `topic_index.rs`). Plain commands but for the
//! deletion: a topic's settings and counters are hashes of its own.

use dq_core::store::StoreResult;
use dq_core::*;
use redis::AsyncCommands;

use super::n;
use crate::RedisStore;
use crate::conn::unavailable;
use crate::decode::{array, int};

impl RedisStore {
    /// Every name in this server's topics set: topics, and partitions of
    /// topics (`t#p`, see [`Topic::partition`]), which [`Store::topics`]
    /// leaves out.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when Redis does not answer.
    pub async fn stored_topic_names(&self) -> StoreResult<Vec<String>> {
        let mut conn = self.conn.clone();
        conn.smembers(self.keys.topics()).await.map_err(unavailable)
    }
}

pub(crate) async fn topics(store: &RedisStore) -> StoreResult<Vec<Topic>> {
    let names = store.stored_topic_names().await?;
    let mut topics: Vec<Topic> = names
        .into_iter()
        .filter_map(|n| Topic::new(n).ok())
        .collect();
    topics.sort();
    Ok(topics)
}

pub(crate) async fn list_topics(
    store: &RedisStore,
    listing: &TopicListing<'_>,
) -> StoreResult<TopicPage> {
    store.topic_page(listing, false).await
}

pub(crate) async fn topic_config(
    store: &RedisStore,
    topic: &Topic,
) -> StoreResult<Option<TopicConfig>> {
    let mut conn = store.conn.clone();
    let (member, fields): (bool, Vec<(String, String)>) = if conn.is_cluster() {
        // The topics set and the topic's settings live in different slots.
        let mut other = conn.clone();
        let cfg_key = store.keys.topic(topic).cfg().to_string();
        let (member, fields) = futures::join!(
            conn.sismember(store.keys.topics(), topic.as_str()),
            other.hgetall(cfg_key)
        );
        (member.map_err(unavailable)?, fields.map_err(unavailable)?)
    } else {
        redis::pipe()
            .sismember(store.keys.topics(), topic.as_str())
            .hgetall(store.keys.topic(topic).cfg())
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?
    };
    if !member && fields.is_empty() {
        return Ok(None);
    }
    Ok(Some(decode_config(&fields)))
}

pub(crate) async fn configure_topic(
    store: &RedisStore,
    topic: &Topic,
    patch: &TopicConfigPatch,
) -> StoreResult<TopicConfig> {
    store.layout_gate()?;
    if patch.expires_ms.is_some_and(|ms| ms > 0)
        || patch.on_expiry.is_some_and(|o| o != OnExpiry::Dead)
    {
        return Err(expiry_unsupported());
    }
    let tk = store.keys.topic(topic);
    let mut fields: Vec<(&str, String)> = Vec::new();
    if let Some(v) = patch.max_attempts {
        fields.push(("max_attempts", v.to_string()));
    }
    if let Some(v) = patch.lease_ms {
        fields.push(("lease_ms", v.to_string()));
    }
    if let Some(v) = patch.dead_cap {
        fields.push(("dead_cap", v.to_string()));
    }
    if let Some(v) = patch.default_delay_ms {
        fields.push(("default_delay_ms", v.to_string()));
    }
    if let Some(v) = patch.partitions {
        fields.push(("partitions", v.to_string()));
    }
    if let Some(v) = patch.dedup_ms {
        fields.push(("dedup_ms", v.to_string()));
    }
    if let Some(v) = &patch.retry {
        fields.push(("retry", v.encode()));
    }
    if let Some(v) = &patch.delivery {
        fields.push((
            "delivery",
            serde_json::to_string(v).expect("delivery serializes"),
        ));
    }
    if let Some(v) = patch.paused {
        fields.push(("paused", if v { "1" } else { "0" }.to_string()));
    }
    if let Some(Some(r)) = &patch.rate_limit {
        fields.push(("rate_limit", r.encode()));
    }
    if let Some(Some(r)) = &patch.key_rate_limit {
        fields.push(("key_rate_limit", r.encode()));
    }
    if let Some(Some(k)) = patch.key_concurrency {
        fields.push(("key_concurrency", k.to_string()));
    }
    let mut removed: Vec<&str> = Vec::new();
    if patch.rate_limit == Some(None) {
        removed.push("rate_limit");
    }
    if patch.key_rate_limit == Some(None) {
        removed.push("key_rate_limit");
    }
    if patch.key_concurrency == Some(None) {
        removed.push("key_concurrency");
    }
    // A new or changed rate limit starts with a full bucket (every key's,
    // for key_rate_limit); a resume or a new limit lets waiters look
    // again at once (reserve re-reads the keys held or waiting).
    let before = match patch.rate_limit.is_some()
        || patch.key_rate_limit.is_some()
        || patch.key_concurrency.is_some()
        || patch.paused == Some(false)
    {
        true => topic_config(store, topic).await?,
        false => None,
    };
    let limit_changed = patch
        .rate_limit
        .is_some_and(|r| before.as_ref().is_none_or(|b| b.rate_limit != r));
    let key_limit_changed = patch
        .key_rate_limit
        .is_some_and(|r| before.as_ref().is_none_or(|b| b.key_rate_limit != r));
    let keys_changed = key_limit_changed
        || patch
            .key_concurrency
            .is_some_and(|k| before.as_ref().is_none_or(|b| b.key_concurrency != k));
    let resumed = patch.paused == Some(false) && before.as_ref().is_some_and(|b| b.paused);
    let mut conn = store.conn.clone();
    // One slot (the topic's hash tag): one pipeline on a Cluster too.
    let mut pipe = redis::pipe();
    if !fields.is_empty() {
        pipe.hset_multiple(tk.cfg(), &fields).ignore();
    }
    if !removed.is_empty() {
        pipe.hdel(tk.cfg(), &removed).ignore();
    }
    if limit_changed {
        pipe.hdel(tk.ctr(), &["rl_credit", "rl_at"]).ignore();
    }
    if key_limit_changed {
        pipe.del(&[tk.key_buckets(), tk.key_buckets_full()])
            .ignore();
        // Keys waiting for a token of the old limit look again.
        pipe.hset(tk.ctr(), "kwait_stale", 1).ignore();
    }
    if !fields.is_empty() || !removed.is_empty() || limit_changed || key_limit_changed {
        let _: () = pipe.query_async(&mut conn).await.map_err(unavailable)?;
    }
    // As for a timed pause: the setting holds either way, a lost
    // announcement only leaves waiters until their next timeout.
    if (limit_changed || keys_changed || resumed)
        && let Err(e) = redis::cmd("PUBLISH")
            .arg(store.keys.wake_channel())
            .arg(topic.as_str())
            .query_async::<()>(&mut conn)
            .await
    {
        tracing::warn!(topic = %topic, error = %e, "topic resumed, its wake-up not announced");
    }
    store.known.lock().expect("poisoned").remove(topic.as_str());
    store.register(topic).await?;
    bump_settings_version(store).await?;
    Ok(topic_config(store, topic).await?.unwrap_or_default())
}

pub(crate) async fn delete_topic(
    store: &RedisStore,
    topic: &Topic,
    max: usize,
) -> StoreResult<(u64, bool)> {
    let v = store
        .run(&store.scripts.delete_topic, topic, &[&n(max.max(1) as u64)])
        .await?;
    let items = array(v)?;
    let deleted = int(&items[0])? as u64;
    let gone = int(&items[1])? == 1;
    if gone {
        let mut conn = store.conn.clone();
        let _: i64 = conn
            .zrem(store.keys.topic_names(), topic.as_str())
            .await
            .map_err(unavailable)?;
        let _: i64 = conn
            .srem(store.keys.topics(), topic.as_str())
            .await
            .map_err(unavailable)?;
        store.known.lock().expect("poisoned").remove(topic.as_str());
        bump_settings_version(store).await?;
    }
    Ok((deleted, gone))
}

pub(crate) async fn settings_version(store: &RedisStore) -> StoreResult<Option<u64>> {
    let mut conn = store.conn.clone();
    let v: Option<u64> = conn
        .get(store.keys.settings_version())
        .await
        .map_err(unavailable)?;
    Ok(Some(v.unwrap_or(0)))
}

/// Moves `Store::settings_version` on, after a settings change was written.
async fn bump_settings_version(store: &RedisStore) -> StoreResult<()> {
    let mut conn = store.conn.clone();
    let _: u64 = conn
        .incr(store.keys.settings_version(), 1)
        .await
        .map_err(unavailable)?;
    Ok(())
}

pub(crate) async fn stats(
    store: &RedisStore,
    topic: &Topic,
    now_ms: u64,
) -> StoreResult<TopicStats> {
    let tk = store.keys.topic(topic);
    let mut conn = store.conn.clone();
    #[allow(clippy::type_complexity)]
    let (sched, ready, lease, dead, ctr, head, ready_head, key_head): (
        u64,
        u64,
        u64,
        u64,
        Vec<(String, i64)>,
        Vec<(String, f64)>,
        Vec<String>,
        Vec<(String, f64)>,
    ) = redis::pipe()
        .zcard(tk.sched())
        .zcard(tk.ready())
        .zcard(tk.lease())
        .zcard(tk.dead())
        .hgetall(tk.ctr())
        .zrange_withscores(tk.sched(), 0, 0)
        .zrange(tk.ready(), 0, 0)
        .zrange_withscores(tk.key_heads(), 0, 0)
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    let mut oldest_due: Option<u64> = None;
    if let Some((_, due)) = head.first() {
        oldest_due = Some(*due as u64);
    }
    let key_head = key_head.first().map(|(_, due)| *due as u64);
    // A ready member starts with the job's due time, or its put time for a
    // job in put order (beanstalkd's), which may be long before it was
    // due: a head that looks overdue is read for its due time.
    let mut ready_due = ready_head.first().and_then(|m| ready_member_due(m));
    if let (Some(due), Some(m)) = (ready_due, ready_head.first())
        && now_ms.saturating_sub(due) > OVERDUE_READ_MS
        && let Some(id) = m.get(READY_PREFIX..).and_then(|i| JobId::new(i).ok())
        && let Some(j) = super::jobs::get(store, topic, &id).await?
        && j.put_delay_ms.is_some()
    {
        ready_due = Some(j.due_at_ms);
    }
    for due in [ready_due, key_head].into_iter().flatten() {
        oldest_due = Some(oldest_due.map_or(due, |d| d.min(due)));
    }
    let c = |name: &str| {
        ctr.iter()
            .find(|(k, _)| k == name)
            .map_or(0, |(_, v)| (*v).max(0) as u64)
    };
    Ok(TopicStats {
        // Jobs due soon are in the schedule ZSET, the rest in the wheel.
        scheduled: sched + c("far"),
        // Jobs with a flow-control key wait in their key's lane.
        ready: ready + c("kready"),
        reserved: lease,
        dead,
        oldest_overdue_ms: oldest_due.map_or(0, |d| now_ms.saturating_sub(d)),
        paused_until_ms: c("paused_until"),
        counters: TopicCounters {
            enqueued: c("enqueued"),
            acked: c("acked"),
            failed: c("failed"),
            expired: c("expired"),
            expired_unhandled: 0,
            dead: c("dead"),
            cancelled: c("cancelled"),
            dead_dropped: c("dead_dropped"),
            replayed: c("replayed"),
            rate_limited: c("rate_limited"),
        },
        ..TopicStats::default()
    })
}

pub(crate) async fn pause_topic(
    store: &RedisStore,
    topic: &Topic,
    until_ms: u64,
) -> StoreResult<()> {
    store.register(topic).await?;
    let tk = store.keys.topic(topic);
    let key = tk.ctr();
    let mut conn = store.conn.clone();
    let mut cmd = if until_ms == 0 {
        redis::cmd("HDEL")
    } else {
        redis::cmd("HSET")
    };
    cmd.arg(key).arg("paused_until");
    if until_ms > 0 {
        cmd.arg(until_ms);
    }
    cmd.query_async::<()>(&mut conn)
        .await
        .map_err(unavailable)?;
    // Waiters sleeping until the pause's end (or the old one) look again.
    // The pause holds either way: a lost announcement is not an error
    // (waiters look again at their next wake-up or timeout).
    if let Err(e) = redis::cmd("PUBLISH")
        .arg(store.keys.wake_channel())
        .arg(topic.as_str())
        .query_async::<()>(&mut conn)
        .await
    {
        tracing::warn!(topic = %topic, error = %e, "pause set, its wake-up not announced");
    }
    Ok(())
}

/// The topic config hash to a [`TopicConfig`], defaults for missing fields.
fn decode_config(fields: &[(String, String)]) -> TopicConfig {
    let mut c = TopicConfig::default();
    for (k, v) in fields {
        match k.as_str() {
            "max_attempts" => c.max_attempts = v.parse().unwrap_or(c.max_attempts),
            "lease_ms" => c.lease_ms = v.parse().unwrap_or(c.lease_ms),
            "dead_cap" => c.dead_cap = v.parse().unwrap_or(c.dead_cap),
            "default_delay_ms" => c.default_delay_ms = v.parse().unwrap_or(c.default_delay_ms),
            "partitions" => c.partitions = v.parse().unwrap_or(c.partitions),
            "dedup_ms" => c.dedup_ms = v.parse().unwrap_or(c.dedup_ms),
            "paused" => c.paused = v == "1",
            "rate_limit" => c.rate_limit = RateLimit::decode(v),
            "key_rate_limit" => c.key_rate_limit = RateLimit::decode(v),
            "key_concurrency" => c.key_concurrency = v.parse().ok(),
            "retry" => {
                if let Some(r) = RetryPolicy::decode(v) {
                    c.retry = r;
                }
            }
            "delivery" => {
                if let Ok(d) = serde_json::from_str(v) {
                    c.delivery = d;
                }
            }
            _ => {}
        }
    }
    c
}

/// The due time encoded at the front of a ready-set member.
/// How overdue a ready head must look before its due time is read from
/// its record ([`stats`]).
const OVERDUE_READ_MS: u64 = 1000;

/// Where a ready member's job id starts (after 11 hex digits of time and
/// 12 of sequence: `ready_member` in common.lua).
const READY_PREFIX: usize = 23;

fn ready_member_due(member: &str) -> Option<u64> {
    u64::from_str_radix(member.get(..11)?, 16).ok()
}

/// The refusal of a job expiry (`expires_in_ms`, `expires_at_ms`, a
/// topic's `expires_ms` or `on_expiry: drop`): the Redis store does not
/// keep expiry yet (issue #51), and a job must not look as if it would
/// expire when it would not.
pub(crate) fn expiry_unsupported() -> StoreError {
    StoreError::Invalid(InvalidInput::new(
        "expiry_unsupported",
        "the Redis store does not keep job expiry yet (expires_in_ms, expires_at_ms, a topic's expires_ms and on_expiry); use the embedded store for it",
    ))
}
