//! What beanstalkd's protocol lists among its "other commands" beside
//! peek and kick: stats, stats-tube, stats-job, list-tubes, pause-tube.
//!
//! A tube exists for beanstalkd while a connection uses or watches it or
//! while it holds a job (`default` always): `list-tubes` lists those,
//! `stats-tube` and `pause-tube` of another are `NOT_FOUND`. Seconds are
//! whole, truncated, as the reference's nanoseconds divided (so a TTR of
//! 10 reads `time-left: 9` right after a reserve).

use std::sync::atomic::Ordering;

use dq_core::{JobState, Topic, TopicStats};

use super::Conn;
use super::reply::{Reply, failed, line, not_found, ok_yaml, yaml, yaml_list};
use crate::keys::Action;
use crate::service::Error;

/// Ready jobs looked at to count the urgent ones of a tube (`stats-tube`
/// reports at most this many).
const URGENT_SCAN: usize = 1000;
/// beanstalkd's urgent: a priority below this.
const URGENT_BELOW: u32 = 1024;

/// The version `stats` answers: the reference's, so clients that pick
/// their commands by it (fivebeans checks it as semver) read it; dq's own
/// is the `dq-version` field.
const VERSION: &str = "1.12";
/// The reference's `binlog-max-size` without `-s` (dq keeps no binlog:
/// its store is its log).
const BINLOG_MAX_SIZE: u64 = 10_485_760;

/// Whole seconds in `ms` milliseconds still to run, as the reference
/// truncates nanoseconds (a deadline met in this very millisecond has
/// less than its whole last second left).
fn secs_left(ms: u64) -> u64 {
    ms.saturating_sub(1) / 1000
}

/// Jobs a tube holds, in every state.
fn jobs(s: &TopicStats) -> u64 {
    s.scheduled + s.ready + s.reserved + s.dead
}

/// CPU seconds of this process, user and system, as `getrusage` gives
/// them (from /proc; zeros elsewhere).
fn rusage() -> (String, String) {
    let secs = |ticks: u64| {
        // USER_HZ is 100 for Linux's user-visible ticks.
        format!("{}.{:06}", ticks / 100, (ticks % 100) * 10_000)
    };
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces), from field 3.
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15: 12th and 13th after the name.
    (
        secs(f.get(11).copied().unwrap_or(0)),
        secs(f.get(12).copied().unwrap_or(0)),
    )
}

/// A line of a /proc/sys file, or "" when it cannot be read.
fn kernel(file: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/kernel/{file}"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Conn {
    /// Whether `t` exists for beanstalkd, given its counts.
    fn exists(&self, t: &Topic, s: &TopicStats) -> bool {
        t.as_str() == "default" || jobs(s) > 0 || self.shared.tube_use(t).held()
    }

    /// The tubes that exist, `default` first, the others in name order.
    async fn tubes(&self) -> Result<Vec<(Topic, TopicStats)>, Error> {
        let mut all = self.svc.topics_with_stats().await?;
        for t in self.shared.held_tubes() {
            if !all.iter().any(|(a, _)| *a == t) {
                all.push((t, TopicStats::default()));
            }
        }
        if !all.iter().any(|(t, _)| t.as_str() == "default") {
            all.push((
                Topic::new("default").expect("a topic"),
                TopicStats::default(),
            ));
        }
        all.retain(|(t, s)| self.exists(t, s));
        all.sort_by(|(a, _), (b, _)| {
            (a.as_str() != "default", a.as_str()).cmp(&(b.as_str() != "default", b.as_str()))
        });
        Ok(all)
    }

    /// Every tube that exists and this connection's key may read.
    pub(super) async fn list_tubes(&self) -> Reply {
        match self.tubes().await {
            Ok(ts) => {
                let names: Vec<String> = ts
                    .iter()
                    .filter(|(t, _)| self.allowed.allows(Action::Read, t.as_str()))
                    .map(|(t, _)| t.to_string())
                    .collect();
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
            // Never more than the delay it was put or released with: the
            // due time is the store's clock, `now` this instance's (a
            // millisecond behind would read a 1 s delay as 1 s left).
            JobState::Scheduled => secs_left(
                job.due_at_ms
                    .saturating_sub(now)
                    .min(job.put_delay_ms.unwrap_or(u64::MAX)),
            ),
            // The deadline is the store's time, `now` this instance's: a
            // lease has never more left than its length.
            JobState::Reserved => secs_left(
                job.lease_deadline_ms
                    .unwrap_or(now)
                    .saturating_sub(now)
                    .min(job.lease_ms),
            ),
            _ => 0,
        };
        // The delay it was put or last released with (a job put over HTTP
        // keeps none: the time from its enqueue to its due time).
        let delay = job
            .put_delay_ms
            .unwrap_or_else(|| job.due_at_ms.saturating_sub(job.created_at_ms))
            / 1000;
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
            ("reserves", job.counts.reserves.to_string()),
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
        let head = self.svc.list_ready(t, 0, URGENT_SCAN).await?;
        Ok(head
            .iter()
            .take_while(|j| j.priority < URGENT_BELOW)
            .count() as u64)
    }

    pub(super) async fn pause_tube(&mut self, t: Topic, delay_s: u32) -> Reply {
        match self.svc.stats(&t).await {
            Ok(s) if self.exists(&t, &s) => {}
            Ok(_) => return not_found(),
            Err(e) => return failed(&e),
        }
        self.shared.tube(&t, |u| u.pauses += 1);
        // A pause of 0 s ends at once (the reference pauses for 1 ns).
        match self.svc.pause_topic(&t, u64::from(delay_s) * 1000).await {
            Ok(()) => line("PAUSED"),
            Err(e) => failed(&e),
        }
    }

    pub(super) async fn stats_tube(&mut self, t: Topic) -> Reply {
        let s = match self.svc.stats(&t).await {
            Ok(s) => s,
            Err(e) => return failed(&e),
        };
        if !self.exists(&t, &s) {
            return not_found();
        }
        let now = self.svc.clock().now_ms();
        let urgent = match self.urgent(&t, s.ready).await {
            Ok(n) => n,
            Err(e) => return failed(&e),
        };
        let used = self.shared.tube_use(&t);
        let paused_left = s.paused_until_ms.saturating_sub(now);
        // The delay asked while the pause lasts, as the reference shows it
        // (the seconds still paused, rounded up, for a pause whose length
        // is not known).
        let pause_s = match self.svc.paused_for(&t, s.paused_until_ms).await {
            Ok(Some(ms)) if paused_left > 0 => ms / 1000,
            Ok(_) => paused_left.div_ceil(1000),
            Err(e) => return failed(&e),
        };
        ok_yaml(yaml(&[
            ("name", t.to_string()),
            ("current-jobs-urgent", urgent.to_string()),
            ("current-jobs-ready", s.ready.to_string()),
            ("current-jobs-reserved", s.reserved.to_string()),
            ("current-jobs-delayed", s.scheduled.to_string()),
            ("current-jobs-buried", s.dead.to_string()),
            ("total-jobs", s.counters.enqueued.max(jobs(&s)).to_string()),
            ("current-using", used.using.to_string()),
            ("current-watching", used.watching.to_string()),
            ("current-waiting", used.waiting.to_string()),
            (
                "cmd-delete",
                (s.counters.acked + s.counters.cancelled).to_string(),
            ),
            ("cmd-pause-tube", used.pauses.to_string()),
            ("pause", pause_s.to_string()),
            ("pause-time-left", secs_left(paused_left).to_string()),
        ]))
    }

    pub(super) async fn stats(&mut self) -> Reply {
        let all = match self.tubes().await {
            Ok(a) => a,
            Err(e) => return failed(&e),
        };
        let sum = |f: fn(&TopicStats) -> u64| all.iter().map(|(_, s)| f(s)).sum::<u64>();
        let mut urgent = 0;
        for (t, s) in &all {
            match self.urgent(t, s.ready).await {
                Ok(n) => urgent += n,
                Err(e) => return failed(&e),
            }
        }
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed).to_string();
        let (utime, stime) = rusage();
        let mut fields: Vec<(String, String)> = vec![
            ("current-jobs-urgent".into(), urgent.to_string()),
            ("current-jobs-ready".into(), sum(|s| s.ready).to_string()),
            (
                "current-jobs-reserved".into(),
                sum(|s| s.reserved).to_string(),
            ),
            (
                "current-jobs-delayed".into(),
                sum(|s| s.scheduled).to_string(),
            ),
            ("current-jobs-buried".into(), sum(|s| s.dead).to_string()),
        ];
        for (name, n) in self.shared.op_counts() {
            fields.push((format!("cmd-{name}"), n.to_string()));
        }
        let sh = &self.shared;
        let rest: Vec<(&str, String)> = vec![
            ("job-timeouts", sum(|s| s.counters.expired).to_string()),
            ("total-jobs", sum(|s| s.counters.enqueued).to_string()),
            ("max-job-size", self.config.max_job_size.to_string()),
            ("current-tubes", all.len().to_string()),
            ("current-connections", load(&sh.connections)),
            ("current-producers", load(&sh.producers)),
            ("current-workers", load(&sh.workers)),
            ("current-waiting", load(&sh.waiting)),
            ("total-connections", load(&sh.total_connections)),
            ("pid", std::process::id().to_string()),
            ("version", format!("\"{VERSION}\"")),
            ("rusage-utime", utime),
            ("rusage-stime", stime),
            ("uptime", self.started.elapsed().as_secs().to_string()),
            ("binlog-oldest-index", "0".into()),
            ("binlog-current-index", "0".into()),
            ("binlog-records-migrated", "0".into()),
            ("binlog-records-written", "0".into()),
            ("binlog-max-size", BINLOG_MAX_SIZE.to_string()),
            ("draining", self.draining().to_string()),
            ("id", sh.id.clone()),
            ("hostname", kernel("hostname")),
            ("os", kernel("version")),
            ("platform", std::env::consts::ARCH.to_string()),
            ("dq-version", format!("\"{}\"", env!("CARGO_PKG_VERSION"))),
        ];
        fields.extend(rest.into_iter().map(|(k, v)| (k.to_string(), v)));
        let pairs: Vec<(&str, String)> = fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        ok_yaml(yaml(&pairs))
    }

    /// Whether puts are refused (`draining` in `stats`).
    fn draining(&self) -> bool {
        self.svc.is_draining()
    }
}
