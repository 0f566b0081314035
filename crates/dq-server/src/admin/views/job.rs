//! The job lookup of the topic page (`?job=ID`): what was typed, and the
//! job found with everything known about it, its body in full.

use base64::Engine;
use dq_api::units;
use dq_core::{Body, JobCounts, JobInfo, JobState, TopicConfig};

use super::format::{at, enc, relative};

/// The job lookup: what was typed, and what was found.
pub(super) struct Lookup {
    pub(super) query: String,
    /// None when nothing was asked.
    pub(super) found: Option<Found>,
}

pub(super) enum Found {
    Job(Box<JobDetails>),
    /// The id asked for, quoted.
    Missing(String),
}

/// A job found by the lookup: everything known about it, its body in full
/// (pretty-printed), the limits in effect for it, what may be done to it.
pub(super) struct JobDetails {
    pub(super) id: String,
    /// Where its forms post (`…/jobs/{id}`).
    pub(super) action: String,
    pub(super) state: JobState,
    pub(super) due_at: String,
    pub(super) due_in: String,
    /// "1 of 3": hand-outs so far of those allowed.
    pub(super) attempts: String,
    pub(super) priority: u32,
    pub(super) created_at: String,
    /// The lease's deadline and how far off, when reserved.
    pub(super) lease_deadline: Option<String>,
    /// When it died and how long ago, when dead.
    pub(super) died_at: Option<String>,
    pub(super) last_error: String,
    /// Its kept failed attempts, oldest first: "attempt 2, 14:03:11
    /// (3 min ago): timeout".
    pub(super) errors: Vec<String>,
    /// Its flow-control key, when it has one.
    pub(super) key: Option<String>,
    /// When it expires and how far off, when it does.
    pub(super) expires_at: Option<String>,
    /// Timeouts, releases, buries, kicks so far.
    pub(super) history: String,
    /// "JSON, 42 bytes" / "binary, 3 bytes, as base64".
    pub(super) body_kind: String,
    /// The body: JSON indented, bytes as base64; cut past [`BODY_SHOWN`].
    pub(super) body: String,
    /// The limits in effect, in the CLI's units.
    pub(super) max_attempts: u32,
    pub(super) lease: String,
    pub(super) retry: String,
}

/// At most this much of a body is shown (bytes of its text).
const BODY_SHOWN: usize = 64 * 1024;

impl JobDetails {
    pub(super) fn new(base: &str, j: &JobInfo, now: u64, cfg: &TopicConfig) -> Self {
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
            errors: j
                .errors
                .iter()
                .map(|e| {
                    format!(
                        "attempt {}, {} ({}): {}",
                        e.attempt,
                        at(e.at_ms),
                        relative(e.at_ms, now),
                        e.error
                    )
                })
                .collect(),
            key: j.key.as_ref().map(ToString::to_string),
            expires_at: j.expires_at_ms.map(when),
            history: history_in_words(j.attempts, c, j.state),
            body_kind,
            body: cut(body),
            max_attempts: j.max_attempts,
            lease: units::format_ms(j.lease_ms),
            retry: units::format_retry(&cfg.retry),
        }
    }

    pub(super) fn reschedulable(&self) -> bool {
        matches!(self.state, JobState::Scheduled | JobState::Ready)
    }

    pub(super) fn scheduled(&self) -> bool {
        self.state == JobState::Scheduled
    }

    pub(super) fn dead(&self) -> bool {
        self.state == JobState::Dead
    }
}

/// What happened to a job so far, in words: "handed out twice: given back
/// once, dead once; now dead". `attempts` are the hand-outs since it was
/// last replayed; the counts are over its life.
fn history_in_words(attempts: u32, c: &JobCounts, state: JobState) -> String {
    let times = |n: u32| match n {
        1 => "once".to_string(),
        2 => "twice".to_string(),
        n => format!("{n} times"),
    };
    let mut done = Vec::new();
    for (n, what) in [
        (c.timeouts, "its lease expired"),
        (c.releases, "given back (nacked or released)"),
        (c.buries, "dead"),
        (c.kicks, "replayed"),
    ] {
        if n > 0 {
            done.push(format!("{what} {}", times(n)));
        }
    }
    let handed = match attempts {
        0 => "not handed out yet".to_string(),
        n => format!("handed out {}", times(n)),
    };
    let handed = if c.kicks > 0 && attempts > 0 {
        format!("{handed} since its last replay")
    } else {
        handed
    };
    if done.is_empty() {
        format!("{handed}; now {state}")
    } else {
        format!("{handed}: {}; now {state}", done.join(", "))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_history_reads_in_words() {
        let c = |timeouts, releases, buries, kicks| JobCounts {
            reserves: 0,
            timeouts,
            releases,
            buries,
            kicks,
        };
        assert_eq!(
            history_in_words(0, &c(0, 0, 0, 0), JobState::Scheduled),
            "not handed out yet; now scheduled"
        );
        assert_eq!(
            history_in_words(2, &c(0, 1, 1, 0), JobState::Dead),
            "handed out twice: given back (nacked or released) once, dead once; now dead"
        );
        assert_eq!(
            history_in_words(1, &c(3, 0, 1, 1), JobState::Reserved),
            "handed out once since its last replay: its lease expired 3 times, dead once, replayed once; now reserved"
        );
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
}
