//! The admin page: server-rendered HTML with plain forms (no JavaScript, no
//! build step). Every value shown is escaped; every form carries a CSRF
//! token; who may see it is decided by [`crate::auth`].
//!
//! - `/` — every topic with counts, enqueue/ack rates, oldest overdue age and
//!   lateness; the store's health; a form registering a topic.
//! - `/admin/topics/{t}` — counts, settings (editable, push callback
//!   included), the next due jobs, job lookup (`?job=ID`) with cancel /
//!   reschedule / run now, and dead letters (newest first, `?died=1h|24h|7d`)
//!   with replay one / selected / all and purge, each confirmed on a second
//!   page before anything changes.
//!
//! Actions answer with a redirect (303) back to the page and a `done=` code
//! shown as a fixed sentence; refused input shows the API's error message.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write;
use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use dq_core::{
    Body, Delivery, JobId, JobInfo, JobState, PushConfig, PushMethod, RetryPolicy, StoreError,
    Topic, TopicConfig, TopicConfigPatch,
};
use serde::Deserialize;

use crate::AppState;
use crate::auth::{SESSION_COOKIE, SESSION_MAX_AGE_MS, session};
use crate::error::ApiError;
use crate::service::Error;

/// The admin routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(overview))
        .route("/admin/login", get(login_page).post(login))
        .route("/admin/logout", post(logout))
        .route("/admin/topics", post(create_topic))
        .route("/admin/topics/{topic}", get(topic_page))
        .route("/admin/topics/{topic}/settings", post(save_settings))
        .route("/admin/topics/{topic}/jobs/{id}/{action}", post(job_action))
        .route("/admin/topics/{topic}/dead/{action}", post(dead_action))
}

/// Escapes text for HTML content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes a path segment or query value.
fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// What every page needs to know about the viewer.
struct Viewer {
    /// The session ("" without a token, or when not signed in).
    session: String,
    /// The CSRF token forms carry.
    csrf: String,
    /// Whether an admin token is configured (then the viewer is signed in).
    token: bool,
}

impl Viewer {
    fn of(st: &AppState, headers: &HeaderMap) -> Self {
        let session = session(st, headers).unwrap_or_default();
        Self {
            csrf: st.admin.csrf(&session),
            session,
            token: st.admin.has_token(),
        }
    }

    fn hidden(&self) -> String {
        format!(
            r#"<input type="hidden" name="csrf" value="{}">"#,
            esc(&self.csrf)
        )
    }
}

const STYLE: &str = r#"
body { font-family: system-ui, sans-serif; margin: 1.5rem 2rem; color: #222; max-width: 80rem; }
header { display: flex; gap: 1.5rem; align-items: baseline; border-bottom: 2px solid #333; margin-bottom: 1rem; }
header .who { margin-left: auto; font-size: .9rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { padding: .3rem .7rem; border-bottom: 1px solid #ddd; text-align: right; vertical-align: top; white-space: nowrap; }
td.l { white-space: normal; }
th:first-child, td:first-child, td.l, th.l { text-align: left; }
.bad { color: #b00; font-weight: 600; } .ok { color: #070; } .muted { color: #777; }
.flash { background: #eef7ee; border: 1px solid #9c9; padding: .5rem 1rem; }
.error { background: #fbeeee; border: 1px solid #c99; padding: .5rem 1rem; }
.warn { background: #fff8e0; border: 1px solid #dc8; padding: .4rem 1rem; font-size: .9rem; }
code, pre { background: #f4f4f4; padding: 0 .2rem; }
form.inline { display: inline; }
fieldset { border: 1px solid #ccc; margin: .5rem 0; }
label { display: inline-block; min-width: 11rem; }
input[type=text], input[type=number], select { margin: .15rem 0; }
input.wide { width: 28rem; }
section { margin-bottom: 2rem; }
"#;

fn page(v: &Viewer, title: &str, body: &str, refresh: bool) -> Response {
    let who = if v.token {
        format!(
            r#"signed in · <form class="inline" method="post" action="/admin/logout">{}<button>sign out</button></form>"#,
            v.hidden()
        )
    } else {
        String::new()
    };
    let notice = if v.token {
        ""
    } else {
        r#"<p class="warn" id="auth-notice">No <code>admin_token</code> is configured: this page answers only on loopback (127.0.0.1, ::1) and the API takes changes from anyone who can reach it. Set <code>admin_token</code> to sign in from elsewhere and to require the token for changes.</p>"#
    };
    let refresh = if refresh {
        r#"<meta http-equiv="refresh" content="5">"#
    } else {
        ""
    };
    Html(format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">{refresh}
<title>{t} · dq</title><style>{STYLE}</style></head>
<body><header><strong>dq</strong><a href="/">topics</a><a href="/metrics">metrics</a><a href="/openapi.json">API</a><span class="who">{who}</span></header>
{notice}
<h1>{t}</h1>
{body}
</body></html>"#,
        t = esc(title)
    ))
    .into_response()
}

fn see_other(location: &str) -> Response {
    let mut res = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}

/// A refused action: the API's error, as a page.
fn error_page(v: &Viewer, e: &ApiError, back: &str) -> Response {
    let mut res = page(
        v,
        "Not done",
        &format!(
            r#"<p class="error" id="error"><strong>{}</strong> ({}): {}</p><p><a href="{}">← back</a></p>"#,
            e.status.as_u16(),
            esc(e.code),
            esc(&e.message),
            esc(back)
        ),
        false,
    );
    *res.status_mut() = e.status;
    res
}

fn ms_human(ms: u64) -> String {
    match ms {
        m if m < 1000 => format!("{m} ms"),
        m if m < 120_000 => format!("{:.1} s", m as f64 / 1000.0),
        m if m < 7_200_000 => format!("{:.1} min", m as f64 / 60_000.0),
        m if m < 172_800_000 => format!("{:.1} h", m as f64 / 3_600_000.0),
        m => format!("{:.1} d", m as f64 / 86_400_000.0),
    }
}

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

fn preview(b: &Body) -> String {
    match b {
        Body::Json(s) if s.chars().count() > 120 => {
            format!("{}…", s.chars().take(120).collect::<String>())
        }
        Body::Json(s) => s.clone(),
        Body::Bytes(b) => format!("({} bytes, binary)", b.len()),
    }
}

fn secs_bound(s: f64) -> String {
    if s.is_infinite() {
        "> 60 s".into()
    } else {
        format!("≤ {}", ms_human((s * 1000.0).round() as u64))
    }
}

/// Enqueue and ack rates per topic, from the counters seen at successive
/// overview renders over the last minute (per process; shown after the
/// page's first refresh).
#[derive(Debug, Default)]
pub(crate) struct Rates {
    seen: Mutex<HashMap<String, VecDeque<Sample>>>,
}

/// When (ms), enqueued, acked.
type Sample = (u64, u64, u64);

impl Rates {
    /// Records the counters of `topic` at `now` and returns the enqueue and
    /// ack rates per second over the samples kept (None under a second).
    fn observe(&self, topic: &str, now: u64, enqueued: u64, acked: u64) -> Option<(f64, f64)> {
        let mut seen = self.seen.lock().expect("poisoned");
        let q = seen.entry(topic.to_string()).or_default();
        if q.back().is_none_or(|(t, _, _)| now >= t + 1000) {
            q.push_back((now, enqueued, acked));
        }
        while q.len() > 2 && q.front().is_some_and(|(t, _, _)| now > t + 60_000) {
            q.pop_front();
        }
        let (t0, e0, a0) = *q.front()?;
        let dt = now.checked_sub(t0).filter(|d| *d >= 1000)? as f64 / 1000.0;
        Some((
            enqueued.saturating_sub(e0) as f64 / dt,
            acked.saturating_sub(a0) as f64 / dt,
        ))
    }
}

/// A submitted form: every field, repeated names kept.
struct Form(Vec<(String, String)>);

impl Form {
    fn parse(bytes: &[u8]) -> Self {
        Self(
            form_urlencoded::parse(bytes)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The hidden fields re-posting this form (for a confirmation page).
    fn hidden_copy(&self) -> String {
        self.0
            .iter()
            .filter(|(k, _)| k != "confirm")
            .map(|(k, v)| {
                format!(
                    r#"<input type="hidden" name="{}" value="{}">"#,
                    esc(k),
                    esc(v)
                )
            })
            .collect()
    }

    fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, ApiError> {
        self.get(name)
            .map(|v| {
                v.parse().map_err(|_| {
                    ApiError::bad_request(
                        "invalid_config",
                        format!("{name}: {v:?} is not a number"),
                    )
                })
            })
            .transpose()
    }
}

/// Checks a form's CSRF token against the viewer's session.
fn checked(st: &AppState, v: &Viewer, body: &Bytes) -> Result<Form, ApiError> {
    let form = Form::parse(body);
    if !st.admin.csrf_ok(&v.session, form.get("csrf").unwrap_or("")) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "csrf_mismatch",
            "the form's CSRF token is missing or stale; reload the page and try again",
        ));
    }
    Ok(form)
}

/// `GET /`: every topic with its counts, rates and lateness; store health;
/// a form registering a topic.
pub(crate) async fn overview(State(st): State<AppState>, headers: HeaderMap) -> Response {
    let v = Viewer::of(&st, &headers);
    let svc = &st.service;
    let now = svc.clock().now_ms();
    let health = svc.health().await;
    let up = health.iter().any(|(_, r)| r.is_ok());
    let mut body = String::new();
    body.push_str(
        r#"<table id="stores"><thead><tr><th>store</th><th>health</th></tr></thead><tbody>"#,
    );
    for (name, r) in &health {
        let name = if health.len() == 1 {
            &st.store_name
        } else {
            name
        };
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td></tr>",
            esc(name),
            match r {
                Ok(()) => r#"<span class="ok">answering</span>"#.to_string(),
                Err(e) => format!(
                    r#"<span class="bad">not answering: {}</span>"#,
                    esc(&e.to_string())
                ),
            }
        );
    }
    body.push_str("</tbody></table>");
    let topics = if up {
        svc.topics().await.unwrap_or_default()
    } else {
        Vec::new()
    };
    body.push_str(
        r#"<table id="topics"><thead><tr><th>topic</th><th>delivery</th><th>scheduled</th><th>ready</th><th>reserved</th><th>dead</th><th>oldest overdue</th><th>enqueued/s</th><th>acked/s</th><th>lateness p50</th><th>lateness p99</th><th>enqueued</th><th>acked</th><th>failed</th></tr></thead><tbody>"#,
    );
    for t in &topics {
        let Ok(s) = svc.stats(t).await else {
            continue;
        };
        let mode = match svc.topic_config(t).await {
            Ok(Some(c)) => match c.delivery {
                Delivery::Pull => "pull",
                Delivery::Push(_) => "push",
            },
            _ => "?",
        };
        let rate = st
            .rates
            .observe(t.as_str(), now, s.counters.enqueued, s.counters.acked)
            .map_or(("–".into(), "–".into()), |(e, a)| {
                (format!("{e:.1}"), format!("{a:.1}"))
            });
        let late = st
            .metrics
            .lateness_quantiles(t.as_str())
            .map_or(("–".into(), "–".into()), |(p50, p99)| {
                (secs_bound(p50), secs_bound(p99))
            });
        let dead_class = if s.dead > 0 { r#" class="bad""# } else { "" };
        let overdue = if s.oldest_overdue_ms == 0 {
            "–".into()
        } else {
            ms_human(s.oldest_overdue_ms)
        };
        let _ = write!(
            body,
            r#"<tr><td><a href="/admin/topics/{}">{}</a></td><td>{mode}</td><td>{}</td><td>{}</td><td>{}</td><td{dead_class}>{}</td><td>{overdue}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(&enc(t.as_str())),
            esc(t.as_str()),
            s.scheduled,
            s.ready,
            s.reserved,
            s.dead,
            rate.0,
            rate.1,
            late.0,
            late.1,
            s.counters.enqueued,
            s.counters.acked,
            s.counters.failed
        );
    }
    body.push_str("</tbody></table>");
    if topics.is_empty() {
        body.push_str(
            r#"<p class="muted">No topics yet: enqueue a job or register a topic below.</p>"#,
        );
    }
    let _ = write!(
        body,
        r#"<p class="muted">Refreshes every 5 s. Rates are over the last minute of page views; lateness is of the jobs this instance handed out (bucket bounds of <code>dq_lateness_seconds</code>).</p>
<section><h2>Register a topic</h2>
<form method="post" action="/admin/topics" id="register">{h}
<label for="name">name</label> <input type="text" id="name" name="name" required pattern="[A-Za-z0-9._:\-]+" placeholder="orders"><br>
<label for="mode">delivery</label> <select id="mode" name="mode"><option value="pull">pull (consumers reserve)</option><option value="push">push (dq calls a URL)</option></select><br>
<label for="url">callback URL (push)</label> <input type="text" class="wide" id="url" name="url" placeholder="https://example.com/hooks/dq"><br>
<button>Register</button></form></section>"#,
        h = v.hidden()
    );
    page(&v, "Topics", &body, true)
}

/// `POST /admin/topics` (name, mode, url): registers a topic.
async fn create_topic(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let v = Viewer::of(&st, &headers);
    let r = async {
        let f = checked(&st, &v, &body)?;
        let name = f
            .get("name")
            .ok_or_else(|| ApiError::bad_request("invalid_topic", "give the topic a name"))?;
        let patch = TopicConfigPatch {
            delivery: Some(match f.get("mode") {
                Some("push") => Delivery::Push(push_config(&f, None)?),
                _ => Delivery::Pull,
            }),
            ..Default::default()
        };
        let t = Topic::new(name.to_string())?;
        st.service.create_topic(&t, patch).await?;
        Ok::<_, ApiError>(t)
    }
    .await;
    match r {
        Ok(t) => see_other(&format!("/admin/topics/{}?done=created", enc(t.as_str()))),
        Err(e) => error_page(&v, &e, "/"),
    }
}

/// The push settings in a form; secrets and headers kept from `old`,
/// a new secret (field `secret`) replacing them.
fn push_config(f: &Form, old: Option<&PushConfig>) -> Result<PushConfig, ApiError> {
    let url = f.get("url").ok_or_else(|| {
        ApiError::bad_request("invalid_callback", "push delivery needs a callback URL")
    })?;
    let method = match f.get("method") {
        Some("GET") => PushMethod::Get,
        Some("POST") | None => PushMethod::Post,
        Some(m) => {
            return Err(ApiError::bad_request(
                "invalid_callback",
                format!("method {m:?} is neither POST nor GET"),
            ));
        }
    };
    let mut secrets = old.map(|o| o.secrets.clone()).unwrap_or_default();
    if let Some(s) = f.get("secret") {
        secrets = vec![s.to_string()];
    }
    Ok(PushConfig {
        url: url.to_string(),
        method,
        timeout_ms: f
            .number("timeout_ms")?
            .or(old.map(|o| o.timeout_ms))
            .unwrap_or(3000),
        headers: old.map(|o| o.headers.clone()).unwrap_or_default(),
        concurrency: f
            .number("concurrency")?
            .or(old.map(|o| o.concurrency))
            .unwrap_or(16),
        secrets,
    })
}

#[derive(Debug, Deserialize)]
pub(crate) struct TopicQuery {
    done: Option<String>,
    n: Option<u64>,
    job: Option<String>,
    died: Option<String>,
}

fn done_text(code: &str, n: u64) -> Option<String> {
    Some(match code {
        "created" => "Topic registered.".into(),
        "saved" => "Settings saved.".into(),
        "cancelled" => "Job cancelled.".into(),
        "rescheduled" => "Job rescheduled.".into(),
        "run" => "Job made due now.".into(),
        "replayed" => format!("{n} dead letter(s) replayed: due now, attempts reset."),
        "purged" => format!("{n} dead letter(s) deleted."),
        _ => return None,
    })
}

/// `GET /admin/topics/{topic}`: counts, settings, next due jobs, lookup,
/// dead letters.
pub(crate) async fn topic_page(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<TopicQuery>,
) -> Response {
    let v = Viewer::of(&st, &headers);
    match render_topic(&st, &v, name, q).await {
        Ok(r) => r,
        Err(e) => error_page(&v, &e, "/"),
    }
}

async fn render_topic(
    st: &AppState,
    v: &Viewer,
    name: String,
    q: TopicQuery,
) -> Result<Response, ApiError> {
    let t = Topic::new(name)?;
    let cfg = st.service.known_topic(&t).await?;
    let now = st.service.clock().now_ms();
    let s = st.service.stats(&t).await?;
    let base = format!("/admin/topics/{}", enc(t.as_str()));
    let mut body = String::new();
    if let Some(msg) = q
        .done
        .as_deref()
        .and_then(|d| done_text(d, q.n.unwrap_or(0)))
    {
        let _ = write!(body, r#"<p class="flash" id="flash">{}</p>"#, esc(&msg));
    }
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
    ];
    body.push_str(r#"<table id="counts"><thead><tr>"#);
    for (k, _) in counts {
        let _ = write!(body, "<th>{k}</th>");
    }
    body.push_str("<th>oldest overdue</th></tr></thead><tbody><tr>");
    for (k, n) in counts {
        let class = if k == "dead" && n > 0 {
            r#" class="bad""#
        } else {
            ""
        };
        let _ = write!(body, "<td{class}>{n}</td>");
    }
    let _ = write!(
        body,
        "<td>{}</td></tr></tbody></table>",
        if s.oldest_overdue_ms == 0 {
            "–".into()
        } else {
            ms_human(s.oldest_overdue_ms)
        }
    );

    lookup(&mut body, st, v, &t, &base, q.job.as_deref(), now).await?;
    dead_letters(&mut body, st, v, &t, &base, s.dead, q.died.as_deref(), now).await?;
    upcoming(&mut body, st, &t, &base, now).await?;
    settings_form(&mut body, v, &base, &cfg);
    Ok(page(v, &format!("Topic {}", t.as_str()), &body, false))
}

fn settings_form(body: &mut String, v: &Viewer, base: &str, cfg: &TopicConfig) {
    let (push, p) = match &cfg.delivery {
        Delivery::Push(p) => (true, Some(p)),
        Delivery::Pull => (false, None),
    };
    let sel = |b: bool| if b { " selected" } else { "" };
    let retry = serde_json::to_string(&cfg.retry).unwrap_or_default();
    let _ = write!(
        body,
        r#"<section><h2>Settings</h2>
<form method="post" action="{base}/settings" id="settings">{h}
<label for="max_attempts">max attempts</label> <input type="number" min="1" id="max_attempts" name="max_attempts" value="{}"><br>
<label for="lease_ms">lease (ms)</label> <input type="number" min="1" id="lease_ms" name="lease_ms" value="{}"><br>
<label for="dead_cap">dead letters kept</label> <input type="number" min="0" id="dead_cap" name="dead_cap" value="{}"><br>
<label for="default_delay_ms">default delay (ms)</label> <input type="number" min="0" id="default_delay_ms" name="default_delay_ms" value="{}"><br>
<label for="partitions">partitions</label> <input type="number" min="1" max="256" id="partitions" name="partitions" value="{}"> <span class="muted">Redis only; changes only while the topic holds no jobs</span><br>
<label for="retry">retry policy (JSON)</label> <input type="text" class="wide" id="retry" name="retry" value="{}"> <span class="muted">e.g. <code>{{"delays_ms":[60000,180000]}}</code>, <code>{{"fixed_ms":5000}}</code>, <code>{{"exponential":{{"initial_ms":1000,"factor":2,"max_ms":3600000,"jitter":0.1}}}}</code></span><br>
<fieldset><legend>delivery</legend>
<label for="mode">mode</label> <select id="mode" name="mode"><option value="pull"{}>pull (consumers reserve)</option><option value="push"{}>push (dq calls a URL)</option></select><br>
<label for="url">callback URL</label> <input type="text" class="wide" id="url" name="url" value="{}"><br>
<label for="method">method</label> <select id="method" name="method"><option{}>POST</option><option{}>GET</option></select><br>
<label for="timeout_ms">timeout (ms)</label> <input type="number" min="1" id="timeout_ms" name="timeout_ms" value="{}"><br>
<label for="concurrency">concurrency</label> <input type="number" min="1" id="concurrency" name="concurrency" value="{}"><br>
<label for="secret">signing secret</label> <input type="text" class="wide" id="secret" name="secret" autocomplete="off" placeholder="{}"><br>
</fieldset>
<button>Save settings</button></form></section>"#,
        cfg.max_attempts,
        cfg.lease_ms,
        cfg.dead_cap,
        cfg.default_delay_ms,
        cfg.partitions,
        esc(&retry),
        sel(!push),
        sel(push),
        esc(p.map_or("", |p| p.url.as_str())),
        sel(p.is_none_or(|p| p.method == PushMethod::Post)),
        sel(p.is_some_and(|p| p.method == PushMethod::Get)),
        p.map_or(3000, |p| p.timeout_ms),
        p.map_or(16, |p| p.concurrency),
        match p.map_or(0, |p| p.secrets.len()) {
            0 => "none set; whsec_… to sign deliveries".to_string(),
            n => format!("{n} set (hidden); a new one replaces them"),
        },
        h = v.hidden(),
    );
}

async fn lookup(
    body: &mut String,
    st: &AppState,
    v: &Viewer,
    t: &Topic,
    base: &str,
    job: Option<&str>,
    now: u64,
) -> Result<(), ApiError> {
    let _ = write!(
        body,
        r#"<section><h2>Find a job</h2><form method="get" action="{base}" id="lookup"><input type="text" name="job" placeholder="job id" value="{}"> <button>Find</button></form>"#,
        esc(job.unwrap_or(""))
    );
    if let Some(id) = job.filter(|j| !j.is_empty()) {
        let found = match JobId::new(id.to_string()) {
            Ok(id) => match st.service.get(t, &id).await {
                Ok(v) => Some(v.job),
                Err(Error::Store(StoreError::NotFound)) => None,
                Err(e) => return Err(e.into()),
            },
            Err(_) => None,
        };
        match found {
            None => {
                let _ = write!(
                    body,
                    r#"<p id="job-missing">No job {} in this topic.</p>"#,
                    esc(&format!("{id:?}"))
                );
            }
            Some(j) => job_details(body, v, base, &j, now),
        }
    }
    body.push_str("</section>");
    Ok(())
}

fn job_details(body: &mut String, v: &Viewer, base: &str, j: &JobInfo, now: u64) {
    let h = v.hidden();
    let act = format!("{base}/jobs/{}", enc(j.id.as_str()));
    let _ = write!(
        body,
        r#"<table id="job"><tbody><tr><th>id</th><td class="l">{}</td></tr><tr><th>state</th><td class="l">{}</td></tr><tr><th>due</th><td class="l">{} ({})</td></tr><tr><th>attempts</th><td class="l">{}</td></tr><tr><th>priority</th><td class="l">{}</td></tr><tr><th>created</th><td class="l">{}</td></tr><tr><th>last error</th><td class="l">{}</td></tr><tr><th>body</th><td class="l"><code>{}</code></td></tr></tbody></table>"#,
        esc(j.id.as_str()),
        j.state,
        at(j.due_at_ms),
        relative(j.due_at_ms, now),
        j.attempts,
        j.priority,
        at(j.created_at_ms),
        esc(j.last_error.as_deref().unwrap_or("–")),
        esc(&preview(&j.body))
    );
    if matches!(j.state, JobState::Scheduled | JobState::Ready) {
        let _ = write!(
            body,
            r#"<form class="inline" method="post" action="{act}/reschedule" id="reschedule">{h}<input type="text" name="delay" placeholder="10m, 2h, 1d" size="8"> <button>Reschedule</button></form> "#
        );
    }
    if j.state == JobState::Scheduled {
        let _ = write!(
            body,
            r#"<form class="inline" method="post" action="{act}/run" id="run">{h}<button>Run now</button></form> "#
        );
    }
    if j.state != JobState::Dead {
        let _ = write!(
            body,
            r#"<form class="inline" method="post" action="{act}/cancel" id="cancel">{h}<button>Cancel job</button></form>"#
        );
    } else {
        let _ = write!(
            body,
            r#"<form class="inline" method="post" action="{base}/dead/replay" id="replay-one">{h}<input type="hidden" name="ids" value="{}"><button>Replay</button></form>"#,
            esc(j.id.as_str())
        );
    }
}

async fn upcoming(
    body: &mut String,
    st: &AppState,
    t: &Topic,
    base: &str,
    now: u64,
) -> Result<(), ApiError> {
    let next = st.service.list_scheduled(t, 20).await?;
    body.push_str(r#"<section><h2>Next due</h2><table id="upcoming"><thead><tr><th>id</th><th>due</th><th></th><th>attempts</th><th class="l">body</th></tr></thead><tbody>"#);
    for j in &next {
        let _ = write!(
            body,
            r#"<tr><td><a href="{base}?job={}">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td class="l"><code>{}</code></td></tr>"#,
            esc(&enc(j.id.as_str())),
            esc(j.id.as_str()),
            at(j.due_at_ms),
            relative(j.due_at_ms, now),
            j.attempts,
            esc(&preview(&j.body))
        );
    }
    body.push_str("</tbody></table>");
    if next.is_empty() {
        body.push_str(r#"<p class="muted">Nothing scheduled.</p>"#);
    }
    body.push_str("</section>");
    Ok(())
}

/// Newest deaths first, up to 100 shown, 10,000 looked at.
#[allow(clippy::too_many_arguments)]
async fn dead_letters(
    body: &mut String,
    st: &AppState,
    v: &Viewer,
    t: &Topic,
    base: &str,
    dead: u64,
    died: Option<&str>,
    now: u64,
) -> Result<(), ApiError> {
    let window = match died {
        Some("1h") => Some(3_600_000),
        Some("24h") => Some(86_400_000),
        Some("7d") => Some(7 * 86_400_000),
        _ => None,
    };
    let since = window.map(|w: u64| now.saturating_sub(w));
    let mut shown = Vec::new();
    let mut end = dead as usize;
    let mut looked = 0;
    'pages: while end > 0 && shown.len() < 100 && looked < 10_000 {
        let start = end.saturating_sub(1000);
        let mut chunk: Vec<JobInfo> = st
            .service
            .list_dead(t, start, end - start)
            .await?
            .into_iter()
            .map(|v| v.job)
            .collect();
        looked += end - start;
        end = start;
        chunk.reverse();
        for j in chunk {
            if since.is_some_and(|s| j.died_at_ms.unwrap_or(0) < s) {
                break 'pages;
            }
            if shown.len() == 100 {
                break 'pages;
            }
            shown.push(j);
        }
    }
    let sel = |w: &str| if died == Some(w) { " selected" } else { "" };
    let h = v.hidden();
    let _ = write!(
        body,
        r#"<section><h2>Dead letters ({dead})</h2>
<form method="get" action="{base}" id="dead-filter">died <select name="died"><option value="">any time</option><option value="1h"{}>in the last hour</option><option value="24h"{}>in the last 24 h</option><option value="7d"{}>in the last 7 days</option></select> <button>Filter</button></form>
<form method="post" action="{base}/dead/replay" id="dead-form">{h}
<table id="dead"><thead><tr><th></th><th class="l">id</th><th>attempts</th><th>died</th><th class="l">last error</th></tr></thead><tbody>"#,
        sel("1h"),
        sel("24h"),
        sel("7d"),
    );
    for j in &shown {
        let ago = j.died_at_ms.map_or("–".into(), |d| relative(d, now));
        let _ = write!(
            body,
            r#"<tr><td><input type="checkbox" name="ids" value="{id}" aria-label="select"></td><td class="l"><a href="{base}?job={}">{id}</a></td><td>{}</td><td title="{}">{}</td><td class="l">{}</td></tr>"#,
            esc(&enc(j.id.as_str())),
            j.attempts,
            j.died_at_ms.map(at).unwrap_or_default(),
            esc(&ago),
            esc(j.last_error.as_deref().unwrap_or("")),
            id = esc(j.id.as_str()),
        );
    }
    body.push_str("</tbody></table>");
    if shown.is_empty() {
        body.push_str(r#"<p class="muted">None.</p>"#);
    } else if (shown.len() as u64) < dead {
        let _ = write!(
            body,
            r#"<p class="muted">The newest {} shown{}.</p>"#,
            shown.len(),
            if window.is_some() {
                " of those matching"
            } else {
                ""
            }
        );
    }
    let _ = write!(
        body,
        r#"<button name="scope" value="selected">Replay selected</button> <button name="scope" value="all">Replay all {dead}</button></form>
<form method="post" action="{base}/dead/purge" id="purge">{h}<button>Purge all {dead}</button></form></section>"#
    );
    Ok(())
}

/// `POST /admin/topics/{topic}/settings`.
async fn save_settings(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let v = Viewer::of(&st, &headers);
    let base = format!("/admin/topics/{}", enc(&name));
    let r = async {
        let f = checked(&st, &v, &body)?;
        let t = Topic::new(name.clone())?;
        let old = st.service.known_topic(&t).await?;
        let retry = f
            .get("retry")
            .map(|r| {
                serde_json::from_str::<RetryPolicy>(r).map_err(|e| {
                    ApiError::bad_request("invalid_config", format!("retry policy: {e}"))
                })
            })
            .transpose()?;
        let old_push = match &old.delivery {
            Delivery::Push(p) => Some(p),
            Delivery::Pull => None,
        };
        let patch = TopicConfigPatch {
            max_attempts: f.number("max_attempts")?,
            lease_ms: f.number("lease_ms")?,
            dead_cap: f.number("dead_cap")?,
            default_delay_ms: f.number("default_delay_ms")?,
            partitions: f.number("partitions")?,
            retry,
            delivery: Some(match f.get("mode") {
                Some("push") => Delivery::Push(push_config(&f, old_push)?),
                _ => Delivery::Pull,
            }),
        };
        st.service.configure_topic(&t, patch).await?;
        Ok::<_, ApiError>(())
    }
    .await;
    match r {
        Ok(()) => see_other(&format!("{base}?done=saved")),
        Err(e) => error_page(&v, &e, &base),
    }
}

/// `POST /admin/topics/{topic}/jobs/{id}/{cancel|reschedule|run}`.
async fn job_action(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((name, id, action)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    let v = Viewer::of(&st, &headers);
    let base = format!("/admin/topics/{}", enc(&name));
    let back = format!("{base}?job={}", enc(&id));
    let r = async {
        let f = checked(&st, &v, &body)?;
        let t = Topic::new(name.clone())?;
        let id = JobId::new(id.clone())?;
        let now = st.service.clock().now_ms();
        match action.as_str() {
            "cancel" => {
                st.service.cancel(&t, &id).await?;
                Ok("cancelled")
            }
            "run" | "reschedule" => {
                let due = if action == "run" {
                    now
                } else {
                    let text = f.get("delay").ok_or_else(|| {
                        ApiError::bad_request("invalid_delay", "give a delay such as 10m or 2h")
                    })?;
                    let d = humantime::parse_duration(text).map_err(|e| {
                        ApiError::bad_request("invalid_delay", format!("delay {text:?}: {e}"))
                    })?;
                    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                    st.service.limits().check_delay(ms)?;
                    now + ms
                };
                st.service.reschedule(&t, &id, due).await?;
                Ok(if action == "run" {
                    "run"
                } else {
                    "rescheduled"
                })
            }
            _ => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "route_not_found",
                "no such action",
            )),
        }
    }
    .await;
    match r {
        Ok(done) => see_other(&format!("{back}&done={done}")),
        Err(e) => error_page(&v, &e, &back),
    }
}

/// `POST /admin/topics/{topic}/dead/{replay|purge}`: asks first (a page
/// with a confirm button re-posting the form), then acts.
async fn dead_action(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let v = Viewer::of(&st, &headers);
    let base = format!("/admin/topics/{}", enc(&name));
    let r = async {
        let f = checked(&st, &v, &body)?;
        let t = Topic::new(name.clone())?;
        let ids = f.all("ids");
        let all = f.get("scope") == Some("all");
        let question = match action.as_str() {
            "replay" if all => {
                let dead = st.service.stats(&t).await?.dead;
                format!("Replay all {dead} dead letters of {}?", t.as_str())
            }
            "replay" if ids.is_empty() => {
                return Err(ApiError::bad_request(
                    "invalid_batch",
                    "select dead letters to replay, or replay all",
                ));
            }
            "replay" if ids.len() > dq_core::limits::MAX_BATCH => {
                return Err(ApiError::bad_request(
                    "invalid_batch",
                    format!("at most {} at once", dq_core::limits::MAX_BATCH),
                ));
            }
            "replay" => format!("Replay {} dead letter(s): {}?", ids.len(), ids.join(", ")),
            "purge" => {
                let dead = st.service.stats(&t).await?.dead;
                format!("Delete all {dead} dead letters of {} for good?", t.as_str())
            }
            _ => {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "route_not_found",
                    "no such action",
                ));
            }
        };
        if f.get("confirm") != Some("yes") {
            return Ok(Err((question, f)));
        }
        let n = if action == "purge" {
            st.service.purge(&t).await?
        } else if all {
            st.service.replay(&t, None).await?
        } else {
            let ids = ids
                .iter()
                .map(|i| JobId::new(i.to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            st.service.replay(&t, Some(&ids)).await?
        };
        Ok(Ok(n))
    }
    .await;
    match r {
        Ok(Ok(n)) => {
            let done = if action == "purge" {
                "purged"
            } else {
                "replayed"
            };
            see_other(&format!("{base}?done={done}&n={n}"))
        }
        Ok(Err((question, f))) => page(
            &v,
            "Confirm",
            &format!(
                r#"<p id="question">{}</p><form method="post" action="{base}/dead/{}" id="confirm">{}<button name="confirm" value="yes">Yes, {}</button></form><p><a href="{base}">No, back</a></p>"#,
                esc(&question),
                esc(&action),
                f.hidden_copy(),
                if action == "purge" {
                    "delete them"
                } else {
                    "replay"
                }
            ),
            false,
        ),
        Err(e) => error_page(&v, &e, &base),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct LoginQuery {
    next: Option<String>,
    failed: Option<u8>,
}

/// `GET /admin/login`.
async fn login_page(State(st): State<AppState>, Query(q): Query<LoginQuery>) -> Response {
    if !st.admin.has_token() {
        return see_other("/");
    }
    let v = Viewer {
        session: String::new(),
        csrf: st.admin.csrf(""),
        token: false,
    };
    let failed = if q.failed.is_some() {
        r#"<p class="error" id="error">That is not the admin token.</p>"#
    } else {
        ""
    };
    Html(format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in · dq</title><style>{STYLE}</style></head><body><h1>dq: sign in</h1>{failed}
<form method="post" action="/admin/login" id="login">{}<input type="hidden" name="next" value="{}"><label for="token">admin token</label> <input type="password" id="token" name="token" autofocus> <button>Sign in</button></form></body></html>"#,
        v.hidden(),
        esc(q.next.as_deref().unwrap_or("/"))
    ))
    .into_response()
}

/// Only a path of this site may follow a login.
fn local_path(next: Option<&str>) -> &str {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n,
        _ => "/",
    }
}

/// `POST /admin/login` (token, next): sets the session cookie.
async fn login(State(st): State<AppState>, body: Bytes) -> Response {
    let f = Form::parse(&body);
    if !st.admin.has_token() {
        return see_other("/");
    }
    if !st.admin.csrf_ok("", f.get("csrf").unwrap_or("")) {
        return see_other("/admin/login?failed=1");
    }
    let next = local_path(f.get("next")).to_string();
    if !st.admin.token_ok(f.get("token").unwrap_or("")) {
        tracing::warn!("admin sign-in refused: wrong token");
        return see_other(&format!("/admin/login?failed=1&next={}", enc(&next)));
    }
    let mut res = see_other(&next);
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        st.admin.new_session(st.service.clock().now_ms()),
        SESSION_MAX_AGE_MS / 1000
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}

/// `POST /admin/logout`: forgets the cookie (the session itself lasts until
/// it expires or the token changes).
async fn logout(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let v = Viewer::of(&st, &headers);
    if let Err(e) = checked(&st, &v, &body) {
        return error_page(&v, &e, "/");
    }
    let mut res = see_other("/admin/login");
    res.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("dq_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(enc("a b/c?"), "a%20b%2Fc%3F");
    }

    #[test]
    fn rates_over_the_last_minute() {
        let r = Rates::default();
        assert_eq!(r.observe("t", 0, 0, 0), None);
        assert_eq!(r.observe("t", 500, 10, 0), None, "under a second");
        assert_eq!(r.observe("t", 2000, 100, 50), Some((50.0, 25.0)));
        let (e, _) = r.observe("t", 100_000, 1000, 50).unwrap();
        assert!(e > 0.0);
    }

    #[test]
    fn login_goes_back_only_to_this_site() {
        assert_eq!(local_path(Some("/admin/topics/x")), "/admin/topics/x");
        assert_eq!(local_path(Some("//evil.example/")), "/");
        assert_eq!(local_path(Some("https://evil.example/")), "/");
        assert_eq!(local_path(Some("/\\evil.example")), "/");
        assert_eq!(local_path(None), "/");
    }
}
