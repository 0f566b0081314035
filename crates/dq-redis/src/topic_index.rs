//! The topic names in name order, for listings that page
//! ([`Store::list_topics`](dq_core::Store::list_topics)).
//!
//! `<prefix>:topics` (a SET, [`Keys::topics`](crate::Keys::topics)) has
//! held every stored topic name since the first dq; it cannot page in name
//! order. Beside it `<prefix>:topic-names`
//! ([`Keys::topic_names`](crate::Keys::topic_names)) holds the same names
//! in a ZSET, every score 0, so `ZRANGE … BYLEX … LIMIT` reads one page in
//! about `limit` steps whatever the number of topics. Both keep partition
//! names (`t#p`); `#` sorts below every topic character, so a topic's
//! partitions come right after it and the next topic after `t` is at least
//! `t$` (`$` is the lowest topic character).
//!
//! Writes: a name is added to the SET, then to the ZSET; removed from the
//! ZSET, then from the SET — so a dq stopped between the two leaves a name
//! in the SET only, which the repair below puts back. Neither key is
//! hash-tagged (they are in different Cluster slots): on a Cluster the two
//! commands go one after the other, never in one pipeline.
//!
//! Older dq (before the ZSET) write only the SET. [`RedisStore::sync_topic_index`]
//! copies it into the ZSET (idempotent `ZADD`s in chunks) and drops ZSET
//! names the SET no longer holds, when the two sizes differ: at start (with
//! the layout check), and at the first page of every listing (one `SCARD`
//! and one `ZCARD`, pipelined on one server). So a topic an older dq
//! creates or deletes while newer ones run shows in the next listing. Not
//! seen: an older dq that deletes as many topics as it creates between two
//! first pages leaves the sizes equal, and listings miss its changes until
//! the sizes differ again; `DEL <prefix>:topic-names` makes the next first
//! page rebuild the ZSET whole (measured: 0.7 s for 100,000 names). A
//! rolling upgrade that ends with every instance newer ends that.

use dq_core::store::StoreResult;
use dq_core::*;
use redis::AsyncCommands;

use crate::RedisStore;
use crate::conn::unavailable;

/// Names per `SSCAN`/`ZADD`/`ZRANGE` step of the repair.
const SYNC_CHUNK: usize = 1000;

/// A `ZRANGE … BYLEX` bound.
fn inclusive(s: &str) -> String {
    format!("[{s}")
}

impl RedisStore {
    /// Adds `name` to the topics SET, then to the ZSET of names.
    pub(crate) async fn add_topic_name(&self, name: &str) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        if conn.is_cluster() {
            let _: i64 = conn
                .sadd(self.keys.topics(), name)
                .await
                .map_err(unavailable)?;
            let _: i64 = conn
                .zadd(self.keys.topic_names(), name, 0)
                .await
                .map_err(unavailable)?;
        } else {
            let _: () = redis::pipe()
                .sadd(self.keys.topics(), name)
                .ignore()
                .zadd(self.keys.topic_names(), name, 0)
                .ignore()
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    /// Up to `count` names of the ZSET between the `ZRANGE … BYLEX` bounds
    /// `low` and `high`, in order, or from `high` down with `rev`.
    async fn name_range(
        &self,
        low: &str,
        high: &str,
        rev: bool,
        count: usize,
    ) -> StoreResult<Vec<String>> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(self.keys.topic_names());
        match rev {
            false => cmd.arg(low).arg(high),
            true => cmd.arg(high).arg(low).arg("REV"),
        };
        cmd.arg("BYLEX")
            .arg("LIMIT")
            .arg(0)
            .arg(count)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)
    }

    /// One page of the topics this server holds names of: with
    /// `partitions`, a partition name (`t#p`) stands for its topic `t` (the
    /// sharded store: a topic is known where any of its partitions is);
    /// without, partition names are skipped (as [`Store::topics`] does).
    pub(crate) async fn topic_page(
        &self,
        listing: &TopicListing<'_>,
        partitions: bool,
    ) -> StoreResult<TopicPage> {
        let Some((start, end)) = Topic::prefix_range(listing.prefix) else {
            return Ok(TopicPage::default());
        };
        if listing.cursor.is_none() {
            self.sync_topic_index().await?;
        }
        let limit = listing.limit.max(1);
        let mut low = inclusive(&start);
        let mut high = end
            .as_ref()
            .map_or_else(|| "+".to_string(), |e| format!("({e}"));
        match (listing.cursor, listing.backward) {
            // After `c` come its partitions (`c#…`), then names from `c$` on.
            (Some(c), false) if c.as_str() >= start.as_str() => {
                low = inclusive(&format!("{c}$"));
            }
            // Before `c`: the partitions of earlier topics sort before it too.
            (Some(c), true) if end.as_deref().is_none_or(|e| c.as_str() < e) => {
                high = format!("({c}");
            }
            _ => {}
        }
        let mut topics: Vec<Topic> = Vec::with_capacity(limit + 1);
        // One name more than `limit` tells whether more follow; partition
        // names take places too, so read on until the page is full.
        let chunk = limit + 1;
        let done = |mut topics: Vec<Topic>, more: bool| {
            if listing.backward {
                topics.reverse();
            }
            Ok(TopicPage { topics, more })
        };
        loop {
            let names = self
                .name_range(&low, &high, listing.backward, chunk)
                .await?;
            for name in &names {
                let topic = if partitions {
                    Topic::split_partition(name).map(|(t, _)| t)
                } else {
                    Topic::new(name.as_str()).ok()
                };
                let Some(t) = topic else { continue };
                if topics.last() == Some(&t) {
                    continue;
                }
                if topics.len() == limit {
                    return done(topics, true);
                }
                topics.push(t);
            }
            match names.last() {
                Some(last) if names.len() == chunk => match listing.backward {
                    false => low = format!("({last}"),
                    true => high = format!("({last}"),
                },
                _ => return done(topics, false),
            }
        }
    }

    /// Makes the ZSET of names hold what the topics SET holds, when their
    /// sizes differ (an older dq wrote the SET alone; a dq stopped between
    /// the two writes): adds the SET's names in chunks (`ZADD` is
    /// idempotent), then drops names the SET does not hold. Returns whether
    /// the sizes differed. Safe while other instances write: a name added
    /// or removed meanwhile at worst leaves the sizes differing, and the
    /// next call mends it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when Redis does not answer (what was
    /// copied stays copied).
    pub async fn sync_topic_index(&self) -> StoreResult<bool> {
        let mut conn = self.conn.clone();
        let (set, zset): (u64, u64) = if conn.is_cluster() {
            let set: u64 = conn.scard(self.keys.topics()).await.map_err(unavailable)?;
            let zset: u64 = conn
                .zcard(self.keys.topic_names())
                .await
                .map_err(unavailable)?;
            (set, zset)
        } else {
            redis::pipe()
                .scard(self.keys.topics())
                .zcard(self.keys.topic_names())
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?
        };
        if set == zset {
            return Ok(false);
        }
        tracing::info!(
            set,
            sorted = zset,
            key = %self.keys.topic_names(),
            "the sorted topic names differ from the topics set; copying"
        );
        let mut cursor: u64 = 0;
        loop {
            let (next, names): (u64, Vec<String>) = redis::cmd("SSCAN")
                .arg(self.keys.topics())
                .arg(cursor)
                .arg("COUNT")
                .arg(SYNC_CHUNK)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            if !names.is_empty() {
                let members: Vec<(u8, &str)> = names.iter().map(|n| (0, n.as_str())).collect();
                let _: i64 = conn
                    .zadd_multiple(self.keys.topic_names(), &members)
                    .await
                    .map_err(unavailable)?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let zset: u64 = conn
            .zcard(self.keys.topic_names())
            .await
            .map_err(unavailable)?;
        if zset > set {
            // Names an older dq removed from the SET alone.
            let mut from = "-".to_string();
            loop {
                let names = self.name_range(&from, "+", false, SYNC_CHUNK).await?;
                if names.is_empty() {
                    break;
                }
                let held: Vec<bool> = redis::cmd("SMISMEMBER")
                    .arg(self.keys.topics())
                    .arg(&names)
                    .query_async(&mut conn)
                    .await
                    .map_err(unavailable)?;
                let gone: Vec<&String> = names
                    .iter()
                    .zip(&held)
                    .filter(|(_, h)| !**h)
                    .map(|(n, _)| n)
                    .collect();
                if !gone.is_empty() {
                    let _: i64 = conn
                        .zrem(self.keys.topic_names(), gone)
                        .await
                        .map_err(unavailable)?;
                }
                if names.len() < SYNC_CHUNK {
                    break;
                }
                from = format!("({}", names[names.len() - 1]);
            }
        }
        Ok(true)
    }
}
