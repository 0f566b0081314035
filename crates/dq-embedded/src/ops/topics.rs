//! Topics: their names (all, or a page of them), their settings read and
//! changed, a pause, and their stats.

use dq_core::*;
use rusqlite::{OptionalExtension, params};

use super::{config, ensure_tid, sched_head, tid};
use crate::writer::{Ctx, OpResult};

pub(crate) fn topics(cx: &mut Ctx) -> OpResult<Vec<Topic>> {
    let names: Vec<String> = cx
        .conn
        .prepare_cached("SELECT name FROM topics ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(names
        .into_iter()
        .filter_map(|n| Topic::new(n).ok())
        .collect())
}

/// One page of topic names in name order, on the `name` column's unique
/// index: one range of it, from the cursor (or the prefix's first name)
/// to the prefix's successor — the prefix as a range, never `LIKE`, whose
/// `_` and `%` are wildcards — read forward or backward, one name more
/// than `limit` to tell whether more follow.
pub(crate) fn list_topics(cx: &mut Ctx, listing: &TopicListing<'_>) -> OpResult<TopicPage> {
    let Some((start, end)) = Topic::prefix_range(listing.prefix) else {
        return Ok(TopicPage::default());
    };
    let limit = listing.limit.max(1);
    // Every name is ASCII below 0x7f.
    let end = end.unwrap_or_else(|| "\u{7f}".to_string());
    let cursor = listing.cursor.map(Topic::as_str);
    let (sql, low, high) = match (listing.backward, cursor) {
        (false, Some(c)) if c >= start.as_str() => (
            "SELECT name FROM topics WHERE name > ?1 AND name < ?2 ORDER BY name LIMIT ?3",
            c.to_string(),
            end,
        ),
        (false, _) => (
            "SELECT name FROM topics WHERE name >= ?1 AND name < ?2 ORDER BY name LIMIT ?3",
            start,
            end,
        ),
        (true, Some(c)) if c < end.as_str() => (
            "SELECT name FROM topics WHERE name >= ?1 AND name < ?2 ORDER BY name DESC LIMIT ?3",
            start,
            c.to_string(),
        ),
        (true, _) => (
            "SELECT name FROM topics WHERE name >= ?1 AND name < ?2 ORDER BY name DESC LIMIT ?3",
            start,
            end,
        ),
    };
    let mut names: Vec<String> = cx
        .conn
        .prepare_cached(sql)?
        .query_map(params![low, high, limit as i64 + 1], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let more = names.len() > limit;
    names.truncate(limit);
    if listing.backward {
        names.reverse();
    }
    Ok(TopicPage {
        topics: names
            .into_iter()
            .filter_map(|n| Topic::new(n).ok())
            .collect(),
        more,
    })
}

pub(crate) fn topic_config(cx: &mut Ctx, topic: &Topic) -> OpResult<Option<TopicConfig>> {
    match tid(cx, topic)? {
        Some(tid) => Ok(Some(config(cx, tid)?)),
        None => Ok(None),
    }
}

pub(crate) fn configure_topic(
    cx: &mut Ctx,
    topic: &Topic,
    p: &TopicConfigPatch,
) -> OpResult<TopicConfig> {
    if p.partitions.is_some_and(|n| n != 1) {
        return Err(StoreError::Invalid(InvalidInput::new(
            "invalid_partitions",
            "the embedded store keeps a topic in one partition; partitions spread a topic over Redis Cluster slots or shards",
        ))
        .into());
    }
    let tid = ensure_tid(cx, topic)?;
    let before = config(cx, tid)?;
    cx.conn
        .prepare_cached(
            "UPDATE topics SET
               max_attempts = coalesce(?1, max_attempts),
               lease_ms = coalesce(?2, lease_ms),
               dead_cap = coalesce(?3, dead_cap),
               default_delay_ms = coalesce(?4, default_delay_ms),
               retry = coalesce(?5, retry),
               delivery = coalesce(?6, delivery),
               dedup_ms = coalesce(?8, dedup_ms),
               expires_ms = coalesce(?9, expires_ms),
               on_expiry = coalesce(?10, on_expiry)
             WHERE tid = ?7",
        )?
        .execute(params![
            p.max_attempts,
            p.lease_ms.map(|v| v as i64),
            p.dead_cap.map(|v| v as i64),
            p.default_delay_ms.map(|v| v as i64),
            p.retry.as_ref().map(RetryPolicy::encode),
            p.delivery
                .as_ref()
                .map(|d| serde_json::to_string(d).expect("delivery serializes")),
            tid,
            p.dedup_ms.map(|v| v as i64),
            p.expires_ms.map(|v| v as i64),
            p.on_expiry.map(OnExpiry::as_str)
        ])?;
    if let Some(paused) = p.paused {
        cx.conn
            .prepare_cached("UPDATE topics SET paused = ?2 WHERE tid = ?1")?
            .execute(params![tid, paused])?;
    }
    // A new or changed rate limit starts with a full bucket.
    let limit_changed = p.rate_limit.is_some_and(|r| r != before.rate_limit);
    if let Some(r) = p.rate_limit.filter(|_| limit_changed) {
        cx.conn
            .prepare_cached(
                "UPDATE topics SET rate_limit = ?2, rl_credit = NULL, rl_at = 0 WHERE tid = ?1",
            )?
            .execute(params![tid, r.map(|r| r.encode())])?;
    }
    // Keys: a new or changed key_rate_limit starts every key with a full
    // bucket; reserve reads key_concurrency afresh each time.
    let key_limit_changed = p.key_rate_limit.is_some_and(|r| r != before.key_rate_limit);
    if let Some(r) = p.key_rate_limit.filter(|_| key_limit_changed) {
        cx.conn
            .prepare_cached("UPDATE topics SET key_rate_limit = ?2 WHERE tid = ?1")?
            .execute(params![tid, r.map(|r| r.encode())])?;
        cx.conn
            .prepare_cached("UPDATE fkeys SET credit = NULL, at = 0 WHERE tid = ?1")?
            .execute([tid])?;
    }
    let concurrency_changed = p
        .key_concurrency
        .is_some_and(|k| k != before.key_concurrency);
    if let Some(k) = p.key_concurrency.filter(|_| concurrency_changed) {
        cx.conn
            .prepare_cached("UPDATE topics SET key_concurrency = ?2 WHERE tid = ?1")?
            .execute(params![tid, k])?;
    }
    // A resume or a new limit lets waiters look again at once.
    if limit_changed
        || key_limit_changed
        || concurrency_changed
        || (before.paused && p.paused == Some(false))
    {
        cx.wake.push(topic.as_str().to_string());
    }
    config(cx, tid)
}

/// Pauses the topic until `until` (0: resumes it).
pub(crate) fn pause_topic(cx: &mut Ctx, topic: &Topic, until: u64) -> OpResult<()> {
    let tid = ensure_tid(cx, topic)?;
    cx.conn
        .prepare_cached("UPDATE topics SET paused_until_ms = ?2 WHERE tid = ?1")?
        .execute(params![tid, until as i64])?;
    cx.wake.push(topic.as_str().to_string());
    Ok(())
}

pub(crate) fn stats(cx: &mut Ctx, topic: &Topic, now: u64) -> OpResult<TopicStats> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok(TopicStats::default());
    };
    let mut st = cx
        .conn
        .prepare_cached(
            "SELECT n_scheduled, n_ready, n_reserved, n_dead, enqueued, acked, failed, expired, dead, cancelled, dead_dropped, replayed,
             paused_until_ms, rate_limited, expired_unhandled FROM topics WHERE tid = ?1",
        )?
        .query_row([tid], |r| {
            Ok(TopicStats {
                scheduled: r.get(0)?,
                ready: r.get(1)?,
                reserved: r.get(2)?,
                dead: r.get(3)?,
                oldest_overdue_ms: 0,
                counters: TopicCounters {
                    enqueued: r.get(4)?,
                    acked: r.get(5)?,
                    failed: r.get(6)?,
                    expired: r.get(7)?,
                    dead: r.get(8)?,
                    cancelled: r.get(9)?,
                    dead_dropped: r.get(10)?,
                    replayed: r.get(11)?,
                    rate_limited: r.get(13)?,
                    expired_unhandled: r.get(14)?,
                },
                paused_until_ms: r.get(12)?,
                ..TopicStats::default()
            })
        })?;
    // The head's place is its put time for a job in put order: its due
    // time is read from its row.
    let ready_head = match cx.mem.ready.head(tid) {
        Some((_, _, seq)) => cx
            .conn
            .prepare_cached("SELECT due_ms FROM jobs WHERE seq = ?1")?
            .query_row([seq], |r| r.get::<_, i64>(0))
            .optional()?
            .map(|due| due.max(0) as u64),
        None => None,
    };
    // The head of each key's lane.
    let key_heads = cx
        .mem
        .lanes
        .heads(tid)
        .map(|(_, due, _)| due.max(0) as u64)
        .min();
    let oldest = [sched_head(cx, tid)?, ready_head, key_heads]
        .into_iter()
        .flatten()
        .min();
    st.oldest_overdue_ms = oldest.map_or(0, |d| now.saturating_sub(d));
    Ok(st)
}
