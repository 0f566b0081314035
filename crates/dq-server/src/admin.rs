//! The admin page, first slice: a read-only overview at `/` and a page per
//! topic at `/admin/topics/{topic}` (settings, counts, dead letters with
//! their last errors). Server-rendered HTML, no JavaScript; every value is
//! escaped. Changing things (replay, purge, settings) goes through the API
//! and `dq` for now.

use std::fmt::Write;

use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Response};
use dq_core::{Delivery, Topic};

use crate::AppState;
use crate::error::ApiError;

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

fn page(title: &str, body: &str) -> Response {
    Html(format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>{t} · dq</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; color: #222; }}
table {{ border-collapse: collapse; margin: 1rem 0; }}
th, td {{ padding: .3rem .8rem; border-bottom: 1px solid #ddd; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.bad {{ color: #b00; font-weight: 600; }} .ok {{ color: #070; }} .muted {{ color: #777; }}
code {{ background: #f4f4f4; padding: 0 .2rem; }}
</style></head>
<body><h1>{t}</h1>
{body}
<p class="muted">Read-only; refreshes every 5 s. Change things with the <a href="/openapi.json">API</a> or <code>dq</code>. Metrics: <a href="/metrics">/metrics</a>.</p>
</body></html>"#,
        t = esc(title)
    ))
    .into_response()
}

fn ms_human(ms: u64) -> String {
    match ms {
        0 => "–".into(),
        m if m < 1000 => format!("{m} ms"),
        m if m < 120_000 => format!("{:.1} s", m as f64 / 1000.0),
        m if m < 7_200_000 => format!("{:.1} min", m as f64 / 60_000.0),
        m => format!("{:.1} h", m as f64 / 3_600_000.0),
    }
}

/// `GET /`: every topic with its counts; the store's health.
pub(crate) async fn overview(State(st): State<AppState>) -> Response {
    let now = st.clock.now_ms();
    let up = st.store.ping().await.is_ok();
    let mut body = String::new();
    let _ = writeln!(
        body,
        r#"<p id="store">Store: {}</p>"#,
        if up {
            r#"<span class="ok">answering</span>"#
        } else {
            r#"<span class="bad">not answering</span>"#
        }
    );
    let topics = if up {
        st.store.topics().await.unwrap_or_default()
    } else {
        Vec::new()
    };
    body.push_str(
        r#"<table id="topics"><thead><tr><th>topic</th><th>delivery</th><th>scheduled</th><th>ready</th><th>reserved</th><th>dead</th><th>oldest overdue</th><th>enqueued</th><th>acked</th><th>failed</th></tr></thead><tbody>"#,
    );
    for t in &topics {
        let Ok(s) = st.store.stats(t, now).await else {
            continue;
        };
        let mode = match st.store.topic_config(t).await {
            Ok(Some(c)) => match c.delivery {
                Delivery::Pull => "pull",
                Delivery::Push(_) => "push",
            },
            _ => "?",
        };
        let dead_class = if s.dead > 0 { r#" class="bad""# } else { "" };
        let name = esc(t.as_str());
        let _ = write!(
            body,
            r#"<tr><td><a href="/admin/topics/{name}">{name}</a></td><td>{mode}</td><td>{}</td><td>{}</td><td>{}</td><td{dead_class}>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            s.scheduled,
            s.ready,
            s.reserved,
            s.dead,
            ms_human(s.oldest_overdue_ms),
            s.counters.enqueued,
            s.counters.acked,
            s.counters.failed
        );
    }
    body.push_str("</tbody></table>");
    if topics.is_empty() {
        body.push_str(r#"<p class="muted">No topics yet: enqueue a job or <code>PUT /v1/topics/{topic}</code>.</p>"#);
    }
    page("dq", &body)
}

/// `GET /admin/topics/{topic}`: settings, counts and dead letters.
pub(crate) async fn topic_page(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let t = Topic::new(name)?;
    let cfg = st
        .store
        .topic_config(&t)
        .await?
        .ok_or_else(|| ApiError::topic_not_found(t.as_str()))?;
    let s = st.store.stats(&t, st.clock.now_ms()).await?;
    let dead = st.store.list_dead(&t, 0, 100).await?;
    let mut body = String::new();
    body.push_str(r#"<p><a href="/">← all topics</a></p><table id="counts"><tbody>"#);
    for (k, v) in [
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
    ] {
        let _ = write!(body, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    body.push_str("</tbody></table><h2>Settings</h2>");
    // Secrets are not shown.
    let mut shown = serde_json::to_value(&cfg).unwrap_or_default();
    if let Some(sec) = shown.pointer_mut("/delivery/secrets")
        && let Some(list) = sec.as_array_mut()
    {
        for v in list.iter_mut() {
            *v = serde_json::Value::String("whsec_…".into());
        }
    }
    let _ = write!(
        body,
        r#"<pre id="settings">{}</pre>"#,
        esc(&serde_json::to_string_pretty(&shown).unwrap_or_default())
    );
    let _ = write!(
        body,
        r#"<h2>Dead letters ({})</h2><table id="dead"><thead><tr><th>id</th><th>attempts</th><th>died</th><th>last error</th></tr></thead><tbody>"#,
        s.dead
    );
    let now = st.clock.now_ms();
    for j in &dead {
        let ago = j.died_at_ms.map_or("–".into(), |d| {
            format!("{} ago", ms_human(now.saturating_sub(d)))
        });
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(j.id.as_str()),
            j.attempts,
            esc(&ago),
            esc(j.last_error.as_deref().unwrap_or(""))
        );
    }
    body.push_str("</tbody></table>");
    if s.dead > dead.len() as u64 {
        let _ = write!(
            body,
            r#"<p class="muted">The oldest {} of {} shown.</p>"#,
            dead.len(),
            s.dead
        );
    }
    Ok(page(&format!("topic {}", t.as_str()), &body))
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
    }
}
