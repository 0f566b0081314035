//! Flow control of a topic's hand-outs (issue #18): the rate limit's token
//! bucket.
//!
//! The bucket is kept by the store, inside the claim step (`reserve.lua` on
//! Redis, the writer's transaction on the embedded store), so every
//! instance sharing the store and every hand-out (pull reserve, push and
//! forwarding deliveries) draw from the one bucket. Its state is two
//! integers, `credit` and `at`: a hand-out costs `per_ms` credits, every ms
//! adds `limit` credits, and the bucket holds at most `burst * per_ms`. In
//! these units the arithmetic is exact integers (no float rounding decides
//! whether a job may go), and `reserve.lua` does the same sums as
//! [`RateLimit::take`].

use serde::{Deserialize, Serialize};

use crate::limits::InvalidInput;

/// At most `limit` hand-outs per `per_ms` ms, up to `burst` at once (a
/// token bucket that refills continuously).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RateLimitWire")]
pub struct RateLimit {
    /// Hand-outs per window.
    pub limit: u64,
    /// The window, in ms.
    pub per_ms: u64,
    /// Hand-outs at once after a quiet spell (the bucket's size); `limit`
    /// when not given.
    pub burst: u64,
}

/// The wire form: `burst` may be left out.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitWire {
    limit: u64,
    per_ms: u64,
    #[serde(default)]
    burst: Option<u64>,
}

impl From<RateLimitWire> for RateLimit {
    fn from(w: RateLimitWire) -> Self {
        RateLimit {
            limit: w.limit,
            per_ms: w.per_ms,
            burst: w.burst.unwrap_or(w.limit),
        }
    }
}

/// Largest `limit` and `burst`.
pub const MAX_RATE: u64 = 1_000_000;
/// Longest `per_ms`: one day.
pub const MAX_RATE_WINDOW_MS: u64 = 86_400_000;

/// What [`RateLimit::take`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// Hand-outs allowed now (at most the number asked).
    pub granted: u64,
    /// The bucket's credit after those hand-outs, at `now`.
    pub credit: u64,
    /// When the next hand-out is allowed, if the bucket holds less than one.
    pub next_at: Option<u64>,
}

impl RateLimit {
    /// Checks the bounds.
    ///
    /// # Errors
    /// `invalid_rate_limit` naming the field (`what` is the setting's name,
    /// `rate_limit` or `key_rate_limit`).
    pub fn validate(&self, what: &str) -> Result<(), InvalidInput> {
        let bad = |m: String| Err(InvalidInput::new("invalid_rate_limit", m));
        if !(1..=MAX_RATE).contains(&self.limit) {
            return bad(format!(
                "{what}.limit must be 1-{MAX_RATE}, got {}",
                self.limit
            ));
        }
        if !(1..=MAX_RATE_WINDOW_MS).contains(&self.per_ms) {
            return bad(format!(
                "{what}.per_ms must be 1-{MAX_RATE_WINDOW_MS} (one day), got {}",
                self.per_ms
            ));
        }
        if !(1..=MAX_RATE).contains(&self.burst) {
            return bad(format!(
                "{what}.burst must be 1-{MAX_RATE}, got {}",
                self.burst
            ));
        }
        Ok(())
    }

    /// How the store keeps it: `limit,per_ms,burst`.
    pub fn encode(&self) -> String {
        format!("{},{},{}", self.limit, self.per_ms, self.burst)
    }

    /// The inverse of [`RateLimit::encode`].
    pub fn decode(s: &str) -> Option<RateLimit> {
        let mut it = s.split(',').map(|p| p.parse::<u64>().ok());
        let (limit, per_ms, burst) = (it.next()??, it.next()??, it.next()??);
        Some(RateLimit {
            limit,
            per_ms,
            burst,
        })
    }

    /// The share of one of `partitions` parts of a topic, each enforcing
    /// its own bucket: the same `limit` per `partitions` times the window
    /// (so the parts add up to the topic's rate), and `burst / partitions`
    /// (at least 1) at once.
    pub fn for_partition(&self, partitions: u32) -> RateLimit {
        let p = u64::from(partitions.max(1));
        RateLimit {
            limit: self.limit,
            per_ms: self.per_ms * p,
            burst: (self.burst / p).max(1),
        }
    }

    /// The bucket's capacity in credits.
    pub fn capacity(&self) -> u64 {
        self.burst * self.per_ms
    }

    /// The credit at `now` of a bucket that held `credit` at `at` (`None`:
    /// never used, full). A clock that went back refills nothing.
    pub fn refill(&self, credit: Option<u64>, at: u64, now: u64) -> u64 {
        let cap = self.capacity();
        let credit = credit.unwrap_or(cap).min(cap);
        if now <= at {
            return credit;
        }
        credit
            .saturating_add((now - at).saturating_mul(self.limit))
            .min(cap)
    }

    /// Hand-outs a bucket holding `credit` allows now.
    pub fn allowed(&self, credit: u64) -> u64 {
        credit / self.per_ms
    }

    /// When a bucket holding `credit` at `now` next allows a hand-out;
    /// `None` if it does now.
    pub fn next_token_at(&self, credit: u64, now: u64) -> Option<u64> {
        (credit < self.per_ms).then(|| now + (self.per_ms - credit).div_ceil(self.limit))
    }

    /// Takes up to `want` hand-outs from a bucket that held `credit` at
    /// `at` (`None`: never used, full), at `now`.
    pub fn take(&self, credit: Option<u64>, at: u64, now: u64, want: u64) -> Taken {
        let credit = self.refill(credit, at, now);
        let granted = want.min(self.allowed(credit));
        let credit = credit - granted * self.per_ms;
        Taken {
            granted,
            credit,
            next_at: self.next_token_at(credit, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_defaults_to_limit_and_round_trips() {
        let r: RateLimit = serde_json::from_str(r#"{"limit": 50, "per_ms": 1000}"#).unwrap();
        assert_eq!(r.burst, 50);
        assert_eq!(RateLimit::decode(&r.encode()), Some(r));
        assert!(
            serde_json::from_str::<RateLimit>(r#"{"limit": 5, "per_ms": 1, "brst": 1}"#).is_err()
        );
        let e = RateLimit { limit: 0, ..r }
            .validate("rate_limit")
            .unwrap_err();
        assert_eq!(e.code, "invalid_rate_limit");
        assert!(e.message.contains("rate_limit.limit"), "{}", e.message);
    }

    #[test]
    fn bucket_is_exact() {
        let r = RateLimit {
            limit: 10,
            per_ms: 1000,
            burst: 10,
        };
        let t = r.take(None, 0, 5_000, 25);
        assert_eq!((t.granted, t.credit, t.next_at), (10, 0, Some(5_100)));
        // 99 ms later: not yet a whole token.
        let t = r.take(Some(t.credit), 5_000, 5_099, 5);
        assert_eq!((t.granted, t.next_at), (0, Some(5_100)));
        let t = r.take(Some(t.credit), 5_099, 5_100, 5);
        assert_eq!((t.granted, t.next_at), (1, Some(5_200)));
        // A long quiet spell fills only up to the burst.
        let t = r.take(Some(t.credit), 5_100, 1_000_000, 100);
        assert_eq!(t.granted, 10);
        // A clock that goes back refills nothing.
        let t = r.take(Some(1000), 9_000, 8_000, 5);
        assert_eq!(t.granted, 1);
    }

    #[test]
    fn partitions_share_the_rate() {
        let r = RateLimit {
            limit: 50,
            per_ms: 1000,
            burst: 20,
        };
        let p = r.for_partition(4);
        assert_eq!((p.limit, p.per_ms, p.burst), (50, 4000, 5));
        assert_eq!(r.for_partition(1), r);
        assert_eq!(r.for_partition(64).burst, 1);
    }
}
