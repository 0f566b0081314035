//! Durations and retry policies as people type them: the CLI's flags
//! (`--lease 30s`, `--retry 1m,3m,5m`) and the admin page's settings form
//! read them with these functions and show them back in the same form, so
//! a value shown can be typed in again as it is.
//!
//! - A duration is humantime's text: `500ms`, `30s`, `5m`, `2h`, `3d`, or
//!   several parts such as `1m30s`.
//! - A retry policy is a list of waits `1m,3m,5m` (the n-th failure waits
//!   the n-th, then the last again); `fixed:30s`; or `exp:1s,2,1h`
//!   (initial wait, factor, cap; ±10 % jitter), `exp:1s,2,1h,0.2` naming
//!   the jitter.

use dq_core::RetryPolicy;

/// The jitter of `exp:` when the text names none (a tenth, as the
/// default policy has).
const DEFAULT_JITTER: f64 = 0.1;

/// `text` as a duration in ms; `what` names it in the message.
///
/// # Errors
/// A sentence saying `text` is not a duration like 30s, 15m, 3d.
pub fn parse_ms(text: &str, what: &str) -> Result<u64, String> {
    humantime::parse_duration(text.trim())
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .map_err(|e| format!("{what}: {text:?} is not a duration like 30s, 15m, 3d ({e})"))
}

/// `ms` as [`parse_ms`] reads it back, in its largest exact units:
/// `0s`, `500ms`, `30s`, `1m30s`, `2h`, `3d`.
pub fn format_ms(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (n, unit) in dq_core::limits::ms_parts(ms) {
        out.push_str(&format!("{n}{unit}"));
    }
    out
}

/// A retry policy from its text (see the module docs); its numbers are
/// checked later, by [`RetryPolicy::validate`] where the policy is applied.
///
/// # Errors
/// A sentence naming what is wrong: a wait that is not a duration, an
/// `exp:` without its three or four parts, a factor or jitter that is not
/// a number.
pub fn parse_retry(text: &str) -> Result<RetryPolicy, String> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix("fixed:") {
        return Ok(RetryPolicy::FixedMs(parse_ms(rest, "retry")?));
    }
    if let Some(rest) = text.strip_prefix("exp:") {
        let parts: Vec<&str> = rest.split(',').map(str::trim).collect();
        let (initial, factor, max, jitter) = match parts.as_slice() {
            [i, f, m] => (i, f, m, None),
            [i, f, m, j] => (i, f, m, Some(j)),
            _ => {
                return Err(
                    "retry exp: needs initial,factor,cap (and a jitter) like exp:1s,2,1h".into(),
                );
            }
        };
        let number = |what: &str, t: &str| {
            t.parse::<f64>()
                .map_err(|_| format!("retry exp: {what} {t:?} is not a number"))
        };
        return Ok(RetryPolicy::Exponential {
            initial_ms: parse_ms(initial, "retry")?,
            factor: number("factor", factor)?,
            max_ms: parse_ms(max, "retry")?,
            jitter: jitter.map_or(Ok(DEFAULT_JITTER), |j| number("jitter", j))?,
        });
    }
    let waits = text
        .split(',')
        .map(|d| parse_ms(d, "retry"))
        .collect::<Result<Vec<u64>, String>>()?;
    Ok(RetryPolicy::DelaysMs(waits))
}

/// `policy` as [`parse_retry`] reads it back: `1m,3m,5m`, `fixed:30s`,
/// `exp:1s,2,1h` (the jitter named when it is not a tenth).
pub fn format_retry(policy: &RetryPolicy) -> String {
    match policy {
        RetryPolicy::DelaysMs(waits) => waits
            .iter()
            .map(|w| format_ms(*w))
            .collect::<Vec<_>>()
            .join(","),
        RetryPolicy::FixedMs(ms) => format!("fixed:{}", format_ms(*ms)),
        RetryPolicy::Exponential {
            initial_ms,
            factor,
            max_ms,
            jitter,
        } => {
            let mut out = format!(
                "exp:{},{factor},{}",
                format_ms(*initial_ms),
                format_ms(*max_ms)
            );
            if *jitter != DEFAULT_JITTER {
                out.push_str(&format!(",{jitter}"));
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_back_as_written() {
        for (ms, text) in [
            (0, "0s"),
            (500, "500ms"),
            (30_000, "30s"),
            (90_000, "1m30s"),
            (7_200_000, "2h"),
            (3 * 86_400_000, "3d"),
            (86_400_000 + 1, "1d1ms"),
        ] {
            assert_eq!(format_ms(ms), text);
            assert_eq!(parse_ms(text, "lease"), Ok(ms), "{text}");
        }
        assert!(parse_ms("soon", "lease").unwrap_err().contains("lease"));
    }

    #[test]
    fn retry_policies_read_back_as_written() {
        for (text, policy) in [
            (
                "1m,3m,5m",
                RetryPolicy::DelaysMs(vec![60_000, 180_000, 300_000]),
            ),
            ("fixed:30s", RetryPolicy::FixedMs(30_000)),
            ("exp:1s,2,1h", RetryPolicy::default()),
            (
                "exp:500ms,1.5,10m,0.25",
                RetryPolicy::Exponential {
                    initial_ms: 500,
                    factor: 1.5,
                    max_ms: 600_000,
                    jitter: 0.25,
                },
            ),
        ] {
            assert_eq!(parse_retry(text), Ok(policy.clone()), "{text}");
            assert_eq!(format_retry(&policy), text);
        }
        assert_eq!(
            parse_retry(" 1m, 3m "),
            Ok(RetryPolicy::DelaysMs(vec![60_000, 180_000]))
        );
        assert!(parse_retry("exp:1s").is_err());
        assert!(parse_retry("exp:1s,fast,1h").is_err());
        assert!(parse_retry("soon").is_err());
    }
}
