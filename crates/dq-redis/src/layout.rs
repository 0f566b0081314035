//! The version of dq's key layout in a Redis, checked when `dq serve` starts.
//!
//! `<prefix>:layout` holds the layout version (a decimal integer) that the
//! dq which first used this Redis wrote. A dq that finds none writes its own
//! on a Redis without topics, and 1 on one with topics (written before the
//! key existed: that is layout 1, checked as below);
//! one that finds a newer version refuses to serve it, naming both versions,
//! rather than run scripts that would misread the keys. Written with
//! `SET … NX GET`: one atomic command, so instances starting together agree.
//!
//! On shards every shard holds its own key and each is checked; a Redis
//! Cluster is one keyspace with one key (in the slot of its name).
//!
//! A layout this dq may use also gets its sorted topic names mended from
//! the topics set (`RedisStore::sync_topic_index`: an older dq of the same
//! layout wrote only the set).
//!
//! A layout change is a new [`LAYOUT_VERSION`] and, for data an older dq
//! wrote, a migration run here before the version key is moved on.
//!
//! Layout 2 keeps a reserved job's lease token in `tokens` (see "Leases"
//! in common.lua) instead of in its record, which still says ready: a dq of
//! layout 1 would take such a job for a lost ready one. Its scripts still
//! read every record layout 1 wrote, so the step needs no migration of the
//! data, only that no dq of layout 1 runs on the Redis any more. A dq that
//! finds layout 1 therefore refuses to start ([`LayoutError::Older`])
//! unless told that every older dq is stopped (`dq serve
//! --upgrade-layout`); it then moves the key from 1 to 2 (only from 1: one
//! script) and serves.

use std::sync::atomic::Ordering;

use dq_core::StoreError;
use redis::Value;

use crate::conn::unavailable;
use crate::{RedisStore, ShardedStore};

/// The key layout this dq reads and writes.
pub const LAYOUT_VERSION: u32 = 2;

/// The oldest layout this dq can move on from (its data is read as it is).
pub const OLDEST_UPGRADABLE: u32 = 1;

/// `--upgrade-layout` is refused while a dq instance was seen within this
/// long: a dispatcher writes its heartbeat (`<prefix>:dispatchers`) at least
/// once per `dispatcher_max_sleep` (1 s by default), so a running dq whose
/// sleep is under 30 s is seen, and a stopped one stays listed this long.
/// A safeguard, not a proof: a dq from before heartbeats, one sleeping
/// longer, or one whose clock is more than this behind Redis's is missed.
pub const LIVE_WITHIN_MS: u64 = 30_000;

/// What the check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// No version was recorded; this dq wrote [`LAYOUT_VERSION`].
    Written,
    /// The recorded version is this dq's.
    Current,
    /// The recorded version was this older one; this dq moved it on
    /// (allowed by `upgrade`).
    Upgraded {
        /// The version found.
        from: u32,
    },
}

/// A Redis whose layout this dq must not use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Written by a newer dq.
    #[error(
        "{store}: key {key} says dq layout version {found}, written by a newer dq; this dq uses layout version {supported}: run the newer dq, or give this one another Redis or redis_prefix"
    )]
    Newer {
        /// Which Redis (masked URL or shard name).
        store: String,
        /// The version key.
        key: String,
        /// The version found.
        found: u32,
        /// This dq's version.
        supported: u32,
    },
    /// Written by an older dq, which may still be running on this Redis.
    #[error(
        "{store}: key {key} says dq layout version {found}; this dq uses layout version {supported}, which a dq of layout {found} misreads (it would take reserved jobs for lost ready ones). Stop every dq using this Redis, wait 30 s, start this one once with --upgrade-layout (it moves the key to {supported}; the jobs stay as they are), then start the others with this dq's version (see docs/operations.md, Upgrades)"
    )]
    Older {
        /// Which Redis (masked URL or shard name).
        store: String,
        /// The version key.
        key: String,
        /// The version found.
        found: u32,
        /// This dq's version.
        supported: u32,
    },
    /// `--upgrade-layout` while other dq instances run on this Redis.
    #[error(
        "{store}: not moving the key layout on (--upgrade-layout): dq instances were seen on this Redis within the last {within_s} s ({instances:?}); stop every dq using it, wait until {within_s} s have passed since they stopped, and start this one with --upgrade-layout again"
    )]
    InstancesAlive {
        /// Which Redis (the first shard to move on).
        store: String,
        /// The instances seen (dispatcher ids).
        instances: Vec<String>,
        /// How far back, in seconds.
        within_s: u64,
    },
    /// `--upgrade-layout` while a shard does not answer: whether other dq
    /// instances run, and that shard's layout, are not known.
    #[error(
        "{store}: not moving the key layout on (--upgrade-layout): this Redis does not answer, so its layout and the dq instances seen on it are not known; start again when every shard answers"
    )]
    Unverified {
        /// The shard that did not answer.
        store: String,
    },
    /// The key holds something that is not a version.
    #[error(
        "{store}: key {key} holds {found:?}, not a dq layout version; is another program using the {key} prefix?"
    )]
    Foreign {
        /// Which Redis.
        store: String,
        /// The version key.
        key: String,
        /// What it holds (cut to 64 bytes).
        found: String,
    },
}

/// The check over every shard.
#[derive(Debug, Default)]
pub struct LayoutCheck {
    /// Shards that answered, and what was found there.
    pub checked: Vec<(String, Layout)>,
    /// Shards that did not answer (check them again later).
    pub unreachable: Vec<(String, StoreError)>,
}

impl RedisStore {
    /// Checks (and on a Redis without one, records) the layout version;
    /// `store` names this Redis in errors. An older layout this dq reads is
    /// moved on only when `upgrade` says no older dq runs any more.
    ///
    /// # Errors
    /// `Ok(Err(_))` for a layout this dq must not use; `Err` when Redis
    /// does not answer.
    pub async fn check_layout(
        &self,
        store: &str,
        upgrade: bool,
    ) -> Result<Result<Layout, LayoutError>, StoreError> {
        let r = self.check_layout_once(store, upgrade).await;
        if matches!(r, Ok(Ok(_))) {
            self.layout_checked.store(true, Ordering::SeqCst);
        }
        r
    }

    /// What [`RedisStore::check_layout`] would find, writing nothing:
    /// `Ok(None)` for a Redis it would record as this dq's (no key, no
    /// topics), else the version (1 for topics without a key).
    ///
    /// # Errors
    /// `Ok(Err(_))` for a newer or a foreign value; `Err` when Redis does
    /// not answer.
    pub async fn read_layout(
        &self,
        store: &str,
    ) -> Result<Result<Option<u32>, LayoutError>, StoreError> {
        let key = self.keys.layout();
        let mut conn = self.conn.clone();
        let found: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let Some(found) = found else {
            let topics: u64 = redis::cmd("SCARD")
                .arg(self.keys.topics())
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            return Ok(Ok((topics > 0).then_some(1)));
        };
        let text = String::from_utf8_lossy(&found);
        Ok(match text.trim().parse::<u32>() {
            Ok(v) if v > LAYOUT_VERSION => Err(LayoutError::Newer {
                store: store.to_string(),
                key,
                found: v,
                supported: LAYOUT_VERSION,
            }),
            Ok(v) if v >= OLDEST_UPGRADABLE => Ok(Some(v)),
            _ => Err(LayoutError::Foreign {
                store: store.to_string(),
                key,
                found: text.chars().take(64).collect(),
            }),
        })
    }

    /// The dq instances seen on this Redis within `within_ms` (the
    /// dispatchers' heartbeats, `<prefix>:dispatchers`, by this Redis's
    /// clock); read only.
    ///
    /// # Errors
    /// When Redis does not answer.
    pub async fn live_instances(&self, within_ms: u64) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn.clone();
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let now = secs * 1000 + micros / 1000;
        redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys.members())
            .arg(now.saturating_sub(within_ms))
            .arg("+inf")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)
    }

    async fn check_layout_once(
        &self,
        store: &str,
        upgrade: bool,
    ) -> Result<Result<Layout, LayoutError>, StoreError> {
        let key = self.keys.layout();
        let mut conn = self.conn.clone();
        // No key but topics: a dq from before the key wrote them (layout 1).
        let topics: u64 = redis::cmd("SCARD")
            .arg(self.keys.topics())
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let fresh = if topics == 0 { LAYOUT_VERSION } else { 1 };
        let old: Value = redis::cmd("SET")
            .arg(&key)
            .arg(fresh)
            .arg("NX")
            .arg("GET")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let found = match old {
            Value::Nil if fresh == LAYOUT_VERSION => {
                self.sync_topic_index().await?;
                return Ok(Ok(Layout::Written));
            }
            Value::Nil => fresh.to_string().into_bytes(),
            Value::BulkString(b) => b,
            other => format!("{other:?}").into_bytes(),
        };
        let text = String::from_utf8_lossy(&found);
        Ok(match text.trim().parse::<u32>() {
            Ok(v) if v == LAYOUT_VERSION => {
                self.sync_topic_index().await?;
                Ok(Layout::Current)
            }
            Ok(v) if v > LAYOUT_VERSION => Err(LayoutError::Newer {
                store: store.to_string(),
                key,
                found: v,
                supported: LAYOUT_VERSION,
            }),
            Ok(v) if (OLDEST_UPGRADABLE..LAYOUT_VERSION).contains(&v) => {
                if !upgrade {
                    return Ok(Err(LayoutError::Older {
                        store: store.to_string(),
                        key,
                        found: v,
                        supported: LAYOUT_VERSION,
                    }));
                }
                // From what was read only: another dq upgrading at the same
                // moment finds it done.
                let moved: i64 = redis::Script::new(
                    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return 1 end return 0",
                )
                .key(&key)
                .arg(&found[..])
                .arg(LAYOUT_VERSION)
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
                if moved == 0 {
                    return Box::pin(self.check_layout_once(store, false)).await;
                }
                self.sync_topic_index().await?;
                Ok(Layout::Upgraded { from: v })
            }
            _ => Err(LayoutError::Foreign {
                store: store.to_string(),
                key,
                found: text.chars().take(64).collect(),
            }),
        })
    }
}

impl ShardedStore {
    /// [`RedisStore::hold_until_layout_checked`] on every shard.
    pub fn hold_until_layout_checked(&self) {
        for (_, store) in self.shards() {
            store.hold_until_layout_checked();
        }
    }

    /// [`RedisStore::check_layout`] on every shard. Every shard's layout is
    /// read first, writing nothing, so a refusal leaves every shard as it
    /// was (an empty shard does not get this dq's version when another is
    /// refused). With `upgrade`, shards of an older layout are moved on only
    /// when every shard answers and no dq instance was seen on any of them
    /// within [`LIVE_WITHIN_MS`] (an older dq still running would misread
    /// this layout).
    ///
    /// # Errors
    /// The first shard whose layout this dq must not use.
    pub async fn check_layout(&self, upgrade: bool) -> Result<LayoutCheck, LayoutError> {
        let read = futures::future::join_all(
            self.shards()
                .map(|(name, store)| async move { (name, store, store.read_layout(name).await) }),
        )
        .await;
        let mut check = LayoutCheck::default();
        let mut reachable = Vec::new();
        let mut older = Vec::new();
        for (name, store, r) in read {
            match r {
                Ok(Ok(Some(v))) if v < LAYOUT_VERSION => {
                    if !upgrade {
                        return Err(LayoutError::Older {
                            store: name.to_string(),
                            key: store.keys.layout(),
                            found: v,
                            supported: LAYOUT_VERSION,
                        });
                    }
                    older.push(name);
                    reachable.push((name, store));
                }
                Ok(Ok(_)) => reachable.push((name, store)),
                Ok(Err(e)) => return Err(e),
                Err(e) => check.unreachable.push((name.to_string(), e)),
            }
        }
        if !older.is_empty() {
            // Every shard must answer to move any on: a shard that does not
            // may be older too, or hold the heartbeats of running instances.
            if let Some((name, _)) = check.unreachable.first() {
                return Err(LayoutError::Unverified {
                    store: name.clone(),
                });
            }
            let mut seen = Vec::new();
            for (name, store) in self.shards() {
                match store.live_instances(LIVE_WITHIN_MS).await {
                    Ok(ids) => seen.extend(ids),
                    Err(_) => {
                        return Err(LayoutError::Unverified {
                            store: name.to_string(),
                        });
                    }
                }
            }
            if !seen.is_empty() {
                return Err(LayoutError::InstancesAlive {
                    store: older[0].to_string(),
                    instances: seen,
                    within_s: LIVE_WITHIN_MS / 1000,
                });
            }
        } else if let (true, Some((name, _))) = (upgrade, check.unreachable.first()) {
            // A shard that does not answer may be older: not moved on later.
            return Err(LayoutError::Unverified {
                store: name.clone(),
            });
        }
        for (name, store) in reachable {
            match store.check_layout(name, older.contains(&name)).await {
                Ok(Ok(layout)) => check.checked.push((name.to_string(), layout)),
                Ok(Err(e)) => return Err(e),
                Err(e) => check.unreachable.push((name.to_string(), e)),
            }
        }
        Ok(check)
    }
}
