//! Schedules: a job enqueued on a topic at every slot of a cron rule or an
//! interval.

use dq_core::JobState;
use dq_core::nulls::not_null;
use serde::{Deserialize, Serialize};

use crate::body::RawJson;

/// What a schedule does about slots that passed while no dq instance ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatchUp {
    /// Nothing: the next future slot only.
    Skip,
    /// One job for all the missed slots, due now (named after the latest).
    #[default]
    One,
    /// A job for every missed slot (the latest 1,000 at most), due now.
    All,
}

impl CatchUp {
    /// The name used in APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Skip => "skip",
            CatchUp::One => "one",
            CatchUp::All => "all",
        }
    }
}

/// `PUT /v1/schedules/{name}` (and `[schedules.<name>]` in dq.toml): a job
/// enqueued on `topic` at every slot of `cron` or `every`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// The topic each firing's job goes to.
    pub topic: String,
    /// A cron expression: 5 fields (minute hour day-of-month month
    /// day-of-week), or 6 with seconds first; names (MON, JAN), ranges,
    /// lists, steps. Exclusive with `every`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub cron: Option<String>,
    /// A fixed interval ("90s", "15m", "1h"; at least 1 s), counted from
    /// `start_at`, else from the Unix epoch. Exclusive with `cron`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub every: Option<String>,
    /// The IANA time zone `cron` is read in (default UTC).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub timezone: Option<String>,
    /// Each job's JSON body (default `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<RawJson>,
    /// Each job's priority (default 1024).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub priority: Option<u32>,
    /// Slots missed while no instance ran (default `one`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub catch_up: Option<CatchUp>,
    /// Fires nothing while true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// No slot before this moment (RFC 3339).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub start_at: Option<String>,
    /// No slot after this moment (RFC 3339).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    pub end_at: Option<String>,
}

/// One slot of a schedule: a moment a job is (or was) due.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// RFC 3339, in the schedule's time zone.
    pub at: String,
    /// Unix ms.
    pub at_ms: u64,
}

/// The job of a schedule's last fired slot, as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastJob {
    /// Its id: `<schedule>@<slot ms>`.
    pub id: String,
    /// Its state, or absent when it is gone (done, or cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
}

/// A schedule: its settings and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleInfo {
    /// Its name (the jobs' ids start with it).
    pub name: String,
    /// Its settings as given (defaults filled in: `timezone`, `catch_up`).
    pub spec: ScheduleSpec,
    /// The rule in words ("At 09:00, on Monday …", "every 1m 30s").
    pub rule: String,
    /// The latest slot fired (or passed while paused or skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Slot>,
    /// Its job, when one was fired for `last`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_job: Option<LastJob>,
    /// The next slots (up to 5; none while paused or after `end_at`).
    pub next: Vec<Slot>,
}

/// `GET /v1/schedules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleList {
    /// Every schedule, by name.
    pub schedules: Vec<ScheduleInfo>,
}

/// `DELETE /v1/schedules/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleDeleted {
    /// The schedule.
    pub name: String,
    /// Always true (an unknown schedule is 404).
    pub deleted: bool,
}
