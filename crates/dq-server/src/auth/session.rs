//! Who is signed in to the admin page: the admin token's sessions
//! ([`AdminAuth`]'s signed cookies and CSRF tokens) and a key's
//! (`issued.name.mac`), read from the request's cookie.

use axum::http::{HeaderMap, header};

use super::Access;
use crate::AppState;
use crate::credentials::{SESSION_COOKIE, SESSION_MAX_AGE_MS};
use crate::keys::ApiKey;

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
