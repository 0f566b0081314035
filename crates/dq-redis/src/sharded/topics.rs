//! A partitioned topic as a whole: the topic listings (each shard's,
//! merged), its settings (a whole copy on every partition, partition 0's
//! written last: it holds the count the others are found by), deletion
//! (partition 0 last), stats (summed, with the shards missing named),
//! pause, and the settings version (summed over shards).

use std::collections::BTreeSet;

use dq_core::store::StoreResult;
use dq_core::*;
use futures::future::join_all;

use super::ShardedStore;

pub(super) async fn topics(store: &ShardedStore) -> StoreResult<Vec<Topic>> {
    // Each shard lists the partitions it holds; a topic is known while
    // any shard holding one of its partitions answers.
    let all = join_all(store.shards.iter().map(|s| s.store.stored_topic_names())).await;
    let mut names = BTreeSet::new();
    let mut first_err = None;
    let mut answered = false;
    for r in all {
        match r {
            Ok(ts) => {
                answered = true;
                names.extend(
                    ts.iter()
                        .filter_map(|n| Topic::split_partition(n))
                        .map(|(t, _)| t),
                );
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) if !answered => Err(e),
        _ => Ok(names.into_iter().collect()),
    }
}

pub(super) async fn list_topics(
    store: &ShardedStore,
    listing: &TopicListing<'_>,
) -> StoreResult<TopicPage> {
    // Each shard's page of `limit` topics (a partition standing for its
    // topic), merged in order, cut to `limit` (backward: the last
    // `limit`): whatever a shard holds past its page lies beyond every
    // topic of it. As in `topics`, a shard that does not answer is left
    // out while another answers.
    let limit = listing.limit.max(1);
    let pages = join_all(
        store
            .shards
            .iter()
            .map(|s| s.store.topic_page(listing, true)),
    )
    .await;
    let mut names = BTreeSet::new();
    let mut more = false;
    let mut first_err = None;
    let mut answered = false;
    for r in pages {
        match r {
            Ok(page) => {
                answered = true;
                more |= page.more;
                names.extend(page.topics);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err
        && !answered
    {
        return Err(e);
    }
    more |= names.len() > limit;
    let skip = match listing.backward {
        true => names.len().saturating_sub(limit),
        false => 0,
    };
    Ok(TopicPage {
        topics: names.into_iter().skip(skip).take(limit).collect(),
        more,
    })
}

pub(super) async fn topic_config(
    store: &ShardedStore,
    topic: &Topic,
) -> StoreResult<Option<TopicConfig>> {
    let r = if store.fails_fast(topic) {
        Err(store.down_error(topic))
    } else {
        let r = store.store(topic).topic_config(topic).await;
        store.note(topic, &r);
        r
    };
    match r {
        // Partition 0's shard is down: every partition holds the settings.
        Err(e @ StoreError::Unavailable(_)) => match store.second_copy(topic).await {
            Some(c) => Ok(Some(c)),
            None => Err(e),
        },
        other => other,
    }
}

pub(super) async fn configure_topic(
    store: &ShardedStore,
    topic: &Topic,
    patch: &TopicConfigPatch,
) -> StoreResult<TopicConfig> {
    let current = store.store(topic).topic_config(topic).await?;
    let old_n = current.as_ref().map_or(1, |c| c.partitions.max(1));
    let new_n = patch.partitions.unwrap_or(old_n);
    if new_n != old_n {
        let mut held = 0;
        for p in 0..old_n {
            let part = topic.partition(p);
            let s = store.store(&part).stats(&part, 0).await?;
            held += s.scheduled + s.ready + s.reserved + s.dead;
        }
        if held > 0 {
            return Err(StoreError::Invalid(InvalidInput::new(
                "invalid_partitions",
                format!(
                    "topic {topic} holds {held} jobs in {old_n} partitions; the partition count changes only while a topic is empty (drain it, or use a new topic)"
                ),
            )));
        }
    }
    // Every partition gets the whole resulting settings: the scripts of
    // each read their own copy.
    let result = patch.apply(current.unwrap_or_default());
    let full = TopicConfigPatch {
        max_attempts: Some(result.max_attempts),
        lease_ms: Some(result.lease_ms),
        dead_cap: Some(result.dead_cap),
        default_delay_ms: Some(result.default_delay_ms),
        retry: Some(result.retry.clone()),
        delivery: Some(result.delivery.clone()),
        partitions: Some(new_n),
        dedup_ms: Some(result.dedup_ms),
        paused: Some(result.paused),
        rate_limit: Some(result.rate_limit),
        key_concurrency: Some(result.key_concurrency),
        key_rate_limit: Some(result.key_rate_limit),
        expires_ms: Some(result.expires_ms),
        on_expiry: Some(result.on_expiry),
    };
    // Partition 0 last: it holds the count the others are found by.
    for p in (1..new_n).chain([0]) {
        let part = topic.partition(p);
        store.store(&part).configure_topic(&part, &full).await?;
    }
    for p in new_n..old_n {
        let part = topic.partition(p);
        store.store(&part).delete_topic(&part, 1).await?;
    }
    store.forget_partitions(topic);
    Ok(result)
}

pub(super) async fn delete_topic(
    store: &ShardedStore,
    topic: &Topic,
    max: usize,
) -> StoreResult<(u64, bool)> {
    let n = store.partition_count(topic).await?;
    let mut deleted = 0;
    let mut gone = true;
    // Partition 0 last: while it stands, the topic and its count stand.
    for p in (1..n).chain([0]) {
        let part = topic.partition(p);
        if p == 0 && !gone {
            break;
        }
        let left = max.saturating_sub(deleted as usize).max(1);
        let (d, g) = store.store(&part).delete_topic(&part, left).await?;
        deleted += d;
        gone &= g;
    }
    store.forget_partitions(topic);
    Ok((deleted, gone))
}

pub(super) async fn stats(
    store: &ShardedStore,
    topic: &Topic,
    now_ms: u64,
) -> StoreResult<TopicStats> {
    let all = store
        .each(
            topic,
            false,
            |s, p| async move { s.stats(&p, now_ms).await },
        )
        .await?;
    let mut out = TopicStats::default();
    let mut missing = BTreeSet::new();
    for (p, r) in &all {
        if r.is_err() {
            missing.insert(store.shard(p).name.clone());
        }
    }
    out.partial = !missing.is_empty();
    out.missing = missing.into_iter().collect();
    for s in ShardedStore::gathered(all)? {
        out.scheduled += s.scheduled;
        out.ready += s.ready;
        out.reserved += s.reserved;
        out.dead += s.dead;
        out.oldest_overdue_ms = out.oldest_overdue_ms.max(s.oldest_overdue_ms);
        out.paused_until_ms = out.paused_until_ms.max(s.paused_until_ms);
        let (c, d) = (&mut out.counters, &s.counters);
        c.enqueued += d.enqueued;
        c.acked += d.acked;
        c.failed += d.failed;
        c.expired += d.expired;
        c.dead += d.dead;
        c.cancelled += d.cancelled;
        c.dead_dropped += d.dead_dropped;
        c.replayed += d.replayed;
        c.rate_limited += d.rate_limited;
    }
    Ok(out)
}

/// Every partition is paused (each decides its own reserves).
pub(super) async fn pause_topic(
    store: &ShardedStore,
    topic: &Topic,
    until_ms: u64,
) -> StoreResult<()> {
    let all = store
        .each(topic, false, |s, p| async move {
            s.pause_topic(&p, until_ms).await
        })
        .await?;
    ShardedStore::gathered(all).map(|_| ())
}

pub(super) async fn settings_version(store: &ShardedStore) -> StoreResult<Option<u64>> {
    // Each shard counts the changes it holds; the sum moves with any.
    // While a shard does not answer the version cannot be told: "none"
    // at once (the caller keeps its reads for their time to live), not a
    // wait for the timeout four times a second.
    let now = store.now_ms();
    if store.shards.iter().any(|s| s.is_down(now)) {
        return Ok(None);
    }
    let all = join_all(store.shards.iter().map(|s| s.store.settings_version())).await;
    let mut sum = 0u64;
    for (s, v) in store.shards.iter().zip(all) {
        store.note_shard(s, &v);
        sum = sum.wrapping_add(v?.unwrap_or(0));
    }
    Ok(Some(sum))
}
