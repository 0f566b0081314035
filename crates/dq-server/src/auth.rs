//! Who may use the admin page and the API (docs/security.md).
//!
//! - Without keys, with `admin_token` set: the admin page needs a session
//!   (a signed cookie got by entering the token at `/admin/login`), and
//!   every mutating API request (`/v1/…` other than GET/HEAD) needs
//!   `Authorization: Bearer <admin_token>`. Reads, `/metrics` and the
//!   health checks stay open.
//! - Without keys or a token: the admin page answers only to peers on
//!   loopback (and says so); the API is open, as it always was.
//! - Once an API key exists (or with `auth = "required"`): every `/v1` call
//!   needs a key or the admin token ([`Access`]), and the key needs the
//!   scope [`crate::routes::ROUTES`] gives the route, on its topic; the admin page signs
//!   in with a key and shows what its scopes allow.
//! - Operations on the instance (`/v1/admin/…`: backup, drain) and the keys
//!   (`/v1/keys`) are the admin's alone: an admin key or the token; with
//!   neither keys nor a token, peers on loopback only (403
//!   `admin_loopback_only`).
//! - Failed authentications are limited per address ([`FailureLimit`]);
//!   every change made with a key or the token is a `dq::audit` line.
//! - Always: the page's forms carry a CSRF token, and mutating requests a
//!   browser marks as cross-site (`Sec-Fetch-Site: cross-site`, or an
//!   `Origin` that is not this host) are refused, so a web page the operator
//!   visits cannot drive dq through their browser.
//!
//! Admin-token sessions and their CSRF tokens are HMAC-SHA256 of the admin
//! token, so every instance sharing the token accepts them and changing the
//! token ends every session. A key's session (`issued.name.mac`) and CSRF
//! tokens are HMACs with the same key over the key's hash too, so rotating
//! or revoking the key ends them, and someone who reads the store (where
//! the hashes are) still cannot make one. Without a token that HMAC key is
//! drawn at start: sessions then hold on the instance that made them only.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::AppState;
use crate::error::ApiError;
use crate::keys::{self, Action, ApiKey};
use crate::routes;

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

/// What an admin page route needs of a signed-in key, by route template.
fn admin_need(method: &Method, template: &str) -> Option<Need> {
    let writes = *method == Method::POST;
    match template {
        "/" | "/admin/schedules" | "/admin/login" | "/admin/logout" => None,
        "/admin/topics/{topic}" if !writes => Some(Need::Topic(Action::Read)),
        // Create a topic, act on a schedule: the handler checks the topic.
        "/admin/topics" | "/admin/schedules/{name}/{action}" => Some(Need::Handler(Action::Manage)),
        _ if template.starts_with("/admin/topics/{topic}/") => Some(Need::Topic(Action::Manage)),
        _ => Some(Need::Admin),
    }
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

/// Who a request acts as, once [`guard`] let it through: handlers that
/// find the topic in the body (reserve, `ack:batch`, `nack:batch`,
/// `touch:batch`, schedules) check it with [`Access::require`].
#[derive(Clone, Debug)]
pub enum Access {
    /// Auth is not enforced (no key exists, `auth` is not `required`): the
    /// rules of before keys apply, and they let this request through.
    Open,
    /// The admin token, or a peer on loopback while no token and no key
    /// exist (so the first key can be made).
    Admin,
    /// An API key.
    Key(Arc<ApiKey>),
}

impl Access {
    /// Whether this access allows `action` on `topic`.
    pub fn allows(&self, action: Action, topic: &str) -> bool {
        match self {
            Access::Open | Access::Admin => true,
            Access::Key(k) => k.allows(action, topic),
        }
    }

    /// Whether this access allows `action` on some topic.
    pub fn allows_any(&self, action: Action) -> bool {
        match self {
            Access::Open | Access::Admin => true,
            Access::Key(k) => k.allows_any(action),
        }
    }

    /// Whether this access allows `action` on every topic (`*`).
    pub fn allows_all(&self, action: Action) -> bool {
        match self {
            Access::Open | Access::Admin => true,
            Access::Key(k) => k.allows_all(action),
        }
    }

    /// 403 `forbidden` naming the missing scope, unless allowed.
    ///
    /// # Errors
    /// The 403.
    pub fn require(&self, action: Action, topic: &str) -> Result<(), ApiError> {
        if self.allows(action, topic) {
            return Ok(());
        }
        Err(forbidden(self, &format!("{action}:{topic}")))
    }

    /// The key's name for logs (`admin_token` for the token).
    pub fn name(&self) -> Option<&str> {
        match self {
            Access::Open => None,
            Access::Admin => Some("admin_token"),
            Access::Key(k) => Some(&k.name),
        }
    }
}

fn forbidden(access: &Access, scope: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "key {:?} lacks the scope {scope}",
            access.name().unwrap_or("anonymous")
        ),
    )
}

/// Where the topic a route needs a scope for comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The action on the path's `{topic}`.
    Topic(Action),
    /// The action on topics the handler finds in the body or in a stored
    /// schedule; the guard checks the key has the action on some topic,
    /// the handler checks each topic.
    Handler(Action),
    /// The admin scope.
    Admin,
}

/// Routes only the admin may use even when auth is not enforced (then:
/// the admin token, or loopback without one).
fn admin_only(path: &str) -> bool {
    path.starts_with("/v1/admin/") || path == "/v1/keys" || path.starts_with("/v1/keys/")
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

fn unauthorized(message: &str) -> Response {
    let mut res = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    res.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"dq\""),
    );
    res
}

/// The answer to a credential that is neither the admin token nor a key:
/// the same for an unknown, a revoked and a mistyped one.
const BAD_CREDENTIAL: &str =
    "the bearer token is not a valid key of this dq (unknown, revoked or mistyped)";

/// The request id [`crate::observe_http`] gave a request, for the audit log.
#[derive(Clone, Debug)]
pub(crate) struct RequestId(pub(crate) String);

/// Who `secret` is: the admin token, a key, or nobody (counted as a failed
/// authentication of `ip`).
async fn authenticate(
    st: &AppState,
    secret: &str,
    ip: Option<IpAddr>,
) -> Result<Access, Box<Response>> {
    let now = st.service.clock().now_ms();
    // Both checks run every time (the key lookup also for the token), so
    // the time taken does not say which one a secret was closer to.
    let token = st.admin.token_ok(secret);
    let key = if token {
        st.service.key_ring().find(secret)
    } else {
        st.service.find_key(secret).await
    };
    match (token, key) {
        (true, _) => Ok(Access::Admin),
        (false, Some(k)) => {
            st.service.note_key_use(&k);
            if let Err(next_at) = k.admit(now) {
                let wait_s = next_at.saturating_sub(now).div_ceil(1000).max(1);
                return Err(Box::new(too_many(
                    "rate_limited",
                    format!(
                        "key {:?} is over its rate limit; retry in {wait_s} s",
                        k.name
                    ),
                    wait_s,
                )));
            }
            Ok(Access::Key(k))
        }
        (false, None) => {
            // A good key always passes; failures beyond the burst are 429.
            if let Some(wait_s) = st.admin.failures.throttled(ip, now) {
                return Err(Box::new(too_many(
                    "too_many_auth_failures",
                    format!(
                        "too many failed authentications from this address; retry in {wait_s} s"
                    ),
                    wait_s,
                )));
            }
            st.admin.failures.failed(ip, now);
            Err(Box::new(unauthorized(BAD_CREDENTIAL)))
        }
    }
}

/// 429 with `code`, `message` and `Retry-After: wait_s`.
fn too_many(code: &'static str, message: String, wait_s: u64) -> Response {
    let mut res = ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message).into_response();
    res.headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from(wait_s));
    res
}

/// The middleware enforcing the rules of this module's doc.
pub(crate) async fn guard(
    State(st): State<AppState>,
    peer: Result<
        ConnectInfo<SocketAddr>,
        <ConnectInfo<SocketAddr> as FromRequestParts<AppState>>::Rejection,
    >,
    mut req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let writes = !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
    let admin = is_admin_path(&path);
    let api = path.starts_with("/v1/");
    let loopback = peer.as_ref().is_ok_and(|c| c.0.ip().is_loopback());
    let ip = peer.as_ref().ok().map(|c| c.0.ip());
    if (admin || api) && writes && cross_site(req.headers()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            "a browser sent this request from another site; refused",
        )
        .into_response();
    }
    if path == "/metrics" {
        if let Some(want) = &st.admin.metrics_token {
            let ok = bearer(req.headers()).is_some_and(|b| {
                keys::constant_time_eq(&keys::hash(b), &keys::hash(want)) || st.admin.token_ok(b)
            });
            if !ok {
                return unauthorized(
                    "this dq requires Authorization: Bearer <metrics_token> for /metrics",
                );
            }
        }
        return next.run(req).await;
    }
    let template = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_string());
    let access = if admin {
        if !page_needs_sign_in(&st).await {
            if !loopback {
                return loopback_only();
            }
            return next.run(req).await;
        }
        if path == "/admin/login" {
            return next.run(req).await;
        }
        let Some((_, access)) = signed_in(&st, req.headers()) else {
            if method == Method::GET || method == Method::HEAD {
                return to_login(req.uri());
            }
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "sign in at /admin/login first",
            )
            .into_response();
        };
        if let Access::Key(k) = &access {
            st.service.note_key_use(k);
            let need = template.as_deref().and_then(|t| admin_need(&method, t));
            if let Err(res) = check(&mut req, &access, k, need).await {
                return *res;
            }
        }
        access
    } else if api {
        match api_access(
            &st,
            &mut req,
            &path,
            &method,
            writes,
            loopback,
            ip,
            template.as_deref(),
        )
        .await
        {
            Ok(a) => a,
            Err(res) => return *res,
        }
    } else {
        return next.run(req).await;
    };
    let audit = writes && !matches!(access, Access::Open);
    let who = access.name().map(str::to_string);
    let request_id = req.extensions().get::<RequestId>().map(|r| r.0.clone());
    // The job id, or the name of the key or schedule changed.
    let (topic, id) = if audit {
        let id = match path_param(&mut req, "id").await {
            Some(id) => Some(id),
            None => path_param(&mut req, "name").await,
        };
        (path_param(&mut req, "topic").await, id)
    } else {
        (None, None)
    };
    req.extensions_mut().insert(access);
    let res = next.run(req).await;
    if audit {
        tracing::info!(
            target: "dq::audit",
            key = who.as_deref().unwrap_or(""),
            method = %method,
            route = template.as_deref().unwrap_or(&path),
            topic = topic.as_deref().unwrap_or(""),
            id = id.as_deref().unwrap_or(""),
            request_id = request_id.as_deref().unwrap_or(""),
            status = res.status().as_u16(),
            "change"
        );
    }
    res
}

/// Who a `/v1` request acts as, or the refusal.
#[allow(clippy::too_many_arguments)]
async fn api_access(
    st: &AppState,
    req: &mut Request,
    path: &str,
    method: &Method,
    writes: bool,
    loopback: bool,
    ip: Option<IpAddr>,
    template: Option<&str>,
) -> Result<Access, Box<Response>> {
    let ring = st.service.key_ring();
    if !ring.loaded() {
        // Before the keys were read once, nobody knows whether any exist:
        // read them now; a store that does not answer could not serve the
        // request either.
        if let Err(e) = st.service.refresh_keys().await {
            return Err(Box::new(ApiError::from(e).into_response()));
        }
    }
    let enforced = st.admin.required || ring.any();
    let access = match bearer(req.headers()) {
        Some(b) => authenticate(st, b, ip).await?,
        None if !enforced => Access::Open,
        None if !st.admin.has_token() && !ring.any() && loopback => Access::Admin,
        None => {
            return Err(Box::new(unauthorized(
                if st.admin.has_token() || ring.any() {
                    "this dq requires Authorization: Bearer <key> (or the admin_token) on every /v1 call"
                } else {
                    "this dq requires a key on every /v1 call, and has none yet: create the first one from loopback (dq keys create --scope admin …)"
                },
            )));
        }
    };
    match &access {
        Access::Admin => {}
        Access::Open => {
            if admin_only(path) && !st.admin.has_token() && !loopback {
                return Err(Box::new(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "admin_loopback_only",
                    "operations on the instance and API keys answer only on loopback when no admin_token is configured; set admin_token to use them from another host",
                )
                .into_response()));
            }
            if (writes || admin_only(path)) && st.admin.has_token() {
                return Err(Box::new(unauthorized(
                    "this dq requires Authorization: Bearer <admin_token> for changes",
                )));
            }
        }
        Access::Key(k) => {
            // A path that matched no route goes on to its 404.
            if let Some(template) = template {
                let known = routes::is_api_route(template);
                match routes::need(method, template) {
                    Some(n) => check(req, &access, k, Some(n)).await?,
                    None if k.is_admin() => {}
                    None if known => {
                        return Err(Box::new(
                            ApiError::new(
                                StatusCode::METHOD_NOT_ALLOWED,
                                "method_not_allowed",
                                format!("{method} is not a method of {template}"),
                            )
                            .into_response(),
                        ));
                    }
                    None => return Err(Box::new(forbidden(&access, "admin").into_response())),
                }
            }
        }
    }
    Ok(access)
}

/// Checks `key` has what `need` says (None: nothing). A path whose topic
/// does not decode is let through: its handler refuses it (400) before
/// doing anything.
async fn check(
    req: &mut Request,
    access: &Access,
    key: &ApiKey,
    need: Option<Need>,
) -> Result<(), Box<Response>> {
    let refuse = |scope: String| Err(Box::new(forbidden(access, &scope).into_response()));
    match need {
        None => Ok(()),
        Some(Need::Topic(a)) => match path_param(req, "topic").await {
            Some(t) if !key.allows(a, &t) => refuse(format!("{a}:{t}")),
            _ => Ok(()),
        },
        Some(Need::Handler(a)) if !key.allows_any(a) => refuse(format!("{a}:…")),
        Some(Need::Handler(_)) => Ok(()),
        Some(Need::Admin) if !key.is_admin() => refuse("admin".into()),
        Some(Need::Admin) => Ok(()),
    }
}

/// The decoded path parameter `name`, if the route has one.
async fn path_param(req: &mut Request, name: &str) -> Option<String> {
    use axum::RequestExt;
    let axum::extract::Path(map) = req
        .extract_parts::<axum::extract::Path<std::collections::HashMap<String, String>>>()
        .await
        .ok()?;
    map.get(name).cloned()
}

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
