//! The version of dq's key layout in a Redis, checked when `dq serve` starts.
//!
//! `<prefix>:layout` holds the layout version (a decimal integer) that the
//! dq which first used this Redis wrote. A dq that finds none writes its own
//! (a fresh Redis, or one written before the key existed: that is layout 1);
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

use dq_core::StoreError;
use redis::Value;

use crate::{RedisStore, ShardedStore, unavailable};

/// The key layout this dq reads and writes.
pub const LAYOUT_VERSION: u32 = 1;

/// What the check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// No version was recorded; this dq wrote [`LAYOUT_VERSION`].
    Written,
    /// The recorded version is this dq's.
    Current,
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
    /// `store` names this Redis in errors.
    ///
    /// # Errors
    /// `Ok(Err(_))` for a layout this dq must not use; `Err` when Redis
    /// does not answer.
    pub async fn check_layout(
        &self,
        store: &str,
    ) -> Result<Result<Layout, LayoutError>, StoreError> {
        let key = self.keys.layout();
        let mut conn = self.conn.clone();
        let old: Value = redis::cmd("SET")
            .arg(&key)
            .arg(LAYOUT_VERSION)
            .arg("NX")
            .arg("GET")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let found = match old {
            Value::Nil => {
                self.sync_topic_index().await?;
                return Ok(Ok(Layout::Written));
            }
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
            // Older versions: none exist yet (1 is the first); a migration
            // from one would run here.
            _ => Err(LayoutError::Foreign {
                store: store.to_string(),
                key,
                found: text.chars().take(64).collect(),
            }),
        })
    }
}

impl ShardedStore {
    /// [`RedisStore::check_layout`] on every shard, together.
    ///
    /// # Errors
    /// The first shard whose layout this dq must not use.
    pub async fn check_layout(&self) -> Result<LayoutCheck, LayoutError> {
        let results = futures::future::join_all(
            self.shards()
                .map(|(name, store)| async move { (name, store.check_layout(name).await) }),
        )
        .await;
        let mut check = LayoutCheck::default();
        for (name, r) in results {
            match r {
                Ok(Ok(layout)) => check.checked.push((name.to_string(), layout)),
                Ok(Err(e)) => return Err(e),
                Err(e) => check.unreachable.push((name.to_string(), e)),
            }
        }
        Ok(check)
    }
}
