//! Schedules: put, list, read, pause or resume, delete.

use dq_api as wire;
use reqwest::Method;

use super::{Client, NONE, encode_segment};
use crate::error::{Error, Result};

impl Client {
    /// Creates or replaces a schedule; returns how it stands (its next slots).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad rule, time zone, name or topic.
    pub async fn put_schedule(
        &self,
        name: &str,
        spec: &wire::ScheduleSpec,
    ) -> Result<wire::ScheduleInfo> {
        let body = serde_json::to_value(spec).map_err(|e| Error::Decode(e.to_string()))?;
        self.call(
            Method::PUT,
            format!("{}/v1/schedules/{}", self.base, encode_segment(name)),
            Some(&body),
            true,
        )
        .await
    }

    /// Every schedule, by name.
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn schedules(&self) -> Result<Vec<wire::ScheduleInfo>> {
        let r: wire::ScheduleList = self
            .call(
                Method::GET,
                format!("{}/v1/schedules", self.base),
                NONE,
                true,
            )
            .await?;
        Ok(r.schedules)
    }

    /// One schedule: settings, last slot and its job, next slots.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown schedule.
    pub async fn schedule(&self, name: &str) -> Result<wire::ScheduleInfo> {
        self.call(
            Method::GET,
            format!("{}/v1/schedules/{}", self.base, encode_segment(name)),
            NONE,
            true,
        )
        .await
    }

    /// Pauses (`true`) or resumes a schedule.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown schedule.
    pub async fn pause_schedule(&self, name: &str, paused: bool) -> Result<wire::ScheduleInfo> {
        let verb = if paused { "pause" } else { "resume" };
        self.call(
            Method::POST,
            format!("{}/v1/schedules/{}/{verb}", self.base, encode_segment(name)),
            NONE,
            true,
        )
        .await
    }

    /// Deletes a schedule (the jobs it enqueued ahead, due within 2 s, still
    /// run).
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown schedule.
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        let _: wire::ScheduleDeleted = self
            .call(
                Method::DELETE,
                format!("{}/v1/schedules/{}", self.base, encode_segment(name)),
                NONE,
                false,
            )
            .await?;
        Ok(())
    }
}
