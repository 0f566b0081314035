//! Dead letters: list, replay (named or all, in bounded store calls) and
//! purge.

use dq_core::limits::MAX_BATCH;
use dq_core::{InvalidInput, JobId, Topic};

use super::{JobView, Result, Service, view};

impl Service {
    /// Dead letters, oldest death first, from `offset`.
    ///
    /// # Errors
    /// `invalid_limit` outside 1–1000; [`Error::TopicNotFound`](super::Error::TopicNotFound); a store error.
    pub async fn list_dead(&self, t: &Topic, offset: usize, limit: usize) -> Result<Vec<JobView>> {
        if !(1..=1000).contains(&limit) {
            return Err(InvalidInput::new(
                "invalid_limit",
                format!("limit must be between 1 and 1000, got {limit}"),
            )
            .into());
        }
        self.known_topic(t).await?;
        let jobs = self.store.list_dead(t, offset, limit).await?;
        Ok(jobs.into_iter().map(|j| view(t, j)).collect())
    }

    /// Replays the named dead letters, or all of them (as many as were dead
    /// when it began: a job that dies again meanwhile is not replayed twice);
    /// each is due now with a fresh attempt count. Returns how many.
    ///
    /// # Errors
    /// `invalid_batch` for more than [`MAX_BATCH`] ids; [`Error::TopicNotFound`](super::Error::TopicNotFound);
    /// a store error.
    pub async fn replay_dead(&self, t: &Topic, ids: Option<&[JobId]>) -> Result<u64> {
        self.known_topic(t).await?;
        let now = self.now();
        let replayed = match ids {
            Some(ids) if ids.len() > MAX_BATCH => {
                return Err(InvalidInput::new(
                    "invalid_batch",
                    format!("ids may hold at most {MAX_BATCH} ids"),
                )
                .into());
            }
            Some(ids) => {
                let n = self.store.replay_dead(t, Some(ids), ids.len(), now).await;
                self.changed(t);
                n?
            }
            None => {
                let mut left = self.store.stats(t, now).await?.dead;
                let mut total = 0;
                while left > 0 {
                    let n = self
                        .store
                        .replay_dead(t, None, left.min(MAX_BATCH as u64) as usize, now)
                        .await;
                    self.changed(t);
                    let n = n?;
                    total += n;
                    if n == 0 {
                        break;
                    }
                    left = left.saturating_sub(n);
                }
                total
            }
        };
        if replayed > 0 {
            tracing::info!(topic = %t, replayed, "dead letters replayed");
        }
        Ok(replayed)
    }

    /// Deletes every dead letter of `t`; returns how many.
    ///
    /// # Errors
    /// [`Error::TopicNotFound`](super::Error::TopicNotFound); a store error (what was purged so far stays
    /// purged).
    pub async fn purge_dead(&self, t: &Topic) -> Result<u64> {
        self.known_topic(t).await?;
        let mut total = 0;
        loop {
            let n = self.store.purge_dead(t, MAX_BATCH).await?;
            total += n;
            if n < MAX_BATCH as u64 {
                break;
            }
        }
        tracing::info!(topic = %t, purged = total, "dead letters purged");
        Ok(total)
    }
}
