//! `/admin/schedules`: every schedule, its next and last runs.

use askama::Template;

use super::Layout;
use super::format::{done_text, enc, topic_href};
use crate::admin::Viewer;

/// `/admin/schedules`: every schedule, its next and last runs.
#[derive(Template)]
#[template(path = "schedules.html")]
pub(in crate::admin) struct SchedulesPage<'a> {
    page: Layout<'a>,
    flash: Option<String>,
    schedules: Vec<ScheduleRow>,
}

impl<'a> SchedulesPage<'a> {
    pub(in crate::admin) fn new(
        v: &'a Viewer,
        done: Option<(String, u64)>,
        schedules: &[dq_api::ScheduleInfo],
    ) -> Self {
        Self {
            page: Layout::new(v, "Schedules", true),
            flash: done.and_then(|(code, n)| done_text(&code, n)),
            schedules: schedules
                .iter()
                .map(|s| ScheduleRow::new(s, v.manages(&s.spec.topic)))
                .collect(),
        }
    }
}

/// One schedule as the page shows it.
pub(in crate::admin) struct ScheduleRow {
    name: String,
    topic: String,
    topic_href: String,
    action_href: String,
    rule: String,
    timezone: String,
    paused: bool,
    /// The next three runs.
    next: Vec<String>,
    last: String,
    /// The last run's job and its state.
    last_job: Option<String>,
    catch_up: &'static str,
    /// The viewer may pause, resume and delete it.
    manage: bool,
}

impl ScheduleRow {
    fn new(s: &dq_api::ScheduleInfo, manage: bool) -> Self {
        Self {
            manage,
            name: s.name.clone(),
            topic: s.spec.topic.clone(),
            topic_href: topic_href(&s.spec.topic),
            action_href: format!("/admin/schedules/{}", enc(&s.name)),
            rule: s.rule.clone(),
            timezone: s.spec.timezone.clone().unwrap_or_else(|| "UTC".into()),
            paused: s.spec.paused,
            next: s.next.iter().take(3).map(|n| n.at.clone()).collect(),
            last: s.last.as_ref().map_or_else(|| "-".into(), |l| l.at.clone()),
            last_job: s.last_job.as_ref().map(|j| {
                format!(
                    "{} {}",
                    j.id,
                    j.state
                        .map_or_else(|| "done or cancelled".to_string(), |st| st.to_string())
                )
            }),
            catch_up: s.spec.catch_up.unwrap_or_default().as_str(),
        }
    }
}
