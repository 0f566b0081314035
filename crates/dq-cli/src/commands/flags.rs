//! Flag values the client commands read: durations (`30s`), times
//! (`--at`, RFC 3339), rates (`N/WINDOW`) and retry policies (`--retry`),
//! each refused with the flag's name in the error.

use std::time::UNIX_EPOCH;

use anyhow::{Context, Result, anyhow};
use serde_json::Value;

/// `--rate-limit N/WINDOW` (e.g. 50/1s) and its burst.
pub(super) fn parse_rate(text: &str, burst: Option<u64>, flag: &str) -> Result<dq_core::RateLimit> {
    let (n, window) = text
        .split_once('/')
        .with_context(|| format!("{flag}: {text:?} is not N/WINDOW like 50/1s"))?;
    let limit: u64 = n
        .trim()
        .parse()
        .with_context(|| format!("{flag}: {n:?} is not a number"))?;
    Ok(dq_core::RateLimit {
        limit,
        per_ms: ms(window.trim(), flag)?,
        burst: burst.unwrap_or(limit),
    })
}

pub(super) fn ms(text: &str, what: &str) -> Result<u64> {
    Ok(humantime::parse_duration(text)
        .with_context(|| format!("{what}: {text:?} is not a duration like 30s, 15m, 3d"))?
        .as_millis() as u64)
}

pub(super) fn at_ms(text: &str) -> Result<u64> {
    let t = humantime::parse_rfc3339_weak(text).with_context(|| {
        format!("--at: {text:?} is not an RFC 3339 time like 2026-12-01T09:00:00Z")
    })?;
    Ok(t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0))
}

/// `--retry`: the text form `dq_api::units` reads (the admin page's
/// settings take the same), as the API's JSON.
pub(super) fn parse_retry(text: &str) -> Result<Value> {
    let policy = dq_api::units::parse_retry(text).map_err(|e| anyhow!("--{e}"))?;
    Ok(serde_json::to_value(policy)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::rfc3339;
    use serde_json::json;

    #[test]
    fn retry_flag_forms() {
        assert_eq!(
            parse_retry("1m,3m").unwrap(),
            json!({"delays_ms": [60000, 180000]})
        );
        assert_eq!(
            parse_retry("fixed:30s").unwrap(),
            json!({"fixed_ms": 30000})
        );
        let e = parse_retry("exp:1s,2,1h").unwrap();
        assert_eq!(e["exponential"]["max_ms"], json!(3_600_000));
        assert!(parse_retry("exp:1s").is_err());
        assert!(parse_retry("soon").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(at_ms("1970-01-01T00:00:01Z").unwrap(), 1000);
        assert_eq!(rfc3339(Some(1000)), "1970-01-01T00:00:01.000Z");
        assert_eq!(rfc3339(None), "-");
    }
}
