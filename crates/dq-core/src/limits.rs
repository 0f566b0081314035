//! Bounds on what a client may send, and the error that says which was broken.

use serde::{Deserialize, Serialize};

/// One day in milliseconds.
pub const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// Bounds enforced on every request before a store sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Largest job body, in bytes (after base64 decoding).
    pub max_body_bytes: usize,
    /// Largest delay (or due time minus now), in milliseconds.
    pub max_delay_ms: u64,
    /// Longest wait of a reserve (`wait_ms`), in milliseconds: at most
    /// [`MAX_WAIT_MS`]; lower it when a proxy in front closes a request
    /// that is silent for less.
    #[serde(default = "max_wait_default")]
    pub max_wait_ms: u64,
}

fn max_wait_default() -> u64 {
    MAX_WAIT_MS
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            max_delay_ms: 3650 * DAY_MS,
            max_wait_ms: MAX_WAIT_MS,
        }
    }
}

/// Most jobs in one batch enqueue.
pub const MAX_BATCH: usize = 1000;
/// Most jobs one reserve hands out.
pub const MAX_RESERVE: usize = 1000;
/// Topics in one page of a topic listing when the caller names no limit.
pub const TOPICS_PAGE: usize = 100;
/// Most topics in one page of a topic listing (each page reads the counts
/// of each of its topics).
pub const MAX_TOPICS_PAGE: usize = 1000;
/// Longest time a reserve may be let wait for a job, in milliseconds (the
/// largest `max_wait`, and its default).
pub const MAX_WAIT_MS: u64 = 30_000;
/// Shortest and longest lease, in milliseconds.
pub const LEASE_RANGE_MS: (u64, u64) = (100, 7 * DAY_MS);
/// Most attempts a job may be given.
pub const MAX_ATTEMPTS: u32 = 1000;
/// Deepest nesting of arrays and objects in a JSON body: deeper bodies are
/// refused (many JSON parsers, consumers' included, stop at 128 to 1000).
pub const MAX_JSON_DEPTH: usize = 128;
/// Longest last-error text kept, in bytes; longer ones are cut.
pub const MAX_ERROR_BYTES: usize = 4096;

/// Bad input: a machine-readable code and a message for a person.
///
/// Codes are stable: clients may match on them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidInput {
    /// Machine-readable code, e.g. `invalid_topic`.
    pub code: &'static str,
    /// What was wrong, for a person.
    pub message: String,
    /// Whether the input was too large (HTTP 413) rather than malformed (400).
    pub too_large: bool,
}

impl InvalidInput {
    /// Malformed input (HTTP 400).
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            too_large: false,
        }
    }

    /// Input over a size limit (HTTP 413).
    pub fn too_large(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            too_large: true,
        }
    }
}

impl Limits {
    /// Checks a body's size.
    ///
    /// # Errors
    /// `body_too_large` when over [`Limits::max_body_bytes`].
    pub fn check_body(&self, len: usize) -> Result<(), InvalidInput> {
        if len > self.max_body_bytes {
            return Err(InvalidInput::too_large(
                "body_too_large",
                format!(
                    "body is {len} bytes; the limit is {} bytes",
                    self.max_body_bytes
                ),
            ));
        }
        Ok(())
    }

    /// Checks a delay in milliseconds.
    ///
    /// # Errors
    /// `invalid_delay` when over [`Limits::max_delay_ms`].
    pub fn check_delay(&self, delay_ms: u64) -> Result<(), InvalidInput> {
        if delay_ms > self.max_delay_ms {
            return Err(InvalidInput::new(
                "invalid_delay",
                format!(
                    "a delay of {} is over the limit of {} (max_delay)",
                    human_ms(delay_ms),
                    human_ms(self.max_delay_ms)
                ),
            ));
        }
        Ok(())
    }

    /// The latest due time accepted at `now_ms`: `max_delay` after the end
    /// of the current period, a UTC day (or, when `max_delay` is shorter
    /// than a day, a `max_delay`-long period counted from the Unix epoch).
    ///
    /// So it moves once a period, not with every millisecond: a bound read
    /// now (the served OpenAPI document's `maximum` of `due_at_ms`) is the
    /// server's exact bound until the period ends. A delay of at most
    /// `max_delay` is always within it.
    pub fn latest_due(&self, now_ms: u64) -> u64 {
        if self.max_delay_ms == 0 {
            // No delay at all: nothing later than now.
            return now_ms;
        }
        let period = self.max_delay_ms.min(DAY_MS);
        (now_ms / period + 1)
            .saturating_mul(period)
            .saturating_add(self.max_delay_ms)
    }

    /// Checks an absolute due time against now.
    ///
    /// # Errors
    /// `invalid_due_at` when later than [`Limits::latest_due`].
    pub fn check_due_at(&self, due_at_ms: u64, now_ms: u64) -> Result<(), InvalidInput> {
        let latest = self.latest_due(now_ms);
        if due_at_ms > latest {
            return Err(InvalidInput::new(
                "invalid_due_at",
                format!(
                    "due_at_ms {due_at_ms} is {} from now, later than {latest}, the latest due time taken now (max_delay {} after the end of the current {})",
                    human_ms(due_at_ms.saturating_sub(now_ms)),
                    human_ms(self.max_delay_ms),
                    if self.max_delay_ms >= DAY_MS {
                        "UTC day".to_string()
                    } else {
                        format!("{}-long period", human_ms(self.max_delay_ms))
                    },
                ),
            ));
        }
        Ok(())
    }
}

/// The units durations are written in, largest first, with their length in
/// milliseconds (`m` is shown as `min`).
const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1000),
    ("ms", 1),
];

/// How a unit of [`UNITS`] is written for people.
fn shown_unit(unit: &str) -> &str {
    if unit == "m" { "min" } else { unit }
}

/// The non-zero parts of `ms`, largest first, in days, hours, minutes,
/// seconds and milliseconds (`"d"`, `"h"`, `"m"`, `"s"`, `"ms"`): exact, so
/// they add up to `ms`; none for 0.
pub fn ms_parts(ms: u64) -> Vec<(u64, &'static str)> {
    let mut parts = Vec::new();
    let mut left = ms;
    for (unit, size) in UNITS {
        if left >= size {
            parts.push((left / size, unit));
            left %= size;
        }
    }
    parts
}

/// A duration for people: its non-zero parts, largest first (`20 d`,
/// `1 h 30 min`, `1 s 500 ms`, `0 ms`), exact to the millisecond.
pub fn human_ms(ms: u64) -> String {
    if ms == 0 {
        return "0 ms".into();
    }
    ms_parts(ms)
        .into_iter()
        .map(|(n, unit)| format!("{n} {}", shown_unit(unit)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A measured duration for people, to two units: the largest non-zero
/// one and the next (`2 min 30 s`, not `2 min 30 s 385 ms`; `1 h`, not
/// `1 h 0 min 5 s`; `1 s 500 ms`; `0 ms`), the rest cut off. Settings
/// are shown exactly with [`human_ms`].
pub fn human_ms_rounded(ms: u64) -> String {
    let Some(top) = UNITS.iter().position(|&(_, size)| ms >= size) else {
        return "0 ms".into();
    };
    let (unit, size) = UNITS[top];
    let mut text = format!("{} {}", ms / size, shown_unit(unit));
    if let Some(&(next_unit, next)) = UNITS.get(top + 1) {
        let n = ms % size / next;
        if n > 0 {
            text = format!("{text} {n} {}", shown_unit(next_unit));
        }
    }
    text
}

/// Checks a dedup window.
///
/// # Errors
/// `invalid_dedup` above [`MAX_DEDUP_MS`].
pub fn check_dedup(dedup_ms: u64) -> Result<(), InvalidInput> {
    if dedup_ms > MAX_DEDUP_MS {
        return Err(InvalidInput::new(
            "invalid_dedup",
            format!(
                "a dedup window must be at most {}, got {}",
                human_ms(MAX_DEDUP_MS),
                human_ms(dedup_ms)
            ),
        ));
    }
    Ok(())
}

/// Longest dedup window: 30 days. Each id in a window costs a small
/// record (≈ 60 bytes on Redis), kept until the window ends.
pub const MAX_DEDUP_MS: u64 = 30 * 24 * 3_600_000;

/// Checks a lease length.
///
/// # Errors
/// `invalid_lease` outside [`LEASE_RANGE_MS`].
pub fn check_lease(lease_ms: u64) -> Result<(), InvalidInput> {
    let (lo, hi) = LEASE_RANGE_MS;
    if !(lo..=hi).contains(&lease_ms) {
        return Err(InvalidInput::new(
            "invalid_lease",
            format!(
                "a lease must be between {} and {}, got {}",
                human_ms(lo),
                human_ms(hi),
                human_ms(lease_ms)
            ),
        ));
    }
    Ok(())
}

/// Checks a max-attempts value.
///
/// # Errors
/// `invalid_max_attempts` outside 1..=[`MAX_ATTEMPTS`].
pub fn check_max_attempts(n: u32) -> Result<(), InvalidInput> {
    if !(1..=MAX_ATTEMPTS).contains(&n) {
        return Err(InvalidInput::new(
            "invalid_max_attempts",
            format!("max_attempts must be between 1 and {MAX_ATTEMPTS}, got {n}"),
        ));
    }
    Ok(())
}

/// Cuts an error text to [`MAX_ERROR_BYTES`] on a character boundary.
pub fn clip_error(text: &str) -> &str {
    if text.len() <= MAX_ERROR_BYTES {
        return text;
    }
    let mut end = MAX_ERROR_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Checks that JSON text (already known to be valid JSON) nests arrays and
/// objects at most [`MAX_JSON_DEPTH`] deep.
///
/// # Errors
/// `invalid_body` naming the limit.
pub fn check_json_depth(text: &str) -> Result<(), InvalidInput> {
    // Nesting deeper than the limit takes more opening brackets than it:
    // text with fewer (most bodies) needs no walk through its strings. The
    // count is a plain pass the compiler vectorizes (this check ran at
    // ≈ 11 instructions per byte of every enqueued body).
    let opening = text
        .bytes()
        .map(|b| usize::from(b == b'[' || b == b'{'))
        .sum::<usize>();
    if opening <= MAX_JSON_DEPTH {
        return Ok(());
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(InvalidInput::new(
                        "invalid_body",
                        format!("body nests arrays/objects deeper than {MAX_JSON_DEPTH} levels"),
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_durations_show_two_units() {
        for (ms, text) in [
            (0, "0 ms"),
            (7, "7 ms"),
            (1_500, "1 s 500 ms"),
            (12_034, "12 s 34 ms"),
            (150_385, "2 min 30 s"),
            (3_605_000, "1 h"),
            (3_660_000, "1 h 1 min"),
            (90_061_001, "1 d 1 h"),
            (86_400_000 * 400 + 59_000, "400 d"),
        ] {
            assert_eq!(human_ms_rounded(ms), text, "{ms}");
        }
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human_ms(0), "0 ms");
        assert_eq!(human_ms(250), "250 ms");
        assert_eq!(human_ms(1500), "1 s 500 ms");
        assert_eq!(human_ms(5_400_000), "1 h 30 min");
        assert_eq!(human_ms(1_728_000_000_000), "20000 d");
        assert_eq!(human_ms(315_360_001_000), "3650 d 1 s");
    }

    #[test]
    fn json_depth_counts_brackets_outside_strings_only() {
        let at = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(check_json_depth(&at(MAX_JSON_DEPTH)).is_ok());
        assert_eq!(
            check_json_depth(&at(MAX_JSON_DEPTH + 1)).unwrap_err().code,
            "invalid_body"
        );
        let in_string = format!(r#"["{}\"{}"]"#, "[".repeat(500), "{".repeat(500));
        assert!(check_json_depth(&in_string).is_ok());
        assert!(check_json_depth(r#"{"a": {"b": [1, {"c": "]]]"}]}}"#).is_ok());
        // More brackets than the limit, none deep: walked, and fine.
        let wide = format!("[{}[]]", "[],".repeat(2 * MAX_JSON_DEPTH));
        assert!(check_json_depth(&wide).is_ok());
        // Deep after a wide start: refused.
        let late = format!("[{}{}]", "[],".repeat(MAX_JSON_DEPTH), at(MAX_JSON_DEPTH));
        assert_eq!(check_json_depth(&late).unwrap_err().code, "invalid_body");
    }

    #[test]
    fn body_limit_is_inclusive() {
        let l = Limits::default();
        assert!(l.check_body(1024 * 1024).is_ok());
        let e = l.check_body(1024 * 1024 + 1).unwrap_err();
        assert_eq!(e.code, "body_too_large");
        assert!(e.too_large);
    }

    #[test]
    fn delay_and_due_limits() {
        let l = Limits::default();
        assert!(l.check_delay(3650 * DAY_MS).is_ok());
        assert_eq!(
            l.check_delay(3650 * DAY_MS + 1).unwrap_err().code,
            "invalid_delay"
        );
        assert!(
            l.check_due_at(5, 1000).is_ok(),
            "a past due time is due now"
        );
        // Ten years after the end of the current UTC day, to the millisecond.
        assert!(l.check_due_at(DAY_MS + 3650 * DAY_MS, 1000).is_ok());
        assert!(l.check_due_at(DAY_MS + 3650 * DAY_MS, DAY_MS - 1).is_ok());
        assert_eq!(
            l.check_due_at(DAY_MS + 3650 * DAY_MS + 1, 1000)
                .unwrap_err()
                .code,
            "invalid_due_at"
        );
        // The bound moves at midnight, not before.
        assert_eq!(l.latest_due(DAY_MS - 1), l.latest_due(0));
        assert_eq!(l.latest_due(DAY_MS), l.latest_due(0) + DAY_MS);
        // A max_delay under a day: periods of max_delay.
        let short = Limits {
            max_delay_ms: 60_000,
            ..Limits::default()
        };
        assert_eq!(short.latest_due(59_999), 120_000);
        assert_eq!(short.latest_due(60_000), 180_000);
        assert!(short.check_due_at(120_000, 59_999).is_ok());
        assert!(short.check_due_at(120_001, 59_999).is_err());
        // max_delay 0: due now at the latest.
        let none = Limits {
            max_delay_ms: 0,
            ..Limits::default()
        };
        assert_eq!(none.latest_due(12_345), 12_345);
        assert!(none.check_due_at(12_346, 12_345).is_err());
    }

    #[test]
    fn clip_error_keeps_char_boundaries() {
        let s = "é".repeat(MAX_ERROR_BYTES);
        let c = clip_error(&s);
        assert!(c.len() <= MAX_ERROR_BYTES);
        assert!(c.chars().all(|ch| ch == 'é'));
        assert_eq!(clip_error("short"), "short");
    }

    #[test]
    fn lease_and_attempt_bounds() {
        assert!(check_lease(100).is_ok());
        assert!(check_lease(99).is_err());
        assert!(check_max_attempts(0).is_err());
        assert!(check_max_attempts(1).is_ok());
        assert!(check_max_attempts(MAX_ATTEMPTS + 1).is_err());
    }
}
