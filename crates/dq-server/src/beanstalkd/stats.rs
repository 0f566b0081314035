//! What beanstalkd's protocol lists among its "other commands" beside
//! peek and kick: stats, stats-tube, stats-job, list-tubes, pause-tube.

use std::sync::atomic::Ordering;

use dq_core::{JobState, Topic};

use super::Conn;
use super::reply::{Reply, failed, line, not_found, ok_yaml, yaml, yaml_list};
use crate::keys::Action;
use crate::service::Error;

/// Ready jobs looked at to count the urgent ones of a tube (`stats-tube`
/// reports at most this many).
const URGENT_SCAN: usize = 1000;
/// beanstalkd's urgent: a priority below this.
const URGENT_BELOW: u32 = 1024;

impl Conn {
    /// Every tube this connection's key may read, `default` always among
    /// them.
    pub(super) async fn list_tubes(&self) -> Reply {
        match self.svc.topics().await {
            Ok(ts) => {
                let mut names: Vec<String> = ts
                    .iter()
                    .filter(|t| self.allowed.allows(Action::Read, t.as_str()))
                    .map(ToString::to_string)
                    .collect();
                if !names.iter().any(|n| n == "default") {
                    names.insert(0, "default".into());
                }
                ok_yaml(yaml_list(&names))
            }
            Err(e) => failed(&e),
        }
    }

    pub(super) async fn stats_job(&mut self, id: u64) -> Reply {
        let Some((t, job)) = self.find(id, Action::Read).await else {
            return not_found();
        };
        let now = self.svc.clock().now_ms();
        let state = match job.state {
            JobState::Scheduled => "delayed",
            JobState::Ready => "ready",
            JobState::Reserved => "reserved",
            JobState::Dead => "buried",
        };
        let ttr_s = job.lease_ms / 1000;
        let time_left = match job.state {
            JobState::Scheduled => job.due_at_ms.saturating_sub(now) / 1000,
            JobState::Reserved => job.lease_deadline_ms.unwrap_or(now).saturating_sub(now) / 1000,
            _ => 0,
        };
        let delay = job.due_at_ms.saturating_sub(job.created_at_ms) / 1000;
        ok_yaml(yaml(&[
            ("id", id.to_string()),
            ("tube", t.to_string()),
            ("state", state.into()),
            ("pri", job.priority.to_string()),
            (
                "age",
                (now.saturating_sub(job.created_at_ms) / 1000).to_string(),
            ),
            ("delay", delay.to_string()),
            ("ttr", ttr_s.to_string()),
            ("time-left", time_left.to_string()),
            ("file", "0".into()),
            ("reserves", job.attempts.to_string()),
            ("timeouts", job.counts.timeouts.to_string()),
            ("releases", job.counts.releases.to_string()),
            ("buries", job.counts.buries.to_string()),
            ("kicks", job.counts.kicks.to_string()),
        ]))
    }

    /// Ready jobs of `t` with a priority below 1024 (beanstalkd's urgent),
    /// counted over the first [`URGENT_SCAN`] in hand-out order (which is
    /// priority first, so the urgent ones come first).
    async fn urgent(&self, t: &Topic, ready: u64) -> Result<u64, Error> {
        if ready == 0 {
            return Ok(0);
        }
        let head = self.svc.list_ready(t, URGENT_SCAN).await?;
        Ok(head
            .iter()
            .take_while(|j| j.priority < URGENT_BELOW)
            .count() as u64)
    }

    pub(super) async fn pause_tube(&mut self, t: Topic, delay_s: u32) -> Reply {
        match self.svc.topics().await {
            Ok(ts) if ts.contains(&t) => {}
            Ok(_) => return not_found(),
            Err(e) => return failed(&e),
        }
        match self.svc.pause_topic(&t, u64::from(delay_s) * 1000).await {
            Ok(()) => line("PAUSED"),
            Err(e) => failed(&e),
        }
    }

    pub(super) async fn stats_tube(&mut self, t: Topic) -> Reply {
        let known = match self.svc.topics().await {
            Ok(ts) => ts.contains(&t),
            Err(e) => return failed(&e),
        };
        if !known && t.as_str() != "default" {
            return not_found();
        }
        let s = match self.svc.stats(&t).await {
            Ok(s) => s,
            Err(e) => return failed(&e),
        };
        let total = s.scheduled + s.ready + s.reserved + s.dead;
        let now = self.svc.clock().now_ms();
        let urgent = match self.urgent(&t, s.ready).await {
            Ok(n) => n,
            Err(e) => return failed(&e),
        };
        ok_yaml(yaml(&[
            ("name", t.to_string()),
            ("current-jobs-urgent", urgent.to_string()),
            ("current-jobs-ready", s.ready.to_string()),
            ("current-jobs-reserved", s.reserved.to_string()),
            ("current-jobs-delayed", s.scheduled.to_string()),
            ("current-jobs-buried", s.dead.to_string()),
            ("total-jobs", s.counters.enqueued.max(total).to_string()),
            ("current-using", u64::from(self.used == t).to_string()),
            (
                "current-watching",
                u64::from(self.watched.contains(&t)).to_string(),
            ),
            ("current-waiting", "0".into()),
            (
                "cmd-delete",
                (s.counters.acked + s.counters.cancelled).to_string(),
            ),
            ("cmd-pause-tube", "0".into()),
            // The seconds still paused, rounded up (the delay asked is not kept).
            (
                "pause",
                s.paused_until_ms
                    .saturating_sub(now)
                    .div_ceil(1000)
                    .to_string(),
            ),
            (
                "pause-time-left",
                (s.paused_until_ms.saturating_sub(now) / 1000).to_string(),
            ),
        ]))
    }

    pub(super) async fn stats(&mut self) -> Reply {
        let all = match self.svc.topics_with_stats().await {
            Ok(a) => a,
            Err(e) => return failed(&e),
        };
        let sum = |f: fn(&dq_core::TopicStats) -> u64| all.iter().map(|(_, s)| f(s)).sum::<u64>();
        let mut urgent = 0;
        for (t, s) in &all {
            match self.urgent(t, s.ready).await {
                Ok(n) => urgent += n,
                Err(e) => return failed(&e),
            }
        }
        ok_yaml(yaml(&[
            ("current-jobs-urgent", urgent.to_string()),
            ("current-jobs-ready", sum(|s| s.ready).to_string()),
            ("current-jobs-reserved", sum(|s| s.reserved).to_string()),
            ("current-jobs-delayed", sum(|s| s.scheduled).to_string()),
            ("current-jobs-buried", sum(|s| s.dead).to_string()),
            ("total-jobs", sum(|s| s.counters.enqueued).to_string()),
            ("current-tubes", all.len().max(1).to_string()),
            (
                "current-connections",
                self.shared.connections.load(Ordering::Relaxed).to_string(),
            ),
            (
                "total-connections",
                self.shared
                    .total_connections
                    .load(Ordering::Relaxed)
                    .to_string(),
            ),
            ("pid", std::process::id().to_string()),
            ("version", format!("\"dq {}\"", env!("CARGO_PKG_VERSION"))),
            ("uptime", self.started.elapsed().as_secs().to_string()),
            ("max-job-size", self.config.max_job_size.to_string()),
            ("draining", self.svc.is_draining().to_string()),
        ]))
    }
}
