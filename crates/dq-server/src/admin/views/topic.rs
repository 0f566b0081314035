//! `/admin/topics/{t}`: the topic page, with its counts, the jobs of one
//! state, its dead letters (the job lookup is in `job`, the chart in
//! `chart`, the settings form in `settings`).

use askama::Template;
use dq_core::{JobInfo, JobState, Topic, TopicConfig, TopicStats};

use super::Layout;
use super::chart::Chart;
use super::format::{at, done_text, enc, overdue, preview, relative, topic_href};
use super::job::{Found, JobDetails, Lookup};
use super::settings::Settings;
use crate::admin::Viewer;
use crate::rates::Point;

/// `/admin/topics/{t}`: counts, lookup, dead letters, next due, settings.
#[derive(Template)]
#[template(path = "topic.html")]
pub(in crate::admin) struct TopicPage<'a> {
    page: Layout<'a>,
    /// The topic page's path (forms post below it).
    base: String,
    /// What the last action did.
    flash: Option<String>,
    counts: Vec<Count>,
    overdue: String,
    /// "until <time> (<in>)" while the topic is paused.
    paused: Option<String>,
    /// Store parts that did not answer (the counts leave their jobs out).
    missing: Vec<String>,
    lookup: Lookup,
    dead: DeadLetters,
    jobs: JobList,
    chart: Chart,
    settings: Settings,
    /// The viewer may change the topic: the page shows its forms.
    manage: bool,
}

/// What [`TopicPage`] is made of, as looked up.
pub(in crate::admin) struct TopicParts {
    pub(in crate::admin) stats: TopicStats,
    pub(in crate::admin) config: TopicConfig,
    /// The `done=` code and `n=` of the last action.
    pub(in crate::admin) done: Option<(String, u64)>,
    /// The `job=` asked for, and what was found.
    pub(in crate::admin) job: Option<(String, Option<JobInfo>)>,
    pub(in crate::admin) dead: Vec<JobInfo>,
    /// The `died=` filter, when one of 1h, 24h, 7d.
    pub(in crate::admin) died: Option<&'static str>,
    /// The state the job list shows, a page of its jobs, and the cursor
    /// of the page after (None: the last page).
    pub(in crate::admin) state: JobState,
    pub(in crate::admin) jobs: Vec<JobInfo>,
    pub(in crate::admin) next: Option<String>,
    /// The page shown is not the first.
    pub(in crate::admin) later: bool,
    /// The last hour of this instance's samples of the topic.
    pub(in crate::admin) chart: Vec<Point>,
    pub(in crate::admin) now: u64,
}

impl<'a> TopicPage<'a> {
    pub(in crate::admin) fn new(v: &'a Viewer, t: &Topic, p: TopicParts) -> Self {
        let base = topic_href(t.as_str());
        let jobs = JobList::new(&base, &p);
        let s = &p.stats;
        let counts = [
            ("scheduled", s.scheduled),
            ("ready", s.ready),
            ("reserved", s.reserved),
            ("dead", s.dead),
            ("enqueued", s.counters.enqueued),
            ("acked", s.counters.acked),
            ("failed", s.counters.failed),
            ("leases expired", s.counters.expired),
            ("jobs expired", s.counters.expired_unhandled),
            ("cancelled", s.counters.cancelled),
            ("replayed", s.counters.replayed),
            ("rate limited", s.counters.rate_limited),
        ]
        .into_iter()
        .map(|(name, n)| Count {
            name,
            n,
            bad: name == "dead" && n > 0,
        })
        .collect();
        let lookup = match p.job {
            None => Lookup {
                query: String::new(),
                found: None,
            },
            Some((query, job)) => Lookup {
                found: (!query.is_empty()).then(|| match job {
                    Some(j) => Found::Job(Box::new(JobDetails::new(&base, &j, p.now, &p.config))),
                    None => Found::Missing(format!("{query:?}")),
                }),
                query,
            },
        };
        let total = s.dead;
        let dead = DeadLetters {
            total,
            died: p.died.unwrap_or(""),
            partial: (p.dead.len() as u64) < total,
            filtered: p.died.is_some(),
            rows: p
                .dead
                .iter()
                .map(|j| DeadRow::new(&base, j, p.now))
                .collect(),
        };
        Self {
            manage: v.manages(t.as_str()),
            page: Layout::new(v, format!("Topic {}", t.as_str()), false),
            flash: p.done.and_then(|(code, n)| done_text(&code, n)),
            counts,
            overdue: overdue(s.oldest_overdue_ms),
            paused: if p.config.paused {
                Some("until resumed".to_string())
            } else {
                (s.paused_until_ms > p.now).then(|| {
                    format!(
                        "until {} ({})",
                        at(s.paused_until_ms),
                        relative(s.paused_until_ms, p.now)
                    )
                })
            },
            missing: if s.partial {
                s.missing.clone()
            } else {
                Vec::new()
            },
            lookup,
            dead,
            jobs,
            chart: Chart::new(&p.chart, p.now),
            settings: Settings::new(&p.config),
            base,
        }
    }
}

/// One of the topic's counts.
struct Count {
    name: &'static str,
    n: u64,
    /// Shown in red (dead letters).
    bad: bool,
}

/// The dead letters shown, newest first.
struct DeadLetters {
    /// How many the topic keeps.
    total: u64,
    /// The `died=` filter ("" for any time).
    died: &'static str,
    /// Fewer shown than kept.
    partial: bool,
    /// A `died=` filter is on.
    filtered: bool,
    rows: Vec<DeadRow>,
}

struct DeadRow {
    id: String,
    href: String,
    attempts: u32,
    died_at: String,
    died_ago: String,
    last_error: String,
    /// The body, cut ([`preview`]).
    body: String,
}

impl DeadRow {
    fn new(base: &str, j: &JobInfo, now: u64) -> Self {
        Self {
            id: j.id.as_str().to_string(),
            href: format!("{base}?job={}#found", enc(j.id.as_str())),
            attempts: j.attempts,
            died_at: j.died_at_ms.map(at).unwrap_or_default(),
            died_ago: j.died_at_ms.map_or("–".into(), |d| relative(d, now)),
            last_error: j.last_error.clone().unwrap_or_default(),
            body: preview(&j.body),
        }
    }
}

/// One page of the topic's jobs in one state, with the tabs to the others.
struct JobList {
    /// The four states: name, count, link, whether it is the one shown.
    tabs: Vec<Tab>,
    /// The state shown.
    state: JobState,
    /// What the "when" column holds for it.
    when: &'static str,
    rows: Vec<JobRow>,
    /// The link to the page after, when there is one.
    next: Option<String>,
    /// The link to the first page, when this is not it.
    first: Option<String>,
}

struct Tab {
    name: &'static str,
    n: u64,
    href: String,
    on: bool,
}

impl JobList {
    fn new(base: &str, p: &TopicParts) -> Self {
        let (s, state) = (&p.stats, p.state);
        let href = |st: JobState| format!("{base}?state={}", st.as_str());
        let tabs = [
            (JobState::Scheduled, s.scheduled),
            (JobState::Ready, s.ready),
            (JobState::Reserved, s.reserved),
            (JobState::Dead, s.dead),
        ]
        .into_iter()
        .map(|(st, n)| Tab {
            name: st.as_str(),
            n,
            href: href(st),
            on: st == state,
        })
        .collect();
        Self {
            tabs,
            state,
            when: match state {
                JobState::Scheduled | JobState::Ready => "due",
                JobState::Reserved => "lease ends",
                JobState::Dead => "died",
            },
            rows: p.jobs.iter().map(|j| JobRow::new(base, j, p.now)).collect(),
            next: p
                .next
                .as_ref()
                .map(|c| format!("{}&cursor={}", href(state), enc(c))),
            first: p.later.then(|| href(state)),
        }
    }
}

/// A job of the state list: when (due, lease deadline or death, relative,
/// the time itself as its title), attempt, priority, body or last error.
struct JobRow {
    id: String,
    href: String,
    when_at: String,
    when: String,
    /// "2 of 5": hand-outs so far (for a reserved job: the attempt it is
    /// on) of those allowed.
    attempt: String,
    priority: u32,
    /// The body's preview; a dead letter's last error.
    text: String,
}

impl JobRow {
    fn new(base: &str, j: &JobInfo, now: u64) -> Self {
        let when_ms = match j.state {
            JobState::Reserved => j.lease_deadline_ms,
            JobState::Dead => j.died_at_ms,
            _ => Some(j.due_at_ms),
        };
        Self {
            id: j.id.as_str().to_string(),
            href: format!(
                "{base}?state={}&job={}#found",
                j.state.as_str(),
                enc(j.id.as_str())
            ),
            when_at: when_ms.map(at).unwrap_or_default(),
            when: when_ms.map_or("–".into(), |w| relative(w, now)),
            attempt: format!("{} of {}", j.attempts, j.max_attempts),
            priority: j.priority,
            text: match (j.state, &j.last_error) {
                (JobState::Dead, Some(e)) => e.clone(),
                _ => preview(&j.body),
            },
        }
    }
}
