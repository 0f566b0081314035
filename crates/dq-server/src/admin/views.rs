//! What the admin pages show: one askama template struct per page (the
//! templates are in `crates/dq-server/templates/`, each extending
//! `base.html`), built from what the handlers looked up, and the text they
//! print: durations, relative times, body previews, the `done=` sentences.
//!
//! Values reach the HTML only through these templates, which escape them;
//! none is marked safe. URLs are percent-encoded here ([`enc`]) and escaped
//! again by the template, which leaves them as they are.

use std::time::{Duration, UNIX_EPOCH};

use askama::Template;
use base64::Engine;
use dq_api::units;
use dq_core::{Body, Delivery, JobInfo, JobState, PushMethod, Topic, TopicConfig, TopicStats};

use super::Viewer;
use super::rates::Point;
use crate::error::ApiError;

/// Percent-encodes a path segment or query value.
pub(super) fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// The path of a topic's page.
pub(super) fn topic_href(name: &str) -> String {
    format!("/admin/topics/{}", enc(name))
}

/// "850 ms", "1.5 s", "2.0 min", "3.0 h", "4.0 d".
pub(super) fn ms_human(ms: u64) -> String {
    match ms {
        m if m < 1000 => format!("{m} ms"),
        m if m < 120_000 => format!("{:.1} s", m as f64 / 1000.0),
        m if m < 7_200_000 => format!("{:.1} min", m as f64 / 60_000.0),
        m if m < 172_800_000 => format!("{:.1} h", m as f64 / 3_600_000.0),
        m => format!("{:.1} d", m as f64 / 86_400_000.0),
    }
}

/// A Unix time in ms as RFC 3339 (UTC, milliseconds).
fn at(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// "in 5.0 s" / "3.0 s ago".
fn relative(ms: u64, now: u64) -> String {
    if ms >= now {
        format!("in {}", ms_human(ms - now))
    } else {
        format!("{} ago", ms_human(now - ms))
    }
}

/// A body as one line: JSON cut at 120 characters, binary as its size.
fn preview(b: &Body) -> String {
    match b {
        Body::Json(s) if s.chars().count() > 120 => {
            format!("{}…", s.chars().take(120).collect::<String>())
        }
        Body::Json(s) => s.clone(),
        Body::Bytes(b) => format!("({} bytes, binary)", b.len()),
    }
}

/// JSON text (valid: bodies are checked on the way in) indented by two
/// spaces a level, keys and numbers kept exactly as sent (a parse into a
/// `serde_json::Value` would sort the keys and round big numbers).
fn indent_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    while let Some(ch) = chars.next() {
        if in_string {
            out.push(ch);
            match ch {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match ch {
            '"' => {
                in_string = true;
                out.push(ch);
            }
            '{' | '[' => {
                out.push(ch);
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|c| matches!(c, '}' | ']')) {
                    out.extend(chars.next());
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(ch);
            }
            ',' => {
                out.push(ch);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// `text` cut to [`BODY_SHOWN`] bytes (at a character), saying so.
fn cut(mut text: String) -> String {
    if text.len() > BODY_SHOWN {
        let mut end = BODY_SHOWN;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let all = text.len();
        text.truncate(end);
        text.push_str(&format!("\n… (cut: the first {end} of {all} bytes shown)"));
    }
    text
}

/// A lateness bucket bound in seconds as "≤ 50 ms" (the last: "> 60 s").
fn secs_bound(s: f64) -> String {
    if s.is_infinite() {
        "> 60 s".into()
    } else {
        format!("≤ {}", ms_human((s * 1000.0).round() as u64))
    }
}

/// "–" for no overdue job, else how long.
fn overdue(ms: u64) -> String {
    if ms == 0 { "–".into() } else { ms_human(ms) }
}

/// The sentence a `done=` code stands for (`n`: how many, for replay and
/// purge); None for an unknown code.
pub(super) fn done_text(code: &str, n: u64) -> Option<String> {
    Some(match code {
        "created" => "Topic registered.".into(),
        "saved" => "Settings saved.".into(),
        "cancelled" => "Job cancelled.".into(),
        "rescheduled" => "Job rescheduled.".into(),
        "run" => "Job made due now.".into(),
        "replayed" => format!("{n} dead letter(s) replayed: due now, attempts reset."),
        "purged" => format!("{n} dead letter(s) deleted."),
        "paused" => "Topic paused: nothing is handed out until the pause ends.".into(),
        "resumed" => "Topic resumed.".into(),
        "deleted" => format!("Topic deleted, with its {n} job(s)."),
        "schedule-paused" => "Schedule paused: it fires nothing more until resumed (jobs already enqueued, due within 2 s, still run).".into(),
        "schedule-resumed" => "Schedule resumed: it fires from now on.".into(),
        "schedule-deleted" => "Schedule deleted.".into(),
        _ => return None,
    })
}

/// What the layout (`base.html`) needs: the title, the viewer, whether the
/// page reloads itself.
pub(super) struct Layout<'a> {
    /// The `<title>` (before " · dq") and the heading.
    title: String,
    /// Reload every 5 s (the overview).
    refresh: bool,
    /// An admin token is configured: the viewer is signed in and may sign
    /// out; without one the page says it answers on loopback only.
    token: bool,
    /// The CSRF token every form carries (`csrf.html`).
    csrf: &'a str,
    /// The key signed in (None: the admin token, or no sign-in).
    who: Option<&'a str>,
}

impl<'a> Layout<'a> {
    fn new(v: &'a Viewer, title: impl Into<String>, refresh: bool) -> Self {
        Self {
            title: title.into(),
            refresh,
            token: v.token,
            csrf: &v.csrf,
            who: match &v.access {
                crate::auth::Access::Key(k) => Some(k.name.as_str()),
                _ => None,
            },
        }
    }
}

/// A refused action: status, code and message of the API's error.
#[derive(Template)]
#[template(path = "error.html")]
pub(super) struct ErrorPage<'a> {
    page: Layout<'a>,
    status: u16,
    code: &'static str,
    message: &'a str,
    back: &'a str,
}

impl<'a> ErrorPage<'a> {
    pub(super) fn new(v: &'a Viewer, e: &'a ApiError, back: &'a str) -> Self {
        Self {
            page: Layout::new(v, "Not done", false),
            status: e.status.as_u16(),
            code: e.code,
            message: &e.message,
            back,
        }
    }
}

/// The sign-in form.
#[derive(Template)]
#[template(path = "login.html")]
pub(super) struct LoginPage<'a> {
    page: Layout<'a>,
    /// The last try was the wrong token.
    failed: bool,
    /// Where to go once signed in.
    next: &'a str,
}

impl<'a> LoginPage<'a> {
    pub(super) fn new(v: &'a Viewer, failed: bool, next: &'a str) -> Self {
        Self {
            page: Layout::new(v, "Sign in", false),
            failed,
            next,
        }
    }
}

/// The question asked before replaying or purging dead letters; its form
/// posts the same fields again with `confirm=yes`.
#[derive(Template)]
#[template(path = "confirm.html")]
pub(super) struct ConfirmPage<'a> {
    page: Layout<'a>,
    question: String,
    /// The topic page (the "no" link).
    back: &'a str,
    /// Where the form posts.
    action: String,
    /// The fields posted again.
    fields: Vec<(&'a str, &'a str)>,
    /// What "yes" does ("replay", "delete them").
    yes: &'static str,
}

impl<'a> ConfirmPage<'a> {
    /// Asks `question`; "yes" posts `fields` again to `action` with
    /// `confirm=yes`, "no" goes back to `back`.
    pub(super) fn new(
        v: &'a Viewer,
        question: String,
        back: &'a str,
        action: String,
        fields: Vec<(&'a str, &'a str)>,
        yes: &'static str,
    ) -> Self {
        Self {
            page: Layout::new(v, "Confirm", false),
            question,
            back,
            action,
            fields,
            yes,
        }
    }
}

/// `/admin/schedules`: every schedule, its next and last runs.
#[derive(Template)]
#[template(path = "schedules.html")]
pub(super) struct SchedulesPage<'a> {
    page: Layout<'a>,
    flash: Option<String>,
    schedules: Vec<ScheduleRow>,
}

impl<'a> SchedulesPage<'a> {
    pub(super) fn new(
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
pub(super) struct ScheduleRow {
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

/// `/`: the stores' health, a page of the topics (with a search by name
/// prefix), the form registering one.
#[derive(Template)]
#[template(path = "overview.html")]
pub(super) struct OverviewPage<'a> {
    page: Layout<'a>,
    /// What the last action did.
    flash: Option<String>,
    stores: Vec<StoreRow>,
    topics: Vec<TopicRow>,
    listing: TopicListing,
    /// The viewer may register topics.
    manage: bool,
}

/// Which page of the topics the overview shows, and the links around it.
pub(super) struct TopicListing {
    /// The search: topics whose name starts with it ("" for all).
    pub(super) prefix: String,
    /// Why the search or page was refused (a bad prefix or cursor).
    pub(super) error: Option<String>,
    /// The link to the previous page, when there is one.
    pub(super) prev: Option<String>,
    /// The link to the next page, when there is one.
    pub(super) next: Option<String>,
}

impl<'a> OverviewPage<'a> {
    pub(super) fn new(
        v: &'a Viewer,
        done: Option<(String, u64)>,
        stores: Vec<StoreRow>,
        topics: Vec<TopicRow>,
        listing: TopicListing,
    ) -> Self {
        Self {
            page: Layout::new(v, "Topics", true),
            flash: done.and_then(|(code, n)| done_text(&code, n)),
            stores,
            topics,
            listing,
            manage: v.access.allows_any(crate::keys::Action::Manage),
        }
    }
}

/// A store (or one of its parts) and whether it answers.
pub(super) struct StoreRow {
    name: String,
    /// Why it does not answer; None when it does.
    error: Option<String>,
}

impl StoreRow {
    pub(super) fn new(name: &str, error: Option<String>) -> Self {
        Self {
            name: name.to_string(),
            error,
        }
    }
}

/// A topic on the overview.
pub(super) struct TopicRow {
    name: String,
    href: String,
    /// "pull", "push", or "?" when its config could not be read.
    mode: &'static str,
    stats: TopicStats,
    overdue: String,
    enqueued_rate: String,
    acked_rate: String,
    lateness_p50: String,
    lateness_p99: String,
}

impl TopicRow {
    /// `rates`: enqueued and acked per second; `lateness`: p50 and p99
    /// bucket bounds in seconds; "–" where not known yet.
    pub(super) fn new(
        t: &Topic,
        mode: &'static str,
        stats: TopicStats,
        rates: Option<(f64, f64)>,
        lateness: Option<(f64, f64)>,
    ) -> Self {
        let (enqueued_rate, acked_rate) = rates.map_or(("–".into(), "–".into()), |(e, a)| {
            (format!("{e:.1}"), format!("{a:.1}"))
        });
        let (lateness_p50, lateness_p99) = lateness
            .map_or(("–".into(), "–".into()), |(p50, p99)| {
                (secs_bound(p50), secs_bound(p99))
            });
        Self {
            name: t.as_str().to_string(),
            href: topic_href(t.as_str()),
            mode,
            overdue: overdue(stats.oldest_overdue_ms),
            stats,
            enqueued_rate,
            acked_rate,
            lateness_p50,
            lateness_p99,
        }
    }
}

/// `/admin/topics/{t}`: counts, lookup, dead letters, next due, settings.
#[derive(Template)]
#[template(path = "topic.html")]
pub(super) struct TopicPage<'a> {
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
pub(super) struct TopicParts {
    pub(super) stats: TopicStats,
    pub(super) config: TopicConfig,
    /// The `done=` code and `n=` of the last action.
    pub(super) done: Option<(String, u64)>,
    /// The `job=` asked for, and what was found.
    pub(super) job: Option<(String, Option<JobInfo>)>,
    pub(super) dead: Vec<JobInfo>,
    /// The `died=` filter, when one of 1h, 24h, 7d.
    pub(super) died: Option<&'static str>,
    /// The state the job list shows, a page of its jobs, and the cursor
    /// of the page after (None: the last page).
    pub(super) state: JobState,
    pub(super) jobs: Vec<JobInfo>,
    pub(super) next: Option<String>,
    /// The page shown is not the first.
    pub(super) later: bool,
    /// The last hour of this instance's samples of the topic.
    pub(super) chart: Vec<Point>,
    pub(super) now: u64,
}

impl<'a> TopicPage<'a> {
    pub(super) fn new(v: &'a Viewer, t: &Topic, p: TopicParts) -> Self {
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
            ("expired", s.counters.expired),
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

/// The job lookup: what was typed, and what was found.
struct Lookup {
    query: String,
    /// None when nothing was asked.
    found: Option<Found>,
}

enum Found {
    Job(Box<JobDetails>),
    /// The id asked for, quoted.
    Missing(String),
}

/// A job found by the lookup: everything known about it, its body in full
/// (pretty-printed), the limits in effect for it, what may be done to it.
struct JobDetails {
    id: String,
    /// Where its forms post (`…/jobs/{id}`).
    action: String,
    state: JobState,
    due_at: String,
    due_in: String,
    /// "1 of 3": hand-outs so far of those allowed.
    attempts: String,
    priority: u32,
    created_at: String,
    /// The lease's deadline and how far off, when reserved.
    lease_deadline: Option<String>,
    /// When it died and how long ago, when dead.
    died_at: Option<String>,
    last_error: String,
    /// Its flow-control key, when it has one.
    key: Option<String>,
    /// Timeouts, releases, buries, kicks so far.
    history: String,
    /// "JSON, 42 bytes" / "binary, 3 bytes, as base64".
    body_kind: String,
    /// The body: JSON indented, bytes as base64; cut past [`BODY_SHOWN`].
    body: String,
    /// The limits in effect, in the CLI's units.
    max_attempts: u32,
    lease: String,
    retry: String,
}

/// At most this much of a body is shown (bytes of its text).
const BODY_SHOWN: usize = 64 * 1024;

impl JobDetails {
    fn new(base: &str, j: &JobInfo, now: u64, cfg: &TopicConfig) -> Self {
        let when = |ms: u64| format!("{} ({})", at(ms), relative(ms, now));
        let c = &j.counts;
        let (body_kind, body) = match &j.body {
            Body::Json(text) => (format!("JSON, {} bytes", text.len()), indent_json(text)),
            Body::Bytes(b) => (
                format!("binary, {} bytes, as base64", b.len()),
                base64::engine::general_purpose::STANDARD.encode(b),
            ),
        };
        Self {
            id: j.id.as_str().to_string(),
            action: format!("{base}/jobs/{}", enc(j.id.as_str())),
            state: j.state,
            due_at: at(j.due_at_ms),
            due_in: relative(j.due_at_ms, now),
            attempts: format!("{} of {}", j.attempts, j.max_attempts),
            priority: j.priority,
            created_at: at(j.created_at_ms),
            lease_deadline: j.lease_deadline_ms.map(when),
            died_at: j.died_at_ms.map(when),
            last_error: j.last_error.clone().unwrap_or_else(|| "–".into()),
            key: j.key.as_ref().map(ToString::to_string),
            history: format!(
                "{} lease(s) expired, {} given back, {} buried, {} replayed",
                c.timeouts, c.releases, c.buries, c.kicks
            ),
            body_kind,
            body: cut(body),
            max_attempts: j.max_attempts,
            lease: units::format_ms(j.lease_ms),
            retry: units::format_retry(&cfg.retry),
        }
    }

    fn reschedulable(&self) -> bool {
        matches!(self.state, JobState::Scheduled | JobState::Ready)
    }

    fn scheduled(&self) -> bool {
        self.state == JobState::Scheduled
    }

    fn dead(&self) -> bool {
        self.state == JobState::Dead
    }
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

/// The chart of the topic page: enqueues and acks per second (left scale)
/// and the oldest overdue job's age (right scale), a point a minute over
/// the last hour, as SVG drawn here (numbers only reach it).
struct Chart {
    /// `x,y x,y …` of each line, in the SVG's coordinates.
    enqueued: String,
    acked: String,
    overdue: String,
    /// The top of each scale: per second, and seconds.
    rate_max: String,
    overdue_max: String,
    /// How many minutes it has (0: nothing to draw yet).
    points: usize,
    /// The latest minute's figures in words (the chart's text alternative).
    latest: String,
}

/// The chart's drawing area inside its 600 × 170 box.
const CHART_LEFT: f64 = 44.0;
const CHART_RIGHT: f64 = 556.0;
const CHART_TOP: f64 = 10.0;
const CHART_BOTTOM: f64 = 140.0;

impl Chart {
    fn new(points: &[Point], now: u64) -> Self {
        let rate_max = points
            .iter()
            .map(|p| p.enqueued.max(p.acked))
            .fold(0.0, f64::max);
        let rate_top = nice_top(rate_max);
        let overdue_top = nice_top(points.iter().map(|p| p.overdue_s).fold(0.0, f64::max));
        let start = now.saturating_sub(3_600_000) as f64;
        let x = |at: u64| {
            let f = ((at as f64 - start) / 3_600_000.0).clamp(0.0, 1.0);
            CHART_LEFT + f * (CHART_RIGHT - CHART_LEFT)
        };
        let y = |v: f64, top: f64| CHART_BOTTOM - (v / top).min(1.0) * (CHART_BOTTOM - CHART_TOP);
        let line = |v: &dyn Fn(&Point) -> f64, top: f64| {
            points
                .iter()
                .map(|p| format!("{:.1},{:.1}", x(p.at), y(v(p), top)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        Self {
            enqueued: line(&|p| p.enqueued, rate_top),
            acked: line(&|p| p.acked, rate_top),
            overdue: line(&|p| p.overdue_s, overdue_top),
            rate_max: format!("{rate_top}/s"),
            overdue_max: ms_human((overdue_top * 1000.0) as u64),
            points: points.len(),
            latest: points.last().map_or_else(
                || "no samples yet".into(),
                |p| {
                    format!(
                        "last minute: {:.1} enqueued/s, {:.1} acked/s, oldest overdue {}",
                        p.enqueued,
                        p.acked,
                        overdue((p.overdue_s * 1000.0) as u64)
                    )
                },
            ),
        }
    }
}

/// A round top for a scale at least `max` (1, 2 or 5 times a power of ten;
/// 1 for nothing).
fn nice_top(max: f64) -> f64 {
    if max <= 1.0 || !max.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|t| *t >= max)
        .unwrap_or(10.0 * p)
}

/// The settings form's values. Push secrets and header values are not
/// among them: the form shows how many secrets are set, nothing more.
///
/// Durations and the retry policy are in the CLI's units (`30s`,
/// `1m,3m,5m`): what `dq topics put` takes, and what the form reads back.
struct Settings {
    max_attempts: u32,
    lease: String,
    dead_cap: u64,
    default_delay: String,
    partitions: u32,
    /// The rate limit's fields, empty when the topic has none.
    rate_limit: String,
    rate_per: String,
    rate_burst: String,
    /// Leases per flow-control key, empty when unlimited.
    key_concurrency: String,
    /// The per-key rate limit's fields, empty when the topic has none.
    key_rate_limit: String,
    key_rate_per: String,
    key_rate_burst: String,
    /// The retry policy (`1m,3m,5m`, `fixed:30s`, `exp:1s,2,1h`).
    retry: String,
    push: bool,
    /// A forwarding topic's target in words (its password redacted): the
    /// form keeps it as it is.
    forward: Option<String>,
    url: String,
    get: bool,
    timeout: String,
    concurrency: u32,
    secrets: usize,
}

impl Settings {
    fn new(cfg: &TopicConfig) -> Self {
        let p = match &cfg.delivery {
            Delivery::Push(p) => Some(p),
            _ => None,
        };
        let forward = match &cfg.delivery.redacted() {
            Delivery::RedisStream(s) => Some(format!("Redis stream {} at {}", s.stream, s.url)),
            Delivery::RedisList(l) => Some(format!("Redis list {} at {}", l.list, l.url)),
            _ => None,
        };
        Self {
            max_attempts: cfg.max_attempts,
            lease: units::format_ms(cfg.lease_ms),
            dead_cap: cfg.dead_cap,
            default_delay: units::format_ms(cfg.default_delay_ms),
            partitions: cfg.partitions,
            rate_limit: cfg
                .rate_limit
                .map_or_else(String::new, |r| r.limit.to_string()),
            rate_per: cfg
                .rate_limit
                .map_or_else(String::new, |r| units::format_ms(r.per_ms)),
            rate_burst: cfg
                .rate_limit
                .map_or_else(String::new, |r| r.burst.to_string()),
            key_concurrency: cfg
                .key_concurrency
                .map_or_else(String::new, |k| k.to_string()),
            key_rate_limit: cfg
                .key_rate_limit
                .map_or_else(String::new, |r| r.limit.to_string()),
            key_rate_per: cfg
                .key_rate_limit
                .map_or_else(String::new, |r| units::format_ms(r.per_ms)),
            key_rate_burst: cfg
                .key_rate_limit
                .map_or_else(String::new, |r| r.burst.to_string()),
            retry: units::format_retry(&cfg.retry),
            push: p.is_some(),
            forward,
            url: p.map_or_else(String::new, |p| p.url.clone()),
            get: p.is_some_and(|p| p.method == PushMethod::Get),
            timeout: units::format_ms(p.map_or(3000, |p| p.timeout_ms)),
            concurrency: p.map_or(16, |p| p.concurrency),
            secrets: p.map_or(0, |p| p.secrets.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_path_segments() {
        assert_eq!(enc("a b/c?"), "a%20b%2Fc%3F");
        assert_eq!(topic_href("<x>&"), "/admin/topics/%3Cx%3E%26");
    }

    #[test]
    fn durations_for_people() {
        assert_eq!(ms_human(850), "850 ms");
        assert_eq!(ms_human(1500), "1.5 s");
        assert_eq!(ms_human(120_000), "2.0 min");
        assert_eq!(ms_human(3 * 86_400_000), "3.0 d");
        assert_eq!(relative(6000, 1000), "in 5.0 s");
        assert_eq!(relative(1000, 4000), "3.0 s ago");
        assert_eq!(secs_bound(0.05), "≤ 50 ms");
        assert_eq!(secs_bound(f64::INFINITY), "> 60 s");
    }

    #[test]
    fn the_chart_scales_and_places_its_points() {
        let hour = 3_600_000;
        let p = |at, enqueued, acked, overdue_s| Point {
            at,
            enqueued,
            acked,
            overdue_s,
        };
        let c = Chart::new(&[p(hour / 2, 3.0, 1.5, 0.0), p(hour, 6.0, 0.0, 12.0)], hour);
        assert_eq!(c.points, 2);
        assert_eq!(c.rate_max, "10/s", "a round top above 6");
        assert_eq!(c.overdue_max, "20.0 s");
        assert_eq!(c.enqueued, "300.0,101.0 556.0,62.0");
        assert_eq!(c.acked, "300.0,120.5 556.0,140.0");
        assert_eq!(c.overdue, "300.0,140.0 556.0,62.0");
        assert!(c.latest.contains("6.0 enqueued/s"), "{}", c.latest);
        assert_eq!(Chart::new(&[], hour).latest, "no samples yet");
        assert_eq!(nice_top(0.0), 1.0);
        assert_eq!(nice_top(1.5), 2.0);
        assert_eq!(nice_top(20.0), 20.0);
        assert_eq!(nice_top(501.0), 1000.0);
    }

    #[test]
    fn json_bodies_indented_as_sent() {
        assert_eq!(
            indent_json(
                r#"{"b":[1, {"a":[]}],"big":123456789012345678901234567890,"s":"x\",{[:"}"#
            ),
            "{\n  \"b\": [\n    1,\n    {\n      \"a\": []\n    }\n  ],\n  \"big\": 123456789012345678901234567890,\n  \"s\": \"x\\\",{[:\"\n}"
        );
        assert_eq!(indent_json("{ }"), "{}");
        assert_eq!(indent_json("42"), "42");
        let long = cut("é".repeat(BODY_SHOWN));
        assert!(
            long.ends_with(&format!(
                "(cut: the first {} of {} bytes shown)",
                BODY_SHOWN,
                2 * BODY_SHOWN
            )),
            "{}",
            &long[long.len() - 80..]
        );
    }

    #[test]
    fn values_are_escaped_and_secrets_left_out() {
        let v = Viewer {
            session: String::new(),
            csrf: "tok\"en".into(),
            token: true,
            access: crate::auth::Access::Admin,
        };
        let e = ApiError::bad_request("invalid_topic", "<script>alert(1)</script>");
        let html = ErrorPage::new(&v, &e, "/?a=1&b=\"2\"").render().unwrap();
        assert!(
            html.contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
            "{html}"
        );
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains(r#"value="tok&#34;en""#), "{html}");
        assert!(html.contains(r#"href="/?a=1&#38;b=&#34;2&#34;""#), "{html}");
        assert!(
            !html.contains("auth-notice"),
            "signed in: no loopback notice"
        );

        let cfg = TopicConfig {
            delivery: Delivery::Push(dq_core::PushConfig {
                url: "http://127.0.0.1:9/hook".into(),
                method: PushMethod::Get,
                timeout_ms: 1000,
                headers: [("X-Api-Key".to_string(), "header-value-123".to_string())]
                    .into_iter()
                    .collect(),
                concurrency: 4,
                secrets: vec!["whsec_secret-value-456".into()],
            }),
            ..Default::default()
        };
        let t = Topic::new("shop:eu".to_string()).unwrap();
        let html = TopicPage::new(
            &v,
            &t,
            TopicParts {
                stats: TopicStats::default(),
                config: cfg,
                done: Some(("saved".into(), 0)),
                job: None,
                dead: Vec::new(),
                died: None,
                state: JobState::Scheduled,
                jobs: Vec::new(),
                next: None,
                later: false,
                chart: Vec::new(),
                now: 0,
            },
        )
        .render()
        .unwrap();
        assert!(!html.contains("secret-value-456"), "{html}");
        assert!(!html.contains("header-value-123"), "{html}");
        assert!(html.contains("1 set (hidden)"), "{html}");
        assert!(html.contains("<title>Topic shop:eu · dq</title>"), "{html}");
        assert!(
            html.contains(r#"action="/admin/topics/shop%3Aeu/settings""#),
            "{html}"
        );
        assert!(html.contains(r#"<p class="flash" id="flash">Settings saved.</p>"#));
        assert!(html.contains(r#"<option selected>GET</option>"#), "{html}");
    }
}
