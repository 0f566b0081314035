//! Who may use the admin page and the mutating API.
//!
//! - With `admin_token` set: the admin page needs a session (a signed cookie
//!   got by entering the token at `/admin/login`), and every mutating API
//!   request (`/v1/…` other than GET/HEAD) needs `Authorization: Bearer
//!   <admin_token>`. Reads, `/metrics` and the health checks stay open.
//! - Without it: the admin page answers only to peers on loopback (and says
//!   so); the API is open, as it always was.
//! - Operations on the instance (`/v1/admin/…`: backup, drain) are the
//!   admin's alone: with `admin_token` they need the bearer token like every
//!   change; without one they answer only to peers on loopback (403
//!   `admin_loopback_only`), as the admin page does.
//! - Always: the page's forms carry a CSRF token, and mutating requests a
//!   browser marks as cross-site (`Sec-Fetch-Site: cross-site`, or an
//!   `Origin` that is not this host) are refused, so a web page the operator
//!   visits cannot drive dq through their browser.
//!
//! Session cookies and CSRF tokens are HMAC-SHA256 of the admin token, so
//! every instance sharing the token accepts them and changing the token ends
//! every session. Without a token, CSRF tokens use a key drawn at start.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::AppState;
use crate::error::ApiError;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "dq_session";
/// How long a session lasts.
pub const SESSION_MAX_AGE_MS: u64 = 12 * 3_600_000;

/// The admin credentials of a process.
#[derive(Clone)]
pub struct AdminAuth {
    token: Option<String>,
    key: Vec<u8>,
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
        Self { token, key }
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

/// The session the request carries: its cookie value if genuine; "" when no
/// token is configured (everyone on loopback shares the page).
pub(crate) fn session(st: &AppState, headers: &HeaderMap) -> Option<String> {
    if !st.admin.has_token() {
        return Some(String::new());
    }
    cookie(headers, SESSION_COOKIE)
        .filter(|v| st.admin.session_ok(v, st.service.clock().now_ms()))
        .map(str::to_string)
}

/// Whether a browser marked the request as coming from another site.
fn cross_site(headers: &HeaderMap) -> bool {
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site")
    {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    origin == "null" || origin_host != host
}

fn is_admin_path(path: &str) -> bool {
    path == "/" || path == "/admin" || path.starts_with("/admin/")
}

/// The middleware enforcing the rules of this module's doc.
pub(crate) async fn guard(
    State(st): State<AppState>,
    peer: Result<
        ConnectInfo<SocketAddr>,
        <ConnectInfo<SocketAddr> as FromRequestParts<AppState>>::Rejection,
    >,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    let method = req.method().clone();
    let writes = !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
    let admin = is_admin_path(path);
    let api_write = writes && path.starts_with("/v1/");
    if (admin || api_write) && writes && cross_site(req.headers()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            "a browser sent this request from another site; refused",
        )
        .into_response();
    }
    if admin {
        if !st.admin.has_token() {
            if !peer.is_ok_and(|c| c.0.ip().is_loopback()) {
                return loopback_only();
            }
        } else if path != "/admin/login" && session(&st, req.headers()).is_none() {
            if method == Method::GET || method == Method::HEAD {
                return to_login(req.uri());
            }
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "sign in at /admin/login first",
            )
            .into_response();
        }
    } else if path.starts_with("/v1/admin/")
        && !st.admin.has_token()
        && !peer.is_ok_and(|c| c.0.ip().is_loopback())
    {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "admin_loopback_only",
            "operations on the instance answer only on loopback when no admin_token is configured; set admin_token to use them from another host",
        )
        .into_response();
    } else if (api_write || path.starts_with("/v1/admin/")) && st.admin.has_token() {
        let bearer = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !bearer.is_some_and(|b| st.admin.token_ok(b.trim())) {
            let mut res = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this dq requires Authorization: Bearer <admin_token> for changes",
            )
            .into_response();
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"dq\""),
            );
            return res;
        }
    }
    next.run(req).await
}

/// The page shown to a non-loopback peer when no admin token is set.
fn loopback_only() -> Response {
    (
        StatusCode::FORBIDDEN,
        axum::response::Html(
            "<!doctype html><title>dq</title><p>dq's admin page answers only on loopback because no <code>admin_token</code> is configured. Set <code>admin_token</code> (dq.toml, DQ_ADMIN_TOKEN or --admin-token) to use it from another host.</p>",
        ),
    )
        .into_response()
}

/// A redirect (303) to the login page, back to `uri` afterwards.
fn to_login(uri: &axum::http::Uri) -> Response {
    let next = uri.path_and_query().map_or("/", |p| p.as_str());
    let next: String = form_urlencoded::byte_serialize(next.as_bytes()).collect();
    axum::response::Redirect::to(&format!("/admin/login?next={}", next.replace('+', "%20")))
        .into_response()
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
    fn cross_site_requests() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, v.parse().unwrap());
            }
            m
        };
        assert!(!cross_site(&h(&[("host", "127.0.0.1:7070")])));
        assert!(!cross_site(&h(&[
            ("host", "127.0.0.1:7070"),
            ("origin", "http://127.0.0.1:7070")
        ])));
        assert!(cross_site(&h(&[
            ("host", "127.0.0.1:7070"),
            ("origin", "http://evil.example")
        ])));
        assert!(cross_site(&h(&[("host", "x"), ("origin", "null")])));
        assert!(cross_site(&h(&[("sec-fetch-site", "cross-site")])));
        assert!(!cross_site(&h(&[("sec-fetch-site", "same-origin")])));
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
