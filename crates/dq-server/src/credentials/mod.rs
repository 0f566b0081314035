//! What a process knows to authenticate callers: the admin token and the
//! HMAC key its sessions and CSRF tokens are made with ([`AdminAuth`]), and
//! the failed authentications per address ([`FailureLimit`]). Data only:
//! the checks on each request are [`crate::auth`]'s, and [`crate::AppState`]
//! holds an [`AdminAuth`].

mod limit;

pub use limit::{FAILURE_BURST, FAILURE_REFILL_MS, FailureLimit};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "dq_session";
/// How long a session lasts.
pub const SESSION_MAX_AGE_MS: u64 = 12 * 3_600_000;

/// The admin credentials of a process.
pub struct AdminAuth {
    token: Option<String>,
    key: Vec<u8>,
    /// `auth = "required"`: every `/v1` call needs a key (or the admin
    /// token) even while no key exists.
    pub required: bool,
    /// The bearer token `/metrics` wants (the admin token works too); None:
    /// open.
    pub metrics_token: Option<String>,
    /// Failed authentications per client address.
    pub failures: FailureLimit,
}

impl std::fmt::Debug for AdminAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminAuth")
            .field("token", &self.token.as_ref().map(|_| "…"))
            .finish()
    }
}

impl AdminAuth {
    /// Auth with `token` (None: loopback-only admin page, open API).
    pub fn new(token: Option<String>) -> Self {
        let key = match &token {
            Some(t) => t.as_bytes().to_vec(),
            None => rand::random::<[u8; 32]>().to_vec(),
        };
        Self {
            token,
            key,
            required: false,
            metrics_token: None,
            failures: FailureLimit::default(),
        }
    }

    /// The same with `auth = "required"` (see [`AdminAuth::required`]).
    pub fn requiring_keys(mut self, required: bool) -> Self {
        self.required = required;
        self
    }

    /// The same with a `/metrics` token.
    pub fn with_metrics_token(mut self, token: Option<String>) -> Self {
        self.metrics_token = token;
        self
    }

    /// Whether a token is configured.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    pub(crate) fn mac(&self, what: &str, data: &str) -> Hmac<Sha256> {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        m.update(what.as_bytes());
        m.update(&[0]);
        m.update(data.as_bytes());
        m
    }

    pub(crate) fn hex_mac(&self, what: &str, data: &str) -> String {
        hex(&self.mac(what, data).finalize().into_bytes())
    }

    pub(crate) fn mac_ok(&self, what: &str, data: &str, given_hex: &str) -> bool {
        let Some(given) = unhex(given_hex) else {
            return false;
        };
        self.mac(what, data).verify_slice(&given).is_ok()
    }

    /// Whether `given` is the admin token (constant time).
    pub fn token_ok(&self, given: &str) -> bool {
        let Some(t) = &self.token else {
            return false;
        };
        // Compare MACs of both, so the time taken says nothing about the token.
        let want = self.mac("token", t).finalize().into_bytes();
        self.mac("token", given).verify_slice(&want).is_ok()
    }

    /// A new session cookie value issued at `now_ms`.
    pub fn new_session(&self, now_ms: u64) -> String {
        let issued = now_ms.to_string();
        format!("{issued}.{}", self.hex_mac("session", &issued))
    }

    /// Whether a session cookie value is genuine and not expired.
    pub fn session_ok(&self, value: &str, now_ms: u64) -> bool {
        let Some((issued, sig)) = value.split_once('.') else {
            return false;
        };
        let Ok(at) = issued.parse::<u64>() else {
            return false;
        };
        self.token.is_some()
            && at <= now_ms.saturating_add(60_000)
            && now_ms.saturating_sub(at) < SESSION_MAX_AGE_MS
            && self.mac_ok("session", issued, sig)
    }

    /// The CSRF token of forms shown in `session` ("" without a token).
    pub fn csrf(&self, session: &str) -> String {
        self.hex_mac("csrf", session)
    }

    /// Whether a form's CSRF token belongs to `session`.
    pub fn csrf_ok(&self, session: &str, given: &str) -> bool {
        self.mac_ok("csrf", session, given)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_and_csrf() {
        let a = AdminAuth::new(Some("s3cret".into()));
        let s = a.new_session(1_000_000);
        assert!(a.session_ok(&s, 1_000_000));
        assert!(a.session_ok(&s, 1_000_000 + SESSION_MAX_AGE_MS - 1));
        assert!(!a.session_ok(&s, 1_000_000 + SESSION_MAX_AGE_MS));
        assert!(!a.session_ok(&s.replace("1000000.", "1000001."), 1_000_000));
        assert!(!a.session_ok("1000000.zz", 1_000_000));
        let other = AdminAuth::new(Some("other".into()));
        assert!(
            !other.session_ok(&s, 1_000_000),
            "a new token ends sessions"
        );
        let c = a.csrf(&s);
        assert!(a.csrf_ok(&s, &c));
        assert!(!a.csrf_ok(&a.new_session(1_000_001), &c));
        assert!(!a.csrf_ok(&s, ""));
        assert!(a.token_ok("s3cret"));
        assert!(!a.token_ok("s3cre"));
        assert!(!AdminAuth::new(None).token_ok(""));
        assert!(!AdminAuth::new(None).session_ok(&s, 1_000_000));
    }
}
