//! The text the admin pages print, shared by every view: paths and their
//! percent-encoding, durations and times for people, body previews, the
//! `done=` sentences.

use std::time::{Duration, UNIX_EPOCH};

use dq_core::Body;

/// Percent-encodes a path segment or query value.
pub(in crate::admin) fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// The path of a topic's page.
pub(in crate::admin) fn topic_href(name: &str) -> String {
    format!("/admin/topics/{}", enc(name))
}

/// "850 ms", "1.5 s", "2.0 min", "3.0 h", "4.0 d".
pub(in crate::admin) fn ms_human(ms: u64) -> String {
    match ms {
        m if m < 1000 => format!("{m} ms"),
        m if m < 120_000 => format!("{:.1} s", m as f64 / 1000.0),
        m if m < 7_200_000 => format!("{:.1} min", m as f64 / 60_000.0),
        m if m < 172_800_000 => format!("{:.1} h", m as f64 / 3_600_000.0),
        m => format!("{:.1} d", m as f64 / 86_400_000.0),
    }
}

/// A Unix time in ms as RFC 3339 (UTC, milliseconds).
pub(super) fn at(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// "in 5.0 s" / "3.0 s ago".
pub(super) fn relative(ms: u64, now: u64) -> String {
    if ms >= now {
        format!("in {}", ms_human(ms - now))
    } else {
        format!("{} ago", ms_human(now - ms))
    }
}

/// A body as one line: JSON cut at 120 characters, binary as its size.
pub(super) fn preview(b: &Body) -> String {
    match b {
        Body::Json(s) if s.chars().count() > 120 => {
            format!("{}…", s.chars().take(120).collect::<String>())
        }
        Body::Json(s) => s.clone(),
        Body::Bytes(b) => format!("({} bytes, binary)", b.len()),
    }
}

/// A lateness bucket bound in seconds as "≤ 50 ms" (the last: "> 60 s").
pub(super) fn secs_bound(s: f64) -> String {
    if s.is_infinite() {
        "> 60 s".into()
    } else {
        format!("≤ {}", ms_human((s * 1000.0).round() as u64))
    }
}

/// "–" for no overdue job, else how long.
pub(super) fn overdue(ms: u64) -> String {
    if ms == 0 { "–".into() } else { ms_human(ms) }
}

/// The sentence a `done=` code stands for (`n`: how many, for replay and
/// purge); None for an unknown code.
pub(in crate::admin) fn done_text(code: &str, n: u64) -> Option<String> {
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
}
