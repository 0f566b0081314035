//! A job's W3C trace context ([`TraceContext`]): the `traceparent` and
//! `tracestate` of the request that enqueued it, kept with the job and handed
//! back with every hand-out, so the work done at its due time — minutes or
//! days later, in another process — continues the producer's trace.
//!
//! Checked as the W3C Trace Context recommendation (level 1) reads them; a
//! front-end drops a malformed one (with a log line) rather than refuse the
//! job: tracing must never cost a job.

use std::fmt;

/// The most bytes of a `tracestate` kept (the recommendation's limit that
/// every vendor must propagate).
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// The most list members of a `tracestate`.
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// A checked trace context: a `traceparent` and, when one came with it and
/// was well formed, a `tracestate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

/// Why a `traceparent` or `tracestate` was not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTrace(pub &'static str);

impl fmt::Display for BadTrace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl TraceContext {
    /// Checks a `traceparent` and an optional `tracestate`. A malformed
    /// `traceparent` refuses both; a malformed `tracestate` alone is left
    /// out, and said in the second value (the context is still kept).
    ///
    /// # Errors
    /// [`BadTrace`] naming what is wrong with the `traceparent`.
    pub fn parse(
        traceparent: &str,
        tracestate: Option<&str>,
    ) -> Result<(Self, Option<BadTrace>), BadTrace> {
        let traceparent = check_traceparent(traceparent.trim_matches([' ', '\t']))?;
        let (tracestate, bad) = match tracestate.map(|s| s.trim_matches([' ', '\t'])) {
            None | Some("") => (None, None),
            Some(s) => match check_tracestate(s) {
                Ok(()) => (Some(s.to_string()), None),
                Err(e) => (None, Some(e)),
            },
        };
        Ok((
            Self {
                traceparent,
                tracestate,
            },
            bad,
        ))
    }

    /// The `traceparent` (version `00` form: `00-<trace id>-<parent id>-<flags>`).
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate`, if one was kept.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id (32 lower-case hex digits).
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The parent id (16 lower-case hex digits): the span that enqueued.
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// Whether the trace is sampled (flag `01`): its spans are recorded.
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.traceparent[53..55], 16).is_ok_and(|f| f & 1 == 1)
    }

    /// The same trace with span `span_id` (16 lower-case hex digits, not
    /// all zeros) as the parent: the context a span of dq hands on.
    pub fn child(&self, span_id: &str) -> Self {
        debug_assert!(span_id.len() == 16 && is_lower_hex(span_id));
        Self {
            traceparent: format!(
                "00-{}-{span_id}-{}",
                self.trace_id(),
                &self.traceparent[53..55]
            ),
            tracestate: self.tracestate.clone(),
        }
    }

    /// The context as the stores keep it: one text, the `traceparent`, then
    /// a space and the `tracestate` when there is one.
    pub fn to_stored(&self) -> String {
        match &self.tracestate {
            Some(s) => format!("{} {s}", self.traceparent),
            None => self.traceparent.clone(),
        }
    }

    /// Reads what [`TraceContext::to_stored`] wrote; `None` for anything
    /// else (nothing a store kept through dq).
    pub fn from_stored(stored: &str) -> Option<Self> {
        let (parent, state) = match stored.split_once(' ') {
            Some((p, s)) => (p, Some(s)),
            None => (stored, None),
        };
        let (ctx, _) = Self::parse(parent, state).ok()?;
        Some(ctx)
    }
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A `traceparent` as the recommendation reads it: version, trace id,
/// parent id and flags in lower-case hex; ids not all zeros; version `ff`
/// invalid; a later version read by its first four fields (kept as
/// version `00` of them, the one version this dq writes).
fn check_traceparent(s: &str) -> Result<String, BadTrace> {
    if !s.is_ascii() {
        return Err(BadTrace("traceparent is not ASCII"));
    }
    let b = s.as_bytes();
    if b.len() < 55 {
        return Err(BadTrace("traceparent is shorter than 55 characters"));
    }
    let version = &s[..2];
    if !is_lower_hex(version) || version == "ff" {
        return Err(BadTrace("traceparent has an invalid version"));
    }
    if version == "00" && b.len() != 55 {
        return Err(BadTrace("a version 00 traceparent is 55 characters"));
    }
    if version != "00" && b.len() > 55 && b[55] != b'-' {
        return Err(BadTrace("traceparent fields are not separated by '-'"));
    }
    if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return Err(BadTrace("traceparent fields are not separated by '-'"));
    }
    let (trace_id, parent_id, flags) = (&s[3..35], &s[36..52], &s[53..55]);
    if !is_lower_hex(trace_id) || !is_lower_hex(parent_id) || !is_lower_hex(flags) {
        return Err(BadTrace("traceparent is not lower-case hex"));
    }
    if trace_id.bytes().all(|c| c == b'0') {
        return Err(BadTrace("traceparent has an all-zero trace id"));
    }
    if parent_id.bytes().all(|c| c == b'0') {
        return Err(BadTrace("traceparent has an all-zero parent id"));
    }
    Ok(format!("00-{trace_id}-{parent_id}-{flags}"))
}

/// A `tracestate`: at most [`MAX_TRACESTATE_BYTES`] bytes and 32 list
/// members `key=value` separated by commas (empty members allowed), keys of
/// `a-z 0-9 _ - * /` (a `tenant@system` form too), values of printable
/// ASCII but `,` and `=`, not ending in a space.
fn check_tracestate(s: &str) -> Result<(), BadTrace> {
    if s.len() > MAX_TRACESTATE_BYTES {
        return Err(BadTrace("tracestate is longer than 512 bytes"));
    }
    let mut members = 0;
    for m in s.split(',') {
        let m = m.trim_matches([' ', '\t']);
        if m.is_empty() {
            continue;
        }
        members += 1;
        let Some((key, value)) = m.split_once('=') else {
            return Err(BadTrace("tracestate member without '='"));
        };
        let key_ok = !key.is_empty()
            && key.len() <= 256
            && key.as_bytes()[0].is_ascii_alphanumeric()
            && key
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-*/@".contains(&c))
            && key.bytes().filter(|c| *c == b'@').count() <= 1;
        let value_ok = !value.is_empty()
            && value.len() <= 256
            && !value.ends_with(' ')
            && value
                .bytes()
                .all(|c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=');
        if !key_ok || !value_ok {
            return Err(BadTrace("tracestate member is malformed"));
        }
    }
    if members > MAX_TRACESTATE_MEMBERS {
        return Err(BadTrace("tracestate has more than 32 members"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_good_context_is_kept_and_stored_as_one_text() {
        let (c, bad) =
            TraceContext::parse(TP, Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")).unwrap();
        assert_eq!(bad, None);
        assert_eq!(c.traceparent(), TP);
        assert_eq!(c.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(c.parent_id(), "00f067aa0ba902b7");
        assert!(c.sampled());
        let child = c.child("1111111111111111");
        assert_eq!(
            child.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"
        );
        assert_eq!(child.tracestate(), c.tracestate());
        assert_eq!(
            c.tracestate(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        assert_eq!(TraceContext::from_stored(&c.to_stored()), Some(c));
        let (c, _) = TraceContext::parse(TP, None).unwrap();
        assert_eq!(c.to_stored(), TP);
        assert_eq!(TraceContext::from_stored(TP), Some(c));
        assert_eq!(TraceContext::from_stored("nonsense"), None);
    }

    #[test]
    fn malformed_parents_are_refused_and_bad_states_left_out() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e473x-00f067aa0ba902b7-01",
            // Multi-byte characters where fields are cut: refused, no panic.
            &format!("0é{}", "a".repeat(52)),
            &format!("00-{}é", "a".repeat(50)),
        ] {
            assert!(TraceContext::parse(bad, None).is_err(), "{bad:?}");
        }
        // A later version is read by its first four fields.
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds";
        let (c, _) = TraceContext::parse(later, None).unwrap();
        assert_eq!(c.traceparent(), TP);
        for state in [
            "no-equals",
            "Upper=1",
            "k=v,",
            "k=,x=1",
            "k=a=b",
            &"k=v,".repeat(40),
            &format!("k={}", "v".repeat(600)),
        ] {
            let r = TraceContext::parse(TP, Some(state)).unwrap();
            if state == "k=v," {
                assert_eq!(r.1, None, "an empty member is allowed");
                continue;
            }
            assert!(r.1.is_some(), "{state:?}");
            assert_eq!(r.0.tracestate(), None);
            assert_eq!(r.0.traceparent(), TP);
        }
        let (c, bad) = TraceContext::parse(TP, Some("tenant@vendor=x, a*b/c-d_e=1 2")).unwrap();
        assert_eq!((c.tracestate().is_some(), bad), (true, None));
    }
}
