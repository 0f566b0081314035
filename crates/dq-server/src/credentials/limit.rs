//! [`FailureLimit`]: failed authentications counted per client address.

use std::net::IpAddr;

/// Failed authentications per client address (IPv6: per /64, what one
/// host usually holds): a token bucket each, so a client may get its key
/// wrong a few times ([`FAILURE_BURST`]) and then once per
/// [`FAILURE_REFILL_MS`]; past that, failures from the address are answered
/// 429 with `Retry-After` (a good key still passes).
#[derive(Debug, Default)]
pub struct FailureLimit {
    by_ip: std::sync::Mutex<std::collections::HashMap<IpAddr, (f64, u64)>>,
}

/// Failed authentications an address may make at once.
pub const FAILURE_BURST: f64 = 20.0;
/// One more failed authentication is allowed this often.
pub const FAILURE_REFILL_MS: u64 = 500;
/// Most addresses remembered; beyond it those whose bucket has refilled are
/// forgotten first.
const FAILURE_ADDRS_MAX: usize = 100_000;

/// The address failures are counted by: IPv6 cut to its /64.
fn failure_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

impl FailureLimit {
    fn tokens(entry: (f64, u64), now: u64) -> f64 {
        let (tokens, at) = entry;
        (tokens + now.saturating_sub(at) as f64 / FAILURE_REFILL_MS as f64).min(FAILURE_BURST)
    }

    /// Seconds until `ip` may fail again, if it is throttled now.
    pub fn throttled(&self, ip: Option<IpAddr>, now: u64) -> Option<u64> {
        let ip = failure_key(ip?);
        let map = self
            .by_ip
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tokens = Self::tokens(*map.get(&ip)?, now);
        (tokens < 1.0).then(|| {
            let ms = ((1.0 - tokens) * FAILURE_REFILL_MS as f64).ceil() as u64;
            ms.div_ceil(1000).max(1)
        })
    }

    /// Counts a failed authentication of `ip`.
    pub fn failed(&self, ip: Option<IpAddr>, now: u64) {
        let Some(ip) = ip.map(failure_key) else {
            return;
        };
        let mut map = self
            .by_ip
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= FAILURE_ADDRS_MAX && !map.contains_key(&ip) {
            // Forget the addresses whose bucket is full again; if all are
            // still failing, the least throttled half.
            map.retain(|_, e| Self::tokens(*e, now) < FAILURE_BURST);
            if map.len() >= FAILURE_ADDRS_MAX {
                let mut levels: Vec<f64> = map.values().map(|e| Self::tokens(*e, now)).collect();
                levels.sort_by(f64::total_cmp);
                let cut = levels[levels.len() / 2];
                map.retain(|_, e| Self::tokens(*e, now) < cut);
            }
        }
        let tokens = map
            .get(&ip)
            .map_or(FAILURE_BURST, |e| Self::tokens(*e, now));
        map.insert(ip, ((tokens - 1.0).max(0.0), now));
    }
}
