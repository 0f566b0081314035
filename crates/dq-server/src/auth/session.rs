//! Who is signed in to the admin page: the admin token's sessions
//! ([`AdminAuth`]: signed cookies, their CSRF tokens, the token check) and a
//! key's (`issued.name.mac`), read from the request's cookie.

use axum::http::{HeaderMap, header};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{Access, FailureLimit};
use crate::AppState;
use crate::keys::ApiKey;

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

    fn mac(&self, what: &str, data: &str) -> Hmac<Sha256> {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        m.update(what.as_bytes());
        m.update(&[0]);
        m.update(data.as_bytes());
        m
    }

    fn hex_mac(&self, what: &str, data: &str) -> String {
        hex(&self.mac(what, data).finalize().into_bytes())
    }

    fn mac_ok(&self, what: &str, data: &str, given_hex: &str) -> bool {
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

/// The value of cookie `name`, if sent.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether the admin page needs a sign-in: with an admin token, with
/// `auth = "required"`, or once any API key exists. Otherwise it answers
/// only on loopback, without one.
pub(crate) async fn page_needs_sign_in(st: &AppState) -> bool {
    st.service.keys_loaded().await;
    page_needs_sign_in_now(st)
}

/// [`page_needs_sign_in`] from what this process knows now (for pages,
/// after the guard read the keys).
pub(crate) fn page_needs_sign_in_now(st: &AppState) -> bool {
    let ring = st.service.key_ring();
    // Keys not read yet (the store does not answer): as if some existed.
    st.admin.has_token() || st.admin.required || !ring.loaded() || ring.any()
}

/// The session the request carries and who it is: its cookie value if
/// genuine (signed in with the admin token, or with a key that still
/// exists); `""` and [`Access::Open`] when the page needs no sign-in
/// (everyone on loopback shares it).
pub(crate) fn signed_in(st: &AppState, headers: &HeaderMap) -> Option<(String, Access)> {
    if !page_needs_sign_in_now(st) {
        return Some((String::new(), Access::Open));
    }
    let value = cookie(headers, SESSION_COOKIE)?;
    let now = st.service.clock().now_ms();
    if st.admin.session_ok(value, now) {
        return Some((value.to_string(), Access::Admin));
    }
    // A key's session: issued.name.mac, the MAC keyed by the admin token
    // (or this process's own key) over the key's hash too, so rotating or
    // revoking the key ends it, and reading the store is not enough to make
    // one.
    let (signed, mac) = value.rsplit_once('.')?;
    let (issued, name) = signed.split_once('.')?;
    let at = issued.parse::<u64>().ok()?;
    let key = st.service.key_ring().named(name)?;
    let fresh = at <= now.saturating_add(60_000) && now.saturating_sub(at) < SESSION_MAX_AGE_MS;
    let ok = fresh && st.admin.mac_ok("key-session", &keyed(&key, signed), mac);
    ok.then(|| (value.to_string(), Access::Key(key)))
}

/// What a key's session and CSRF MACs cover besides `data`: the key's hash.
fn keyed(key: &ApiKey, data: &str) -> String {
    format!("{}\0{data}", key.fingerprint())
}

/// A new admin page session for `key`, issued at `now_ms`.
pub(crate) fn key_session(st: &AppState, key: &ApiKey, now_ms: u64) -> String {
    let signed = format!("{now_ms}.{}", key.name);
    let mac = st.admin.hex_mac("key-session", &keyed(key, &signed));
    format!("{signed}.{mac}")
}

/// The CSRF token of forms shown in `session` to `access`.
pub(crate) fn csrf_for(st: &AppState, session: &str, access: &Access) -> String {
    match access {
        Access::Key(k) => st.admin.hex_mac("key-csrf", &keyed(k, session)),
        _ => st.admin.csrf(session),
    }
}

/// Whether a form's CSRF token belongs to `session` of `access`.
pub(crate) fn csrf_ok_for(st: &AppState, session: &str, access: &Access, given: &str) -> bool {
    match access {
        Access::Key(k) => st.admin.mac_ok("key-csrf", &keyed(k, session), given),
        _ => st.admin.csrf_ok(session, given),
    }
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

    #[test]
    fn cookies() {
        let mut m = HeaderMap::new();
        m.insert(
            header::COOKIE,
            "a=1; dq_session=abc.def; b=2".parse().unwrap(),
        );
        assert_eq!(cookie(&m, "dq_session"), Some("abc.def"));
        assert_eq!(cookie(&m, "c"), None);
    }
}
