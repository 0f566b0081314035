//! The SSRF guard of push delivery: which addresses a callback may reach.
//!
//! Always refused: link-local and cloud-metadata addresses (169.254.0.0/16,
//! fe80::/10, fd00:ec2::254), unspecified, multicast and broadcast. Refused
//! too when `deny_private` is set: loopback, private ranges (10/8,
//! 172.16/12, 192.168/16, 100.64/10, fc00::/7). The check runs when a topic is
//! registered and again at every connection (the HTTP client's DNS resolver
//! drops refused addresses), so a DNS change cannot point a callback inside.
//! A callback's name that does not resolve when the topic is registered is
//! saved, with a warning in the log ([`PushGuard::check_url_setting`]): DNS may
//! not know it yet, and each delivery resolves and checks it again. A
//! forwarding target's name must resolve when it is set
//! ([`PushGuard::check_host`]): the Redis client connects without this
//! guard, so that check is the only one.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Which callback addresses are allowed.
#[derive(Debug, Clone, Copy, Default)]
pub struct PushGuard {
    /// Also refuse loopback and private ranges.
    pub deny_private: bool,
}

impl PushGuard {
    /// Why `ip` is refused, or `None` when allowed.
    pub fn refuse(&self, ip: IpAddr) -> Option<&'static str> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        match ip {
            IpAddr::V4(v4) => {
                if v4.is_link_local() {
                    return Some("link-local or cloud metadata address");
                }
                if v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast() {
                    return Some("unspecified, multicast or broadcast address");
                }
                let o = v4.octets();
                let cgnat = o[0] == 100 && (64..128).contains(&o[1]);
                if self.deny_private && (v4.is_loopback() || v4.is_private() || cgnat) {
                    return Some("loopback or private address (push_deny_private is set)");
                }
            }
            IpAddr::V6(v6) => {
                let s = v6.segments();
                let metadata = std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
                if (s[0] & 0xffc0) == 0xfe80 || v6 == metadata {
                    return Some("link-local or cloud metadata address");
                }
                if v6.is_unspecified() || v6.is_multicast() {
                    return Some("unspecified or multicast address");
                }
                if self.deny_private && (v6.is_loopback() || (s[0] & 0xfe00) == 0xfc00) {
                    return Some("loopback or private address (push_deny_private is set)");
                }
            }
        }
        None
    }

    /// Resolves `host` and checks every address; refuses if any is refused.
    ///
    /// # Errors
    /// A sentence for the client saying which address was refused and why,
    /// or that the host does not resolve.
    pub async fn check_host(&self, host: &str, port: u16) -> Result<(), String> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        self.check_addrs(host, resolve(host, port).await?)
    }

    fn check_addrs(&self, host: &str, addrs: Vec<SocketAddr>) -> Result<(), String> {
        for a in addrs {
            if let Some(why) = self.refuse(a.ip()) {
                return Err(format!("{host} resolves to {}: {why}", a.ip()));
            }
        }
        Ok(())
    }

    /// Checks a callback URL being saved: its host's addresses as
    /// [`PushGuard::check_host`] does, except that a name that does not
    /// resolve now passes, with why (`Ok(Some(..))`, for a warning): every
    /// delivery resolves and checks it again.
    ///
    /// # Errors
    /// An URL that does not parse or has no host; a host that resolves to a
    /// refused address (as [`PushGuard::check_host`]).
    pub async fn check_url_setting(&self, url: &str) -> Result<Option<String>, String> {
        let u = reqwest::Url::parse(url).map_err(|e| format!("invalid url: {e}"))?;
        let host = u.host_str().ok_or("url has no host")?;
        let port = u.port_or_known_default().unwrap_or(80);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match resolve(host, port).await {
            Ok(addrs) => self.check_addrs(host, addrs).map(|()| None),
            Err(why) => Ok(Some(why)),
        }
    }
}

/// The addresses of `host` (an IP literal is its own).
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let lookup = tokio::net::lookup_host((host, port));
    let addrs: Vec<SocketAddr> =
        match tokio::time::timeout(std::time::Duration::from_secs(3), lookup).await {
            Ok(Ok(a)) => a.collect(),
            Ok(Err(e)) => return Err(format!("cannot resolve {host}: {e}")),
            Err(_) => return Err(format!("cannot resolve {host}: timed out")),
        };
    if addrs.is_empty() {
        return Err(format!("{host} resolves to no address"));
    }
    Ok(addrs)
}

/// The HTTP client's DNS resolver: drops refused addresses at connect time.
#[derive(Debug, Clone)]
pub(crate) struct GuardedResolver(pub(crate) PushGuard);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.0;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| guard.refuse(a.ip()).is_none())
                .collect();
            if addrs.is_empty() {
                return Err(format!("{host}: no address allowed for push delivery").into());
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// A resolver for [`reqwest::ClientBuilder::dns_resolver`].
pub(crate) fn resolver(guard: PushGuard) -> Arc<GuardedResolver> {
    Arc::new(GuardedResolver(guard))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals() {
        let open = PushGuard::default();
        let strict = PushGuard { deny_private: true };
        for ip in [
            "169.254.169.254",
            "169.254.1.1",
            "fe80::1",
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "255.255.255.255",
            "::ffff:169.254.169.254",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(open.refuse(ip).is_some(), "{ip}");
        }
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.0.1",
            "100.64.0.1",
            "::1",
            "fd12::1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(open.refuse(ip).is_none(), "{ip} allowed by default");
            assert!(
                strict.refuse(ip).is_some(),
                "{ip} refused with deny_private"
            );
        }
        for ip in ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(strict.refuse(ip).is_none(), "{ip}");
        }
    }

    #[tokio::test]
    async fn urls() {
        let g = PushGuard::default();
        assert_eq!(g.check_url_setting("http://127.0.0.1:9/x").await, Ok(None));
        assert_eq!(g.check_url_setting("http://localhost:9/x").await, Ok(None));
        let e = g
            .check_url_setting("http://169.254.169.254/latest/meta-data")
            .await
            .unwrap_err();
        assert!(e.contains("metadata"), "{e}");
        let e = g.check_url_setting("http://[fe80::1]/").await.unwrap_err();
        assert!(e.contains("link-local"), "{e}");
        let strict = PushGuard { deny_private: true };
        assert!(
            strict
                .check_url_setting("http://localhost:9/")
                .await
                .unwrap_err()
                .contains("loopback")
        );
        // A callback is saved, with why, when its name does not resolve
        // yet; a host checked by check_host (a forwarding target) is not.
        let why = g
            .check_url_setting("http://no-such-host.invalid/")
            .await
            .unwrap()
            .expect("a warning");
        assert!(why.contains("cannot resolve"), "{why}");
        assert!(g.check_host("no-such-host.invalid", 80).await.is_err());
        assert!(g.check_host("[fe80::1]", 6379).await.is_err());
        assert!(strict.check_host("localhost", 9).await.is_err());
        assert_eq!(g.check_host("127.0.0.1", 6379).await, Ok(()));
    }
}
