//! The admin page: server-rendered HTML with plain forms (no JavaScript, no
//! build step). Every value shown is escaped; every form carries a CSRF
//! token; who may see it is decided by [`crate::auth`].
//!
//! - `/` — every topic with counts, enqueue/ack rates, oldest overdue age and
//!   lateness; the store's health; a form registering a topic.
//! - `/admin/topics/{t}` — counts (and which store parts did not answer),
//!   pause for a duration / resume, delete the topic (confirmed), settings (editable, push callback
//!   included; a forwarding target is shown and kept), the next due jobs, job lookup (`?job=ID`) with cancel /
//!   reschedule / run now, and dead letters (newest first, `?died=1h|24h|7d`)
//!   with replay one / selected / all and purge, each confirmed on a second
//!   page before anything changes.
//! - `/admin/login` — the sign-in form, when an admin token is configured.
//!
//! Actions answer with a redirect (303) back to the page and a `done=` code
//! shown as a fixed sentence; refused input shows the API's error message.
//!
//! The HTML lives in askama templates in `crates/dq-server/templates/`
//! (`base.html` is the layout every page extends; askama escapes every value
//! they print). The modules:
//!
//! - `pages` — the pages (`GET`): overview, topic page, login form.
//! - `actions` — what the forms post to; each answers with a redirect, a
//!   confirmation page or an error page.
//! - `forms` — a posted form's fields, its CSRF check, the push settings in it.
//! - `views` — one template struct per page, and the text they show
//!   (durations, relative times, body previews, `done=` sentences).
//! - `rates` — the enqueue/ack rates of the overview.

mod actions;
mod forms;
mod pages;
mod rates;
mod views;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};

use crate::AppState;
use crate::auth::{Access, csrf_for, page_needs_sign_in_now, signed_in};
use crate::error::ApiError;
use crate::keys::Action;

pub(crate) use rates::Rates;

/// The admin routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(pages::overview))
        .route("/admin/login", get(pages::login_page).post(actions::login))
        .route("/admin/logout", post(actions::logout))
        .route("/admin/topics", post(actions::create_topic))
        .route("/admin/schedules", get(pages::schedules_page))
        .route(
            "/admin/schedules/{name}/{action}",
            post(actions::schedule_action),
        )
        .route("/admin/topics/{topic}", get(pages::topic_page))
        .route(
            "/admin/topics/{topic}/settings",
            post(actions::save_settings),
        )
        .route("/admin/topics/{topic}/pause", post(actions::pause))
        .route("/admin/topics/{topic}/delete", post(actions::delete_topic))
        .route(
            "/admin/topics/{topic}/jobs/{id}/{action}",
            post(actions::job_action),
        )
        .route(
            "/admin/topics/{topic}/dead/{action}",
            post(actions::dead_action),
        )
}

/// What every page needs to know about the viewer.
struct Viewer {
    /// The session ("" without a token, or when not signed in).
    session: String,
    /// The CSRF token forms carry.
    csrf: String,
    /// Whether the page needs a sign-in (then the viewer is signed in).
    token: bool,
    /// Who the viewer is: what the page shows and lets them change.
    access: Access,
}

impl Viewer {
    fn of(st: &AppState, headers: &HeaderMap) -> Self {
        let (session, access) = signed_in(st, headers).unwrap_or((String::new(), Access::Open));
        Self {
            csrf: csrf_for(st, &session, &access),
            session,
            token: page_needs_sign_in_now(st),
            access,
        }
    }

    /// Whether the viewer may read `topic`.
    fn reads(&self, topic: &str) -> bool {
        self.access.allows(Action::Read, topic)
    }

    /// Whether the viewer may change `topic` (settings, jobs, dead letters).
    fn manages(&self, topic: &str) -> bool {
        self.access.allows(Action::Manage, topic)
    }
}

/// A rendered page as a response (`text/html; charset=utf-8`). Rendering
/// only fails if writing to a `String` does; that is logged and answered
/// with a bare 500.
fn render(page: &impl askama::Template) -> Response {
    match page.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "admin page failed to render");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// A 303 to `location`.
fn see_other(location: &str) -> Response {
    let mut res = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}

/// A refused action: the API's error, as a page with the error's status.
fn error_page(v: &Viewer, e: &ApiError, back: &str) -> Response {
    let mut res = render(&views::ErrorPage::new(v, e, back));
    if res.status().is_success() {
        *res.status_mut() = e.status;
    }
    res
}
