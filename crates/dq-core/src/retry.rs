//! The wait between a failed attempt and the next one.

use serde::{Deserialize, Serialize};

use crate::limits::InvalidInput;

/// How long to wait before attempt `n + 1` after attempt `n` failed.
///
/// JSON shapes: `{"exponential": {"initial_ms", "factor", "max_ms", "jitter"}}`,
/// `{"fixed_ms": n}`, `{"delays_ms": [..]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RetryPolicy {
    /// `initial_ms * factor^(n-1)`, capped at `max_ms`, then spread by
    /// ±`jitter` (a fraction, 0 to 1) and capped again.
    Exponential {
        /// Wait after the first failure.
        initial_ms: u64,
        /// Growth per failure (≥ 1).
        factor: f64,
        /// Longest wait.
        max_ms: u64,
        /// Random spread as a fraction of the wait (0 = exact).
        #[serde(default)]
        jitter: f64,
    },
    /// The same wait after every failure.
    FixedMs(u64),
    /// The n-th failure waits the n-th entry; past the end, the last entry.
    DelaysMs(Vec<u64>),
}

impl Default for RetryPolicy {
    /// 1 s, doubling, capped at 1 h, ±10 % jitter.
    fn default() -> Self {
        RetryPolicy::Exponential {
            initial_ms: 1000,
            factor: 2.0,
            max_ms: 3_600_000,
            jitter: 0.1,
        }
    }
}

/// Longest single retry wait: a year.
const MAX_RETRY_MS: u64 = 365 * 24 * 3600 * 1000;

impl RetryPolicy {
    /// Checks the numbers.
    ///
    /// # Errors
    /// `invalid_retry` for a factor below 1 or not finite, jitter outside
    /// 0..=1, an empty or too long list (over 100 entries), or a wait over a year.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        let bad = |m: String| Err(InvalidInput::new("invalid_retry", m));
        match self {
            RetryPolicy::Exponential {
                initial_ms,
                factor,
                max_ms,
                jitter,
            } => {
                if *initial_ms > MAX_RETRY_MS {
                    return bad(format!("initial_ms must be at most {MAX_RETRY_MS}"));
                }
                if !factor.is_finite() || *factor < 1.0 || *factor > 1000.0 {
                    return bad(format!("factor must be between 1 and 1000, got {factor}"));
                }
                if !jitter.is_finite() || !(0.0..=1.0).contains(jitter) {
                    return bad(format!("jitter must be between 0 and 1, got {jitter}"));
                }
                // initial_ms over max_ms is allowed: max_ms caps every
                // wait, the first one included (the waits are max_ms).
                if *max_ms > MAX_RETRY_MS {
                    return bad(format!("max_ms must be at most {MAX_RETRY_MS}"));
                }
            }
            RetryPolicy::FixedMs(ms) => {
                if *ms > MAX_RETRY_MS {
                    return bad(format!("fixed_ms must be at most {MAX_RETRY_MS}"));
                }
            }
            RetryPolicy::DelaysMs(list) => {
                if list.is_empty() || list.len() > 100 {
                    return bad(format!(
                        "delays_ms must hold 1 to 100 entries, got {}",
                        list.len()
                    ));
                }
                if list.iter().any(|d| *d > MAX_RETRY_MS) {
                    return bad(format!("each delay must be at most {MAX_RETRY_MS}"));
                }
            }
        }
        Ok(())
    }

    /// The wait after failed attempt `attempt` (1-based), given a uniform
    /// random number `rand` in [0, 1) for the jitter.
    ///
    /// Stores that compute this elsewhere (Lua) must agree with this function;
    /// the conformance suite checks it.
    pub fn delay_ms(&self, attempt: u32, rand: f64) -> u64 {
        let attempt = attempt.max(1);
        match self {
            RetryPolicy::Exponential {
                initial_ms,
                factor,
                max_ms,
                jitter,
            } => {
                let base = (*initial_ms as f64) * factor.powi((attempt - 1).min(1000) as i32);
                let base = base.min(*max_ms as f64);
                let spread = base * jitter * (2.0 * rand - 1.0);
                (base + spread).clamp(0.0, *max_ms as f64).floor() as u64
            }
            RetryPolicy::FixedMs(ms) => *ms,
            RetryPolicy::DelaysMs(list) => {
                let i = (attempt as usize - 1).min(list.len() - 1);
                list[i]
            }
        }
    }

    /// A compact text form for stores: `e,<initial>,<factor>,<max>,<jitter>`,
    /// `f,<ms>` or `l,<ms>,<ms>,…`. The Redis store's Lua reads this form.
    pub fn encode(&self) -> String {
        match self {
            RetryPolicy::Exponential {
                initial_ms,
                factor,
                max_ms,
                jitter,
            } => format!("e,{initial_ms},{factor},{max_ms},{jitter}"),
            RetryPolicy::FixedMs(ms) => format!("f,{ms}"),
            RetryPolicy::DelaysMs(list) => {
                let mut s = String::from("l");
                for d in list {
                    s.push(',');
                    s.push_str(&d.to_string());
                }
                s
            }
        }
    }

    /// Parses [`RetryPolicy::encode`]'s form; `None` if it is not one.
    pub fn decode(s: &str) -> Option<Self> {
        let mut parts = s.split(',');
        let kind = parts.next()?;
        let rest: Vec<&str> = parts.collect();
        match (kind, rest.as_slice()) {
            ("e", [i, f, m, j]) => Some(RetryPolicy::Exponential {
                initial_ms: i.parse().ok()?,
                factor: f.parse().ok()?,
                max_ms: m.parse().ok()?,
                jitter: j.parse().ok()?,
            }),
            ("f", [ms]) => Some(RetryPolicy::FixedMs(ms.parse().ok()?)),
            ("l", list) if !list.is_empty() => Some(RetryPolicy::DelaysMs(
                list.iter()
                    .map(|d| d.parse().ok())
                    .collect::<Option<Vec<u64>>>()?,
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_without_jitter_doubles_and_caps() {
        let p = RetryPolicy::Exponential {
            initial_ms: 1000,
            factor: 2.0,
            max_ms: 5000,
            jitter: 0.0,
        };
        let got: Vec<u64> = (1..=5).map(|n| p.delay_ms(n, 0.7)).collect();
        assert_eq!(got, vec![1000, 2000, 4000, 5000, 5000]);
    }

    #[test]
    fn jitter_stays_within_spread_and_cap() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay_ms(1, 0.0), 900);
        assert_eq!(p.delay_ms(1, 0.5), 1000);
        assert!(p.delay_ms(1, 0.999_999) <= 1100);
        assert_eq!(p.delay_ms(40, 0.999_999), 3_600_000, "capped after jitter");
    }

    #[test]
    fn list_repeats_last_entry() {
        let p = RetryPolicy::DelaysMs(vec![60_000, 180_000, 300_000, 420_000]);
        let got: Vec<u64> = (1..=6).map(|n| p.delay_ms(n, 0.3)).collect();
        assert_eq!(
            got,
            vec![60_000, 180_000, 300_000, 420_000, 420_000, 420_000]
        );
        assert_eq!(RetryPolicy::FixedMs(7).delay_ms(9, 0.1), 7);
    }

    #[test]
    fn encode_decode_round_trip() {
        for p in [
            RetryPolicy::default(),
            RetryPolicy::FixedMs(5),
            RetryPolicy::DelaysMs(vec![1, 2, 3]),
            RetryPolicy::Exponential {
                initial_ms: 3,
                factor: 1.5,
                max_ms: 100,
                jitter: 0.25,
            },
        ] {
            assert_eq!(RetryPolicy::decode(&p.encode()), Some(p));
        }
        assert_eq!(RetryPolicy::decode("l"), None);
        assert_eq!(RetryPolicy::decode("x,1"), None);
    }

    #[test]
    fn json_shapes() {
        let p: RetryPolicy = serde_json::from_str(r#"{"delays_ms":[60000,180000]}"#).unwrap();
        assert_eq!(p, RetryPolicy::DelaysMs(vec![60000, 180000]));
        let p: RetryPolicy = serde_json::from_str(r#"{"fixed_ms":5}"#).unwrap();
        assert_eq!(p, RetryPolicy::FixedMs(5));
        let p: RetryPolicy =
            serde_json::from_str(r#"{"exponential":{"initial_ms":1,"factor":2,"max_ms":10}}"#)
                .unwrap();
        assert!(matches!(p, RetryPolicy::Exponential { jitter, .. } if jitter == 0.0));
    }

    #[test]
    fn validation() {
        assert!(RetryPolicy::default().validate().is_ok());
        assert!(RetryPolicy::DelaysMs(vec![]).validate().is_err());
        let bad = RetryPolicy::Exponential {
            initial_ms: 1,
            factor: 0.5,
            max_ms: 10,
            jitter: 0.0,
        };
        assert_eq!(bad.validate().unwrap_err().code, "invalid_retry");
        let nan = RetryPolicy::Exponential {
            initial_ms: 1,
            factor: 2.0,
            max_ms: 10,
            jitter: f64::NAN,
        };
        assert!(nan.validate().is_err());
    }

    #[test]
    fn initial_over_max_waits_max() {
        let r: RetryPolicy = serde_json::from_str(
            r#"{"exponential":{"initial_ms":5000,"factor":2,"max_ms":1000,"jitter":0}}"#,
        )
        .unwrap();
        r.validate().unwrap();
        assert_eq!((r.delay_ms(1, 0.5), r.delay_ms(4, 0.5)), (1000, 1000));
    }
}
