//! Dead letters: list, replay, purge.

use dq_api as wire;
use reqwest::Method;

use super::{Client, Job, NONE, encode_segment};
use crate::error::Result;
// Named by the `# Errors` doc links only.
#[cfg(doc)]
use crate::error::Error;

impl Client {
    /// Dead letters, oldest first.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a limit outside 1–1000.
    pub async fn list_dead(&self, topic: &str, offset: usize, limit: usize) -> Result<Vec<Job>> {
        let url = format!(
            "{}/v1/topics/{}/dead?offset={offset}&limit={limit}",
            self.base,
            encode_segment(topic)
        );
        let r: wire::DeadList = self.call(Method::GET, url, NONE, true).await?;
        Ok(r.jobs)
    }

    /// Replays dead letters (the ids given, or all); returns how many.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn replay_dead(&self, topic: &str, ids: Option<&[&str]>) -> Result<u64> {
        let body = wire::ReplayRequest {
            ids: ids.map(|ids| ids.iter().map(|i| i.to_string()).collect()),
        };
        let r: wire::Replayed = self
            .call(
                Method::POST,
                format!(
                    "{}/v1/topics/{}/dead/replay",
                    self.base,
                    encode_segment(topic)
                ),
                Some(&body),
                true,
            )
            .await?;
        Ok(r.replayed)
    }

    /// Deletes all dead letters of a topic; returns how many.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn purge_dead(&self, topic: &str) -> Result<u64> {
        let r: wire::Purged = self
            .call(
                Method::DELETE,
                format!("{}/v1/topics/{}/dead", self.base, encode_segment(topic)),
                NONE,
                true,
            )
            .await?;
        Ok(r.purged)
    }
}
