//! Topics: their names (all, or a page), their settings read and changed,
//! a pause, their stats, and a topic deleted in bounded steps
//! (`delete_topic.lua`).

use dq_core::*;

use crate::OpResult;
use crate::cx::Cx;
use crate::leases::free_slot;
use crate::schema::PLACE_MS;

pub(crate) async fn topics(cx: &mut Cx<'_>) -> OpResult<Vec<Topic>> {
    Ok(cx
        .q("SELECT name FROM topics ORDER BY name", &[])
        .await?
        .iter()
        .filter_map(|r| Topic::new(r.get::<_, String>(0)).ok())
        .collect())
}

pub(crate) async fn list_topics(
    cx: &mut Cx<'_>,
    listing: &TopicListing<'_>,
) -> OpResult<TopicPage> {
    let Some((start, end)) = Topic::prefix_range(listing.prefix) else {
        return Ok(TopicPage::default());
    };
    let limit = listing.limit.max(1);
    // Every name is ASCII below 0x7f.
    let end = end.unwrap_or_else(|| "\u{7f}".to_string());
    let cursor = listing.cursor.map(Topic::as_str);
    let (sql, low, high) = match (listing.backward, cursor) {
        (false, Some(c)) if c >= start.as_str() => (
            "SELECT name FROM topics WHERE name > $1 AND name < $2 ORDER BY name LIMIT $3",
            c.to_string(),
            end,
        ),
        (false, _) => (
            "SELECT name FROM topics WHERE name >= $1 AND name < $2 ORDER BY name LIMIT $3",
            start,
            end,
        ),
        (true, Some(c)) if c < end.as_str() => (
            "SELECT name FROM topics WHERE name >= $1 AND name < $2 ORDER BY name DESC LIMIT $3",
            start,
            c.to_string(),
        ),
        (true, _) => (
            "SELECT name FROM topics WHERE name >= $1 AND name < $2 ORDER BY name DESC LIMIT $3",
            start,
            end,
        ),
    };
    let mut names: Vec<String> = cx
        .q(sql, &[&low, &high, &(limit as i64 + 1)])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
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

pub(crate) async fn topic_config(cx: &mut Cx<'_>, topic: &Topic) -> OpResult<Option<TopicConfig>> {
    match cx.tid(topic).await? {
        Some(tid) => Ok(Some(cx.config(tid).await?)),
        None => Ok(None),
    }
}

pub(crate) async fn configure_topic(
    cx: &mut Cx<'_>,
    topic: &Topic,
    p: &TopicConfigPatch,
) -> OpResult<TopicConfig> {
    if p.expires_ms.is_some_and(|ms| ms > 0) || p.on_expiry.is_some_and(|o| o != OnExpiry::Dead) {
        return Err(expiry_unsupported().into());
    }
    if p.partitions.is_some_and(|n| n != 1) {
        return Err(StoreError::Invalid(InvalidInput::new(
            "invalid_partitions",
            "the PostgreSQL store keeps a topic in one partition; partitions spread a topic over Redis Cluster slots or shards",
        ))
        .into());
    }
    let tid = cx.ensure_tid(topic).await?;
    let before = cx.config(tid).await?;
    cx.exec(
        "UPDATE topics SET
           max_attempts = coalesce($1, max_attempts),
           lease_ms = coalesce($2, lease_ms),
           dead_cap = coalesce($3, dead_cap),
           default_delay_ms = coalesce($4, default_delay_ms),
           retry = coalesce($5, retry),
           delivery = coalesce($6, delivery),
           dedup_ms = coalesce($8, dedup_ms),
           paused = coalesce($9, paused)
         WHERE tid = $7",
        &[
            &p.max_attempts.map(i64::from),
            &p.lease_ms.map(|v| v as i64),
            &p.dead_cap.map(|v| v as i64),
            &p.default_delay_ms.map(|v| v as i64),
            &p.retry.as_ref().map(RetryPolicy::encode),
            &p.delivery
                .as_ref()
                .map(|d| serde_json::to_string(d).expect("delivery serializes")),
            &tid,
            &p.dedup_ms.map(|v| v as i64),
            &p.paused,
        ],
    )
    .await?;
    // A new or changed rate limit starts with a full bucket.
    let limit_changed = p.rate_limit.is_some_and(|r| r != before.rate_limit);
    if let Some(r) = p.rate_limit.filter(|_| limit_changed) {
        cx.exec(
            "UPDATE topics SET rate_limit = $2, rl_credit = NULL, rl_at = 0 WHERE tid = $1",
            &[&tid, &r.map(|r| r.encode())],
        )
        .await?;
    }
    // A new or changed key_rate_limit starts every key with a full bucket.
    let key_limit_changed = p.key_rate_limit.is_some_and(|r| r != before.key_rate_limit);
    if let Some(r) = p.key_rate_limit.filter(|_| key_limit_changed) {
        cx.exec(
            "UPDATE topics SET key_rate_limit = $2 WHERE tid = $1",
            &[&tid, &r.map(|r| r.encode())],
        )
        .await?;
        cx.exec(
            "UPDATE fkeys SET credit = NULL, at = 0 WHERE tid = $1",
            &[&tid],
        )
        .await?;
    }
    let concurrency_changed = p
        .key_concurrency
        .is_some_and(|k| k != before.key_concurrency);
    if let Some(k) = p.key_concurrency.filter(|_| concurrency_changed) {
        cx.exec(
            "UPDATE topics SET key_concurrency = $2 WHERE tid = $1",
            &[&tid, &k.map(i64::from)],
        )
        .await?;
    }
    // A resume or a new limit lets waiters look again at once.
    if limit_changed
        || key_limit_changed
        || concurrency_changed
        || (before.paused && p.paused == Some(false))
    {
        cx.wake(topic);
    }
    cx.settings_changed().await?;
    cx.config(tid).await
}

pub(crate) async fn pause_topic(cx: &mut Cx<'_>, topic: &Topic, until: u64) -> OpResult<()> {
    let tid = cx.ensure_tid(topic).await?;
    cx.exec(
        "UPDATE topics SET paused_until_ms = $2 WHERE tid = $1",
        &[&tid, &(until as i64)],
    )
    .await?;
    cx.wake(topic);
    Ok(())
}

pub(crate) async fn stats(cx: &mut Cx<'_>, topic: &Topic, now: u64) -> OpResult<TopicStats> {
    let Some(tid) = cx.tid(topic).await? else {
        return Ok(TopicStats::default());
    };
    let r = cx
        .one(
            &format!(
                "SELECT n_scheduled + d.sc, n_ready + d.re, n_reserved + d.rs, n_dead + d.de,
               enqueued + d.en, acked + d.ac, failed, expired, dead,
               cancelled + d.ca, dead_dropped, replayed, paused_until_ms, rate_limited,
               least(
                 (SELECT due_ms FROM jobs WHERE tid = $1 AND state = 0 ORDER BY due_ms LIMIT 1),
                 (SELECT due_ms FROM jobs WHERE tid = $1 AND state = 1 AND fkey IS NULL
                  ORDER BY priority, {PLACE_MS}, seq LIMIT 1),
                 (SELECT min(due_ms) FROM jobs WHERE tid = $1 AND state = 1 AND fkey IS NOT NULL))
             FROM topics,
               (SELECT coalesce(sum(d_scheduled), 0)::int8 AS sc, coalesce(sum(d_ready), 0)::int8 AS re,
                  coalesce(sum(d_reserved), 0)::int8 AS rs, coalesce(sum(d_dead), 0)::int8 AS de,
                  coalesce(sum(enqueued), 0)::int8 AS en, coalesce(sum(cancelled), 0)::int8 AS ca,
                  coalesce(sum(acked), 0)::int8 AS ac
                FROM topic_deltas WHERE tid = $1) d
             WHERE tid = $1"
            ),
            &[&tid],
        )
        .await?;
    let u = |i: usize| r.get::<_, i64>(i).max(0) as u64;
    let oldest = r.get::<_, Option<i64>>(14).map(|v| v.max(0) as u64);
    Ok(TopicStats {
        scheduled: u(0),
        ready: u(1),
        reserved: u(2),
        dead: u(3),
        oldest_overdue_ms: oldest.map_or(0, |d| now.saturating_sub(d)),
        counters: TopicCounters {
            enqueued: u(4),
            acked: u(5),
            failed: u(6),
            expired: u(7),
            expired_unhandled: 0,
            dead: u(8),
            cancelled: u(9),
            dead_dropped: u(10),
            replayed: u(11),
            rate_limited: u(13),
        },
        paused_until_ms: u(12),
        ..TopicStats::default()
    })
}

pub(crate) async fn delete_topic(
    cx: &mut Cx<'_>,
    topic: &Topic,
    max: usize,
) -> OpResult<(u64, bool)> {
    let Some(tid) = cx.lock(topic).await? else {
        return Ok((0, true));
    };
    let mut left = max as i64;
    let mut deleted = 0;
    // Leases before the jobs that wait for them (a delete cut short frees
    // the keys' slots first); ready last.
    for state in [0i16, 2, 3, 1] {
        if left <= 0 {
            break;
        }
        let gone = cx
            .q(
                "DELETE FROM jobs WHERE seq IN (
                   SELECT seq FROM jobs WHERE tid = $1 AND state = $2 LIMIT $3)
                 RETURNING fkey",
                &[&tid, &state, &left],
            )
            .await?;
        let n = gone.len() as i64;
        if state == 2 {
            for r in &gone {
                if let Some(k) = r.get::<_, Option<String>>(0) {
                    free_slot(cx, tid, &k).await?;
                }
            }
        }
        let mut d = [0; 4];
        d[state as usize] = -n;
        cx.counts(tid, d).await?;
        deleted += n;
        left -= n;
    }
    if cx
        .opt("SELECT 1 FROM jobs WHERE tid = $1 LIMIT 1", &[&tid])
        .await?
        .is_some()
    {
        return Ok((deleted as u64, false));
    }
    cx.exec("DELETE FROM dedup WHERE tid = $1", &[&tid]).await?;
    cx.exec("DELETE FROM topic_deltas WHERE tid = $1", &[&tid])
        .await?;
    cx.exec("DELETE FROM fkeys WHERE tid = $1", &[&tid]).await?;
    cx.exec("DELETE FROM topics WHERE tid = $1", &[&tid])
        .await?;
    cx.settings_changed().await?;
    Ok((deleted as u64, true))
}

/// The refusal of a job expiry (`expires_in_ms`, `expires_at_ms`, a
/// topic's `expires_ms` or `on_expiry: drop`): the PostgreSQL store does
/// not keep expiry yet (issue #51), and a job must not look as if it would
/// expire when it would not.
pub(crate) fn expiry_unsupported() -> StoreError {
    StoreError::Invalid(InvalidInput::new(
        "expiry_unsupported",
        "the PostgreSQL store does not keep job expiry yet (expires_in_ms, expires_at_ms, a topic's expires_ms and on_expiry); use the embedded store for it",
    ))
}
