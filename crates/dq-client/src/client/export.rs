//! Export and import: a topic's jobs listed page by page with everything a
//! store keeps, and written back (into another store).

use dq_api as wire;
use dq_core::JobState;
use reqwest::Method;

use super::{Client, NONE, encode_segment};
use crate::error::Result;
// Named by the `# Errors` doc links only.
#[cfg(doc)]
use crate::error::Error;

impl Client {
    /// One page of a topic's jobs (all states, or `state`) for an export:
    /// pass `None` first, then each page's `cursor` until it is `None`.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown topic; [`Error::Invalid`] for a
    /// limit outside 1–1000 or a cursor the server did not hand out.
    pub async fn list_jobs(
        &self,
        topic: &str,
        state: Option<JobState>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<wire::JobPage> {
        let mut url = format!(
            "{}/v1/topics/{}/jobs?limit={limit}",
            self.base,
            encode_segment(topic)
        );
        if let Some(s) = state {
            url.push_str("&state=");
            url.push_str(s.as_str());
        }
        if let Some(c) = cursor {
            url.push_str("&cursor=");
            url.push_str(&encode_segment(c));
        }
        self.call(Method::GET, url, NONE, true).await
    }

    /// Writes up to 1000 jobs as another store had them (an import; due
    /// times, attempts and dead letters kept); a result per job. Idempotent
    /// by id, so it is retried on transient errors.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the first bad job (nothing was written).
    pub async fn import_jobs(
        &self,
        topic: &str,
        jobs: &[wire::JobRecord],
    ) -> Result<Vec<wire::ImportResult>> {
        let url = format!(
            "{}/v1/topics/{}/jobs:import",
            self.base,
            encode_segment(topic)
        );
        let body = wire::ImportRequest {
            jobs: jobs.to_vec(),
        };
        let r: wire::ImportResponse = self.call(Method::POST, url, Some(&body), true).await?;
        Ok(r.results)
    }
}
