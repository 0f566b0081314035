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
//!   scope [`crate::routes::ROUTES`] gives the route, on its topic; the
//!   admin page signs in with a key and shows what its scopes allow.
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
//!
//! The modules: this one has [`Access`], [`Need`] and the middleware (the
//! guard); `session` who is signed in to the admin page (cookies, CSRF
//! tokens). The credentials themselves ([`AdminAuth`], [`FailureLimit`])
//! are [`crate::credentials`]'s, data that [`AppState`] holds, re-exported
//! here.

mod session;

pub use crate::credentials::{
    AdminAuth, FAILURE_BURST, FAILURE_REFILL_MS, FailureLimit, SESSION_COOKIE, SESSION_MAX_AGE_MS,
};
use session::page_needs_sign_in;
pub(crate) use session::{csrf_for, csrf_ok_for, key_session, page_needs_sign_in_now, signed_in};

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::error::ApiError;
use crate::keys::{self, Action, ApiKey};

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

/// Who a request acts as, once `guard` let it through: handlers that
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

/// What the guard asks of the route table: the scope a `/v1` route needs
/// (`None`: no such API route by that method) and whether a template is an
/// API route by any method. The crate root gives it the table's answers
/// ([`crate::routes::SCOPES`]), so this module names no route and the
/// table, which names every handler, is not imported back.
#[derive(Clone, Copy)]
pub(crate) struct Scopes {
    pub(crate) need: fn(&Method, &str) -> Option<Need>,
    pub(crate) is_api_route: fn(&str) -> bool,
}

/// The guard's state: the app's, and the route table's [`Scopes`].
#[derive(Clone)]
pub(crate) struct GuardState {
    pub(crate) app: AppState,
    pub(crate) scopes: Scopes,
}

/// The middleware enforcing the rules of this module's doc.
pub(crate) async fn guard(
    State(GuardState { app: st, scopes }): State<GuardState>,
    peer: Result<
        ConnectInfo<SocketAddr>,
        <ConnectInfo<SocketAddr> as FromRequestParts<GuardState>>::Rejection,
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
            scopes,
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
    scopes: Scopes,
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
                let known = (scopes.is_api_route)(template);
                match (scopes.need)(method, template) {
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
}
